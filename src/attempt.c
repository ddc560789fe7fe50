/*-------------------------------------------------------------------------
 *
 * attempt.c
 *	  Attempts and the ledger: closing a task's open attempt when its lease
 *	  expired (NtaskCloseExpiredAttempts: claim takeover and housekeeping)
 *	  and finishing a locked task (NtaskFinishTask: the claim's guard,
 *	  cancel, saga compensation).
 *
 * The ledger (ntask.attempt) is write-once: an attempt's row is written
 * when the attempt ends, from the task row, which holds the open attempt
 * until then.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/attempt.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_task.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

/*
 * The one open attempt of each task whose lease expired.  Its outcome is
 * known if it was never invoked, or if it committed a receipt (the receipt
 * is the outcome); the second column says "unknown".  $1 the tasks, $2
 * their shard.
 */
typedef enum AttCloseCol
{
	ATT_CLOSE_TASK_ID = 1,
	ATT_CLOSE_UNKNOWN			/* it was invoked, no receipt */
} AttCloseCol;

static NtaskPlan att_close_plan = {
	"claim close expired attempts",
	"INSERT INTO ntask.attempt AS a (task_id, shard, token, attempt, worker, claimed_at, "
	"  invoked_at, ended_at, result, outcome_known, progress) "
	"SELECT t.task_id, t.shard, t.token, t.attempts, t.lease_owner, "
	"  coalesce(t.claimed_at, t.updated_at), t.invoked_at, pg_catalog.statement_timestamp(), "
	"  'lease_expired', (t.invoked_at IS NULL " NTASK_RECEIPT_OF("t") "), t.progress "
	"FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("t", "2")
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
	"RETURNING a.task_id, NOT a.outcome_known",
	2, {INT8ARRAYOID, INT2OID}
};

typedef enum AttFinishArg
{
	ATT_FINISH_ARG_TASK_ID,		/* $1 */
	ATT_FINISH_ARG_STATE,		/* $2 */
	ATT_FINISH_ARG_REASON,		/* $3 */
	ATT_FINISH_ARG_RESULT,		/* $4, the attempt's */
	ATT_FINISH_ARG_ERROR_CLASS, /* $5, NULL: unchanged */
	ATT_FINISH_ARG_STAGE,		/* $6, NULL: unchanged */
	ATT_FINISH_NARGS
} AttFinishArg;

typedef enum AttFinishCol
{
	ATT_FINISH_QUEUE = 1,
	ATT_FINISH_CLOSED			/* it closed an open attempt: a lease ended */
} AttFinishCol;

static NtaskPlan att_finish_plan = {
	"finish task",
	"WITH closed AS ( "
	"  INSERT INTO ntask.attempt AS a (task_id, shard, token, attempt, worker, claimed_at, "
	"    invoked_at, ended_at, result, outcome_known, progress) "
	"  SELECT o.task_id, o.shard, o.token, o.attempts, o.lease_owner, "
	"    coalesce(o.claimed_at, o.updated_at), o.invoked_at, "
	"    pg_catalog.statement_timestamp(), $4, "
	"    (o.invoked_at IS NULL " NTASK_RECEIPT_OF("o") "), o.progress "
	"  FROM ntask.task o "
	"  WHERE o.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("o", "$1")
	"    AND o.state OPERATOR(pg_catalog.=) 'leased' "
	"  RETURNING NOT a.outcome_known AS was_invoked "
	") "
	"UPDATE ntask.task t SET state = $2, reason = $3, due_at = NULL, "
	"  lease_owner = NULL, lease_until = NULL, "
	"  finished_at = pg_catalog.statement_timestamp(), updated_at = pg_catalog.statement_timestamp(), "
	"  last_error_class = coalesce($5, t.last_error_class), "
	"  last_error_stage = coalesce($6, t.last_error_stage), "
	"  unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) "
	"    (SELECT pg_catalog.count(*) FROM closed c WHERE c.was_invoked)::integer "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1")
	"RETURNING t.queue, EXISTS (SELECT 1 FROM closed)",
	ATT_FINISH_NARGS, {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID}
};

/* NtaskIdsShard: the shard of the tasks in a bigint[] of one shard */
int16
NtaskIdsShard(Datum ids)
{
	ArrayType  *a = DatumGetArrayTypeP(ids);
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(a, INT8OID, sizeof(int64), true, TYPALIGN_DOUBLE,
					  &elems, &nulls, &n);
	return n > 0 ? NTASK_ID_SHARD(DatumGetInt64(elems[0])) : 0;
}

/*
 * NtaskCloseExpiredAttempts
 *		Close the open attempt of each task in task_ids (bigint[]) whose
 *		lease expired, with result lease_expired: write its ledger row from
 *		the task row, which still holds it (write-once ledger: an attempt
 *		is written when it ends); its outcome is known if it
 *		was never invoked or committed a receipt.  Returns the bigint[] of
 *		the tasks whose attempt's outcome is unknown.  Shared by claim takeover and
 *		housekeeping; the caller holds the task rows' locks.
 */
Datum
NtaskCloseExpiredAttempts(Datum task_ids)
{
	Datum		values[2];
	Datum	   *invoked;
	int			ninvoked = 0;
	int			nclosed;
	int			r;

	/* of one shard: one claim round's, or any on a plain install (all 0) */
	values[0] = task_ids;
	values[1] = Int16GetDatum(NtaskIdsShard(task_ids));
	nclosed = NtaskExecPlan(&att_close_plan, values, NULL,
							SPI_OK_INSERT_RETURNING);
	invoked = palloc(sizeof(Datum) * Max(nclosed, 1));
	for (r = 0; r < nclosed; r++)
		if (NtaskGetBool(r, ATT_CLOSE_UNKNOWN))
			invoked[ninvoked++] = Int64GetDatum(NtaskGetInt64(r, ATT_CLOSE_TASK_ID));
	return NtaskInt8Array(invoked, ninvoked);
}

/*
 * NtaskFinishTask
 *		Move a task the caller has locked to a terminal state with a reason,
 *		closing its open attempt (if any) with attempt_result; an attempt
 *		that had been invoked is counted as an unknown outcome.  error_class
 *		and stage, when not NULL, become the task's last error.  A lease it
 *		ends is noted for the queue's capped waiting claims (cancel, a
 *		saga's cancel).  SPI_tuptable then holds its row (AttFinishCol).
 */
void
NtaskFinishTask(int64 task_id, const char *to_state, const char *reason,
				const char *attempt_result, const char *error_class,
				const char *stage)
{
	Datum		values[ATT_FINISH_NARGS];
	char		nulls[ATT_FINISH_NARGS];

	memset(nulls, ' ', sizeof(nulls));
	values[ATT_FINISH_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[ATT_FINISH_ARG_STATE] = CStringGetTextDatum(to_state);
	values[ATT_FINISH_ARG_REASON] = CStringGetTextDatum(reason);
	values[ATT_FINISH_ARG_RESULT] = CStringGetTextDatum(attempt_result);
	values[ATT_FINISH_ARG_ERROR_CLASS] = error_class ? CStringGetTextDatum(error_class) : (Datum) 0;
	nulls[ATT_FINISH_ARG_ERROR_CLASS] = error_class ? ' ' : 'n';
	values[ATT_FINISH_ARG_STAGE] = stage ? CStringGetTextDatum(stage) : (Datum) 0;
	nulls[ATT_FINISH_ARG_STAGE] = stage ? ' ' : 'n';
	if (NtaskExecPlan(&att_finish_plan, values, nulls, SPI_OK_UPDATE_RETURNING) == 1 &&
		NtaskGetBool(0, ATT_FINISH_CLOSED))
		NtaskWakeCappedAtCommit(NtaskGetCString(0, ATT_FINISH_QUEUE), 1);	/* a slot is free */
}
