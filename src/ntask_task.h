/*-------------------------------------------------------------------------
 *
 * ntask_task.h
 *	  Floor 3, the task model: the ledger (attempt.c), who may act on a
 *	  queue's tasks (rights.c), receipts and results.  A queue's guard,
 *	  its http target and the claim's context have headers of their own
 *	  (guard.h, target.h, context.h).
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

/* result.c: stored results */
extern void NtaskCheckResult(Jsonb *jb, int element);
extern Datum NtaskArgResult(FunctionCallInfo fcinfo, int argno, bool *isnull);

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
extern void NtaskCheckTokenIssued(int64 task_id, int64 token, int64 current);

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
