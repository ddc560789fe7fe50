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
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

/*
 * An open attempt as a distributed install reads it from its task row to
 * write its ledger row apart (att_close's routed pick, att_finish_open):
 * the task, whether its outcome is unknown (it was invoked and committed
 * no receipt), then the ledger row's columns that come from the task row.
 */
typedef enum AttOpenCol
{
	ATT_OPEN_TASK_ID = 1,
	ATT_OPEN_UNKNOWN,
	ATT_OPEN_SHARD,
	ATT_OPEN_TOKEN,
	ATT_OPEN_ATTEMPT,
	ATT_OPEN_WORKER,
	ATT_OPEN_CLAIMED_AT,
	ATT_OPEN_INVOKED_AT,
	ATT_OPEN_PROGRESS,
	ATT_OPEN_NCOLS = ATT_OPEN_PROGRESS
} AttOpenCol;

/*
 * the columns of an open attempt (alias o), AttOpenCol's; receipt: the
 * predicate of its receipt's task id and shard (alias r)
 */
#define ATT_OPEN_COLS(o, receipt) \
	o ".task_id, NOT (" o ".invoked_at IS NULL OR EXISTS (SELECT 1 FROM ntask.receipt r " \
	"    WHERE " receipt \
	"      AND r.token OPERATOR(pg_catalog.=) " o ".token)), " \
	o ".shard, " o ".token, " o ".attempts, " o ".lease_owner, " \
	"coalesce(" o ".claimed_at, " o ".updated_at), " o ".invoked_at, " o ".progress "

/*
 * The one open attempt of each task whose lease expired.  Its outcome is
 * known if it was never invoked, or if it committed a receipt (the receipt
 * is the outcome); the second column says "unknown".
 *
 * On a distributed install the same in two routed statements: Citus does
 * not prune an INSERT ... SELECT by the SELECT's shard, so the plain
 * statement would open a transaction on every node (and fail while one is
 * down, whatever the shard).  The rows are read from shard $2 (the
 * receipt's shard named as $2 too: with r.shard = t.shard alone Citus
 * plans the EXISTS over every shard), then each ledger row is inserted
 * with its shard value (att_close_ledger: the router takes a one-row
 * INSERT).  The read locks the rows and takes only those still at the
 * token the caller picked ($3, in $1's order): two routed statements are
 * not one, and a task another claim took over meanwhile (its attempt
 * closed there, a new one open) must not have that new attempt closed
 * here.
 */
typedef enum AttCloseArg
{
	ATT_CLOSE_ARG_TASK_IDS,		/* $1 */
	ATT_CLOSE_ARG_SHARD,		/* $2, theirs */
	ATT_CLOSE_ARG_TOKENS,		/* $3, as picked (the distributed install's) */
	ATT_CLOSE_NARGS
} AttCloseArg;

typedef enum AttCloseCol
{
	ATT_CLOSE_TASK_ID = ATT_OPEN_TASK_ID,
	ATT_CLOSE_UNKNOWN = ATT_OPEN_UNKNOWN,	/* it was invoked, no receipt */
	ATT_CLOSE_NCOLS = ATT_CLOSE_UNKNOWN
} AttCloseCol;

static void att_close_ledger(SPITupleTable *tt, int n, Datum *values, char *nulls);

static NtaskPair att_close = NTASK_PAIR("claim close expired attempts",
										NTASK_PLAIN(ATT_CLOSE_NCOLS,
													"INSERT INTO ntask.attempt AS a (task_id, shard, token, attempt, worker, claimed_at, "
													"  invoked_at, ended_at, result, outcome_known, progress) "
													"SELECT t.task_id, t.shard, t.token, t.attempts, t.lease_owner, "
													"  coalesce(t.claimed_at, t.updated_at), t.invoked_at, pg_catalog.statement_timestamp(), "
													"  'lease_expired', (t.invoked_at IS NULL " NTASK_RECEIPT_OF("t") "), t.progress "
													"FROM ntask.task t "
													"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("t", "2")
													"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
													"RETURNING a.task_id, NOT a.outcome_known",
													ATT_CLOSE_ARG_TOKENS, SPI_OK_INSERT_RETURNING),
										NTASK_ROUTED(ATT_OPEN_NCOLS,
													 "SELECT " ATT_OPEN_COLS("t", "r.task_id OPERATOR(pg_catalog.=) t.task_id "
																			 "      AND r.shard OPERATOR(pg_catalog.=) $2 ")
													 "FROM ntask.task t "
													 "WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("t", "2")
													 "  AND t.state OPERATOR(pg_catalog.=) 'leased' "
													 "  AND t.token OPERATOR(pg_catalog.=) ($3)[pg_catalog.array_position($1, t.task_id)] "
													 "FOR UPDATE OF t",
													 ATT_CLOSE_NARGS, SPI_OK_SELECT, NULL, att_close_ledger),
										INT8ARRAYOID, INT2OID, INT8ARRAYOID);

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
 * att_open_row: the open attempt's columns of row r of tt, a read with
 * AttOpenCol's columns, into v and n, as a ledger row that ended now
 * with result; returns whether its outcome is unknown (it was invoked
 * and committed no receipt)
 */
static bool
att_open_row(SPITupleTable *tt, int r, const char *result, Datum *v, char *n)
{
	static const int cols[ATT_ROW_NARGS] = {
		[ATT_ROW_TASK_ID] = ATT_OPEN_TASK_ID,
		[ATT_ROW_SHARD] = ATT_OPEN_SHARD,
		[ATT_ROW_TOKEN] = ATT_OPEN_TOKEN,
		[ATT_ROW_ATTEMPT] = ATT_OPEN_ATTEMPT,
		[ATT_ROW_WORKER] = ATT_OPEN_WORKER,
		[ATT_ROW_CLAIMED_AT] = ATT_OPEN_CLAIMED_AT,
		[ATT_ROW_INVOKED_AT] = ATT_OPEN_INVOKED_AT,
		[ATT_ROW_PROGRESS] = ATT_OPEN_PROGRESS,
	};
	bool		unknown = NtaskTupGetBool(tt, r, ATT_OPEN_UNKNOWN);
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
	v[ATT_ROW_KNOWN] = BoolGetDatum(!unknown);
	n[ATT_ROW_KNOWN] = ' ';
	return unknown;
}

/* att_close_ledger: att_close's routed after step, the picked attempts' ledger rows */
static void
att_close_ledger(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	int			r;

	for (r = 0; r < n; r++)
	{
		Datum		av[ATT_ROW_NARGS];
		char		an[ATT_ROW_NARGS];

		(void) att_open_row(tt, r, "lease_expired", av, an);
		NtaskLedgerRowDist(av, an);
	}
}

/*
 * Finish a task: its open attempt's ledger row (if it has one) and its
 * terminal state.  On a distributed install it runs apart (Citus plans a
 * CTE apart and sends its rows to every node): the before step
 * (att_finish_open) reads the open attempt (one routed SELECT, AttOpenCol)
 * and writes its ledger row (NtaskLedgerRowDist), then the task's UPDATE
 * takes what that found as parameters.
 */
typedef enum AttFinishArg
{
	ATT_FINISH_ARG_TASK_ID,		/* $1 */
	ATT_FINISH_ARG_STATE,		/* $2 */
	ATT_FINISH_ARG_REASON,		/* $3 */
	ATT_FINISH_ARG_RESULT,		/* $4, the attempt's */
	ATT_FINISH_ARG_ERROR_CLASS, /* $5, NULL: unchanged */
	ATT_FINISH_ARG_STAGE,		/* $6, NULL: unchanged */
	ATT_FINISH_ARG_INVOKED,		/* $7, the before step's: unknown outcomes
								 * closed, 0 or 1 */
	ATT_FINISH_ARG_CLOSED,		/* $8, the before step's: it closed one */
	ATT_FINISH_ARG_NOW,			/* $9, the before step's */
	ATT_FINISH_NARGS
} AttFinishArg;

typedef enum AttFinishCol
{
	ATT_FINISH_QUEUE = 1,
	ATT_FINISH_CLOSED,			/* it closed an open attempt: a lease ended */
	ATT_FINISH_NCOLS = ATT_FINISH_CLOSED
} AttFinishCol;

static bool att_finish_open(Datum *values, char *nulls);

static NtaskPair att_finish = NTASK_PAIR("finish task",
										 NTASK_PLAIN(ATT_FINISH_NCOLS,
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
													 ATT_FINISH_ARG_INVOKED, SPI_OK_UPDATE_RETURNING),
										 NTASK_ROUTED(ATT_FINISH_NCOLS,
													  "UPDATE ntask.task t SET state = $2, reason = $3, due_at = NULL, "
													  "  lease_owner = NULL, lease_until = NULL, "
													  "  finished_at = $9, updated_at = $9, "
													  "  last_error_class = coalesce($5, t.last_error_class), "
													  "  last_error_stage = coalesce($6, t.last_error_stage), "
													  "  unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) $7 "
													  "WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1")
													  "RETURNING t.queue, $8",
													  ATT_FINISH_NARGS, SPI_OK_UPDATE_RETURNING,
													  att_finish_open, NULL),
										 INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT4OID, BOOLOID,
										 TIMESTAMPTZOID);

/* the open attempt of task $1 (AttOpenCol), for att_finish_open */
static NtaskPlan att_finish_open_dist_plan = {
	"finish task: open attempt (distributed)",
	.ncols = ATT_OPEN_NCOLS,
	"SELECT " ATT_OPEN_COLS("o", "r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1"))
	"FROM ntask.task o "
	"WHERE o.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("o", "$1")
	"  AND o.state OPERATOR(pg_catalog.=) 'leased'",
	ATT_FINISH_ARG_TASK_ID + 1, {INT8OID}
};

/*
 * att_finish_open: att_finish's routed before step, the open attempt's
 * ledger row and what the task's UPDATE takes from it
 */
static bool
att_finish_open(Datum *values, char *nulls)
{
	bool		closed = false;
	bool		unknown = false;

	if (NtaskExecPlan(&att_finish_open_dist_plan, values, NULL, SPI_OK_SELECT) == 1)
	{
		Datum		av[ATT_ROW_NARGS];
		char		an[ATT_ROW_NARGS];

		closed = true;
		unknown = att_open_row(SPI_tuptable, 0,
							   TextDatumGetCString(values[ATT_FINISH_ARG_RESULT]),
							   av, an);
		NtaskLedgerRowDist(av, an);
	}
	values[ATT_FINISH_ARG_INVOKED] = Int32GetDatum(unknown ? 1 : 0);
	values[ATT_FINISH_ARG_CLOSED] = BoolGetDatum(closed);
	values[ATT_FINISH_ARG_NOW] = NtaskStatementTs();
	nulls[ATT_FINISH_ARG_INVOKED] = nulls[ATT_FINISH_ARG_CLOSED] =
		nulls[ATT_FINISH_ARG_NOW] = ' ';
	return true;
}

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
	Datum		values[ATT_CLOSE_NARGS];
	Datum	   *invoked;
	SPITupleTable *tt;
	int			ninvoked = 0;
	int			nclosed;
	int			r;

	/* of one shard: one claim round's, or any on a plain install (all 0) */
	values[ATT_CLOSE_ARG_TASK_IDS] = task_ids;
	values[ATT_CLOSE_ARG_SHARD] = Int16GetDatum(NtaskIdsShard(task_ids));
	values[ATT_CLOSE_ARG_TOKENS] = tokens;
	nclosed = NtaskExecPair(&att_close, values, NULL);
	tt = SPI_tuptable;
	invoked = palloc(sizeof(Datum) * Max(nclosed, 1));
	for (r = 0; r < nclosed; r++)
		if (NtaskTupGetBool(tt, r, ATT_CLOSE_UNKNOWN))
			invoked[ninvoked++] = Int64GetDatum(NtaskTupGetInt64(tt, r, ATT_CLOSE_TASK_ID));
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
	if (NtaskExecPair(&att_finish, values, nulls) == 1 &&
		NtaskTupGetBool(SPI_tuptable, 0, ATT_FINISH_CLOSED))
		NtaskWakeCappedAtCommit(NtaskTupGetCString(SPI_tuptable, 0, ATT_FINISH_QUEUE), 1);	/* a slot is free */
}

/*
 * Whether the ledger holds an ended attempt of task $1 with token $2
 * (NtaskCheckTokenIssued's slow path; routed by the task id's shard).
 */
/* its one column: a row when the ledger holds it */
typedef enum AttTokenCol
{
	ATT_TOKEN_FOUND = 1
} AttTokenCol;

typedef enum AttTokenArg
{
	ATT_TOKEN_ARG_TASK_ID,		/* $1 */
	ATT_TOKEN_ARG_TOKEN,		/* $2 */
	ATT_TOKEN_NARGS
} AttTokenArg;

static NtaskPair token_ledger = NTASK_PAIR("token in the ledger",
										  NTASK_PLAIN(ATT_TOKEN_FOUND,
													  "SELECT 1 FROM ntask.attempt a "
													  "WHERE a.task_id OPERATOR(pg_catalog.=) $1 "
													  "  AND a.token OPERATOR(pg_catalog.=) $2" NTASK_SHARD_OF("a", "$1"),
													  ATT_TOKEN_NARGS, SPI_OK_SELECT),
										  NTASK_ROUTED_LIKE_PLAIN,
										  INT8OID, INT8OID);

/*
 * NtaskCheckTokenIssued
 *		Raise NT003 unless token was issued for task_id, whose latest token
 *		is current: current itself, or the token of one of its ended
 *		attempts, each in the ledger (ntask.attempt).  Tokens come from one
 *		sequence per node (NtaskTokenNext), so a token issued for another
 *		task is never one of this task's: a worker that reports on the
 *		wrong task id is refused, never a race (races yield stale).  The
 *		common case, the current token, reads nothing; the others read the
 *		ledger by its key.  A token of an earlier timeline is taken as
 *		issued (see below).  Keeps the caller's SPI_tuptable.
 */
void
NtaskCheckTokenIssued(int64 task_id, int64 token, int64 current)
{
	bool		issued = (token == current);

	if (!issued && token >= 1 && token < current)
	{
		SPITupleTable *save_tt = SPI_tuptable;
		uint64		save_processed = SPI_processed;
		Datum		values[ATT_TOKEN_NARGS];

		values[ATT_TOKEN_ARG_TASK_ID] = Int64GetDatum(task_id);
		values[ATT_TOKEN_ARG_TOKEN] = Int64GetDatum(token);
		issued = NtaskExecPair(&token_ledger, values, NULL) > 0;
		SPI_tuptable = save_tt;
		SPI_processed = save_processed;

		/*
		 * A token of an earlier WAL timeline that the ledger does not hold:
		 * that timeline may have issued it in a claim whose WAL never reached
		 * this one (a failover to an asynchronous standby), so its holder did
		 * nothing wrong and gets the call's answer (stale), not NT003.  Such
		 * a token of another task gets stale too: NT003 can only be sure of
		 * tokens of this timeline.
		 */
		if (!issued && token < NtaskTokenFloor())
			issued = true;
	}
	if (!issued)
		ereport(ERROR,
				(errcode(ERRCODE_NTASK_TOKEN_NOT_ISSUED),
				 errmsg("ntask: token %lld was never issued for task %lld",
						(long long) token, (long long) task_id),
				 errhint("Use the token ntask_claim returned for this attempt of this task.")));
}
