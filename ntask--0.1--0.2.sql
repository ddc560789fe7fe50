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
