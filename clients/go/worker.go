package ntask

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Handler does one task's work. It returns a Result (the zero Result is a
// plain success; see Success) or an error: Transient, Permanent, Unknown, or
// any other error (unknown if the attempt was marked invoked, else
// transient). After Task.Await or Task.Release it returns Awaiting. ctx is
// cancelled when the lease is lost (a NULL heartbeat, a stale answer), when
// the shutdown grace runs out, and on a hard stop.
type Handler func(ctx context.Context, t *Task) (Result, error)

// Reconciler is asked first when the previous attempt's outcome is unknown
// (t.PriorOutcome == "unknown"): it checks whether that attempt took effect
// (e.g. looks the provider's idempotency key up). A non-nil *Result: it did,
// report success without running the handler; nil, nil: it did not, run the
// handler; an error: report it (a classified one by its class, any other as
// unknown, so the next attempt reconciles again).
type Reconciler func(ctx context.Context, t *Task) (*Result, error)

// Logger is what the worker logs to (*log.Logger has it); it is called
// from several goroutines at once.
type Logger interface {
	Printf(format string, args ...interface{})
}

// Options of a Worker; the zero value takes every default (the same
// defaults as the Python and TypeScript libraries).
type Options struct {
	Name           string        // default: host-pid-random
	Concurrency    int           // handlers at once; default 4
	Lease          time.Duration // 0: the queue's lease
	Wait           time.Duration // the waiting claim's timeout; default 10 s, at most the server's ntask.max_wait (30 s)
	HeartbeatEvery time.Duration // default: the lease / 3
	ShutdownGrace  time.Duration // default 30 s
	// Invoked: "auto" (default: ntask_invoked is marked before the handler
	// runs) or "manual" (the handler calls Task.Invoked before its external
	// effect; a task stopped before that is released, not counted).
	Invoked   string
	Reconcile Reconciler
	// OnLost is called for every stale or conflict answer and for a lost
	// heartbeat (op: "heartbeat", "invoked", "transition", "receipt",
	// "checkpoint", "await", "release").
	OnLost func(t *Task, op string, answer Answer)
	Logger Logger // default: log.Default()
}

// Stats are the worker's counters (the same names in all three libraries).
type Stats struct {
	Claimed         int64 `json:"claimed"`
	Succeeded       int64 `json:"succeeded"`
	FailedTransient int64 `json:"failed_transient"`
	FailedPermanent int64 `json:"failed_permanent"`
	FailedUnknown   int64 `json:"failed_unknown"`
	Stale           int64 `json:"stale"`
	Conflict        int64 `json:"conflict"`
	Released        int64 `json:"released"`
	HeartbeatsLost  int64 `json:"heartbeats_lost"`
}

type counters struct {
	claimed, succeeded, failedTransient, failedPermanent, failedUnknown,
	stale, conflict, released, heartbeatsLost atomic.Int64
}

// ErrHardStop is Run's answer after a second Stop: it returned at once,
// without waiting for handlers or releasing (the leases expire and are taken
// over, as designed).
var ErrHardStop = errors.New("ntask: worker stopped at once (second stop)")

// Worker runs the fenced loop on one queue. Create it with NewWorker, run it
// with Run or RunUntilSignal, stop it with Stop.
type Worker struct {
	pool    *pgxpool.Pool
	queue   string
	handler Handler
	opt     Options
	stats   counters

	mu       sync.Mutex
	stops    int
	stopping chan struct{}
	hard     chan struct{}
	held     map[*Task]struct{}
	running  int
	freed    chan struct{}
	wg       sync.WaitGroup
	fatal    error // a claim refused for good (Run's answer)

	base       context.Context // the handlers' parent context
	cancelBase context.CancelFunc
}

// Connect opens a pgx pool for a worker or a producer with the settings that
// work directly and behind pgbouncer in transaction pooling mode:
// PreferSimpleProtocol (nothing is prepared; pgx's default statement cache
// breaks behind pgbouncer with 42P05 / 26000). Without pool_max_conns in
// the DSN the pool holds up to 8 connections (one waiting claim, the
// handlers' heartbeats and reports).
func Connect(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(dsn)
	if err != nil {
		return nil, err
	}
	return pgxpool.ConnectConfig(ctx, cfg)
}

func poolConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.PreferSimpleProtocol = true
	// pgxpool.ParseConfig consumes pool_max_conns: look at the DSN itself
	if !strings.Contains(dsn, "pool_max_conns") && cfg.MaxConns < 8 {
		cfg.MaxConns = 8
	}
	return cfg, nil
}

// NewWorker makes a worker of queue on pool (Connect's, or your own: see the
// package doc on pgbouncer). It checks the options and fills in defaults.
func NewWorker(pool *pgxpool.Pool, queue string, handler Handler, opt Options) (*Worker, error) {
	if pool == nil || handler == nil || queue == "" {
		return nil, errors.New("ntask: NewWorker needs a pool, a queue and a handler")
	}
	o, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{pool: pool, queue: queue, handler: handler, opt: o,
		stopping: make(chan struct{}), hard: make(chan struct{}),
		held: map[*Task]struct{}{}, freed: make(chan struct{}, 1)}
	w.base, w.cancelBase = context.WithCancel(context.Background())
	return w, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		h, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.Name = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.Concurrency < 1 || o.Concurrency > 1000 {
		return o, fmt.Errorf("ntask: Concurrency %d is not in 1..1000", o.Concurrency)
	}
	if o.Wait == 0 {
		o.Wait = 10 * time.Second
	}
	if o.Wait < 0 || o.Wait > 30*time.Second {
		return o, fmt.Errorf("ntask: Wait %s is not in (0, 30s] (the server's ntask.max_wait)", o.Wait)
	}
	if o.Lease < 0 || o.HeartbeatEvery < 0 || o.ShutdownGrace < 0 {
		return o, errors.New("ntask: negative Lease, HeartbeatEvery or ShutdownGrace")
	}
	if o.Lease > 0 && o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = o.Lease / 3
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	switch o.Invoked {
	case "":
		o.Invoked = "auto"
	case "auto", "manual":
	default:
		return o, fmt.Errorf("ntask: Invoked %q is not \"auto\" or \"manual\"", o.Invoked)
	}
	if o.Logger == nil {
		o.Logger = log.Default()
	}
	return o, nil
}

// Name is the worker's name (the claim's worker argument).
func (w *Worker) Name() string { return w.opt.Name }

// Stats returns a snapshot of the counters.
func (w *Worker) Stats() Stats {
	c := &w.stats
	return Stats{Claimed: c.claimed.Load(), Succeeded: c.succeeded.Load(),
		FailedTransient: c.failedTransient.Load(), FailedPermanent: c.failedPermanent.Load(),
		FailedUnknown: c.failedUnknown.Load(), Stale: c.stale.Load(), Conflict: c.conflict.Load(),
		Released: c.released.Load(), HeartbeatsLost: c.heartbeatsLost.Load()}
}

// Stop begins the graceful shutdown: no new claim after the current wait
// returns (it is never cancelled), tasks that arrive after this are
// released, running handlers get ShutdownGrace to finish, then what was
// claimed and never invoked is released and Run returns. A second Stop
// stops at once: the handlers' contexts are cancelled and Run returns
// ErrHardStop without releasing anything.
func (w *Worker) Stop() {
	w.mu.Lock()
	n := w.stops
	w.stops++
	w.mu.Unlock()
	switch n {
	case 0:
		w.opt.Logger.Printf("ntask %s: stopping: no new claim after the current wait, %s of grace for the running handlers", w.opt.Name, w.opt.ShutdownGrace)
		close(w.stopping)
	case 1:
		w.opt.Logger.Printf("ntask %s: stopping at once (second stop): nothing is released, the leases run out", w.opt.Name)
		close(w.hard)
		w.cancelBase()
	}
}

func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

func (w *Worker) isHard() bool {
	select {
	case <-w.hard:
		return true
	default:
		return false
	}
}

// RunUntilSignal runs the worker until SIGTERM or SIGINT (a graceful stop;
// a second signal stops at once) or until ctx is done (graceful).
func (w *Worker) RunUntilSignal(ctx context.Context) error {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(ch)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-ch:
				w.Stop()
			case <-done:
				return
			}
		}
	}()
	return w.Run(ctx)
}

type claimed struct {
	tasks []*Task
	err   error
}

// Run claims and works tasks until Stop (or ctx done: a graceful stop).
// It returns nil after a graceful stop, ErrHardStop after a second one, and
// the server's error when a claim is refused for a reason no retry changes
// (an unknown queue 42704, no right 42501, a bad argument 22xxx: it then
// stops as gracefully as after Stop). Lost connections and other errors
// are retried with backoff.
func (w *Worker) Run(ctx context.Context) error {
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.stopping:
		}
	}()
	backoff := time.Duration(0)
	for !w.isStopping() {
		w.mu.Lock()
		free := w.opt.Concurrency - w.running
		w.mu.Unlock()
		if free <= 0 {
			select {
			case <-w.freed:
			case <-w.stopping:
			}
			continue
		}
		res := make(chan claimed, 1)
		go func() {
			// never cancelled from here: a stop waits for the wait to end
			ts, err := w.claim(free)
			res <- claimed{ts, err}
		}()
		var c claimed
		select {
		case c = <-res:
		case <-w.hard:
			return ErrHardStop
		}
		if c.err != nil {
			if isMisconfigured(c.err) {
				// an unknown queue, a missing right, a bad option: no
				// retry will help; stop gracefully and say why
				w.opt.Logger.Printf("ntask %s: claim refused: %v", w.opt.Name, c.err)
				w.mu.Lock()
				if w.fatal == nil {
					w.fatal = c.err
				}
				first := w.stops == 0
				if first {
					w.stops = 1
				}
				w.mu.Unlock()
				if first { // the graceful stop (never the second, hard one)
					close(w.stopping)
				}
				continue
			}
			backoff = nextBackoff(backoff)
			w.opt.Logger.Printf("ntask %s: claim failed (retrying in %s): %v", w.opt.Name, backoff, c.err)
			select {
			case <-time.After(backoff):
			case <-w.stopping:
			}
			continue
		}
		backoff = 0
		for _, t := range c.tasks {
			w.stats.claimed.Add(1)
			w.mu.Lock()
			w.running++
			w.held[t] = struct{}{}
			w.mu.Unlock()
			w.wg.Add(1)
			go w.runTask(t)
		}
	}
	// shutdown: the handlers get the grace, then the never-invoked are
	// released and the rest cancelled
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return w.fatalErr()
	case <-w.hard:
		return ErrHardStop
	case <-time.After(w.opt.ShutdownGrace):
	}
	w.opt.Logger.Printf("ntask %s: shutdown grace (%s) ran out: releasing what was never invoked, cancelling the rest", w.opt.Name, w.opt.ShutdownGrace)
	w.mu.Lock()
	var held []*Task
	for t := range w.held {
		held = append(held, t)
	}
	w.mu.Unlock()
	for _, t := range held {
		w.releaseIfNotInvoked(t)
	}
	w.cancelBase()
	select {
	case <-done:
	case <-w.hard:
		return ErrHardStop
	case <-time.After(5 * time.Second):
	}
	return w.fatalErr()
}

func (w *Worker) fatalErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

// isMisconfigured: a claim refused for a reason no retry changes: an
// unknown queue (42704), no right (42501), a bad argument (class 22).
func isMisconfigured(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "42704" || pe.Code == "42501" || strings.HasPrefix(pe.Code, "22")
}

func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return 100 * time.Millisecond
	}
	d *= 2
	if d > 5*time.Second {
		d = 5 * time.Second
	}
	return d
}

const sqlClaim = `SELECT task_id, task_key, payload::text, attempt, token, lease_until, prior_outcome, context::text,
 extract(epoch FROM lease_until - clock_timestamp())::float8
FROM ntask_claim(queue => $1::text, worker => $2::text, max_tasks => $3::bigint::integer,
 lease => ` + "($4::bigint * interval '1 microsecond')" + `, wait => ` + "($5::bigint * interval '1 microsecond')" + `)`

func (w *Worker) claim(max int) ([]*Task, error) {
	// the wait is bounded by the server (ntask.max_wait); this timeout only
	// guards against a connection that hangs forever
	ctx, cancel := context.WithTimeout(context.Background(), w.opt.Wait+60*time.Second)
	defer cancel()
	rows, err := w.pool.Query(ctx, sqlClaim, w.queue, w.opt.Name, int64(max), intervalArg(w.opt.Lease), intervalArg(w.opt.Wait))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Task
	for rows.Next() {
		t := &Task{Queue: w.queue, w: w}
		var payload, cx, prior sql.NullString
		var left float64
		if err := rows.Scan(&t.ID, &t.Key, &payload, &t.Attempt, &t.Token, &t.LeaseUntil, &prior, &cx, &left); err != nil {
			return nil, err
		}
		t.Payload = []byte(payload.String)
		t.PriorOutcome = prior.String
		var raw []byte
		if cx.Valid {
			raw = []byte(cx.String)
		}
		c, err := decodeContext(raw)
		if err != nil {
			w.opt.Logger.Printf("ntask %s: task %d: %v", w.opt.Name, t.ID, err)
		}
		t.Context = c
		t.Traceparent = c.Traceparent
		out = append(out, t)
		t.leaseLeft = time.Duration(left * float64(time.Second))
	}
	// the claim committed if the rows arrived in full: a row error here
	// means the statement failed and leased nothing
	return out, rows.Err()
}

func (w *Worker) runTask(t *Task) {
	defer func() {
		w.mu.Lock()
		w.running--
		delete(w.held, t)
		w.mu.Unlock()
		select {
		case w.freed <- struct{}{}:
		default:
		}
		w.wg.Done()
	}()
	hctx, cancel := context.WithCancel(w.base)
	defer cancel()
	t.mu.Lock()
	t.cancel = cancel
	t.mu.Unlock()

	// a task that arrived after the stop was requested is never started
	if w.isStopping() {
		w.releaseIfNotInvoked(t)
		return
	}
	hbStop := make(chan struct{})
	hbDone := make(chan struct{})
	go w.heartbeatLoop(t, hbStop, hbDone)
	stopHB := func() {
		select {
		case <-hbStop:
		default:
			close(hbStop)
		}
		<-hbDone
	}
	defer stopHB()

	if err := t.loadDeferred(hctx); err != nil {
		if !errors.Is(err, ErrLost) {
			w.opt.Logger.Printf("ntask %s: task %d: context: %v (not run; its lease runs out)", w.opt.Name, t.ID, err)
		}
		return
	}
	var rep report
	ran := false
	if t.PriorOutcome == "unknown" && w.opt.Reconcile != nil {
		r, err := w.safeReconcile(hctx, t)
		switch {
		case err != nil:
			rep = classify(Result{}, err, true)
			ran = true
		case r != nil:
			rep = classify(*r, nil, true)
			ran = true
		}
	}
	if !ran {
		if w.opt.Invoked == "auto" {
			if err := w.retryInvoked(hctx, t); err != nil {
				if !errors.Is(err, ErrLost) {
					w.opt.Logger.Printf("ntask %s: task %d: invoked: %v (not run; its lease runs out)", w.opt.Name, t.ID, err)
				}
				return
			}
		}
		res, err := w.safeHandler(hctx, t)
		t.mu.Lock()
		inv := t.invoked
		t.mu.Unlock()
		rep = classify(res, err, inv)
		if errors.Is(err, Awaiting) {
			t.mu.Lock()
			ph := t.phase
			t.mu.Unlock()
			if ph == phaseClaimed {
				rep = classify(Result{}, errors.New("the handler returned Awaiting without Await or Release"), inv)
			}
		}
	}
	stopHB()
	t.mu.Lock()
	ph := t.phase
	if ph == phaseClaimed && !rep.none {
		t.phase = phaseDone
	}
	t.mu.Unlock()
	if ph != phaseClaimed || rep.none {
		return // handed off, or lost (surfaced where it was found)
	}
	if w.isHard() {
		// stopped at once: the handler was cancelled; its lease runs out
		// and the next claim reconciles (nothing is reported)
		return
	}
	w.report(t, rep)
}

func (w *Worker) safeHandler(ctx context.Context, t *Task) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ntask: handler panicked: %v", p)
		}
	}()
	return w.handler(ctx, t)
}

func (w *Worker) safeReconcile(ctx context.Context, t *Task) (res *Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ntask: reconcile panicked: %v", p)
		}
	}()
	return w.opt.Reconcile(ctx, t)
}

// retryInvoked marks the attempt invoked, retrying a lost connection (the
// call is idempotent per token: duplicate) until the lease is gone.
func (w *Worker) retryInvoked(ctx context.Context, t *Task) error {
	var backoff time.Duration
	for {
		err := t.Invoked(ctx)
		if err == nil || errors.Is(err, ErrLost) || isServerAnswer(err) || ctx.Err() != nil {
			return err
		}
		t.mu.Lock()
		until := t.LeaseUntil
		t.mu.Unlock()
		if time.Now().After(until) {
			return err
		}
		backoff = nextBackoff(backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// isServerAnswer: an error the server raised (an SQLSTATE), as opposed to
// a lost or refused connection, which is retried.
func isServerAnswer(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code[:2] {
	case "08", "57", "53": // connection, operator intervention (shutdown, cancel), resources
		return false
	}
	return true
}

func (w *Worker) heartbeatLoop(t *Task, stop, done chan struct{}) {
	defer close(done)
	every := w.opt.HeartbeatEvery
	if every <= 0 {
		every = t.leaseLeft / 3
	}
	if every < 50*time.Millisecond {
		every = 50 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := t.Heartbeat(ctx, nil)
		cancel()
		if errors.Is(err, ErrLost) {
			return
		}
		if err != nil {
			w.opt.Logger.Printf("ntask %s: task %d: heartbeat failed (retrying): %v", w.opt.Name, t.ID, err)
		}
	}
}

func (w *Worker) heartbeatLost(t *Task) {
	t.mu.Lock()
	first := t.phase == phaseClaimed
	if first {
		t.phase = phaseLost
	}
	cancel := t.cancel
	t.mu.Unlock()
	if !first {
		return
	}
	w.stats.heartbeatsLost.Add(1)
	w.opt.Logger.Printf("ntask %s: task %d token %d: heartbeat answered NULL: the lease is lost, the handler is cancelled", w.opt.Name, t.ID, t.Token)
	if w.opt.OnLost != nil {
		w.opt.OnLost(t, "heartbeat", Stale)
	}
	if cancel != nil {
		cancel()
	}
}

// lost surfaces a stale or conflict answer: log, counter, hook.
func (w *Worker) lost(t *Task, op string, a Answer) {
	if a == Stale {
		w.stats.stale.Add(1)
	} else {
		w.stats.conflict.Add(1)
	}
	w.opt.Logger.Printf("ntask %s: task %d token %d: %s answered %s", w.opt.Name, t.ID, t.Token, op, a)
	if w.opt.OnLost != nil {
		w.opt.OnLost(t, op, a)
	}
}

// releaseIfNotInvoked releases a task that was claimed and never invoked
// (at a stop); an invoked one is left to its handler (or its lease).
func (w *Worker) releaseIfNotInvoked(t *Task) {
	t.mu.Lock()
	if t.phase != phaseClaimed || t.invoked {
		t.mu.Unlock()
		return
	}
	t.phase = phaseHandedOff
	t.mu.Unlock()
	var backoff time.Duration
	for i := 0; i < 10 && !w.isHard(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var a string
		err := w.queryRow(ctx, `SELECT ntask_release(task_id => $1::bigint, token => $2::bigint)`, []interface{}{t.ID, t.Token}, &a)
		cancel()
		if err == nil {
			switch Answer(a) {
			case Applied, Duplicate:
				w.stats.released.Add(1)
			default:
				w.lost(t, "release", Answer(a))
			}
			return
		}
		if isServerAnswer(err) {
			w.opt.Logger.Printf("ntask %s: task %d: release: %v", w.opt.Name, t.ID, err)
			return
		}
		backoff = nextBackoff(backoff)
		time.Sleep(backoff)
	}
}

const sqlTransition = `SELECT result, state FROM ntask_transition(task_id => $1::bigint, token => $2::bigint, to_state => $3::text,
 error_class => $4::text, detail => $5::text::jsonb, retry_at => $6::text::timestamptz, outcome => $7::text, result => $8::text::jsonb)`

// report sends the transition with the task's token, retrying a lost
// connection with the same token (idempotent: applied, then duplicate or
// stale tell the truth) until an answer or a hard stop.
func (w *Worker) report(t *Task, rep report) {
	var backoff time.Duration
	for {
		var detail, result interface{}
		var err error
		if rep.message != "" {
			detail, _ = jsonArg(map[string]string{"error": rep.message}, true)
		}
		if rep.toState == "succeeded" {
			result, err = jsonArg(rep.value, true)
			if err != nil {
				rep = report{toState: "repair_required", class: ClassPermanent, message: "the handler's result: " + err.Error()}
				continue
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var answer, state string
		err = w.queryRow(ctx, sqlTransition, []interface{}{t.ID, t.Token, rep.toState, strArg(string(rep.class)),
			detail, timeArg(rep.retryAt), strArg(rep.outcome), result}, &answer, &state)
		cancel()
		if err == nil {
			switch Answer(answer) {
			case Applied, Duplicate:
				switch rep.class {
				case "":
					w.stats.succeeded.Add(1)
				case ClassTransient:
					w.stats.failedTransient.Add(1)
				case ClassPermanent:
					w.stats.failedPermanent.Add(1)
				case ClassUnknown:
					w.stats.failedUnknown.Add(1)
				}
			default:
				w.lost(t, "transition", Answer(answer))
			}
			return
		}
		if isServerAnswer(err) {
			if rep.toState == "succeeded" {
				// e.g. a result over ntask.max_result_bytes: the work is
				// done but cannot be stored as asked; hand it to repair
				w.opt.Logger.Printf("ntask %s: task %d: the success report was refused (%v): reporting it as permanent", w.opt.Name, t.ID, err)
				rep = report{toState: "repair_required", class: ClassPermanent, message: "the success report was refused: " + err.Error()}
				continue
			}
			w.opt.Logger.Printf("ntask %s: task %d: the report was refused: %v (its lease runs out)", w.opt.Name, t.ID, err)
			return
		}
		if w.isHard() {
			return
		}
		backoff = nextBackoff(backoff)
		w.opt.Logger.Printf("ntask %s: task %d: report failed (retrying with the same token in %s): %v", w.opt.Name, t.ID, backoff, err)
		select {
		case <-time.After(backoff):
		case <-w.hard:
			return
		}
	}
}

func (w *Worker) queryRow(ctx context.Context, q string, args []interface{}, dest ...interface{}) error {
	return queryRowOn(ctx, w.pool, q, args, dest...)
}
