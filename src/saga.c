/*-------------------------------------------------------------------------
 *
 * saga.c
 *	  Sagas: multi-step work with compensation (docs/design.md "Sagas").
 *	  ntask_saga_start, ntask_saga_cancel, ntask_saga_resume, and the
 *	  trigger ntask.saga_step_changed that moves a saga when one of its
 *	  step tasks changes state.
 *
 * Every step is an ordinary task of its queue (budget, lease, guard,
 * fencing), with task_key '<saga_key>:<name>' and saga_id set; a
 * compensation is '<saga_key>:<name>:compensate'.  The trigger runs in the
 * transaction that changed the task (a worker's transition, a claim that
 * found the budget spent, a cancel, housekeeping), after that statement's
 * task row lock, and then locks the saga row: task before saga, the order
 * every path here keeps.  So a step's success and the saga's next step
 * commit together or not at all, and a stale worker (whose transition
 * changes nothing) moves nothing.
 *
 *	forward step succeeded/skipped	-> next step enqueued, or saga succeeded
 *	forward step repair_required/canceled
 *									-> compensating: the compensations of the
 *									   steps that succeeded, and of the failed
 *									   step if it may have taken effect (an
 *									   attempt with unknown outcome, or a
 *									   commit receipt), latest first, one at a
 *									   time; none: compensated
 *	compensation succeeded/skipped	-> the next one, or compensated
 *	compensated						-> the failed step, if in repair_required,
 *									   is canceled (saga_compensated, audited)
 *	compensation repair_required/canceled
 *									-> manual_review (ntask_saga_resume)
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/saga.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"

#include <ctype.h>

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(ntask_saga_start);
PG_FUNCTION_INFO_V1(ntask_saga_cancel);
PG_FUNCTION_INFO_V1(ntask_saga_resume);
PG_FUNCTION_INFO_V1(ntask_saga_step_changed);

#define SAGA_MAX_STEPS		100
#define SAGA_MAX_KEY_LEN	300		/* + ':' + name + ':compensate' <= 512 */
#define SAGA_MAX_NAME_LEN	100

/* one step of a definition */
typedef struct SagaStep
{
	char	   *name;
	char	   *queue;
	Jsonb	   *payload;
	char	   *cqueue;			/* compensation; NULL: irreversible */
	Jsonb	   *cpayload;
} SagaStep;

/* set by ntask_saga_resume while it replays a failed compensation */
static bool saga_resuming = false;

/*
 * The statements' parameters and result columns by name: an argument enum
 * indexes values[] (SAGA_X_ARG_Y is $(Y + 1)), a column enum is an SPI
 * attribute number (from 1).
 */

/* the parameter of the statements of one saga ($1 the saga) */
typedef enum SagaIdArg
{
	SAGA_ID_ARG_SAGA_ID,		/* $1 */
	SAGA_ID_NARGS
} SagaIdArg;

/* the parameter of the statements of one task ($1 the task) */
typedef enum SagaTaskArg
{
	SAGA_TASK_ARG_TASK_ID,		/* $1 */
	SAGA_TASK_NARGS
} SagaTaskArg;

typedef enum SagaInsertArg
{
	SAGA_INSERT_ARG_KEY,		/* $1 */
	SAGA_INSERT_ARG_STEPS,		/* $2 */
	SAGA_INSERT_ARG_DIGEST,		/* $3 */
	SAGA_INSERT_ARG_DIGEST_VERSION, /* $4 */
	SAGA_INSERT_ARG_NSTEPS,		/* $5 */
	SAGA_INSERT_ARG_STARTED_BY, /* $6 */
	SAGA_INSERT_NARGS
} SagaInsertArg;

typedef enum SagaInsertCol
{
	SAGA_INSERT_SAGA_ID = 1,
	SAGA_INSERT_STATE,
	SAGA_INSERT_NCOLS = SAGA_INSERT_STATE
} SagaInsertCol;

static NtaskPlan saga_insert_plan = {
	"saga insert",
	.ncols = SAGA_INSERT_NCOLS,
	"INSERT INTO ntask.saga (saga_key, steps, steps_digest, digest_version, "
	"  nsteps, started_by, scope) VALUES ($1, $2, $3, $4, $5, $6, ntask.saga_scope($2)) "
	"ON CONFLICT (saga_key, scope) DO NOTHING RETURNING saga_id, state",
	SAGA_INSERT_NARGS, {TEXTOID, JSONBOID, BYTEAOID, INT2OID, INT4OID, TEXTOID}
};

/*
 * The sagas of a key the caller may see: those of whose scope it has the
 * producer right on every queue (the test of NtaskCheckQueueRight; a queue
 * dropped since restricts nobody).  The one of the caller's own scope
 * first: it is the only one a definition can be the same as.
 */
typedef enum SagaExistingArg
{
	SAGA_EXISTING_ARG_KEY,		/* $1 */
	SAGA_EXISTING_ARG_STEPS,	/* $2, for its scope */
	SAGA_EXISTING_ARG_CALLER,	/* $3 */
	SAGA_EXISTING_NARGS
} SagaExistingArg;

typedef enum SagaExistingCol
{
	SAGA_EXISTING_SAGA_ID = 1,
	SAGA_EXISTING_STATE,
	SAGA_EXISTING_DIGEST,
	SAGA_EXISTING_DIGEST_VERSION,
	SAGA_EXISTING_NCOLS = SAGA_EXISTING_DIGEST_VERSION
} SagaExistingCol;

static NtaskPlan saga_existing_plan = {
	"saga lookup",
	.ncols = SAGA_EXISTING_NCOLS,
	"SELECT s.saga_id, s.state, s.steps_digest, s.digest_version "
	"FROM ntask.saga s WHERE s.saga_key OPERATOR(pg_catalog.=) $1 "
	"  AND NOT EXISTS (SELECT 1 FROM ntask.queue q "
	"    WHERE q.queue OPERATOR(pg_catalog.=) ANY (s.scope) "
	"      AND q.producer_role IS NOT NULL "
	"      AND NOT pg_catalog.pg_has_role($3, q.producer_role, 'USAGE')) "
	"ORDER BY s.scope OPERATOR(pg_catalog.=) ntask.saga_scope($2) DESC, s.saga_id "
	"LIMIT 1",
	SAGA_EXISTING_NARGS, {TEXTOID, JSONBOID, OIDOID}
};

/* saga_lock_plan's columns ($1 the saga) */
typedef enum SagaLockCol
{
	SAGA_LOCK_STATE = 1,
	SAGA_LOCK_CURRENT_STEP,
	SAGA_LOCK_FAILED_STEP,		/* NULL: none */
	SAGA_LOCK_NSTEPS,
	SAGA_LOCK_STEPS,
	SAGA_LOCK_SAGA_KEY,
	SAGA_LOCK_NCOLS = SAGA_LOCK_SAGA_KEY
} SagaLockCol;

static NtaskPlan saga_lock_plan = {
	"saga lock",
	.ncols = SAGA_LOCK_NCOLS,
	"SELECT s.state, s.current_step, s.failed_step, s.nsteps, s.steps, s.saga_key "
	"FROM ntask.saga s WHERE s.saga_id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
	SAGA_ID_NARGS, {INT8OID}
};

/* saga_read_plan's columns ($1 the saga) */
typedef enum SagaReadCol
{
	SAGA_READ_STATE = 1,
	SAGA_READ_CURRENT_STEP,
	SAGA_READ_NCOLS = SAGA_READ_CURRENT_STEP
} SagaReadCol;

static NtaskPlan saga_read_plan = {
	"saga read",
	.ncols = SAGA_READ_NCOLS,
	"SELECT s.state, s.current_step FROM ntask.saga s "
	"WHERE s.saga_id OPERATOR(pg_catalog.=) $1",
	SAGA_ID_NARGS, {INT8OID}
};

typedef enum SagaStepInsertArg
{
	SAGA_STEP_INSERT_ARG_SAGA_ID,	/* $1 */
	SAGA_STEP_INSERT_ARG_STEP_NO,	/* $2 */
	SAGA_STEP_INSERT_ARG_KIND,	/* $3, forward or compensate */
	SAGA_STEP_INSERT_ARG_NAME,	/* $4 */
	SAGA_STEP_INSERT_ARG_QUEUE, /* $5 */
	SAGA_STEP_INSERT_ARG_TASK_ID,	/* $6 */
	SAGA_STEP_INSERT_NARGS
} SagaStepInsertArg;

static NtaskPlan saga_step_insert_plan = {
	"saga step insert",
	.ncols = 0,
	"INSERT INTO ntask.saga_step (saga_id, step_no, kind, name, queue, task_id, state) "
	"VALUES ($1, $2, $3, $4, $5, $6, 'ready')",
	SAGA_STEP_INSERT_NARGS, {INT8OID, INT4OID, TEXTOID, TEXTOID, TEXTOID, INT8OID}
};

/* the step a task is, and its last state, updated ($1 the task, $2 it) */
typedef enum SagaStepSeenCol
{
	SAGA_STEP_SEEN_STEP_NO = 1,
	SAGA_STEP_SEEN_KIND,
	SAGA_STEP_SEEN_NCOLS = SAGA_STEP_SEEN_KIND
} SagaStepSeenCol;

typedef enum SagaStepSeenArg
{
	SAGA_STEP_SEEN_ARG_TASK_ID, /* $1 */
	SAGA_STEP_SEEN_ARG_STATE,	/* $2 */
	SAGA_STEP_SEEN_NARGS
} SagaStepSeenArg;

static NtaskPlan saga_step_seen_plan = {
	"saga step seen",
	.ncols = SAGA_STEP_SEEN_NCOLS,
	"UPDATE ntask.saga_step st SET state = $2 "
	"WHERE st.task_id OPERATOR(pg_catalog.=) $1 "
	"RETURNING st.step_no, st.kind",
	SAGA_STEP_SEEN_NARGS, {INT8OID, TEXTOID}
};

typedef enum SagaStepTaskArg
{
	SAGA_STEP_TASK_ARG_SAGA_ID, /* $1 */
	SAGA_STEP_TASK_ARG_STEP_NO, /* $2 */
	SAGA_STEP_TASK_ARG_KIND,	/* $3 */
	SAGA_STEP_TASK_NARGS
} SagaStepTaskArg;

typedef enum SagaStepTaskCol
{
	SAGA_STEP_TASK_TASK_ID = 1,
	SAGA_STEP_TASK_STATE,		/* the step's last state seen */
	SAGA_STEP_TASK_NCOLS = SAGA_STEP_TASK_STATE
} SagaStepTaskCol;

static NtaskPlan saga_step_task_plan = {
	"saga step task",
	.ncols = SAGA_STEP_TASK_NCOLS,
	"SELECT st.task_id, st.state FROM ntask.saga_step st "
	"WHERE st.saga_id OPERATOR(pg_catalog.=) $1 "
	"  AND st.step_no OPERATOR(pg_catalog.=) $2 AND st.kind OPERATOR(pg_catalog.=) $3",
	SAGA_STEP_TASK_NARGS, {INT8OID, INT4OID, TEXTOID}
};

typedef enum SagaUpdateArg
{
	SAGA_UPDATE_ARG_SAGA_ID,	/* $1 */
	SAGA_UPDATE_ARG_STATE,		/* $2 */
	SAGA_UPDATE_ARG_CURRENT_STEP,	/* $3 */
	SAGA_UPDATE_ARG_FAILED_STEP,	/* $4, NULL: unchanged */
	SAGA_UPDATE_ARG_REASON,		/* $5, NULL: unchanged */
	SAGA_UPDATE_NARGS
} SagaUpdateArg;

static NtaskPlan saga_update_plan = {
	"saga update",
	.ncols = 0,
	"UPDATE ntask.saga s SET state = $2, current_step = $3, "
	"  failed_step = coalesce($4, s.failed_step), reason = coalesce($5, s.reason), "
	"  updated_at = pg_catalog.statement_timestamp(), "
	"  finished_at = CASE WHEN $2 OPERATOR(pg_catalog.=) ANY ('{succeeded,compensated}') "
	"    THEN pg_catalog.statement_timestamp() END "
	"WHERE s.saga_id OPERATOR(pg_catalog.=) $1",
	SAGA_UPDATE_NARGS, {INT8OID, TEXTOID, INT4OID, INT4OID, TEXTOID}
};

/* may the failed step have taken effect? ($1 its task) */
typedef enum SagaMaybeEffectCol
{
	SAGA_MAYBE_EFFECT = 1,
	SAGA_MAYBE_REASON,			/* the task's */
	SAGA_MAYBE_NCOLS = SAGA_MAYBE_REASON
} SagaMaybeEffectCol;

static NtaskPlan saga_maybe_effect_plan = {
	"saga step effect",
	.ncols = SAGA_MAYBE_NCOLS,
	"SELECT t.unknown_attempts OPERATOR(pg_catalog.>) 0 OR EXISTS ( "
	"  SELECT 1 FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id), "
	"  t.reason "
	"FROM ntask.task t WHERE t.task_id OPERATOR(pg_catalog.=) $1",
	SAGA_TASK_NARGS, {INT8OID}
};

/*
 * the failed forward step, still in repair, of a saga just compensated;
 * SKIP LOCKED: a session that holds it (an operator's cancel) locked the
 * task before the saga, and that order must not be turned around here
 */
typedef enum SagaFailedLockCol
{
	SAGA_FAILED_LOCK_QUEUE = 1,
	SAGA_FAILED_LOCK_NCOLS = SAGA_FAILED_LOCK_QUEUE
} SagaFailedLockCol;

static NtaskPlan saga_failed_lock_plan = {
	"saga failed step lock",
	.ncols = SAGA_FAILED_LOCK_NCOLS,
	"SELECT t.queue FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 "
	"  AND t.state OPERATOR(pg_catalog.=) 'repair_required' FOR UPDATE SKIP LOCKED",
	SAGA_TASK_NARGS, {INT8OID}
};

/* saga_task_lock_plan's columns ($1 the task) */
typedef enum SagaTaskLockCol
{
	SAGA_TASK_LOCK_STATE = 1,
	SAGA_TASK_LOCK_QUEUE,
	SAGA_TASK_LOCK_NCOLS = SAGA_TASK_LOCK_QUEUE
} SagaTaskLockCol;

static NtaskPlan saga_task_lock_plan = {
	"saga task lock",
	.ncols = SAGA_TASK_LOCK_NCOLS,
	"SELECT t.state, t.queue FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
	SAGA_TASK_NARGS, {INT8OID}
};

/* saga_exec_saga: run p, whose one parameter is the saga */
static int
saga_exec_saga(NtaskPlan *p, int64 saga_id, int expected_rc)
{
	Datum		args[SAGA_ID_NARGS];

	args[SAGA_ID_ARG_SAGA_ID] = Int64GetDatum(saga_id);
	return NtaskExecPlan(p, args, NULL, expected_rc);
}

/* saga_exec_task: run p, whose one parameter is the task */
static int
saga_exec_task(NtaskPlan *p, int64 task_id, int expected_rc)
{
	Datum		args[SAGA_TASK_NARGS];

	args[SAGA_TASK_ARG_TASK_ID] = Int64GetDatum(task_id);
	return NtaskExecPlan(p, args, NULL, expected_rc);
}

/* ---- the definition ---- */

static void
saga_bad(const char *msg, int step)
{
	if (step > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: saga step %d: %s", step, msg),
				 errhint("steps is an array of {\"name\", \"queue\", \"payload\", \"compensate\": {\"queue\", \"payload\"}}.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ntask: saga steps %s", msg),
			 errhint("steps is an array of {\"name\", \"queue\", \"payload\", \"compensate\": {\"queue\", \"payload\"}}.")));
}

/* saga_string: the string at key of object c, or NULL when absent */
static char *
saga_string(JsonbContainer *c, const char *key, int step, bool required)
{
	JsonbValue	v;

	if (getKeyJsonValueFromContainer(c, key, strlen(key), &v) == NULL)
	{
		if (required)
			saga_bad(psprintf("has no \"%s\"", key), step);
		return NULL;
	}
	if (v.type != jbvString || v.val.string.len == 0)
		saga_bad(psprintf("\"%s\" must be a non-empty string", key), step);
	return pnstrdup(v.val.string.val, v.val.string.len);
}

/* saga_payload: the payload at key of object c ('{}' when absent) */
static Jsonb *
saga_payload(JsonbContainer *c, const char *key)
{
	JsonbValue	v;

	if (getKeyJsonValueFromContainer(c, key, strlen(key), &v) == NULL)
		return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	return JsonbValueToJsonb(&v);
}

/* saga_keys_only: object c has no key but the allowed ones */
static void
saga_keys_only(JsonbContainer *c, const char *const *allowed, int step,
			   const char *what)
{
	JsonbIterator *it = JsonbIteratorInit(c);
	JsonbValue	v;
	JsonbIteratorToken tok;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		const char *const *a;
		bool		ok = false;

		if (tok != WJB_KEY)
			continue;
		for (a = allowed; *a; a++)
			if ((int) strlen(*a) == v.val.string.len &&
				memcmp(*a, v.val.string.val, v.val.string.len) == 0)
				ok = true;
		if (!ok)
			saga_bad(psprintf("%s has an unknown key \"%.*s\"", what,
							  v.val.string.len, v.val.string.val), step);
	}
}

/*
 * saga_parse
 *		The steps of a definition, checked: an array of 1..100 objects,
 *		each with a unique name of [A-Za-z0-9_.-] (at most 100 bytes), a
 *		queue, an optional payload and an optional compensate object with a
 *		queue and an optional payload; no other keys.  22023 otherwise.
 */
static SagaStep *
saga_parse(Jsonb *steps, int *nsteps)
{
	static const char *const step_keys[] = {"name", "queue", "payload", "compensate", NULL};
	static const char *const comp_keys[] = {"queue", "payload", NULL};
	JsonbContainer *root = &steps->root;
	SagaStep   *out;
	int			n;
	int			i;

	if (!JsonContainerIsArray(root) || JB_ROOT_IS_SCALAR(steps))
		saga_bad("must be a JSON array", 0);
	n = JsonContainerSize(root);
	if (n < 1 || n > SAGA_MAX_STEPS)
		saga_bad(psprintf("must have 1 to %d elements", SAGA_MAX_STEPS), 0);
	out = palloc0(sizeof(SagaStep) * n);
	for (i = 0; i < n; i++)
	{
		JsonbValue *e = getIthJsonbValueFromContainer(root, i);
		JsonbContainer *c;
		JsonbValue	comp;
		const char *p;
		int			j;

		if (e->type != jbvBinary || !JsonContainerIsObject(e->val.binary.data))
			saga_bad("must be a JSON object", i + 1);
		c = e->val.binary.data;
		saga_keys_only(c, step_keys, i + 1, "the step");
		out[i].name = saga_string(c, "name", i + 1, true);
		if (strlen(out[i].name) > SAGA_MAX_NAME_LEN)
			saga_bad(psprintf("name is longer than %d bytes", SAGA_MAX_NAME_LEN), i + 1);
		for (p = out[i].name; *p; p++)
			if (!(isalnum((unsigned char) *p) || *p == '_' || *p == '-' || *p == '.'))
				saga_bad("name may only have letters, digits, '_', '-' and '.'", i + 1);
		for (j = 0; j < i; j++)
			if (strcmp(out[j].name, out[i].name) == 0)
				saga_bad(psprintf("name \"%s\" is used twice", out[i].name), i + 1);
		out[i].queue = saga_string(c, "queue", i + 1, true);
		out[i].payload = saga_payload(c, "payload");
		NtaskCheckPayload(out[i].payload, "steps", i + 1, ".payload");
		if (getKeyJsonValueFromContainer(c, "compensate", 10, &comp) != NULL)
		{
			if (comp.type != jbvBinary || !JsonContainerIsObject(comp.val.binary.data))
				saga_bad("compensate must be a JSON object", i + 1);
			saga_keys_only(comp.val.binary.data, comp_keys, i + 1, "compensate");
			out[i].cqueue = saga_string(comp.val.binary.data, "queue", i + 1, true);
			out[i].cpayload = saga_payload(comp.val.binary.data, "payload");
			NtaskCheckPayload(out[i].cpayload, "steps", i + 1, ".compensate.payload");
		}
	}
	*nsteps = n;
	return out;
}

/* saga_task_key: '<saga_key>:<name>' or '<saga_key>:<name>:compensate' */
static char *
saga_task_key(const char *saga_key, const char *name, bool compensate)
{
	return psprintf("%s:%s%s", saga_key, name, compensate ? ":compensate" : "");
}

/*
 * saga_enqueue
 *		Enqueue step step_no (1-based) of the saga, forward or its
 *		compensation, and record it.  False when its key is taken by a task
 *		that is not the saga's (or its queue is gone).
 */
static bool
saga_enqueue(int64 saga_id, const char *saga_key, SagaStep *steps, int step_no,
			 bool compensate)
{
	SagaStep   *s = &steps[step_no - 1];
	const char *queue = compensate ? s->cqueue : s->queue;
	int64		task_id;
	Datum		values[SAGA_STEP_INSERT_NARGS];

	task_id = NtaskEnqueueStep(queue, saga_task_key(saga_key, s->name, compensate),
							   compensate ? s->cpayload : s->payload, saga_id);
	if (task_id < 0)
		return false;
	values[SAGA_STEP_INSERT_ARG_SAGA_ID] = Int64GetDatum(saga_id);
	values[SAGA_STEP_INSERT_ARG_STEP_NO] = Int32GetDatum(step_no);
	values[SAGA_STEP_INSERT_ARG_KIND] = CStringGetTextDatum(compensate ? "compensate" : "forward");
	values[SAGA_STEP_INSERT_ARG_NAME] = CStringGetTextDatum(s->name);
	values[SAGA_STEP_INSERT_ARG_QUEUE] = CStringGetTextDatum(queue);
	values[SAGA_STEP_INSERT_ARG_TASK_ID] = Int64GetDatum(task_id);
	NtaskExecPlan(&saga_step_insert_plan, values, NULL, SPI_OK_INSERT);
	return true;
}

/* saga_set: the saga's new state, current step, failed step and reason */
static void
saga_set(int64 saga_id, const char *state, int current, int failed,
		 const char *reason)
{
	Datum		values[SAGA_UPDATE_NARGS];
	char		nulls[SAGA_UPDATE_NARGS];

	memset(nulls, ' ', sizeof(nulls));
	values[SAGA_UPDATE_ARG_SAGA_ID] = Int64GetDatum(saga_id);
	values[SAGA_UPDATE_ARG_STATE] = CStringGetTextDatum(state);
	values[SAGA_UPDATE_ARG_CURRENT_STEP] = Int32GetDatum(current);
	values[SAGA_UPDATE_ARG_FAILED_STEP] = Int32GetDatum(failed);
	nulls[SAGA_UPDATE_ARG_FAILED_STEP] = failed > 0 ? ' ' : 'n';
	values[SAGA_UPDATE_ARG_REASON] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[SAGA_UPDATE_ARG_REASON] = reason ? ' ' : 'n';
	NtaskExecPlan(&saga_update_plan, values, nulls, SPI_OK_UPDATE);
}

/* saga_step_state: the last state seen of a step's task (NULL: none) */
static char *
saga_step_state(int64 saga_id, int step_no, const char *kind)
{
	Datum		values[SAGA_STEP_TASK_NARGS];

	values[SAGA_STEP_TASK_ARG_SAGA_ID] = Int64GetDatum(saga_id);
	values[SAGA_STEP_TASK_ARG_STEP_NO] = Int32GetDatum(step_no);
	values[SAGA_STEP_TASK_ARG_KIND] = CStringGetTextDatum(kind);
	if (NtaskExecPlan(&saga_step_task_plan, values, NULL, SPI_OK_SELECT) != 1)
		return NULL;
	return NtaskTupGetCString(SPI_tuptable, 0, SAGA_STEP_TASK_STATE);
}

/*
 * saga_close_failed
 *		The saga is compensated: nothing is left to do for its failed
 *		forward step, so it leaves the repair queue.  A step
 *		in repair_required is canceled with reason saga_compensated, in
 *		this transaction, and audited; its error stays on the row and in
 *		the saga's reason.  A step that was canceled is left as it is.
 */
static void
saga_close_failed(int64 saga_id, const char *saga_key, int failed)
{
	Datum		values[SAGA_STEP_TASK_NARGS];
	int64		task_id;
	char	   *queue;

	if (failed <= 0)
		return;
	values[SAGA_STEP_TASK_ARG_SAGA_ID] = Int64GetDatum(saga_id);
	values[SAGA_STEP_TASK_ARG_STEP_NO] = Int32GetDatum(failed);
	values[SAGA_STEP_TASK_ARG_KIND] = CStringGetTextDatum("forward");
	if (NtaskExecPlan(&saga_step_task_plan, values, NULL, SPI_OK_SELECT) != 1)
		return;
	task_id = NtaskTupGetInt64(SPI_tuptable, 0, SAGA_STEP_TASK_TASK_ID);
	if (saga_exec_task(&saga_failed_lock_plan, task_id, SPI_OK_SELECT) != 1)
		return;					/* not in repair, or being changed right now */
	queue = NtaskTupGetCString(SPI_tuptable, 0, SAGA_FAILED_LOCK_QUEUE);
	NtaskFinishTask(task_id, "canceled", "saga_compensated", "canceled", NULL, NULL);
	NtaskAudit("ntask saga", "cancel", task_id, queue,
			   psprintf("saga_compensated: saga %s (%lld) is compensated", saga_key,
						(long long) saga_id),
			   "repair_required", "canceled");
}

/*
 * saga_compensate_from
 *		Start the compensation of the latest step at or before from that
 *		needs one: the failed step itself when from is it (the caller
 *		decided it may have taken effect), else a step that succeeded and
 *		has a compensate.  None left: the saga is compensated.
 */
static void
saga_compensate_from(int64 saga_id, const char *saga_key, SagaStep *steps,
					 int from, int failed, const char *reason)
{
	int			j;

	for (j = from; j >= 1; j--)
	{
		char	   *st;

		if (steps[j - 1].cqueue == NULL)
			continue;			/* irreversible: nothing to run */
		if (j != failed)
		{
			st = saga_step_state(saga_id, j, "forward");
			if (st == NULL || strcmp(st, "succeeded") != 0)
				continue;		/* skipped or never ran: no effect to undo */
		}
		if (!saga_enqueue(saga_id, saga_key, steps, j, true))
		{
			saga_set(saga_id, "manual_review", j, failed,
					 psprintf("the compensation task key of step %s is taken", steps[j - 1].name));
			return;
		}
		saga_set(saga_id, "compensating", j, failed, reason);
		return;
	}
	saga_set(saga_id, "compensated", 0, failed, reason);
	saga_close_failed(saga_id, saga_key, failed);
}

/* ---- the trigger ---- */

/*
 * saga_on_change
 *		Task task_id of saga saga_id went from old_state to new_state: move
 *		the saga (file header).  Runs inside an SPI connection.
 */
static void
saga_on_change(int64 task_id, int64 saga_id, const char *old_state,
			   const char *new_state)
{
	Datum		values[SAGA_STEP_SEEN_NARGS];
	SPITupleTable *tt;
	char	   *sstate;
	int			current;
	int			failed;
	int			nsteps;
	char	   *saga_key;
	SagaStep   *steps;
	int			step_no;
	bool		forward;
	bool		isnull;
	bool		done;
	bool		failure;
	bool		replay;

	/* a claim, a retry, a release: the saga has nothing to do */
	done = strcmp(new_state, "succeeded") == 0 || strcmp(new_state, "skipped") == 0;
	failure = strcmp(new_state, "repair_required") == 0 || strcmp(new_state, "canceled") == 0;
	replay = strcmp(new_state, "ready") == 0 && strcmp(old_state, "repair_required") == 0;
	if (!done && !failure && !replay)
		return;

	if (saga_exec_saga(&saga_lock_plan, saga_id, SPI_OK_SELECT) != 1)
		return;
	tt = SPI_tuptable;
	sstate = NtaskTupGetCString(tt, 0, SAGA_LOCK_STATE);
	current = NtaskTupGetInt32(tt, 0, SAGA_LOCK_CURRENT_STEP);
	NtaskTupGetDatum(tt, 0, SAGA_LOCK_FAILED_STEP, &isnull);
	failed = isnull ? 0 : NtaskTupGetInt32(tt, 0, SAGA_LOCK_FAILED_STEP);
	nsteps = NtaskTupGetInt32(tt, 0, SAGA_LOCK_NSTEPS);
	steps = saga_parse(DatumGetJsonbP(NtaskTupGetDatum(tt, 0, SAGA_LOCK_STEPS, &isnull)), &nsteps);
	saga_key = NtaskTupGetCString(tt, 0, SAGA_LOCK_SAGA_KEY);

	values[SAGA_STEP_SEEN_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[SAGA_STEP_SEEN_ARG_STATE] = CStringGetTextDatum(new_state);
	if (NtaskExecPlan(&saga_step_seen_plan, values, NULL, SPI_OK_UPDATE_RETURNING) != 1)
		return;
	tt = SPI_tuptable;
	step_no = NtaskTupGetInt32(tt, 0, SAGA_STEP_SEEN_STEP_NO);
	forward = strcmp(NtaskTupGetCString(tt, 0, SAGA_STEP_SEEN_KIND), "forward") == 0;

	/* a replay of a saga's task: only ntask_saga_resume may do that */
	if (replay)
	{
		if (forward)
			ereport(ERROR,
					(errcode(ERRCODE_NTASK_INVALID_TASK_STATE),
					 errmsg("ntask: task %lld is a forward step of saga %lld (%s)",
							(long long) task_id, (long long) saga_id, sstate),
					 errhint("A saga's failed step is not retried: the saga compensates and then cancels it (saga_compensated); start a new saga to do the work again.")));
		if (!saga_resuming || step_no != current ||
			strcmp(sstate, "manual_review") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_NTASK_INVALID_TASK_STATE),
					 errmsg("ntask: task %lld is a compensation of saga %lld (%s)",
							(long long) task_id, (long long) saga_id, sstate),
					 errhint("A saga's failed compensation is resumed with ntask_saga_resume once the saga is in manual_review.")));
		saga_set(saga_id, "compensating", current, 0, NULL);
		return;
	}

	if (forward)
	{
		if (strcmp(sstate, "running") != 0 || step_no != current)
			return;				/* the saga moved on (canceled, compensating) */
		if (done)
		{
			if (step_no == nsteps)
				saga_set(saga_id, "succeeded", step_no, 0, NULL);
			else if (saga_enqueue(saga_id, saga_key, steps, step_no + 1, false))
				saga_set(saga_id, "running", step_no + 1, 0, NULL);
			else
				saga_set(saga_id, "manual_review", step_no + 1, 0,
						 psprintf("the task key of step %s is taken", steps[step_no].name));
		}
		else
		{
			bool		maybe;
			char	   *why;
			char	   *reason;

			saga_exec_task(&saga_maybe_effect_plan, task_id, SPI_OK_SELECT);
			tt = SPI_tuptable;
			maybe = NtaskTupGetBool(tt, 0, SAGA_MAYBE_EFFECT);
			why = NtaskTupGetCString(tt, 0, SAGA_MAYBE_REASON);
			reason = psprintf("step %s %s%s%s%s", steps[step_no - 1].name, new_state,
							  why ? " (" : "", why ? why : "", why ? ")" : "");
			saga_compensate_from(saga_id, saga_key, steps,
								 maybe ? step_no : step_no - 1, step_no, reason);
		}
		return;
	}

	/* a compensation */
	if (step_no != current ||
		!(strcmp(sstate, "compensating") == 0 ||
		  (saga_resuming && strcmp(sstate, "manual_review") == 0)))
		return;
	if (done)
		saga_compensate_from(saga_id, saga_key, steps, step_no - 1, failed, NULL);
	else
		saga_set(saga_id, "manual_review", step_no, 0,
				 psprintf("the compensation of step %s is %s", steps[step_no - 1].name,
						  new_state));
}

/* saga_attr: a column of the trigger's tuple, by name */
static Datum
saga_attr(TriggerData *td, HeapTuple tup, const char *name, bool *isnull)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	int			attno = SPI_fnumber(desc, name);

	if (attno <= 0)
		elog(ERROR, "ntask: ntask.task has no column %s", name);
	return heap_getattr(tup, attno, desc, isnull);
}

/*
 * ntask.saga_step_changed() trigger: AFTER UPDATE OF state ON ntask.task
 * FOR EACH ROW WHEN (NEW.saga_id IS NOT NULL AND NEW.state IS DISTINCT
 * FROM OLD.state).
 */
Datum
ntask_saga_step_changed(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	bool		isnull;
	int64		task_id;
	int64		saga_id;
	char	   *old_state;
	char	   *new_state;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		elog(ERROR, "ntask: saga_step_changed must be an AFTER UPDATE row trigger");
	task_id = DatumGetInt64(saga_attr(td, td->tg_newtuple, "task_id", &isnull));
	saga_id = DatumGetInt64(saga_attr(td, td->tg_newtuple, "saga_id", &isnull));
	if (isnull)
		return PointerGetDatum(NULL);
	new_state = TextDatumGetCString(saga_attr(td, td->tg_newtuple, "state", &isnull));
	old_state = TextDatumGetCString(saga_attr(td, td->tg_trigtuple, "state", &isnull));

	SPI_connect();
	saga_on_change(task_id, saga_id, old_state, new_state);
	SPI_finish();
	return PointerGetDatum(NULL);
}

/* ---- the SQL functions ---- */

/* the result columns of ntask_saga_start */
typedef enum SagaOutCol
{
	SAGA_OUT_SAGA_ID,
	SAGA_OUT_CREATED,
	SAGA_OUT_STATE,
	SAGA_OUT_NCOLS
} SagaOutCol;

/*
 * ntask_saga_start(saga_key, steps, actor) RETURNS TABLE(saga_id, created,
 *													  state)
 *
 * Starts the saga and enqueues step 1 in the caller's transaction.  The
 * caller needs the producer right on every queue the definition names
 * (forward and compensation: 42704 unknown, 42501 without it), checked
 * before anything is written or revealed.  The same saga_key again with
 * the same definition (canonical digest) returns the existing saga
 * (created = false); with another definition NT001.  Only a saga the
 * caller may see answers so: one of whose queues (its scope) the caller
 * lacks the producer right on is as if the key were free, and the new
 * saga has a scope of its own.  Errors: 22004 NULL,
 * 22023 a bad definition, 22001 a saga_key over 300 bytes.
 */
Datum
ntask_saga_start(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *key = NtaskArgText(fcinfo, 0, "saga_key", SAGA_MAX_KEY_LEN);
	Jsonb	   *def;
	char	   *actor;
	char	   *saga_key = text_to_cstring(key);
	SagaStep   *steps;
	int			nsteps;
	bytea	   *digest;
	Datum		values[SAGA_INSERT_NARGS];
	Datum		existing[SAGA_EXISTING_NARGS];
	SPITupleTable *tt;
	int			found;
	Datum		out[SAGA_OUT_NCOLS];
	bool		outnulls[SAGA_OUT_NCOLS] = {false, false, false};
	int			i;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: steps must not be NULL")));
	def = PG_GETARG_JSONB_P(1);
	actor = PG_ARGISNULL(2) ? GetUserNameFromId(GetUserId(), false) :
		text_to_cstring(NtaskArgText(fcinfo, 2, "actor", NTASK_MAX_NAME_LEN));
	steps = saga_parse(def, &nsteps);
	digest = NtaskDigest(def, NTASK_DIGEST_VERSION);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();

	/*
	 * A distributed install: a saga's steps are tasks of other keys, so of
	 * other shards, and the trigger that moves a saga on would run on a
	 * step's shard and query the others, which Citus refuses from a shard
	 * (docs/scaling.md "Fairness, limits, ordering and sagas across shards");
	 * ntask_distribute dropped it.
	 */
	NtaskRefuseDistributed("a saga");
	for (i = 0; i < nsteps; i++)
	{
		NtaskCheckQueueRight(cstring_to_text(steps[i].queue), true);
		if (steps[i].cqueue)
			NtaskCheckQueueRight(cstring_to_text(steps[i].cqueue), true);
	}

	/*
	 * A saga of this key the caller may see answers (created = false or
	 * NT001); one it may not see is as if the key were free, and the new saga
	 * gets its own scope.  The insert's conflict can only be a saga of the
	 * caller's own scope committed since the look: looked up again.
	 */
	existing[SAGA_EXISTING_ARG_KEY] = PointerGetDatum(key);
	existing[SAGA_EXISTING_ARG_STEPS] = JsonbPGetDatum(def);
	existing[SAGA_EXISTING_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	values[SAGA_INSERT_ARG_KEY] = PointerGetDatum(key);
	values[SAGA_INSERT_ARG_STEPS] = JsonbPGetDatum(def);
	values[SAGA_INSERT_ARG_DIGEST] = PointerGetDatum(digest);
	values[SAGA_INSERT_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);
	values[SAGA_INSERT_ARG_NSTEPS] = Int32GetDatum(nsteps);
	values[SAGA_INSERT_ARG_STARTED_BY] = CStringGetTextDatum(actor);
	found = NtaskExecPlan(&saga_existing_plan, existing, NULL, SPI_OK_SELECT);
	if (found == 0 &&
		NtaskExecPlan(&saga_insert_plan, values, NULL, SPI_OK_INSERT_RETURNING) == 1)
	{
		int64		saga_id = NtaskTupGetInt64(SPI_tuptable, 0, SAGA_INSERT_SAGA_ID);

		if (!saga_enqueue(saga_id, saga_key, steps, 1, false))
			ereport(ERROR,
					(errcode(ERRCODE_NTASK_KEY_CONFLICT),
					 errmsg("ntask: task key \"%s\" already exists in queue \"%s\"",
							saga_task_key(saga_key, steps[0].name, false), steps[0].queue),
					 errhint("A saga's steps are tasks keyed '<saga_key>:<step name>'; use another saga_key.")));
		NtaskAudit(actor, "saga_start", 0, steps[0].queue,
				   psprintf("saga %s (%lld), %d steps", saga_key, (long long) saga_id, nsteps),
				   NULL, "running");
		out[SAGA_OUT_SAGA_ID] = Int64GetDatum(saga_id);
		out[SAGA_OUT_CREATED] = BoolGetDatum(true);
		out[SAGA_OUT_STATE] = CStringGetTextDatum("running");
	}
	else
	{
		bool		isnull;

		if (found == 0 &&
			NtaskExecPlan(&saga_existing_plan, existing, NULL, SPI_OK_SELECT) != 1)
			elog(ERROR, "ntask: saga \"%s\" neither inserted nor found", saga_key);
		tt = SPI_tuptable;
		if (!NtaskSameDigest(def, digest,
							 DatumGetByteaPP(NtaskTupGetDatum(tt, 0, SAGA_EXISTING_DIGEST, &isnull)),
							 NtaskTupGetInt32(tt, 0, SAGA_EXISTING_DIGEST_VERSION)))
			ereport(ERROR,
					(errcode(ERRCODE_NTASK_KEY_CONFLICT),
					 errmsg("ntask: saga \"%s\" already exists with a different definition", saga_key),
					 errhint("A saga key names one piece of business work; use a new key for a new version.")));
		out[SAGA_OUT_SAGA_ID] = Int64GetDatum(NtaskTupGetInt64(tt, 0, SAGA_EXISTING_SAGA_ID));
		out[SAGA_OUT_CREATED] = BoolGetDatum(false);
		out[SAGA_OUT_STATE] = PointerGetDatum(NtaskTupGetText(tt, 0, SAGA_EXISTING_STATE));
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	SPI_finish();
	return (Datum) 0;
}

/* saga_not_found: P0002 */
static void
saga_not_found(int64 saga_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_NO_DATA_FOUND),
			 errmsg("ntask: saga %lld does not exist", (long long) saga_id)));
}

/*
 * ntask_saga_cancel(saga_id, actor, reason) RETURNS text
 *
 * A running saga: its running step's task is canceled (its worker's token
 * goes stale), and the trigger starts the compensation.  The task row is
 * locked before the saga row, as in a worker's transition, so a step's
 * success racing the cancel serializes on the task: if the success
 * commits first, the saga has moved to the next step and the cancel
 * cancels that one.  Returns the saga's state afterwards; a saga already
 * compensating, compensated or in manual_review is returned as it is; a
 * succeeded saga raises NT002; an unknown one P0002.  Audited.
 */
Datum
ntask_saga_cancel(PG_FUNCTION_ARGS)
{
	int64		saga_id = NtaskArgInt64(fcinfo, 0, "saga_id");
	char	   *actor = text_to_cstring(NtaskArgText(fcinfo, 1, "actor", NTASK_MAX_NAME_LEN));
	char	   *reason = text_to_cstring(NtaskArgText(fcinfo, 2, "reason", NTASK_MAX_REASON_LEN));
	char	   *state = NULL;
	int			tries;

	SPI_connect();
	for (tries = 0; tries < SAGA_MAX_STEPS + 2; tries++)
	{
		Datum		values[SAGA_STEP_TASK_NARGS];
		SPITupleTable *tt;
		int			current;
		int64		task_id;
		char	   *tstate;
		char	   *queue;

		if (saga_exec_saga(&saga_read_plan, saga_id, SPI_OK_SELECT) != 1)
			saga_not_found(saga_id);
		tt = SPI_tuptable;
		state = NtaskTupGetCString(tt, 0, SAGA_READ_STATE);
		current = NtaskTupGetInt32(tt, 0, SAGA_READ_CURRENT_STEP);
		if (strcmp(state, "succeeded") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_NTASK_INVALID_TASK_STATE),
					 errmsg("ntask: saga %lld has succeeded and cannot be canceled", (long long) saga_id)));
		if (strcmp(state, "running") != 0)
			break;
		values[SAGA_STEP_TASK_ARG_SAGA_ID] = Int64GetDatum(saga_id);
		values[SAGA_STEP_TASK_ARG_STEP_NO] = Int32GetDatum(current);
		values[SAGA_STEP_TASK_ARG_KIND] = CStringGetTextDatum("forward");
		if (NtaskExecPlan(&saga_step_task_plan, values, NULL, SPI_OK_SELECT) != 1)
			elog(ERROR, "ntask: saga %lld has no task for its step %d", (long long) saga_id, current);
		task_id = NtaskTupGetInt64(SPI_tuptable, 0, SAGA_STEP_TASK_TASK_ID);
		if (saga_exec_task(&saga_task_lock_plan, task_id, SPI_OK_SELECT) != 1)
			elog(ERROR, "ntask: saga %lld: its step task %lld is gone", (long long) saga_id,
				 (long long) task_id);
		tt = SPI_tuptable;
		tstate = NtaskTupGetCString(tt, 0, SAGA_TASK_LOCK_STATE);
		queue = NtaskTupGetCString(tt, 0, SAGA_TASK_LOCK_QUEUE);
		if (strcmp(tstate, "succeeded") == 0 || strcmp(tstate, "skipped") == 0 ||
			strcmp(tstate, "canceled") == 0 || strcmp(tstate, "repair_required") == 0)
			continue;			/* it finished first: the saga moved; look
								 * again */
		NtaskFinishTask(task_id, "canceled", psprintf("saga canceled: %s", reason),
						"canceled", NULL, NULL);
		NtaskAudit(actor, "saga_cancel", task_id, queue, reason, tstate, "canceled");
		saga_exec_saga(&saga_read_plan, saga_id, SPI_OK_SELECT);
		state = NtaskTupGetCString(SPI_tuptable, 0, SAGA_READ_STATE);
		break;
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/*
 * ntask_saga_resume(saga_id, actor, reason) RETURNS text
 *
 * A saga in manual_review: its failed compensation (a task in
 * repair_required) is replayed with ntask_replay (guard, fresh budget,
 * audit) and the saga is compensating again; the forward path is not
 * resumed (an operator who fixed the cause starts a new saga).  Returns the
 * saga's state.  Other states NT002 (a compensation that was canceled
 * cannot be resumed: it names why); unknown saga P0002.
 */
Datum
ntask_saga_resume(PG_FUNCTION_ARGS)
{
	int64		saga_id = NtaskArgInt64(fcinfo, 0, "saga_id");
	text	   *actor = NtaskArgText(fcinfo, 1, "actor", NTASK_MAX_NAME_LEN);
	text	   *reason = NtaskArgText(fcinfo, 2, "reason", NTASK_MAX_REASON_LEN);
	Datum		values[SAGA_STEP_TASK_NARGS];
	SPITupleTable *tt;
	char	   *state;
	int			current;
	int64		task_id;

	SPI_connect();
	if (saga_exec_saga(&saga_read_plan, saga_id, SPI_OK_SELECT) != 1)
		saga_not_found(saga_id);
	tt = SPI_tuptable;
	state = NtaskTupGetCString(tt, 0, SAGA_READ_STATE);
	current = NtaskTupGetInt32(tt, 0, SAGA_READ_CURRENT_STEP);
	if (strcmp(state, "manual_review") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_NTASK_INVALID_TASK_STATE),
				 errmsg("ntask: saga %lld is %s, not manual_review", (long long) saga_id, state)));
	values[SAGA_STEP_TASK_ARG_SAGA_ID] = Int64GetDatum(saga_id);
	values[SAGA_STEP_TASK_ARG_STEP_NO] = Int32GetDatum(current);
	values[SAGA_STEP_TASK_ARG_KIND] = CStringGetTextDatum("compensate");
	if (NtaskExecPlan(&saga_step_task_plan, values, NULL, SPI_OK_SELECT) != 1 ||
		strcmp(NtaskTupGetCString(SPI_tuptable, 0, SAGA_STEP_TASK_STATE), "repair_required") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_NTASK_INVALID_TASK_STATE),
				 errmsg("ntask: saga %lld has no compensation in repair_required to resume",
						(long long) saga_id),
				 errhint("See ntask.saga_status for its steps.")));
	task_id = NtaskTupGetInt64(SPI_tuptable, 0, SAGA_STEP_TASK_TASK_ID);

	saga_resuming = true;
	PG_TRY();
	{
		DirectFunctionCall3(ntask_replay, Int64GetDatum(task_id),
							PointerGetDatum(actor), PointerGetDatum(reason));
	}
	PG_FINALLY();
	{
		saga_resuming = false;
	}
	PG_END_TRY();
	saga_exec_saga(&saga_read_plan, saga_id, SPI_OK_SELECT);
	state = NtaskTupGetCString(SPI_tuptable, 0, SAGA_READ_STATE);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}
