/*-------------------------------------------------------------------------
 *
 * context.c
 *	  The claim's context column (docs/design.md "The claim's context
 *	  column"): what a claimed task brings along besides its payload.
 *
 * The lease statement returns the task columns that say whether a part is
 * present (checkpoints > 0, signal_key set); NtaskClaimContext is called
 * only for the rows where one is, so a plain task costs the claim one
 * test.  Each part has its own function, so a later part is one more
 * function and one more key:
 *
 *	checkpoints		{"step": value, ...}: the task's checkpoints (36.2)
 *	signal			{"key": k, "payload": p} once the signal was sent, else
 *					{"key": k, "timed_out": true}: the await's timeout
 *					let the task be claimed (36.3)
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/context.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_task.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

static NtaskPlan ctx_checkpoints_plan = {
	"context checkpoints",
	"SELECT pg_catalog.jsonb_object_agg(c.step, c.value ORDER BY c.step) "
	"FROM ntask.checkpoint c "
	"WHERE c.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("c", "$1"),
	1, {INT8OID}
};

static NtaskPlan ctx_signal_plan = {
	"context signal",
	"SELECT CASE WHEN s.sent_at IS NOT NULL "
	"  THEN pg_catalog.jsonb_build_object('key', $2, 'payload', s.payload) END "
	"FROM ntask.signal s "
	"WHERE s.queue OPERATOR(pg_catalog.=) $1 "
	"  AND s.signal_key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID}
};

/*
 * NtaskContextCheckpoints
 *		The checkpoints of a task as one object, step: value; NULL when it
 *		has none.
 */
Jsonb *
NtaskContextCheckpoints(int64 task_id)
{
	Datum		arg = Int64GetDatum(task_id);
	bool		isnull;
	Datum		d;

	if (NtaskExecPlan(&ctx_checkpoints_plan, &arg, NULL, SPI_OK_SELECT) != 1)
		return NULL;
	d = NtaskGetDatum(0, 1, &isnull);
	return isnull ? NULL : DatumGetJsonbP(d);
}

/*
 * NtaskContextSignal
 *		The signal a task awaited: its payload once sent, else that the
 *		await timed out.
 */
Jsonb *
NtaskContextSignal(text *queue, text *signal_key)
{
	Datum		args[2];
	bool		isnull = true;
	Datum		d = (Datum) 0;
	JsonbParseState *st = NULL;
	JsonbValue	k;
	JsonbValue	v;

	args[0] = PointerGetDatum(queue);
	args[1] = PointerGetDatum(signal_key);
	if (NtaskExecPlan(&ctx_signal_plan, args, NULL, SPI_OK_SELECT) == 1)
		d = NtaskGetDatum(0, 1, &isnull);
	if (!isnull)
		return DatumGetJsonbP(d);

	(void) pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	k.type = jbvString;
	k.val.string.val = "key";
	k.val.string.len = 3;
	(void) pushJsonbValue(&st, WJB_KEY, &k);
	v.type = jbvString;
	v.val.string.val = VARDATA_ANY(signal_key);
	v.val.string.len = VARSIZE_ANY_EXHDR(signal_key);
	(void) pushJsonbValue(&st, WJB_VALUE, &v);
	k.val.string.val = "timed_out";
	k.val.string.len = 9;
	(void) pushJsonbValue(&st, WJB_KEY, &k);
	v.type = jbvBool;
	v.val.boolean = true;
	(void) pushJsonbValue(&st, WJB_VALUE, &v);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/* ctx_put: key: part (a whole jsonb) into the object being built */
static void
ctx_put(JsonbParseState **st, const char *key, Jsonb *part)
{
	JsonbValue	k;
	JsonbValue	v;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	(void) pushJsonbValue(st, WJB_KEY, &k);
	v.type = jbvBinary;
	v.val.binary.data = &part->root;
	v.val.binary.len = VARSIZE(part) - VARHDRSZ;
	(void) pushJsonbValue(st, WJB_VALUE, &v);
}

/*
 * NtaskClaimContext
 *		The context of a claimed task whose row says it has checkpoints
 *		(checkpoints > 0) or a signal (signal_key not NULL).  Runs SPI
 *		statements: SPI_tuptable is replaced (the caller keeps its rows).
 *		Returns NULL when no part has anything.
 */
Jsonb *
NtaskClaimContext(int64 task_id, text *queue, int32 checkpoints,
				  text *signal_key)
{
	Jsonb	   *ck = checkpoints > 0 ? NtaskContextCheckpoints(task_id) : NULL;
	Jsonb	   *sig = signal_key ? NtaskContextSignal(queue, signal_key) : NULL;
	JsonbParseState *st = NULL;

	if (ck == NULL && sig == NULL)
		return NULL;
	(void) pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	if (ck)
		ctx_put(&st, "checkpoints", ck);
	if (sig)
		ctx_put(&st, "signal", sig);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}
