// Command ntask-testworker is the worker process of the Go library's
// signal tests (SIGTERM, SIGKILL, SIGSTOP): a Worker on one queue whose
// handler does what the task's payload "kind" says, and whose reconcile
// looks the fake provider's call up. It prints one line per lost lease
// ("LOST <op> <answer> <key>") and, when it exits, "STATS <json>".
//
//	ntask-testworker -dsn DSN -queue Q [-name N] [-concurrency 2] [-grace 30s] [-invoked auto]
//
// Kinds: "ok" (success), "provider" (inserts the fake provider's call,
// go_provider_call, in its own transaction, then succeeds or, with
// "hang": true, waits until its context ends), "sleep" (ms: waits, then
// succeeds; stops with ctx), "invoke-sleep" (Invoked, then as sleep: for
// -invoked manual), "hold" (never invokes, waits until its context ends).
// Exit status: 0 after a graceful stop, 3 after a hard one, 1 on an error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	ntask "github.com/ntask/ntask-go"
)

type payload struct {
	Kind string `json:"kind"`
	Hang bool   `json:"hang"`
	Ms   int    `json:"ms"`
}

func main() {
	dsn := flag.String("dsn", "", "connection string")
	queue := flag.String("queue", "", "queue")
	name := flag.String("name", "", "worker name")
	conc := flag.Int("concurrency", 2, "handlers at once")
	grace := flag.Duration("grace", 30*time.Second, "shutdown grace")
	invoked := flag.String("invoked", "auto", "auto or manual")
	wait := flag.Duration("wait", 2*time.Second, "claim wait")
	flag.Parse()
	ctx := context.Background()
	pool, err := ntask.Connect(ctx, *dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer pool.Close()
	var outMu sync.Mutex
	say := func(format string, args ...interface{}) {
		outMu.Lock()
		fmt.Printf(format+"\n", args...)
		outMu.Unlock()
	}
	sleep := func(ctx context.Context, ms int) error {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	handler := func(ctx context.Context, t *ntask.Task) (ntask.Result, error) {
		var p payload
		if err := t.Decode(&p); err != nil {
			return ntask.Result{}, ntask.Permanent("bad payload: " + err.Error())
		}
		switch p.Kind {
		case "ok":
			return ntask.Success("ok", nil), nil
		case "provider":
			if _, err := pool.Exec(ctx, `INSERT INTO go_provider_call (task_key, token) VALUES ($1, $2)`, t.Key, t.Token); err != nil {
				return ntask.Result{}, err
			}
			say("CALLED %s", t.Key)
			if p.Hang {
				<-ctx.Done()
				return ntask.Result{}, ctx.Err()
			}
			return ntask.Success("sent", nil), nil
		case "sleep":
			if err := sleep(ctx, p.Ms); err != nil {
				return ntask.Result{}, err
			}
			return ntask.Success("slept", nil), nil
		case "invoke-sleep":
			if err := t.Invoked(ctx); err != nil {
				return ntask.Result{}, err
			}
			if err := sleep(ctx, p.Ms); err != nil {
				return ntask.Result{}, err
			}
			return ntask.Success("slept", nil), nil
		case "hold":
			<-ctx.Done()
			return ntask.Result{}, ctx.Err()
		}
		return ntask.Result{}, ntask.Permanent("unknown kind " + p.Kind)
	}
	reconcile := func(ctx context.Context, t *ntask.Task) (*ntask.Result, error) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM go_provider_call WHERE task_key = $1`, t.Key).Scan(&n); err != nil {
			return nil, err
		}
		say("RECONCILED %s %d", t.Key, n)
		if n > 0 {
			r := ntask.Success("reconciled", nil)
			return &r, nil
		}
		return nil, nil
	}
	w, err := ntask.NewWorker(pool, *queue, handler, ntask.Options{
		Name: *name, Concurrency: *conc, ShutdownGrace: *grace, Invoked: *invoked, Wait: *wait,
		Reconcile: reconcile,
		OnLost: func(t *ntask.Task, op string, a ntask.Answer) {
			say("LOST %s %s %s", op, a, t.Key)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	say("READY %s", w.Name())
	err = w.RunUntilSignal(ctx)
	b, _ := json.Marshal(w.Stats())
	say("STATS %s", b)
	switch err {
	case nil:
		os.Exit(0)
	case ntask.ErrHardStop:
		os.Exit(3)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
