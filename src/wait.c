/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  The waiting claim: ntask_claim(..., wait => interval) sleeps on its
 *	  latch until work for its queue is committed, then claims it
 *	  (docs/design.md "Waiting claims").  ntask_claim, the pick and the
 *	  lease are claim.c's: ntask_claim hands the wait its claim
 *	  (NtaskClaimInto) to run at each look, so this file calls nothing of
 *	  claim.c's and claim.c alone calls into it.
 *
 * The waiter slots, the wake-at-commit of the transactions that make work
 * due and the ntask.waiters view live in waiter.c; this file is the wait
 * loop of one claim.
 *
 * A look on a queue with a queue-wide limit reads the limit first and
 * does not pick while it holds everything back (nw_gated); a look whose
 * picked tasks a limit held back is rolled back like an empty one, and
 * the claim sleeps until the limit's next token, or, held by a cap, until
 * a commit that ends a lease of the queue (NtaskWakeCappedAtCommit, waiter.c).
 *
 * What a waiting claim holds while it sleeps: no row or relation lock
 * (every look runs in an internal subtransaction, rolled back when it
 * claimed nothing and wrote nothing, which releases the locks it took;
 * on a Citus worker node's direct path, the metadata lock of each shard
 * group the look entered too, so that a move of the shard never waits for
 * the sleep: NtaskDirectLookBegin and NtaskDirectLookEnd make the next
 * look lock, take in the invalidations and check again), no
 * transaction id (it refuses to run in a transaction that has one; only a
 * look that picked tasks a per-key limit then held back leaves one), and
 * the snapshot of its statement: the vacuum horizon is held for at most
 * the wait (ntask.max_wait, 30 s by default), as any statement that runs
 * that long holds it.  It ends at once on query cancel, statement_timeout,
 * pg_terminate_backend, postmaster death and a closed client connection;
 * its slot is freed on error and at backend exit.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_api.h"
#include "ntask_base.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"
#include "waiter.h"

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


/* a due task locked by another transaction: look again this often */
#define NW_LOCKED_POLL_MS 100
/*
 * The earliest due time of the queue's not-yet-claimable work: per
 * priority, the first entry of task_due_idx (ready tasks due later, retries
 * in backoff) and of task_lease_idx (leases that will run out).  Read as the owner; it reveals
 * nothing to the caller but when to look again.
 */
typedef enum NwNextDueArg
{
	NW_NEXT_DUE_ARG_QUEUE,		/* $1 */
	NW_NEXT_DUE_ARG_AFTER,		/* $2 */
	NW_NEXT_DUE_ARG_SHARD,		/* $3, the routed variant's */
	NW_NEXT_DUE_NARGS,
	NW_NEXT_DUE_PLAIN_NARGS = NW_NEXT_DUE_ARG_SHARD	/* the plain variant's */
} NwNextDueArg;

typedef enum NwNextDueCol
{
	NW_NEXT_DUE_AT = 1			/* NULL: nothing due later */
} NwNextDueCol;

/*
 * The routed variant within one shard ($3), for a distributed install:
 * Citus plans a recursive CTE only with a filter on the distribution
 * column ("recursive CTEs are only supported when they contain a filter on
 * the distribution column"), and with it in every scan the statement is
 * one router query on the shard's node.  A look asks each shard value once
 * (nw_next_due).  pred: that filter.
 */
/*
 * Per priority the earliest of the ready tasks (task_due_idx) and of the
 * leases (task_lease_idx, where a lease's end is its due_at: a takeover).
 */
#define NW_NEXT_DUE(pred) \
	NTASK_PRIORITY_WALK_ON(pred) \
	"SELECT pg_catalog.min(x.due_at) FROM pr, LATERAL ( " \
	"  (SELECT t.due_at FROM ntask.task t " \
	"   WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"     AND t.priority OPERATOR(pg_catalog.=) pr.p AND t.lease_until IS NULL " \
	"     AND t.due_at OPERATOR(pg_catalog.>) $2 " \
	"   ORDER BY t.due_at LIMIT 1) " \
	"  UNION ALL " \
	"  (SELECT t.lease_until FROM ntask.task t " \
	"   WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"     AND t.priority OPERATOR(pg_catalog.=) pr.p " \
	"     AND t.lease_until OPERATOR(pg_catalog.>) $2 " \
	"   ORDER BY t.lease_until LIMIT 1)) x " \
	"WHERE pr.p IS NOT NULL"

static NtaskPair nw_next_due_pair = NTASK_PAIR("wait next due",
											   NTASK_PLAIN(NW_NEXT_DUE_AT, NW_NEXT_DUE(""), NW_NEXT_DUE_PLAIN_NARGS, SPI_OK_SELECT),
											   NTASK_ROUTED(NW_NEXT_DUE_AT, NW_NEXT_DUE(" AND t.shard OPERATOR(pg_catalog.=) $3 "),
															NW_NEXT_DUE_NARGS, SPI_OK_SELECT, NULL, NULL),
											   TEXTOID, TIMESTAMPTZOID, INT2OID);

/*
 * The gate: does a queue-wide limit hold every task of the queue back
 * now?  Columns: the queue has a queue-wide limit; its cap is reached (the
 * leases still running, counted as claim.c counts them); when its bucket
 * has its next token (now when it has one).  Read before the pick, without
 * locking anything, so a look on a queue at its limit takes no row lock
 * and no transaction id.  No row (no such queue, or no right to claim
 * from it): the look runs and raises the claim's error.
 */
typedef enum NwGateArg
{
	NW_GATE_ARG_QUEUE,			/* $1 */
	NW_GATE_ARG_CALLER,			/* $2, for the worker_role */
	NW_GATE_NARGS
} NwGateArg;

typedef enum NwGateCol
{
	NW_GATE_LIMITED = 1,		/* a queue-wide limit is set */
	NW_GATE_CAPPED,				/* NULL: no cap */
	NW_GATE_NEXT_TOKEN			/* NULL: no rate */
} NwGateCol;

/*
 * On a distributed install (the routed variant) the cap is not counted
 * here (a count over every shard, which Citus runs as a subplan on
 * parallel connections to each node, and which a cap shared out by node
 * would not use: claim.c's claim_limit counts the node's share under its
 * lock), so a capped queue's look always runs.  The count's connections
 * also made Citus' deadlock detector cancel a waiting claim now and then
 * (t/023).  capped: the second column.
 */
#define NW_GATE(capped) \
	"SELECT q.max_inflight IS NOT NULL OR q.rate_n IS NOT NULL, " \
	"  CASE WHEN q.max_inflight IS NOT NULL THEN " capped " END, " \
	"  CASE WHEN q.rate_n IS NOT NULL THEN ntask.limit_next($1, NULL, q.rate_n, " \
	"    (pg_catalog.date_part('epoch', q.rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, 0, 0) END " \
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND " NTASK_WORKER_RIGHT("q", "2")

static NtaskPair nw_gate_pair = NTASK_PAIR("wait gate",
										   NTASK_PLAIN(NW_GATE_NEXT_TOKEN, NW_GATE("q.max_inflight OPERATOR(pg_catalog.<=) ( "
																  "    SELECT pg_catalog.count(*) FROM ntask.task t "
																  "    WHERE t.lease_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() "
																  "      AND (t.queue OPERATOR(pg_catalog.=) $1) IS TRUE "
																  "      AND t.state OPERATOR(pg_catalog.=) 'leased')"),
													   NW_GATE_NARGS, SPI_OK_SELECT),
										   NTASK_ROUTED(NW_GATE_NEXT_TOKEN, NW_GATE("false"), NW_GATE_NARGS, SPI_OK_SELECT, NULL, NULL),
										   TEXTOID, OIDOID);

/*
 * The last queue whose gate said it has no queue-wide limit: the waiting
 * claims of a worker that loops on one queue skip the gate's statement.
 * A limit set later is found by a look (its tasks held back, the look
 * rolled back), which forgets this.
 */
static char nw_ungated[NTASK_QUEUE_BUF];
static Oid	nw_ungated_db = InvalidOid;

/* what a look that claimed nothing learned (nw_look) */
typedef struct NwLook
{
	bool		wrote;			/* it wrote (kept, the claim returns) */
	bool		capped;			/* a cap held due work back */
	TimestampTz held_until;		/* a rate held due work back until then; 0 */
	TimestampTz next_due;		/* the queue's next due time (see nw_look); 0 */
} NwLook;

/*
 * nw_gated
 *		Inside a look: does a queue-wide limit hold all of the queue's work
 *		back now (nw_gate_pair)?  Then the look does not pick: a pick would
 *		lock the due rows (which assigns a transaction id) only for the
 *		limit to hold them back.  *gate is cleared when the queue has no
 *		queue-wide limit (the rest of the wait does not ask again).
 */
static bool
nw_gated(text *queue, bool *gate, NwLook *lk)
{
	Datum		values[NW_GATE_NARGS];
	bool		isnull;
	bool		held = false;
	Datum		d;
	SPITupleTable *tt;

	values[NW_GATE_ARG_QUEUE] = PointerGetDatum(queue);
	values[NW_GATE_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	if (NtaskExecPair(&nw_gate_pair, values, NULL) == 0)
		return false;
	tt = SPI_tuptable;
	if (!NtaskTupGetBool(tt, 0, NW_GATE_LIMITED))
	{
		*gate = false;
		text_to_cstring_buffer(queue, nw_ungated, NTASK_QUEUE_BUF);
		nw_ungated_db = MyDatabaseId;
		return false;
	}
	d = NtaskTupGetDatum(tt, 0, NW_GATE_CAPPED, &isnull);
	if (!isnull && DatumGetBool(d))
		lk->capped = held = true;
	d = NtaskTupGetDatum(tt, 0, NW_GATE_NEXT_TOKEN, &isnull);
	if (!isnull && DatumGetTimestampTz(d) > GetCurrentTimestamp())
	{
		lk->held_until = DatumGetTimestampTz(d);
		held = true;
	}
	return held;
}

/*
 * nw_next_due
 *		The queue's earliest due time after after (0: none): one statement
 *		per shard value on a distributed install, one on a plain one (as
 *		if of one shard, 0).  A waiting claim on the direct path asks the
 *		shards of its walk only (the _on form's, or this worker node's
 *		own): each on its group where the look entered it, else routed
 *		(NtaskDirectLookUse), and never another node's: a routed read
 *		there, at each look that finds nothing, for tasks the walk cannot
 *		take (docs/scaling.md "The waiting claim on the direct path").
 */
static TimestampTz
nw_next_due(text *queue, TimestampTz after)
{
	Datum		values[NW_NEXT_DUE_NARGS];
	TimestampTz next = 0;
	bool		isnull;
	Datum		d;
	int			nshards = NtaskShardCount();
	bool		walks = false;
	int			i;

	if (nshards > 0)
	{
		(void) NtaskDirectLookUse(-1, &walks);
		if (walks)
			nshards = NtaskWalkShardCount();
	}
	values[NW_NEXT_DUE_ARG_QUEUE] = PointerGetDatum(queue);
	values[NW_NEXT_DUE_ARG_AFTER] = TimestampTzGetDatum(after);
	for (i = 0; i < Max(nshards, 1); i++)
	{
		int16		sv = 0;

		if (walks)
		{
			sv = NtaskWalkShardValue(i);
			(void) NtaskDirectLookUse(sv, &walks);
		}
		else if (nshards > 0)
			sv = NtaskShardValue(i);
		values[NW_NEXT_DUE_ARG_SHARD] = Int16GetDatum(sv);
		(void) NtaskExecPair(&nw_next_due_pair, values, NULL);
		d = NtaskTupGetDatum(SPI_tuptable, 0, NW_NEXT_DUE_AT, &isnull);
		if (!isnull && (next == 0 || DatumGetTimestampTz(d) < next))
			next = DatumGetTimestampTz(d);
	}
	return next;
}

/*
 * nw_look
 *		One look, in an internal subtransaction: the gate (while *gate),
 *		then the claim (claim: NtaskClaimInto).  Claimed something, or
 *		wrote something (tasks whose budget was spent, or that the guard
 *		finished): the subtransaction is kept, and so are its locks, and
 *		the claim returns.  Nothing: lk says whether a limit held work back, and
 *		lk->next_due is the queue's next due time (0: none), after now when
 *		a limit held work back (the due tasks it held are not news); and
 *		the subtransaction is rolled back, which releases every lock the
 *		look took (the row locks of the tasks a limit held back too).
 *		Whether it wrote is what the claim counts (c->writes), not
 *		whether a transaction id was assigned: row locks assign one.
 */
static int
nw_look(ClaimCall *c, int (*claim) (ClaimCall *c), bool *gate, NwLook *lk)
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
		uint64		writes = c->writes;

		/* on the direct path: every group it reaches locked in this look */
		NtaskDirectLookBegin();

		if (!*gate || !nw_gated(c->queue, gate, lk))
		{
			got = claim(c);
			lk->wrote = c->writes != writes;
			lk->capped = c->held_cap;
			lk->held_until = c->held_until;
		}
		if (got > 0 || lk->wrote)
		{
			in_subxact = false;
			ReleaseCurrentSubTransaction();
		}
		else
		{
			lk->next_due = nw_next_due(c->queue,
									   lk->capped || lk->held_until != 0 ?
									   GetCurrentTimestamp() : DT_NOBEGIN);
			in_subxact = false;
			RollbackAndReleaseCurrentSubTransaction();
			/* its groups' metadata locks went with it (shard.c) */
			NtaskDirectLookEnd();
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
		{
			RollbackAndReleaseCurrentSubTransaction();
			NtaskDirectLookEnd();
		}
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
 * nw_refuse
 *		Raise the errors of a claim that may not wait: 55000 without ntask
 *		in shared_preload_libraries or in a session already waiting, 25000
 *		in REPEATABLE READ or SERIALIZABLE (its snapshot would never see new
 *		work) and in a transaction that has written (it would hold that
 *		transaction's row locks while it sleeps).
 */
static void
nw_refuse(void)
{
	if (!NtaskWaiterAvailable())
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
	if (NtaskWaiterBusy())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: this session is already in a waiting claim")));
}

/*
 * nw_wake_at
 *		When a look that claimed nothing (lk, at now) sleeps until at the
 *		latest, before the waiter's hint: the earliest of the wait's end,
 *		the end of a limit that held the due work back, the next due task,
 *		and, for due work another transaction has locked, a short poll.
 */
static TimestampTz
nw_wake_at(NwLook *lk, TimestampTz now, TimestampTz until)
{
	TimestampTz wake = until;

	if (lk->capped || lk->held_until != 0)
	{
		/* a limit held the due work back: until it lets it go */
		if (lk->held_until != 0)
			wake = Min(wake, lk->held_until);
		if (lk->next_due != 0)
			wake = Min(wake, lk->next_due);
	}
	else if (lk->next_due != 0 && lk->next_due <= now)
	{
		/* due but locked by another transaction: poll for a while */
		wake = Min(wake, now + (int64) NW_LOCKED_POLL_MS * 1000);
	}
	else if (lk->next_due != 0)
		wake = Min(wake, lk->next_due);
	return wake;
}

/*
 * nw_wait_loop
 *		The wait of a registered waiter: look, and when the look claimed
 *		and wrote nothing, sleep until a commit wakes it, its next task
 *		comes due, a limit lets work go, or until; then look again.
 *		Returns how many tasks the last look leased.
 */
static int
nw_wait_loop(ClaimCall *c, int (*claim) (ClaimCall *c), const char *qname,
			 TimestampTz start, TimestampTz until)
{
	bool		gate = nw_ungated_db != MyDatabaseId || strcmp(nw_ungated, qname) != 0;
	bool		capped = false;
	int			got;

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz hint;
		TimestampTz wake;
		NwLook		lk;
		bool		woken;
		long		timeout_ms;

		ResetLatch(MyLatch);
		(void) NtaskWaiterRearm(now);
		got = nw_look(c, claim, &gate, &lk);
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
			NtaskWaiterSetCapped(lk.capped);
			capped = lk.capped;
			/* a lease that ended before the mark woke nobody: look again */
			if (capped)
				continue;
		}

		/* sleep until the earliest of: the end, the next due task, the hint */
		wake = nw_wake_at(&lk, now, until);
		hint = NtaskWaiterHint(&woken);
		if (hint != 0)
			wake = Min(wake, hint);
		timeout_ms = woken ? 0 : (long) ((Max(wake - now, 0) + 999) / 1000);
		nw_sleep(timeout_ms);

		/* the next look's leases count from the look */
		SetCurrentStatementStartTimestamp();
		c->waited_usecs = GetCurrentTimestamp() - start;
	}
	return got;
}

/*
 * NtaskClaimWait
 *		ntask_claim with a wait: claim (claim: NtaskClaimInto, which
 *		ntask_claim passes) at once if work is due, else sleep until a
 *		commit makes work of queue due, its next task comes due, or wait
 *		(capped by ntask.max_wait) has passed, and look again.  Returns how
 *		many tasks it leased (0 when the wait ran out).  Runs inside the
 *		caller's SPI connection.
 *
 * Refused in some transactions (nw_refuse).  statement_timestamp() is
 * moved to each look after the first, so a lease counts from the look
 * that took it, not from the start of the wait.
 */
int
NtaskClaimWait(ClaimCall *c, int64 wait_usecs, int (*claim) (ClaimCall *c))
{
	char	   *qname = text_to_cstring(c->queue);
	TimestampTz start;
	TimestampTz until;
	volatile int got = 0;
	volatile bool filled = false;

	nw_refuse();
	wait_usecs = Min(wait_usecs, (int64) ntask_max_wait_ms * 1000);
	start = GetCurrentTimestamp();
	until = start + wait_usecs;
	c->waited_usecs = 0;

	/*
	 * Work due at once: claim it without a waiter slot, whose lock every busy
	 * worker would otherwise take (register, rearm, unregister) on every
	 * claim.  Else, registered, the loop looks again: a commit after this
	 * look either wakes that one or is seen by it.
	 */
	{
		bool		gate = nw_ungated_db != MyDatabaseId || strcmp(nw_ungated, qname) != 0;
		NwLook		lk;

		got = nw_look(c, claim, &gate, &lk);
		if (got > 0 || lk.wrote)
			return got;
		got = 0;
	}

	NtaskWaiterRegister(qname, c->max_tasks, until);
	PG_TRY();
	{
		got = nw_wait_loop(c, claim, qname, start, until);
		filled = got >= c->max_tasks;
	}
	PG_FINALLY();
	{
		NtaskWaiterUnregister(filled);
	}
	PG_END_TRY();
	return got;
}
