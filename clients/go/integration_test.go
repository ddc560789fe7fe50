package ntask

// Integration tests against a real cluster with ntask, run by
// t/040_client_go.pl, which passes:
//   NTASK_TEST_DSN          the server (a superuser; ntask created)
//   NTASK_TEST_BOUNCER_DSN  pgbouncer in transaction pooling mode in front of it
//   NTASK_TEST_PGDATA, NTASK_TEST_PGLOG  for pg_ctl restart (TestIntegrationServerRestart)
// Without NTASK_TEST_DSN they skip. Each test uses queues of its own.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"
	_ "github.com/jackc/pgx/v4/stdlib"
)

func dsn(t *testing.T) string {
	d := os.Getenv("NTASK_TEST_DSN")
	if d == "" {
		t.Skip("NTASK_TEST_DSN is not set")
	}
	return d
}

func connect(t *testing.T, d string) *pgxpool.Pool {
	t.Helper()
	p, err := Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func exec1(t *testing.T, p *pgxpool.Pool, q string, args ...interface{}) {
	t.Helper()
	if _, err := p.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func str(t *testing.T, p *pgxpool.Pool, q string, args ...interface{}) string {
	t.Helper()
	var s sql.NullString
	if err := p.QueryRow(context.Background(), "SELECT ("+q+")::text", args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s.String
}

// poll until cond or the timeout (generous: a loaded 2-core machine)
func poll(t *testing.T, what string, secs int, cond func() bool) {
	t.Helper()
	until := time.Now().Add(time.Duration(secs) * time.Second)
	for time.Now().Before(until) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out (%d s) waiting for %s", secs, what)
}

func queue(t *testing.T, p *pgxpool.Pool, name, args string) {
	t.Helper()
	if args != "" {
		args = ", " + args
	}
	exec1(t, p, "SELECT count(*) FROM ntask_queue_set('"+name+"', backoff_base => '1 millisecond', backoff_max => '1 millisecond'"+args+")")
}

func run(t *testing.T, w *Worker) chan error {
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		w.Stop()
		w.Stop()
		<-done
	})
	return done
}

func stopped(t *testing.T, w *Worker, done chan error) error {
	t.Helper()
	w.Stop()
	select {
	case err := <-done:
		done <- err // for the cleanup
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not stop within 60 s")
	}
	return nil
}

type quiet struct{ t *testing.T }

func (q quiet) Printf(f string, a ...interface{}) { q.t.Logf(f, a...) }

// A claim refused for good (an unknown queue) ends Run with the server's
// error instead of retrying forever.
func TestIntegrationUnknownQueue(t *testing.T) {
	p := connect(t, dsn(t))
	w, _ := NewWorker(p, "go_no_such_queue", func(ctx context.Context, tk *Task) (Result, error) {
		return Result{}, nil
	}, Options{Wait: time.Second, Logger: quiet{t}})
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "42704") {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		w.Stop()
		w.Stop()
		t.Fatal("Run did not return")
	}
}

// The drift test: every function the library calls exists in pg_proc with
// every argument name it passes.
func TestIntegrationDrift(t *testing.T) {
	p := connect(t, dsn(t))
	for fn, args := range SQLFunctions {
		var names []string
		err := p.QueryRow(context.Background(), `SELECT array_agg(n ORDER BY o) FROM pg_proc,
			unnest(proargnames, coalesce(proargmodes, array_fill('i'::"char", array[cardinality(proargnames)]))) WITH ORDINALITY a(n, m, o)
			WHERE proname = $1 AND m IN ('i', 'b', 'v')
			  AND pronamespace = (SELECT extnamespace FROM pg_extension WHERE extname = 'ntask')`, fn).Scan(&names)
		if err != nil || len(names) == 0 {
			t.Errorf("%s: not in pg_proc (%v)", fn, err)
			continue
		}
		for _, a := range args {
			found := false
			for _, n := range names {
				found = found || n == a
			}
			if !found {
				t.Errorf("%s has no argument %s (it has %v)", fn, a, names)
			}
		}
	}
}

func TestIntegrationProducer(t *testing.T) {
	d := dsn(t)
	p := connect(t, d)
	ctx := context.Background()
	queue(t, p, "go_prod", "")
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Enqueue(ctx, tx, "go_prod", "p1", map[string]int{"n": 1}, EnqueueOptions{Priority: 5, PartitionKey: "u1",
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	if err != nil || !e.Created || e.State != "ready" || e.TaskID == 0 {
		t.Fatalf("enqueue: %+v %v", e, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := str(t, p, `SELECT count(*) FROM ntask.task WHERE queue = 'go_prod'`); n != "0" {
		t.Fatalf("the enqueue did not run in the caller's transaction: %s tasks after rollback", n)
	}
	e, err = Enqueue(ctx, p, "go_prod", "p1", map[string]int{"n": 1}, EnqueueOptions{Priority: 5, PartitionKey: "u1",
		RunAt: time.Now().Add(-time.Minute), Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	if err != nil || !e.Created {
		t.Fatalf("enqueue: %+v %v", e, err)
	}
	if got := str(t, p, `SELECT priority || ' ' || partition_key || ' ' || traceparent FROM ntask.task WHERE task_id = $1`, e.TaskID); got != "5 u1 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("stored: %s", got)
	}
	// a child with depends_on waits
	c, err := Enqueue(ctx, p, "go_prod", "child", nil, EnqueueOptions{DependsOn: []string{"p1"}, OnParentFailed: "cancel"})
	if err != nil || c.State != "waiting" {
		t.Fatalf("child: %+v %v", c, err)
	}
	// work p1 with a result: the child gets it in context.parents
	var parents map[string]json.RawMessage
	var mu sync.Mutex
	w, _ := NewWorker(p, "go_prod", func(ctx context.Context, tk *Task) (Result, error) {
		if tk.Key == "p1" {
			if tk.Traceparent == "" || !strings.HasPrefix(tk.Traceparent, "00-0af7651916cd43dd8448eb211c80319c-") {
				return Result{}, Permanent("traceparent not handed on: " + tk.Traceparent)
			}
			return Success("made", map[string]int{"rows": 3}), nil
		}
		mu.Lock()
		parents = tk.Context.Parents
		mu.Unlock()
		return Result{}, nil
	}, Options{Wait: time.Second, Logger: quiet{t}})
	done := run(t, w)
	poll(t, "both succeeded", 30, func() bool {
		return str(t, p, `SELECT count(*) FROM ntask.task WHERE queue = 'go_prod' AND state = 'succeeded'`) == "2"
	})
	if err := stopped(t, w, done); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if string(parents["go_prod:p1"]) != `{"rows": 3}` {
		t.Errorf("context.parents: %v", parents)
	}
	mu.Unlock()
	// the duplicate's typed answer and GetResult
	e, err = Enqueue(ctx, p, "go_prod", "p1", json.RawMessage(`{"n": 1}`), EnqueueOptions{})
	if err != nil || e.Created || e.State != "succeeded" || e.Outcome != "made" || string(e.Result) != `{"rows": 3}` {
		t.Errorf("duplicate: %+v %v", e, err)
	}
	r, ok, err := GetResult(ctx, p, "go_prod", "p1")
	if err != nil || !ok || r.State != "succeeded" || r.Outcome != "made" || string(r.Result) != `{"rows": 3}` || r.FinishedAt.IsZero() {
		t.Errorf("GetResult: %+v %v %v", r, ok, err)
	}
	if _, ok, err := GetResult(ctx, p, "go_prod", "nope"); ok || err != nil {
		t.Errorf("GetResult of a missing key: %v %v", ok, err)
	}
	// a conflicting payload is the server's NT001
	if _, err := Enqueue(ctx, p, "go_prod", "p1", map[string]int{"n": 2}, EnqueueOptions{}); err == nil || !strings.Contains(err.Error(), "NT001") {
		t.Errorf("conflicting payload: %v", err)
	}
	// EnqueueMany through database/sql (pgx's stdlib driver), in a transaction
	db, err := sql.Open("pgx", d)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	es, err := EnqueueMany(ctx, SQL(stx), "go_prod", []Item{{Key: "m1", Payload: 1, PartitionKey: "a"}, {Key: "m2", Payload: "two"}, {Key: "m1", Payload: 1}}, EnqueueOptions{Priority: 2})
	if err != nil || len(es) != 3 || !es[0].Created || !es[1].Created || es[2].Created || es[2].TaskID != es[0].TaskID {
		t.Fatalf("EnqueueMany: %+v %v", es, err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := str(t, p, `SELECT string_agg(task_key || ':' || payload::text || ':' || coalesce(partition_key, '-') || ':' || priority, ' ' ORDER BY task_key) FROM ntask.task WHERE queue = 'go_prod' AND task_key LIKE 'm%'`); got != `m1:1:a:2 m2:"two":-:2` {
		t.Errorf("EnqueueMany stored: %s", got)
	}
	r, ok, err = GetResult(ctx, SQL(db), "go_prod", "m2")
	if err != nil || !ok || r.State != "ready" || r.Result != nil {
		t.Errorf("GetResult through database/sql: %+v %v %v", r, ok, err)
	}
}

// W1 holds a task without heartbeats past its lease; W2 takes it over
// (prior_outcome unknown: reconciled); W1's report is refused as stale and
// surfaced (counter and OnLost), never retried.
func TestIntegrationTakeover(t *testing.T) {
	p := connect(t, dsn(t))
	ctx := context.Background()
	queue(t, p, "go_takeover", "lease => '1 second'")
	started := make(chan *Task, 1)
	finish := make(chan struct{})
	var lostOps []string
	var mu sync.Mutex
	w1, _ := NewWorker(p, "go_takeover", func(ctx context.Context, tk *Task) (Result, error) {
		started <- tk
		<-finish
		return Success("w1", nil), nil
	}, Options{Name: "W1", HeartbeatEvery: time.Hour, Concurrency: 1, Wait: time.Second, Logger: quiet{t},
		OnLost: func(tk *Task, op string, a Answer) {
			mu.Lock()
			lostOps = append(lostOps, op+":"+string(a))
			mu.Unlock()
		}})
	d1 := run(t, w1)
	if _, err := Enqueue(ctx, p, "go_takeover", "t1", nil, EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	var tk *Task
	select {
	case tk = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("W1 did not start the task")
	}
	var prior string
	w2, _ := NewWorker(p, "go_takeover", func(ctx context.Context, tk *Task) (Result, error) {
		return Result{}, Permanent("W2's handler must not run: the reconcile found it done")
	}, Options{Name: "W2", Wait: time.Second, Logger: quiet{t}, Reconcile: func(ctx context.Context, tk *Task) (*Result, error) {
		mu.Lock()
		prior = tk.PriorOutcome
		mu.Unlock()
		r := Success("reconciled", nil)
		return &r, nil
	}})
	d2 := run(t, w2)
	poll(t, "W2 took over and succeeded", 30, func() bool {
		return str(t, p, `SELECT state FROM ntask.task WHERE task_id = $1`, tk.ID) == "succeeded"
	})
	close(finish)
	poll(t, "W1's stale report surfaced", 30, func() bool { return w1.Stats().Stale == 1 })
	stopped(t, w1, d1)
	stopped(t, w2, d2)
	mu.Lock()
	defer mu.Unlock()
	if prior != "unknown" {
		t.Errorf("W2's prior_outcome: %q", prior)
	}
	if fmt.Sprint(lostOps) != "[transition:stale]" {
		t.Errorf("OnLost: %v", lostOps)
	}
	if s := w1.Stats(); s.Succeeded != 0 || s.Claimed != 1 {
		t.Errorf("W1 stats: %+v", s)
	}
	if s := w2.Stats(); s.Succeeded != 1 || s.Claimed != 1 {
		t.Errorf("W2 stats: %+v", s)
	}
	if got := str(t, p, `SELECT string_agg(worker || ':' || result || ':' || coalesce(requested, '-') || ':' || coalesce(outcome, '-'), ' ' ORDER BY token) FROM ntask.attempt_all WHERE task_id = $1`, tk.ID); got != "W1:lease_expired:-:- W2:succeeded:succeeded:reconciled" {
		t.Errorf("ledger: %s", got)
	}
}

// A handler error before invoked is transient; after invoked (auto mode) an
// unclassified error, or a panic, is unknown and the next attempt reconciles.
func TestIntegrationHandlerErrors(t *testing.T) {
	p := connect(t, dsn(t))
	ctx := context.Background()
	queue(t, p, "go_err", "max_attempts => 5")
	var reconciled atomic.Int64
	handler := func(ctx context.Context, tk *Task) (Result, error) {
		switch {
		case tk.Key == "before" && tk.Attempt == 1:
			return Result{}, errors.New("boom before invoked")
		case tk.Key == "after" && tk.Attempt == 1:
			if err := tk.Invoked(ctx); err != nil {
				return Result{}, err
			}
			return Result{}, errors.New("boom after invoked")
		case tk.Key == "recerr" && tk.Attempt == 1:
			if err := tk.Invoked(ctx); err != nil {
				return Result{}, err
			}
			return Result{}, errors.New("lost answer")
		case tk.Key == "panic" && tk.Attempt == 1:
			if err := tk.Invoked(ctx); err != nil {
				return Result{}, err
			}
			panic("kaboom")
		case tk.Key == "big":
			// over ntask.max_result_bytes (64 kB): the server refuses the
			// success (54000), the worker reports it for repair instead
			return Success("big", strings.Repeat("x", 100000)), nil
		case tk.Key == "unjson":
			return Success("unjson", func() {}), nil
		case tk.Key == "permanent":
			return Result{}, Permanent("400 bad request")
		case tk.Key == "transient" && tk.Attempt == 1:
			return Result{}, Transient("503", time.Now().Add(200*time.Millisecond))
		case tk.Key == "unknown" && tk.Attempt == 1:
			return Result{}, Unknown("timeout after send")
		}
		return Success("done", nil), nil
	}
	w, _ := NewWorker(p, "go_err", handler, Options{Invoked: "manual", Wait: time.Second, Logger: quiet{t},
		Reconcile: func(ctx context.Context, tk *Task) (*Result, error) {
			reconciled.Add(1)
			if tk.Key == "recerr" && tk.Attempt == 2 {
				return nil, errors.New("the provider's lookup failed") // unknown again
			}
			return nil, nil // not done: run the handler again
		}})
	done := run(t, w)
	for _, k := range []string{"before", "after", "panic", "permanent", "transient", "unknown", "big", "unjson", "recerr"} {
		if _, err := Enqueue(ctx, p, "go_err", k, nil, EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "all finished", 60, func() bool {
		return str(t, p, `SELECT count(*) FROM ntask.task WHERE queue = 'go_err' AND state IN ('succeeded', 'repair_required')`) == "9"
	})
	stopped(t, w, done)
	got := str(t, p, `SELECT string_agg(t.task_key || ':' || a.result || ':' || coalesce(a.error_class, '-'), ' ' ORDER BY t.task_key, a.token)
		FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_err'`)
	want := "after:retry_wait:unknown after:succeeded:- before:retry_wait:transient before:succeeded:- big:repair_required:permanent " +
		"panic:retry_wait:unknown panic:succeeded:- permanent:repair_required:permanent " +
		"recerr:retry_wait:unknown recerr:retry_wait:unknown recerr:succeeded:- " +
		"transient:retry_wait:transient transient:succeeded:- unjson:repair_required:permanent unknown:retry_wait:unknown unknown:succeeded:-"
	if got != want {
		t.Errorf("ledger:\n got %s\nwant %s", got, want)
	}
	if r := reconciled.Load(); r != 5 {
		t.Errorf("reconcile called %d times, want 5 (after, panic, unknown, recerr twice)", r)
	}
	if got := str(t, p, `SELECT string_agg(a.detail->>'error', ', ' ORDER BY a.token) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_err' AND t.task_key IN ('before', 'recerr')`); got != "boom before invoked, lost answer, the provider's lookup failed" &&
		got != "lost answer, the provider's lookup failed, boom before invoked" {
		t.Errorf("the attempts' detail: %s", got)
	}
	if s := w.Stats(); s.Succeeded != 6 || s.FailedTransient != 2 || s.FailedUnknown != 5 || s.FailedPermanent != 3 || s.Stale != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// The heartbeat timer keeps a task whose work runs longer than its lease
// (with the queue's lease: every third of the lease left at the claim).
func TestIntegrationHeartbeat(t *testing.T) {
	p := connect(t, dsn(t))
	ctx := context.Background()
	queue(t, p, "go_hb", "lease => '1 second'")
	w, _ := NewWorker(p, "go_hb", func(ctx context.Context, tk *Task) (Result, error) {
		select {
		case <-time.After(3 * time.Second):
			return Result{}, nil
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}, Options{Wait: time.Second, Logger: quiet{t}})
	done := run(t, w)
	if _, err := Enqueue(ctx, p, "go_hb", "slow", nil, EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "succeeded", 30, func() bool {
		return str(t, p, `SELECT state FROM ntask.task WHERE queue = 'go_hb'`) == "succeeded"
	})
	stopped(t, w, done)
	if got := str(t, p, `SELECT string_agg(a.result, ' ') FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_hb'`); got != "succeeded" {
		t.Errorf("attempts: %s (one, kept by heartbeats)", got)
	}
	if s := w.Stats(); s.Succeeded != 1 || s.HeartbeatsLost != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// Task methods: Checkpoint, Progress, Await + a signal, Release, Receipt.
func TestIntegrationTaskMethods(t *testing.T) {
	p := connect(t, dsn(t))
	ctx := context.Background()
	queue(t, p, "go_wf", "")
	exec1(t, p, `CREATE TABLE IF NOT EXISTS go_business (task_id bigint, token bigint, note text)`)
	var seen []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
	var lost []string
	w, _ := NewWorker(p, "go_wf", func(ctx context.Context, tk *Task) (Result, error) {
		switch tk.Key {
		case "wf":
			if tk.Context.Signal == nil {
				if a, err := tk.Checkpoint(ctx, nil, "fetch", map[string]int{"rows": 12}); err != nil || a != Applied {
					return Result{}, Permanent(fmt.Sprintf("checkpoint: %s %v", a, err))
				}
				if err := tk.Progress(ctx, map[string]int{"done": 1}); err != nil {
					return Result{}, err
				}
				var pg string
				if err := p.QueryRow(ctx, `SELECT progress::text FROM ntask.task_progress WHERE task_id = $1`, tk.ID).Scan(&pg); err != nil {
					return Result{}, err
				}
				note("progress:" + pg)
				a, err := tk.Await(ctx, "go-sig-1", 0)
				note(fmt.Sprintf("await:%s:%v", a, err))
				return Result{}, Awaiting
			}
			note(fmt.Sprintf("resumed:%s:%s:%s", tk.Context.Signal.Key, tk.Context.Signal.Payload, tk.Context.Checkpoints["fetch"]))
			return Result{}, nil
		case "snooze":
			if tk.Attempt == 1 {
				a, err := tk.Release(ctx, 0)
				note(fmt.Sprintf("release:%s:%v", a, err))
				return Result{}, Awaiting
			}
			return Result{}, nil
		case "receipt":
			tx, err := p.Begin(ctx)
			if err != nil {
				return Result{}, err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO go_business VALUES ($1, $2, 'wf')`, tk.ID, tk.Token); err != nil {
				return Result{}, err
			}
			a, err := tk.Receipt(ctx, tx, map[string]string{"row": "wf"})
			if err != nil || a != Applied {
				return Result{}, fmt.Errorf("receipt %s %v", a, err)
			}
			if err := tx.Commit(ctx); err != nil {
				return Result{}, err
			}
			// other content for the same task: conflict, surfaced
			tx2, err := p.Begin(ctx)
			if err != nil {
				return Result{}, err
			}
			defer tx2.Rollback(ctx)
			a, err = tk.Receipt(ctx, tx2, map[string]string{"row": "other"})
			note(fmt.Sprintf("second receipt:%s:%v", a, err))
			return Result{}, nil
		}
		return Result{}, Permanent("?")
	}, Options{Wait: time.Second, Logger: quiet{t}, OnLost: func(tk *Task, op string, a Answer) {
		mu.Lock()
		lost = append(lost, op+":"+string(a))
		mu.Unlock()
	}})
	done := run(t, w)
	for _, k := range []string{"wf", "snooze", "receipt"} {
		if _, err := Enqueue(ctx, p, "go_wf", k, nil, EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "the task awaits", 30, func() bool {
		return str(t, p, `SELECT state FROM ntask.task WHERE queue = 'go_wf' AND task_key = 'wf'`) == "awaiting"
	})
	exec1(t, p, `SELECT ntask_signal('go_wf', 'go-sig-1', '{"paid": true}')`)
	poll(t, "all succeeded", 30, func() bool {
		return str(t, p, `SELECT count(*) FROM ntask.task WHERE queue = 'go_wf' AND state = 'succeeded'`) == "3"
	})
	stopped(t, w, done)
	mu.Lock()
	var wf, other []string
	for _, s := range seen {
		if strings.HasPrefix(s, "release:") || strings.HasPrefix(s, "second receipt:") {
			other = append(other, s)
		} else {
			wf = append(wf, s)
		}
	}
	mu.Unlock()
	got := strings.Join(wf, " ") + " | " + strings.Join(other, " ")
	if got != `progress:{"done": 1} await:applied:<nil> resumed:go-sig-1:{"paid": true}:{"rows": 12} | release:applied:<nil> second receipt:conflict:<nil>` &&
		got != `progress:{"done": 1} await:applied:<nil> resumed:go-sig-1:{"paid": true}:{"rows": 12} | second receipt:conflict:<nil> release:applied:<nil>` {
		t.Errorf("seen: %s", got)
	}
	if got := str(t, p, `SELECT count(*) FROM go_business b JOIN ntask.receipt r USING (task_id, token)`); got != "1" {
		t.Errorf("business rows with their receipt: %s", got)
	}
	if s := w.Stats(); s.Succeeded != 3 || s.Released != 1 || s.Stale != 0 || s.Conflict != 1 {
		t.Errorf("stats: %+v", s)
	}
	mu.Lock()
	if fmt.Sprint(lost) != "[receipt:conflict]" {
		t.Errorf("OnLost: %v", lost)
	}
	mu.Unlock()
}

// The claim-stop race: the stop is requested while a claim waits; an
// enqueue then wakes the claim, which leases the task after the stop: the
// worker must release it (never start it), so nothing is stranded.
func TestIntegrationClaimStopRace(t *testing.T) {
	p := connect(t, dsn(t))
	ctx := context.Background()
	for round := 1; round <= 3; round++ {
		// a queue per round: a released task is due again at once
		q := fmt.Sprintf("go_race_%d", round)
		queue(t, p, q, "")
		var ran atomic.Int64
		w, _ := NewWorker(p, q, func(ctx context.Context, tk *Task) (Result, error) {
			ran.Add(1)
			return Result{}, nil
		}, Options{Name: fmt.Sprintf("race-%d", round), Wait: 20 * time.Second, Concurrency: 3, Logger: quiet{t}})
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		poll(t, "the claim waits", 30, func() bool {
			return str(t, p, `SELECT count(*) FROM ntask.waiters WHERE queue = $1`, q) == "1"
		})
		w.Stop()
		t0 := time.Now()
		for i := 0; i < round; i++ {
			if _, err := Enqueue(ctx, p, q, fmt.Sprintf("r%d-%d", round, i), nil, EnqueueOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("Run did not return")
		}
		if time.Since(t0) > 15*time.Second {
			t.Errorf("round %d: the woken claim did not end the wait (%s)", round, time.Since(t0))
		}
		s := w.Stats()
		if ran.Load() != 0 || s.Claimed != s.Released || s.Claimed < 1 {
			t.Errorf("round %d: ran %d, stats %+v", round, ran.Load(), s)
		}
	}
	if got := str(t, p, `SELECT count(*) FILTER (WHERE state = 'ready') || '/' || count(*) FROM ntask.task WHERE queue LIKE 'go_race_%'`); got != "6/6" {
		t.Errorf("tasks ready/all: %s", got)
	}
	if got := str(t, p, `SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue LIKE 'go_race_%' AND a.result <> 'released'`); got != "0" {
		t.Errorf("attempts not released: %s", got)
	}
	// released attempts that were never invoked spend no budget
	if got := str(t, p, `SELECT bool_and(max_attempts > attempts) FROM ntask.task WHERE queue LIKE 'go_race_%'`); got != "true" {
		t.Errorf("budget spent by a release: %s", got)
	}
}

// Through pgbouncer in transaction pooling mode: the worker (Connect:
// simple protocol) with business transactions and receipts; the producer
// also through a pool in statement_cache_mode=describe and through
// database/sql.
func TestIntegrationPgbouncer(t *testing.T) {
	bd := os.Getenv("NTASK_TEST_BOUNCER_DSN")
	if bd == "" {
		dsn(t)
		t.Skip("NTASK_TEST_BOUNCER_DSN is not set")
	}
	direct := connect(t, dsn(t))
	queue(t, direct, "go_pgb", "")
	exec1(t, direct, `CREATE TABLE IF NOT EXISTS go_business (task_id bigint, token bigint, note text)`)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(bd + " statement_cache_mode=describe")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := pgxpool.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer desc.Close()
	const N = 40
	for i := 0; i < N/2; i++ {
		tx, err := desc.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Enqueue(ctx, tx, "go_pgb", fmt.Sprintf("d%d", i), map[string]int{"i": i}, EnqueueOptions{}); err != nil {
			t.Fatalf("enqueue in describe mode through pgbouncer: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("pgx", bd+" prefer_simple_protocol=true")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var items []Item
	for i := 0; i < N/2; i++ {
		items = append(items, Item{Key: fmt.Sprintf("s%d", i), Payload: map[string]int{"i": i}})
	}
	if es, err := EnqueueMany(ctx, SQL(db), "go_pgb", items, EnqueueOptions{}); err != nil || len(es) != N/2 {
		t.Fatalf("EnqueueMany through database/sql and pgbouncer: %v", err)
	}
	bp := connect(t, bd)
	mk := func(name string) *Worker {
		w, _ := NewWorker(bp, "go_pgb", func(ctx context.Context, tk *Task) (Result, error) {
			tx, err := bp.Begin(ctx)
			if err != nil {
				return Result{}, err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO go_business VALUES ($1, $2, 'pgb')`, tk.ID, tk.Token); err != nil {
				return Result{}, err
			}
			if a, err := tk.Receipt(ctx, tx, tk.Payload); err != nil || a != Applied {
				return Result{}, fmt.Errorf("receipt %s %v", a, err)
			}
			if err := tx.Commit(ctx); err != nil {
				return Result{}, err
			}
			return Success("pgb", map[string]string{"by": name}), nil
		}, Options{Name: name, Wait: time.Second, Logger: quiet{t}})
		return w
	}
	w1, w2 := mk("pgb-1"), mk("pgb-2")
	d1, d2 := run(t, w1), run(t, w2)
	poll(t, "all succeeded through pgbouncer", 60, func() bool {
		return str(t, direct, `SELECT count(*) FROM ntask.task WHERE queue = 'go_pgb' AND state = 'succeeded'`) == fmt.Sprint(N)
	})
	stopped(t, w1, d1)
	stopped(t, w2, d2)
	if got := str(t, direct, `SELECT count(*) || '/' || count(DISTINCT task_id) FROM go_business b JOIN ntask.receipt r USING (task_id, token) WHERE note = 'pgb'`); got != fmt.Sprintf("%d/%d", N, N) {
		t.Errorf("business rows / tasks: %s", got)
	}
	s1, s2 := w1.Stats(), w2.Stats()
	if s1.Succeeded+s2.Succeeded != N || s1.Stale+s2.Stale+s1.Conflict+s2.Conflict != 0 ||
		s1.FailedTransient+s2.FailedTransient+s1.FailedUnknown+s2.FailedUnknown != 0 {
		t.Errorf("stats: %+v %+v", s1, s2)
	}
	if got := str(t, direct, `SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_pgb'`); got != fmt.Sprint(N) {
		t.Errorf("attempts: %s (one each expected)", got)
	}
}

// The server restarts while the worker waits in a claim and holds a task:
// it reconnects, its report (the same token) is applied, and it claims
// the next task.
func TestIntegrationServerRestart(t *testing.T) {
	pgdata, pglog := os.Getenv("NTASK_TEST_PGDATA"), os.Getenv("NTASK_TEST_PGLOG")
	d := dsn(t)
	if pgdata == "" {
		t.Skip("NTASK_TEST_PGDATA is not set")
	}
	// the worker's pool; the test's own statements after the restart go
	// through a new pool (the old one's idle connections died with it)
	wp := connect(t, d)
	p := connect(t, d)
	ctx := context.Background()
	queue(t, p, "go_restart", "lease => '2 minutes'")
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	w, _ := NewWorker(wp, "go_restart", func(ctx context.Context, tk *Task) (Result, error) {
		if tk.Key == "held" {
			held <- struct{}{}
			<-release
		}
		return Success("after-restart", nil), nil
	}, Options{Name: "restart", Concurrency: 2, Wait: 5 * time.Second, Logger: quiet{t}})
	done := run(t, w)
	if _, err := Enqueue(ctx, p, "go_restart", "held", nil, EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the task was not started")
	}
	poll(t, "the claim waits", 30, func() bool {
		return str(t, p, `SELECT count(*) FROM ntask.waiters WHERE queue = 'go_restart'`) == "1"
	})
	out, err := exec.Command("pg_ctl", "-D", pgdata, "-l", pglog, "-m", "fast", "-w", "restart").CombinedOutput()
	if err != nil {
		t.Fatalf("pg_ctl restart: %v %s", err, out)
	}
	close(release)
	p.Close()
	p = connect(t, d)
	if _, err := Enqueue(ctx, p, "go_restart", "next", nil, EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "both succeeded after the restart", 60, func() bool {
		return str(t, p, `SELECT count(*) FROM ntask.task WHERE queue = 'go_restart' AND state = 'succeeded'`) == "2"
	})
	stopped(t, w, done)
	if got := str(t, p, `SELECT string_agg(t.task_key || ':' || a.result, ' ' ORDER BY t.task_key) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_restart'`); got != "held:succeeded next:succeeded" {
		t.Errorf("ledger: %s", got)
	}
	if s := w.Stats(); s.Succeeded != 2 || s.Claimed != 2 {
		t.Errorf("stats: %+v", s)
	}
}

// A report whose connection died is retried with the same token: the
// worker's idle connections are terminated while its handler runs; the
// report's first try fails on one of them, the retry is applied, one
// attempt in the ledger.
func TestIntegrationReportRetry(t *testing.T) {
	d := dsn(t)
	p := connect(t, d)
	wp := connect(t, d+" application_name=go_report_retry")
	ctx := context.Background()
	queue(t, p, "go_retry", "lease => '2 minutes'")
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var logs []string
	var mu sync.Mutex
	// concurrency 1 and no heartbeat: while the handler runs nothing else
	// of the worker touches its pool
	w, _ := NewWorker(wp, "go_retry", func(ctx context.Context, tk *Task) (Result, error) {
		held <- struct{}{}
		<-release
		return Success("retried", nil), nil
	}, Options{Concurrency: 1, HeartbeatEvery: time.Hour, Wait: time.Second,
		Logger: logFunc(func(s string) { mu.Lock(); logs = append(logs, s); mu.Unlock(); t.Log(s) })})
	done := run(t, w)
	if _, err := Enqueue(ctx, p, "go_retry", "r", nil, EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the task was not started")
	}
	exec1(t, p, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'go_report_retry'`)
	poll(t, "the worker's connections gone", 30, func() bool {
		return str(t, p, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'go_report_retry'`) == "0"
	})
	close(release)
	poll(t, "succeeded", 60, func() bool {
		return str(t, p, `SELECT state FROM ntask.task WHERE queue = 'go_retry'`) == "succeeded"
	})
	stopped(t, w, done)
	mu.Lock()
	retried := strings.Contains(strings.Join(logs, "\n"), "report failed (retrying with the same token")
	mu.Unlock()
	if !retried {
		t.Errorf("the report did not fail and retry: %v", logs)
	}
	if got := str(t, p, `SELECT string_agg(a.result || ':' || a.outcome, ' ') FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_retry'`); got != "succeeded:retried" {
		t.Errorf("ledger: %s", got)
	}
	if s := w.Stats(); s.Succeeded != 1 || s.Stale+s.Conflict != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// ---- the worker process (cmd/ntask-testworker) for the signal tests

var buildOnce sync.Once
var workerBin string
var buildErr error

func workerCmd(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ntask-go-worker")
		if err != nil {
			buildErr = err
			return
		}
		workerBin = filepath.Join(dir, "ntask-testworker")
		out, err := exec.Command("go", "build", "-o", workerBin, "github.com/ntask/ntask-go/cmd/ntask-testworker").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return workerBin
}

type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan struct{}
	err   error
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	c := exec.Command(workerCmd(t), args...)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr := &proc{cmd: c, done: make(chan struct{})}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	read := func(r io.Reader, prefix string) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if prefix != "" {
				t.Logf("worker: %s", sc.Text())
			}
			pr.mu.Lock()
			pr.lines = append(pr.lines, prefix+sc.Text())
			pr.mu.Unlock()
		}
	}
	go read(out, "")
	go read(errp, "E ")
	go func() {
		readers.Wait()
		pr.err = c.Wait()
		close(pr.done)
	}()
	t.Cleanup(func() {
		select {
		case <-pr.done:
		default:
			c.Process.Signal(syscall.SIGCONT)
			c.Process.Kill()
			<-pr.done
		}
	})
	return pr
}

func (pr *proc) has(prefix string) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, l := range pr.lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func (pr *proc) logged(part string) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, l := range pr.lines {
		if strings.HasPrefix(l, "E ") && strings.Contains(l, part) {
			return true
		}
	}
	return false
}

func (pr *proc) wait(t *testing.T, secs int) (int, Stats) {
	t.Helper()
	select {
	case <-pr.done:
	case <-time.After(time.Duration(secs) * time.Second):
		t.Fatalf("the worker process did not exit within %d s", secs)
	}
	var s Stats
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, l := range pr.lines {
		if strings.HasPrefix(l, "STATS ") {
			json.Unmarshal([]byte(l[6:]), &s)
		}
	}
	return pr.cmd.ProcessState.ExitCode(), s
}

// SIGTERM: the worker stops claiming; the running handler that invoked
// finishes within the grace; the one that never invoked is released when
// the grace runs out; the process exits 0 and leaves nothing leased.
func TestIntegrationSIGTERM(t *testing.T) {
	d := dsn(t)
	p := connect(t, d)
	ctx := context.Background()
	queue(t, p, "go_term", "")
	pr := start(t, "-dsn", d, "-queue", "go_term", "-name", "term-w", "-concurrency", "2", "-grace", "6s", "-invoked", "manual")
	for k, pl := range map[string]string{"a": `{"kind": "invoke-sleep", "ms": 1500}`, "b": `{"kind": "hold"}`} {
		if _, err := Enqueue(ctx, p, "go_term", k, json.RawMessage(pl), EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "both held, a invoked", 30, func() bool {
		return str(t, p, `SELECT count(*) || ':' || count(invoked_at) FROM ntask.task WHERE queue = 'go_term' AND lease_owner = 'term-w'`) == "2:1"
	})
	pr.cmd.Process.Signal(syscall.SIGTERM)
	code, s := pr.wait(t, 60)
	if code != 0 {
		t.Errorf("exit status %d", code)
	}
	if got := str(t, p, `SELECT string_agg(task_key || ':' || state, ' ' ORDER BY task_key) FROM ntask.task WHERE queue = 'go_term'`); got != "a:succeeded b:ready" {
		t.Errorf("states: %s", got)
	}
	if got := str(t, p, `SELECT count(*) FROM ntask.task WHERE lease_owner = 'term-w'`); got != "0" {
		t.Errorf("left leased: %s", got)
	}
	if got := str(t, p, `SELECT string_agg(t.task_key || ':' || a.result || ':' || (a.invoked_at IS NOT NULL), ' ' ORDER BY t.task_key) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_term'`); got != "a:succeeded:true b:released:false" {
		t.Errorf("ledger: %s", got)
	}
	if s.Succeeded != 1 || s.Released != 1 || s.Claimed != 2 {
		t.Errorf("stats: %+v", s)
	}
}

// A second SIGTERM stops at once: exit status 3 well inside the grace,
// the invoked task left leased (its lease runs out, as designed), nothing
// released or reported.
func TestIntegrationSecondSIGTERM(t *testing.T) {
	d := dsn(t)
	p := connect(t, d)
	ctx := context.Background()
	queue(t, p, "go_term2", "")
	exec1(t, p, `CREATE TABLE IF NOT EXISTS go_provider_call (task_key text, token bigint, at timestamptz DEFAULT clock_timestamp())`)
	pr := start(t, "-dsn", d, "-queue", "go_term2", "-name", "term2-w", "-concurrency", "1", "-grace", "120s")
	if _, err := Enqueue(ctx, p, "go_term2", "h", json.RawMessage(`{"kind": "provider", "hang": true}`), EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the provider was called", 30, func() bool { return pr.has("CALLED h") })
	t0 := time.Now()
	pr.cmd.Process.Signal(syscall.SIGTERM)
	poll(t, "the first stop logged", 30, func() bool { return pr.logged("stopping: no new claim") })
	pr.cmd.Process.Signal(syscall.SIGTERM)
	code, s := pr.wait(t, 60)
	if code != 3 || time.Since(t0) > 60*time.Second {
		t.Errorf("exit status %d after %s", code, time.Since(t0))
	}
	if got := str(t, p, `SELECT state || ':' || lease_owner || ':' || (invoked_at IS NOT NULL) FROM ntask.task WHERE queue = 'go_term2'`); got != "leased:term2-w:true" {
		t.Errorf("task: %s", got)
	}
	if s.Released != 0 || s.Succeeded+s.FailedUnknown+s.FailedTransient != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// SIGKILL mid-task after the provider was called: the lease runs out, the
// next worker's claim has prior_outcome 'unknown', its reconcile finds the
// provider's call and reports success: the provider was called once.
func TestIntegrationSIGKILL(t *testing.T) {
	d := dsn(t)
	p := connect(t, d)
	ctx := context.Background()
	queue(t, p, "go_kill", "lease => '2 seconds'")
	exec1(t, p, `CREATE TABLE IF NOT EXISTS go_provider_call (task_key text, token bigint, at timestamptz DEFAULT clock_timestamp())`)
	pr := start(t, "-dsn", d, "-queue", "go_kill", "-name", "kill-1")
	if _, err := Enqueue(ctx, p, "go_kill", "k1", json.RawMessage(`{"kind": "provider", "hang": true}`), EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the provider was called", 30, func() bool { return pr.has("CALLED k1") })
	pr.cmd.Process.Kill()
	pr.wait(t, 30)
	pr2 := start(t, "-dsn", d, "-queue", "go_kill", "-name", "kill-2")
	poll(t, "taken over and succeeded", 60, func() bool {
		return str(t, p, `SELECT state FROM ntask.task WHERE queue = 'go_kill' AND task_key = 'k1'`) == "succeeded"
	})
	pr2.cmd.Process.Signal(syscall.SIGTERM)
	code, s := pr2.wait(t, 60)
	if code != 0 || s.Succeeded != 1 {
		t.Errorf("second worker: status %d, %+v", code, s)
	}
	if !pr2.has("RECONCILED k1 1") {
		t.Errorf("the second worker did not reconcile")
	}
	if got := str(t, p, `SELECT count(*) FROM go_provider_call WHERE task_key = 'k1'`); got != "1" {
		t.Errorf("provider calls: %s", got)
	}
	if got := str(t, p, `SELECT string_agg(a.worker || ':' || a.result || ':' || coalesce(a.outcome, '-'), ' ' ORDER BY a.token) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_kill'`); got != "kill-1:lease_expired:- kill-2:succeeded:reconciled" {
		t.Errorf("ledger: %s", got)
	}
}

// SIGSTOP past the lease: another worker takes the task over; on SIGCONT
// the stopped worker's heartbeat or report is answered stale, surfaced,
// and its work is not reported.
func TestIntegrationSIGSTOP(t *testing.T) {
	d := dsn(t)
	p := connect(t, d)
	ctx := context.Background()
	queue(t, p, "go_stop", "lease => '2 seconds'")
	// concurrency 1: no second claim of stop-1 waits on the server while it
	// is stopped (it would take the task over itself, for a stopped client)
	pr := start(t, "-dsn", d, "-queue", "go_stop", "-name", "stop-1", "-concurrency", "1")
	if _, err := Enqueue(ctx, p, "go_stop", "s1", json.RawMessage(`{"kind": "sleep", "ms": 4000}`), EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "held and invoked", 30, func() bool {
		return str(t, p, `SELECT count(invoked_at) FROM ntask.task WHERE queue = 'go_stop' AND lease_owner = 'stop-1'`) == "1"
	})
	pr.cmd.Process.Signal(syscall.SIGSTOP)
	var prior string
	var mu sync.Mutex
	w2, _ := NewWorker(p, "go_stop", func(ctx context.Context, tk *Task) (Result, error) {
		return Result{}, Permanent("the reconcile should have answered")
	}, Options{Name: "stop-2", Wait: time.Second, Logger: quiet{t}, Reconcile: func(ctx context.Context, tk *Task) (*Result, error) {
		mu.Lock()
		prior = tk.PriorOutcome
		mu.Unlock()
		r := Success("reconciled", nil)
		return &r, nil
	}})
	d2 := run(t, w2)
	poll(t, "taken over by stop-2", 60, func() bool {
		return str(t, p, `SELECT state FROM ntask.task WHERE queue = 'go_stop'`) == "succeeded"
	})
	stopped(t, w2, d2)
	pr.cmd.Process.Signal(syscall.SIGCONT)
	poll(t, "stop-1 saw its lease lost", 30, func() bool { return pr.has("LOST ") })
	pr.cmd.Process.Signal(syscall.SIGTERM)
	code, s := pr.wait(t, 60)
	if code != 0 {
		t.Errorf("stop-1 exit status %d", code)
	}
	if s.Succeeded != 0 || s.Stale+s.HeartbeatsLost < 1 {
		t.Errorf("stop-1 stats: %+v", s)
	}
	mu.Lock()
	if prior != "unknown" {
		t.Errorf("stop-2's prior_outcome: %q", prior)
	}
	mu.Unlock()
	if got := str(t, p, `SELECT string_agg(a.worker || ':' || a.result || ':' || coalesce(a.requested, '-'), ' ' ORDER BY a.token) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'go_stop'`); got != "stop-1:lease_expired:- stop-2:succeeded:succeeded" {
		t.Errorf("ledger: %s", got)
	}
}
