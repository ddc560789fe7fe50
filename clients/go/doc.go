// Package ntask is the Go worker library of ntask, the PostgreSQL
// extension for durable tasks with leases and fencing tokens (issue 50).
//
// It wraps ntask's documented SQL functions (docs/reference.md) and never
// touches its tables: a producer side (Enqueue, EnqueueMany, GetResult) that
// runs in the caller's transaction, and a Worker that runs the fenced loop:
// one waiting claim at a time, handlers run concurrently, one heartbeat
// timer per held task, ntask_invoked before the handler's external effect,
// a reconcile hook when the previous attempt's outcome is unknown, the
// report with the task's token, and a graceful shutdown that releases what
// was claimed and never invoked. The Python and TypeScript libraries have
// the same concepts, names and defaults (CLIENTS_API).
//
// # Driver
//
// The library is built on pgx v4's native interface (pgxpool), not on
// database/sql: a worker needs a pool whose connections it can hold for one
// waiting claim while other goroutines heartbeat and report, fine control of
// the protocol so that it works behind pgbouncer in transaction pooling mode,
// and typed errors (pgconn.PgError with its SQLSTATE) to tell a lost
// connection from an answer. pgx gives these without a second dependency,
// and Debian packages it (golang-github-jackc-pgx-v4-dev). The producer
// functions take a Querier, which pgx's *pgx.Conn, pgx.Tx, *pgxpool.Pool and
// *pgxpool.Conn satisfy; a database/sql *sql.DB, *sql.Tx or *sql.Conn (lib/pq
// or pgx's stdlib) is wrapped with SQL(...).
//
// # pgbouncer
//
// pgx's default statement cache prepares named statements, which break behind
// pgbouncer in transaction pooling mode (42P05 "prepared statement already
// exists", 26000 "prepared statement does not exist") once a client's
// statements move between server connections. Connect therefore sets
// PreferSimpleProtocol: every statement is one simple-protocol query, with
// the arguments quoted by pgx, and nothing is prepared. A pool you build
// yourself needs either prefer_simple_protocol=true or
// statement_cache_mode=describe in its DSN (describe mode sends unnamed
// statements only, which pgbouncer carries). The library's own statements
// pass every argument as text, bigint or boolean with an SQL cast, so they
// give the same answers in either protocol.
//
// # The waiting claim is never cancelled
//
// A claim can commit on the server a moment before a client-side cancel
// reaches it; the driver then drops the row and the task sits leased for a
// whole lease with an attempt spent. So Stop never cancels the claim in
// flight: the worker stops claiming after the current wait returns (Wait is
// bounded by the server's ntask.max_wait) and releases, with ntask_release,
// every task that arrives after the stop was requested.
package ntask
