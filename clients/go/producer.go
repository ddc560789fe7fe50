package ntask

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// EnqueueOptions are ntask_enqueue's optional arguments; the zero value
// takes every default.
type EnqueueOptions struct {
	RunAt          time.Time // zero: now
	PartitionKey   string    // "": none
	Priority       int
	DependsOn      []string // parents, "queue:key" or a key of the same queue
	OnParentFailed string   // "wait" or "cancel"; "": the queue's
	// Traceparent: a W3C traceparent; "": none given (the server's
	// ntask.traceparent setting applies). Go has no standard tracing API in
	// its standard library: take it from your tracer's current span.
	Traceparent string
}

// Enqueued is the answer of an enqueue: a new task (Created) or the existing
// one of the same key, with its state and, once it succeeded, its outcome
// and stored result.
type Enqueued struct {
	TaskID  int64
	Created bool
	State   string
	Outcome string          // "" when none
	Result  json.RawMessage // nil when none
}

// Item is one task of EnqueueMany. PartitionKey "" is none.
type Item struct {
	Key          string
	Payload      interface{}
	PartitionKey string
}

// Querier-side SQL texts (named notation: see SQLFunctions).
var (
	sqlEnqueue = `SELECT task_id, created, state, outcome, result::text FROM ntask_enqueue(
 queue => $1::text, task_key => $2::text, payload => $3::text::jsonb,
 run_at => $4::text::timestamptz, partition_key => $5::text, priority => $6::bigint::integer,
 traceparent => $7::text, depends_on => ` + sqlTextArray(8) + `, on_parent_failed => $9::text)`
	sqlEnqueueMany = `SELECT task_id, created, state, outcome, result::text FROM ntask_enqueue_many(
 queue => $1::text, task_keys => ` + sqlTextArray(2) + `, payloads => ` + sqlJSONArray(3) + `,
 run_at => $4::text::timestamptz, partition_keys => ` + sqlTextArray(5) + `, priority => $6::bigint::integer,
 traceparent => $7::text, depends_on => ` + sqlTextArray(8) + `, on_parent_failed => $9::text)`
	sqlResult = `SELECT state, outcome, result::text, finished_at FROM ntask_result(queue => $1::text, task_key => $2::text)`
)

// Enqueue calls ntask_enqueue in the caller's connection or transaction tx
// (it never opens one of its own: enqueue in the transaction of the
// business write and the outbox comes for free). payload is marshalled to
// JSON (a json.RawMessage or []byte is taken as JSON text).
func Enqueue(ctx context.Context, tx Querier, queue, key string, payload interface{}, opt EnqueueOptions) (Enqueued, error) {
	p, err := jsonArg(payload, false)
	if err != nil {
		return Enqueued{}, err
	}
	rows, err := tx.Query(ctx, sqlEnqueue, queue, key, p, timeArg(opt.RunAt), strArg(opt.PartitionKey),
		int64(opt.Priority), strArg(opt.Traceparent), textArrayArg(opt.DependsOn), strArg(opt.OnParentFailed))
	if err != nil {
		return Enqueued{}, err
	}
	out, err := scanEnqueued(rows)
	if err != nil {
		return Enqueued{}, err
	}
	if len(out) != 1 {
		return Enqueued{}, fmt.Errorf("ntask: ntask_enqueue returned %d rows", len(out))
	}
	return out[0], nil
}

// EnqueueMany calls ntask_enqueue_many: one Enqueued per item, in input
// order. opt's RunAt, Priority, DependsOn, OnParentFailed and Traceparent
// apply to every item (its PartitionKey is ignored: each Item has its own).
func EnqueueMany(ctx context.Context, tx Querier, queue string, items []Item, opt EnqueueOptions) ([]Enqueued, error) {
	if len(items) == 0 {
		return nil, nil
	}
	keys := make([]string, len(items))
	payloads := make([]json.RawMessage, len(items))
	parts := make([]*string, len(items))
	for i, it := range items {
		keys[i] = it.Key
		p, err := jsonArg(it.Payload, false)
		if err != nil {
			return nil, fmt.Errorf("ntask: items[%d]: %w", i, err)
		}
		payloads[i] = json.RawMessage(p.(string))
		if it.PartitionKey != "" {
			k := it.PartitionKey
			parts[i] = &k
		}
	}
	pj, _ := json.Marshal(payloads)
	rows, err := tx.Query(ctx, sqlEnqueueMany, queue, textArrayArg(keys), string(pj), timeArg(opt.RunAt),
		nullableTextArrayArg(parts), int64(opt.Priority), strArg(opt.Traceparent), textArrayArg(opt.DependsOn),
		strArg(opt.OnParentFailed))
	if err != nil {
		return nil, err
	}
	return scanEnqueued(rows)
}

func scanEnqueued(rows interface {
	Next() bool
	Scan(...interface{}) error
	Err() error
	Close()
}) ([]Enqueued, error) {
	defer rows.Close()
	var out []Enqueued
	for rows.Next() {
		var e Enqueued
		var outcome, result sql.NullString
		if err := rows.Scan(&e.TaskID, &e.Created, &e.State, &outcome, &result); err != nil {
			return nil, err
		}
		e.Outcome = outcome.String
		if result.Valid {
			e.Result = json.RawMessage(result.String)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// TaskResult is ntask_result's answer.
type TaskResult struct {
	State      string
	Outcome    string          // "": none
	Result     json.RawMessage // nil: none stored
	FinishedAt time.Time       // zero: not finished
}

// GetResult calls ntask_result(queue, key): the task's state, outcome and
// stored result; ok is false when there is no such task (never enqueued,
// or pruned). (Named GetResult because Result is the handler's success type.)
func GetResult(ctx context.Context, tx Querier, queue, key string) (r TaskResult, ok bool, err error) {
	rows, err := tx.Query(ctx, sqlResult, queue, key)
	if err != nil {
		return r, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var outcome, result sql.NullString
		var fin sql.NullTime
		if err = rows.Scan(&r.State, &outcome, &result, &fin); err != nil {
			return r, false, err
		}
		r.Outcome = outcome.String
		if result.Valid {
			r.Result = json.RawMessage(result.String)
		}
		if fin.Valid {
			r.FinishedAt = fin.Time
		}
		ok = true
	}
	return r, ok, rows.Err()
}
