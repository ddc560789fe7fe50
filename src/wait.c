/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  The waiting claim: ntask_claim(..., wait => interval) sleeps on its
 *	  latch until work for its queue is committed, then claims it; the
 *	  wake-at-commit of the transactions that make work due; and the
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
 * A waiter registers before each look, and resets its latch before it: a
 * commit that happens before the look is seen by the look's snapshot (the
 * committer's wake runs after ProcArrayEndTransaction), one after it sets
 * the latch.  No timer scan: the sleep ends at the earliest of the wait's
 * end, the due time of the queue's next not-yet-due task (one index probe
 * per priority, the claim's own access path), and the hint.
 *
 * A look on a queue with a queue-wide limit reads the limit first and
 * does not pick while it holds everything back (nw_gated); a look whose
 * picked tasks a limit held back is rolled back like an empty one, and
 * the claim sleeps until the limit's next token, or, held by a cap, until
 * a commit that ends a lease of the queue (NtaskWakeCappedAtCommit).
 *
 * What a waiting claim holds while it sleeps: no row or relation lock
 * (every look runs in an internal subtransaction, rolled back when it
 * claimed nothing and wrote nothing, which releases the locks it took), no
 * transaction id (it refuses to run in a transaction that has one; only a
 * look that picked tasks a per-key limit then held back leaves one), and
 * the snapshot of its statement: the vacuum horizon is held for at most
 * the wait (ntask.max_wait, 30 s by default), as any statement that runs
 * that long holds it.  It ends at once on query cancel, statement_timeout,
 * pg_terminate_backend, postmaster death and a closed client connection;
 * its slot is freed on error and at backend exit.
 *
 * IDENTIFICATION
 *	  src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

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

#define NW_QUEUE_LEN 64			/* queue names are at most 63 bytes */

/* a due task locked by another transaction: look again this often */
#define NW_LOCKED_POLL_MS 100

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

/* microseconds the current claim spent waiting (claim.c's old-xact notice) */
int64		NtaskClaimWaitedUsecs = 0;

/*
 * The earliest due time of the queue's not-yet-claimable work: per
 * priority, the first entry of task_due_idx (ready tasks due later, retries
 * in backoff, leases that will run out).  Read as the owner; it reveals
 * nothing to the caller but when to look again.
 */
static NtaskPlan nw_next_due_plan = {
	"wait next due",
	NTASK_PRIORITY_WALK
	"SELECT pg_catalog.min(x.due_at) FROM pr, LATERAL ( "
	"  SELECT t.due_at FROM ntask.task t "
	"  WHERE t.queue OPERATOR(pg_catalog.=) $1 "
	"    AND t.priority OPERATOR(pg_catalog.=) pr.p AND t.due_at OPERATOR(pg_catalog.>) $2 "
	"  ORDER BY t.due_at LIMIT 1) x "
	"WHERE pr.p IS NOT NULL",
	2, {TEXTOID, TIMESTAMPTZOID}
};

/*
 * The gate: does a queue-wide limit hold every task of the queue back
 * now?  Columns: the queue has a queue-wide limit; its cap is reached (the
 * leases still running, counted as claim.c counts them); when its bucket
 * has its next token (now when it has one).  Read before the pick, without
 * locking anything, so a look on a queue at its limit takes no row lock
 * and no transaction id.  No row (no such queue, or no right to claim
 * from it): the look runs and raises the claim's error.
 */
static NtaskPlan nw_gate_plan = {
	"wait gate",
	"SELECT q.max_inflight IS NOT NULL OR q.rate_n IS NOT NULL, "
	"  CASE WHEN q.max_inflight IS NOT NULL THEN q.max_inflight OPERATOR(pg_catalog.<=) ( "
	"    SELECT pg_catalog.count(*) FROM ntask.task t "
	"    WHERE t.lease_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() "
	"      AND (t.queue OPERATOR(pg_catalog.=) $1) IS TRUE "
	"      AND t.state OPERATOR(pg_catalog.=) 'leased') END, "
	"  CASE WHEN q.rate_n IS NOT NULL THEN ntask.limit_next($1, NULL, q.rate_n, "
	"    (pg_catalog.date_part('epoch', q.rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, 0, 0) END "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1 "
	"  AND " NTASK_WORKER_RIGHT("q", "2"),
	2, {TEXTOID, OIDOID}
};

/*
 * The last queue whose gate said it has no queue-wide limit: the waiting
 * claims of a worker that loops on one queue skip the gate's statement.
 * A limit set later is found by a look (its tasks held back, the look
 * rolled back), which forgets this.
 */
static char nw_ungated[NW_QUEUE_LEN];
static Oid	nw_ungated_db = InvalidOid;

/* what a look that claimed nothing learned (nw_look) */
typedef struct NwLook
{
	bool		wrote;			/* it wrote (kept, the claim returns) */
	bool		capped;			/* a cap held due work back */
	TimestampTz held_until;		/* a rate held due work back until then; 0 */
	TimestampTz next_due;		/* the queue's next due time (see nw_look); 0 */
} NwLook;

static void nw_xact_callback(XactEvent event, void *arg);
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
		nw_callback_registered = true;
	}
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
 *		Note that this transaction ends a lease of queue (a transition, a
 *		release): at commit it wakes the oldest waiting claim of the queue
 *		that a cap held back (its slot may be free now).  Costs a look-up
 *		in a backend-local list; the commit does nothing more while no
 *		waiter is held by a cap.
 */
void
NtaskWakeCappedAtCommit(const char *queue)
{
	NwPending  *p;

	if (nw_shared == NULL)
		return;
	p = nw_pending_of(queue);
	p->nfreed = Min(p->nfreed + 1, NTASK_MAX_BATCH);
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

/* nw_xact_callback: at commit, wake the waiters of the noted queues */
static void
nw_xact_callback(XactEvent event, void *arg)
{
	int			i;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (nw_npending == 0)
				break;

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
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			nw_npending = 0;
			break;
		default:
			break;
	}
}

/* ---- the waiter ---- */

/* nw_register: take a slot for this backend's waiting claim */
static void
nw_register(const char *queue, int max_tasks, TimestampTz until)
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
 * nw_rearm
 *		Before a look: clear the woken flag, drop a hint whose time has
 *		come (the look will see that work).  Returns the remaining hint.
 */
static TimestampTz
nw_rearm(TimestampTz now)
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
 * nw_hint
 *		The slot's current hint (a commit may have lowered it), and whether
 *		a commit woke it since its last look: then it looks again without
 *		sleeping, whether or not its latch is still set (a lock wait inside
 *		the look may have reset it).
 */
static TimestampTz
nw_hint(bool *woken)
{
	TimestampTz hint;

	LWLockAcquire(nw_shared->lock, LW_SHARED);
	hint = nw_shared->slots[nw_my_slot].hint;
	*woken = nw_shared->slots[nw_my_slot].woken;
	LWLockRelease(nw_shared->lock);
	return hint;
}

/*
 * nw_set_capped
 *		Mark this waiter as held back by a cap (a commit that ends a lease
 *		of its queue wakes it), or no longer.
 */
static void
nw_set_capped(bool capped)
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
 * nw_unregister
 *		Free this backend's slot.  If a commit woke it since its last look,
 *		or (filled) it took a full batch, wake the next waiter of its queue:
 *		the wake-up may have been meant for work it did not take.
 */
static void
nw_unregister(bool filled)
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

/* nw_exit: before_shmem_exit (FATAL, SIGTERM, postmaster death) */
static void
nw_exit(int code, Datum arg)
{
	nw_unregister(false);
}

/*
 * nw_gated
 *		Inside a look: does a queue-wide limit hold all of the queue's work
 *		back now (nw_gate_plan)?  Then the look does not pick: a pick would
 *		lock the due rows (which assigns a transaction id) only for the
 *		limit to hold them back.  *gate is cleared when the queue has no
 *		queue-wide limit (the rest of the wait does not ask again).
 */
static bool
nw_gated(text *queue, bool *gate, NwLook *lk)
{
	Datum		values[2];
	bool		isnull;
	bool		held = false;
	Datum		d;

	values[0] = PointerGetDatum(queue);
	values[1] = ObjectIdGetDatum(NtaskCaller());
	if (NtaskExecPlan(&nw_gate_plan, values, NULL, SPI_OK_SELECT) == 0)
		return false;
	if (!NtaskGetBool(0, 1))
	{
		*gate = false;
		text_to_cstring_buffer(queue, nw_ungated, NW_QUEUE_LEN);
		nw_ungated_db = MyDatabaseId;
		return false;
	}
	d = NtaskGetDatum(0, 2, &isnull);
	if (!isnull && DatumGetBool(d))
		lk->capped = held = true;
	d = NtaskGetDatum(0, 3, &isnull);
	if (!isnull && DatumGetTimestampTz(d) > GetCurrentTimestamp())
	{
		lk->held_until = DatumGetTimestampTz(d);
		held = true;
	}
	return held;
}

/*
 * nw_look
 *		One look, in an internal subtransaction: the gate (while *gate),
 *		then NtaskClaimInto.  Claimed something, or wrote something (tasks
 *		whose budget was spent, or that the guard finished): the
 *		subtransaction is kept, and so are its locks, and the claim
 *		returns.  Nothing: lk says whether a limit held work back, and
 *		lk->next_due is the queue's next due time (0: none), after now when
 *		a limit held work back (the due tasks it held are not news); and
 *		the subtransaction is rolled back, which releases every lock the
 *		look took (the row locks of the tasks a limit held back too).
 *		Whether it wrote is what the claim counts (NtaskClaimWrites), not
 *		whether a transaction id was assigned: row locks assign one.
 */
static int
nw_look(ReturnSetInfo *rsinfo, text *queue, text *worker, int max_tasks,
		Datum lease_arg, bool invoked, bool *gate, NwLook *lk)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile int got = 0;
	volatile bool in_subxact = true;

	memset(lk, 0, sizeof(NwLook));
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		uint64		writes = NtaskClaimWrites;

		if (!*gate || !nw_gated(queue, gate, lk))
		{
			got = NtaskClaimInto(rsinfo, queue, worker, max_tasks, lease_arg,
								 invoked, NULL, NULL, 0);
			lk->wrote = NtaskClaimWrites != writes;
			lk->capped = NtaskClaimHeldCap;
			lk->held_until = NtaskClaimHeldUntil;
		}
		if (got > 0 || lk->wrote)
		{
			in_subxact = false;
			ReleaseCurrentSubTransaction();
		}
		else
		{
			Datum		values[2];
			bool		isnull;
			Datum		d;

			values[0] = PointerGetDatum(queue);
			values[1] = TimestampTzGetDatum(lk->capped || lk->held_until != 0 ?
											GetCurrentTimestamp() : DT_NOBEGIN);
			NtaskExecPlan(&nw_next_due_plan, values, NULL, SPI_OK_SELECT);
			d = NtaskGetDatum(0, 1, &isnull);
			lk->next_due = isnull ? 0 : DatumGetTimestampTz(d);
			in_subxact = false;
			RollbackAndReleaseCurrentSubTransaction();
		}
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		if (in_subxact)
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		ReThrowError(edata);
	}
	PG_END_TRY();
	return got;
}

/*
 * nw_sleep
 *		Sleep on the latch for at most timeout_ms, and on the client's
 *		socket: a client that went away (its connection closed) ends the
 *		backend as a failed send would (FATAL "connection to client lost"),
 *		before the wait could claim a task for nobody.  Behind a pooler the
 *		socket is the pooler's and stays open.
 */
static void
nw_sleep(long timeout_ms)
{
	int			events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
	int			rc;

	if (MyProcPort != NULL && whereToSendOutput == DestRemote &&
		WaitEventSetCanReportClosed())
		rc = WaitLatchOrSocket(MyLatch, events | WL_SOCKET_CLOSED,
							   MyProcPort->sock, timeout_ms, PG_WAIT_EXTENSION);
	else
		rc = WaitLatch(MyLatch, events, timeout_ms, PG_WAIT_EXTENSION);
	if (rc & WL_SOCKET_CLOSED)
	{
		ClientConnectionLost = true;
		InterruptPending = true;
	}
	CHECK_FOR_INTERRUPTS();
}

/*
 * NtaskClaimWait
 *		ntask_claim with a wait: claim at once if work is due, else sleep
 *		until a commit makes work of queue due, its next task comes due, or
 *		wait (capped by ntask.max_wait) has passed, and look again.  Returns
 *		how many tasks it leased (0 when the wait ran out).  Runs inside the
 *		caller's SPI connection.
 *
 * Refused (25000) in REPEATABLE READ or SERIALIZABLE (its snapshot would
 * never see new work) and in a transaction that has written (it would
 * hold that transaction's row locks while it sleeps); 55000 without
 * ntask in shared_preload_libraries.  statement_timestamp() is moved to
 * each look after the first, so a lease counts from the look that took
 * it, not from the start of the wait.
 */
int
NtaskClaimWait(ReturnSetInfo *rsinfo, text *queue, text *worker, int max_tasks,
			   Datum lease_arg, bool invoked, int64 wait_usecs)
{
	char	   *qname = text_to_cstring(queue);
	TimestampTz start;
	TimestampTz until;
	volatile int got = 0;
	volatile bool filled = false;

	if (nw_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: a waiting claim needs ntask in shared_preload_libraries"),
				 errhint("Add ntask to shared_preload_libraries and restart, or call ntask_claim without wait.")));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("ntask: a waiting claim needs READ COMMITTED"),
				 errdetail("Under REPEATABLE READ or SERIALIZABLE its snapshot would never see new work.")));
	if (GetTopTransactionIdIfAny() != InvalidTransactionId)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("ntask: a waiting claim cannot run in a transaction that has written"),
				 errdetail("It would hold that transaction's locks while it waits."),
				 errhint("Commit first, or call ntask_claim without wait.")));
	if (nw_my_slot >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: this session is already in a waiting claim")));

	wait_usecs = Min(wait_usecs, (int64) ntask_max_wait_ms * 1000);
	start = GetCurrentTimestamp();
	until = start + wait_usecs;
	NtaskClaimWaitedUsecs = 0;

	nw_register(qname, max_tasks, until);
	PG_TRY();
	{
		bool		gate;
		bool		capped = false;

		gate = nw_ungated_db != MyDatabaseId || strcmp(nw_ungated, qname) != 0;

		for (;;)
		{
			TimestampTz now = GetCurrentTimestamp();
			TimestampTz hint;
			TimestampTz wake;
			NwLook		lk;
			bool		woken;
			long		timeout_ms;

			ResetLatch(MyLatch);
			hint = nw_rearm(now);
			got = nw_look(rsinfo, queue, worker, max_tasks, lease_arg, invoked,
						  &gate, &lk);
			if (got > 0 || lk.wrote)
				break;
			now = GetCurrentTimestamp();
			if (now >= until)
				break;
			if ((lk.capped || lk.held_until != 0) && !gate)
			{
				/* a limit after all (set since the gate said none) */
				gate = true;
				nw_ungated_db = InvalidOid;
			}
			if (lk.capped != capped)
			{
				nw_set_capped(lk.capped);
				capped = lk.capped;
				/* a lease that ended before the mark woke nobody: look again */
				if (capped)
					continue;
			}

			/* sleep until the earliest of: the end, the next due task, the hint */
			wake = until;
			if (lk.capped || lk.held_until != 0)
			{
				/* a limit held the due work back: until it lets it go */
				if (lk.held_until != 0)
					wake = Min(wake, lk.held_until);
				if (lk.next_due != 0)
					wake = Min(wake, lk.next_due);
			}
			else if (lk.next_due != 0 && lk.next_due <= now)
			{
				/* due but locked by another transaction: poll for a while */
				wake = Min(wake, now + (int64) NW_LOCKED_POLL_MS * 1000);
			}
			else if (lk.next_due != 0)
				wake = Min(wake, lk.next_due);
			hint = nw_hint(&woken);
			if (hint != 0)
				wake = Min(wake, hint);
			timeout_ms = woken ? 0 : (long) ((Max(wake - now, 0) + 999) / 1000);
			nw_sleep(timeout_ms);

			/* the next look's leases count from the look */
			SetCurrentStatementStartTimestamp();
			NtaskClaimWaitedUsecs = GetCurrentTimestamp() - start;
		}
		filled = got >= max_tasks;
	}
	PG_FINALLY();
	{
		NtaskClaimWaitedUsecs = 0;
		nw_unregister(filled);
	}
	PG_END_TRY();
	return got;
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
