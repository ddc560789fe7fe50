/*-------------------------------------------------------------------------
 *
 * housekeeping.c
 *	  ntask_housekeeping: rescue expired leases, enforce deadlines of tasks
 *	  nobody claims, prune finished tasks past their queue's retention.
 *
 * The background worker runs this every ntask.naptime; without the worker
 * (no shared_preload_libraries) an operator can run it from pg_cron.
 * Every statement reaches its rows through a partial index that holds only
 * the rows it looks for, so an idle round is three index probes per queue:
 *
 *	expired leases	task_lease_idx (lease_until) WHERE lease_until IS NOT NULL
 *	deadlines		task_deadline_idx (deadline) WHERE due_at IS NOT NULL
 *					AND state <> 'leased': only past-deadline rows are
 *					visited, so the worker sweeps every tick
 *	retention		task_finished_idx (queue, finished_at)
 *					WHERE state IN (succeeded, canceled, skipped)
 *	history			audit (at), schedule_slot (fired_at), fence_receipt
 *					(applied_at), after ntask.audit_retention and
 *					ntask.history_retention
 *
 * Rows are picked FOR UPDATE SKIP LOCKED, so a round never waits for a
 * worker's transaction and two rounds (worker and pg_cron) never block
 * each other.  Like claim, an expired lease is closed with result
 * lease_expired, its outcome known only if the attempt was never invoked.
 *
 * IDENTIFICATION
 *	  src/housekeeping.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_housekeeping);

static NtaskPlan hk_expired_plan = {
	"housekeeping pick expired leases",
	"SELECT t.task_id FROM ntask.task t "
	"WHERE t.state OPERATOR(pg_catalog.=) 'leased' "
	"  AND t.lease_until OPERATOR(pg_catalog.<) pg_catalog.statement_timestamp() "
	"ORDER BY t.lease_until LIMIT 100000 FOR UPDATE SKIP LOCKED",
	0, {InvalidOid}
};

#define HK_SPENT \
	"(t.attempts OPERATOR(pg_catalog.>=) t.max_attempts " \
	" OR pg_catalog.statement_timestamp() OPERATOR(pg_catalog.>=) t.deadline)"

/* $1 expired task ids, $2 those whose attempt had been invoked */
static NtaskPlan hk_release_plan = {
	"housekeeping release expired leases",
	"UPDATE ntask.task t SET "
	"  state = CASE WHEN " HK_SPENT " THEN 'repair_required' ELSE 'retry_wait' END, "
	"  reason = CASE WHEN NOT " HK_SPENT " THEN t.reason "
	"    WHEN t.attempts OPERATOR(pg_catalog.>=) t.max_attempts THEN 'budget_exhausted' "
	"    ELSE 'deadline_exceeded' END, "
	"  run_at = CASE WHEN " HK_SPENT " THEN t.run_at ELSE pg_catalog.statement_timestamp() END, "
	"  due_at = CASE WHEN " HK_SPENT " THEN NULL ELSE pg_catalog.statement_timestamp() END, "
	"  finished_at = CASE WHEN " HK_SPENT " THEN pg_catalog.statement_timestamp() END, "
	"  lease_owner = NULL, lease_until = NULL, "
	"  unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) "
	"    CASE WHEN t.task_id OPERATOR(pg_catalog.=) ANY ($2) THEN 1 ELSE 0 END, "
	"  last_error_class = CASE WHEN t.task_id OPERATOR(pg_catalog.=) ANY ($2) "
	"    THEN 'unknown' ELSE 'transient' END, "
	"  last_error_stage = 'lease_expired', "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) "
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
	"RETURNING t.state OPERATOR(pg_catalog.=) 'repair_required'",
	2, {INT8ARRAYOID, INT8ARRAYOID}
};

/* unleased unfinished tasks past their deadline (task_deadline_idx) */
static NtaskPlan hk_deadline_plan = {
	"housekeeping deadlines",
	"WITH d AS ( "
	"  SELECT t.task_id FROM ntask.task t "
	"  WHERE t.due_at IS NOT NULL "
	"    AND t.state OPERATOR(pg_catalog.<>) 'leased' "
	"    AND t.deadline OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() "
	"  LIMIT $1 FOR UPDATE SKIP LOCKED "
	") "
	"UPDATE ntask.task t SET state = 'repair_required', "
	"  reason = 'deadline_exceeded', due_at = NULL, "
	"  finished_at = pg_catalog.statement_timestamp(), updated_at = pg_catalog.statement_timestamp() "
	"FROM d WHERE t.task_id OPERATOR(pg_catalog.=) d.task_id",
	1, {INT4OID}
};

/* history: $1 retention, $2 at most this many rows */
static NtaskPlan hk_prune_audit_plan = {
	"housekeeping prune audit",
	"DELETE FROM ntask.audit a WHERE a.audit_id OPERATOR(pg_catalog.=) ANY (ARRAY( "
	"  SELECT x.audit_id FROM ntask.audit x "
	"  WHERE x.at OPERATOR(pg_catalog.<) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $1) "
	"  ORDER BY x.at LIMIT $2))",
	2, {INTERVALOID, INT4OID}
};

/* a slot whose task is still unfinished stays: overlap decisions read it */
static NtaskPlan hk_prune_slots_plan = {
	"housekeeping prune schedule slots",
	"DELETE FROM ntask.schedule_slot s WHERE s.id OPERATOR(pg_catalog.=) ANY (ARRAY( "
	"  SELECT x.id FROM ntask.schedule_slot x "
	"  WHERE x.fired_at OPERATOR(pg_catalog.<) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $1) "
	"    AND NOT EXISTS (SELECT 1 FROM ntask.task t "
	"                    WHERE t.task_id OPERATOR(pg_catalog.=) x.task_id "
	"                      AND t.due_at IS NOT NULL) "
	"  ORDER BY x.fired_at LIMIT $2))",
	2, {INTERVALOID, INT4OID}
};

/* the receipt of a fence's current watermark stays */
static NtaskPlan hk_prune_fence_plan = {
	"housekeeping prune fence receipts",
	"DELETE FROM ntask.fence_receipt r USING ( "
	"  SELECT x.fence_key, x.token FROM ntask.fence_receipt x "
	"  WHERE x.applied_at OPERATOR(pg_catalog.<) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $1) "
	"    AND NOT EXISTS (SELECT 1 FROM ntask.fence f "
	"                    WHERE f.fence_key OPERATOR(pg_catalog.=) x.fence_key "
	"                      AND f.token OPERATOR(pg_catalog.=) x.token) "
	"  ORDER BY x.applied_at LIMIT $2) d "
	"WHERE r.fence_key OPERATOR(pg_catalog.=) d.fence_key "
	"  AND r.token OPERATOR(pg_catalog.=) d.token",
	2, {INTERVALOID, INT4OID}
};

static NtaskPlan hk_queues_plan = {
	"housekeeping queues",
	"SELECT q.queue, q.retention FROM ntask.queue q ORDER BY q.queue",
	0, {InvalidOid}
};

static NtaskPlan hk_prune_pick_plan = {
	"housekeeping pick finished tasks",
	"SELECT t.task_id FROM ntask.task t "
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 "
	"  AND t.state OPERATOR(pg_catalog.=) ANY ('{succeeded,canceled,skipped}') "
	"  AND t.finished_at OPERATOR(pg_catalog.<) "
	"      (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $2) "
	"ORDER BY t.finished_at LIMIT 100000 FOR UPDATE SKIP LOCKED",
	2, {TEXTOID, INTERVALOID}
};

static NtaskPlan hk_prune_attempts_plan = {
	"housekeeping prune attempts",
	"DELETE FROM ntask.attempt a WHERE a.task_id OPERATOR(pg_catalog.=) ANY ($1)",
	1, {INT8ARRAYOID}
};

static NtaskPlan hk_prune_receipts_plan = {
	"housekeeping prune receipts",
	"DELETE FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) ANY ($1)",
	1, {INT8ARRAYOID}
};

static NtaskPlan hk_prune_tasks_plan = {
	"housekeeping prune tasks",
	"DELETE FROM ntask.task t WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1)",
	1, {INT8ARRAYOID}
};

/* hk_prune_history: run one history DELETE with a retention in seconds */
static void
hk_prune_history(NtaskPlan *plan, int retention_s, int max_rows)
{
	Datum		values[2];

	if (retention_s <= 0)
		return;
	values[0] = IntervalPGetDatum(NtaskUsecsInterval((int64) retention_s * USECS_PER_SEC));
	values[1] = Int32GetDatum(max_rows);
	(void) NtaskExecPlan(plan, values, NULL, SPI_OK_DELETE);
}

/*
 * NtaskHousekeep
 *		One round, at most max_rows rows per step (per queue for pruning),
 *		in the caller's SPI connection and transaction.  counts[0] leases
 *		released, counts[1] tasks moved to repair_required (spent budget or
 *		deadline), counts[2] finished tasks deleted.
 */
void
NtaskHousekeep(int max_rows, bool deadlines, int64 *counts)
{
	Datum		values[2];
	int			n;
	int			r;

	counts[0] = counts[1] = counts[2] = 0;

	/* 1. expired leases */
	n = NtaskExecPlanCount(&hk_expired_plan, NULL, NULL, SPI_OK_SELECT, max_rows);
	if (n > 0)
	{
		values[0] = NtaskResultIds(n);
		values[1] = NtaskCloseExpiredAttempts(values[0]);
		n = NtaskExecPlan(&hk_release_plan, values, NULL, SPI_OK_UPDATE_RETURNING);
		counts[0] = n;
		for (r = 0; r < n; r++)
			if (NtaskGetBool(r, 1))
				counts[1]++;
	}

	/* 2. deadlines of tasks nobody claims */
	if (deadlines)
	{
		values[0] = Int32GetDatum(max_rows);
		counts[1] += NtaskExecPlan(&hk_deadline_plan, values, NULL, SPI_OK_UPDATE);
	}

	/* 3. retention, queue by queue */
	{
		SPITupleTable *queues;
		int			nq = NtaskExecPlan(&hk_queues_plan, NULL, NULL, SPI_OK_SELECT);
		int			q;

		queues = SPI_tuptable;
		for (q = 0; q < nq; q++)
		{
			bool		isnull;

			SPI_tuptable = queues;
			values[0] = NtaskGetDatum(q, 1, &isnull);
			values[1] = NtaskGetDatum(q, 2, &isnull);
			n = NtaskExecPlanCount(&hk_prune_pick_plan, values, NULL,
								   SPI_OK_SELECT, max_rows);
			if (n == 0)
				continue;
			values[0] = NtaskResultIds(n);
			(void) NtaskExecPlan(&hk_prune_attempts_plan, values, NULL, SPI_OK_DELETE);
			(void) NtaskExecPlan(&hk_prune_receipts_plan, values, NULL, SPI_OK_DELETE);
			counts[2] += NtaskExecPlan(&hk_prune_tasks_plan, values, NULL, SPI_OK_DELETE);
		}
	}

	/* 4. history: audit, schedule slots, fence receipts (0: keep forever) */
	hk_prune_history(&hk_prune_audit_plan, ntask_audit_retention_s, max_rows);
	hk_prune_history(&hk_prune_slots_plan, ntask_history_retention_s, max_rows);
	hk_prune_history(&hk_prune_fence_plan, ntask_history_retention_s, max_rows);
}

/*
 * ntask_housekeeping(max_rows int DEFAULT 1000, deadlines bool DEFAULT true)
 *		RETURNS TABLE(expired bigint, repaired bigint, pruned bigint)
 *
 * Errors: max_rows NULL 22004 or outside 1..100000 22023.
 */
Datum
ntask_housekeeping(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	int64		counts[3];
	int32		max_rows;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: max_rows and deadlines must not be NULL")));
	max_rows = PG_GETARG_INT32(0);
	if (max_rows < 1 || max_rows > 100000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: max_rows must be between 1 and 100000")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "ntask: return type must be a row type");

	SPI_connect();
	NtaskHousekeep(max_rows, PG_GETARG_BOOL(1), counts);
	SPI_finish();

	values[0] = Int64GetDatum(counts[0]);
	values[1] = Int64GetDatum(counts[1]);
	values[2] = Int64GetDatum(counts[2]);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
