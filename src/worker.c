/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The ntask background worker: registration, shared state, the main
 *	  loop, wake-at-commit and the ntask.worker_stats counters.
 *
 * The loop (docs/worker.md):
 *
 *	every ntask.naptime		housekeeping (ntask_housekeeping: expired
 *							leases, deadlines, retention) and a look for
 *							due http tasks
 *	latch set				an enqueue committed: look for due http tasks
 *	transfers in flight		curl is polled in slices of at most 10 ms, the
 *							latch and interrupts are checked between slices
 *
 * Each database step is its own short transaction; none is open while
 * curl runs.  An ERROR in a step is caught, logged, counted in
 * worker_stats.last_error and the loop goes on; the step's transaction is
 * rolled back, so at worst an attempt stays open until its lease expires
 * (and an invoked one then counts as outcome unknown).
 *
 * SIGTERM uses die(): the next CHECK_FOR_INTERRUPTS (at most 10 ms away
 * while transfers are in flight) exits; in-flight transfers are dropped.
 *
 * IDENTIFICATION
 *	  src/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(ntask_worker_stats);

PGDLLEXPORT void ntask_worker_main(Datum arg);

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

static NtaskWorkerShared *wk_shared = NULL;

/* this backend enqueued in the current transaction: wake at commit */
static bool wk_wake_pending = false;
static bool wk_callback_registered = false;

static void wk_xact_callback(XactEvent event, void *arg);
static void wk_set_state(const char *state);
static void wk_extension_schema_step(void *arg);
static void wk_housekeeping(bool deadlines);
static void wk_exit(int code, Datum arg);

void
NtaskShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(NtaskWorkerShared)));
}

void
NtaskShmemStartup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	wk_shared = ShmemInitStruct("ntask worker", sizeof(NtaskWorkerShared), &found);
	if (!found)
	{
		memset(wk_shared, 0, sizeof(NtaskWorkerShared));
		SpinLockInit(&wk_shared->mutex);
		strlcpy(wk_shared->state, "not started", WK_STATE_LEN);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * NtaskWorkerRegister
 *		Register the worker (from _PG_init under shared_preload_libraries).
 *		It starts only once recovery has finished: a standby has none, a
 *		promoted standby starts one.
 */
void
NtaskWorkerRegister(void)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = 5;
	strlcpy(bgw.bgw_library_name, "ntask", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "ntask_worker_main", BGW_MAXLEN);
	strlcpy(bgw.bgw_name, "ntask worker", BGW_MAXLEN);
	strlcpy(bgw.bgw_type, "ntask worker", BGW_MAXLEN);
	RegisterBackgroundWorker(&bgw);
}

/*
 * NtaskWakeWorkerAtCommit
 *		Called by enqueue: set the worker's latch when this transaction
 *		commits (never before: the worker would not see the task yet).  No
 *		lock, no pg_notify; a no-op without shared_preload_libraries.
 */
void
NtaskWakeWorkerAtCommit(void)
{
	if (wk_shared == NULL)
		return;
	if (!wk_callback_registered)
	{
		RegisterXactCallback(wk_xact_callback, NULL);
		wk_callback_registered = true;
	}
	wk_wake_pending = true;
}

static void
wk_xact_callback(XactEvent event, void *arg)
{
	Latch	   *latch;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (!wk_wake_pending)
				break;
			wk_wake_pending = false;
			SpinLockAcquire(&wk_shared->mutex);
			latch = wk_shared->latch;
			SpinLockRelease(&wk_shared->mutex);
			if (latch != NULL)
				SetLatch(latch);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			wk_wake_pending = false;
			break;
		default:
			break;
	}
}

/* NtaskWorkerCount: add n to one of the worker_stats counters. */
void
NtaskWorkerCount(NtaskCounter counter, int64 n)
{
	if (wk_shared == NULL || n == 0)
		return;
	SpinLockAcquire(&wk_shared->mutex);
	wk_shared->counters[counter] += n;
	SpinLockRelease(&wk_shared->mutex);
}

void
NtaskWorkerSetInFlight(int n)
{
	if (wk_shared == NULL)
		return;
	SpinLockAcquire(&wk_shared->mutex);
	wk_shared->in_flight = n;
	SpinLockRelease(&wk_shared->mutex);
}

/*
 * NtaskWorkerError
 *		Remember the last error for worker_stats (the message only: callers
 *		never put header values or bodies into it).
 */
void
NtaskWorkerError(const char *msg)
{
	if (wk_shared == NULL)
		return;
	SpinLockAcquire(&wk_shared->mutex);
	strlcpy(wk_shared->last_error, msg, WK_ERROR_LEN);
	wk_shared->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&wk_shared->mutex);
}

static void
wk_set_state(const char *state)
{
	SpinLockAcquire(&wk_shared->mutex);
	strlcpy(wk_shared->state, state, WK_STATE_LEN);
	SpinLockRelease(&wk_shared->mutex);
	pgstat_report_activity(STATE_IDLE, state);
}

/*
 * wk_extension_schema_step
 *		*(char **) arg = the schema of ntask's API functions (allocated in
 *		TopMemoryContext), or stays NULL if ntask is not installed here.
 */
static void
wk_extension_schema_step(void *arg)
{
	if (SPI_execute("SELECT n.nspname::text FROM pg_catalog.pg_extension e "
					"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace "
					"WHERE e.extname OPERATOR(pg_catalog.=) 'ntask'",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
		*(char **) arg = MemoryContextStrdup(TopMemoryContext,
											 NtaskGetCString(0, 1));
}

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
	StartTransactionCommand();
	PG_TRY();
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, what);
		fn(arg);
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

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

static void
wk_housekeeping_step(void *arg)
{
	int64	   *n = (int64 *) arg;

	NtaskHousekeep(1000, n[3] != 0, n);
}

/* wk_housekeeping: one ntask_housekeeping() round; counts the results */
static void
wk_housekeeping(bool deadlines)
{
	int64		n[4] = {0, 0, 0, deadlines};

	if (NtaskWorkerRunXact(wk_housekeeping_step, n, "ntask housekeeping"))
	{
		NtaskWorkerCount(NTASK_COUNT_EXPIRED_LEASES, n[0]);
		NtaskWorkerCount(NTASK_COUNT_REPAIRED, n[1]);
		NtaskWorkerCount(NTASK_COUNT_PRUNED, n[2]);
	}
	else
	{
		char	   *schema = NULL;

		/* DROP EXTENSION: start over (the restart waits for it again) */
		(void) NtaskWorkerRunXact(wk_extension_schema_step, &schema,
								  "ntask worker: look for the extension");
		if (schema == NULL)
		{
			ereport(LOG,
					(errmsg("ntask worker: extension ntask is gone from database \"%s\"; restarting",
							ntask_database)));
			proc_exit(1);
		}
	}
}

/*
 * ntask_worker_main
 *		Entry point of the background worker.
 */
void
ntask_worker_main(Datum arg)
{
	char	   *schema = NULL;
	TimestampTz next_tick = 0;
	TimestampTz next_deadline_sweep = 0;
	TimestampTz next_refresh = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(ntask_database, NULL, 0);
	pgstat_report_appname("ntask worker");

	SpinLockAcquire(&wk_shared->mutex);
	wk_shared->pid = MyProcPid;
	wk_shared->latch = MyLatch;
	wk_shared->started_at = GetCurrentTimestamp();
	SpinLockRelease(&wk_shared->mutex);
	on_shmem_exit(wk_exit, (Datum) 0);

	ereport(LOG,
			(errmsg("ntask worker started in database \"%s\"", ntask_database)));

	for (;;)
	{
		TimestampTz now;
		bool		woken;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* a shorter ntask.naptime takes effect now, not at the old tick */
			next_tick = Min(next_tick, GetCurrentTimestamp() +
							(TimestampTz) ntask_naptime_ms * 1000);
		}

		if (schema == NULL)
		{
			(void) NtaskWorkerRunXact(wk_extension_schema_step, &schema,
									  "ntask worker: look for the extension");
			if (schema != NULL)
			{
				NtaskDispatchInit(schema);
				wk_set_state("running");
				next_tick = 0;
			}
			else
			{
				wk_set_state("waiting_for_extension");
				rc = WaitLatch(MyLatch,
							   WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   ntask_naptime_ms, PG_WAIT_EXTENSION);
				ResetLatch(MyLatch);
				continue;
			}
		}

		now = GetCurrentTimestamp();
		woken = false;
		if (now >= next_tick)
		{
			bool		deadlines = now >= next_deadline_sweep;

			SpinLockAcquire(&wk_shared->mutex);
			wk_shared->last_tick = now;
			SpinLockRelease(&wk_shared->mutex);
			wk_housekeeping(deadlines);
			if (deadlines)
				next_deadline_sweep = now + 60 * USECS_PER_SEC;
			NtaskDispatchRefreshQueues();
			next_refresh = now + 100 * 1000;
			next_tick = now + (TimestampTz) ntask_naptime_ms * 1000;
			woken = true;		/* look for due tasks every tick */
		}

		/* look for work if woken, ticking, or the last claim was full */
		if (NtaskDispatchTick(woken))
			continue;			/* more may be due at once */

		if (NtaskDispatchInFlight() > 0)
		{
			NtaskDispatchPoll(10);
			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						   0, PG_WAIT_EXTENSION);
		}
		else
		{
			long		wait_ms = (long) ((next_tick - GetCurrentTimestamp()) / 1000);

			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						   Max(wait_ms, 0) + 1, PG_WAIT_EXTENSION);
		}
		if (rc & WL_LATCH_SET)
		{
			TimestampTz woke = GetCurrentTimestamp();

			ResetLatch(MyLatch);

			/*
			 * An enqueue (or a queue change) committed: the queue may be new
			 * since the last tick, so reread the http queues, at most every
			 * 100 ms however fast enqueues come.
			 */
			if (woke >= next_refresh)
			{
				NtaskDispatchRefreshQueues();
				next_refresh = woke + 100 * 1000;
			}
			(void) NtaskDispatchTick(true);
		}
	}
}

/*
 * wk_exit
 *		on_shmem_exit: forget the latch before the PGPROC is reused.
 */
static void
wk_exit(int code, Datum arg)
{
	SpinLockAcquire(&wk_shared->mutex);
	wk_shared->pid = 0;
	wk_shared->latch = NULL;
	wk_shared->in_flight = 0;
	strlcpy(wk_shared->state, "stopped", WK_STATE_LEN);
	SpinLockRelease(&wk_shared->mutex);
}

/*
 * ntask_worker_stats() RETURNS TABLE(pid, state, started_at, last_tick,
 *		dispatched, accepted, transient, permanent, unknown, reconciled,
 *		in_flight, expired_leases, repaired, pruned, last_error,
 *		last_error_at)
 *
 * One row from shared memory; all NULL but state when ntask is not in
 * shared_preload_libraries.
 */
Datum
ntask_worker_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[16];
	bool		nulls[16];
	NtaskWorkerShared copy;
	int			c = 0;
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "ntask: return type must be a row type");
	memset(nulls, 0, sizeof(nulls));

	if (wk_shared == NULL)
	{
		memset(nulls, true, sizeof(nulls));
		nulls[1] = false;
		values[1] = CStringGetTextDatum("not preloaded");
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
	}
	SpinLockAcquire(&wk_shared->mutex);
	memcpy(&copy, wk_shared, sizeof(copy));
	SpinLockRelease(&wk_shared->mutex);

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
	for (i = NTASK_COUNT_EXPIRED_LEASES; i < NTASK_NCOUNTERS; i++)
		values[c++] = Int64GetDatum(copy.counters[i]);
	values[c] = CStringGetTextDatum(copy.last_error);
	nulls[c++] = copy.last_error[0] == '\0';
	values[c] = TimestampTzGetDatum(copy.last_error_at);
	nulls[c++] = copy.last_error_at == 0;
	Assert(c == 16);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
