/*-------------------------------------------------------------------------
 *
 * receipt.c
 *	  ntask_receipt: the three-state commit receipt, written in the caller's
 *	  business transaction, and the digest comparison it shares with
 *	  ntask_fence.
 *
 * Leases decide who should keep trying; receipts prove what was committed.
 * A worker calls ntask_receipt(task_id, token, payload) in the same
 * transaction as its business write:
 *
 *	token still the task's latest and its attempt not ended (by its own
 *	report, a release or await, or by someone else: takeover, cancel):
 *	  no receipt of the task yet			-> applied (receipt inserted)
 *	  a receipt of the task, of this token or an earlier one (W1 committed,
 *	  stalled, W2 took over):
 *		same digest							-> duplicate (nothing written:
 *											   one business commit per task)
 *		other digest						-> conflict (the first one kept)
 *	the task moved past token, or its attempt ended:
 *	  a receipt of this token				-> duplicate / conflict as above
 *											   (a retry after a lost commit
 *											   response)
 *	  none									-> stale
 *
 * The insert is INSERT ... ON CONFLICT DO NOTHING RETURNING, so a duplicate
 * never raises inside the caller's transaction.  The task row is locked
 * FOR NO KEY UPDATE first: until the business transaction ends, a claim
 * skips the task (SKIP LOCKED) instead of taking it over, so the fence
 * cannot move between the check and the commit.  A takeover that follows
 * sees the receipt (prior_outcome = 'committed').  The lock is exclusive
 * (not FOR SHARE) so that two business transactions of one task queue up
 * behind each other instead of both holding a shared lock and then
 * deadlocking in their transitions; the second sees the first's receipt.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/receipt.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"
#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_receipt);

/*
 * The task row, locked: its token and state are those of the latest
 * committed version (a lock that waited re-reads the row).  Nothing else
 * is decided here: a subquery in this statement would still see the
 * statement's snapshot from before the wait (a cancel that committed
 * meanwhile), so the attempt is read by the next statement.
 */
typedef enum RcptLockCol
{
	RCPT_LOCK_TOKEN = 1,
	RCPT_LOCK_RIGHT,			/* the caller has the worker_role */
	RCPT_LOCK_NCOLS = RCPT_LOCK_RIGHT
} RcptLockCol;

/* the parameters of rcpt_lock_plan */
typedef enum RcptLockArg
{
	RCPT_LOCK_ARG_TASK_ID,		/* $1 */
	RCPT_LOCK_ARG_CALLER,		/* $2, for the worker_role */
	RCPT_LOCK_NARGS
} RcptLockArg;

static NtaskPlan rcpt_lock_plan = {
	"receipt task lock",
	.ncols = RCPT_LOCK_NCOLS,
	"SELECT t.token, " NTASK_WORKER_RIGHT("q", "2") " "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"FOR NO KEY UPDATE OF t",
	RCPT_LOCK_NARGS, {INT8OID, OIDOID}
};

/*
 * The parameters of rcpt_insert_plan; rcpt_closed_plan, rcpt_task_plan
 * and rcpt_existing_plan take the first one or two of the same values[].
 */
typedef enum RcptArg
{
	RCPT_ARG_TASK_ID,			/* $1 */
	RCPT_ARG_TOKEN,				/* $2 */
	RCPT_ARG_DIGEST,			/* $3 */
	RCPT_ARG_DIGEST_VERSION,	/* $4 */
	RCPT_NARGS
} RcptArg;

/*
 * Whether this token's attempt has ended, however: closed by someone
 * else (takeover, cancel, guard, expiry), handed back (ntask_release,
 * ntask_await) or by the holder's own report (a transition to any state:
 * a worker that reported failure and then writes the business
 * row is stopped; one that reported success wrote its receipt before).
 * A new statement, so a new snapshot: it sees every change committed
 * before the lock above was granted, and nothing can close the attempt
 * while the lock is held (claim skips the row, cancel and housekeeping
 * wait or skip).
 */
typedef enum RcptClosedCol
{
	RCPT_CLOSED_ENDED = 1,		/* the attempt has ended */
	RCPT_CLOSED_NCOLS = RCPT_CLOSED_ENDED
} RcptClosedCol;

static NtaskPlan rcpt_closed_plan = {
	"receipt attempt closed",
	.ncols = RCPT_CLOSED_NCOLS,
	"SELECT a.ended_at IS NOT NULL "
	"FROM ntask.attempt a "
	"WHERE a.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("a", "$1")
	"  AND a.token OPERATOR(pg_catalog.=) $2 "
	/* the holder's final attempt kept on the task row (ended) */
	"UNION ALL "
	"SELECT true FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND t.token OPERATOR(pg_catalog.=) $2 AND t.attempt_worker IS NOT NULL",
	RCPT_ARG_TOKEN + 1, {INT8OID, INT8OID}
};

static NtaskPlan rcpt_insert_plan = {
	"receipt insert",
	.ncols = 1,
	"INSERT INTO ntask.receipt (task_id, shard, token, payload_digest, digest_version) "
	"VALUES ($1, " NTASK_SHARD_VALUE("$1") ", $2, $3, $4) "
	"ON CONFLICT ON CONSTRAINT receipt_pkey DO NOTHING RETURNING 1",
	RCPT_NARGS, {INT8OID, INT8OID, BYTEAOID, INT2OID}
};

/*
 * The task's first receipt, whatever its token: a later attempt of a task
 * whose business write was committed must not commit it again.  Read by
 * a new statement after the lock, like rcpt_closed_plan.
 */
/* the columns of rcpt_task_plan and rcpt_existing_plan: a stored receipt */
typedef enum RcptDigestCol
{
	RCPT_DIGEST = 1,
	RCPT_DIGEST_VERSION,
	RCPT_DIGEST_NCOLS = RCPT_DIGEST_VERSION
} RcptDigestCol;

static NtaskPlan rcpt_task_plan = {
	"receipt of the task",
	.ncols = RCPT_DIGEST_NCOLS,
	"SELECT r.payload_digest, r.digest_version FROM ntask.receipt r "
	"WHERE r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1")
	"ORDER BY r.token LIMIT 1",
	RCPT_ARG_TASK_ID + 1, {INT8OID}
};

static NtaskPlan rcpt_existing_plan = {
	"receipt lookup",
	.ncols = RCPT_DIGEST_NCOLS,
	"SELECT r.payload_digest, r.digest_version FROM ntask.receipt r "
	"WHERE r.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("r", "$1")
	"  AND r.token OPERATOR(pg_catalog.=) $2",
	RCPT_ARG_TOKEN + 1, {INT8OID, INT8OID}
};

/*
 * NtaskSameDigest
 *		Does payload have the digest stored with the given version?  The
 *		digest is recomputed under the stored version (current_digest, of
 *		NTASK_DIGEST_VERSION, is reused when the versions match); a version
 *		this build does not know fails closed with NT004.
 */
bool
NtaskSameDigest(Jsonb *payload, bytea *current_digest, bytea *stored,
				int stored_version)
{
	bytea	   *cmp = current_digest;

	if (stored_version != NTASK_DIGEST_VERSION)
		cmp = NtaskDigest(payload, stored_version);
	return VARSIZE_ANY_EXHDR(stored) == VARSIZE_ANY_EXHDR(cmp) &&
		memcmp(VARDATA_ANY(stored), VARDATA_ANY(cmp),
			   VARSIZE_ANY_EXHDR(cmp)) == 0;
}

/* rcpt_compare: duplicate or conflict against the receipt in row 0 of tt */
static const char *
rcpt_compare(Jsonb *payload, bytea *digest, SPITupleTable *tt)
{
	bool		isnull;

	return NtaskSameDigest(payload, digest,
						   DatumGetByteaPP(NtaskTupGetDatum(tt, 0, RCPT_DIGEST, &isnull)),
						   NtaskTupGetInt32(tt, 0, RCPT_DIGEST_VERSION)) ? "duplicate" : "conflict";
}

/*
 * ntask_receipt(task_id bigint, token bigint, payload jsonb) RETURNS text
 *		See the file header.  Errors: NULL argument 22004; unknown task
 *		P0002; no right to the task's queue 42501; a token never issued
 *		NT003; a stored receipt of an unknown digest version NT004.  Locks
 *		the task row (FOR NO KEY UPDATE) until the caller's transaction ends.
 */
Datum
ntask_receipt(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	Jsonb	   *payload;
	bytea	   *digest;
	Datum		values[RCPT_NARGS];
	Datum		lockvals[RCPT_LOCK_NARGS];
	SPITupleTable *tt;
	bool		stale;
	const char *result;

	payload = NtaskArgJsonb(fcinfo, 2, "payload");
	digest = NtaskDigest(payload, NTASK_DIGEST_VERSION);

	values[RCPT_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[RCPT_ARG_TOKEN] = Int64GetDatum(token);
	values[RCPT_ARG_DIGEST] = PointerGetDatum(digest);
	values[RCPT_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);

	lockvals[RCPT_LOCK_ARG_TASK_ID] = values[RCPT_ARG_TASK_ID];
	lockvals[RCPT_LOCK_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());

	SPI_connect();

	/*
	 * On a distributed install the row lock below holds only on the placement
	 * it was taken on: the shard's metadata lock first, to the end of the
	 * business transaction, so that a shard move waits for it
	 * (NtaskLockShards, docs/scaling.md "Shard moves").
	 */
	NtaskLockShard(NTASK_ID_SHARD(task_id));
	if (NtaskExecPlan(&rcpt_lock_plan, lockvals, NULL, SPI_OK_SELECT) == 0)
		NtaskTaskNotFound(task_id);
	tt = SPI_tuptable;
	if (!NtaskTupGetBool(tt, 0, RCPT_LOCK_RIGHT))
		NtaskTaskRightDenied(task_id);
	NtaskCheckTokenIssued(task_id, token, NtaskTupGetInt64(tt, 0, RCPT_LOCK_TOKEN));
	stale = token < NtaskTupGetInt64(tt, 0, RCPT_LOCK_TOKEN);
	if (!stale)
		stale = NtaskExecPlan(&rcpt_closed_plan, values, NULL, SPI_OK_SELECT) == 1 &&
			NtaskTupGetBool(SPI_tuptable, 0, RCPT_CLOSED_ENDED);

	/*
	 * The token holds the task: compare with the task's receipt, of any
	 * token, if there is one; else write this one.  A stale token: only its
	 * own receipt (a retry after a lost commit response) answers.
	 */
	if (!stale && NtaskExecPlan(&rcpt_task_plan, values, NULL, SPI_OK_SELECT) == 1)
		result = rcpt_compare(payload, digest, SPI_tuptable);
	else if (!stale &&
			 NtaskExecPlan(&rcpt_insert_plan, values, NULL, SPI_OK_INSERT_RETURNING) == 1)
		result = "applied";
	else if (NtaskExecPlan(&rcpt_existing_plan, values, NULL, SPI_OK_SELECT) == 1)
		result = rcpt_compare(payload, digest, SPI_tuptable);
	else
	{
		/* no receipt; only possible when stale (else the insert applied) */
		Assert(stale);
		result = "stale";
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}
