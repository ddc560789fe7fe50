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
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/worker_shared.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "launcher.h"
#include "shard.h"
#include "wake.h"
#include "worker_settings.h"
#include "worker_shared.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "commands/dbcommands.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(ntask_worker_stats);

#define WK_STATE_LEN 32
#define WK_ERROR_LEN 256

/*
 * One slot per database that has (or is being probed for) a worker.  The
 * launcher binds a slot to a database (dboid, dbname) and unbinds it; the
 * process started into it (a probe or the worker) sets pid and latch.
 * The counters belong to the slot, so a worker restarted in the same
 * database continues them.
 */
typedef struct NtaskDbSlot
{
	slock_t		mutex;
	Oid			dboid;			/* InvalidOid: free */
	char		dbname[NAMEDATALEN];
	bool		serving;		/* the launcher gave the database a worker */
	int			probe;			/* NTASK_PROBE_*: what the last process saw */
	pid_t		pid;			/* 0: nothing runs in the slot */
	Latch	   *latch;			/* the worker's latch, for wake-at-commit */
	TimestampTz hold_until;		/* DDL on the database: start nothing before */
	char		state[WK_STATE_LEN];
	TimestampTz started_at;
	TimestampTz last_tick;
	int64		counters[NTASK_NCOUNTERS];	/* NtaskCounter order */
	int			in_flight;
	char		last_error[WK_ERROR_LEN];
	TimestampTz last_error_at;
} NtaskDbSlot;

typedef struct NtaskWorkerShared
{
	slock_t		mutex;			/* the fields up to slots */
	Latch	   *launcher_latch;
	uint32		probe_generation;	/* CREATE EXTENSION ntask committed */
	int			nserving;		/* slots with serving set (the launcher's count) */
	char		problem[WK_ERROR_LEN];	/* why the launcher starts nothing */
	NtaskDbSlot slots[FLEXIBLE_ARRAY_MEMBER];	/* NtaskWorkerSlots() */
} NtaskWorkerShared;

static NtaskWorkerShared *ws_shared = NULL;
static NtaskDbSlot *ws_my_slot = NULL;	/* the worker's (or probe's) own */
static int	ws_cached_slot = -1;	/* where MyDatabaseId's worker was found */

/* this backend enqueued in the current transaction: wake at commit */
static bool ws_wake_pending = false;
/* this transaction created the extension: wake the launcher at commit */
static bool ws_launcher_wake_pending = false;
static bool ws_callback_registered = false;

static void ws_xact_callback(XactEvent event, void *arg);
static void ws_register_callback(void);

/* NtaskWorkerSlots: ntask.max_databases slots for workers, one for probes */
int
NtaskWorkerSlots(void)
{
	return ntask_max_databases + 1;
}

static Size
ws_size(void)
{
	return add_size(offsetof(NtaskWorkerShared, slots),
					mul_size(NtaskWorkerSlots(), sizeof(NtaskDbSlot)));
}

/* NtaskShmemRequest: reserve the shared state (shmem_request time) */
void
NtaskShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(ws_size()));
}

/* NtaskShmemStartup: attach to (or create) the shared state */
void
NtaskShmemStartup(void)
{
	bool		found;
	int			i;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	ws_shared = ShmemInitStruct("ntask worker", ws_size(), &found);
	if (!found)
	{
		memset(ws_shared, 0, ws_size());
		SpinLockInit(&ws_shared->mutex);
		for (i = 0; i < NtaskWorkerSlots(); i++)
		{
			SpinLockInit(&ws_shared->slots[i].mutex);
			strlcpy(ws_shared->slots[i].state, "not started", WK_STATE_LEN);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ---- the launcher's side ---- */

/* NtaskLauncherAttach: the launcher's latch, for wakes from backends */
void
NtaskLauncherAttach(void)
{
	SpinLockAcquire(&ws_shared->mutex);
	ws_shared->launcher_latch = MyLatch;
	SpinLockRelease(&ws_shared->mutex);
}

/* NtaskLauncherDetach: on_shmem_exit of the launcher */
void
NtaskLauncherDetach(void)
{
	SpinLockAcquire(&ws_shared->mutex);
	ws_shared->launcher_latch = NULL;
	SpinLockRelease(&ws_shared->mutex);
}

/* NtaskLauncherProbeGeneration: bumped by each CREATE EXTENSION ntask */
uint32
NtaskLauncherProbeGeneration(void)
{
	uint32		g;

	SpinLockAcquire(&ws_shared->mutex);
	g = ws_shared->probe_generation;
	SpinLockRelease(&ws_shared->mutex);
	return g;
}

/*
 * NtaskLauncherSetProblem
 *		Why the launcher starts nothing ("" when it can), and how many
 *		databases have a worker; read by worker_stats where none runs.
 */
void
NtaskLauncherSetProblem(const char *problem, int nserving)
{
	SpinLockAcquire(&ws_shared->mutex);
	strlcpy(ws_shared->problem, problem, WK_ERROR_LEN);
	ws_shared->nserving = nserving;
	SpinLockRelease(&ws_shared->mutex);
}

/*
 * NtaskSlotBind
 *		Bind slot i to a database: a probe (serving false) or a worker's
 *		place (serving true).  Counters start at zero.
 */
void
NtaskSlotBind(int i, Oid dboid, const char *dbname, bool serving)
{
	NtaskDbSlot *s = &ws_shared->slots[i];

	SpinLockAcquire(&s->mutex);
	memset(&s->dbname, 0, sizeof(*s) - offsetof(NtaskDbSlot, dbname));
	s->dboid = dboid;
	strlcpy(s->dbname, dbname, NAMEDATALEN);
	s->serving = serving;
	s->probe = NTASK_PROBE_NONE;
	strlcpy(s->state, "starting", WK_STATE_LEN);
	SpinLockRelease(&s->mutex);
}

/* NtaskSlotServe: a probed slot becomes the database's worker place */
void
NtaskSlotServe(int i)
{
	NtaskDbSlot *s = &ws_shared->slots[i];

	SpinLockAcquire(&s->mutex);
	s->serving = true;
	s->probe = NTASK_PROBE_NONE;
	SpinLockRelease(&s->mutex);
}

/* NtaskSlotRename: the database was renamed (same OID) */
void
NtaskSlotRename(int i, const char *dbname)
{
	NtaskDbSlot *s = &ws_shared->slots[i];

	SpinLockAcquire(&s->mutex);
	strlcpy(s->dbname, dbname, NAMEDATALEN);
	SpinLockRelease(&s->mutex);
}

/* NtaskSlotFree: unbind slot i */
void
NtaskSlotFree(int i)
{
	NtaskDbSlot *s = &ws_shared->slots[i];

	SpinLockAcquire(&s->mutex);
	s->dboid = InvalidOid;
	s->dbname[0] = '\0';
	s->serving = false;
	s->pid = 0;
	s->latch = NULL;
	s->hold_until = 0;
	strlcpy(s->state, "not started", WK_STATE_LEN);
	SpinLockRelease(&s->mutex);
}

/* NtaskSlotPid: the process running in slot i, 0 if none */
pid_t
NtaskSlotPid(int i)
{
	NtaskDbSlot *s = &ws_shared->slots[i];
	pid_t		pid;

	SpinLockAcquire(&s->mutex);
	pid = s->pid;
	SpinLockRelease(&s->mutex);
	return pid;
}

/*
 * NtaskSlotPeek
 *		Slot i's database, what its last process saw and until when
 *		nothing may start in it.
 */
Oid
NtaskSlotPeek(int i, int *probe, TimestampTz *hold_until)
{
	NtaskDbSlot *s = &ws_shared->slots[i];
	Oid			dboid;

	SpinLockAcquire(&s->mutex);
	dboid = s->dboid;
	*probe = s->probe;
	*hold_until = s->hold_until;
	SpinLockRelease(&s->mutex);
	return dboid;
}

/*
 * NtaskWorkerHoldDatabase
 *		A statement that needs the database without other sessions (DROP
 *		DATABASE, ALTER DATABASE RENAME or SET TABLESPACE, CREATE DATABASE
 *		with it as template) is about to run: stop the worker or probe in
 *		it (SIGTERM, as pg_terminate_backend would) and start none there
 *		for NTASK_HOLD_MS, so that the statement's wait for the other
 *		sessions to leave (up to 5 s in PostgreSQL 15) ends at once.  Once
 *		the statement holds its lock, a new worker could not connect anyway.
 */
void
NtaskWorkerHoldDatabase(const char *dbname)
{
	int			i;
	bool		held = false;
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), NTASK_HOLD_MS);
	Latch	   *latch;

	if (ws_shared == NULL || dbname == NULL)
		return;
	for (i = 0; i < NtaskWorkerSlots(); i++)
	{
		NtaskDbSlot *s = &ws_shared->slots[i];
		pid_t		pid = 0;

		SpinLockAcquire(&s->mutex);
		if (OidIsValid(s->dboid) && strcmp(s->dbname, dbname) == 0)
		{
			s->hold_until = until;
			pid = s->pid;
			held = true;
		}
		SpinLockRelease(&s->mutex);
		if (pid != 0)
			(void) kill(pid, SIGTERM);
	}
	if (!held)
		return;
	SpinLockAcquire(&ws_shared->mutex);
	latch = ws_shared->launcher_latch;
	SpinLockRelease(&ws_shared->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/* ---- the worker's slot ---- */

/*
 * NtaskWorkerTakeSlot
 *		Become the process of slot i (a worker or a probe): record this
 *		process's pid and latch, unless the slot is bound to another
 *		database or another process holds it.  Returns 0 on success, else
 *		the other process's pid, or -1 if the slot is not this database's.
 */
pid_t
NtaskWorkerTakeSlot(int i)
{
	NtaskDbSlot *s;
	pid_t		other;

	if (i < 0 || i >= NtaskWorkerSlots())
		return -1;
	s = &ws_shared->slots[i];
	SpinLockAcquire(&s->mutex);
	if (s->dboid != MyDatabaseId)
		other = -1;
	else
		other = s->pid;
	if (other == 0)
	{
		s->pid = MyProcPid;
		s->latch = MyLatch;
		s->started_at = GetCurrentTimestamp();
	}
	SpinLockRelease(&s->mutex);
	if (other == 0)
		ws_my_slot = s;
	return other;
}

/*
 * NtaskWorkerReleaseSlot
 *		The worker or probe exits: forget its pid and latch (before the
 *		PGPROC is reused).
 */
void
NtaskWorkerReleaseSlot(void)
{
	NtaskDbSlot *s = ws_my_slot;

	if (s == NULL)
		return;
	SpinLockAcquire(&s->mutex);
	if (s->pid == MyProcPid)
	{
		s->pid = 0;
		s->latch = NULL;
		s->in_flight = 0;
		strlcpy(s->state, "stopped", WK_STATE_LEN);
	}
	SpinLockRelease(&s->mutex);
	ws_my_slot = NULL;
}

/* NtaskWorkerSetProbe: what this process saw (NTASK_PROBE_*) */
void
NtaskWorkerSetProbe(int probe)
{
	if (ws_my_slot == NULL)
		return;
	SpinLockAcquire(&ws_my_slot->mutex);
	ws_my_slot->probe = probe;
	SpinLockRelease(&ws_my_slot->mutex);
}

/* NtaskWorkerSetState: worker_stats.state (and pg_stat_activity's query) */
void
NtaskWorkerSetState(const char *state)
{
	if (ws_my_slot != NULL)
	{
		SpinLockAcquire(&ws_my_slot->mutex);
		strlcpy(ws_my_slot->state, state, WK_STATE_LEN);
		SpinLockRelease(&ws_my_slot->mutex);
	}
	pgstat_report_activity(STATE_IDLE, state);
}

/* NtaskWorkerSetLastTick: worker_stats.last_tick */
void
NtaskWorkerSetLastTick(TimestampTz now)
{
	if (ws_my_slot == NULL)
		return;
	SpinLockAcquire(&ws_my_slot->mutex);
	ws_my_slot->last_tick = now;
	SpinLockRelease(&ws_my_slot->mutex);
}

/* ---- wake at commit ---- */

static void
ws_register_callback(void)
{
	if (!ws_callback_registered)
	{
		RegisterXactCallback(ws_xact_callback, NULL);
		ws_callback_registered = true;
	}
}

/*
 * NtaskWakeWorkerAtCommit
 *		Called by enqueue: set the latch of this database's worker when
 *		this transaction commits (never before: the worker would not see
 *		the task yet).  No lock, no pg_notify; a no-op without
 *		shared_preload_libraries.
 */
void
NtaskWakeWorkerAtCommit(void)
{
	if (ws_shared == NULL)
		return;
	ws_register_callback();
	ws_wake_pending = true;
}

/*
 * NtaskWakeLauncherAtCommit
 *		CREATE EXTENSION ntask ran in this transaction: at commit, tell the
 *		launcher to probe the databases without a worker now rather than
 *		at their next periodic probe.
 */
void
NtaskWakeLauncherAtCommit(void)
{
	if (ws_shared == NULL)
		return;
	ws_register_callback();
	ws_launcher_wake_pending = true;
}

/*
 * ws_worker_latch
 *		The latch of the worker serving MyDatabaseId, NULL if none runs.
 *		The slot found last time is tried first.
 */
static Latch *
ws_worker_latch(void)
{
	int			n = NtaskWorkerSlots();
	int			k;

	for (k = -1; k < n; k++)
	{
		int			i = k < 0 ? ws_cached_slot : k;
		NtaskDbSlot *s;
		Latch	   *latch = NULL;
		bool		mine;

		if (i < 0 || (k >= 0 && i == ws_cached_slot))
			continue;
		s = &ws_shared->slots[i];
		SpinLockAcquire(&s->mutex);
		mine = s->dboid == MyDatabaseId && s->serving;
		if (mine)
			latch = s->latch;
		SpinLockRelease(&s->mutex);
		if (mine)
		{
			ws_cached_slot = i;
			return latch;
		}
	}
	return NULL;
}

/* ws_xact_callback: at commit, set the worker's (launcher's) latch */
static void
ws_xact_callback(XactEvent event, void *arg)
{
	Latch	   *latch;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (ws_wake_pending)
			{
				ws_wake_pending = false;
				latch = ws_worker_latch();
				if (latch != NULL)
					SetLatch(latch);
			}
			if (ws_launcher_wake_pending)
			{
				ws_launcher_wake_pending = false;
				SpinLockAcquire(&ws_shared->mutex);
				ws_shared->probe_generation++;
				latch = ws_shared->launcher_latch;
				SpinLockRelease(&ws_shared->mutex);
				if (latch != NULL)
					SetLatch(latch);
			}
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			ws_wake_pending = false;
			ws_launcher_wake_pending = false;
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
	if (ws_my_slot == NULL || n == 0)
		return;
	SpinLockAcquire(&ws_my_slot->mutex);
	ws_my_slot->counters[counter] += n;
	SpinLockRelease(&ws_my_slot->mutex);
}

/* NtaskWorkerSetInFlight: worker_stats.in_flight */
void
NtaskWorkerSetInFlight(int n)
{
	if (ws_my_slot == NULL)
		return;
	SpinLockAcquire(&ws_my_slot->mutex);
	ws_my_slot->in_flight = n;
	SpinLockRelease(&ws_my_slot->mutex);
}

/*
 * NtaskWorkerError
 *		Remember the last error for worker_stats (the message only: callers
 *		never put header values or bodies into it).
 */
void
NtaskWorkerError(const char *msg)
{
	if (ws_my_slot == NULL)
		return;
	SpinLockAcquire(&ws_my_slot->mutex);
	strlcpy(ws_my_slot->last_error, msg, WK_ERROR_LEN);
	ws_my_slot->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&ws_my_slot->mutex);
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
		/* whatever default_transaction_isolation says: a claim needs it */
		XactIsoLevel = XACT_READ_COMMITTED;
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
 * One row: the worker of the current database, from shared memory.  Where
 * no worker serves this database, state is "not started" and last_error
 * says why if the launcher knows (its role check, ntask.database naming
 * another database, ntask.max_databases reached).  All NULL but state
 * when ntask is not in shared_preload_libraries.
 */

/*
 * The columns of ntask_worker_stats (0-based, values[] indexes), the
 * counters in the runs of NtaskCounter that the view shows together.
 */
typedef enum WsStatCol
{
	WS_COL_PID,
	WS_COL_STATE,
	WS_COL_STARTED_AT,
	WS_COL_LAST_TICK,
	WS_COL_DISPATCHED,			/* NTASK_COUNT_DISPATCHED..RECONCILED */
	WS_COL_IN_FLIGHT = WS_COL_DISPATCHED +
	(NTASK_COUNT_RECONCILED - NTASK_COUNT_DISPATCHED + 1),
	WS_COL_EXPIRED_LEASES,		/* NTASK_COUNT_EXPIRED_LEASES..PRUNED */
	WS_COL_LAST_ERROR = WS_COL_EXPIRED_LEASES +
	(NTASK_COUNT_PRUNED - NTASK_COUNT_EXPIRED_LEASES + 1),
	WS_COL_LAST_ERROR_AT,
	WS_COL_DATABASE,
	WS_COL_BREAKER_OPENED,		/* NTASK_COUNT_BREAKER_OPENED.. */
	WS_STAT_COLS = WS_COL_BREAKER_OPENED +
	(NTASK_NCOUNTERS - NTASK_COUNT_BREAKER_OPENED)
} WsStatCol;

Datum
ntask_worker_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[WS_STAT_COLS];
	bool		nulls[WS_STAT_COLS];
	NtaskDbSlot copy;
	bool		found = false;
	int			c = 0;
	int			i;
	char	   *dbname;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "ntask: return type must be a row type");
	memset(nulls, 0, sizeof(nulls));

	if (ws_shared == NULL)
	{
		memset(nulls, true, sizeof(nulls));
		nulls[WS_COL_STATE] = false;
		values[WS_COL_STATE] = CStringGetTextDatum("not preloaded");
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
	}
	for (i = 0; i < NtaskWorkerSlots() && !found; i++)
	{
		NtaskDbSlot *s = &ws_shared->slots[i];

		SpinLockAcquire(&s->mutex);
		if (s->dboid == MyDatabaseId && s->serving)
		{
			memcpy(&copy, s, sizeof(copy));
			found = true;
		}
		SpinLockRelease(&s->mutex);
	}
	dbname = get_database_name(MyDatabaseId);
	if (!found)
	{
		char		problem[WK_ERROR_LEN];
		int			nserving;

		memset(&copy, 0, sizeof(copy));
		strlcpy(copy.state, "not started", WK_STATE_LEN);
		SpinLockAcquire(&ws_shared->mutex);
		strlcpy(problem, ws_shared->problem, WK_ERROR_LEN);
		nserving = ws_shared->nserving;
		SpinLockRelease(&ws_shared->mutex);
		if (!ntask_worker_enabled)
			strlcpy(copy.last_error, "ntask.worker is off", WK_ERROR_LEN);
		else if (problem[0] != '\0')
			strlcpy(copy.last_error, problem, WK_ERROR_LEN);
		else if (ntask_database[0] != '\0' && dbname != NULL &&
				 strcmp(ntask_database, dbname) != 0)
			snprintf(copy.last_error, WK_ERROR_LEN,
					 "ntask.database is \"%s\": only that database has a worker",
					 ntask_database);
		else if (nserving >= ntask_max_databases)
			snprintf(copy.last_error, WK_ERROR_LEN,
					 "ntask.max_databases (%d) databases already have a worker",
					 ntask_max_databases);
	}

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
	values[c] = DirectFunctionCall1(namein, CStringGetDatum(dbname ? dbname : ""));
	nulls[c++] = dbname == NULL;
	for (i = NTASK_COUNT_BREAKER_OPENED; i < NTASK_NCOUNTERS; i++)
		values[c++] = Int64GetDatum(copy.counters[i]);
	Assert(c == WS_STAT_COLS);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * NtaskWorkerRegister
 *		Register the launcher (from _PG_init under shared_preload_libraries),
 *		by the name of its entry point (worker.c), which it does not call.
 *		It starts only once recovery has finished: a standby has none, a
 *		promoted standby starts one, and it starts the workers.
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
	strlcpy(bgw.bgw_function_name, "ntask_launcher_main", BGW_MAXLEN);
	strlcpy(bgw.bgw_name, "ntask launcher", BGW_MAXLEN);
	strlcpy(bgw.bgw_type, "ntask launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&bgw);
}
