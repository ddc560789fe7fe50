/*-------------------------------------------------------------------------
 *
 * repair.c
 *	  Administrative actions: ntask_replay, ntask_cancel,
 *	  and ntask_repair_assign (NtaskFinishTask is in attempt.c).
 *
 * Every action locks the task row first (FOR UPDATE), checks the state it
 * starts from, and writes an ntask.audit row in the same transaction, so
 * the action and its audit record commit together or not at all.
 *
 * Cancel of a leased task closes the open attempt (result canceled); the
 * worker's token is then stale for ntask_transition and ntask_invoked.
 * Replay re-runs the queue's guard, then grants a fresh budget: attempts
 * keep counting (the ledger is never rewritten) and max_attempts becomes
 * attempts + the queue's max_attempts; the deadline restarts from now.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/repair.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_api.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_replay);
PG_FUNCTION_INFO_V1(ntask_cancel);
PG_FUNCTION_INFO_V1(ntask_repair_assign);

/* rep_lock_plan's columns ($1 the task): the task row and its queue's guard */
typedef enum RepLockCol
{
	REP_LOCK_STATE = 1,
	REP_LOCK_QUEUE,
	REP_LOCK_TASK_KEY,
	REP_LOCK_PAYLOAD,
	REP_LOCK_GUARD,				/* NULL: none */
	REP_LOCK_GUARD_OWNER
} RepLockCol;

static NtaskPlan rep_lock_plan = {
	"admin lock",
	"SELECT t.state, t.queue, t.task_key, t.payload, q.guard, "
	"  q.guard_owner::pg_catalog.text "
	"FROM ntask.task t JOIN ntask.queue q "
	"  ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"FOR UPDATE OF t",
	1, {INT8OID}
};


static NtaskPlan rep_replay_plan = {
	"replay",
	"UPDATE ntask.task t SET state = 'ready', "
	"  run_at = pg_catalog.statement_timestamp(), due_at = pg_catalog.statement_timestamp(), "
	"  max_attempts = t.attempts OPERATOR(pg_catalog.+) q.max_attempts, "
	"  deadline = (SELECT $2 OPERATOR(pg_catalog.+) d.total_deadline "
	"              FROM ntask.queue d WHERE d.queue OPERATOR(pg_catalog.=) t.queue), "
	"  reason = NULL, repair_owner = NULL, repair_next_action = NULL, "
	"  finished_at = NULL, updated_at = pg_catalog.statement_timestamp() "
	"FROM ntask.queue q "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND q.queue OPERATOR(pg_catalog.=) t.queue",
	2, {INT8OID, TIMESTAMPTZOID}
};

typedef enum RepAssignArg
{
	REP_ASSIGN_ARG_TASK_ID,		/* $1 */
	REP_ASSIGN_ARG_OWNER,		/* $2 */
	REP_ASSIGN_ARG_NEXT_ACTION, /* $3 */
	REP_ASSIGN_NARGS
} RepAssignArg;

static NtaskPlan rep_assign_plan = {
	"repair assign",
	"UPDATE ntask.task t SET repair_owner = $2, repair_next_action = $3, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1"),
	REP_ASSIGN_NARGS, {INT8OID, TEXTOID, TEXTOID}
};

static char *rep_lock(int64 task_id);
static void rep_wrong_state(int64 task_id, const char *state, const char *action,
							const char *needed);

/*
 * rep_lock
 *		Lock the task row; returns its state (palloc'd).  P0002 if missing.
 *		SPI_tuptable then holds its row (RepLockCol).
 */
static char *
rep_lock(int64 task_id)
{
	Datum		values[1];

	values[0] = Int64GetDatum(task_id);
	if (NtaskExecPlan(&rep_lock_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskTaskNotFound(task_id);
	return NtaskGetCString(0, REP_LOCK_STATE);
}

/* rep_wrong_state: raise NT002 for an action not allowed in state. */
static void
rep_wrong_state(int64 task_id, const char *state, const char *action,
				const char *needed)
{
	ereport(ERROR,
			(errcode(ERRCODE_NTASK_INVALID_TASK_STATE),
			 errmsg("ntask: cannot %s task %lld in state %s",
					action, (long long) task_id, state),
			 errdetail("Only %s tasks can be %s.", needed,
					   strcmp(action, "replay") == 0 ? "replayed" :
					   strcmp(action, "cancel") == 0 ? "canceled" : "assigned")));
}


/*
 * ntask_cancel(task_id, actor, reason) RETURNS text
 *		Cancel an unfinished task (ready, retry_wait, leased or
 *		repair_required).  Returns 'applied', or 'duplicate' when it was
 *		already canceled.  succeeded/skipped tasks raise NT002.
 */
Datum
ntask_cancel(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	char	   *actor = text_to_cstring(NtaskArgText(fcinfo, 1, "actor", NTASK_MAX_NAME_LEN));
	char	   *reason = text_to_cstring(NtaskArgText(fcinfo, 2, "reason", NTASK_MAX_REASON_LEN));
	char	   *state;
	char	   *queue;
	const char *result = "applied";

	SPI_connect();
	state = rep_lock(task_id);
	queue = NtaskGetCString(0, REP_LOCK_QUEUE);
	if (strcmp(state, "canceled") == 0)
		result = "duplicate";
	else if (strcmp(state, "succeeded") == 0 || strcmp(state, "skipped") == 0)
		rep_wrong_state(task_id, state, "cancel", "unfinished or repair_required");
	else
	{
		NtaskFinishTask(task_id, "canceled", reason, "canceled", NULL, NULL);
		NtaskAudit(actor, "cancel", task_id, queue, reason, state, "canceled");
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/*
 * ntask_replay(task_id, actor, reason) RETURNS text
 *		Audited replay of a repair_required task.  The queue's guard runs
 *		first: skip/cancel finish the task instead (and say so).  Returns the
 *		task's new state: ready, skipped or canceled.  Other states: NT002.
 */
Datum
ntask_replay(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	char	   *actor = text_to_cstring(NtaskArgText(fcinfo, 1, "actor", NTASK_MAX_NAME_LEN));
	char	   *reason = text_to_cstring(NtaskArgText(fcinfo, 2, "reason", NTASK_MAX_REASON_LEN));
	char	   *state;
	char	   *queue;
	const char *to_state = "ready";
	bool		isnull;
	char	   *guard;
	Datum		values[2];

	SPI_connect();
	state = rep_lock(task_id);
	queue = NtaskGetCString(0, REP_LOCK_QUEUE);
	if (strcmp(state, "repair_required") != 0)
		rep_wrong_state(task_id, state, "replay", "repair_required");

	guard = NtaskGetCString(0, REP_LOCK_GUARD);
	if (guard != NULL)
	{
		char	   *why;
		NtaskGuardVerdict v;

		/* an operator asked: a guard error is theirs to see, not caught */
		v = NtaskRunGuard(guard, NtaskGetCString(0, REP_LOCK_GUARD_OWNER),
						  DatumGetTextPP(NtaskGetDatum(0, REP_LOCK_TASK_KEY, &isnull)),
						  DatumGetJsonbP(NtaskGetDatum(0, REP_LOCK_PAYLOAD, &isnull)), &why,
						  false);
		if (v != NTASK_GUARD_PROCEED)
		{
			to_state = v == NTASK_GUARD_SKIP ? "skipped" : "canceled";
			NtaskFinishTask(task_id, to_state,
							why ? why : psprintf("guard: %s on replay",
												 v == NTASK_GUARD_SKIP ? "skip" : "cancel"),
							"guard", NULL, NULL);
		}
	}
	if (strcmp(to_state, "ready") == 0)
	{
		values[0] = Int64GetDatum(task_id);
		values[1] = NtaskStatementTs();
		NtaskExecPlan(&rep_replay_plan, values, NULL, SPI_OK_UPDATE);
		NtaskWakeWaitersAtCommit(queue, 1, 0);
	}
	NtaskAudit(actor, "replay", task_id, queue, reason, state, to_state);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(to_state));
}

/*
 * ntask_repair_assign(task_id, owner, next_action) RETURNS void
 *		Record who owns a repair_required task and what they will do next.
 *		Audited with the current database user as actor.
 */
Datum
ntask_repair_assign(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	text	   *owner = NtaskArgText(fcinfo, 1, "owner", NTASK_MAX_NAME_LEN);
	text	   *next = NtaskArgText(fcinfo, 2, "next_action", NTASK_MAX_REASON_LEN);
	char	   *state;
	char	   *queue;
	Datum		values[REP_ASSIGN_NARGS];

	SPI_connect();
	state = rep_lock(task_id);
	queue = NtaskGetCString(0, REP_LOCK_QUEUE);
	if (strcmp(state, "repair_required") != 0)
		rep_wrong_state(task_id, state, "assign", "repair_required");
	values[REP_ASSIGN_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[REP_ASSIGN_ARG_OWNER] = PointerGetDatum(owner);
	values[REP_ASSIGN_ARG_NEXT_ACTION] = PointerGetDatum(next);
	NtaskExecPlan(&rep_assign_plan, values, NULL, SPI_OK_UPDATE);
	NtaskAudit(GetUserNameFromId(GetUserId(), false), "repair_assign", task_id,
			   queue, psprintf("owner %s: %s", text_to_cstring(owner),
							   text_to_cstring(next)),
			   state, state);
	SPI_finish();
	PG_RETURN_VOID();
}
