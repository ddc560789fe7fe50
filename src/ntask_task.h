/*-------------------------------------------------------------------------
 *
 * ntask_task.h
 *	  Floor 3, the task model: the ledger (attempt.c), who may act on a
 *	  queue's tasks (rights.c), leases, fences, receipts, results, guards
 *	  and the parse of a queue's target.
 *
 * The floors of src/ (docs/design.md "Floors"; src/floors.txt, checked by
 * scripts/check_layers.sh): a .c file includes postgres.h first, then the
 * headers whose names it uses, each of its level or a lower one; no file
 * calls a function of a higher level.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/ntask_task.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_TASK_H
#define NTASK_TASK_H

#include "compat.h"
#include "fmgr.h"
#include "utils/jsonb.h"

/* rights.c */
pg_noreturn extern void NtaskQueueNotFound(const char *queue);
extern void NtaskCheckQueueRight(text *queue, bool producer);
extern void NtaskCheckQueueExists(text *queue);
pg_noreturn extern void NtaskTaskRightDenied(int64 task_id);

/* receipt.c */
extern bool NtaskSameDigest(Jsonb *payload, bytea *current_digest,
							bytea *stored, int stored_version);


/* guard.c */
typedef enum NtaskGuardVerdict
{
	NTASK_GUARD_PROCEED,
	NTASK_GUARD_SKIP,
	NTASK_GUARD_CANCEL,
	NTASK_GUARD_ERROR,			/* raised; *reason holds the message */
	NTASK_GUARD_BUSY			/* a lock timeout or deadlock: leave it due */
} NtaskGuardVerdict;

extern NtaskGuardVerdict NtaskRunGuard(const char *name, const char *owner,
									   text *task_key, Jsonb *payload,
									   char **reason, bool catch_errors);
extern char *NtaskGuardName(Oid guard);
extern Oid	NtaskResolveGuard(const char *name);
extern void NtaskCheckGuardHome(Oid guard, Oid nsp);
extern char *NtaskQueueGuard(text *queue, char **owner);

/* target.c: a queue's http target, parsed and checked */
typedef struct NtaskHttpTarget
{
	char	   *url;
	char	   *host;			/* lower-case, no brackets */
	bool		put;			/* PUT instead of POST */
	int			timeout_ms;
	int			max_inflight;	/* 0: only the GUC limits it */
	bool		keep_alive;		/* sends may reuse connections */
	char	   *reconcile_url;	/* NULL: none */
	char	   *reconcile_host; /* its host, as host */
	bool		has_content_type;
	int			nheaders;
	char	  **headers;		/* "Name: value" lines */
} NtaskHttpTarget;

extern bool NtaskTargetIsHttp(Jsonb *target);
extern void NtaskCheckTargetType(Jsonb *target);
extern NtaskHttpTarget *NtaskParseHttpTarget(Jsonb *target);

/* context.c: the claim's context column */

/* result.c: stored results */
extern void NtaskCheckResult(Jsonb *jb, int element);
extern Datum NtaskArgResult(FunctionCallInfo fcinfo, int argno, bool *isnull);

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

/*
 * attempt.c: the ledger.  NTASK_SHARD_IS: " AND <alias>.shard = $<n>", the
 * shard of a bigint[] of task ids of one shard (NtaskIdsShard), passed as
 * a parameter: Citus prunes to one shard only by a constant, not by an
 * expression of the id array.  0 on a plain install.
 */
#define NTASK_SHARD_IS(alias, n) \
	" AND " alias ".shard OPERATOR(pg_catalog.=) $" n " "
extern int16 NtaskIdsShard(Datum ids);
extern Datum NtaskCloseExpiredAttempts(Datum task_ids, Datum tokens);

/* a ledger row's columns, NtaskLedgerRowDist's arguments in order */
typedef enum AttRowArg
{
	ATT_ROW_TASK_ID,
	ATT_ROW_SHARD,
	ATT_ROW_TOKEN,
	ATT_ROW_ATTEMPT,
	ATT_ROW_WORKER,
	ATT_ROW_CLAIMED_AT,
	ATT_ROW_INVOKED_AT,
	ATT_ROW_ENDED_AT,
	ATT_ROW_RESULT,
	ATT_ROW_REQUESTED,
	ATT_ROW_KNOWN,
	ATT_ROW_RETRY_AT,
	ATT_ROW_PROGRESS,
	ATT_ROW_NARGS
} AttRowArg;
extern void NtaskLedgerRowDist(Datum *v, const char *n);
extern void NtaskFinishTask(int64 task_id, const char *to_state,
							 const char *reason, const char *attempt_result,
							 const char *error_class, const char *stage);

#endif							/* NTASK_TASK_H */
