/*-------------------------------------------------------------------------
 *
 * context.c
 *	  The claim's context column (docs/design.md "The claim's context
 *	  column"): what a claimed task carries besides its payload.  Built
 *	  only for rows whose lease statement said one of its parts is set,
 *	  so a plain task pays one test.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/context.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_task.h"

#include "catalog/pg_type.h"

/*
 * The parents of task $1 with their stored results, as the object
 * {"parents": {"queue:key": result, ...}} (a parent pruned by retention is
 * missing from it).
 */
static NtaskPlan context_parents_plan = {
	"claim context parents",
	"SELECT pg_catalog.jsonb_build_object('parents', coalesce(pg_catalog.jsonb_object_agg("
	"    p.queue OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) p.task_key, p.result), "
	"    '{}'::pg_catalog.jsonb)) "
	"FROM ntask.task_dep d JOIN ntask.task p ON p.task_id OPERATOR(pg_catalog.=) d.parent_id "
	"WHERE d.task_id OPERATOR(pg_catalog.=) $1",
	1, {INT8OID}
};

/*
 * NtaskClaimContextParents
 *		Inside the caller's SPI connection: the context of a task with
 *		parents (has_parents).  SPI_tuptable is the caller's again on
 *		return; the value lives until SPI_finish.
 */
Datum
NtaskClaimContextParents(int64 task_id, bool *isnull)
{
	SPITupleTable *saved = SPI_tuptable;
	Datum		values[1];
	Datum		result;

	values[0] = Int64GetDatum(task_id);
	if (NtaskExecPlan(&context_parents_plan, values, NULL, SPI_OK_SELECT) != 1)
		elog(ERROR, "ntask: no context for task %lld", (long long) task_id);
	result = NtaskGetDatum(0, 1, isnull);
	SPI_tuptable = saved;
	return result;
}
