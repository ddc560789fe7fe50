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
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "launcher.h"
#include "ntask_worker.h"
#include "shard.h"
#include "spi_util.h"
#include "worker_settings.h"
#include "worker_shared.h"

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
	bool		distributed;	/* ntask.task is distributed by Citus */
	bool		coordinator;	/* and this node is the Citus coordinator */
} WkExtension;

/* one housekeeping step's input and output */
typedef struct WkTick
{
	int64		counts[3];		/* expired, repaired, pruned */
	WkExtension ext;			/* the extension as seen in that step */
} WkTick;

/* one shard's housekeeping step on a distributed install */
typedef struct WkShardTick
{
	int			i;				/* the shard value's index in ntask.shard_map */
	int			n;				/* how many shard values */
	int64		counts[3];		/* expired, repaired, pruned */
} WkShardTick;

/* what the launcher passes to a worker or probe in bgw_extra */
typedef struct WkStart
{
	Oid			roleoid;
	int			slot;
	bool		probe;
} WkStart;

/* the launcher's view of one database (launcher-local memory) */
typedef enum WkDbStatus
{
	WKDB_UNKNOWN,				/* never probed */
	WKDB_ABSENT,				/* no ntask there (or the probe failed) */
	WKDB_OVER,					/* ntask there, but no place left */
	WKDB_BOUND					/* a slot is bound to it */
} WkDbStatus;

typedef struct WkDb
{
	Oid			oid;
	char		name[NAMEDATALEN];
	WkDbStatus	status;
	TimestampTz next_probe;
	bool		warned;			/* the max_databases WARNING was given */
	bool		seen;			/* in the last pg_database scan */
} WkDb;

/* the launcher's handle of what runs in each slot */
typedef struct WkSlot
{
	BackgroundWorkerHandle *handle; /* NULL: nothing started */
	bool		probe;
	TimestampTz started;
	TimestampTz restart_at;		/* a serving slot's worker stopped */
} WkSlot;

static WkExtension wk_ext;
static bool wk_idle = false;	/* a Citus worker node: no housekeeping, no
								 * dispatch */
static char wk_dbname[NAMEDATALEN];

static void wk_extension_step(void *arg);
static void wk_housekeeping(void);
static void wk_pin_settings(void);
static void wk_exit(int code, Datum arg);
static void wk_launcher_exit(int code, Datum arg);

/*
 * A database without ntask (or with it, but over ntask.max_databases) is
 * probed again after ten naptimes, at least 1 s, at most 60 s.  CREATE
 * EXTENSION ntask wakes the launcher at once.
 */
static long
wk_probe_interval_ms(void)
{
	return Min(Max(10L * ntask_naptime_ms, 1000L), 60000L);
}

/*
 * wk_launcher_scan
 *		Read ntask.worker_role and the databases a worker may serve from the
 *		shared catalogs.  Marks every entry of dbs seen or not, appends new
 *		ones.  False with a sentence in problem if the role will not do.
 *
 *		A database qualifies when it allows connections, is not a template
 *		(a session in it would make CREATE DATABASE ... TEMPLATE fail), is
 *		named by ntask.database if that is set, and grants CONNECT to
 *		PUBLIC or to the worker role directly (the default ACL does; CREATE
 *		EXTENSION grants it to the role): a probe of any other would only
 *		fail to connect, each time.
 */
static bool
wk_launcher_scan(Oid *roleoid, WkDb **dbs, int *ndbs, int *maxdbs,
				 char *problem, size_t len)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	bool		super = false;
	bool		login = false;
	int			i;

	/*
	 * Connected to no database, only the shared catalogs can be read, and
	 * only by heap scans: their indexes' relcache entries need a database
	 * (the logical replication launcher reads pg_subscription the same way).
	 * Both catalogs are small.
	 */
	*roleoid = InvalidOid;
	problem[0] = '\0';
	for (i = 0; i < *ndbs; i++)
		(*dbs)[i].seen = false;
	StartTransactionCommand();
	(void) GetTransactionSnapshot();

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

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database d = (Form_pg_database) GETSTRUCT(tup);
		bool		isnull;
		Datum		acld;
		bool		connect = true;

		if (!d->datallowconn || d->datistemplate)
			continue;
		if (ntask_database[0] != '\0' && strcmp(NameStr(d->datname), ntask_database) != 0)
			continue;
		acld = heap_getattr(tup, Anum_pg_database_datacl, RelationGetDescr(rel), &isnull);
		if (!isnull && OidIsValid(*roleoid))
		{
			Acl		   *acl = DatumGetAclPCopy(acld);
			AclItem    *items;
			int			k;

			/* an aclitem[] is one-dimensional without NULLs (check_acl) */
			connect = false;
			if (ARR_NDIM(acl) == 1 && !ARR_HASNULL(acl))
			{
				items = (AclItem *) (((char *) acl) + ARR_OVERHEAD_NONULLS(1));
				for (k = 0; k < ACL_NUM(acl); k++)
					if ((items[k].ai_grantee == ACL_ID_PUBLIC ||
						 items[k].ai_grantee == *roleoid) &&
						(ACLITEM_GET_PRIVS(items[k]) & ACL_CONNECT))
						connect = true;
			}
			pfree(acl);
		}
		if (!connect)
			continue;
		for (i = 0; i < *ndbs; i++)
			if ((*dbs)[i].oid == d->oid)
				break;
		if (i == *ndbs)
		{
			if (*ndbs == *maxdbs)
			{
				*maxdbs *= 2;
				*dbs = repalloc(*dbs, sizeof(WkDb) * *maxdbs);
			}
			memset(&(*dbs)[i], 0, sizeof(WkDb));
			(*dbs)[i].oid = d->oid;
			(*dbs)[i].status = WKDB_UNKNOWN;
			(*ndbs)++;
		}
		strlcpy((*dbs)[i].name, NameStr(d->datname), NAMEDATALEN);
		(*dbs)[i].seen = true;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	if (!OidIsValid(*roleoid))
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
 * wk_launch
 *		Start a probe or the worker in slot i for database db.  False (and
 *		the caller retries later) when no background worker slot is free.
 */
static bool
wk_launch(WkSlot *ls, int i, WkDb *db, Oid roleoid, bool probe)
{
	BackgroundWorker bgw;
	WkStart		start;
	static bool warned_slots = false;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(bgw.bgw_library_name, "ntask", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "ntask_worker_main", BGW_MAXLEN);
	snprintf(bgw.bgw_name, BGW_MAXLEN, "ntask %s %s", probe ? "probe" : "worker",
			 db->name);
	strlcpy(bgw.bgw_type, probe ? "ntask probe" : "ntask worker", BGW_MAXLEN);
	bgw.bgw_main_arg = ObjectIdGetDatum(db->oid);
	memset(&start, 0, sizeof(start));
	start.roleoid = roleoid;
	start.slot = i;
	start.probe = probe;
	StaticAssertStmt(sizeof(WkStart) <= BGW_EXTRALEN, "WkStart fits bgw_extra");
	memcpy(bgw.bgw_extra, &start, sizeof(start));
	bgw.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&bgw, &ls[i].handle))
	{
		ls[i].handle = NULL;
		if (!warned_slots)
			ereport(LOG,
					(errmsg("ntask launcher: no free background worker slot for the %s of database \"%s\"",
							probe ? "probe" : "worker", db->name),
					 errhint("Raise max_worker_processes.")));
		warned_slots = true;
		return false;
	}
	warned_slots = false;
	ls[i].probe = probe;
	ls[i].started = GetCurrentTimestamp();
	return true;
}

/* the launcher's state between rounds (launcher-local memory) */
typedef struct WkLauncher
{
	WkSlot	   *ls;				/* what runs in each slot */
	int			nslots;
	WkDb	   *dbs;			/* the databases a worker may serve */
	int			ndbs;
	int			maxdbs;
	uint32		generation;		/* NtaskLauncherProbeGeneration() seen */
	char		last_problem[256];	/* logged; empty: none */
	Oid			roleoid;		/* ntask.worker_role, this round */
	TimestampTz now;			/* this round's time */
} WkLauncher;

/* wk_find_db: the index of database dboid in L->dbs, L->ndbs if absent */
static int
wk_find_db(WkLauncher *L, Oid dboid)
{
	int			d;

	for (d = 0; d < L->ndbs; d++)
		if (L->dbs[d].oid == dboid)
			break;
	return d;
}

/*
 * wk_launcher_stop_orphans
 *		Slots of a launcher that exited before this one (an ERROR; a crash
 *		would have reset shared memory): their workers run without a
 *		handle.  Stop them, wait (at most 10 s) until they are gone, and
 *		start afresh, so that no database ever has two workers.
 */
static void
wk_launcher_stop_orphans(int nslots)
{
	for (int i = 0; i < nslots; i++)
	{
		pid_t		pid = NtaskSlotPid(i);

		if (pid != 0)
			(void) kill(pid, SIGTERM);
	}
	for (int round = 0; round < 100; round++)
	{
		bool		left = false;

		for (int i = 0; i < nslots; i++)
		{
			pid_t		pid = NtaskSlotPid(i);

			if (pid != 0 && kill(pid, 0) == 0)
				left = true;
		}
		if (!left)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	for (int i = 0; i < nslots; i++)
		NtaskSlotFree(i);
}

/*
 * wk_launcher_reap
 *		Phase 1: reap what stopped.  A probe that found ntask keeps its
 *		slot (it becomes the worker's in wk_launcher_serve); a stopped
 *		worker is started again later.  True if a slot came free.
 */
static bool
wk_launcher_reap(WkLauncher *L)
{
	bool		freed = false;

	for (int i = 0; i < L->nslots; i++)
	{
		WkSlot	   *sl = &L->ls[i];
		pid_t		pid;
		int			probe;
		TimestampTz hold;
		Oid			dboid;
		int			d;

		if (sl->handle == NULL)
			continue;
		if (GetBackgroundWorkerPid(sl->handle, &pid) != BGWH_STOPPED)
			continue;
		pfree(sl->handle);
		sl->handle = NULL;
		dboid = NtaskSlotPeek(i, &probe, &hold);
		d = wk_find_db(L, dboid);
		if (sl->probe || probe == NTASK_PROBE_ABSENT)
		{
			/*
			 * A probe ended, or the worker saw the extension dropped: an
			 * installed database keeps the slot (it becomes the worker's
			 * below), any other frees it.
			 */
			if (sl->probe && probe == NTASK_PROBE_INSTALLED && d < L->ndbs &&
				L->dbs[d].seen)
				continue;		/* served below */
			NtaskSlotFree(i);
			freed = true;
			if (d < L->ndbs)
			{
				L->dbs[d].status = WKDB_ABSENT;
				L->dbs[d].next_probe = TimestampTzPlusMilliseconds(L->now,
																   wk_probe_interval_ms());
			}
		}
		else
		{
			/*
			 * the worker stopped: start it again, not at once if it ran
			 * briefly
			 */
			sl->restart_at = TimestampTzPlusMilliseconds(L->now,
														 TimestampDifferenceExceeds(sl->started, L->now, 5000) ? 100 : 5000);
		}
	}
	return freed;
}

/*
 * wk_launcher_unbind
 *		Phase 2: stop, then free, the slots whose database no longer
 *		qualifies (mark the others' bound); say once when ntask.database
 *		names no database that qualifies; forget the databases that are
 *		gone.  True if a slot came free.
 */
static bool
wk_launcher_unbind(WkLauncher *L)
{
	static bool warned_missing = false;
	bool		freed = false;
	bool		any = false;
	int			d;

	for (int i = 0; i < L->nslots; i++)
	{
		int			probe;
		TimestampTz hold;
		Oid			dboid = NtaskSlotPeek(i, &probe, &hold);

		if (!OidIsValid(dboid))
			continue;
		d = wk_find_db(L, dboid);
		if (d < L->ndbs && L->dbs[d].seen)
		{
			L->dbs[d].status = WKDB_BOUND;
			NtaskSlotRename(i, L->dbs[d].name);
			continue;
		}
		if (L->ls[i].handle != NULL)
			TerminateBackgroundWorker(L->ls[i].handle); /* reaped later */
		else
		{
			NtaskSlotFree(i);
			freed = true;
		}
	}

	for (d = 0; d < L->ndbs; d++)
		any |= L->dbs[d].seen;
	if (ntask_database[0] != '\0' && !any && !warned_missing)
		ereport(LOG,
				(errmsg("ntask launcher: database \"%s\" (ntask.database) does not exist, refuses connections, is a template or does not grant CONNECT to the worker role; no worker is started",
						ntask_database)));
	warned_missing = ntask_database[0] != '\0' && !any;

	for (d = 0; d < L->ndbs;)
	{
		if (!L->dbs[d].seen)
			L->dbs[d] = L->dbs[--L->ndbs];
		else
			d++;
	}
	return freed;
}

/*
 * wk_launcher_note_problem
 *		Log the role's problem once (while it lasts, nothing new starts;
 *		what runs goes on).  True if there is none.
 */
static bool
wk_launcher_note_problem(WkLauncher *L, const char *problem)
{
	if (!OidIsValid(L->roleoid) || problem[0] != '\0')
	{
		if (strcmp(problem, L->last_problem) != 0)
			ereport(LOG,
					(errmsg("ntask launcher: %s; no worker is started", problem)));
		strlcpy(L->last_problem, problem, sizeof(L->last_problem));
	}
	else
		L->last_problem[0] = '\0';
	return L->last_problem[0] == '\0';
}

/* wk_launcher_serving: how many slots hold (or are about to hold) a worker */
static int
wk_launcher_serving(WkLauncher *L)
{
	int			nserving = 0;

	for (int i = 0; i < L->nslots; i++)
	{
		WkSlot	   *sl = &L->ls[i];
		int			probe;
		TimestampTz hold;
		Oid			dboid = NtaskSlotPeek(i, &probe, &hold);

		if (OidIsValid(dboid) && !(sl->handle != NULL && sl->probe) &&
			!(sl->handle == NULL && sl->probe && probe == NTASK_PROBE_INSTALLED))
			nserving++;
	}
	return nserving;
}

/*
 * wk_launcher_serve
 *		Phases 3 and 4: a probe that found ntask gets the worker's place if
 *		one is left (ntask.max_databases); then start the worker of each
 *		serving slot that has none (new, or again after it stopped).
 *		Returns how many slots serve.
 */
static int
wk_launcher_serve(WkLauncher *L, int nserving)
{
	for (int i = 0; i < L->nslots; i++)
	{
		WkSlot	   *sl = &L->ls[i];
		int			probe;
		TimestampTz hold;
		Oid			dboid = NtaskSlotPeek(i, &probe, &hold);
		WkDb	   *db;
		int			d;

		if (!OidIsValid(dboid) || sl->handle != NULL || hold > L->now)
			continue;
		d = wk_find_db(L, dboid);
		if (d == L->ndbs)
			continue;
		db = &L->dbs[d];
		if (sl->probe)
		{
			/* 3. a probe found ntask: the worker's place, if one is left */
			if (nserving >= ntask_max_databases)
			{
				if (!db->warned)
					ereport(WARNING,
							(errmsg("ntask launcher: database \"%s\" has ntask, but ntask.max_databases (%d) databases already have a worker; it gets none",
									db->name, ntask_max_databases),
							 errhint("Raise ntask.max_databases (needs a restart), or drop the extension where it is not used.")));
				db->warned = true;
				db->status = WKDB_OVER;
				db->next_probe = TimestampTzPlusMilliseconds(L->now, wk_probe_interval_ms());
				NtaskSlotFree(i);
				sl->probe = false;
				continue;
			}
			NtaskSlotServe(i);
			sl->probe = false;
			db->warned = false;
			nserving++;
			sl->restart_at = 0;
		}
		/* 4. start the worker (new, or again after it stopped) */
		if (L->now >= sl->restart_at)
			(void) wk_launch(L->ls, i, db, L->roleoid, false);
	}
	return nserving;
}

/*
 * wk_launcher_probe
 *		Phase 5: probe the databases no slot is bound to, when due, while
 *		a slot is free (the others at the next round).
 */
static void
wk_launcher_probe(WkLauncher *L)
{
	for (int d = 0; d < L->ndbs; d++)
	{
		int			i;

		if (L->dbs[d].status == WKDB_BOUND || L->dbs[d].next_probe > L->now)
			continue;
		for (i = 0; i < L->nslots; i++)
		{
			int			probe;
			TimestampTz hold;

			if (!OidIsValid(NtaskSlotPeek(i, &probe, &hold)) && L->ls[i].handle == NULL)
				break;
		}
		if (i == L->nslots)
			break;				/* every slot busy: at the next round */
		NtaskSlotBind(i, L->dbs[d].oid, L->dbs[d].name, false);
		if (!wk_launch(L->ls, i, &L->dbs[d], L->roleoid, true))
		{
			NtaskSlotFree(i);
			break;
		}
		L->dbs[d].status = WKDB_BOUND;
	}
}

/*
 * wk_launcher_round
 *		One round: read the role and the databases, reap (1), unbind (2),
 *		probe at once where CREATE EXTENSION ntask committed or a place
 *		came free, and unless the role will not do, serve (3, 4) and probe
 *		(5); then publish the problem and the count for ntask_worker_status.
 */
static void
wk_launcher_round(WkLauncher *L)
{
	char		problem[256];
	MemoryContext oldcxt;
	bool		freed;
	int			nserving;
	uint32		g;

	L->now = GetCurrentTimestamp();
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	(void) wk_launcher_scan(&L->roleoid, &L->dbs, &L->ndbs, &L->maxdbs, problem,
							sizeof(problem));
	MemoryContextSwitchTo(oldcxt);

	freed = wk_launcher_reap(L);
	freed |= wk_launcher_unbind(L);

	/* CREATE EXTENSION ntask committed, or a place came free: probe now */
	g = NtaskLauncherProbeGeneration();
	for (int d = 0; d < L->ndbs; d++)
		if ((g != L->generation && L->dbs[d].status == WKDB_ABSENT) ||
			(freed && L->dbs[d].status == WKDB_OVER))
			L->dbs[d].next_probe = 0;
	L->generation = g;

	nserving = wk_launcher_serving(L);
	if (wk_launcher_note_problem(L, problem))
	{
		nserving = wk_launcher_serve(L, nserving);
		wk_launcher_probe(L);
	}
	NtaskLauncherSetProblem(L->last_problem, nserving);
}

/*
 * ntask_launcher_main
 *		Entry point of the launcher (docs/worker.md "One worker per
 *		database"): find the databases a worker may serve, probe each
 *		for the extension with a short-lived "ntask probe", start an
 *		"ntask worker" where it is installed (at most ntask.max_databases),
 *		start a stopped one again, stop one whose database is gone.  Runs
 *		no SQL and no user code; never waits for a worker in a blocking
 *		call (it polls the handles when the postmaster reports a start or
 *		a stop, bgw_notify_pid, or its latch times out).
 */
void
ntask_launcher_main(Datum arg)
{
	WkLauncher	L;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("ntask launcher");

	memset(&L, 0, sizeof(L));
	L.nslots = NtaskWorkerSlots();
	L.maxdbs = 16;
	L.ls = MemoryContextAllocZero(TopMemoryContext, sizeof(WkSlot) * L.nslots);
	L.dbs = MemoryContextAllocZero(TopMemoryContext, sizeof(WkDb) * L.maxdbs);

	wk_launcher_stop_orphans(L.nslots);
	NtaskLauncherAttach();
	on_shmem_exit(wk_launcher_exit, (Datum) 0);
	L.generation = NtaskLauncherProbeGeneration();

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		wk_launcher_round(&L);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(Max(ntask_naptime_ms, 100), 1000), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* wk_launcher_exit: on_shmem_exit of the launcher */
static void
wk_launcher_exit(int code, Datum arg)
{
	NtaskLauncherDetach();
}

/*
 * wk_extension_step
 *		*(WkExtension *) arg = ntask's extension OID and the schema of its
 *		API functions, or InvalidOid if ntask is not installed here; and
 *		whether ntask_distribute made it a Citus layout.
 */
typedef enum WkExtCol
{
	WK_EXT_OID = 1,
	WK_EXT_SCHEMA				/* name */
} WkExtCol;

static void
wk_extension_step(void *arg)
{
	WkExtension *ext = (WkExtension *) arg;

	ext->oid = InvalidOid;
	ext->schema[0] = '\0';
	if (SPI_execute("SELECT e.oid, n.nspname::pg_catalog.text FROM pg_catalog.pg_extension e "
					"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace "
					"WHERE e.extname OPERATOR(pg_catalog.=) 'ntask'",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
	{
		SPITupleTable *tt = SPI_tuptable;
		bool		isnull;

		ext->oid = DatumGetObjectId(NtaskTupGetDatum(tt, 0, WK_EXT_OID, &isnull));
		strlcpy(ext->schema, NtaskTupGetCString(tt, 0, WK_EXT_SCHEMA), NAMEDATALEN);
	}
	ext->distributed = false;
	ext->coordinator = false;
	if (OidIsValid(ext->oid))
		NtaskCitusLayout(&ext->distributed, &ext->coordinator);
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

/* wk_shard_count_step: how many shard values (ntask.shard_map) */
static void
wk_shard_count_step(void *arg)
{
	((WkShardTick *) arg)->n = NtaskShardCount();
}

/* wk_shard_step: the sweeps of one shard, its own transaction */
static void
wk_shard_step(void *arg)
{
	WkShardTick *s = (WkShardTick *) arg;

	if (s->i < NtaskShardCount())
		NtaskHousekeepShard(NtaskShardValue(s->i), 1000, true, s->counts);
}

/* wk_history_dist_step: the history step of a distributed install */
static void
wk_history_dist_step(void *arg)
{
	WkTick	   *t = (WkTick *) arg;

	NtaskHousekeepHistoryDist(1000);
	wk_extension_step(&t->ext);
}

/*
 * wk_housekeeping_dist
 *		The coordinator's round on a distributed install: one transaction
 *		per shard value, each statement routed to the shard's node, so a
 *		worker node that is down fails the steps of its own shards only
 *		(logged, retried next tick) and no transaction holds row locks on
 *		several nodes (nor needs two-phase commit) but the history step's.
 *		Then the history and the extension check, in one more transaction.
 */
static void
wk_housekeeping_dist(WkTick *t)
{
	WkShardTick s;
	int			i;

	memset(&s, 0, sizeof(s));
	if (!NtaskWorkerRunXact(wk_shard_count_step, &s, "ntask housekeeping: shard map"))
		s.n = 0;
	for (i = 0; i < s.n; i++)
	{
		s.i = i;
		s.counts[0] = s.counts[1] = s.counts[2] = 0;
		if (NtaskWorkerRunXact(wk_shard_step, &s, "ntask housekeeping of a shard"))
		{
			t->counts[0] += s.counts[0];
			t->counts[1] += s.counts[1];
			t->counts[2] += s.counts[2];
		}
	}
	if (!NtaskWorkerRunXact(wk_history_dist_step, t, "ntask housekeeping: history"))
		(void) NtaskWorkerRunXact(wk_extension_step, &t->ext,
								  "ntask worker: look for the extension");
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
	if (wk_ext.distributed && !wk_ext.coordinator)
		(void) NtaskWorkerRunXact(wk_extension_step, &t.ext,
								  "ntask worker: look for the extension");
	else if (wk_ext.distributed)
	{
		wk_housekeeping_dist(&t);
		NtaskWorkerCount(NTASK_COUNT_EXPIRED_LEASES, t.counts[0]);
		NtaskWorkerCount(NTASK_COUNT_REPAIRED, t.counts[1]);
		NtaskWorkerCount(NTASK_COUNT_PRUNED, t.counts[2]);
	}
	else if (!NtaskWorkerRunXact(wk_housekeeping_step, &t, "ntask housekeeping"))
		(void) NtaskWorkerRunXact(wk_extension_step, &t.ext,
								  "ntask worker: look for the extension");
	else
	{
		NtaskWorkerCount(NTASK_COUNT_EXPIRED_LEASES, t.counts[0]);
		NtaskWorkerCount(NTASK_COUNT_REPAIRED, t.counts[1]);
		NtaskWorkerCount(NTASK_COUNT_PRUNED, t.counts[2]);
	}
	if (OidIsValid(t.ext.oid) && t.ext.oid == wk_ext.oid &&
		(t.ext.distributed != wk_ext.distributed ||
		 t.ext.coordinator != wk_ext.coordinator))
	{
		ereport(LOG,
				(errmsg("ntask worker: ntask in database \"%s\" was distributed with Citus; restarting",
						wk_dbname)));
		proc_exit(1);
	}
	if (t.ext.oid != wk_ext.oid)
	{
		if (!OidIsValid(t.ext.oid))
		{
			NtaskWorkerSetProbe(NTASK_PROBE_ABSENT);
			ereport(LOG,
					(errmsg("ntask worker: extension ntask was dropped in database \"%s\"; exiting",
							wk_dbname)));
			proc_exit(0);
		}
		ereport(LOG,
				(errmsg("ntask worker: extension ntask was recreated in database \"%s\"; restarting",
						wk_dbname)));
		proc_exit(1);
	}
}

/* the worker loop's clock between rounds */
typedef struct WkLoop
{
	TimestampTz next_tick;		/* housekeeping and a look for due tasks */
	TimestampTz next_refresh;	/* the http queues reread at most so often */
	bool		refresh_pending;	/* a wake-up came before next_refresh */
} WkLoop;

/* the http queues are reread at most every 100 ms however fast wakes come */
#define WK_REFRESH_USECS (100 * 1000)

/*
 * wk_worker_start
 *		Connect to the database as the role the launcher chose, take the
 *		slot, look for the extension.  A probe says what it saw and exits
 *		(the launcher starts the worker where it is installed); so does a
 *		worker that finds no extension, or another worker in its place.
 */
static void
wk_worker_start(Datum arg)
{
	WkStart		start;
	pid_t		other;
	char		appname[NAMEDATALEN];

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	memcpy(&start, MyBgworkerEntry->bgw_extra, sizeof(start));
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(arg), start.roleoid, 0);
	pgstat_report_appname(start.probe ? "ntask probe" : "ntask worker");
	wk_pin_settings();

	other = NtaskWorkerTakeSlot(start.slot);
	if (other != 0)
	{
		if (other > 0)
			ereport(LOG,
					(errmsg("ntask worker: another worker (pid %d) is running in this database; exiting",
							(int) other)));
		proc_exit(0);
	}
	on_shmem_exit(wk_exit, (Datum) 0);

	StartTransactionCommand();
	{
		char	   *name = get_database_name(MyDatabaseId);

		strlcpy(wk_dbname, name ? name : "?", NAMEDATALEN);
	}
	CommitTransactionCommand();

	(void) NtaskWorkerRunXact(wk_extension_step, &wk_ext,
							  "ntask worker: look for the extension");
	if (start.probe || !OidIsValid(wk_ext.oid))
	{
		NtaskWorkerSetProbe(OidIsValid(wk_ext.oid) ? NTASK_PROBE_INSTALLED :
							NTASK_PROBE_ABSENT);
		proc_exit(0);
	}

	snprintf(appname, sizeof(appname), "ntask worker %s", wk_dbname);
	pgstat_report_appname(appname);
	NtaskDispatchInit(wk_ext.schema);
	wk_idle = wk_ext.distributed && !wk_ext.coordinator;
	if (wk_idle)
	{
		/*
		 * A Citus worker node (docs/scaling.md "Background worker,
		 * housekeeping and dispatch"): the coordinator's worker sweeps every
		 * shard and dispatches, since clients, task ids and claims go through
		 * the coordinator.  This one stays, says so once, and only watches
		 * the extension (DROP EXTENSION still stops it).
		 */
		NtaskWorkerSetState("idle: citus worker node");
		ereport(LOG,
				(errmsg("ntask worker: ntask in database \"%s\" is distributed with Citus and this node is a worker node; the coordinator's ntask worker serves the cluster",
						wk_dbname),
				 errhint("Set ntask.worker = off on the worker nodes to spare the background worker slot.")));
	}
	else
	{
		NtaskWorkerSetState("running");
		ereport(LOG,
				(errmsg("ntask worker started in database \"%s\" as role \"%s\"",
						wk_dbname, ntask_worker_role)));
	}
}

/* wk_refresh: reread the http queues now */
static void
wk_refresh(WkLoop *w, TimestampTz now)
{
	NtaskDispatchRefreshQueues();
	w->refresh_pending = false;
	w->next_refresh = now + WK_REFRESH_USECS;
}

/*
 * wk_worker_round
 *		Interrupts and a reload, then the tick (housekeeping, the queues
 *		reread) when due, or a deferred refresh, then a look for due http
 *		tasks if woken, ticking, or the last claim was full.  True when
 *		more may be due at once (no sleep).
 */
static bool
wk_worker_round(WkLoop *w)
{
	TimestampTz now;
	bool		woken = false;

	/*
	 * A query cancel (pg_cancel_backend) that reaches the worker while it is
	 * between steps has nothing to cancel: outside a transaction it would
	 * become FATAL and drop the transfers in flight.  During a step it
	 * cancels that step (caught, rolled back, retried).
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
		w->next_tick = Min(w->next_tick, GetCurrentTimestamp() +
						   (TimestampTz) ntask_naptime_ms * 1000);
	}

	now = GetCurrentTimestamp();
	if (now >= w->next_tick)
	{
		NtaskWorkerSetLastTick(now);
		wk_housekeeping();
		if (!wk_idle)
			NtaskDispatchRefreshQueues();
		w->refresh_pending = false;
		w->next_refresh = now + WK_REFRESH_USECS;
		w->next_tick = now + (TimestampTz) ntask_naptime_ms * 1000;
		woken = true;			/* look for due tasks every tick */
	}
	else if (w->refresh_pending && now >= w->next_refresh && !wk_idle)
	{
		/* a wake-up came within 100 ms of the last refresh: do it now */
		wk_refresh(w, now);
		woken = true;
	}

	return !wk_idle && NtaskDispatchTick(woken);
}

/*
 * wk_worker_sleep
 *		Sleep until the latch is set, a transfer has something to do
 *		(curl's sockets and timeouts are in the same wait), a result is due
 *		to be recorded again, or the next tick or deferred refresh; on a
 *		wake-up, reread the queues (or defer it) and look for due tasks.
 */
static void
wk_worker_sleep(WkLoop *w)
{
	TimestampTz until = w->refresh_pending ? Min(w->next_tick, w->next_refresh) :
	w->next_tick;
	long		wait_ms = (long) ((until - GetCurrentTimestamp()) / 1000);
	long		stats_ms;
	int			rc;
	TimestampTz woke;

	/*
	 * Report this process's table and function statistics, as a backend does
	 * before it waits for a command: a background worker's are otherwise kept
	 * until it exits, so autovacuum would not count the dead rows of its
	 * claims, transitions and retention.  At most once a second
	 * (PGSTAT_MIN_INTERVAL); what is left pending shortens this wait.
	 */
	stats_ms = pgstat_report_stat(false);
	if (stats_ms > 0)
		wait_ms = Min(wait_ms, stats_ms);
	rc = NtaskDispatchWait(Max(wait_ms, 0) + 1);
	if (!(rc & WL_LATCH_SET))
		return;

	woke = GetCurrentTimestamp();
	ResetLatch(MyLatch);

	/*
	 * An enqueue (or a queue change) committed: the queue may be new since
	 * the last tick, so reread the http queues, at most every 100 ms however
	 * fast enqueues come.
	 */
	if (wk_idle)
		return;					/* nothing to dispatch */
	if (woke >= w->next_refresh)
		wk_refresh(w, woke);
	else
		w->refresh_pending = true;	/* deferred, never dropped */
	(void) NtaskDispatchTick(true);
}

/*
 * ntask_worker_main
 *		Entry point of the worker, started by the launcher with the
 *		database OID as argument and the role OID in bgw_extra.
 */
void
ntask_worker_main(Datum arg)
{
	WkLoop		w;

	wk_worker_start(arg);
	memset(&w, 0, sizeof(w));
	for (;;)
	{
		if (wk_worker_round(&w))
			continue;			/* more may be due at once */
		wk_worker_sleep(&w);
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
