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

-- API: public (schedules; see docs/design.md "Schedules")

CREATE FUNCTION @extschema@.ntask_cron_next(expr text, after timestamptz, timezone text DEFAULT 'UTC')
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ntask_cron_next'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.ntask_cron_next(text, timestamptz, text) IS
'ntask: the first firing time of a 5-field cron expression strictly after a timestamp, evaluated in a time zone';

CREATE FUNCTION @extschema@.ntask_cron_prev(expr text, at timestamptz, timezone text DEFAULT 'UTC')
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ntask_cron_prev'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.ntask_cron_prev(text, timestamptz, text) IS
'ntask: the latest firing time of a 5-field cron expression at or before a timestamp, evaluated in a time zone';

CREATE TABLE ntask.schedule (
	name			text PRIMARY KEY
		CHECK (name ~ '^[A-Za-z0-9_.:-]{1,63}$'),
	cron			text NOT NULL,
	queue			text NOT NULL,
	payload			jsonb NOT NULL DEFAULT '{}',
	overlap			text NOT NULL DEFAULT 'skip'
		CHECK (overlap IN ('skip', 'allow', 'buffer_one')),
	catchup			interval NOT NULL DEFAULT '1 hour'
		CHECK (catchup >= '0'::interval),
	timezone		text NOT NULL DEFAULT 'UTC',
	bound_to_next_slot boolean NOT NULL DEFAULT true,
	cron_job		text,
	last_slot		timestamptz,
	created_at		timestamptz NOT NULL DEFAULT now(),
	updated_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ntask.schedule IS 'ntask: schedules fired by pg_cron; each slot becomes one task keyed <name>:<slot in UTC>';

CREATE TABLE ntask.schedule_slot (
	id				bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	schedule		text NOT NULL,
	slot			timestamptz NOT NULL,
	fired_at		timestamptz NOT NULL DEFAULT now(),
	task_id			bigint,
	outcome			text NOT NULL
		CHECK (outcome IN ('enqueued', 'duplicate', 'skipped', 'missed',
						   'caught_up', 'rerun')),
	reason			text
);
CREATE INDEX schedule_slot_idx ON ntask.schedule_slot (schedule, slot);
COMMENT ON TABLE ntask.schedule_slot IS 'ntask: what happened to every slot of every schedule: enqueued, duplicate, skipped (overlap), missed (beyond catch-up), caught_up, rerun';

SELECT pg_catalog.pg_extension_config_dump('ntask.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.schedule_slot', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.schedule_slot_id_seq', '');

/*
 * ntask.slot_key: the task key of a slot, <name>:<slot in ISO 8601 UTC>.
 */
CREATE FUNCTION ntask.slot_key(name text, slot timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT name || ':' || to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') $$;
COMMENT ON FUNCTION ntask.slot_key(text, timestamptz) IS 'ntask: task key of a schedule slot: <name>:<slot in ISO 8601 UTC>';

/*
 * ntask.fire_slot: enqueue (or record) one slot of a locked schedule.
 * outcome_if_new is enqueued, caught_up or rerun; key_suffix makes a
 * deliberate second run of a slot a new key.
 */
CREATE FUNCTION ntask.fire_slot(s ntask.schedule, slot timestamptz, outcome_if_new text,
								key_suffix text DEFAULT NULL,
								OUT task_id bigint, OUT outcome text, OUT reason text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	key text := ntask.slot_key(s.name, slot)
				|| CASE WHEN key_suffix IS NULL THEN '' ELSE ':rerun:' || key_suffix END;
	next_slot timestamptz := @extschema@.ntask_cron_next(s.cron, slot, s.timezone);
	busy record;
	e record;
BEGIN
	-- a slot that already has its task: any number of firings make one task
	SELECT t.task_id INTO task_id FROM ntask.task t
	WHERE t.queue OPERATOR(pg_catalog.=) s.queue AND t.task_key OPERATOR(pg_catalog.=) key;
	IF FOUND THEN
		outcome := 'duplicate';
		reason := 'slot already has task ' || task_id;
	ELSE
		-- overlap policy: unfinished tasks of earlier slots
		SELECT count(*) AS n,
			   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.<>) 'leased') AS waiting,
			   min(ss.slot) AS first_slot
		INTO busy
		FROM ntask.schedule_slot ss JOIN ntask.task t ON t.task_id OPERATOR(pg_catalog.=) ss.task_id
		WHERE ss.schedule OPERATOR(pg_catalog.=) s.name
		  AND ss.slot OPERATOR(pg_catalog.<) fire_slot.slot
		  AND t.state OPERATOR(pg_catalog.=) ANY ('{ready,leased,retry_wait}');
		IF key_suffix IS NULL AND busy.n > 0 AND
		   (s.overlap = 'skip' OR (s.overlap = 'buffer_one' AND busy.waiting > 0)) THEN
			outcome := 'skipped';
			reason := format('overlap %s: slot %s still unfinished', s.overlap,
							 ntask.slot_key(s.name, busy.first_slot));
		ELSE
			SELECT * INTO e FROM @extschema@.ntask_enqueue(s.queue, key, s.payload);
			task_id := e.task_id;
			outcome := CASE WHEN e.created THEN outcome_if_new ELSE 'duplicate' END;
			-- retries of a slot never cross into the next slot (unless the
			-- schedule says otherwise: then the queue's total_deadline rules)
			UPDATE ntask.task t SET deadline = LEAST(t.deadline, next_slot)
			WHERE t.task_id OPERATOR(pg_catalog.=) e.task_id AND e.created
			  AND s.bound_to_next_slot;
		END IF;
	END IF;
	INSERT INTO ntask.schedule_slot (schedule, slot, task_id, outcome, reason)
	VALUES (s.name, slot, task_id, outcome, reason);
END $$;
COMMENT ON FUNCTION ntask.fire_slot(ntask.schedule, timestamptz, text, text) IS 'ntask: internal: enqueue or record one slot of a locked schedule';

CREATE FUNCTION @extschema@.ntask_fire(name text, slot timestamptz DEFAULT NULL, rerun text DEFAULT NULL)
RETURNS TABLE (fired_slot timestamptz, task_id bigint, outcome text, reason text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	cur timestamptz;
	missed timestamptz;
	n integer := 0;
	r record;
BEGIN
	IF name IS NULL THEN
		RAISE EXCEPTION 'ntask: name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	-- the schedule row lock serializes concurrent firings of one schedule
	SELECT * INTO s FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) ntask_fire.name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;

	IF ntask_fire.slot IS NOT NULL THEN
		-- a manual (re-)run of a given slot
		IF @extschema@.ntask_cron_prev(s.cron, ntask_fire.slot, s.timezone) OPERATOR(pg_catalog.<>) ntask_fire.slot THEN
			RAISE EXCEPTION 'ntask: % is not a slot of schedule "%"', ntask_fire.slot, s.name
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = format('Its cron expression is "%s" in time zone %s.', s.cron, s.timezone);
		END IF;
		IF rerun IS NOT NULL AND (rerun = '' OR length(rerun) > 63) THEN
			RAISE EXCEPTION 'ntask: rerun must be 1 to 63 characters' USING ERRCODE = 'invalid_parameter_value';
		END IF;
		SELECT * INTO r FROM ntask.fire_slot(s, ntask_fire.slot,
			CASE WHEN rerun IS NULL THEN 'enqueued' ELSE 'rerun' END, rerun);
		fired_slot := ntask_fire.slot; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
		RETURN NEXT;
		UPDATE ntask.schedule sc SET last_slot = GREATEST(sc.last_slot, ntask_fire.slot), updated_at = now()
		WHERE sc.name OPERATOR(pg_catalog.=) s.name;
		RETURN;
	END IF;
	IF rerun IS NOT NULL THEN
		RAISE EXCEPTION 'ntask: rerun needs an explicit slot' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	cur := @extschema@.ntask_cron_prev(s.cron, now(), s.timezone);
	IF s.last_slot IS NOT NULL AND cur OPERATOR(pg_catalog.<=) s.last_slot THEN
		RETURN;				-- no new slot since the last firing
	END IF;

	-- catch up missed slots since the last fired one, within the window
	IF s.last_slot IS NOT NULL THEN
		missed := @extschema@.ntask_cron_next(s.cron, s.last_slot, s.timezone);
		WHILE missed OPERATOR(pg_catalog.<) cur LOOP
			n := n + 1;
			IF missed OPERATOR(pg_catalog.>=) cur - s.catchup THEN
				SELECT * INTO r FROM ntask.fire_slot(s, missed, 'caught_up');
				fired_slot := missed; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
			ELSIF n > 1000 THEN
				-- do not write one row per minute for a week of downtime
				INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
				VALUES (s.name, missed, 'missed',
						'beyond the catch-up window; later missed slots up to '
						|| ntask.slot_key(s.name, cur) || ' not listed');
				fired_slot := missed; task_id := NULL; outcome := 'missed'; reason := 'beyond the catch-up window';
				RETURN NEXT;
				missed := GREATEST(cur - s.catchup, missed);
				missed := @extschema@.ntask_cron_prev(s.cron, missed, s.timezone);
				missed := @extschema@.ntask_cron_next(s.cron, missed, s.timezone);
				n := -1000000;
				CONTINUE;
			ELSE
				INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
				VALUES (s.name, missed, 'missed', 'beyond the catch-up window of ' || s.catchup);
				fired_slot := missed; task_id := NULL; outcome := 'missed'; reason := 'beyond the catch-up window of ' || s.catchup;
			END IF;
			RETURN NEXT;
			missed := @extschema@.ntask_cron_next(s.cron, missed, s.timezone);
		END LOOP;
	END IF;

	SELECT * INTO r FROM ntask.fire_slot(s, cur, 'enqueued');
	fired_slot := cur; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
	RETURN NEXT;
	UPDATE ntask.schedule sc SET last_slot = cur, updated_at = now() WHERE sc.name OPERATOR(pg_catalog.=) s.name;
END $$;
COMMENT ON FUNCTION @extschema@.ntask_fire(text, timestamptz, text) IS
'ntask: fire a schedule: enqueue the latest slot (key <name>:<slot UTC>) and catch up missed slots within the window; with slot, (re-)run that slot (a repeat is a duplicate); with rerun, a deliberate second run under a new key';

CREATE FUNCTION @extschema@.ntask_schedule(name text, cron text, queue text, payload jsonb DEFAULT '{}',
										   overlap text DEFAULT 'skip', catchup interval DEFAULT '1 hour',
										   timezone text DEFAULT 'UTC', bound_to_next_slot boolean DEFAULT true)
RETURNS ntask.schedule
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	job text := 'ntask:' || name;
	cmd text := format('SELECT * FROM %I.ntask_fire(%L)', '@extschema@', name);
	cron_expr text;
BEGIN
	IF name IS NULL OR cron IS NULL OR queue IS NULL OR payload IS NULL
	   OR overlap IS NULL OR catchup IS NULL OR timezone IS NULL OR bound_to_next_slot IS NULL THEN
		RAISE EXCEPTION 'ntask: ntask_schedule arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF name !~ '^[A-Za-z0-9_.:-]{1,63}$' THEN
		RAISE EXCEPTION 'ntask: invalid schedule name "%"', name
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use 1 to 63 letters, digits, ''_'', ''.'', '':'' or ''-''.';
	END IF;
	IF overlap NOT IN ('skip', 'allow', 'buffer_one') THEN
		RAISE EXCEPTION 'ntask: unknown overlap policy "%"', overlap
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use skip, allow or buffer_one.';
	END IF;
	IF catchup < '0'::interval THEN
		RAISE EXCEPTION 'ntask: catchup must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) ntask_schedule.queue) THEN
		RAISE EXCEPTION 'ntask: queue "%" does not exist', queue USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM @extschema@.ntask_cron_next(cron, now(), timezone);	-- validates both

	INSERT INTO ntask.schedule AS sc (name, cron, queue, payload, overlap, catchup, timezone,
									  bound_to_next_slot)
	VALUES (name, cron, queue, payload, overlap, catchup, timezone, bound_to_next_slot)
	ON CONFLICT ON CONSTRAINT schedule_pkey DO UPDATE SET cron = EXCLUDED.cron, queue = EXCLUDED.queue,
		payload = EXCLUDED.payload, overlap = EXCLUDED.overlap, catchup = EXCLUDED.catchup,
		timezone = EXCLUDED.timezone, bound_to_next_slot = EXCLUDED.bound_to_next_slot,
		updated_at = now()
	RETURNING * INTO s;

	-- pg_cron evaluates its expressions in GMT: a UTC schedule is handed
	-- over as is, any other is fired every minute (a firing with no new
	-- slot does nothing)
	cron_expr := CASE WHEN timezone IN ('UTC', 'GMT', 'Etc/UTC') THEN cron ELSE '* * * * *' END;
	IF to_regprocedure('cron.schedule_in_database(text,text,text,text,text,boolean)') IS NOT NULL THEN
		EXECUTE 'SELECT cron.schedule_in_database($1, $2, $3, current_database())'
			USING job, cron_expr, cmd;
		UPDATE ntask.schedule sc SET cron_job = job WHERE sc.name OPERATOR(pg_catalog.=) ntask_schedule.name
		RETURNING * INTO s;
	ELSE
		RAISE NOTICE 'ntask: pg_cron is not installed in this database; schedule "%" is stored but nothing fires it', name
			USING HINT = format('In pg_cron''s database run: SELECT cron.schedule_in_database(%L, %L, %L, %L);',
								job, cron_expr, cmd, current_database());
	END IF;
	RETURN s;
END $$;
COMMENT ON FUNCTION @extschema@.ntask_schedule(text, text, text, jsonb, text, interval, text, boolean) IS
'ntask: create or replace a schedule and register its pg_cron job (ntask:<name>) calling ntask_fire(name)';

CREATE FUNCTION @extschema@.ntask_unschedule(name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
BEGIN
	DELETE FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) ntask_unschedule.name RETURNING * INTO s;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;
	IF s.cron_job IS NOT NULL AND to_regprocedure('cron.unschedule(name)') IS NOT NULL THEN
		EXECUTE 'SELECT cron.unschedule($1::name)' USING s.cron_job;
	END IF;
	RETURN true;
END $$;
COMMENT ON FUNCTION @extschema@.ntask_unschedule(text) IS
'ntask: remove a schedule and its pg_cron job; its slot history and tasks stay';
