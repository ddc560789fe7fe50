/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  ntask_queue_set and ntask_queue_clear_guard: per-queue policy.
 *
 * A queue row holds the budget (max_attempts including the first, total
 * deadline), the default lease, the backoff curve, an optional guard and
 * an optional dispatch target.  Tasks copy max_attempts and the deadline
 * at enqueue, so a policy change never rewrites the budget of a task that
 * is already in flight.  Policy changes are audited.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/queue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "fair.h"
#include "guard.h"
#include "limit.h"
#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"
#include "target.h"
#include "wake.h"
#include "worker_settings.h"

#include "http_parse.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "common/int.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include <errno.h>

PG_FUNCTION_INFO_V1(ntask_queue_set);
PG_FUNCTION_INFO_V1(ntask_queue_set_roles);
PG_FUNCTION_INFO_V1(ntask_queue_clear_guard);
PG_FUNCTION_INFO_V1(ntask_queue_pause);
PG_FUNCTION_INFO_V1(ntask_queue_resume);

/*
 * The one parameter of the plans that take only the queue (insert, fair
 * keyless, ordered, clear guard, resume lock, resume, resume keys); the
 * update's values serve them too (QU_ARG_QUEUE).
 */
typedef enum QueueArg
{
	QUEUE_ARG_QUEUE,			/* $1 */
	QUEUE_NARGS
} QueueArg;

static NtaskPlan queue_insert_plan = {
	"queue insert",
	.ncols = 0,
	"INSERT INTO ntask.queue (queue) VALUES ($1) "
	"ON CONFLICT (queue) DO NOTHING",
	QUEUE_NARGS, {TEXTOID}
};

/*
 * The parameters of queue_update_plan: values[QU_ARG_X] is $(X + 1).  The
 * 24 arguments of ntask_queue_set in their order, each rate limit as two
 * (count, 0 for 'none'; interval).  The plans that take only the queue
 * ($1) are run with the same values.
 */
typedef enum QueueUpdateArg
{
	QU_ARG_QUEUE = QUEUE_ARG_QUEUE, /* $1 */
	QU_ARG_MAX_ATTEMPTS,		/* $2 */
	QU_ARG_TOTAL_DEADLINE,		/* $3 */
	QU_ARG_LEASE,				/* $4 */
	QU_ARG_BACKOFF_BASE,		/* $5 */
	QU_ARG_BACKOFF_MAX,			/* $6 */
	QU_ARG_GUARD,				/* $7, the function's name */
	QU_ARG_TARGET,				/* $8 */
	QU_ARG_RETENTION,			/* $9 */
	QU_ARG_NOTIFY,				/* $10 */
	QU_ARG_FAIRNESS,			/* $11 */
	QU_ARG_MAX_INFLIGHT,		/* $12 */
	QU_ARG_PARTITION_MAX_INFLIGHT,	/* $13 */
	QU_ARG_ORDERED,				/* $14 */
	QU_ARG_ORDERED_SKIP_REPAIR, /* $15 */
	QU_ARG_RATE_N,				/* $16, 0: none */
	QU_ARG_RATE_PER,			/* $17 */
	QU_ARG_PARTITION_RATE_N,	/* $18, 0: none */
	QU_ARG_PARTITION_RATE_PER,	/* $19 */
	QU_ARG_RETRY_SHARE,			/* $20 */
	QU_ARG_BREAKER_FAILURES,	/* $21 */
	QU_ARG_BREAKER_COOLDOWN,	/* $22 */
	QU_ARG_PRIORITY_AGING,		/* $23 */
	QU_ARG_PRIORITY_AGING_MAX,	/* $24 */
	QU_ARG_ON_RATE_LIMITED,		/* $25 */
	QU_ARG_ON_PARENT_FAILED,	/* $26 */
	QU_NARGS
} QueueUpdateArg;

/* queue_update_plan returns the row: its columns are read by name */
#define QUEUE_NCOLS 37

static NtaskPlan queue_update_plan = {
	"queue update",
	.ncols = QUEUE_NCOLS,
	"UPDATE ntask.queue q SET "
	"  max_attempts = coalesce($2, q.max_attempts), "
	"  total_deadline = coalesce($3, q.total_deadline), "
	"  lease = coalesce($4, q.lease), "
	"  backoff_base = coalesce($5, q.backoff_base), "
	"  backoff_max = coalesce($6, q.backoff_max), "
	"  guard = coalesce($7, q.guard), "
	"  target = CASE WHEN $8 IS NULL THEN q.target "
	"    WHEN $8 OPERATOR(pg_catalog.=) 'null'::pg_catalog.jsonb "
	"      OR $8 OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb THEN NULL ELSE $8 END, "
	"  retention = coalesce($9, q.retention), "
	"  notify = coalesce($10, q.notify), "
	"  fairness = coalesce($11, q.fairness), "
	"  max_inflight = CASE WHEN $12 IS NULL THEN q.max_inflight ELSE NULLIF($12, 0) END, "
	"  partition_max_inflight = CASE WHEN $13 IS NULL THEN q.partition_max_inflight "
	"    ELSE NULLIF($13, 0) END, "
	"  ordered = coalesce($14, q.ordered), "
	"  ordered_skip_repair = coalesce($15, q.ordered_skip_repair), "
	"  rate_n = CASE WHEN $16 IS NULL THEN q.rate_n ELSE NULLIF($16, 0) END, "
	"  rate_per = CASE WHEN $16 IS NULL THEN q.rate_per WHEN $16 OPERATOR(pg_catalog.=) 0 THEN NULL ELSE $17 END, "
	"  partition_rate_n = CASE WHEN $18 IS NULL THEN q.partition_rate_n "
	"    ELSE NULLIF($18, 0) END, "
	"  partition_rate_per = CASE WHEN $18 IS NULL THEN q.partition_rate_per "
	"    WHEN $18 OPERATOR(pg_catalog.=) 0 THEN NULL ELSE $19 END, "
	"  retry_share = CASE WHEN $20 IS NULL THEN q.retry_share "
	"    WHEN $20 OPERATOR(pg_catalog.>=) 1 THEN NULL ELSE $20 END, "
	"  breaker_failures = CASE WHEN $21 IS NULL THEN q.breaker_failures "
	"    ELSE NULLIF($21, 0) END, "
	"  breaker_cooldown = coalesce($22, q.breaker_cooldown), "
	/* priority_aging '0' turns aging off, and its cap with it unless given */
	"  priority_aging = CASE WHEN $23 IS NULL THEN q.priority_aging "
	"    WHEN $23 OPERATOR(pg_catalog.=) '0'::pg_catalog.interval THEN NULL ELSE $23 END, "
	"  priority_aging_max = CASE WHEN $24 IS NOT NULL THEN $24 "
	"    WHEN $23 OPERATOR(pg_catalog.=) '0'::pg_catalog.interval THEN NULL "
	"    ELSE q.priority_aging_max END, "
	"  on_rate_limited = coalesce($25, q.on_rate_limited), "
	"  on_parent_failed = coalesce($26, q.on_parent_failed), "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 "
	"  AND coalesce($6, q.backoff_max) OPERATOR(pg_catalog.>=) "
	"      coalesce($5, q.backoff_base) "
	"RETURNING q.*",
	QU_NARGS, {TEXTOID, INT4OID, INTERVALOID, INTERVALOID, INTERVALOID, INTERVALOID,
		TEXTOID, JSONBOID, INTERVALOID, BOOLOID, TEXTOID,
		INT4OID, INT4OID, BOOLOID, BOOLOID, INT4OID, INTERVALOID, INT4OID,
	INTERVALOID, FLOAT4OID, INT4OID, INTERVALOID, INTERVALOID, INT4OID, TEXTOID, TEXTOID}
};

/* the parameters of queue_roles_plan */
typedef enum QueueRolesArg
{
	QUEUE_ROLES_ARG_QUEUE,		/* $1 */
	QUEUE_ROLES_ARG_PRODUCER,	/* $2, NULL: anyone */
	QUEUE_ROLES_ARG_WORKER,		/* $3, NULL: anyone */
	QUEUE_ROLES_NARGS
} QueueRolesArg;

static NtaskPlan queue_roles_plan = {
	"queue roles",
	.ncols = 1,
	"UPDATE ntask.queue q SET producer_role = $2, worker_role = $3, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 RETURNING 1",
	QUEUE_ROLES_NARGS, {TEXTOID, REGROLEOID, REGROLEOID}
};

/*
 * A queue turning fair: its unfinished tasks without a key join the
 * keyless partition '' (enqueue stores '' from now on, ENQ_PARTITION).
 * Waits for the row locks of claims in progress (short transactions).
 */
static NtaskPlan queue_fair_keyless_plan = {
	"queue fair keyless",
	.ncols = 0,
	"UPDATE ntask.task t SET partition_key = '' "
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.partition_key IS NULL "
	"  AND t.due_at IS NOT NULL",
	QUEUE_NARGS, {TEXTOID}
};

/*
 * Before a queue turns ordered: wait for every transaction writing tasks
 * (enqueues in progress may have read the queue row as it was, and would
 * store unordered tasks the order index never sees), and keep new writers
 * out until this transaction commits; their statements then read the
 * queue row as it is now.  SHARE mode does not conflict with itself.
 */
static NtaskPlan queue_ordered_lock_plan = {
	"queue ordered lock",
	.ncols = 0,
	"LOCK TABLE ntask.task IN SHARE MODE",
	0, {InvalidOid}
};

/*
 * A queue turning ordered: its unfinished tasks (and those in repair, which
 * may block their key) join the order index (task_ordered_idx).
 */
static NtaskPlan queue_ordered_plan = {
	"queue ordered",
	.ncols = 0,
	"UPDATE ntask.task t SET ordered = true "
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.ordered IS NOT TRUE "
	"  AND (t.due_at IS NOT NULL OR t.state OPERATOR(pg_catalog.=) 'repair_required' "
	"       OR t.state OPERATOR(pg_catalog.=) 'awaiting' OR t.state OPERATOR(pg_catalog.=) 'waiting')",
	QUEUE_NARGS, {TEXTOID}
};

static NtaskPlan queue_clear_guard_plan = {
	"queue clear guard",
	.ncols = 0,
	"UPDATE ntask.queue SET guard = NULL, guard_owner = NULL, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE queue OPERATOR(pg_catalog.=) $1",
	QUEUE_NARGS, {TEXTOID}
};

/*
 * a new guard and its owner, always together (guard.c checks the owner):
 * the parameters of queue_set_guard_plan
 */
typedef enum QueueSetGuardArg
{
	QUEUE_SET_GUARD_ARG_QUEUE,	/* $1 */
	QUEUE_SET_GUARD_ARG_GUARD,	/* $2 */
	QUEUE_SET_GUARD_ARG_OWNER,	/* $3 */
	QUEUE_SET_GUARD_NARGS
} QueueSetGuardArg;

static NtaskPlan queue_set_guard_plan = {
	"queue set guard",
	.ncols = 0,
	"UPDATE ntask.queue SET guard = $2, guard_owner = $3 "
	"WHERE queue OPERATOR(pg_catalog.=) $1",
	QUEUE_SET_GUARD_NARGS, {TEXTOID, TEXTOID, NAMEOID}
};

/*
 * Pause: only a queue that is not paused by an operator is
 * changed (a second pause keeps the first one's actor, time and reason).
 * Takes the queue row's lock; claims read the row, never lock it, and see
 * the pause from their next statement on.  Its parameters are those of
 * ntask_queue_pause; queue_resume_lock_plan takes the first
 * (QUEUE_ARG_QUEUE).
 */
typedef enum QueuePauseArg
{
	QUEUE_PAUSE_ARG_QUEUE = QUEUE_ARG_QUEUE,	/* $1 */
	QUEUE_PAUSE_ARG_ACTOR,		/* $2 */
	QUEUE_PAUSE_ARG_REASON,		/* $3 */
	QUEUE_PAUSE_NARGS
} QueuePauseArg;

static NtaskPlan queue_pause_plan = {
	"queue pause",
	.ncols = 1,
	"UPDATE ntask.queue q SET paused_at = pg_catalog.statement_timestamp(), "
	"  paused_by = $2, pause_reason = $3, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 AND q.paused_at IS NULL "
	"RETURNING 1",
	QUEUE_PAUSE_NARGS, {TEXTOID, TEXTOID, TEXTOID}
};

/*
 * Resume: the queue row, locked, and whether anything is paused: the
 * operator's pause, a rate limit's (paused_until), or keys.
 */
typedef enum QueueResumeLockCol
{
	QUEUE_RESUME_LOCK_PAUSED = 1,	/* by an operator */
	QUEUE_RESUME_LOCK_RATE,		/* by a rate limit (paused_until) */
	QUEUE_RESUME_LOCK_KEYS,		/* some keys (ntask.key_pause) */
	QUEUE_RESUME_LOCK_NCOLS = QUEUE_RESUME_LOCK_KEYS
} QueueResumeLockCol;

static NtaskPlan queue_resume_lock_plan = {
	"queue resume lock",
	.ncols = QUEUE_RESUME_LOCK_NCOLS,
	"SELECT q.paused_at IS NOT NULL, "
	"  coalesce(q.paused_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp(), false), "
	"  EXISTS (SELECT 1 FROM ntask.key_pause k WHERE k.queue OPERATOR(pg_catalog.=) q.queue "
	"    AND k.until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()) "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE",
	QUEUE_NARGS, {TEXTOID}
};

static NtaskPlan queue_resume_plan = {
	"queue resume",
	.ncols = 0,
	"UPDATE ntask.queue q SET paused_at = NULL, paused_by = NULL, pause_reason = NULL, "
	"  paused_until = NULL, keys_paused_until = NULL, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1",
	QUEUE_NARGS, {TEXTOID}
};

static NtaskPlan queue_resume_keys_plan = {
	"queue resume keys",
	.ncols = 0,
	"DELETE FROM ntask.key_pause k WHERE k.queue OPERATOR(pg_catalog.=) $1",
	QUEUE_NARGS, {TEXTOID}
};

static void queue_check_name(text *name);
static char *queue_check_guard(Oid guard, char **owner_name);
static void queue_check_host(const char *what, const char *host);
static void queue_warn_not_preloaded(const char *what, const char *detail);
static bool queue_target_removed(Jsonb *target);

/*
 * queue_check_name
 *		Queue names are 1-63 characters of [A-Za-z0-9_.:-]; anything else
 *		raises 22023 before the table's CHECK would.
 */
static void
queue_check_name(text *name)
{
	const char *s = VARDATA_ANY(name);
	int			len = VARSIZE_ANY_EXHDR(name);
	int			i;

	for (i = 0; i < len; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
			  c == '-'))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: invalid queue name \"%s\"",
							text_to_cstring(name)),
					 errhint("Use 1 to 63 letters, digits, '_', '.', ':' or '-'.")));
	}
}

/*
 * queue_check_guard
 *		A guard must be a function (task_key text, payload jsonb) RETURNS
 *		text, neither in a temporary schema nor part of an extension (else
 *		22023), owned by a role whose privileges the current user has, and
 *		executable by the current user (else 42501): a guard runs as its
 *		owner (guard.c), so whoever sets it must already hold those rights.
 *		Returns the name to store (schema-qualified), and in *owner_name its
 *		owner, stored with it and checked at every use.
 */
static char *
queue_check_guard(Oid guard, char **owner_name)
{
	static const Oid guard_argtypes[] = {TEXTOID, JSONBOID};	/* task_key, payload */
	HeapTuple	tup;
	Form_pg_proc proc;
	bool		ok;
	Oid			owner;
	Oid			nsp;

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(guard));
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("ntask: guard function %u does not exist", guard)));
	proc = (Form_pg_proc) GETSTRUCT(tup);
	ok = proc->prokind == PROKIND_FUNCTION &&
		!proc->proretset &&
		proc->prorettype == TEXTOID &&
		proc->pronargs == lengthof(guard_argtypes) &&
		memcmp(proc->proargtypes.values, guard_argtypes, sizeof(guard_argtypes)) == 0;
	owner = proc->proowner;
	nsp = proc->pronamespace;
	ReleaseSysCache(tup);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: guard %s has the wrong signature",
						format_procedure(guard)),
				 errhint("A guard is a function (task_key text, payload jsonb) RETURNS text "
						 "answering 'proceed', 'skip[: reason]' or 'cancel[: reason]'.")));
	NtaskCheckGuardHome(guard, nsp);
	if (!has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: must have the privileges of the owner of guard %s",
						format_procedure(guard)),
				 errdetail("A guard runs with the rights of its owner, %s.",
						   GetUserNameFromId(owner, false))));
	if (object_aclcheck(ProcedureRelationId, guard, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: permission denied for guard %s",
						format_procedure(guard))));
	*owner_name = GetUserNameFromId(owner, false);
	return NtaskGuardName(guard);
}

/*
 * queue_check_host
 *		A target host the allowlist does not name is refused (22023): the
 *		worker would send every task of the queue to repair_required at
 *		stage config within a tick.  The list is a server setting: a host
 *		taken off it later still sends the queue's tasks to repair
 *		(docs/worker.md "Dispatch").
 */
static void
queue_check_host(const char *what, const char *host)
{
	if (!ntask_host_allowed(host, ntask_http_allowed_list))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s host \"%s\" is not in ntask.http_allowed_hosts", what, host),
				 errdetail("The worker would send nothing to it: every task of the queue would go to repair_required at stage config."),
				 errhint("Add it to ntask.http_allowed_hosts in postgresql.conf and reload, then set the target.")));
}

/*
 * queue_target_removed
 *		target is JSON null or an empty object: ntask_queue_set removes the
 *		queue's target (SQL NULL keeps it, as for every argument).
 */
static bool
queue_target_removed(Jsonb *target)
{
	JsonbValue	scalar;

	if (JB_ROOT_IS_SCALAR(target))
		return JsonbExtractScalar(&target->root, &scalar) &&
			scalar.type == jbvNull;
	return JB_ROOT_IS_OBJECT(target) && JB_ROOT_COUNT(target) == 0;
}

/*
 * queue_warn_not_preloaded
 *		Without ntask in shared_preload_libraries no background worker runs
 *		and there is no shared memory: say so when a queue is given a
 *		setting that needs them, in the words of CREATE EXTENSION's warning.
 *		The setting is stored: it acts
 *		once the library is preloaded.
 */
static void
queue_warn_not_preloaded(const char *what, const char *detail)
{
	if (NtaskLimitAvailable())
		return;
	ereport(WARNING,
			(errmsg("ntask: the library is not in shared_preload_libraries, so %s", what),
			 errdetail("%s", detail),
			 errhint("Add ntask to shared_preload_libraries and restart.")));
}

/*
 * ntask_queue_set_roles(queue, producer_role regrole, worker_role regrole)
 *		Restrict who may enqueue into (producer_role) and claim from
 *		(worker_role) a queue, beyond the EXECUTE rights of ntask_producer
 *		and ntask_worker; NULL lifts a restriction.  Audited.
 */
Datum
ntask_queue_set_roles(PG_FUNCTION_ARGS)
{
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	Datum		values[QUEUE_ROLES_NARGS];
	char		nulls[QUEUE_ROLES_NARGS] = {' ', ' ', ' '};
	char	   *qname = text_to_cstring(queue);

	values[QUEUE_ROLES_ARG_QUEUE] = PointerGetDatum(queue);
	values[QUEUE_ROLES_ARG_PRODUCER] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[QUEUE_ROLES_ARG_PRODUCER] = PG_ARGISNULL(1) ? 'n' : ' ';
	values[QUEUE_ROLES_ARG_WORKER] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[QUEUE_ROLES_ARG_WORKER] = PG_ARGISNULL(2) ? 'n' : ' ';
	SPI_connect();
	if (NtaskExecPlan(&queue_roles_plan, values, nulls, SPI_OK_UPDATE_RETURNING) == 0)
		NtaskQueueNotFound(qname);
	NtaskAudit(GetUserNameFromId(GetUserId(), false), "queue_set_roles", 0, qname,
			   psprintf("producer_role %s, worker_role %s",
						PG_ARGISNULL(1) ? "none" :
						GetUserNameFromId(PG_GETARG_OID(1), false),
						PG_ARGISNULL(2) ? "none" :
						GetUserNameFromId(PG_GETARG_OID(2), false)),
			   NULL, NULL);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * queue_check_cap
 *		A cap argument (max_inflight, partition_max_inflight,
 *		breaker_failures): 0 turns it off, otherwise 1..max.
 */
static void
queue_check_cap(FunctionCallInfo fcinfo, int arg, const char *name, int max)
{
	int32		v;

	if (PG_ARGISNULL(arg))
		return;
	v = PG_GETARG_INT32(arg);
	if (v < 0 || v > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s must be between 0 (off) and %d, not %d",
						name, max, v)));
}

/*
 * queue_parse_rate
 *		A rate limit argument, '<n>/<interval>' (e.g. '50/1 second') or
 *		'none': sets *n (0 for none) and *per.  n is 1..1000000; the
 *		interval is positive, at most a day, and has no months (a month
 *		has no fixed length).  Anything else is 22023.
 */
static void
queue_parse_rate(text *arg, const char *name, int32 *n, Datum *per)
{
	char	   *s = text_to_cstring(arg);
	char	   *slash = strchr(s, '/');
	char	   *end;
	long		v;
	Interval   *iv;

	*n = 0;
	*per = (Datum) 0;
	if (pg_strcasecmp(s, "none") == 0)
		return;
	if (slash == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s must be '<n>/<interval>' or 'none', not \"%s\"", name, s),
				 errhint("For example '50/1 second' or '1000/1 minute'.")));
	*slash = '\0';
	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end != '\0' || errno != 0 || v < 1 || v > 1000000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: the count of %s must be an integer between 1 and 1000000, not \"%s\"", name, s)));
	iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(slash + 1),
											   ObjectIdGetDatum(InvalidOid),
											   Int32GetDatum(-1)));
	if (iv->month != 0 || iv->day < 0 || iv->time < 0 ||
		(iv->day == 0 && iv->time == 0) ||
		(int64) iv->day * USECS_PER_DAY + iv->time > USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: the interval of %s must be positive and at most 1 day, without months", name)));
	*n = (int32) v;
	*per = IntervalPGetDatum(iv);
}

/*
 * queue_check_flow
 *		After the update (row: its result): the per-key options need the per-key walk of a
 *		fair queue (docs/design.md "Flow control").
 */
static void
queue_check_flow(SPITupleTable *row)
{
	TupleDesc	d = row->tupdesc;
	bool		isnull;
	bool		fair = strcmp(NtaskTupGetCString(row, 0, SPI_fnumber(d, "fairness")), "partition") == 0;
	const char *opt = NULL;

	if (DatumGetBool(NtaskTupGetDatum(row, 0, SPI_fnumber(d, "ordered"), &isnull)) &&
		(NtaskTupGetDatum(row, 0, SPI_fnumber(d, "retry_share"), &isnull), !isnull))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: retry_share does not apply to an ordered queue"),
				 errdetail("An ordered queue hands out only the head of each key, retry or not.")));
	if (fair)
		return;
	if (DatumGetBool(NtaskTupGetDatum(row, 0, SPI_fnumber(d, "ordered"), &isnull)))
		opt = "ordered";
	else if ((NtaskTupGetDatum(row, 0, SPI_fnumber(d, "partition_max_inflight"), &isnull), !isnull))
		opt = "partition_max_inflight";
	else if ((NtaskTupGetDatum(row, 0, SPI_fnumber(d, "partition_rate_n"), &isnull), !isnull))
		opt = "partition_rate_limit";
	if (opt)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s needs fairness => 'partition'", opt),
				 errdetail("Per-key options are enforced by the claim's walk over partition keys, which only a fair queue makes."),
				 errhint("Pass fairness => 'partition' in the same call.")));
}

/*
 * queue_check_aging_step
 *		priority_aging: 0 (off) or a positive interval without months (a
 *		month has no fixed length in a task's wait) of at most 10 years.
 */
static void
queue_check_aging_step(Interval *iv)
{
	int64		usecs;

	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: priority_aging must not have months"),
				 errhint("Give days instead, for example '30 days'.")));
	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, iv->time, &usecs) ||
		usecs < 0 || usecs > (int64) 3650 * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: priority_aging must be a positive interval of at most 3650 days, or 0 (off)")));
}

/*
 * queue_check_aging
 *		After the update (row: its result): priority aging walks the priority levels of the
 *		whole queue, so it does not apply to a fair (or ordered) queue,
 *		whose claim walks the partition keys; and its cap needs it.
 */
static void
queue_check_aging(SPITupleTable *row)
{
	TupleDesc	d = row->tupdesc;
	bool		aging_off;
	bool		isnull;

	(void) NtaskTupGetDatum(row, 0, SPI_fnumber(d, "priority_aging"), &aging_off);
	if (aging_off)
	{
		(void) NtaskTupGetDatum(row, 0, SPI_fnumber(d, "priority_aging_max"), &isnull);
		if (!isnull)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: priority_aging_max needs priority_aging"),
					 errhint("Pass priority_aging => an interval in the same call.")));
		return;
	}
	if (strcmp(NtaskTupGetCString(row, 0, SPI_fnumber(d, "fairness")), "none") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: priority_aging does not apply to a fair queue"),
				 errdetail("A fair queue takes its keys in turn and orders by priority only within a key; aging walks the priorities of the whole queue."),
				 errhint("Pass priority_aging => '0' to turn aging off first.")));
}

/*
 * The arguments of ntask_queue_set: PG_GETARG_*(QS_ARG_X).
 */
typedef enum QsArg
{
	QS_ARG_QUEUE,
	QS_ARG_MAX_ATTEMPTS,
	QS_ARG_TOTAL_DEADLINE,
	QS_ARG_LEASE,
	QS_ARG_BACKOFF_BASE,
	QS_ARG_BACKOFF_MAX,
	QS_ARG_GUARD,
	QS_ARG_TARGET,
	QS_ARG_RETENTION,
	QS_ARG_NOTIFY,
	QS_ARG_FAIRNESS,
	QS_ARG_MAX_INFLIGHT,
	QS_ARG_PARTITION_MAX_INFLIGHT,
	QS_ARG_ORDERED,
	QS_ARG_ORDERED_SKIP_REPAIR,
	QS_ARG_RATE_LIMIT,
	QS_ARG_PARTITION_RATE_LIMIT,
	QS_ARG_RETRY_SHARE,
	QS_ARG_BREAKER_FAILURES,
	QS_ARG_BREAKER_COOLDOWN,
	QS_ARG_PRIORITY_AGING,
	QS_ARG_PRIORITY_AGING_MAX,
	QS_ARG_ON_RATE_LIMITED,
	QS_ARG_ON_PARENT_FAILED,
	QS_NARGS
} QsArg;

/* one call of ntask_queue_set: its parameters, and what the checks found */
typedef struct QsCall
{
	FunctionCallInfo fcinfo;
	text	   *queue;
	char	   *qname;
	char	   *guard_name;		/* the guard to store, NULL: none given */
	char	   *guard_owner;
	Datum		values[QU_NARGS];
	char		nulls[QU_NARGS];
} QsCall;

typedef struct QsSetting QsSetting;

/* the argument of setting s, not NULL (PG_GETARG_DATUM) */
#define QS_VALUE(c, s) ((c)->fcinfo->args[(s)->arg].value)

/* a setting's check (of a non-NULL argument), or how it fills its parameter */
typedef void (*QsFunc) (QsCall *c, const QsSetting *s);

/*
 * One row per setting of ntask_queue_set (every argument but the queue):
 * its argument, its name in messages, the type of the parameter it sets,
 * that parameter, its check and its maximum (for a cap), how it fills
 * the parameter (NULL: the argument itself; a rate fills two), and
 * whether a change can let claims hand out more.  A NULL argument keeps
 * the current value: its check is skipped and its parameters are NULL.
 */
struct QsSetting
{
	QsArg		arg;
	const char *name;
	Oid			type;
	QueueUpdateArg param;
	QsFunc		check;
	int			max;
	QsFunc		fill;
	bool		frees;
};

static void qs_check_attempts(QsCall *c, const QsSetting *s);
static void qs_check_interval(QsCall *c, const QsSetting *s);
static void qs_check_guard(QsCall *c, const QsSetting *s);
static void qs_check_target(QsCall *c, const QsSetting *s);
static void qs_check_notify(QsCall *c, const QsSetting *s);
static void qs_check_fairness(QsCall *c, const QsSetting *s);
static void qs_check_cap(QsCall *c, const QsSetting *s);
static void qs_check_share(QsCall *c, const QsSetting *s);
static void qs_check_aging(QsCall *c, const QsSetting *s);
static void qs_check_on_rate_limited(QsCall *c, const QsSetting *s);
static void qs_check_on_parent_failed(QsCall *c, const QsSetting *s);
static void qs_fill_guard(QsCall *c, const QsSetting *s);
static void qs_fill_rate(QsCall *c, const QsSetting *s);

/*
 * In the order the checks run (breaker_failures's before retry_share's;
 * the rates are checked as they fill their parameters, after every
 * other check).
 */
static const QsSetting qs_settings[] = {
	{QS_ARG_MAX_ATTEMPTS, "max_attempts", INT4OID, QU_ARG_MAX_ATTEMPTS,
	qs_check_attempts, 1000},
	{QS_ARG_TOTAL_DEADLINE, "total_deadline", INTERVALOID, QU_ARG_TOTAL_DEADLINE,
	qs_check_interval},
	{QS_ARG_LEASE, "lease", INTERVALOID, QU_ARG_LEASE, qs_check_interval},
	{QS_ARG_BACKOFF_BASE, "backoff_base", INTERVALOID, QU_ARG_BACKOFF_BASE,
	qs_check_interval},
	{QS_ARG_BACKOFF_MAX, "backoff_max", INTERVALOID, QU_ARG_BACKOFF_MAX,
	qs_check_interval},
	{QS_ARG_GUARD, "guard", TEXTOID, QU_ARG_GUARD, qs_check_guard, 0,
	qs_fill_guard},
	{QS_ARG_TARGET, "target", JSONBOID, QU_ARG_TARGET, qs_check_target},
	{QS_ARG_RETENTION, "retention", INTERVALOID, QU_ARG_RETENTION,
	qs_check_interval},
	{QS_ARG_NOTIFY, "notify", BOOLOID, QU_ARG_NOTIFY, qs_check_notify},
	{QS_ARG_FAIRNESS, "fairness", TEXTOID, QU_ARG_FAIRNESS, qs_check_fairness,
	0, NULL, true},
	{QS_ARG_MAX_INFLIGHT, "max_inflight", INT4OID, QU_ARG_MAX_INFLIGHT,
	qs_check_cap, 1000000, NULL, true},
	{QS_ARG_PARTITION_MAX_INFLIGHT, "partition_max_inflight", INT4OID,
	QU_ARG_PARTITION_MAX_INFLIGHT, qs_check_cap, 1000000, NULL, true},
	{QS_ARG_ORDERED, "ordered", BOOLOID, QU_ARG_ORDERED, NULL, 0, NULL, true},
	{QS_ARG_ORDERED_SKIP_REPAIR, "ordered_skip_repair", BOOLOID,
	QU_ARG_ORDERED_SKIP_REPAIR, NULL, 0, NULL, true},
	{QS_ARG_RATE_LIMIT, "rate_limit", INT4OID, QU_ARG_RATE_N, NULL, 0,
	qs_fill_rate, true},
	{QS_ARG_PARTITION_RATE_LIMIT, "partition_rate_limit", INT4OID,
	QU_ARG_PARTITION_RATE_N, NULL, 0, qs_fill_rate, true},
	{QS_ARG_BREAKER_FAILURES, "breaker_failures", INT4OID,
	QU_ARG_BREAKER_FAILURES, qs_check_cap, 1000},
	{QS_ARG_RETRY_SHARE, "retry_share", FLOAT4OID, QU_ARG_RETRY_SHARE,
	qs_check_share, 0, NULL, true},
	{QS_ARG_BREAKER_COOLDOWN, "breaker_cooldown", INTERVALOID,
	QU_ARG_BREAKER_COOLDOWN, qs_check_interval},
	{QS_ARG_PRIORITY_AGING, "priority_aging", INTERVALOID,
	QU_ARG_PRIORITY_AGING, qs_check_aging, 0, NULL, true},
	{QS_ARG_PRIORITY_AGING_MAX, "priority_aging_max", INT4OID,
	QU_ARG_PRIORITY_AGING_MAX, NULL, 0, NULL, true},
	{QS_ARG_ON_RATE_LIMITED, "on_rate_limited", TEXTOID,
	QU_ARG_ON_RATE_LIMITED, qs_check_on_rate_limited},
	{QS_ARG_ON_PARENT_FAILED, "on_parent_failed", TEXTOID,
	QU_ARG_ON_PARENT_FAILED, qs_check_on_parent_failed},
};

StaticAssertDecl(lengthof(qs_settings) == QS_NARGS - 1,
				 "one setting per argument of ntask_queue_set but the queue");

/* qs_check_attempts: max_attempts counts every attempt, 1..max */
static void
qs_check_attempts(QsCall *c, const QsSetting *s)
{
	int32		v = DatumGetInt32(QS_VALUE(c, s));

	if (v < 1 || v > s->max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: max_attempts must be between 1 and 1000"),
				 errdetail("max_attempts counts every attempt, including the first.")));
}

/* qs_check_interval: a positive interval */
static void
qs_check_interval(QsCall *c, const QsSetting *s)
{
	NtaskCheckPositiveInterval(DatumGetIntervalP(QS_VALUE(c, s)),
							   s->name);
}

/* qs_check_guard: queue_check_guard; keeps the name and owner to store */
static void
qs_check_guard(QsCall *c, const QsSetting *s)
{
	c->guard_name = queue_check_guard(DatumGetObjectId(QS_VALUE(c, s)),
									  &c->guard_owner);
}

/*
 * qs_check_target: a JSON object of a known type (JSON null and {} remove
 * the target, queue_update_plan); an http target's hosts allowed.
 */
static void
qs_check_target(QsCall *c, const QsSetting *s)
{
	Jsonb	   *target = DatumGetJsonbP(QS_VALUE(c, s));

	NtaskWakeWorkerAtCommit();	/* let it reread the target */
	if (queue_target_removed(target))
		return;
	if (!JB_ROOT_IS_OBJECT(target))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: target must be a JSON object"),
				 errhint("Pass 'null' or '{}' to remove the target.")));
	NtaskCheckTargetType(target);
	if (NtaskTargetIsHttp(target))
	{
		NtaskHttpTarget *t = NtaskParseHttpTarget(target);

		queue_check_host("url", t->host);
		if (t->reconcile_url)
			queue_check_host("reconcile_url", t->reconcile_host);
		queue_warn_not_preloaded("no background worker dispatches the http target",
								 "The queue's tasks wait until a worker of your own claims them.");
	}
}

/*
 * qs_check_notify: the channel is "ntask_<queue>", and a channel name has
 * at most 63 bytes
 */
static void
qs_check_notify(QsCall *c, const QsSetting *s)
{
	if (DatumGetBool(QS_VALUE(c, s)) &&
		VARSIZE_ANY_EXHDR(c->queue) > NAMEDATALEN - 1 - 6)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: notify needs a queue name of at most %d bytes",
						NAMEDATALEN - 1 - 6),
				 errdetail("The channel is \"ntask_\" followed by the queue name, and a channel name has at most %d bytes.",
						   NAMEDATALEN - 1)));
}

/* qs_check_fairness: 'none' or 'partition' */
static void
qs_check_fairness(QsCall *c, const QsSetting *s)
{
	char	   *f = TextDatumGetCString(QS_VALUE(c, s));

	if (strcmp(f, "none") != 0 && strcmp(f, "partition") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: fairness must be 'none' or 'partition', not \"%s\"", f)));
}

/* qs_check_cap: queue_check_cap */
static void
qs_check_cap(QsCall *c, const QsSetting *s)
{
	queue_check_cap(c->fcinfo, s->arg, s->name, s->max);
}

/* qs_check_share: retry_share is 0..1 (NaN is not) */
static void
qs_check_share(QsCall *c, const QsSetting *s)
{
	float4		share = DatumGetFloat4(QS_VALUE(c, s));

	if (!(share >= 0.0f && share <= 1.0f))	/* NaN too */
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: retry_share must be between 0 and 1")));
}

/* qs_check_aging: queue_check_aging_step */
static void
qs_check_aging(QsCall *c, const QsSetting *s)
{
	queue_check_aging_step(DatumGetIntervalP(QS_VALUE(c, s)));
}

/* qs_check_on_rate_limited: one of three; the worker rereads it */
static void
qs_check_on_rate_limited(QsCall *c, const QsSetting *s)
{
	char	   *o = TextDatumGetCString(QS_VALUE(c, s));

	if (strcmp(o, "retry") != 0 && strcmp(o, "pause_key") != 0 &&
		strcmp(o, "pause_queue") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: on_rate_limited must be 'retry', 'pause_key' or 'pause_queue', not \"%s\"", o)));
	NtaskWakeWorkerAtCommit();	/* the worker rereads its http queues */
}

/* qs_check_on_parent_failed: NtaskCheckParentPolicy */
static void
qs_check_on_parent_failed(QsCall *c, const QsSetting *s)
{
	NtaskCheckParentPolicy(DatumGetTextPP(QS_VALUE(c, s)));
}

/* qs_fill_guard: the guard's parameter is its checked, qualified name */
static void
qs_fill_guard(QsCall *c, const QsSetting *s)
{
	c->values[s->param] = CStringGetTextDatum(c->guard_name);
}

/*
 * qs_fill_rate: a rate limit is parsed (queue_parse_rate) into its count
 * (0 for 'none') and, unless 'none', its interval, the next parameter
 */
static void
qs_fill_rate(QsCall *c, const QsSetting *s)
{
	int32		n;

	queue_parse_rate(DatumGetTextPP(QS_VALUE(c, s)), s->name,
					 &n, &c->values[s->param + 1]);
	c->values[s->param] = Int32GetDatum(n);
	c->nulls[s->param + 1] = n > 0 ? ' ' : 'n';
}

/*
 * qs_check_args
 *		The checks of every setting given (qs_settings), in its order.
 */
static void
qs_check_args(QsCall *c)
{
	FunctionCallInfo fcinfo = c->fcinfo;
	const QsSetting *s;

	for (s = qs_settings; s < qs_settings + lengthof(qs_settings); s++)
	{
		Assert(s->type == queue_update_plan.argtypes[s->param]);
		if (s->check && !PG_ARGISNULL(s->arg))
			s->check(c, s);
	}
	/* the worker rereads an http queue's breaker at once, not next tick */
	if (!PG_ARGISNULL(QS_ARG_BREAKER_FAILURES) ||
		!PG_ARGISNULL(QS_ARG_BREAKER_COOLDOWN))
		NtaskWakeWorkerAtCommit();
}

/*
 * qs_fill_params
 *		The parameters of queue_update_plan from the arguments; then the
 *		warning that a rate limit or a retry share is not enforced yet.
 */
static void
qs_fill_params(QsCall *c)
{
	FunctionCallInfo fcinfo = c->fcinfo;
	const QsSetting *s;

	memset(c->nulls, 'n', sizeof(c->nulls));
	c->values[QU_ARG_QUEUE] = PointerGetDatum(c->queue);
	c->nulls[QU_ARG_QUEUE] = ' ';
	for (s = qs_settings; s < qs_settings + lengthof(qs_settings); s++)
	{
		if (PG_ARGISNULL(s->arg))
			continue;
		c->values[s->param] = PG_GETARG_DATUM(s->arg);
		c->nulls[s->param] = ' ';
		if (s->fill)
			s->fill(c, s);
	}
	/* a rate limit (count 0 is 'none') or a retry share */
	if ((c->nulls[QU_ARG_RATE_N] == ' ' &&
		 DatumGetInt32(c->values[QU_ARG_RATE_N]) > 0) ||
		(c->nulls[QU_ARG_PARTITION_RATE_N] == ' ' &&
		 DatumGetInt32(c->values[QU_ARG_PARTITION_RATE_N]) > 0) ||
		(!PG_ARGISNULL(QS_ARG_RETRY_SHARE) &&
		 PG_GETARG_FLOAT4(QS_ARG_RETRY_SHARE) < 1.0f))
		queue_warn_not_preloaded("the rate limit or retry share cannot be enforced",
								 "ntask_claim refuses a queue with a rate limit or a retry share (SQLSTATE 55000) until ntask is preloaded.");
}

/*
 * qs_write
 *		Create the queue row if needed, store the guard, update the row
 *		and check the result (queue_check_flow, queue_check_aging).
 *		Returns the updated row.  In SPI.
 */
static SPITupleTable *
qs_write(QsCall *c)
{
	FunctionCallInfo fcinfo = c->fcinfo;
	SPITupleTable *row;

	if (!PG_ARGISNULL(QS_ARG_ORDERED) && PG_GETARG_BOOL(QS_ARG_ORDERED))
		NtaskExecPlan(&queue_ordered_lock_plan, NULL, NULL, SPI_OK_UTILITY);
	NtaskExecPlan(&queue_insert_plan, c->values, NULL, SPI_OK_INSERT);
	if (c->guard_name)
	{
		Datum		gv[QUEUE_SET_GUARD_NARGS];

		gv[QUEUE_SET_GUARD_ARG_QUEUE] = c->values[QU_ARG_QUEUE];
		gv[QUEUE_SET_GUARD_ARG_GUARD] = c->values[QU_ARG_GUARD];
		gv[QUEUE_SET_GUARD_ARG_OWNER] =
			DirectFunctionCall1(namein, CStringGetDatum(c->guard_owner));
		NtaskExecPlan(&queue_set_guard_plan, gv, NULL, SPI_OK_UPDATE);
	}
	/* the row exists now, so no row back means the backoff check failed */
	if (NtaskExecPlan(&queue_update_plan, c->values, c->nulls,
					  SPI_OK_UPDATE_RETURNING) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: backoff_max must not be less than backoff_base")));
	row = SPI_tuptable;
	queue_check_flow(row);
	queue_check_aging(row);
	return row;
}

/*
 * qs_after
 *		What a change sets off: waiting claims and the worker woken, an
 *		ordered queue's tasks joining the order index, a fair queue's
 *		keyless tasks joining the keyless partition.  In SPI.
 */
static void
qs_after(QsCall *c)
{
	FunctionCallInfo fcinfo = c->fcinfo;
	const QsSetting *s;

	/*
	 * A change of what a claim may hand out can free work: every waiting
	 * claim of the queue looks again at commit, and the worker
	 * (ntask_queue_resume does the same).  Any setting marked frees given,
	 * whatever its value (a change that frees nothing costs each waiter one
	 * look).
	 */
	for (s = qs_settings; s < qs_settings + lengthof(qs_settings); s++)
		if (s->frees && !PG_ARGISNULL(s->arg))
		{
			NtaskWakeWaitersAtCommit(c->qname, NTASK_MAX_BATCH, 0);
			NtaskWakeWorkerAtCommit();
			break;
		}
	if (!PG_ARGISNULL(QS_ARG_ORDERED) && PG_GETARG_BOOL(QS_ARG_ORDERED))
		NtaskExecPlan(&queue_ordered_plan, c->values, NULL, SPI_OK_UPDATE);
	if (!PG_ARGISNULL(QS_ARG_FAIRNESS) &&
		strcmp(text_to_cstring(PG_GETARG_TEXT_PP(QS_ARG_FAIRNESS)), "partition") == 0)
	{
		NtaskExecPlan(&queue_fair_keyless_plan, c->values, NULL, SPI_OK_UPDATE);
		/* the round starts again at the first key (fair.c) */
		NtaskFairAdvance(c->qname, cstring_to_text(""));
	}
}

/*
 * qs_return_row
 *		The updated row (row) as the function's one result row.
 */
static void
qs_return_row(FunctionCallInfo fcinfo, SPITupleTable *row)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			natts = rsinfo->setDesc->natts;
	Datum	   *rowvals = palloc(sizeof(Datum) * natts);
	bool	   *rownulls = palloc(sizeof(bool) * natts);
	int			col = 0;
	int			i;

	/*
	 * the row type keeps dropped columns (an installation updated from 0.3
	 * keeps the guard column 0.3 replaced): skip them
	 */
	for (i = 0; i < natts; i++)
	{
		if (TupleDescAttr(rsinfo->setDesc, i)->attisdropped)
		{
			rowvals[i] = (Datum) 0;
			rownulls[i] = true;
			continue;
		}
		if (++col > row->tupdesc->natts)
			elog(ERROR, "ntask: ntask.queue has fewer columns than its row type");
		rowvals[i] = NtaskTupGetDatum(row, 0, col, &rownulls[i]);
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
						 rowvals, rownulls);
}

/*
 * ntask_queue_set(queue, max_attempts, total_deadline, lease, backoff_base,
 *				   backoff_max, guard, target, retention, notify, fairness,
 *				   max_inflight, partition_max_inflight, ordered,
 *				   ordered_skip_repair, rate_limit, partition_rate_limit,
 *				   retry_share, breaker_failures, breaker_cooldown,
 *				   priority_aging, priority_aging_max, on_rate_limited, on_parent_failed)
 *		RETURNS SETOF ntask.queue
 *		Create the queue or update the given fields (NULL keeps the current
 *		value, or the table default for a new queue).  Returns the row.
 *		Takes the queue row's lock until the caller's transaction ends.
 */
Datum
ntask_queue_set(PG_FUNCTION_ARGS)
{
	QsCall		c = {0};
	SPITupleTable *row;

	c.fcinfo = fcinfo;
	c.queue = NtaskArgText(fcinfo, QS_ARG_QUEUE, "queue", NTASK_MAX_QUEUE_LEN);
	NtaskCheckNargs(fcinfo, QS_NARGS);	/* before its new arguments are read */
	queue_check_name(c.queue);
	qs_check_args(&c);
	qs_fill_params(&c);
	c.qname = text_to_cstring(c.queue);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	row = qs_write(&c);
	qs_after(&c);
	qs_return_row(fcinfo, row);
	NtaskAudit(GetUserNameFromId(GetUserId(), false), "queue_set", 0, c.qname,
			   "policy updated", NULL, NULL);
	SPI_finish();
	return (Datum) 0;
}

/*
 * ntask_queue_clear_guard(queue text) RETURNS void
 *		Remove a queue's guard.  Unknown queue: 42704.
 */
Datum
ntask_queue_clear_guard(PG_FUNCTION_ARGS)
{
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	Datum		values[QUEUE_NARGS];
	char	   *qname = text_to_cstring(queue);

	values[QUEUE_ARG_QUEUE] = PointerGetDatum(queue);
	SPI_connect();
	if (NtaskExecPlan(&queue_clear_guard_plan, values, NULL, SPI_OK_UPDATE) == 0)
		NtaskQueueNotFound(qname);
	NtaskAudit(GetUserNameFromId(GetUserId(), false), "queue_clear_guard", 0,
			   qname, "guard removed", NULL, NULL);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * ntask_queue_pause(queue, actor, reason) RETURNS boolean
 *		Pause a queue: from the commit on, no claim hands out
 *		any of its tasks (the pick tests the queue row's paused_at, a
 *		column it reads anyway, claim.c), neither ntask_claim nor
 *		ntask_transition_and_claim nor the background worker's dispatch.
 *		Waiting claims keep waiting; enqueues, schedules and the leases
 *		already out go on.  Audited (queue_pause).  Returns false and
 *		changes nothing when the queue is already paused by an operator.
 *		Errors: NULL argument 22004; empty 22023; too long 22001; unknown
 *		queue 42704.
 */
Datum
ntask_queue_pause(PG_FUNCTION_ARGS)
{
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	text	   *actor = NtaskArgText(fcinfo, 1, "actor", NTASK_MAX_NAME_LEN);
	text	   *reason = NtaskArgText(fcinfo, 2, "reason", NTASK_MAX_REASON_LEN);
	char	   *qname = text_to_cstring(queue);
	Datum		values[QUEUE_PAUSE_NARGS];
	bool		paused;

	values[QUEUE_PAUSE_ARG_QUEUE] = PointerGetDatum(queue);
	values[QUEUE_PAUSE_ARG_ACTOR] = PointerGetDatum(actor);
	values[QUEUE_PAUSE_ARG_REASON] = PointerGetDatum(reason);
	SPI_connect();
	paused = NtaskExecPlan(&queue_pause_plan, values, NULL,
						   SPI_OK_UPDATE_RETURNING) > 0;
	if (!paused)
	{
		/* no such queue, or paused already (the row lock was waited for) */
		if (NtaskExecPlan(&queue_resume_lock_plan, values, NULL, SPI_OK_SELECT) == 0)
			NtaskQueueNotFound(qname);
	}
	else
		NtaskAudit(text_to_cstring(actor), "queue_pause", 0, qname,
				   text_to_cstring(reason), NULL, NULL);
	SPI_finish();
	PG_RETURN_BOOL(paused);
}

/*
 * ntask_queue_resume(queue, actor, reason) RETURNS boolean
 *		End every pause of a queue: the operator's, a rate limit's
 *		(paused_until) and its key pauses (ntask.key_pause).  Waiting claims
 *		of the queue and the background worker are woken at commit.
 *		Audited (queue_resume).  Returns false and changes nothing when
 *		nothing was paused.  Errors as ntask_queue_pause's.
 */
Datum
ntask_queue_resume(PG_FUNCTION_ARGS)
{
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	text	   *actor = NtaskArgText(fcinfo, 1, "actor", NTASK_MAX_NAME_LEN);
	text	   *reason = NtaskArgText(fcinfo, 2, "reason", NTASK_MAX_REASON_LEN);
	char	   *qname = text_to_cstring(queue);
	Datum		values[QUEUE_NARGS];
	SPITupleTable *tt;
	bool		was;

	values[QUEUE_ARG_QUEUE] = PointerGetDatum(queue);
	SPI_connect();
	if (NtaskExecPlan(&queue_resume_lock_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskQueueNotFound(qname);
	tt = SPI_tuptable;
	was = NtaskTupGetBool(tt, 0, QUEUE_RESUME_LOCK_PAUSED) ||
		NtaskTupGetBool(tt, 0, QUEUE_RESUME_LOCK_RATE) ||
		NtaskTupGetBool(tt, 0, QUEUE_RESUME_LOCK_KEYS);
	if (was)
	{
		NtaskExecPlan(&queue_resume_plan, values, NULL, SPI_OK_UPDATE);
		NtaskExecPlan(&queue_resume_keys_plan, values, NULL, SPI_OK_DELETE);
		NtaskAudit(text_to_cstring(actor), "queue_resume", 0, qname,
				   text_to_cstring(reason), NULL, NULL);
		/* every waiting claim of the queue looks again, and the worker */
		NtaskWakeWaitersAtCommit(qname, NTASK_MAX_BATCH, 0);
		NtaskWakeWorkerAtCommit();
	}
	SPI_finish();
	PG_RETURN_BOOL(was);
}
