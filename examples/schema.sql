-- examples/schema.sql: what the example workers (examples/python, node,
-- java) write besides ntask, and the queue they drain.
--
-- example_provider stands for the external system a task calls (a push
-- provider, a payment API): one row per effect, keyed by the idempotency
-- key (the task key), written in its own transaction like any remote call.
-- example_business is the application's own table: one row per task,
-- written in the same transaction as ntask_receipt.
CREATE TABLE IF NOT EXISTS example_provider (
	task_key	text PRIMARY KEY,
	task_id		bigint NOT NULL,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	calls		integer NOT NULL DEFAULT 1,	-- requests with this key (the effect happens once)
	at			timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS example_business (
	task_id		bigint NOT NULL,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	provider_token bigint NOT NULL,
	at			timestamptz NOT NULL DEFAULT clock_timestamp()
);
SELECT queue FROM ntask_queue_set('examples', max_attempts => 5, lease => '5 seconds',
								  backoff_base => '50 milliseconds', backoff_max => '200 milliseconds');
