/*-------------------------------------------------------------------------
 *
 * delegate.c
 *	  Shard-addressed calls: ntask_<f>_on(shard, <f's
 *	  arguments>) for the hot API, ntask_shard(queue, key), and
 *	  ntask.token_floor(shard) and ntask.token_next(prev, floor), the
 *	  token floor and the next token of the node that holds a task row.
 *
 * On a Citus install ntask_distribute registers each ntask_<f>_on with
 * create_distributed_function, the shard as its distribution argument,
 * co-located with ntask.task: Citus then runs a call of it, made outside a
 * transaction block with a constant shard, as one call on the node that
 * holds the shard, whose statements run there against local shards (one
 * network hop instead of one per statement).  Inside a transaction block
 * (a receipt written with the business rows, say) it runs where it was
 * called, each statement routed, as ntask_<f> does: the same result,
 * more hops.  docs/scaling.md "One hop: delegated calls".
 *
 * What a form checks before it calls ntask_<f> with the other arguments:
 * that shard is a shard value of this install (22023; 0 on a plain
 * install, where the forms work too), and that the task or tasks it names
 * are of that shard (22023).  During the call the shard is the scope
 * (spi_util.c): an enqueue's key must hash to it, a claim looks in it
 * only.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/delegate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_api.h"
#include "shard.h"
#include "spi_util.h"

#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_shard_of_key);
PG_FUNCTION_INFO_V1(ntask_token_floor);
PG_FUNCTION_INFO_V1(ntask_token_next);
PG_FUNCTION_INFO_V1(ntask_enqueue_on);
PG_FUNCTION_INFO_V1(ntask_enqueue_many_on);
PG_FUNCTION_INFO_V1(ntask_claim_on);
PG_FUNCTION_INFO_V1(ntask_transition_on);
PG_FUNCTION_INFO_V1(ntask_transition_many_on);
PG_FUNCTION_INFO_V1(ntask_transition_and_claim_on);
PG_FUNCTION_INFO_V1(ntask_heartbeat_on);
PG_FUNCTION_INFO_V1(ntask_invoked_on);
PG_FUNCTION_INFO_V1(ntask_receipt_on);
PG_FUNCTION_INFO_V1(ntask_release_on);

/* what a form checks of its second argument (the first of ntask_<f>'s) */
typedef enum OnCheck
{
	ON_SCOPE,					/* nothing: the scope does it (enqueue, claim) */
	ON_TASK,					/* a task id (NULL: none) */
	ON_TASKS					/* an array of task ids */
} OnCheck;

/*
 * on_check_shard
 *		shard is a shard value of this install (ntask.shard_map; 0 on a
 *		plain install), else 22023.
 */
static void
on_check_shard(int shard)
{
	bool		ok;

	SPI_connect();
	ok = NtaskIsShardValue(shard);
	SPI_finish();
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %d is not a shard of this install", shard),
				 errhint("Pass ntask_shard(queue, key) for an enqueue or ntask_shard(task_id) for a task; a plain install has one shard, 0.")));
}

/* on_check_task: task id is of shard, else 22023 */
static void
on_check_task(int64 id, int shard)
{
	if (NTASK_ID_SHARD(id) != shard)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: task " INT64_FORMAT " is in shard %d, not %d",
						id, NTASK_ID_SHARD(id), shard),
				 errhint("Pass ntask_shard(task_id) as the shard.")));
}

/*
 * on_shard
 *		Check the shard (the first argument) and what check says of the
 *		second, then call fn with the arguments after the shard, the shard
 *		as the scope.  fn sees its own argument count, the caller's result
 *		set and flinfo (the forms return what ntask_<f> returns).
 */
static Datum
on_shard(FunctionCallInfo fcinfo, PGFunction fn, OnCheck check)
{
	LOCAL_FCINFO(sub, FUNC_MAX_ARGS);
	int			shard;
	int			old;
	int			i;
	volatile Datum result = (Datum) 0;

	if (PG_NARGS() < 2)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: a shard-addressed function was called with %d arguments", PG_NARGS()),
				 errhint("The SQL definition does not match the library: ALTER EXTENSION ntask UPDATE.")));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: shard must not be NULL")));
	shard = PG_GETARG_INT16(0);
	on_check_shard(shard);
	if (check == ON_TASK && !PG_ARGISNULL(1))
		on_check_task(PG_GETARG_INT64(1), shard);
	else if (check == ON_TASKS && !PG_ARGISNULL(1))
	{
		ArrayType  *ids = PG_GETARG_ARRAYTYPE_P(1);
		Datum	   *elems;
		bool	   *nulls;
		int			n;

		deconstruct_array(ids, INT8OID, sizeof(int64), true, TYPALIGN_DOUBLE,
						  &elems, &nulls, &n);
		for (i = 0; i < n; i++)
			if (!nulls[i])
				on_check_task(DatumGetInt64(elems[i]), shard);
	}

	InitFunctionCallInfoData(*sub, fcinfo->flinfo, PG_NARGS() - 1,
							 fcinfo->fncollation, fcinfo->context,
							 fcinfo->resultinfo);
	for (i = 1; i < PG_NARGS(); i++)
		sub->args[i - 1] = fcinfo->args[i];
	old = NtaskSetShardScope(shard);
	PG_TRY();
	{
		result = fn(sub);
	}
	PG_FINALLY();
	{
		NtaskSetShardScope(old);
	}
	PG_END_TRY();
	fcinfo->isnull = sub->isnull;
	return result;
}

Datum
ntask_enqueue_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_enqueue, ON_SCOPE);
}

Datum
ntask_enqueue_many_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_enqueue_many, ON_SCOPE);
}

Datum
ntask_claim_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_claim, ON_SCOPE);
}

Datum
ntask_transition_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_transition, ON_TASK);
}

Datum
ntask_transition_many_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_transition_many, ON_TASKS);
}

Datum
ntask_transition_and_claim_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_transition_and_claim, ON_TASK);
}

Datum
ntask_heartbeat_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_heartbeat, ON_TASK);
}

Datum
ntask_invoked_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_invoked, ON_TASK);
}

Datum
ntask_receipt_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_receipt, ON_TASK);
}

Datum
ntask_release_on(PG_FUNCTION_ARGS)
{
	return on_shard(fcinfo, ntask_release, ON_TASK);
}

/*
 * ntask_shard(queue, key) -> smallint
 *		The shard of a task of queue keyed by key (its partition key, or its
 *		task key without one); 0 on a plain install.  Declared IMMUTABLE so
 *		that the planner folds a call with constant arguments into the
 *		constant Citus needs to delegate an ntask_<f>_on call: its value
 *		depends only on the shard map, which ntask_distribute writes once.
 */
Datum
ntask_shard_of_key(PG_FUNCTION_ARGS)
{
	int16		shard;

	SPI_connect();
	shard = NtaskShardOfKey(PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1));
	SPI_finish();
	PG_RETURN_INT16(shard);
}

/*
 * ntask.token_floor(shard) -> bigint
 *		NtaskTokenFloor of the node that evaluates it.  The lease statement
 *		of a distributed install calls it with the row's shard column, so
 *		Citus sends the call with the statement to the node that holds the
 *		row (it evaluates only non-IMMUTABLE functions on the coordinator),
 *		and a token issued there is above any an earlier WAL timeline of
 *		that node issued.  Declared IMMUTABLE for that reason: its value
 *		changes only when the node is promoted, never within a statement.
 */
Datum
ntask_token_floor(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(NtaskTokenFloor());
}

/*
 * ntask.token_next(prev, floor) -> bigint
 *		NtaskTokenNext on the node that evaluates it: the lease statement's
 *		new token for a task whose latest is prev, floor the timeline's
 *		(NtaskTokenFloor here, ntask.token_floor(t.shard) on a distributed
 *		install).  Declared IMMUTABLE for the same reason as token_floor:
 *		Citus then sends it with the statement to the row's node, where
 *		the node's own sequence is drawn; PostgreSQL never folds it, since
 *		it takes the row's token.
 */
Datum
ntask_token_next(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(NtaskTokenNext(PG_GETARG_INT64(0), PG_GETARG_INT64(1)));
}
