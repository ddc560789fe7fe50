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

#include "context.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "access/detoast.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/* the column of ctx_checkpoints_plan and ctx_signal_plan: one jsonb */
typedef enum CtxObjectCol
{
	CTX_OBJECT_VALUE = 1,
	CTX_OBJECT_NCOLS = CTX_OBJECT_VALUE
} CtxObjectCol;

/* the parameter of ctx_checkpoints_plan and ctx_parents_plan */
typedef enum CtxTaskArg
{
	CTX_TASK_ARG_TASK_ID,		/* $1 */
	CTX_TASK_NARGS
} CtxTaskArg;

static NtaskPlan ctx_checkpoints_plan = {
	"context checkpoints",
	.ncols = CTX_OBJECT_NCOLS,
	"SELECT pg_catalog.jsonb_object_agg(c.step, c.value ORDER BY c.step) "
	"FROM ntask.checkpoint c "
	"WHERE c.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("c", "$1"),
	CTX_TASK_NARGS, {INT8OID}
};

/* the parameters of ctx_signal_plan */
typedef enum CtxSignalArg
{
	CTX_SIGNAL_ARG_QUEUE,		/* $1 */
	CTX_SIGNAL_ARG_KEY,			/* $2 */
	CTX_SIGNAL_ARG_SHARD,		/* $3 */
	CTX_SIGNAL_NARGS
} CtxSignalArg;

static NtaskPlan ctx_signal_plan = {
	"context signal",
	.ncols = CTX_OBJECT_NCOLS,
	"SELECT CASE WHEN s.sent_at IS NOT NULL "
	"  THEN pg_catalog.jsonb_build_object('key', $2, 'payload', s.payload) END "
	"FROM ntask.signal s "
	"WHERE s.queue OPERATOR(pg_catalog.=) $1 "
	"  AND s.signal_key OPERATOR(pg_catalog.=) $2 "
	"  AND s.shard OPERATOR(pg_catalog.=) $3",
	CTX_SIGNAL_NARGS, {TEXTOID, TEXTOID, INT2OID}
};

/*
 * The parents one by one, in task_id order: the results stay toasted in
 * the result rows until ctx_parents decides to take them
 * (toast_raw_datum_size reads a value's size without detoasting it).
 */
typedef enum CtxParentCol
{
	CTX_PARENT_KEY = 1,
	CTX_PARENT_RESULT,
	CTX_PARENT_NCOLS = CTX_PARENT_RESULT
} CtxParentCol;

static NtaskPlan ctx_parents_plan = {
	"context parents",
	.ncols = CTX_PARENT_NCOLS,
	"SELECT p.queue OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) p.task_key, p.result "
	"FROM ntask.task_dep d JOIN ntask.task p ON p.task_id OPERATOR(pg_catalog.=) d.parent_id "
	"  AND p.shard OPERATOR(pg_catalog.=) d.shard "	/* a child's parents share its shard */
	"WHERE d.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("d", "$1")
	"ORDER BY p.task_id",
	CTX_TASK_NARGS, {INT8OID}
};

/*
 * ctx_take
 *		The jsonb in column col of row r of the result tt, copied into cxt
 *		(NULL for SQL NULL).  SPI switches to its own
 *		memory context after each statement, and keeps each result until
 *		it is freed: the caller frees it (SPI_freetuptable), so a claim of
 *		many tasks holds only what it hands out.
 */
static Jsonb *
ctx_take(MemoryContext cxt, SPITupleTable *tt, int r, int col)
{
	bool		isnull;
	Datum		d = NtaskTupGetDatum(tt, r, col, &isnull);
	MemoryContext old;
	Jsonb	   *j;

	if (isnull)
		return NULL;
	old = MemoryContextSwitchTo(cxt);
	j = DatumGetJsonbPCopy(d);
	MemoryContextSwitchTo(old);
	return j;
}

/*
 * ctx_task_object
 *		The one jsonb value plan p (one bigint parameter, the task id)
 *		returns, or NULL; in cxt.
 */
static Jsonb *
ctx_task_object(MemoryContext cxt, NtaskPlan *p, int64 task_id)
{
	Datum		args[CTX_TASK_NARGS];
	Jsonb	   *j = NULL;

	args[CTX_TASK_ARG_TASK_ID] = Int64GetDatum(task_id);
	if (NtaskExecPlan(p, args, NULL, SPI_OK_SELECT) == 1)
		j = ctx_take(cxt, SPI_tuptable, 0, CTX_OBJECT_VALUE);
	SPI_freetuptable(SPI_tuptable);
	return j;
}

/* ctx_key: a jsonb string value of len bytes at s */
static void
ctx_string(JsonbValue *v, const char *s, int len)
{
	v->type = jbvString;
	v->val.string.val = (char *) s;
	v->val.string.len = len;
}

/*
 * NtaskContextParents
 *		The parents of a task with their stored results, queue:key: result,
 *		as long as the results' bytes stay within budget; the parents whose
 *		results did not fit are listed in *omitted (an array of queue:key,
 *		NULL when none was left out): their results are read with
 *		ntask_result.  In the current memory context.
 */
Jsonb *
NtaskContextParents(int64 task_id, int64 budget, Jsonb **omitted)
{
	MemoryContext cxt = CurrentMemoryContext;
	Datum		args[CTX_TASK_NARGS];
	SPITupleTable *tt;
	JsonbParseState *st = NULL;
	JsonbParseState *om = NULL;
	JsonbValue *res;
	Jsonb	   *out;
	int64		used = 0;
	int			nomitted = 0;
	int			n;
	int			r;

	*omitted = NULL;
	args[CTX_TASK_ARG_TASK_ID] = Int64GetDatum(task_id);
	n = NtaskExecPlan(&ctx_parents_plan, args, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	MemoryContextSwitchTo(cxt);
	(void) pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	for (r = 0; r < n; r++)
	{
		char	   *key = NtaskTupGetCString(tt, r, CTX_PARENT_KEY);
		bool		isnull;
		Datum		d = NtaskTupGetDatum(tt, r, CTX_PARENT_RESULT, &isnull);
		Size		size = isnull ? 0 : toast_raw_datum_size(d);
		JsonbValue	k;
		JsonbValue	v;

		ctx_string(&k, key, strlen(key));
		if (used + (int64) size > budget)
		{
			if (om == NULL)
				(void) pushJsonbValue(&om, WJB_BEGIN_ARRAY, NULL);
			(void) pushJsonbValue(&om, WJB_ELEM, &k);
			nomitted++;
			continue;
		}
		used += size;
		(void) pushJsonbValue(&st, WJB_KEY, &k);
		if (isnull)
		{
			v.type = jbvNull;
			(void) pushJsonbValue(&st, WJB_VALUE, &v);
		}
		else
		{
			Jsonb	   *j = DatumGetJsonbP(d);

			v.type = jbvBinary;
			v.val.binary.data = &j->root;
			v.val.binary.len = VARSIZE(j) - VARHDRSZ;
			(void) pushJsonbValue(&st, WJB_VALUE, &v);
		}
	}
	res = pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	if (nomitted > 0)
		*omitted = JsonbValueToJsonb(pushJsonbValue(&om, WJB_END_ARRAY, NULL));
	/* a result stored inline points into the rows: serialize, then free */
	out = JsonbValueToJsonb(res);
	SPI_freetuptable(tt);
	return out;
}

/*
 * NtaskContextCheckpoints
 *		The checkpoints of a task as one object, step: value; NULL when it
 *		has none.  In the current memory context.
 */
Jsonb *
NtaskContextCheckpoints(int64 task_id)
{
	return ctx_task_object(CurrentMemoryContext, &ctx_checkpoints_plan, task_id);
}

/*
 * NtaskContextSignal
 *		The signal a task awaited: its payload once sent, else that the
 *		await timed out.  In the current memory context.
 */
Jsonb *
NtaskContextSignal(text *queue, text *signal_key)
{
	MemoryContext cxt = CurrentMemoryContext;
	Datum		args[CTX_SIGNAL_NARGS];
	Jsonb	   *j = NULL;
	JsonbParseState *st = NULL;
	JsonbValue	k;
	JsonbValue	v;

	args[CTX_SIGNAL_ARG_QUEUE] = PointerGetDatum(queue);
	args[CTX_SIGNAL_ARG_KEY] = PointerGetDatum(signal_key);
	/* the row's shard: its queue and key's (signal.c; 0 on a plain install) */
	args[CTX_SIGNAL_ARG_SHARD] = Int16GetDatum(NtaskShardOfKey(queue, signal_key));
	if (NtaskExecPlan(&ctx_signal_plan, args, NULL, SPI_OK_SELECT) == 1)
		j = ctx_take(cxt, SPI_tuptable, 0, CTX_OBJECT_VALUE);
	SPI_freetuptable(SPI_tuptable);
	MemoryContextSwitchTo(cxt);
	if (j != NULL)
		return j;

	(void) pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	ctx_string(&k, "key", 3);
	(void) pushJsonbValue(&st, WJB_KEY, &k);
	ctx_string(&v, VARDATA_ANY(signal_key), VARSIZE_ANY_EXHDR(signal_key));
	(void) pushJsonbValue(&st, WJB_VALUE, &v);
	ctx_string(&k, "timed_out", 9);
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

/* ctx_add_bool: "key": true into the object being built */
static void
ctx_add_true(JsonbParseState **st, const char *key)
{
	JsonbValue	k;
	JsonbValue	v;

	ctx_string(&k, key, strlen(key));
	(void) pushJsonbValue(st, WJB_KEY, &k);
	v.type = jbvBool;
	v.val.boolean = true;
	(void) pushJsonbValue(st, WJB_VALUE, &v);
}

/*
 * The background worker's dispatcher reads only the traceparent of the
 * claim's context: while it claims, this is set, and nothing else is built.
 */
bool		ntask_context_trace_only = false;

/*
 * ctx_build
 *		The context object of in, in the current memory context; *nkeys
 *		the number of its keys.  With deferred, only the traceparent and
 *		"deferred": true.
 */
static Jsonb *
ctx_build(const NtaskContextIn *in, bool deferred, int *nkeys)
{
	MemoryContext cxt = CurrentMemoryContext;
	JsonbParseState *st = NULL;
	JsonbValue *res;

	*nkeys = 0;
	(void) pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	/* as enqueue stored it; a row written by hand is checked again */
	if (in->traceparent != NULL && NtaskTraceparentValid(in->traceparent, NULL))
	{
		ctx_add_string(&st, "traceparent",
					   NtaskChildTraceparent(in->traceparent, in->task_id, in->token));
		(*nkeys)++;
	}
	if (deferred)
	{
		ctx_add_true(&st, "deferred");
		(*nkeys)++;
	}
	else
	{
		if (in->checkpoints > 0)
		{
			Jsonb	   *ck = NtaskContextCheckpoints(in->task_id);

			MemoryContextSwitchTo(cxt);
			if (ck != NULL)
			{
				ctx_put(&st, "checkpoints", ck);
				(*nkeys)++;
			}
		}
		if (in->has_parents)
		{
			Jsonb	   *omitted;
			Jsonb	   *pa = NtaskContextParents(in->task_id,
												 (int64) ntask_max_context_bytes, &omitted);

			MemoryContextSwitchTo(cxt);
			ctx_put(&st, "parents", pa);
			(*nkeys)++;
			if (omitted != NULL)
			{
				ctx_put(&st, "parents_omitted", omitted);
				(*nkeys)++;
			}
		}
		if (in->signal_key != NULL)
		{
			Jsonb	   *sg = NtaskContextSignal(in->queue, in->signal_key);

			MemoryContextSwitchTo(cxt);
			ctx_put(&st, "signal", sg);
			(*nkeys)++;
		}
	}
	res = pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/*
 * NtaskClaimContext
 *		The context column of a leased task: an object with a key for each
 *		of in's fields that is set, or NULL (*isnull) when none is.
 *
 *		Its size is bounded (docs/reference.md "ntask_claim"): the task's
 *		checkpoints by ntask_checkpoint (ntask.max_context_bytes in all),
 *		its parents' results here (those past ntask.max_context_bytes are
 *		named in parents_omitted, to be read with ntask_result), the signal
 *		by ntask.max_payload_bytes.  A claim hands out at most
 *		ntask.max_claim_context_bytes of context in all (in->claim_bytes
 *		counts it): a task whose context would pass that, but for the
 *		claim's first, gets only its traceparent and "deferred": true, and
 *		its worker reads the rest with ntask_context.  Everything is built
 *		in a memory context of its own, so that only the result stays.
 */
Datum
NtaskClaimContext(const NtaskContextIn *in, bool *isnull)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext cxt;
	Jsonb	   *j;
	Jsonb	   *out;
	int			nkeys;

	cxt = AllocSetContextCreate(caller, "ntask claim context", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	j = ctx_build(in, ntask_context_trace_only, &nkeys);
	if (!ntask_context_trace_only && in->claim_bytes != NULL && *in->claim_bytes > 0 &&
		*in->claim_bytes + (int64) VARSIZE(j) > (int64) ntask_max_claim_context_bytes)
	{
		MemoryContextReset(cxt);
		MemoryContextSwitchTo(cxt);
		j = ctx_build(in, true, &nkeys);
	}
	MemoryContextSwitchTo(caller);
	*isnull = nkeys == 0;
	if (nkeys == 0)
	{
		MemoryContextDelete(cxt);
		return (Datum) 0;
	}
	out = palloc(VARSIZE(j));
	memcpy(out, j, VARSIZE(j));
	MemoryContextDelete(cxt);
	if (in->claim_bytes != NULL)
		*in->claim_bytes += VARSIZE(out);
	return JsonbPGetDatum(out);
}
