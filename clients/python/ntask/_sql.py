"""The SQL the library sends: ntask's documented functions, nothing else.

Every statement is built from ``CALLS`` (function name -> the argument
names it passes, always in named notation), so the drift test
(tests/test_integration.py, ``test_drift``) can check each name and each
argument against ``pg_proc`` of the installed extension, and the unit tests
can check that no statement touches a table.
"""

# function -> argument names the library passes (named notation)
CALLS = {
    "ntask_enqueue": ("queue", "task_key", "payload", "run_at", "partition_key",
                      "priority", "traceparent", "depends_on", "on_parent_failed"),
    "ntask_enqueue_many": ("queue", "task_keys", "payloads", "run_at",
                           "partition_keys", "priority", "traceparent",
                           "depends_on", "on_parent_failed"),
    "ntask_result": ("queue", "task_key"),
    "ntask_claim": ("queue", "worker", "max_tasks", "lease", "wait"),
    "ntask_heartbeat": ("task_id", "token", "lease", "progress"),
    "ntask_invoked": ("task_id", "token"),
    "ntask_transition": ("task_id", "token", "to_state", "error_class", "detail",
                         "retry_at", "outcome", "error_stage", "result"),
    "ntask_release": ("task_id", "token", "delay"),
    "ntask_receipt": ("task_id", "token", "payload"),
    "ntask_checkpoint": ("task_id", "token", "step", "value"),
    "ntask_await": ("task_id", "token", "signal_key", "timeout", "on_timeout"),
    "ntask_context": ("task_id", "token"),
}

# casts for arguments whose NULL would otherwise be of unknown type
_CASTS = {
    "payload": "jsonb", "payloads": "jsonb[]", "detail": "jsonb",
    "result": "jsonb", "progress": "jsonb", "value": "jsonb",
    "run_at": "timestamptz", "retry_at": "timestamptz",
    "lease": "interval", "wait": "interval", "delay": "interval",
    "timeout": "interval", "depends_on": "text[]", "task_keys": "text[]",
    "partition_keys": "text[]",
}


def call(fn, columns="*"):
    """``SELECT <columns> FROM fn(a => %(a)s, ...)`` for all of fn's arguments."""
    args = ", ".join(
        "%s => %%(%s)s%s" % (a, a, "::" + _CASTS[a] if a in _CASTS else "")
        for a in CALLS[fn])
    return "SELECT %s FROM %s(%s)" % (columns, fn, args)


SQL = {fn: call(fn) for fn in CALLS}
# the claim also says how much of the lease is left by the server's clock,
# so the heartbeat timer needs no clock agreement with the server
SQL["ntask_claim"] = call(
    "ntask_claim",
    "c.*, extract(epoch FROM c.lease_until - clock_timestamp())::float8 AS lease_left"
) + " c"


def params(fn, **kw):
    """The parameter dict of fn: every argument, None for those not given."""
    unknown = set(kw) - set(CALLS[fn])
    if unknown:
        raise TypeError("%s has no argument %s" % (fn, ", ".join(sorted(unknown))))
    return {a: kw.get(a) for a in CALLS[fn]}
