/*-------------------------------------------------------------------------
 *
 * context.h
 *	  Floor 3: the context a claim hands out with a task: trace, checkpoints,
 *	  parents, signal (context.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/context.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_CONTEXT_H
#define NTASK_CONTEXT_H

#include "fmgr.h"
#include "utils/jsonb.h"

/*
 * context.c: the claim's context column.  What the lease statement
 * returned for one leased task (NULL / 0: absent); each key of the context has
 * its fields here.
 */
typedef struct NtaskContextIn
{
	int64		task_id;
	int64		token;
	text	   *queue;
	const char *traceparent;	/* the enqueue's (task.traceparent) */
	int32		checkpoints;	/* task.checkpoints: how many (36.2) */
	text	   *signal_key;		/* task.signal_key: the awaited signal (36.3) */
	bool		has_parents;	/* task.has_parents (36.1) */
	int64	   *claim_bytes;	/* the claim's context so far, or NULL: no
								 * claim budget (ntask_context) */
} NtaskContextIn;

extern Datum NtaskClaimContext(const NtaskContextIn *in, bool *isnull);
extern uint64 NtaskSpanId(int64 task_id, int64 token);
extern char *NtaskChildTraceparent(const char *tp, int64 task_id, int64 token);
extern Jsonb *NtaskContextCheckpoints(int64 task_id);
extern Jsonb *NtaskContextParents(int64 task_id, int64 budget, Jsonb **omitted);
extern bool ntask_context_trace_only;
extern Jsonb *NtaskContextSignal(text *queue, text *signal_key);

#endif							/* NTASK_CONTEXT_H */
