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
 *	expired leases	task_lease_idx (queue, priority DESC, lease_until, task_id)
 *					WHERE lease_until IS NOT NULL: lease_until is an
 *					index condition on a later column, so the pick reads
 *					the leased rows (what is in flight), not the backlog
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
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/housekeeping.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"
#include "ntask_task.h"
#include "ntask_worker.h"
#include "shard.h"
#include "spi_util.h"
#include "worker_settings.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(ntask_housekeeping);

/*
 * The most rows one step of a round takes (per queue for pruning), the
 * upper bound of ntask_housekeeping's max_rows.  A plain install's locking
 * picks carry it as a constant LIMIT (the generic plan is costed for it)
 * and stop after max_rows rows (NtaskExecPlanCount).
 */
#define HK_MAX_ROWS 100000

/*
 * A statement of a plain install and its twin for one shard of a
 * distributed install (docs/scaling.md "Background worker, housekeeping
 * and dispatch") are written once: the shard's adds a predicate on
 * t.shard (a router query on the node of that shard: Citus refuses FOR
 * UPDATE over every shard), takes the statement timestamp as a parameter
 * where an UPDATE has it in a CASE or next to a column (NtaskStatementTs())
 * and its row count as the LIMIT (the shard's node runs the statement
 * whole, so the executor's stop after max_rows rows does not reach it).
 * HK_NOW is the plain install's statement timestamp.
 */
#define HK_NOW "pg_catalog.statement_timestamp()"

/* leased tasks whose lease expired (task_lease_idx), and their tokens */
#define HK_EXPIRED_SQL(shard_and, now, limit) \
	"SELECT t.task_id, t.token FROM ntask.task t " \
	"WHERE " shard_and "t.state OPERATOR(pg_catalog.=) 'leased' " \
	"  AND t.lease_until OPERATOR(pg_catalog.<) " now " " \
	"ORDER BY t.lease_until LIMIT " limit " FOR UPDATE SKIP LOCKED"

/* hk_expired_pick's parameters (the shard's only) and columns */
typedef enum HkExpiredArg
{
	HK_EXPIRED_ARG_SHARD,		/* $1 */
	HK_EXPIRED_ARG_TS,			/* $2, the statement timestamp */
	HK_EXPIRED_ARG_ROWS,		/* $3 */
	HK_EXPIRED_NARGS
} HkExpiredArg;

typedef enum HkExpiredCol
{
	HK_EXPIRED_TASK_ID = 1,
	HK_EXPIRED_TOKEN,
	HK_EXPIRED_NCOLS = HK_EXPIRED_TOKEN
} HkExpiredCol;

static NtaskPair hk_expired_pick = NTASK_PAIR("housekeeping pick expired leases",
											  NTASK_PLAIN(HK_EXPIRED_NCOLS,
														  HK_EXPIRED_SQL("", HK_NOW, CppAsString2(HK_MAX_ROWS)),
														  0, SPI_OK_SELECT),
											  NTASK_ROUTED(HK_EXPIRED_NCOLS,
														   HK_EXPIRED_SQL("t.shard OPERATOR(pg_catalog.=) $1   AND ", "$2", "$3"),
														   HK_EXPIRED_NARGS, SPI_OK_SELECT, NULL, NULL),
											  INT2OID, TIMESTAMPTZOID, INT4OID);

/* the attempt or the deadline is spent: to repair_required */
#define HK_SPENT(now) \
	"(t.attempts OPERATOR(pg_catalog.>=) t.max_attempts " \
	" OR " now " OPERATOR(pg_catalog.>=) t.deadline)"

#define HK_RELEASE_SQL(now, shard_and) \
	"UPDATE ntask.task t SET " \
	"  state = CASE WHEN " HK_SPENT(now) " THEN 'repair_required' ELSE 'retry_wait' END, " \
	"  reason = CASE WHEN NOT " HK_SPENT(now) " THEN t.reason " \
	"    WHEN t.attempts OPERATOR(pg_catalog.>=) t.max_attempts THEN 'budget_exhausted' " \
	"    ELSE 'deadline_exceeded' END, " \
	"  run_at = CASE WHEN " HK_SPENT(now) " THEN t.run_at ELSE " now " END, " \
	"  due_at = CASE WHEN " HK_SPENT(now) " THEN NULL ELSE " now " END, " \
	"  finished_at = CASE WHEN " HK_SPENT(now) " THEN " now " END, " \
	"  lease_owner = NULL, lease_until = NULL, " \
	"  unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) " \
	"    CASE WHEN t.task_id OPERATOR(pg_catalog.=) ANY ($2) THEN 1 ELSE 0 END, " \
	"  last_error_class = CASE WHEN t.task_id OPERATOR(pg_catalog.=) ANY ($2) " \
	"    THEN 'unknown' ELSE 'transient' END, " \
	"  last_error_stage = 'lease_expired', " \
	"  updated_at = " now " " \
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " \
	shard_and \
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' " \
	"RETURNING t.state OPERATOR(pg_catalog.=) 'repair_required'"

/*
 * The shard's release is within shard $4, $3 the statement timestamp; only
 * the leases still at the token the sweep picked ($5, in $1's order): a
 * claim that took a task over between the sweep's pick and this statement
 * has its lease kept (the sweep holds the shard's metadata lock, so a
 * move cannot make its row locks moot, and this is the second line).
 */
typedef enum HkReleaseArg
{
	HK_RELEASE_ARG_IDS,			/* $1, the expired task ids */
	HK_RELEASE_ARG_INVOKED,		/* $2, those whose attempt was invoked */
	HK_RELEASE_ARG_TS,			/* $3, the shard's only */
	HK_RELEASE_ARG_SHARD,		/* $4, the shard's only */
	HK_RELEASE_ARG_TOKENS,		/* $5, the shard's only */
	HK_RELEASE_NARGS
} HkReleaseArg;

/* the column of hk_release: the task's end */
typedef enum HkReleaseCol
{
	HK_RELEASE_REPAIRED = 1,	/* it went to repair_required */
	HK_RELEASE_NCOLS = HK_RELEASE_REPAIRED
} HkReleaseCol;

static NtaskPair hk_release = NTASK_PAIR("housekeeping release expired leases",
										 NTASK_PLAIN(HK_RELEASE_NCOLS, HK_RELEASE_SQL(HK_NOW, ""),
													 HK_RELEASE_ARG_TS, SPI_OK_UPDATE_RETURNING),
										 NTASK_ROUTED(HK_RELEASE_NCOLS,
													  HK_RELEASE_SQL("$3", "  AND t.shard OPERATOR(pg_catalog.=) $4 "
																	 "  AND t.token OPERATOR(pg_catalog.=) ($5)[pg_catalog.array_position($1, t.task_id)] "),
													  HK_RELEASE_NARGS, SPI_OK_UPDATE_RETURNING, NULL, NULL),
										 INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID, INT2OID, INT8ARRAYOID);

/*
 * unleased unfinished tasks past their deadline (task_deadline_idx), at
 * most $1: a plain install's one statement (hk_deadlines)
 */
typedef enum HkDeadlineArg
{
	HK_DEADLINE_ARG_ROWS,		/* $1 */
	HK_DEADLINE_NARGS
} HkDeadlineArg;

static NtaskPlan hk_deadline_plan = {
	"housekeeping deadlines",
	.ncols = 0,
	"WITH d AS ( "
	"  SELECT t.task_id FROM ntask.task t "
	"  WHERE t.due_at IS NOT NULL "
	"    AND t.state OPERATOR(pg_catalog.<>) 'leased' "
	"    AND t.state OPERATOR(pg_catalog.<>) 'awaiting' "
	"    AND t.deadline OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() "
	"  LIMIT $1 FOR UPDATE SKIP LOCKED "
	") "
	"UPDATE ntask.task t SET state = 'repair_required', "
	"  reason = 'deadline_exceeded', due_at = NULL, "
	"  finished_at = pg_catalog.statement_timestamp(), updated_at = pg_catalog.statement_timestamp() "
	"FROM d WHERE t.task_id OPERATOR(pg_catalog.=) d.task_id",
	HK_DEADLINE_NARGS, {INT4OID}
};

/*
 * The same, the pick and the update apart: one shard's (Citus plans a CTE
 * apart), and a plain install's when its one statement failed and the
 * tasks are taken one at a time (hk_deadlines).
 */
#define HK_DEADLINE_PICK_SQL(shard_and, now, limit) \
	"SELECT t.task_id FROM ntask.task t " \
	"WHERE " shard_and "t.due_at IS NOT NULL " \
	"  AND t.state OPERATOR(pg_catalog.<>) 'leased' " \
	"  AND t.state OPERATOR(pg_catalog.<>) 'awaiting' " \
	"  AND t.deadline OPERATOR(pg_catalog.<=) " now " " \
	"LIMIT " limit " FOR UPDATE SKIP LOCKED"

#define HK_DEADLINE_SET_SQL(now, shard_and) \
	"UPDATE ntask.task t SET state = 'repair_required', " \
	"  reason = 'deadline_exceeded', due_at = NULL, " \
	"  finished_at = " now ", updated_at = " now " " \
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " shard_and " " \
	/* the pick's test again: a task leased since is not touched */ \
	"  AND t.due_at IS NOT NULL " \
	"  AND t.state OPERATOR(pg_catalog.<>) 'leased' " \
	"  AND t.state OPERATOR(pg_catalog.<>) 'awaiting' " \
	"  AND t.deadline OPERATOR(pg_catalog.<=) " now

typedef enum HkDeadlinePickArg
{
	HK_DEADLINE_PICK_ARG_ROWS,	/* $1 */
	HK_DEADLINE_PICK_ARG_SHARD, /* $2, the shard's only */
	HK_DEADLINE_PICK_ARG_TS,	/* $3, the shard's only */
	HK_DEADLINE_PICK_NARGS
} HkDeadlinePickArg;

typedef enum HkDeadlinePickCol
{
	HK_DEADLINE_PICK_TASK_ID = 1,
	HK_DEADLINE_PICK_NCOLS = HK_DEADLINE_PICK_TASK_ID
} HkDeadlinePickCol;

static NtaskPair hk_deadline_pick = NTASK_PAIR("housekeeping pick deadlines",
											   NTASK_PLAIN(HK_DEADLINE_PICK_NCOLS,
														   HK_DEADLINE_PICK_SQL("", HK_NOW, "$1"),
														   HK_DEADLINE_PICK_ARG_SHARD, SPI_OK_SELECT),
											   NTASK_ROUTED(HK_DEADLINE_PICK_NCOLS,
															HK_DEADLINE_PICK_SQL("t.shard OPERATOR(pg_catalog.=) $2   AND ", "$3", "$1"),
															HK_DEADLINE_PICK_NARGS, SPI_OK_SELECT, NULL, NULL),
											   INT4OID, INT2OID, TIMESTAMPTZOID);

typedef enum HkDeadlineSetArg
{
	HK_DEADLINE_SET_ARG_IDS,	/* $1 */
	HK_DEADLINE_SET_ARG_TS,		/* $2, the shard's only */
	HK_DEADLINE_SET_ARG_SHARD,	/* $3, the shard's only */
	HK_DEADLINE_SET_NARGS
} HkDeadlineSetArg;

static NtaskPair hk_deadline_set = NTASK_PAIR("housekeeping deadlines of tasks",
											  NTASK_PLAIN(0, HK_DEADLINE_SET_SQL(HK_NOW, ""),
														  HK_DEADLINE_SET_ARG_TS, SPI_OK_UPDATE),
											  NTASK_ROUTED(0,
														   HK_DEADLINE_SET_SQL("$2", "  AND t.shard OPERATOR(pg_catalog.=) $3"),
														   HK_DEADLINE_SET_NARGS, SPI_OK_UPDATE, NULL, NULL),
											  INT8ARRAYOID, TIMESTAMPTZOID, INT2OID);

/*
 * History: $1 retention, $2 at most this many rows.  On a distributed
 * install the rows are picked first, by a before step that fills $3 with
 * their ids (hk_audit_pick, hk_slots_pick) and deletes nothing when there
 * are none.
 */
typedef enum HkHistoryArg
{
	HK_HISTORY_ARG_RETENTION,	/* $1 */
	HK_HISTORY_ARG_ROWS,		/* $2 */
	HK_HISTORY_ARG_IDS,			/* $3, the distributed install's only */
	HK_HISTORY_NARGS
} HkHistoryArg;

static bool hk_audit_pick(Datum *values, char *nulls);
static bool hk_slots_pick(Datum *values, char *nulls);

static NtaskPair hk_prune_audit = NTASK_PAIR("housekeeping prune audit",
											 NTASK_PLAIN(0,
														 "DELETE FROM ntask.audit a WHERE a.audit_id OPERATOR(pg_catalog.=) ANY (ARRAY( "
														 "  SELECT x.audit_id FROM ntask.audit x "
														 "  WHERE x.at OPERATOR(pg_catalog.<) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $1) "
														 "  ORDER BY x.at LIMIT $2))",
														 HK_HISTORY_ARG_IDS, SPI_OK_DELETE),
											 NTASK_ROUTED(0,
														  "DELETE FROM ntask.audit a WHERE a.audit_id OPERATOR(pg_catalog.=) ANY ($3)",
														  HK_HISTORY_NARGS, SPI_OK_DELETE, hk_audit_pick, NULL),
											 INTERVALOID, INT4OID, INT8ARRAYOID);

/* a slot whose task is still unfinished stays: overlap decisions read it */
static NtaskPair hk_prune_slots = NTASK_PAIR("housekeeping prune schedule slots",
											 NTASK_PLAIN(0,
														 "DELETE FROM ntask.schedule_slot s WHERE s.id OPERATOR(pg_catalog.=) ANY (ARRAY( "
														 "  SELECT x.id FROM ntask.schedule_slot x "
														 "  WHERE x.fired_at OPERATOR(pg_catalog.<) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $1) "
														 "    AND NOT EXISTS (SELECT 1 FROM ntask.task t "
														 "                    WHERE t.task_id OPERATOR(pg_catalog.=) x.task_id "
														 "                      AND t.due_at IS NOT NULL) "
														 "  ORDER BY x.fired_at LIMIT $2))",
														 HK_HISTORY_ARG_IDS, SPI_OK_DELETE),
											 NTASK_ROUTED(0,
														  "DELETE FROM ntask.schedule_slot s WHERE s.id OPERATOR(pg_catalog.=) ANY ($3)",
														  HK_HISTORY_NARGS, SPI_OK_DELETE, hk_slots_pick, NULL),
											 INTERVALOID, INT4OID, INT8ARRAYOID);

/*
 * key pauses that have ended: the claim ignores them already
 * (their until is past); deleted so the table holds only live pauses.  At
 * most $1 per round.
 */
typedef enum HkKeyPauseArg
{
	HK_KEY_PAUSE_ARG_ROWS,		/* $1 */
	HK_KEY_PAUSE_NARGS
} HkKeyPauseArg;

static NtaskPlan hk_key_pause_plan = {
	"housekeeping expired key pauses",
	.ncols = 0,
	"DELETE FROM ntask.key_pause k USING ( "
	"  SELECT x.queue, x.partition_key FROM ntask.key_pause x "
	"  WHERE x.until OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() "
	"  LIMIT $1) d "
	"WHERE k.queue OPERATOR(pg_catalog.=) d.queue "
	"  AND k.partition_key OPERATOR(pg_catalog.=) d.partition_key "
	"  AND k.until OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()",
	HK_KEY_PAUSE_NARGS, {INT4OID}
};

static void hk_prune_key_pauses(int max_rows);

/*
 * the receipt of a fence's current watermark stays (a plain install's
 * only: fences do not run on a distributed one, docs/scaling.md)
 */
static NtaskPair hk_prune_fence = NTASK_PAIR("housekeeping prune fence receipts",
											 NTASK_PLAIN(0,
														 "DELETE FROM ntask.fence_receipt r USING ( "
														 "  SELECT x.fence_key, x.token FROM ntask.fence_receipt x "
														 "  WHERE x.applied_at OPERATOR(pg_catalog.<) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $1) "
														 "    AND NOT EXISTS (SELECT 1 FROM ntask.fence f "
														 "                    WHERE f.fence_key OPERATOR(pg_catalog.=) x.fence_key "
														 "                      AND f.token OPERATOR(pg_catalog.=) x.token) "
														 "  ORDER BY x.applied_at LIMIT $2) d "
														 "WHERE r.fence_key OPERATOR(pg_catalog.=) d.fence_key "
														 "  AND r.token OPERATOR(pg_catalog.=) d.token",
														 HK_HISTORY_ARG_IDS, SPI_OK_DELETE),
											 NTASK_ROUTED_LIKE_PLAIN,
											 INTERVALOID, INT4OID, INT8ARRAYOID);

/* the columns of hk_queues_plan */
typedef enum HkQueuesCol
{
	HK_QUEUES_QUEUE = 1,
	HK_QUEUES_RETENTION,
	HK_QUEUES_NCOLS = HK_QUEUES_RETENTION
} HkQueuesCol;

static NtaskPlan hk_queues_plan = {
	"housekeeping queues",
	.ncols = HK_QUEUES_NCOLS,
	"SELECT q.queue, q.retention FROM ntask.queue q ORDER BY q.queue",
	0, {InvalidOid}
};

/* finished tasks of queue $1 past its retention (task_finished_idx) */
#define HK_PRUNE_PICK_SQL(shard_and, before, limit) \
	"SELECT t.task_id FROM ntask.task t " \
	"WHERE " shard_and "t.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND t.state OPERATOR(pg_catalog.=) ANY ('{succeeded,canceled,skipped}') " \
	"  AND t.finished_at OPERATOR(pg_catalog.<) " before " " \
	"ORDER BY t.finished_at LIMIT " limit " FOR UPDATE SKIP LOCKED"

/*
 * The shard's pick: $3 shard, $4 finished before (statement timestamp -
 * retention), $5 rows; the plain one computes the first from $2
 */
typedef enum HkPrunePickArg
{
	HK_PRUNE_PICK_ARG_QUEUE,	/* $1 */
	HK_PRUNE_PICK_ARG_RETENTION,	/* $2, the plain install's only */
	HK_PRUNE_PICK_ARG_SHARD,	/* $3, the shard's only */
	HK_PRUNE_PICK_ARG_BEFORE,	/* $4, the shard's only */
	HK_PRUNE_PICK_ARG_ROWS,		/* $5, the shard's only */
	HK_PRUNE_PICK_NARGS
} HkPrunePickArg;

typedef enum HkPrunePickCol
{
	HK_PRUNE_PICK_TASK_ID = 1,
	HK_PRUNE_PICK_NCOLS = HK_PRUNE_PICK_TASK_ID
} HkPrunePickCol;

static NtaskPair hk_prune_pick = NTASK_PAIR("housekeeping pick finished tasks",
											NTASK_PLAIN(HK_PRUNE_PICK_NCOLS,
														HK_PRUNE_PICK_SQL("",
																		  "      (" HK_NOW " OPERATOR(pg_catalog.-) $2)",
																		  CppAsString2(HK_MAX_ROWS)),
														HK_PRUNE_PICK_ARG_SHARD, SPI_OK_SELECT),
											NTASK_ROUTED(HK_PRUNE_PICK_NCOLS,
														 HK_PRUNE_PICK_SQL("t.shard OPERATOR(pg_catalog.=) $3   AND ", "$4", "$5"),
														 HK_PRUNE_PICK_NARGS, SPI_OK_SELECT, NULL, NULL),
											TEXTOID, INTERVALOID, INT2OID, TIMESTAMPTZOID, INT4OID);

/* the rows of tasks $1 in table (alias a), and of shard $2 */
typedef enum HkPruneArg
{
	HK_PRUNE_ARG_IDS,			/* $1 */
	HK_PRUNE_ARG_SHARD,			/* $2, the shard's only */
	HK_PRUNE_NARGS
} HkPruneArg;

#define HK_PRUNE_SQL(table, a) \
	"DELETE FROM ntask." table " " a " WHERE " a ".task_id OPERATOR(pg_catalog.=) ANY ($1)"
#define HK_PRUNE_PAIR(name, table, a) \
	NTASK_PAIR(name, \
			   NTASK_PLAIN(0, HK_PRUNE_SQL(table, a), HK_PRUNE_ARG_SHARD, SPI_OK_DELETE), \
			   NTASK_ROUTED(0, HK_PRUNE_SQL(table, a) "   AND " a ".shard OPERATOR(pg_catalog.=) $2", \
							HK_PRUNE_NARGS, SPI_OK_DELETE, NULL, NULL), \
			   INT8ARRAYOID, INT2OID)

static NtaskPair hk_prune_attempts = HK_PRUNE_PAIR("housekeeping prune attempts",
												   "attempt", "a");
static NtaskPair hk_prune_receipts = HK_PRUNE_PAIR("housekeeping prune receipts",
												   "receipt", "r");

/* a pruned child's dependency rows, in its shard (a distributed install) */
static NtaskPlan hk_prune_deps_shard_plan = {
	"housekeeping prune dependency rows (one shard)",
	.ncols = 0,
	HK_PRUNE_SQL("task_dep", "p") "   AND p.shard OPERATOR(pg_catalog.=) $2",
	HK_PRUNE_NARGS, {INT8ARRAYOID, INT2OID}
};

/* a task's checkpoints and the signals it awaited go with it */
static NtaskPair hk_prune_checkpoints = HK_PRUNE_PAIR("housekeeping prune checkpoints",
													  "checkpoint", "c");
static NtaskPair hk_prune_signals = HK_PRUNE_PAIR("housekeeping prune signals",
												  "signal", "s");

/*
 * Signals of queue $1 that no task awaited, sent before $2 (the statement
 * timestamp minus the queue's retention), at most $3 of them
 * (signal_unawaited_idx: a row without a task was written by the signal,
 * so created_at is when it was sent; a round costs what it prunes), of
 * the key's shard $4 (0 on a plain install).
 */
typedef enum HkUnawaitedArg
{
	HK_UNAWAITED_ARG_QUEUE,		/* $1 */
	HK_UNAWAITED_ARG_BEFORE,	/* $2 */
	HK_UNAWAITED_ARG_ROWS,		/* $3 */
	HK_UNAWAITED_ARG_SHARD,		/* $4 */
	HK_UNAWAITED_NARGS
} HkUnawaitedArg;

static NtaskPlan hk_prune_unawaited_plan = {
	"housekeeping prune unawaited signals",
	.ncols = 0,
	"DELETE FROM ntask.signal s "
	"WHERE s.queue OPERATOR(pg_catalog.=) $1 AND s.task_id IS NULL "
	"  AND s.shard OPERATOR(pg_catalog.=) $4 "
	"  AND s.signal_key OPERATOR(pg_catalog.=) ANY (ARRAY( "
	"    SELECT x.signal_key FROM ntask.signal x "
	"    WHERE x.queue OPERATOR(pg_catalog.=) $1 AND x.task_id IS NULL "
	"      AND x.shard OPERATOR(pg_catalog.=) $4 "
	"      AND x.created_at OPERATOR(pg_catalog.<) $2 "
	"    ORDER BY x.created_at LIMIT $3))",
	HK_UNAWAITED_NARGS, {TEXTOID, TIMESTAMPTZOID, INT4OID, INT2OID}
};

/*
 * the tasks (HkPruneArg), and on a plain install the dependency rows of
 * those that had parents (an empty array for a queue without
 * dependencies; a distributed install has none): a row per task deleted
 */
typedef enum HkPruneTasksCol
{
	HK_PRUNE_TASKS_TASK_ID = 1,
	HK_PRUNE_TASKS_NCOLS = HK_PRUNE_TASKS_TASK_ID
} HkPruneTasksCol;

static NtaskPair hk_prune_tasks = NTASK_PAIR("housekeeping prune tasks",
											 NTASK_PLAIN(HK_PRUNE_TASKS_NCOLS,
														 "WITH d AS (" HK_PRUNE_SQL("task", "t") " RETURNING t.task_id, t.has_parents), "
														 "x AS (DELETE FROM ntask.task_dep p WHERE p.task_id OPERATOR(pg_catalog.=) ANY "
														 "  (ARRAY(SELECT d.task_id FROM d WHERE d.has_parents))) "
														 "SELECT d.task_id FROM d",
														 HK_PRUNE_ARG_SHARD, SPI_OK_SELECT),
											 NTASK_ROUTED(HK_PRUNE_TASKS_NCOLS,
														  HK_PRUNE_SQL("task", "t") "   AND t.shard OPERATOR(pg_catalog.=) $2 "
														  "RETURNING t.task_id",
														  HK_PRUNE_NARGS, SPI_OK_DELETE_RETURNING, NULL, NULL),
											 INT8ARRAYOID, INT2OID);

/*
 * The audit of a distributed install (hash by audit_id): the oldest rows
 * past the retention read over every shard (read-only: no two-phase
 * commit), then deleted by id only when there are any, so that an idle
 * tick writes on no node (hk_prune_audit's before step).
 */
typedef enum HkHistoryPickArg
{
	HK_HISTORY_PICK_ARG_BEFORE, /* $1 */
	HK_HISTORY_PICK_ARG_ROWS,	/* $2 */
	HK_HISTORY_PICK_NARGS
} HkHistoryPickArg;

typedef enum HkAuditPickCol
{
	HK_AUDIT_PICK_ID = 1,
	HK_AUDIT_PICK_NCOLS = HK_AUDIT_PICK_ID
} HkAuditPickCol;

static NtaskPlan hk_audit_pick_dist_plan = {
	"housekeeping pick audit (distributed)",
	.ncols = HK_AUDIT_PICK_NCOLS,
	"SELECT x.audit_id FROM ntask.audit x "
	"WHERE x.at OPERATOR(pg_catalog.<) $1 ORDER BY x.at LIMIT $2",
	HK_HISTORY_PICK_NARGS, {TIMESTAMPTZOID, INT4OID}
};


/*
 * The schedule slots of a distributed install (a reference table): the
 * oldest past the retention read on the coordinator, the unfinished tasks
 * among theirs looked up by id, the others' slots deleted (a write of the
 * reference table on every node: only when there is something to prune;
 * hk_prune_slots' before step).  Citus refuses the plain statement's NOT EXISTS ("correlated subqueries
 * are not supported when the FROM clause contains a reference table"),
 * and plans a LEFT JOIN by pulling every unfinished task to the
 * coordinator.
 */
typedef enum HkSlotsPickCol
{
	HK_SLOTS_PICK_ID = 1,
	HK_SLOTS_PICK_TASK_ID,		/* NULL: none */
	HK_SLOTS_PICK_NCOLS = HK_SLOTS_PICK_TASK_ID
} HkSlotsPickCol;

static NtaskPlan hk_slots_pick_dist_plan = {
	"housekeeping pick schedule slots (distributed)",
	.ncols = HK_SLOTS_PICK_NCOLS,
	"SELECT x.id, x.task_id FROM ntask.schedule_slot x "
	"WHERE x.fired_at OPERATOR(pg_catalog.<) $1 ORDER BY x.fired_at LIMIT $2",
	HK_HISTORY_PICK_NARGS, {TIMESTAMPTZOID, INT4OID}
};

typedef enum HkSlotsBusyArg
{
	HK_SLOTS_BUSY_ARG_TASK_IDS, /* $1 */
	HK_SLOTS_BUSY_NARGS
} HkSlotsBusyArg;

typedef enum HkSlotsBusyCol
{
	HK_SLOTS_BUSY_TASK_ID = 1,
	HK_SLOTS_BUSY_NCOLS = HK_SLOTS_BUSY_TASK_ID
} HkSlotsBusyCol;

static NtaskPlan hk_slots_busy_dist_plan = {
	"housekeeping unfinished tasks of schedule slots (distributed)",
	.ncols = HK_SLOTS_BUSY_NCOLS,
	"SELECT t.task_id FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) AND t.due_at IS NOT NULL",
	HK_SLOTS_BUSY_NARGS, {INT8ARRAYOID}
};


/* where a round runs: a plain install, or one shard of a distributed one */
typedef struct HkScope
{
	bool		sharded;
	int16		shard;			/* if sharded */
	Datum		ts;				/* the statement timestamp */
	int			max_rows;		/* per step (per queue for pruning) */
} HkScope;

/*
 * One task's trouble never stops the round (docs/guarantees.md): on a
 * plain install each step runs in a subtransaction; when a step that
 * writes many tasks at once fails, its tasks are written again one at a
 * time, each in a subtransaction of its own, and a task that still fails
 * is left as it was with a WARNING that names it, and tried again next
 * round.  Retention and the history go queue by queue and table by table
 * the same way.  A distributed install's rounds are per shard already,
 * each in a transaction of its own in the background worker.
 */
typedef struct HkWork
{
	const HkScope *s;
	Datum		ids;			/* int8[] of the tasks to write */
	Datum		tokens;			/* int8[], their tokens as picked (the
								 * release; NULL elsewhere) */
	int64		done;			/* rows written */
	int64		repaired;		/* of which to repair_required */
	Datum		queue;			/* retention: the queue */
	Datum		retention;		/* and its retention */
	int64	   *counts;			/* retention: adds to counts[2] */
} HkWork;

/* hk_warn: a step or a task that failed and was left for the next round */
static void
hk_warn(const char *what, ErrorData *e)
{
	ereport(WARNING,
			(errcode(e->sqlerrcode),
			 errmsg("ntask: housekeeping: %s failed: %s", what, e->message),
			 errhint("The rest of the round went on; this is tried again next round.")));
	FreeErrorData(e);
}

/* hk_ids: column col (bigint) of the n rows of tt, as int64 Datums */
static Datum *
hk_ids(SPITupleTable *tt, int n, int col)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	int			r;

	for (r = 0; r < n; r++)
		elems[r] = Int64GetDatum(NtaskTupGetInt64(tt, r, col));
	return elems;
}

/*
 * hk_each
 *		Write ids[0..n-1] with fn: all at once in a subtransaction, and if
 *		that fails, one at a time (what says what for the WARNING).  Adds
 *		the rows written to done[0] and those sent to repair to done[1].
 */
static void
hk_each(const HkScope *s, Datum *ids, Datum *tokens, int n, void (*fn) (void *arg),
		const char *what, int64 *done)
{
	HkWork		w;
	ErrorData  *e;
	int			r;

	memset(&w, 0, sizeof(w));
	w.s = s;
	w.ids = NtaskInt8Array(ids, n);
	w.tokens = tokens != NULL ? NtaskInt8Array(tokens, n) : (Datum) 0;
	if (s->sharded)
	{
		fn(&w);
		done[0] += w.done;
		done[1] += w.repaired;
		return;
	}
	if (NtaskTrySubxact(fn, &w, &e))
	{
		done[0] += w.done;
		done[1] += w.repaired;
		return;
	}
	FreeErrorData(e);
	for (r = 0; r < n; r++)
	{
		w.ids = NtaskInt8Array(&ids[r], 1);
		w.tokens = tokens != NULL ? NtaskInt8Array(&tokens[r], 1) : (Datum) 0;
		w.done = w.repaired = 0;
		if (NtaskTrySubxact(fn, &w, &e))
		{
			done[0] += w.done;
			done[1] += w.repaired;
		}
		else
			hk_warn(psprintf("%s of task " INT64_FORMAT, what, DatumGetInt64(ids[r])), e);
	}
}

/* hk_release_step: close the attempts of w->ids and release them */
static void
hk_release_step(void *arg)
{
	HkWork	   *w = (HkWork *) arg;
	Datum		values[HK_RELEASE_NARGS];
	SPITupleTable *tt;
	int			n;
	int			r;

	values[HK_RELEASE_ARG_IDS] = w->ids;
	values[HK_RELEASE_ARG_TOKENS] = w->tokens;
	values[HK_RELEASE_ARG_INVOKED] = NtaskCloseExpiredAttempts(w->ids, w->tokens);
	values[HK_RELEASE_ARG_TS] = w->s->ts;
	values[HK_RELEASE_ARG_SHARD] = Int16GetDatum(w->s->shard);
	n = NtaskExecPair(&hk_release, values, NULL);
	tt = SPI_tuptable;
	w->done += n;
	for (r = 0; r < n; r++)
		if (NtaskTupGetBool(tt, r, HK_RELEASE_REPAIRED))
			w->repaired++;
}

/*
 * hk_expired
 *		Step 1: release expired leases (closing their attempts); counts[0]
 *		leases released, counts[1] tasks that went to repair_required.
 */
static void
hk_expired(const HkScope *s, int64 *counts)
{
	Datum		values[HK_EXPIRED_NARGS];
	Datum	   *tokens;
	int64		done[2] = {0, 0};
	SPITupleTable *tt;
	int			n;

	values[HK_EXPIRED_ARG_SHARD] = Int16GetDatum(s->shard);
	values[HK_EXPIRED_ARG_TS] = s->ts;
	values[HK_EXPIRED_ARG_ROWS] = Int32GetDatum(s->max_rows);
	n = NtaskExecPairCount(&hk_expired_pick, values, NULL, s->max_rows);
	if (n == 0)
		return;
	tt = SPI_tuptable;
	tokens = hk_ids(tt, n, HK_EXPIRED_TOKEN);
	hk_each(s, hk_ids(tt, n, HK_EXPIRED_TASK_ID), tokens, n, hk_release_step,
			"releasing the expired lease", done);
	counts[0] += done[0];
	counts[1] += done[1];
}

/* hk_deadline_set_step: w->ids to repair_required, deadline_exceeded */
static void
hk_deadline_set_step(void *arg)
{
	HkWork	   *w = (HkWork *) arg;
	Datum		values[HK_DEADLINE_SET_NARGS];

	values[HK_DEADLINE_SET_ARG_IDS] = w->ids;
	values[HK_DEADLINE_SET_ARG_TS] = w->s->ts;
	values[HK_DEADLINE_SET_ARG_SHARD] = Int16GetDatum(w->s->shard);
	w->done += NtaskExecPair(&hk_deadline_set, values, NULL);
}

/* hk_deadline_step: a plain install's one statement of step 2 */
static void
hk_deadline_step(void *arg)
{
	HkWork	   *w = (HkWork *) arg;
	Datum		values[HK_DEADLINE_NARGS];

	values[HK_DEADLINE_ARG_ROWS] = Int32GetDatum(w->s->max_rows);
	w->done = NtaskExecPlan(&hk_deadline_plan, values, NULL, SPI_OK_UPDATE);
}

/*
 * hk_deadlines: step 2, deadlines of tasks nobody claims; adds to counts[1].
 * A plain install tries its one statement first (hk_deadline_plan); when
 * that fails, and in a shard, the tasks are picked and then written.
 */
static void
hk_deadlines(const HkScope *s, int64 *counts)
{
	Datum		values[HK_DEADLINE_PICK_NARGS];
	int64		done[2] = {0, 0};
	int			n;

	if (!s->sharded)
	{
		HkWork		w;
		ErrorData  *e;

		memset(&w, 0, sizeof(w));
		w.s = s;
		if (NtaskTrySubxact(hk_deadline_step, &w, &e))
		{
			counts[1] += w.done;
			return;
		}
		FreeErrorData(e);
	}
	values[HK_DEADLINE_PICK_ARG_ROWS] = Int32GetDatum(s->max_rows);
	values[HK_DEADLINE_PICK_ARG_SHARD] = Int16GetDatum(s->shard);
	values[HK_DEADLINE_PICK_ARG_TS] = s->ts;
	n = NtaskExecPair(&hk_deadline_pick, values, NULL);
	if (n == 0)
		return;
	hk_each(s, hk_ids(SPI_tuptable, n, HK_DEADLINE_PICK_TASK_ID), NULL, n,
			hk_deadline_set_step, "the deadline sweep", done);
	counts[1] += done[0];
}

/* hk_before: the statement timestamp minus retention */
static Datum
hk_before(Datum retention)
{
	return DirectFunctionCall2(timestamptz_mi_interval, NtaskStatementTs(), retention);
}

/*
 * hk_prune_queue
 *		Step 3 for one queue (w->queue, w->retention): its finished tasks
 *		past the retention, with their attempts, receipts, checkpoints and
 *		the signals they awaited, and its signals no task awaited past the
 *		same retention; adds to w->counts[2].
 */
static void
hk_prune_queue(void *arg)
{
	HkWork	   *w = (HkWork *) arg;
	const HkScope *s = w->s;
	Datum		pick[HK_PRUNE_PICK_NARGS];
	Datum		values[HK_PRUNE_NARGS];
	Datum		sv[HK_UNAWAITED_NARGS];
	SPITupleTable *picked;
	int			n;

	pick[HK_PRUNE_PICK_ARG_QUEUE] = w->queue;
	pick[HK_PRUNE_PICK_ARG_RETENTION] = w->retention;
	pick[HK_PRUNE_PICK_ARG_SHARD] = Int16GetDatum(s->shard);
	pick[HK_PRUNE_PICK_ARG_BEFORE] = hk_before(w->retention);
	pick[HK_PRUNE_PICK_ARG_ROWS] = Int32GetDatum(s->max_rows);
	n = NtaskExecPairCount(&hk_prune_pick, pick, NULL, s->max_rows);
	picked = SPI_tuptable;

	/*
	 * a signal's row is in its queue and key's shard (signal.c), 0 on a plain
	 * install
	 */
	sv[HK_UNAWAITED_ARG_QUEUE] = w->queue;
	sv[HK_UNAWAITED_ARG_BEFORE] = hk_before(w->retention);
	sv[HK_UNAWAITED_ARG_ROWS] = Int32GetDatum(s->max_rows);
	sv[HK_UNAWAITED_ARG_SHARD] = Int16GetDatum(s->shard);
	(void) NtaskExecPlan(&hk_prune_unawaited_plan, sv, NULL, SPI_OK_DELETE);
	if (n == 0)
		return;
	values[HK_PRUNE_ARG_IDS] = NtaskInt8Array(hk_ids(picked, n, HK_PRUNE_PICK_TASK_ID), n);
	values[HK_PRUNE_ARG_SHARD] = Int16GetDatum(s->shard);
	(void) NtaskExecPair(&hk_prune_checkpoints, values, NULL);
	(void) NtaskExecPair(&hk_prune_signals, values, NULL);
	(void) NtaskExecPair(&hk_prune_attempts, values, NULL);
	(void) NtaskExecPair(&hk_prune_receipts, values, NULL);
	/* a plain install deletes them in hk_prune_tasks's statement */
	if (s->sharded)
		(void) NtaskExecPlan(&hk_prune_deps_shard_plan, values, NULL, SPI_OK_DELETE);
	w->counts[2] += NtaskExecPair(&hk_prune_tasks, values, NULL);
}

/*
 * hk_retention
 *		Step 3: finished tasks past their queue's retention, queue by queue
 *		(the queues: a reference table on a distributed install), each
 *		queue in a subtransaction on a plain install; adds to counts[2].
 */
static void
hk_retention(const HkScope *s, int64 *counts)
{
	SPITupleTable *queues;
	int			nq = NtaskExecPlan(&hk_queues_plan, NULL, NULL, SPI_OK_SELECT);
	int			q;

	queues = SPI_tuptable;
	for (q = 0; q < nq; q++)
	{
		HkWork		w;
		ErrorData  *e;
		bool		isnull;
		int64		before = counts[2];

		memset(&w, 0, sizeof(w));
		w.s = s;
		w.counts = counts;
		w.queue = NtaskTupGetDatum(queues, q, HK_QUEUES_QUEUE, &isnull);
		w.retention = NtaskTupGetDatum(queues, q, HK_QUEUES_RETENTION, &isnull);
		if (s->sharded)
			hk_prune_queue(&w);
		else if (!NtaskTrySubxact(hk_prune_queue, &w, &e))
		{
			counts[2] = before;
			hk_warn(psprintf("pruning queue \"%s\"", TextDatumGetCString(w.queue)), e);
		}
	}
}

/* hk_round: steps 1-3 of a round in scope s; adds to counts[0..2] */
static void
hk_round(const HkScope *s, bool deadlines, int64 *counts)
{
	hk_expired(s, counts);
	if (deadlines)
		hk_deadlines(s, counts);
	hk_retention(s, counts);
}

/*
 * NtaskHousekeepShard
 *		One round over one shard of a distributed install, as NtaskHousekeep
 *		does it over a plain install's tasks (its steps 1-3), each statement
 *		routed to the shard's node.  Adds to counts[0..2].  In SPI.
 */
void
NtaskHousekeepShard(int16 shard, int max_rows, bool deadlines, int64 *counts)
{
	HkScope		s;

	s.sharded = true;
	s.shard = shard;
	s.ts = NtaskStatementTs();
	s.max_rows = max_rows;

	/*
	 * The shard's metadata lock first, as a claim takes it: each sweep is a
	 * routed pick and then a routed write, and a shard move completed in
	 * between would leave the pick's row locks on the old placement
	 * (NtaskLockShards, docs/scaling.md "Shard moves").
	 */
	NtaskLockShard(shard);
	hk_round(&s, deadlines, counts);
}

/*
 * hk_audit_pick: hk_prune_audit's before step on a distributed install,
 * the ids of the oldest audit rows past the retention into values[]; false
 * when there are none
 */
static bool
hk_audit_pick(Datum *values, char *nulls)
{
	Datum		pv[HK_HISTORY_PICK_NARGS];
	int			n;

	pv[HK_HISTORY_PICK_ARG_BEFORE] = hk_before(values[HK_HISTORY_ARG_RETENTION]);
	pv[HK_HISTORY_PICK_ARG_ROWS] = values[HK_HISTORY_ARG_ROWS];
	n = NtaskExecPlan(&hk_audit_pick_dist_plan, pv, NULL, SPI_OK_SELECT);
	if (n == 0)
		return false;
	values[HK_HISTORY_ARG_IDS] = NtaskInt8Array(hk_ids(SPI_tuptable, n, HK_AUDIT_PICK_ID), n);
	return true;
}

/*
 * hk_slots_pick: hk_prune_slots' before step on a distributed install, the
 * ids of the oldest schedule slots past the retention whose task is
 * finished (or gone) into values[]; false when there are none
 */
static bool
hk_slots_pick(Datum *values, char *nulls)
{
	Datum		pv[HK_HISTORY_PICK_NARGS];
	Datum		bv[HK_SLOTS_BUSY_NARGS];
	SPITupleTable *picked;
	SPITupleTable *busy_tt;
	Datum	   *ids;
	int64	   *slot_task;		/* each slot's task, 0 for none */
	Datum	   *tasks;
	int64	   *busy;
	int			n;
	int			nt = 0;
	int			nbusy = 0;
	int			ndel = 0;
	int			r;
	int			b;

	pv[HK_HISTORY_PICK_ARG_BEFORE] = hk_before(values[HK_HISTORY_ARG_RETENTION]);
	pv[HK_HISTORY_PICK_ARG_ROWS] = values[HK_HISTORY_ARG_ROWS];
	n = NtaskExecPlan(&hk_slots_pick_dist_plan, pv, NULL, SPI_OK_SELECT);
	if (n == 0)
		return false;
	picked = SPI_tuptable;
	ids = palloc(sizeof(Datum) * n);
	slot_task = palloc(sizeof(int64) * n);
	tasks = palloc(sizeof(Datum) * n);
	for (r = 0; r < n; r++)
	{
		bool		isnull;
		Datum		t = NtaskTupGetDatum(picked, r, HK_SLOTS_PICK_TASK_ID, &isnull);

		ids[r] = Int64GetDatum(NtaskTupGetInt64(picked, r, HK_SLOTS_PICK_ID));
		slot_task[r] = isnull ? 0 : DatumGetInt64(t);
		if (!isnull)
			tasks[nt++] = t;
	}
	busy = palloc(sizeof(int64) * Max(nt, 1));
	if (nt > 0)
	{
		bv[HK_SLOTS_BUSY_ARG_TASK_IDS] = NtaskInt8Array(tasks, nt);
		nbusy = NtaskExecPlan(&hk_slots_busy_dist_plan, bv, NULL, SPI_OK_SELECT);
		busy_tt = SPI_tuptable;
		for (r = 0; r < nbusy; r++)
			busy[r] = NtaskTupGetInt64(busy_tt, r, HK_SLOTS_BUSY_TASK_ID);
	}
	/* the slots whose task is unfinished stay: overlap decisions read them */
	for (r = 0; r < n; r++)
	{
		bool		keep = false;

		for (b = 0; b < nbusy && !keep; b++)
			keep = slot_task[r] != 0 && slot_task[r] == busy[b];
		if (!keep)
			ids[ndel++] = ids[r];
	}
	if (ndel == 0)
		return false;
	values[HK_HISTORY_ARG_IDS] = NtaskInt8Array(ids, ndel);
	return true;
}

/* hk_prune_key_pauses: delete up to max_rows ended key pauses */
static void
hk_prune_key_pauses(int max_rows)
{
	Datum		values[HK_KEY_PAUSE_NARGS];

	values[HK_KEY_PAUSE_ARG_ROWS] = Int32GetDatum(max_rows);
	(void) NtaskExecPlan(&hk_key_pause_plan, values, NULL, SPI_OK_DELETE);
}

/* hk_prune_history: run one history DELETE with a retention in seconds */
static void
hk_prune_history(NtaskPair *pair, int retention_s, int max_rows)
{
	Datum		values[HK_HISTORY_NARGS];

	if (retention_s <= 0)
		return;
	values[HK_HISTORY_ARG_RETENTION] =
		IntervalPGetDatum(NtaskUsecsInterval((int64) retention_s * USECS_PER_SEC));
	values[HK_HISTORY_ARG_ROWS] = Int32GetDatum(max_rows);
	values[HK_HISTORY_ARG_IDS] = (Datum) 0; /* the before step's */
	(void) NtaskExecPair(pair, values, NULL);
}

/*
 * NtaskHousekeepHistoryDist
 *		The history step of a distributed install: the key pauses, the
 *		schedule slots and the audit.  Fences do not run there
 *		(docs/scaling.md), so fence_receipt holds nothing to prune.  In SPI.
 */
void
NtaskHousekeepHistoryDist(int max_rows)
{
	hk_prune_key_pauses(max_rows);
	hk_prune_history(&hk_prune_slots, ntask_history_retention_s, max_rows);
	hk_prune_history(&hk_prune_audit, ntask_audit_retention_s, max_rows);
}

/* one history step of a plain install, for NtaskTrySubxact */
typedef struct HkHistory
{
	NtaskPair  *pair;			/* NULL: the key pauses */
	int			retention_s;
	int			max_rows;
} HkHistory;

static void
hk_history_step(void *arg)
{
	HkHistory  *h = (HkHistory *) arg;

	if (h->pair == NULL)
		hk_prune_key_pauses(h->max_rows);
	else
		hk_prune_history(h->pair, h->retention_s, h->max_rows);
}

/* hk_guarded_history: a history step in a subtransaction of its own */
static void
hk_guarded_history(NtaskPair *pair, int retention_s, int max_rows)
{
	HkHistory	h;
	ErrorData  *e;

	h.pair = pair;
	h.retention_s = retention_s;
	h.max_rows = max_rows;
	if (!NtaskTrySubxact(hk_history_step, &h, &e))
		hk_warn(pair != NULL ? pair->v[NTASK_PATH_PLAIN].plan.name :
				hk_key_pause_plan.name, e);
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
	HkScope		s;
	int			i;

	counts[0] = counts[1] = counts[2] = 0;

	/*
	 * A distributed install: every sweep once per shard value, routed (the
	 * background worker runs each shard in a transaction of its own:
	 * worker.c), then its history.
	 */
	if (NtaskShardCount() > 0)
	{
		for (i = 0; i < NtaskShardCount(); i++)
			NtaskHousekeepShard(NtaskShardValue(i), max_rows, deadlines, counts);
		NtaskHousekeepHistoryDist(max_rows);
		return;
	}

	/* 1-3. expired leases, deadlines, retention */
	s.sharded = false;
	s.shard = 0;
	s.ts = NtaskStatementTs();
	s.max_rows = max_rows;
	hk_round(&s, deadlines, counts);

	/* 4. history: audit, schedule slots, fence receipts (0: keep forever) */
	hk_guarded_history(&hk_prune_audit, ntask_audit_retention_s, max_rows);
	hk_guarded_history(&hk_prune_slots, ntask_history_retention_s, max_rows);
	hk_guarded_history(&hk_prune_fence, ntask_history_retention_s, max_rows);
	hk_guarded_history(NULL, -1, max_rows);
}

/* ntask_housekeeping's columns, NtaskHousekeep's counts[] in order */
typedef enum HkOutCol
{
	HK_OUT_EXPIRED,
	HK_OUT_REPAIRED,
	HK_OUT_PRUNED,
	HK_OUT_NCOLS
} HkOutCol;

/*
 * ntask_housekeeping(max_rows int DEFAULT 1000, deadlines bool DEFAULT true)
 *		RETURNS TABLE(expired bigint, repaired bigint, pruned bigint)
 *
 * Errors: max_rows NULL 22004 or outside 1..HK_MAX_ROWS (100000) 22023.
 */
Datum
ntask_housekeeping(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[HK_OUT_NCOLS];
	bool		nulls[HK_OUT_NCOLS] = {false, false, false};
	int64		counts[HK_OUT_NCOLS];
	int32		max_rows;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: max_rows and deadlines must not be NULL")));
	max_rows = PG_GETARG_INT32(0);
	if (max_rows < 1 || max_rows > HK_MAX_ROWS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: max_rows must be between 1 and %d", HK_MAX_ROWS)));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "ntask: return type must be a row type");

	SPI_connect();
	NtaskHousekeep(max_rows, PG_GETARG_BOOL(1), counts);
	SPI_finish();

	values[HK_OUT_EXPIRED] = Int64GetDatum(counts[HK_OUT_EXPIRED]);
	values[HK_OUT_REPAIRED] = Int64GetDatum(counts[HK_OUT_REPAIRED]);
	values[HK_OUT_PRUNED] = Int64GetDatum(counts[HK_OUT_PRUNED]);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
