/*-------------------------------------------------------------------------
 *
 * checkpoint.c
 *	  ntask_checkpoint: durable checkpoints inside one task,
 *	  fenced by the token like a receipt.
 *
 * A worker records a step it finished, in the same transaction as the
 * step's business write:
 *
 *	token holds the task (its latest, and the task is leased):
 *	  no checkpoint of the step yet			-> applied (row inserted,
 *											   task.checkpoints + 1)
 *	  the step written (by any token):
 *		same digest							-> duplicate
 *		other digest						-> conflict (the first one kept)
 *	the token no longer holds the task (taken over, canceled, ended):
 *	  the step written by this token		-> duplicate / conflict as above
 *											   (a retry after a lost commit
 *											   response)
 *	  otherwise								-> stale (nothing written)
 *
 * Values compare by their canonical digest (digest.c), as receipts do.
 * The task row is locked FOR NO KEY UPDATE first, as ntask_receipt does
 * (docs/design.md "Lock order", item 7): until the caller's transaction
 * ends a claim skips the task instead of taking it over, so the token
 * cannot lose the task between the check and the commit, and a takeover
 * that follows sees the step.  The checkpoints so far come with every
 * later claim of the task (context.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/checkpoint.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "context.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "access/detoast.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_checkpoint);
PG_FUNCTION_INFO_V1(ntask_context);

/* at most this many checkpoints per task (54000 above it) */
#define CKPT_MAX_PER_TASK	1000

/* ckpt_lock_plan's columns: the locked task row */
typedef enum CkptLockCol
{
	CKPT_LOCK_TOKEN = 1,
	CKPT_LOCK_LEASED,
	CKPT_LOCK_RIGHT,			/* the caller has the worker_role */
	CKPT_LOCK_COUNT,			/* task.checkpoints */
	CKPT_LOCK_NCOLS = CKPT_LOCK_COUNT
} CkptLockCol;

/* the parameters of ckpt_lock_plan and ctx_task_plan: the task, the caller */
typedef enum CkptLockArg
{
	CKPT_LOCK_ARG_TASK_ID,		/* $1 */
	CKPT_LOCK_ARG_CALLER,		/* $2, for the worker_role */
	CKPT_LOCK_NARGS
} CkptLockArg;

static NtaskPlan ckpt_lock_plan = {
	"checkpoint task lock",
	.ncols = CKPT_LOCK_NCOLS,
	"SELECT t.token, t.state OPERATOR(pg_catalog.=) 'leased', "
	"  " NTASK_WORKER_RIGHT("q", "2") ", t.checkpoints "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"FOR NO KEY UPDATE OF t",
	CKPT_LOCK_NARGS, {INT8OID, OIDOID}
};

/*
 * the parameters of ckpt_insert_plan; ckpt_step_plan and ckpt_sizes_plan
 * take the first two
 */
typedef enum CkptArg
{
	CKPT_ARG_TASK_ID,			/* $1 */
	CKPT_ARG_STEP,				/* $2 */
	CKPT_ARG_VALUE,				/* $3 */
	CKPT_ARG_DIGEST,			/* $4 */
	CKPT_ARG_DIGEST_VERSION,	/* $5 */
	CKPT_ARG_TOKEN,				/* $6 */
	CKPT_NARGS
} CkptArg;

/* the step's checkpoint, read by a new statement after the lock */
typedef enum CkptStepCol
{
	CKPT_STEP_DIGEST = 1,
	CKPT_STEP_DIGEST_VERSION,
	CKPT_STEP_TOKEN,
	CKPT_STEP_NCOLS = CKPT_STEP_TOKEN
} CkptStepCol;

static NtaskPlan ckpt_step_plan = {
	"checkpoint lookup",
	.ncols = CKPT_STEP_NCOLS,
	"SELECT c.value_digest, c.digest_version, c.token FROM ntask.checkpoint c "
	"WHERE c.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("c", "$1")
	"  AND c.step OPERATOR(pg_catalog.=) $2",
	CKPT_ARG_STEP + 1, {INT8OID, TEXTOID}
};

/* the insert and the task's count, one statement */
static NtaskPlan ckpt_insert_plan = {
	"checkpoint insert",
	.ncols = 0,
	"WITH ins AS ( "
	"  INSERT INTO ntask.checkpoint (task_id, shard, step, value, value_digest, "
	"    digest_version, token, written_at) "
	"  VALUES ($1, " NTASK_SHARD_VALUE("$1") ", $2, $3, $4, $5, $6, "
	"    pg_catalog.statement_timestamp()) "
	"  RETURNING 1 "
	") "
	"UPDATE ntask.task t SET checkpoints = t.checkpoints OPERATOR(pg_catalog.+) "
	"  (SELECT pg_catalog.count(*)::integer FROM ins) "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1"),
	CKPT_NARGS, {INT8OID, TEXTOID, JSONBOID, BYTEAOID, INT2OID, INT8OID}
};

/*
 * The values of a task's checkpoints but one step: their sizes are read
 * from the rows (toast_raw_datum_size), never detoasted.
 */
typedef enum CkptSizesCol
{
	CKPT_SIZES_VALUE = 1,
	CKPT_SIZES_NCOLS = CKPT_SIZES_VALUE
} CkptSizesCol;

static NtaskPlan ckpt_sizes_plan = {
	"checkpoint sizes",
	.ncols = CKPT_SIZES_NCOLS,
	"SELECT c.value FROM ntask.checkpoint c "
	"WHERE c.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("c", "$1")
	"  AND c.step OPERATOR(pg_catalog.<>) $2",
	CKPT_ARG_STEP + 1, {INT8OID, TEXTOID}
};

/*
 * ckpt_check_bytes
 *		A new checkpoint of value_bytes bytes must keep the task's
 *		checkpoints within ntask.max_context_bytes (54000): the claim's
 *		context carries them all.
 */
static void
ckpt_check_bytes(Datum *values, int64 task_id, Size value_bytes)
{
	SPITupleTable *tt;
	int64		total = value_bytes;
	int			n;
	int			r;

	n = NtaskExecPlan(&ckpt_sizes_plan, values, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	for (r = 0; r < n; r++)
	{
		bool		isnull;
		Datum		d = NtaskTupGetDatum(tt, r, CKPT_SIZES_VALUE, &isnull);

		if (!isnull)
			total += toast_raw_datum_size(d);
	}
	SPI_freetuptable(tt);
	if (total > (int64) ntask_max_context_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("ntask: the checkpoints of task %lld would hold %lld bytes, more than ntask.max_context_bytes (%d)",
						(long long) task_id, (long long) total, ntask_max_context_bytes),
				 errhint("Every claim of the task carries its checkpoints: keep large values elsewhere and a reference in the checkpoint.")));
}

/* ckpt_compare: duplicate or conflict against the checkpoint in step */
static const char *
ckpt_compare(Jsonb *value, bytea *digest, SPITupleTable *step)
{
	bool		isnull;

	return NtaskSameDigest(value, digest,
						   DatumGetByteaPP(NtaskTupGetDatum(step, 0, CKPT_STEP_DIGEST, &isnull)),
						   NtaskTupGetInt32(step, 0, CKPT_STEP_DIGEST_VERSION)) ?
		"duplicate" : "conflict";
}

/*
 * ntask_checkpoint(task_id bigint, token bigint, step text, value jsonb)
 *		RETURNS text
 *		See the file header.  Errors: NULL argument 22004; an empty step
 *		22023, one over 200 bytes 22001; a value over
 *		ntask.max_result_bytes, or more than 1000 checkpoints for one task,
 *		54000; unknown task P0002; no right to the task's queue 42501; a
 *		token never issued NT003; a stored checkpoint of an unknown digest
 *		version NT004.  Locks the task row (FOR NO KEY UPDATE) until the
 *		caller's transaction ends.
 */
Datum
ntask_checkpoint(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	text	   *step = NtaskArgText(fcinfo, 2, "step", NTASK_MAX_NAME_LEN);
	Jsonb	   *value = NtaskArgJsonb(fcinfo, 3, "value");
	bytea	   *digest;
	Datum		values[CKPT_NARGS];
	Datum		lockvals[CKPT_LOCK_NARGS];
	SPITupleTable *tt;
	bool		holds;
	int32		nckpt;
	const char *result;

	if (VARSIZE(value) > (Size) ntask_max_result_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("ntask: checkpoint value is %zu bytes, more than ntask.max_result_bytes (%d)",
						(Size) VARSIZE(value), ntask_max_result_bytes),
				 errhint("Store a large value elsewhere and keep a reference to it in the checkpoint.")));
	digest = NtaskDigest(value, NTASK_DIGEST_VERSION);

	values[CKPT_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[CKPT_ARG_STEP] = PointerGetDatum(step);
	values[CKPT_ARG_VALUE] = JsonbPGetDatum(value);
	values[CKPT_ARG_DIGEST] = PointerGetDatum(digest);
	values[CKPT_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);
	values[CKPT_ARG_TOKEN] = Int64GetDatum(token);
	lockvals[CKPT_LOCK_ARG_TASK_ID] = values[CKPT_ARG_TASK_ID];
	lockvals[CKPT_LOCK_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());

	SPI_connect();

	/*
	 * On a distributed install the checkpoints are co-located with their task
	 * (hash by shard): every statement below is routed to the task's shard.
	 * The row lock holds only on the placement it was taken on, so the
	 * shard's metadata lock first, as a receipt takes it (NtaskLockShards,
	 * docs/scaling.md "Shard moves").
	 */
	NtaskLockShard(NTASK_ID_SHARD(task_id));
	if (NtaskExecPlan(&ckpt_lock_plan, lockvals, NULL, SPI_OK_SELECT) == 0)
		NtaskTaskNotFound(task_id);
	tt = SPI_tuptable;
	if (!NtaskTupGetBool(tt, 0, CKPT_LOCK_RIGHT))
		NtaskTaskRightDenied(task_id);
	NtaskCheckTokenIssued(task_id, token, NtaskTupGetInt64(tt, 0, CKPT_LOCK_TOKEN));
	holds = token == NtaskTupGetInt64(tt, 0, CKPT_LOCK_TOKEN) &&
		NtaskTupGetBool(tt, 0, CKPT_LOCK_LEASED);
	nckpt = NtaskTupGetInt32(tt, 0, CKPT_LOCK_COUNT);
	if (holds && nckpt >= CKPT_MAX_PER_TASK &&
		NtaskExecPlan(&ckpt_step_plan, values, NULL, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("ntask: task %lld has %d checkpoints, the most one task may have",
						(long long) task_id, CKPT_MAX_PER_TASK),
				 errhint("Checkpoint coarser steps, or keep a step's progress in one value.")));

	/*
	 * A new statement, so a new snapshot: after a wait for the lock it sees
	 * what the transaction that held it committed.
	 */
	if (NtaskExecPlan(&ckpt_step_plan, values, NULL, SPI_OK_SELECT) == 1)
	{
		tt = SPI_tuptable;
		if (holds || NtaskTupGetInt64(tt, 0, CKPT_STEP_TOKEN) == token)
			result = ckpt_compare(value, digest, tt);
		else
			result = "stale";
	}
	else if (holds)
	{
		if (nckpt > 0 || VARSIZE(value) > (Size) ntask_max_context_bytes)
			ckpt_check_bytes(values, task_id, VARSIZE(value));
		(void) NtaskExecPlan(&ckpt_insert_plan, values, NULL, SPI_OK_UPDATE);
		result = "applied";
	}
	else
		result = "stale";
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/* ctx_task_plan's columns: what the context of the task is built from */
typedef enum CtxTaskCol
{
	CTX_TASK_TOKEN = 1,
	CTX_TASK_LEASED,
	CTX_TASK_RIGHT,
	CTX_TASK_QUEUE,
	CTX_TASK_TRACEPARENT,
	CTX_TASK_CHECKPOINTS,
	CTX_TASK_SIGNAL_KEY,
	CTX_TASK_HAS_PARENTS,
	CTX_TASK_NCOLS = CTX_TASK_HAS_PARENTS
} CtxTaskCol;

static NtaskPlan ctx_task_plan = {
	"context task",
	.ncols = CTX_TASK_NCOLS,
	"SELECT t.token, t.state OPERATOR(pg_catalog.=) 'leased', "
	"  " NTASK_WORKER_RIGHT("q", "2") ", t.queue, t.traceparent, t.checkpoints, "
	"  t.signal_key, t.has_parents "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1"),
	CKPT_LOCK_NARGS, {INT8OID, OIDOID}
};

/*
 * ntask_context(task_id bigint, token bigint) RETURNS jsonb
 *		The whole context of the attempt the token holds, as a claim would
 *		hand it out without its claim's budget: for a task whose claim
 *		said "deferred": true.  NULL when the token no longer holds the
 *		task (the lease was lost), or when the task has no context.
 *		Errors: NULL argument 22004; unknown task P0002; no right to the
 *		task's queue 42501; a token never issued NT003.  Takes no lock.
 */
Datum
ntask_context(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	Datum		values[CKPT_LOCK_NARGS];
	SPITupleTable *tt;
	NtaskContextIn in = {0};
	bool		isnull = true;
	bool		sknull;
	Datum		sk;
	Datum		d = (Datum) 0;
	MemoryContext caller = CurrentMemoryContext;

	values[CKPT_LOCK_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[CKPT_LOCK_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	SPI_connect();
	if (NtaskExecPlan(&ctx_task_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskTaskNotFound(task_id);
	tt = SPI_tuptable;
	if (!NtaskTupGetBool(tt, 0, CTX_TASK_RIGHT))
		NtaskTaskRightDenied(task_id);
	NtaskCheckTokenIssued(task_id, token, NtaskTupGetInt64(tt, 0, CTX_TASK_TOKEN));
	if (token == NtaskTupGetInt64(tt, 0, CTX_TASK_TOKEN) && NtaskTupGetBool(tt, 0, CTX_TASK_LEASED))
	{
		in.task_id = task_id;
		in.token = token;
		in.queue = NtaskTupGetText(tt, 0, CTX_TASK_QUEUE);
		in.traceparent = NtaskTupGetCString(tt, 0, CTX_TASK_TRACEPARENT);
		in.checkpoints = NtaskTupGetInt32(tt, 0, CTX_TASK_CHECKPOINTS);
		sk = NtaskTupGetDatum(tt, 0, CTX_TASK_SIGNAL_KEY, &sknull);
		in.signal_key = sknull ? NULL : DatumGetTextPCopy(sk);
		in.has_parents = NtaskTupGetBool(tt, 0, CTX_TASK_HAS_PARENTS);
		in.claim_bytes = NULL;
		d = NtaskClaimContext(&in, &isnull);
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(caller);

			d = PointerGetDatum(DatumGetJsonbPCopy(d));
			MemoryContextSwitchTo(old);
		}
	}
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(d);
}
