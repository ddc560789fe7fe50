/*-------------------------------------------------------------------------
 *
 * limit.c
 *	  Token buckets of rate-limited queues and partition keys (queue
 *	  policy rate_limit and partition_rate_limit, issue 13).
 *
 * A bucket holds at most n tokens and gains n per interval, continuously;
 * a claim takes one token per task it hands out, and a task for which no
 * token is left is not handed out (it stays due, spends no attempt and no
 * budget).  A task of a partition key with its own bucket needs a token of
 * both its key's bucket and the queue's, taken together or not at all.
 *
 * The buckets live in shared memory, one table of LIMIT_SLOTS buckets per
 * cluster under one LWLock (taken exclusively for the few microseconds of
 * a take), so concurrent claims never hand out more tokens than a bucket
 * has: the take is atomic, and a claim never waits for another claim's
 * transaction.  A token taken by a claim whose transaction then rolls
 * back is lost, so the limit errs on the slow side.  Not durable: after a
 * restart, or when more buckets are in use than the table holds (the
 * least recently used is forgotten), a bucket starts again full, so at
 * most one extra burst of n can go out.  docs/design.md "Flow control".
 *
 * The same table keeps, per queue with a retry share, how many first
 * attempts and retries it handed out lately (NtaskShareTake).
 *
 * IDENTIFICATION
 *	  src/limit.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#define LIMIT_SLOTS		1024	/* buckets in use at a time */
#define LIMIT_QUEUE_LEN	64		/* queue names: 63 bytes + NUL */

typedef struct LimitSlot
{
	uint64		used;			/* last use (LimitShared.clock); 0: free */
	uint32		hash;			/* of (database, queue, key) */
	Oid			dboid;
	bool		has_key;		/* false: the queue's own bucket */
	int			keylen;
	char		queue[LIMIT_QUEUE_LEN];
	char		key[NTASK_MAX_KEY_LEN];
	double		tokens;
	TimestampTz refilled_at;
} LimitSlot;

/*
 * The recent hand-outs of a queue with a retry share: first attempts and
 * retries, halved whenever they pass SHARE_WINDOW together, so the share
 * follows the last few hundred hand-outs.
 */
#define SHARE_SLOTS		64
#define SHARE_WINDOW	200.0

typedef struct ShareSlot
{
	uint64		used;
	Oid			dboid;
	char		queue[LIMIT_QUEUE_LEN];
	double		fresh;
	double		retry;
} ShareSlot;

typedef struct LimitShared
{
	LWLock	   *lock;
	uint64		clock;
	LimitSlot	slots[LIMIT_SLOTS];
	ShareSlot	shares[SHARE_SLOTS];
} LimitShared;

static LimitShared *limit_shared = NULL;

/* NtaskLimitShmemRequest: reserve the buckets (shmem_request time) */
void
NtaskLimitShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(LimitShared)));
	RequestNamedLWLockTranche("ntask_limit", 1);
}

/* NtaskLimitShmemStartup: attach to (or create) the buckets */
void
NtaskLimitShmemStartup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	limit_shared = ShmemInitStruct("ntask limit", sizeof(LimitShared), &found);
	if (!found)
	{
		memset(limit_shared, 0, sizeof(LimitShared));
		limit_shared->lock = &(GetNamedLWLockTranche("ntask_limit"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * limit_find
 *		The bucket of (this database, queue, key), created full (n tokens)
 *		in the least recently used slot if it has none.  Caller holds the
 *		lock exclusively.
 */
static LimitSlot *
limit_find(const char *queue, const char *key, int keylen, int n,
		   TimestampTz now)
{
	uint32		h = hash_bytes((const unsigned char *) queue, strlen(queue));
	LimitSlot  *lru = NULL;
	int			i;

	h = hash_combine(h, MyDatabaseId);
	if (key != NULL)
		h = hash_combine(h, hash_bytes((const unsigned char *) key, keylen));
	for (i = 0; i < LIMIT_SLOTS; i++)
	{
		LimitSlot  *s = &limit_shared->slots[i];

		if (s->used != 0 && s->hash == h && s->dboid == MyDatabaseId &&
			s->has_key == (key != NULL) && strcmp(s->queue, queue) == 0 &&
			(key == NULL || (s->keylen == keylen && memcmp(s->key, key, keylen) == 0)))
			return s;
		if (lru == NULL || s->used < lru->used)
			lru = s;
	}
	lru->hash = h;
	lru->dboid = MyDatabaseId;
	lru->has_key = key != NULL;
	strlcpy(lru->queue, queue, LIMIT_QUEUE_LEN);
	lru->keylen = key ? Min(keylen, NTASK_MAX_KEY_LEN) : 0;
	if (key)
		memcpy(lru->key, key, lru->keylen);
	lru->tokens = n;
	lru->refilled_at = now;
	return lru;
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
	s->used = ++limit_shared->clock;
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
 *		*next is when the missing token will be there.
 */
int
NtaskLimitTake(const char *queue, int qn, int64 qper_usecs,
			   const char *key, int keylen, int kn, int64 kper_usecs,
			   TimestampTz now, TimestampTz *next)
{
	LimitSlot  *qs = NULL;
	LimitSlot  *ks = NULL;
	int			empty = 0;

	Assert(limit_shared != NULL);
	*next = 0;
	LWLockAcquire(limit_shared->lock, LW_EXCLUSIVE);
	if (qn > 0)
	{
		qs = limit_find(queue, NULL, 0, qn, now);
		limit_refill(qs, qn, qper_usecs, now);
		if (qs->tokens < 1.0)
		{
			empty = NTASK_LIMIT_QUEUE;
			*next = now + (TimestampTz) ((1.0 - qs->tokens) * qper_usecs / qn) + 1;
		}
	}
	if (key != NULL && kn > 0)
	{
		ks = limit_find(queue, key, keylen, kn, now);
		limit_refill(ks, kn, kper_usecs, now);
		if (ks->tokens < 1.0)
		{
			TimestampTz at = now + (TimestampTz) ((1.0 - ks->tokens) * kper_usecs / kn) + 1;

			if (empty == 0)
				empty = NTASK_LIMIT_KEY;
			*next = Max(*next, at);
		}
	}
	if (empty == 0)
	{
		if (qs)
			qs->tokens -= 1.0;
		if (ks)
			ks->tokens -= 1.0;
	}
	LWLockRelease(limit_shared->lock);
	return empty;
}

/*
 * NtaskShareTake
 *		May a task go, in a queue whose retries get at most share of the
 *		hand-outs while first attempts are due?  A first attempt always may;
 *		a retry may when, counting it, retries have had at most share of
 *		the queue's recent hand-outs.  Counts what it allows.  The caller
 *		stops asking once no first attempt is due (then retries take all,
 *		uncounted).
 */
bool
NtaskShareTake(const char *queue, float4 share, bool retry)
{
	ShareSlot  *s = NULL;
	ShareSlot  *lru = NULL;
	bool		ok;
	int			i;

	Assert(limit_shared != NULL);
	LWLockAcquire(limit_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < SHARE_SLOTS; i++)
	{
		ShareSlot  *c = &limit_shared->shares[i];

		if (c->used != 0 && c->dboid == MyDatabaseId && strcmp(c->queue, queue) == 0)
		{
			s = c;
			break;
		}
		if (lru == NULL || c->used < lru->used)
			lru = c;
	}
	if (s == NULL)
	{
		s = lru;
		s->dboid = MyDatabaseId;
		strlcpy(s->queue, queue, LIMIT_QUEUE_LEN);
		s->fresh = s->retry = 0;
	}
	s->used = ++limit_shared->clock;
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
	int			i;

	if (limit_shared == NULL || PG_ARGISNULL(0))
		PG_RETURN_NULL();
	queue = text_to_cstring(PG_GETARG_TEXT_PP(0));
	LWLockAcquire(limit_shared->lock, LW_SHARED);
	for (i = 0; i < LIMIT_SLOTS; i++)
	{
		LimitSlot  *s = &limit_shared->slots[i];
		int			n;
		int64		per;
		double		tokens;

		if (s->used == 0 || s->dboid != MyDatabaseId || strcmp(s->queue, queue) != 0)
			continue;
		if (s->has_key && (key == NULL || s->keylen != (int) VARSIZE_ANY_EXHDR(key) ||
						   memcmp(s->key, VARDATA_ANY(key), s->keylen) != 0))
			continue;
		n = PG_GETARG_INT32(s->has_key ? 4 : 2);
		per = PG_GETARG_INT64(s->has_key ? 5 : 3);
		if (n <= 0 || per <= 0)
			continue;
		tokens = Min(s->tokens + (double) (now - s->refilled_at) * n / (double) per, n);
		if (tokens < 1.0)
			at = Max(at, now + (TimestampTz) ((1.0 - tokens) * per / n) + 1);
	}
	LWLockRelease(limit_shared->lock);
	PG_RETURN_TIMESTAMPTZ(at);
}
