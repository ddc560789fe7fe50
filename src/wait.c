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
 * What a waiting claim holds while it sleeps: no row or relation lock
 * (every look runs in an internal subtransaction, rolled back when it
 * claimed nothing and wrote nothing, which releases the locks it took), no
 * transaction id (it refuses to run in a transaction that has one), and
 * the snapshot of its statement: the vacuum horizon is held for at most
 * the wait (ntask.max_wait, 30 s by default), as any statement that runs
 * that long holds it.  It ends at once on query cancel, statement_timeout,
 * pg_terminate_backend and postmaster death; its slot is freed on error
 * and at backend exit.
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
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
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
	"    AND t.priority OPERATOR(pg_catalog.=) pr.p AND t.due_at IS NOT NULL "
	"  ORDER BY t.due_at LIMIT 1) x "
	"WHERE pr.p IS NOT NULL",
	1, {TEXTOID}
};

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
void
NtaskWakeWaitersAtCommit(const char *queue, int ndue, TimestampTz later)
{
	NwPending  *p = NULL;
	int			i;

	if (nw_shared == NULL || (ndue <= 0 && later == 0))
		return;
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
		p->later = 0;
	}
	p->ndue = Min(p->ndue + Max(ndue, 0), NTASK_MAX_BATCH);
	if (later != 0 && (p->later == 0 || later < p->later))
		p->later = later;
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
				LWLockAcquire(nw_shared->lock, LW_EXCLUSIVE);
				for (i = 0; i < nw_npending; i++)
					nw_wake_locked(nw_pending[i].queue, nw_pending[i].ndue,
								   nw_pending[i].later);
				LWLockRelease(nw_shared->lock);
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

/* nw_hint: the slot's current hint (a commit may have lowered it) */
static TimestampTz
nw_hint(void)
{
	TimestampTz hint;

	LWLockAcquire(nw_shared->lock, LW_SHARED);
	hint = nw_shared->slots[nw_my_slot].hint;
	LWLockRelease(nw_shared->lock);
	return hint;
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
 * nw_look
 *		One look: NtaskClaimInto in an internal subtransaction.  Claimed
 *		something, or wrote something (tasks whose budget was spent, or that
 *		the guard finished): the subtransaction is kept, and so are its
 *		locks, and the claim returns.  Nothing: *next_due is set to the
 *		queue's next due time (0: none) and the subtransaction is rolled
 *		back, which releases every lock the look took.
 */
static int
nw_look(ReturnSetInfo *rsinfo, text *queue, text *worker, int max_tasks,
		Datum lease_arg, bool invoked, bool *wrote, TimestampTz *next_due)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile int got = 0;
	volatile bool in_subxact = true;

	*wrote = false;
	*next_due = 0;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		got = NtaskClaimInto(rsinfo, queue, worker, max_tasks, lease_arg,
							 invoked, NULL, NULL, 0);
		*wrote = GetCurrentTransactionIdIfAny() != InvalidTransactionId;
		if (got > 0 || *wrote)
		{
			in_subxact = false;
			ReleaseCurrentSubTransaction();
		}
		else
		{
			Datum		values[1];
			bool		isnull;
			Datum		d;

			values[0] = PointerGetDatum(queue);
			NtaskExecPlan(&nw_next_due_plan, values, NULL, SPI_OK_SELECT);
			d = NtaskGetDatum(0, 1, &isnull);
			*next_due = isnull ? 0 : DatumGetTimestampTz(d);
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
		for (;;)
		{
			TimestampTz now = GetCurrentTimestamp();
			TimestampTz hint;
			TimestampTz next_due;
			TimestampTz wake;
			bool		wrote;
			long		timeout_ms;

			ResetLatch(MyLatch);
			hint = nw_rearm(now);
			got = nw_look(rsinfo, queue, worker, max_tasks, lease_arg, invoked,
						  &wrote, &next_due);
			if (got > 0 || wrote)
				break;
			now = GetCurrentTimestamp();
			if (now >= until)
				break;

			/* sleep until the earliest of: the end, the next due task, the hint */
			wake = until;
			if (next_due != 0 && next_due <= now)
			{
				/* due but locked by another transaction: poll for a while */
				wake = Min(wake, now + (int64) NW_LOCKED_POLL_MS * 1000);
			}
			else if (next_due != 0)
				wake = Min(wake, next_due);
			hint = nw_hint();
			if (hint != 0)
				wake = Min(wake, hint);
			timeout_ms = (long) ((Max(wake - now, 0) + 999) / 1000);
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 timeout_ms, PG_WAIT_EXTENSION);
			CHECK_FOR_INTERRUPTS();

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
