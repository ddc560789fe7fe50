/* ntask--0.1.sql: the ntask 0.1 schema and SQL API */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION ntask" to load this file. \quit

/*
 * Tables and views live in schema ntask (created here, so it belongs to the
 * extension).  The API functions keep their ntask_ prefix and live in the
 * extension's schema (normally public), so the unqualified calls in the
 * README work.  See docs/design.md for the state machine and lock order.
 */
CREATE SCHEMA ntask;
COMMENT ON SCHEMA ntask IS 'ntask: durable tasks, attempts ledger, audit';

-- API: private (tables)

CREATE TABLE ntask.queue (
	queue			text PRIMARY KEY
		CHECK (queue ~ '^[A-Za-z0-9_.:-]{1,63}$'),
	max_attempts	integer NOT NULL DEFAULT 3
		CHECK (max_attempts BETWEEN 1 AND 1000),
	total_deadline	interval NOT NULL DEFAULT '1 day'
		CHECK (total_deadline > '0'::interval),
	lease			interval NOT NULL DEFAULT '30 seconds'
		CHECK (lease > '0'::interval),
	backoff_base	interval NOT NULL DEFAULT '1 second'
		CHECK (backoff_base > '0'::interval),
	backoff_max		interval NOT NULL DEFAULT '5 minutes'
		CHECK (backoff_max >= backoff_base),
	guard			regprocedure,
	target			jsonb,
	retention		interval NOT NULL DEFAULT '7 days'
		CHECK (retention > '0'::interval),
	created_at		timestamptz NOT NULL DEFAULT now(),
	updated_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ntask.queue IS 'ntask: per-queue policy (budget, lease, backoff, guard, target); write it with ntask_queue_set()';

CREATE TABLE ntask.task (
	task_id			bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue			text NOT NULL,	-- see queue_delete_check below
	task_key		text NOT NULL,
	payload			jsonb NOT NULL,
	payload_digest	bytea NOT NULL,
	digest_version	smallint NOT NULL,
	partition_key	text,
	priority		integer NOT NULL DEFAULT 0,
	state			text NOT NULL DEFAULT 'ready'
		CHECK (state IN ('ready', 'leased', 'retry_wait', 'succeeded',
						 'repair_required', 'canceled', 'skipped')),
	run_at			timestamptz NOT NULL,
	due_at			timestamptz,
	attempts		integer NOT NULL DEFAULT 0,
	max_attempts	integer NOT NULL,
	deadline		timestamptz NOT NULL,
	token			bigint NOT NULL DEFAULT 0,
	lease_owner		text,
	lease_until		timestamptz,
	unknown_attempts integer NOT NULL DEFAULT 0,
	last_error_class text,
	last_error_stage text,
	outcome			text,
	reason			text,
	repair_owner	text,
	repair_next_action text,
	created_at		timestamptz NOT NULL DEFAULT now(),
	updated_at		timestamptz NOT NULL DEFAULT now(),
	finished_at		timestamptz,
	UNIQUE (queue, task_key),
	CHECK ((due_at IS NULL) = (state IN ('succeeded', 'repair_required',
										 'canceled', 'skipped'))),
	CHECK ((state = 'leased') = (lease_owner IS NOT NULL))
);
COMMENT ON TABLE ntask.task IS 'ntask: one row per logical task; state machine in docs/design.md';
COMMENT ON COLUMN ntask.task.due_at IS 'claim order key: run_at while ready/retry_wait, lease_until while leased, NULL when finished';
COMMENT ON COLUMN ntask.task.token IS 'fencing token of the latest attempt; durably monotonic per task';

/*
 * The ready set: only unfinished tasks are in this index, so a claim stays
 * O(log n) however many finished rows the table holds.  Expired leases are
 * in it too (due_at = lease_until), so takeover uses the same scan.
 */
CREATE INDEX task_due_idx ON ntask.task (queue, priority DESC, due_at, task_id)
	WHERE due_at IS NOT NULL;
CREATE INDEX task_repair_idx ON ntask.task (queue, updated_at)
	WHERE state = 'repair_required';

/*
 * No foreign key from task.queue to queue: its RI check takes FOR KEY SHARE
 * on the one queue row in every enqueuing transaction, and with concurrent
 * producers those shared locks become MultiXacts (measured: enqueue at 8
 * clients lost about a third of its throughput).  Enqueue only inserts
 * through INSERT ... SELECT FROM ntask.queue, so a task's queue exists when
 * it is created; this trigger keeps a queue with tasks from being deleted.
 */
CREATE FUNCTION ntask.queue_delete_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM ntask.task t WHERE t.queue OPERATOR(pg_catalog.=) OLD.queue) THEN
		RAISE EXCEPTION 'ntask: queue "%" still has tasks', OLD.queue
			USING ERRCODE = 'foreign_key_violation',
				  HINT = 'Cancel and delete its tasks first.';
	END IF;
	RETURN OLD;
END $$;
COMMENT ON FUNCTION ntask.queue_delete_check() IS 'ntask: refuses to delete or rename a queue that still has tasks';
CREATE TRIGGER queue_delete_check BEFORE DELETE OR UPDATE OF queue ON ntask.queue
	FOR EACH ROW EXECUTE FUNCTION ntask.queue_delete_check();

CREATE TABLE ntask.attempt (
	task_id			bigint NOT NULL,
	token			bigint NOT NULL,
	attempt			integer NOT NULL,
	worker			text NOT NULL,
	claimed_at		timestamptz NOT NULL DEFAULT now(),
	invoked_at		timestamptz,
	ended_at		timestamptz,
	result			text,
	requested		text,
	error_class		text,
	error_stage		text,
	outcome_known	boolean,
	outcome			text,
	retry_at		timestamptz,
	detail			jsonb,
	PRIMARY KEY (task_id, token)
);
COMMENT ON TABLE ntask.attempt IS 'ntask: ledger, one row per attempt (claim); records whether it was invoked and whether its outcome is known';
COMMENT ON COLUMN ntask.attempt.requested IS 'the to_state this token asked for in ntask_transition (NULL if it never did)';
COMMENT ON COLUMN ntask.attempt.result IS 'how the attempt ended: the task state it produced, or lease_expired / canceled';

/*
 * Commit receipts (three-state protocol): written by ntask_receipt in the
 * caller's business transaction, keyed by (task_id, token), with the
 * canonical digest of what was committed.
 */
CREATE TABLE ntask.receipt (
	task_id			bigint NOT NULL,
	token			bigint NOT NULL,
	payload_digest	bytea NOT NULL,
	digest_version	smallint NOT NULL,
	committed_at	timestamptz NOT NULL DEFAULT now(),
	db_user			name NOT NULL DEFAULT current_user,
	PRIMARY KEY (task_id, token)
);
COMMENT ON TABLE ntask.receipt IS 'ntask: commit receipts, one per (task, token) that committed a business write; see ntask_receipt()';

/*
 * General monotonic fences (ntask_fence): the watermark of a target such as
 * a config document applied to a host, and a receipt per applied token.
 */
CREATE TABLE ntask.fence (
	fence_key		text PRIMARY KEY,
	token			bigint NOT NULL,
	payload_digest	bytea NOT NULL,
	digest_version	smallint NOT NULL,
	updated_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ntask.fence IS 'ntask: current watermark (token) and content digest per fence key; see ntask_fence()';

CREATE TABLE ntask.fence_receipt (
	fence_key		text NOT NULL,
	token			bigint NOT NULL,
	payload_digest	bytea NOT NULL,
	digest_version	smallint NOT NULL,
	applied_at		timestamptz NOT NULL DEFAULT now(),
	db_user			name NOT NULL DEFAULT current_user,
	PRIMARY KEY (fence_key, token)
);
COMMENT ON TABLE ntask.fence_receipt IS 'ntask: one row per token that advanced a fence';

CREATE TABLE ntask.audit (
	audit_id		bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at				timestamptz NOT NULL DEFAULT now(),
	actor			text NOT NULL,
	db_user			name NOT NULL DEFAULT current_user,
	action			text NOT NULL,
	task_id			bigint,
	queue			text,
	reason			text NOT NULL,
	from_state		text,
	to_state		text,
	detail			jsonb
);
COMMENT ON TABLE ntask.audit IS 'ntask: who did which administrative action (replay, cancel, repair_assign, queue_set), when and why';

SELECT pg_catalog.pg_extension_config_dump('ntask.queue', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.task', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.attempt', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.audit', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.receipt', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.fence', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.fence_receipt', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.task_task_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.audit_audit_id_seq', '');

-- API: public (views)

CREATE VIEW ntask.queue_stats AS
SELECT q.queue,
	   coalesce(s.ready, 0) AS ready,
	   coalesce(s.leased, 0) AS leased,
	   coalesce(s.retry_wait, 0) AS retry_wait,
	   coalesce(s.succeeded, 0) AS succeeded,
	   coalesce(s.repair_required, 0) AS repair_required,
	   coalesce(s.canceled, 0) AS canceled,
	   coalesce(s.skipped, 0) AS skipped,
	   pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_ready AS oldest_ready_age,
	   pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_unfinished AS oldest_unfinished_age,
	   coalesce(s.unknown_attempts, 0) AS unknown_attempts,
	   coalesce(s.repair_required, 0) AS repair_count
FROM ntask.queue q
LEFT JOIN (
	SELECT t.queue,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready') AS ready,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'leased') AS leased,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'retry_wait') AS retry_wait,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'succeeded') AS succeeded,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'repair_required') AS repair_required,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'canceled') AS canceled,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'skipped') AS skipped,
		   min(t.run_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}')
								 AND t.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest_ready,
		   min(t.created_at) FILTER (WHERE t.due_at IS NOT NULL) AS oldest_unfinished,
		   sum(t.unknown_attempts) AS unknown_attempts
	FROM ntask.task t
	GROUP BY t.queue
) s ON s.queue OPERATOR(pg_catalog.=) q.queue;
COMMENT ON VIEW ntask.queue_stats IS 'ntask: per queue, tasks per state, oldest due-and-ready age, oldest unfinished age, attempts whose outcome is unknown, repair count';

CREATE VIEW ntask.repair_queue AS
SELECT t.task_id, t.queue, t.task_key, t.reason, t.attempts,
	   a.first_attempt_at, a.last_attempt_at,
	   t.last_error_class, t.last_error_stage,
	   coalesce(a.known_outcomes, 0) AS known_outcomes,
	   coalesce(a.unknown_outcomes, 0) AS unknown_outcomes,
	   t.repair_owner AS owner, t.repair_next_action AS next_action,
	   t.updated_at AS since
FROM ntask.task t
LEFT JOIN LATERAL (
	SELECT min(at.claimed_at) AS first_attempt_at,
		   max(at.claimed_at) AS last_attempt_at,
		   count(*) FILTER (WHERE at.outcome_known) AS known_outcomes,
		   count(*) FILTER (WHERE NOT at.outcome_known) AS unknown_outcomes
	FROM ntask.attempt at
	WHERE at.task_id OPERATOR(pg_catalog.=) t.task_id
) a ON true
WHERE t.state OPERATOR(pg_catalog.=) 'repair_required';
COMMENT ON VIEW ntask.repair_queue IS 'ntask: redacted summary of tasks that need a human (no payload): reason, attempts, first/last attempt, last error, known vs unknown outcomes, owner, next action';

-- API: public (functions)

CREATE FUNCTION @extschema@.ntask_queue_set(
	queue text,
	max_attempts integer DEFAULT NULL,
	total_deadline interval DEFAULT NULL,
	lease interval DEFAULT NULL,
	backoff_base interval DEFAULT NULL,
	backoff_max interval DEFAULT NULL,
	guard regprocedure DEFAULT NULL,
	target jsonb DEFAULT NULL,
	retention interval DEFAULT NULL)
RETURNS SETOF ntask.queue
AS 'MODULE_PATHNAME', 'ntask_queue_set'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval) IS
'ntask: create or update a queue''s policy; NULL arguments keep the current value (or the default for a new queue); returns the resulting row';

CREATE FUNCTION @extschema@.ntask_queue_clear_guard(queue text)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_queue_clear_guard'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_clear_guard(text) IS
'ntask: remove the guard function of a queue (ntask_queue_set treats NULL as "keep")';

CREATE FUNCTION @extschema@.ntask_enqueue(
	queue text,
	task_key text,
	payload jsonb DEFAULT '{}',
	run_at timestamptz DEFAULT NULL,
	partition_key text DEFAULT NULL,
	priority integer DEFAULT 0)
RETURNS TABLE (task_id bigint, created boolean, state text)
AS 'MODULE_PATHNAME', 'ntask_enqueue'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer) IS
'ntask: idempotent enqueue on (queue, task_key); a duplicate returns the existing task with created = false, the same key with a different payload raises SQLSTATE NT001';

CREATE FUNCTION @extschema@.ntask_claim(
	queue text,
	worker text,
	max_tasks integer DEFAULT 1,
	lease interval DEFAULT NULL)
RETURNS TABLE (task_id bigint, task_key text, payload jsonb, attempt integer,
			   token bigint, lease_until timestamptz, prior_outcome text)
AS 'MODULE_PATHNAME', 'ntask_claim'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_claim(text, text, integer, interval) IS
'ntask: lease up to max_tasks due tasks (FOR UPDATE SKIP LOCKED), taking over expired leases; each gets a new fencing token and counts an attempt; tasks whose budget is spent go to repair_required instead';

CREATE FUNCTION @extschema@.ntask_heartbeat(
	task_id bigint,
	token bigint,
	lease interval DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ntask_heartbeat'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_heartbeat(bigint, bigint, interval) IS
'ntask: extend the lease of the current token; returns the new lease_until, or NULL when the token no longer holds the task';

CREATE FUNCTION @extschema@.ntask_invoked(task_id bigint, token bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_invoked'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_invoked(bigint, bigint) IS
'ntask: record that the attempt is about to call out (its outcome becomes unknown until a transition); returns applied, duplicate or stale';

CREATE FUNCTION @extschema@.ntask_transition(
	task_id bigint,
	token bigint,
	to_state text,
	error_class text DEFAULT NULL,
	detail jsonb DEFAULT NULL,
	retry_at timestamptz DEFAULT NULL,
	outcome text DEFAULT NULL,
	error_stage text DEFAULT NULL)
RETURNS TABLE (result text, state text, run_at timestamptz)
AS 'MODULE_PATHNAME', 'ntask_transition'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition(bigint, bigint, text, text, jsonb, timestamptz, text, text) IS
'ntask: fenced end of an attempt: applied, duplicate (same token, same transition), conflict (same token, different transition) or stale (the task moved on)';

CREATE FUNCTION @extschema@.ntask_replay(task_id bigint, actor text, reason text)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_replay'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_replay(bigint, text, text) IS
'ntask: audited replay of a repair_required task: re-checks the queue guard, grants a fresh budget, returns the new state';

CREATE FUNCTION @extschema@.ntask_cancel(task_id bigint, actor text, reason text)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_cancel'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_cancel(bigint, text, text) IS
'ntask: audited cancel of an unfinished task; a leased task''s token becomes stale; returns applied or duplicate';

CREATE FUNCTION @extschema@.ntask_repair_assign(task_id bigint, owner text, next_action text)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_repair_assign'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_repair_assign(bigint, text, text) IS
'ntask: audited assignment of an owner and a next action to a repair_required task';

CREATE FUNCTION @extschema@.ntask_digest(payload jsonb, version integer DEFAULT 1)
RETURNS bytea
AS 'MODULE_PATHNAME', 'ntask_digest'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.ntask_digest(jsonb, integer) IS
'ntask: canonical digest of a jsonb value (version 1: SHA-256 of the canonical form); key order, whitespace and numeric scale do not matter';

CREATE FUNCTION @extschema@.ntask_receipt(task_id bigint, token bigint, payload jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_receipt'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_receipt(bigint, bigint, jsonb) IS
'ntask: commit receipt, called in the business transaction: applied, duplicate (same token, same content), conflict (same token, different content) or stale (no receipt and the task moved past the token)';

CREATE FUNCTION @extschema@.ntask_fence(fence_key text, token bigint, payload jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_fence'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_fence(text, bigint, jsonb) IS
'ntask: monotonic fence: a token above the watermark advances it (applied); equal with the same content is a duplicate, with different content a conflict; below is stale';
