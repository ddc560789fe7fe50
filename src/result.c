/*-------------------------------------------------------------------------
 *
 * result.c
 *	  Stored results: the size check of a succeeded task's result
 *	  (ntask_transition and its batch and combined forms store it), and
 *	  ntask_result, a producer's read of a task's state, outcome and result
 *	  by its business key (docs/design.md "Results and replay").
 *
 * A result is read under the producer's rule, the same as a duplicate
 * ntask_enqueue: the queue's producer_role is checked before anything
 * about the key is looked up, so a caller without the right gets the same
 * 42501 whether or not the key exists, and nothing of the task.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/result.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"
#include "ntask_task.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_result);

/* the parameters of result_read_plan */
typedef enum ResultReadArg
{
	RESULT_READ_ARG_QUEUE,		/* $1 */
	RESULT_READ_ARG_KEY,		/* $2 */
	RESULT_READ_NARGS
} ResultReadArg;

/* the columns of result_read_plan: those of ntask_result's row */
typedef enum ResultReadCol
{
	RESULT_READ_STATE = 1,
	RESULT_READ_OUTCOME,
	RESULT_READ_RESULT,
	RESULT_READ_FINISHED_AT,
	RESULT_READ_NCOLS = RESULT_READ_FINISHED_AT
} ResultReadCol;

static NtaskPlan result_read_plan = {
	"result read",
	.ncols = RESULT_READ_NCOLS,
	"SELECT t.state, t.outcome, t.result, t.finished_at FROM ntask.task t "
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 "
	"  AND t.task_key OPERATOR(pg_catalog.=) $2",
	RESULT_READ_NARGS, {TEXTOID, TEXTOID}
};

/*
 * NtaskCheckResult
 *		A result to store (detoasted) within ntask.max_result_bytes, else
 *		54000; element > 0 names it as results[element] of a batch.
 */
void
NtaskCheckResult(Jsonb *jb, int element)
{
	Size		size = VARSIZE(jb);

	if (size > (Size) ntask_max_result_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("ntask: %s is %zu bytes, more than ntask.max_result_bytes (%d)",
						element > 0 ? psprintf("results[%d]", element) : "result",
						size, ntask_max_result_bytes),
				 errhint("Store a large result elsewhere and keep a reference to it in the result.")));
}

/*
 * NtaskArgResult
 *		The result argument at argno (jsonb, may be NULL), checked with
 *		NtaskCheckResult.  Returns it detoasted.
 */
Datum
NtaskArgResult(FunctionCallInfo fcinfo, int argno, bool *isnull)
{
	Jsonb	   *jb;

	*isnull = true;
	if (PG_ARGISNULL(argno))
		return (Datum) 0;
	jb = PG_GETARG_JSONB_P(argno);
	NtaskCheckResult(jb, 0);
	*isnull = false;
	return JsonbPGetDatum(jb);
}

/*
 * ntask_result(queue text, task_key text)
 *		RETURNS TABLE(state text, outcome text, result jsonb,
 *					  finished_at timestamptz)
 *
 * For producers: the task of (queue, task_key), or no row when there is
 * none (never enqueued, or pruned by retention).  result is the one its
 * succeeded attempt stored (NULL otherwise); outcome is the succeeded
 * attempt's label.  Errors: unknown queue 42704; no producer right on the
 * queue 42501, raised before the key is looked up; NULL argument 22004.
 */
Datum
ntask_result(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	text	   *key = NtaskArgText(fcinfo, 1, "task_key", NTASK_MAX_KEY_LEN);
	Datum		values[RESULT_READ_NARGS];

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	NtaskCheckQueueRight(queue, true);
	values[RESULT_READ_ARG_QUEUE] = PointerGetDatum(queue);
	values[RESULT_READ_ARG_KEY] = PointerGetDatum(key);
	if (NtaskExecPlan(&result_read_plan, values, NULL, SPI_OK_SELECT) == 1)
	{
		Datum		out[RESULT_READ_NCOLS];
		bool		nulls[RESULT_READ_NCOLS];
		int			c;

		/* the row as read: out[c - 1] is column c */
		for (c = RESULT_READ_STATE; c <= RESULT_READ_NCOLS; c++)
			out[c - 1] = NtaskTupGetDatum(SPI_tuptable, 0, c, &nulls[c - 1]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}
