#!/usr/bin/python3
"""An ntask worker in Python (psycopg 3, Debian python3-psycopg).

    python3 worker.py "host=127.0.0.1 dbname=app user=app_jobs" W-py-1 [queue]

The loop (docs/guide.md "Using ntask from Python / Node / Java"):
  1. claim one task in its own short transaction (autocommit);
  2. prior_outcome 'committed': an earlier attempt committed the business
     write, only report success; 'unknown': an earlier attempt may have
     called out, so ask the provider (by task key) before calling again;
  3. ntask_invoked just before the call ('stale': do not call);
  4. the call, heartbeating while it runs long;
  5. the business write and ntask_receipt in ONE transaction;
  6. ntask_transition with the error class that says what is known:
     transient (it did not take effect), permanent (never will),
     unknown (it may have: a timeout after sending).
SIGTERM: a task claimed and not yet invoked is handed back (ntask_release),
one being worked is finished, then the worker exits 0.

The "provider" here is the table example_provider (examples/schema.sql),
and the payload's "kind" says how it answers, so the test can drive every
path: ok, transient (503 on the first attempt), permanent (400), unknown
(the effect happens, the answer is lost, on the first attempt), slow (works
for 6 s, longer than the 5 s lease: heartbeats keep it).  Replace
call_provider() with your own call.
"""
import json
import signal
import sys
import time

import psycopg

LEASE = "5 seconds"
stopping = False


def on_sigterm(signum, frame):
    global stopping
    stopping = True


class Lost(Exception):
    """The task moved on without us (taken over, canceled): stop working it."""


def call_provider(conn, task, attempt, heartbeat):
    """The external call.  Returns the provider's effect id, or raises
    Transient / Permanent / Unknown (what is known about the effect)."""
    kind = task["payload"].get("kind", "ok")
    if kind == "transient" and attempt == 1:
        raise Transient({"http_status": 503})
    if kind == "permanent":
        raise Permanent({"http_status": 400})
    if kind == "slow":
        for _ in range(6):
            time.sleep(1)
            heartbeat()
    conn.execute(
        "INSERT INTO example_provider (task_key, task_id, token, worker)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (task_key) DO UPDATE SET calls = example_provider.calls + 1",
        (task["task_key"], task["task_id"], task["token"], task["worker"]))
    if kind == "unknown" and attempt == 1:
        raise Unknown({"timeout_ms": 5000})      # sent, the answer never came
    return provider_lookup(conn, task["task_key"])


def provider_lookup(conn, task_key):
    """Reconcile: did the provider see this task (its idempotency key)?"""
    row = conn.execute("SELECT token FROM example_provider WHERE task_key = %s",
                       (task_key,)).fetchone()
    return row[0] if row else None


class Transient(Exception):
    pass


class Permanent(Exception):
    pass


class Unknown(Exception):
    pass


def transition(conn, task, to_state, error_class=None, detail=None,
               outcome=None, error_stage=None):
    result, state = conn.execute(
        "SELECT result, state FROM ntask_transition(%s, %s, %s, %s, %s::jsonb,"
        " outcome => %s, error_stage => %s)",
        (task["task_id"], task["token"], to_state, error_class,
         json.dumps(detail) if detail is not None else None, outcome,
         error_stage)).fetchone()
    if result not in ("applied", "duplicate"):
        print(f"{task['worker']}: transition of {task['task_id']} answered {result}",
              file=sys.stderr)
    return result


def work(conn, task):
    tid, tok = task["task_id"], task["token"]

    def heartbeat():
        row = conn.execute("SELECT ntask_heartbeat(%s, %s)", (tid, tok)).fetchone()
        if row[0] is None:
            raise Lost()

    if task["prior_outcome"] == "committed":
        return transition(conn, task, "succeeded", outcome="already_committed")
    effect = None
    if task["prior_outcome"] == "unknown":
        effect = provider_lookup(conn, task["task_key"])
    if effect is None:
        (inv,) = conn.execute("SELECT ntask_invoked(%s, %s)", (tid, tok)).fetchone()
        if inv == "stale":
            return "stale"
        try:
            effect = call_provider(conn, task, task["attempt"], heartbeat)
        except Transient as e:
            return transition(conn, task, "retry_wait", "transient", e.args[0])
        except Permanent as e:
            return transition(conn, task, "repair_required", "permanent", e.args[0])
        except Unknown as e:
            return transition(conn, task, "retry_wait", "unknown", e.args[0],
                              error_stage="response_lost")

    # the business write, exactly once per task, with its receipt
    with conn.transaction():
        (receipt,) = conn.execute(
            "SELECT ntask_receipt(%s, %s, %s::jsonb)",
            (tid, tok, json.dumps({"provider_token": effect}))).fetchone()
        if receipt == "applied":
            conn.execute(
                "INSERT INTO example_business (task_id, token, worker, provider_token)"
                " VALUES (%s, %s, %s, %s)", (tid, tok, task["worker"], effect))
    if receipt == "stale":
        return "stale"
    if receipt == "conflict":
        return transition(conn, task, "repair_required", "permanent",
                          {"reason": "receipt conflict"})
    return transition(conn, task, "succeeded", outcome="business_committed")


def main():
    conninfo, worker = sys.argv[1], sys.argv[2]
    queue = sys.argv[3] if len(sys.argv) > 3 else "examples"
    signal.signal(signal.SIGTERM, on_sigterm)
    done = 0
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        while not stopping:
            row = conn.execute(
                "SELECT task_id, task_key, payload, attempt, token, prior_outcome"
                " FROM ntask_claim(%s, %s, 1, %s::interval)",
                (queue, worker, LEASE)).fetchone()
            if row is None:
                time.sleep(0.05)
                continue
            task = dict(zip(("task_id", "task_key", "payload", "attempt", "token",
                             "prior_outcome"), row), worker=worker)
            if stopping:
                # claimed, not started: hand it back (never invoked: it
                # does not spend an attempt)
                conn.execute("SELECT ntask_release(%s, %s)", (task["task_id"], task["token"]))
                break
            try:
                work(conn, task)
            except Lost:
                pass
            done += 1
    print(f"{worker}: {done} tasks, stopped", file=sys.stderr)


if __name__ == "__main__":
    main()
