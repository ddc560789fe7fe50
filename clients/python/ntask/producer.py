"""Producer calls: enqueue in the caller's transaction.

Each function takes the caller's psycopg ``Connection`` or ``Cursor`` and
runs one statement on it: it never commits, never opens a connection of its
own, so the task lands (or not) with the caller's business write.
"""

from collections import namedtuple
from datetime import datetime

from psycopg.types.json import Jsonb

from . import _otel
from ._sql import SQL, params

Enqueued = namedtuple("Enqueued", "task_id created state outcome result")
Enqueued.__doc__ = """One enqueued task: ``task_id``, ``created`` (False for a
duplicate of an existing key), ``state``, and for a duplicate of a task that
succeeded its ``outcome`` and stored ``result``."""

TaskResult = namedtuple("TaskResult", "state outcome result finished_at")
TaskResult.__doc__ = """``ntask_result``: the task's ``state``, its succeeded
attempt's ``outcome`` and stored ``result``, and when it ``finished_at``."""


def _run(tx, sql, p):
    # a Connection's execute() returns a new cursor, a Cursor's returns itself
    return tx.execute(sql, p)


def _traceparent(traceparent):
    return _otel.current_traceparent() if traceparent is None else traceparent


def _check_run_at(run_at):
    if run_at is not None and not isinstance(run_at, datetime):
        raise TypeError("run_at must be a datetime (timezone-aware), not %r" % type(run_at).__name__)


def enqueue(tx, queue, key, payload=None, *, run_at=None, partition_key=None,
            priority=0, depends_on=None, on_parent_failed=None, traceparent=None):
    """``ntask_enqueue`` on the caller's connection or cursor ``tx``.

    ``payload`` is any JSON value (``None``: ``{}``); ``depends_on`` a list
    of ``"queue:key"`` (or keys of the same queue); ``traceparent`` defaults
    to the caller's current OpenTelemetry span when OpenTelemetry is
    importable (else the server's ``ntask.traceparent`` setting); pass
    ``""`` for none.  Returns an :class:`Enqueued`.  Idempotent on
    (queue, key): the same key with another payload raises the server's
    ``NT001``.
    """
    _check_run_at(run_at)
    row = _run(tx, SQL["ntask_enqueue"], params(
        "ntask_enqueue", queue=queue, task_key=key,
        payload=Jsonb({} if payload is None else payload), run_at=run_at,
        partition_key=partition_key, priority=priority,
        traceparent=_traceparent(traceparent),
        depends_on=None if depends_on is None else list(depends_on),
        on_parent_failed=on_parent_failed)).fetchone()
    return Enqueued(*row)


def enqueue_many(tx, queue, items, *, run_at=None, priority=0, depends_on=None,
                 on_parent_failed=None, traceparent=None):
    """``ntask_enqueue_many``: one statement for many tasks of ``queue``.

    ``items`` is a list of dicts ``{"key": ..., "payload": ...,
    "partition_key": ...}`` (payload and partition_key optional) or of
    ``(key, payload)`` pairs; ``run_at``, ``priority``, ``depends_on``,
    ``on_parent_failed`` and ``traceparent`` apply to all.  Returns one
    :class:`Enqueued` per item, in input order.
    """
    _check_run_at(run_at)
    keys, payloads, parts = [], [], []
    for it in items:
        if isinstance(it, dict):
            extra = set(it) - {"key", "payload", "partition_key"}
            if extra:
                raise TypeError("enqueue_many items take key, payload, partition_key; not %s"
                                % ", ".join(sorted(extra)))
            keys.append(it["key"])
            payloads.append(it.get("payload"))
            parts.append(it.get("partition_key"))
        else:
            key, payload = it
            keys.append(key)
            payloads.append(payload)
            parts.append(None)
    if not keys:
        return []
    cur = _run(tx, SQL["ntask_enqueue_many"], params(
        "ntask_enqueue_many", queue=queue, task_keys=keys,
        payloads=[Jsonb({} if p is None else p) for p in payloads], run_at=run_at,
        partition_keys=parts if any(p is not None for p in parts) else None,
        priority=priority, traceparent=_traceparent(traceparent),
        depends_on=None if depends_on is None else list(depends_on),
        on_parent_failed=on_parent_failed))
    return [Enqueued(*r) for r in cur.fetchall()]


def result(tx, queue, key):
    """``ntask_result``: a :class:`TaskResult`, or None when there is no such
    task (never enqueued, or pruned)."""
    row = _run(tx, SQL["ntask_result"], params("ntask_result", queue=queue,
                                               task_key=key)).fetchone()
    return TaskResult(*row) if row else None
