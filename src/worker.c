/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The ntask background worker: the launcher, registration and the
 *	  main loop.  The shared state, the worker_stats counters, the
 *	  wake-at-commit and the transaction helper are in worker_shared.c;
 *	  HTTP dispatch is in dispatch.c (worker.c -> dispatch.c ->
 *	  worker_shared.c).
 *
 * Two processes (docs/worker.md "Identity"):
 *
 *	ntask launcher	registered at server start; connected to no database,
 *					it runs no SQL.  It checks that ntask.database exists
 *					and that ntask.worker_role exists, can log in and is not
 *					a superuser, then starts the worker as that role and
 *					waits for it; when it stops, starts it again.
 *	ntask worker	connected to ntask.database as ntask.worker_role; calls
 *					the SQL API like any external worker would, with
 *					search_path pinned and lock and statement timeouts.
 *
 * The loop (docs/worker.md):
 *
 *	every ntask.naptime		housekeeping (ntask_housekeeping: expired
 *							leases, deadlines, retention) and a look for
 *							due http tasks
 *	latch set				an enqueue committed: look for due http tasks
 *							(queues reread at most every 100 ms; a wake
 *							inside that window rereads when it ends)
 *	transfers in flight		one WaitEventSet holds the latch and curl's
 *							sockets (CURLMOPT_SOCKETFUNCTION), with curl's
 *							next timeout as its timeout: a response is
 *							handled as soon as it arrives, a wake-up at
 *							once, and an idle worker sleeps
 *
 * Each database step is its own short transaction; none is open while
 * curl runs.  An ERROR in a step is caught, logged, counted in
 * worker_stats.last_error and the loop goes on; the step's transaction is
 * rolled back, so at worst an attempt stays open until its lease expires
 * (and an invoked one then counts as outcome unknown).
 *
 * SIGTERM uses die(), which sets the latch: the wait returns at once and
 * the next CHECK_FOR_INTERRUPTS exits; in-flight transfers are dropped.
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
#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

PGDLLEXPORT void ntask_worker_main(Datum arg);
PGDLLEXPORT void ntask_launcher_main(Datum arg);

/* what the worker knows of the extension it serves */
typedef struct WkExtension
{
	Oid			oid;			/* InvalidOid: not installed */
	char		schema[NAMEDATALEN];
} WkExtension;

/* one housekeeping step's input and output */
typedef struct WkTick
{
	int64		counts[3];		/* expired, repaired, pruned */
	WkExtension ext;			/* the extension as seen in that step */
} WkTick;

static WkExtension wk_ext;

static void wk_extension_step(void *arg);
static void wk_housekeeping(void);
static void wk_pin_settings(void);
static void wk_exit(int code, Datum arg);
static bool wk_launcher_check(Oid *dboid, Oid *roleoid, char *problem,
							  size_t len);

/*
 * NtaskWorkerRegister
 *		Register the launcher (from _PG_init under shared_preload_libraries).
 *		It starts only once recovery has finished: a standby has none, a
 *		promoted standby starts one, and it starts the worker.
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

/*
 * wk_launcher_check
 *		Can the worker start?  Looks up ntask.database and ntask.worker_role
 *		in the shared catalogs.  False with a sentence in problem if not.
 */
static bool
wk_launcher_check(Oid *dboid, Oid *roleoid, char *problem, size_t len)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	bool		super = false;
	bool		login = false;

	/*
	 * Connected to no database, only the shared catalogs can be read, and
	 * only by heap scans: their indexes' relcache entries need a database
	 * (the logical replication launcher reads pg_subscription the same
	 * way).  Both catalogs are small.
	 */
	*dboid = InvalidOid;
	*roleoid = InvalidOid;
	problem[0] = '\0';
	StartTransactionCommand();
	(void) GetTransactionSnapshot();

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database d = (Form_pg_database) GETSTRUCT(tup);

		if (strcmp(NameStr(d->datname), ntask_database) == 0)
			*dboid = d->oid;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	rel = table_open(AuthIdRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_authid a = (Form_pg_authid) GETSTRUCT(tup);

		if (strcmp(NameStr(a->rolname), ntask_worker_role) == 0)
		{
			*roleoid = a->oid;
			super = a->rolsuper;
			login = a->rolcanlogin;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	if (!OidIsValid(*dboid))
		snprintf(problem, len, "database \"%s\" (ntask.database) does not exist",
				 ntask_database);
	else if (!OidIsValid(*roleoid))
		snprintf(problem, len,
				 "role \"%s\" (ntask.worker_role) does not exist; CREATE EXTENSION ntask creates ntask_bgworker",
				 ntask_worker_role);
	else if (super)
		snprintf(problem, len,
				 "role \"%s\" (ntask.worker_role) must not be a superuser",
				 ntask_worker_role);
	else if (!login)
		snprintf(problem, len, "role \"%s\" (ntask.worker_role) cannot log in",
				 ntask_worker_role);
	return problem[0] == '\0';
}

/*
 * ntask_launcher_main
 *		Entry point of the launcher: start the worker as ntask.worker_role,
 *		wait for it to stop, start it again.  Runs no SQL and no user code.
 */
void
ntask_launcher_main(Datum arg)
{
	char		last_problem[256] = "";

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("ntask launcher");

	for (;;)
	{
		char		problem[256];
		Oid			dboid;
		Oid			roleoid;
		pid_t		running;
		BackgroundWorker bgw;
		BackgroundWorkerHandle *handle;
		BgwHandleStatus status;
		pid_t		pid;
		TimestampTz started;
		long		pause_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		running = NtaskWorkerRunningPid();
		if (running != 0 || !wk_launcher_check(&dboid, &roleoid, problem,
											   sizeof(problem)))
		{
			/* a worker from an earlier launcher still runs, or it cannot */
			if (running == 0 && strcmp(problem, last_problem) != 0)
			{
				ereport(LOG,
						(errmsg("ntask launcher: %s; the worker is not started", problem)));
				strlcpy(last_problem, problem, sizeof(last_problem));
				NtaskWorkerNotStarted(problem);
			}
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Max(ntask_naptime_ms, 100), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			continue;
		}
		last_problem[0] = '\0';

		memset(&bgw, 0, sizeof(bgw));
		bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
		bgw.bgw_restart_time = BGW_NEVER_RESTART;
		strlcpy(bgw.bgw_library_name, "ntask", BGW_MAXLEN);
		strlcpy(bgw.bgw_function_name, "ntask_worker_main", BGW_MAXLEN);
		strlcpy(bgw.bgw_name, "ntask worker", BGW_MAXLEN);
		strlcpy(bgw.bgw_type, "ntask worker", BGW_MAXLEN);
		bgw.bgw_main_arg = ObjectIdGetDatum(dboid);
		memcpy(bgw.bgw_extra, &roleoid, sizeof(Oid));
		bgw.bgw_notify_pid = MyProcPid;

		started = GetCurrentTimestamp();
		if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		{
			ereport(LOG,
					(errmsg("ntask launcher: no free background worker slot for the worker"),
					 errhint("Raise max_worker_processes.")));
			pause_ms = 5000;
		}
		else
		{
			status = WaitForBackgroundWorkerStartup(handle, &pid);
			if (status == BGWH_POSTMASTER_DIED)
				proc_exit(1);
			if (status == BGWH_STARTED)
				status = WaitForBackgroundWorkerShutdown(handle);
			if (status == BGWH_POSTMASTER_DIED)
				proc_exit(1);
			pfree(handle);
			/* a worker that stops at once (cannot connect?) is not rushed */
			pause_ms = TimestampDifferenceExceeds(started, GetCurrentTimestamp(), 5000) ?
				100 : 5000;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 pause_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * wk_extension_step
 *		*(WkExtension *) arg = ntask's extension OID and the schema of its
 *		API functions, or InvalidOid if ntask is not installed here.
 */
static void
wk_extension_step(void *arg)
{
	WkExtension *ext = (WkExtension *) arg;

	ext->oid = InvalidOid;
	ext->schema[0] = '\0';
	if (SPI_execute("SELECT e.oid, n.nspname FROM pg_catalog.pg_extension e "
					"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace "
					"WHERE e.extname OPERATOR(pg_catalog.=) 'ntask'",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
	{
		bool		isnull;
		char	   *nsp = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

		ext->oid = DatumGetObjectId(NtaskGetDatum(0, 1, &isnull));
		strlcpy(ext->schema, nsp, NAMEDATALEN);
	}
}

/*
 * wk_pin_settings
 *		The worker's own settings, above anything ALTER DATABASE or ALTER
 *		ROLE can set: search_path (no user schema decides what a name in
 *		its statements means) and lock_timeout (a row lock held by someone
 *		else's open transaction fails one step, which is retried, instead
 *		of stalling dispatch and housekeeping).
 */
static void
wk_pin_settings(void)
{
	char		buf[32];

	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	snprintf(buf, sizeof(buf), "%d", ntask_worker_lock_timeout_ms);
	SetConfigOption("lock_timeout", buf, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
}

static void
wk_housekeeping_step(void *arg)
{
	WkTick	   *t = (WkTick *) arg;

	NtaskHousekeep(1000, true, t->counts);
	wk_extension_step(&t->ext);
}

/*
 * wk_housekeeping
 *		One ntask_housekeeping() round (deadlines every round: the sweep is
 *		an index range over past-deadline rows), counted in worker_stats.
 *		The extension is looked up in the same step: when it was dropped,
 *		or dropped and created again (other OID, maybe another schema), the
 *		worker exits and the launcher starts a fresh one, so no statement
 *		prepared for the old objects is used again.
 */
static void
wk_housekeeping(void)
{
	WkTick		t;

	memset(&t, 0, sizeof(t));
	if (!NtaskWorkerRunXact(wk_housekeeping_step, &t, "ntask housekeeping"))
		(void) NtaskWorkerRunXact(wk_extension_step, &t.ext,
								  "ntask worker: look for the extension");
	else
	{
		NtaskWorkerCount(NTASK_COUNT_EXPIRED_LEASES, t.counts[0]);
		NtaskWorkerCount(NTASK_COUNT_REPAIRED, t.counts[1]);
		NtaskWorkerCount(NTASK_COUNT_PRUNED, t.counts[2]);
	}
	if (t.ext.oid != wk_ext.oid)
	{
		ereport(LOG,
				(errmsg("ntask worker: extension ntask was dropped or recreated in database \"%s\"; restarting",
						ntask_database)));
		proc_exit(1);
	}
}

/*
 * ntask_worker_main
 *		Entry point of the worker, started by the launcher with the
 *		database OID as argument and the role OID in bgw_extra.
 */
void
ntask_worker_main(Datum arg)
{
	TimestampTz next_tick = 0;
	TimestampTz next_refresh = 0;
	bool		refresh_pending = false;
	Oid			roleoid;
	pid_t		other;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	memcpy(&roleoid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(arg), roleoid, 0);
	pgstat_report_appname("ntask worker");
	wk_pin_settings();

	other = NtaskWorkerTakeSlot();
	if (other != 0)
	{
		ereport(LOG,
				(errmsg("ntask worker: another worker (pid %d) is running; exiting",
						(int) other)));
		proc_exit(0);
	}
	on_shmem_exit(wk_exit, (Datum) 0);

	ereport(LOG,
			(errmsg("ntask worker started in database \"%s\" as role \"%s\"",
					ntask_database, ntask_worker_role)));

	for (;;)
	{
		TimestampTz now;
		bool		woken;
		int			rc;

		/*
		 * A query cancel (pg_cancel_backend) that reaches the worker while
		 * it is between steps has nothing to cancel: outside a transaction
		 * it would become FATAL and drop the transfers in flight.  During a
		 * step it cancels that step (caught, rolled back, retried).
		 */
		if (QueryCancelPending)
		{
			QueryCancelPending = false;
			ereport(LOG, (errmsg("ntask worker: query cancel ignored between steps")));
		}
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			wk_pin_settings();
			/* a shorter ntask.naptime takes effect now, not at the old tick */
			next_tick = Min(next_tick, GetCurrentTimestamp() +
							(TimestampTz) ntask_naptime_ms * 1000);
		}

		if (!OidIsValid(wk_ext.oid))
		{
			(void) NtaskWorkerRunXact(wk_extension_step, &wk_ext,
									  "ntask worker: look for the extension");
			if (OidIsValid(wk_ext.oid))
			{
				NtaskDispatchInit(wk_ext.schema);
				NtaskWorkerSetState("running");
				next_tick = 0;
			}
			else
			{
				NtaskWorkerSetState("waiting_for_extension");
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
			NtaskWorkerSetLastTick(now);
			wk_housekeeping();
			NtaskDispatchRefreshQueues();
			refresh_pending = false;
			next_refresh = now + 100 * 1000;
			next_tick = now + (TimestampTz) ntask_naptime_ms * 1000;
			woken = true;		/* look for due tasks every tick */
		}
		else if (refresh_pending && now >= next_refresh)
		{
			/* a wake-up came within 100 ms of the last refresh: do it now */
			NtaskDispatchRefreshQueues();
			refresh_pending = false;
			next_refresh = now + 100 * 1000;
			woken = true;
		}

		/* look for work if woken, ticking, or the last claim was full */
		if (NtaskDispatchTick(woken))
			continue;			/* more may be due at once */

		/*
		 * Sleep until the latch is set, a transfer has something to do
		 * (curl's sockets and timeouts are in the same wait), a result is
		 * due to be recorded again, or the next tick or deferred refresh.
		 */
		{
			TimestampTz until = refresh_pending ? Min(next_tick, next_refresh) : next_tick;
			long		wait_ms = (long) ((until - GetCurrentTimestamp()) / 1000);

			rc = NtaskDispatchWait(Max(wait_ms, 0) + 1);
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
				refresh_pending = false;
				next_refresh = woke + 100 * 1000;
			}
			else
				refresh_pending = true; /* deferred, never dropped */
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
	NtaskWorkerReleaseSlot();
}
