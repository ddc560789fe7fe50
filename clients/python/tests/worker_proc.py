"""A worker process for the signal scenarios of test_integration.py.

    python3 worker_proc.py DSN QUEUE NAME '{"lease": 2, ...}'

The JSON holds Worker options.  The handler acts by the task key's prefix:
  slow-<secs>:...  mark invoked (also in manual mode), call the fake
                   provider (py_provider: one row per queue/key, calls counted,
                   committed at once), print "INVOKED <key>", work <secs>
                   (stopping early when the task is lost), return
                   Success("sent")
  prep:...         print "STARTED <key>" and prepare until the task is lost
                   (never invoked), then try to invoke (raises Lost)
The reconcile function looks the key up at the fake provider: found ->
Success("reconciled").  on_lost prints "LOST <call> <answer>".  At exit it
prints "COUNTERS <json>".  SIGTERM / SIGINT: run_until_signal.
"""

import json
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

import ntask  # noqa: E402


_say = threading.Lock()


def say(*a):
    # one write per line under a lock: the handler's and the heartbeat's
    # threads print at the same moment (print() writes piece by piece)
    line = " ".join(str(x) for x in a) + "\n"
    with _say:
        sys.stdout.write(line)
        sys.stdout.flush()


def main():
    dsn, queue, name, opts = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])

    def provider_call(key):
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("INSERT INTO py_provider (task_key) VALUES (%s) ON CONFLICT (task_key)"
                      " DO UPDATE SET calls = py_provider.calls + 1", (key,))

    def handler(task):
        if task.key.startswith("prep:"):
            say("STARTED", task.key)
            task.lost.wait(60)
            task.invoked()
            raise AssertionError("invoked after the release must raise Lost")
        secs = float(task.key.split(":")[0].split("-")[1])
        if not task.is_invoked:
            task.invoked()
        provider_call(task.queue + "/" + task.key)
        say("INVOKED", task.key)
        if task.lost.wait(secs):
            say("HANDLER-SAW-LOST", task.key)
        return ntask.Success("sent")

    def reconcile(task):
        with psycopg.connect(dsn, autocommit=True) as c:
            row = c.execute("SELECT calls FROM py_provider WHERE task_key = %s",
                            (task.queue + "/" + task.key,)).fetchone()
        say("RECONCILE", task.key, task.prior_outcome, row)
        return ntask.Success("reconciled") if row else ntask.NOT_DONE

    w = ntask.Worker(dsn, queue, handler, name=name, reconcile=reconcile,
                     on_lost=lambda t, call, answer: say("LOST", call, answer), **opts)
    say("READY", os.getpid())
    ntask.run_until_signal(w)
    say("COUNTERS", json.dumps(w.counters.snapshot()))


if __name__ == "__main__":
    main()
