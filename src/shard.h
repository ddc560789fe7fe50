/*-------------------------------------------------------------------------
 *
 * shard.h
 *	  The one place where ntask copes with Citus, as compat.h is for the
 *	  PostgreSQL versions: the shard arithmetic of task ids, the shard
 *	  values and their placements (shard.c), and the statements that a
 *	  distributed install runs differently (NtaskPair, NtaskExecPair).
 *
 * A statement of the task tables can reach its rows on one of several
 * paths (NtaskPath): a plain install's one PostgreSQL, or Citus routing
 * each statement to the node of its shard.  Where the paths need
 * different SQL (Citus refuses a stable function next to a column in an
 * UPDATE, plans a modifying CTE apart, prunes only by a constant), the
 * statement is one NtaskPair: its variants are written once, side by
 * side, with one parameter list in which the plain variant's parameters
 * come first, and NtaskExecPair runs the variant of the call's path.  A
 * call site fills the values of every variant and never asks which path
 * it is on.  docs/design.md "Citus behind one seam" says how a third path
 * (the direct statements on the local shard relations) plugs in.
 *
 * IDENTIFICATION
 *	  src/shard.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_SHARD_H
#define NTASK_SHARD_H

#include "spi_util.h"

/*
 * A task id carries its shard in its high bits, from NTASK_SHARD_SHIFT up
 * (docs/scaling.md "Task ids and tokens"): shard << 48 | the sequence's
 * value (enqueue.c), so the shard of a task id is id >> 48, an int2.  Not
 * to be confused with the timeline bits of a token (claim.c,
 * NTASK_TIMELINE_SHIFT), which happen to start at the same bit.
 */
#define NTASK_SHARD_SHIFT		48
#define NTASK_ID_SHARD(id)		((int16) ((id) >> NTASK_SHARD_SHIFT))

/*
 * SQL: " AND <alias>.shard = <task id> >> 48": the routing predicate of a
 * statement by task id on a Citus install (docs/scaling.md "Scaling out
 * with Citus"), where it makes the statement one router query on the node
 * of the task's shard.  On a plain install every task id is below 2^48 and
 * every shard 0, so it holds for every row the task id finds: one more
 * comparison on the row the primary key reached.
 */
#define NTASK_SHARD_OF(alias, id) \
	" AND " alias ".shard OPERATOR(pg_catalog.=) " \
	"((" id " OPERATOR(pg_catalog.>>) " CppAsString2(NTASK_SHARD_SHIFT) ")::pg_catalog.int2) "

/* the shard value itself, for an insert (0 on a plain install) */
#define NTASK_SHARD_VALUE(id) \
	"((" id " OPERATOR(pg_catalog.>>) " CppAsString2(NTASK_SHARD_SHIFT) ")::pg_catalog.int2)"

/* shard.c: the shard values of a distributed install (0 on a plain one) */
extern int	NtaskShardCount(void);
extern int	NtaskShardCountKnown(void);
extern int16 NtaskShardValue(int i);
extern int16 NtaskShardFor(text *queue, text *key);
extern int16 NtaskShardOfKey(text *queue, text *key);
extern int	NtaskSetShardScope(int shard);
extern int	NtaskWalkShardCount(void);
extern int16 NtaskWalkShardValue(int i);
extern bool NtaskIsShardValue(int shard);
extern int	NtaskShardGroupShards(int16 shard, int16 *out);
extern int	NtaskLocalShardCount(void);
extern bool NtaskIsLocalShard(int16 shard);
extern void NtaskRefreshPlacements(void);
extern void NtaskLockShards(const int16 *shards, int n);
extern void NtaskLockShard(int16 shard);
extern void NtaskRefuseDistributed(const char *what);
extern void NtaskCitusLayout(bool *distributed, bool *coordinator);

/*
 * The paths a call's statements take to the task tables.  One call takes
 * one path for all of its statements (never a mix).
 */
typedef enum NtaskPath
{
	NTASK_PATH_PLAIN,			/* a plain install: PostgreSQL runs it */
	NTASK_PATH_ROUTED,			/* a distributed install: Citus routes it */
	NTASK_PATH_DIRECT,			/* the local shard relations, planned once */
	NTASK_NPATHS
} NtaskPath;

extern NtaskPath NtaskCallPath(void);
extern Oid	NtaskDirectTaskIndex(const char *name);

/*
 * The direct path (docs/scaling.md "The direct shard path"): a
 * call on the node of its shard, outside a transaction block, runs its
 * pairs' plain variants on the local shard relations.  The entry point
 * chooses it after SPI_connect (NtaskDirectBegin: the setting, the call's
 * shape, the shard group's metadata lock, the placement check) and ends
 * it before SPI_finish (NtaskDirectEnd; an error ends it with the
 * transaction).  task_ids: the tasks the call touches; of several shard
 * values, every group is entered (each on this node, or the call runs
 * routed, wholly), and the call names the group of each statement's
 * tasks with NtaskDirectUseShard (nothing off the direct path).  A call
 * named by shard values instead of task ids (an enqueue: its keys')
 * enters by NtaskDirectBeginShard (one) or NtaskDirectBeginShards
 * (several, as task ids' are).
 */
extern bool ntask_citus_direct;
extern int	ntask_citus_direct_groups;
extern bool ntask_citus_delegate;
extern void NtaskShardDefineSettings(void);
extern NtaskPath NtaskDirectBegin(FunctionCallInfo fcinfo, const int64 *task_ids, int n);
extern NtaskPath NtaskDirectBeginShard(FunctionCallInfo fcinfo, int16 shard,
									   const char *unless);
extern NtaskPath NtaskDirectBeginShards(FunctionCallInfo fcinfo, int16 *shards, int *n,
										const char *unless);
extern void NtaskDirectUseShard(int16 shard);
extern void NtaskDirectEnd(void);

/*
 * A claim on the direct path (docs/scaling.md "The claim on the direct
 * path"): NtaskDirectClaimBegin at its start decides whether its walk may
 * take it; the walk enters each shard with NtaskDirectClaimShard (the
 * interlock, or the routed claim's metadata lock); NtaskDirectClaimRouted
 * sends the rest of the call routed while nothing was written directly
 * (false: it was, the claim stops); NtaskDirectEnd ends it.
 */
extern void NtaskDirectClaimBegin(FunctionCallInfo fcinfo, bool may_wait);
/*
 * A waiting claim on the direct path (wait.c): each look, in its own
 * subtransaction, starts with NtaskDirectLookBegin (the call's decision
 * again, every group to be locked again) and, when rolled back, ends with
 * NtaskDirectLookEnd (its locks are gone); NtaskDirectLookUse runs the
 * look's next-due read on a group the look entered.
 */
extern void NtaskDirectLookBegin(void);
extern void NtaskDirectLookEnd(void);
extern bool NtaskDirectLookUse(int16 shard, bool *walks);
extern void NtaskDirectClaimAfter(void);
extern NtaskPath NtaskDirectBeginUnless(FunctionCallInfo fcinfo, const int64 *task_ids,
										int n, const char *unless);
/* claim.c: this backend's last claim of queue found it fit for the path */
extern bool NtaskClaimFitsDirect(text *queue);
extern void NtaskDirectClaimShard(int16 shard);
extern bool NtaskDirectClaimRouted(const char *why);

/*
 * The coordinator's delegation of a plain call (coord.c): whether the call
 * may run as one delegated call of its _on form, else why not.
 */
extern const char *NtaskDelegateWhy(FunctionCallInfo fcinfo, bool *quiet);

/*
 * One variant of a statement: its plan and the SPI_OK_* code it returns,
 * and around it, for a variant that takes more than one statement (the
 * routed one, mostly, where Citus plans a modifying CTE apart):
 *
 *	before	runs first: fills the parameters only this variant has (in
 *			values/nulls, by the pair's parameter enum) from statements of
 *			its own, and may raise; false: the variant runs nothing and
 *			returns 0 rows.
 *	after	runs on the plan's result (tt, n rows): the statements that
 *			follow from it (a ledger row the plain variant writes in a CTE).
 *
 * NtaskExecPair returns the plan's row count with SPI_tuptable holding its
 * result: the variants of a pair return the same leading columns (the
 * pair's column enum), a variant may add more after them for its after.
 * A variant whose plan has no sql and no before is not written
 * (NtaskExecPair then runs the plain one: a statement Citus takes as it
 * is); one with a before step but no sql runs that step only and returns
 * 0 rows (a statement the path does without).
 */
typedef bool (*NtaskBefore) (Datum *values, char *nulls);
typedef void (*NtaskAfter) (SPITupleTable *tt, int n, Datum *values, char *nulls);

typedef struct NtaskVariant
{
	NtaskPlan	plan;
	int			rc;				/* the SPI_OK_* code of plan */
	NtaskBefore before;			/* NULL: none */
	NtaskAfter	after;			/* NULL: none */
} NtaskVariant;

/* a statement and its variants by path, NTASK_PAIR's result */
typedef struct NtaskPair
{
	NtaskVariant v[NTASK_NPATHS];
} NtaskPair;

/*
 * NTASK_PAIR: one statement with a plain and a routed variant.  name is a
 * string literal (the routed variant's plan is "name (distributed)");
 * plain: NTASK_PLAIN(ncols, sql, nargs, rc), the plain variant taking the
 * first nargs of the pair's parameters; routed: NTASK_ROUTED(ncols, sql,
 * nargs, rc, before, after), NTASK_ROUTED_LIKE_PLAIN when Citus takes
 * the plain statement as it is, or NTASK_ROUTED_NONE(before) when the
 * routed path runs no statement (before returns false); then the
 * parameters' types, one list for both.
 */
#define NTASK_PLAIN(ncols, sql, nargs, rc)	(ncols), (sql), (nargs), (rc), NULL, NULL
#define NTASK_ROUTED(ncols, sql, nargs, rc, before, after) \
	(ncols), (sql), (nargs), (rc), (before), (after)
#define NTASK_ROUTED_LIKE_PLAIN				0, NULL, 0, 0, NULL, NULL
#define NTASK_ROUTED_NONE(before)			0, NULL, 0, 0, (before), NULL
#define NTASK_PAIR(name, plain, routed, ...) \
	{{NTASK_VARIANT_(name, plain, __VA_ARGS__), \
	  NTASK_VARIANT_(name " (distributed)", routed, __VA_ARGS__)}}
/* (the direct path's slot stays empty: it runs the plain variant, renamed) */
#define NTASK_VARIANT_(name, v, ...) NTASK_VARIANT__(name, v, __VA_ARGS__)
#define NTASK_VARIANT__(name, ncols_, sql, nargs, rc_, before_, after_, ...) \
	{.plan = {(name), .ncols = (ncols_), (sql), (nargs), {__VA_ARGS__}}, \
	 .rc = (rc_), .before = (before_), .after = (after_)}

extern int	NtaskExecPair(NtaskPair *pair, Datum *values, char *nulls);
extern int	NtaskExecPairCount(NtaskPair *pair, Datum *values,
							   char *nulls, long count);

/* --- seam: srest --- */

/*
 * NtaskPairRuns: whether the call's path runs a statement for pair, as
 * NtaskExecPair would choose its variant (false for NTASK_ROUTED_NONE on
 * the routed path).  For a caller whose shape of work follows from it: a
 * batch that the path does without goes item by item there.
 */
extern bool NtaskPairRuns(NtaskPair *pair);

#endif							/* NTASK_SHARD_H */
