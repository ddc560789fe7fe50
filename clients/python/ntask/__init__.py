"""ntask for Python: the fenced worker loop and the producer calls.

Producer (in the caller's transaction): :func:`enqueue`,
:func:`enqueue_many`, :func:`result`.  Worker: :class:`Worker` (with
:func:`run_until_signal`), the handler's :class:`Task`, and what a handler
returns or raises: :class:`Success`, :class:`Transient`,
:class:`Permanent`, :class:`Unknown`, :data:`AWAITING`; :class:`Lost` when
the task's token no longer holds it.  Guide: docs/clients/python.md.
"""

from .outcomes import AWAITING, NOT_DONE, Lost, Permanent, Success, TaskError, Transient, Unknown
from .producer import Enqueued, TaskResult, enqueue, enqueue_many, result
from .worker import COUNTERS, Counters, Task, Worker, default_name, run_until_signal

__version__ = "1.1.0"

__all__ = [
    "AWAITING", "NOT_DONE", "COUNTERS", "Counters", "Enqueued", "Lost", "Permanent",
    "Success", "Task", "TaskError", "TaskResult", "Transient", "Unknown", "Worker",
    "default_name", "enqueue", "enqueue_many", "result", "run_until_signal",
]
