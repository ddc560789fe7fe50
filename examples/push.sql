-- examples/push.sql: the push service's own tables and its queue, for the
-- example services in examples/python, examples/node and examples/go (run
-- once, as the owner of the application's schema and an ntask_admin):
--     psql "$DATABASE_URL" -f examples/push.sql
--
-- push_message is the application's fact (a chat message for a device);
-- each one has a notify task N9-style, enqueued in the same transaction:
-- task key notify:<user>:<device>:<message>:v<version> (a new version of a
-- message is a new task, a retry is not).  push_delivery is the business
-- write of a task: one row per task, written with its receipt
-- (ntask_receipt) in one transaction, saying which provider id it got and
-- whether by a send or by asking the provider (the reconcile).
CREATE TABLE IF NOT EXISTS push_message (
	id			text PRIMARY KEY,
	user_id		text NOT NULL,
	device		text NOT NULL,
	version		integer NOT NULL DEFAULT 1,
	body		text NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS push_delivery (
	task_key	text PRIMARY KEY,
	message_id	text NOT NULL REFERENCES push_message,
	provider_id	text NOT NULL,
	via			text NOT NULL CHECK (via IN ('send', 'reconcile')),
	attempt		integer NOT NULL,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	at			timestamptz NOT NULL DEFAULT now()
);
-- N9's lease: 5 seconds (a worker heartbeats every third of it); five
-- attempts in all; quick retries for the example
SELECT queue FROM ntask_queue_set('push', lease => '5 seconds', max_attempts => 5,
								  backoff_base => '200 milliseconds',
								  backoff_max => '2 seconds');
