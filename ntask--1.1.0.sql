/* ntask--1.1.0.sql: the ntask 1.1.0 schema and SQL API, complete */
-- Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION ntask" to load this file. \quit

/*
 * THE RULE: every later schema change goes into BOTH this file and the
 * upgrade script of its release (today ntask--1.0.0--1.1.0.sql; the next
 * release adds ntask--1.1.0--<next>.sql and a ntask--<next>.sql made from
 * this file).  Regress "upgrade" installs this file fresh, and 0.3 and
 * 1.0.0 (test/frozen/) updated along the upgrade path, and fails on any
 * difference between them: objects, columns and their order, defaults,
 * constraints, indexes, triggers, comments, privileges, view definitions
 * and every function's body.
 *
 * This file is the whole schema, to be read top to bottom:
 *
 *	1. Roles				the NOLOGIN roles you grant to your application roles
 *	2. Schema and tables	queues, tasks, the attempt ledger, receipts,
 *							fences, audit, schedules, sagas, metrics, Citus
 *	3. Views				what operators and exporters read
 *	4. Functions			by area: queues, enqueue, claims and attempts,
 *							repair, receipts and fences, schedules, sagas,
 *							housekeeping, explain, Citus, internal helpers
 *	5. Triggers				on ntask's tables, and the event triggers
 *	6. Privileges			who may call and read what, in one place
 *
 * Tables and views live in schema ntask (created here, so it belongs to the
 * extension).  The API functions keep their ntask_ prefix and live in the
 * extension's schema (normally public), so unqualified calls work.  The API
 * functions run their statements as the extension's owner (the role that
 * owns schema ntask), so the roles below need no rights on the tables and
 * nobody else can read a payload.  docs/design.md has the state machine,
 * the lock order and the privileges; docs/worker.md the background worker.
 */

-- ---------------------------------------------------------------------
-- 1. Roles (docs/design.md "Privileges")
-- ---------------------------------------------------------------------
-- Created if missing (roles belong to the cluster, so DROP EXTENSION
-- leaves them):
--   ntask_producer  enqueue, results, sagas
--   ntask_worker    claim, heartbeat, invoked, transition, release,
--                   receipt, fence
--   ntask_monitor   the statistics views (no payloads, no task rows): the
--                   role a metrics exporter logs in with
--   ntask_admin     all three above, queue policy, replay, cancel, repair
--                   assignment, schedules, housekeeping, explain; reads
--                   the tables
--   ntask_bgworker  the background worker's login (docs/worker.md
--                   "Identity"): the launcher starts the worker as
--                   ntask.worker_role, by default this role.  It can log in
--                   (background workers of PostgreSQL 15 connect only as a
--                   LOGIN role), has no password (nobody can log in as it
--                   with password authentication), is not a superuser, and
--                   calls the API as a worker.
-- A queue may further restrict enqueue and claim to a role
-- (ntask_queue_set_roles), a fence key prefix to a role (ntask_fence_grant).
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ntask_producer') THEN
		CREATE ROLE ntask_producer NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ntask_worker') THEN
		CREATE ROLE ntask_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ntask_admin') THEN
		CREATE ROLE ntask_admin NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ntask_monitor') THEN
		CREATE ROLE ntask_monitor NOLOGIN;
	END IF;
	IF NOT pg_catalog.pg_has_role('ntask_admin', 'ntask_producer', 'MEMBER') THEN
		GRANT ntask_producer TO ntask_admin;
	END IF;
	IF NOT pg_catalog.pg_has_role('ntask_admin', 'ntask_worker', 'MEMBER') THEN
		GRANT ntask_worker TO ntask_admin;
	END IF;
	IF NOT pg_catalog.pg_has_role('ntask_admin', 'ntask_monitor', 'MEMBER') THEN
		GRANT ntask_monitor TO ntask_admin;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ntask_bgworker') THEN
		CREATE ROLE ntask_bgworker LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
	END IF;
	IF NOT pg_catalog.pg_has_role('ntask_bgworker', 'ntask_worker', 'MEMBER') THEN
		GRANT ntask_worker TO ntask_bgworker;
	END IF;
	EXECUTE pg_catalog.format('GRANT CONNECT ON DATABASE %I TO ntask_bgworker',
							  pg_catalog.current_database());
END $$;

-- Without the library preloaded there is no background worker: say so at
-- CREATE EXTENSION (every SQL function works; ntask_housekeeping can run
-- from pg_cron).
DO $$
BEGIN
	IF NOT ('ntask' OPERATOR(pg_catalog.=) ANY (pg_catalog.string_to_array(
			pg_catalog.replace(pg_catalog.current_setting('shared_preload_libraries'), ' ', ''), ','))) THEN
		RAISE WARNING 'ntask: the library is not in shared_preload_libraries, so no background worker runs'
			USING DETAIL = 'Expired leases are rescued only by ntask_claim and ntask_housekeeping(), deadlines only by ntask_housekeeping(), and http queues are not dispatched.',
				  HINT = 'Add ntask to shared_preload_libraries and restart, or run SELECT ntask_housekeeping() from pg_cron.';
	END IF;
END $$;

-- ---------------------------------------------------------------------
-- 2. Schema and tables
-- ---------------------------------------------------------------------
CREATE SCHEMA ntask;
COMMENT ON SCHEMA ntask IS 'ntask: durable tasks, attempts ledger, audit';

-- Three C functions the tables below use in a default or a CHECK.

-- who called ntask, even though its statements run as the owner
CREATE FUNCTION ntask.caller_name() RETURNS name
AS 'MODULE_PATHNAME', 'ntask_caller_name'
LANGUAGE C STABLE;
COMMENT ON FUNCTION ntask.caller_name() IS 'ntask: the role that called the ntask API function running now (default of the db_user columns)';

-- The task row's invariants as one C call (see ntask_task_row_valid in
-- src/transition.c: every statement that writes ntask.task reads each CHECK
-- constraint back from its node tree and plans it): a known state, due_at
-- NULL exactly when finished or waiting, lease_owner set exactly while
-- leased, on_parent_failed NULL, wait or cancel, and (issue 48) the
-- attempt kept on the row, attempt_worker, of a succeeded, canceled or
-- skipped task only.  A call of three columns checks what 1.0's did.
CREATE FUNCTION ntask.task_row_valid(state text, due_at timestamptz, lease_owner text,
	on_parent_failed text DEFAULT NULL, attempt_worker text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_task_row_valid'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION ntask.task_row_valid(text, timestamptz, text, text, text) IS
'ntask: the task row invariants (CHECK task_row_valid): a known state, due_at NULL exactly when finished or waiting for parents, lease_owner set exactly while leased, on_parent_failed NULL, wait or cancel, attempt_worker set only when succeeded, canceled or skipped';
REVOKE ALL ON FUNCTION ntask.task_row_valid(text, timestamptz, text, text, text) FROM PUBLIC;

-- ntask_schedule's producer check: who is calling, under SECURITY DEFINER
CREATE FUNCTION ntask.outer_role() RETURNS oid
AS 'MODULE_PATHNAME', 'ntask_outer_role'
LANGUAGE C STABLE;
COMMENT ON FUNCTION ntask.outer_role() IS 'ntask: the role the session acts as (SET ROLE, else the session user), under any SECURITY DEFINER function: who called the API';

-- Queues: one row of policy each, written by ntask_queue_set (and
-- ntask_queue_set_roles).  Queue names, task keys and partition keys
-- compare as bytes (COLLATE "C"): they are identifiers, never sorted for
-- people, and every hot index has one of them first (a database collation
-- other than C sends each comparison through strcoll).
--
-- The guard is a function as schema-qualified signature text, resolved at
-- use (pg_upgrade refuses regprocedure columns in user tables, and an OID
-- would not survive a dump and restore), with the role that owned it when
-- it was set: at every use the function the name resolves to must still
-- have that owner (and be neither in a temporary schema nor part of an
-- extension), else the task goes to repair_required (guard_error).
--
-- Flow control (docs/design.md "Fairness", "Flow control"): caps on leased
-- tasks, per key FIFO, token buckets, the retries' share of a claim, and
-- the circuit breaker of http targets.  NULL (or false) is "off": a queue
-- with every option off claims in priority, then due, order.
--
-- (Column order is the order the columns were added in; ntask_queue_set
-- returns these rows.)
CREATE TABLE ntask.queue (
	queue			text COLLATE "C" PRIMARY KEY
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
	target			jsonb,
	retention		interval NOT NULL DEFAULT '7 days'
		CHECK (retention > '0'::interval),
	created_at		timestamptz NOT NULL DEFAULT now(),
	updated_at		timestamptz NOT NULL DEFAULT now(),
	producer_role	regrole,
	worker_role		regrole,
	guard			text,
	notify			boolean NOT NULL DEFAULT false,
	fairness		text NOT NULL DEFAULT 'none'
		CHECK (fairness IN ('none', 'partition')),
	max_inflight	integer CHECK (max_inflight > 0),
	partition_max_inflight integer CHECK (partition_max_inflight > 0),
	ordered			boolean NOT NULL DEFAULT false,
	ordered_skip_repair boolean NOT NULL DEFAULT false,
	rate_n			integer CHECK (rate_n > 0),
	rate_per		interval CHECK (rate_per > '0'),
	partition_rate_n integer CHECK (partition_rate_n > 0),
	partition_rate_per interval CHECK (partition_rate_per > '0'),
	retry_share		real CHECK (retry_share >= 0 AND retry_share <= 1),
	breaker_failures integer CHECK (breaker_failures > 0),
	breaker_cooldown interval NOT NULL DEFAULT '30 seconds'
		CHECK (breaker_cooldown > '0'),
	guard_owner		name,
	paused_at		timestamptz,
	paused_by		text,
	pause_reason	text,
	paused_until	timestamptz,
	on_rate_limited	text NOT NULL DEFAULT 'retry'
		CHECK (on_rate_limited IN ('retry', 'pause_key', 'pause_queue')),
	keys_paused_until timestamptz,
	priority_aging	interval CHECK (priority_aging > '0'),
	priority_aging_max integer,
	signal_role		regrole,
	on_parent_failed text NOT NULL DEFAULT 'wait'
		CHECK (on_parent_failed IN ('wait', 'cancel')),
	CHECK ((rate_n IS NULL) = (rate_per IS NULL)),
	CHECK ((partition_rate_n IS NULL) = (partition_rate_per IS NULL))
);
COMMENT ON TABLE ntask.queue IS 'ntask: per-queue policy (budget, lease, backoff, guard, target); write it with ntask_queue_set()';
COMMENT ON COLUMN ntask.queue.producer_role IS 'when set, only roles with its privileges may enqueue into the queue';
COMMENT ON COLUMN ntask.queue.worker_role IS 'when set, only roles with its privileges may claim from the queue';
COMMENT ON COLUMN ntask.queue.guard IS 'guard function as schema-qualified signature text (e.g. public.notify_guard(text,jsonb)); resolved at use; runs as its owner';
COMMENT ON COLUMN ntask.queue.notify IS 'NOTIFY ntask_<queue> (no payload) at the commit of a transaction that enqueued into the queue; once per transaction';
COMMENT ON COLUMN ntask.queue.fairness IS 'claim order across partition keys: none (priority, then due time, over the whole queue) or partition (round robin over the keys with due work, in key order; priority orders within a key)';
COMMENT ON COLUMN ntask.queue.max_inflight IS 'at most this many tasks of the queue leased at once (NULL: no cap)';
COMMENT ON COLUMN ntask.queue.partition_max_inflight IS 'at most this many tasks of one partition key leased at once (NULL: no cap; needs fairness partition)';
COMMENT ON COLUMN ntask.queue.ordered IS 'per-key FIFO: a task is handed out only when every earlier task of its key is finished (needs fairness partition)';
COMMENT ON COLUMN ntask.queue.ordered_skip_repair IS 'with ordered: later tasks of a key may pass a head in repair_required (default: it blocks its key)';
COMMENT ON COLUMN ntask.queue.rate_n IS 'token bucket of the queue: at most rate_n hand-outs per rate_per (ntask_queue_set rate_limit => ''n/interval'')';
COMMENT ON COLUMN ntask.queue.partition_rate_n IS 'token bucket per partition key: at most partition_rate_n hand-outs per partition_rate_per';
COMMENT ON COLUMN ntask.queue.retry_share IS 'when first attempts are due, retries get at most this share of the hand-outs (NULL or 1: no limit)';
COMMENT ON COLUMN ntask.queue.breaker_failures IS 'http targets: consecutive transient failures that open the circuit breaker (NULL: no breaker)';
COMMENT ON COLUMN ntask.queue.breaker_cooldown IS 'how long an open breaker sends nothing before one probe';

COMMENT ON COLUMN ntask.queue.priority_aging IS 'priority aging: a due task''s effective priority rises by one per this interval waited (since its due_at), up to priority_aging_max; NULL: off (fairness none only)';
COMMENT ON COLUMN ntask.queue.priority_aging_max IS 'with priority_aging: the highest effective priority aging can reach (NULL: the highest priority among the queue''s due tasks); aging never lowers a priority';
COMMENT ON COLUMN ntask.queue.signal_role IS 'who may ntask_signal the queue''s tasks (NULL: whoever has its producer right); set by ntask_queue_set_signal_role';
COMMENT ON COLUMN ntask.queue.on_parent_failed IS 'what a task of the queue does when one of its parents ends in repair_required, canceled or skipped: wait (for a parent in repair_required to be replayed and succeed; a canceled or skipped parent, which never can, sends the task to repair_required, reason parent_canceled or parent_skipped) or cancel (reason parent_failed, audited); an enqueue''s on_parent_failed overrides it';
COMMENT ON COLUMN ntask.queue.guard_owner IS 'the role that owned the guard function when it was set; a function of the guard''s name with another owner is refused at use (guard_error)';
COMMENT ON COLUMN ntask.queue.paused_at IS 'set while an operator has paused the queue (ntask_queue_pause): no claim hands anything out';
COMMENT ON COLUMN ntask.queue.paused_by IS 'who paused the queue (the actor of ntask_queue_pause)';
COMMENT ON COLUMN ntask.queue.pause_reason IS 'why the queue was paused';
COMMENT ON COLUMN ntask.queue.paused_until IS 'a pause that ends by itself: an http queue with on_rate_limited pause_queue got a 429/503 with Retry-After';
COMMENT ON COLUMN ntask.queue.on_rate_limited IS 'http queues: what a 429 or 503 with Retry-After does: retry (the task only), pause_key (every task of its partition key until then), pause_queue (the whole queue until then)';
COMMENT ON COLUMN ntask.queue.keys_paused_until IS 'the latest end of the queue''s key pauses (ntask.key_pause); the claim excludes paused keys only while it is in the future';

-- Tasks: one row per logical task (docs/design.md "States").  A running
-- attempt lives on its task row (token, attempts, lease_owner, claimed_at,
-- invoked_at); its ntask.attempt row is written once, when it ends.
--
-- No foreign key from task.queue to queue: its RI check takes FOR KEY
-- SHARE on the one queue row in every enqueuing transaction, and with
-- concurrent producers those shared locks become MultiXacts (measured:
-- enqueue at 8 clients lost about a third of its throughput).  Enqueue
-- only inserts through INSERT ... SELECT FROM ntask.queue, so a task's
-- queue exists when it is created; the trigger queue_delete_check keeps a
-- queue with tasks from being deleted.
CREATE TABLE ntask.task (
	task_id			bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue			text COLLATE "C" NOT NULL,
	task_key		text COLLATE "C" NOT NULL,
	payload			jsonb NOT NULL,
	payload_digest	bytea NOT NULL,
	digest_version	smallint NOT NULL,
	partition_key	text COLLATE "C",
	priority		integer NOT NULL DEFAULT 0,
	state			text NOT NULL DEFAULT 'ready',
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
	result			jsonb,
	saga_id			bigint,
	enqueued_by		text DEFAULT ntask.caller_name(),
	ordered			boolean,
	shard			smallint NOT NULL DEFAULT 0,
	claimed_at		timestamptz,
	invoked_at		timestamptz,
	progress		jsonb,
	progress_at		timestamptz,
	traceparent		text,
	checkpoints		integer NOT NULL DEFAULT 0,
	signal_key		text COLLATE "C",
	await_on_timeout text,
	parents_left	integer,
	has_parents		boolean NOT NULL DEFAULT false,
	has_children	boolean NOT NULL DEFAULT false,
	on_parent_failed text,
	attempt_worker	text,
	attempt_detail	jsonb,
	UNIQUE (queue, task_key),
	-- a known state, due_at NULL exactly when finished (or waiting for
	-- parents), lease_owner set exactly while leased, on_parent_failed
	-- NULL, wait or cancel, and (issue 48) the attempt kept on the row of a
	-- final task only
	CONSTRAINT task_row_valid CHECK (ntask.task_row_valid(state, due_at, lease_owner,
		on_parent_failed, attempt_worker))
);
COMMENT ON TABLE ntask.task IS 'ntask: one row per logical task; state machine in docs/design.md';
COMMENT ON COLUMN ntask.task.due_at IS 'claim order key: run_at while ready/retry_wait, lease_until while leased, NULL when finished';
COMMENT ON COLUMN ntask.task.token IS 'fencing token of the latest attempt; durably monotonic per task';
COMMENT ON COLUMN ntask.task.result IS 'what the succeeded attempt stored (ntask_transition result => ...; at most ntask.max_result_bytes); returned to a duplicate ntask_enqueue and by ntask_result; pruned with the task';
COMMENT ON COLUMN ntask.task.saga_id IS 'the saga this task is a step (or compensation) of; NULL for ordinary tasks';
COMMENT ON COLUMN ntask.task.enqueued_by IS 'the role that called ntask_enqueue (NULL for tasks enqueued before 0.3)';
COMMENT ON COLUMN ntask.task.shard IS 'distribution column of a Citus install (0 on a plain one); task_id >> 48 there';
COMMENT ON COLUMN ntask.task.claimed_at IS 'when the task''s latest attempt was claimed (the running one while state = leased; its ntask.attempt row is written when it ends)';
COMMENT ON COLUMN ntask.task.invoked_at IS 'when the latest attempt was marked invoked (ntask_invoked), if it was';
COMMENT ON COLUMN ntask.task.traceparent IS 'W3C trace context of the enqueue (ntask_enqueue traceparent => ..., or the setting ntask.traceparent), validated; the claim and the HTTP dispatch hand it on with a span id per attempt';
COMMENT ON COLUMN ntask.task.progress IS 'the latest progress the holder reported (ntask_heartbeat progress => ...; at most ntask.max_result_bytes); cleared by the claim of a new attempt, copied to ntask.attempt.progress when the attempt ends';
COMMENT ON COLUMN ntask.task.progress_at IS 'when progress was reported';
COMMENT ON COLUMN ntask.task.checkpoints IS 'how many checkpoints (ntask.checkpoint) the task has; the claim reads them only when above 0';
COMMENT ON COLUMN ntask.task.signal_key IS 'the signal the task awaits or awaited (ntask_await); its claims carry the signal in context';
COMMENT ON COLUMN ntask.task.await_on_timeout IS 'while awaiting: what the await''s timeout does, ready or repair (NULL otherwise)';
COMMENT ON COLUMN ntask.task.parents_left IS 'parents (ntask_enqueue depends_on) not yet succeeded; NULL: the task has none';
COMMENT ON COLUMN ntask.task.has_parents IS 'the task was enqueued with depends_on: its claim reads its parents'' results (context.parents)';
COMMENT ON COLUMN ntask.task.has_children IS 'some task depends on this one: its end releases or decides them (trigger task_deps_changed)';
COMMENT ON COLUMN ntask.task.on_parent_failed IS 'the enqueue''s policy for a failed parent (wait or cancel); NULL: the queue''s';
COMMENT ON COLUMN ntask.task.attempt_worker IS 'set when the holder itself ended the latest attempt succeeded, canceled or skipped: that attempt has no ntask.attempt row, the task row holds it (this is its worker; ntask.attempt_all shows it)';
COMMENT ON COLUMN ntask.task.attempt_detail IS 'the detail of the attempt kept on the row (attempt_worker set), as its ntask.attempt row would hold it';

/*
 * The ready set: only unfinished tasks that hold no lease are in this
 * index, so a claim stays O(log n) however many finished rows the table
 * holds, and a claim writes no entry in it (issue 48, lever (b)).  The
 * leased rows are in task_lease_idx, in the same order (a leased row's
 * due_at is its lease_until): a claim merges the two to take over an
 * expired lease at its place (docs/design.md "Indexes").
 */
CREATE INDEX task_due_idx ON ntask.task (queue, priority DESC, due_at, task_id)
	WHERE due_at IS NOT NULL AND lease_until IS NULL;
CREATE INDEX task_repair_idx ON ntask.task (queue, updated_at)
	WHERE state = 'repair_required';
-- The claim's walk over priorities reads the priorities other than 0
-- here, and tries priority 0 without looking it up first (its tasks are
-- never in this index): a queue whose tasks all have the default priority
-- walks its range of task_due_idx once per claim instead of twice (that
-- range starts with the dead entries of the tasks claimed since the last
-- vacuum, and every forward scan of it steps over all of them).
CREATE INDEX task_priority_idx ON ntask.task (queue, priority DESC)
	WHERE due_at IS NOT NULL AND priority <> 0;
-- The per-key heads of a fair queue.  In a fair queue a task enqueued
-- without a key is stored with partition_key '' (enqueue refuses an empty
-- key, so '' means "none"); tasks of other queues keep NULL and are not in
-- this index, so a queue without keys pays nothing for it.
CREATE INDEX task_partition_due_idx
	ON ntask.task (queue, partition_key, priority DESC, due_at, task_id)
	WHERE due_at IS NOT NULL AND partition_key IS NOT NULL;
-- Tasks of an ordered queue carry ordered = true (set at enqueue, or for
-- the unfinished tasks when the queue turns ordered); this index holds
-- them while unfinished (waiting for parents or a signal included) or in
-- repair, so the head of a key is one descent.
CREATE INDEX task_ordered_idx ON ntask.task (queue, partition_key, task_id)
	WHERE ordered AND (due_at IS NOT NULL OR state = 'repair_required' OR state = 'awaiting'
					   OR state = 'waiting');
-- The leased rows, in task_due_idx's order, for the claim's takeover of
-- an expired lease (merged with task_due_idx), the expired-lease sweep
-- and the in-flight counts of caps.  Its predicate is lease_until IS NOT
-- NULL (set exactly while leased), not state = 'leased', which the hot
-- statements' "state = 'leased'" would imply, making it a candidate for
-- their generic plans (transition, heartbeat: task_id = $1 AND state =
-- 'leased') instead of one primary-key probe.
CREATE INDEX task_lease_idx ON ntask.task (queue, priority DESC, lease_until, task_id)
	WHERE lease_until IS NOT NULL;
-- For housekeeping; each holds only the rows it looks for.
-- the deadline sweep reads only past-deadline rows
CREATE INDEX task_deadline_idx ON ntask.task (deadline)
	WHERE due_at IS NOT NULL AND state <> 'leased';
-- the tasks awaiting a signal, for ntask_signal and the metrics (issue 36.3)
CREATE INDEX task_awaiting_idx ON ntask.task (queue, signal_key)
	WHERE state = 'awaiting';
-- the tasks waiting for their parents, for ntask.queue_stats (issue 51):
-- in no other index but task_ordered_idx (ordered queues only)
CREATE INDEX task_waiting_idx ON ntask.task (queue, created_at)
	WHERE state = 'waiting';
-- finished rows that may be pruned (repair_required is never pruned)
CREATE INDEX task_finished_idx ON ntask.task (queue, finished_at)
	WHERE state IN ('succeeded', 'canceled', 'skipped');

-- The attempt ledger: one row per ended attempt, written once.
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
	shard			smallint NOT NULL DEFAULT 0,
	progress		jsonb,
	PRIMARY KEY (task_id, token)
);
COMMENT ON TABLE ntask.attempt IS 'ntask: one row per ended attempt, written once when it ends (the running attempt of a leased task, and the last one when its holder ended it succeeded, canceled or skipped, are on the task row; ntask.attempt_all shows all)';
COMMENT ON COLUMN ntask.attempt.requested IS 'the to_state this token asked for in ntask_transition (NULL if it never did)';
COMMENT ON COLUMN ntask.attempt.result IS 'how the attempt ended: the task state it produced, or lease_expired / canceled';
COMMENT ON COLUMN ntask.attempt.shard IS 'the task''s shard (co-location with ntask.task on a Citus install)';
COMMENT ON COLUMN ntask.attempt.progress IS 'the last progress the attempt reported (ntask_heartbeat progress => ...), copied from the task row when it ended';

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
	db_user			name NOT NULL DEFAULT ntask.caller_name(),
	shard			smallint NOT NULL DEFAULT 0,
	PRIMARY KEY (task_id, token)
);
COMMENT ON TABLE ntask.receipt IS 'ntask: commit receipts, one per (task, token) that committed a business write; see ntask_receipt()';
COMMENT ON COLUMN ntask.receipt.shard IS 'the task''s shard (co-location with ntask.task on a Citus install)';

/*
 * General monotonic fences (ntask_fence): the watermark of a target such as
 * a config document applied to a host, and a receipt per applied token.
 * A fence key under a registered prefix may be advanced only by members
 * of its role (the longest prefix decides).
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
	db_user			name NOT NULL DEFAULT ntask.caller_name(),
	PRIMARY KEY (fence_key, token)
);
COMMENT ON TABLE ntask.fence_receipt IS 'ntask: one row per token that advanced a fence';
CREATE INDEX fence_receipt_applied_idx ON ntask.fence_receipt (applied_at);

CREATE TABLE ntask.fence_grant (
	prefix			text PRIMARY KEY
		CHECK (prefix <> '' AND length(prefix) <= 512),
	role			regrole NOT NULL,
	granted_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ntask.fence_grant IS 'ntask: fence keys starting with prefix may only be advanced by members of role; see ntask_fence_grant()';

-- Administrative actions, and who took them
CREATE TABLE ntask.audit (
	audit_id		bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at				timestamptz NOT NULL DEFAULT now(),
	actor			text NOT NULL,
	db_user			name NOT NULL DEFAULT ntask.caller_name(),
	action			text NOT NULL,
	task_id			bigint,
	queue			text COLLATE "C",
	reason			text NOT NULL,
	from_state		text,
	to_state		text,
	detail			jsonb
);
COMMENT ON TABLE ntask.audit IS 'ntask: who did which administrative action (replay, cancel, repair_assign, queue_set), when and why';
-- history is pruned by housekeeping (ntask.audit_retention)
CREATE INDEX audit_at_idx ON ntask.audit (at);

-- Schedules (docs/design.md "Schedules"): fired by pg_cron.  A catch-up
-- window is at most 7 days, so one firing after a long outage enqueues a
-- bounded number of slots (10080 for a once-a-minute schedule); older
-- missed slots are recorded as missed.
CREATE TABLE ntask.schedule (
	name			text PRIMARY KEY
		CHECK (name ~ '^[A-Za-z0-9_.:-]{1,63}$'),
	cron			text NOT NULL,
	queue			text COLLATE "C" NOT NULL,
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
	updated_at		timestamptz NOT NULL DEFAULT now(),
	set_by			name,
	CONSTRAINT schedule_catchup_at_most_7_days CHECK (catchup <= interval '7 days')
);
COMMENT ON TABLE ntask.schedule IS 'ntask: schedules fired by pg_cron; each slot becomes one task keyed <name>:<slot in UTC>';
COMMENT ON COLUMN ntask.schedule.set_by IS 'the role that last set the schedule (ntask_schedule; its producer right on the queue was checked then); NULL for schedules set before 1.0.0';

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
-- history is pruned by housekeeping (ntask.history_retention)
CREATE INDEX schedule_slot_fired_idx ON ntask.schedule_slot (fired_at);

-- Sagas (docs/design.md "Sagas").  Every step is an ordinary task of its
-- queue with task_key '<saga_key>:<step name>' (its compensation
-- '<saga_key>:<step name>:compensate') and saga_id set; a trigger on the
-- task's state moves the saga in the same transaction as the step's
-- change.  A saga key is scoped by the queues its definition names
-- (forward and compensation): unique on (saga_key, scope).
-- ntask_saga_start answers created = false or NT001 only from a saga whose
-- scope the caller has the producer right on every queue of; a saga it
-- cannot see is as if the key were free, so a producer of one queue
-- neither learns nor squats the keys of another's.
CREATE TABLE ntask.saga (
	saga_id			bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	saga_key		text COLLATE "C" NOT NULL,
	steps			jsonb NOT NULL,
	steps_digest	bytea NOT NULL,
	digest_version	smallint NOT NULL,
	nsteps			integer NOT NULL CHECK (nsteps BETWEEN 1 AND 100),
	state			text NOT NULL DEFAULT 'running'
		CHECK (state IN ('running', 'succeeded', 'compensating', 'compensated', 'manual_review')),
	current_step	integer NOT NULL DEFAULT 1,
	failed_step		integer,
	reason			text,
	started_by		text NOT NULL,
	started_at		timestamptz NOT NULL DEFAULT now(),
	updated_at		timestamptz NOT NULL DEFAULT now(),
	finished_at		timestamptz,
	scope			text[] COLLATE "C" NOT NULL,
	CONSTRAINT saga_key_scope_key UNIQUE (saga_key, scope)
);
COMMENT ON TABLE ntask.saga IS 'ntask: one row per saga (ntask_saga_start): its definition, state running/succeeded/compensating/compensated/manual_review, the step running or being compensated (current_step), the forward step that failed, why';
COMMENT ON COLUMN ntask.saga.scope IS 'the queues the definition names (ntask.saga_scope): the saga_key is unique within it, and only a producer with the right on all of them sees the saga from ntask_saga_start';
CREATE TABLE ntask.saga_step (
	saga_id		bigint NOT NULL REFERENCES ntask.saga ON DELETE CASCADE,
	step_no		integer NOT NULL,
	kind		text NOT NULL CHECK (kind IN ('forward', 'compensate')),
	name		text NOT NULL,
	queue		text COLLATE "C" NOT NULL,
	task_id		bigint NOT NULL,
	state		text NOT NULL,
	PRIMARY KEY (saga_id, step_no, kind)
);
CREATE UNIQUE INDEX saga_step_task_idx ON ntask.saga_step (task_id);
COMMENT ON TABLE ntask.saga_step IS 'ntask: the tasks of a saga, forward and compensation, with the last state seen of each (kept when retention prunes the task)';

-- Metrics (metrics/queries.yaml, README "Metrics and dashboards").
-- Per-queue counters for Prometheus must never go down, but housekeeping
-- deletes finished tasks after their queue's retention.  What a deleted
-- task had counted is added here, by a statement-level trigger on DELETE
-- (housekeeping deletes a batch per statement), in the same transaction as
-- the delete: counters = what the live rows say + what was pruned.
-- TRUNCATE fires no DELETE trigger (a TRUNCATE of ntask.task is not a
-- prune).
CREATE TABLE ntask.queue_pruned (
	queue			text COLLATE "C" PRIMARY KEY,
	tasks			bigint NOT NULL DEFAULT 0,
	attempts		bigint NOT NULL DEFAULT 0,
	unknown_attempts bigint NOT NULL DEFAULT 0,
	succeeded		bigint NOT NULL DEFAULT 0,
	canceled		bigint NOT NULL DEFAULT 0,
	skipped			bigint NOT NULL DEFAULT 0,
	updated_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ntask.queue_pruned IS 'ntask: per queue, what the tasks deleted so far (retention) had counted: tasks, attempts, unknown attempts, succeeded, canceled, skipped; keeps ntask.queue_metrics counters monotonic';

-- The circuit breaker of each http queue (the worker's dispatch): one row
-- per queue with a breaker that has seen a failure.
CREATE TABLE ntask.breaker (
	queue		text PRIMARY KEY REFERENCES ntask.queue ON DELETE CASCADE,
	state		text NOT NULL DEFAULT 'closed'
		CHECK (state IN ('closed', 'open', 'half_open')),
	failures	integer NOT NULL DEFAULT 0,
	opened_at	timestamptz,
	open_until	timestamptz,
	changed_at	timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ntask.breaker IS 'ntask: circuit breaker state of http queues (written by the background worker)';

-- Partition keys of an http queue held back by a provider's rate limit
-- (on_rate_limited pause_key, issue 35.5): written by the background
-- worker when a 429 or 503 with Retry-After comes back; the claim passes
-- the key by while until is in the future (and the queue row's
-- keys_paused_until says some pause is live); expired rows are deleted by
-- housekeeping.
CREATE TABLE ntask.key_pause (
	queue			text COLLATE "C" NOT NULL REFERENCES ntask.queue ON DELETE CASCADE,
	partition_key	text COLLATE "C" NOT NULL,
	until			timestamptz NOT NULL,
	reason			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	set_by			text NOT NULL,
	shard			smallint NOT NULL DEFAULT 0,
	PRIMARY KEY (queue, partition_key)
);
COMMENT ON TABLE ntask.key_pause IS 'ntask: partition keys of http queues held back until a provider''s Retry-After (on_rate_limited pause_key; written by the background worker)';

-- Citus (docs/scaling.md "Scaling out with Citus"): the shard values a
-- distributed install uses, one per Citus shard of ntask.task (the
-- smallest smallint that hashes into it), so that tasks spread over every
-- shard and a claimer's round visits each shard once.  Empty on a plain
-- install, where every row has shard 0; filled by ntask_distribute.
CREATE TABLE ntask.shard_map (
	shard			smallint PRIMARY KEY
);
COMMENT ON TABLE ntask.shard_map IS 'ntask: the shard values of a Citus install, one per shard of ntask.task (empty on a plain install)';

/*
 * Durable checkpoints (issue 36.2): one row per step of a task, written by
 * ntask_checkpoint with the current token, kept with the task (pruned with
 * it), handed to every later claim of the task in context.checkpoints.
 */
CREATE TABLE ntask.checkpoint (
	task_id			bigint NOT NULL,
	step			text COLLATE "C" NOT NULL,
	value			jsonb NOT NULL,
	value_digest	bytea NOT NULL,
	digest_version	smallint NOT NULL,
	token			bigint NOT NULL,
	written_at		timestamptz NOT NULL DEFAULT now(),
	shard			smallint NOT NULL DEFAULT 0,
	PRIMARY KEY (task_id, step)
);
COMMENT ON TABLE ntask.checkpoint IS 'ntask: durable checkpoints, one per (task, step); see ntask_checkpoint()';
COMMENT ON COLUMN ntask.checkpoint.token IS 'the token that wrote the step';
COMMENT ON COLUMN ntask.checkpoint.shard IS 'the task''s shard (co-location with ntask.task on a Citus install)';

/*
 * Signals (issue 36.3): one row per (queue, signal_key), written by
 * ntask_signal (sent_at set) or first by ntask_await (sent_at NULL: awaited,
 * not sent yet), so a signal and an await that race meet on its key.
 */
CREATE TABLE ntask.signal (
	queue			text COLLATE "C" NOT NULL,
	signal_key		text COLLATE "C" NOT NULL,
	payload			jsonb,
	payload_digest	bytea,
	digest_version	smallint,
	sent_at			timestamptz,
	sent_by			name,
	task_id			bigint,
	created_at		timestamptz NOT NULL DEFAULT now(),
	shard			smallint NOT NULL DEFAULT 0,
	PRIMARY KEY (queue, signal_key)
);
COMMENT ON TABLE ntask.signal IS 'ntask: signals of ntask_signal(), and the keys ntask_await() waits for (sent_at NULL until sent)';
COMMENT ON COLUMN ntask.signal.task_id IS 'the latest task that awaited the key; the row is pruned with it (unawaited: after the queue''s retention)';
COMMENT ON COLUMN ntask.signal.shard IS 'the shard of its queue and key (ntask_shard(queue, signal_key)), which an awaiting task shares (0 on a plain install)';
CREATE INDEX signal_task_idx ON ntask.signal (task_id) WHERE task_id IS NOT NULL;
-- the signals no task awaited, for their pruning after the queue's retention
-- (created_at is when such a row was sent: an await sets task_id)
CREATE INDEX signal_unawaited_idx ON ntask.signal (queue, created_at) WHERE task_id IS NULL;

/*
 * Tokens (docs/design.md "Tokens: one sequence, an attempt's name"): a
 * lease's token is its timeline's floor - 1 plus the next value of this
 * sequence, this node's one sequence of tokens (ntask.token_next), so a
 * token names one attempt of one task.  At most 2^48 - 1 values: the next
 * timeline's floor.  On a Citus node it steps by 256 from the node's group
 * (ntask.set_id_range).
 */
CREATE SEQUENCE ntask.token_seq AS bigint MAXVALUE 281474976710655;
COMMENT ON SEQUENCE ntask.token_seq IS 'ntask: this node''s tokens: a lease''s token is its timeline''s floor - 1 plus the next value (ntask.token_next)';

-- pg_dump dumps the rows of these tables (and the sequences' values)
SELECT pg_catalog.pg_extension_config_dump('ntask.queue', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.task', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.attempt', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.audit', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.receipt', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.fence', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.fence_receipt', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.task_task_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.audit_audit_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.schedule_slot', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.schedule_slot_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.fence_grant', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.saga', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.saga_step', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.saga_saga_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.queue_pruned', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.breaker', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.key_pause', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.checkpoint', '');
SELECT pg_catalog.pg_extension_config_dump('ntask.signal', '');

-- ---------------------------------------------------------------------
-- 3. Views
-- ---------------------------------------------------------------------

-- per queue: tasks per state, ages, unknown outcomes.  unknown_attempts
-- counts the attempts with an unknown outcome of the tasks that are not
-- finished (a task that succeeded since is no longer a question; one in
-- repair is).
--
-- The shape of these views (issue 51): each reads ntask.task in subqueries
-- grouped by queue (or correlated on the distribution column, shard) and
-- joins them to ntask.queue, with no subquery correlated to the queue row,
-- which a Citus coordinator refuses (0A000: ntask.queue is a reference
-- table, ntask.task distributed).  The unfinished tasks are read through
-- the partial indexes that hold only them (task_due_idx, task_lease_idx,
-- task_repair_idx, task_awaiting_idx, task_waiting_idx), so those numbers
-- cost the backlog; succeeded, canceled and skipped count the finished
-- rows, which no index makes cheaper than one pass over them.
CREATE VIEW ntask.queue_stats AS
SELECT q.queue COLLATE "default" AS queue,
	   coalesce(u.ready, 0) AS ready,
	   coalesce(u.leased, 0) AS leased,
	   coalesce(u.retry_wait, 0) AS retry_wait,
	   coalesce(f.succeeded, 0) AS succeeded,
	   coalesce(u.repair_required, 0) AS repair_required,
	   coalesce(f.canceled, 0) AS canceled,
	   coalesce(f.skipped, 0) AS skipped,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_ready AS oldest_ready_age,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_unfinished AS oldest_unfinished_age,
	   coalesce(u.unknown_attempts, 0) AS unknown_attempts,
	   coalesce(u.repair_required, 0) AS repair_count,
	   q.paused_at IS NOT NULL
		 OR coalesce(q.paused_until OPERATOR(pg_catalog.>) pg_catalog.now(), false) AS paused,
	   q.paused_at, q.paused_by, q.pause_reason,
	   CASE WHEN q.paused_until OPERATOR(pg_catalog.>) pg_catalog.now() THEN q.paused_until END AS paused_until,
	   coalesce(kp.keys_paused, 0) AS keys_paused,
	   coalesce(u.awaiting, 0) AS awaiting,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_awaiting AS oldest_awaiting_age,
	   coalesce(u.waiting, 0) AS waiting,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_waiting AS oldest_waiting_age,
	   NULLIF(pg_catalog.array_remove(ARRAY[
			CASE WHEN q.producer_role IS NOT NULL AND rp.oid IS NULL THEN 'producer_role' END,
			CASE WHEN q.worker_role IS NOT NULL AND rw.oid IS NULL THEN 'worker_role' END,
			CASE WHEN q.signal_role IS NOT NULL AND rs.oid IS NULL THEN 'signal_role' END], NULL), '{}') AS dropped_roles
FROM ntask.queue q
LEFT JOIN pg_catalog.pg_roles rp ON rp.oid OPERATOR(pg_catalog.=) q.producer_role::pg_catalog.oid
LEFT JOIN pg_catalog.pg_roles rw ON rw.oid OPERATOR(pg_catalog.=) q.worker_role::pg_catalog.oid
LEFT JOIN pg_catalog.pg_roles rs ON rs.oid OPERATOR(pg_catalog.=) q.signal_role::pg_catalog.oid
LEFT JOIN (
	SELECT k.queue, pg_catalog.count(*) AS keys_paused FROM ntask.key_pause k
	WHERE k.until OPERATOR(pg_catalog.>) pg_catalog.now()
	GROUP BY k.queue
) kp ON kp.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT t.queue,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready') AS ready,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'leased') AS leased,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'retry_wait') AS retry_wait,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'repair_required') AS repair_required,
		   min(t.run_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}')
								 AND t.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest_ready,
		   min(t.created_at) FILTER (WHERE t.due_at IS NOT NULL) AS oldest_unfinished,
		   sum(t.unknown_attempts) AS unknown_attempts,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'awaiting') AS awaiting,
		   min(t.updated_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'awaiting') AS oldest_awaiting,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'waiting') AS waiting,
		   min(t.created_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'waiting') AS oldest_waiting
	FROM ntask.task t
	WHERE (t.due_at IS NOT NULL AND t.lease_until IS NULL) OR (t.lease_until IS NOT NULL AND t.due_at IS NOT NULL)
	   OR t.state OPERATOR(pg_catalog.=) 'repair_required'
	   OR t.state OPERATOR(pg_catalog.=) 'awaiting' OR t.state OPERATOR(pg_catalog.=) 'waiting'
	GROUP BY t.queue
) u ON u.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT t.queue,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'succeeded') AS succeeded,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'canceled') AS canceled,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'skipped') AS skipped
	FROM ntask.task t
	WHERE t.state OPERATOR(pg_catalog.=) ANY ('{succeeded,canceled,skipped}')
	GROUP BY t.queue
) f ON f.queue OPERATOR(pg_catalog.=) q.queue;
COMMENT ON VIEW ntask.queue_stats IS 'ntask: per queue, tasks per state, oldest due-and-ready age, oldest unfinished age, attempts whose outcome is unknown of unfinished tasks (incl. repair_required), repair count, whether it is paused (by whom, since when, why, until when) and how many of its partition keys a rate limit holds back, tasks awaiting a signal and the age of the oldest await, tasks waiting for parents and the age of the oldest, and which of its roles (producer_role, worker_role, signal_role) name a role that was dropped';

CREATE VIEW ntask.repair_queue AS
SELECT t.task_id, t.queue COLLATE "default" AS queue, t.task_key COLLATE "default" AS task_key,
	   t.reason, t.attempts,
	   a.first_attempt_at, a.last_attempt_at,
	   t.last_error_class, t.last_error_stage,
	   coalesce(a.known_outcomes, 0) AS known_outcomes,
	   coalesce(a.unknown_outcomes, 0) AS unknown_outcomes,
	   t.repair_owner AS owner, t.repair_next_action AS next_action,
	   t.updated_at AS since
FROM ntask.task t
-- a task's attempts by its key and shard (co-located on a Citus install)
LEFT JOIN LATERAL (
	SELECT min(at.claimed_at) AS first_attempt_at,
		   max(at.claimed_at) AS last_attempt_at,
		   count(*) FILTER (WHERE at.outcome_known) AS known_outcomes,
		   count(*) FILTER (WHERE NOT at.outcome_known) AS unknown_outcomes
	FROM ntask.attempt at
	WHERE at.task_id OPERATOR(pg_catalog.=) t.task_id
	  AND at.shard OPERATOR(pg_catalog.=) t.shard
) a ON true
WHERE t.state OPERATOR(pg_catalog.=) 'repair_required';
COMMENT ON VIEW ntask.repair_queue IS 'ntask: redacted summary of tasks that need a human (no payload): reason, attempts, first/last attempt, last error, known vs unknown outcomes, owner, next action';

-- every attempt, the ended ones and the running one of each leased task
CREATE VIEW ntask.attempt_all AS
SELECT a.task_id, a.token, a.attempt, a.worker, a.claimed_at, a.invoked_at,
	   a.ended_at, a.result, a.requested, a.error_class, a.error_stage,
	   a.outcome_known, a.outcome, a.retry_at, a.detail, a.shard, a.progress
FROM ntask.attempt a
UNION ALL
SELECT t.task_id, t.token, t.attempts, t.lease_owner,
	   coalesce(t.claimed_at, t.updated_at), t.invoked_at,
	   NULL::timestamptz, NULL::text, NULL::text, NULL::text, NULL::text,
	   NULL::boolean, NULL::text, NULL::timestamptz, NULL::jsonb, t.shard, t.progress
FROM ntask.task t
WHERE t.state = 'leased'
UNION ALL
SELECT t.task_id, t.token, t.attempts, t.attempt_worker, t.claimed_at, t.invoked_at,
	   t.finished_at, t.state, t.state, NULL::text, NULL::text,
	   true, t.outcome, NULL::timestamptz, t.attempt_detail, t.shard, t.progress
FROM ntask.task t
WHERE t.attempt_worker IS NOT NULL;
COMMENT ON VIEW ntask.attempt_all IS 'ntask: every attempt: the ended ones (ntask.attempt), the running one of each leased task (from its task row; ended_at and result NULL) and the one its holder ended succeeded, canceled or skipped when it is kept on the task row (attempt_worker set)';

-- the running attempts that reported progress (ntask_heartbeat progress =>
-- ...), with its age; through task_lease_idx (leased rows only)
CREATE VIEW ntask.task_progress AS
SELECT t.task_id, t.queue, t.task_key, t.token, t.attempts AS attempt,
	   t.lease_owner AS worker, t.lease_until, t.progress, t.progress_at,
	   pg_catalog.now() OPERATOR(pg_catalog.-) t.progress_at AS progress_age
FROM ntask.task t
WHERE t.lease_until IS NOT NULL AND t.state OPERATOR(pg_catalog.=) 'leased'
  AND t.progress IS NOT NULL;
COMMENT ON VIEW ntask.task_progress IS 'ntask: the latest progress of each running attempt that reported one (ntask_heartbeat progress => ...), with its age';

-- per queue: expired leases not yet taken over (a gauge, through
-- task_lease_idx) and the counters, monotonic across retention (attempts =
-- claims that handed a task out): these count every task, one pass
CREATE VIEW ntask.queue_metrics AS
SELECT q.queue,
	   coalesce(l.leases_expired, 0) AS leases_expired,
	   coalesce(s.tasks, 0) OPERATOR(pg_catalog.+) coalesce(p.tasks, 0) AS enqueued_total,
	   coalesce(s.attempts, 0) OPERATOR(pg_catalog.+) coalesce(p.attempts, 0) AS claims_total,
	   coalesce(s.unknown_attempts, 0) OPERATOR(pg_catalog.+) coalesce(p.unknown_attempts, 0) AS unknown_outcomes_total,
	   coalesce(s.succeeded, 0) OPERATOR(pg_catalog.+) coalesce(p.succeeded, 0) AS succeeded_total,
	   coalesce(s.canceled, 0) OPERATOR(pg_catalog.+) coalesce(p.canceled, 0) AS canceled_total,
	   coalesce(s.skipped, 0) OPERATOR(pg_catalog.+) coalesce(p.skipped, 0) AS skipped_total,
	   CASE WHEN q.paused_at IS NOT NULL
				 OR q.paused_until OPERATOR(pg_catalog.>) pg_catalog.now() THEN 1 ELSE 0 END AS paused,
	   coalesce(kp.keys_paused, 0) AS keys_paused
FROM ntask.queue q
LEFT JOIN (
	SELECT t.queue,
		   count(*) AS tasks,
		   sum(t.attempts) AS attempts,
		   sum(t.unknown_attempts) AS unknown_attempts,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'succeeded') AS succeeded,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'canceled') AS canceled,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'skipped') AS skipped
	FROM ntask.task t
	GROUP BY t.queue
) s ON s.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT t.queue, count(*) AS leases_expired
	FROM ntask.task t
	WHERE t.lease_until IS NOT NULL AND t.lease_until OPERATOR(pg_catalog.<) pg_catalog.now()
	GROUP BY t.queue
) l ON l.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT k.queue, pg_catalog.count(*) AS keys_paused FROM ntask.key_pause k
	WHERE k.until OPERATOR(pg_catalog.>) pg_catalog.now()
	GROUP BY k.queue
) kp ON kp.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN ntask.queue_pruned p ON p.queue OPERATOR(pg_catalog.=) q.queue;
COMMENT ON VIEW ntask.queue_metrics IS 'ntask: per queue, leases expired and not yet taken over, and counters that never go down (tasks deleted by retention still count): enqueued, claims (attempts handed out), attempts with an unknown outcome, succeeded, canceled, skipped; gauges paused (1 while paused) and keys_paused (partition keys a rate limit holds back)';


-- Per queue and partition key: what is waiting, running and stuck.  Reads
-- only the unfinished tasks (the rows of task_due_idx and task_lease_idx)
-- and those in repair (task_repair_idx), never the finished history, so its cost is the size
-- of the backlog, not of the table.  Tasks without a key are the row with
-- partition_key NULL ('' in a fair queue).
CREATE VIEW ntask.partition_stats AS
SELECT t.queue, t.partition_key,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready'
			AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS ready,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready'
			AND t.due_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS scheduled,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'retry_wait') AS retry_wait,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'leased') AS leased,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'repair_required') AS repair_required,
	   pg_catalog.sum(t.unknown_attempts) FILTER (WHERE t.state OPERATOR(pg_catalog.<>) 'repair_required')::bigint AS unknown_attempts,
	   pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-)
			pg_catalog.min(t.due_at) FILTER (WHERE t.state OPERATOR(pg_catalog.<>) 'leased'
				AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now())) AS oldest_due_age_s
FROM ntask.task t
WHERE (t.due_at IS NOT NULL AND t.lease_until IS NULL) OR (t.lease_until IS NOT NULL AND t.due_at IS NOT NULL)
	   OR t.state OPERATOR(pg_catalog.=) 'repair_required'
GROUP BY t.queue, t.partition_key;
COMMENT ON VIEW ntask.partition_stats IS 'ntask: per queue and partition key: due, scheduled, retrying, leased and repair counts, attempts with unknown outcome of unfinished tasks, and the age of the oldest due task (s)';

-- One row per http queue with a breaker (breaker_failures set): closed
-- with no failures until the worker has seen one.  held counts the tasks
-- the worker is not sending because of it (due now, not leased), only
-- while it is not closed: a count over the queue's due tasks
-- (task_due_idx), so it costs what the backlog costs while open, and
-- nothing while closed.
CREATE VIEW ntask.breaker_stats AS
SELECT q.queue,
	   coalesce(b.state, 'closed') AS state,
	   coalesce(b.failures, 0) AS failures,
	   q.breaker_failures AS failure_threshold,
	   q.breaker_cooldown AS cooldown,
	   b.opened_at,
	   b.open_until,
	   b.changed_at,
	   CASE WHEN coalesce(b.state, 'closed') OPERATOR(pg_catalog.=) 'closed' THEN 0::pg_catalog.int8
			ELSE coalesce(h.held, 0)
	   END AS held
FROM ntask.queue q
LEFT JOIN ntask.breaker b ON b.queue OPERATOR(pg_catalog.=) q.queue
-- the tasks held back, counted only in the queues whose breaker is not
-- closed (through task_due_idx)
LEFT JOIN (
	SELECT t.queue, pg_catalog.count(*) AS held
	FROM ntask.task t
	WHERE t.queue OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT o.queue FROM ntask.breaker o
										  WHERE o.state OPERATOR(pg_catalog.<>) 'closed'))
	  AND t.due_at IS NOT NULL AND t.lease_until IS NULL
	  AND t.state OPERATOR(pg_catalog.<>) 'leased'
	  AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now()
	GROUP BY t.queue
) h ON h.queue OPERATOR(pg_catalog.=) q.queue
WHERE q.breaker_failures IS NOT NULL
  AND (q.target OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'http';
COMMENT ON VIEW ntask.breaker_stats IS 'ntask: the circuit breaker of each http queue that has one: state (closed, open, half_open), consecutive failures, threshold, cooldown, when it last opened, until when it sends nothing, the last change of state, tasks due and held back while not closed (the worker''s dispatch only; ntask_claim by SQL ignores it)';

CREATE VIEW ntask.saga_status AS
SELECT s.saga_id, s.saga_key, s.state AS saga_state, s.current_step, s.failed_step,
	   st.step_no, st.name, st.kind, st.queue, st.task_id,
	   coalesce(t.state, st.state) AS task_state, t.attempts, t.max_attempts,
	   t.unknown_attempts, t.last_error_class, t.reason AS task_reason,
	   s.reason AS saga_reason, s.started_at, s.updated_at, s.finished_at
FROM ntask.saga s
JOIN ntask.saga_step st ON st.saga_id = s.saga_id
LEFT JOIN ntask.task t ON t.task_id = st.task_id;
COMMENT ON VIEW ntask.saga_status IS 'ntask: every saga''s steps in order (forward, then its compensation), each with its task''s state, attempts and unknown outcomes (no payload)';

-- The background worker's counters and the waiting claims live in shared
-- memory: each view reads a C function
CREATE FUNCTION @extschema@.ntask_worker_stats(
	OUT pid integer, OUT state text, OUT started_at timestamptz,
	OUT last_tick timestamptz, OUT dispatched bigint, OUT accepted bigint,
	OUT transient bigint, OUT permanent bigint, OUT unknown bigint,
	OUT reconciled bigint, OUT in_flight integer, OUT expired_leases bigint,
	OUT repaired bigint, OUT pruned bigint, OUT last_error text,
	OUT last_error_at timestamptz, OUT database name,
	OUT breaker_opened bigint, OUT breaker_closed bigint,
	OUT breaker_probes bigint, OUT breaker_skips bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'ntask_worker_stats'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_worker_stats() IS
'ntask: the background worker''s counters since server start (shared memory), and the database it serves; see ntask.worker_stats';
CREATE VIEW ntask.worker_stats AS
SELECT * FROM @extschema@.ntask_worker_stats();
COMMENT ON VIEW ntask.worker_stats IS 'ntask: the background worker: pid, state, last tick, HTTP requests dispatched / accepted / transient / permanent / unknown / reconciled, in flight, leases released, tasks sent to repair, rows pruned, last error, the database it serves (ntask.database), circuit breakers opened / closed, probes sent, claims not made because a breaker was open (counters restart with the server; ntask.attempt is the durable record)';

CREATE FUNCTION @extschema@.ntask_waiters(
	OUT pid integer, OUT queue text, OUT max_tasks integer,
	OUT since timestamptz, OUT wait_until timestamptz, OUT woken boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ntask_waiters'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_waiters() IS
'ntask: the waiting claims of this database (shared memory): backend pid, queue, max_tasks, since, until when, woken by a commit since its last look';
CREATE VIEW ntask.waiters AS SELECT * FROM @extschema@.ntask_waiters();
COMMENT ON VIEW ntask.waiters IS 'ntask: the waiting claims (ntask_claim wait => ...) of this database, one row per waiting backend';

-- ---------------------------------------------------------------------
-- 4. Functions
-- ---------------------------------------------------------------------

-- Queues ---------------------------------------------------------------

CREATE FUNCTION @extschema@.ntask_queue_set(
	queue text,
	max_attempts integer DEFAULT NULL,
	total_deadline interval DEFAULT NULL,
	lease interval DEFAULT NULL,
	backoff_base interval DEFAULT NULL,
	backoff_max interval DEFAULT NULL,
	guard regprocedure DEFAULT NULL,
	target jsonb DEFAULT NULL,
	retention interval DEFAULT NULL,
	notify boolean DEFAULT NULL,
	fairness text DEFAULT NULL,
	max_inflight integer DEFAULT NULL,
	partition_max_inflight integer DEFAULT NULL,
	ordered boolean DEFAULT NULL,
	ordered_skip_repair boolean DEFAULT NULL,
	rate_limit text DEFAULT NULL,
	partition_rate_limit text DEFAULT NULL,
	retry_share real DEFAULT NULL,
	breaker_failures integer DEFAULT NULL,
	breaker_cooldown interval DEFAULT NULL,
	priority_aging interval DEFAULT NULL,
	priority_aging_max integer DEFAULT NULL,
	on_rate_limited text DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS SETOF ntask.queue
AS 'MODULE_PATHNAME', 'ntask_queue_set'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval, interval, integer, text, text) IS
'ntask: create or update a queue''s policy; NULL arguments keep the current value (or the default for a new queue); 0 (caps, breaker_failures, priority_aging) or ''none'' (rate limits) turns an option off, target => ''null'' (or ''{}'') removes the target; an http target''s hosts must be in ntask.http_allowed_hosts; on_rate_limited (http queues: retry, pause_key, pause_queue) says what a 429 or 503 with Retry-After does; on_parent_failed (wait, cancel) what a task does when a parent fails; returns the resulting row';

CREATE FUNCTION @extschema@.ntask_queue_pause(queue text, actor text, reason text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_queue_pause'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_pause(text, text, text) IS
'ntask: pause a queue (audited, queue_pause): no claim (ntask_claim, ntask_transition_and_claim, the background worker''s dispatch) hands out its tasks until ntask_queue_resume; enqueues, schedules and leases already out go on; false (and nothing changes) when it is already paused';

CREATE FUNCTION @extschema@.ntask_queue_resume(queue text, actor text, reason text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_queue_resume'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_resume(text, text, text) IS
'ntask: end a queue''s pause (audited, queue_resume): the operator''s, a rate limit''s (paused_until) and its key pauses; wakes its waiting claims at commit; false (and nothing changes) when nothing was paused';
CREATE FUNCTION @extschema@.ntask_queue_clear_guard(queue text)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_queue_clear_guard'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_clear_guard(text) IS
'ntask: remove the guard function of a queue (ntask_queue_set treats NULL as "keep")';

CREATE FUNCTION @extschema@.ntask_queue_set_roles(queue text, producer_role regrole,
												  worker_role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_queue_set_roles'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_set_roles(text, regrole, regrole) IS
'ntask: restrict enqueue (producer_role) and claim (worker_role) of one queue to roles with those roles'' privileges; NULL lifts the restriction; audited';

-- Enqueue and results ------------------------------------------------

CREATE FUNCTION @extschema@.ntask_enqueue(
	queue text,
	task_key text,
	payload jsonb DEFAULT '{}',
	run_at timestamptz DEFAULT NULL,
	partition_key text DEFAULT NULL,
	priority integer DEFAULT 0,
	traceparent text DEFAULT NULL,
	depends_on text[] DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS TABLE (task_id bigint, created boolean, state text, outcome text, result jsonb)
AS 'MODULE_PATHNAME', 'ntask_enqueue'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer, text, text[], text) IS
'ntask: idempotent enqueue on (queue, task_key); a duplicate returns the existing task with created = false and its outcome and stored result (after the producer right is checked), the same key with a different payload raises SQLSTATE NT001; traceparent (else the setting ntask.traceparent) is a W3C trace context stored with the task; with depends_on (task keys of the queue or queue:key, which must exist) the task waits until every parent has succeeded';

CREATE FUNCTION @extschema@.ntask_enqueue_many(
	queue text,
	task_keys text[],
	payloads jsonb[],
	run_at timestamptz DEFAULT NULL,
	partition_keys text[] DEFAULT NULL,
	priority integer DEFAULT 0,
	traceparent text DEFAULT NULL,
	depends_on text[] DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS TABLE (task_id bigint, created boolean, state text, outcome text, result jsonb)
AS 'MODULE_PATHNAME', 'ntask_enqueue_many'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_enqueue_many(text, text[], jsonb[], timestamptz, text[], integer, text, text[], text) IS
'ntask: ntask_enqueue for each (task_keys[i], payloads[i], partition_keys[i]) in one statement; one row per element in input order; a key repeated in the call gives the same task (created only the first time), with a different payload NT001; every new task gets the traceparent (else the setting ntask.traceparent); depends_on and on_parent_failed apply to every task of the call';

CREATE FUNCTION @extschema@.ntask_result(queue text, task_key text)
RETURNS TABLE (state text, outcome text, result jsonb, finished_at timestamptz)
AS 'MODULE_PATHNAME', 'ntask_result'
LANGUAGE C STABLE;
COMMENT ON FUNCTION @extschema@.ntask_result(text, text) IS
'ntask: for producers: the state, outcome, stored result and finish time of the task (queue, task_key); no row when there is none; the producer right on the queue is checked first (42501, whether or not the key exists)';

-- Claims and attempts (docs/design.md "Waiting claims", "Results and
-- replay") ---------------------------------------------------------

CREATE FUNCTION @extschema@.ntask_claim(
	queue text,
	worker text,
	max_tasks integer DEFAULT 1,
	lease interval DEFAULT NULL,
	wait interval DEFAULT NULL,
	invoked boolean DEFAULT false)
RETURNS TABLE (task_id bigint, task_key text, payload jsonb, attempt integer,
			   token bigint, lease_until timestamptz, prior_outcome text,
			   context jsonb)
AS 'MODULE_PATHNAME', 'ntask_claim'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_claim(text, text, integer, interval, interval, boolean) IS
'ntask: lease up to max_tasks due tasks (FOR UPDATE SKIP LOCKED), taking over expired leases; each gets a new fencing token and counts an attempt; tasks whose budget is spent go to repair_required instead; with wait, when nothing is due, sleeps until work of the queue is committed or comes due (at most wait, cut to ntask.max_wait), holding no lock; with invoked, each leased attempt is marked invoked in the same statement (as ntask_invoked); context is NULL or an object: traceparent (the enqueue''s trace context with a span id of this attempt), checkpoints (the task''s so far), signal (the awaited signal''s payload, or timed_out), parents (the parents'' stored results)';

CREATE FUNCTION @extschema@.ntask_heartbeat(
	task_id bigint,
	token bigint,
	lease interval DEFAULT NULL,
	progress jsonb DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ntask_heartbeat'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_heartbeat(bigint, bigint, interval, jsonb) IS
'ntask: extend the lease of the current token, and with progress store it as the attempt''s latest progress (at most ntask.max_result_bytes); returns the new lease_until, or NULL when the token no longer holds the task (nothing is written)';

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
	error_stage text DEFAULT NULL,
	result jsonb DEFAULT NULL)
RETURNS TABLE (result text, state text, run_at timestamptz)
AS 'MODULE_PATHNAME', 'ntask_transition'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition(bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb) IS
'ntask: fenced end of an attempt: applied, duplicate (same token, same transition), conflict (same token, different transition) or stale (the task moved on); a succeeded may store a result (at most ntask.max_result_bytes)';

-- ntask_release: hand a leased task back
CREATE FUNCTION @extschema@.ntask_release(task_id bigint, token bigint, delay interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_release'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_release(bigint, bigint, interval) IS
'ntask: hand a leased task back: ready again at once or after delay; an attempt never invoked does not count against the budget, an invoked one counts with its outcome unknown; returns applied, duplicate, conflict or stale';

-- batch calls: one statement for many tasks
CREATE FUNCTION @extschema@.ntask_transition_many(
	task_ids bigint[],
	tokens bigint[],
	to_state text,
	error_class text DEFAULT NULL,
	detail jsonb DEFAULT NULL,
	retry_at timestamptz DEFAULT NULL,
	outcome text DEFAULT NULL,
	error_stage text DEFAULT NULL,
	results jsonb[] DEFAULT NULL)
RETURNS TABLE (task_id bigint, result text, state text, run_at timestamptz)
AS 'MODULE_PATHNAME', 'ntask_transition_many'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition_many(bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[]) IS
'ntask: ntask_transition for each (task_ids[i], tokens[i], results[i]) with one to_state, in one statement; one row per element in input order, each applied, duplicate, conflict or stale exactly as ntask_transition; a task_id given twice raises 22023';

CREATE FUNCTION @extschema@.ntask_transition_and_claim(
	finish_task_id bigint,
	finish_token bigint,
	to_state text,
	queue text,
	worker text,
	max_tasks integer DEFAULT 1,
	outcome text DEFAULT NULL,
	error_class text DEFAULT NULL,
	detail jsonb DEFAULT NULL,
	retry_at timestamptz DEFAULT NULL,
	error_stage text DEFAULT NULL,
	lease interval DEFAULT NULL,
	result jsonb DEFAULT NULL)
RETURNS TABLE (task_id bigint, task_key text, payload jsonb, attempt integer,
			   token bigint, lease_until timestamptz, prior_outcome text,
			   finish_result text, finish_state text, finish_run_at timestamptz,
			   context jsonb)
AS 'MODULE_PATHNAME', 'ntask_transition_and_claim'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition_and_claim(bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb) IS
'ntask: ntask_transition of the task a worker holds, then ntask_claim of the next, in one statement; every row carries the transition''s answer (finish_result, finish_state, finish_run_at), and when nothing is claimed one row with the claim columns NULL still does; context as ntask_claim''s';

-- Workflows (issue 36.2, 36.3) -----------------------------------------

CREATE FUNCTION @extschema@.ntask_checkpoint(task_id bigint, token bigint, step text, value jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_checkpoint'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_checkpoint(bigint, bigint, text, jsonb) IS
'ntask: record a step of the task the token holds (in the business transaction, like a receipt); returns applied, duplicate (the step has that value), conflict (another value) or stale; later claims of the task get it in context.checkpoints';

CREATE FUNCTION @extschema@.ntask_context(task_id bigint, token bigint)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ntask_context'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_context(bigint, bigint) IS
'ntask: the whole context of the attempt the token holds, as ntask_claim hands it out without the claim''s budget (for a task whose claim context said deferred: true); NULL when the token no longer holds the task or the task has none';

CREATE FUNCTION @extschema@.ntask_await(task_id bigint, token bigint, signal_key text,
	timeout interval DEFAULT NULL, on_timeout text DEFAULT 'ready')
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_await'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_await(bigint, bigint, text, interval, text) IS
'ntask: the holder parks the task until ntask_signal(queue, signal_key) or the timeout (then ready, or repair_required with on_timeout repair); the attempt ends as awaiting and does not count against the budget; ready at once if the signal was already sent; returns applied, duplicate, conflict or stale';

CREATE FUNCTION @extschema@.ntask_signal(queue text, signal_key text, payload jsonb DEFAULT '{}')
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_signal'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_signal(text, text, jsonb) IS
'ntask: send the signal signal_key of a queue: the tasks awaiting it become due and their next claim carries payload in context.signal; a signal sent before its await is kept; returns applied, duplicate (same payload) or conflict; needs the queue''s signal_role (NULL: its producer right)';

CREATE FUNCTION @extschema@.ntask_queue_set_signal_role(queue text, role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_queue_set_signal_role'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_set_signal_role(text, regrole) IS
'ntask: restrict who may ntask_signal a queue to the members of role (NULL: the queue''s producer right); audited';

-- Repair and audited actions -----------------------------------------

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

CREATE FUNCTION @extschema@.ntask_bulk(
	queue text,
	action text,
	actor text,
	reason text,
	filter jsonb DEFAULT '{}',
	dry_run boolean DEFAULT false,
	run_at timestamptz DEFAULT NULL,
	max_tasks integer DEFAULT 1000)
RETURNS TABLE (matched bigint, changed bigint, remaining bigint, audit_id bigint)
AS 'MODULE_PATHNAME', 'ntask_bulk'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_bulk(text, text, text, text, jsonb, boolean, timestamptz, integer) IS
'ntask: cancel, replay or reschedule the tasks of a queue that match filter (keys state, reason, error_class, key_prefix, partition_key, older_than, newer_than), at most max_tasks of them, locked in task_id order skipping rows locked by others; returns how many matched, how many it changed, how many more match (remaining) and its audit row; dry_run changes nothing';

-- ntask_bulk until nothing remains, a commit after each chunk: CALL it
-- outside a transaction block
CREATE PROCEDURE @extschema@.ntask_bulk_all(
	queue text,
	action text,
	actor text,
	reason text,
	filter jsonb DEFAULT '{}',
	run_at timestamptz DEFAULT NULL,
	max_tasks integer DEFAULT 1000,
	INOUT changed bigint DEFAULT NULL,
	INOUT remaining bigint DEFAULT NULL,
	INOUT chunks integer DEFAULT NULL)
AS 'MODULE_PATHNAME', 'ntask_bulk_all'
LANGUAGE C;
COMMENT ON PROCEDURE @extschema@.ntask_bulk_all(text, text, text, text, jsonb, timestamptz, integer, bigint, bigint, integer) IS
'ntask: ntask_bulk in chunks of max_tasks with a commit after each, until nothing matching remains (or a chunk changes nothing: rows locked by others); CALL it outside a transaction block (25001 inside one); returns the total changed, what remains and the number of chunks';

CREATE FUNCTION @extschema@.ntask_repair_assign(task_id bigint, owner text, next_action text,
	actor text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_repair_assign'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_repair_assign(bigint, text, text, text) IS
'ntask: audited assignment of an owner and a next action to a repair_required task; the audit row names actor (NULL: the current database user)';

-- Digests, receipts and fences ---------------------------------------

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

CREATE FUNCTION @extschema@.ntask_fence_grant(prefix text, role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_fence_grant'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_fence_grant(text, regrole) IS
'ntask: restrict fence keys starting with prefix to members of role (NULL removes the restriction); the longest registered prefix of a key decides; audited';

-- Schedules (docs/design.md "Schedules") -----------------------------

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
 * deliberate second run of a slot a new key.  A caught-up slot gets a
 * deadline it can meet, and slots caught up by one firing do not skip
 * each other or the current slot.  On a distributed install Citus refuses
 * now() in a CASE of an UPDATE of a distributed table, so the slot's
 * deadline cap is computed first, and the task is reached by its shard.
 */
CREATE FUNCTION ntask.fire_slot(s ntask.schedule, slot timestamptz, outcome_if_new text,
								key_suffix text DEFAULT NULL,
								OUT task_id bigint, OUT outcome text, OUT reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	key text := ntask.slot_key(s.name, slot)
				|| CASE WHEN key_suffix IS NULL THEN '' ELSE ':rerun:' || key_suffix END;
	next_slot timestamptz := @extschema@.ntask_cron_next(s.cron, slot, s.timezone);
	busy record;
	e record;
	cap timestamptz;
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
		  AND t.state OPERATOR(pg_catalog.=) ANY ('{ready,leased,retry_wait}')
		  -- slots caught up by this same firing do not hold the others back
		  AND ss.fired_at OPERATOR(pg_catalog.<) pg_catalog.now();
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
			-- a caught-up slot is late by definition: it gets one slot period
			-- from now, not a deadline (the next slot) that has passed already
			-- (the new deadline computed first and the task reached by its
			-- shard: Citus refuses now() in a CASE of an UPDATE of a
			-- distributed table, and a statement by task id alone visits
			-- every shard; on a plain install shard = task_id >> 48 = 0)
			IF e.created AND s.bound_to_next_slot THEN
				cap := CASE WHEN outcome_if_new = 'caught_up'
							THEN GREATEST(next_slot, pg_catalog.now() OPERATOR(pg_catalog.+)
										  (next_slot OPERATOR(pg_catalog.-) slot))
							ELSE next_slot END;
				UPDATE ntask.task t SET deadline = LEAST(t.deadline, cap)
				WHERE t.task_id OPERATOR(pg_catalog.=) e.task_id
				  AND t.shard OPERATOR(pg_catalog.=) (e.task_id OPERATOR(pg_catalog.>>) 48)::pg_catalog.int2;
			END IF;
		END IF;
	END IF;
	INSERT INTO ntask.schedule_slot (schedule, slot, task_id, outcome, reason)
	VALUES (s.name, slot, task_id, outcome, reason);
END $$;
COMMENT ON FUNCTION ntask.fire_slot(ntask.schedule, timestamptz, text, text) IS 'ntask: internal: enqueue or record one slot of a locked schedule';

-- A schedule's first firing is its next slot, catchup bounds the latest
-- slot too, and a local time a DST gap skipped is recorded as missed.
-- ntask_fire's slot logic (firing "now") is ntask.fire_due(name, at),
-- which tests call with a given time.
CREATE FUNCTION ntask.cron_gaps(expr text, after timestamptz, upto timestamptz, timezone text,
								OUT slot timestamptz, OUT local_time timestamp)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ntask_cron_gaps'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION ntask.cron_gaps(text, timestamptz, timestamptz, text) IS
'ntask: internal: local times a cron expression matches that a DST gap skipped, with the instant of the gap, for gaps in (after, upto]';

CREATE FUNCTION ntask.fire_due(name text, at timestamptz)
RETURNS TABLE (fired_slot timestamptz, task_id bigint, outcome text, reason text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	base timestamptz;
	handled timestamptz;
	cur timestamptz;
	lo timestamptz;
	missed timestamptz;
	n integer := 0;
	r record;
	g record;
BEGIN
	-- the schedule row lock serializes concurrent firings of one schedule
	SELECT * INTO s FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) fire_due.name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;

	-- the latest slot handled; a schedule that never fired counts from its
	-- creation, so its first firing is its next slot, not a past one
	base := COALESCE(s.last_slot, @extschema@.ntask_cron_prev(s.cron, s.created_at, s.timezone));
	handled := base;
	cur := @extschema@.ntask_cron_prev(s.cron, at, s.timezone);
	-- the catch-up window, measured from now; pg_cron fires once a minute,
	-- so a slot is on time for at least a minute
	lo := at OPERATOR(pg_catalog.-) GREATEST(s.catchup, interval '1 minute');

	-- local times a DST gap skipped since then (at most 8 days back: the
	-- catch-up window is at most 7): recorded as missed, once
	FOR g IN SELECT cg.slot, cg.local_time
			 FROM ntask.cron_gaps(s.cron, GREATEST(base, at OPERATOR(pg_catalog.-) interval '8 days'),
								  at, s.timezone) cg
			 ORDER BY cg.local_time LOOP
		fired_slot := g.slot; task_id := NULL; outcome := 'missed';
		reason := format('local time %s does not exist in time zone %s (daylight saving time gap)',
						 to_char(g.local_time, 'YYYY-MM-DD HH24:MI'), s.timezone);
		INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
		VALUES (s.name, g.slot, 'missed', reason);
		RETURN NEXT;
		handled := GREATEST(handled, g.slot);
	END LOOP;

	IF cur OPERATOR(pg_catalog.<=) base THEN
		IF handled OPERATOR(pg_catalog.>) base THEN
			UPDATE ntask.schedule sc SET last_slot = handled, updated_at = now()
			WHERE sc.name OPERATOR(pg_catalog.=) s.name;
			RETURN;
		END IF;
		-- no new slot since the last firing: say so (nothing is recorded)
		fired_slot := cur;
		SELECT ss.task_id INTO task_id FROM ntask.schedule_slot ss
		WHERE ss.schedule OPERATOR(pg_catalog.=) s.name AND ss.slot OPERATOR(pg_catalog.=) cur
		ORDER BY ss.id DESC LIMIT 1;
		outcome := 'duplicate';
		reason := 'no new slot since the last firing';
		RETURN NEXT;
		RETURN;
	END IF;

	-- slots missed since the last one handled: within the window enqueued
	-- (caught_up), older ones recorded as missed
	missed := @extschema@.ntask_cron_next(s.cron, base, s.timezone);
	WHILE missed OPERATOR(pg_catalog.<) cur LOOP
		n := n + 1;
		IF missed OPERATOR(pg_catalog.>=) lo THEN
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
			missed := GREATEST(lo, missed);
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

	-- the latest slot, unless it is beyond the window too (an outage longer
	-- than catchup enqueues nothing late)
	IF cur OPERATOR(pg_catalog.>=) lo THEN
		SELECT * INTO r FROM ntask.fire_slot(s, cur, 'enqueued');
		fired_slot := cur; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
	ELSE
		reason := 'beyond the catch-up window of ' || s.catchup;
		INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
		VALUES (s.name, cur, 'missed', reason);
		fired_slot := cur; task_id := NULL; outcome := 'missed';
	END IF;
	RETURN NEXT;
	UPDATE ntask.schedule sc SET last_slot = GREATEST(cur, handled), updated_at = now()
	WHERE sc.name OPERATOR(pg_catalog.=) s.name;
END $$;
COMMENT ON FUNCTION ntask.fire_due(text, timestamptz) IS
'ntask: internal: ntask_fire(name) as of a given time: DST-gap slots and slots beyond the catch-up window recorded as missed, the rest enqueued';

CREATE FUNCTION @extschema@.ntask_fire(name text, slot timestamptz DEFAULT NULL, rerun text DEFAULT NULL)
RETURNS TABLE (fired_slot timestamptz, task_id bigint, outcome text, reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
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

	RETURN QUERY SELECT f.fired_slot, f.task_id, f.outcome, f.reason
				 FROM ntask.fire_due(s.name, pg_catalog.now()) f;
END $$;
COMMENT ON FUNCTION @extschema@.ntask_fire(text, timestamptz, text) IS
'ntask: fire a schedule: enqueue its latest slot (key <name>:<slot UTC>) if within the catch-up window (a new schedule starts with its next slot), catch up missed slots within the window, record older ones and DST-gap ones as missed; with slot, (re-)run that slot (a repeat is a duplicate); with rerun, a deliberate second run under a new key';

-- payloads are at most ntask.max_payload_bytes (SQLSTATE 54000); the C
-- functions check it themselves, SQL ones call this
CREATE FUNCTION ntask.check_payload(payload jsonb, what text) RETURNS void
AS 'MODULE_PATHNAME', 'ntask_check_payload'
LANGUAGE C STRICT;
COMMENT ON FUNCTION ntask.check_payload(jsonb, text) IS
'ntask: internal: raise 54000 when a payload is over ntask.max_payload_bytes';

-- ntask_schedule: the role setting a schedule needs the queue's producer
-- right (ntask_fire runs as the owner; ntask.schedule.set_by records who
-- set it); a replaced schedule whose cron expression or time zone changes
-- starts with the next slot of the new one; its payload is checked when
-- it is stored.  Its upsert sets updated_at from EXCLUDED (the column's
-- default, now()): Citus refuses a function in DO UPDATE SET.
CREATE FUNCTION @extschema@.ntask_schedule(name text, cron text, queue text, payload jsonb DEFAULT '{}',
										   overlap text DEFAULT 'skip', catchup interval DEFAULT '1 hour',
										   timezone text DEFAULT 'UTC', bound_to_next_slot boolean DEFAULT true)
RETURNS ntask.schedule
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	job text := 'ntask:' || name;
	cmd text := format('SELECT * FROM %I.ntask_fire(%L)', '@extschema@', name);
	cron_expr text;
	prev_slot timestamptz;
	who oid := ntask.outer_role();
	who_name name;
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
	PERFORM ntask.check_payload(payload, 'payload');
	-- validates both; the slot before now is where a new expression starts
	prev_slot := @extschema@.ntask_cron_prev(cron, now(), timezone);
	-- the schedule enqueues on behalf of the role setting it (ntask_fire
	-- runs as the owner): that role needs the queue's producer right now
	-- (issue 29, ntask.schedule.set_by)
	IF EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) ntask_schedule.queue
			   AND q.producer_role IS NOT NULL AND NOT pg_has_role(who, q.producer_role, 'USAGE')) THEN
		RAISE EXCEPTION 'ntask: permission denied to enqueue into queue "%"', queue
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'A schedule enqueues on behalf of the role that sets it: that role needs the queue''s producer_role (ntask_queue_set_roles).';
	END IF;
	who_name := (SELECT r.rolname FROM pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) who);

	INSERT INTO ntask.schedule AS sc (name, cron, queue, payload, overlap, catchup, timezone,
									  bound_to_next_slot, set_by)
	VALUES (name, cron, queue, payload, overlap, catchup, timezone, bound_to_next_slot, who_name)
	ON CONFLICT ON CONSTRAINT schedule_pkey DO UPDATE SET cron = EXCLUDED.cron, queue = EXCLUDED.queue,
		payload = EXCLUDED.payload, overlap = EXCLUDED.overlap, catchup = EXCLUDED.catchup,
		timezone = EXCLUDED.timezone, bound_to_next_slot = EXCLUDED.bound_to_next_slot,
		set_by = EXCLUDED.set_by,
		last_slot = CASE WHEN sc.cron IS DISTINCT FROM EXCLUDED.cron
							  OR sc.timezone IS DISTINCT FROM EXCLUDED.timezone
						 THEN GREATEST(sc.last_slot, prev_slot) ELSE sc.last_slot END,
		updated_at = EXCLUDED.updated_at	-- its default, now(): Citus refuses a function in DO UPDATE SET
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
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
BEGIN
	DELETE FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) ntask_unschedule.name RETURNING * INTO s;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;
	IF s.cron_job IS NOT NULL AND to_regprocedure('cron.unschedule(bigint)') IS NOT NULL
	   AND to_regclass('cron.job') IS NOT NULL THEN
		EXECUTE 'SELECT count(cron.unschedule(j.jobid)) FROM cron.job j
				 WHERE j.jobname OPERATOR(pg_catalog.=) $1
				   AND j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()'
			USING s.cron_job;
	END IF;
	RETURN true;
END $$;
COMMENT ON FUNCTION @extschema@.ntask_unschedule(text) IS
'ntask: remove a schedule and its pg_cron job; its slot history and tasks stay';

-- Sagas (docs/design.md "Sagas") -------------------------------------

CREATE FUNCTION ntask.saga_scope(steps jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
	SELECT pg_catalog.array_agg(x.q ORDER BY x.q)
	FROM (SELECT DISTINCT (v.q COLLATE "C") AS q
		  FROM pg_catalog.jsonb_array_elements(steps) e(step),
			   LATERAL (VALUES (e.step OPERATOR(pg_catalog.->>) 'queue'),
							   ((e.step OPERATOR(pg_catalog.->) 'compensate')
									OPERATOR(pg_catalog.->>) 'queue')) v(q)
		  WHERE v.q IS NOT NULL) x
$$;
COMMENT ON FUNCTION ntask.saga_scope(jsonb) IS 'ntask: the queues a saga definition names (forward and compensation), distinct, in byte order: the scope of its saga_key';

CREATE FUNCTION ntask.saga_step_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'ntask_saga_step_changed'
LANGUAGE C;
COMMENT ON FUNCTION ntask.saga_step_changed() IS 'ntask: moves a saga when one of its step tasks changes state (next step, compensation, end), in the same transaction';

CREATE FUNCTION @extschema@.ntask_saga_start(saga_key text, steps jsonb, actor text DEFAULT NULL)
RETURNS TABLE (saga_id bigint, created boolean, state text)
AS 'MODULE_PATHNAME', 'ntask_saga_start'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_saga_start(text, jsonb, text) IS
'ntask: start a saga (idempotent on saga_key: the same definition returns the existing saga, another raises NT001); steps is an array of {"name", "queue", "payload", "compensate": {"queue", "payload"}}; step 1 is enqueued in the caller''s transaction';

CREATE FUNCTION @extschema@.ntask_saga_cancel(saga_id bigint, actor text, reason text)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_saga_cancel'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_saga_cancel(bigint, text, text) IS
'ntask: audited cancel of a running saga: its running step is canceled (that worker''s token goes stale), then the steps that succeeded are compensated; returns the saga''s state';

CREATE FUNCTION @extschema@.ntask_saga_resume(saga_id bigint, actor text, reason text)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_saga_resume'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_saga_resume(bigint, text, text) IS
'ntask: audited resume of a saga in manual_review: its failed compensation gets a fresh budget and the compensation goes on; returns the saga''s state';

-- Housekeeping and the background worker (docs/worker.md) ------------

CREATE FUNCTION @extschema@.ntask_housekeeping(
	max_rows integer DEFAULT 1000,
	deadlines boolean DEFAULT true)
RETURNS TABLE (expired bigint, repaired bigint, pruned bigint)
AS 'MODULE_PATHNAME', 'ntask_housekeeping'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_housekeeping(integer, boolean) IS
'ntask: one housekeeping round (the background worker runs it every ntask.naptime): release expired leases (retry_wait, or repair_required when the budget or deadline is spent), move unleased tasks past their deadline to repair_required, delete finished tasks older than their queue''s retention; at most max_rows per step';

-- ntask_explain (README "ntask_explain") -----------------------------
-- One time-ordered record of a task for on-call.  Read only: it reads the
-- tables an ntask_admin may read (SECURITY INVOKER, EXECUTE granted to
-- ntask_admin only, so anyone else gets 42501).  It says what the worker
-- will really do on an http queue: send again when the target has no
-- reconcile_url, ask the reconcile_url first when it has one, and name the
-- queue's circuit breaker, its state and until when, when the breaker
-- holds a due task.

-- a point in time for people, whatever DateStyle says: 2026-12-01 10:02:13+00
-- (the session's TimeZone)
CREATE FUNCTION ntask.explain_ts(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT to_char(ts, 'YYYY-MM-DD HH24:MI:SSOF') $$;
COMMENT ON FUNCTION ntask.explain_ts(timestamptz) IS 'ntask: a point in time for ntask_explain, 2026-12-01 10:02:13+00 in the session''s TimeZone';

-- a duration in words for people: "4 s", "3 min 20 s", "2 h 5 min", "3 days 4 h"
CREATE FUNCTION ntask.explain_age(d interval) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE
	WHEN s IS NULL THEN NULL
	WHEN s < 0 THEN '-' || ntask.explain_age(-d)
	WHEN s < 120 THEN round(s, CASE WHEN s < 10 THEN 1 ELSE 0 END)::text || ' s'
	WHEN s < 7200 THEN floor(s / 60)::text || ' min ' || (floor(s)::bigint % 60)::text || ' s'
	WHEN s < 172800 THEN floor(s / 3600)::text || ' h ' || ((floor(s)::bigint % 3600) / 60)::text || ' min'
	ELSE floor(s / 86400)::text || ' days ' || ((floor(s)::bigint % 86400) / 3600)::text || ' h'
END
FROM (SELECT extract(epoch FROM d) AS s) x
$$;
COMMENT ON FUNCTION ntask.explain_age(interval) IS 'ntask: a duration in words for ntask_explain ("4 s", "3 min 20 s", "2 h 5 min", "3 days 4 h")';

-- when the next token of a queue's (and a key's) rate bucket is there,
-- from shared memory (src/limit.c); for ntask_explain
CREATE FUNCTION ntask.limit_next(queue text, partition_key text, qn integer, qper_us bigint,
								 kn integer, kper_us bigint)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ntask_limit_next'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION ntask.limit_next(text, text, integer, bigint, integer, bigint) IS 'ntask: when the next token of the rate buckets of a queue (qn per qper_us) and of its key (kn per kper_us) is there; now when both have one; NULL without shared memory';

CREATE FUNCTION @extschema@.ntask_explain(task_id bigint, include_payload boolean DEFAULT false)
RETURNS TABLE (at timestamptz, event text, token bigint, actor text, detail text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	t ntask.task;
	q ntask.queue;
	a ntask.attempt_all;	-- the latest attempt, if any (the open one included)
	n timestamptz := pg_catalog.now();
	is_http boolean;
	b ntask.breaker;		-- the queue's circuit breaker, if it has one
	waiting text;			-- what a due task waits for
	last_err text;
	prior text;
	words text;
	fin_actor text;
	fin_by text;
BEGIN
	IF ntask_explain.task_id IS NULL THEN
		RAISE EXCEPTION 'ntask: task_id must not be NULL' USING ERRCODE = '22004';
	END IF;
	IF ntask_explain.include_payload IS NULL THEN
		RAISE EXCEPTION 'ntask: include_payload must not be NULL' USING ERRCODE = '22004';
	END IF;
	SELECT * INTO t FROM ntask.task x WHERE x.task_id OPERATOR(pg_catalog.=) ntask_explain.task_id;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: task % does not exist', ntask_explain.task_id USING ERRCODE = 'P0002';
	END IF;
	SELECT * INTO q FROM ntask.queue x WHERE x.queue OPERATOR(pg_catalog.=) t.queue;
	SELECT * INTO a FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id
	ORDER BY x.token DESC LIMIT 1;
	-- (false, not NULL, for a queue without a target: issue 46.5)
	is_http := coalesce(q.target->>'type' OPERATOR(pg_catalog.=) 'http', false);

	-- what a due task waits for: a claim, or on an http queue whose circuit
	-- breaker is not closed, the breaker (src/breaker.c: the worker claims
	-- nothing of the queue while it is open, one probe when half open)
	waiting := format('waiting for %s to claim it',
					  CASE WHEN is_http THEN 'the background worker' ELSE 'a worker' END);
	IF is_http AND q.breaker_failures IS NOT NULL THEN
		SELECT * INTO b FROM ntask.breaker x WHERE x.queue OPERATOR(pg_catalog.=) t.queue;
		IF b.state OPERATOR(pg_catalog.=) 'open' AND b.open_until OPERATOR(pg_catalog.>) n THEN
			waiting := format('held by the circuit breaker of queue %s: open since %s after %s consecutive failures, open until %s (in %s); the background worker claims nothing of the queue until then, then sends one probe',
							  t.queue, ntask.explain_ts(b.opened_at), b.failures,
							  ntask.explain_ts(b.open_until), ntask.explain_age(b.open_until OPERATOR(pg_catalog.-) n));
		ELSIF b.state OPERATOR(pg_catalog.=) 'open' THEN
			waiting := format('held by the circuit breaker of queue %s: open until %s (passed %s ago); the background worker sends one probe of the queue at its next tick and the rest once the probe succeeds',
							  t.queue, ntask.explain_ts(b.open_until), ntask.explain_age(n OPERATOR(pg_catalog.-) b.open_until));
		ELSIF b.state OPERATOR(pg_catalog.=) 'half_open' THEN
			waiting := format('held by the circuit breaker of queue %s: half open since %s; the background worker sends one probe of the queue and holds the rest until it succeeds',
							  t.queue, ntask.explain_ts(b.changed_at));
		END IF;
	END IF;

	-- the last error in words: class, then the HTTP status, curl's error or the stage
	SELECT x.error_class || coalesce(' ' || coalesce('HTTP ' || (x.detail->>'http_status'),
													  x.detail->>'curl_error', x.error_stage), '')
	INTO last_err
	FROM ntask.attempt_all x
	WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.error_class IS NOT NULL
	ORDER BY x.token DESC LIMIT 1;

	-- what the next claim will report as prior_outcome
	-- (the same rule as ntask_claim's)
	IF EXISTS (SELECT 1 FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id) THEN
		prior := 'prior_outcome committed: a receipt exists, the next attempt must not redo the business write';
	ELSIF t.unknown_attempts OPERATOR(pg_catalog.>) 0 THEN
		-- on an http queue, what the worker does (dispatch.c dq_claim_step)
		prior := format('prior_outcome unknown: %s earlier attempt(s) may have had an effect, %s',
						t.unknown_attempts,
						CASE WHEN NOT is_http THEN 'the next claim hands it to a worker with prior_outcome = ''unknown'', which must reconcile first (did the effect happen?); no background worker sends it'
							 WHEN q.target ? 'reconcile_url' THEN
								 format('the background worker first asks the reconcile_url %s and sends again only if it answers 404',
										q.target->>'reconcile_url')
							 ELSE format('the target has no reconcile_url, so the background worker sends it again (%s with the same Idempotency-Key): the provider must deduplicate',
										 coalesce(q.target->>'method', 'POST'))
						END);
	END IF;

	-- who finished it: the worker whose attempt ended then, an audited
	-- action, the guard (skip or cancel at claim), else ntask itself
	-- (budget, deadline, lease expiry)
	IF t.finished_at IS NOT NULL THEN
		SELECT x.worker, 'attempt ' || x.attempt INTO fin_actor, fin_by FROM ntask.attempt_all x
		WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.ended_at OPERATOR(pg_catalog.=) t.finished_at
		  AND x.requested IS NOT NULL AND x.requested OPERATOR(pg_catalog.<>) 'released'
		ORDER BY x.token DESC LIMIT 1;
		IF fin_actor IS NULL THEN
			SELECT x.actor, 'ntask_' || x.action INTO fin_actor, fin_by FROM ntask.audit x
			WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.to_state OPERATOR(pg_catalog.=) t.state
			ORDER BY x.audit_id DESC LIMIT 1;
		END IF;
		IF fin_actor IS NULL AND t.state OPERATOR(pg_catalog.=) ANY ('{skipped,canceled}') THEN
			fin_actor := 'guard';
			fin_by := 'the guard at claim';
		END IF;
		IF fin_actor IS NULL THEN
			fin_actor := 'ntask';
			fin_by := CASE WHEN t.reason OPERATOR(pg_catalog.=) ANY ('{budget_exhausted,deadline_exceeded}')
						   THEN 'the budget check' ELSE 'ntask' END;
		END IF;
	END IF;

	words := CASE t.state
		WHEN 'waiting' THEN
			(SELECT format('waiting for %s of %s parents: %s%s; if one fails: %s',
						   t.parents_left, count(*),
						   string_agg(p.queue || ':' || p.task_key || CASE WHEN p.state OPERATOR(pg_catalog.<>) ALL ('{ready,leased,retry_wait,waiting}') THEN ' (' || p.state || ')' ELSE '' END, ', ' ORDER BY p.task_id)
							   FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded'),
						   CASE WHEN count(*) FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded') OPERATOR(pg_catalog.<) t.parents_left
								THEN format(' (%s pruned)', t.parents_left OPERATOR(pg_catalog.-) count(*) FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded')) ELSE '' END,
						   CASE coalesce(t.on_parent_failed, q.on_parent_failed)
								WHEN 'cancel' THEN 'cancel'
								ELSE 'wait (a parent in repair_required can be replayed; a canceled or skipped parent sends this task to repair_required)' END)
			 FROM ntask.task_dep d JOIN ntask.task p ON p.task_id OPERATOR(pg_catalog.=) d.parent_id
				  AND p.shard OPERATOR(pg_catalog.=) d.shard
			 WHERE d.task_id OPERATOR(pg_catalog.=) t.task_id AND d.shard OPERATOR(pg_catalog.=) t.shard)
		WHEN 'ready' THEN
			CASE WHEN t.run_at OPERATOR(pg_catalog.>) n THEN
				format('ready, not due until %s (in %s); then attempt %s of %s',
					   ntask.explain_ts(t.run_at), ntask.explain_age(t.run_at OPERATOR(pg_catalog.-) n),
					   t.attempts + 1, t.max_attempts)
			ELSE
				format('ready since %s (%s), %s (attempt %s of %s)',
					   ntask.explain_ts(t.run_at), ntask.explain_age(n OPERATOR(pg_catalog.-) t.run_at),
					   waiting, t.attempts + 1, t.max_attempts)
			END
		WHEN 'retry_wait' THEN
			CASE WHEN t.run_at OPERATOR(pg_catalog.>) n THEN
				format('retry_wait until %s (in %s; attempt %s of %s, last error %s)',
					   ntask.explain_ts(t.run_at), ntask.explain_age(t.run_at OPERATOR(pg_catalog.-) n),
					   t.attempts + 1, t.max_attempts, coalesce(last_err, 'none recorded'))
			ELSE
				format('retry_wait, due since %s (%s), %s (attempt %s of %s, last error %s)',
					   ntask.explain_ts(t.run_at), ntask.explain_age(n OPERATOR(pg_catalog.-) t.run_at),
					   waiting, t.attempts + 1, t.max_attempts, coalesce(last_err, 'none recorded'))
			END
		WHEN 'leased' THEN
			format('leased by %s until %s, %s (attempt %s of %s, token %s, %s)',
				   t.lease_owner, ntask.explain_ts(t.lease_until),
				   CASE
					   WHEN t.lease_until OPERATOR(pg_catalog.<) n THEN
						   format('not heartbeating: expired %s ago, the next claim or housekeeping takes it over',
								  ntask.explain_age(n OPERATOR(pg_catalog.-) t.lease_until))
					   WHEN t.updated_at OPERATOR(pg_catalog.>) a.claimed_at THEN
						   format('heartbeating (last %s ago)', ntask.explain_age(n OPERATOR(pg_catalog.-) t.updated_at))
					   ELSE
						   format('not heartbeating (no heartbeat since the claim %s ago)',
								  ntask.explain_age(n OPERATOR(pg_catalog.-) a.claimed_at))
				   END,
				   t.attempts, t.max_attempts, t.token,
				   CASE WHEN a.invoked_at IS NULL THEN 'not invoked yet'
						ELSE format('invoked %s ago: if it ends without a report its outcome is unknown',
									ntask.explain_age(n OPERATOR(pg_catalog.-) a.invoked_at)) END)
		WHEN 'repair_required' THEN
			format('repair_required: %s, owner %s%s (%s of %s attempts, %s with unknown outcome)%s',
				   t.reason, coalesce(t.repair_owner, 'none assigned'),
				   coalesce(', next: ' || t.repair_next_action, ''),
				   t.attempts, t.max_attempts,
				   (SELECT count(*) FROM ntask.attempt_all x
					WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND NOT x.outcome_known),
				   CASE WHEN t.reason OPERATOR(pg_catalog.=) ANY ('{parent_canceled,parent_skipped}') THEN
						'; a parent can no longer succeed: ntask_replay runs this task without its result, ntask_cancel ends it'
						ELSE '' END)
		WHEN 'succeeded' THEN
			format('succeeded (%s) at %s after %s attempt(s): waiting for nothing',
				   t.outcome, ntask.explain_ts(t.finished_at), t.attempts)
		WHEN 'canceled' THEN
			format('canceled at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
		WHEN 'skipped' THEN
			format('skipped at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
		WHEN 'awaiting' THEN
			format('awaiting signal %s of queue %s since %s (%s), %s (attempt %s of %s ended awaiting, not counted)',
				   t.signal_key, t.queue, ntask.explain_ts(t.updated_at),
				   ntask.explain_age(n OPERATOR(pg_catalog.-) t.updated_at),
				   CASE WHEN t.due_at IS NULL THEN 'no timeout: only ntask_signal or a cancel ends the wait'
						ELSE format('times out at %s (%s %s), then %s',
									ntask.explain_ts(t.due_at),
									CASE WHEN t.due_at OPERATOR(pg_catalog.>) n THEN 'in' ELSE 'passed' END,
									ntask.explain_age(abs(pg_catalog.date_part('epoch', t.due_at OPERATOR(pg_catalog.-) n)) * interval '1 second'),
									CASE t.await_on_timeout WHEN 'repair' THEN 'the next claim moves it to repair_required (await_timeout)'
										 ELSE 'the next claim hands it out with signal.timed_out' END) END,
				   t.attempts, t.max_attempts)
	END;
	-- a worker_role that was dropped holds every unfinished task (issue 46.9)
	IF t.finished_at IS NULL AND q.worker_role IS NOT NULL
	   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
					   WHERE r.oid OPERATOR(pg_catalog.=) q.worker_role::pg_catalog.oid) THEN
		words := words || '; but the queue''s worker_role was dropped (DROP ROLE): no worker but a superuser may claim it or report on it, until an admin names another role (or NULL) with ntask_queue_set_roles';
	END IF;
	-- the holder's latest progress (ntask_heartbeat progress => ...)
	IF t.state OPERATOR(pg_catalog.=) 'leased' AND t.progress IS NOT NULL THEN
		words := words || format('; progress %s, reported %s ago', t.progress::text,
								 ntask.explain_age(n OPERATOR(pg_catalog.-) t.progress_at));
	END IF;
	-- checkpoints done (issue 36.2), whatever the state
	IF t.checkpoints OPERATOR(pg_catalog.>) 0 THEN
		words := words || format('; %s checkpoint(s) done: %s', t.checkpoints,
			(SELECT pg_catalog.string_agg(c.step, ', ' ORDER BY c.written_at, c.step)
			 FROM ntask.checkpoint c WHERE c.task_id OPERATOR(pg_catalog.=) t.task_id));
	END IF;
	IF t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}') THEN
		IF prior IS NOT NULL THEN
			words := words || '; ' || prior;
		END IF;
		IF q.guard IS NOT NULL THEN
			words := words || '; the guard ' || q.guard || ' decides at claim';
		END IF;
		-- a pause (issue 35.1, 35.5): the operator's, a rate limit's of the
		-- queue, or of the task's key (on_rate_limited)
		IF q.paused_at IS NOT NULL THEN
			words := words || format('; held back: the queue is paused by %s since %s: %s',
									 q.paused_by, ntask.explain_ts(q.paused_at), q.pause_reason);
		ELSIF q.paused_until OPERATOR(pg_catalog.>) n THEN
			words := words || format('; held back: the queue is paused until %s (in %s): a provider''s rate limit (HTTP 429 or 503 with Retry-After, on_rate_limited pause_queue)',
									 ntask.explain_ts(q.paused_until), ntask.explain_age(q.paused_until OPERATOR(pg_catalog.-) n));
		ELSIF q.keys_paused_until OPERATOR(pg_catalog.>) n AND t.partition_key IS NOT NULL THEN
			words := words || coalesce((
				SELECT format('; held back: its key %s is paused until %s (in %s): %s',
							  k.partition_key, ntask.explain_ts(k.until),
							  ntask.explain_age(k.until OPERATOR(pg_catalog.-) n), k.reason)
				FROM ntask.key_pause k
				WHERE k.queue OPERATOR(pg_catalog.=) t.queue
				  AND k.partition_key OPERATOR(pg_catalog.=) t.partition_key
				  AND k.until OPERATOR(pg_catalog.>) n), '');
		END IF;
		-- flow control (issue 13): what holds a due task back
		IF t.run_at OPERATOR(pg_catalog.<=) n THEN
			words := words || coalesce((
				SELECT CASE
					WHEN h.task_id IS NOT NULL THEN
						format('; held back: behind task %s (%s, %s), the head of its key in an ordered queue',
							   h.task_id, h.task_key, h.state)
					WHEN q.partition_max_inflight IS NOT NULL
						 AND l.key_n OPERATOR(pg_catalog.>=) q.partition_max_inflight THEN
						format('; held back: its key has %s of %s leases in flight',
							   l.key_n, q.partition_max_inflight)
					WHEN q.max_inflight IS NOT NULL
						 AND l.queue_n OPERATOR(pg_catalog.>=) q.max_inflight THEN
						format('; held back: the queue has %s of %s leases in flight',
							   l.queue_n, q.max_inflight)
					WHEN q.rate_n IS NOT NULL OR q.partition_rate_n IS NOT NULL THEN
						format('; the queue has a rate limit (%s): the next token %s',
							   concat_ws(', ', q.rate_n || ' per ' || q.rate_per,
										 q.partition_rate_n || ' per ' || q.partition_rate_per || ' per key'),
							   CASE WHEN r.next_at IS NULL THEN 'is unknown (no shared memory)'
									WHEN r.next_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN 'is free now'
									ELSE 'comes in ' || ntask.explain_age(r.next_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) END)
					END
				FROM (SELECT count(*) FILTER (WHERE x.partition_key IS NOT DISTINCT FROM t.partition_key) AS key_n,
							 count(*) AS queue_n
					  FROM ntask.task x
					  WHERE x.queue OPERATOR(pg_catalog.=) t.queue AND x.state OPERATOR(pg_catalog.=) 'leased'
						AND x.lease_until OPERATOR(pg_catalog.>) n) l
				LEFT JOIN LATERAL (
					SELECT x.task_id, x.task_key, x.state FROM ntask.task x
					WHERE q.ordered AND x.queue OPERATOR(pg_catalog.=) t.queue
					  AND x.partition_key OPERATOR(pg_catalog.=) t.partition_key AND x.ordered
					  AND (x.due_at IS NOT NULL OR x.state OPERATOR(pg_catalog.=) 'repair_required'
						   OR x.state OPERATOR(pg_catalog.=) 'awaiting' OR x.state OPERATOR(pg_catalog.=) 'waiting')
					  AND NOT (q.ordered_skip_repair AND x.state OPERATOR(pg_catalog.=) 'repair_required')
					  AND x.task_id OPERATOR(pg_catalog.<) t.task_id
					ORDER BY x.task_id LIMIT 1) h ON true
				LEFT JOIN LATERAL (
					SELECT ntask.limit_next(t.queue, t.partition_key,
						coalesce(q.rate_n, 0),
						coalesce((pg_catalog.date_part('epoch', q.rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, 0),
						coalesce(q.partition_rate_n, 0),
						coalesce((pg_catalog.date_part('epoch', q.partition_rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, 0)) AS next_at
					WHERE q.rate_n IS NOT NULL OR q.partition_rate_n IS NOT NULL) r ON true), '');
		END IF;
		words := words || format('; deadline %s', ntask.explain_ts(t.deadline));
	END IF;

	at := n; event := 'now'; token := t.token; actor := NULL; detail := words;
	RETURN NEXT;

	RETURN QUERY
	SELECT e.at, e.event, e.token, e.actor, e.detail
	FROM (
		-- the enqueue
		SELECT t.created_at AS at, 0 AS ord, 0::bigint AS tok, 'enqueued' AS event,
			   NULL::bigint AS token, t.enqueued_by AS actor,
			   format('queue %s, key %s, payload digest %s (digest v%s), priority %s%s%s%s',
					  t.queue, t.task_key,
					  pg_catalog.encode(t.payload_digest, 'hex'), t.digest_version, t.priority,
					  coalesce(', partition ' || t.partition_key, ''),
					  CASE WHEN is_http THEN ', Idempotency-Key ' || t.task_key ELSE '' END,
					  coalesce(', traceparent ' || t.traceparent, '')) AS detail
		UNION ALL
		-- the payload itself, only when asked
		SELECT t.created_at, 1, 0, 'payload', NULL, NULL, t.payload::text
		WHERE ntask_explain.include_payload
		UNION ALL
		-- every attempt: claimed, invoked, ended
		SELECT x.claimed_at, 2, x.token, 'claimed', x.token, x.worker,
			   format('attempt %s of %s claimed', x.attempt, t.max_attempts)
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		SELECT x.invoked_at, 3, x.token, 'invoked', x.token, x.worker,
			   format('attempt %s invoked: about to call out', x.attempt)
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.invoked_at IS NOT NULL
		UNION ALL
		SELECT t.updated_at, 4, t.token, 'heartbeat', t.token, t.lease_owner,
			   format('last heartbeat: lease until %s', ntask.explain_ts(t.lease_until))
		WHERE t.state OPERATOR(pg_catalog.=) 'leased' AND t.updated_at OPERATOR(pg_catalog.>) a.claimed_at
		UNION ALL
		SELECT t.progress_at, 4, t.token, 'progress', t.token, t.lease_owner,
			   format('progress (%s ago): %s', ntask.explain_age(n OPERATOR(pg_catalog.-) t.progress_at),
					  t.progress::text)
		WHERE t.state OPERATOR(pg_catalog.=) 'leased' AND t.progress IS NOT NULL
		UNION ALL
		SELECT x.ended_at, 6, x.token, 'ended', x.token, x.worker,
			   format('attempt %s ended: %s%s%s, outcome %s%s%s%s%s',
					  x.attempt, x.result,
					  CASE WHEN x.requested IS NOT NULL AND x.requested OPERATOR(pg_catalog.<>) x.result
						   THEN ' (asked for ' || x.requested || ')' ELSE '' END,
					  coalesce(', error ' || x.error_class || coalesce(' at ' || x.error_stage, ''), ''),
					  CASE WHEN x.outcome_known THEN 'known' ELSE 'unknown' END,
					  coalesce(' (' || x.outcome || ')', ''),
					  coalesce(', retry at ' || ntask.explain_ts(x.retry_at), ''),
					  coalesce(', ' || CASE WHEN x.detail ? 'http_status' THEN 'HTTP ' || (x.detail->>'http_status') || ' ' ELSE '' END
							   || x.detail::text, ''),
					  coalesce(', last progress ' || x.progress::text, ''))
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.ended_at IS NOT NULL
		UNION ALL
		-- receipts (the business commit)
		SELECT r.committed_at, 5, r.token, 'receipt', r.token, r.db_user::text,
			   format('receipt committed by token %s, content digest %s (digest v%s)',
					  r.token, pg_catalog.encode(r.payload_digest, 'hex'), r.digest_version)
		FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		-- checkpoints (issue 36.2)
		SELECT c.written_at, 5, c.token, 'checkpoint', c.token, NULL,
			   format('step %s written by token %s, value digest %s (digest v%s)',
					  c.step, c.token, pg_catalog.encode(c.value_digest, 'hex'), c.digest_version)
		FROM ntask.checkpoint c WHERE c.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		-- the signal it awaited, once sent (issue 36.3)
		SELECT s.sent_at, 5, 0, 'signal', NULL, s.sent_by::text,
			   format('signal %s sent, payload digest %s', s.signal_key,
					  pg_catalog.encode(s.payload_digest, 'hex'))
		FROM ntask.signal s
		WHERE t.signal_key IS NOT NULL AND s.queue OPERATOR(pg_catalog.=) t.queue
		  AND s.signal_key OPERATOR(pg_catalog.=) t.signal_key AND s.sent_at IS NOT NULL
		UNION ALL
		-- audited actions: cancel, replay, repair_assign, guard_error
		SELECT u.at, 7, u.audit_id, u.action, NULL, u.actor || CASE WHEN u.db_user::text OPERATOR(pg_catalog.<>) u.actor THEN ' (' || u.db_user || ')' ELSE '' END,
			   format('%s%s: %s', u.action,
					  coalesce(' ' || u.from_state || ' -> ' || u.to_state, ''), u.reason)
		FROM ntask.audit u WHERE u.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		-- the end
		SELECT t.finished_at, 8, 0, 'finished', t.token, fin_actor,
			   format('%s by %s%s%s', t.state, fin_by, coalesce(': ' || t.reason, ''), coalesce(' (' || t.outcome || ')', ''))
		WHERE t.finished_at IS NOT NULL
	) e
	ORDER BY e.at, e.ord, e.tok;
END
$$;
COMMENT ON FUNCTION @extschema@.ntask_explain(bigint, boolean) IS
'ntask: one time-ordered record of a task for on-call: first what it is waiting for, in words (the signal it awaits and since when, the checkpoints done), then the enqueue (with its traceparent), every attempt (claimed, invoked, progress, ended with result, error class and stage, outcome known or unknown, HTTP status, last progress), receipts, checkpoints, the signal it awaited, audited replays, cancels, repair assignments and guard errors, and the end; the payload only with include_payload';

-- Metrics ------------------------------------------------------------

CREATE FUNCTION ntask.count_pruned() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	INSERT INTO ntask.queue_pruned AS p (queue, tasks, attempts, unknown_attempts,
										 succeeded, canceled, skipped, updated_at)
	SELECT o.queue, count(*), sum(o.attempts), sum(o.unknown_attempts),
		   count(*) FILTER (WHERE o.state OPERATOR(pg_catalog.=) 'succeeded'),
		   count(*) FILTER (WHERE o.state OPERATOR(pg_catalog.=) 'canceled'),
		   count(*) FILTER (WHERE o.state OPERATOR(pg_catalog.=) 'skipped'),
		   pg_catalog.now()
	FROM pruned o
	GROUP BY o.queue
	ON CONFLICT (queue) DO UPDATE SET
		tasks = p.tasks OPERATOR(pg_catalog.+) EXCLUDED.tasks,
		attempts = p.attempts OPERATOR(pg_catalog.+) EXCLUDED.attempts,
		unknown_attempts = p.unknown_attempts OPERATOR(pg_catalog.+) EXCLUDED.unknown_attempts,
		succeeded = p.succeeded OPERATOR(pg_catalog.+) EXCLUDED.succeeded,
		canceled = p.canceled OPERATOR(pg_catalog.+) EXCLUDED.canceled,
		skipped = p.skipped OPERATOR(pg_catalog.+) EXCLUDED.skipped,
		updated_at = EXCLUDED.updated_at;
	RETURN NULL;
END $$;
COMMENT ON FUNCTION ntask.count_pruned() IS 'ntask: trigger: adds what deleted tasks had counted to ntask.queue_pruned';

-- Shard-addressed calls (issue 34; docs/scaling.md "One hop: delegated
-- calls") ---------------------------------------------------------------

/*
 * ntask_shard: the shard of a key (the partition key, or the task key
 * without one) or of a task id; 0 on a plain install.  The key form reads
 * the shard map, which ntask_distribute writes once, and is declared
 * IMMUTABLE so that a call with constant arguments is folded into the
 * constant Citus needs to delegate an ntask_<f>_on call.
 */
CREATE FUNCTION @extschema@.ntask_shard(queue text, key text)
RETURNS smallint
AS 'MODULE_PATHNAME', 'ntask_shard_of_key'
LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION @extschema@.ntask_shard(text, text) IS
'ntask: the shard of a task of queue keyed by key (its partition key, or its task key without one); 0 on a plain install';
CREATE FUNCTION @extschema@.ntask_shard(task_id bigint)
RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (task_id OPERATOR(pg_catalog.>>) 48)::smallint;
COMMENT ON FUNCTION @extschema@.ntask_shard(bigint) IS
'ntask: the shard of a task id (its high bits); 0 on a plain install';

/*
 * The hot API with the shard as its first argument: ntask_<f>_on(shard,
 * <ntask_<f>'s arguments>) checks the shard (a shard of this install, the
 * task's or the key's: 22023) and calls ntask_<f>.  ntask_distribute
 * registers each with create_distributed_function (distribution argument
 * shard, co-located with ntask.task), so that Citus runs a call made
 * outside a transaction block on the shard's node, as one hop.
 */
CREATE FUNCTION @extschema@.ntask_enqueue_on(
	shard smallint,
	queue text,
	task_key text,
	payload jsonb DEFAULT '{}',
	run_at timestamptz DEFAULT NULL,
	partition_key text DEFAULT NULL,
	priority integer DEFAULT 0,
	traceparent text DEFAULT NULL,
	depends_on text[] DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS TABLE (task_id bigint, created boolean, state text, outcome text, result jsonb)
AS 'MODULE_PATHNAME', 'ntask_enqueue_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_enqueue_on(smallint, text, text, jsonb, timestamptz, text, integer, text, text[], text) IS
'ntask: ntask_enqueue on the node of shard (Citus delegates a call made outside a transaction block there); the enqueue''s key (partition key, or task key without one) must be of shard: ntask_shard(queue, key)';

CREATE FUNCTION @extschema@.ntask_enqueue_many_on(
	shard smallint,
	queue text,
	task_keys text[],
	payloads jsonb[],
	run_at timestamptz DEFAULT NULL,
	partition_keys text[] DEFAULT NULL,
	priority integer DEFAULT 0,
	traceparent text DEFAULT NULL,
	depends_on text[] DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS TABLE (task_id bigint, created boolean, state text, outcome text, result jsonb)
AS 'MODULE_PATHNAME', 'ntask_enqueue_many_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_enqueue_many_on(smallint, text, text[], jsonb[], timestamptz, text[], integer, text, text[], text) IS
'ntask: ntask_enqueue_many on the node of shard (Citus delegates a call made outside a transaction block there); every key must be of shard';

CREATE FUNCTION @extschema@.ntask_claim_on(
	shard smallint,
	queue text,
	worker text,
	max_tasks integer DEFAULT 1,
	lease interval DEFAULT NULL,
	wait interval DEFAULT NULL,
	invoked boolean DEFAULT false)
RETURNS TABLE (task_id bigint, task_key text, payload jsonb, attempt integer,
			   token bigint, lease_until timestamptz, prior_outcome text,
			   context jsonb)
AS 'MODULE_PATHNAME', 'ntask_claim_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_claim_on(smallint, text, text, integer, interval, interval, boolean) IS
'ntask: ntask_claim on the node of shard (Citus delegates a call made outside a transaction block there); claims from shard only';

CREATE FUNCTION @extschema@.ntask_transition_on(
	shard smallint,
	task_id bigint,
	token bigint,
	to_state text,
	error_class text DEFAULT NULL,
	detail jsonb DEFAULT NULL,
	retry_at timestamptz DEFAULT NULL,
	outcome text DEFAULT NULL,
	error_stage text DEFAULT NULL,
	result jsonb DEFAULT NULL)
RETURNS TABLE (result text, state text, run_at timestamptz)
AS 'MODULE_PATHNAME', 'ntask_transition_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition_on(smallint, bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb) IS
'ntask: ntask_transition on the node of shard (Citus delegates a call made outside a transaction block there); the task must be of shard: ntask_shard(task_id)';

CREATE FUNCTION @extschema@.ntask_transition_many_on(
	shard smallint,
	task_ids bigint[],
	tokens bigint[],
	to_state text,
	error_class text DEFAULT NULL,
	detail jsonb DEFAULT NULL,
	retry_at timestamptz DEFAULT NULL,
	outcome text DEFAULT NULL,
	error_stage text DEFAULT NULL,
	results jsonb[] DEFAULT NULL)
RETURNS TABLE (task_id bigint, result text, state text, run_at timestamptz)
AS 'MODULE_PATHNAME', 'ntask_transition_many_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition_many_on(smallint, bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[]) IS
'ntask: ntask_transition_many on the node of shard (Citus delegates a call made outside a transaction block there); every task must be of shard';

CREATE FUNCTION @extschema@.ntask_transition_and_claim_on(
	shard smallint,
	finish_task_id bigint,
	finish_token bigint,
	to_state text,
	queue text,
	worker text,
	max_tasks integer DEFAULT 1,
	outcome text DEFAULT NULL,
	error_class text DEFAULT NULL,
	detail jsonb DEFAULT NULL,
	retry_at timestamptz DEFAULT NULL,
	error_stage text DEFAULT NULL,
	lease interval DEFAULT NULL,
	result jsonb DEFAULT NULL)
RETURNS TABLE (task_id bigint, task_key text, payload jsonb, attempt integer,
			   token bigint, lease_until timestamptz, prior_outcome text,
			   finish_result text, finish_state text, finish_run_at timestamptz,
			   context jsonb)
AS 'MODULE_PATHNAME', 'ntask_transition_and_claim_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition_and_claim_on(smallint, bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb) IS
'ntask: ntask_transition_and_claim on the node of shard (Citus delegates a call made outside a transaction block there); the finished task must be of shard; the claim takes from shard only';

CREATE FUNCTION @extschema@.ntask_heartbeat_on(
	shard smallint,
	task_id bigint,
	token bigint,
	lease interval DEFAULT NULL,
	progress jsonb DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ntask_heartbeat_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_heartbeat_on(smallint, bigint, bigint, interval, jsonb) IS
'ntask: ntask_heartbeat on the node of shard (Citus delegates a call made outside a transaction block there); the task must be of shard';

CREATE FUNCTION @extschema@.ntask_invoked_on(shard smallint, task_id bigint, token bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_invoked_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_invoked_on(smallint, bigint, bigint) IS
'ntask: ntask_invoked on the node of shard (Citus delegates a call made outside a transaction block there); the task must be of shard';

CREATE FUNCTION @extschema@.ntask_receipt_on(shard smallint, task_id bigint, token bigint, payload jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_receipt_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_receipt_on(smallint, bigint, bigint, jsonb) IS
'ntask: ntask_receipt on the node of shard (Citus delegates a call made outside a transaction block there); the task must be of shard';

CREATE FUNCTION @extschema@.ntask_release_on(shard smallint, task_id bigint, token bigint, delay interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'ntask_release_on'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_release_on(smallint, bigint, bigint, interval) IS
'ntask: ntask_release on the node of shard (Citus delegates a call made outside a transaction block there); the task must be of shard';

/*
 * The token floor of the node that evaluates it (src/delegate.c): the
 * lease statement of a distributed install calls it with the row's shard,
 * so it runs on the node that holds the row.  IMMUTABLE so that Citus
 * sends it there rather than evaluating it on the coordinator; its value
 * changes only when that node is promoted.
 */
CREATE FUNCTION ntask.token_floor(shard smallint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ntask_token_floor'
LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION ntask.token_floor(smallint) IS
'ntask: internal: the lowest token this node''s WAL timeline may issue (the lease statement of a distributed install evaluates it on the row''s node)';
REVOKE ALL ON FUNCTION ntask.token_floor(smallint) FROM PUBLIC;

/*
 * The next token of a task whose latest is prev, on the node that evaluates
 * it (src/claim.c NtaskTokenNext): floor - 1 plus the next value of that
 * node's ntask.token_seq, above prev.  IMMUTABLE for the reason token_floor
 * is; never folded, since it takes the row's token.
 */
CREATE FUNCTION ntask.token_next(prev bigint, floor bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ntask_token_next'
LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION ntask.token_next(bigint, bigint) IS
'ntask: internal: the lease statement''s new token: floor - 1 plus the next value of this node''s ntask.token_seq, above prev';
REVOKE ALL ON FUNCTION ntask.token_next(bigint, bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION
	@extschema@.ntask_shard(text, text),
	@extschema@.ntask_shard(bigint),
	@extschema@.ntask_enqueue_on(smallint, text, text, jsonb, timestamptz, text, integer, text, text[], text),
	@extschema@.ntask_enqueue_many_on(smallint, text, text[], jsonb[], timestamptz, text[], integer, text, text[], text),
	@extschema@.ntask_claim_on(smallint, text, text, integer, interval, interval, boolean),
	@extschema@.ntask_transition_on(smallint, bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb),
	@extschema@.ntask_transition_many_on(smallint, bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[]),
	@extschema@.ntask_transition_and_claim_on(smallint, bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb),
	@extschema@.ntask_heartbeat_on(smallint, bigint, bigint, interval, jsonb),
	@extschema@.ntask_invoked_on(smallint, bigint, bigint),
	@extschema@.ntask_receipt_on(smallint, bigint, bigint, jsonb),
	@extschema@.ntask_release_on(smallint, bigint, bigint, interval)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_shard(text, text),
	@extschema@.ntask_shard(bigint),
	@extschema@.ntask_enqueue_on(smallint, text, text, jsonb, timestamptz, text, integer, text, text[], text),
	@extschema@.ntask_enqueue_many_on(smallint, text, text[], jsonb[], timestamptz, text[], integer, text, text[], text)
TO ntask_producer;
GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_shard(text, text),
	@extschema@.ntask_shard(bigint),
	@extschema@.ntask_claim_on(smallint, text, text, integer, interval, interval, boolean),
	@extschema@.ntask_transition_on(smallint, bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb),
	@extschema@.ntask_transition_many_on(smallint, bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[]),
	@extschema@.ntask_transition_and_claim_on(smallint, bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb),
	@extschema@.ntask_heartbeat_on(smallint, bigint, bigint, interval, jsonb),
	@extschema@.ntask_invoked_on(smallint, bigint, bigint),
	@extschema@.ntask_receipt_on(smallint, bigint, bigint, jsonb),
	@extschema@.ntask_release_on(smallint, bigint, bigint, interval)
TO ntask_worker;

-- Citus (docs/scaling.md "Scaling out with Citus") -------------------

/*
 * Ids drawn on any node (docs/scaling.md "Task ids and tokens"): a task id
 * is shard << 48 | nextval(ntask.task_task_id_seq), and each node draws
 * from its own copy of the sequence, so each node's copy (and the audit
 * ids') is given its own range by its Citus group: group g draws from
 * (g << 40) + 1 to ((g + 1) << 40) - 1, 2^40 ids per node, groups 0 (the
 * coordinator) to 255.  A sequence at its end fails the enqueue with
 * "reached maximum value of sequence" (55000): never a repeated id.
 * ntask.set_id_range sets the range on the node it runs on (idempotent);
 * ntask_distribute runs it on every node, ntask_distribute_nodes on the
 * nodes added later.
 */
CREATE FUNCTION ntask.set_id_range()
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
	g bigint;
	lo bigint;
	hi bigint;
	seq text;
	last bigint;
BEGIN
	SELECT l.groupid INTO g FROM pg_catalog.pg_dist_local_group l;
	IF g IS NULL OR g < 0 OR g > 255 THEN
		RAISE EXCEPTION 'ntask: this node''s Citus group is %, and task ids have room for groups 0 to 255', g
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	lo := (g << 40) + 1;
	hi := ((g + 1) << 40) - 1;
	SET LOCAL citus.enable_ddl_propagation = off;
	FOREACH seq IN ARRAY ARRAY['ntask.task_task_id_seq', 'ntask.audit_audit_id_seq'] LOOP
		EXECUTE format('SELECT last_value FROM %s', seq) INTO last;
		IF last > hi THEN
			RAISE EXCEPTION 'ntask: % is at %, beyond the range of Citus group % (% to %)', seq, last, g, lo, hi
				USING ERRCODE = 'object_not_in_prerequisite_state';
		END IF;
		EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s %s',
					   seq, lo, hi, lo, CASE WHEN last < lo THEN 'RESTART' ELSE '' END);
	END LOOP;
	-- tokens: every value of this node's sequence is g modulo 256, so no
	-- two nodes draw the same token; restarted above its last value
	SELECT s.last_value INTO last FROM ntask.token_seq s;
	EXECUTE format('ALTER SEQUENCE ntask.token_seq INCREMENT 256 MINVALUE %s START %s RESTART %s',
				   g, g + 256, ((last / 256) + 1) * 256 + g);
	RETURN format('group %s: ids %s to %s, tokens %s modulo 256', g, lo, hi, g);
END $fn$;
COMMENT ON FUNCTION ntask.set_id_range() IS
'ntask: internal: give this node''s task and audit id sequences the range of its Citus group (ntask_distribute, ntask_distribute_nodes)';
REVOKE ALL ON FUNCTION ntask.set_id_range() FROM PUBLIC;

/*
 * ntask_distribute_nodes: after citus_add_node on a distributed install,
 * give every node's id sequences the range of its group (ntask.set_id_range
 * on each; nodes that have it already are unchanged).  On the coordinator.
 */
CREATE FUNCTION @extschema@.ntask_distribute_nodes()
RETURNS TABLE (node text, ok boolean, result text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
				   WHERE p.logicalrelid = 'ntask.task'::regclass) THEN
		RAISE EXCEPTION 'ntask: ntask is not distributed in this database'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Run ntask_distribute() first.';
	END IF;
	node := 'coordinator'; ok := true; result := ntask.set_id_range();
	RETURN NEXT;
	RETURN QUERY
	SELECT w.nodename || ':' || w.nodeport, w.success, w.result
	FROM pg_catalog.run_command_on_workers('SELECT ntask.set_id_range()') w
	ORDER BY 1;
END $fn$;
COMMENT ON FUNCTION @extschema@.ntask_distribute_nodes() IS
'ntask: on a distributed install, give each node''s task and audit id sequences the range of its Citus group (run after citus_add_node)';
REVOKE ALL ON FUNCTION @extschema@.ntask_distribute_nodes() FROM PUBLIC;

/*
 * ntask_distribute: turn an installed, empty ntask on a Citus coordinator
 * into the distributed layout (docs/scaling.md "Scaling out with Citus"):
 *
 *	hash by shard, co-located	task, attempt, receipt, checkpoint, signal,
 *								task_dep (keys widened by shard; a signal's
 *								shard is its queue and key's; a dependency
 *								row's its child's and parents')
 *	hash by fence_key			fence, fence_receipt
 *	hash by audit_id			audit
 *	reference tables			queue, breaker, queue_pruned, schedule,
 *								schedule_slot, fence_grant, key_pause
 *	left on the coordinator		saga, saga_step (sagas are not supported on a
 *								distributed install)
 *
 * The triggers that read or write another table from a task row
 * (queue_delete_check, task_count_pruned, saga_step_changed) are dropped:
 * on a distributed table they would run on a worker's shard and query a
 * distributed table from there, which Citus refuses.  The dependency
 * triggers (task_deps_changed, task_dep_settle) stay, created on every
 * shard (citus.enable_unsafe_triggers for this transaction): they work
 * on the shard relations of the shard they fire on (src/deps.c), since
 * a child and its parents share a shard (docs/scaling.md "Dependencies on
 * a distributed install").  The widened keys are
 * set on every node first (run_command_on_workers, idempotent, so a failed
 * call can be repeated), then on the coordinator, where the tables are
 * distributed in this transaction.  ntask_fence becomes a distributed
 * function co-located with ntask.fence by its fence_key: Citus delegates
 * a call to the node that holds the fence's shard.  See docs/scaling.md
 * for what the API does on the layout today.
 */
CREATE FUNCTION @extschema@.ntask_distribute(shard_count integer DEFAULT NULL)
RETURNS TABLE (relation regclass, layout text, shards integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
	keys constant text := $k$
DO $do$ BEGIN
	IF pg_catalog.pg_get_constraintdef((SELECT oid FROM pg_catalog.pg_constraint
	   WHERE conname = 'task_pkey' AND conrelid = 'ntask.task'::pg_catalog.regclass))
	   = 'PRIMARY KEY (task_id)' THEN
		SET LOCAL citus.enable_ddl_propagation = off;
		ALTER TABLE ntask.task DROP CONSTRAINT task_pkey,
			ADD CONSTRAINT task_pkey PRIMARY KEY (task_id, shard),
			DROP CONSTRAINT task_queue_task_key_key,
			ADD CONSTRAINT task_queue_task_key_key UNIQUE (queue, task_key, shard);
		ALTER TABLE ntask.attempt DROP CONSTRAINT attempt_pkey,
			ADD CONSTRAINT attempt_pkey PRIMARY KEY (task_id, token, shard);
		ALTER TABLE ntask.receipt DROP CONSTRAINT receipt_pkey,
			ADD CONSTRAINT receipt_pkey PRIMARY KEY (task_id, token, shard);
		ALTER TABLE ntask.checkpoint DROP CONSTRAINT checkpoint_pkey,
			ADD CONSTRAINT checkpoint_pkey PRIMARY KEY (task_id, step, shard);
		ALTER TABLE ntask.signal DROP CONSTRAINT signal_pkey,
			ADD CONSTRAINT signal_pkey PRIMARY KEY (queue, signal_key, shard);
		ALTER TABLE ntask.task_dep DROP CONSTRAINT task_dep_pkey,
			ADD CONSTRAINT task_dep_pkey PRIMARY KEY (task_id, parent_id, shard);
		DROP TRIGGER IF EXISTS queue_delete_check ON ntask.queue;
		DROP TRIGGER IF EXISTS task_count_pruned ON ntask.task;
		DROP TRIGGER IF EXISTS saga_step_changed ON ntask.task;
	END IF;
END $do$
$k$;
	r record;
	n bigint;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_extension e WHERE e.extname = 'citus') THEN
		RAISE EXCEPTION 'ntask: ntask_distribute needs Citus, and the citus extension is not installed in this database'
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'Put citus first in shared_preload_libraries (citus,ntask), CREATE EXTENSION citus, add the worker nodes, then run this on the coordinator.';
	END IF;
	IF NOT (SELECT pg_catalog.citus_is_coordinator()) THEN
		RAISE EXCEPTION 'ntask: ntask_distribute runs on the Citus coordinator only'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Connect to the coordinator (citus_set_coordinator_host names it).';
	END IF;
	IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
			   WHERE p.logicalrelid = 'ntask.task'::regclass) THEN
		RAISE EXCEPTION 'ntask: ntask is already distributed in this database'
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	IF shard_count IS NOT NULL AND shard_count NOT BETWEEN 1 AND 32767 THEN
		RAISE EXCEPTION 'ntask: shard_count must be between 1 and 32767, not %', shard_count
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- Rows of these tables cannot be moved: their task ids do not carry a
	-- shard (every row would land on the shard of 0).  Queue policy can.
	FOR r IN SELECT x.rel FROM (VALUES ('ntask.task'::regclass), ('ntask.attempt'),
				('ntask.receipt'), ('ntask.checkpoint'), ('ntask.signal'), ('ntask.task_dep'), ('ntask.saga'),
				('ntask.schedule_slot')) x(rel)
	LOOP
		EXECUTE format('SELECT count(*) FROM (SELECT FROM %s LIMIT 1) x', r.rel) INTO n;
		IF n > 0 THEN
			RAISE EXCEPTION 'ntask: ntask_distribute needs an empty ntask, and % holds rows', r.rel
				USING ERRCODE = 'object_not_in_prerequisite_state',
					  DETAIL = 'Task ids of a plain install carry no shard, so existing tasks cannot be placed.',
					  HINT = 'Distribute right after CREATE EXTENSION ntask, before the first enqueue (queue policies may exist).';
		END IF;
	END LOOP;

	-- every worker's copy of the schema gets the same keys (its tables are
	-- the extension's own, created there by CREATE EXTENSION)
	FOR r IN SELECT * FROM pg_catalog.run_command_on_workers(keys) LOOP
		IF NOT r.success THEN
			RAISE EXCEPTION 'ntask: could not change the keys on worker %:%: %', r.nodename, r.nodeport, r.result
				USING ERRCODE = 'connection_failure';
		END IF;
	END LOOP;
	EXECUTE keys;

	PERFORM pg_catalog.create_reference_table(x.rel)
	FROM (VALUES ('ntask.queue'::regclass), ('ntask.breaker'), ('ntask.queue_pruned'),
				 ('ntask.schedule'), ('ntask.schedule_slot'), ('ntask.fence_grant'),
				 ('ntask.shard_map'), ('ntask.key_pause')) x(rel);
	-- the dependency triggers go onto every shard of task and task_dep
	PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
	PERFORM pg_catalog.create_distributed_table('ntask.task', 'shard', shard_count => shard_count);
	PERFORM pg_catalog.create_distributed_table('ntask.attempt', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.receipt', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.checkpoint', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.signal', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.task_dep', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'off', true);
	PERFORM pg_catalog.create_distributed_table('ntask.fence', 'fence_key', shard_count => shard_count);
	PERFORM pg_catalog.create_distributed_table('ntask.fence_receipt', 'fence_key', colocate_with => 'ntask.fence');
	PERFORM pg_catalog.create_distributed_table('ntask.audit', 'audit_id', shard_count => shard_count);
	-- one shard value per shard of ntask.task, the smallest hashing into it
	INSERT INTO ntask.shard_map (shard)
	SELECT pg_catalog.min(v)::smallint
	FROM pg_catalog.generate_series(0, 32767) v
	GROUP BY pg_catalog.get_shard_id_for_distribution_column('ntask.task', v::smallint);
	IF (SELECT pg_catalog.count(*) FROM ntask.shard_map) <>
	   (SELECT pg_catalog.count(*) FROM pg_catalog.pg_dist_shard s
		WHERE s.logicalrelid = 'ntask.task'::regclass) THEN
		RAISE EXCEPTION 'ntask: could not find a shard value for every shard of ntask.task'
			USING ERRCODE = 'internal_error';
	END IF;
	-- ids drawn on any node: each node's sequences get its group's range
	PERFORM ntask.set_id_range();
	FOR r IN SELECT * FROM pg_catalog.run_command_on_workers('SELECT ntask.set_id_range()') LOOP
		IF NOT r.success THEN
			RAISE EXCEPTION 'ntask: could not set the id range on worker %:%: %', r.nodename, r.nodeport, r.result
				USING ERRCODE = 'connection_failure';
		END IF;
	END LOOP;
	-- one hop: each shard-addressed call runs on the node of its shard
	PERFORM pg_catalog.create_distributed_function(x.fn, 'shard', colocate_with => 'ntask.task')
	FROM (VALUES
		('@extschema@.ntask_enqueue_on(smallint, text, text, jsonb, timestamptz, text, integer, text, text[], text)'::regprocedure),
		('@extschema@.ntask_enqueue_many_on(smallint, text, text[], jsonb[], timestamptz, text[], integer, text, text[], text)'),
		('@extschema@.ntask_claim_on(smallint, text, text, integer, interval, interval, boolean)'),
		('@extschema@.ntask_transition_on(smallint, bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb)'),
		('@extschema@.ntask_transition_many_on(smallint, bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[])'),
		('@extschema@.ntask_transition_and_claim_on(smallint, bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb)'),
		('@extschema@.ntask_heartbeat_on(smallint, bigint, bigint, interval, jsonb)'),
		('@extschema@.ntask_invoked_on(smallint, bigint, bigint)'),
		('@extschema@.ntask_receipt_on(smallint, bigint, bigint, jsonb)'),
		('@extschema@.ntask_release_on(smallint, bigint, bigint, interval)')) x(fn);
	-- the rows copied into shards (queue policy, its audit) stay behind in
	-- the coordinator's own tables unless removed
	PERFORM pg_catalog.truncate_local_data_after_distributing_table(x.rel)
	FROM (VALUES ('ntask.queue'::regclass), ('ntask.breaker'), ('ntask.queue_pruned'),
				 ('ntask.schedule'), ('ntask.fence_grant'), ('ntask.fence'),
				 ('ntask.fence_receipt'), ('ntask.audit'), ('ntask.key_pause')) x(rel);

	-- fences: a call runs on the node of its fence (delegated)
	PERFORM pg_catalog.create_distributed_function(
		'@extschema@.ntask_fence(text,bigint,jsonb)'::regprocedure,
		distribution_arg_name => 'fence_key', colocate_with => 'ntask.fence');

	RETURN QUERY
	SELECT p.logicalrelid::regclass,
		   CASE p.partmethod WHEN 'n' THEN 'reference'
				ELSE 'hash by ' || pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) END,
		   (SELECT count(*)::integer FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid)
	FROM pg_catalog.pg_dist_partition p
	WHERE p.logicalrelid::regclass::text LIKE 'ntask.%'
	ORDER BY 2, 1;
END $fn$;
COMMENT ON FUNCTION @extschema@.ntask_distribute(integer) IS
'ntask: on a Citus coordinator, distribute an empty ntask (task, attempt, receipt, checkpoint, signal, task_dep by shard, co-located; policy tables as reference tables); returns the layout';

-- Internal: claim locks, guards, DROP EXTENSION -----------------------

-- A queue's cap lock (max_inflight) and a partition key's turn lock (fair
-- and ordered picks, per-key caps) are locks of a locktag class of
-- ntask's own (src/claim_lock.c), which no SQL advisory function can take
-- (advisory locks could be taken and held by any role that can connect,
-- stalling a capped queue or a key); these two functions are the only way
-- to them, and nobody is granted them: the claim's statements run as the
-- extension's owner.  docs/design.md "Who may block a claim".
CREATE FUNCTION ntask.claim_cap_lock(queue text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_claim_cap_lock'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION ntask.claim_cap_lock(text) IS 'ntask: try the cap lock of a queue with max_inflight, held to the end of the transaction (claims only; not granted to any role)';

CREATE FUNCTION ntask.claim_turn_lock(queue text, partition_key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_claim_turn_lock'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION ntask.claim_turn_lock(text, text) IS 'ntask: try the turn lock of a partition key of a queue, held to the end of the transaction (claims only; not granted to any role)';

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

/*
 * The guard's pin, from the objects a command drops
 * (pg_event_trigger_dropped_objects, on sql_drop of every command: DROP
 * FUNCTION, SCHEMA ... CASCADE, OWNED, EXTENSION, a CASCADE through
 * anything a guard's body depends on): a command that would drop a
 * function some queue uses as its guard fails with 2BP01.  Nothing else is
 * looked at, so a guard that no longer resolves (renamed, moved, dropped
 * with event triggers off) blocks no other DDL; its tasks go to
 * repair_required (guard_error) until the guard is set again or cleared.
 */
CREATE FUNCTION ntask.guard_ddl_check() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	q record;
BEGIN
	-- only a command that drops a function reads ntask.queue: on a Citus
	-- worker node a shard move's cleanup drops the moved shard's old
	-- tables, and a read of the reference table there fails that DROP
	-- ("cannot execute a distributed query from a query on a shard")
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger_dropped_objects() d
				   WHERE d.object_type OPERATOR(pg_catalog.=) 'function') THEN
		RETURN;
	END IF;
	FOR q IN SELECT qq.queue, qq.guard
			 FROM pg_catalog.pg_event_trigger_dropped_objects() d
			 JOIN ntask.queue qq
			   ON qq.guard OPERATOR(pg_catalog.=)
				  (pg_catalog.quote_ident(d.address_names[1]) OPERATOR(pg_catalog.||) '.'
				   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(d.address_names[2])
				   OPERATOR(pg_catalog.||) '(text,jsonb)')
			 WHERE d.object_type OPERATOR(pg_catalog.=) 'function'
			   AND pg_catalog.cardinality(d.address_args) OPERATOR(pg_catalog.=) 2
			   AND pg_catalog.to_regtype(d.address_args[1]) OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
			   AND pg_catalog.to_regtype(d.address_args[2]) OPERATOR(pg_catalog.=) 'pg_catalog.jsonb'::pg_catalog.regtype
			 ORDER BY qq.queue LOOP
		RAISE EXCEPTION 'ntask: function % is the guard of queue "%"', q.guard, q.queue
			USING ERRCODE = 'dependent_objects_still_exist',
				  HINT = pg_catalog.format('Remove it first: SELECT ntask_queue_clear_guard(%L);', q.queue);
	END LOOP;
END $$;
COMMENT ON FUNCTION ntask.guard_ddl_check() IS 'ntask: event trigger: refuses a command that drops a function some queue uses as its guard';

-- DROP EXTENSION ntask unschedules ntask's pg_cron jobs (else they fail
-- every minute) and warns about the unfinished tasks it drops; see
-- src/drop.c for why its trigger reads the statement on ddl_command_start.
CREATE FUNCTION ntask.drop_cleanup() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	t record;
	jobs integer := 0;
BEGIN
	-- the jobs ntask_schedule registered in this database (by id: the
	-- dropping role need not be the one that owns them)
	IF to_regprocedure('cron.unschedule(bigint)') IS NOT NULL
	   AND to_regclass('cron.job') IS NOT NULL THEN
		EXECUTE 'SELECT count(cron.unschedule(j.jobid))::integer FROM cron.job j
				 WHERE j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
				   AND j.jobname OPERATOR(pg_catalog.=) ANY (
					   SELECT s.cron_job FROM ntask.schedule s WHERE s.cron_job IS NOT NULL)'
		INTO jobs;
	END IF;
	IF jobs > 0 THEN
		RAISE NOTICE 'ntask: unscheduled % pg_cron job(s) of ntask schedules', jobs;
	END IF;
	IF EXISTS (SELECT 1 FROM ntask.schedule s WHERE s.cron_job IS NULL) THEN
		RAISE NOTICE 'ntask: schedules registered by hand in pg_cron''s database (jobs named ntask:<name>) must be unscheduled there';
	END IF;

	SELECT count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) ANY ('{ready,leased,retry_wait,awaiting,waiting}')) AS unfinished,
		   count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) 'repair_required') AS repair,
		   max(tt.task_id) AS max_id
	INTO t FROM ntask.task tt;
	IF t.unfinished > 0 OR t.repair > 0 THEN
		RAISE WARNING 'ntask: DROP EXTENSION ntask drops % unfinished task(s) and % awaiting repair', t.unfinished, t.repair
			USING DETAIL = format('The highest task id was %s; a new CREATE EXTENSION ntask numbers tasks from 1 again.', t.max_id),
				  HINT = format('To keep task ids unique after re-creating it: SELECT setval(''ntask.task_task_id_seq'', %s);', t.max_id);
	END IF;
END $$;
COMMENT ON FUNCTION ntask.drop_cleanup() IS
'ntask: internal: before DROP EXTENSION ntask: unschedule its pg_cron jobs, warn about unfinished tasks and the task id sequence';

CREATE FUNCTION ntask.drop_extension_check() RETURNS event_trigger
AS 'MODULE_PATHNAME', 'ntask_drop_extension_check'
LANGUAGE C;
COMMENT ON FUNCTION ntask.drop_extension_check() IS
'ntask: event trigger: before DROP EXTENSION ntask, run ntask.drop_cleanup()';

-- ---------------------------------------------------------------------
-- 5. Triggers
-- ---------------------------------------------------------------------

-- a queue that still has tasks cannot be deleted or renamed
CREATE TRIGGER queue_delete_check BEFORE DELETE OR UPDATE OF queue ON ntask.queue
	FOR EACH ROW EXECUTE FUNCTION ntask.queue_delete_check();

-- metrics: what pruned tasks had counted
CREATE TRIGGER task_count_pruned AFTER DELETE ON ntask.task
	REFERENCING OLD TABLE AS pruned
	FOR EACH STATEMENT EXECUTE FUNCTION ntask.count_pruned();

-- sagas: a step's change of state moves its saga
CREATE TRIGGER saga_step_changed AFTER UPDATE OF state ON ntask.task
	FOR EACH ROW WHEN (NEW.saga_id IS NOT NULL AND NEW.state IS DISTINCT FROM OLD.state)
	EXECUTE FUNCTION ntask.saga_step_changed();

-- guards: no DROP of a function some queue uses as its guard (2BP01)
CREATE EVENT TRIGGER ntask_guard_ddl ON sql_drop
	EXECUTE FUNCTION ntask.guard_ddl_check();

-- DROP EXTENSION ntask: unschedule the pg_cron jobs first
CREATE EVENT TRIGGER ntask_drop_extension ON ddl_command_start
	WHEN TAG IN ('DROP EXTENSION')
	EXECUTE FUNCTION ntask.drop_extension_check();

-- issue 36.1: dependencies (fan-out, fan-in); docs/design.md "Operator
-- controls and workflows".  One row per (child, parent): written by the
-- enqueue that names the parents (depends_on), read when a parent ends
-- (task_deps_changed) and when the child is claimed (context.parents).
CREATE TABLE ntask.task_dep (
	task_id			bigint NOT NULL,
	parent_id		bigint NOT NULL,
	shard			smallint NOT NULL DEFAULT 0,
	PRIMARY KEY (task_id, parent_id)
);
CREATE INDEX task_dep_parent_idx ON ntask.task_dep (parent_id);
COMMENT ON TABLE ntask.task_dep IS 'ntask: the parents of each task enqueued with depends_on (task_id waits for parent_id to succeed); pruned with the child';
SELECT pg_catalog.pg_extension_config_dump('ntask.task_dep', '');

-- A parent that ends releases or decides its children.  The WHEN clause
-- keeps every task without children (has_children false) from running it.
CREATE FUNCTION ntask.task_deps_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'ntask_task_deps_changed'
LANGUAGE C;
COMMENT ON FUNCTION ntask.task_deps_changed() IS
'ntask: internal: trigger on ntask.task: a parent that succeeded counts down its waiting children and makes the last one ready; one that ended in repair_required, canceled or skipped cancels its children whose policy is cancel, and one canceled or skipped sends the others to repair_required; the walk over the descendants is iterative';
CREATE TRIGGER task_deps_changed AFTER UPDATE OF state ON ntask.task
	FOR EACH ROW WHEN (NEW.has_children)
	EXECUTE FUNCTION ntask.task_deps_changed();
REVOKE ALL ON FUNCTION ntask.task_deps_changed() FROM PUBLIC;
GRANT SELECT ON ntask.task_dep TO ntask_admin;

-- At the commit of a transaction that enqueued children with depends_on,
-- their parents are locked and read again and the children settled
-- (src/deps.c): the enqueue itself locks no parent, so a producer's open
-- transaction never blocks the parent's holder.
CREATE FUNCTION ntask.task_dep_settle() RETURNS trigger
AS 'MODULE_PATHNAME', 'ntask_task_dep_settle'
LANGUAGE C;
COMMENT ON FUNCTION ntask.task_dep_settle() IS
'ntask: internal: deferred constraint trigger on ntask.task_dep: at the commit of a transaction that enqueued children with depends_on, lock their parents in task_id order, read their states again and make each child ready, keep it waiting, cancel it or send it to repair';
CREATE CONSTRAINT TRIGGER task_dep_settle AFTER INSERT ON ntask.task_dep
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION ntask.task_dep_settle();
REVOKE ALL ON FUNCTION ntask.task_dep_settle() FROM PUBLIC;

-- end of issue 36.1

-- ---------------------------------------------------------------------
-- 6. Privileges (docs/design.md "Privileges")
-- ---------------------------------------------------------------------
-- Nothing for PUBLIC: every function is granted to the role that needs
-- it.  The internal functions (schema ntask) are granted to nobody but
-- the three explain helpers; ntask_distribute is for superusers only.
-- The one exception is ntask_signal, below.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA ntask FROM PUBLIC;
REVOKE ALL ON FUNCTION
	@extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval, interval, integer, text, text),
	@extschema@.ntask_queue_clear_guard(text),
	@extschema@.ntask_queue_set_roles(text, regrole, regrole),
	@extschema@.ntask_queue_pause(text, text, text),
	@extschema@.ntask_queue_resume(text, text, text),
	@extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer, text, text[], text),
	@extschema@.ntask_enqueue_many(text, text[], jsonb[], timestamptz, text[], integer, text, text[], text),
	@extschema@.ntask_result(text, text),
	@extschema@.ntask_claim(text, text, integer, interval, interval, boolean),
	@extschema@.ntask_heartbeat(bigint, bigint, interval, jsonb),
	@extschema@.ntask_invoked(bigint, bigint),
	@extschema@.ntask_transition(bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb),
	@extschema@.ntask_release(bigint, bigint, interval),
	@extschema@.ntask_transition_many(bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[]),
	@extschema@.ntask_transition_and_claim(bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb),
	@extschema@.ntask_replay(bigint, text, text),
	@extschema@.ntask_cancel(bigint, text, text),
	@extschema@.ntask_repair_assign(bigint, text, text, text),
	@extschema@.ntask_bulk(text, text, text, text, jsonb, boolean, timestamptz, integer),
	@extschema@.ntask_digest(jsonb, integer),
	@extschema@.ntask_receipt(bigint, bigint, jsonb),
	@extschema@.ntask_fence(text, bigint, jsonb),
	@extschema@.ntask_fence_grant(text, regrole),
	@extschema@.ntask_cron_next(text, timestamptz, text),
	@extschema@.ntask_cron_prev(text, timestamptz, text),
	@extschema@.ntask_fire(text, timestamptz, text),
	@extschema@.ntask_schedule(text, text, text, jsonb, text, interval, text, boolean),
	@extschema@.ntask_unschedule(text),
	@extschema@.ntask_saga_start(text, jsonb, text),
	@extschema@.ntask_saga_cancel(bigint, text, text),
	@extschema@.ntask_saga_resume(bigint, text, text),
	@extschema@.ntask_housekeeping(integer, boolean),
	@extschema@.ntask_worker_stats(),
	@extschema@.ntask_waiters(),
	@extschema@.ntask_explain(bigint, boolean),
	@extschema@.ntask_distribute(integer),
	@extschema@.ntask_checkpoint(bigint, bigint, text, jsonb),
	@extschema@.ntask_await(bigint, bigint, text, interval, text),
	@extschema@.ntask_signal(text, text, jsonb),
	@extschema@.ntask_queue_set_signal_role(text, regrole),
	@extschema@.ntask_context(bigint, bigint)
FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer, text, text[], text),
	@extschema@.ntask_enqueue_many(text, text[], jsonb[], timestamptz, text[], integer, text, text[], text),
	@extschema@.ntask_result(text, text),
	@extschema@.ntask_saga_start(text, jsonb, text),
	@extschema@.ntask_digest(jsonb, integer),
	@extschema@.ntask_signal(text, text, jsonb)
TO ntask_producer;

GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_claim(text, text, integer, interval, interval, boolean),
	@extschema@.ntask_heartbeat(bigint, bigint, interval, jsonb),
	@extschema@.ntask_invoked(bigint, bigint),
	@extschema@.ntask_transition(bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb),
	@extschema@.ntask_release(bigint, bigint, interval),
	@extschema@.ntask_transition_many(bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[]),
	@extschema@.ntask_transition_and_claim(bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb),
	@extschema@.ntask_receipt(bigint, bigint, jsonb),
	@extschema@.ntask_fence(text, bigint, jsonb),
	@extschema@.ntask_digest(jsonb, integer),
	@extschema@.ntask_checkpoint(bigint, bigint, text, jsonb),
	@extschema@.ntask_await(bigint, bigint, text, interval, text),
	@extschema@.ntask_signal(text, text, jsonb),
	@extschema@.ntask_context(bigint, bigint)
TO ntask_worker;

-- ntask_signal is PUBLIC's to execute (issue 46.4): a queue's signal_role
-- alone is the right to signal it (a webhook's role of its own, with no
-- ntask role), and the function's own check, before it looks at the key
-- or the queue, refuses everyone else with 42501 (signal.c)
GRANT EXECUTE ON FUNCTION @extschema@.ntask_signal(text, text, jsonb) TO PUBLIC;

GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_worker_stats()
TO ntask_monitor;

GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval, interval, integer, text, text),
	@extschema@.ntask_queue_clear_guard(text),
	@extschema@.ntask_queue_set_roles(text, regrole, regrole),
	@extschema@.ntask_queue_pause(text, text, text),
	@extschema@.ntask_queue_resume(text, text, text),
	@extschema@.ntask_replay(bigint, text, text),
	@extschema@.ntask_cancel(bigint, text, text),
	@extschema@.ntask_repair_assign(bigint, text, text, text),
	@extschema@.ntask_bulk(text, text, text, text, jsonb, boolean, timestamptz, integer),
	@extschema@.ntask_fence_grant(text, regrole),
	@extschema@.ntask_cron_next(text, timestamptz, text),
	@extschema@.ntask_cron_prev(text, timestamptz, text),
	@extschema@.ntask_fire(text, timestamptz, text),
	@extschema@.ntask_schedule(text, text, text, jsonb, text, interval, text, boolean),
	@extschema@.ntask_unschedule(text),
	@extschema@.ntask_saga_cancel(bigint, text, text),
	@extschema@.ntask_saga_resume(bigint, text, text),
	@extschema@.ntask_housekeeping(integer, boolean),
	@extschema@.ntask_worker_stats(),
	@extschema@.ntask_waiters(),
	@extschema@.ntask_explain(bigint, boolean),
	ntask.explain_ts(timestamptz),
	ntask.explain_age(interval),
	ntask.limit_next(text, text, integer, bigint, integer, bigint),
	@extschema@.ntask_queue_set_signal_role(text, regrole)
TO ntask_admin;

-- Admins read every table and view but the Citus shard map; monitors read
-- the statistics views and the breakers; others read nothing.
GRANT USAGE ON SCHEMA ntask TO ntask_admin, ntask_monitor;
GRANT USAGE ON SCHEMA @extschema@ TO ntask_bgworker, ntask_monitor;
GRANT SELECT ON
	ntask.queue, ntask.task, ntask.attempt, ntask.receipt, ntask.fence,
	ntask.fence_receipt, ntask.fence_grant, ntask.audit, ntask.schedule,
	ntask.schedule_slot, ntask.saga, ntask.saga_step, ntask.queue_pruned,
	ntask.breaker, ntask.key_pause, ntask.checkpoint, ntask.signal,
	ntask.queue_stats, ntask.repair_queue, ntask.attempt_all,
	ntask.queue_metrics, ntask.partition_stats, ntask.breaker_stats,
	ntask.saga_status, ntask.worker_stats, ntask.waiters, ntask.task_progress
TO ntask_admin;
GRANT SELECT ON
	ntask.queue_stats, ntask.queue_metrics, ntask.partition_stats,
	ntask.breaker_stats, ntask.worker_stats, ntask.breaker, ntask.key_pause
TO ntask_monitor;
REVOKE ALL ON ntask.shard_map FROM PUBLIC;
REVOKE ALL ON PROCEDURE @extschema@.ntask_bulk_all(text, text, text, text, jsonb, timestamptz, integer, bigint, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE @extschema@.ntask_bulk_all(text, text, text, text, jsonb, timestamptz, integer, bigint, bigint, integer) TO ntask_admin;
