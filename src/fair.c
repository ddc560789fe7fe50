/*-------------------------------------------------------------------------
 *
 * fair.c
 *	  The rotation cursor of fair queues (fairness => 'partition'):
 *	  per database and queue, the partition key that had the latest
 *	  turn.
 *
 * A fair claim serves the partition keys that have due work round robin in
 * key order (C collation), starting after the cursor and wrapping around
 * (claim.c, claim_fair_pick_pair).  The cursor lives in shared memory, not
 * in a table: it is written by every fair claim, and a row would make
 * concurrent claims wait for each other's row lock, or (skipping it) go
 * on from a stale position.  A shared cursor moves at pick time, before
 * the claim commits, so the next claim, concurrent or not, starts after
 * the key just served.  What it costs: an LWLock held for a memcpy of at
 * most NTASK_MAX_KEY_LEN bytes, twice per fair claim.
 *
 * What is not kept: the cursors are lost at a server restart (every
 * queue starts again at its first key).  The table holds
 * ntask.fair_cursor_slots cursors; a cursor unused for FAIR_FORGET_USECS
 * may give its slot to another queue, a busy one is never taken over
 * (taking over the least recently used made every claim miss once more
 * queues were fair than there were slots, and start at the first
 * key).  A queue that finds no slot of its own goes on from the
 * cursor its session last set for it (a backend-local table), else from
 * the shared spill cursor its name hashes to: a small direct-mapped table
 * that every fair claim writes, so it holds the latest key of one of the
 * queues with that hash, and moves on at each of their claims.  Either
 * way consecutive misses do not all start at the same key.  A claim that
 * rolls back leaves the cursor past the key it picked: that key waits for
 * its next turn.  None of this changes more than who goes next, never the
 * round robin itself.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/fair.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fair.h"
#include "limit.h"
#include "ntask_base.h"
#include "settings.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#define FAIR_QUEUE_LEN	NTASK_QUEUE_BUF
#define FAIR_FORGET_USECS	(60 * USECS_PER_SEC)
#define FAIR_LOCAL_MAX	4096	/* a session's own cursors, at most */

/* a cursor's identity; zeroed before it is filled in (the hash is of all) */
typedef struct FairKey
{
	Oid			dboid;			/* a queue name belongs to one database */
	int16		shard;			/* a distributed install: one cursor per shard */
	char		queue[FAIR_QUEUE_LEN];
} FairKey;

typedef struct FairSlot
{
	FairKey		id;
	TimestampTz used_at;
	int			keylen;
	char		key[NTASK_MAX_KEY_LEN + 1];
} FairSlot;

typedef struct FairShared
{
	LWLock	   *lock;
	TimestampTz evict_after;	/* no cursor is idle before (lower bound) */
	TimestampTz logged_at;
	/* the spill cursors: fair_cursor_slots FairSlots, by hash of the id */
	FairSlot	spill[FLEXIBLE_ARRAY_MEMBER];
} FairShared;

static FairShared *fair_shared = NULL;
static HTAB *fair_hash = NULL;
static HTAB *fair_local = NULL;

static Size
fair_shared_size(void)
{
	return add_size(offsetof(FairShared, spill),
					mul_size(ntask_fair_cursor_slots, sizeof(FairSlot)));
}

/* NtaskFairShmemRequest: reserve the cursors (shmem_request time) */
void
NtaskFairShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(fair_shared_size()));
	RequestAddinShmemSpace(hash_estimate_size(ntask_fair_cursor_slots, sizeof(FairSlot)));
	RequestNamedLWLockTranche("ntask_fair", 1);
}

/* NtaskFairShmemStartup: attach to (or create) the cursors */
void
NtaskFairShmemStartup(void)
{
	bool		found;
	HASHCTL		info;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	fair_shared = ShmemInitStruct("ntask fair", fair_shared_size(), &found);
	if (!found)
	{
		memset(fair_shared, 0, fair_shared_size());
		fair_shared->lock = &(GetNamedLWLockTranche("ntask_fair"))->lock;
	}
	info.keysize = sizeof(FairKey);
	info.entrysize = sizeof(FairSlot);
	fair_hash = ShmemInitHash("ntask fair cursors",
							  ntask_fair_cursor_slots, ntask_fair_cursor_slots,
							  &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/* fair_id: the zero-padded identity of (this database, queue, shard) */
static void
fair_id(FairKey *id, const char *queue, int16 shard)
{
	memset(id, 0, sizeof(*id));
	id->dboid = MyDatabaseId;
	id->shard = shard;
	strlcpy(id->queue, queue, FAIR_QUEUE_LEN);
}

/* fair_spill: the spill cursor of id */
static FairSlot *
fair_spill(const FairKey *id)
{
	return &fair_shared->spill[get_hash_value(fair_hash, id) % ntask_fair_cursor_slots];
}

/* fair_idle_at: when a cursor may give its slot to another queue */
static TimestampTz
fair_idle_at(void *entry)
{
	return ((FairSlot *) entry)->used_at + FAIR_FORGET_USECS;
}

/* fair_set: s's cursor is key */
static void
fair_set(FairSlot *s, const char *key, int len)
{
	memcpy(s->key, key, len);
	s->key[len] = '\0';
	s->keylen = len;
}

/*
 * fair_local_entry
 *		The session's own cursor of id (backend-local memory), created
 *		empty with create.  NULL when there is none.
 */
static FairSlot *
fair_local_entry(const FairKey *id, bool create)
{
	FairSlot   *s;
	bool		found;

	if (fair_local == NULL || (create && hash_get_num_entries(fair_local) >= FAIR_LOCAL_MAX))
	{
		HASHCTL		info;

		if (!create)
			return NULL;
		if (fair_local != NULL)
			hash_destroy(fair_local);
		info.keysize = sizeof(FairKey);
		info.entrysize = sizeof(FairSlot);
		info.hcxt = TopMemoryContext;
		fair_local = hash_create("ntask fair cursors of the session", 64, &info,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	s = (FairSlot *) hash_search(fair_local, id, create ? HASH_ENTER : HASH_FIND, &found);
	if (s != NULL && !found)
		fair_set(s, "", 0);
	return s;
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
	FairKey		id;
	FairSlot   *s;
	text	   *t = NULL;

	if (fair_shared == NULL)
		return cstring_to_text("");
	fair_id(&id, queue, shard);
	LWLockAcquire(fair_shared->lock, LW_SHARED);
	s = (FairSlot *) hash_search(fair_hash, &id, HASH_FIND, NULL);
	if (s == NULL)
		s = fair_local_entry(&id, false);
	if (s == NULL)
		s = fair_spill(&id);
	t = cstring_to_text_with_len(s->key, s->keylen);
	LWLockRelease(fair_shared->lock);
	return t;
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

/*
 * NtaskFairAdvanceShard
 *		NtaskFairAdvance within one shard.  Sets the queue's cursor in the
 *		shared table (taking a free slot, or one idle for a minute, when it
 *		has none), its spill cursor, and the session's own.
 */
void
NtaskFairAdvanceShard(const char *queue, int16 shard, text *key)
{
	FairKey		id;
	FairSlot   *s;
	int			len = Min(VARSIZE_ANY_EXHDR(key), NTASK_MAX_KEY_LEN);
	TimestampTz now;
	bool		found;
	bool		log_full = false;

	if (fair_shared == NULL)
		return;
	now = GetCurrentTimestamp();
	fair_id(&id, queue, shard);
	fair_set(fair_local_entry(&id, true), VARDATA_ANY(key), len);
	LWLockAcquire(fair_shared->lock, LW_EXCLUSIVE);
	s = (FairSlot *) NtaskShmemEnter(fair_hash, &id, ntask_fair_cursor_slots, now,
									 &fair_shared->evict_after, fair_idle_at,
									 NULL, &found);
	if (s != NULL)
	{
		fair_set(s, VARDATA_ANY(key), len);
		s->used_at = now;
		fair_shared->evict_after = Min(fair_shared->evict_after, fair_idle_at(s));
	}
	else
		log_full = NtaskShmemFullLog(&fair_shared->logged_at, now);
	fair_set(fair_spill(&id), VARDATA_ANY(key), len);
	LWLockRelease(fair_shared->lock);
	if (log_full)
		ereport(LOG,
				(errmsg("ntask: the fair-cursor table is full (%d cursors used within a minute): queue \"%s\" goes on from its session's or a shared hashed cursor",
						ntask_fair_cursor_slots, queue),
				 errhint("Raise ntask.fair_cursor_slots (needs a restart).")));
}
