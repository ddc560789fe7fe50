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

static NtaskPlan queue_insert_plan = {
	"queue insert",
	.ncols = 0,
	"INSERT INTO ntask.queue (queue) VALUES ($1) "
	"ON CONFLICT (queue) DO NOTHING",
	1, {TEXTOID}
};

/*
 * Parameters of queue_update_plan: the 24 arguments of ntask_queue_set,
 * with each rate limit as two (count, interval; count 0 for 'none').
 */
#define QUEUE_NARGS 24
#define QUEUE_NPARAMS 26

static NtaskPlan queue_update_plan = {
	"queue update",
	.ncols = 37,
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
	QUEUE_NPARAMS, {TEXTOID, INT4OID, INTERVALOID, INTERVALOID, INTERVALOID, INTERVALOID,
		TEXTOID, JSONBOID, INTERVALOID, BOOLOID, TEXTOID,
		INT4OID, INT4OID, BOOLOID, BOOLOID, INT4OID, INTERVALOID, INT4OID,
	INTERVALOID, FLOAT4OID, INT4OID, INTERVALOID, INTERVALOID, INT4OID, TEXTOID, TEXTOID}
};

/* $2: the caller; true when the queue restricts this right to a role it lacks */
static NtaskPlan queue_roles_plan = {
	"queue roles",
	.ncols = 1,
	"UPDATE ntask.queue q SET producer_role = $2, worker_role = $3, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 RETURNING 1",
	3, {TEXTOID, REGROLEOID, REGROLEOID}
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
	1, {TEXTOID}
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
	1, {TEXTOID}
};

static NtaskPlan queue_clear_guard_plan = {
	"queue clear guard",
	.ncols = 0,
	"UPDATE ntask.queue SET guard = NULL, guard_owner = NULL, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE queue OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

/* a new guard and its owner, always together (guard.c checks the owner) */
static NtaskPlan queue_set_guard_plan = {
	"queue set guard",
	.ncols = 0,
	"UPDATE ntask.queue SET guard = $2, guard_owner = $3 "
	"WHERE queue OPERATOR(pg_catalog.=) $1",
	3, {TEXTOID, TEXTOID, NAMEOID}
};

/*
 * Pause: only a queue that is not paused by an operator is
 * changed (a second pause keeps the first one's actor, time and reason).
 * Takes the queue row's lock; claims read the row, never lock it, and see
 * the pause from their next statement on.
 */
static NtaskPlan queue_pause_plan = {
	"queue pause",
	.ncols = 1,
	"UPDATE ntask.queue q SET paused_at = pg_catalog.statement_timestamp(), "
	"  paused_by = $2, pause_reason = $3, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 AND q.paused_at IS NULL "
	"RETURNING 1",
	3, {TEXTOID, TEXTOID, TEXTOID}
};

/*
 * Resume: the queue row, locked, and whether anything is paused: the
 * operator's pause, a rate limit's (paused_until), or keys (column 1..3).
 */
static NtaskPlan queue_resume_lock_plan = {
	"queue resume lock",
	.ncols = 3,
	"SELECT q.paused_at IS NOT NULL, "
	"  coalesce(q.paused_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp(), false), "
	"  EXISTS (SELECT 1 FROM ntask.key_pause k WHERE k.queue OPERATOR(pg_catalog.=) q.queue "
	"    AND k.until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()) "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE",
	1, {TEXTOID}
};

static NtaskPlan queue_resume_plan = {
	"queue resume",
	.ncols = 0,
	"UPDATE ntask.queue q SET paused_at = NULL, paused_by = NULL, pause_reason = NULL, "
	"  paused_until = NULL, keys_paused_until = NULL, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

static NtaskPlan queue_resume_keys_plan = {
	"queue resume keys",
	.ncols = 0,
	"DELETE FROM ntask.key_pause k WHERE k.queue OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
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
		proc->pronargs == 2 &&
		proc->proargtypes.values[0] == TEXTOID &&
		proc->proargtypes.values[1] == JSONBOID;
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
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	char	   *qname = text_to_cstring(queue);

	values[0] = PointerGetDatum(queue);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';
	values[2] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[2] = PG_ARGISNULL(2) ? 'n' : ' ';
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
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	Datum		values[QUEUE_NPARAMS];
	char		nulls[QUEUE_NPARAMS];
	int			i;
	char	   *qname;
	char	   *guard_name = NULL;
	char	   *guard_owner = NULL;
	SPITupleTable *row;

	NtaskCheckNargs(fcinfo, 24);	/* before its new arguments are read */
	queue_check_name(queue);
	if (!PG_ARGISNULL(1) &&
		(PG_GETARG_INT32(1) < 1 || PG_GETARG_INT32(1) > 1000))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: max_attempts must be between 1 and 1000"),
				 errdetail("max_attempts counts every attempt, including the first.")));
	if (!PG_ARGISNULL(2))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(2), "total_deadline");
	if (!PG_ARGISNULL(3))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(3), "lease");
	if (!PG_ARGISNULL(4))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(4), "backoff_base");
	if (!PG_ARGISNULL(5))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(5), "backoff_max");
	if (!PG_ARGISNULL(6))
		guard_name = queue_check_guard(PG_GETARG_OID(6), &guard_owner);
	if (!PG_ARGISNULL(7))
	{
		Jsonb	   *target = PG_GETARG_JSONB_P(7);

		NtaskWakeWorkerAtCommit();	/* let it reread the target */
		/* JSON null and {} remove the target (queue_update_plan) */
		if (!queue_target_removed(target))
		{
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
	}
	if (!PG_ARGISNULL(8))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(8), "retention");
	/* the channel is "ntask_<queue>", and a channel name has at most 63 bytes */
	if (!PG_ARGISNULL(9) && PG_GETARG_BOOL(9) &&
		VARSIZE_ANY_EXHDR(queue) > NAMEDATALEN - 1 - 6)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: notify needs a queue name of at most %d bytes",
						NAMEDATALEN - 1 - 6),
				 errdetail("The channel is \"ntask_\" followed by the queue name, and a channel name has at most %d bytes.",
						   NAMEDATALEN - 1)));

	if (!PG_ARGISNULL(10))
	{
		char	   *f = text_to_cstring(PG_GETARG_TEXT_PP(10));

		if (strcmp(f, "none") != 0 && strcmp(f, "partition") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: fairness must be 'none' or 'partition', not \"%s\"", f)));
	}

	queue_check_cap(fcinfo, 11, "max_inflight", 1000000);
	queue_check_cap(fcinfo, 12, "partition_max_inflight", 1000000);
	queue_check_cap(fcinfo, 18, "breaker_failures", 1000);
	if (!PG_ARGISNULL(17))
	{
		float4		share = PG_GETARG_FLOAT4(17);

		if (!(share >= 0.0f && share <= 1.0f))	/* NaN too */
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: retry_share must be between 0 and 1")));
	}
	if (!PG_ARGISNULL(19))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(19), "breaker_cooldown");
	if (!PG_ARGISNULL(20))
		queue_check_aging_step(PG_GETARG_INTERVAL_P(20));
	if (!PG_ARGISNULL(22))
	{
		char	   *o = text_to_cstring(PG_GETARG_TEXT_PP(22));

		if (strcmp(o, "retry") != 0 && strcmp(o, "pause_key") != 0 &&
			strcmp(o, "pause_queue") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: on_rate_limited must be 'retry', 'pause_key' or 'pause_queue', not \"%s\"", o)));
		NtaskWakeWorkerAtCommit();	/* the worker rereads its http queues */
	}
	if (!PG_ARGISNULL(23))
		NtaskCheckParentPolicy(PG_GETARG_TEXT_PP(23));
	/* the worker rereads an http queue's breaker at once, not next tick */
	if ((!PG_ARGISNULL(18)) || (!PG_ARGISNULL(19)))
		NtaskWakeWorkerAtCommit();

	/* arguments 0..14 are parameters 1..15; then the rates take two each */
	for (i = 0; i < QUEUE_NPARAMS; i++)
		nulls[i] = 'n';
	for (i = 0; i < QUEUE_NARGS; i++)
	{
		int			p = i < 15 ? i : i == 15 ? 15 : i == 16 ? 17 : i + 2;
		bool		isnull = PG_ARGISNULL(i);

		if (i == 15 || i == 16)
		{
			int32		n;

			if (isnull)
				continue;
			queue_parse_rate(PG_GETARG_TEXT_PP(i),
							 i == 15 ? "rate_limit" : "partition_rate_limit",
							 &n, &values[p + 1]);
			values[p] = Int32GetDatum(n);
			nulls[p] = ' ';
			nulls[p + 1] = n > 0 ? ' ' : 'n';
			continue;
		}
		values[p] = isnull ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[p] = isnull ? 'n' : ' ';
	}
	/* a rate limit (parsed above: count 0 is 'none') or a retry share */
	if ((nulls[15] == ' ' && DatumGetInt32(values[15]) > 0) ||
		(nulls[17] == ' ' && DatumGetInt32(values[17]) > 0) ||
		(!PG_ARGISNULL(17) && PG_GETARG_FLOAT4(17) < 1.0f))
		queue_warn_not_preloaded("the rate limit or retry share cannot be enforced",
								 "ntask_claim refuses a queue with a rate limit or a retry share (SQLSTATE 55000) until ntask is preloaded.");

	values[0] = PointerGetDatum(queue);
	if (guard_name)
		values[6] = CStringGetTextDatum(guard_name);
	qname = text_to_cstring(queue);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	if (!PG_ARGISNULL(13) && PG_GETARG_BOOL(13))
		NtaskExecPlan(&queue_ordered_lock_plan, NULL, NULL, SPI_OK_UTILITY);
	NtaskExecPlan(&queue_insert_plan, values, NULL, SPI_OK_INSERT);
	if (guard_name)
	{
		Datum		gv[3];

		gv[0] = values[0];
		gv[1] = values[6];
		gv[2] = DirectFunctionCall1(namein, CStringGetDatum(guard_owner));
		NtaskExecPlan(&queue_set_guard_plan, gv, NULL, SPI_OK_UPDATE);
	}
	/* the row exists now, so no row back means the backoff check failed */
	if (NtaskExecPlan(&queue_update_plan, values, nulls,
					  SPI_OK_UPDATE_RETURNING) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: backoff_max must not be less than backoff_base")));
	row = SPI_tuptable;
	queue_check_flow(row);
	queue_check_aging(row);

	/*
	 * A change of what a claim may hand out can free work: every waiting
	 * claim of the queue looks again at commit, and the worker
	 * (ntask_queue_resume does the same).  fairness,
	 * max_inflight, partition_max_inflight, ordered, ordered_skip_repair,
	 * rate_limit, partition_rate_limit, retry_share, priority_aging and
	 * its cap: any of them given, whatever its value (a change that frees
	 * nothing costs each waiter one look).
	 */
	for (i = 10; i <= 21; i++)
		if (i != 18 && i != 19 && !PG_ARGISNULL(i))
		{
			NtaskWakeWaitersAtCommit(qname, NTASK_MAX_BATCH, 0);
			NtaskWakeWorkerAtCommit();
			break;
		}
	if (!PG_ARGISNULL(13) && PG_GETARG_BOOL(13))
		NtaskExecPlan(&queue_ordered_plan, values, NULL, SPI_OK_UPDATE);
	if (!PG_ARGISNULL(10) &&
		strcmp(text_to_cstring(PG_GETARG_TEXT_PP(10)), "partition") == 0)
	{
		NtaskExecPlan(&queue_fair_keyless_plan, values, NULL, SPI_OK_UPDATE);
		/* the round starts again at the first key (fair.c) */
		NtaskFairAdvance(qname, cstring_to_text(""));
	}
	{
		int			natts = rsinfo->setDesc->natts;
		Datum	   *rowvals = palloc(sizeof(Datum) * natts);
		bool	   *rownulls = palloc(sizeof(bool) * natts);
		int			col = 0;

		/*
		 * the row type keeps dropped columns (an installation updated from
		 * 0.3 keeps the guard column 0.3 replaced): skip them
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
	NtaskAudit(GetUserNameFromId(GetUserId(), false), "queue_set", 0, qname,
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
	Datum		values[1];
	char	   *qname = text_to_cstring(queue);

	values[0] = PointerGetDatum(queue);
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
	Datum		values[3];
	bool		paused;

	values[0] = PointerGetDatum(queue);
	values[1] = PointerGetDatum(actor);
	values[2] = PointerGetDatum(reason);
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
	Datum		values[1];
	bool		was;

	values[0] = PointerGetDatum(queue);
	SPI_connect();
	if (NtaskExecPlan(&queue_resume_lock_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskQueueNotFound(qname);
	was = NtaskGetBool(0, 1) || NtaskGetBool(0, 2) || NtaskGetBool(0, 3);
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
