package ntask

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Task is one claimed attempt, handed to the Handler. Its methods call
// ntask's fenced functions with the task's id and token.
type Task struct {
	ID           int64
	Queue        string
	Key          string
	Payload      json.RawMessage
	Attempt      int
	Token        int64
	PriorOutcome string // "" for a first attempt, else e.g. "unknown", "committed", "failed"
	Context      TaskContext
	Traceparent  string // the claim's context.traceparent ("" when none)
	LeaseUntil   time.Time

	leaseLeft time.Duration // the lease left when the claim returned (server clock)

	w      *Worker
	cancel context.CancelFunc

	mu      sync.Mutex
	phase   phase
	invoked bool
}

type phase int

const (
	phaseClaimed   phase = iota // claimed, not finished
	phaseHandedOff              // awaited / released: nothing to report
	phaseLost                   // stale: nothing to report
	phaseDone                   // reported
)

// TaskContext is the claim's context column, decoded.
type TaskContext struct {
	Parents     map[string]json.RawMessage `json:"parents,omitempty"`
	Checkpoints map[string]json.RawMessage `json:"checkpoints,omitempty"`
	Signal      *Signal                    `json:"signal,omitempty"`
	Traceparent string                     `json:"traceparent,omitempty"`
	// ParentsOmitted names the parents ("queue:key") whose results did not
	// fit in ntask.max_context_bytes: read them with GetResult.
	ParentsOmitted []string `json:"parents_omitted,omitempty"`
	// Deferred: the claim's context budget (ntask.max_claim_context_bytes)
	// was spent; the worker reads the whole context (ntask_context) before
	// the handler runs, so a handler never sees it set.
	Deferred bool            `json:"deferred,omitempty"`
	Raw      json.RawMessage `json:"-"` // the whole column (nil when NULL)
}

// Signal is context.signal: the signal the task awaited, or its timeout.
type Signal struct {
	Key      string          `json:"key"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	TimedOut bool            `json:"timed_out,omitempty"`
}

func decodeContext(raw []byte) (TaskContext, error) {
	var c TaskContext
	if raw == nil {
		return c, nil
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("ntask: decoding the claim's context: %w", err)
	}
	c.Raw = json.RawMessage(raw)
	return c, nil
}

// loadDeferred reads the whole context of a task whose claim deferred it
// (ntask_context). A NULL answer (the token no longer holds the task)
// returns ErrLost.
func (t *Task) loadDeferred(ctx context.Context) error {
	if !t.Context.Deferred {
		return nil
	}
	var raw *string
	err := t.w.queryRow(ctx, `SELECT ntask_context(task_id => $1::bigint, token => $2::bigint)::text`,
		[]interface{}{t.ID, t.Token}, &raw)
	if err != nil {
		return err
	}
	if raw == nil {
		t.mu.Lock()
		t.phase = phaseLost
		t.mu.Unlock()
		t.w.lost(t, "context", Stale)
		return ErrLost
	}
	c, err := decodeContext([]byte(*raw))
	if err != nil {
		return err
	}
	t.Context = c
	t.Traceparent = c.Traceparent
	return nil
}

// Decode unmarshals the payload into v.
func (t *Task) Decode(v interface{}) error { return json.Unmarshal(t.Payload, v) }

// Invoked marks the attempt as about to call out (ntask_invoked), committed
// before it returns: after it a crash leaves the attempt's outcome unknown.
// With Options.Invoked "auto" (the default) the worker has called it before
// the handler ran and this is a no-op. A stale answer returns ErrLost: do
// not call out.
func (t *Task) Invoked(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase != phaseClaimed {
		return ErrLost
	}
	if t.invoked {
		return nil
	}
	var a string
	err := t.w.queryRow(ctx, `SELECT ntask_invoked(task_id => $1::bigint, token => $2::bigint)`, []interface{}{t.ID, t.Token}, &a)
	if err != nil {
		return err
	}
	if Answer(a) == Stale {
		t.phase = phaseLost
		cancel := t.cancel
		t.mu.Unlock()
		t.w.lost(t, "invoked", Stale)
		if cancel != nil {
			cancel()
		}
		t.mu.Lock()
		return ErrLost
	}
	t.invoked = true
	return nil
}

// Heartbeat extends the lease now (ntask_heartbeat with the worker's
// Lease), storing progress if it is not nil. The worker's timer does this on
// its own; a NULL answer returns ErrLost and cancels the handler's context.
func (t *Task) Heartbeat(ctx context.Context, progress interface{}) error {
	p, err := jsonArg(progress, true)
	if err != nil {
		return err
	}
	var until sql.NullTime
	err = t.w.queryRow(ctx, `SELECT ntask_heartbeat(task_id => $1::bigint, token => $2::bigint, lease => `+sqlInterval(3)+`, progress => $4::text::jsonb)`,
		[]interface{}{t.ID, t.Token, intervalArg(t.w.opt.Lease), p}, &until)
	if err != nil {
		return err
	}
	if !until.Valid {
		t.w.heartbeatLost(t)
		return ErrLost
	}
	t.mu.Lock()
	t.LeaseUntil = until.Time
	t.mu.Unlock()
	return nil
}

// Progress stores the attempt's progress (a heartbeat with progress).
func (t *Task) Progress(ctx context.Context, value interface{}) error {
	if value == nil {
		value = json.RawMessage("null")
	}
	return t.Heartbeat(ctx, value)
}

// Checkpoint records that step is done with value (ntask_checkpoint). Call
// it with tx, the step's business transaction, so both commit together; tx
// nil runs it on the worker's pool on its own.
func (t *Task) Checkpoint(ctx context.Context, tx Querier, step string, value interface{}) (Answer, error) {
	v, err := jsonArg(value, false)
	if err != nil {
		return "", err
	}
	return t.fenced(ctx, tx, "checkpoint", `SELECT ntask_checkpoint(task_id => $1::bigint, token => $2::bigint, step => $3::text, value => $4::text::jsonb)`,
		t.ID, t.Token, step, v)
}

// Receipt writes the commit receipt (ntask_receipt) in tx, the caller's
// business transaction: Applied (commit it), Duplicate (this content was
// committed before: roll back and count it done), Conflict, or Stale (the
// task moved on: roll back). A stale or conflict answer is surfaced
// (counter, OnLost) and also returned; the handler decides about its
// transaction.
func (t *Task) Receipt(ctx context.Context, tx Querier, payload interface{}) (Answer, error) {
	if tx == nil {
		return "", fmt.Errorf("ntask: Receipt needs the business transaction")
	}
	p, err := jsonArg(payload, false)
	if err != nil {
		return "", err
	}
	return t.fenced(ctx, tx, "receipt", `SELECT ntask_receipt(task_id => $1::bigint, token => $2::bigint, payload => $3::text::jsonb)`,
		t.ID, t.Token, p)
}

// Await parks the task until the queue's signal signalKey is sent (or
// timeout, if > 0, runs out; ntask_await with on_timeout 'ready'). On
// Applied or Duplicate the task is handed back: return Awaiting (or
// anything: nothing is reported).
func (t *Task) Await(ctx context.Context, signalKey string, timeout time.Duration) (Answer, error) {
	a, err := t.fenced(ctx, nil, "await", `SELECT ntask_await(task_id => $1::bigint, token => $2::bigint, signal_key => $3::text, timeout => `+sqlInterval(4)+`)`,
		t.ID, t.Token, signalKey, intervalArg(timeout))
	if err == nil && (a == Applied || a == Duplicate) {
		t.handOff()
	}
	return a, err
}

// Release hands the task back (ntask_release), due again after delay (0:
// now). On Applied or Duplicate nothing is reported for it; the handler
// then returns (Awaiting, or anything).
func (t *Task) Release(ctx context.Context, delay time.Duration) (Answer, error) {
	a, err := t.fenced(ctx, nil, "release", `SELECT ntask_release(task_id => $1::bigint, token => $2::bigint, delay => `+sqlInterval(3)+`)`,
		t.ID, t.Token, intervalArg(delay))
	if err == nil && (a == Applied || a == Duplicate) {
		t.handOff()
		t.w.stats.released.Add(1)
	}
	return a, err
}

func (t *Task) handOff() {
	t.mu.Lock()
	if t.phase == phaseClaimed {
		t.phase = phaseHandedOff
	}
	t.mu.Unlock()
}

// fenced runs a call whose answer is an Answer; stale and conflict are
// surfaced (Stale also marks the task lost and cancels the handler).
func (t *Task) fenced(ctx context.Context, tx Querier, op, q string, args ...interface{}) (Answer, error) {
	var a string
	var err error
	if tx == nil {
		err = t.w.queryRow(ctx, q, args, &a)
	} else {
		err = queryRowOn(ctx, tx, q, args, &a)
	}
	if err != nil {
		return "", err
	}
	switch Answer(a) {
	case Stale:
		t.mu.Lock()
		t.phase = phaseLost
		cancel := t.cancel
		t.mu.Unlock()
		t.w.lost(t, op, Stale)
		if cancel != nil {
			cancel()
		}
	case Conflict:
		t.w.lost(t, op, Conflict)
	}
	return Answer(a), nil
}

func queryRowOn(ctx context.Context, q Querier, query string, args []interface{}, dest ...interface{}) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return fmt.Errorf("ntask: no row from %.40s", query)
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}
