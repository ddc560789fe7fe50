/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  ntask_heartbeat, ntask_invoked and ntask_release: what a worker says
 *	  while it holds a lease.
 *
 * Fencing: the running attempt lives on its task row (token, attempts,
 * lease_owner, claimed_at, invoked_at); its ntask.attempt row is written
 * once, when it ends (write-once ledger, docs/design.md).  Each call here
 * is one conditional UPDATE of that task row, matching only the token's
 * row while it is leased (and, for the caller, the queue's worker_role):
 * heartbeat moves lease_until, invoked sets invoked_at (once), release
 * hands the row back and inserts the ledger row in the same statement.
 * Claim takeover, transition and cancel end the attempt by updating the
 * same row, so the task row's lock is where these serialize: an
 * ntask_invoked whose transaction is still open makes a takeover skip the
 * task (SKIP LOCKED), and once committed the takeover closes the attempt
 * with its outcome unknown; an ntask_invoked after a takeover, transition
 * or cancel matches no row and answers stale (a heartbeat NULL, a release
 * stale).  Only when the UPDATE matched nothing do more statements tell
 * the answers apart: lease_check_token (unknown task, no right, a token
 * never issued), then the invoked's duplicate or stale
 * (lease_attempt_plan) and the release's duplicate, conflict or stale
 * (the token's ledger row, lease_requested_plan).  On a distributed
 * install the release's UPDATE and its ledger row are two routed
 * statements (lease_release's routed variant).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "coord.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_heartbeat);
PG_FUNCTION_INFO_V1(ntask_invoked);
PG_FUNCTION_INFO_V1(ntask_release);

static void lease_check_token(int64 task_id, int64 token);

/* lease_token_plan's parameters and columns */
typedef enum LeaseTokenArg
{
	LEASE_TOKEN_ARG_TASK_ID,	/* $1 */
	LEASE_TOKEN_ARG_CALLER,		/* $2 */
	LEASE_TOKEN_NARGS
} LeaseTokenArg;

typedef enum LeaseTokenCol
{
	LEASE_TOKEN_TOKEN = 1,
	LEASE_TOKEN_RIGHT,			/* the caller has the worker_role */
	LEASE_TOKEN_NCOLS = LEASE_TOKEN_RIGHT
} LeaseTokenCol;

static NtaskPair lease_token_plan = NTASK_PAIR("task token lookup",
	NTASK_PLAIN(LEASE_TOKEN_NCOLS,
	"SELECT t.token, " NTASK_WORKER_RIGHT("q", "2") " "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1"),
	LEASE_TOKEN_NARGS, SPI_OK_SELECT),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, OIDOID);

/* lease_heartbeat_plan's parameters (and lease_progress_plan's) and column */
typedef enum LeaseHeartbeatArg
{
	LEASE_HB_ARG_TASK_ID,		/* $1 */
	LEASE_HB_ARG_TOKEN,			/* $2 */
	LEASE_HB_ARG_LEASE,			/* $3, NULL: the queue's */
	LEASE_HB_ARG_CALLER,		/* $4 */
	LEASE_HB_ARG_NOW,			/* $5 */
	LEASE_HB_ARG_PROGRESS,		/* $6, lease_progress_plan's only */
	LEASE_HB_NARGS
} LeaseHeartbeatArg;

typedef enum LeaseHeartbeatCol
{
	LEASE_HB_LEASE_UNTIL = 1,	/* the new one */
	LEASE_HB_NCOLS = LEASE_HB_LEASE_UNTIL
} LeaseHeartbeatCol;

/*
 * The heartbeat's UPDATE; set: more assignments (progress), "" for none.
 */
#define LEASE_HB_SQL(set) \
	"UPDATE ntask.task t SET " \
	"  lease_until = $5 OPERATOR(pg_catalog.+) coalesce($3, q.lease), " \
	"  due_at = $5 OPERATOR(pg_catalog.+) coalesce($3, q.lease), " \
	set \
	"  updated_at = $5 " \
	"FROM ntask.queue q " \
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1") \
	"  AND t.token OPERATOR(pg_catalog.=) $2 " \
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' " \
	"  AND q.queue OPERATOR(pg_catalog.=) t.queue " \
	"  AND " NTASK_WORKER_RIGHT_SUB("q", "4") " " \
	"RETURNING t.lease_until"

static NtaskPair lease_heartbeat_plan = NTASK_PAIR("heartbeat",
	NTASK_PLAIN(LEASE_HB_NCOLS,
	LEASE_HB_SQL(""),
	LEASE_HB_ARG_PROGRESS, SPI_OK_UPDATE_RETURNING),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, INT8OID, INTERVALOID, OIDOID, TIMESTAMPTZOID);

/*
 * The heartbeat that reports progress ($6, checked against
 * ntask.max_result_bytes): lease_heartbeat_plan that also stores it on the
 * task row, fenced the same way (a stale token writes nothing).  A
 * heartbeat without progress runs lease_heartbeat_plan.
 */
static NtaskPair lease_progress_plan = NTASK_PAIR("heartbeat with progress",
	NTASK_PLAIN(LEASE_HB_NCOLS,
	LEASE_HB_SQL("  progress = $6, progress_at = $5, "),
	LEASE_HB_NARGS, SPI_OK_UPDATE_RETURNING),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, INT8OID, INTERVALOID, OIDOID, TIMESTAMPTZOID, JSONBOID);

/*
 * The open attempt lives on the task row until it ends (write-once
 * ledger): invoked_at is set there, on the token's leased row.
 * lease_attempt_plan takes the first two parameters.
 */
typedef enum LeaseInvokedArg
{
	LEASE_INVOKED_ARG_TASK_ID,	/* $1 */
	LEASE_INVOKED_ARG_TOKEN,	/* $2 */
	LEASE_INVOKED_ARG_CALLER,	/* $3 */
	LEASE_INVOKED_NARGS
} LeaseInvokedArg;

static NtaskPair lease_invoked_plan = NTASK_PAIR("invoked",
	NTASK_PLAIN(0,
	"UPDATE ntask.task t SET invoked_at = pg_catalog.statement_timestamp() "
	"FROM ntask.queue q "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND t.token OPERATOR(pg_catalog.=) $2 "
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' AND t.invoked_at IS NULL "
	"  AND q.queue OPERATOR(pg_catalog.=) t.queue "
	"  AND " NTASK_WORKER_RIGHT_SUB("q", "3"),
	LEASE_INVOKED_NARGS, SPI_OK_UPDATE),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, INT8OID, OIDOID);

typedef enum LeaseAttemptCol
{
	LEASE_ATTEMPT_INVOKED = 1,	/* the token's open attempt was invoked */
	LEASE_ATTEMPT_NCOLS = LEASE_ATTEMPT_INVOKED
} LeaseAttemptCol;

static NtaskPair lease_attempt_plan = NTASK_PAIR("attempt lookup",
	NTASK_PLAIN(LEASE_ATTEMPT_NCOLS,
	"SELECT t.state OPERATOR(pg_catalog.=) 'leased' AND t.invoked_at IS NOT NULL "
	"FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND t.token OPERATOR(pg_catalog.=) $2",
	LEASE_INVOKED_ARG_CALLER, SPI_OK_SELECT),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, INT8OID);

/*
 * lease_check_token
 *		Raise P0002 when the task does not exist, 42501 when the caller lacks
 *		its queue's worker_role, NT003 when token was never issued for it
 *		(above the task's current token, or below 1).  Runs inside the
 *		caller's SPI connection.
 */
static void
lease_check_token(int64 task_id, int64 token)
{
	Datum		values[LEASE_TOKEN_NARGS];
	int64		current;

	values[LEASE_TOKEN_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[LEASE_TOKEN_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	if (NtaskExecPair(&lease_token_plan, values, NULL) == 0)
		NtaskTaskNotFound(task_id);
	if (!NtaskTupGetBool(SPI_tuptable, 0, LEASE_TOKEN_RIGHT))
		NtaskTaskRightDenied(task_id);
	current = NtaskTupGetInt64(SPI_tuptable, 0, LEASE_TOKEN_TOKEN);
	NtaskCheckTokenIssued(task_id, token, current);
}

/*
 * ntask_heartbeat(task_id, token, lease DEFAULT NULL, progress DEFAULT NULL)
 *		RETURNS timestamptz
 *		Extend the lease held by token to now() + lease (the queue's lease
 *		when NULL), and with progress store it as the attempt's latest
 *		(progress, progress_at on the task row; at most
 *		ntask.max_result_bytes, else 54000).  Returns the new lease_until,
 *		or NULL when token no longer holds the task (taken over, finished
 *		or canceled): the worker must stop, and nothing was written.  A
 *		lease that expired but was not yet taken over is still the token's
 *		and is extended.
 */
Datum
ntask_heartbeat(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	Datum		values[LEASE_HB_NARGS];
	char		nulls[LEASE_HB_NARGS];
	TimestampTz result = 0;
	bool		found;
	bool		with_progress;

	NtaskCheckNargs(fcinfo, 4); /* before its new arguments are read */
	with_progress = !PG_ARGISNULL(3);
	if (!PG_ARGISNULL(2))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(2), "lease");
	if (with_progress)
	{
		Jsonb	   *p = PG_GETARG_JSONB_P(3);

		if (VARSIZE(p) > (Size) ntask_max_result_bytes)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("ntask: progress is %zu bytes, more than ntask.max_result_bytes (%d)",
							(Size) VARSIZE(p), ntask_max_result_bytes),
					 errhint("Report a small summary (counts, a phase); keep large data elsewhere.")));
		values[LEASE_HB_ARG_PROGRESS] = JsonbPGetDatum(p);
	}
	memset(nulls, ' ', sizeof(nulls));
	values[LEASE_HB_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[LEASE_HB_ARG_TOKEN] = Int64GetDatum(token);
	values[LEASE_HB_ARG_LEASE] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[LEASE_HB_ARG_LEASE] = PG_ARGISNULL(2) ? 'n' : ' ';
	values[LEASE_HB_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	values[LEASE_HB_ARG_NOW] = NtaskStatementTs();
	/* on a Citus coordinator, its _on form delegated (coord.c) */
	{
		Datum		d;

		if (NtaskCoordDelegate(fcinfo, NTASK_ID_SHARD(task_id), NULL, -1, &d))
			return d;
	}

	SPI_connect();
	(void) NtaskDirectBegin(fcinfo, &task_id, 1);
	found = NtaskExecPair(with_progress ? &lease_progress_plan : &lease_heartbeat_plan,
						  values, nulls) == 1;
	if (found)
	{
		bool		isnull;

		/* copied out of the SPI result before SPI_finish frees it */
		result = DatumGetTimestampTz(NtaskTupGetDatum(SPI_tuptable, 0,
													  LEASE_HB_LEASE_UNTIL, &isnull));
	}
	else
		lease_check_token(task_id, token);
	NtaskDirectEnd();
	SPI_finish();

	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(result);
}

/*
 * ntask_invoked(task_id, token) RETURNS text
 *		Record that the attempt is about to make its external call, so a
 *		crash from here on leaves an outcome the ledger calls unknown.
 *		Returns 'applied', 'duplicate' (already recorded for this open
 *		attempt) or 'stale' (the attempt is closed: do not call out).
 */
Datum
ntask_invoked(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	Datum		values[LEASE_INVOKED_NARGS];
	const char *result;

	values[LEASE_INVOKED_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[LEASE_INVOKED_ARG_TOKEN] = Int64GetDatum(token);
	values[LEASE_INVOKED_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	/* on a Citus coordinator, its _on form delegated (coord.c) */
	{
		Datum		d;

		if (NtaskCoordDelegate(fcinfo, NTASK_ID_SHARD(task_id), NULL, -1, &d))
			return d;
	}

	SPI_connect();
	(void) NtaskDirectBegin(fcinfo, &task_id, 1);
	if (NtaskExecPair(&lease_invoked_plan, values, NULL) == 1)
		result = "applied";
	else
	{
		lease_check_token(task_id, token);
		if (NtaskExecPair(&lease_attempt_plan, values, NULL) == 1 &&
			NtaskTupGetBool(SPI_tuptable, 0, LEASE_ATTEMPT_INVOKED))
			result = "duplicate";
		else
			result = "stale";
	}
	NtaskDirectEnd();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/*
 * Release: the holder hands the task back.  Task row first (the UPDATE
 * locks it; only the current token of a leased task, only with the queue's
 * worker_role), then, only if it moved, the attempt's ledger row, written
 * from the task row (o: the row as the statement's snapshot saw it, for
 * the worker and claimed_at; see transition.c's tr_apply_pair).  An attempt that
 * was never invoked gives its attempt back (max_attempts + 1: the ledger
 * keeps the row, the budget is not spent); an invoked one counts, and its
 * outcome is unknown.  $3: the delay (0 for at once), $4: the caller.
 */
typedef enum LeaseReleaseArg
{
	LEASE_RELEASE_ARG_TASK_ID,	/* $1 */
	LEASE_RELEASE_ARG_TOKEN,	/* $2 */
	LEASE_RELEASE_ARG_DELAY,	/* $3, 0 for at once */
	LEASE_RELEASE_ARG_CALLER,	/* $4 */
	LEASE_RELEASE_ARG_RECEIPT,	/* $5, the routed before step's */
	LEASE_RELEASE_ARG_NOW,		/* $6, the routed before step's */
	LEASE_RELEASE_NARGS
} LeaseReleaseArg;

/* lease_release's columns (one row when it applied) */
typedef enum LeaseReleaseCol
{
	LEASE_RELEASE_QUEUE = 1,
	LEASE_RELEASE_RUN_AT,
	LEASE_RELEASE_NCOLS = LEASE_RELEASE_RUN_AT
} LeaseReleaseCol;

/*
 * The release's UPDATE, shared by the plain statement (a CTE that also
 * writes the ledger) and the distributed one: now, the statement
 * timestamp (a parameter on Citus); receipt, what tells an invoked
 * attempt's outcome known (the receipt lookup, or its answer as $5).
 */
#define LEASE_RELEASE_UPDATE(now, receipt) \
	"UPDATE ntask.task t SET state = 'ready', " \
	"  run_at = " now " OPERATOR(pg_catalog.+) $3, " \
	"  due_at = " now " OPERATOR(pg_catalog.+) $3, " \
	"  lease_owner = NULL, lease_until = NULL, " \
	"  max_attempts = t.max_attempts OPERATOR(pg_catalog.+) " \
	"    CASE WHEN t.invoked_at IS NULL THEN 1 ELSE 0 END, " \
	"  unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) " \
	"    CASE WHEN t.invoked_at IS NULL " receipt " THEN 0 ELSE 1 END, " \
	"  last_error_class = CASE WHEN t.invoked_at IS NULL THEN t.last_error_class " \
	"    ELSE 'unknown' END, " \
	"  last_error_stage = CASE WHEN t.invoked_at IS NULL THEN t.last_error_stage " \
	"    ELSE 'released' END, " \
	"  updated_at = " now " " \
	"FROM ntask.task o " \
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1") \
	"  AND t.token OPERATOR(pg_catalog.=) $2 " \
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' " \
	"  AND o.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("o", "$1") \
	"  AND EXISTS (SELECT 1 FROM ntask.queue q " \
	"              WHERE q.queue OPERATOR(pg_catalog.=) t.queue " \
	"                AND " NTASK_WORKER_RIGHT("q", "4") ") "

/*
 * On a distributed install the release runs apart (Citus plans a CTE apart
 * and sends its rows to every node): whether this attempt committed a
 * receipt (lease_release_receipt, the before step), the task's UPDATE,
 * then its ledger row (lease_release_ledger, the after step), each routed
 * to the task's shard.  The UPDATE returns the plain statement's columns,
 * then the ledger row's.
 */
typedef enum LeaseReleaseDistCol
{
	LEASE_RELEASE_DIST_TASK_ID = LEASE_RELEASE_NCOLS + 1,
	LEASE_RELEASE_DIST_SHARD,
	LEASE_RELEASE_DIST_TOKEN,
	LEASE_RELEASE_DIST_ATTEMPTS,
	LEASE_RELEASE_DIST_CLAIMED_AT,
	LEASE_RELEASE_DIST_INVOKED_AT,
	LEASE_RELEASE_DIST_WORKER,
	LEASE_RELEASE_DIST_PROGRESS,
	LEASE_RELEASE_DIST_NCOLS = LEASE_RELEASE_DIST_PROGRESS
} LeaseReleaseDistCol;

static bool lease_release_receipt(Datum *values, char *nulls);
static void lease_release_ledger(SPITupleTable *tt, int n, Datum *values,
								 char *nulls);

static NtaskPair lease_release = NTASK_PAIR("release",
											NTASK_PLAIN(LEASE_RELEASE_NCOLS,
														"WITH upd AS ( "
														LEASE_RELEASE_UPDATE("pg_catalog.statement_timestamp()", NTASK_RECEIPT_OF("t"))
														"  RETURNING t.run_at, t.queue, t.task_id, t.shard, t.token, t.attempts, "
														"    coalesce(o.claimed_at, o.updated_at) AS claimed_at, t.invoked_at, "
														"    o.lease_owner AS worker, o.progress "
														"), att AS ( "
														"  INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker, claimed_at, "
														"    invoked_at, ended_at, result, requested, outcome_known, retry_at, progress) "
														"  SELECT u.task_id, u.shard, u.token, u.attempts, u.worker, u.claimed_at, "
														"    u.invoked_at, pg_catalog.statement_timestamp(), 'released', 'released', "
														"    (u.invoked_at IS NULL OR EXISTS (SELECT 1 FROM ntask.receipt r "
														"      WHERE r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1")
														"        AND r.token OPERATOR(pg_catalog.=) $2)), u.run_at, u.progress "
														"  FROM upd u "
														") "
														"SELECT upd.queue, upd.run_at FROM upd",
														LEASE_RELEASE_ARG_RECEIPT, SPI_OK_SELECT),
											NTASK_ROUTED(LEASE_RELEASE_DIST_NCOLS,
														 LEASE_RELEASE_UPDATE("$6", "OR $5")
														 "RETURNING t.queue, t.run_at, t.task_id, t.shard, t.token, t.attempts, "
														 "  coalesce(o.claimed_at, o.updated_at), t.invoked_at, o.lease_owner, o.progress",
														 LEASE_RELEASE_NARGS, SPI_OK_UPDATE_RETURNING,
														 lease_release_receipt, lease_release_ledger),
											INT8OID, INT8OID, INTERVALOID, OIDOID, BOOLOID, TIMESTAMPTZOID);

/* whether this token's attempt committed a receipt ($1 task, $2 token) */
typedef enum LeaseReceiptCol
{
	LEASE_RECEIPT_FOUND = 1,
	LEASE_RECEIPT_NCOLS = LEASE_RECEIPT_FOUND
} LeaseReceiptCol;

static NtaskPlan lease_receipt_dist_plan = {
	"release receipt lookup (distributed)",
	.ncols = LEASE_RECEIPT_NCOLS,
	"SELECT EXISTS (SELECT 1 FROM ntask.receipt r "
	"  WHERE r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1")
	"    AND r.token OPERATOR(pg_catalog.=) $2)",
	LEASE_RELEASE_ARG_TOKEN + 1, {INT8OID, INT8OID}
};

/* lease_release_receipt: the routed before step, the receipt and now */
static bool
lease_release_receipt(Datum *values, char *nulls)
{
	NtaskExecPlan(&lease_receipt_dist_plan, values, NULL, SPI_OK_SELECT);
	values[LEASE_RELEASE_ARG_RECEIPT] =
		BoolGetDatum(NtaskTupGetBool(SPI_tuptable, 0, LEASE_RECEIPT_FOUND));
	values[LEASE_RELEASE_ARG_NOW] = NtaskStatementTs();
	nulls[LEASE_RELEASE_ARG_RECEIPT] = nulls[LEASE_RELEASE_ARG_NOW] = ' ';
	return true;
}

/* lease_release_ledger: the routed after step, the released attempt's ledger row */
static void
lease_release_ledger(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	static const int cols[ATT_ROW_NARGS] = {
		[ATT_ROW_TASK_ID] = LEASE_RELEASE_DIST_TASK_ID,
		[ATT_ROW_SHARD] = LEASE_RELEASE_DIST_SHARD,
		[ATT_ROW_TOKEN] = LEASE_RELEASE_DIST_TOKEN,
		[ATT_ROW_ATTEMPT] = LEASE_RELEASE_DIST_ATTEMPTS,
		[ATT_ROW_WORKER] = LEASE_RELEASE_DIST_WORKER,
		[ATT_ROW_CLAIMED_AT] = LEASE_RELEASE_DIST_CLAIMED_AT,
		[ATT_ROW_INVOKED_AT] = LEASE_RELEASE_DIST_INVOKED_AT,
		[ATT_ROW_RETRY_AT] = LEASE_RELEASE_RUN_AT,
		[ATT_ROW_PROGRESS] = LEASE_RELEASE_DIST_PROGRESS,
	};
	Datum		av[ATT_ROW_NARGS];
	char		an[ATT_ROW_NARGS];
	bool		isnull;
	int			i;

	if (n != 1)
		return;
	for (i = 0; i < ATT_ROW_NARGS; i++)
	{
		isnull = true;
		av[i] = cols[i] != 0 ? NtaskTupGetDatum(tt, 0, cols[i], &isnull) : (Datum) 0;
		an[i] = isnull ? 'n' : ' ';
	}
	(void) NtaskTupGetDatum(tt, 0, LEASE_RELEASE_DIST_INVOKED_AT, &isnull);
	av[ATT_ROW_ENDED_AT] = values[LEASE_RELEASE_ARG_NOW];
	an[ATT_ROW_ENDED_AT] = ' ';
	av[ATT_ROW_RESULT] = av[ATT_ROW_REQUESTED] = CStringGetTextDatum("released");
	an[ATT_ROW_RESULT] = an[ATT_ROW_REQUESTED] = ' ';
	av[ATT_ROW_KNOWN] = BoolGetDatum(isnull || DatumGetBool(values[LEASE_RELEASE_ARG_RECEIPT]));
	an[ATT_ROW_KNOWN] = ' ';
	NtaskLedgerRowDist(av, an);
}

/* not applied: what this token did with its attempt ($1 task, $2 token) */
typedef enum LeaseRequestedCol
{
	LEASE_REQUESTED_REQUESTED = 1,	/* NULL: the attempt is open or unknown */
	LEASE_REQUESTED_NCOLS = LEASE_REQUESTED_REQUESTED
} LeaseRequestedCol;

/* a pair, so that it runs on the direct path too */
static NtaskPair lease_requested_plan = NTASK_PAIR("release attempt lookup",
	NTASK_PLAIN(LEASE_REQUESTED_NCOLS,
	"SELECT a.requested FROM ntask.attempt a "
	"WHERE a.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("a", "$1")
	"  AND a.token OPERATOR(pg_catalog.=) $2 "
	/* the holder's final attempt kept on the task row */
	"UNION ALL "
	"SELECT t.state FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND t.token OPERATOR(pg_catalog.=) $2 AND t.attempt_worker IS NOT NULL",
	LEASE_RELEASE_ARG_DELAY, SPI_OK_SELECT),
	NTASK_ROUTED_LIKE_PLAIN,
	INT8OID, INT8OID);

/*
 * ntask_release(task_id, token, delay interval DEFAULT NULL) RETURNS text
 *		Hand a leased task back (a worker shutting down, or "snooze"): the
 *		attempt ends with result 'released'; the task is ready again at
 *		once, or after delay.  Never invoked: the attempt does not count
 *		against the budget (the deadline still runs).  Invoked: it counts,
 *		with its outcome unknown (prior_outcome 'unknown' for the next
 *		claim).  Returns 'applied'; 'duplicate' when this token already
 *		released; 'conflict' when it already made a transition; 'stale' when
 *		the task moved on.  Errors: as ntask_transition (P0002, 42501,
 *		NT003, 22004); a negative or over-10-years delay 22023.
 */
Datum
ntask_release(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	Interval   *delay = NtaskUsecsInterval(0);
	Datum		values[LEASE_RELEASE_NARGS];
	const char *result;
	bool		applied;
	SPITupleTable *row;

	if (!PG_ARGISNULL(2))
	{
		Interval   *d = PG_GETARG_INTERVAL_P(2);
		Interval	zero = {0};

		if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(d),
											 IntervalPGetDatum(&zero))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: delay must not be negative")));
		if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(d),
											 IntervalPGetDatum(&zero))))
			NtaskCheckPositiveInterval(d, "delay");
		delay = d;
	}
	values[LEASE_RELEASE_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[LEASE_RELEASE_ARG_TOKEN] = Int64GetDatum(token);
	values[LEASE_RELEASE_ARG_DELAY] = IntervalPGetDatum(delay);
	values[LEASE_RELEASE_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	/* on a Citus coordinator, its _on form delegated (coord.c) */
	{
		Datum		d;

		if (NtaskCoordDelegate(fcinfo, NTASK_ID_SHARD(task_id), NULL, -1, &d))
			return d;
	}

	SPI_connect();
	(void) NtaskDirectBegin(fcinfo, &task_id, 1);
	applied = NtaskExecPair(&lease_release, values, NULL) == 1;
	row = SPI_tuptable;
	if (applied)
	{
		bool		isnull;
		TimestampTz run_at = DatumGetTimestampTz(NtaskTupGetDatum(row, 0, LEASE_RELEASE_RUN_AT, &isnull));
		char	   *queue = NtaskTupGetCString(row, 0, LEASE_RELEASE_QUEUE);

		result = "applied";
		NtaskWakeWorkerAtCommit();	/* it may be an http task, due now */
		NtaskWakeCappedAtCommit(queue, 1);	/* a slot is free */
		if (run_at <= GetCurrentStatementStartTimestamp())
			NtaskWakeWaitersAtCommit(queue, 1, 0);
		else
			NtaskWakeWaitersAtCommit(queue, 0, run_at);
	}
	else
	{
		lease_check_token(task_id, token);
		if (NtaskExecPair(&lease_requested_plan, values, NULL) == 1 &&
			NtaskTupGetText(SPI_tuptable, 0, LEASE_REQUESTED_REQUESTED) != NULL)
			result = strcmp(NtaskTupGetCString(SPI_tuptable, 0, LEASE_REQUESTED_REQUESTED),
							"released") == 0 ?
				"duplicate" : "conflict";
		else
			result = "stale";
	}
	NtaskDirectEnd();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}
