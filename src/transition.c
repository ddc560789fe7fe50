/*-------------------------------------------------------------------------
 *
 * transition.c
 *	  ntask_transition: the fenced, conditional end of an attempt, and the
 *	  retry backoff; its batch form ntask_transition_many and the worker's
 *	  one-call loop ntask_transition_and_claim (docs/design.md "Batches");
 *	  the task row check ntask.task_row_valid.
 *
 * Every to_state but retry_wait is first tried as one conditional
 * statement (task row: token = $token AND state = leased; attempt row:
 * still open), which locks the task row, then the attempt row.  When that
 * matches nothing, or for retry_wait, the task row is locked (FOR UPDATE)
 * and the call classified; that lock serializes it against claim takeover,
 * cancel and replay:
 *
 *	token > task.token			-> NT003 (never issued)
 *	token = task.token, leased	-> applied: the attempt is closed, the task
 *								   moves (budget and deadline enforced)
 *	otherwise, look at the attempt of this token:
 *	  it asked for this same transition		-> duplicate
 *	  (same to_state, error class and outcome label)
 *	  it asked for a different one			-> conflict
 *	  it never asked (taken over, canceled)	-> stale
 *
 * A requested retry_wait becomes repair_required when the attempts
 * (including the first) reach max_attempts, or when the next run would
 * start at or after the task's deadline.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/transition.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "coord.h"
#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"

PG_FUNCTION_INFO_V1(ntask_transition);
PG_FUNCTION_INFO_V1(ntask_transition_many);
PG_FUNCTION_INFO_V1(ntask_transition_and_claim);

/*
 * The statements' parameters and result columns by name: an argument enum
 * indexes values[] (TR_X_ARG_Y is $(Y + 1)), a column enum is an SPI
 * attribute number (from 1).
 */

/* tr_lock_plan: $1 the task, $2 the caller; the locked row */
typedef enum TrLockArg
{
	TR_LOCK_ARG_TASK_ID,
	TR_LOCK_ARG_CALLER,
	TR_LOCK_NARGS
} TrLockArg;

typedef enum TrLockCol
{
	TR_LOCK_STATE = 1,
	TR_LOCK_TOKEN,
	TR_LOCK_ATTEMPTS,
	TR_LOCK_MAX_ATTEMPTS,
	TR_LOCK_DEADLINE,
	TR_LOCK_BACKOFF_BASE,
	TR_LOCK_BACKOFF_MAX,
	TR_LOCK_RUN_AT,				/* NULL once finished */
	TR_LOCK_RIGHT,				/* the caller has the worker_role */
	TR_LOCK_RESULT,
	TR_LOCK_QUEUE,
	TR_LOCK_NCOLS = TR_LOCK_QUEUE
} TrLockCol;

static NtaskPair tr_lock_plan = NTASK_PAIR("transition lock",
	NTASK_PLAIN(TR_LOCK_NCOLS,
	"SELECT t.state, t.token, t.attempts, t.max_attempts, t.deadline, "
	"  q.backoff_base, q.backoff_max, "
	"  CASE WHEN t.due_at IS NOT NULL THEN t.run_at END, " NTASK_WORKER_RIGHT("q", "2") ", "
	"  t.result, t.queue "
	"FROM ntask.task t JOIN ntask.queue q "
	"  ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"FOR UPDATE OF t",
	TR_LOCK_NARGS, SPI_OK_SELECT),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, OIDOID);

/*
 * The task row first (locked by tr_lock_plan, moved by the UPDATE), then
 * the attempt's ledger row, written once, now that it ends, only if the
 * task moved and only for a caller with the queue's worker_role.  Its
 * invoked_at is the moved row's (RETURNING); its worker and claimed_at,
 * which the UPDATE clears or keeps and a token does not change, come from
 * o, the same row joined by primary key as the statement's snapshot saw
 * it: RETURNING shows only new values, and a CTE reading ntask.task after
 * the UPDATE sees the new row on Citus, which runs the CTEs one by one.
 */
typedef enum TrApplyArg
{
	TR_APPLY_ARG_TASK_ID,		/* $1 */
	TR_APPLY_ARG_TOKEN,			/* $2 */
	TR_APPLY_ARG_STATE,			/* $3, the state it goes to (final) */
	TR_APPLY_ARG_REQUESTED,		/* $4, the to_state asked for */
	TR_APPLY_ARG_ATTEMPT,		/* $5-$8, tr_attempt_args */
	TR_APPLY_ARG_RETRY_AT = TR_APPLY_ARG_ATTEMPT + 4,	/* $9 */
	TR_APPLY_ARG_DETAIL,		/* $10 */
	TR_APPLY_ARG_NEXT,			/* $11, the next run (retry_wait) or NULL */
	TR_APPLY_ARG_REASON,		/* $12 */
	TR_APPLY_ARG_DETAIL_REASON, /* $13, detail->>'reason' may name why */
	TR_APPLY_ARG_CALLER,		/* $14 */
	TR_APPLY_ARG_RESULT,		/* $15 */
	TR_APPLY_ARG_NOW,			/* $16 */
	TR_APPLY_ARG_ON_ROW,		/* $17, the attempt may stay on the row */
	TR_APPLY_NARGS
} TrApplyArg;

/* tr_apply's columns (one row when it applied) */
typedef enum TrApplyCol
{
	TR_APPLY_STATE = 1,
	TR_APPLY_RUN_AT,
	TR_APPLY_QUEUE,
	TR_APPLY_NCOLS = TR_APPLY_QUEUE
} TrApplyCol;

/* the UPDATE of both variants of tr_apply */
#define TR_APPLY_UPDATE \
	"  UPDATE ntask.task t SET state = $3, " \
	"    run_at = coalesce($11, t.run_at), due_at = $11, " \
	"    lease_owner = NULL, lease_until = NULL, " \
	"    last_error_class = coalesce($5, t.last_error_class), " \
	"    last_error_stage = coalesce($6, t.last_error_stage), " \
	"    outcome = $8, result = $15, " \
	"    reason = CASE WHEN $13 " \
	"      THEN coalesce($10 OPERATOR(pg_catalog.->>) 'reason', $12) ELSE $12 END, " \
	"    unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) " \
	"      CASE WHEN $7 THEN 0 WHEN EXISTS (SELECT 1 FROM ntask.receipt r " \
	"        WHERE r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1") \
	"          AND r.token OPERATOR(pg_catalog.=) $2) THEN 0 ELSE 1 END, " \
	"    finished_at = CASE WHEN $11 IS NULL THEN $16 END, " \
	"    updated_at = $16, " \
	"    attempt_worker = CASE WHEN $17 AND o.claimed_at IS NOT NULL THEN o.lease_owner END, " \
	"    attempt_detail = CASE WHEN $17 AND o.claimed_at IS NOT NULL THEN $10 END " \
	"  FROM ntask.task o " \
	"  WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1") \
	"    AND t.token OPERATOR(pg_catalog.=) $2 " \
	"    AND t.state OPERATOR(pg_catalog.=) 'leased' " \
	"    AND o.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("o", "$1") \
	"    AND EXISTS (SELECT 1 FROM ntask.queue q " \
	"                WHERE q.queue OPERATOR(pg_catalog.=) t.queue " \
	"                  AND " NTASK_WORKER_RIGHT("q", "14") ") "

/*
 * On a distributed install the same as two statements routed to the
 * task's shard: Citus plans the CTEs of the plain statement apart, sends
 * the UPDATE's rows to every node as an intermediate result for the
 * INSERT, and so commits on every node with two-phase commit (about 40 ms
 * more per transition here).  The UPDATE returns the plain statement's
 * columns, then what the ledger row needs (tr_apply_ledger, the after
 * step): whether the outcome is known is the UPDATE's own test
 * (unknown_attempts did not grow: $7, or a receipt).
 */
typedef enum TrApplyDistCol
{
	TR_APPLY_DIST_TASK_ID = TR_APPLY_NCOLS + 1,
	TR_APPLY_DIST_SHARD,
	TR_APPLY_DIST_TOKEN,
	TR_APPLY_DIST_ATTEMPTS,
	TR_APPLY_DIST_CLAIMED_AT,
	TR_APPLY_DIST_INVOKED_AT,
	TR_APPLY_DIST_WORKER,
	TR_APPLY_DIST_PROGRESS,
	TR_APPLY_DIST_KNOWN,
	TR_APPLY_DIST_ON_ROW,		/* the attempt stays on the row: no ledger row */
	TR_APPLY_DIST_NCOLS = TR_APPLY_DIST_ON_ROW
} TrApplyDistCol;

static void tr_apply_ledger(SPITupleTable *tt, int n, Datum *values, char *nulls);

/* tr_apply_pair's routed variant (tr_apply_row_pair's too) */
#define TR_APPLY_ROUTED \
	NTASK_ROUTED(TR_APPLY_DIST_NCOLS, \
				 TR_APPLY_UPDATE \
				 "RETURNING t.state, CASE WHEN t.due_at IS NOT NULL THEN t.run_at END AS run_at, " \
				 "  t.queue, t.task_id, t.shard, t.token, t.attempts, " \
				 "  coalesce(o.claimed_at, o.updated_at), t.invoked_at, o.lease_owner, o.progress, " \
				 "  t.unknown_attempts OPERATOR(pg_catalog.=) o.unknown_attempts, " \
				 "  t.attempt_worker IS NOT NULL", \
				 TR_APPLY_NARGS, SPI_OK_UPDATE_RETURNING, NULL, tr_apply_ledger)
#define TR_APPLY_TYPES \
	INT8OID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID, \
	TEXTOID, TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, TEXTOID, BOOLOID, OIDOID, \
	JSONBOID, TIMESTAMPTZOID, BOOLOID

static NtaskPair tr_apply_pair = NTASK_PAIR("transition apply",
											NTASK_PLAIN(TR_APPLY_NCOLS,
														"WITH upd AS ( "
														TR_APPLY_UPDATE
														"  RETURNING t.task_id, t.state, "
														"    CASE WHEN t.due_at IS NOT NULL THEN t.run_at END AS run_at, "
														"    t.shard, t.token, t.attempts, coalesce(o.claimed_at, o.updated_at) AS claimed_at, "
														"    t.invoked_at, o.lease_owner AS worker, t.queue, o.progress, "
														"    t.attempt_worker IS NOT NULL AS on_row "
														"), att AS ( "
														"  INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker, claimed_at, "
														"    invoked_at, ended_at, result, requested, error_class, error_stage, "
														"    outcome_known, outcome, retry_at, detail, progress) "
														"  SELECT u.task_id, u.shard, u.token, u.attempts, u.worker, u.claimed_at, "
														"    u.invoked_at, pg_catalog.statement_timestamp(), $3, $4, $5, $6, "
														"    CASE WHEN $7 THEN true ELSE EXISTS (SELECT 1 FROM ntask.receipt r "
														"      WHERE r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1")
														"        AND r.token OPERATOR(pg_catalog.=) $2) END, "
														"    $8, $9, $10, u.progress "
														"  FROM upd u WHERE NOT u.on_row "
														") "
														"SELECT upd.state, upd.run_at, upd.queue FROM upd",
														TR_APPLY_NARGS, SPI_OK_SELECT),
											TR_APPLY_ROUTED, TR_APPLY_TYPES);

/*
 * The holder's own final answer whose attempt stays on the task row
 * (tr_on_row; the plain and the direct path): tr_apply_pair's UPDATE
 * alone, without the ledger CTE, which would insert nothing, and without
 * o, which only the ledger row reads.  attempt_worker is the lease's
 * holder: a SET expression reads the row before the update, and the
 * token the WHERE clause checks fixes the holder (only a claim, with a new
 * token, sets lease_owner).  A lease taken before 1.0.0's claimed_at
 * (claimed_at NULL) keeps its ledger row: it does not match here and
 * takes the locked path, which runs tr_apply_pair (tr_apply's full).  What
 * the on-row answer does not change is left out of the SET list: an
 * on-row answer has no error class (unknown_attempts does not grow, the
 * receipt is not looked at) and no stage, and no next run (run_at stays,
 * the answer's run_at is NULL).  Routed (Citus): tr_apply_pair's routed
 * UPDATE, unchanged.
 */
static NtaskPair tr_apply_row_pair = NTASK_PAIR("transition apply on row",
												NTASK_PLAIN(TR_APPLY_NCOLS,
															"UPDATE ntask.task t SET state = $3, due_at = NULL, "
															"  lease_owner = NULL, lease_until = NULL, "
															"  outcome = $8, result = $15, "
															"  reason = CASE WHEN $13 "
															"    THEN coalesce($10 OPERATOR(pg_catalog.->>) 'reason', $12) ELSE $12 END, "
															"  finished_at = $16, updated_at = $16, "
															"  attempt_worker = t.lease_owner, attempt_detail = $10 "
															"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
															"  AND t.token OPERATOR(pg_catalog.=) $2 "
															"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
															"  AND t.claimed_at IS NOT NULL "
															"  AND EXISTS (SELECT 1 FROM ntask.queue q "
															"              WHERE q.queue OPERATOR(pg_catalog.=) t.queue "
															"                AND " NTASK_WORKER_RIGHT("q", "14") ") "
															"RETURNING t.state, NULL::pg_catalog.timestamptz AS run_at, t.queue",
															TR_APPLY_ARG_NOW + 1, SPI_OK_UPDATE_RETURNING),
												TR_APPLY_ROUTED, TR_APPLY_TYPES);

/* the ledger row a routed tr_apply's task ends with (tr_apply_ledger) */
typedef enum TrLedgerArg
{
	TR_LEDGER_ARG_TASK_ID,		/* $1, its shard value $2 routes it */
	TR_LEDGER_ARG_SHARD,
	TR_LEDGER_ARG_TOKEN,
	TR_LEDGER_ARG_ATTEMPT,
	TR_LEDGER_ARG_WORKER,
	TR_LEDGER_ARG_CLAIMED_AT,
	TR_LEDGER_ARG_INVOKED_AT,
	TR_LEDGER_ARG_ENDED_AT,
	TR_LEDGER_ARG_RESULT,
	TR_LEDGER_ARG_REQUESTED,
	TR_LEDGER_ARG_ERROR_CLASS,
	TR_LEDGER_ARG_ERROR_STAGE,
	TR_LEDGER_ARG_KNOWN,
	TR_LEDGER_ARG_OUTCOME,
	TR_LEDGER_ARG_RETRY_AT,
	TR_LEDGER_ARG_DETAIL,
	TR_LEDGER_ARG_PROGRESS,
	TR_LEDGER_NARGS
} TrLedgerArg;

static NtaskPlan tr_attempt_insert_plan = {
	"transition attempt insert (distributed)",
	.ncols = 0,
	"INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker, claimed_at, "
	"  invoked_at, ended_at, result, requested, error_class, error_stage, "
	"  outcome_known, outcome, retry_at, detail, progress) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
	TR_LEDGER_NARGS, {INT8OID, INT2OID, INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID, TEXTOID,
	TIMESTAMPTZOID, JSONBOID, JSONBOID}
};

/* the ledger row of an attempt */
typedef enum TrLookupArg
{
	TR_LOOKUP_ARG_TASK_ID,		/* $1 */
	TR_LOOKUP_ARG_TOKEN,		/* $2 */
	TR_LOOKUP_NARGS
} TrLookupArg;

typedef enum TrAttemptCol
{
	TR_ATTEMPT_REQUESTED = 1,
	TR_ATTEMPT_ERROR_CLASS,
	TR_ATTEMPT_OUTCOME,
	TR_ATTEMPT_NCOLS = TR_ATTEMPT_OUTCOME
} TrAttemptCol;

static NtaskPair tr_attempt_plan = NTASK_PAIR("transition attempt lookup",
	NTASK_PLAIN(TR_ATTEMPT_NCOLS,
	"SELECT a.requested, a.error_class, a.outcome FROM ntask.attempt a "
	"WHERE a.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("a", "$1")
	"  AND a.token OPERATOR(pg_catalog.=) $2 "
	/* the holder's final answer kept on the task row (tr_on_row) */
	"UNION ALL "
	"SELECT t.state, NULL::pg_catalog.text, t.outcome FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND t.token OPERATOR(pg_catalog.=) $2 AND t.attempt_worker IS NOT NULL",
	TR_LOOKUP_NARGS, SPI_OK_SELECT),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, INT8OID);

/*
 * The conditional statement of ntask_transition_many for every to_state but
 * retry_wait: tr_apply_pair's plain statement for a whole batch.  $1/$2 are the tasks and
 * their tokens, sorted by task_id, so the rows are locked in that order
 * (a nested loop over the arrays, each task reached by primary key, also as
 * o, the row as the snapshot saw it, for the ledger row's worker and
 * claimed_at; see tr_apply_pair; the attempt's row is inserted).
 * $3 to_state, $4 error_class, $5 error_stage, $6 the outcome is known
 * (error_class is not unknown), $7 outcome, $8 detail, $9 reason, $10
 * detail->>'reason' may name the reason, $11 the caller, $12 the results
 * (in the order of $1).
 */
typedef enum TrManyArg
{
	TR_MANY_ARG_TASK_IDS,		/* $1 */
	TR_MANY_ARG_TOKENS,			/* $2 */
	TR_MANY_ARG_STATE,			/* $3 */
	TR_MANY_ARG_ATTEMPT,		/* $4-$7, tr_attempt_args */
	TR_MANY_ARG_DETAIL = TR_MANY_ARG_ATTEMPT + 4,	/* $8 */
	TR_MANY_ARG_REASON,			/* $9 */
	TR_MANY_ARG_DETAIL_REASON,	/* $10 */
	TR_MANY_ARG_CALLER,			/* $11 */
	TR_MANY_ARG_RESULTS,		/* $12 */
	TR_MANY_ARG_ON_ROW,			/* $13, the attempts may stay on the rows */
	TR_MANY_NARGS
} TrManyArg;

/* tr_many_plan's columns: one row per task it applied */
typedef enum TrManyCol
{
	TR_MANY_TASK_ID = 1,
	TR_MANY_STATE,
	TR_MANY_QUEUE,
	TR_MANY_NCOLS = TR_MANY_QUEUE
} TrManyCol;

/*
 * On a distributed install the batch goes task by task (tr_many_none):
 * one statement would be planned over every shard (the ids are an array),
 * its CTE apart, and committed with two-phase commit on every node (148
 * ms for a batch of 5 of one shard); task by task, each statement is
 * routed to the task's shard, local in a delegated call.
 */
static bool
tr_many_none(Datum *values, char *nulls)
{
	return false;
}

#define TR_MANY_TYPES \
	INT8ARRAYOID, INT8ARRAYOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID, \
	TEXTOID, JSONBOID, TEXTOID, BOOLOID, OIDOID, JSONBARRAYOID, BOOLOID

static NtaskPair tr_many_pair = NTASK_PAIR("transition many",
										   NTASK_PLAIN(TR_MANY_NCOLS,
													   "WITH upd AS ( "
													   "  UPDATE ntask.task t SET state = $3, due_at = NULL, "
													   "    lease_owner = NULL, lease_until = NULL, "
													   "    last_error_class = coalesce($4, t.last_error_class), "
													   "    last_error_stage = coalesce($5, t.last_error_stage), "
													   "    outcome = $7, result = i.result, "
													   "    reason = CASE WHEN $10 "
													   "      THEN coalesce($8 OPERATOR(pg_catalog.->>) 'reason', $9) ELSE $9 END, "
													   "    unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) "
													   "      CASE WHEN $6 THEN 0 WHEN EXISTS (SELECT 1 FROM ntask.receipt r "
													   "        WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id "
													   "          AND r.token OPERATOR(pg_catalog.=) t.token) THEN 0 ELSE 1 END, "
													   "    finished_at = pg_catalog.statement_timestamp(), "
													   "    updated_at = pg_catalog.statement_timestamp(), "
													   "    attempt_worker = CASE WHEN $13 AND o.claimed_at IS NOT NULL THEN o.lease_owner END, "
													   "    attempt_detail = CASE WHEN $13 AND o.claimed_at IS NOT NULL THEN $8 END "
													   "  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($12)) "
													   "    AS i(task_id, token, result), ntask.task o "
													   "  WHERE t.task_id OPERATOR(pg_catalog.=) i.task_id "
													   "    AND t.token OPERATOR(pg_catalog.=) i.token "
													   "    AND t.state OPERATOR(pg_catalog.=) 'leased' "
													   "    AND o.task_id OPERATOR(pg_catalog.=) i.task_id AND o.shard OPERATOR(pg_catalog.=) t.shard "
													   "    AND EXISTS (SELECT 1 FROM ntask.queue q "
													   "                WHERE q.queue OPERATOR(pg_catalog.=) t.queue "
													   "                  AND " NTASK_WORKER_RIGHT("q", "11") ") "
													   "  RETURNING t.task_id, t.token, t.state, t.shard, t.attempts, "
													   "    coalesce(o.claimed_at, o.updated_at) AS claimed_at, t.invoked_at, "
													   "    o.lease_owner AS worker, t.queue, o.progress, "
													   "    t.attempt_worker IS NOT NULL AS on_row "
													   "), att AS ( "
													   "  INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker, claimed_at, "
													   "    invoked_at, ended_at, result, requested, error_class, error_stage, "
													   "    outcome_known, outcome, retry_at, detail, progress) "
													   "  SELECT u.task_id, u.shard, u.token, u.attempts, u.worker, u.claimed_at, "
													   "    u.invoked_at, pg_catalog.statement_timestamp(), $3, $3, $4, $5, "
													   "    CASE WHEN $6 THEN true ELSE EXISTS (SELECT 1 FROM ntask.receipt r "
													   "      WHERE r.task_id OPERATOR(pg_catalog.=) u.task_id "
													   "        AND r.token OPERATOR(pg_catalog.=) u.token) END, "
													   "    $7, NULL, $8, u.progress "
													   "  FROM upd u WHERE NOT u.on_row "
													   ") "
													   "SELECT upd.task_id, upd.state, upd.queue FROM upd",
													   TR_MANY_NARGS, SPI_OK_SELECT),
										   NTASK_ROUTED_NONE(tr_many_none), TR_MANY_TYPES);

/*
 * tr_many_pair for answers that stay on the rows (tr_on_row), as
 * tr_apply_row_pair for one: the UPDATE alone, without the ledger CTE and
 * without o; the same nested loop over the sorted arrays, so the rows are
 * locked in task_id order.  A lease without claimed_at does not match and
 * goes through the locked path, as every element this statement did not
 * apply.
 */
static NtaskPair tr_many_row_pair = NTASK_PAIR("transition many on row",
											   NTASK_PLAIN(TR_MANY_NCOLS,
														   "UPDATE ntask.task t SET state = $3, due_at = NULL, "
														   "  lease_owner = NULL, lease_until = NULL, "
														   "  outcome = $7, result = i.result, "
														   "  reason = CASE WHEN $10 "
														   "    THEN coalesce($8 OPERATOR(pg_catalog.->>) 'reason', $9) ELSE $9 END, "
														   "  finished_at = pg_catalog.statement_timestamp(), "
														   "  updated_at = pg_catalog.statement_timestamp(), "
														   "  attempt_worker = t.lease_owner, attempt_detail = $8 "
														   "FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($12)) "
														   "  AS i(task_id, token, result) "
														   "WHERE t.task_id OPERATOR(pg_catalog.=) i.task_id "
														   "  AND t.token OPERATOR(pg_catalog.=) i.token "
														   "  AND t.state OPERATOR(pg_catalog.=) 'leased' "
														   "  AND t.claimed_at IS NOT NULL "
														   "  AND EXISTS (SELECT 1 FROM ntask.queue q "
														   "              WHERE q.queue OPERATOR(pg_catalog.=) t.queue "
														   "                AND " NTASK_WORKER_RIGHT("q", "11") ") "
														   "RETURNING t.task_id, t.state, t.queue",
														   TR_MANY_ARG_RESULTS + 1, SPI_OK_UPDATE_RETURNING),
											   NTASK_ROUTED_NONE(tr_many_none), TR_MANY_TYPES);

/* one ntask_transition call's arguments, after validation */
typedef struct TrCall
{
	int64		task_id;
	int64		token;
	const char *to_state;
	const char *error_class;	/* with defaults filled in */
	const char *outcome;		/* "completed" for a bare succeeded */
	const char *stage;
	Datum		detail;
	bool		detail_null;
	Datum		retry_at;
	bool		retry_at_null;
	Datum		result;			/* jsonb, only with succeeded */
	bool		result_null;
} TrCall;

/*
 * ntask_transition's columns (the finish_* columns of
 * ntask_transition_and_claim), and ntask_transition_many's
 */
typedef enum TrOutCol
{
	TR_OUT_RESULT,
	TR_OUT_STATE,
	TR_OUT_RUN_AT,
	TR_OUT_NCOLS
}			TrOutCol;

typedef enum TrManyOutCol
{
	TR_MANY_OUT_TASK_ID,
	TR_MANY_OUT_RESULT,
	TR_MANY_OUT_STATE,
	TR_MANY_OUT_RUN_AT,
	TR_MANY_OUT_NCOLS
}			TrManyOutCol;

/*
 * ntask_transition_and_claim's columns: ntask_claim's seven, the finish's
 * (TrOutCol), then the claim's context
 */
#define TR_TAC_FINISH	7
#define TR_TAC_NCOLS	(TR_TAC_FINISH + TR_OUT_NCOLS + 1)

/* one transition's answer: the row ntask_transition returns */
typedef struct TrOut
{
	const char *result;			/* applied, duplicate, conflict, stale */
	Datum		state;			/* text */
	Datum		run_at;
	bool		run_at_null;
} TrOut;

static SPITupleTable *tr_apply(TrCall *c, const char *final, TimestampTz next,
							   const char *reason, bool engine_reason, bool full);
static const char *tr_check_args(const char *to_state, const char **error_class,
								 bool has_outcome, bool has_retry_at);
static TimestampTz tr_backoff(int attempt, Interval *base, Interval *max);
static bool tr_same(const char *a, const char *b);

/* tr_result_not_allowed: a result given with a to_state other than succeeded */
static void
tr_result_not_allowed(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ntask: a result is only stored with to_state succeeded")));
}

/*
 * tr_same_result
 *		The result a duplicate succeeded asks to store equals the one stored
 *		(both NULL counts as equal).
 */
static bool
tr_same_result(TrCall *c, Datum stored, bool stored_null)
{
	if (c->result_null || stored_null)
		return c->result_null == stored_null;
	return DatumGetBool(DirectFunctionCall2(jsonb_eq, c->result, stored));
}

/* tr_same: two optional strings are equal (both NULL counts as equal). */
static bool
tr_same(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/*
 * tr_backoff
 *		When the retry after the given attempt (1-based) is due:
 *		statement start + min(base * 2^(attempt-1), max), with equal jitter (half the
 *		delay fixed, half random) unless ntask.backoff_jitter is off.
 */
static TimestampTz
tr_backoff(int attempt, Interval *base, Interval *max)
{
	double		b = (double) NtaskIntervalUsecs(base);
	double		m = (double) NtaskIntervalUsecs(max);
	double		delay = b * pow(2.0, (double) Min(Max(attempt, 1) - 1, 60));

	if (delay > m)
		delay = m;
	if (ntask_backoff_jitter)
		delay = delay / 2.0 + pg_prng_double(&pg_global_prng_state) * delay / 2.0;
	return GetCurrentStatementStartTimestamp() + (int64) delay;
}

/*
 * tr_check_args
 *		Validate to_state and error_class together; fill in the default class
 *		(transient for retry_wait, permanent for repair_required).  Returns
 *		the default reason recorded on the task.  Raises 22023 on nonsense.
 */
static const char *
tr_check_args(const char *to_state, const char **error_class,
			  bool has_outcome, bool has_retry_at)
{
	const char *cls = *error_class;

	if (cls && strcmp(cls, "transient") != 0 && strcmp(cls, "permanent") != 0 &&
		strcmp(cls, "unknown") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: unknown error_class \"%s\"", cls),
				 errhint("Use transient, permanent or unknown.")));
	if (has_outcome && strcmp(to_state, "succeeded") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: outcome is only recorded for to_state succeeded")));
	if (has_retry_at && strcmp(to_state, "retry_wait") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: retry_at is only allowed with to_state retry_wait")));

	if (strcmp(to_state, "retry_wait") == 0)
	{
		if (cls == NULL)
			*error_class = "transient";
		else if (strcmp(cls, "permanent") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: a permanent error is not retried"),
					 errhint("Use to_state repair_required for permanent errors.")));
		return NULL;
	}
	if (strcmp(to_state, "repair_required") == 0)
	{
		if (cls == NULL)
			*error_class = "permanent";
		return strcmp(*error_class, "permanent") == 0 ? "permanent_error"
			: "worker_requested";
	}
	if (strcmp(to_state, "succeeded") == 0 || strcmp(to_state, "canceled") == 0 ||
		strcmp(to_state, "skipped") == 0)
	{
		if (cls != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: error_class is not allowed with to_state %s",
							to_state)));
		return strcmp(to_state, "succeeded") == 0 ? NULL : "worker";
	}
	if (strcmp(to_state, "ready") == 0 || strcmp(to_state, "leased") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s is not a transition target", to_state),
				 errhint("A worker ends an attempt with succeeded, retry_wait, repair_required, canceled or skipped.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ntask: unknown task state \"%s\"", to_state),
			 errhint("A worker ends an attempt with succeeded, retry_wait, repair_required, canceled or skipped.")));
	pg_unreachable();
}

/*
 * tr_apply
 *		Run tr_apply_pair: close the attempt and move the task to final, but
 *		only if token still holds the lease (the statement is conditional, so
 *		it is safe without a prior lock).  Returns its result if it applied
 *		(TrApplyCol's columns first), else NULL; the lease's end is
 *		noted for the queue's capped waiting claims (its slot is free).
 *		has_next: final is retry_wait and next is its run_at.  An answer
 *		that stays on the row (tr_on_row) runs tr_apply_row_pair, which
 *		does not match a lease without claimed_at, unless full (the locked
 *		path, which must apply what it locked).
 */
/*
 * tr_attempt_args
 *		The four parameters both transition statements take in a row:
 *		error_class, error_stage, "the outcome is known" (error_class is not
 *		unknown) and outcome, into values[0..3] / nulls[0..3]
 *		(TrAttemptArg).
 */
typedef enum TrAttemptArg
{
	TR_ATTEMPT_ARG_ERROR_CLASS,
	TR_ATTEMPT_ARG_STAGE,
	TR_ATTEMPT_ARG_KNOWN,
	TR_ATTEMPT_ARG_OUTCOME,
	TR_ATTEMPT_NARGS
} TrAttemptArg;

StaticAssertDecl(TR_APPLY_ARG_RETRY_AT - TR_APPLY_ARG_ATTEMPT == TR_ATTEMPT_NARGS &&
				 TR_MANY_ARG_DETAIL - TR_MANY_ARG_ATTEMPT == TR_ATTEMPT_NARGS,
				 "the attempt's parameters take TR_ATTEMPT_NARGS places");

static void
tr_attempt_args(TrCall *c, Datum *values, char *nulls)
{
	values[TR_ATTEMPT_ARG_ERROR_CLASS] =
		c->error_class ? CStringGetTextDatum(c->error_class) : (Datum) 0;
	nulls[TR_ATTEMPT_ARG_ERROR_CLASS] = c->error_class ? ' ' : 'n';
	values[TR_ATTEMPT_ARG_STAGE] = c->stage ? CStringGetTextDatum(c->stage) : (Datum) 0;
	nulls[TR_ATTEMPT_ARG_STAGE] = c->stage ? ' ' : 'n';
	values[TR_ATTEMPT_ARG_KNOWN] = BoolGetDatum(c->error_class == NULL ||
												strcmp(c->error_class, "unknown") != 0);
	nulls[TR_ATTEMPT_ARG_KNOWN] = ' ';
	values[TR_ATTEMPT_ARG_OUTCOME] = c->outcome ? CStringGetTextDatum(c->outcome) : (Datum) 0;
	nulls[TR_ATTEMPT_ARG_OUTCOME] = c->outcome ? ' ' : 'n';
}

/*
 * tr_apply_ledger: tr_apply_pair's routed after step, the ledger row of the
 * moved task, from the moved row where its columns come from it, else
 * from the statement's parameters
 */
static void
tr_apply_ledger(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	static const int from_row[TR_LEDGER_NARGS] = {
		[TR_LEDGER_ARG_TASK_ID] = TR_APPLY_DIST_TASK_ID,
		[TR_LEDGER_ARG_SHARD] = TR_APPLY_DIST_SHARD,
		[TR_LEDGER_ARG_TOKEN] = TR_APPLY_DIST_TOKEN,
		[TR_LEDGER_ARG_ATTEMPT] = TR_APPLY_DIST_ATTEMPTS,
		[TR_LEDGER_ARG_WORKER] = TR_APPLY_DIST_WORKER,
		[TR_LEDGER_ARG_CLAIMED_AT] = TR_APPLY_DIST_CLAIMED_AT,
		[TR_LEDGER_ARG_INVOKED_AT] = TR_APPLY_DIST_INVOKED_AT,
		[TR_LEDGER_ARG_KNOWN] = TR_APPLY_DIST_KNOWN,
		[TR_LEDGER_ARG_PROGRESS] = TR_APPLY_DIST_PROGRESS,
	};

	/* a TR_APPLY_ARG_ + 1 (0: none) */
	static const int from_args[TR_LEDGER_NARGS] = {
		[TR_LEDGER_ARG_ENDED_AT] = TR_APPLY_ARG_NOW + 1,
		[TR_LEDGER_ARG_RESULT] = TR_APPLY_ARG_STATE + 1,
		[TR_LEDGER_ARG_REQUESTED] = TR_APPLY_ARG_REQUESTED + 1,
		[TR_LEDGER_ARG_ERROR_CLASS] = TR_APPLY_ARG_ATTEMPT + TR_ATTEMPT_ARG_ERROR_CLASS + 1,
		[TR_LEDGER_ARG_ERROR_STAGE] = TR_APPLY_ARG_ATTEMPT + TR_ATTEMPT_ARG_STAGE + 1,
		[TR_LEDGER_ARG_OUTCOME] = TR_APPLY_ARG_ATTEMPT + TR_ATTEMPT_ARG_OUTCOME + 1,
		[TR_LEDGER_ARG_RETRY_AT] = TR_APPLY_ARG_RETRY_AT + 1,
		[TR_LEDGER_ARG_DETAIL] = TR_APPLY_ARG_DETAIL + 1,
	};
	Datum		av[TR_LEDGER_NARGS];
	char		an[TR_LEDGER_NARGS];
	int			i;

	if (n != 1 || NtaskTupGetBool(tt, 0, TR_APPLY_DIST_ON_ROW))
		return;
	for (i = 0; i < TR_LEDGER_NARGS; i++)
	{
		bool		isnull = false;

		av[i] = (Datum) 0;
		if (from_row[i] != 0)
			av[i] = NtaskTupGetDatum(tt, 0, from_row[i], &isnull);
		else if (from_args[i] != 0)
		{
			av[i] = values[from_args[i] - 1];
			isnull = nulls[from_args[i] - 1] == 'n';
		}
		an[i] = isnull ? 'n' : ' ';
	}
	NtaskExecPlan(&tr_attempt_insert_plan, av, an, SPI_OK_INSERT);
}

/*
 * tr_on_row
 *		Whether the attempt this call ends may stay on the task row instead
 *		of a ledger row (docs/design.md "The last
 *		attempt on the task row"): the holder's own final answer (succeeded,
 *		canceled, skipped, as asked), whose ledger row would hold nothing
 *		the moved row does not: no error class or stage, the outcome known,
 *		no retry_at.  The statements also need the leased row's claimed_at
 *		(NULL only on a lease taken before 1.0.0's claimed_at).  Off with
 *		the test-only setting ntask.attempt_on_row.
 */
static bool
tr_on_row(TrCall *c, const char *final)
{
	if (!ntask_attempt_on_row)
		return false;
	if (strcmp(final, c->to_state) != 0)
		return false;
	if (strcmp(final, "succeeded") != 0 && strcmp(final, "canceled") != 0 &&
		strcmp(final, "skipped") != 0)
		return false;
	return c->error_class == NULL && c->stage == NULL && c->retry_at_null;
}

static SPITupleTable *
tr_apply(TrCall *c, const char *final, TimestampTz next, const char *reason,
		 bool engine_reason, bool full)
{
	Datum		values[TR_APPLY_NARGS];
	char		nulls[TR_APPLY_NARGS];
	SPITupleTable *row;
	bool		on_row = tr_on_row(c, final);

	memset(nulls, ' ', sizeof(nulls));
	values[TR_APPLY_ARG_TASK_ID] = Int64GetDatum(c->task_id);
	values[TR_APPLY_ARG_TOKEN] = Int64GetDatum(c->token);
	values[TR_APPLY_ARG_STATE] = CStringGetTextDatum(final);
	values[TR_APPLY_ARG_REQUESTED] = CStringGetTextDatum(c->to_state);
	tr_attempt_args(c, &values[TR_APPLY_ARG_ATTEMPT], &nulls[TR_APPLY_ARG_ATTEMPT]);
	values[TR_APPLY_ARG_RETRY_AT] = c->retry_at;
	nulls[TR_APPLY_ARG_RETRY_AT] = c->retry_at_null ? 'n' : ' ';
	values[TR_APPLY_ARG_DETAIL] = c->detail;
	nulls[TR_APPLY_ARG_DETAIL] = c->detail_null ? 'n' : ' ';
	values[TR_APPLY_ARG_NEXT] = TimestampTzGetDatum(next);
	nulls[TR_APPLY_ARG_NEXT] = strcmp(final, "retry_wait") == 0 ? ' ' : 'n';
	values[TR_APPLY_ARG_REASON] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[TR_APPLY_ARG_REASON] = reason ? ' ' : 'n';
	/* detail->>'reason' may name why, unless ntask enforced the budget */
	values[TR_APPLY_ARG_DETAIL_REASON] = BoolGetDatum(reason != NULL && !engine_reason);
	values[TR_APPLY_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	values[TR_APPLY_ARG_RESULT] = c->result;
	nulls[TR_APPLY_ARG_RESULT] = c->result_null ? 'n' : ' ';
	values[TR_APPLY_ARG_NOW] = NtaskStatementTs();
	values[TR_APPLY_ARG_ON_ROW] = BoolGetDatum(on_row);
	if (NtaskExecPair(on_row && !full ? &tr_apply_row_pair : &tr_apply_pair,
					  values, nulls) != 1)
		return NULL;
	row = SPI_tuptable;
	/* its slot is free: a claim waiting on the queue's cap may go */
	NtaskWakeCappedAtCommit(NtaskTupGetCString(row, 0, TR_APPLY_QUEUE), 1);
	return row;
}

/*
 * tr_init
 *		Fill c's attempt-independent fields from the call's arguments, given
 *		their positions, and validate them (a_result < 0: the call has no
 *		result argument; it is NULL).  Returns the default reason.
 */
static const char *
tr_init(TrCall *c, FunctionCallInfo fcinfo, int a_to_state, int a_error_class,
		int a_detail, int a_retry_at, int a_outcome, int a_stage, int a_result)
{
	const char *reason;

	c->to_state = text_to_cstring(NtaskArgText(fcinfo, a_to_state, "to_state", 64));
	c->error_class = PG_ARGISNULL(a_error_class) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, a_error_class, "error_class", 64));
	c->detail_null = PG_ARGISNULL(a_detail);
	c->detail = c->detail_null ? (Datum) 0 : PG_GETARG_DATUM(a_detail);
	c->retry_at_null = PG_ARGISNULL(a_retry_at);
	c->retry_at = c->retry_at_null ? (Datum) 0 : PG_GETARG_DATUM(a_retry_at);
	c->outcome = PG_ARGISNULL(a_outcome) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, a_outcome, "outcome", NTASK_MAX_NAME_LEN));
	c->stage = PG_ARGISNULL(a_stage) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, a_stage, "error_stage", NTASK_MAX_NAME_LEN));

	c->result_null = true;
	c->result = a_result < 0 ? (Datum) 0 :
		NtaskArgResult(fcinfo, a_result, &c->result_null);

	reason = tr_check_args(c->to_state, &c->error_class, c->outcome != NULL,
						   !c->retry_at_null);
	if (a_result >= 0 && !PG_ARGISNULL(a_result) &&
		strcmp(c->to_state, "succeeded") != 0)
		tr_result_not_allowed();
	if (!c->retry_at_null && TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(c->retry_at)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: retry_at must be a finite timestamp")));
	if (strcmp(c->to_state, "succeeded") == 0 && c->outcome == NULL)
		c->outcome = "completed";
	return reason;
}

/*
 * tr_answer
 *		Fill *o from row 0 of tt: its state from column state_col and its
 *		run_at from run_at_col, copied into the current memory context;
 *		result (may be NULL: set later).  tt is freed, so a batch of many
 *		elements does not keep one SPI result per statement until the end.
 */
static void
tr_answer(TrOut *o, const char *result, SPITupleTable *tt, int state_col,
		  int run_at_col)
{
	bool		isnull;

	o->result = result;
	o->state = datumCopy(NtaskTupGetDatum(tt, 0, state_col, &isnull), false, -1);
	o->run_at = NtaskTupGetDatum(tt, 0, run_at_col, &o->run_at_null);	/* by value */
	SPI_freetuptable(tt);
}

/*
 * tr_locked
 *		The classifying path of one transition: lock the task row, then
 *		apply (a retry_wait decided against the budget of the locked row, or
 *		any to_state whose conditional statement did not match before the
 *		lock but matches now) or classify the call as duplicate, conflict or
 *		stale.  Raises P0002 for an unknown task, NT003 for a token never
 *		issued, 42501 without the queue's worker_role.  *o is copied out of
 *		the SPI results, which are freed.
 */
static void
tr_locked(TrCall *c, const char *reason, TrOut *o)
{
	Datum		values[TR_LOCK_NARGS];
	Datum		lookup[TR_LOOKUP_NARGS];
	bool		isnull;
	char	   *state;
	int64		current;
	SPITupleTable *lock_tt;
	SPITupleTable *applied;
	Datum		stored;
	bool		stored_null;

	values[TR_LOCK_ARG_TASK_ID] = Int64GetDatum(c->task_id);
	values[TR_LOCK_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	if (NtaskExecPair(&tr_lock_plan, values, NULL) == 0)
		NtaskTaskNotFound(c->task_id);
	lock_tt = SPI_tuptable;
	if (!NtaskTupGetBool(lock_tt, 0, TR_LOCK_RIGHT))
		NtaskTaskRightDenied(c->task_id);
	lookup[TR_LOOKUP_ARG_TASK_ID] = Int64GetDatum(c->task_id);
	lookup[TR_LOOKUP_ARG_TOKEN] = Int64GetDatum(c->token);
	state = NtaskTupGetCString(lock_tt, 0, TR_LOCK_STATE);
	current = NtaskTupGetInt64(lock_tt, 0, TR_LOCK_TOKEN);
	NtaskCheckTokenIssued(c->task_id, c->token, current);

	if (c->token == current && strcmp(state, "leased") == 0)
	{
		const char *final = c->to_state;
		TimestampTz next = 0;
		bool		engine_reason = false;

		if (strcmp(c->to_state, "retry_wait") == 0)
		{
			/* a retry_wait, decided against the budget of the locked row */
			int32		attempts = NtaskTupGetInt32(lock_tt, 0, TR_LOCK_ATTEMPTS);
			int32		max_attempts = NtaskTupGetInt32(lock_tt, 0, TR_LOCK_MAX_ATTEMPTS);
			TimestampTz deadline = DatumGetTimestampTz(NtaskTupGetDatum(lock_tt, 0, TR_LOCK_DEADLINE, &isnull));
			TimestampTz now = GetCurrentStatementStartTimestamp();

			if (!c->retry_at_null)
				next = Max(DatumGetTimestampTz(c->retry_at), now);
			else
				next = tr_backoff(attempts,
								  DatumGetIntervalP(NtaskTupGetDatum(lock_tt, 0, TR_LOCK_BACKOFF_BASE, &isnull)),
								  DatumGetIntervalP(NtaskTupGetDatum(lock_tt, 0, TR_LOCK_BACKOFF_MAX, &isnull)));
			if (attempts >= max_attempts)
			{
				final = "repair_required";
				reason = "budget_exhausted";
				engine_reason = true;
			}
			else if (next >= deadline)
			{
				final = "repair_required";
				reason = "deadline_exceeded";
				engine_reason = true;
			}
		}
		if (strcmp(final, "retry_wait") == 0)
			NtaskWakeWaitersAtCommit(NtaskTupGetCString(lock_tt, 0, TR_LOCK_QUEUE), 0, next);
		applied = tr_apply(c, final, next, reason, engine_reason, true);
		if (applied == NULL)
			elog(ERROR, "ntask: locked task %lld did not take its transition",
				 (long long) c->task_id);
		tr_answer(o, "applied", applied, TR_APPLY_STATE, TR_APPLY_RUN_AT);
		SPI_freetuptable(lock_tt);
		return;
	}

	o->state = datumCopy(NtaskTupGetDatum(lock_tt, 0, TR_LOCK_STATE, &isnull), false, -1);
	o->run_at = NtaskTupGetDatum(lock_tt, 0, TR_LOCK_RUN_AT, &o->run_at_null);	/* by value */
	stored = NtaskTupGetDatum(lock_tt, 0, TR_LOCK_RESULT, &stored_null);
	if (NtaskExecPair(&tr_attempt_plan, lookup, NULL) == 1 &&
		NtaskTupGetText(SPI_tuptable, 0, TR_ATTEMPT_REQUESTED) != NULL)
	{
		char	   *req = NtaskTupGetCString(SPI_tuptable, 0, TR_ATTEMPT_REQUESTED);
		char	   *cls = NtaskTupGetCString(SPI_tuptable, 0, TR_ATTEMPT_ERROR_CLASS);
		char	   *outc = NtaskTupGetCString(SPI_tuptable, 0, TR_ATTEMPT_OUTCOME);

		/*
		 * A succeeded of the task's current token stored its result on the
		 * task: a repeat must ask for the same result to be a duplicate.
		 */
		if (strcmp(req, c->to_state) == 0 &&
			tr_same(cls, c->error_class) && tr_same(outc, c->outcome) &&
			(strcmp(c->to_state, "succeeded") != 0 || c->token != current ||
			 tr_same_result(c, stored, stored_null)))
			o->result = "duplicate";
		else
			o->result = "conflict";
	}
	else
		o->result = "stale";
	SPI_freetuptable(SPI_tuptable);
	SPI_freetuptable(lock_tt);
}

/*
 * tr_one
 *		One transition, inside the caller's SPI connection: the conditional
 *		statement first (every to_state but retry_wait, whose effect depends
 *		on the budget), else the locked path.
 */
static void
tr_one(TrCall *c, const char *reason, TrOut *o)
{
	SPITupleTable *applied;

	if (strcmp(c->to_state, "retry_wait") != 0 &&
		(applied = tr_apply(c, c->to_state, 0, reason, false, false)) != NULL)
	{
		tr_answer(o, "applied", applied, TR_APPLY_STATE, TR_APPLY_RUN_AT);
		return;
	}
	tr_locked(c, reason, o);
}

/*
 * ntask_transition(task_id, token, to_state, error_class, detail, retry_at,
 *					outcome, error_stage, result)
 *		RETURNS TABLE(result text, state text, run_at timestamptz)
 *
 * One row: result is applied, duplicate, conflict or stale (see the file
 * header); state and run_at are the task's after the call.  Either way the
 * task row lock is held until the caller's transaction ends.
 */
Datum
ntask_transition(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TrCall		c;
	TrOut		o;
	const char *reason;
	Datum		out[TR_OUT_NCOLS];
	bool		outnulls[TR_OUT_NCOLS] = {false, false, false};

	c.task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	c.token = NtaskArgInt64(fcinfo, 1, "token");
	reason = tr_init(&c, fcinfo, 2, 3, 4, 5, 6, 7, 8);
	/* on a Citus coordinator, its _on form delegated (coord.c) */
	if (NtaskCoordDelegate(fcinfo, NTASK_ID_SHARD(c.task_id), NULL, -1, &out[0]))
		return (Datum) 0;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	(void) NtaskDirectBegin(fcinfo, &c.task_id, 1);
	tr_one(&c, reason, &o);
	NtaskDirectEnd();
	out[TR_OUT_RESULT] = CStringGetTextDatum(o.result);
	out[TR_OUT_STATE] = o.state;
	out[TR_OUT_RUN_AT] = o.run_at;
	outnulls[TR_OUT_RUN_AT] = o.run_at_null;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	SPI_finish();
	return (Datum) 0;
}

/* one element of an ntask_transition_many call */
typedef struct TrItem
{
	int64		task_id;
	int64		token;
	int			pos;			/* in the input arrays */
	Datum		result;			/* results[pos] */
	bool		result_null;
	bool		done;			/* o is filled in */
	TrOut		o;
} TrItem;

/* tr_item_cmp: qsort order of TrItems, by task_id */
static int
tr_item_cmp(const void *a, const void *b)
{
	int64		x = ((const TrItem *) a)->task_id;
	int64		y = ((const TrItem *) b)->task_id;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * tr_many_apply
 *		The conditional statement of a batch (to_state is not retry_wait):
 *		every item whose token still holds its lease is applied at once;
 *		those get done = true.  items are sorted by task_id.  The leases
 *		that ended are noted per queue for the queues' capped waiting
 *		claims: once per run of rows of one queue (a batch is usually of
 *		one queue), not once per row.
 */
static void
tr_many_apply(TrCall *c, const char *reason, TrItem *items, int n)
{
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *toks = palloc(sizeof(Datum) * n);
	Datum	   *res = palloc(sizeof(Datum) * n);
	bool	   *resnulls = palloc(sizeof(bool) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	Datum		values[TR_MANY_NARGS];
	char		nulls[TR_MANY_NARGS];
	int			nrows;
	int			i;
	int			r;
	bool		on_row;
	text	   *run_queue = NULL;	/* the queue of the current run of rows */
	int			run_len = 0;
	SPITupleTable *tt;

	for (i = 0; i < n; i++)
	{
		ids[i] = Int64GetDatum(items[i].task_id);
		toks[i] = Int64GetDatum(items[i].token);
		res[i] = items[i].result;
		resnulls[i] = items[i].result_null;
	}
	memset(nulls, ' ', sizeof(nulls));
	values[TR_MANY_ARG_TASK_IDS] = NtaskInt8Array(ids, n);
	values[TR_MANY_ARG_TOKENS] = NtaskInt8Array(toks, n);
	values[TR_MANY_ARG_STATE] = CStringGetTextDatum(c->to_state);
	tr_attempt_args(c, &values[TR_MANY_ARG_ATTEMPT], &nulls[TR_MANY_ARG_ATTEMPT]);
	values[TR_MANY_ARG_DETAIL] = c->detail;
	nulls[TR_MANY_ARG_DETAIL] = c->detail_null ? 'n' : ' ';
	values[TR_MANY_ARG_REASON] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[TR_MANY_ARG_REASON] = reason ? ' ' : 'n';
	values[TR_MANY_ARG_DETAIL_REASON] = BoolGetDatum(reason != NULL);
	values[TR_MANY_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	values[TR_MANY_ARG_RESULTS] =
		PointerGetDatum(construct_md_array(res, resnulls, 1, dims, lbs,
										   JSONBOID, -1, false,
										   TYPALIGN_INT));
	on_row = tr_on_row(c, c->to_state);
	values[TR_MANY_ARG_ON_ROW] = BoolGetDatum(on_row);
	nrows = NtaskExecPair(on_row ? &tr_many_row_pair : &tr_many_pair, values, nulls);
	tt = SPI_tuptable;

	for (r = 0; r < nrows; r++)
	{
		TrItem		key;
		TrItem	   *it;
		text	   *queue = NtaskTupGetText(tt, r, TR_MANY_QUEUE);

		if (run_queue == NULL ||
			VARSIZE_ANY_EXHDR(queue) != VARSIZE_ANY_EXHDR(run_queue) ||
			memcmp(VARDATA_ANY(queue), VARDATA_ANY(run_queue),
				   VARSIZE_ANY_EXHDR(queue)) != 0)
		{
			if (run_queue != NULL)
				NtaskWakeCappedAtCommit(text_to_cstring(run_queue), run_len);
			run_queue = queue;
			run_len = 0;
		}
		run_len++;

		key.task_id = NtaskTupGetInt64(tt, r, TR_MANY_TASK_ID);
		it = bsearch(&key, items, n, sizeof(TrItem), tr_item_cmp);
		if (it == NULL)
			elog(ERROR, "ntask: transition of task %lld that was not asked for",
				 (long long) key.task_id);
		it->done = true;
		it->o.result = "applied";
		it->o.state = PointerGetDatum(NtaskTupGetText(tt, r, TR_MANY_STATE));
		it->o.run_at = (Datum) 0;
		it->o.run_at_null = true;	/* a finished task has no next run */
	}
	if (run_queue != NULL)
		NtaskWakeCappedAtCommit(text_to_cstring(run_queue), run_len);
}

/*
 * tr_many_results
 *		The results argument of ntask_transition_many at argno: NULL (returns
 *		0), or an array as long as the batch whose elements may be NULL,
 *		each within ntask.max_result_bytes, only with to_state succeeded.
 *		Returns the number of elements.
 */
static int
tr_many_results(FunctionCallInfo fcinfo, int argno, int n, const char *to_state,
				Datum **elems, bool **nulls)
{
	int			i;

	if (PG_ARGISNULL(argno))
		return 0;
	if (strcmp(to_state, "succeeded") != 0)
		tr_result_not_allowed();
	if (NtaskArgArray(fcinfo, argno, "results", JSONBOID, true, elems, nulls) != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: results must be NULL or as long as task_ids")));
	for (i = 0; i < n; i++)
	{
		if ((*nulls)[i])
			continue;
		(*elems)[i] = PointerGetDatum(PG_DETOAST_DATUM((*elems)[i]));
		NtaskCheckResult(DatumGetJsonbP((*elems)[i]), i + 1);
	}
	return n;
}

/*
 * ntask_transition_many(task_ids, tokens, to_state, error_class, detail,
 *						 retry_at, outcome, error_stage, results)
 *		RETURNS TABLE(task_id bigint, result text, state text,
 *					  run_at timestamptz)
 *
 * ntask_transition for each (task_ids[i], tokens[i]) with the same
 * to_state and arguments, in one call: one row per element, in input
 * order, with exactly the result ntask_transition would give.  The tasks
 * are locked in task_id order (two batches never deadlock on each other).
 * For every to_state but retry_wait the tasks whose token still holds the
 * lease are applied by one statement; the rest, and every element of a
 * retry_wait batch (its budget and backoff are per task), go one by one
 * through ntask_transition's locked path.
 *
 * Errors: a NULL array or element 22004; arrays of different lengths,
 * more than one dimension, more than NTASK_MAX_BATCH elements, or a
 * task_id given twice 22023; and any error ntask_transition raises for one
 * element (unknown task P0002, token never issued NT003, no right 42501),
 * which fails the whole call.
 */
Datum
ntask_transition_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TrCall		c;
	const char *reason;
	Datum	   *ids;
	Datum	   *toks;
	int			n;
	TrItem	   *items;
	TrItem	  **byPos;
	Datum	   *resd = NULL;
	bool	   *resnull = NULL;
	int			nres;
	int			i;

	n = NtaskArgArray(fcinfo, 0, "task_ids", INT8OID, false, &ids, NULL);
	if (NtaskArgArray(fcinfo, 1, "tokens", INT8OID, false, &toks, NULL) != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: task_ids and tokens must have the same length")));
	reason = tr_init(&c, fcinfo, 2, 3, 4, 5, 6, 7, -1);
	nres = tr_many_results(fcinfo, 8, n, c.to_state, &resd, &resnull);

	items = palloc0(sizeof(TrItem) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		items[i].task_id = DatumGetInt64(ids[i]);
		items[i].token = DatumGetInt64(toks[i]);
		items[i].pos = i;
		items[i].result_null = nres == 0 || resnull[i];
		items[i].result = items[i].result_null ? (Datum) 0 : resd[i];
	}
	qsort(items, n, sizeof(TrItem), tr_item_cmp);
	for (i = 1; i < n; i++)
		if (items[i].task_id == items[i - 1].task_id)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: task %lld appears more than once in task_ids",
							(long long) items[i].task_id),
					 errdetail("Each element of a batch ends one attempt; an attempt ends once.")));

	/* on a Citus coordinator, its _on form delegated (coord.c) */
	{
		const char *why = n == 0 ? "an empty batch" : NULL;
		Datum		d;

		for (i = 1; i < n && why == NULL; i++)
			if (NTASK_ID_SHARD(items[i].task_id) != NTASK_ID_SHARD(items[0].task_id))
				why = "tasks of several shard values";
		if (NtaskCoordDelegate(fcinfo, n > 0 ? NTASK_ID_SHARD(items[0].task_id) : -1,
							   why, -1, &d))
			return d;
	}

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	{
		int64	   *tids = palloc(sizeof(int64) * Max(n, 1));

		for (i = 0; i < n; i++)
			tids[i] = items[i].task_id;
		(void) NtaskDirectBegin(fcinfo, tids, n);
	}

	/*
	 * One statement for the batch (none routed: tr_many_pair; one per shard
	 * value on the direct path, each on its group's relations: the items
	 * are sorted by task_id, so a shard value's are a run), then the rest
	 * one by one, each on its task's group
	 */
	if (n > 0 && strcmp(c.to_state, "retry_wait") != 0)
	{
		if (NtaskCallPath() == NTASK_PATH_DIRECT)
		{
			int			j;

			for (i = 0; i < n; i = j)
			{
				int16		shard = NTASK_ID_SHARD(items[i].task_id);

				for (j = i + 1; j < n && NTASK_ID_SHARD(items[j].task_id) == shard; j++)
					;
				NtaskDirectUseShard(shard);
				tr_many_apply(&c, reason, items + i, j - i);
			}
		}
		else
			tr_many_apply(&c, reason, items, n);
	}
	for (i = 0; i < n; i++)
	{
		if (items[i].done)
			continue;
		NtaskDirectUseShard(NTASK_ID_SHARD(items[i].task_id));
		c.task_id = items[i].task_id;
		c.token = items[i].token;
		c.result = items[i].result;
		c.result_null = items[i].result_null;
		tr_locked(&c, reason, &items[i].o);
		items[i].done = true;
	}
	NtaskDirectEnd();

	byPos = palloc(sizeof(TrItem *) * Max(n, 1));
	for (i = 0; i < n; i++)
		byPos[items[i].pos] = &items[i];
	for (i = 0; i < n; i++)
	{
		TrItem	   *it = byPos[i];
		Datum		out[TR_MANY_OUT_NCOLS];
		bool		outnulls[TR_MANY_OUT_NCOLS] = {false, false, false, false};

		out[TR_MANY_OUT_TASK_ID] = Int64GetDatum(it->task_id);
		out[TR_MANY_OUT_RESULT] = CStringGetTextDatum(it->o.result);
		out[TR_MANY_OUT_STATE] = it->o.state;
		out[TR_MANY_OUT_RUN_AT] = it->o.run_at;
		outnulls[TR_MANY_OUT_RUN_AT] = it->o.run_at_null;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * ntask_transition_and_claim(finish_task_id, finish_token, to_state, queue,
 *							  worker, max_tasks, outcome, error_class,
 *							  detail, retry_at, error_stage, lease, result)
 *		RETURNS TABLE(ntask_claim's columns, finish_result text,
 *					  finish_state text, finish_run_at timestamptz)
 *
 * A worker's loop in one round trip and one commit: ntask_transition of
 * the task it holds, then ntask_claim of the next ones.  Every row carries
 * the transition's answer (finish_*), and when nothing was claimed there
 * is still one row, with the claim's columns NULL, so the answer is never
 * lost.  The claim runs whatever the answer (a stale or conflicting finish
 * says nothing about the next task), and the answer is on every row it
 * hands out.  An error of either half (bad arguments, unknown task,
 * unknown queue, ...) fails the whole call: nothing is finished and
 * nothing claimed.
 */
Datum
ntask_transition_and_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TrCall		c;
	TrOut		o;
	const char *reason;
	ClaimCall	cc;
	Datum		extra[TR_OUT_NCOLS];
	bool		extranulls[TR_OUT_NCOLS] = {false, false, false};

	c.task_id = NtaskArgInt64(fcinfo, 0, "finish_task_id");
	c.token = NtaskArgInt64(fcinfo, 1, "finish_token");
	NtaskClaimCallInit(&cc, fcinfo, rsinfo, 3, 4, 5, 11);
	reason = tr_init(&c, fcinfo, 2, 7, 8, 9, 6, 10, 12);
	/* on a Citus coordinator, its _on form delegated (coord.c) */
	if (NtaskCoordClaim(fcinfo, NTASK_ID_SHARD(c.task_id), 3,
						cc.max_tasks > 1 ? "a claim of more than one task" : NULL))
		return (Datum) 0;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	/* the direct path for a queue this backend found fit for it (shard.c) */
	(void) NtaskDirectBeginUnless(fcinfo, &c.task_id, 1,
								  NtaskClaimFitsDirect(cc.queue) ? NULL :
								  "the claim's queue is not known to fit the direct path");
	tr_one(&c, reason, &o);
	NtaskDirectClaimAfter();
	extra[TR_OUT_RESULT] = CStringGetTextDatum(o.result);
	extra[TR_OUT_STATE] = o.state;
	extra[TR_OUT_RUN_AT] = o.run_at;
	extranulls[TR_OUT_RUN_AT] = o.run_at_null;
	cc.extra = extra;
	cc.extranulls = extranulls;
	cc.nextra = TR_OUT_NCOLS;
	if (NtaskClaimInto(&cc) == 0)
	{
		Datum		out[TR_TAC_NCOLS];
		bool		outnulls[TR_TAC_NCOLS];
		int			k;

		/* no task: the claim's columns NULL, the finish's as they are */
		for (k = 0; k < TR_TAC_NCOLS; k++)
		{
			out[k] = (Datum) 0;
			outnulls[k] = true;
		}
		for (k = 0; k < TR_OUT_NCOLS; k++)
		{
			out[TR_TAC_FINISH + k] = extra[k];
			outnulls[TR_TAC_FINISH + k] = extranulls[k];
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	NtaskDirectEnd();
	SPI_finish();
	return (Datum) 0;
}

/*
 * ntask.task_row_valid(state, due_at, lease_owner
 *					   [, on_parent_failed, attempt_worker]) RETURNS boolean
 *
 * The state machine's row invariants, as one CHECK constraint of
 * ntask.task: state is one of the eight states; due_at is NULL exactly
 * for the finished states and waiting (for parents); lease_owner is set
 * exactly while leased; with five arguments (1.1's function, the last
 * two defaulting to NULL; 1.0's SQL function passes three) also
 * on_parent_failed NULL, wait or cancel, and attempt_worker (the attempt
 * kept on the row, issue 48) set only when succeeded, canceled or
 * skipped: the two SQL CHECKs of 1.1 folded in, for the same reason,
 * about 3.5% of a drained task's backend CPU (docs/performance.md).  In C
 * because a CHECK constraint's expression is read back from its stored
 * node tree by every statement that writes the table: the three SQL
 * CHECKs this replaces (IN lists of text constants, 3.7 kB of node text)
 * were 5.7% of the CPU of an enqueue under pgbench (perf), this call's
 * tree is three Vars.
 */
PG_FUNCTION_INFO_V1(ntask_task_row_valid);

Datum
ntask_task_row_valid(PG_FUNCTION_ARGS)
{
	static const char *const states[] = {
		"ready", "leased", "retry_wait", "succeeded", "repair_required",
		"canceled", "skipped", "awaiting", "waiting"
	};
	text	   *t;
	int			len;
	int			i;
	int			which = -1;
	bool		finished;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	t = PG_GETARG_TEXT_PP(0);
	len = VARSIZE_ANY_EXHDR(t);
	for (i = 0; i < (int) lengthof(states); i++)
		if ((int) strlen(states[i]) == len &&
			memcmp(VARDATA_ANY(t), states[i], len) == 0)
			which = i;
	if (which < 0)
		PG_RETURN_BOOL(false);

	/*
	 * finished: succeeded .. skipped (3..6); awaiting (7): due_at is its
	 * timeout, NULL without one; waiting (8, for parents, 36.1): unfinished
	 * but due never, in no claim index
	 */
	finished = (which >= 3 && which <= 6) || which == 8;
	if (!((which == 7 || PG_ARGISNULL(1) == finished) &&
		  (which == 1) == !PG_ARGISNULL(2)))
		PG_RETURN_BOOL(false);
	if (PG_NARGS() < 5)
		PG_RETURN_BOOL(true);
	/* on_parent_failed: NULL, wait or cancel */
	if (!PG_ARGISNULL(3))
	{
		text	   *p = PG_GETARG_TEXT_PP(3);
		int			plen = VARSIZE_ANY_EXHDR(p);

		if (!((plen == 4 && memcmp(VARDATA_ANY(p), "wait", 4) == 0) ||
			  (plen == 6 && memcmp(VARDATA_ANY(p), "cancel", 6) == 0)))
			PG_RETURN_BOOL(false);
	}
	/* attempt_worker: only on a succeeded, canceled or skipped task */
	PG_RETURN_BOOL(PG_ARGISNULL(4) || which == 3 || which == 5 || which == 6);
}
