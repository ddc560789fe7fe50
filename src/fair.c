/*-------------------------------------------------------------------------
 *
 * fair.c
 *	  The rotation cursor of fair queues (fairness => 'partition', issue
 *	  13): per database and queue, the partition key that had the latest
 *	  turn.
 *
 * A fair claim serves the partition keys that have due work round robin in
 * key order (C collation), starting after the cursor and wrapping around
 * (claim.c, claim_fair_pick_plan).  The cursor lives in shared memory, not
 * in a table: it is written by every fair claim, and a row would make
 * concurrent claims wait for each other's row lock, or (skipping it) go
 * on from a stale position.  A shared cursor moves at pick time, before
 * the claim commits, so the next claim, concurrent or not, starts after
 * the key just served.  What it costs: an LWLock held for a memcpy of at
 * most NTASK_MAX_KEY_LEN bytes, twice per fair claim.
 *
 * What is not kept: the cursor of a queue is lost at a server restart and
 * when more than FAIR_SLOTS queues are fair (the least recently used slot
 * is taken over); such a queue starts again at its first key.  A claim that
 * rolls back leaves the cursor past the key it picked: that key waits for
 * its next turn.  Both only change who goes next once, never the round
 * robin itself.
 *
 * IDENTIFICATION
 *	  src/fair.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"

#define FAIR_SLOTS		64		/* fair queues with a cursor at a time */
#define FAIR_QUEUE_LEN	64		/* queue names: 63 bytes + NUL */

typedef struct FairSlot
{
	uint64		used;			/* last use (FairShared.clock); 0: free */
	Oid			dboid;			/* a queue name belongs to one database */
	int16		shard;			/* a distributed install: one cursor per shard */
	int			keylen;
	char		queue[FAIR_QUEUE_LEN];
	char		key[NTASK_MAX_KEY_LEN + 1];
} FairSlot;

typedef struct FairShared
{
	LWLock	   *lock;
	uint64		clock;
	FairSlot	slots[FAIR_SLOTS];
} FairShared;

static FairShared *fair_shared = NULL;

static FairSlot *fair_find(const char *queue, int16 shard, bool create);

/* NtaskFairShmemRequest: reserve the cursors (shmem_request time) */
void
NtaskFairShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(FairShared)));
	RequestNamedLWLockTranche("ntask_fair", 1);
}

/* NtaskFairShmemStartup: attach to (or create) the cursors */
void
NtaskFairShmemStartup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	fair_shared = ShmemInitStruct("ntask fair", sizeof(FairShared), &found);
	if (!found)
	{
		memset(fair_shared, 0, sizeof(FairShared));
		fair_shared->lock = &(GetNamedLWLockTranche("ntask_fair"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * fair_find
 *		The slot of queue, or with create the least recently used (or a
 *		free) slot taken over for it.  NULL when there is none.  The caller
 *		holds the lock (exclusive when create).
 */
static FairSlot *
fair_find(const char *queue, int16 shard, bool create)
{
	FairSlot   *lru = NULL;
	int			i;

	for (i = 0; i < FAIR_SLOTS; i++)
	{
		FairSlot   *s = &fair_shared->slots[i];

		if (s->used != 0 && s->dboid == MyDatabaseId && s->shard == shard &&
			strcmp(s->queue, queue) == 0)
			return s;
		if (lru == NULL || s->used < lru->used)
			lru = s;
	}
	if (!create)
		return NULL;
	strlcpy(lru->queue, queue, FAIR_QUEUE_LEN);
	lru->dboid = MyDatabaseId;
	lru->shard = shard;
	lru->keylen = 0;
	lru->key[0] = '\0';
	return lru;
}

/*
 * NtaskFairCursor
 *		The key of queue's latest turn as a palloc'd text, or '' when the
 *		queue has none (no turn since the server started): a claim then
 *		starts at the first key after '', and serves the keyless partition
 *		'' last in the round.  Without shared memory (the library loaded
 *		without shared_preload_libraries) always ''.
 */
text *
NtaskFairCursor(const char *queue)
{
	return NtaskFairCursorShard(queue, 0);
}

/*
 * NtaskFairCursorShard
 *		The cursor of queue within one shard of a distributed install
 *		(docs/scaling.md "Fairness, limits, ordering and sagas across
 *		shards"): the keys of a shard go round among themselves, since a
 *		claim walks one shard's keys; one cursor for the whole queue would
 *		jump to other shards' keys between two turns of a shard and starve
 *		the keys of a shard that sort after them.  Shard 0 is the plain
 *		install's one cursor.
 */
text *
NtaskFairCursorShard(const char *queue, int16 shard)
{
	FairSlot   *s;
	text	   *t = NULL;

	if (fair_shared == NULL)
		return cstring_to_text("");
	LWLockAcquire(fair_shared->lock, LW_SHARED);
	s = fair_find(queue, shard, false);
	if (s != NULL)
		t = cstring_to_text_with_len(s->key, s->keylen);
	LWLockRelease(fair_shared->lock);
	return t ? t : cstring_to_text("");
}

/*
 * NtaskFairAdvance
 *		Set queue's cursor to key (the last key a claim just picked from).
 *		Keys are at most NTASK_MAX_KEY_LEN bytes (enqueue checks).
 */
void
NtaskFairAdvance(const char *queue, text *key)
{
	NtaskFairAdvanceShard(queue, 0, key);
}

/* NtaskFairAdvanceShard: NtaskFairAdvance within one shard */
void
NtaskFairAdvanceShard(const char *queue, int16 shard, text *key)
{
	FairSlot   *s;
	int			len = Min(VARSIZE_ANY_EXHDR(key), NTASK_MAX_KEY_LEN);

	if (fair_shared == NULL)
		return;
	LWLockAcquire(fair_shared->lock, LW_EXCLUSIVE);
	s = fair_find(queue, shard, true);
	memcpy(s->key, VARDATA_ANY(key), len);
	s->key[len] = '\0';
	s->keylen = len;
	s->used = ++fair_shared->clock;
	LWLockRelease(fair_shared->lock);
}
