#!/usr/bin/python3
"""The N9 push service on ntask's Python library (clients/python).

    export DATABASE_URL="host=127.0.0.1 dbname=app user=app"
    export PUSH_PROVIDER_URL=http://127.0.0.1:8099  # python3 examples/fake_provider.py
    PYTHONPATH=clients/python python3 examples/python/push_service.py produce --count 20
    PYTHONPATH=clients/python python3 examples/python/push_service.py work --name W1

produce: writes chat messages and, in the same transaction, one notify
task each (queue 'push', key notify:<user>:<device>:<message>:v1); a key
that exists already is not enqueued twice (created = False).

work: a Worker of the library on queue 'push'.  For each task it reads the
message, marks the attempt invoked, sends it to the provider with the task
key as the Idempotency-Key, and writes push_delivery with the task's
receipt in one transaction.  What the provider answers becomes the report:
429 transient (retry at its Retry-After), 410 permanent (repair), a 5xx or
no answer unknown (it may have taken effect).  An attempt that follows an
unknown one (prior_outcome 'unknown': the answer was lost, or a worker
died after invoked) first asks the provider by the idempotency key
(reconcile) and sends only if it has not got it.  SIGTERM or Ctrl-C:
graceful (running sends finish, what was never invoked is released);
a second one: at once.
"""
import argparse
import contextlib
import datetime
import json
import os
import queue
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

import psycopg

import ntask

QUEUE = "push"
DSN = os.environ.get("DATABASE_URL", "")
PROVIDER = os.environ.get("PUSH_PROVIDER_URL", "http://127.0.0.1:8099")
SEND_TIMEOUT = 5.0                  # seconds; the fake provider's d-slow takes 3
# the fake provider's test devices (examples/fake_provider.py): how a send goes
DEVICES = ["d-slow-1", "d-ok-1", "d-429-1", "d-ok-2", "d-500-1",
           "d-ok-3", "d-hang-1", "d-ok-4", "d-ok-5", "d-gone-1"]


def connect():
    # prepare_threshold=None: no named prepared statements (pgbouncer in
    # transaction pooling mode hands each transaction another server connection)
    return psycopg.connect(DSN, autocommit=True, prepare_threshold=None)


# --------------------------------------------------------------- producer

def produce(count, start):
    created = 0
    with connect() as conn:
        for n in range(start, start + count):
            msg, user, device = "m-%d" % n, "u-%d" % (n % 3), DEVICES[(n - 1) % len(DEVICES)]
            key = "notify:%s:%s:%s:v1" % (user, device, msg)
            with conn.transaction():        # the message and its task: both or neither
                conn.execute("INSERT INTO push_message (id, user_id, device, body)"
                             " VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                             (msg, user, device, "hello %s, message %d" % (user, n)))
                e = ntask.enqueue(conn, QUEUE, key, {"message": msg, "version": 1, "device": device},
                                  partition_key=device)
            created += e.created
    print("produce: %d messages, %d tasks created, %d already there" % (count, created, count - created))


# --------------------------------------------------------------- the provider

def send(key, device, body):
    """POST the push; the typed failure says what is known of its effect."""
    req = urllib.request.Request(
        PROVIDER + "/v1/push", method="POST",
        data=json.dumps({"device": device, "body": body}).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=SEND_TIMEOUT) as r:
            return json.load(r)["id"]
    except urllib.error.HTTPError as e:
        if e.code == 429:                   # not taken; the provider says when
            wait = int(e.headers.get("Retry-After") or 1)
            raise ntask.Transient("429 rate limited", retry_at=datetime.datetime.now(
                datetime.timezone.utc) + datetime.timedelta(seconds=wait))
        if e.code in (400, 404, 410):       # never will be
            raise ntask.Permanent("%d from the provider" % e.code)
        raise ntask.Unknown("%d from the provider: it may have taken effect" % e.code)
    except urllib.error.URLError as e:
        if isinstance(e.reason, ConnectionRefusedError):
            raise ntask.Transient("provider unreachable: not sent")
        raise ntask.Unknown("no answer (%s): it may have taken effect" % e.reason)
    except (socket.timeout, TimeoutError, ConnectionError) as e:
        raise ntask.Unknown("no answer (%s): it may have taken effect" % e)


def lookup(key):
    """The provider's id for this idempotency key, or None."""
    url = PROVIDER + "/v1/push/" + urllib.parse.quote(key, safe="")
    try:
        with urllib.request.urlopen(url, timeout=SEND_TIMEOUT) as r:
            return json.load(r)["id"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise                               # not known: the attempt stays unknown


# --------------------------------------------------------------- worker

IDLE = psycopg.pq.TransactionStatus.IDLE
FREE = queue.LifoQueue()     # idle connections for the handlers' own statements


@contextlib.contextmanager
def db():
    """A connection for a handler (at most one per running handler; with
    psycopg_pool installed, a ConnectionPool does this and more)."""
    try:
        conn = FREE.get_nowait()
    except queue.Empty:
        conn = connect()
    try:
        yield conn
    finally:
        if conn.closed or conn.info.transaction_status != IDLE:
            conn.close()
        else:
            FREE.put(conn)


def record(task, provider_id, via):
    """The business write with its receipt, in one transaction."""
    with db() as conn, conn.transaction() as tx:
        answer = task.receipt(conn, {"provider_id": provider_id})
        if answer == "applied":
            conn.execute("INSERT INTO push_delivery (task_key, message_id, provider_id, via,"
                         " attempt, token, worker) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                         (task.key, task.payload["message"], provider_id, via,
                          task.attempt, task.token, WORKER_NAME))
        elif answer != "duplicate":
            raise psycopg.Rollback(tx)
    if answer == "stale":
        raise ntask.Lost(task.id, "receipt", answer)   # not ours any more: report nothing
    if answer == "conflict":
        raise ntask.Permanent("receipt conflict: another delivery was recorded")
    return ntask.Success("provider_accepted", {"provider_id": provider_id, "via": via})


def say(task, what):
    print("%s: %s attempt %d: %s" % (WORKER_NAME, task.key, task.attempt, what), flush=True)


def reconcile(task):
    """prior_outcome 'unknown': an earlier attempt may have sent it."""
    provider_id = lookup(task.key)
    if provider_id is None:
        say(task, "reconcile: the provider has not got it, sending")
        return ntask.NOT_DONE
    say(task, "reconcile: the provider has it (%s), not sending again" % provider_id)
    return record(task, provider_id, "reconcile")


def handle(task):
    if task.prior_outcome == "committed":
        say(task, "an earlier attempt committed its delivery")
        return ntask.Success("provider_accepted", {"via": "committed"})
    p = task.payload
    with db() as conn:
        row = conn.execute("SELECT body FROM push_message WHERE id = %s AND version = %s",
                           (p["message"], p["version"])).fetchone()
    if row is None:
        raise ntask.Permanent("message %s v%s is gone" % (p["message"], p["version"]))
    task.invoked()                          # from here a crash is 'unknown', not 'not sent'
    try:
        provider_id = send(task.key, p["device"], row[0])
    except ntask.TaskError as e:
        say(task, "%s: %s" % (e.error_class, e.message))
        raise
    say(task, "sent, provider id %s" % provider_id)
    return record(task, provider_id, "send")


def on_lost(task, call, answer):
    say(task, "lost (%s answered %s): not reporting" % (call, answer))


WORKER_NAME = None


def work(name, concurrency):
    global WORKER_NAME
    w = ntask.Worker(DSN, QUEUE, handle, name=name, concurrency=concurrency, wait=5,
                     shutdown_grace=10, invoked="manual", reconcile=reconcile,
                     on_lost=on_lost)
    WORKER_NAME = w.name
    print("%s: working queue %s, provider %s" % (w.name, QUEUE, PROVIDER), flush=True)
    ntask.run_until_signal(w)               # SIGTERM / Ctrl-C: graceful; a second: at once
    print("%s: stopped %s" % (w.name, json.dumps(w.counters.snapshot(), sort_keys=True)), flush=True)


def main():
    ap = argparse.ArgumentParser(description="the N9 push service on ntask")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="write messages and their notify tasks")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--start", type=int, default=1)
    w = sub.add_parser("work", help="run a worker until SIGTERM")
    w.add_argument("--name")
    w.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    if not DSN:
        sys.exit("set DATABASE_URL")
    if args.cmd == "produce":
        produce(args.count, args.start)
    else:
        work(args.name, args.concurrency)


if __name__ == "__main__":
    main()
