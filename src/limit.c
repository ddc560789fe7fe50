/*-------------------------------------------------------------------------
 *
 * limit.c
 *	  Token buckets of rate-limited queues and partition keys (queue
 *	  policy rate_limit and partition_rate_limit).
 *
 * A bucket holds at most n tokens and gains n per interval, continuously;
 * a claim takes one token per task it hands out, and a task for which no
 * token is left is not handed out (it stays due, spends no attempt and no
 * budget).  A task of a partition key with its own bucket needs a token of
 * both its key's bucket and the queue's, taken together or not at all.
 *
 * The buckets live in shared memory, a hash table of
 * ntask.rate_limit_slots buckets per cluster under one LWLock (taken
 * exclusively for the few microseconds of a take), so concurrent claims
 * never hand out more tokens than a bucket has: the take is atomic, and a
 * claim never waits for another claim's transaction.  A token taken by a
 * claim whose transaction then rolls back is lost, so the limit errs on
 * the slow side.  Not durable: after a restart a bucket starts again full,
 * so at most one extra burst of n can go out.
 *
 * A bucket is forgotten only when, refilled to now, it is full: a new
 * bucket starts full, so forgetting it loses nothing.  When every slot
 * holds a bucket that is not full, a task that needs a new bucket is held
 * back (as if its bucket were empty) until one refills, and a LOG (at
 * most one a minute) says the table is full; a bucket is never reset.
 * docs/design.md "Flow control".
 *
 * A second table of as many slots keeps, per queue with a retry share,
 * how many first attempts and retries it handed out lately
 * (NtaskShareTake).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/limit.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "limit.h"
#include "ntask_base.h"
#include "settings.h"

#include <math.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#define LIMIT_QUEUE_LEN	NTASK_QUEUE_BUF

/* a bucket's identity; zeroed before it is filled in (the hash is of all) */
typedef struct LimitKey
{
	Oid			dboid;
	int32		keylen;			/* -1: the queue's own bucket */
	char		queue[LIMIT_QUEUE_LEN];
	char		key[NTASK_MAX_KEY_LEN];
} LimitKey;

typedef struct LimitSlot
{
	LimitKey	id;
	int			n;				/* the limit of the bucket's latest take */
	int64		per_usecs;
	double		tokens;
	TimestampTz refilled_at;
} LimitSlot;

/*
 * The recent hand-outs of a queue with a retry share: first attempts and
 * retries, halved whenever they pass SHARE_WINDOW together, so the share
 * follows the last few hundred hand-outs.  Counters not used for
 * SHARE_FORGET_USECS (no first attempt was due in the queue all that
 * while) may give their slot to another queue.
 */
#define SHARE_WINDOW	200.0
#define SHARE_FORGET_USECS	(60 * USECS_PER_SEC)

typedef struct ShareKey
{
	Oid			dboid;
	char		queue[LIMIT_QUEUE_LEN];
} ShareKey;

typedef struct ShareSlot
{
	ShareKey	id;
	TimestampTz used_at;
	double		fresh;
	double		retry;
} ShareSlot;

typedef struct LimitShared
{
	LWLock	   *lock;
	TimestampTz evict_after;	/* no bucket is full before (lower bound) */
	TimestampTz share_evict_after;
	TimestampTz logged_at;		/* the latest "table is full" LOG */
	TimestampTz share_logged_at;
	uint64		held;			/* tasks held back for want of a slot */
} LimitShared;

static LimitShared *limit_shared = NULL;
static HTAB *limit_hash = NULL;
static HTAB *share_hash = NULL;

/* NtaskLimitShmemRequest: reserve the buckets (shmem_request time) */
void
NtaskLimitShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(LimitShared)));
	RequestAddinShmemSpace(hash_estimate_size(ntask_rate_limit_slots, sizeof(LimitSlot)));
	RequestAddinShmemSpace(hash_estimate_size(ntask_rate_limit_slots, sizeof(ShareSlot)));
	RequestNamedLWLockTranche("ntask_limit", 1);
}

/* NtaskLimitShmemStartup: attach to (or create) the buckets */
void
NtaskLimitShmemStartup(void)
{
	bool		found;
	HASHCTL		info;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	limit_shared = ShmemInitStruct("ntask limit", sizeof(LimitShared), &found);
	if (!found)
	{
		memset(limit_shared, 0, sizeof(LimitShared));
		limit_shared->lock = &(GetNamedLWLockTranche("ntask_limit"))->lock;
	}
	info.keysize = sizeof(LimitKey);
	info.entrysize = sizeof(LimitSlot);
	limit_hash = ShmemInitHash("ntask limit buckets",
							   ntask_rate_limit_slots, ntask_rate_limit_slots,
							   &info, HASH_ELEM | HASH_BLOBS);
	info.keysize = sizeof(ShareKey);
	info.entrysize = sizeof(ShareSlot);
	share_hash = ShmemInitHash("ntask limit shares",
							   ntask_rate_limit_slots, ntask_rate_limit_slots,
							   &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * NtaskShmemEvict
 *		Remove from a full shared hash table (its lock held exclusively)
 *		every entry but keep whose evictable_at is not after now.  Returns
 *		the earliest evictable_at among the entries left (DT_NOEND when
 *		none): until then a new scan cannot remove anything, so a caller
 *		that keeps it does not scan the table on every miss.
 */
TimestampTz
NtaskShmemEvict(HTAB *htab, TimestampTz now,
				TimestampTz (*evictable_at) (void *entry), void *keep)
{
	HASH_SEQ_STATUS seq;
	void	   *e;
	TimestampTz next = DT_NOEND;

	hash_seq_init(&seq, htab);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		TimestampTz at = evictable_at(e);

		if (e != keep && at <= now)
			hash_search(htab, e, HASH_REMOVE, NULL);
		else if (e != keep)
			next = Min(next, at);
	}
	return next;
}

/*
 * NtaskShmemEnter
 *		The entry of id in htab, a shared table of at most slots entries
 *		(its lock held exclusively); *found says whether it was there.  A
 *		new entry is made when there is room, after removing the entries
 *		evictable by now (NtaskShmemEvict, but for keep) if the table is
 *		full and *evict_after has come; NULL when there is still none.
 */
void *
NtaskShmemEnter(HTAB *htab, const void *id, int slots, TimestampTz now,
				TimestampTz *evict_after,
				TimestampTz (*evictable_at) (void *entry), void *keep,
				bool *found)
{
	void	   *e = hash_search(htab, id, HASH_FIND, found);

	if (e != NULL)
		return e;
	if (hash_get_num_entries(htab) >= slots)
	{
		if (now < *evict_after)
			return NULL;
		*evict_after = NtaskShmemEvict(htab, now, evictable_at, keep);
		if (hash_get_num_entries(htab) >= slots)
			return NULL;
	}
	return hash_search(htab, id, HASH_ENTER_NULL, found);
}

/*
 * NtaskShmemFullLog
 *		True when a "table is full" LOG is due (at most one a minute per
 *		table); records now as its time.  Caller holds the table's lock
 *		exclusively, and logs after releasing it.
 */
bool
NtaskShmemFullLog(TimestampTz *logged_at, TimestampTz now)
{
	if (*logged_at != 0 && now - *logged_at < 60 * USECS_PER_SEC)
		return false;
	*logged_at = now;
	return true;
}

/* limit_full_at: when the bucket, refilled, holds n tokens again */
static TimestampTz
limit_full_at(void *entry)
{
	LimitSlot  *s = (LimitSlot *) entry;

	if (s->n <= 0 || s->tokens >= s->n)
		return s->refilled_at;
	return s->refilled_at +
		(TimestampTz) ceil((s->n - s->tokens) * (double) s->per_usecs / s->n);
}

/*
 * limit_find
 *		The bucket of (this database, queue, key), created full (n tokens)
 *		if it has none.  NULL when the table is full and no bucket in it is
 *		full (forgetting one would hand out its tokens again); keep is not
 *		forgotten.  Caller holds the lock exclusively.
 */
static LimitSlot *
limit_find(const char *queue, const char *key, int keylen, int n,
		   int64 per_usecs, TimestampTz now, LimitSlot *keep)
{
	LimitKey	id;
	LimitSlot  *s;
	bool		found;

	memset(&id, 0, sizeof(id));
	id.dboid = MyDatabaseId;
	strlcpy(id.queue, queue, LIMIT_QUEUE_LEN);
	id.keylen = key ? Min(keylen, NTASK_MAX_KEY_LEN) : -1;
	if (key)
		memcpy(id.key, key, id.keylen);
	s = (LimitSlot *) NtaskShmemEnter(limit_hash, &id, ntask_rate_limit_slots, now,
									  &limit_shared->evict_after, limit_full_at,
									  keep, &found);
	if (s == NULL || found)
		return s;
	s->n = n;
	s->per_usecs = per_usecs;
	s->tokens = n;
	s->refilled_at = now;
	return s;
}

/* limit_refill: add what the time since the last refill earned */
static void
limit_refill(LimitSlot *s, int n, int64 per_usecs, TimestampTz now)
{
	if (now > s->refilled_at)
	{
		s->tokens += (double) (now - s->refilled_at) * n / (double) per_usecs;
		s->refilled_at = now;
	}
	if (s->tokens > n)
		s->tokens = n;
	s->n = n;
	s->per_usecs = per_usecs;
	limit_shared->evict_after = Min(limit_shared->evict_after, limit_full_at(s));
}

/* limit_taken: a token went; the bucket is full again later */
static void
limit_taken(LimitSlot *s)
{
	s->tokens -= 1.0;
	limit_shared->evict_after = Min(limit_shared->evict_after, limit_full_at(s));
}

/*
 * NtaskLimitAvailable
 *		True when shared memory holds the buckets (ntask is in
 *		shared_preload_libraries).
 */
bool
NtaskLimitAvailable(void)
{
	return limit_shared != NULL;
}

/*
 * NtaskLimitTake
 *		Take one token from the queue's bucket (qn per qper_usecs; qn 0: the
 *		queue has no limit) and, when key is not NULL, one from the key's
 *		bucket (kn per kper_usecs), both or neither.  Returns 0 when taken,
 *		else NTASK_LIMIT_QUEUE when the queue's bucket is empty (whatever
 *		the key's holds) or NTASK_LIMIT_KEY when only the key's is; then
 *		*next is when the missing token will be there.  A bucket that the
 *		full table has no slot for counts as empty.
 */
int
NtaskLimitTake(const char *queue, int qn, int64 qper_usecs,
			   const char *key, int keylen, int kn, int64 kper_usecs,
			   TimestampTz now, TimestampTz *next)
{
	LimitSlot  *qs = NULL;
	LimitSlot  *ks = NULL;
	int			empty = 0;
	bool		log_full = false;
	TimestampTz slot_at = 0;

	Assert(limit_shared != NULL);
	*next = 0;
	LWLockAcquire(limit_shared->lock, LW_EXCLUSIVE);
	if (qn > 0)
	{
		qs = limit_find(queue, NULL, 0, qn, qper_usecs, now, NULL);
		if (qs == NULL)
			empty = NTASK_LIMIT_QUEUE;
		else
		{
			limit_refill(qs, qn, qper_usecs, now);
			if (qs->tokens < 1.0)
			{
				empty = NTASK_LIMIT_QUEUE;
				*next = now + (TimestampTz) ((1.0 - qs->tokens) * qper_usecs / qn) + 1;
			}
		}
	}
	if (key != NULL && kn > 0 && (qn <= 0 || qs != NULL))
	{
		ks = limit_find(queue, key, keylen, kn, kper_usecs, now, qs);
		if (ks == NULL)
		{
			if (empty == 0)
				empty = NTASK_LIMIT_KEY;
		}
		else
		{
			limit_refill(ks, kn, kper_usecs, now);
			if (ks->tokens < 1.0)
			{
				TimestampTz at = now + (TimestampTz) ((1.0 - ks->tokens) * kper_usecs / kn) + 1;

				if (empty == 0)
					empty = NTASK_LIMIT_KEY;
				*next = Max(*next, at);
			}
		}
	}
	if ((qn > 0 && qs == NULL) || (key != NULL && kn > 0 && ks == NULL))
	{
		/* no slot: held until a bucket has refilled */
		slot_at = Max(limit_shared->evict_after, now + 1);
		*next = Max(*next, slot_at);
		limit_shared->held++;
		log_full = NtaskShmemFullLog(&limit_shared->logged_at, now);
	}
	if (empty == 0)
	{
		if (qs)
			limit_taken(qs);
		if (ks)
			limit_taken(ks);
	}
	LWLockRelease(limit_shared->lock);
	if (log_full)
		ereport(LOG,
				(errmsg("ntask: the rate-limit table is full (%d buckets, none refilled): a task of queue \"%s\" is held back",
						ntask_rate_limit_slots, queue),
				 errdetail("A bucket gives its slot to another only once it has refilled; a slot is free again at %s.",
						   timestamptz_to_str(slot_at)),
				 errhint("Raise ntask.rate_limit_slots (needs a restart).")));
	return empty;
}

/* share_idle_at: when a queue's share counters may be forgotten */
static TimestampTz
share_idle_at(void *entry)
{
	return ((ShareSlot *) entry)->used_at + SHARE_FORGET_USECS;
}

/*
 * NtaskShareTake
 *		May a task go, in a queue whose retries get at most share of the
 *		hand-outs while first attempts are due?  A first attempt always may;
 *		a retry may when, counting it, retries have had at most share of
 *		the queue's recent hand-outs.  Counts what it allows.  The caller
 *		stops asking once no first attempt is due (then retries take all,
 *		uncounted).  When the table is full of counters used within the
 *		last minute, the queue's are not kept: the answer is that of a
 *		queue with no hand-outs yet (a first attempt goes, a retry waits
 *		for the first attempts, or for none to be due).
 */
bool
NtaskShareTake(const char *queue, float4 share, bool retry)
{
	ShareKey	id;
	ShareSlot  *s;
	bool		found;
	bool		ok;
	bool		log_full = false;
	TimestampTz now = GetCurrentTimestamp();

	Assert(limit_shared != NULL);
	memset(&id, 0, sizeof(id));
	id.dboid = MyDatabaseId;
	strlcpy(id.queue, queue, LIMIT_QUEUE_LEN);
	LWLockAcquire(limit_shared->lock, LW_EXCLUSIVE);
	s = (ShareSlot *) NtaskShmemEnter(share_hash, &id, ntask_rate_limit_slots, now,
									  &limit_shared->share_evict_after,
									  share_idle_at, NULL, &found);
	if (s != NULL && !found)
		s->fresh = s->retry = 0;
	if (s == NULL)
	{
		ok = !retry;
		if (retry)
			log_full = NtaskShmemFullLog(&limit_shared->share_logged_at, now);
		LWLockRelease(limit_shared->lock);
		if (log_full)
			ereport(LOG,
					(errmsg("ntask: the retry-share table is full (%d queues used within a minute): a retry of queue \"%s\" waits for the first attempts",
							ntask_rate_limit_slots, queue),
					 errhint("Raise ntask.rate_limit_slots (needs a restart).")));
		return ok;
	}
	s->used_at = now;
	limit_shared->share_evict_after = Min(limit_shared->share_evict_after,
										  share_idle_at(s));
	ok = !retry || s->retry + 1.0 <= share * (s->fresh + s->retry + 1.0) + 1e-9;
	if (ok)
	{
		if (retry)
			s->retry += 1.0;
		else
			s->fresh += 1.0;
		if (s->fresh + s->retry > SHARE_WINDOW)
		{
			s->fresh /= 2;
			s->retry /= 2;
		}
	}
	LWLockRelease(limit_shared->lock);
	return ok;
}

/*
 * ntask.limit_next(queue text, partition_key text, qn, qper, kn, kper)
 *		RETURNS timestamptz
 *		When the next token of the queue's bucket (qn per qper) and, with a
 *		key, of the key's bucket (kn per kper) is there: now when both have
 *		one (or have not been used yet, so are full), else the later of the
 *		two refills.  NULL without shared memory.  Looks only: takes nothing.
 *		For ntask_explain (an admin's view of why a due task waits).
 */
PG_FUNCTION_INFO_V1(ntask_limit_next);

Datum
ntask_limit_next(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz at = now;
	char	   *queue;
	text	   *key = PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1);
	LimitKey	id;
	int			i;

	if (limit_shared == NULL || PG_ARGISNULL(0))
		PG_RETURN_NULL();
	queue = text_to_cstring(PG_GETARG_TEXT_PP(0));
	memset(&id, 0, sizeof(id));
	id.dboid = MyDatabaseId;
	strlcpy(id.queue, queue, LIMIT_QUEUE_LEN);
	LWLockAcquire(limit_shared->lock, LW_SHARED);
	for (i = 0; i < 2; i++)
	{
		LimitSlot  *s;
		int			n;
		int64		per;
		double		tokens;

		/* the queue's bucket, then the key's */
		if (i == 1)
		{
			if (key == NULL)
				break;
			id.keylen = Min(VARSIZE_ANY_EXHDR(key), NTASK_MAX_KEY_LEN);
			memcpy(id.key, VARDATA_ANY(key), id.keylen);
		}
		else
			id.keylen = -1;
		s = (LimitSlot *) hash_search(limit_hash, &id, HASH_FIND, NULL);
		if (s == NULL)
			continue;
		n = PG_GETARG_INT32(i == 1 ? 4 : 2);
		per = PG_GETARG_INT64(i == 1 ? 5 : 3);
		if (n <= 0 || per <= 0)
			continue;
		tokens = Min(s->tokens + (double) (now - s->refilled_at) * n / (double) per, n);
		if (tokens < 1.0)
			at = Max(at, now + (TimestampTz) ((1.0 - tokens) * per / n) + 1);
	}
	LWLockRelease(limit_shared->lock);
	PG_RETURN_TIMESTAMPTZ(at);
}
