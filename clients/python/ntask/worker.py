"""The fenced worker loop: ``Worker`` and the ``Task`` its handler gets.

One thread claims (one waiting ``ntask_claim`` at a time, for as many tasks
as there are free slots); each claimed task runs its handler in a thread of
its own, with a heartbeat timer thread beside it.  Every call on a task
carries its token, so a worker that lost its task (taken over after its
lease ran out, canceled) can never overwrite what a newer attempt did: the
answers ``stale`` / ``conflict`` are surfaced (log, counter, ``on_lost``)
and never retried as if they were transport errors.

A waiting claim is never canceled from the client: ``stop()`` lets the
current wait run out (``wait`` bounds it) and releases (``ntask_release``)
whatever that claim brings after the stop was requested.
"""

import contextlib
import logging
import os
import random
import secrets
import signal
import socket
import threading
import time
from datetime import timedelta

import psycopg
import psycopg.rows
from psycopg.types.json import Jsonb

from . import _otel
from ._sql import SQL, params
from .outcomes import AWAITING, NOT_DONE, Lost, Success, TaskError, Transient, Unknown

COUNTERS = ("claimed", "succeeded", "failed_transient", "failed_permanent",
            "failed_unknown", "stale", "conflict", "released", "heartbeats_lost")

#: the server's ntask.max_wait (a longer wait is refused with 22023)
MAX_WAIT = 30.0


def _interval(x, what):
    if x is None or isinstance(x, timedelta):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return timedelta(seconds=x)
    raise TypeError("%s must be seconds or a timedelta, not %r" % (what, type(x).__name__))


def _seconds(x):
    return None if x is None else x.total_seconds()


def default_name():
    """host-pid-random, as in the Go and TypeScript libraries."""
    return "%s-%d-%s" % (socket.gethostname(), os.getpid(), secrets.token_hex(3))


class Counters:
    """Thread-safe counters; ``snapshot()`` is a plain dict of all of them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._c = dict.fromkeys(COUNTERS, 0)

    def inc(self, name, n=1):
        with self._lock:
            self._c[name] += n

    def __getitem__(self, name):
        with self._lock:
            return self._c[name]

    def snapshot(self):
        with self._lock:
            return dict(self._c)


class _Pool:
    """The worker's own connections when it is given a DSN: autocommit,
    ``prepare_threshold=None`` (no named prepared statements, so it works
    behind pgbouncer in transaction mode), a connection that broke is
    dropped and the next use connects anew."""

    def __init__(self, dsn, connect_kwargs):
        self.dsn = dsn
        self.kwargs = {"autocommit": True, "prepare_threshold": None}
        self.kwargs.update(connect_kwargs or {})
        self._idle = []
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def connection(self):
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = psycopg.connect(self.dsn, **self.kwargs)
        ok = False
        try:
            yield conn
            ok = True
        finally:
            if conn.closed or conn.broken or self._closed:
                conn.close()
            else:
                if not ok and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    try:
                        conn.rollback()
                    except psycopg.Error:
                        conn.close()
                if not conn.closed:
                    with self._lock:
                        self._idle.append(conn)

    def close(self):
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()


class _ExternalPool:
    """A caller's pool: anything with a ``connection()`` context manager
    (``psycopg_pool.ConnectionPool``).  Its connections are switched to
    autocommit when they are not."""

    def __init__(self, pool):
        self.pool = pool

    @contextlib.contextmanager
    def connection(self):
        with self.pool.connection() as conn:
            if not conn.autocommit:
                conn.autocommit = True
            yield conn

    def close(self):
        pass


class Task:
    """A claimed task, as the handler gets it.

    Fields: ``id``, ``queue``, ``key``, ``payload`` (decoded JSON),
    ``attempt``, ``token``, ``prior_outcome`` (``None``, ``'unknown'``: an
    earlier attempt may have taken effect, reconcile first; ``'committed'``:
    an earlier attempt committed its receipt), ``context`` (a dict:
    ``parents``, ``checkpoints``, ``signal``, ``traceparent``; ``{}`` when
    the claim had none), ``traceparent``, ``lease_until``.

    ``lost`` is a ``threading.Event`` set when the task's token no longer
    holds it (a heartbeat answered NULL, a call answered ``stale``, the
    shutdown released it): a long handler should check it and stop; the
    worker reports nothing for a lost task.
    """

    def __init__(self, worker, row):
        self._worker = worker
        self.id = row["task_id"]
        self.queue = worker.queue
        self.key = row["task_key"]
        self.payload = row["payload"]
        self.attempt = row["attempt"]
        self.token = row["token"]
        self.lease_until = row["lease_until"]
        self.prior_outcome = row["prior_outcome"]
        self.context = row["context"] or {}
        self.traceparent = self.context.get("traceparent")
        self.lost = threading.Event()
        self._lease_left = row.get("lease_left")
        self._invoked = False
        self._ended = None          # 'released' | 'awaiting' | 'reported'
        self._mark = threading.Lock()  # invoked() vs the shutdown's release
        self._hb_stop = threading.Event()
        # the worker is ending the attempt itself (its report, a release): a
        # heartbeat that then answers NULL was overtaken by it, not lost
        self._ending = False

    def __repr__(self):
        return "Task(id=%r, key=%r, attempt=%r, token=%r)" % (self.id, self.key, self.attempt, self.token)

    @property
    def is_invoked(self):
        """True once this attempt was marked invoked."""
        return self._invoked

    def _call(self, fn, retry=True, **kw):
        return self._worker._call(fn, retry=retry, task_id=self.id, token=self.token, **kw)

    def invoked(self):
        """``ntask_invoked``: mark the attempt as about to call out (with
        ``invoked="auto"`` the worker does it before the handler).  Returns
        ``'applied'`` or ``'duplicate'``; raises :class:`Lost` on ``stale``
        (the attempt was closed: do not call out)."""
        with self._mark:
            if self.lost.is_set():
                raise Lost(self.id, "invoked", "lost")
            answer = self._call("ntask_invoked")[0]
            if answer == "stale":
                self._worker._surface(self, "invoked", answer, lost=True)
                raise Lost(self.id, "invoked", answer)
            self._invoked = True
            return answer

    def heartbeat(self, progress=None):
        """``ntask_heartbeat`` with the worker's lease (the timer does this
        every ``heartbeat_every``).  Returns the new ``lease_until``; raises
        :class:`Lost` when the answer is NULL (the token no longer holds the
        task: nothing was written)."""
        until = self._call("ntask_heartbeat", retry=False, lease=self._worker.lease,
                           progress=None if progress is None else Jsonb(progress))[0]
        if until is None:
            if not self._ending:
                self._worker._surface(self, "heartbeat", None, lost=True)
            raise Lost(self.id, "heartbeat", None)
        self.lease_until = until
        return until

    def progress(self, value):
        """Report progress (any JSON value) with a heartbeat."""
        return self.heartbeat(progress=value)

    def checkpoint(self, step, value, tx=None):
        """``ntask_checkpoint``: record that ``step`` is done, with ``value``.
        Pass the business transaction's connection or cursor as ``tx`` to
        write it with the step's rows (else it runs on its own).  Returns
        ``'applied'``, ``'duplicate'``, ``'conflict'`` or ``'stale'`` (then
        ``lost`` is set)."""
        p = dict(step=step, value=Jsonb(value))
        if tx is None:
            answer = self._call("ntask_checkpoint", **p)[0]
        else:
            answer = tx.execute(SQL["ntask_checkpoint"], params(
                "ntask_checkpoint", task_id=self.id, token=self.token, **p)).fetchone()[0]
        if answer in ("stale", "conflict"):
            self._worker._surface(self, "checkpoint", answer, lost=answer == "stale")
        return answer

    def receipt(self, tx, payload):
        """``ntask_receipt`` in the caller's business transaction ``tx`` (a
        psycopg connection or cursor, in a transaction): ``'applied'``,
        ``'duplicate'``, ``'conflict'`` or ``'stale'``.  On ``stale`` (then
        ``lost`` is set) or ``conflict``, roll the business write back."""
        answer = tx.execute(SQL["ntask_receipt"], params(
            "ntask_receipt", task_id=self.id, token=self.token,
            payload=Jsonb(payload))).fetchone()[0]
        if answer in ("stale", "conflict"):
            self._worker._surface(self, "receipt", answer, lost=answer == "stale")
        return answer

    def await_signal(self, signal_key, timeout=None, on_timeout="ready"):
        """``ntask_await``: park the task until the queue's signal
        ``signal_key`` is sent (or ``timeout``, seconds or a timedelta, runs
        out).  The handler then returns :data:`AWAITING`; the next claim
        carries ``context["signal"]``.  Returns the answer."""
        answer = self._call("ntask_await", signal_key=signal_key,
                            timeout=_interval(timeout, "timeout"), on_timeout=on_timeout)[0]
        if answer in ("applied", "duplicate"):
            self._ended = "awaiting"
        else:
            self._worker._surface(self, "await", answer, lost=answer == "stale")
        return answer

    def release(self, delay=None):
        """``ntask_release``: hand the task back (due again now, or after
        ``delay``); the worker then reports nothing.  Returns the answer."""
        answer = self._worker._release(self, delay)
        return answer


class Worker:
    """A pool of handler threads fed by waiting claims on one queue.

    ``Worker(dsn_or_pool, queue, handler, **options)``; ``run()`` blocks
    until stopped; ``stop()`` begins the graceful shutdown, a second
    ``stop()`` stops at once.  ``run_until_signal(worker)`` wires SIGTERM
    and SIGINT to ``stop()``.

    ``dsn_or_pool``: a libpq connection string (the worker then keeps its
    own autocommit connections with ``prepare_threshold=None``; extra
    ``psycopg.connect`` arguments in ``connect_kwargs``) or a pool with a
    ``connection()`` context manager (``psycopg_pool.ConnectionPool``; give
    it ``max_size >= concurrency + 1`` and, behind pgbouncer in transaction
    mode, ``kwargs={"prepare_threshold": None}``).

    ``handler(task)`` returns ``None`` or :class:`Success` (succeeded),
    raises or returns :class:`Transient` / :class:`Permanent` /
    :class:`Unknown`, returns :data:`AWAITING` after ``task.await_signal``;
    any other exception is ``unknown`` if the attempt was marked invoked,
    else ``transient``.

    Options (the same names and defaults in the Go and TypeScript
    libraries; durations in seconds or as ``timedelta``):

    - ``name``: the worker's name in the ledger (default host-pid-random)
    - ``concurrency`` 4: handlers at once (the claim asks for the free slots)
    - ``lease`` None: the queue's lease; else the lease of every claim and
      heartbeat
    - ``wait`` 10: the waiting claim's timeout (at most the server's
      ``ntask.max_wait``, 30 s); it also bounds how long ``stop()`` waits
      for the claim in flight
    - ``heartbeat_every`` None: a third of the lease
    - ``shutdown_grace`` 30: how long running handlers get after ``stop()``
    - ``invoked`` ``"auto"`` (mark ``ntask_invoked`` before the handler) or
      ``"manual"`` (the handler calls ``task.invoked()`` right before its
      external call)
    - ``reconcile(task)``: called when ``prior_outcome == 'unknown'``
      before the handler; returns a :class:`Success` (the earlier attempt
      took effect: reported without running the handler), ``None`` /
      :data:`NOT_DONE` (run the handler), or raises (a typed failure as
      from the handler; any other exception is ``unknown``: the effect is
      still not known)
    - ``on_lost(task, call, answer)``: called for every ``stale`` /
      ``conflict`` answer and NULL heartbeat (``call`` names the function:
      ``'transition'``, ``'heartbeat'``, ...)
    - ``logger``: a ``logging.Logger`` (default ``logging.getLogger("ntask")``)
    """

    def __init__(self, dsn_or_pool, queue, handler, *, name=None, concurrency=4,
                 lease=None, wait=10.0, heartbeat_every=None, shutdown_grace=30.0,
                 invoked="auto", reconcile=None, on_lost=None, logger=None,
                 connect_kwargs=None):
        if not callable(handler):
            raise TypeError("handler must be callable")
        if not isinstance(concurrency, int) or concurrency < 1 or concurrency > 1000:
            raise ValueError("concurrency must be an int in 1..1000")
        if invoked not in ("auto", "manual"):
            raise ValueError("invoked must be 'auto' or 'manual'")
        self.wait = _interval(wait, "wait")
        if self.wait is None or not 0 < self.wait.total_seconds() <= MAX_WAIT:
            raise ValueError("wait must be more than 0 and at most %g s (ntask.max_wait)" % MAX_WAIT)
        self.lease = _interval(lease, "lease")
        if self.lease is not None and self.lease.total_seconds() <= 0:
            raise ValueError("lease must be positive")
        hb = _interval(heartbeat_every, "heartbeat_every")
        if hb is not None and hb.total_seconds() <= 0:
            raise ValueError("heartbeat_every must be positive")
        self.heartbeat_every = hb
        grace = _interval(shutdown_grace, "shutdown_grace")
        if grace is None or grace.total_seconds() < 0:
            raise ValueError("shutdown_grace must be >= 0")
        self.shutdown_grace = grace
        if isinstance(dsn_or_pool, str):
            self._pool = _Pool(dsn_or_pool, connect_kwargs)
        elif hasattr(dsn_or_pool, "connection"):
            self._pool = _ExternalPool(dsn_or_pool)
        else:
            raise TypeError("dsn_or_pool must be a connection string or a pool with connection()")
        self.queue = queue
        self.handler = handler
        self.name = name or default_name()
        self.concurrency = concurrency
        self.invoked_mode = invoked
        self.reconcile = reconcile
        self.on_lost = on_lost
        self.log = logger or logging.getLogger("ntask")
        self.counters = Counters()
        self._stopping = threading.Event()
        self._hard = threading.Event()
        self._done = threading.Event()
        self._cond = threading.Condition()
        self._held = {}
        self._fatal = None
        self._started = False

    # -- control -------------------------------------------------------

    @property
    def stopping(self):
        """True once ``stop()`` was called."""
        return self._stopping.is_set()

    def stop(self):
        """Begin the graceful shutdown: stop claiming (after the current
        wait returns), give running handlers ``shutdown_grace``, release
        what was claimed and never invoked, then ``run()`` returns.  A
        second call stops at once: ``run()`` returns without waiting (the
        tasks still held keep their leases until they run out and are taken
        over)."""
        if self._stopping.is_set():
            self._hard.set()
            self._done.set()
            with self._cond:
                self._cond.notify_all()
            return
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def run(self):
        """Claim and work until stopped.  Raises what the loop could not
        handle (an error other than a lost connection, e.g. an unknown
        queue); returns after the shutdown."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        t = threading.Thread(target=self._loop, name="ntask-claim-%s" % self.queue, daemon=True)
        t.start()
        while not self._done.wait(0.2):
            pass
        if not self._hard.is_set():
            t.join()
            self._pool.close()
        if self._fatal is not None:
            raise self._fatal

    # -- the loop ------------------------------------------------------

    def _loop(self):
        try:
            while not self._stopping.is_set():
                with self._cond:
                    while len(self._held) >= self.concurrency and not self._stopping.is_set():
                        self._cond.wait(0.5)
                    free = self.concurrency - len(self._held)
                if self._stopping.is_set():
                    break
                for row in self._claim(free):
                    task = Task(self, row)
                    self.counters.inc("claimed")
                    if self._stopping.is_set():
                        # arrived after the stop was requested: never started
                        if not self._hard.is_set():
                            self._release(task, None)
                        continue
                    self._start(task)
            self._shutdown()
        except BaseException as e:  # noqa: B902 - handed to run()
            self._fatal = e
            self._stopping.set()
            self._shutdown()
        finally:
            self._done.set()

    def _claim(self, n):
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                with self._pool.connection() as conn:
                    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
                    return cur.execute(SQL["ntask_claim"], params(
                        "ntask_claim", queue=self.queue, worker=self.name,
                        max_tasks=n, lease=self.lease, wait=self.wait)).fetchall()
            except psycopg.OperationalError as e:
                self.log.warning("ntask %s: claim failed (%s); retrying in %.1f s",
                                 self.name, str(e).strip(), backoff)
                if self._stopping.wait(backoff * (0.5 + random.random())):
                    break
                backoff = min(backoff * 2, 5.0)
        return []

    def _call(self, fn, retry=True, **kw):
        """One statement on a pooled connection; on a lost connection it is
        sent again (with the same token: every worker call is idempotent
        per token) with backoff, until it answers or a hard stop."""
        backoff = 0.1
        while True:
            try:
                with self._pool.connection() as conn:
                    return conn.execute(SQL[fn], params(fn, **kw)).fetchone()
            except psycopg.OperationalError as e:
                if not retry or self._hard.is_set():
                    raise
                self.log.warning("ntask %s: %s failed (%s); retrying in %.1f s",
                                 self.name, fn, str(e).strip(), backoff)
                time.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 5.0)

    def _surface(self, task, call, answer, lost):
        """A stale / conflict answer or a NULL heartbeat: log, count, hook."""
        if answer is None:
            self.counters.inc("heartbeats_lost")
        else:
            self.counters.inc(answer)
        if lost:
            task.lost.set()
            task._hb_stop.set()
        self.log.warning("ntask %s: task %s (%s) token %s: %s answered %s",
                         self.name, task.id, task.key, task.token, call,
                         "NULL" if answer is None else answer)
        if self.on_lost is not None:
            try:
                self.on_lost(task, call, answer)
            except Exception:
                self.log.exception("ntask %s: on_lost raised", self.name)

    def _release(self, task, delay):
        task._ending = True
        task._hb_stop.set()
        answer = task._call("ntask_release", delay=_interval(delay, "delay"))[0]
        if answer in ("applied", "duplicate"):
            task._ended = "released"
            self.counters.inc("released")
            task.lost.set()
            task._hb_stop.set()
        else:
            self._surface(task, "release", answer, lost=answer == "stale")
        return answer

    def _start(self, task):
        with self._cond:
            self._held[task.id] = task
        every = self.heartbeat_every
        if every is None:
            every = self.lease if self.lease is not None else timedelta(seconds=task._lease_left or 30)
            every = every / 3
        every = max(every.total_seconds(), 0.05)
        threading.Thread(target=self._beat, args=(task, every), daemon=True,
                         name="ntask-heartbeat-%s" % task.id).start()
        threading.Thread(target=self._work, args=(task,), daemon=True,
                         name="ntask-task-%s" % task.id).start()

    def _beat(self, task, every):
        while not task._hb_stop.wait(every):
            try:
                task.heartbeat()
            except Lost:
                return
            except psycopg.Error as e:
                self.log.warning("ntask %s: heartbeat of task %s failed (%s)",
                                 self.name, task.id, str(e).strip())

    def _work(self, task):
        try:
            with _otel.handler_span(task):
                outcome = self._execute(task)
            if outcome is not Lost and task._ended is None and not task.lost.is_set() \
                    and not self._hard.is_set():
                self._report(task, outcome)
        except Exception:
            self.log.exception("ntask %s: task %s: the report failed", self.name, task.id)
        finally:
            task._hb_stop.set()
            with self._cond:
                self._held.pop(task.id, None)
                self._cond.notify_all()

    def _classify(self, e, task, where):
        if isinstance(e, Lost):
            return Lost
        if isinstance(e, TaskError):
            return e
        self.log.error("ntask %s: task %s: %s raised %s: %s", self.name, task.id, where,
                       type(e).__name__, e)
        detail = {"exception": type(e).__name__, "where": where}
        msg = str(e) or type(e).__name__
        # the reconcile could not say: the earlier effect is still unknown
        if task._invoked or where == "reconcile":
            return Unknown(msg, detail=detail)
        return Transient(msg, detail=detail)

    def _execute(self, task):
        # a claim hands out a bounded amount of context (ntask 1.1,
        # ntask.max_claim_context_bytes): past it a task's context says
        # only {"deferred": true}, and ntask_context reads it whole
        if task.context.get("deferred"):
            try:
                ctx = task._call("ntask_context")[0]
            except Exception as e:
                return self._classify(e, task, "context")
            if ctx is None:
                task.lost.set()
                self._surface(task, "ntask_context", None, True)
                return Lost
            task.context = ctx
            task.traceparent = ctx.get("traceparent")
        if task.prior_outcome == "unknown" and self.reconcile is not None:
            try:
                r = self.reconcile(task)
            except Exception as e:
                return self._classify(e, task, "reconcile")
            if isinstance(r, (Success, TaskError)):
                return r
            if r is not None and r is not NOT_DONE:
                return self._classify(TypeError("reconcile returned %r" % (r,)), task, "reconcile")
        if self.invoked_mode == "auto":
            try:
                task.invoked()
            except Exception as e:
                return self._classify(e, task, "invoked")
        try:
            r = self.handler(task)
        except Exception as e:
            return self._classify(e, task, "handler")
        if r is None or isinstance(r, (Success, TaskError)):
            return r
        if r is AWAITING:
            if task._ended == "awaiting":
                return r
            return self._classify(ValueError("handler returned AWAITING without await_signal"),
                                  task, "handler")
        return self._classify(TypeError("handler returned %r" % (r,)), task, "handler")

    def _report(self, task, outcome):
        if outcome is None or isinstance(outcome, Success):
            outcome = outcome or Success()
            kw = dict(to_state="succeeded", outcome=outcome.outcome,
                      result=None if outcome.result is None else Jsonb(outcome.result))
            counter = "succeeded"
        else:
            detail = {"message": outcome.message}
            if outcome.detail:
                detail.update(outcome.detail)
            kw = dict(to_state=outcome.to_state, error_class=outcome.error_class,
                      detail=Jsonb(detail), retry_at=getattr(outcome, "retry_at", None))
            counter = "failed_" + outcome.error_class
        task._ending = True         # a heartbeat answered after this is not a loss
        task._hb_stop.set()
        answer = task._call("ntask_transition", **kw)[0]
        task._ended = "reported"
        if answer in ("applied", "duplicate"):
            self.counters.inc(counter)
        else:
            self._surface(task, "transition", answer, lost=True)
        return answer

    def _shutdown(self):
        deadline = time.monotonic() + self.shutdown_grace.total_seconds()
        with self._cond:
            while self._held and not self._hard.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.2))
            held = list(self._held.values())
        for task in held:
            if self._hard.is_set():
                return
            task._hb_stop.set()
            with task._mark:
                if task._invoked or task._ended or task.lost.is_set():
                    self.log.warning("ntask %s: task %s still running after the grace; "
                                     "its lease runs out and it is taken over", self.name, task.id)
                    task.lost.set()
                    continue
                try:
                    self._release(task, None)
                except psycopg.Error as e:
                    self.log.warning("ntask %s: release of task %s failed (%s)",
                                     self.name, task.id, e)


def run_until_signal(worker, signals=(signal.SIGTERM, signal.SIGINT)):
    """Run ``worker`` in the main thread until SIGTERM / SIGINT: the first
    signal begins the graceful shutdown, a second stops at once.  The
    previous handlers are restored afterwards."""
    old = {s: signal.signal(s, lambda signum, frame: worker.stop()) for s in signals}
    try:
        worker.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)

