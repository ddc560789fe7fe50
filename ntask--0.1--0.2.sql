/* ntask--0.1--0.2.sql: the background worker (housekeeping, HTTP dispatch) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ntask UPDATE TO '0.2'" to load this file. \quit

/*
 * A fresh CREATE EXTENSION runs ntask--0.1.sql and then this script, so
 * every installation, new or upgraded, has the same objects; the
 * "upgrade" regression test checks that.  docs/worker.md describes the
 * worker.
 */

-- API: private (indexes for housekeeping; each holds only the rows it finds)

-- leased rows only: expired leases are found without visiting the backlog
CREATE INDEX task_lease_idx ON ntask.task (lease_until)
	WHERE state = 'leased';

-- finished rows that may be pruned (repair_required is never pruned)
CREATE INDEX task_finished_idx ON ntask.task (queue, finished_at)
	WHERE state IN ('succeeded', 'canceled', 'skipped');

-- API: public (functions)

CREATE FUNCTION @extschema@.ntask_housekeeping(
	max_rows integer DEFAULT 1000,
	deadlines boolean DEFAULT true)
RETURNS TABLE (expired bigint, repaired bigint, pruned bigint)
AS 'MODULE_PATHNAME', 'ntask_housekeeping'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_housekeeping(integer, boolean) IS
'ntask: one housekeeping round (the background worker runs it every ntask.naptime): release expired leases (retry_wait, or repair_required when the budget or deadline is spent), move unleased tasks past their deadline to repair_required, delete finished tasks older than their queue''s retention; at most max_rows per step';

CREATE FUNCTION @extschema@.ntask_worker_stats(
	OUT pid integer, OUT state text, OUT started_at timestamptz,
	OUT last_tick timestamptz, OUT dispatched bigint, OUT accepted bigint,
	OUT transient bigint, OUT permanent bigint, OUT unknown bigint,
	OUT reconciled bigint, OUT in_flight integer, OUT expired_leases bigint,
	OUT repaired bigint, OUT pruned bigint, OUT last_error text,
	OUT last_error_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'ntask_worker_stats'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_worker_stats() IS
'ntask: the background worker''s counters since server start (shared memory); see ntask.worker_stats';

-- API: public (views)

CREATE VIEW ntask.worker_stats AS
SELECT * FROM @extschema@.ntask_worker_stats();
COMMENT ON VIEW ntask.worker_stats IS 'ntask: the background worker: pid, state, last tick, HTTP requests dispatched / accepted / transient / permanent / unknown / reconciled, in flight, leases released, tasks sent to repair, rows pruned, last error (counters restart with the server; ntask.attempt is the durable record)';

-- Privileges (docs/design.md "Privileges")
--
-- Three NOLOGIN roles, created if missing (roles belong to the cluster, so
-- DROP EXTENSION leaves them): grant them to your application roles.
--   ntask_producer  enqueue
--   ntask_worker    claim, heartbeat, invoked, transition, receipt, fence
--   ntask_admin     everything above, queue policy, replay, cancel, repair
--                   assignment, schedules, housekeeping; reads the tables
-- The API functions run their statements as the extension's owner (the
-- role that owns schema ntask), so these roles need no rights on the
-- tables; nobody else can read a payload.  A queue may further restrict
-- enqueue and claim to a role (ntask_queue_set_roles).

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
	IF NOT pg_catalog.pg_has_role('ntask_admin', 'ntask_producer', 'MEMBER') THEN
		GRANT ntask_producer TO ntask_admin;
	END IF;
	IF NOT pg_catalog.pg_has_role('ntask_admin', 'ntask_worker', 'MEMBER') THEN
		GRANT ntask_worker TO ntask_admin;
	END IF;
END $$;

ALTER TABLE ntask.queue
	ADD COLUMN producer_role regrole,
	ADD COLUMN worker_role regrole;
COMMENT ON COLUMN ntask.queue.producer_role IS 'when set, only roles with its privileges may enqueue into the queue';
COMMENT ON COLUMN ntask.queue.worker_role IS 'when set, only roles with its privileges may claim from the queue';

-- who called ntask, even though its statements run as the owner
CREATE FUNCTION ntask.caller_name() RETURNS name
AS 'MODULE_PATHNAME', 'ntask_caller_name'
LANGUAGE C STABLE;
COMMENT ON FUNCTION ntask.caller_name() IS 'ntask: the role that called the ntask API function running now (default of the db_user columns)';
ALTER TABLE ntask.audit ALTER COLUMN db_user SET DEFAULT ntask.caller_name();
ALTER TABLE ntask.receipt ALTER COLUMN db_user SET DEFAULT ntask.caller_name();
ALTER TABLE ntask.fence_receipt ALTER COLUMN db_user SET DEFAULT ntask.caller_name();

CREATE FUNCTION @extschema@.ntask_queue_set_roles(queue text, producer_role regrole,
												  worker_role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_queue_set_roles'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_set_roles(text, regrole, regrole) IS
'ntask: restrict enqueue (producer_role) and claim (worker_role) of one queue to roles with those roles'' privileges; NULL lifts the restriction; audited';

-- schedules are plpgsql over ntask's tables: they run as the owner too,
-- with the search_path they already pin
ALTER FUNCTION ntask.fire_slot(ntask.schedule, timestamptz, text, text) SECURITY DEFINER;
ALTER FUNCTION @extschema@.ntask_fire(text, timestamptz, text) SECURITY DEFINER;
ALTER FUNCTION @extschema@.ntask_schedule(text, text, text, jsonb, text, interval, text, boolean) SECURITY DEFINER;
ALTER FUNCTION @extschema@.ntask_unschedule(text) SECURITY DEFINER;

-- nothing for PUBLIC: every function is granted to the role that needs it
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA ntask FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
	@extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval),
	@extschema@.ntask_queue_clear_guard(text),
	@extschema@.ntask_queue_set_roles(text, regrole, regrole),
	@extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer),
	@extschema@.ntask_claim(text, text, integer, interval),
	@extschema@.ntask_heartbeat(bigint, bigint, interval),
	@extschema@.ntask_invoked(bigint, bigint),
	@extschema@.ntask_transition(bigint, bigint, text, text, jsonb, timestamptz, text, text),
	@extschema@.ntask_replay(bigint, text, text),
	@extschema@.ntask_cancel(bigint, text, text),
	@extschema@.ntask_repair_assign(bigint, text, text),
	@extschema@.ntask_digest(jsonb, integer),
	@extschema@.ntask_receipt(bigint, bigint, jsonb),
	@extschema@.ntask_fence(text, bigint, jsonb),
	@extschema@.ntask_cron_next(text, timestamptz, text),
	@extschema@.ntask_cron_prev(text, timestamptz, text),
	@extschema@.ntask_fire(text, timestamptz, text),
	@extschema@.ntask_schedule(text, text, text, jsonb, text, interval, text, boolean),
	@extschema@.ntask_unschedule(text),
	@extschema@.ntask_housekeeping(integer, boolean),
	@extschema@.ntask_worker_stats()
FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer),
	@extschema@.ntask_digest(jsonb, integer)
TO ntask_producer;

GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_claim(text, text, integer, interval),
	@extschema@.ntask_heartbeat(bigint, bigint, interval),
	@extschema@.ntask_invoked(bigint, bigint),
	@extschema@.ntask_transition(bigint, bigint, text, text, jsonb, timestamptz, text, text),
	@extschema@.ntask_receipt(bigint, bigint, jsonb),
	@extschema@.ntask_fence(text, bigint, jsonb),
	@extschema@.ntask_digest(jsonb, integer)
TO ntask_worker;

GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval),
	@extschema@.ntask_queue_clear_guard(text),
	@extschema@.ntask_queue_set_roles(text, regrole, regrole),
	@extschema@.ntask_replay(bigint, text, text),
	@extschema@.ntask_cancel(bigint, text, text),
	@extschema@.ntask_repair_assign(bigint, text, text),
	@extschema@.ntask_cron_next(text, timestamptz, text),
	@extschema@.ntask_cron_prev(text, timestamptz, text),
	@extschema@.ntask_fire(text, timestamptz, text),
	@extschema@.ntask_schedule(text, text, text, jsonb, text, interval, text, boolean),
	@extschema@.ntask_unschedule(text),
	@extschema@.ntask_housekeeping(integer, boolean),
	@extschema@.ntask_worker_stats()
TO ntask_admin;

-- admins read everything (tables and views); others read nothing
GRANT USAGE ON SCHEMA ntask TO ntask_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA ntask TO ntask_admin;

-- Schedules: a catch-up window is at most 7 days, so one firing after a
-- long outage enqueues a bounded number of slots (10080 for a
-- once-a-minute schedule); older missed slots are recorded as missed.
DO $$
DECLARE
	n integer;
BEGIN
	UPDATE ntask.schedule SET catchup = interval '7 days', updated_at = now()
	WHERE catchup > interval '7 days';
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n > 0 THEN
		RAISE NOTICE 'ntask: % schedule(s) had a catch-up window over 7 days; set to 7 days', n;
	END IF;
END $$;
ALTER TABLE ntask.schedule ADD CONSTRAINT schedule_catchup_at_most_7_days
	CHECK (catchup <= interval '7 days');
