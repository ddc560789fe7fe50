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

#include "catalog/pg_type.h"
#include "utils/builtins.h"

static NtaskPlan rights_queue_plan = {
	"queue right",
	"SELECT (CASE WHEN $3 THEN q.producer_role ELSE q.worker_role END) IS NOT NULL "
	"  AND NOT pg_catalog.pg_has_role($2, "
	"    CASE WHEN $3 THEN q.producer_role ELSE q.worker_role END, 'USAGE') "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	3, {TEXTOID, OIDOID, BOOLOID}
};

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
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("ntask: permission denied for task %lld", (long long) task_id),
			 errhint("The task's queue restricts its workers to its worker_role (ntask_queue_set_roles).")));
}
