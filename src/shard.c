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

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

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

/* a relcache invalidation: of ntask.task, or of every relation (InvalidOid) */
static void
shard_placement_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == shard_task_relid)
		shard_placements_stale = true;
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
 * NtaskCallPath
 *		The path of the call's statements: routed by Citus on a distributed
 *		install (a shard map: also regress "distribute"'s plain install
 *		with one, which runs the routed statements as they are), else
 *		plain.
 */
NtaskPath
NtaskCallPath(void)
{
	return NtaskShardCount() > 0 ? NTASK_PATH_ROUTED : NTASK_PATH_PLAIN;
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
