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

#include "compat.h"
#include "guard.h"
#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"

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
	REP_LOCK_GUARD_OWNER,
	REP_LOCK_NCOLS = REP_LOCK_GUARD_OWNER
} RepLockCol;

/* the parameter of rep_lock_plan */
typedef enum RepLockArg
{
	REP_LOCK_ARG_TASK_ID,		/* $1 */
	REP_LOCK_NARGS
} RepLockArg;

static NtaskPlan rep_lock_plan = {
	"admin lock",
	.ncols = REP_LOCK_NCOLS,
	"SELECT t.state, t.queue, t.task_key, t.payload, q.guard, "
	"  q.guard_owner::pg_catalog.text "
	"FROM ntask.task t JOIN ntask.queue q "
	"  ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"FOR UPDATE OF t",
	REP_LOCK_NARGS, {INT8OID}
};

typedef enum RepReplayArg
{
	REP_REPLAY_ARG_TASK_ID,		/* $1 */
	REP_REPLAY_ARG_NOW,			/* $2, the statement's timestamp */
	REP_REPLAY_NARGS
} RepReplayArg;

static NtaskPlan rep_replay_plan = {
	"replay",
	.ncols = 0,
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
	REP_REPLAY_NARGS, {INT8OID, TIMESTAMPTZOID}
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
	.ncols = 0,
	"UPDATE ntask.task t SET repair_owner = $2, repair_next_action = $3, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1"),
	REP_ASSIGN_NARGS, {INT8OID, TEXTOID, TEXTOID}
};

static char *rep_lock(int64 task_id, SPITupleTable **row);
static void rep_wrong_state(int64 task_id, const char *state, const char *action,
							const char *needed);

/*
 * rep_lock
 *		Lock the task row; returns its state (palloc'd).  P0002 if missing.
 *		*row is set to the table holding the row (RepLockCol).
 */
static char *
rep_lock(int64 task_id, SPITupleTable **row)
{
	Datum		values[REP_LOCK_NARGS];

	values[REP_LOCK_ARG_TASK_ID] = Int64GetDatum(task_id);
	if (NtaskExecPlan(&rep_lock_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskTaskNotFound(task_id);
	*row = SPI_tuptable;
	return NtaskTupGetCString(*row, 0, REP_LOCK_STATE);
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
 * rep_cancel
 *		The body of ntask_cancel inside an SPI connection: lock the task,
 *		cancel it when unfinished (closing a lease's attempt) and audit it.
 *		Returns 'applied', or 'duplicate' when it was already canceled;
 *		succeeded/skipped tasks raise NT002.  Shared with ntask_bulk.
 */
static const char *
rep_cancel(int64 task_id, const char *actor, const char *reason)
{
	SPITupleTable *row;
	char	   *state = rep_lock(task_id, &row);
	char	   *queue = NtaskTupGetCString(row, 0, REP_LOCK_QUEUE);

	if (strcmp(state, "canceled") == 0)
		return "duplicate";
	if (strcmp(state, "succeeded") == 0 || strcmp(state, "skipped") == 0)
		rep_wrong_state(task_id, state, "cancel", "unfinished or repair_required");
	NtaskFinishTask(task_id, "canceled", reason, "canceled", NULL, NULL);
	NtaskAudit(actor, "cancel", task_id, queue, reason, state, "canceled");
	return "applied";
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
	const char *result;

	SPI_connect();
	result = rep_cancel(task_id, actor, reason);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/*
 * rep_replay
 *		The body of ntask_replay inside an SPI connection: lock the task
 *		(repair_required, else NT002), run the queue's guard (skip/cancel
 *		finish the task instead), else grant a fresh budget and make it
 *		ready; audited.  Returns the new state.  Shared with ntask_bulk.
 */
static const char *
rep_replay(int64 task_id, const char *actor, const char *reason)
{
	SPITupleTable *row;
	char	   *state = rep_lock(task_id, &row);
	char	   *queue = NtaskTupGetCString(row, 0, REP_LOCK_QUEUE);
	const char *to_state = "ready";
	bool		isnull;
	char	   *guard;
	Datum		values[REP_REPLAY_NARGS];

	if (strcmp(state, "repair_required") != 0)
		rep_wrong_state(task_id, state, "replay", "repair_required");

	guard = NtaskTupGetCString(row, 0, REP_LOCK_GUARD);
	if (guard != NULL)
	{
		char	   *why;
		NtaskGuardVerdict v;

		/* an operator asked: a guard error is theirs to see, not caught */
		v = NtaskRunGuard(guard, NtaskTupGetCString(row, 0, REP_LOCK_GUARD_OWNER),
						  DatumGetTextPP(NtaskTupGetDatum(row, 0, REP_LOCK_TASK_KEY, &isnull)),
						  DatumGetJsonbP(NtaskTupGetDatum(row, 0, REP_LOCK_PAYLOAD, &isnull)),
						  &why, false);
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
		values[REP_REPLAY_ARG_TASK_ID] = Int64GetDatum(task_id);
		values[REP_REPLAY_ARG_NOW] = NtaskStatementTs();
		NtaskExecPlan(&rep_replay_plan, values, NULL, SPI_OK_UPDATE);
		NtaskWakeWaitersAtCommit(queue, 1, 0);
	}
	NtaskAudit(actor, "replay", task_id, queue, reason, state, to_state);
	return to_state;
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
	const char *to_state;

	SPI_connect();
	to_state = rep_replay(task_id, actor, reason);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(to_state));
}

/*
 * ntask_repair_assign(task_id, owner, next_action, actor DEFAULT NULL)
 * RETURNS void
 *		Record who owns a repair_required task and what they will do next.
 *		Audited with actor, or the current database user when actor is NULL
 *		(or not passed: the 1.0.0 signature had no actor and this library
 *		serves it until ALTER EXTENSION ntask UPDATE).
 */
Datum
ntask_repair_assign(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	text	   *owner = NtaskArgText(fcinfo, 1, "owner", NTASK_MAX_NAME_LEN);
	text	   *next = NtaskArgText(fcinfo, 2, "next_action", NTASK_MAX_REASON_LEN);
	char	   *actor;
	SPITupleTable *row;
	char	   *state;
	char	   *queue;
	Datum		values[REP_ASSIGN_NARGS];

	if (PG_NARGS() > 3 && !PG_ARGISNULL(3))
		actor = text_to_cstring(NtaskArgText(fcinfo, 3, "actor", NTASK_MAX_NAME_LEN));
	else
		actor = GetUserNameFromId(GetUserId(), false);

	SPI_connect();
	state = rep_lock(task_id, &row);
	queue = NtaskTupGetCString(row, 0, REP_LOCK_QUEUE);
	if (strcmp(state, "repair_required") != 0)
		rep_wrong_state(task_id, state, "assign", "repair_required");
	values[REP_ASSIGN_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[REP_ASSIGN_ARG_OWNER] = PointerGetDatum(owner);
	values[REP_ASSIGN_ARG_NEXT_ACTION] = PointerGetDatum(next);
	NtaskExecPlan(&rep_assign_plan, values, NULL, SPI_OK_UPDATE);
	NtaskAudit(actor, "repair_assign", task_id,
			   queue, psprintf("owner %s: %s", text_to_cstring(owner),
							   text_to_cstring(next)),
			   state, state);
	SPI_finish();
	PG_RETURN_VOID();
}


/* ---- ntask_bulk and ntask_bulk_all ---- */

PG_FUNCTION_INFO_V1(ntask_bulk);
PG_FUNCTION_INFO_V1(ntask_bulk_all);

/*
 * The parameters of bulk_count_plan and bulk_lock_plan: the queue, the
 * states the action applies to (narrowed by the filter's), then one per
 * filter key, NULL when the filter does not name it.
 */
typedef enum BulkArg
{
	BULK_ARG_QUEUE,				/* $1 */
	BULK_ARG_STATES,			/* $2, text[] */
	BULK_ARG_REASON,			/* $3 */
	BULK_ARG_ERROR_CLASS,		/* $4 */
	BULK_ARG_KEY_PREFIX,		/* $5 */
	BULK_ARG_PARTITION_KEY,		/* $6 */
	BULK_ARG_CREATED_BEFORE,	/* $7, now - older_than */
	BULK_ARG_CREATED_AFTER,		/* $8, now - newer_than */
	BULK_ARG_NOT_RUN_AT,		/* $9, reschedule: not already at run_at */
	BULK_ARG_LIMIT,				/* $10, bulk_lock_plan only */
	BULK_NARGS
} BulkArg;

#define BULK_ARG_TYPES \
	BULK_NARGS, {TEXTOID, TEXTARRAYOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, \
	TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID}

#define BULK_MATCH \
	"FROM ntask.task t " \
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND t.state OPERATOR(pg_catalog.=) ANY ($2) " \
	"  AND ($3::pg_catalog.text IS NULL OR t.reason OPERATOR(pg_catalog.=) $3) " \
	"  AND ($4::pg_catalog.text IS NULL OR t.last_error_class OPERATOR(pg_catalog.=) $4) " \
	"  AND ($5::pg_catalog.text IS NULL OR pg_catalog.starts_with(t.task_key, $5)) " \
	"  AND ($6::pg_catalog.text IS NULL OR t.partition_key OPERATOR(pg_catalog.=) $6) " \
	"  AND ($7::pg_catalog.timestamptz IS NULL OR t.created_at OPERATOR(pg_catalog.<) $7) " \
	"  AND ($8::pg_catalog.timestamptz IS NULL OR t.created_at OPERATOR(pg_catalog.>) $8) " \
	"  AND ($9::pg_catalog.timestamptz IS NULL OR t.run_at OPERATOR(pg_catalog.<>) $9) "

/* how many tasks match (no lock) */
typedef enum BulkCountCol
{
	BULK_COUNT_COUNT = 1,
	BULK_COUNT_NCOLS = BULK_COUNT_COUNT
} BulkCountCol;

static NtaskPlan bulk_count_plan = {
	"bulk count",
	.ncols = BULK_COUNT_NCOLS,
	"SELECT pg_catalog.count(*) " BULK_MATCH
	"  AND $10::pg_catalog.int4 IS NOT NULL",
	BULK_ARG_TYPES
};

/*
 * A chunk: at most $10 matching tasks, locked in task_id order (the lock
 * order of docs/design.md), skipping rows another transaction holds (a
 * holder's transition in flight): they stay matching, counted in
 * remaining, so a bulk action never waits for a worker.
 */
typedef enum BulkLockCol
{
	BULK_LOCK_TASK_ID = 1,
	BULK_LOCK_NCOLS = BULK_LOCK_TASK_ID
} BulkLockCol;

static NtaskPlan bulk_lock_plan = {
	"bulk lock",
	.ncols = BULK_LOCK_NCOLS,
	"SELECT t.task_id " BULK_MATCH
	"ORDER BY t.task_id LIMIT $10 FOR UPDATE OF t SKIP LOCKED",
	BULK_ARG_TYPES
};

/* reschedule the locked tasks $1 to $2 (still ready or retry_wait) */
typedef enum BulkRescheduleArg
{
	BULK_RESCHEDULE_ARG_TASK_IDS,	/* $1 */
	BULK_RESCHEDULE_ARG_RUN_AT, /* $2 */
	BULK_RESCHEDULE_NARGS
} BulkRescheduleArg;

/* the columns of bulk_reschedule_plan */
typedef enum BulkRescheduleCol
{
	BULK_RESCHEDULE_TASK_ID = 1,
	BULK_RESCHEDULE_STATE,
	BULK_RESCHEDULE_NCOLS = BULK_RESCHEDULE_STATE
} BulkRescheduleCol;

static NtaskPlan bulk_reschedule_plan = {
	"bulk reschedule",
	.ncols = BULK_RESCHEDULE_NCOLS,
	"UPDATE ntask.task t SET run_at = $2, due_at = $2, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) "
	"  AND t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}') "
	"RETURNING t.task_id, t.state",
	BULK_RESCHEDULE_NARGS, {INT8ARRAYOID, TIMESTAMPTZOID}
};

/* the call's own audit row */
typedef enum BulkAuditArg
{
	BULK_AUDIT_ARG_ACTOR,		/* $1 */
	BULK_AUDIT_ARG_ACTION,		/* $2 */
	BULK_AUDIT_ARG_QUEUE,		/* $3 */
	BULK_AUDIT_ARG_REASON,		/* $4 */
	BULK_AUDIT_ARG_DETAIL,		/* $5 */
	BULK_AUDIT_NARGS
} BulkAuditArg;

typedef enum BulkAuditCol
{
	BULK_AUDIT_ID = 1,
	BULK_AUDIT_NCOLS = BULK_AUDIT_ID
} BulkAuditCol;

static NtaskPlan bulk_audit_plan = {
	"bulk audit",
	.ncols = BULK_AUDIT_NCOLS,
	"INSERT INTO ntask.audit (actor, action, queue, reason, detail) "
	"VALUES ($1, $2, $3, $4, $5) RETURNING audit_id",
	BULK_AUDIT_NARGS, {TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

typedef enum BulkAction
{
	BULK_CANCEL,
	BULK_REPLAY,
	BULK_RESCHEDULE
} BulkAction;

/* the task states, and which each action applies to */
static const struct
{
	const char *state;
	bool		cancel;
	bool		replay;
	bool		reschedule;
}			bulk_states[] = {
	{"ready", true, false, true},
	{"retry_wait", true, false, true},
	{"leased", true, false, false},
	{"repair_required", true, true, false},
	{"waiting", true, false, false},	/* held by its parents */
	{"awaiting", true, false, false},	/* parked for a signal */
	{"succeeded", false, false, false},
	{"canceled", false, false, false},
	{"skipped", false, false, false},
};

/* one bulk call, its arguments checked */
typedef struct BulkCall
{
	BulkAction	action;
	const char *action_name;
	char	   *queue;
	char	   *actor;
	char	   *reason;
	Jsonb	   *filter;
	bool		dry_run;
	bool		has_run_at;
	TimestampTz run_at;			/* reschedule: the new run_at */
	int			max_tasks;
	Datum		values[BULK_NARGS];
	char		nulls[BULK_NARGS];
} BulkCall;

/* what one call did */
typedef struct BulkOut
{
	int64		matched;
	int64		changed;
	int64		remaining;
	int64		audit_id;
} BulkOut;

static bool
bulk_applies(BulkAction a, int i)
{
	return a == BULK_CANCEL ? bulk_states[i].cancel :
		a == BULK_REPLAY ? bulk_states[i].replay : bulk_states[i].reschedule;
}

pg_noreturn static void
bulk_bad_filter(const char *key, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ntask: filter key \"%s\" %s", key, detail),
			 errhint("filter keys: state (a state or an array of states), reason, error_class, key_prefix, partition_key (strings), older_than, newer_than (intervals as strings, e.g. \"1 hour\").")));
}

/* bulk_string: a filter value that must be a non-empty string */
static char *
bulk_string(const char *key, JsonbValue *v)
{
	if (v->type != jbvString)
		bulk_bad_filter(key, "must be a string");
	if (v->val.string.len == 0)
		bulk_bad_filter(key, "must not be empty");
	if (v->val.string.len > NTASK_MAX_REASON_LEN)
		bulk_bad_filter(key, "is too long");
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* the interval_in of bulk_interval, in a subtransaction */
typedef struct BulkIntervalParse
{
	const char *text;
	Interval   *iv;
} BulkIntervalParse;

static void
bulk_interval_in(void *arg)
{
	BulkIntervalParse *p = (BulkIntervalParse *) arg;

	p->iv = DatumGetIntervalP(DirectFunctionCall3(interval_in,
												  CStringGetDatum(p->text),
												  ObjectIdGetDatum(InvalidOid),
												  Int32GetDatum(-1)));
}

/*
 * bulk_interval
 *		older_than / newer_than: a string holding a non-negative interval;
 *		returns now - it, the created_at bound.
 */
static Datum
bulk_interval(const char *key, JsonbValue *v, TimestampTz now)
{
	BulkIntervalParse p;
	ErrorData  *edata;
	Interval	zero = {0};

	p.text = bulk_string(key, v);
	if (!NtaskTrySubxact(bulk_interval_in, &p, &edata))
		bulk_bad_filter(key, psprintf("is not an interval: %s", edata->message));
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(p.iv),
										 IntervalPGetDatum(&zero))) ||
		NtaskIntervalNotFinite(p.iv))
		bulk_bad_filter(key, "must be a finite interval of zero or more");
	return DirectFunctionCall2(timestamptz_mi_interval, TimestampTzGetDatum(now),
							   IntervalPGetDatum(p.iv));
}

/*
 * bulk_states_of
 *		The filter's state value (a state or an array of states) into
 *		want[] (indexes of bulk_states); each must be a known state the
 *		action applies to.
 */
static void
bulk_states_of(BulkCall *c, JsonbValue *v, bool *want)
{
	JsonbValue	one;
	JsonbIterator *it = NULL;
	JsonbIteratorToken tok;
	bool		array = false;
	int			n = 0;

	if (v->type == jbvString)
		one = *v;
	else if (v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data) &&
			 !JsonContainerIsScalar(v->val.binary.data))
	{
		it = JsonbIteratorInit(v->val.binary.data);
		array = true;			/* (the iterator is NULL once done) */
	}
	else
		bulk_bad_filter("state", "must be a state or an array of states");
	for (;;)
	{
		JsonbValue *s = &one;
		char	   *name;
		int			i;

		if (array)
		{
			tok = JsonbIteratorNext(&it, &one, true);
			if (tok == WJB_DONE)
				break;
			if (tok != WJB_ELEM)
				continue;
		}
		if (s->type != jbvString)
			bulk_bad_filter("state", "must be a state or an array of states");
		name = pnstrdup(s->val.string.val, s->val.string.len);
		for (i = 0; i < (int) lengthof(bulk_states); i++)
			if (strcmp(bulk_states[i].state, name) == 0)
				break;
		if (i == (int) lengthof(bulk_states))
			bulk_bad_filter("state", psprintf("names an unknown state \"%s\"", name));
		if (!bulk_applies(c->action, i))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: %s does not apply to tasks in state %s", c->action_name, name),
					 errdetail("%s applies to %s.", c->action_name,
							   c->action == BULK_CANCEL ? "ready, retry_wait, leased, repair_required, waiting and awaiting tasks" :
							   c->action == BULK_REPLAY ? "repair_required tasks" :
							   "ready and retry_wait tasks")));
		want[i] = true;
		n++;
		if (!array)
			break;
	}
	if (n == 0)
		bulk_bad_filter("state", "must name at least one state");
}

/*
 * bulk_parse_filter
 *		Check the filter (an object of known keys, each of its type) and
 *		set the statement's parameters from it.
 */
static void
bulk_parse_filter(BulkCall *c, TimestampTz now)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	k;
	JsonbValue	v;
	bool		want[lengthof(bulk_states)] = {0};
	bool		named_states = false;
	Datum		states[lengthof(bulk_states)];
	int			nstates = 0;
	int			i;

	if (!JB_ROOT_IS_OBJECT(c->filter) || JB_ROOT_IS_SCALAR(c->filter))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: filter must be a JSON object"),
				 errhint("For example '{\"state\": \"repair_required\", \"error_class\": \"transient\"}'; '{}' matches every task the action applies to.")));
	memset(c->nulls, 'n', sizeof(c->nulls));
	it = JsonbIteratorInit(&c->filter->root);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(k.val.string.val, k.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		if (strcmp(key, "state") == 0)
		{
			bulk_states_of(c, &v, want);
			named_states = true;
			continue;
		}
		if (v.type == jbvNull)
			bulk_bad_filter(key, "must not be null (leave the key out)");
		if (strcmp(key, "reason") == 0)
			i = BULK_ARG_REASON;
		else if (strcmp(key, "error_class") == 0)
			i = BULK_ARG_ERROR_CLASS;
		else if (strcmp(key, "key_prefix") == 0)
			i = BULK_ARG_KEY_PREFIX;
		else if (strcmp(key, "partition_key") == 0)
			i = BULK_ARG_PARTITION_KEY;
		else if (strcmp(key, "older_than") == 0)
		{
			c->values[BULK_ARG_CREATED_BEFORE] = bulk_interval(key, &v, now);
			c->nulls[BULK_ARG_CREATED_BEFORE] = ' ';
			continue;
		}
		else if (strcmp(key, "newer_than") == 0)
		{
			c->values[BULK_ARG_CREATED_AFTER] = bulk_interval(key, &v, now);
			c->nulls[BULK_ARG_CREATED_AFTER] = ' ';
			continue;
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: unknown filter key \"%s\"",
							strlen(key) > 64 ? psprintf("%.64s...", key) : key),
					 errhint("filter keys: state, reason, error_class, key_prefix, partition_key, older_than, newer_than.")));
		c->values[i] = CStringGetTextDatum(bulk_string(key, &v));
		c->nulls[i] = ' ';
	}
	for (i = 0; i < (int) lengthof(bulk_states); i++)
		if (named_states ? want[i] : bulk_applies(c->action, i))
			states[nstates++] = CStringGetTextDatum(bulk_states[i].state);
	c->values[BULK_ARG_STATES] = PointerGetDatum(construct_array(states, nstates, TEXTOID,
																 -1, false, TYPALIGN_INT));
	c->nulls[BULK_ARG_STATES] = ' ';
	if (c->action == BULK_RESCHEDULE)
	{
		c->values[BULK_ARG_NOT_RUN_AT] = TimestampTzGetDatum(c->run_at);
		c->nulls[BULK_ARG_NOT_RUN_AT] = ' ';
	}
	c->values[BULK_ARG_LIMIT] = Int32GetDatum(c->max_tasks);
	c->nulls[BULK_ARG_LIMIT] = ' ';
}

/*
 * bulk_init
 *		Read and check ntask_bulk's (or ntask_bulk_all's) arguments; the
 *		positions of dry_run, run_at and max_tasks are given (dry_run < 0:
 *		none).  The queue must exist (42704).  Runs inside SPI.
 */
static void
bulk_init(BulkCall *c, FunctionCallInfo fcinfo, int a_dry_run, int a_run_at,
		  int a_max_tasks, TimestampTz now)
{
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	char	   *action = text_to_cstring(NtaskArgText(fcinfo, 1, "action", NTASK_MAX_NAME_LEN));

	memset(c, 0, sizeof(BulkCall));
	c->queue = text_to_cstring(queue);
	c->actor = text_to_cstring(NtaskArgText(fcinfo, 2, "actor", NTASK_MAX_NAME_LEN));
	c->reason = text_to_cstring(NtaskArgText(fcinfo, 3, "reason", NTASK_MAX_REASON_LEN));
	c->filter = NtaskArgJsonb(fcinfo, 4, "filter");
	if (strcmp(action, "cancel") == 0)
		c->action = BULK_CANCEL;
	else if (strcmp(action, "replay") == 0)
		c->action = BULK_REPLAY;
	else if (strcmp(action, "reschedule") == 0)
		c->action = BULK_RESCHEDULE;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: unknown bulk action \"%s\"",
						strlen(action) > 64 ? psprintf("%.64s...", action) : action),
				 errhint("action is cancel, replay or reschedule.")));
	c->action_name = c->action == BULK_CANCEL ? "cancel" :
		c->action == BULK_REPLAY ? "replay" : "reschedule";
	if (a_dry_run >= 0)
	{
		if (PG_ARGISNULL(a_dry_run))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("ntask: dry_run must not be NULL")));
		c->dry_run = PG_GETARG_BOOL(a_dry_run);
	}
	if (PG_ARGISNULL(a_max_tasks))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: max_tasks must not be NULL")));
	c->max_tasks = PG_GETARG_INT32(a_max_tasks);
	if (c->max_tasks < 1 || c->max_tasks > NTASK_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: max_tasks must be between 1 and %d", NTASK_MAX_BATCH)));
	c->has_run_at = !PG_ARGISNULL(a_run_at);
	if (c->has_run_at && c->action != BULK_RESCHEDULE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: run_at is for the action reschedule only")));
	c->run_at = c->has_run_at ? PG_GETARG_TIMESTAMPTZ(a_run_at) : now;
	if (TIMESTAMP_NOT_FINITE(c->run_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: run_at must be a finite timestamp")));
	NtaskCheckQueueExists(queue);	/* 42704; no worker_role (admin) */
	bulk_parse_filter(c, now);
	c->values[BULK_ARG_QUEUE] = PointerGetDatum(queue);
	c->nulls[BULK_ARG_QUEUE] = ' ';
}

/* bulk_count: how many tasks match now */
static int64
bulk_count(BulkCall *c)
{
	bool		isnull;

	NtaskExecPlan(&bulk_count_plan, c->values, c->nulls, SPI_OK_SELECT);
	return DatumGetInt64(NtaskTupGetDatum(SPI_tuptable, 0, BULK_COUNT_COUNT, &isnull));
}

/*
 * bulk_chunk
 *		One ntask_bulk call inside an SPI connection: count, lock a chunk,
 *		act on each task as ntask_cancel / ntask_replay do (their audit row
 *		each) or reschedule it, count what remains, and write the call's
 *		audit row (filter, counts, dry_run).
 */
static void
bulk_chunk(BulkCall *c, BulkOut *out)
{
	int64	   *ids;
	int			n = 0;
	int			i;
	StringInfoData detail;

	out->changed = 0;
	out->matched = bulk_count(c);
	if (!c->dry_run && out->matched > 0)
	{
		n = NtaskExecPlan(&bulk_lock_plan, c->values, c->nulls, SPI_OK_SELECT);
		ids = palloc(sizeof(int64) * Max(n, 1));
		for (i = 0; i < n; i++)
			ids[i] = NtaskTupGetInt64(SPI_tuptable, i, BULK_LOCK_TASK_ID);
		if (c->action == BULK_RESCHEDULE && n > 0)
		{
			Datum	   *d = palloc(sizeof(Datum) * n);
			Datum		rv[BULK_RESCHEDULE_NARGS];
			int			nrows;

			for (i = 0; i < n; i++)
				d[i] = Int64GetDatum(ids[i]);
			rv[BULK_RESCHEDULE_ARG_TASK_IDS] = NtaskInt8Array(d, n);
			rv[BULK_RESCHEDULE_ARG_RUN_AT] = TimestampTzGetDatum(c->run_at);
			nrows = NtaskExecPlan(&bulk_reschedule_plan, rv, NULL, SPI_OK_UPDATE_RETURNING);
			{
				SPITupleTable *rows = SPI_tuptable;

				for (i = 0; i < nrows; i++)
				{
					char	   *state = NtaskTupGetCString(rows, i, BULK_RESCHEDULE_STATE);

					NtaskAudit(c->actor, "reschedule",
							   NtaskTupGetInt64(rows, i, BULK_RESCHEDULE_TASK_ID),
							   c->queue, c->reason, state, state);
				}
			}
			out->changed = nrows;
			if (nrows > 0)
			{
				NtaskWakeWorkerAtCommit();	/* it may be an http queue */
				if (c->run_at <= GetCurrentStatementStartTimestamp())
					NtaskWakeWaitersAtCommit(c->queue, nrows, 0);
				else
					NtaskWakeWaitersAtCommit(c->queue, 0, c->run_at);
			}
		}
		else
			for (i = 0; i < n; i++)
			{
				const char *r;

				/* a connection per task: its rows (a payload each) go with it */
				SPI_connect();
				r = c->action == BULK_CANCEL ?
					rep_cancel(ids[i], c->actor, c->reason) :
					rep_replay(ids[i], c->actor, c->reason);
				out->changed += strcmp(r, "duplicate") != 0;
				SPI_finish();
			}
	}
	out->remaining = out->changed > 0 ? bulk_count(c) : out->matched;
	out->matched = Max(out->matched, out->changed);

	initStringInfo(&detail);
	appendStringInfo(&detail, "{\"filter\": %s, \"dry_run\": %s, \"matched\": " INT64_FORMAT
					 ", \"changed\": " INT64_FORMAT ", \"remaining\": " INT64_FORMAT
					 ", \"max_tasks\": %d",
					 JsonbToCString(NULL, &c->filter->root, VARSIZE(c->filter)),
					 c->dry_run ? "true" : "false", out->matched, out->changed,
					 out->remaining, c->max_tasks);
	if (c->action == BULK_RESCHEDULE)
	{
		appendStringInfoString(&detail, ", \"run_at\": ");
		escape_json(&detail, timestamptz_to_str(c->run_at));
	}
	appendStringInfoChar(&detail, '}');
	{
		Datum		av[BULK_AUDIT_NARGS];

		av[BULK_AUDIT_ARG_ACTOR] = CStringGetTextDatum(c->actor);
		av[BULK_AUDIT_ARG_ACTION] = CStringGetTextDatum(psprintf("bulk_%s%s", c->action_name,
																 c->dry_run ? "_dry_run" : ""));
		av[BULK_AUDIT_ARG_QUEUE] = CStringGetTextDatum(c->queue);
		av[BULK_AUDIT_ARG_REASON] = CStringGetTextDatum(c->reason);
		av[BULK_AUDIT_ARG_DETAIL] = DirectFunctionCall1(jsonb_in, CStringGetDatum(detail.data));
		NtaskExecPlan(&bulk_audit_plan, av, NULL, SPI_OK_INSERT_RETURNING);
		out->audit_id = NtaskTupGetInt64(SPI_tuptable, 0, BULK_AUDIT_ID);
	}
}

/* the result columns of ntask_bulk */
typedef enum BulkOutCol
{
	BULK_OUT_MATCHED,
	BULK_OUT_CHANGED,
	BULK_OUT_REMAINING,
	BULK_OUT_AUDIT_ID,
	BULK_OUT_NCOLS
} BulkOutCol;

/* the INOUT arguments of ntask_bulk_all, its result */
typedef enum BulkAllOutCol
{
	BULK_ALL_OUT_CHANGED,
	BULK_ALL_OUT_REMAINING,
	BULK_ALL_OUT_CHUNKS,
	BULK_ALL_OUT_NCOLS
} BulkAllOutCol;

/*
 * ntask_bulk(queue, action, actor, reason, filter, dry_run, run_at,
 *			  max_tasks) RETURNS TABLE (matched, changed, remaining, audit_id)
 *		Cancel, replay or reschedule (to run_at, NULL: now) at most
 *		max_tasks tasks of queue that match filter; dry_run only counts.
 *		Errors: unknown queue 42704; unknown action, filter key or state, a
 *		filter value of the wrong type, a state the action does not apply
 *		to, max_tasks outside 1..10000, run_at with another action 22023;
 *		NULL arguments 22004; and what ntask_replay's guard raises.
 */
Datum
ntask_bulk(PG_FUNCTION_ARGS)
{
	BulkCall	c;
	BulkOut		out;
	TupleDesc	tupdesc;
	Datum		vals[BULK_OUT_NCOLS];
	bool		nulls[BULK_OUT_NCOLS] = {false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "ntask: ntask_bulk must return a row");
	tupdesc = BlessTupleDesc(tupdesc);
	SPI_connect();
	NtaskRefuseDistributed("ntask_bulk");
	bulk_init(&c, fcinfo, 5, 6, 7, GetCurrentStatementStartTimestamp());
	bulk_chunk(&c, &out);
	SPI_finish();
	vals[BULK_OUT_MATCHED] = Int64GetDatum(out.matched);
	vals[BULK_OUT_CHANGED] = Int64GetDatum(out.changed);
	vals[BULK_OUT_REMAINING] = Int64GetDatum(out.remaining);
	vals[BULK_OUT_AUDIT_ID] = Int64GetDatum(out.audit_id);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, vals, nulls)));
}

/*
 * CALL ntask_bulk_all(queue, action, actor, reason, filter, run_at,
 *					   max_tasks, INOUT changed, INOUT remaining, INOUT chunks)
 *		ntask_bulk again and again, committing after each chunk, until
 *		nothing matching remains or a chunk changes nothing (the rest is
 *		locked by others: remaining says how many).  A reschedule without
 *		run_at moves every chunk to the CALL's start time (so a chunk does
 *		not match again).  Only outside a transaction block (25001).
 */
Datum
ntask_bulk_all(PG_FUNCTION_ARGS)
{
	BulkCall	c;
	BulkOut		out;
	int64		changed = 0;
	int32		chunks = 0;
	TupleDesc	tupdesc;
	Datum		vals[BULK_ALL_OUT_NCOLS];
	bool		nulls[BULK_ALL_OUT_NCOLS] = {false, false, false};
	MemoryContext caller = CurrentMemoryContext;

	if (fcinfo->context == NULL || !IsA(fcinfo->context, CallContext) ||
		castNode(CallContext, fcinfo->context)->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("ntask: ntask_bulk_all must be CALLed outside a transaction block"),
				 errdetail("It commits after each chunk of max_tasks tasks."),
				 errhint("CALL it on its own (autocommit), or call ntask_bulk once per chunk.")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "ntask: ntask_bulk_all must return a row");
	tupdesc = BlessTupleDesc(tupdesc);

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	NtaskRefuseDistributed("ntask_bulk_all");
	bulk_init(&c, fcinfo, -1, 5, 6, GetCurrentStatementStartTimestamp());
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		SPI_connect();			/* what a chunk read goes with it */
		bulk_chunk(&c, &out);
		SPI_finish();
		changed += out.changed;
		chunks++;
		SPI_commit();
		if (out.remaining == 0 || out.changed == 0)
			break;
	}
	SPI_finish();
	MemoryContextSwitchTo(caller);
	vals[BULK_ALL_OUT_CHANGED] = Int64GetDatum(changed);
	vals[BULK_ALL_OUT_REMAINING] = Int64GetDatum(out.remaining);
	vals[BULK_ALL_OUT_CHUNKS] = Int32GetDatum(chunks);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, vals, nulls)));
}
