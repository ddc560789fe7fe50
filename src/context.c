/*-------------------------------------------------------------------------
 *
 * context.c
 *	  The claim's context column (docs/design.md "The claim's context
 *	  column"): NtaskClaimContext builds the jsonb object of one leased
 *	  task from the columns the lease statement returns for it, and
 *	  NtaskChildTraceparent the trace context of one attempt.
 *
 * A task with nothing to say (no trace context, and later no parents,
 * checkpoints or signal) gets NULL: the claim tests one boolean the lease
 * statement computes, has_context, and calls here only when it is true.
 * A key is added by a field of NtaskContextIn, a column of the lease
 * statement (and a term of its has_context) and a few lines below.
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

#include "common/hashfn.h"

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
	res = pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	*isnull = nkeys == 0;
	if (nkeys == 0)
		return (Datum) 0;
	return JsonbPGetDatum(JsonbValueToJsonb(res));
}
