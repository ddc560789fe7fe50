/*-------------------------------------------------------------------------
 *
 * shard.c
 *	  Citus behind one seam (shard.h): the shard values of a distributed
 *	  install and their placements, the shard of a key, the move interlock
 *	  (NtaskLockShards), and NtaskExecPair, which runs the variant of a
 *	  statement that the call's path takes.
 *
 * On a plain install the shard map is empty, every shard value 0, and
 * every statement runs its plain variant; nothing here reads a Citus
 * catalog then.  All functions here run inside an SPI connection opened
 * by the caller unless noted.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/shard.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shard.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "storage/lockdefs.h"
#include "tcop/pquery.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

/*
 * The shard values of a distributed install (ntask.shard_map, filled by
 * ntask_distribute; empty on a plain install), read once per backend by
 * the first enqueue or claim.  A backend that started before
 * ntask_distribute keeps what it read: reconnect after distributing.
 */
/* the one column of shard_map_plan and shard_local_plan */
typedef enum ShardValueCol
{
	SHARD_VALUE_SHARD = 1,
	SHARD_VALUE_NCOLS = SHARD_VALUE_SHARD
} ShardValueCol;

static NtaskPlan shard_map_plan = {
	"shard map",
	.ncols = SHARD_VALUE_NCOLS,
	"SELECT s.shard FROM ntask.shard_map s ORDER BY s.shard",
	0, {InvalidOid}
};
static int	shard_n = -1;
static int16 *shard_values = NULL;

/* NtaskShardCount: how many shard values (0: a plain install); in SPI */
int
NtaskShardCount(void)
{
	if (shard_n < 0)
	{
		int			n = NtaskExecPlan(&shard_map_plan, NULL, NULL, SPI_OK_SELECT);
		int16	   *v = MemoryContextAlloc(TopMemoryContext, sizeof(int16) * Max(n, 1));
		int			i;

		for (i = 0; i < n; i++)
			v[i] = (int16) NtaskTupGetInt32(SPI_tuptable, i, SHARD_VALUE_SHARD);
		shard_values = v;
		shard_n = n;
	}
	return shard_n;
}

/*
 * NtaskShardCountKnown: NtaskShardCount() when this backend has read the
 * shard map, else -1; outside SPI too (waiter.c's commit-time note)
 */
int
NtaskShardCountKnown(void)
{
	return shard_n;
}

/*
 * NtaskRefuseDistributed
 *		In SPI: 0A000 on a distributed install for a call whose rows are not
 *		laid out for it yet (docs/scaling.md "What is left": dependencies,
 *		checkpoints, signals, bulk actions).
 */
void
NtaskRefuseDistributed(const char *what)
{
	if (NtaskShardCount() > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ntask: %s is not supported on a distributed install yet", what),
				 errdetail("Its rows are not distributed with the tasks (docs/scaling.md, \"What is left\").")));
}

/* NtaskShardValue: the i-th shard value, 0 <= i < NtaskShardCount() */
int16
NtaskShardValue(int i)
{
	Assert(i >= 0 && i < shard_n);
	return shard_values[i];
}

/*
 * NtaskShardOfKey
 *		The shard of a task of queue keyed by key (its partition key, or
 *		its task key without one): a hash of both over the shard values,
 *		so that an enqueue of the same key reaches the shard of the first
 *		(docs/scaling.md "The distribution column, decided").  0 on a plain
 *		install.  In SPI.
 */
int16
NtaskShardOfKey(text *queue, text *key)
{
	uint32		h;

	if (NtaskShardCount() == 0)
		return 0;
	h = hash_bytes((const unsigned char *) VARDATA_ANY(queue), VARSIZE_ANY_EXHDR(queue));
	h = hash_combine(h, hash_bytes((const unsigned char *) VARDATA_ANY(key),
								   VARSIZE_ANY_EXHDR(key)));
	return shard_values[h % (uint32) shard_n];
}

/*
 * The shard a shard-addressed call (ntask_<f>_on, delegate.c) names, or -1
 * outside one: an enqueue's key must hash to it, and a claim looks in it
 * only (docs/scaling.md "One hop: delegated calls").
 */
static int	shard_scope = -1;

/* NtaskSetShardScope: set the scope (-1: none); returns the one before */
int
NtaskSetShardScope(int shard)
{
	int			old = shard_scope;

	shard_scope = shard;
	return old;
}

/*
 * NtaskShardFor
 *		NtaskShardOfKey for an enqueue: in a shard-addressed call, a key of
 *		another shard is refused (22023), since the call runs on the node
 *		of the shard it names.  In SPI.
 */
int16
NtaskShardFor(text *queue, text *key)
{
	int16		shard = NtaskShardOfKey(queue, key);

	if (shard_scope >= 0 && shard != shard_scope)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: the task \"%s\" of queue \"%s\" belongs to shard %d, not %d",
						text_to_cstring(key), text_to_cstring(queue), shard, shard_scope),
				 errhint("Pass ntask_shard(queue, key) as the shard: the partition key, or the task key without one.")));
	return shard;
}

/*
 * Citus' shard id of the shard value m.shard in ntask.task, the relation
 * found by name in the catalogs: a caller without USAGE on schema ntask
 * (a worker's role) cannot cast 'ntask.task' to regclass.
 */
#define SHARD_ID_OF_M \
	"pg_catalog.get_shard_id_for_distribution_column( " \
	"  (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n " \
	"   ON n.oid OPERATOR(pg_catalog.=) c.relnamespace " \
	"   WHERE n.nspname OPERATOR(pg_catalog.=) 'ntask' AND c.relname OPERATOR(pg_catalog.=) 'task')" \
	"  ::pg_catalog.regclass, m.shard) "

/*
 * The shards a claim walks: the call's shard in a shard-addressed call;
 * on a worker node, the shards whose placement is on this node; else every
 * shard value.  The placements (this node's shards, and each shard's node
 * below) are read once and kept until Citus moves a shard: a placement
 * change invalidates ntask.task's relcache entry on every node (Citus'
 * trigger on pg_dist_placement), shard_placement_inval marks the copies
 * stale, and the next claim reads them again (NtaskRefreshPlacements).
 * Marked, not freed: the callback can run within a claim that walks them.
 */
static NtaskPlan shard_local_plan = {
	"local shards",
	.ncols = SHARD_VALUE_NCOLS,
	"SELECT m.shard FROM ntask.shard_map m "
	"WHERE " SHARD_ID_OF_M "OPERATOR(pg_catalog.=) ANY (ARRAY( "
	"  SELECT p.shardid FROM pg_catalog.pg_dist_placement p "
	"  WHERE p.groupid OPERATOR(pg_catalog.=) (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l) "
	"    AND p.groupid OPERATOR(pg_catalog.<>) 0)) "
	"ORDER BY m.shard",
	0, {InvalidOid}
};
static int	shard_nlocal = -1;
static int16 *shard_local = NULL;
static int32 *shard_groups = NULL;
static bool shard_placements_stale = false;
static Oid	shard_task_relid = InvalidOid;

/*
 * Bumped by every invalidation of the placements: the direct path's groups
 * checked before it are checked again (direct_group_check)
 */
static uint64 shard_inval_generation = 1;

/* a relcache invalidation: of ntask.task, or of every relation (InvalidOid) */
static void
shard_placement_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == shard_task_relid)
	{
		shard_placements_stale = true;
		shard_inval_generation++;
	}
}

/*
 * shard_watch_placements: before a read of the placements, note ntask.task's
 * oid for shard_placement_inval, registered once per backend
 */
static void
shard_watch_placements(void)
{
	static bool registered = false;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(shard_placement_inval, (Datum) 0);
		registered = true;
	}
	shard_task_relid = get_relname_relid("task", get_namespace_oid("ntask", true));
}

/*
 * NtaskRefreshPlacements
 *		At the start of a claim: forget the placements read before Citus
 *		moved a shard, so that they are read again when needed.
 */
void
NtaskRefreshPlacements(void)
{
	if (!shard_placements_stale)
		return;
	shard_placements_stale = false;
	if (shard_local != NULL)
		pfree(shard_local);
	shard_local = NULL;
	shard_nlocal = -1;
	if (shard_groups != NULL)
		pfree(shard_groups);
	shard_groups = NULL;
}

/* shard_read_local: fill shard_local; in SPI, on a distributed install */
static void
shard_read_local(void)
{
	int			n;
	int16	   *v;
	int			i;

	shard_watch_placements();
	n = NtaskExecPlan(&shard_local_plan, NULL, NULL, SPI_OK_SELECT);
	v = MemoryContextAlloc(TopMemoryContext, sizeof(int16) * Max(n, 1));

	for (i = 0; i < n; i++)
		v[i] = (int16) NtaskTupGetInt32(SPI_tuptable, i, SHARD_VALUE_SHARD);
	shard_local = v;
	shard_nlocal = n;
}

/*
 * NtaskLocalShardCount: how many shard values this node holds (0 on the
 * coordinator without task shards); on a distributed install, in SPI
 */
int
NtaskLocalShardCount(void)
{
	if (shard_nlocal < 0)
		shard_read_local();
	return shard_nlocal;
}

/* NtaskIsLocalShard: this node holds shard; on a distributed install, in SPI */
bool
NtaskIsLocalShard(int16 shard)
{
	int			i;

	for (i = 0; i < NtaskLocalShardCount(); i++)
		if (shard_local[i] == shard)
			return true;
	return false;
}

/*
 * The move interlock (docs/scaling.md "Shard moves").  A
 * distributed claim picks its tasks with a routed read (FOR UPDATE SKIP
 * LOCKED) and leases them with a second routed statement.  Citus takes a
 * shard's distribution-metadata lock (LockShardDistributionMetadata,
 * ShareLock) for routed writes only (citus_custom_scan.c:
 * CitusBeginModifyScan -> distributed_execution_locks.c:
 * AcquireMetadataLocks), so a shard move's final phase (shard_transfer.c:
 * BlockWritesToShardList, ExclusiveLock here and, through
 * lock_shard_metadata, on every node with metadata) did not wait for a
 * claim between its pick and its lease: the lease then went to the new
 * placement, where the pick's row locks are not, and could take a task
 * another claim had just leased there.  So a claim, housekeeping's sweep
 * of a shard and a receipt take that lock first, through Citus' own UDF
 * (resource_lock.c: lock_shard_metadata, which checks that the caller
 * owns the table: ntask's statements run as the extension's owner), held
 * to the end of the transaction: a move's final phase then waits for the
 * transaction, or the transaction waits for the move and runs on the new
 * placement.  The lock is of the shard's co-location group (Citus'
 * SetLocktagForShardDistributionMetadata: by co-location id and shard
 * index), so it covers the task's attempt and receipt shards too.  $2 the
 * shard values; ShareLock is 5.
 */
typedef enum ShardLockArg
{
	SHARD_LOCK_ARG_TASK,		/* $1, ntask.task */
	SHARD_LOCK_ARG_SHARDS,		/* $2, the shard values */
	SHARD_LOCK_NARGS
} ShardLockArg;

static NtaskPlan shard_lock_plan = {
	"shard metadata lock",
	.ncols = 1,
	"SELECT pg_catalog.lock_shard_metadata(5, ARRAY( "
	"  SELECT DISTINCT pg_catalog.get_shard_id_for_distribution_column($1, s.v) "
	"  FROM pg_catalog.unnest($2) s(v) ORDER BY 1))",
	SHARD_LOCK_NARGS, {REGCLASSOID, INT2ARRAYOID}
};

/*
 * NtaskLockShards
 *		On a distributed install, take the distribution-metadata lock
 *		(ShareLock) of the Citus shards of the n shard values in shards, in
 *		shard id order, held to the end of the transaction; then take in
 *		the invalidations of a move that committed while this waited, so
 *		that the next routed statement goes to the shard's new placement
 *		(its relation lock may be held already: no invalidations are read
 *		then).  Nothing on a plain install, nor where ntask.task is not a
 *		Citus table.  In SPI.
 */
void
NtaskLockShards(const int16 *shards, int n)
{
	Datum		values[SHARD_LOCK_NARGS];
	Datum	   *elems;
	Oid			task_relid;
	int			i;

	/*
	 * not a Citus table (regress "distribute" fills the shard map of a plain
	 * install): nothing to lock
	 */
	if (n <= 0 || NtaskShardCount() == 0 || !NtaskPlansForCitus())
		return;
	task_relid = get_relname_relid("task", get_namespace_oid("ntask", false));
	elems = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
		elems[i] = Int16GetDatum(shards[i]);
	values[SHARD_LOCK_ARG_TASK] = ObjectIdGetDatum(task_relid);
	values[SHARD_LOCK_ARG_SHARDS] = PointerGetDatum(construct_array(elems, n, INT2OID, sizeof(int16),
																	true, TYPALIGN_SHORT));
	(void) NtaskExecPlan(&shard_lock_plan, values, NULL, SPI_OK_SELECT);
	AcceptInvalidationMessages();
}

/* NtaskLockShard: NtaskLockShards of one shard value */
void
NtaskLockShard(int16 shard)
{
	NtaskLockShards(&shard, 1);
}

/* NtaskWalkShardCount: how many shards a claim walks (0: a plain install) */
int
NtaskWalkShardCount(void)
{
	if (NtaskShardCount() == 0)
		return 0;
	if (shard_scope >= 0)
		return 1;
	if (shard_nlocal < 0)
		shard_read_local();
	return shard_nlocal > 0 ? shard_nlocal : shard_n;
}

/* NtaskWalkShardValue: the i-th of them, 0 <= i < NtaskWalkShardCount() */
int16
NtaskWalkShardValue(int i)
{
	if (shard_scope >= 0)
		return (int16) shard_scope;
	if (shard_nlocal > 0)
		return shard_local[i];
	return NtaskShardValue(i);
}

/*
 * The Citus group (node) of each shard value, in shard_values' order (both
 * sorted by shard), read like the local shards above (kept until a shard
 * moves): a queue-wide cap is shared out by node (claim.c, claim_limit).
 */
typedef enum ShardGroupsCol
{
	SHARD_GROUPS_SHARD = 1,
	SHARD_GROUPS_GROUP,			/* its placement's Citus group */
	SHARD_GROUPS_NCOLS = SHARD_GROUPS_GROUP
} ShardGroupsCol;

static NtaskPlan shard_groups_plan = {
	"shard groups",
	.ncols = SHARD_GROUPS_NCOLS,
	"SELECT m.shard, pg_catalog.min(p.groupid) FROM ntask.shard_map m "
	"JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) "
	"  " SHARD_ID_OF_M
	"GROUP BY m.shard ORDER BY m.shard",
	0, {InvalidOid}
};

/*
 * NtaskShardGroupShards
 *		The shard values held by the node that holds shard (shard among
 *		them) into out (room for NtaskShardCount()); returns how many.  On
 *		a distributed install, in SPI.
 */
int
NtaskShardGroupShards(int16 shard, int16 *out)
{
	int			i;
	int			n = 0;
	int32		g = -1;

	if (shard_groups == NULL)
	{
		int			rows;
		int32	   *v;

		shard_watch_placements();
		rows = NtaskExecPlan(&shard_groups_plan, NULL, NULL, SPI_OK_SELECT);
		v = MemoryContextAlloc(TopMemoryContext, sizeof(int32) * Max(shard_n, 1));

		if (rows != shard_n)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("ntask: %d of the %d shard values have a placement", rows, shard_n)));
		for (i = 0; i < rows; i++)
			v[i] = NtaskTupGetInt32(SPI_tuptable, i, SHARD_GROUPS_GROUP);
		shard_groups = v;
	}
	for (i = 0; i < shard_n; i++)
		if (shard_values[i] == shard)
			g = shard_groups[i];
	for (i = 0; i < shard_n; i++)
		if (shard_groups[i] == g)
			out[n++] = shard_values[i];
	return n;
}

/* NtaskIsShardValue: shard is a shard value of this install (0 on a plain one) */
bool
NtaskIsShardValue(int shard)
{
	int			i;

	if (NtaskShardCount() == 0)
		return shard == 0;
	for (i = 0; i < shard_n; i++)
		if (shard_values[i] == shard)
			return true;
	return false;
}

/* the one column of the catalog reads of NtaskCitusLayout */
#define SHARD_LAYOUT_ANSWER 1

/*
 * NtaskCitusLayout
 *		Whether ntask_distribute made ntask.task a Citus distributed table
 *		in this database, and then whether this node is the coordinator
 *		(group 0 in pg_dist_local_group, readable by every role; a worker
 *		node has its own group from citus_add_node, and sees the
 *		distributed table through Citus' metadata sync).  Reads the
 *		catalogs only: the background worker's role has no USAGE on schema
 *		ntask.  In SPI; SPI_tuptable is not kept.
 */
void
NtaskCitusLayout(bool *distributed, bool *coordinator)
{
	*distributed = false;
	*coordinator = false;
	if (SPI_execute("SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1 &&
		NtaskTupGetBool(SPI_tuptable, 0, SHARD_LAYOUT_ANSWER) &&
		SPI_execute("SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p "
					"  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) p.logicalrelid "
					"  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
					"  WHERE n.nspname OPERATOR(pg_catalog.=) 'ntask' "
					"    AND c.relname OPERATOR(pg_catalog.=) 'task')",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
		*distributed = NtaskTupGetBool(SPI_tuptable, 0, SHARD_LAYOUT_ANSWER);
	if (*distributed &&
		SPI_execute("SELECT l.groupid OPERATOR(pg_catalog.=) 0 "
					"FROM pg_catalog.pg_dist_local_group l",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
		*coordinator = NtaskTupGetBool(SPI_tuptable, 0, SHARD_LAYOUT_ANSWER);
}

/*
 * The direct path (docs/scaling.md "The direct shard path").
 *
 * A call on the node of its shard runs its statements on the shard
 * relations themselves (ntask.task_<shardid>, the co-located attempt_ and
 * receipt_ shards, the local placement of the reference table ntask.queue
 * for reads), each the plain variant of its pair with the names rewritten,
 * prepared once per backend and shard value (a group) with a generic plan:
 * Citus does not plan a statement that names no Citus table.  A call takes
 * it only when all of these hold at its start, else it runs routed, wholly
 * (NtaskDirectBegin):
 *
 *	- ntask.citus_direct is on, ntask.task is a Citus table here;
 *	- not in a transaction block, READ COMMITTED;
 *	- the call is the whole statement: the portal's one plan is a SELECT
 *	  of this one function (a Result, a ProjectSet over one, or one
 *	  function scan), the only volatile function in it, so nothing ran
 *	  before it in the transaction and nothing but the commit follows it
 *	  (the shape Citus delegates, and what the shard's node receives);
 *	- its tasks are of shard values whose placements are all on this node
 *	  (a call by task ids of several enters each group: direct_enter_many);
 *	- the move interlock: the group's distribution-metadata lock
 *	  (ShareLock, as Citus' routed writes take it; a move's final phase
 *	  waits for it), then AcceptInvalidationMessages(), then, if a
 *	  placement changed since the group was last checked (or never was), a
 *	  catalog read that the placement is this node's group, and no Citus
 *	  coordinated transaction is open (get_current_transaction_id's
 *	  transaction number 0).
 *
 * Each decision is logged at DEBUG1 ("ntask: direct path ..." / "ntask:
 * routed path ...: <why>"), the observable t/028 counts.
 */
bool		ntask_citus_direct = true;
int			ntask_citus_direct_groups = 16;
bool		ntask_citus_delegate = true;

/* the relations a direct statement may name, in direct_check_plan's order */
typedef enum DirectRel
{
	DIRECT_REL_TASK,
	DIRECT_REL_ATTEMPT,
	DIRECT_REL_RECEIPT,
	DIRECT_REL_QUEUE,			/* a reference table: reads only */
	DIRECT_NRELS
} DirectRel;

static const char *const direct_rel_names[DIRECT_NRELS] = {
	"task", "attempt", "receipt", "queue"
};

/* one statement of a group: the plain variant's plan (key), rewritten */
typedef struct DirectStmt
{
	const NtaskPlan *key;
	NtaskPlan	plan;
	int			writes;			/* -1: not known yet; else whether it writes */
} DirectStmt;

/* a shard value's shard relations and its statements */
typedef struct DirectGroup
{
	int16		shard;
	uint64		checked;		/* shard_inval_generation when checked; 0 */
	uint64		remote;			/* that generation when found elsewhere */
	uint64		last_use;
	uint64		locked;			/* direct_serial of the claim that locked it */
	int64		ids[DIRECT_NRELS];	/* Citus shard ids */
	char	   *names[DIRECT_NRELS];	/* qualified shard relation names */
	MemoryContext cxt;			/* names, statement texts */
	DirectStmt *stmts;
	int			nstmts;
	int			maxstmts;
} DirectGroup;

static DirectGroup *direct_groups = NULL;	/* in TopMemoryContext */
static int	direct_ngroups = 0;
static int	direct_maxgroups = 0;
static uint64 direct_clock = 0;
static DirectGroup *direct_call = NULL; /* the group of the call on it */

/*
 * A call by the task ids of several shard values on the direct path
 * (NtaskDirectBegin, direct_enter_many): the indexes in direct_groups of
 * its groups, each entered through the interlock; NtaskDirectUseShard makes
 * one of them the call's group (direct_call) for the statements of its
 * tasks.  Indexes, not pointers: direct_groups moves when it grows.
 * direct_nmany 0: a call of one group (or none).
 */
static int *direct_many = NULL;	/* in TopMemoryContext */
static int	direct_nmany = 0;
static int	direct_maxmany = 0;

/*
 * A claim on the direct path (NtaskDirectClaimBegin): it enters each shard
 * of its walk through the interlock (NtaskDirectClaimShard).  direct_claim:
 * it may still run directly; direct_claim_why: why not (NULL: a plain
 * install, or not a claim's call); direct_wrote: a direct statement of the
 * call wrote (not a row lock: docs/scaling.md "The claim on the direct
 * path"), so it can no longer go routed; direct_skip: the shard the walk
 * is in failed the interlock after such a write: its statements find
 * nothing.  direct_serial numbers the claims, so a group is locked once
 * per claim.
 */
static bool direct_claim = false;
static const char *direct_claim_why = NULL;
static bool direct_wrote = false;
static bool direct_skip = false;
static uint64 direct_serial = 0;

/*
 * The claim call's own decision, made at its start (NtaskDirectClaimBegin,
 * outside any subtransaction: inside one IsTransactionBlock() is true),
 * which each look of a waiting claim starts from again
 * (NtaskDirectLookBegin): direct_claim_call, its walk may take the direct
 * path; direct_claim_call_why, why not.
 */
static bool direct_claim_call = false;
static const char *direct_claim_call_why = NULL;

/*
 * A waiting claim found no Citus coordinated transaction at its start
 * (NtaskDirectClaimBegin): one its looks find later is its own.  Citus
 * opens one for a routed read in a transaction block (adaptive_executor.c:
 * DecideTransactionPropertiesForTaskList, for the whole task list, local
 * tasks too: executor_util_tasks.c, TaskListRequiresRollback, a read-only
 * task "SelectOpensTransactionBlock && IsTransactionBlock()"), and inside
 * a look's subtransaction IsTransactionBlock() is true: the look's own
 * routed reads (the gate, the queue read, the shard map) open one, as
 * they do in a routed waiting claim.  A look that wrote routed ends the
 * call (it is kept), and one rolled back took its remote writes with it
 * (Citus rolls its remote transactions back to the look's savepoint), so
 * what an earlier look left is at most a remote read, which a direct call
 * may make.  docs/scaling.md "The waiting claim on the direct path".
 */
static bool direct_xact_ours = false;

/* direct_set: the call's group (NULL: none), told to spi_util.c too */
static void
direct_set(DirectGroup *g)
{
	direct_call = g;
	if (g == NULL)
		direct_nmany = 0;
	NtaskPlanSetDirect(g != NULL || direct_skip);
}

/* direct_claim_reset: no claim on the direct path (its end, an error's) */
static void
direct_claim_reset(void)
{
	direct_claim = false;
	direct_claim_why = NULL;
	direct_wrote = false;
	direct_skip = false;
	direct_claim_call = false;
	direct_claim_call_why = NULL;
	direct_xact_ours = false;
}

/*
 * The interlock's lock (ShareLock, 5) of the group's task shard id, and
 * whether Citus has a coordinated transaction open: Citus' two functions
 * pg_catalog.lock_shard_metadata(integer, bigint[]) and
 * pg_catalog.get_current_transaction_id(), called through the function
 * manager (docs/scaling.md "The move interlock"), not by a statement: no
 * plan to revalidate, no name to resolve at the call.  Their OIDs are
 * looked up by name and argument types once per backend and again after
 * any invalidation of pg_proc (DROP and CREATE EXTENSION citus, a sinval
 * reset): direct_fns_inval_count counts them, direct_fns_loaded is the count
 * the OIDs and FmgrInfos were looked up at (0: never).
 */
static uint64 direct_fns_inval_count = 1;
static uint64 direct_fns_loaded = 0;
static FmgrInfo direct_lock_fn;	/* lock_shard_metadata(integer, bigint[]) */
static FmgrInfo direct_xact_fn;	/* get_current_transaction_id() */
static MemoryContext direct_lock_cxt = NULL;	/* reset at each call */

/* the transaction number's field of get_current_transaction_id's result */
#define DIRECT_XACT_FIELD "transaction_number"

/* direct_fns_inval: a syscache invalidation of pg_proc (any entry) */
static void
direct_fns_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	direct_fns_inval_count++;
}

/* direct_fn_oid: pg_catalog.<name>(argtypes), or a 42883 error naming sig */
static Oid
direct_fn_oid(const char *name, const char *sig, int nargs, const Oid *argtypes)
{
	Oid			fn = LookupFuncName(list_make2(makeString("pg_catalog"),
											   makeString(pstrdup(name))),
									nargs, argtypes, true);

	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("ntask: function pg_catalog.%s does not exist", sig),
				 errdetail("The direct shard path takes its move interlock with Citus' function."),
				 errhint("Install the citus extension in this database, or set ntask.citus_direct to off.")));
	return fn;
}

/*
 * direct_fns_load: the two functions' OIDs and FmgrInfos (in
 * TopMemoryContext), unless pg_proc is unchanged since they were looked up;
 * their result types checked, so that a changed definition fails here
 * instead of being misread.  In direct_lock_cxt.
 */
static void
direct_fns_load(void)
{
	static bool registered = false;
	uint64		count;
	Oid			lock_args[2] = {INT4OID, INT8ARRAYOID};
	Oid			lock_fn;
	Oid			xact_fn;
	TupleDesc	td = NULL;
	int			i;
	bool		found = false;

	if (!registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, direct_fns_inval, (Datum) 0);
		registered = true;
	}
	if (direct_fns_loaded == direct_fns_inval_count)
		return;
	/* an invalidation while looking up makes the next call look up again */
	count = direct_fns_inval_count;
	lock_fn = direct_fn_oid("lock_shard_metadata",
							"lock_shard_metadata(integer, bigint[])", 2, lock_args);
	xact_fn = direct_fn_oid("get_current_transaction_id",
							"get_current_transaction_id()", 0, NULL);
	if (get_func_rettype(lock_fn) != VOIDOID)
		elog(ERROR, "ntask: pg_catalog.lock_shard_metadata(integer, bigint[]) does not return void");
	if (get_func_result_type(xact_fn, NULL, &td) == TYPEFUNC_COMPOSITE)
		for (i = 0; i < td->natts && !found; i++)
			found = strcmp(NameStr(TupleDescAttr(td, i)->attname), DIRECT_XACT_FIELD) == 0 &&
				TupleDescAttr(td, i)->atttypid == INT8OID;
	if (!found)
		elog(ERROR, "ntask: pg_catalog.get_current_transaction_id() has no bigint field %s",
			 DIRECT_XACT_FIELD);
	fmgr_info_cxt(lock_fn, &direct_lock_fn, TopMemoryContext);
	fmgr_info_cxt(xact_fn, &direct_xact_fn, TopMemoryContext);
	direct_fns_loaded = count;
}

/*
 * direct_fn_check: what the executor checks before it calls a function of
 * a statement (ExecInitFunc): EXECUTE for the current user, and the hook
 */
static void
direct_fn_check(FmgrInfo *fn)
{
	AclResult	aclresult = object_aclcheck(ProcedureRelationId, fn->fn_oid,
											GetUserId(), ACL_EXECUTE);

	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_FUNCTION, get_func_name(fn->fn_oid));
	InvokeFunctionExecuteHook(fn->fn_oid);
}

/*
 * direct_xact_number: the field transaction_number, by its name, of
 * get_current_transaction_id's result, read with the result's own tuple
 * descriptor (a record type Citus registers: get_call_result_type)
 */
static int64
direct_xact_number(Datum result)
{
	HeapTupleHeader th = DatumGetHeapTupleHeader(result);
	TupleDesc	td = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(th),
											HeapTupleHeaderGetTypMod(th));
	HeapTupleData tuple;
	AttrNumber	attno = InvalidAttrNumber;
	Datum		v = (Datum) 0;
	bool		isnull = true;
	int			i;

	for (i = 0; i < td->natts && attno == InvalidAttrNumber; i++)
	{
		Form_pg_attribute a = TupleDescAttr(td, i);

		if (!a->attisdropped && a->atttypid == INT8OID &&
			strcmp(NameStr(a->attname), DIRECT_XACT_FIELD) == 0)
			attno = i + 1;
	}
	if (attno != InvalidAttrNumber)
	{
		tuple.t_len = HeapTupleHeaderGetDatumLength(th);
		ItemPointerSetInvalid(&tuple.t_self);
		tuple.t_tableOid = InvalidOid;
		tuple.t_data = th;
		v = heap_getattr(&tuple, attno, td, &isnull);
	}
	ReleaseTupleDesc(td);
	if (isnull)
		elog(ERROR, "ntask: pg_catalog.get_current_transaction_id() returned no %s",
			 DIRECT_XACT_FIELD);
	return DatumGetInt64(v);
}

/*
 * The group's shard ids, relation names, and whether each placement is on
 * this node: a catalog-snapshot read after the lock, as Citus reads its
 * placements (metadata_utility.c: BuildShardPlacementList); $1 the shard
 * value.  One row per DirectRel, in its order.
 */
typedef enum DirectCheckCol
{
	DIRECT_CHECK_ID = 1,
	DIRECT_CHECK_NAME,
	DIRECT_CHECK_LOCAL,
	DIRECT_CHECK_NCOLS = DIRECT_CHECK_LOCAL
} DirectCheckCol;

static NtaskPlan direct_check_plan = {
	"direct path placement check",
	.ncols = DIRECT_CHECK_NCOLS,
	"SELECT s.id, pg_catalog.shard_name(s.rel, s.id), "
	"  pg_catalog.to_regclass(pg_catalog.shard_name(s.rel, s.id)) IS NOT NULL AND EXISTS ( "
	"    SELECT FROM pg_catalog.pg_dist_placement p JOIN pg_catalog.pg_dist_local_group l "
	"      ON l.groupid OPERATOR(pg_catalog.=) p.groupid "
	"    WHERE p.shardid OPERATOR(pg_catalog.=) s.id) "
	"FROM (SELECT x.rel, x.i, CASE WHEN x.i OPERATOR(pg_catalog.=) 4 "
	"        THEN pg_catalog.get_shard_id_for_distribution_column(x.rel) "
	"        ELSE pg_catalog.get_shard_id_for_distribution_column(x.rel, $1) END AS id "
	"      FROM pg_catalog.unnest(ARRAY['ntask.task', 'ntask.attempt', 'ntask.receipt', "
	"        'ntask.queue']::pg_catalog.regclass[]) WITH ORDINALITY x(rel, i)) s "
	"ORDER BY s.i",
	1, {INT2OID}
};

/*
 * ntask.task a Citus table in this database: read once per backend (a
 * backend that started before ntask_distribute keeps its shard map too)
 */
static int	direct_citus = -1;

/* direct_reset: the call is over (its end, or its transaction's) */
static void
direct_xact_callback(XactEvent event, void *arg)
{
	direct_claim_reset();
	direct_set(NULL);
}

/* NtaskShardDefineSettings: ntask.citus_direct and its bound (module.c) */
void
NtaskShardDefineSettings(void)
{
	DefineCustomBoolVariable("ntask.citus_direct",
							 "Run a call on its shard's node on the local shard relations.",
							 "On a Citus install, a transition, heartbeat, invoked, claim, "
							 "enqueue or release call made on (or delegated to) the node of its task's shard, outside "
							 "a transaction block, runs its statements on the shard relations, "
							 "planned once per backend; off: every call is routed by Citus.",
							 &ntask_citus_direct, true, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("ntask.citus_direct_groups",
							"How many shard values' direct statements a backend keeps.",
							"Past it the least recently used shard value's plans are freed.",
							&ntask_citus_direct_groups, 16, 1, 1024, PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("ntask.citus_delegate",
							 "Delegate a plain call on the coordinator to its shard's node.",
							 "On a Citus coordinator, a transition, heartbeat, invoked, release, "
							 "enqueue or claim made outside a transaction block as the whole "
							 "statement runs as one call of its ntask_<f>_on form on the node of "
							 "its shard (one hop); off: its statements are routed one by one.",
							 &ntask_citus_delegate, true, PGC_SUSET, 0, NULL, NULL, NULL);
	RegisterXactCallback(direct_xact_callback, NULL);
}

/* direct_group_free_plans: forget a group's statements and names */
static void
direct_group_free_plans(DirectGroup *g)
{
	int			i;

	for (i = 0; i < g->nstmts; i++)
		if (g->stmts[i].plan.plan != NULL)
			SPI_freeplan(g->stmts[i].plan.plan);
	g->nstmts = 0;
	g->checked = 0;
	MemoryContextReset(g->cxt);
	g->stmts = NULL;
	g->maxstmts = 0;
	memset(g->names, 0, sizeof(g->names));
}

/*
 * The generation at which each shard value (by its index in shard_values)
 * was last found on another node (0: never), for direct_enter: a backend
 * on the coordinator, or on a worker node for the other node's shards,
 * then runs routed without the interlock's statements until a placement
 * changes.  Apart from the groups: a producer on the coordinator that
 * cycles through more shard values than ntask.citus_direct_groups would
 * otherwise resolve and lock a shard again at most of its calls.
 */
static uint64 *direct_remote = NULL;

static uint64 *
direct_remote_of(int16 shard)
{
	static uint64 none = 0;
	int			i;

	if (direct_remote == NULL)
		direct_remote = MemoryContextAllocZero(TopMemoryContext,
											   sizeof(uint64) * Max(shard_n, 1));
	for (i = 0; i < shard_n; i++)
		if (shard_values[i] == shard)
			return &direct_remote[i];
	none = 0;					/* not a shard value: never remote */
	return &none;
}

/*
 * direct_group: the group of shard, made (or the least recently used one
 * reused, past ntask.citus_direct_groups) on first use
 */
static DirectGroup *
direct_group(int16 shard)
{
	DirectGroup *g = NULL;
	int			i;

	for (i = 0; i < direct_ngroups; i++)
		if (direct_groups[i].shard == shard)
			g = &direct_groups[i];
	if (g == NULL && direct_ngroups >= ntask_citus_direct_groups)
	{
		g = &direct_groups[0];
		for (i = 1; i < direct_ngroups; i++)
			if (direct_groups[i].last_use < g->last_use)
				g = &direct_groups[i];
		direct_group_free_plans(g);
		memset(g->ids, 0, sizeof(g->ids));
		g->remote = 0;
		g->locked = 0;			/* another shard value's lock is not its */
		g->shard = shard;
	}
	if (g == NULL)
	{
		if (direct_ngroups >= direct_maxgroups)
		{
			int			m = Max(4, direct_maxgroups * 2);

			direct_groups = direct_groups == NULL ?
				MemoryContextAllocZero(TopMemoryContext, sizeof(DirectGroup) * m) :
				repalloc(direct_groups, sizeof(DirectGroup) * m);
			direct_maxgroups = m;
		}
		g = &direct_groups[direct_ngroups++];
		memset(g, 0, sizeof(*g));
		g->shard = shard;
		g->cxt = AllocSetContextCreate(TopMemoryContext, "ntask direct group",
									   ALLOCSET_SMALL_SIZES);
	}
	g->last_use = ++direct_clock;
	return g;
}

/*
 * direct_group_check
 *		After the lock: read the group's shard ids, names and placements
 *		again, its statements freed (prepared again on use); NULL when they
 *		are this node's, else why not: a relation is not on this node
 *		(moved away, the orphan of a move), or the task shard is not
 *		locked_id (a split gave the shard value a new shard: the next call
 *		locks that one).
 */
static const char *
direct_group_check(DirectGroup *g, int64 locked_id)
{
	Datum		arg = Int16GetDatum(g->shard);
	SPITupleTable *tt;
	const char *why = NULL;
	int			i;

	/* an invalidation from here on is after this read: check again then */
	uint64		generation = shard_inval_generation;

	direct_group_free_plans(g);
	if (NtaskExecPlan(&direct_check_plan, &arg, NULL, SPI_OK_SELECT) != DIRECT_NRELS)
		return "no shards of the shard value";
	tt = SPI_tuptable;
	for (i = 0; i < DIRECT_NRELS; i++)
	{
		g->ids[i] = NtaskTupGetInt64(tt, i, DIRECT_CHECK_ID);
		g->names[i] = MemoryContextStrdup(g->cxt, NtaskTupGetCString(tt, i, DIRECT_CHECK_NAME));
		if (!NtaskTupGetBool(tt, i, DIRECT_CHECK_LOCAL))
			why = "the shard's placement is not on this node";
	}
	SPI_freetuptable(tt);
	if (why != NULL)
	{
		/* no statements here: its slot is the first one reused */
		g->remote = *direct_remote_of(g->shard) = generation;
		g->last_use = 0;
	}
	else if (g->ids[DIRECT_REL_TASK] != locked_id)
		why = "the shard value has a new shard (a split)";
	else
		g->checked = generation;
	return why;
}

/*
 * direct_lock: the interlock's lock (NtaskTrySubxact's fn): Citus'
 * lock_shard_metadata(5, ARRAY[id, ...]) and get_current_transaction_id(),
 * as the statement "SELECT pg_catalog.lock_shard_metadata(5, ARRAY[$1]),
 * (pg_catalog.get_current_transaction_id()).transaction_number" ran them
 * before: as the owner of schema ntask (lock_shard_metadata checks that
 * the current user owns the table: EnsureShardOwner), with the executor's
 * EXECUTE check.  No GUC is pinned: nothing is parsed or planned.  Several
 * ids (a call by task ids of several shard values) are locked in one call,
 * in the order given: ascending, as Citus' LockShardListMetadata sorts
 * them (its lock_shard_metadata locks in the array's order).
 */
typedef struct DirectLock
{
	const int64 *ids;			/* the task shards' ids, ascending */
	int			n;
	int64		xact;			/* Citus' distributed transaction number */
} DirectLock;

static void
direct_lock(void *arg)
{
	DirectLock *l = (DirectLock *) arg;
	MemoryContext oldcxt;
	Oid			owner;
	Oid			save_userid;
	int			save_sec_context;
	Datum	   *ids;
	int			i;

	if (direct_lock_cxt == NULL)
		direct_lock_cxt = AllocSetContextCreate(TopMemoryContext, "ntask direct lock",
												ALLOCSET_SMALL_SIZES);
	MemoryContextReset(direct_lock_cxt);	/* an error's leftovers */
	oldcxt = MemoryContextSwitchTo(direct_lock_cxt);
	ids = palloc(sizeof(Datum) * l->n);
	for (i = 0; i < l->n; i++)
		ids[i] = Int64GetDatum(l->ids[i]);
	direct_fns_load();
	owner = NtaskOwner();
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	PG_TRY();
	{
		SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
		direct_fn_check(&direct_lock_fn);
		direct_fn_check(&direct_xact_fn);
		(void) FunctionCall2(&direct_lock_fn, Int32GetDatum(ShareLock),
							 NtaskInt8Array(ids, l->n));
		l->xact = direct_xact_number(FunctionCall0Coll(&direct_xact_fn, InvalidOid));
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
		MemoryContextSwitchTo(oldcxt);
	}
	PG_END_TRY();
	MemoryContextReset(direct_lock_cxt);
}

/* direct_resolve: the group's task shard id, before its lock */
static void
direct_resolve(DirectGroup *g)
{
	Datum		arg = Int16GetDatum(g->shard);

	if (NtaskExecPlan(&direct_check_plan, &arg, NULL, SPI_OK_SELECT) != DIRECT_NRELS)
		elog(ERROR, "ntask: no Citus shards of shard value %d", g->shard);
	g->ids[DIRECT_REL_TASK] = NtaskTupGetInt64(SPI_tuptable, DIRECT_REL_TASK, DIRECT_CHECK_ID);
	SPI_freetuptable(SPI_tuptable);
}

/* direct_volatile: a node that calls a volatile function */
static bool
direct_volatile_checker(Oid func_id, void *context)
{
	return func_volatile(func_id) == PROVOLATILE_VOLATILE;
}

typedef struct DirectShape
{
	Oid			fn;				/* the call's function */
	int			volatiles;		/* expressions calling a volatile function */
	int			calls;			/* of them, calls of fn */
} DirectShape;

static bool
direct_shape_walker(Node *node, DirectShape *shape)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, direct_volatile_checker, NULL))
	{
		shape->volatiles++;
		if (IsA(node, FuncExpr) && ((FuncExpr *) node)->funcid == shape->fn)
			shape->calls++;
	}
	if (IsA(node, SubPlan) || IsA(node, Query))
		shape->volatiles += 2;	/* not the shape: a sub-select */

	/*
	 * Nor an aggregate of the user's: pg_proc's entry of an aggregate is
	 * immutable whatever its support functions are, and a volatile
	 * transition or final function may write.  PostgreSQL's own write
	 * nothing.
	 */
	if (IsA(node, Aggref) && ((Aggref *) node)->aggfnoid >= FirstNormalObjectId)
		shape->volatiles += 2;
	return expression_tree_walker(node, direct_shape_walker, (void *) shape);
}

/*
 * direct_whole_statement
 *		The call is its portal's whole statement: one SELECT plan of a
 *		Result, a ProjectSet over a Result, or a scan of one function,
 *		with no quals, sub-plans or row marks, in which the one volatile
 *		call is this function's, once.  So nothing of the transaction ran
 *		before it (not in a block), and nothing but the commit follows it.
 *		The scan may sit under one plain aggregate without GROUP BY or
 *		HAVING (`SELECT max(task_id), max(token) FROM ntask_claim(...)`, a
 *		pgbench script's \gset): the scan runs the function to its end
 *		first, and PostgreSQL's own aggregates of its rows write nothing
 *		(a user's aggregate is refused: direct_shape_walker).
 */
static bool
direct_whole_statement(FunctionCallInfo fcinfo)
{
	PlannedStmt *ps;
	Plan	   *plan;
	DirectShape shape = {0};

	if (ActivePortal == NULL || fcinfo->flinfo == NULL ||
		list_length(ActivePortal->stmts) != 1)
		return false;
	ps = (PlannedStmt *) linitial(ActivePortal->stmts);
	if (!IsA(ps, PlannedStmt) || ps->commandType != CMD_SELECT ||
		ps->hasModifyingCTE || ps->subplans != NIL || ps->rowMarks != NIL)
		return false;
	shape.fn = fcinfo->flinfo->fn_oid;
	plan = ps->planTree;
	if (IsA(plan, Agg))
	{
		Agg		   *agg = (Agg *) plan;

		if (agg->aggstrategy != AGG_PLAIN || agg->numCols != 0 ||
			agg->groupingSets != NIL || plan->qual != NIL ||
			plan->initPlan != NIL || plan->righttree != NULL)
			return false;
		(void) direct_shape_walker((Node *) plan->targetlist, &shape);
		plan = plan->lefttree;
		if (plan == NULL || !IsA(plan, FunctionScan))
			return false;
	}
	else if (IsA(plan, ProjectSet))
	{
		(void) direct_shape_walker((Node *) plan->targetlist, &shape);
		if (plan->qual != NIL || plan->initPlan != NIL || plan->righttree != NULL)
			return false;
		plan = plan->lefttree;
		if (plan == NULL || !IsA(plan, Result))
			return false;
	}
	if (plan->qual != NIL || plan->initPlan != NIL ||
		plan->lefttree != NULL || plan->righttree != NULL)
		return false;
	if (IsA(plan, Result))
	{
		if (((Result *) plan)->resconstantqual != NULL)
			return false;
	}
	else if (IsA(plan, FunctionScan))
	{
		if (list_length(((FunctionScan *) plan)->functions) != 1 ||
			((FunctionScan *) plan)->funcordinality)
			return false;
		(void) direct_shape_walker((Node *) ((FunctionScan *) plan)->functions, &shape);
	}
	else
		return false;
	(void) direct_shape_walker((Node *) plan->targetlist, &shape);
	return shape.volatiles == 1 && shape.calls == 1;
}

/* direct_routed: the call runs routed, for why (DEBUG1) */
static NtaskPath
direct_routed(int16 shard, const char *why)
{
	elog(DEBUG1, "ntask: routed path for shard %d: %s", shard, why);
	return NTASK_PATH_ROUTED;
}

/*
 * direct_call_why
 *		The checks of a call's start (the setting, a transaction block, the
 *		isolation, the whole statement): NULL when the call may take the
 *		direct path, else why not.  *quiet: not worth a log line (a plain
 *		install, or a shard map without Citus: regress "distribute").
 */
static const char *
direct_call_why(FunctionCallInfo fcinfo, bool *quiet)
{
	*quiet = true;
	if (NtaskShardCount() == 0)
		return "a plain install";
	*quiet = false;
	if (!ntask_citus_direct)
		return "ntask.citus_direct is off";
	if (direct_citus < 0)
	{
		bool		distributed;
		bool		coordinator;

		NtaskCitusLayout(&distributed, &coordinator);
		direct_citus = distributed ? 1 : 0;
	}
	if (direct_citus == 0)
	{
		*quiet = true;
		return "no Citus";		/* regress "distribute" */
	}
	if (IsTransactionBlock())
		return "in a transaction block";
	if (IsolationUsesXactSnapshot())
		return "not READ COMMITTED";
	return NULL;
}

/*
 * direct_lock_ids
 *		The interlock's lock of the n task shard ids (ascending), in a
 *		subtransaction: a split that commits between the read of an id and
 *		the lock makes Citus raise for it ("could not find valid entry for
 *		shard"); the call then runs routed.  Other errors are raised.  Then
 *		the invalidations, so a move committed while the lock waited is
 *		seen.  NULL when locked and no Citus coordinated transaction is
 *		open, else why the call runs routed.
 */
static const char *
direct_lock_ids(const int64 *ids, int n)
{
	DirectLock	lock;
	ErrorData  *edata;

	lock.ids = ids;
	lock.n = n;
	lock.xact = 0;
	if (!NtaskTrySubxact(direct_lock, &lock, &edata))
	{
		if (edata->sqlerrcode != ERRCODE_INTERNAL_ERROR)
			ReThrowError(edata);
		return "the shard's id is gone (a split)";
	}
	if (lock.xact != 0 && !direct_xact_ours)
		return "a Citus coordinated transaction is open";
	AcceptInvalidationMessages();
	return NULL;
}

/*
 * direct_xact_now
 *		Citus' distributed transaction number now (0: no coordinated
 *		transaction), read as direct_lock reads it, without the lock: a
 *		waiting claim's start.
 */
static int64
direct_xact_now(void)
{
	MemoryContext oldcxt;
	Oid			save_userid;
	int			save_sec_context;
	volatile int64 xact = 0;

	if (direct_lock_cxt == NULL)
		direct_lock_cxt = AllocSetContextCreate(TopMemoryContext, "ntask direct lock",
												ALLOCSET_SMALL_SIZES);
	MemoryContextReset(direct_lock_cxt);
	oldcxt = MemoryContextSwitchTo(direct_lock_cxt);
	direct_fns_load();
	/* as the owner of schema ntask, as direct_lock calls it */
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	PG_TRY();
	{
		SetUserIdAndSecContext(NtaskOwner(), save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
		direct_fn_check(&direct_xact_fn);
		xact = direct_xact_number(FunctionCall0Coll(&direct_xact_fn, InvalidOid));
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
		MemoryContextSwitchTo(oldcxt);
	}
	PG_END_TRY();
	MemoryContextReset(direct_lock_cxt);
	return xact;
}

/*
 * direct_enter
 *		The move interlock for shard's group (docs/scaling.md "The move
 *		interlock"): its metadata lock (once per claim: the claim's
 *		direct_serial, 0 for a transition's call), the invalidations, the
 *		placement check.  NULL and *gp when the group is this node's, else
 *		why not (the call then runs routed, or a claim that wrote skips
 *		the shard).
 */
static const char *
direct_enter(int16 shard, uint64 serial, DirectGroup **gp)
{
	DirectGroup *g;
	int64		locked_id;
	const char *why;

	shard_watch_placements();	/* the invalidation callback */

	/*
	 * Found on another node, and no placement changed since: routed without
	 * the lock (a call on the coordinator, on the other worker nodes).  A
	 * move here that this backend has not heard of yet is safe to miss.
	 * Kept apart from the groups, so that it outlives their bound.
	 */
	if (*direct_remote_of(shard) == shard_inval_generation)
		return "the shard's placement is not on this node";
	g = direct_group(shard);
	/* locked by this claim already: a move of the group cannot have ended */
	if (serial != 0 && g->locked == serial)
	{
		AcceptInvalidationMessages();
		if (g->checked != shard_inval_generation &&
			(why = direct_group_check(g, g->ids[DIRECT_REL_TASK])) != NULL)
			return why;
		*gp = g;
		return NULL;
	}

	/*
	 * The shard id to lock: the one checked last, unless a placement changed
	 * since (a split drops the old id, and Citus cannot lock a shard it no
	 * longer knows), then read again.
	 */
	AcceptInvalidationMessages();
	if (g->checked != shard_inval_generation)
		direct_resolve(g);
	locked_id = g->ids[DIRECT_REL_TASK];
	if ((why = direct_lock_ids(&locked_id, 1)) != NULL)
		return why;
	if (g->checked != shard_inval_generation &&
		(why = direct_group_check(g, locked_id)) != NULL)
		return why;
	g->locked = serial;
	*gp = g;
	return NULL;
}

/* a group of a call of several, by its task shard's id (lock order) */
typedef struct DirectMany
{
	int64		id;				/* the task shard's Citus id */
	int			idx;			/* in direct_groups */
} DirectMany;

static int
direct_many_cmp(const void *a, const void *b)
{
	int64		x = ((const DirectMany *) a)->id;
	int64		y = ((const DirectMany *) b)->id;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * direct_enter_many
 *		The move interlock for the groups of the ns (> 1) distinct shard
 *		values of a call by task ids (docs/scaling.md "Batches over several
 *		shards on the direct path"): every group's metadata lock in one
 *		call of lock_shard_metadata, in ascending shard id order (as
 *		Citus' LockShardListMetadata sorts them: two such calls, or a move
 *		of several groups, never wait on each other in a cycle), then the
 *		invalidations, then each group's check, as direct_enter does for
 *		one.  NULL when every group is this node's: their indexes in
 *		direct_many; else why not, *bad the shard value it is about (the
 *		call then runs routed, wholly: nothing was written).
 */
static const char *
direct_enter_many(const int16 *shards, int ns, int16 *bad)
{
	DirectMany *m;
	int64	   *ids;
	const char *why;
	int			i;

	shard_watch_placements();	/* the invalidation callback */
	*bad = shards[0];
	/* one found on another node, and no placement changed since: routed */
	for (i = 0; i < ns; i++)
		if (*direct_remote_of(shards[i]) == shard_inval_generation)
		{
			*bad = shards[i];
			return "the shard's placement is not on this node";
		}

	/*
	 * Each group needs its slot for the whole call: past the bound, the
	 * least recently used group would be taken from this call's own.
	 */
	if (ns > ntask_citus_direct_groups)
		return "more shard values than ntask.citus_direct_groups";
	m = palloc(sizeof(DirectMany) * ns);
	ids = palloc(sizeof(int64) * ns);
	/*
	 * direct_group may move direct_groups: indexes; and it never takes the
	 * slot of a group made or used earlier in this loop (those are the
	 * most recently used, and ns is within the bound)
	 */
	for (i = 0; i < ns; i++)
		m[i].idx = direct_group(shards[i]) - direct_groups;

	/* the shard ids to lock, read again where a placement changed */
	AcceptInvalidationMessages();
	for (i = 0; i < ns; i++)
	{
		DirectGroup *g = &direct_groups[m[i].idx];

		if (g->checked != shard_inval_generation)
			direct_resolve(g);
		m[i].id = g->ids[DIRECT_REL_TASK];
	}
	qsort(m, ns, sizeof(DirectMany), direct_many_cmp);
	for (i = 0; i < ns; i++)
		ids[i] = m[i].id;
	if ((why = direct_lock_ids(ids, ns)) != NULL)
		return why;
	for (i = 0; i < ns; i++)
	{
		DirectGroup *g = &direct_groups[m[i].idx];

		if (g->checked != shard_inval_generation &&
			(why = direct_group_check(g, m[i].id)) != NULL)
		{
			*bad = g->shard;
			return why;
		}
	}
	if (direct_maxmany < ns)
	{
		direct_many = direct_many == NULL ?
			MemoryContextAlloc(TopMemoryContext, sizeof(int) * ns) :
			repalloc(direct_many, sizeof(int) * ns);
		direct_maxmany = ns;
	}
	for (i = 0; i < ns; i++)
	{
		direct_groups[m[i].idx].locked = 0;
		direct_many[i] = m[i].idx;
	}
	direct_nmany = ns;
	return NULL;
}

/* int16 in qsort order */
static int
direct_shard_cmp(const void *a, const void *b)
{
	int16		x = *(const int16 *) a;
	int16		y = *(const int16 *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * direct_begin
 *		The path of a call whose statements touch the ns shard values of
 *		shards (ascending, distinct, ns >= 1), or, when unless says why the
 *		call cannot take the direct path, the routed path with that reason.
 *		One shard value enters its group (direct_enter); several enter
 *		theirs together (direct_enter_many), the call starting on the first.
 */
static NtaskPath
direct_begin(FunctionCallInfo fcinfo, const int16 *shards, int ns,
			 const char *unless)
{
	DirectGroup *g = NULL;
	const char *why;
	bool		quiet;
	int16		bad = shards[0];
	int			i;

	direct_claim_reset();
	direct_set(NULL);
	why = direct_call_why(fcinfo, &quiet);
	if (NtaskShardCount() == 0)
		return NTASK_PATH_PLAIN;
	if (why != NULL)
		return quiet ? NTASK_PATH_ROUTED : direct_routed(shards[0], why);
	if (unless != NULL)
		return direct_routed(shards[0], unless);
	for (i = 0; i < ns; i++)
		if (!NtaskIsShardValue(shards[i]))
			return direct_routed(shards[i], "not a shard value");
	if (!direct_whole_statement(fcinfo))
		return direct_routed(shards[0], "not the whole statement");
	if (ns == 1)
		why = direct_enter(shards[0], 0, &g);
	else if ((why = direct_enter_many(shards, ns, &bad)) == NULL)
		g = &direct_groups[direct_many[0]];
	if (why != NULL)
		return direct_routed(bad, why);
	direct_set(g);
	for (i = 0; i < ns; i++)
		elog(DEBUG1, "ntask: direct path for shard %d", shards[i]);
	return NTASK_PATH_DIRECT;
}

/*
 * NtaskDirectBegin
 *		Choose the call's path (above) for the n tasks of task_ids; the
 *		direct path holds until NtaskDirectEnd or the transaction's end.
 *		Tasks of several shard values take it when every one of them passes
 *		the interlock (direct_enter_many); the call then names the group of
 *		each statement's tasks with NtaskDirectUseShard.  In SPI, before the
 *		call's first statement.
 */
NtaskPath
NtaskDirectBegin(FunctionCallInfo fcinfo, const int64 *task_ids, int n)
{
	int16	   *shards;
	int			i;

	shards = palloc(sizeof(int16) * Max(n, 1));
	for (i = 0; i < n; i++)
		shards[i] = NTASK_ID_SHARD(task_ids[i]);
	return NtaskDirectBeginShards(fcinfo, shards, &n, NULL);
}

/*
 * NtaskDirectBeginShards
 *		NtaskDirectBegin for a call named by the shard values of its *n rows
 *		(shards, in any order, repeated), not by task ids: an
 *		ntask_enqueue_many, whose keys' shards are ntask_shard(queue, key).
 *		On return shards holds the distinct shard values, ascending, and *n
 *		their number.  Several shard values enter their groups together
 *		(direct_enter_many); the call names the group of each statement with
 *		NtaskDirectUseShard.  unless: as NtaskDirectBeginShard.  In SPI,
 *		before the call's first statement.
 */
NtaskPath
NtaskDirectBeginShards(FunctionCallInfo fcinfo, int16 *shards, int *n, const char *unless)
{
	int			ns;
	int			i;

	if (*n <= 0)
	{
		direct_claim_reset();
		direct_set(NULL);
		return NtaskShardCount() == 0 ? NTASK_PATH_PLAIN : NTASK_PATH_ROUTED;
	}
	qsort(shards, *n, sizeof(int16), direct_shard_cmp);
	ns = 1;
	for (i = 1; i < *n; i++)
		if (shards[i] != shards[ns - 1])
			shards[ns++] = shards[i];
	*n = ns;
	return direct_begin(fcinfo, shards, ns, unless);
}

/*
 * NtaskDirectUseShard
 *		In a call on the direct path, the statements from here on are of
 *		shard's tasks: run them on its group.  The group must be one the
 *		call entered (NtaskDirectBegin), else the call's scope is a defect:
 *		raise.  Nothing off the direct path.
 */
void
NtaskDirectUseShard(int16 shard)
{
	int			i;

	if (direct_call == NULL || direct_call->shard == shard)
		return;
	for (i = 0; i < direct_nmany; i++)
		if (direct_groups[direct_many[i]].shard == shard)
		{
			direct_call = &direct_groups[direct_many[i]];
			return;
		}
	elog(ERROR, "ntask: shard %d is not one of the call's on the direct path", shard);
}

/*
 * NtaskDirectBeginShard
 *		NtaskDirectBegin for a call named by its shard value, not by task
 *		ids (an enqueue: the shard of its queue and key), or, when unless
 *		says why the call cannot take the direct path (an enqueue with
 *		parents: its task_dep rows and the parents' reads stay routed), the
 *		routed path with that reason.  In SPI, before the call's first
 *		statement.
 */
NtaskPath
NtaskDirectBeginShard(FunctionCallInfo fcinfo, int16 shard, const char *unless)
{
	return direct_begin(fcinfo, &shard, 1, unless);
}

/*
 * NtaskDirectClaimBegin
 *		A claim's start (ntask_claim, its _on form): whether its walk may
 *		take the direct path, shard by shard (NtaskDirectClaimShard); not
 *		where NtaskDirectBegin's call checks fail.  A waiting claim
 *		(may_wait) takes it too, look by look (NtaskDirectLookBegin,
 *		NtaskDirectLookEnd): these checks are the call's, made here once,
 *		before its first look's subtransaction, and so is its check of a
 *		Citus coordinated transaction (direct_xact_ours).  Nothing is
 *		locked or read here but the layout (and, for a wait, Citus'
 *		transaction number).  In SPI, until NtaskDirectEnd.
 */
void
NtaskDirectClaimBegin(FunctionCallInfo fcinfo, bool may_wait)
{
	bool		quiet;

	direct_claim_reset();
	direct_set(NULL);
	direct_claim_why = direct_call_why(fcinfo, &quiet);
	if (direct_claim_why == NULL && !direct_whole_statement(fcinfo))
		direct_claim_why = "not the whole statement";
	/*
	 * A waiting claim: the coordinated transaction's check here, before its
	 * looks' subtransactions, where Citus would open one for its own reads
	 * (direct_xact_ours)
	 */
	if (direct_claim_why == NULL && !quiet && may_wait)
	{
		if (direct_xact_now() != 0)
			direct_claim_why = "a Citus coordinated transaction is open";
		else
			direct_xact_ours = true;
	}
	if (quiet)
		direct_claim_why = NULL;	/* nothing to say: no log line */
	direct_claim = direct_claim_why == NULL && !quiet;
	direct_claim_call = direct_claim;
	direct_claim_call_why = direct_claim_why;
	direct_serial++;
}

/*
 * NtaskDirectLookBegin
 *		A look of a waiting claim starts, in its own subtransaction (wait.c,
 *		nw_look): the claim's state of the path is the call's again
 *		(NtaskDirectClaimBegin's decision; nothing written, no shard
 *		skipped, no group), and under a new serial, so that every group
 *		its walk reaches is locked again (direct_enter): the lock an
 *		earlier look took went with that look's rollback.  The
 *		invalidations first, so that a move committed during the sleep is
 *		known to the walk's list of this node's shards (NtaskClaimInto
 *		reads it again).  docs/scaling.md "The waiting claim on the direct
 *		path".
 */
void
NtaskDirectLookBegin(void)
{
	direct_serial++;
	direct_claim = direct_claim_call;
	direct_claim_why = direct_claim_call_why;
	direct_wrote = false;
	direct_skip = false;
	direct_set(NULL);
	if (direct_claim)
		AcceptInvalidationMessages();
}

/*
 * NtaskDirectLookEnd
 *		A look of a waiting claim was rolled back, the locks it took with
 *		it (its groups' metadata locks too): no group is the call's, none
 *		counts as locked by the claim (a new serial).  Also on an error's
 *		rollback.
 */
void
NtaskDirectLookEnd(void)
{
	direct_serial++;
	direct_skip = false;
	direct_set(NULL);
}

/*
 * NtaskDirectLookUse
 *		In a look of a waiting claim on the direct path (the call's
 *		decision), after its claim found nothing: the statements from here
 *		on (wait.c's read of the queue's next due time) run on shard's group
 *		when this look entered it (locked under the look's serial, no
 *		placement changed since its check): true.  Else they run routed
 *		(false), which a direct call may for a read.  *walks: whether the
 *		call's looks take the direct path at all (false: the caller reads
 *		as the routed claim does); shard -1 asks that only.
 */
bool
NtaskDirectLookUse(int16 shard, bool *walks)
{
	int			i;

	*walks = direct_claim_call;
	direct_skip = false;
	if (direct_claim_call)
		for (i = 0; i < direct_ngroups; i++)
		{
			DirectGroup *g = &direct_groups[i];

			if (g->shard == shard && g->locked == direct_serial &&
				g->checked == shard_inval_generation)
			{
				direct_set(g);
				return true;
			}
		}
	direct_set(NULL);
	return false;
}

/*
 * NtaskDirectBeginUnless
 *		NtaskDirectBegin, or, when unless says why the call cannot take the
 *		direct path (ntask_transition_and_claim: its queue is not known to
 *		fit it), the routed path with that reason.
 */
NtaskPath
NtaskDirectBeginUnless(FunctionCallInfo fcinfo, const int64 *task_ids, int n,
					   const char *unless)
{
	bool		quiet;
	const char *why;

	if (unless == NULL || n <= 0)
		return NtaskDirectBegin(fcinfo, task_ids, n);
	direct_claim_reset();
	direct_set(NULL);
	why = direct_call_why(fcinfo, &quiet);
	if (NtaskShardCount() == 0)
		return NTASK_PATH_PLAIN;
	if (quiet)
		return NTASK_PATH_ROUTED;
	return direct_routed(NTASK_ID_SHARD(task_ids[0]), why != NULL ? why : unless);
}

/*
 * NtaskDirectClaimAfter
 *		ntask_transition_and_claim: its claim goes on on the path its
 *		transition took (NtaskDirectBegin): on the direct path with the
 *		transition's group locked for this claim and its writes counted
 *		(the claim cannot go routed after them), else routed.
 */
void
NtaskDirectClaimAfter(void)
{
	DirectGroup *g = direct_call;

	direct_serial++;
	direct_skip = false;
	if (g == NULL)
	{
		direct_claim = false;
		direct_claim_why = NtaskShardCount() > 0 && direct_citus == 1 ?
			"the call's transition ran routed" : NULL;
		return;
	}
	direct_claim = true;
	direct_claim_why = NULL;
	g->locked = direct_serial;
}

/*
 * NtaskDirectClaimShard
 *		A claim's walk reaches shard: on the direct path, its group's
 *		interlock (direct_enter) and its statements from here on; when that
 *		fails and nothing was written directly yet, the call goes on routed
 *		(the claim's metadata lock of the shard, NtaskLockShards), else the
 *		shard is skipped (its statements find nothing).  Off the direct
 *		path: the routed claim's lock.  In SPI.
 */
void
NtaskDirectClaimShard(int16 shard)
{
	DirectGroup *g = NULL;
	const char *why;

	direct_skip = false;
	if (direct_claim)
	{
		if ((why = direct_enter(shard, direct_serial, &g)) == NULL)
		{
			direct_set(g);
			elog(DEBUG1, "ntask: direct path for shard %d", shard);
			return;
		}
		if (direct_wrote)
		{
			/* its writes are direct: the walk passes this shard by */
			direct_skip = true;
			direct_set(NULL);
			elog(DEBUG1, "ntask: direct path skips shard %d: %s", shard, why);
			return;
		}
		direct_claim = false;
		direct_claim_why = why;
		direct_set(NULL);
	}
	if (direct_claim_why != NULL)
		elog(DEBUG1, "ntask: routed path for shard %d: %s", shard, direct_claim_why);
	NtaskLockShard(shard);
}

/*
 * NtaskDirectClaimRouted
 *		A claim on the direct path met what only the routed path does (a
 *		queue that is fair, ordered or aging, a guard, flow control): true
 *		when it goes on routed from here (nothing written directly yet: its
 *		row locks stay its own, on the shard it holds the metadata lock
 *		of), false when it must stop (its writes were direct).  True off
 *		the direct path.
 */
bool
NtaskDirectClaimRouted(const char *why)
{
	int16		shard;

	if (direct_call == NULL)
		return !direct_skip;
	shard = direct_call->shard;
	if (direct_wrote)
	{
		elog(DEBUG1, "ntask: direct path stops in shard %d: %s", shard, why);
		return false;
	}
	direct_claim = false;
	direct_claim_why = why;
	direct_set(NULL);
	elog(DEBUG1, "ntask: routed path for shard %d: %s", shard, why);
	return true;
}

/* NtaskDirectEnd: the call on the direct path is over */
void
NtaskDirectEnd(void)
{
	direct_claim_reset();
	direct_set(NULL);
}

/*
 * direct_rewrite
 *		sql with each ntask.<relation> replaced by the group's shard
 *		relation; a function (ntask.<name>( ) is kept.  A relation without
 *		a direct name is a defect of the call's scope: raise.  The arbiter
 *		of an ON CONFLICT ON CONSTRAINT <name> (the enqueue's, of ntask.task)
 *		becomes the task shard's constraint, <name>_<shardid>: Citus names a
 *		shard's constraints so (relay_event_utility.c:
 *		RelayEventExtendConstraintAndIndexNames, AppendShardIdToName), and a
 *		name it does not know fails the statement's preparation, loudly.
 *		Skips string literals and quoted identifiers, as spi_highest_param
 *		does.
 */
static char *
direct_rewrite(DirectGroup *g, const NtaskPlan *p)
{
	StringInfoData buf;
	const char *c = p->sql;
	char		quote = '\0';
	static const char prefix[] = "ntask.";
	static const char on_constraint[] = "ON CONSTRAINT ";

	initStringInfo(&buf);
	while (*c != '\0')
	{
		if (quote != '\0')
		{
			if (*c == quote)
				quote = '\0';
			appendStringInfoChar(&buf, *c++);
			continue;
		}
		if (*c == '\'' || *c == '"')
		{
			quote = *c;
			appendStringInfoChar(&buf, *c++);
			continue;
		}
		if (strncmp(c, on_constraint, sizeof(on_constraint) - 1) == 0 &&
			(c == p->sql || !(isalnum((unsigned char) c[-1]) || c[-1] == '_')))
		{
			appendStringInfoString(&buf, on_constraint);
			c += sizeof(on_constraint) - 1;
			while (isalnum((unsigned char) *c) || *c == '_')
				appendStringInfoChar(&buf, *c++);
			appendStringInfo(&buf, "_" INT64_FORMAT, g->ids[DIRECT_REL_TASK]);
			continue;
		}
		if (strncmp(c, prefix, sizeof(prefix) - 1) == 0 &&
			(c == p->sql || !(isalnum((unsigned char) c[-1]) || c[-1] == '_' || c[-1] == '.')))
		{
			const char *name = c + sizeof(prefix) - 1;
			const char *end = name;
			int			r;

			while (isalnum((unsigned char) *end) || *end == '_')
				end++;
			for (r = 0; r < DIRECT_NRELS; r++)
				if (strlen(direct_rel_names[r]) == (size_t) (end - name) &&
					strncmp(direct_rel_names[r], name, end - name) == 0)
					break;
			if (r < DIRECT_NRELS)
			{
				appendStringInfoString(&buf, g->names[r]);
				c = end;
				continue;
			}
			/* ntask's SQL writes a call as name( and a relation as name ... */
			if (*end != '(')
				elog(ERROR, "ntask: %s names ntask.%.*s, which has no shard relation on the direct path",
					 p->name, (int) (end - name), name);
		}
		appendStringInfoChar(&buf, *c++);
	}
	return buf.data;
}

/*
 * direct_plan
 *		The group's direct statement of p (a pair's plain variant), made on
 *		first use: p's text with the group's relations, a generic plan
 *		prepared by NtaskExecPlan.
 */
static NtaskPlan *
direct_plan(DirectGroup *g, const NtaskPlan *p)
{
	DirectStmt *st;
	MemoryContext old;
	int			i;

	for (i = 0; i < g->nstmts; i++)
		if (g->stmts[i].key == p)
			return &g->stmts[i].plan;
	old = MemoryContextSwitchTo(g->cxt);
	if (g->nstmts >= g->maxstmts)
	{
		int			m = Max(8, g->maxstmts * 2);

		g->stmts = g->stmts == NULL ? palloc(sizeof(DirectStmt) * m) :
			repalloc(g->stmts, sizeof(DirectStmt) * m);
		g->maxstmts = m;
	}
	st = &g->stmts[g->nstmts];
	st->key = p;
	st->plan = *p;
	st->plan.name = psprintf("%s (direct)", p->name);
	st->plan.sql = direct_rewrite(g, p);
	st->plan.plan = NULL;
	st->plan.direct = true;
	st->writes = -1;
	MemoryContextSwitchTo(old);
	g->nstmts++;
	return &st->plan;
}

/*
 * NtaskCallPath
 *		The path of the call's statements: routed by Citus on a distributed
 *		install (a shard map: also regress "distribute"'s plain install
 *		with one, which runs the routed statements as they are), else
 *		plain.
 */
NtaskPath
NtaskCallPath(void)
{
	if (direct_call != NULL)
		return NTASK_PATH_DIRECT;
	return NtaskShardCount() > 0 ? NTASK_PATH_ROUTED : NTASK_PATH_PLAIN;
}

/*
 * NtaskDirectTaskIndex
 *		On the direct path, the index of the call's task shard relation
 *		that Citus made from ntask.task's index name: <name>_<shardid>, in
 *		the shard's schema, ntask (Citus names a shard's indexes so,
 *		relay_event_utility.c: AppendShardIdToName); InvalidOid off the
 *		direct path or when there is none by that name.  For a scan in C
 *		of the shard's own index (claim.c's probe of expired leases).
 */
Oid
NtaskDirectTaskIndex(const char *name)
{
	char		buf[NAMEDATALEN * 2];

	if (direct_call == NULL)
		return InvalidOid;
	snprintf(buf, sizeof(buf), "%s_" INT64_FORMAT, name,
			 direct_call->ids[DIRECT_REL_TASK]);
	if (strlen(buf) >= NAMEDATALEN)
		return InvalidOid;
	return get_relname_relid(buf, get_namespace_oid("ntask", true));
}

/*
 * NtaskExecPair
 *		Run pair's variant of the call's path (NtaskCallPath): its before,
 *		its plan (NtaskExecPlanCount with its rc and count), its after.
 *		values and nulls are of the pair's parameter list (every variant's;
 *		a variant reads the first plan.nargs), nulls may be NULL.  Returns
 *		the plan's row count, SPI_tuptable holding its result.
 */
int
NtaskExecPair(NtaskPair *pair, Datum *values, char *nulls)
{
	return NtaskExecPairCount(pair, values, nulls, 0);
}

/* NtaskExecPairCount: NtaskExecPair that stops after count rows (0: all) */
int
NtaskExecPairCount(NtaskPair *pair, Datum *values, char *nulls,
				   long count)
{
	NtaskVariant *v = &pair->v[NtaskCallPath()];
	char		own[NTASK_PLAN_MAX_ARGS];
	char	   *n = nulls;
	SPITupleTable *tt;
	int			rows;

	/* the direct path: the plain variant on the group's shard relations */
	if (direct_call != NULL)
	{
		DirectGroup *g = direct_call;
		const NtaskPlan *key = &pair->v[NTASK_PATH_PLAIN].plan;
		int			i;

		rows = NtaskExecPlanCount(direct_plan(g, key), values, nulls,
								  pair->v[NTASK_PATH_PLAIN].rc, count);
		tt = SPI_tuptable;
		/* whether it writes, known once its plan is (g->stmts may have moved) */
		for (i = 0; i < g->nstmts; i++)
			if (g->stmts[i].key == key)
			{
				if (g->stmts[i].writes < 0)
					g->stmts[i].writes = NtaskPlanWrites(g->stmts[i].plan.plan, false) ? 1 : 0;
				if (g->stmts[i].writes > 0)
					direct_wrote = true;
			}
		SPI_tuptable = tt;
		return rows;
	}
	/* a claim's shard passed by after direct writes: nothing there */
	if (direct_skip)
	{
		SPI_tuptable = NULL;
		SPI_processed = 0;
		return 0;
	}
	if (v->plan.sql == NULL && v->before == NULL)
		v = &pair->v[NTASK_PATH_PLAIN];
	if (v->before != NULL)
	{
		/* it may fill a parameter: it needs a nulls array of its own */
		if (n == NULL)
		{
			memset(own, ' ', sizeof(own));
			n = own;
		}
		if (!v->before(values, n))
			return 0;
	}
	if (v->plan.sql == NULL)
		return 0;				/* a variant of a before step only */
	rows = NtaskExecPlanCount(&v->plan, values, n, v->rc, count);
	if (v->after != NULL)
	{
		tt = SPI_tuptable;
		v->after(tt, rows, values, n);
		SPI_tuptable = tt;
		SPI_processed = rows;
	}
	return rows;
}

/* --- seam: srest --- */

/*
 * NtaskPairRuns
 *		Whether NtaskExecPair runs a statement for pair on the call's path:
 *		the variant it would take (the plain one where the path's slot is
 *		not written) has a plan.  False for NTASK_ROUTED_NONE on the routed
 *		path, whose batch then goes item by item (dispatch.c).
 */
bool
NtaskPairRuns(NtaskPair *pair)
{
	NtaskVariant *v = &pair->v[NtaskCallPath()];

	if (v->plan.sql == NULL && v->before == NULL)
		v = &pair->v[NTASK_PATH_PLAIN];
	return v->plan.sql != NULL;
}

/* --- the coordinator's delegation (coord.c) --- */

/* whether this node is a Citus coordinator of a distributed install */
static int	delegate_layout = -1;

/*
 * NtaskDelegateWhy
 *		For a plain call on the coordinator (coord.c, docs/scaling.md "The
 *		plain API through the coordinator, delegated"): NULL when it may run
 *		as one delegated call of its _on form, else why not.  The checks of
 *		a direct call's start (direct_call_why, direct_whole_statement) but
 *		ntask.citus_direct, which the node of the shard reads: not inside a
 *		shard-addressed call (the _on form on the node it reached must not
 *		delegate again), ntask.citus_delegate on, a Citus coordinator, not
 *		in a transaction block, READ COMMITTED, the whole statement.
 *		*quiet: not worth a log line (a plain install, a worker node, inside
 *		an _on form).  In SPI.
 */
const char *
NtaskDelegateWhy(FunctionCallInfo fcinfo, bool *quiet)
{
	*quiet = true;
	if (shard_scope >= 0)
		return "a shard-addressed call";
	if (NtaskShardCount() == 0)
		return "a plain install";
	if (delegate_layout < 0)
	{
		bool		distributed;
		bool		coordinator;

		NtaskCitusLayout(&distributed, &coordinator);
		delegate_layout = distributed && coordinator ? 1 : 0;
	}
	if (delegate_layout == 0)
		return "not a Citus coordinator";
	*quiet = false;
	if (!ntask_citus_delegate)
		return "ntask.citus_delegate is off";
	if (IsTransactionBlock())
		return "in a transaction block";
	if (IsolationUsesXactSnapshot())
		return "not READ COMMITTED";
	if (!direct_whole_statement(fcinfo))
		return "not the whole statement";
	return NULL;
}
