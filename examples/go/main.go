// Command push is the N9 push service on ntask's Go library (clients/go).
//
//	export DATABASE_URL=postgresql://app@127.0.0.1/app
//	export PUSH_PROVIDER_URL=http://127.0.0.1:8099   # python3 examples/fake_provider.py
//	sh examples/go/build.sh /tmp/push                # or: go build (go.mod)
//	/tmp/push produce -count 20
//	/tmp/push work -name W1
//
// produce: writes chat messages and, in the same transaction, one notify
// task each (queue "push", key notify:<user>:<device>:<message>:v1); a key
// that exists already is not enqueued twice (Created false).
//
// work: a Worker of the library on queue "push". For each task it reads the
// message, marks the attempt invoked, sends it to the provider with the task
// key as the Idempotency-Key, and writes push_delivery with the task's
// receipt in one transaction. What the provider answers becomes the report:
// 429 transient (retry at its Retry-After), 410 permanent (repair), a 5xx or
// no answer unknown (it may have taken effect). An attempt that follows an
// unknown one (PriorOutcome "unknown": the answer was lost, or a worker died
// after invoked) first asks the provider by the idempotency key (reconcile)
// and sends only if it has not got it. SIGTERM or Ctrl-C: graceful (running
// sends finish, what was never invoked is released); a second one: at once.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"
	ntask "github.com/ntask/ntask-go"
)

const (
	queue       = "push"
	sendTimeout = 5 * time.Second // the fake provider's d-slow takes 3 s
)

// the fake provider's test devices (examples/fake_provider.py): how a send goes
var devices = []string{"d-slow-1", "d-ok-1", "d-429-1", "d-ok-2", "d-500-1",
	"d-ok-3", "d-hang-1", "d-ok-4", "d-ok-5", "d-gone-1"}

var provider = "http://127.0.0.1:8099"

type push struct {
	Message string `json:"message"`
	Version int    `json:"version"`
	Device  string `json:"device"`
}

// ---------------------------------------------------------------- producer

func produce(ctx context.Context, pool *pgxpool.Pool, count, start int) error {
	created := 0
	for n := start; n < start+count; n++ {
		msg, user, device := fmt.Sprintf("m-%d", n), fmt.Sprintf("u-%d", n%3), devices[(n-1)%len(devices)]
		key := fmt.Sprintf("notify:%s:%s:%s:v1", user, device, msg)
		// the message and its task: both or neither
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO push_message (id, user_id, device, body) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO NOTHING`, msg, user, device, fmt.Sprintf("hello %s, message %d", user, n))
		var e ntask.Enqueued
		if err == nil {
			e, err = ntask.Enqueue(ctx, tx, queue, key, push{msg, 1, device}, ntask.EnqueueOptions{})
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			tx.Rollback(ctx)
			return err
		}
		if e.Created {
			created++
		}
	}
	fmt.Printf("produce: %d messages, %d tasks created, %d already there\n", count, created, count-created)
	return nil
}

// ---------------------------------------------------------------- the provider

var client = &http.Client{Timeout: sendTimeout}

// send POSTs the push; the typed failure says what is known of its effect.
func send(ctx context.Context, key, device, body string) (string, error) {
	b, _ := json.Marshal(map[string]string{"device": device, "body": body})
	req, _ := http.NewRequestWithContext(ctx, "POST", provider+"/v1/push", bytes.NewReader(b))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	r, err := client.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return "", ntask.Transient("provider unreachable: not sent", time.Time{})
		}
		return "", ntask.Unknown("no answer (" + err.Error() + "): it may have taken effect")
	}
	defer r.Body.Close()
	switch {
	case r.StatusCode == 200:
		var v struct{ ID string }
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			return "", ntask.Unknown("unreadable answer: it may have taken effect")
		}
		return v.ID, nil
	case r.StatusCode == 429: // not taken; the provider says when
		wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if err != nil {
			wait = 1
		}
		return "", ntask.Transient("429 rate limited", time.Now().Add(time.Duration(wait)*time.Second))
	case r.StatusCode == 400 || r.StatusCode == 404 || r.StatusCode == 410:
		return "", ntask.Permanent(fmt.Sprintf("%d from the provider", r.StatusCode))
	}
	return "", ntask.Unknown(fmt.Sprintf("%d from the provider: it may have taken effect", r.StatusCode))
}

// lookup returns the provider's id for this idempotency key, or "".
func lookup(ctx context.Context, key string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", provider+"/v1/push/"+url.PathEscape(key), nil)
	r, err := client.Do(req)
	if err != nil {
		return "", ntask.Unknown("lookup: " + err.Error() + ": still not known")
	}
	defer r.Body.Close()
	if r.StatusCode == 404 {
		return "", nil
	}
	var v struct{ ID string }
	if r.StatusCode != 200 || json.NewDecoder(r.Body).Decode(&v) != nil {
		return "", ntask.Unknown(fmt.Sprintf("lookup: %d: still not known", r.StatusCode))
	}
	return v.ID, nil
}

// ---------------------------------------------------------------- worker

type service struct {
	pool *pgxpool.Pool
	name string
}

func (s *service) say(t *ntask.Task, format string, args ...interface{}) {
	fmt.Printf("%s: %s attempt %d: %s\n", s.name, t.Key, t.Attempt, fmt.Sprintf(format, args...))
}

// record writes the business row with the task's receipt, in one transaction.
func (s *service) record(ctx context.Context, t *ntask.Task, p push, providerID, via string) (ntask.Result, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ntask.Result{}, err
	}
	defer tx.Rollback(ctx)
	answer, err := t.Receipt(ctx, tx, map[string]string{"provider_id": providerID})
	if err != nil && answer == "" {
		return ntask.Result{}, err
	}
	switch answer {
	case ntask.Applied:
		if _, err := tx.Exec(ctx, `INSERT INTO push_delivery (task_key, message_id, provider_id, via, attempt, token, worker)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, t.Key, p.Message, providerID, via, t.Attempt, t.Token, s.name); err != nil {
			return ntask.Result{}, err
		}
	case ntask.Stale: // not ours any more: report nothing
		return ntask.Result{}, ntask.ErrLost
	case ntask.Conflict:
		return ntask.Result{}, ntask.Permanent("receipt conflict: another delivery was recorded")
	}
	if err := tx.Commit(ctx); err != nil {
		return ntask.Result{}, err
	}
	return ntask.Success("provider_accepted", map[string]string{"provider_id": providerID, "via": via}), nil
}

// reconcile: PriorOutcome "unknown": an earlier attempt may have sent it.
func (s *service) reconcile(ctx context.Context, t *ntask.Task) (*ntask.Result, error) {
	var p push
	if err := t.Decode(&p); err != nil {
		return nil, ntask.Permanent("bad payload: " + err.Error())
	}
	id, err := lookup(ctx, t.Key)
	if err != nil {
		return nil, err
	}
	if id == "" {
		s.say(t, "reconcile: the provider has not got it, sending")
		return nil, nil
	}
	s.say(t, "reconcile: the provider has it (%s), not sending again", id)
	r, err := s.record(ctx, t, p, id, "reconcile")
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func (s *service) handle(ctx context.Context, t *ntask.Task) (ntask.Result, error) {
	if t.PriorOutcome == "committed" {
		s.say(t, "an earlier attempt committed its delivery")
		return ntask.Success("provider_accepted", map[string]string{"via": "committed"}), nil
	}
	var p push
	if err := t.Decode(&p); err != nil {
		return ntask.Result{}, ntask.Permanent("bad payload: " + err.Error())
	}
	var body string
	err := s.pool.QueryRow(ctx, `SELECT body FROM push_message WHERE id = $1 AND version = $2`,
		p.Message, p.Version).Scan(&body)
	if err != nil {
		if strings.Contains(err.Error(), "no rows") {
			return ntask.Result{}, ntask.Permanent(fmt.Sprintf("message %s v%d is gone", p.Message, p.Version))
		}
		return ntask.Result{}, err // before invoked: transient
	}
	if err := t.Invoked(ctx); err != nil { // from here a crash is "unknown", not "not sent"
		return ntask.Result{}, err
	}
	id, err := send(ctx, t.Key, p.Device, body)
	if err != nil {
		var te *ntask.TaskError
		if errors.As(err, &te) {
			s.say(t, "%s: %s", te.Class, te.Message)
		}
		return ntask.Result{}, err
	}
	s.say(t, "sent, provider id %s", id)
	return s.record(ctx, t, p, id, "send")
}

func work(ctx context.Context, pool *pgxpool.Pool, name string, concurrency int) error {
	s := &service{pool: pool}
	w, err := ntask.NewWorker(pool, queue, s.handle, ntask.Options{
		Name: name, Concurrency: concurrency, Wait: 5 * time.Second, ShutdownGrace: 10 * time.Second,
		Invoked: "manual", Reconcile: s.reconcile,
		OnLost: func(t *ntask.Task, op string, a ntask.Answer) {
			s.say(t, "lost (%s answered %q): not reporting", op, a)
		},
	})
	if err != nil {
		return err
	}
	s.name = w.Name()
	fmt.Printf("%s: working queue %s, provider %s\n", s.name, queue, provider)
	err = w.RunUntilSignal(ctx) // SIGTERM / Ctrl-C: graceful; a second: at once
	st, _ := json.Marshal(w.Stats())
	fmt.Printf("%s: stopped %s\n", s.name, st)
	return err
}

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal("usage: push produce [-count N] [-start N] | work [-name W] [-concurrency N]")
	}
	if u := os.Getenv("PUSH_PROVIDER_URL"); u != "" {
		provider = u
	}
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		log.Fatal("set DATABASE_URL")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	count := fs.Int("count", 20, "messages to produce")
	start := fs.Int("start", 1, "number of the first message")
	name := fs.String("name", "", "worker name (default host-pid-random)")
	concurrency := fs.Int("concurrency", 4, "handlers at once")
	fs.Parse(os.Args[2:])
	ctx := context.Background()
	// ntask.Connect: simple protocol, no prepared statements (safe behind
	// pgbouncer in transaction pooling mode)
	pool, err := ntask.Connect(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	switch os.Args[1] {
	case "produce":
		err = produce(ctx, pool, *count, *start)
	case "work":
		err = work(ctx, pool, *name, *concurrency)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		pool.Close()
		log.Fatal(err)
	}
}
