package ntask

import (
	"errors"
	"fmt"
	"time"
)

// Answer is the text answer of a fenced call (ntask_invoked, ntask_receipt,
// ntask_checkpoint, ntask_await, ntask_release, ntask_transition).
type Answer string

// The answers of ntask's fenced calls (docs/reference.md, ntask_transition).
const (
	Applied   Answer = "applied"   // this token holds the task; the write happened
	Duplicate Answer = "duplicate" // this token made this same write before
	Conflict  Answer = "conflict"  // this token made a different write before
	Stale     Answer = "stale"     // the task moved on: the write is refused
)

// ErrLost is returned by the Task's methods when the token no longer holds
// the task (a stale answer, a NULL heartbeat): stop the work, it has been or
// will be taken over. The handler's context is cancelled too.
var ErrLost = errors.New("ntask: the task's lease was lost (stale token)")

// Awaiting is what a handler returns after Task.Await or Task.Release: the
// task was handed back, nothing is reported.
var Awaiting = errors.New("ntask: the task awaits a signal or was released (no report)")

// ErrorClass is the error class of a failed attempt.
type ErrorClass string

// The error classes ntask_transition knows.
const (
	ClassTransient ErrorClass = "transient"
	ClassPermanent ErrorClass = "permanent"
	ClassUnknown   ErrorClass = "unknown"
)

// TaskError is a classified failure a handler returns (or wraps): see
// Transient, Permanent and Unknown. Any other error is unknown if the attempt
// was marked invoked, else transient.
type TaskError struct {
	Class   ErrorClass
	Message string
	RetryAt time.Time // Transient only; zero: the queue's backoff
}

func (e *TaskError) Error() string { return fmt.Sprintf("ntask: %s: %s", e.Class, e.Message) }

// Transient: the attempt failed and did not take effect; retry (at retryAt if
// it is not zero, else after the queue's backoff). ntask_transition to
// 'retry_wait', class 'transient'.
func Transient(message string, retryAt time.Time) error {
	return &TaskError{Class: ClassTransient, Message: message, RetryAt: retryAt}
}

// Permanent: the attempt failed and retrying will not help.
// ntask_transition to 'repair_required', class 'permanent'.
func Permanent(message string) error {
	return &TaskError{Class: ClassPermanent, Message: message}
}

// Unknown: the call may have taken effect (a timeout after the request was
// sent). ntask_transition to 'retry_wait', class 'unknown': the next attempt
// sees PriorOutcome "unknown" and reconciles.
func Unknown(message string) error {
	return &TaskError{Class: ClassUnknown, Message: message}
}

// Result is a handler's success: the outcome label (default "completed") and
// the result stored for ntask_result and duplicate enqueues (nil: none).
// The zero Result is a plain success.
type Result struct {
	Outcome string
	Value   interface{}
}

// Success builds a Result with an outcome label and a stored result.
func Success(outcome string, value interface{}) Result {
	return Result{Outcome: outcome, Value: value}
}

// report is what the worker sends for a finished handler.
type report struct {
	toState string
	class   ErrorClass // "" for success
	message string
	retryAt time.Time
	outcome string
	value   interface{}
	none    bool // nothing to report (awaiting / released / lost)
}

// classify maps a handler's answer to its report (CLIENTS_API "Outcome
// mapping"): nil error is success; a *TaskError (also wrapped) its class;
// anything else unknown if invoked was marked, else transient.
func classify(res Result, err error, invoked bool) report {
	if err == nil {
		return report{toState: "succeeded", outcome: res.Outcome, value: res.Value}
	}
	if errors.Is(err, Awaiting) || errors.Is(err, ErrLost) {
		return report{none: true}
	}
	var te *TaskError
	if errors.As(err, &te) {
		switch te.Class {
		case ClassPermanent:
			return report{toState: "repair_required", class: ClassPermanent, message: te.Message}
		case ClassUnknown:
			return report{toState: "retry_wait", class: ClassUnknown, message: te.Message}
		default:
			return report{toState: "retry_wait", class: ClassTransient, message: te.Message, retryAt: te.RetryAt}
		}
	}
	if invoked {
		return report{toState: "retry_wait", class: ClassUnknown, message: err.Error()}
	}
	return report{toState: "retry_wait", class: ClassTransient, message: err.Error()}
}

// SQLFunctions lists every ntask SQL function this library calls, with the
// argument names it passes (in named notation, so a renamed argument fails
// the call, and the drift test finds it in pg_proc first).
var SQLFunctions = map[string][]string{
	"ntask_enqueue":      {"queue", "task_key", "payload", "run_at", "partition_key", "priority", "traceparent", "depends_on", "on_parent_failed"},
	"ntask_enqueue_many": {"queue", "task_keys", "payloads", "run_at", "partition_keys", "priority", "traceparent", "depends_on", "on_parent_failed"},
	"ntask_result":       {"queue", "task_key"},
	"ntask_claim":        {"queue", "worker", "max_tasks", "lease", "wait"},
	"ntask_heartbeat":    {"task_id", "token", "lease", "progress"},
	"ntask_invoked":      {"task_id", "token"},
	"ntask_transition":   {"task_id", "token", "to_state", "error_class", "detail", "retry_at", "outcome", "result"},
	"ntask_release":      {"task_id", "token", "delay"},
	"ntask_receipt":      {"task_id", "token", "payload"},
	"ntask_checkpoint":   {"task_id", "token", "step", "value"},
	"ntask_await":        {"task_id", "token", "signal_key", "timeout"},
	"ntask_context":      {"task_id", "token"},
}
