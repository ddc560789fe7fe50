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

#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

/* the parameters of rights_queue_plan */
typedef enum RightsQueueArg
{
	RIGHTS_QUEUE_ARG_QUEUE,		/* $1 */
	RIGHTS_QUEUE_ARG_CALLER,	/* $2 */
	RIGHTS_QUEUE_ARG_PRODUCER,	/* $3, else the worker right */
	RIGHTS_QUEUE_NARGS
} RightsQueueArg;

/*
 * Denied; and whether the role the queue names no longer exists (DROP
 * ROLE leaves its oid in ntask.queue).
 */
typedef enum RightsQueueCol
{
	RIGHTS_QUEUE_DENIED = 1,
	RIGHTS_QUEUE_ROLE_DROPPED,
	RIGHTS_QUEUE_NCOLS = RIGHTS_QUEUE_ROLE_DROPPED
} RightsQueueCol;

static NtaskPlan rights_queue_plan = {
	"queue right",
	.ncols = RIGHTS_QUEUE_NCOLS,
	"SELECT x.role IS NOT NULL AND NOT pg_catalog.pg_has_role($2, x.role, 'USAGE'), "
	"  x.role IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r "
	"    WHERE r.oid OPERATOR(pg_catalog.=) x.role) "
	"FROM (SELECT (CASE WHEN $3 THEN q.producer_role ELSE q.worker_role END)::pg_catalog.oid AS role "
	"      FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1) x",
	RIGHTS_QUEUE_NARGS, {TEXTOID, OIDOID, BOOLOID}
};

/* the parameter of rights_task_role_dropped_plan */
typedef enum RightsTaskArg
{
	RIGHTS_TASK_ARG_TASK_ID,	/* $1 */
	RIGHTS_TASK_NARGS
} RightsTaskArg;

/* does task $1's queue name a worker_role that no longer exists? */
static NtaskPlan rights_task_role_dropped_plan = {
	"task right: worker_role dropped",
	.ncols = 1,
	"SELECT 1 FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND q.worker_role IS NOT NULL "
	"  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r "
	"    WHERE r.oid OPERATOR(pg_catalog.=) q.worker_role::pg_catalog.oid)",
	RIGHTS_TASK_NARGS, {INT8OID}
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
	Datum		values[RIGHTS_QUEUE_NARGS];
	SPITupleTable *tt;

	values[RIGHTS_QUEUE_ARG_QUEUE] = PointerGetDatum(queue);
	values[RIGHTS_QUEUE_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	values[RIGHTS_QUEUE_ARG_PRODUCER] = BoolGetDatum(producer);
	if (NtaskExecPlan(&rights_queue_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskQueueNotFound(text_to_cstring(queue));
	tt = SPI_tuptable;
	if (NtaskTupGetBool(tt, 0, RIGHTS_QUEUE_DENIED) &&
		NtaskTupGetBool(tt, 0, RIGHTS_QUEUE_ROLE_DROPPED))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: permission denied to %s queue \"%s\"",
						producer ? "enqueue into" : "claim from",
						text_to_cstring(queue)),
				 NTASK_ROLE_DROPPED_DETAIL(producer ? "producer_role" : "worker_role"),
				 NTASK_ROLE_DROPPED_HINT));
	if (NtaskTupGetBool(tt, 0, RIGHTS_QUEUE_DENIED))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: permission denied to %s queue \"%s\"",
						producer ? "enqueue into" : "claim from",
						text_to_cstring(queue)),
				 errhint("The queue's %s must be granted to the role (ntask_queue_set_roles).",
						 producer ? "producer_role" : "worker_role")));
}

/* the parameter of rights_queue_exists_plan */
typedef enum RightsExistsArg
{
	RIGHTS_EXISTS_ARG_QUEUE,	/* $1 */
	RIGHTS_EXISTS_NARGS
} RightsExistsArg;

static NtaskPlan rights_queue_exists_plan = {
	"queue exists",
	.ncols = 0,
	"SELECT FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	RIGHTS_EXISTS_NARGS, {TEXTOID}
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
	Datum		values[RIGHTS_EXISTS_NARGS];

	values[RIGHTS_EXISTS_ARG_QUEUE] = PointerGetDatum(queue);
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
	Datum		values[RIGHTS_TASK_NARGS];

	/* every caller is inside its SPI connection */
	values[RIGHTS_TASK_ARG_TASK_ID] = Int64GetDatum(task_id);
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
