package ntask_test

// The worker of docs/clients/go.md, compiled by go vet and go test (no
// Output comment: not run). A push notification worker with a fake
// provider: the provider takes an idempotency key, so the reconcile asks
// it whether the previous, unknown attempt went through.

import (
	"context"
	"log"
	"os"

	ntask "github.com/ntask/ntask-go"
)

type push struct {
	Device string `json:"device"`
	Text   string `json:"text"`
}

// provider is the external service (here a stand-in).
type provider interface {
	Send(ctx context.Context, idempotencyKey, device, text string) (messageID string, err error)
	Lookup(ctx context.Context, idempotencyKey string) (messageID string, found bool, err error)
}

func Example() {
	ctx := context.Background()
	pool, err := ntask.Connect(ctx, os.Getenv("DATABASE_URL")) // works behind pgbouncer too
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var prov provider // your provider's client

	handler := func(ctx context.Context, t *ntask.Task) (ntask.Result, error) {
		var p push
		if err := t.Decode(&p); err != nil {
			return ntask.Result{}, ntask.Permanent("bad payload: " + err.Error())
		}
		// Options.Invoked "auto": ntask_invoked is already committed here
		id, err := prov.Send(ctx, t.Key, p.Device, p.Text)
		if err != nil {
			return ntask.Result{}, err // invoked: an unclassified error is unknown
		}
		return ntask.Success("sent", map[string]string{"message_id": id}), nil
	}
	reconcile := func(ctx context.Context, t *ntask.Task) (*ntask.Result, error) {
		id, found, err := prov.Lookup(ctx, t.Key) // the idempotency key is the task key
		if err != nil || !found {
			return nil, err // not done (or the lookup failed: unknown again)
		}
		r := ntask.Success("sent", map[string]string{"message_id": id})
		return &r, nil
	}
	w, err := ntask.NewWorker(pool, "push", handler, ntask.Options{Reconcile: reconcile})
	if err != nil {
		log.Fatal(err)
	}
	// SIGTERM / SIGINT: graceful stop; a second signal: at once
	if err := w.RunUntilSignal(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("stopped: %+v", w.Stats())
}

func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := ntask.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx) // the business transaction
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO message (id, body) VALUES ($1, $2)`, "m-9", "hi"); err != nil {
		log.Fatal(err)
	}
	e, err := ntask.Enqueue(ctx, tx, "push", "notify:d-1:m-9", push{Device: "d-1", Text: "hi"},
		ntask.EnqueueOptions{PartitionKey: "d-1"})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // the task exists iff the message does
		log.Fatal(err)
	}
	log.Printf("task %d created=%v", e.TaskID, e.Created)
}
