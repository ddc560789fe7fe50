"""What a handler returns or raises, and how each maps to ``ntask_transition``.

=================================  ===============================================
handler                            report
=================================  ===============================================
returns ``None`` / ``Success(..)``  ``succeeded`` with ``outcome`` and ``result``
raises/returns ``Transient(..)``    ``retry_wait``, class ``transient`` (``retry_at``)
raises/returns ``Permanent(..)``    ``repair_required``, class ``permanent``
raises/returns ``Unknown(..)``      ``retry_wait``, class ``unknown``
raises anything else                ``unknown`` if the attempt was marked invoked,
                                    else ``transient``
raises ``Lost``                     nothing (the token holds nothing any more)
returns ``AWAITING``                nothing (after ``task.await_signal``)
=================================  ===============================================
"""


class Success:
    """The handler's work is done: ``succeeded`` with an ``outcome`` label
    naming the boundary reached (default ``completed``) and an optional JSON
    ``result`` stored for ``ntask_result`` and duplicate enqueues."""

    __slots__ = ("outcome", "result")

    def __init__(self, outcome=None, result=None):
        self.outcome = outcome
        self.result = result

    def __repr__(self):
        return "Success(outcome=%r, result=%r)" % (self.outcome, self.result)


class TaskError(Exception):
    """Base of the typed failures; ``message`` goes into the attempt's detail."""

    to_state = None
    error_class = None

    def __init__(self, message="", detail=None):
        super().__init__(message)
        self.message = message
        self.detail = detail


class Transient(TaskError):
    """It did not take effect and may work later: ``retry_wait``, class
    ``transient``, at ``retry_at`` (a datetime) or after the queue's backoff."""

    to_state = "retry_wait"
    error_class = "transient"

    def __init__(self, message="", retry_at=None, detail=None):
        super().__init__(message, detail)
        self.retry_at = retry_at


class Permanent(TaskError):
    """It will never work as is: ``repair_required``, class ``permanent``."""

    to_state = "repair_required"
    error_class = "permanent"


class Unknown(TaskError):
    """The call may have taken effect (e.g. a timeout after sending):
    ``retry_wait``, class ``unknown``; the next attempt reconciles first."""

    to_state = "retry_wait"
    error_class = "unknown"


class Lost(Exception):
    """The task's token no longer holds it (taken over, canceled, ended): stop
    working on it.  Raised by ``Task.invoked`` on ``stale`` and by the task's
    methods once the task is lost; the worker never reports such a task."""

    def __init__(self, task_id=None, call=None, answer=None):
        super().__init__("task %s lost (%s answered %s)" % (task_id, call, answer))
        self.task_id = task_id
        self.call = call
        self.answer = answer


class _Marker:
    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return self._name


#: returned by a handler after ``task.await_signal(...)``: no report.
AWAITING = _Marker("AWAITING")
#: returned by a reconcile function: the earlier attempt did not take
#: effect, run the handler (``None`` means the same).
NOT_DONE = _Marker("NOT_DONE")
