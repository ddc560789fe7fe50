"""Unit tests: no server.  A fake pool answers each ntask function from a
script, so the loop's decisions (what is reported, released, retried,
surfaced) are checked call by call.

    python3 -m unittest discover -s tests -p 'test_unit.py'
"""

import contextlib
import datetime
import logging
import os
import re
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

import ntask  # noqa: E402
from ntask import _sql  # noqa: E402
from ntask.worker import Worker  # noqa: E402

logging.getLogger("ntask").addHandler(logging.NullHandler())
logging.getLogger("ntask").propagate = False
FN = re.compile(r"FROM (ntask_\w+)\(")
UTC = datetime.timezone.utc


def claim_row(task_id, key="k", token=1, prior=None, context=None, payload=None):
    return {"task_id": task_id, "task_key": key, "payload": payload or {}, "attempt": token,
            "token": token, "lease_until": datetime.datetime.now(UTC), "prior_outcome": prior,
            "context": context, "lease_left": 30.0}


class FakeDB:
    """Answers ntask_* statements: ``claims`` is a list of row lists handed
    out in order (then nothing, after a short sleep as a waiting claim
    would); ``answers[fn]`` is a function (params) -> row, or raises."""

    def __init__(self, claims=(), answers=None):
        self.claims = list(claims)
        self.answers = {"ntask_invoked": lambda p: ("applied",),
                        "ntask_transition": lambda p: ("applied", "succeeded", None),
                        "ntask_release": lambda p: ("applied",),
                        "ntask_heartbeat": lambda p: (datetime.datetime.now(UTC),)}
        self.answers.update(answers or {})
        self.calls = []
        self.lock = threading.Lock()

    def run(self, sql, params):
        fn = FN.search(sql).group(1)
        with self.lock:
            self.calls.append((fn, params))
        if fn == "ntask_claim":
            with self.lock:
                rows = self.claims.pop(0) if self.claims else None
            if rows is None:
                time.sleep(0.05)
                return []
            return rows
        return [self.answers[fn](params)]

    def of(self, fn):
        with self.lock:
            return [p for f, p in self.calls if f == fn]

    @contextlib.contextmanager
    def connection(self):
        yield FakeConn(self)


class FakeCursor:
    def __init__(self, db):
        self.db = db
        self.rows = []

    def execute(self, sql, params=None):
        self.rows = self.db.run(sql, params)
        return self

    def fetchone(self):
        return self.rows[0] if self.rows else None

    def fetchall(self):
        return self.rows


class FakeConn:
    autocommit = True

    def __init__(self, db):
        self.db = db

    def cursor(self, row_factory=None):
        return FakeCursor(self.db)

    def execute(self, sql, params=None):
        return FakeCursor(self.db).execute(sql, params)


def run_worker(db, handler, until, timeout=10, **opts):
    """Run a Worker on db until until(worker) holds, then stop it; returns it."""
    opts.setdefault("wait", 1)
    w = Worker(db, "q", handler, name="W1", **opts)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    while not until(w):
        if time.monotonic() > deadline:
            w.stop()
            w.stop()
            raise AssertionError("timed out; calls: %r" % db.calls)
        time.sleep(0.01)
    w.stop()
    t.join(timeout)
    assert not t.is_alive()
    return w


def reported(w):
    c = w.counters.snapshot()
    return sum(c[k] for k in ("succeeded", "failed_transient", "failed_permanent",
                              "failed_unknown", "stale", "conflict", "released"))


class SqlTest(unittest.TestCase):
    def test_statements_call_only_listed_functions_in_named_notation(self):
        for fn, sql in _sql.SQL.items():
            self.assertEqual(FN.findall(sql), [fn], sql)
            self.assertNotIn("ntask.", sql, "no table or view: %s" % sql)
            for a in _sql.CALLS[fn]:
                self.assertIn("%s => %%(%s)s" % (a, a), sql)

    def test_params_rejects_an_argument_the_function_lacks(self):
        with self.assertRaises(TypeError):
            _sql.params("ntask_invoked", task_id=1, token=2, lease=None)
        self.assertEqual(_sql.params("ntask_invoked", task_id=1),
                         {"task_id": 1, "token": None})


class OptionsTest(unittest.TestCase):
    def test_defaults(self):
        w = Worker("dbname=x", "q", lambda t: None)
        self.assertEqual((w.concurrency, w.wait.total_seconds(), w.lease, w.heartbeat_every,
                          w.shutdown_grace.total_seconds(), w.invoked_mode),
                         (4, 10.0, None, None, 30.0, "auto"))
        self.assertRegex(w.name, r"^.+-%d-[0-9a-f]{6}$" % os.getpid())
        self.assertEqual(w._pool.kwargs, {"autocommit": True, "prepare_threshold": None})

    def test_bad_options(self):
        for kw in ({"wait": 31}, {"wait": 0}, {"concurrency": 0}, {"invoked": "sometimes"},
                   {"lease": -1}, {"heartbeat_every": 0}, {"wait": "10"}):
            with self.assertRaises((ValueError, TypeError), msg=kw):
                Worker("dbname=x", "q", lambda t: None, **kw)
        with self.assertRaises(TypeError):
            Worker(42, "q", lambda t: None)


class OutcomeTest(unittest.TestCase):
    def one(self, handler, **opts):
        db = FakeDB(claims=[[claim_row(7, token=3)]], answers=opts.pop("answers", None))
        w = run_worker(db, handler, lambda w: reported(w) >= 1 or w.counters["heartbeats_lost"], **opts)
        return db, w

    def test_plain_return_is_succeeded(self):
        db, w = self.one(lambda t: None)
        (p,) = db.of("ntask_transition")
        self.assertEqual((p["task_id"], p["token"], p["to_state"], p["outcome"], p["result"]),
                         (7, 3, "succeeded", None, None))
        self.assertEqual(len(db.of("ntask_invoked")), 1, "auto: invoked before the handler")
        self.assertEqual(w.counters["succeeded"], 1)

    def test_success_with_outcome_and_result(self):
        db, w = self.one(lambda t: ntask.Success("sent", {"id": "p-1"}))
        (p,) = db.of("ntask_transition")
        self.assertEqual((p["to_state"], p["outcome"], p["result"].obj), ("succeeded", "sent", {"id": "p-1"}))

    def test_typed_failures(self):
        at = datetime.datetime(2030, 1, 1, tzinfo=UTC)
        cases = [
            (ntask.Transient("503", retry_at=at), "retry_wait", "transient", at, "failed_transient"),
            (ntask.Permanent("400"), "repair_required", "permanent", None, "failed_permanent"),
            (ntask.Unknown("timeout"), "retry_wait", "unknown", None, "failed_unknown"),
        ]
        for exc, state, cls, retry_at, counter in cases:
            for how in ("raise", "return"):
                def h(t, exc=exc, how=how):
                    if how == "raise":
                        raise exc
                    return exc
                db, w = self.one(h)
                (p,) = db.of("ntask_transition")
                self.assertEqual((p["to_state"], p["error_class"], p["retry_at"]),
                                 (state, cls, retry_at), (exc, how))
                self.assertEqual(p["detail"].obj["message"], exc.message)
                self.assertEqual(w.counters[counter], 1)

    def test_exception_before_invoked_is_transient_after_is_unknown(self):
        def before(t):
            raise KeyError("x")

        def after(t):
            t.invoked()
            raise KeyError("x")
        db, w = self.one(before, invoked="manual")
        self.assertEqual(db.of("ntask_invoked"), [])
        self.assertEqual(db.of("ntask_transition")[0]["error_class"], "transient")
        db, w = self.one(after, invoked="manual")
        self.assertEqual(len(db.of("ntask_invoked")), 1)
        self.assertEqual(db.of("ntask_transition")[0]["error_class"], "unknown")
        self.assertEqual(db.of("ntask_transition")[0]["detail"].obj["exception"], "KeyError")
        # auto mode: invoked is marked before the handler, so unknown
        db, w = self.one(before)
        self.assertEqual(db.of("ntask_transition")[0]["error_class"], "unknown")

    def test_invoked_stale_runs_no_handler_and_reports_nothing(self):
        lost, ran = [], []
        db, w = self.one(lambda t: ran.append(t), answers={"ntask_invoked": lambda p: ("stale",)},
                         on_lost=lambda t, call, a: lost.append((t.id, call, a)))
        self.assertEqual(ran, [])
        self.assertEqual(db.of("ntask_transition"), [])
        self.assertEqual(lost, [(7, "invoked", "stale")])
        self.assertEqual(w.counters["stale"], 1)

    def test_stale_transition_is_surfaced_once_never_retried(self):
        lost = []
        db, w = self.one(lambda t: None,
                         answers={"ntask_transition": lambda p: ("stale", "leased", None)},
                         on_lost=lambda t, call, a: lost.append((call, a)))
        self.assertEqual(len(db.of("ntask_transition")), 1)
        self.assertEqual(lost, [("transition", "stale")])
        self.assertEqual((w.counters["stale"], w.counters["succeeded"]), (1, 0))

    def test_conflict_transition_is_surfaced(self):
        db, w = self.one(lambda t: None,
                         answers={"ntask_transition": lambda p: ("conflict", "retry_wait", None)})
        self.assertEqual((w.counters["conflict"], w.counters["succeeded"]), (1, 0))

    def test_lost_connection_on_report_is_retried_with_the_same_token(self):
        n = []

        def flaky(p):
            n.append(p["token"])
            if len(n) < 3:
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return ("duplicate" if len(n) > 1 else "applied", "succeeded", None)
        db, w = self.one(lambda t: None, answers={"ntask_transition": flaky})
        self.assertEqual(n, [3, 3, 3])
        self.assertEqual(w.counters["succeeded"], 1)

    def test_heartbeat_null_signals_the_handler_and_reports_nothing(self):
        seen = []

        def h(t):
            seen.append(t.lost.wait(5))
            return None
        lost = []
        db, w = self.one(h, heartbeat_every=0.05, answers={"ntask_heartbeat": lambda p: (None,)},
                         on_lost=lambda t, call, a: lost.append((call, a)))
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(seen, [True])
        self.assertEqual(lost, [("heartbeat", None)])
        self.assertEqual(w.counters["heartbeats_lost"], 1)
        self.assertEqual(db.of("ntask_transition"), [])

    def test_heartbeat_answered_after_the_report_is_not_a_loss(self):
        # the heartbeat timer fires while the handler returns: the heartbeat
        # reaches the server after the transition, which answers NULL (the
        # token holds nothing any more); that is the worker's own report,
        # not a lost lease (issue 50: seen in examples/python)
        reporting = threading.Event()

        def hb(p):
            reporting.wait(5)
            return (None,)

        def tr(p):
            reporting.set()
            return ("applied", "succeeded", None)

        def h(t):
            while not db.of("ntask_heartbeat"):
                time.sleep(0.005)
        lost = []
        db = FakeDB(claims=[[claim_row(1)]], answers={"ntask_heartbeat": hb, "ntask_transition": tr})
        w = run_worker(db, h, lambda w: w.counters["succeeded"] == 1, heartbeat_every=0.02,
                       on_lost=lambda t, call, a: lost.append((call, a)))
        time.sleep(0.1)
        self.assertEqual(lost, [])
        self.assertEqual(w.counters["heartbeats_lost"], 0)

    def test_heartbeat_uses_the_lease_and_a_third_of_it(self):
        db = FakeDB(claims=[[claim_row(1)]])
        t0 = time.monotonic()

        def h(t):
            while len(db.of("ntask_heartbeat")) < 2:
                time.sleep(0.01)
        run_worker(db, h, lambda w: w.counters["succeeded"] == 1, lease=0.3)
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        self.assertEqual(db.of("ntask_heartbeat")[0]["lease"], datetime.timedelta(seconds=0.3))
        self.assertEqual(db.of("ntask_claim")[0]["lease"], datetime.timedelta(seconds=0.3))

    def test_reconcile(self):
        calls = []

        def h(t):
            calls.append("handler")

        def rec_done(t):
            calls.append(("reconcile", t.prior_outcome))
            return ntask.Success("reconciled")
        db = FakeDB(claims=[[claim_row(1, prior="unknown"), claim_row(2)]])
        run_worker(db, h, lambda w: w.counters["succeeded"] == 2, reconcile=rec_done)
        self.assertEqual(sorted(map(str, calls)), sorted(map(str, [("reconcile", "unknown"), "handler"])),
                         "reconcile only for prior_outcome unknown; handler only when not done")
        by_id = {p["task_id"]: p for p in db.of("ntask_transition")}
        self.assertEqual(by_id[1]["outcome"], "reconciled")
        self.assertEqual([p["task_id"] for p in db.of("ntask_invoked")], [2])
        # not done: the handler runs; raising: unknown (still not known)
        for rec, want in ((lambda t: ntask.NOT_DONE, "succeeded"), (lambda t: None, "succeeded"),
                          (lambda t: 1 / 0, "unknown")):
            db = FakeDB(claims=[[claim_row(1, prior="unknown")]])
            run_worker(db, lambda t: None, lambda w: reported(w) == 1, reconcile=rec)
            p = db.of("ntask_transition")[0]
            self.assertEqual(p["error_class"] or p["to_state"], want)

    def test_release_and_await_end_without_report(self):
        for fn, call in (("ntask_release", lambda t: t.release(5)),
                         ("ntask_await", lambda t: t.await_signal("sig", timeout=60))):
            db = FakeDB(claims=[[claim_row(1)]], answers={"ntask_await": lambda p: ("applied",)})

            def h(t, call=call):
                call(t)
                return ntask.AWAITING if fn == "ntask_await" else None
            done = threading.Event()
            run_worker(db, lambda t: (h(t), done.set())[0], lambda w: done.is_set())
            time.sleep(0.1)
            self.assertEqual(db.of("ntask_transition"), [], fn)
            self.assertEqual(len(db.of(fn)), 1)
        self.assertEqual(db.of("ntask_await")[0]["timeout"], datetime.timedelta(seconds=60))

    def test_awaiting_without_await_is_an_error(self):
        db, w = self.one(lambda t: ntask.AWAITING)
        self.assertEqual(db.of("ntask_transition")[0]["error_class"], "unknown")


class ShutdownTest(unittest.TestCase):
    def test_tasks_arriving_after_stop_are_released_never_started(self):
        started = []
        gate, entered = threading.Event(), threading.Event()

        class DB(FakeDB):
            def run(self, sql, params):
                if FN.search(sql).group(1) == "ntask_claim" and self.claims:
                    entered.set()
                    gate.wait(5)   # the waiting claim returns after stop()
                return super().run(sql, params)
        db = DB(claims=[[claim_row(1), claim_row(2)]])
        w = Worker(db, "q", lambda t: started.append(t), name="W1", wait=1)
        t = threading.Thread(target=w.run)
        t.start()
        self.assertTrue(entered.wait(5))
        w.stop()
        gate.set()
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertEqual(started, [])
        self.assertEqual(sorted(p["task_id"] for p in db.of("ntask_release")), [1, 2])
        self.assertEqual(w.counters["released"], 2)
        self.assertEqual(db.of("ntask_invoked"), [])

    def test_grace_then_release_of_what_was_never_invoked(self):
        go = threading.Event()
        raised = []

        def h(t):   # manual mode, still preparing when the grace runs out
            go.wait(5)
            try:
                t.invoked()
            except ntask.Lost:
                raised.append(True)
        db = FakeDB(claims=[[claim_row(1)]])
        w = Worker(db, "q", h, name="W1", wait=1, invoked="manual", shutdown_grace=0.2)
        t = threading.Thread(target=w.run)
        t.start()
        while not db.of("ntask_claim"):
            time.sleep(0.01)
        w.stop()
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertEqual([p["task_id"] for p in db.of("ntask_release")], [1])
        go.set()
        deadline = time.monotonic() + 5
        while not raised and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(raised, [True], "invoked() after the release raises Lost")
        self.assertEqual(db.of("ntask_transition"), [])

    def test_invoked_task_is_not_released_and_second_stop_returns_at_once(self):
        block = threading.Event()
        db = FakeDB(claims=[[claim_row(1)]])
        w = Worker(db, "q", lambda t: block.wait(10), name="W1", wait=1, shutdown_grace=30)
        t = threading.Thread(target=w.run)
        t.start()
        while not db.of("ntask_invoked"):
            time.sleep(0.01)
        w.stop()
        time.sleep(0.2)
        self.assertTrue(t.is_alive(), "the first stop waits for the running handler")
        t0 = time.monotonic()
        w.stop()
        t.join(5)
        self.assertLess(time.monotonic() - t0, 2)
        self.assertEqual(db.of("ntask_release"), [])
        block.set()
        time.sleep(0.1)
        self.assertEqual(db.of("ntask_transition"), [], "a hard stop reports nothing")

    def test_claim_reconnects_after_a_lost_connection(self):
        class DB(FakeDB):
            fails = 2

            def run(self, sql, params):
                if FN.search(sql).group(1) == "ntask_claim" and self.fails:
                    self.fails -= 1
                    with self.lock:
                        self.calls.append(("ntask_claim", params))
                    raise psycopg.OperationalError("terminating connection due to administrator command")
                return super().run(sql, params)
        db = DB(claims=[[claim_row(1)]])
        run_worker(db, lambda t: None, lambda w: w.counters["succeeded"] == 1)
        self.assertGreaterEqual(len(db.of("ntask_claim")), 3)

    def test_an_error_that_is_not_a_lost_connection_ends_run(self):
        class DB(FakeDB):
            def run(self, sql, params):
                raise psycopg.errors.UndefinedObject('queue "q" does not exist')
        w = Worker(DB(), "q", lambda t: None, wait=1)
        with self.assertRaises(psycopg.errors.UndefinedObject):
            w.run()


class ProducerTest(unittest.TestCase):
    def test_enqueue_passes_every_option(self):
        db = FakeDB(answers={"ntask_enqueue": lambda p: (5, True, "waiting", None, None)})
        at = datetime.datetime(2030, 1, 1, tzinfo=UTC)
        e = ntask.enqueue(FakeConn(db), "q", "k", {"a": 1}, run_at=at, partition_key="p",
                          priority=3, depends_on=("q:a", "b"), on_parent_failed="cancel")
        self.assertEqual(e, ntask.Enqueued(5, True, "waiting", None, None))
        (p,) = db.of("ntask_enqueue")
        self.assertEqual((p["queue"], p["task_key"], p["payload"].obj, p["run_at"], p["partition_key"],
                          p["priority"], p["depends_on"], p["on_parent_failed"], p["traceparent"]),
                         ("q", "k", {"a": 1}, at, "p", 3, ["q:a", "b"], "cancel", None))

    def test_enqueue_many_items(self):
        db = FakeDB()
        db.run = lambda sql, params: (db.calls.append((FN.search(sql).group(1), params)),
                                      [(i, True, "ready", None, None) for i in range(3)])[1]
        out = ntask.enqueue_many(FakeConn(db), "q", [{"key": "a", "payload": [1]}, ("b", None),
                                                     {"key": "c", "partition_key": "p"}])
        self.assertEqual([e.task_id for e in out], [0, 1, 2])
        (p,) = db.of("ntask_enqueue_many")
        self.assertEqual((p["task_keys"], [j.obj for j in p["payloads"]], p["partition_keys"]),
                         (["a", "b", "c"], [[1], {}, {}], [None, None, "p"]))
        self.assertEqual(ntask.enqueue_many(FakeConn(db), "q", []), [])
        with self.assertRaises(TypeError):
            ntask.enqueue_many(FakeConn(db), "q", [{"key": "a", "priority": 1}])
        with self.assertRaises(TypeError):
            ntask.enqueue(FakeConn(db), "q", "k", run_at="tomorrow")

    def test_result(self):
        db = FakeDB(answers={"ntask_result": lambda p: None})
        db.run = lambda sql, params: []
        self.assertIsNone(ntask.result(FakeConn(db), "q", "k"))


class PackagingTest(unittest.TestCase):
    def test_pyproject(self):
        try:
            import tomllib
        except ImportError:
            self.skipTest("tomllib is Python 3.11+")
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        with open(os.path.join(root, "pyproject.toml"), "rb") as f:
            meta = tomllib.load(f)["project"]
        self.assertEqual(meta["name"], "ntask")
        self.assertEqual(meta["version"], ntask.__version__)
        self.assertEqual(meta["dependencies"], ["psycopg>=3.1"])
        self.assertEqual(list(meta["optional-dependencies"]), ["otel"])
        self.assertTrue(os.path.exists(os.path.join(root, meta["readme"])))
        for name in ntask.__all__:
            self.assertTrue(hasattr(ntask, name), name)
            obj = getattr(ntask, name)
            if callable(obj) and not isinstance(obj, tuple):
                self.assertTrue(obj.__doc__, "%s has a docstring" % name)


class OtelTest(unittest.TestCase):
    """ntask._otel against a stand-in of the opentelemetry API (the real
    package is not in Debian 12, so CI cannot import it): the traceparent
    of the current span, and the handler's span as a child of the claim's
    trace context."""

    def setUp(self):
        import importlib
        import types
        self.started = []
        test = self

        class Ctx:
            trace_id, span_id, trace_flags, is_valid = 0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331, 1, True

        class Span:
            def get_span_context(self):
                return Ctx()

        class Tracer:
            @contextlib.contextmanager
            def start_as_current_span(self, name, context=None, attributes=None):
                test.started.append((name, context, attributes))
                yield

        class Propagator:
            def extract(self, carrier):
                return ("extracted", carrier["traceparent"])
        otel = types.ModuleType("opentelemetry")
        trace = types.ModuleType("opentelemetry.trace")
        trace.get_current_span = lambda: Span()
        trace.get_tracer = lambda name: Tracer()
        otel.trace = trace
        prop = types.ModuleType("opentelemetry.trace.propagation")
        tc = types.ModuleType("opentelemetry.trace.propagation.tracecontext")
        tc.TraceContextTextMapPropagator = Propagator
        self.mods = {"opentelemetry": otel, "opentelemetry.trace": trace,
                     "opentelemetry.trace.propagation": prop,
                     "opentelemetry.trace.propagation.tracecontext": tc}
        sys.modules.update(self.mods)
        from ntask import _otel
        self._otel = importlib.reload(_otel)

    def tearDown(self):
        import importlib
        for m in self.mods:
            sys.modules.pop(m, None)
        importlib.reload(self._otel)

    def test_current_traceparent_and_the_handler_span(self):
        self.assertTrue(self._otel.available())
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        self.assertEqual(self._otel.current_traceparent(), tp)
        db = FakeDB(answers={"ntask_enqueue": lambda p: (1, True, "ready", None, None)})
        ntask.producer._otel = self._otel
        try:
            ntask.enqueue(FakeConn(db), "q", "k")
            ntask.enqueue(FakeConn(db), "q", "k2", traceparent="")
        finally:
            ntask.producer._otel = sys.modules["ntask._otel"]
        self.assertEqual([p["traceparent"] for p in db.of("ntask_enqueue")], [tp, ""])
        task = type("T", (), {"traceparent": tp, "queue": "q", "id": 1, "key": "k",
                              "attempt": 1, "token": 2})()
        with self._otel.handler_span(task):
            pass
        self.assertEqual(self.started, [("ntask q", ("extracted", tp),
                                         {"ntask.task_id": 1, "ntask.task_key": "k",
                                          "ntask.attempt": 1, "ntask.token": 2})])
        task.traceparent = None
        with self._otel.handler_span(task):
            pass
        self.assertEqual(len(self.started), 1, "no trace context: no span")


if __name__ == "__main__":
    unittest.main()
