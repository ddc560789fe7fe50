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

#include "ntask_base.h"
#include "ntask_task.h"
#include "spi_util.h"
#include "wake.h"

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
	.ncols = 2,
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

/*
 * On a distributed install the same in two routed statements: Citus does
 * not prune an INSERT ... SELECT by the SELECT's shard, so att_close_plan
 * would open a transaction on every node (and fail while one is down,
 * whatever the shard).  The rows are read from shard $2 (the receipt's
 * shard named as $2 too: with r.shard = t.shard alone Citus plans the
 * EXISTS over every shard), then each ledger row is inserted with its
 * shard value (the router takes a one-row INSERT).  The read locks the
 * rows and takes only those still at the token the caller picked ($3, in
 * $1's order): two routed statements are not one, and a task another
 * claim took over meanwhile (its attempt closed there, a new one open)
 * must not have that new attempt closed here.
 */
typedef enum AttCloseDistCol
{
	ATT_CLOSE_DIST_TASK_ID = 1,
	ATT_CLOSE_DIST_SHARD,
	ATT_CLOSE_DIST_TOKEN,
	ATT_CLOSE_DIST_ATTEMPT,
	ATT_CLOSE_DIST_WORKER,
	ATT_CLOSE_DIST_CLAIMED_AT,
	ATT_CLOSE_DIST_INVOKED_AT,
	ATT_CLOSE_DIST_KNOWN,
	ATT_CLOSE_DIST_PROGRESS
} AttCloseDistCol;

static NtaskPlan att_close_pick_dist_plan = {
	"claim close expired attempts: pick (distributed)",
	.ncols = 9,
	"SELECT t.task_id, t.shard, t.token, t.attempts, t.lease_owner, "
	"  coalesce(t.claimed_at, t.updated_at), t.invoked_at, "
	"  (t.invoked_at IS NULL OR EXISTS (SELECT 1 FROM ntask.receipt r "
	"    WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id "
	"      AND r.shard OPERATOR(pg_catalog.=) $2 "
	"      AND r.token OPERATOR(pg_catalog.=) t.token)), t.progress "
	"FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("t", "2")
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
	"  AND t.token OPERATOR(pg_catalog.=) ($3)[pg_catalog.array_position($1, t.task_id)] "
	"FOR UPDATE OF t",
	3, {INT8ARRAYOID, INT2OID, INT8ARRAYOID}
};

/* one ledger row, routed by its shard value $2 (NtaskLedgerRowDist) */
static NtaskPlan att_row_insert_dist_plan = {
	"attempt ledger row (distributed)",
	.ncols = 0,
	"INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker, claimed_at, "
	"  invoked_at, ended_at, result, requested, outcome_known, retry_at, progress) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
	ATT_ROW_NARGS, {INT8OID, INT2OID, INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, BOOLOID, TIMESTAMPTZOID, JSONBOID}
};

/*
 * NtaskLedgerRowDist
 *		Insert one ledger row on a distributed install: v and n (nulls, ' '
 *		or 'n') in AttRowArg order.  SPI_tuptable is not kept.
 */
void
NtaskLedgerRowDist(Datum *v, const char *n)
{
	NtaskExecPlan(&att_row_insert_dist_plan, v, n, SPI_OK_INSERT);
}

/*
 * att_open_row: the open attempt's columns of row r of tt, a pick with
 * AttCloseDistCol's columns, into v and n, as a ledger row that ended now
 * with result; returns whether its outcome is unknown (it was invoked
 * and committed no receipt)
 */
static bool
att_open_row(SPITupleTable *tt, int r, const char *result, Datum *v, char *n)
{
	static const int cols[ATT_ROW_NARGS] = {
		ATT_CLOSE_DIST_TASK_ID, ATT_CLOSE_DIST_SHARD, ATT_CLOSE_DIST_TOKEN,
		ATT_CLOSE_DIST_ATTEMPT, ATT_CLOSE_DIST_WORKER, ATT_CLOSE_DIST_CLAIMED_AT,
		ATT_CLOSE_DIST_INVOKED_AT, 0, 0, 0, ATT_CLOSE_DIST_KNOWN, 0,
	ATT_CLOSE_DIST_PROGRESS};
	int			i;

	for (i = 0; i < ATT_ROW_NARGS; i++)
	{
		bool		isnull = true;

		v[i] = cols[i] != 0 ? NtaskTupGetDatum(tt, r, cols[i], &isnull) : (Datum) 0;
		n[i] = isnull ? 'n' : ' ';
	}
	v[ATT_ROW_ENDED_AT] = NtaskStatementTs();
	n[ATT_ROW_ENDED_AT] = ' ';
	v[ATT_ROW_RESULT] = CStringGetTextDatum(result);
	n[ATT_ROW_RESULT] = ' ';
	return !NtaskTupGetBool(tt, r, ATT_CLOSE_DIST_KNOWN);
}

static Datum att_close_dist(Datum *values);

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
	.ncols = 2,
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

/*
 * On a distributed install NtaskFinishTask runs apart (Citus plans a CTE
 * apart and sends its rows to every node): the open attempt read (one
 * routed SELECT, att_close_pick_dist_plan's columns), its ledger row
 * (NtaskLedgerRowDist), then the task's UPDATE; $7 the attempts it closed
 * that were invoked (0 or 1), $8 whether it closed one, $9 now.
 */
static NtaskPlan att_finish_open_dist_plan = {
	"finish task: open attempt (distributed)",
	.ncols = 9,
	"SELECT o.task_id, o.shard, o.token, o.attempts, o.lease_owner, "
	"  coalesce(o.claimed_at, o.updated_at), o.invoked_at, "
	"  (o.invoked_at IS NULL OR EXISTS (SELECT 1 FROM ntask.receipt r "
	"    WHERE r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1")
	"      AND r.token OPERATOR(pg_catalog.=) o.token)), o.progress "
	"FROM ntask.task o "
	"WHERE o.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("o", "$1")
	"  AND o.state OPERATOR(pg_catalog.=) 'leased'",
	1, {INT8OID}
};

static NtaskPlan att_finish_dist_plan = {
	"finish task (distributed)",
	.ncols = 2,
	"UPDATE ntask.task t SET state = $2, reason = $3, due_at = NULL, "
	"  lease_owner = NULL, lease_until = NULL, "
	"  finished_at = $9, updated_at = $9, "
	"  last_error_class = coalesce($5, t.last_error_class), "
	"  last_error_stage = coalesce($6, t.last_error_stage), "
	"  unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) $7 "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1")
	"RETURNING t.queue, $8",
	9, {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT4OID, BOOLOID,
	TIMESTAMPTZOID}
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
 *		housekeeping; the caller holds the task rows' locks.  tokens: each
 *		task's token as the caller picked it (bigint[] in task_ids' order);
 *		on a distributed install only an attempt of that token is closed.
 */
Datum
NtaskCloseExpiredAttempts(Datum task_ids, Datum tokens)
{
	Datum		values[3];
	Datum	   *invoked;
	int			ninvoked = 0;
	int			nclosed;
	int			r;

	/* of one shard: one claim round's, or any on a plain install (all 0) */
	values[0] = task_ids;
	values[1] = Int16GetDatum(NtaskIdsShard(task_ids));
	values[2] = tokens;
	if (NtaskShardCount() > 0)
		return att_close_dist(values);
	nclosed = NtaskExecPlan(&att_close_plan, values, NULL,
							SPI_OK_INSERT_RETURNING);
	invoked = palloc(sizeof(Datum) * Max(nclosed, 1));
	for (r = 0; r < nclosed; r++)
		if (NtaskGetBool(r, ATT_CLOSE_UNKNOWN))
			invoked[ninvoked++] = Int64GetDatum(NtaskGetInt64(r, ATT_CLOSE_TASK_ID));
	return NtaskInt8Array(invoked, ninvoked);
}

/*
 * att_close_dist
 *		NtaskCloseExpiredAttempts on a distributed install: values[0] the
 *		tasks, values[1] their shard, values[2] their tokens
 *		(att_close_pick_dist_plan's arguments).
 */
static Datum
att_close_dist(Datum *values)
{
	SPITupleTable *picked;
	Datum	   *invoked;
	int			ninvoked = 0;
	int			n;
	int			r;

	n = NtaskExecPlan(&att_close_pick_dist_plan, values, NULL, SPI_OK_SELECT);
	picked = SPI_tuptable;
	invoked = palloc(sizeof(Datum) * Max(n, 1));
	for (r = 0; r < n; r++)
	{
		Datum		av[ATT_ROW_NARGS];
		char		an[ATT_ROW_NARGS];

		if (att_open_row(picked, r, "lease_expired", av, an))
			invoked[ninvoked++] = Int64GetDatum(NtaskTupGetInt64(picked, r, ATT_CLOSE_DIST_TASK_ID));
		NtaskLedgerRowDist(av, an);
	}
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
	if (NtaskShardCount() > 0)
	{
		Datum		dv[9];
		char		dn[9];
		bool		closed = false;
		bool		invoked = false;

		if (NtaskExecPlan(&att_finish_open_dist_plan, values, NULL, SPI_OK_SELECT) == 1)
		{
			Datum		av[ATT_ROW_NARGS];
			char		an[ATT_ROW_NARGS];

			closed = true;
			invoked = att_open_row(SPI_tuptable, 0, attempt_result, av, an);
			NtaskLedgerRowDist(av, an);
		}
		memcpy(dv, values, sizeof(Datum) * ATT_FINISH_NARGS);
		memcpy(dn, nulls, ATT_FINISH_NARGS);
		dv[6] = Int32GetDatum(invoked ? 1 : 0);
		dv[7] = BoolGetDatum(closed);
		dv[8] = NtaskStatementTs();
		dn[6] = dn[7] = dn[8] = ' ';
		if (NtaskExecPlan(&att_finish_dist_plan, dv, dn, SPI_OK_UPDATE_RETURNING) == 1 &&
			closed)
			NtaskWakeCappedAtCommit(NtaskGetCString(0, ATT_FINISH_QUEUE), 1);	/* a slot is free */
		return;
	}
	if (NtaskExecPlan(&att_finish_plan, values, nulls, SPI_OK_UPDATE_RETURNING) == 1 &&
		NtaskGetBool(0, ATT_FINISH_CLOSED))
		NtaskWakeCappedAtCommit(NtaskGetCString(0, ATT_FINISH_QUEUE), 1);	/* a slot is free */
}
