"""OpenTelemetry, if it is importable (the ``otel`` extra); else nothing."""

import contextlib
import re

try:  # pragma: no cover - depends on the environment
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator as _Propagator)
except ImportError:  # the library works without it
    _trace = None
    _Propagator = None

TRACEPARENT_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def available():
    return _trace is not None


def current_traceparent():
    """The W3C traceparent of the caller's current span, or None (no
    OpenTelemetry, or no valid span)."""
    if _trace is None:
        return None
    ctx = _trace.get_current_span().get_span_context()
    if not ctx or not ctx.is_valid:
        return None
    return "00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, int(ctx.trace_flags))


def handler_span(task):
    """A context manager: the handler's span, child of the claim's
    traceparent, when OpenTelemetry is importable; else a no-op."""
    if _trace is None or not task.traceparent:
        return contextlib.nullcontext()
    parent = _Propagator().extract({"traceparent": task.traceparent})
    tracer = _trace.get_tracer("ntask")
    return tracer.start_as_current_span(
        "ntask %s" % task.queue, context=parent,
        attributes={"ntask.task_id": task.id, "ntask.task_key": task.key,
                    "ntask.attempt": task.attempt, "ntask.token": task.token})
