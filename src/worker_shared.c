/*-------------------------------------------------------------------------
 *
 * worker_shared.c
 *	  The background worker's shared memory state, its ntask.worker_stats
 *	  counters, the wake-at-commit of enqueuing backends and the worker's
 *	  transaction helper.
 *
 * Everything here is used by more than one file: the loop (worker.c), the
 * dispatch (dispatch.c) and the SQL functions that wake the worker
 * (enqueue.c, lease.c, queue.c).  Keeping it apart lets the dependency
 * run one way, worker.c -> dispatch.c -> worker_shared.c, and a backend
 * that only enqueues links nothing of the loop or of curl.
 *
 * The state is one small struct behind a spinlock: every access copies a
 * few fields in or out, never calls anything while holding it.
 *
 * IDENTIFICATION
 *	  src/worker_shared.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(ntask_worker_stats);

#define WK_STATE_LEN 32
#define WK_ERROR_LEN 256

typedef struct NtaskWorkerShared
{
	slock_t		mutex;
	pid_t		pid;			/* 0: not running */
	Latch	   *latch;			/* the worker's latch, for wake-at-commit */
	char		state[WK_STATE_LEN];
	TimestampTz started_at;
	TimestampTz last_tick;
	int64		counters[NTASK_NCOUNTERS];	/* NtaskCounter order */
	int			in_flight;
	char		last_error[WK_ERROR_LEN];
	TimestampTz last_error_at;
} NtaskWorkerShared;

static NtaskWorkerShared *ws_shared = NULL;

/* this backend enqueued in the current transaction: wake at commit */
static bool ws_wake_pending = false;
static bool ws_callback_registered = false;

static void ws_xact_callback(XactEvent event, void *arg);

/* NtaskShmemRequest: reserve the shared state (shmem_request time) */
void
NtaskShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(NtaskWorkerShared)));
}

/* NtaskShmemStartup: attach to (or create) the shared state */
void
NtaskShmemStartup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	ws_shared = ShmemInitStruct("ntask worker", sizeof(NtaskWorkerShared), &found);
	if (!found)
	{
		memset(ws_shared, 0, sizeof(NtaskWorkerShared));
		SpinLockInit(&ws_shared->mutex);
		strlcpy(ws_shared->state, "not started", WK_STATE_LEN);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ---- the worker's slot ---- */

/*
 * NtaskWorkerRunningPid
 *		The pid of the running worker, 0 if none.
 */
pid_t
NtaskWorkerRunningPid(void)
{
	pid_t		pid;

	SpinLockAcquire(&ws_shared->mutex);
	pid = ws_shared->pid;
	SpinLockRelease(&ws_shared->mutex);
	return pid;
}

/*
 * NtaskWorkerTakeSlot
 *		Become the worker: record this process's pid and latch, unless
 *		another worker holds the slot.  Returns 0 on success, else the
 *		other worker's pid (and changes nothing).
 */
pid_t
NtaskWorkerTakeSlot(void)
{
	pid_t		other;

	SpinLockAcquire(&ws_shared->mutex);
	other = ws_shared->pid;
	if (other == 0)
	{
		ws_shared->pid = MyProcPid;
		ws_shared->latch = MyLatch;
		ws_shared->started_at = GetCurrentTimestamp();
	}
	SpinLockRelease(&ws_shared->mutex);
	return other;
}

/*
 * NtaskWorkerReleaseSlot
 *		The worker exits: forget its pid and latch (before the PGPROC is
 *		reused).
 */
void
NtaskWorkerReleaseSlot(void)
{
	SpinLockAcquire(&ws_shared->mutex);
	ws_shared->pid = 0;
	ws_shared->latch = NULL;
	ws_shared->in_flight = 0;
	strlcpy(ws_shared->state, "stopped", WK_STATE_LEN);
	SpinLockRelease(&ws_shared->mutex);
}

/* NtaskWorkerSetState: worker_stats.state (and pg_stat_activity's query) */
void
NtaskWorkerSetState(const char *state)
{
	SpinLockAcquire(&ws_shared->mutex);
	strlcpy(ws_shared->state, state, WK_STATE_LEN);
	SpinLockRelease(&ws_shared->mutex);
	pgstat_report_activity(STATE_IDLE, state);
}

/*
 * NtaskWorkerNotStarted
 *		The launcher cannot start the worker: state "not started" and the
 *		reason as last_error.
 */
void
NtaskWorkerNotStarted(const char *problem)
{
	SpinLockAcquire(&ws_shared->mutex);
	strlcpy(ws_shared->state, "not started", WK_STATE_LEN);
	strlcpy(ws_shared->last_error, problem, WK_ERROR_LEN);
	ws_shared->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&ws_shared->mutex);
}

/* NtaskWorkerSetLastTick: worker_stats.last_tick */
void
NtaskWorkerSetLastTick(TimestampTz now)
{
	SpinLockAcquire(&ws_shared->mutex);
	ws_shared->last_tick = now;
	SpinLockRelease(&ws_shared->mutex);
}

/* ---- wake at commit ---- */

/*
 * NtaskWakeWorkerAtCommit
 *		Called by enqueue: set the worker's latch when this transaction
 *		commits (never before: the worker would not see the task yet).  No
 *		lock, no pg_notify; a no-op without shared_preload_libraries.
 */
void
NtaskWakeWorkerAtCommit(void)
{
	if (ws_shared == NULL)
		return;
	if (!ws_callback_registered)
	{
		RegisterXactCallback(ws_xact_callback, NULL);
		ws_callback_registered = true;
	}
	ws_wake_pending = true;
}

/* ws_xact_callback: at commit, set the worker's latch if a wake is pending */
static void
ws_xact_callback(XactEvent event, void *arg)
{
	Latch	   *latch;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (!ws_wake_pending)
				break;
			ws_wake_pending = false;
			SpinLockAcquire(&ws_shared->mutex);
			latch = ws_shared->latch;
			SpinLockRelease(&ws_shared->mutex);
			if (latch != NULL)
				SetLatch(latch);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			ws_wake_pending = false;
			break;
		default:
			break;
	}
}

/* ---- counters ---- */

/* NtaskWorkerCount: add n to one of the worker_stats counters. */
void
NtaskWorkerCount(NtaskCounter counter, int64 n)
{
	if (ws_shared == NULL || n == 0)
		return;
	SpinLockAcquire(&ws_shared->mutex);
	ws_shared->counters[counter] += n;
	SpinLockRelease(&ws_shared->mutex);
}

/* NtaskWorkerSetInFlight: worker_stats.in_flight */
void
NtaskWorkerSetInFlight(int n)
{
	if (ws_shared == NULL)
		return;
	SpinLockAcquire(&ws_shared->mutex);
	ws_shared->in_flight = n;
	SpinLockRelease(&ws_shared->mutex);
}

/*
 * NtaskWorkerError
 *		Remember the last error for worker_stats (the message only: callers
 *		never put header values or bodies into it).
 */
void
NtaskWorkerError(const char *msg)
{
	if (ws_shared == NULL)
		return;
	SpinLockAcquire(&ws_shared->mutex);
	strlcpy(ws_shared->last_error, msg, WK_ERROR_LEN);
	ws_shared->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&ws_shared->mutex);
}

/* ---- the transaction helper ---- */

/*
 * NtaskWorkerRunXact
 *		Run fn(arg) in its own transaction with an SPI connection and a
 *		snapshot, and commit.  An ERROR is caught: logged as "ntask worker:
 *		<what> failed", remembered for worker_stats, the transaction rolled
 *		back; returns false then.  Never leaves a transaction open.
 */
bool
NtaskWorkerRunXact(void (*fn) (void *arg), void *arg, const char *what)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool ok = true;

	SetCurrentStatementStartTimestamp();
	PG_TRY();
	{
		/* statement_timeout is not armed by anything else in a bgworker */
		enable_timeout_after(STATEMENT_TIMEOUT, ntask_worker_statement_timeout_ms);
		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, what);
		fn(arg);
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
		disable_timeout(STATEMENT_TIMEOUT, false);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		disable_timeout(STATEMENT_TIMEOUT, false);
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		NtaskWorkerError(edata->message);
		ereport(LOG,
				(errmsg("ntask worker: %s failed: %s", what, edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	return ok;
}

/* ---- ntask.worker_stats ---- */

/*
 * ntask_worker_stats() RETURNS TABLE(pid, state, started_at, last_tick,
 *		dispatched, accepted, transient, permanent, unknown, reconciled,
 *		in_flight, expired_leases, repaired, pruned, last_error,
 *		last_error_at, database, breaker_opened, breaker_closed,
 *		breaker_probes, breaker_skips)
 *
 * One row from shared memory; all NULL but state when ntask is not in
 * shared_preload_libraries.
 */
Datum
ntask_worker_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[21];
	bool		nulls[21];
	NtaskWorkerShared copy;
	int			c = 0;
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "ntask: return type must be a row type");
	memset(nulls, 0, sizeof(nulls));

	if (ws_shared == NULL)
	{
		memset(nulls, true, sizeof(nulls));
		nulls[1] = false;
		values[1] = CStringGetTextDatum("not preloaded");
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
	}
	SpinLockAcquire(&ws_shared->mutex);
	memcpy(&copy, ws_shared, sizeof(copy));
	SpinLockRelease(&ws_shared->mutex);

	values[c] = Int32GetDatum(copy.pid);
	nulls[c++] = copy.pid == 0;
	values[c++] = CStringGetTextDatum(copy.state);
	values[c] = TimestampTzGetDatum(copy.started_at);
	nulls[c++] = copy.started_at == 0;
	values[c] = TimestampTzGetDatum(copy.last_tick);
	nulls[c++] = copy.last_tick == 0;
	for (i = NTASK_COUNT_DISPATCHED; i <= NTASK_COUNT_RECONCILED; i++)
		values[c++] = Int64GetDatum(copy.counters[i]);
	values[c++] = Int32GetDatum(copy.in_flight);
	for (i = NTASK_COUNT_EXPIRED_LEASES; i <= NTASK_COUNT_PRUNED; i++)
		values[c++] = Int64GetDatum(copy.counters[i]);
	values[c] = CStringGetTextDatum(copy.last_error);
	nulls[c++] = copy.last_error[0] == '\0';
	values[c] = TimestampTzGetDatum(copy.last_error_at);
	nulls[c++] = copy.last_error_at == 0;
	values[c++] = DirectFunctionCall1(namein, CStringGetDatum(ntask_database));
	for (i = NTASK_COUNT_BREAKER_OPENED; i < NTASK_NCOUNTERS; i++)
		values[c++] = Int64GetDatum(copy.counters[i]);
	Assert(c == 21);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
