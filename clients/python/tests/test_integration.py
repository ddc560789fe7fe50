"""Integration tests against a real server with ntask (t/041_client_python.pl
starts one, and pgbouncer in transaction mode, and sets):

  NTASK_TEST_DSN           a superuser connection to a database with ntask
  NTASK_TEST_BOUNCER_DSN   the same database through pgbouncer (pool_mode
                           transaction, 2 server connections)
  NTASK_TEST_BOUNCER1_DSN  the same through a pgbouncer pool of ONE server
                           connection (the prepared-statement control)
  NTASK_TEST_PGCTL, NTASK_TEST_PGDATA, NTASK_TEST_PGLOG
                           pg_ctl, data directory and log of the server (the
                           restart scenario)

Without NTASK_TEST_DSN every test here is skipped.  Each test uses queues of
its own, so the file can run twice on one cluster.
"""

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

import ntask  # noqa: E402
from ntask import _sql  # noqa: E402

DSN = os.environ.get("NTASK_TEST_DSN")
BOUNCER = os.environ.get("NTASK_TEST_BOUNCER_DSN")
BOUNCER1 = os.environ.get("NTASK_TEST_BOUNCER1_DSN")
HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 60  # generous: a loaded 2-core machine


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


LOG = Collect()
logging.getLogger("ntask").addHandler(LOG)
logging.getLogger("ntask").propagate = False


def sql(q, args=None, dsn=None):
    with psycopg.connect(dsn or DSN, autocommit=True) as c:
        cur = c.execute(q, args)
        return cur.fetchall() if cur.description else None


def one(q, args=None):
    rows = sql(q, args)
    return rows[0][0] if rows else None


def poll(what, cond, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))


def queue_attempts(q, *cols):
    """The ledger of queue q's tasks, one tuple per attempt in attempt
    order: (attempt, token, *cols).  Tokens come from one sequence per node
    (a task's first token is not 1): tests name them by place."""
    return sql("""SELECT a.attempt, a.token%s FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
                  WHERE t.queue = %%s ORDER BY a.task_id, a.attempt"""
               % "".join(", a." + c for c in cols), (q,))


def tok(task_id, n):
    """The task's n-th token (its n-th lease), read from the ledger."""
    return one("SELECT token FROM ntask.attempt_all WHERE task_id = %s ORDER BY token OFFSET %s LIMIT 1",
               (task_id, n - 1))


def new_queue(prefix, **opts):
    q = "%s_%s" % (prefix, secrets.token_hex(3))
    args = ", ".join("%s => %%(%s)s" % (k, k) for k in opts)
    sql("SELECT ntask_queue_set(%%(q)s%s)" % (", " + args if args else ""), dict(q=q, **opts))
    return q


class Running:
    """A Worker run in a thread; ``with Running(w): ...`` stops it (gracefully)."""

    def __init__(self, worker):
        self.w = worker
        self.error = None
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.w.run()
        except BaseException as e:
            self.error = e

    def __enter__(self):
        self.t.start()
        return self.w

    def __exit__(self, *exc):
        self.w.stop()
        self.t.join(TIMEOUT)
        if self.t.is_alive():
            self.w.stop()
            raise AssertionError("the worker did not stop within %d s" % TIMEOUT)
        if self.error is not None and exc[0] is None:
            raise self.error


class Proc:
    """tests/worker_proc.py in a process of its own; its stdout lines kept."""

    def __init__(self, queue, name, dsn=None, **opts):
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker_proc.py"), dsn or DSN, queue, name,
             json.dumps(opts)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.err = []
        threading.Thread(target=self._read, args=(self.p.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.p.stderr, self.err), daemon=True).start()
        poll("%s READY" % name, lambda: self.has("READY"))

    @staticmethod
    def _read(f, into):
        for line in f:
            into.append(line.rstrip("\n"))

    def has(self, prefix):
        return [l for l in list(self.lines) if l.startswith(prefix)]

    def signal(self, sig):
        self.p.send_signal(sig)

    def wait(self, timeout=TIMEOUT):
        rc = self.p.wait(timeout)
        time.sleep(0.1)  # the readers drain the pipes
        return rc

    def counters(self):
        (line,) = self.has("COUNTERS")
        return json.loads(line.split(" ", 1)[1])

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()


@unittest.skipUnless(DSN, "NTASK_TEST_DSN is not set")
class Integration(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sql("CREATE TABLE IF NOT EXISTS py_provider (task_key text PRIMARY KEY,"
            " calls int NOT NULL DEFAULT 1)")
        sql("CREATE TABLE IF NOT EXISTS py_business (task_id bigint, token bigint, note text)")

    def setUp(self):
        LOG.records.clear()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.kill()
            sys.stderr.write("%s: worker_proc stdout: %r\nstderr: %s\n"
                             % (self.id(), p.lines, "\n".join(p.err)))

    def proc(self, *a, **kw):
        p = Proc(*a, **kw)
        self.procs.append(p)
        return p

    # -----------------------------------------------------------------
    def test_drift_functions_and_argument_names_exist_in_pg_proc(self):
        """Every function the library calls exists, with every argument
        name it passes (named notation), in pg_proc of the installed ntask."""
        for fn, args in _sql.CALLS.items():
            rows = sql("""SELECT p.proargnames, p.proargmodes FROM pg_proc p
                          JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'ntask'
                          WHERE p.proname = %s""", (fn,))
            self.assertTrue(rows, "%s is not a function of the ntask extension" % fn)
            ok = False
            for names, modes in rows:
                ins = [n for i, n in enumerate(names or [])
                       if modes is None or modes[i] in ("i", "b", "v")]
                if set(args) <= set(ins):
                    ok = True
            self.assertTrue(ok, "%s has no overload with arguments %s (catalog: %s)" % (fn, args, rows))

    def test_producer_in_the_callers_transaction(self):
        q = new_queue("py_prod")
        with psycopg.connect(DSN) as c:      # not autocommit: the caller's transaction
            e = ntask.enqueue(c, q, "k1", {"a": 1})
            c.rollback()
        self.assertTrue(e.created)
        self.assertIsNone(one("SELECT count(*) FROM ntask_result(%s, 'k1')", (q,)) or None,
                          "rolled back with the caller's transaction")
        with psycopg.connect(DSN) as c:
            with c.cursor() as cur:
                e1 = ntask.enqueue(cur, q, "k1", {"a": 1}, priority=2, partition_key="p")
            e2 = ntask.enqueue(c, q, "k1", {"a": 1})
            many = ntask.enqueue_many(c, q, [("k2", [1]), {"key": "k3"}, ("k1", {"a": 1})])
            child = ntask.enqueue(c, q, "child", depends_on=["k1", "%s:k2" % q])
        self.assertEqual((e1.created, e2.created, e2.task_id), (True, False, e1.task_id))
        self.assertEqual([m.created for m in many], [True, True, False])
        self.assertEqual(child.state, "waiting")
        with psycopg.connect(DSN) as c:
            with self.assertRaises(psycopg.Error) as cm:
                ntask.enqueue(c, q, "k1", {"a": 2})
            self.assertEqual(cm.exception.sqlstate, "NT001")
        got = {}

        def h(task):
            got[task.key] = (task.payload, task.context)
            return ntask.Success("done", {"key": task.key})
        with Running(ntask.Worker(DSN, q, h, wait=1)):
            poll("4 tasks", lambda: len(got) == 4)
        self.assertEqual(got["k2"][0], [1])
        self.assertEqual(got["child"][1]["parents"],
                         {"%s:k1" % q: {"key": "k1"}, "%s:k2" % q: {"key": "k2"}})
        with psycopg.connect(DSN) as c:
            r = ntask.result(c, q, "k1")
            dup = ntask.enqueue(c, q, "k1", {"a": 1})
            self.assertIsNone(ntask.result(c, q, "nope"))
        self.assertEqual((r.state, r.outcome, r.result), ("succeeded", "done", {"key": "k1"}))
        self.assertEqual((dup.created, dup.outcome, dup.result), (False, "done", {"key": "k1"}))

    def test_a_deferred_context_is_read_whole(self):
        # ntask 1.1: a claim hands out at most ntask.max_claim_context_bytes
        # of context; past it a task says {"deferred": true} and the worker
        # reads it whole with ntask_context before the handler runs
        q = new_queue("py_defer")
        opts = "-c ntask.max_claim_context_bytes=65536"
        with psycopg.connect(DSN, autocommit=True) as c:
            for i in range(3):
                ntask.enqueue(c, q, "d%d" % i, {})
            rows = c.execute("SELECT task_id, token FROM ntask_claim(%s, 'setup', 3)", (q,)).fetchall()
            for tid, tok in rows:
                c.execute("SELECT ntask_checkpoint(%s, %s, 'fetch', to_jsonb(repeat('z', 30000)))",
                          (tid, tok))
                c.execute("SELECT ntask_release(%s, %s)", (tid, tok))
        with psycopg.connect(DSN, options=opts) as c:   # the control: one is deferred
            deferred = c.execute("SELECT count(*) FILTER (WHERE context ? 'deferred') "
                                 "FROM ntask_claim(%s, 'control', 3)", (q,)).fetchone()[0]
            c.rollback()
        self.assertEqual(deferred, 1)
        got = {}

        def h(task):
            got[task.key] = len(task.context["checkpoints"]["fetch"])
            return ntask.Success()
        with Running(ntask.Worker(DSN, q, h, wait=1, concurrency=3,
                                  connect_kwargs={"options": opts})):
            poll("3 tasks", lambda: len(got) == 3)
        self.assertEqual(got, {"d0": 30000, "d1": 30000, "d2": 30000})

    def test_worker_receipt_checkpoint_traceparent_and_counters(self):
        q = new_queue("py_basic", lease="5 s")
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        with psycopg.connect(DSN) as c:
            for i in range(20):
                ntask.enqueue(c, q, "t%d" % i, {"i": i}, traceparent=tp if i == 0 else "")
        seen = {}

        def h(task):
            seen[task.key] = task
            with psycopg.connect(DSN) as c:
                with c.transaction():
                    if task.receipt(c, {"i": task.payload["i"]}) == "applied":
                        c.execute("INSERT INTO py_business VALUES (%s, %s, %s)",
                                  (task.id, task.token, q))
            self.assertEqual(task.checkpoint("step1", {"ok": True}), "applied")
            task.progress({"done": 1})
            return ntask.Success("stored")
        with Running(ntask.Worker(DSN, q, h, concurrency=3, wait=1)) as w:
            poll("20 succeeded", lambda: w.counters["succeeded"] == 20)
        self.assertEqual(w.counters.snapshot(), {
            "claimed": 20, "succeeded": 20, "failed_transient": 0, "failed_permanent": 0,
            "failed_unknown": 0, "stale": 0, "conflict": 0, "released": 0, "heartbeats_lost": 0})
        self.assertEqual(one("SELECT count(DISTINCT task_id) FROM py_business WHERE note = %s", (q,)), 20)
        self.assertEqual(one("""SELECT count(*) FROM ntask.task WHERE queue = %s
                                AND state = 'succeeded'""", (q,)), 20)
        self.assertEqual(one("""SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
                                WHERE t.queue = %s AND a.invoked_at IS NOT NULL
                                AND a.outcome = 'stored' AND a.progress = '{"done": 1}'""", (q,)), 20)
        got = seen["t0"].traceparent
        self.assertTrue(got.startswith("00-0af7651916cd43dd8448eb211c80319c-"), got)
        self.assertNotEqual(got, tp, "the claim hands on a span id of its own")
        self.assertIsNone(seen["t1"].traceparent)

    def test_an_unknown_queue_ends_run_with_the_error(self):
        w = ntask.Worker(DSN, "py_no_such_queue_%s" % secrets.token_hex(3), lambda t: None, wait=1)
        with self.assertRaises(psycopg.Error) as cm:
            w.run()
        self.assertEqual(cm.exception.sqlstate, "42704")

    def test_a_callers_pool(self):
        """A pool object with connection() (psycopg_pool's shape) instead
        of a DSN; its connections are not autocommit, the worker makes them."""
        import contextlib

        class Pool:
            def __init__(self):
                self.conns, self.used = [], 0

            @contextlib.contextmanager
            def connection(self):
                c = self.conns.pop() if self.conns else psycopg.connect(DSN, prepare_threshold=None)
                self.used += 1
                try:
                    yield c
                    c.commit()
                finally:
                    self.conns.append(c)
        pool = Pool()
        q = new_queue("py_pool")
        with psycopg.connect(DSN) as c:
            ntask.enqueue_many(c, q, [("p%d" % i, {}) for i in range(5)])
        with Running(ntask.Worker(pool, q, lambda t: ntask.Success("pooled"), wait=1)) as w:
            poll("5 succeeded", lambda: w.counters["succeeded"] == 5)
        self.assertGreaterEqual(pool.used, 5 * 2 + 2, "claims, invoked and reports went through the pool")
        self.assertTrue(all(c.autocommit for c in pool.conns))
        self.assertEqual(one("SELECT count(*) FROM ntask.task WHERE queue = %s AND state = 'succeeded'", (q,)), 5)
        for c in pool.conns:
            c.close()

    def test_handler_exception_before_and_after_invoked(self):
        q = new_queue("py_exc", max_attempts=5, backoff_base="1 hour", backoff_max="1 hour")

        def h(task):
            if task.key == "after":
                task.invoked()
            raise RuntimeError("boom " + task.key)
        with psycopg.connect(DSN) as c:
            ntask.enqueue_many(c, q, [("before", {}), ("after", {})])
        with Running(ntask.Worker(DSN, q, h, invoked="manual", wait=1)) as w:
            poll("two reports", lambda: w.counters["failed_transient"] + w.counters["failed_unknown"] == 2)
        rows = dict((k, (r, c_, inv, d)) for k, r, c_, inv, d in sql(
            """SELECT t.task_key, a.result, a.error_class, a.invoked_at IS NOT NULL, a.detail
               FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = %s""", (q,)))
        self.assertEqual(rows["before"][:3], ("retry_wait", "transient", False))
        self.assertEqual(rows["after"][:3], ("retry_wait", "unknown", True))
        self.assertEqual(rows["after"][3]["message"], "boom after")
        self.assertEqual(rows["after"][3]["exception"], "RuntimeError")

    def test_takeover_w1_w2_stale_surfaced(self):
        q = new_queue("py_takeover", lease="1 s")
        with psycopg.connect(DSN) as c:
            ntask.enqueue(c, q, "n9", {"msg": "m-9"})
        w1_lost, w2_tokens = [], []
        release_w1 = threading.Event()

        def h1(task):   # W1 stalls without heartbeats (heartbeat_every 1 h)
            release_w1.wait(TIMEOUT)
            return ntask.Success("sent")

        def h2(task):
            w2_tokens.append(task.token)
            return ntask.Success("sent-by-w2")
        # concurrency 1: W1 does not claim while it holds n9 (else its own
        # waiting claim could take the expired lease over first)
        w1 = ntask.Worker(DSN, q, h1, name="W1", lease=1, heartbeat_every=3600, wait=1, concurrency=1,
                          on_lost=lambda t, call, a: w1_lost.append((t.token, call, a)))
        w2 = ntask.Worker(DSN, q, h2, name="W2", lease=30, wait=1)
        with Running(w1):
            poll("W1 holds n9", lambda: one("SELECT lease_owner FROM ntask.task WHERE queue = %s", (q,)) == "W1")
            with Running(w2):
                poll("W2 took n9 over", lambda: w2.counters["succeeded"] == 1)
            release_w1.set()
            poll("W1's report refused", lambda: w1.counters["stale"] == 1)
        ledger = queue_attempts(q, "result")
        self.assertEqual([(a, r) for a, _, r in ledger], [(1, "lease_expired"), (2, "succeeded")])
        t1, t2 = ledger[0][1], ledger[1][1]
        self.assertLess(t1, t2, "the takeover's token is above the first")
        self.assertEqual(w2_tokens, [t2])
        self.assertEqual(w1_lost, [(t1, "transition", "stale")])
        self.assertEqual(w1.counters["succeeded"], 0)
        self.assertEqual(one("SELECT outcome FROM ntask_result(%s, 'n9')", (q,)), "sent-by-w2")

    def test_heartbeat_null_after_cancel_signals_the_handler(self):
        q = new_queue("py_cancel", lease="2 s")
        with psycopg.connect(DSN) as c:
            tid = ntask.enqueue(c, q, "c1", {}).task_id
        saw = []
        lost = []

        def h(task):
            saw.append(task.lost.wait(TIMEOUT))
            return ntask.Success("too late")
        with Running(ntask.Worker(DSN, q, h, wait=1, heartbeat_every=0.2,
                                  on_lost=lambda t, call, a: lost.append((call, a)))) as w:
            poll("leased", lambda: one("SELECT state FROM ntask.task WHERE task_id = %s", (tid,)) == "leased")
            sql("SELECT ntask_cancel(%s, 'test', 'no longer wanted')", (tid,))
            poll("the handler saw lost", lambda: saw)
        self.assertEqual(saw, [True])
        self.assertEqual(lost, [("heartbeat", None)])
        self.assertEqual((w.counters["heartbeats_lost"], w.counters["succeeded"]), (1, 0))
        self.assertEqual(one("SELECT state FROM ntask.task WHERE task_id = %s", (tid,)), "canceled")

    def test_sigterm_graceful_releases_what_was_never_invoked(self):
        q = new_queue("py_term", lease="30 s")
        with psycopg.connect(DSN) as c:
            ntask.enqueue_many(c, q, [("prep:1", {}), ("slow-1:1", {})])
        p = self.proc(q, "term-1", concurrency=2, invoked="manual", wait=1, shutdown_grace=3)
        poll("both started", lambda: p.has("STARTED prep:1") and p.has("INVOKED slow-1:1"))
        p.signal(signal.SIGTERM)
        self.assertEqual(p.wait(), 0, p.err)
        c = p.counters()
        self.assertEqual((c["succeeded"], c["released"]), (1, 1), c)
        self.assertEqual(one("""SELECT count(*) FROM ntask.task WHERE queue = %s AND state = 'leased'
                                AND invoked_at IS NULL""", (q,)), 0, "nothing left leased uninvoked")
        self.assertEqual(dict(sql("SELECT task_key, state FROM ntask.task WHERE queue = %s", (q,))),
                         {"prep:1": "ready", "slow-1:1": "succeeded"})
        self.assertEqual(one("""SELECT a.result FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
                                WHERE t.queue = %s AND t.task_key = 'prep:1'""", (q,)), "released")
        self.assertEqual(one("""SELECT attempts_left FROM (SELECT max_attempts - attempts AS attempts_left
                                FROM ntask.task WHERE queue = %s AND task_key = 'prep:1') s""", (q,)),
                         one("SELECT max_attempts FROM ntask.queue WHERE queue = %s", (q,)),
                         "the released attempt spent no budget")

    def test_second_sigterm_stops_at_once(self):
        q = new_queue("py_term2", lease="30 s")
        with psycopg.connect(DSN) as c:
            ntask.enqueue(c, q, "slow-60:1", {})
        p = self.proc(q, "term-2", wait=1, shutdown_grace=60)
        poll("invoked", lambda: p.has("INVOKED"))
        p.signal(signal.SIGTERM)
        time.sleep(0.5)
        self.assertIsNone(p.p.poll(), "the first SIGTERM waits for the running handler")
        t0 = time.monotonic()
        p.signal(signal.SIGTERM)
        self.assertEqual(p.wait(), 0, p.err)
        self.assertLess(time.monotonic() - t0, 20)
        self.assertEqual(p.counters()["succeeded"], 0)
        # the invoked task keeps its lease: it runs out and is taken over
        self.assertEqual(sql("SELECT state, lease_owner, invoked_at IS NOT NULL FROM ntask.task WHERE queue = %s",
                             (q,)), [("leased", "term-2", True)])

    def test_sigkill_mid_task_taken_over_and_reconciled(self):
        q = new_queue("py_kill", lease="2 s")
        with psycopg.connect(DSN) as c:
            ntask.enqueue(c, q, "slow-60:n9", {"msg": "m-9"})
        p = self.proc(q, "kill-1", wait=1)
        poll("invoked and called the provider", lambda: p.has("INVOKED"))
        p.signal(signal.SIGKILL)
        p.wait()
        handled, reconciled = [], []

        def h(task):
            handled.append(task.key)

        def rec(task):
            calls = one("SELECT calls FROM py_provider WHERE task_key = %s", (q + "/" + task.key,))
            reconciled.append((task.prior_outcome, calls))
            return ntask.Success("reconciled") if calls else None
        with Running(ntask.Worker(DSN, q, h, name="W2", reconcile=rec, wait=1)) as w:
            poll("W2 reconciled", lambda: w.counters["succeeded"] == 1)
        self.assertEqual(reconciled, [("unknown", 1)])
        self.assertEqual(handled, [], "the handler never ran: the provider is not called twice")
        self.assertEqual(one("SELECT calls FROM py_provider WHERE task_key = %s", (q + "/slow-60:n9",)), 1)
        self.assertEqual(one("SELECT outcome FROM ntask_result(%s, 'slow-60:n9')", (q,)), "reconciled")
        ledger = queue_attempts(q, "result", "outcome_known")
        self.assertEqual([(a, r, k) for a, _, r, k in ledger],
                         [(1, "lease_expired", False), (2, "succeeded", True)])
        self.assertLess(ledger[0][1], ledger[1][1], "the takeover's token is above the first")

    @unittest.skipUnless(BOUNCER and BOUNCER1, "NTASK_TEST_BOUNCER_DSN / _BOUNCER1_DSN not set")
    def test_pgbouncer_transaction_mode(self):
        # the control: psycopg's prepared statements do break behind it
        a = psycopg.connect(BOUNCER1, autocommit=True, prepare_threshold=0)
        b = psycopg.connect(BOUNCER1, autocommit=True, prepare_threshold=0)
        try:
            with self.assertRaises(psycopg.Error) as cm:
                a.execute("SELECT %s::int", (1,))
                b.execute("SELECT %s::text", ("x",))
                a.execute("SELECT %s::int", (2,))
            self.assertIn(cm.exception.sqlstate, ("42P05", "26000"), cm.exception)
        finally:
            a.close()
            b.close()
        # the library: its connections prepare nothing
        q = new_queue("py_bouncer", lease="1 s")
        n = 40
        with psycopg.connect(BOUNCER, prepare_threshold=None) as c:
            ntask.enqueue_many(c, q, [("b%d" % i, {"i": i}) for i in range(n)])

        def h(task):
            with psycopg.connect(BOUNCER, prepare_threshold=None) as c:
                with c.transaction():
                    if task.receipt(c, {"i": task.payload["i"]}) == "applied":
                        c.execute("INSERT INTO py_business VALUES (%s, %s, %s)", (task.id, task.token, q))
            time.sleep(0.4)   # past a heartbeat (lease 1 s: every 0.33 s)
            return ntask.Success("via-bouncer")
        with Running(ntask.Worker(BOUNCER, q, h, concurrency=4, wait=1)) as w:
            poll("%d succeeded" % n, lambda: w.counters["succeeded"] == n)
        self.assertEqual(w.counters["stale"] + w.counters["heartbeats_lost"] + w.counters["failed_unknown"]
                         + w.counters["failed_transient"], 0)
        self.assertEqual(one("SELECT count(DISTINCT task_id) FROM py_business WHERE note = %s", (q,)), n)
        self.assertEqual(one("""SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
                                WHERE t.queue = %s""", (q,)), n, "one attempt each: heartbeats held")
        self.assertEqual([r for r in LOG.records if "failed" in r], [])

    def test_claim_stop_race_strands_nothing(self):
        q = new_queue("py_race", lease="30 s")
        started = []
        w = ntask.Worker(DSN, q, lambda t: started.append(t.key), wait=5)
        with Running(w):
            poll("the claim waits", lambda: one("SELECT count(*) FROM ntask.waiters WHERE queue = %s", (q,)))
            w.stop()   # stop requested while the claim waits: it is not canceled
            with psycopg.connect(DSN) as c:
                ntask.enqueue_many(c, q, [("r%d" % i, {}) for i in range(3)])
            poll("the waiting claim returned", lambda: w.counters["claimed"] == 3)
        self.assertEqual(started, [], "nothing that arrived after stop() was started")
        self.assertEqual(w.counters["released"], 3)
        self.assertEqual(sql("""SELECT state, count(*) FROM ntask.task WHERE queue = %s GROUP BY 1""", (q,)),
                         [("ready", 3)])
        self.assertEqual(one("""SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
                                WHERE t.queue = %s AND a.result = 'released'""", (q,)), 3)

    @unittest.skipUnless(os.environ.get("NTASK_TEST_PGCTL"), "NTASK_TEST_PGCTL not set")
    def test_server_restart_mid_wait(self):
        q = new_queue("py_restart", lease="5 s")
        done = []
        w = ntask.Worker(DSN, q, lambda t: done.append(t.key), wait=2)
        with Running(w):
            poll("the claim waits", lambda: one("SELECT count(*) FROM ntask.waiters WHERE queue = %s", (q,)))
            subprocess.run([os.environ["NTASK_TEST_PGCTL"], "-D", os.environ["NTASK_TEST_PGDATA"],
                            "-l", os.environ["NTASK_TEST_PGLOG"], "-m", "fast", "-w", "restart"],
                           check=True, stdout=subprocess.DEVNULL)
            poll("the server is back", lambda: _up())
            with psycopg.connect(DSN) as c:
                ntask.enqueue(c, q, "after-restart", {})
            poll("the worker went on", lambda: w.counters["succeeded"] == 1)
        self.assertEqual(done, ["after-restart"])
        self.assertTrue([r for r in LOG.records if "claim failed" in r], "the lost connection was seen")

    def test_report_over_a_dead_connection_is_sent_again(self):
        """The worker's connections die while it holds a task (terminated):
        the report fails on its dead pooled connection and is sent again on
        a new one, with the same token, and applies once."""
        q = new_queue("py_redo", lease="30 s")
        app = "py_redo_%s" % secrets.token_hex(3)
        with psycopg.connect(DSN) as c:
            tid = ntask.enqueue(c, q, "r1", {}).task_id

        def h(task):
            sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
            poll("the worker's backends gone", lambda: one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)) == 0)
            return ntask.Success("after-reconnect")
        # concurrency 1: no claim is running while the task is held, so the
        # report is the first statement on a (dead) pooled connection
        w = ntask.Worker(DSN, q, h, concurrency=1, heartbeat_every=3600, wait=1,
                         connect_kwargs={"application_name": app})
        with Running(w):
            poll("succeeded", lambda: w.counters["succeeded"] == 1)
        self.assertTrue([r for r in LOG.records if "ntask_transition failed" in r], LOG.records)
        # one attempt, its report applied with the attempt's (the task's) token
        self.assertEqual(sql("""SELECT a.attempt, a.token = t.token, a.result, a.outcome
                                FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
                                WHERE a.task_id = %s""", (tid,)), [(1, True, "succeeded", "after-reconnect")])

    def test_sigstop_past_the_lease_is_stale_on_resume(self):
        q = new_queue("py_stop", lease="1 s")
        with psycopg.connect(DSN) as c:
            ntask.enqueue(c, q, "slow-3:s1", {})
        # concurrency 1: no claim of its own waits on the server while it is
        # stopped (that claim could take the expired lease over itself)
        p = self.proc(q, "stop-1", wait=1, concurrency=1)
        poll("invoked", lambda: p.has("INVOKED"))
        p.signal(signal.SIGSTOP)
        try:
            taken = poll("the lease ran out and W2 took it", lambda: sql(
                "SELECT task_id, token, prior_outcome FROM ntask_claim(%s, 'W2', lease => '60 s')", (q,)))
        finally:
            p.signal(signal.SIGCONT)
        (tid, token, prior), = taken
        self.assertEqual((token, prior), (tok(tid, 2), "unknown"))
        self.assertGreater(token, tok(tid, 1), "the takeover's token is above the first")
        poll("W1 learns it lost the task", lambda: p.has("LOST"))
        p.signal(signal.SIGTERM)
        self.assertEqual(p.wait(), 0, p.err)
        c = p.counters()
        self.assertEqual(c["succeeded"], 0)
        self.assertEqual(c["stale"] + c["heartbeats_lost"], 1, c)
        self.assertIn(p.has("LOST")[0], ("LOST heartbeat None", "LOST transition stale"))
        self.assertEqual(one("SELECT calls FROM py_provider WHERE task_key = %s", (q + "/slow-3:s1",)), 1)
        # W2 still holds the task: W1's resumed worker wrote nothing
        self.assertEqual(sql("SELECT state, token, lease_owner FROM ntask.task WHERE task_id = %s", (tid,)),
                         [("leased", token, "W2")])
        self.assertEqual(one("SELECT result FROM ntask_transition(%s, %s, 'succeeded')", (tid, token)), "applied")


def _up():
    try:
        sql("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


if __name__ == "__main__":
    unittest.main()
