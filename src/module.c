/*-------------------------------------------------------------------------
 *
 * module.c
 *	  Module entry: PG_MODULE_MAGIC, _PG_init, the hooks and the ntask.*
 *	  GUCs (floor 2: it calls only the foundations beside it).
 *
 * ntask keeps durable tasks in the application's database and hands them
 * to workers under leases with fencing tokens.  This file owns only
 * start-up; each SQL function lives in the file named after its area
 * (enqueue.c, claim.c, transition.c, ...), the background worker in
 * worker.c (housekeeping.c, dispatch.c).  docs/worker.md describes the
 * worker's GUCs.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/module.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "compat.h"
#include "fair.h"
#include "launcher.h"
#include "limit.h"
#include "settings.h"
#include "shard.h"
#include "waiter.h"
#include "wake.h"
#include "worker_settings.h"

#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/ipc.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/guc.h"

#include "http_parse.h"

PG_MODULE_MAGIC;

/* ntask.backoff_jitter: randomise retry delays (tests turn it off) */
bool		ntask_backoff_jitter = true;

/* ntask.attempt_on_row: the holder's final attempt stays on the task row */
bool		ntask_attempt_on_row = true;

/* the background worker and HTTP dispatch (docs/worker.md) */
char	   *ntask_database = NULL;
bool		ntask_worker_enabled = true;
int			ntask_max_databases = 4;
int			ntask_naptime_ms = 1000;
int			ntask_http_max_inflight = 64;
char	   *ntask_http_allowed_hosts = NULL;
const NtaskHostList *ntask_http_allowed_list = NULL;
int			ntask_http_connect_timeout_ms = 5000;
int			ntask_http_max_response_bytes = 65536;
int			ntask_http_retry_after_max = 3600;
char	   *ntask_worker_role = NULL;
int			ntask_worker_lock_timeout_ms = 1000;
int			ntask_worker_statement_timeout_ms = 30000;

/* housekeeping of history tables (0: keep forever) */
int			ntask_audit_retention_s = 90 * 86400;
int			ntask_history_retention_s = 30 * 86400;

/* the waiting claim's cap and the stored result's (wait.c, result.c) */
int			ntask_max_wait_ms = 30000;
int			ntask_max_result_bytes = 65536;
int			ntask_max_parents = 1000;
int			ntask_max_context_bytes = 1024 * 1024;
int			ntask_max_claim_context_bytes = 16 * 1024 * 1024;
int			ntask_max_payload_bytes = 1024 * 1024;

/* ntask.traceparent: the trace context of the session's enqueues ("": none) */
char	   *ntask_traceparent = NULL;

/* the sizes of flow control's shared-memory tables (limit.c, fair.c) */
int			ntask_rate_limit_slots = 4096;
int			ntask_fair_cursor_slots = 1024;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

void		_PG_init(void);
static void ntask_shmem_request(void);
static void ntask_shmem_startup(void);
static void ntask_process_utility(PlannedStmt *pstmt, const char *queryString,
								  bool readOnlyTree, ProcessUtilityContext context,
								  ParamListInfo params, QueryEnvironment *queryEnv,
								  DestReceiver *dest, QueryCompletion *qc);

/*
 * ntask_check_allowed_hosts
 *		GUC check hook of ntask.http_allowed_hosts: parse the list once,
 *		here, into the GUC's extra (NtaskGucMalloc: guc.c frees it), refusing an
 *		entry that could never match (ntask_hostlist_parse); dispatch and
 *		ntask_queue_set read the parsed list.
 */
static bool
ntask_check_allowed_hosts(char **newval, void **extra, GucSource source)
{
	char		bad[128];
	NtaskHostList *list = ntask_hostlist_parse(*newval, bad, sizeof(bad));

	if (list == NULL && bad[0] == '\0')
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		GUC_check_errmsg("out of memory");
		return false;
	}
	if (list == NULL)
	{
		GUC_check_errdetail("Entry \"%s\" holds a \"/\" but is not an address range; a range is an IPv4 or IPv6 address, \"/\" and a prefix length, such as \"10.0.0.0/8\" or \"fd00::/8\".",
							bad);
		return false;
	}
	/* the extra must come from guc.c's allocator (compat.h) */
	*extra = NtaskGucMalloc(list->size);
	if (*extra == NULL)
	{
		free(list);
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		GUC_check_errmsg("out of memory");
		return false;
	}
	ntask_hostlist_move(list, *extra);
	free(list);
	return true;
}

/*
 * NtaskTraceparentValid
 *		Whether tp is a W3C Trace Context traceparent ntask stores: version
 *		00, a trace id of 32 lower-case hex digits not all zero, a parent id
 *		of 16 not all zero, flags of 2, separated by '-' (55 characters).
 *		Otherwise *why (when not NULL) says what is wrong, in a sentence.
 */
bool
NtaskTraceparentValid(const char *tp, const char **why)
{
	static const struct
	{
		int			start;
		int			len;
		const char *name;
	}			field[] = {{0, 2, "version"}, {3, 32, "trace id"}, {36, 16, "parent id"}, {53, 2, "flags"}};
	const char *dummy;
	int			f;

	if (why == NULL)
		why = &dummy;
	if (strlen(tp) != NTASK_TRACEPARENT_LEN)
	{
		*why = "A traceparent is 55 characters: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>.";
		return false;
	}
	if (tp[2] != '-' || tp[35] != '-' || tp[52] != '-')
	{
		*why = "Its fields must be separated by \"-\" (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>).";
		return false;
	}
	for (f = 0; f < (int) lengthof(field); f++)
	{
		bool		nonzero = false;
		int			i;

		for (i = field[f].start; i < field[f].start + field[f].len; i++)
		{
			char		c = tp[i];

			if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			{
				*why = psprintf("Its %s must be lower-case hex digits.", field[f].name);
				return false;
			}
			nonzero |= c != '0';
		}
		if (f == 0 && strncmp(tp, "00", 2) != 0)
		{
			*why = "Only version 00 of W3C Trace Context is supported.";
			return false;
		}
		if ((f == 1 || f == 2) && !nonzero)
		{
			*why = psprintf("Its %s must not be all zeros.", field[f].name);
			return false;
		}
	}
	return true;
}

/* ntask_check_traceparent: GUC check hook of ntask.traceparent ("" or valid) */
static bool
ntask_check_traceparent(char **newval, void **extra, GucSource source)
{
	const char *why;

	if (*newval == NULL || (*newval)[0] == '\0' || NtaskTraceparentValid(*newval, &why))
		return true;
	GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
	GUC_check_errdetail("%s", why);
	return false;
}

/* ntask_assign_allowed_hosts: GUC assign hook, keeps the parsed list */
static void
ntask_assign_allowed_hosts(const char *newval, void *extra)
{
	ntask_http_allowed_list = (const NtaskHostList *) extra;
}

static void
ntask_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	NtaskShmemRequest();
	NtaskWaitShmemRequest();
	NtaskFairShmemRequest();
	NtaskLimitShmemRequest();
}

static void
ntask_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	NtaskShmemStartup();
	NtaskWaitShmemStartup();
	NtaskFairShmemStartup();
	NtaskLimitShmemStartup();
}

/*
 * ntask_db_option
 *		The string value of option name in a CREATE / ALTER DATABASE option
 *		list, NULL if absent.
 */
static const char *
ntask_db_option(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *d = lfirst_node(DefElem, lc);

		if (strcmp(d->defname, name) == 0 && d->arg != NULL)
			return defGetString(d);
	}
	return NULL;
}

/*
 * ntask_hold_database
 *		NtaskWorkerHoldDatabase(name), but only for the database's owner (or
 *		a superuser): the statement's own permission check comes after this
 *		hook, and a user who may not drop a database must not be able to
 *		stop its worker by trying.
 */
static void
ntask_hold_database(const char *name)
{
	Oid			dboid;

	if (name == NULL)
		return;
	dboid = get_database_oid(name, true);
	if (OidIsValid(dboid) && object_ownercheck(DatabaseRelationId, dboid, GetUserId()))
		NtaskWorkerHoldDatabase(name);
}

/*
 * ntask_process_utility
 *		Two kinds of statement matter to the workers (docs/worker.md "One
 *		worker per database"):
 *
 *		- DROP DATABASE, ALTER DATABASE RENAME / SET TABLESPACE and CREATE
 *		  DATABASE ... TEMPLATE need their database without other sessions:
 *		  before they run, the worker (or probe) in it is stopped and none
 *		  is started there for a while, so they do not wait 5 s and fail
 *		  with "being accessed by other users".
 *		- CREATE EXTENSION ntask: at commit the launcher is woken to look
 *		  for databases to serve now, not at its next periodic probe.
 */
static void
ntask_process_utility(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			ntask_hold_database(((DropdbStmt *) stmt)->dbname);
			break;
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
				ntask_hold_database(((RenameStmt *) stmt)->subname);
			break;
		case T_AlterDatabaseStmt:
			if (ntask_db_option(((AlterDatabaseStmt *) stmt)->options, "tablespace"))
				ntask_hold_database(((AlterDatabaseStmt *) stmt)->dbname);
			break;
		case T_CreatedbStmt:
			ntask_hold_database(ntask_db_option(((CreatedbStmt *) stmt)->options,
												"template"));
			break;
		case T_CreateExtensionStmt:
			if (strcmp(((CreateExtensionStmt *) stmt)->extname, "ntask") == 0)
				NtaskWakeLauncherAtCommit();
			break;
		default:
			break;
	}
	if (prev_process_utility_hook)
		prev_process_utility_hook(pstmt, queryString, readOnlyTree, context,
								  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * ntask_define_worker_gucs
 *		The background worker's settings (docs/worker.md).
 */
static void
ntask_define_worker_gucs(GucContext pm_context)
{
	DefineCustomStringVariable("ntask.database",
							   "The only database an ntask background worker serves; empty: every database with ntask installed.",
							   "Empty (the default): the launcher starts one worker "
							   "per database where the extension is installed, up "
							   "to ntask.max_databases.",
							   &ntask_database,
							   "",
							   pm_context,
							   0,
							   NULL, NULL, NULL);

	DefineCustomBoolVariable("ntask.worker",
							 "Start the ntask background worker.",
							 "Needs shared_preload_libraries = 'ntask'.",
							 &ntask_worker_enabled,
							 true,
							 pm_context,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.max_databases",
							"Most databases that get an ntask background worker.",
							"Each takes a background worker slot "
							"(max_worker_processes); a further database with "
							"ntask gets none, and one WARNING says so.",
							&ntask_max_databases,
							4, 1, 256,
							pm_context,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.naptime",
							"Interval between the worker's housekeeping and due-task checks.",
							"An enqueue wakes the worker at commit; retries "
							"that become due are seen within one naptime.",
							&ntask_naptime_ms,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("ntask.worker_role",
							   "Role the ntask background worker connects as.",
							   "Must exist, be able to log in and not be a "
							   "superuser; CREATE EXTENSION ntask creates the "
							   "default, ntask_bgworker (a member of ntask_worker).",
							   &ntask_worker_role,
							   "ntask_bgworker",
							   pm_context,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.worker_lock_timeout",
							"lock_timeout of the background worker's statements.",
							"A row lock held by someone else's open transaction "
							"makes one step fail and retry, never stalls the worker.",
							&ntask_worker_lock_timeout_ms,
							1000, 1, 600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.worker_statement_timeout",
							"statement_timeout of each of the background worker's transactions.",
							NULL,
							&ntask_worker_statement_timeout_ms,
							30000, 100, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * ntask_define_http_gucs
 *		HTTP dispatch's settings (docs/worker.md); the allowlist is parsed
 *		where it is set (ntask_check_allowed_hosts).
 */
static void
ntask_define_http_gucs(void)
{
	DefineCustomIntVariable("ntask.http_max_inflight",
							"Maximum HTTP requests the worker has in flight, all queues together.",
							NULL,
							&ntask_http_max_inflight,
							64, 1, 1000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("ntask.http_allowed_hosts",
							   "Hosts the worker may send HTTP requests to.",
							   "Comma-separated host names or addresses, exact "
							   "match; '*' allows any host.  Empty (the default) "
							   "allows none: such tasks go to repair_required.",
							   &ntask_http_allowed_hosts,
							   "",
							   PGC_SIGHUP,
							   0,
							   ntask_check_allowed_hosts,
							   ntask_assign_allowed_hosts,
							   NULL);

	DefineCustomIntVariable("ntask.http_connect_timeout_ms",
							"Connect timeout of the worker's HTTP requests.",
							NULL,
							&ntask_http_connect_timeout_ms,
							5000, 1, 600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.http_max_response_bytes",
							"Response bytes read before the worker cuts a transfer.",
							"The response is classified by its status; the "
							"body is never stored.",
							&ntask_http_max_response_bytes,
							65536, 0, 64 * 1024 * 1024,
							PGC_SIGHUP,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.http_retry_after_max",
							"Cap on a provider's Retry-After, in seconds.",
							NULL,
							&ntask_http_retry_after_max,
							3600, 0, 7 * 86400,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}

/*
 * ntask_define_size_gucs
 *		The bounds of what a caller sends or gets back: results, checkpoints
 *		and claim contexts, parents, payloads (each past its bound: 54000).
 */
static void
ntask_define_size_gucs(void)
{
	DefineCustomIntVariable("ntask.max_result_bytes",
							"Largest result a succeeded task may store (ntask_transition result => ...).",
							"A larger result is refused with SQLSTATE 54000.",
							&ntask_max_result_bytes,
							65536, 0, 64 * 1024 * 1024,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.max_context_bytes",
							"Most bytes of checkpoints one task may hold, and of its parents' results its claim's context carries.",
							"A checkpoint past it is refused with SQLSTATE 54000; parents past it are named in the context's parents_omitted.",
							&ntask_max_context_bytes,
							1024 * 1024, 1024, 64 * 1024 * 1024,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.max_claim_context_bytes",
							"Most bytes of context one claim hands out in all.",
							"Tasks past it get only their traceparent and deferred: true; ntask_context reads the rest.",
							&ntask_max_claim_context_bytes,
							16 * 1024 * 1024, 64 * 1024, 1024 * 1024 * 1024,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.max_parents",
							"Most parents a task may depend on (ntask_enqueue depends_on => ...).",
							"More are refused with SQLSTATE 54000.",
							&ntask_max_parents,
							1000, 1, 100000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.max_payload_bytes",
							"Largest task payload (ntask_enqueue, ntask_enqueue_many, saga steps, schedules).",
							"A larger payload is refused with SQLSTATE 54000.",
							&ntask_max_payload_bytes,
							1024 * 1024, 0, 256 * 1024 * 1024,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);
}

/*
 * ntask_define_shmem_gucs
 *		The sizes of flow control's shared-memory tables (set at server start).
 */
static void
ntask_define_shmem_gucs(GucContext pm_context)
{
	DefineCustomIntVariable("ntask.rate_limit_slots",
							"Token buckets of rate-limited queues and keys kept at a time, and as many retry-share counters.",
							"A bucket's slot goes to another key only once it has "
							"refilled; while every slot holds a bucket that has "
							"not, tasks needing a new bucket are held back (a LOG "
							"says so).  About 750 bytes of shared memory per slot.",
							&ntask_rate_limit_slots,
							4096, 16, 1024 * 1024,
							pm_context,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.fair_cursor_slots",
							"Rotation cursors of fair queues (per database, queue and shard) kept at a time.",
							"Beyond them a claim resumes from its session's or a "
							"shared hashed cursor, never always at the first key.  "
							"About 1.2 kB of shared memory per slot.",
							&ntask_fair_cursor_slots,
							1024, 4, 1024 * 1024,
							pm_context,
							0,
							NULL, NULL, NULL);
}

/*
 * ntask_define_task_gucs
 *		The SQL API's settings: retries, history retention, the waiting
 *		claim, size caps and flow control's shared-memory tables.
 */
static void
ntask_define_task_gucs(GucContext pm_context)
{
	DefineCustomBoolVariable("ntask.backoff_jitter",
							 "Randomise retry delays (equal jitter).",
							 "When off, a transient failure waits exactly "
							 "min(backoff_base * 2^(attempt-1), backoff_max); "
							 "meant for deterministic tests.",
							 &ntask_backoff_jitter,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("ntask.attempt_on_row",
							 "Keep the holder's final attempt on the task row.",
							 "When on (the default), an attempt its holder ends "
							 "succeeded, canceled or skipped stays on the task "
							 "row instead of a row in ntask.attempt; "
							 "ntask.attempt_all shows it the same either way. "
							 "Off only to test that.",
							 &ntask_attempt_on_row,
							 true,
							 PGC_SUSET,
							 GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.audit_retention",
							"Age after which housekeeping deletes ntask.audit rows.",
							"0 keeps them forever.",
							&ntask_audit_retention_s,
							90 * 86400, 0, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.history_retention",
							"Age after which housekeeping deletes schedule slots and fence receipts.",
							"A slot whose task is unfinished and the receipt of a "
							"fence's current watermark are kept; 0 keeps all.",
							&ntask_history_retention_s,
							30 * 86400, 0, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ntask.max_wait",
							"Longest wait of a waiting ntask_claim (wait => ...).",
							"A longer wait is cut to this; the waiting statement "
							"holds its snapshot (the vacuum horizon) that long.",
							&ntask_max_wait_ms,
							30000, 0, 3600 * 1000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("ntask.traceparent",
							   "W3C Trace Context of the tasks this session enqueues.",
							   "Stored with each task an ntask_enqueue or "
							   "ntask_enqueue_many without a traceparent argument "
							   "creates; empty: none.  Version 00, lower-case hex.",
							   &ntask_traceparent,
							   "",
							   PGC_USERSET,
							   0,
							   ntask_check_traceparent, NULL, NULL);

	ntask_define_size_gucs();
	ntask_define_shmem_gucs(pm_context);
}

/*
 * _PG_init
 *		Define the GUCs; when loaded by shared_preload_libraries, also ask
 *		for the worker's shared memory and register the worker.  Safe to
 *		run on first use in a backend too (then there is no worker and
 *		enqueue does not wake anything).
 */
void
_PG_init(void)
{
	/*
	 * The worker's settings can only take effect at server start.  Loaded
	 * later (the first call of an ntask function in a server that does not
	 * preload it), defining a PGC_POSTMASTER variable would be FATAL:
	 * define them as reload-time settings instead, which nothing reads
	 * then, since there is no worker.  Every SQL function works either way.
	 * (autoprewarm defines such settings only while preloading; here that
	 * would make SHOW ntask.database fail without preload, which t/010
	 * shows working.)
	 */
	GucContext	pm_context = process_shared_preload_libraries_in_progress ?
		PGC_POSTMASTER : PGC_SIGHUP;

	ntask_define_worker_gucs(pm_context);
	ntask_define_http_gucs();
	ntask_define_task_gucs(pm_context);
	NtaskShardDefineSettings();

	MarkGUCPrefixReserved("ntask");

	if (!process_shared_preload_libraries_in_progress)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ntask_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ntask_shmem_startup;
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = ntask_process_utility;
	if (ntask_worker_enabled)
		NtaskWorkerRegister();
}
