/*-------------------------------------------------------------------------
 *
 * waiter.c
 *	  The waiter slots of the waiting claim (wait.c) in shared memory, the
 *	  wake-at-commit of the transactions that make work due, and the
 *	  ntask.waiters view (docs/design.md "Waiting claims").
 *
 * Shared memory holds one slot per backend that is waiting (at most
 * MaxBackends, one waiting claim per backend), behind one LWLock: queue
 * name, max_tasks, a FIFO sequence number, a "woken" flag, the end of the
 * wait and a hint of the earliest time known work becomes due.
 *
 * A transaction that makes tasks due in queue Q (enqueue, enqueue_many,
 * replay, release) or due later (an enqueue with a future run_at, a retry,
 * a claim's lease, which a takeover may claim when it runs out) notes it in
 * a backend-local list; at commit, after the commit is visible, it wakes
 * waiters of Q: oldest first, as many as the new due tasks need by their
 * max_tasks (not every waiter: no stampede), and it lowers the hint of the
 * oldest waiter whose next wake-up is later than the new due time.  A
 * woken waiter that fills its batch, or leaves with a wake-up it may not
 * have used, passes one wake-up on to the next waiter (the baton), so a
 * wake-up is never lost when a claimer that was not waiting took the task.
 *
 * On a distributed install (Citus) the wake waits for the workers' commit:
 * a transaction that wrote on several nodes commits them with two-phase
 * commit, and Citus sends COMMIT PREPARED in its own XACT_EVENT_COMMIT
 * callback, which runs after ntask's (callbacks run newest first, and
 * ntask's is registered after Citus' at the first note).  A waiter woken
 * there looked before the workers committed, saw nothing and slept to the
 * end of its wait.  So a note made where the shard map says the install
 * is distributed moves the wake to the release of the top transaction's
 * resources (RESOURCE_RELEASE_AFTER_LOCKS of a commit), after every commit
 * callback.  A one-phase commit (one worker node) is done before either:
 * Citus commits it in XACT_EVENT_PRE_COMMIT.  A plain install wakes in
 * the commit callback.
 *
 * A waiter registers before each look, and resets its latch before it: a
 * commit that happens before the look is seen by the look's snapshot (the
 * committer's wake runs after ProcArrayEndTransaction), one after it sets
 * the latch.  No timer scan: the sleep ends at the earliest of the wait's
 * end, the due time of the queue's next not-yet-due task (one index probe
 * per priority, the claim's own access path), and the hint.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/waiter.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"
#include "shard.h"
#include "waiter.h"
#include "wake.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
/*
 * Only Port's socket is used here (nw_sleep).  libpq-be.h includes
 * gssapi.h under ENABLE_GSS, which a server built with GSSAPI defines but
 * whose headers an extension build need not have; Port holds its GSSAPI
 * state by pointer, so its layout is the same without.
 */
#undef ENABLE_GSS
#include "libpq/libpq-be.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

PG_FUNCTION_INFO_V1(ntask_waiters);

#define NW_QUEUE_LEN NTASK_QUEUE_BUF

typedef struct NwSlot
{
	bool		in_use;			/* a claim of this backend is waiting */
	bool		woken;			/* a commit woke it since its last look */
	bool		capped;			/* a cap held its work back: a freed slot wakes it */
	int			max_tasks;
	pid_t		pid;
	Oid			dboid;			/* queues are per database */
	uint64		seq;			/* registration order: oldest is woken first */
	TimestampTz since;
	TimestampTz until;			/* the end of the wait */
	TimestampTz hint;			/* work known to be due then; 0: none */
	Latch	   *latch;
	char		queue[NW_QUEUE_LEN];
} NwSlot;

typedef struct NwShared
{
	LWLock	   *lock;
	pg_atomic_uint32 nwaiting;	/* slots in use; read without the lock */
	pg_atomic_uint32 ncapped;	/* slots with capped set; read without it */
	uint64		next_seq;
	int			nslots;
	NwSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} NwShared;

static NwShared *nw_shared = NULL;
static int	nw_my_slot = -1;
static bool nw_exit_registered = false;

/* due work this transaction made, per queue: woken at commit */
typedef struct NwPending
{
	char		queue[NW_QUEUE_LEN];
	int			ndue;			/* tasks due now */
	int			nfreed;			/* leases ended: slots of a cap freed */
	TimestampTz later;			/* earliest later due time; 0: none */
} NwPending;

static NwPending *nw_pending = NULL;
static int	nw_npending = 0;
static int	nw_maxpending = 0;
static bool nw_callback_registered = false;
/* a note was made on a distributed install: wake after Citus' commit */
static bool nw_after_citus = false;
/* the commit callback left the wake to nw_release_callback */
static bool nw_wake_deferred = false;

static void nw_xact_callback(XactEvent event, void *arg);
static void nw_release_callback(ResourceReleasePhase phase, bool isCommit,
								bool isTopLevel, void *arg);
static void nw_exit(int code, Datum arg);

/* NtaskWaitShmemRequest: reserve the waiter slots (shmem_request time) */
void
NtaskWaitShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(offsetof(NwShared, slots) +
									sizeof(NwSlot) * MaxBackends));
	RequestNamedLWLockTranche("ntask_waiters", 1);
}

/* NtaskWaitShmemStartup: attach to (or create) the waiter slots */
void
NtaskWaitShmemStartup(void)
{
	bool		found;
	Size		size = offsetof(NwShared, slots) + sizeof(NwSlot) * MaxBackends;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	nw_shared = ShmemInitStruct("ntask waiters", size, &found);
	if (!found)
	{
		memset(nw_shared, 0, size);
		nw_shared->lock = &(GetNamedLWLockTranche("ntask_waiters"))->lock;
		pg_atomic_init_u32(&nw_shared->nwaiting, 0);
		pg_atomic_init_u32(&nw_shared->ncapped, 0);
		nw_shared->nslots = MaxBackends;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ---- waking ---- */

/* nw_of_queue: slot s waits for queue of this backend's database */
static inline bool
nw_of_queue(NwSlot *s, const char *queue)
{
	return s->in_use && s->dboid == MyDatabaseId && strcmp(s->queue, queue) == 0;
}

/* nw_oldest: the oldest waiting slot of queue (not woken, if unwoken) */
static NwSlot *
nw_oldest(const char *queue, bool unwoken)
{
	NwSlot	   *best = NULL;
	int			i;

	for (i = 0; i < nw_shared->nslots; i++)
	{
		NwSlot	   *s = &nw_shared->slots[i];

		if (!nw_of_queue(s, queue) || (unwoken && s->woken))
			continue;
		if (best == NULL || s->seq < best->seq)
			best = s;
	}
	return best;
}

/*
 * nw_wake_locked
 *		With the lock held exclusively: wake the oldest waiters of queue
 *		until their max_tasks cover ndue, and lower the hint of the oldest
 *		waiter that would otherwise sleep past later.  Latches are set under
 *		the lock (SetLatch never blocks).
 */
static void
nw_wake_locked(const char *queue, int ndue, TimestampTz later)
{
	NwSlot	   *s;

	while (ndue > 0 && (s = nw_oldest(queue, true)) != NULL)
	{
		s->woken = true;
		ndue -= Max(s->max_tasks, 1);
		SetLatch(s->latch);
	}
	if (later != 0)
	{
		int			i;
		NwSlot	   *best = NULL;

		for (i = 0; i < nw_shared->nslots; i++)
		{
			s = &nw_shared->slots[i];
			if (!nw_of_queue(s, queue) ||
				(s->hint != 0 && s->hint <= later) || s->until <= later)
				continue;
			if (best == NULL || s->seq < best->seq)
				best = s;
		}
		if (best != NULL)
		{
			best->hint = later;
			SetLatch(best->latch);
		}
	}
}

/*
 * NtaskWakeWaitersAtCommit
 *		Note that this transaction makes ndue tasks of queue due now, and
 *		(later != 0) one due at later; waiting claims of the queue are woken
 *		when it commits (never before: they would not see the tasks).  A
 *		no-op without shared_preload_libraries.
 */
static NwPending *
nw_pending_of(const char *queue)
{
	NwPending  *p = NULL;
	int			i;

	if (!nw_callback_registered)
	{
		RegisterXactCallback(nw_xact_callback, NULL);
		RegisterResourceReleaseCallback(nw_release_callback, NULL);
		nw_callback_registered = true;
	}
	if (NtaskShardCountKnown() > 0)
		nw_after_citus = true;
	for (i = nw_npending - 1; i >= 0; i--)
		if (strcmp(nw_pending[i].queue, queue) == 0)
		{
			p = &nw_pending[i];
			break;
		}
	if (p == NULL)
	{
		if (nw_npending == nw_maxpending)
		{
			int			n = Max(8, nw_maxpending * 2);

			nw_pending = nw_pending == NULL ?
				MemoryContextAlloc(TopMemoryContext, sizeof(NwPending) * n) :
				repalloc(nw_pending, sizeof(NwPending) * n);
			nw_maxpending = n;
		}
		p = &nw_pending[nw_npending++];
		strlcpy(p->queue, queue, NW_QUEUE_LEN);
		p->ndue = 0;
		p->nfreed = 0;
		p->later = 0;
	}
	return p;
}

void
NtaskWakeWaitersAtCommit(const char *queue, int ndue, TimestampTz later)
{
	NwPending  *p;

	if (nw_shared == NULL || (ndue <= 0 && later == 0))
		return;
	p = nw_pending_of(queue);
	p->ndue = Min(p->ndue + Max(ndue, 0), NTASK_MAX_BATCH);
	if (later != 0 && (p->later == 0 || later < p->later))
		p->later = later;
}

/*
 * NtaskWakeCappedAtCommit
 *		Note that this transaction ends nfreed leases of queue (a
 *		transition, one call or a batch, a cancel, a release): at commit it
 *		wakes as many of the oldest waiting claims of the queue that a cap
 *		held back (their slots may be free now).  Every path that ends a
 *		lease calls it, once per queue, not per task: it costs a look-up in
 *		a backend-local list, and the commit does nothing more while no
 *		waiter is held by a cap.  A lease that runs out needs no note: the
 *		capped waiter sleeps until the queue's next due time, which is then.
 */
void
NtaskWakeCappedAtCommit(const char *queue, int nfreed)
{
	NwPending  *p;

	if (nw_shared == NULL || nfreed <= 0)
		return;
	p = nw_pending_of(queue);
	p->nfreed = Min(p->nfreed + nfreed, NTASK_MAX_BATCH);
}

/*
 * nw_wake_capped_locked
 *		With the lock held exclusively: wake the nfreed oldest waiters of
 *		queue that a cap held back.
 */
static void
nw_wake_capped_locked(const char *queue, int nfreed)
{
	int			i;

	while (nfreed-- > 0)
	{
		NwSlot	   *best = NULL;

		for (i = 0; i < nw_shared->nslots; i++)
		{
			NwSlot	   *s = &nw_shared->slots[i];

			if (!nw_of_queue(s, queue) || !s->capped || s->woken)
				continue;
			if (best == NULL || s->seq < best->seq)
				best = s;
		}
		if (best == NULL)
			break;
		best->woken = true;
		SetLatch(best->latch);
	}
}

/* nw_wake_pending: after a commit, wake the waiters of the noted queues */
static void
nw_wake_pending(void)
{
	int			i;

	/*
	 * The commit is visible (ProcArrayEndTransaction ran); a waiter
	 * counted after this read looks with a snapshot that sees it.
	 */
	pg_memory_barrier();
	if (pg_atomic_read_u32(&nw_shared->nwaiting) > 0)
	{
		bool		capped = pg_atomic_read_u32(&nw_shared->ncapped) > 0;
		bool		need = false;

		/* a transition's note alone: nothing to do unless a cap holds one */
		for (i = 0; i < nw_npending && !need; i++)
			need = nw_pending[i].ndue > 0 || nw_pending[i].later != 0 ||
				(capped && nw_pending[i].nfreed > 0);
		if (need)
		{
			LWLockAcquire(nw_shared->lock, LW_EXCLUSIVE);
			for (i = 0; i < nw_npending; i++)
			{
				nw_wake_locked(nw_pending[i].queue, nw_pending[i].ndue,
							   nw_pending[i].later);
				if (capped && nw_pending[i].nfreed > 0)
					nw_wake_capped_locked(nw_pending[i].queue,
										  nw_pending[i].nfreed);
			}
			LWLockRelease(nw_shared->lock);
		}
	}
	nw_npending = 0;
}

/* nw_xact_callback: at commit, wake the waiters of the noted queues */
static void
nw_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (nw_npending == 0)
				break;
			if (nw_after_citus)
			{
				/* after Citus' COMMIT PREPARED: nw_release_callback */
				nw_wake_deferred = true;
				break;
			}
			nw_wake_pending();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			nw_npending = 0;
			nw_after_citus = nw_wake_deferred = false;
			break;
		default:
			break;
	}
}

/*
 * nw_release_callback: the deferred wake of a distributed install's
 * commit, once every commit callback (Citus' COMMIT PREPARED) has run
 */
static void
nw_release_callback(ResourceReleasePhase phase, bool isCommit,
					bool isTopLevel, void *arg)
{
	if (!nw_wake_deferred || phase != RESOURCE_RELEASE_AFTER_LOCKS ||
		!isCommit || !isTopLevel)
		return;
	nw_wake_deferred = nw_after_citus = false;
	nw_wake_pending();
}

/* ---- the waiter ---- */

/* NtaskWaiterRegister: take a slot for this backend's waiting claim */
void
NtaskWaiterRegister(const char *queue, int max_tasks, TimestampTz until)
{
	int			i;
	NwSlot	   *s = NULL;

	if (!nw_exit_registered)
	{
		before_shmem_exit(nw_exit, (Datum) 0);
		nw_exit_registered = true;
	}
	LWLockAcquire(nw_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < nw_shared->nslots; i++)
		if (!nw_shared->slots[i].in_use)
		{
			s = &nw_shared->slots[i];
			nw_my_slot = i;
			break;
		}
	if (s == NULL)
	{
		/* cannot happen: one slot per backend, one waiting claim each */
		LWLockRelease(nw_shared->lock);
		elog(ERROR, "ntask: no free waiter slot");
	}
	s->in_use = true;
	s->woken = false;
	s->capped = false;
	s->max_tasks = max_tasks;
	s->pid = MyProcPid;
	s->dboid = MyDatabaseId;
	s->seq = nw_shared->next_seq++;
	s->since = GetCurrentTimestamp();
	s->until = until;
	s->hint = 0;
	s->latch = MyLatch;
	strlcpy(s->queue, queue, NW_QUEUE_LEN);
	pg_atomic_fetch_add_u32(&nw_shared->nwaiting, 1);
	LWLockRelease(nw_shared->lock);
}

/*
 * NtaskWaiterRearm
 *		Before a look: clear the woken flag, drop a hint whose time has
 *		come (the look will see that work).  Returns the remaining hint.
 */
TimestampTz
NtaskWaiterRearm(TimestampTz now)
{
	NwSlot	   *s = &nw_shared->slots[nw_my_slot];
	TimestampTz hint;

	LWLockAcquire(nw_shared->lock, LW_EXCLUSIVE);
	s->woken = false;
	if (s->hint != 0 && s->hint <= now)
		s->hint = 0;
	hint = s->hint;
	LWLockRelease(nw_shared->lock);
	return hint;
}

/*
 * NtaskWaiterHint
 *		The slot's current hint (a commit may have lowered it), and whether
 *		a commit woke it since its last look: then it looks again without
 *		sleeping, whether or not its latch is still set (a lock wait inside
 *		the look may have reset it).
 */
TimestampTz
NtaskWaiterHint(bool *woken)
{
	TimestampTz hint;

	LWLockAcquire(nw_shared->lock, LW_SHARED);
	hint = nw_shared->slots[nw_my_slot].hint;
	*woken = nw_shared->slots[nw_my_slot].woken;
	LWLockRelease(nw_shared->lock);
	return hint;
}

/*
 * NtaskWaiterSetCapped
 *		Mark this waiter as held back by a cap (a commit that ends a lease
 *		of its queue wakes it), or no longer.
 */
void
NtaskWaiterSetCapped(bool capped)
{
	NwSlot	   *s = &nw_shared->slots[nw_my_slot];

	LWLockAcquire(nw_shared->lock, LW_EXCLUSIVE);
	if (s->capped != capped)
	{
		s->capped = capped;
		if (capped)
			pg_atomic_fetch_add_u32(&nw_shared->ncapped, 1);
		else
			pg_atomic_fetch_sub_u32(&nw_shared->ncapped, 1);
	}
	LWLockRelease(nw_shared->lock);
}

/*
 * NtaskWaiterUnregister
 *		Free this backend's slot.  If a commit woke it since its last look,
 *		or (filled) it took a full batch, wake the next waiter of its queue:
 *		the wake-up may have been meant for work it did not take.
 */
void
NtaskWaiterUnregister(bool filled)
{
	NwSlot	   *s;

	if (nw_my_slot < 0 || nw_shared == NULL)
		return;
	s = &nw_shared->slots[nw_my_slot];
	LWLockAcquire(nw_shared->lock, LW_EXCLUSIVE);
	if (s->in_use)
	{
		char		queue[NW_QUEUE_LEN];
		bool		forward = filled || s->woken;

		strlcpy(queue, s->queue, NW_QUEUE_LEN);
		s->in_use = false;
		s->woken = false;
		s->latch = NULL;
		if (s->capped)
			pg_atomic_fetch_sub_u32(&nw_shared->ncapped, 1);
		s->capped = false;
		pg_atomic_fetch_sub_u32(&nw_shared->nwaiting, 1);
		if (forward)
			nw_wake_locked(queue, 1, 0);
	}
	LWLockRelease(nw_shared->lock);
	nw_my_slot = -1;
}

/*
 * NtaskWaiterAvailable: the slots exist (ntask is in
 * shared_preload_libraries); NtaskWaiterBusy: this backend holds one
 */
bool
NtaskWaiterAvailable(void)
{
	return nw_shared != NULL;
}

bool
NtaskWaiterBusy(void)
{
	return nw_my_slot >= 0;
}

/* nw_exit: before_shmem_exit (FATAL, SIGTERM, postmaster death) */
static void
nw_exit(int code, Datum arg)
{
	NtaskWaiterUnregister(false);
}

/*
 * ntask_waiters() RETURNS TABLE(pid, queue, max_tasks, since, wait_until,
 *								 woken)
 *		The waiting claims of this database, for the view ntask.waiters
 *		(admin; the slots are shared by the server's databases, a queue
 *		name belongs to one).  A slot is held only while a claim waits:
 *		none is left behind by a canceled, terminated or crashed waiter.
 */
Datum
ntask_waiters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (nw_shared == NULL)
		return (Datum) 0;
	LWLockAcquire(nw_shared->lock, LW_SHARED);
	for (i = 0; i < nw_shared->nslots; i++)
	{
		NwSlot	   *s = &nw_shared->slots[i];
		Datum		v[6];
		bool		n[6] = {false, false, false, false, false, false};

		if (!s->in_use || s->dboid != MyDatabaseId)
			continue;
		v[0] = Int32GetDatum(s->pid);
		v[1] = CStringGetTextDatum(s->queue);
		v[2] = Int32GetDatum(s->max_tasks);
		v[3] = TimestampTzGetDatum(s->since);
		v[4] = TimestampTzGetDatum(s->until);
		v[5] = BoolGetDatum(s->woken);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
	}
	LWLockRelease(nw_shared->lock);
	return (Datum) 0;
}
