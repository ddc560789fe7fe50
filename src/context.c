/*-------------------------------------------------------------------------
 *
 * context.c
 *	  The claim's context column (docs/design.md "The claim's context
 *	  column"): what a claimed task brings along besides its payload.
 *
 * A task with nothing to say gets NULL: the claim tests one boolean the
 * lease statement computes (has_context: a traceparent, checkpoints > 0, a
 * signal_key or has_parents) and calls NtaskClaimContext only when it is true.  Each
 * part has its own function; a part is added by a field of NtaskContextIn,
 * a column of the lease statement (and a term of its has_context), a
 * function here and its key:
 *
 *	traceparent		the enqueue's trace context with this attempt's span id
 *					as the parent id (35.6; NtaskChildTraceparent)
 *	checkpoints		{"step": value, ...}: the task's checkpoints (36.2)
 *	signal			{"key": k, "payload": p} once the signal was sent, else
 *					{"key": k, "timed_out": true}: the await's timeout
 *					let the task be claimed (36.3)
 *	parents			{"queue:key": result, ...}: the stored results of its
 *					parents (36.1; a parent pruned by retention is missing)
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
#include "common/hashfn.h"
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

static NtaskPlan ctx_parents_plan = {
	"context parents",
	"SELECT coalesce(pg_catalog.jsonb_object_agg("
	"    p.queue OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) p.task_key, p.result), "
	"    '{}'::pg_catalog.jsonb) "
	"FROM ntask.task_dep d JOIN ntask.task p ON p.task_id OPERATOR(pg_catalog.=) d.parent_id "
	"WHERE d.task_id OPERATOR(pg_catalog.=) $1",
	1, {INT8OID}
};

/*
 * ctx_task_object
 *		The one jsonb value plan p (one bigint parameter, the task id)
 *		returns, or NULL.
 */
static Jsonb *
ctx_task_object(NtaskPlan *p, int64 task_id)
{
	Datum		arg = Int64GetDatum(task_id);
	bool		isnull;
	Datum		d;

	if (NtaskExecPlan(p, &arg, NULL, SPI_OK_SELECT) != 1)
		return NULL;
	d = NtaskGetDatum(0, 1, &isnull);
	return isnull ? NULL : DatumGetJsonbP(d);
}

/*
 * NtaskContextParents
 *		The parents of a task with their stored results, queue:key: result.
 */
Jsonb *
NtaskContextParents(int64 task_id)
{
	return ctx_task_object(&ctx_parents_plan, task_id);
}

/*
 * NtaskContextCheckpoints
 *		The checkpoints of a task as one object, step: value; NULL when it
 *		has none.
 */
Jsonb *
NtaskContextCheckpoints(int64 task_id)
{
	return ctx_task_object(&ctx_checkpoints_plan, task_id);
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

/* ctx_add_string: "key": "value" into the object being built */
static void
ctx_add_string(JsonbParseState **st, const char *key, const char *value)
{
	JsonbValue	k;
	JsonbValue	v;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	(void) pushJsonbValue(st, WJB_KEY, &k);
	v.type = jbvString;
	v.val.string.val = (char *) value;
	v.val.string.len = strlen(value);
	(void) pushJsonbValue(st, WJB_VALUE, &v);
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
 * NtaskSpanId
 *		The span id of attempt (task_id, token): 64 bits derived from the
 *		two, never zero (W3C: an all-zero parent id is invalid).  The same
 *		attempt gets the same span id in the claim's context and in the
 *		HTTP dispatcher's header; different attempts of a task get
 *		different ones.
 */
uint64
NtaskSpanId(int64 task_id, int64 token)
{
	int64		k[2];
	uint64		h;

	k[0] = task_id;
	k[1] = token;
	h = hash_bytes_extended((const unsigned char *) k, sizeof(k),
							UINT64CONST(0x6e7461736b));	/* "ntask" */
	return h != 0 ? h : 1;
}

/*
 * NtaskChildTraceparent
 *		The traceparent of one attempt of a task enqueued with tp (valid,
 *		version 00): the same trace id and flags, the attempt's span id as
 *		the parent id.  palloc'd.
 */
char *
NtaskChildTraceparent(const char *tp, int64 task_id, int64 token)
{
	Assert(strlen(tp) == NTASK_TRACEPARENT_LEN);
	return psprintf("00-%.32s-%016llx-%.2s", tp + 3,
					(unsigned long long) NtaskSpanId(task_id, token), tp + 53);
}

/*
 * NtaskClaimContext
 *		The context column of a leased task: an object with a key for each
 *		of in's fields that is set, or NULL (*isnull) when none is.
 */
Datum
NtaskClaimContext(const NtaskContextIn *in, bool *isnull)
{
	JsonbParseState *st = NULL;
	JsonbValue *res;
	int			nkeys = 0;

	(void) pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	/* as enqueue stored it; a row written by hand is checked again */
	if (in->traceparent != NULL && NtaskTraceparentValid(in->traceparent, NULL))
	{
		ctx_add_string(&st, "traceparent",
					   NtaskChildTraceparent(in->traceparent, in->task_id, in->token));
		nkeys++;
	}
	if (in->checkpoints > 0)
	{
		Jsonb	   *ck = NtaskContextCheckpoints(in->task_id);

		if (ck != NULL)
		{
			ctx_put(&st, "checkpoints", ck);
			nkeys++;
		}
	}
	if (in->has_parents)
	{
		Jsonb	   *pa = NtaskContextParents(in->task_id);

		if (pa != NULL)
		{
			ctx_put(&st, "parents", pa);
			nkeys++;
		}
	}
	if (in->signal_key != NULL)
	{
		ctx_put(&st, "signal", NtaskContextSignal(in->queue, in->signal_key));
		nkeys++;
	}
	res = pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	*isnull = nkeys == 0;
	if (nkeys == 0)
		return (Datum) 0;
	return JsonbPGetDatum(JsonbValueToJsonb(res));
}
