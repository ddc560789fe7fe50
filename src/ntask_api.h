/*-------------------------------------------------------------------------
 *
 * ntask_api.h
 *	  Floor 4, the SQL API: enqueue, claim and the waiting claim,
 *	  transition, release, repair, queue admin, sagas, schedules.
 *
 * The floors of src/ (docs/design.md "Floors"; src/floors.txt, checked by
 * scripts/check_layers.sh): a .c file includes postgres.h first, then the
 * headers whose names it uses, each of its level or a lower one; no file
 * calls a function of a higher level.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/ntask_api.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_API_H
#define NTASK_API_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "utils/jsonb.h"

/*
 * SQL: "WITH RECURSIVE ... pr(p)": the priorities of queue $1 to try,
 * highest first: those other than 0 that have unfinished tasks (a loose
 * index scan of task_priority_idx, one descent per priority; see claim.c's
 * pick), and 0 in its place between the positive and the negative ones,
 * always, without a lookup.  Tasks of priority 0 are not in that index, so
 * a queue that leaves every task at the default priority looks up nothing
 * here: the pick's own scan of priority 0 in task_due_idx is then the only
 * walk over the entries of the tasks claimed since the last vacuum (dead,
 * still in the index, at the front of the range), not the second.  pr is
 * read in order (an Append), so when the first priority fills the claim
 * the later ones are not looked up.  Shared by the claim's pick and the
 * waiting claim's next-due lookup (wait.c).
 */
#define NTASK_PRIORITY_WALK NTASK_PRIORITY_WALK_ON("")
/* the same within one shard: pred is " AND t.shard ... " (claim.c) */
#define NTASK_PRIORITY_WALK_ON(pred) \
	"WITH RECURSIVE nz(p) AS ( " \
	"  (SELECT t.priority FROM ntask.task t " \
	"   WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.due_at IS NOT NULL " \
	"     AND t.priority OPERATOR(pg_catalog.<>) 0 " pred \
	"   ORDER BY t.priority DESC LIMIT 1) " \
	"  UNION ALL " \
	"  SELECT (SELECT t.priority FROM ntask.task t " \
	"          WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.due_at IS NOT NULL " \
	"            AND t.priority OPERATOR(pg_catalog.<>) 0 " pred \
	"            AND t.priority OPERATOR(pg_catalog.<) nz.p " \
	"          ORDER BY t.priority DESC LIMIT 1) " \
	"  FROM nz WHERE nz.p IS NOT NULL " \
	"), pr(p) AS ( " \
	"  SELECT nz.p FROM nz WHERE nz.p OPERATOR(pg_catalog.>) 0 " \
	"  UNION ALL SELECT 0 " \
	"  UNION ALL SELECT nz.p FROM nz WHERE nz.p OPERATOR(pg_catalog.<) 0 " \
	") "

/* claim.c */

/*
 * A claim's arguments, read and checked once (NtaskClaimCallInit), and
 * what the claim reports back to its caller (the waiting claim's look).
 */
typedef struct ClaimCall
{
	ReturnSetInfo *rsinfo;		/* the rows go into its tuplestore */
	text	   *queue;
	text	   *worker;
	int			max_tasks;		/* 1..NTASK_MAX_CLAIM */
	Datum		lease;			/* the caller's lease, or 0: the queue's */
	bool		invoked;		/* mark the leased attempts invoked */
	Datum	   *extra;			/* nextra columns appended to each row */
	bool	   *extranulls;
	int			nextra;			/* at most CLAIM_MAX_EXTRA (claim.c) */
	int64		waited_usecs;	/* a waiting claim's wait so far (not work) */
	int64		context_bytes;	/* context handed out so far (context.c) */
	/* out, set by each NtaskClaimInto */
	uint64		writes;			/* statements that wrote (kept by the caller) */
	bool		held_cap;		/* a cap held a picked task back */
	TimestampTz held_until;		/* a rate held one back until then; 0: none */
} ClaimCall;

extern void NtaskClaimCallInit(ClaimCall *c, FunctionCallInfo fcinfo,
							   ReturnSetInfo *rsinfo, int a_queue, int a_worker,
							   int a_max_tasks, int a_lease);
extern int	NtaskClaimInto(ClaimCall *c);

/* wait.c: claim is the claim each look runs (NtaskClaimInto) */
extern int	NtaskClaimWait(ClaimCall *c, int64 wait_usecs,
						   int (*claim) (ClaimCall *c));

/* enqueue.c */
extern void NtaskCheckPayload(Jsonb *jb, const char *what, int element,
							  const char *suffix);
extern int64 NtaskEnqueueStep(const char *queue, const char *key,
							  Jsonb *payload, int64 saga_id);

/* deps.c: an enqueue's parents (depends_on) */
typedef struct NtaskDeps
{
	int			n;				/* elements of depends_on; 0: none */
	Datum	   *elems;			/* text */
	Datum		array;			/* the text[] argument */
	text	   *policy;			/* on_parent_failed, NULL: the queue's */
	Datum	   *ids;			/* the parents' task ids, sorted (resolved) */
	int16		shard;			/* the child's shard (enqueue.c sets it) */
} NtaskDeps;

extern void NtaskCheckParentPolicy(text *policy);
extern bool NtaskDepsArgs(FunctionCallInfo fcinfo, int a_trace, NtaskDeps *d);
extern void NtaskDepsResolve(NtaskDeps *d, text *queue, text **keys, int nkeys);
extern void NtaskDepsAttach(NtaskDeps *d, Datum *ids, int n, Datum *states);

/* repair.c */
extern Datum ntask_replay(PG_FUNCTION_ARGS);

/* claim.c: the lowest token this node's WAL timeline may issue */
extern int64 NtaskTokenNext(int64 prev, int64 floor);

/*
 * The SQL entry points the shard-addressed forms wrap (delegate.c:
 * ntask_<f>_on(shard, <f's arguments>)); defined on floors 3 and 4.
 */
extern Datum ntask_enqueue(PG_FUNCTION_ARGS);
extern Datum ntask_enqueue_many(PG_FUNCTION_ARGS);
extern Datum ntask_claim(PG_FUNCTION_ARGS);
extern Datum ntask_transition(PG_FUNCTION_ARGS);
extern Datum ntask_transition_many(PG_FUNCTION_ARGS);
extern Datum ntask_transition_and_claim(PG_FUNCTION_ARGS);
extern Datum ntask_heartbeat(PG_FUNCTION_ARGS);
extern Datum ntask_invoked(PG_FUNCTION_ARGS);
extern Datum ntask_receipt(PG_FUNCTION_ARGS);
extern Datum ntask_release(PG_FUNCTION_ARGS);

#endif							/* NTASK_API_H */
