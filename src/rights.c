/*-------------------------------------------------------------------------
 *
 * rights.c
 *	  Who may act on a queue's tasks: the producer_role and worker_role
 *	  checks of the functions that take a queue or a task (enqueue, claim,
 *	  result, saga; lease, receipt, transition), and their errors.  The
 *	  roles are set by ntask_queue_set_roles (queue.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/rights.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"
#include "ntask_task.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

/*
 * Denied; and whether the role the queue names no longer exists (DROP
 * ROLE leaves its oid in ntask.queue).
 */
static NtaskPlan rights_queue_plan = {
	"queue right",
	.ncols = 2,
	"SELECT x.role IS NOT NULL AND NOT pg_catalog.pg_has_role($2, x.role, 'USAGE'), "
	"  x.role IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r "
	"    WHERE r.oid OPERATOR(pg_catalog.=) x.role) "
	"FROM (SELECT (CASE WHEN $3 THEN q.producer_role ELSE q.worker_role END)::pg_catalog.oid AS role "
	"      FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1) x",
	3, {TEXTOID, OIDOID, BOOLOID}
};

/* does task $1's queue name a worker_role that no longer exists? */
static NtaskPlan rights_task_role_dropped_plan = {
	"task right: worker_role dropped",
	.ncols = 1,
	"SELECT 1 FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND q.worker_role IS NOT NULL "
	"  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r "
	"    WHERE r.oid OPERATOR(pg_catalog.=) q.worker_role::pg_catalog.oid)",
	1, {INT8OID}
};

/* the detail and hint of a refusal by a role that was dropped */
#define NTASK_ROLE_DROPPED_DETAIL(what) \
	errdetail("The queue's %s no longer exists: the role was dropped (DROP ROLE) after ntask_queue_set_roles named it, so only a superuser passes the check.", what)
#define NTASK_ROLE_DROPPED_HINT \
	errhint("An admin names another role, or NULL, with ntask_queue_set_roles(); ntask.queue_stats lists it in dropped_roles.")

/*
 * NtaskQueueNotFound
 *		Raise 42704 for an unknown queue.
 */
void
NtaskQueueNotFound(const char *queue)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("ntask: queue \"%s\" does not exist", queue),
			 errhint("Create it with ntask_queue_set().")));
}

/*
 * NtaskCheckQueueRight
 *		Raise 42704 for an unknown queue, 42501 if the queue names a
 *		producer_role (producer) or worker_role (!producer) the caller does
 *		not have the privileges of.  Callers ask before they reveal anything
 *		about the queue's tasks: a refused enqueue of an existing key gets
 *		the same error as one of a new key.
 */
void
NtaskCheckQueueRight(text *queue, bool producer)
{
	Datum		values[3];

	values[0] = PointerGetDatum(queue);
	values[1] = ObjectIdGetDatum(NtaskCaller());
	values[2] = BoolGetDatum(producer);
	if (NtaskExecPlan(&rights_queue_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskQueueNotFound(text_to_cstring(queue));
	if (NtaskGetBool(0, 1) && NtaskGetBool(0, 2))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: permission denied to %s queue \"%s\"",
						producer ? "enqueue into" : "claim from",
						text_to_cstring(queue)),
				 NTASK_ROLE_DROPPED_DETAIL(producer ? "producer_role" : "worker_role"),
				 NTASK_ROLE_DROPPED_HINT));
	if (NtaskGetBool(0, 1))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: permission denied to %s queue \"%s\"",
						producer ? "enqueue into" : "claim from",
						text_to_cstring(queue)),
				 errhint("The queue's %s must be granted to the role (ntask_queue_set_roles).",
						 producer ? "producer_role" : "worker_role")));
}

static NtaskPlan rights_queue_exists_plan = {
	"queue exists",
	.ncols = 0,
	"SELECT FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

/*
 * NtaskCheckQueueExists
 *		Raise 42704 for an unknown queue.  The check of the administrative
 *		functions (ntask_bulk): their EXECUTE right, granted to ntask_admin
 *		only, is the right to act on every queue's tasks, as ntask_cancel
 *		and ntask_replay do; a queue's worker_role is not asked for.
 */
void
NtaskCheckQueueExists(text *queue)
{
	Datum		values[1];

	values[0] = PointerGetDatum(queue);
	if (NtaskExecPlan(&rights_queue_exists_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskQueueNotFound(text_to_cstring(queue));
}

/*
 * NtaskTaskRightDenied
 *		Raise 42501 for a task of a queue whose worker_role the caller
 *		lacks.  Raised before anything about the task (state, token) is
 *		revealed.
 */
void
NtaskTaskRightDenied(int64 task_id)
{
	Datum		values[1];

	/* every caller is inside its SPI connection */
	values[0] = Int64GetDatum(task_id);
	if (NtaskExecPlan(&rights_task_role_dropped_plan, values, NULL, SPI_OK_SELECT) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: permission denied for task %lld", (long long) task_id),
				 NTASK_ROLE_DROPPED_DETAIL("worker_role"),
				 NTASK_ROLE_DROPPED_HINT));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("ntask: permission denied for task %lld", (long long) task_id),
			 errhint("The task's queue restricts its workers to its worker_role (ntask_queue_set_roles).")));
}
