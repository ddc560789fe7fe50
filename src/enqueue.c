/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *	  ntask_enqueue: idempotent enqueue on (queue, task_key), and its batch
 *	  form ntask_enqueue_many (docs/design.md "Batches").
 *
 * The insert is INSERT ... SELECT FROM ntask.queue ... ON CONFLICT DO
 * NOTHING RETURNING, so the happy path is one statement and a duplicate
 * never raises inside the caller's transaction.  When nothing is returned
 * the existing task is read and its payload digest compared (same
 * algorithm version, see digest.c): equal → created = false; different →
 * NT001.  Two concurrent enqueues of one key serialize on the unique index:
 * the second waits for the first to commit and then sees its row.
 *
 * The task copies max_attempts from the queue, and its deadline is
 * max(now, run_at) + total_deadline, so a policy change later does not
 * rewrite the budget of existing tasks.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/enqueue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "coord.h"
#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "catalog/namespace.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(ntask_enqueue);
PG_FUNCTION_INFO_V1(ntask_enqueue_many);

/*
 * SQL: what a commit of new tasks of queue $1 must do besides: bit 1, the
 * queue is an http queue (the background worker dispatches its tasks);
 * bit 2, its policy says notify (NOTIFY ntask_<queue>).  An InitPlan,
 * evaluated once per statement.  Only an http queue wakes the worker at
 * commit: a wake-up of a sleeping worker is a signal and a pass of its
 * loop, 4.5% of an enqueue's CPU under pgbench (perf) for queues the
 * worker has nothing to do with.
 */
#define ENQ_QUEUE_FLAGS \
	"(SELECT CASE WHEN hq.target OPERATOR(pg_catalog.->>) 'type' OPERATOR(pg_catalog.=) 'http' " \
	"   THEN 1 ELSE 0 END OPERATOR(pg_catalog.+) CASE WHEN hq.notify THEN 2 ELSE 0 END " \
	" FROM ntask.queue hq WHERE hq.queue OPERATOR(pg_catalog.=) $1)"
#define ENQ_HTTP	1
#define ENQ_NOTIFY	2

/*
 * The partition key a new task is stored with: the caller's, or, in a
 * queue with fairness, '' for "no key" (a key nobody can pass:
 * keys must not be empty), so the keyless tasks of a fair queue are one
 * partition of task_partition_due_idx like any other.  The queue row is
 * already read by the insert, so this costs nothing in other queues.
 */
#define ENQ_PARTITION(pk) \
	"coalesce(" pk ", CASE WHEN q.fairness OPERATOR(pg_catalog.<>) 'none' THEN '' END)"

/*
 * The new task's id: the sequence of the identity column, with the shard
 * in the high bits (docs/scaling.md "Task ids and tokens"); on a plain
 * install the shard is 0 and this is what the identity default draws.
 * The arbiter is named (ON CONFLICT ON CONSTRAINT) because a distributed
 * install widens it by shard (ntask_distribute).
 */
#define ENQ_TASK_ID(shard) \
	"((" shard "::pg_catalog.int8 OPERATOR(pg_catalog.<<) " \
	CppAsString2(NTASK_SHARD_SHIFT) ") OPERATOR(pg_catalog.|) " \
	"pg_catalog.nextval('ntask.task_task_id_seq'::pg_catalog.regclass))"

/* a task of an ordered queue joins the order index (task_ordered_idx) */
#define ENQ_ORDERED "CASE WHEN q.ordered THEN true END"

/*
 * The parameters of the single enqueue (enq_insert, enq_existing_plan)
 * and of the batch (enq_many_pair, where the key, payload, digest,
 * partition key and shard are arrays; its lookup takes the first two):
 * values[ENQ_ARG_X] is $(X + 1).
 */
typedef enum EnqArg
{
	ENQ_ARG_QUEUE,				/* $1 */
	ENQ_ARG_KEY,				/* $2 */
	ENQ_ARG_PAYLOAD,			/* $3 */
	ENQ_ARG_DIGEST,				/* $4 */
	ENQ_ARG_DIGEST_VERSION,		/* $5 */
	ENQ_ARG_PARTITION_KEY,		/* $6, NULL: none */
	ENQ_ARG_PRIORITY,			/* $7 */
	ENQ_ARG_RUN_AT,				/* $8, NULL: now */
	ENQ_ARG_CALLER,				/* $9, for the producer_role */
	ENQ_ARG_SHARD,				/* $10 */
	ENQ_ARG_TRACEPARENT,		/* $11, NULL: none */
	ENQ_NARGS,					/* the plain statements' */
	/* enq_insert's routed variant's own, filled by its before step */
	ENQ_ARG_TASK_ID = ENQ_NARGS,	/* $12 */
	ENQ_ARG_PARTITION,			/* $13, ENQ_PARTITION's value */
	ENQ_ARG_RUN_AT_OR_NOW,		/* $14, also due_at */
	ENQ_ARG_MAX_ATTEMPTS,		/* $15 */
	ENQ_ARG_DEADLINE,			/* $16 */
	ENQ_ARG_ORDERED,			/* $17 */
	ENQ_ARG_FLAGS,				/* $18, returned: ENQ_QUEUE_FLAGS */
	ENQ_ROUTED_NARGS,
	/* no statement's: the call's EnqPolicy, for the before step */
	ENQ_ARG_POLICY = ENQ_ROUTED_NARGS,
	ENQ_PAIR_NARGS
} EnqArg;

/* the columns of enq_insert */
typedef enum EnqInsertCol
{
	ENQ_INSERT_TASK_ID = 1,
	ENQ_INSERT_STATE,
	ENQ_INSERT_FLAGS,			/* ENQ_QUEUE_FLAGS */
	ENQ_INSERT_NCOLS = ENQ_INSERT_FLAGS
} EnqInsertCol;

/* the columns of enq_existing_plan */
typedef enum EnqExistingCol
{
	ENQ_EXISTING_TASK_ID = 1,
	ENQ_EXISTING_STATE,
	ENQ_EXISTING_DIGEST,
	ENQ_EXISTING_DIGEST_VERSION,
	ENQ_EXISTING_OUTCOME,
	ENQ_EXISTING_RESULT,
	ENQ_EXISTING_NCOLS = ENQ_EXISTING_RESULT
} EnqExistingCol;

/*
 * A key with a committed task is not inserted: the row of
 * INSERT ... ON CONFLICT is built, its task_id drawn from the sequence,
 * before the arbiter finds the conflict, so every duplicate enqueue used
 * up an id.  The probe of the unique index costs a new key one more index
 * descent (docs/performance.md); ON CONFLICT still decides a race with an
 * uncommitted enqueue of the key, which alone may leave a gap.
 *
 * OFFSET 0 keeps the probe a subplan run per key, (queue, task_key) its
 * index condition: pulled up into an anti join, a generic plan made while
 * the queue was small read every key of the queue (queue = $1 the only
 * index condition, the key a join filter) at each later enqueue, so an
 * enqueue grew with the queue (docs/performance.md "The 1.1 pickup
 * regression", regress enqueue).
 */
#define ENQ_KEY_IS_NEW(key) \
	"NOT EXISTS (SELECT 1 FROM ntask.task x WHERE x.queue OPERATOR(pg_catalog.=) $1 " \
	"            AND x.task_key OPERATOR(pg_catalog.=) " key " OFFSET 0)"

#define ENQ_INSERT \
	"INSERT INTO ntask.task AS t (task_id, shard, queue, task_key, payload, " \
	"  payload_digest, digest_version, partition_key, priority, run_at, due_at, " \
	"  max_attempts, deadline, ordered, traceparent) " \
	"OVERRIDING SYSTEM VALUE " \
	"SELECT " ENQ_TASK_ID("$10") ", $10, q.queue, $2, $3, $4, $5, " ENQ_PARTITION("$6") ", $7, " \
	"  coalesce($8, pg_catalog.statement_timestamp()), coalesce($8, pg_catalog.statement_timestamp()), " \
	"  q.max_attempts, " \
	"  GREATEST(pg_catalog.statement_timestamp(), $8) OPERATOR(pg_catalog.+) q.total_deadline, " \
	"  " ENQ_ORDERED ", $11 " \
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND (q.producer_role IS NULL " \
	"       OR pg_catalog.pg_has_role($9, q.producer_role, 'USAGE')) " \
	"  AND " ENQ_KEY_IS_NEW("$2") " " \
	"ON CONFLICT ON CONSTRAINT task_queue_task_key_key DO NOTHING "

/*
 * An enqueue on a distributed install: Citus runs an INSERT ... SELECT FROM
 * ntask.queue (a reference table) through the node that runs it (pull the
 * row, then copy it to the shard), several times the cost of a router
 * insert (docs/scaling.md).  So the routed variant of enq_insert reads the
 * queue's policy first (a read of a reference table, local on every node;
 * once per call, enq_policy_read) and inserts the task by INSERT ...
 * VALUES, its id drawn in C from the same sequence and the values the
 * plain statement computes from the queue row computed in C
 * (enq_insert_values, its before step).  Its own parameters follow the
 * plain ones (EnqArg).
 */

/* the parameters of enq_policy_dist_plan */
typedef enum EnqPolicyArg
{
	ENQ_POLICY_ARG_QUEUE,		/* $1 */
	ENQ_POLICY_ARG_CALLER,		/* $2, for the producer_role */
	ENQ_POLICY_NARGS
} EnqPolicyArg;

typedef enum EnqPolicyCol
{
	ENQ_POLICY_MAX_ATTEMPTS = 1,
	ENQ_POLICY_TOTAL_DEADLINE,
	ENQ_POLICY_ORDERED,
	ENQ_POLICY_FAIR,
	ENQ_POLICY_FLAGS,
	ENQ_POLICY_RIGHT,			/* the caller may produce into it */
	ENQ_POLICY_NCOLS = ENQ_POLICY_RIGHT
} EnqPolicyCol;

static NtaskPlan enq_policy_dist_plan = {
	"enqueue policy (distributed)",
	.ncols = ENQ_POLICY_NCOLS,
	"SELECT q.max_attempts, q.total_deadline, q.ordered, "
	"  q.fairness OPERATOR(pg_catalog.<>) 'none', "
	"  CASE WHEN q.target OPERATOR(pg_catalog.->>) 'type' OPERATOR(pg_catalog.=) 'http' "
	"   THEN 1 ELSE 0 END OPERATOR(pg_catalog.+) CASE WHEN q.notify THEN 2 ELSE 0 END, "
	"  (q.producer_role IS NULL "
	"   OR pg_catalog.pg_has_role($2, q.producer_role, 'USAGE')) "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	ENQ_POLICY_NARGS, {TEXTOID, OIDOID}
};

/* a queue's policy for its routed enqueues, read once per call */
typedef struct EnqPolicy
{
	bool		read;
	bool		ok;				/* the queue exists and the caller may enqueue */
	Datum		max_attempts;
	Datum		total_deadline;
	bool		no_deadline;
	bool		ordered;
	bool		fair;
	int32		flags;
} EnqPolicy;

static bool enq_insert_values(Datum *values, char *nulls);

/* the insert; the columns of both variants are EnqInsertCol's */
static NtaskPair enq_insert = NTASK_PAIR("enqueue insert",
										 NTASK_PLAIN(ENQ_INSERT_NCOLS,
													 ENQ_INSERT
													 "RETURNING t.task_id, t.state, " ENQ_QUEUE_FLAGS,
													 ENQ_NARGS, SPI_OK_INSERT_RETURNING),
										 NTASK_ROUTED(ENQ_INSERT_NCOLS,
													  "INSERT INTO ntask.task AS t (task_id, shard, queue, task_key, payload, "
													  "  payload_digest, digest_version, partition_key, priority, run_at, due_at, "
													  "  max_attempts, deadline, ordered, traceparent) "
													  "OVERRIDING SYSTEM VALUE "
													  "VALUES ($12, $10, $1, $2, $3, $4, $5, $13, $7, $14, $14, $15, $16, $17, $11) "
													  "ON CONFLICT ON CONSTRAINT task_queue_task_key_key DO NOTHING "
													  "RETURNING t.task_id, t.state, $18",
													  ENQ_ROUTED_NARGS, SPI_OK_INSERT_RETURNING,
													  enq_insert_values, NULL),
										 TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT2OID, TEXTOID, INT4OID,
										 TIMESTAMPTZOID, OIDOID, INT2OID, TEXTOID,
										 INT8OID, TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID,
										 BOOLOID, INT4OID, INTERNALOID);

/*
 * enq_policy_read
 *		The queue's policy for the routed enqueues of values (EnqArg's),
 *		read at the first call into pol.  false: no queue, or no right.
 */
static bool
enq_policy_read(EnqPolicy *pol, Datum *values)
{
	Datum		pv[ENQ_POLICY_NARGS];
	SPITupleTable *tt;
	bool		isnull;

	if (pol->read)
		return pol->ok;
	pv[ENQ_POLICY_ARG_QUEUE] = values[ENQ_ARG_QUEUE];
	pv[ENQ_POLICY_ARG_CALLER] = values[ENQ_ARG_CALLER];
	pol->read = true;
	pol->ok = NtaskExecPlan(&enq_policy_dist_plan, pv, NULL, SPI_OK_SELECT) == 1;
	tt = SPI_tuptable;
	pol->ok = pol->ok && NtaskTupGetBool(tt, 0, ENQ_POLICY_RIGHT);
	if (!pol->ok)
		return false;
	pol->max_attempts = NtaskTupGetDatum(tt, 0, ENQ_POLICY_MAX_ATTEMPTS, &isnull);
	pol->total_deadline = NtaskTupGetDatum(tt, 0, ENQ_POLICY_TOTAL_DEADLINE,
										   &pol->no_deadline);
	pol->ordered = NtaskTupGetBool(tt, 0, ENQ_POLICY_ORDERED);
	pol->fair = NtaskTupGetBool(tt, 0, ENQ_POLICY_FAIR);
	pol->flags = NtaskTupGetInt32(tt, 0, ENQ_POLICY_FLAGS);
	return true;
}

/*
 * enq_insert_values
 *		enq_insert's routed before step: under the call's policy
 *		(values[ENQ_ARG_POLICY]), the task id and the values the plain
 *		statement takes from the queue row.  false (nothing inserted): no
 *		queue, or no right.
 */
static bool
enq_insert_values(Datum *values, char *nulls)
{
	EnqPolicy  *pol = (EnqPolicy *) DatumGetPointer(values[ENQ_ARG_POLICY]);
	Datum		now = NtaskStatementTs();
	Datum		run_at;
	Oid			seq;

	if (!enq_policy_read(pol, values))
		return false;
	memset(&nulls[ENQ_NARGS], ' ', ENQ_ROUTED_NARGS - ENQ_NARGS);
	seq = get_relname_relid("task_task_id_seq", get_namespace_oid("ntask", false));
	if (!OidIsValid(seq))
		elog(ERROR, "ntask: sequence ntask.task_task_id_seq is missing");
	values[ENQ_ARG_TASK_ID] =
		Int64GetDatum(((int64) DatumGetInt16(values[ENQ_ARG_SHARD]) << NTASK_SHARD_SHIFT) |
					  nextval_internal(seq, false));
	/* ENQ_PARTITION: the caller's key, or '' in a fair queue */
	if (nulls[ENQ_ARG_PARTITION_KEY] != 'n')
		values[ENQ_ARG_PARTITION] = values[ENQ_ARG_PARTITION_KEY];
	else if (pol->fair)
		values[ENQ_ARG_PARTITION] = CStringGetTextDatum("");
	else
		nulls[ENQ_ARG_PARTITION] = 'n';
	run_at = nulls[ENQ_ARG_RUN_AT] == 'n' ? now : values[ENQ_ARG_RUN_AT];
	values[ENQ_ARG_RUN_AT_OR_NOW] = run_at;
	values[ENQ_ARG_MAX_ATTEMPTS] = pol->max_attempts;
	/* GREATEST(now, run_at) + total_deadline: NULL without one */
	if (pol->no_deadline)
		nulls[ENQ_ARG_DEADLINE] = 'n';
	else
		values[ENQ_ARG_DEADLINE] =
			DirectFunctionCall2(timestamptz_pl_interval,
								DatumGetTimestampTz(run_at) > DatumGetTimestampTz(now) ? run_at : now,
								pol->total_deadline);
	/* ENQ_ORDERED: true, or NULL out of the order index */
	values[ENQ_ARG_ORDERED] = BoolGetDatum(true);
	nulls[ENQ_ARG_ORDERED] = pol->ordered ? ' ' : 'n';
	values[ENQ_ARG_FLAGS] = Int32GetDatum(pol->flags);
	return true;
}

/* the existing task of the key: a pair, so that it runs on the direct path too */
static NtaskPair enq_existing_plan = NTASK_PAIR("enqueue lookup",
												NTASK_PLAIN(ENQ_EXISTING_NCOLS,
															"SELECT t.task_id, t.state, t.payload_digest, t.digest_version, "
															"  t.outcome, t.result "
															"FROM ntask.task t "
															"WHERE t.queue OPERATOR(pg_catalog.=) $1 "
															"  AND t.task_key OPERATOR(pg_catalog.=) $2 "
															"  AND t.shard OPERATOR(pg_catalog.=) $10",
/* up to $10, the shard: the lookup takes no traceparent */
															ENQ_ARG_SHARD + 1, SPI_OK_SELECT),
												NTASK_ROUTED_LIKE_PLAIN,
												TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT2OID, TEXTOID, INT4OID,
												TIMESTAMPTZOID, OIDOID, INT2OID);

/*
 * enq_traceparent
 *		The trace context new tasks of this call are stored with: the
 *		argument at argno when not NULL ('' for none), else the setting
 *		ntask.traceparent ('' for none).  A malformed one is 22023.  Sets
 *		*value and *null for the statement's $11.
 */
static void
enq_traceparent(FunctionCallInfo fcinfo, int argno, Datum *value, char *null)
{
	const char *tp;
	const char *why;

	*null = 'n';
	*value = (Datum) 0;
	if (PG_NARGS() > argno && !PG_ARGISNULL(argno))
	{
		tp = text_to_cstring(PG_GETARG_TEXT_PP(argno));
		if (tp[0] != '\0' && !NtaskTraceparentValid(tp, &why))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: traceparent \"%s\" is not a valid W3C trace context",
							strlen(tp) > 80 ? psprintf("%.80s...", tp) : tp),
					 errdetail("%s", why),
					 errhint("Pass it as the traceparent header carries it, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01, or NULL.")));
	}
	else
		tp = ntask_traceparent;	/* checked by its check hook */
	if (tp == NULL || tp[0] == '\0')
		return;
	*value = CStringGetTextDatum(tp);
	*null = ' ';
}

/*
 * enq_wake_waiters
 *		n new tasks of queue, to run at run_at (NULL: now): waiting claims
 *		are woken at commit, or told when the tasks come due.
 */
static void
enq_wake_waiters(text *queue, int n, Datum run_at, bool run_at_null)
{
	TimestampTz at;

	if (n <= 0)
		return;
	at = run_at_null ? 0 : DatumGetTimestampTz(run_at);
	if (at <= GetCurrentStatementStartTimestamp())
		NtaskWakeWaitersAtCommit(text_to_cstring(queue), n, 0);
	else
		NtaskWakeWaitersAtCommit(text_to_cstring(queue), 0, at);
}

/*
 * NtaskCheckPayload
 *		A payload to store (detoasted) within ntask.max_payload_bytes, else
 *		54000.  The message names it what, or what[element]suffix when
 *		element > 0 ("payloads[3]", "steps[2].compensate.payload"; built
 *		only then, a batch checks every element).  A payload is any JSON
 *		value; its size is the only limit.
 */
void
NtaskCheckPayload(Jsonb *jb, const char *what, int element, const char *suffix)
{
	Size		size = VARSIZE(jb);

	if (size > (Size) ntask_max_payload_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("ntask: %s is %zu bytes, more than ntask.max_payload_bytes (%d)",
						element > 0 ? psprintf("%s[%d]%s", what, element, suffix ? suffix : "") : what,
						size, ntask_max_payload_bytes),
				 errhint("Store large data elsewhere and keep a reference to it in the payload.")));
}

/*
 * ntask.check_payload(payload jsonb, what text) RETURNS void
 *		NtaskCheckPayload for the SQL functions (ntask_schedule).
 */
PG_FUNCTION_INFO_V1(ntask_check_payload);
Datum
ntask_check_payload(PG_FUNCTION_ARGS)
{
	NtaskCheckPayload(PG_GETARG_JSONB_P(0), text_to_cstring(PG_GETARG_TEXT_PP(1)), 0, NULL);
	PG_RETURN_VOID();
}

/*
 * enq_notify
 *		NOTIFY ntask_<queue> at commit (queue policy notify): one
 *		notification per committing transaction and queue, however many
 *		tasks it enqueued (PostgreSQL folds equal notifications).
 */
static void
enq_notify(text *queue)
{
	Async_Notify(psprintf("ntask_%s", text_to_cstring(queue)), NULL);
}

/* the result columns of ntask_enqueue and ntask_enqueue_many */
typedef enum EnqOutCol
{
	ENQ_OUT_TASK_ID,
	ENQ_OUT_CREATED,
	ENQ_OUT_STATE,
	ENQ_OUT_OUTCOME,			/* a duplicate's, else NULL */
	ENQ_OUT_RESULT,				/* a duplicate's, else NULL */
	ENQ_OUT_NCOLS
} EnqOutCol;

/* a new row: outcome and result NULL */
#define ENQ_OUT_NULLS {false, false, false, true, true}

/*
 * enq_put
 *		One output row of ntask_enqueue or ntask_enqueue_many (EnqOutCol).
 */
static void
enq_put(ReturnSetInfo *rsinfo, Datum *out, bool *outnulls)
{
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
}

/*
 * The insert of a saga's step (NtaskEnqueueStep): the queue's budget, due
 * now, saga_id set; no producer check (ntask_saga_start checked every
 * queue of the definition).
 */
typedef enum EnqStepArg
{
	ENQ_STEP_ARG_QUEUE,			/* $1 */
	ENQ_STEP_ARG_KEY,			/* $2 */
	ENQ_STEP_ARG_PAYLOAD,		/* $3 */
	ENQ_STEP_ARG_DIGEST,		/* $4 */
	ENQ_STEP_ARG_DIGEST_VERSION,	/* $5 */
	ENQ_STEP_ARG_SAGA_ID,		/* $6 */
	ENQ_STEP_NARGS
} EnqStepArg;

typedef enum EnqStepCol
{
	ENQ_STEP_TASK_ID = 1,
	ENQ_STEP_FLAGS,				/* ENQ_QUEUE_FLAGS */
	ENQ_STEP_NCOLS = ENQ_STEP_FLAGS
} EnqStepCol;

static NtaskPlan enq_step_plan = {
	"enqueue saga step",
	.ncols = ENQ_STEP_NCOLS,
	"INSERT INTO ntask.task AS t (queue, task_key, payload, payload_digest, "
	"  digest_version, partition_key, run_at, due_at, max_attempts, deadline, saga_id, "
	"  ordered) "
	"SELECT q.queue, $2, $3, $4, $5, " ENQ_PARTITION("NULL::text") ", "
	"  pg_catalog.statement_timestamp(), "
	"  pg_catalog.statement_timestamp(), q.max_attempts, "
	"  pg_catalog.statement_timestamp() OPERATOR(pg_catalog.+) q.total_deadline, $6, "
	"  " ENQ_ORDERED " "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1 "
	"ON CONFLICT (queue, task_key) DO NOTHING "
	"RETURNING t.task_id, " ENQ_QUEUE_FLAGS,
	ENQ_STEP_NARGS, {TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT2OID, INT8OID}
};

/*
 * NtaskEnqueueStep
 *		Enqueue one task of saga saga_id, due now, inside the caller's SPI
 *		connection, waking the worker and waiting claims at commit as an
 *		enqueue does.  Returns its task_id, or -1 when the key is taken (or
 *		the queue is gone).
 */
int64
NtaskEnqueueStep(const char *queue, const char *key, Jsonb *payload,
				 int64 saga_id)
{
	Datum		values[ENQ_STEP_NARGS];
	int32		flags;
	int64		task_id;
	text	   *q = cstring_to_text(queue);

	values[ENQ_STEP_ARG_QUEUE] = PointerGetDatum(q);
	values[ENQ_STEP_ARG_KEY] = CStringGetTextDatum(key);
	values[ENQ_STEP_ARG_PAYLOAD] = JsonbPGetDatum(payload);
	values[ENQ_STEP_ARG_DIGEST] = PointerGetDatum(NtaskDigest(payload, NTASK_DIGEST_VERSION));
	values[ENQ_STEP_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);
	values[ENQ_STEP_ARG_SAGA_ID] = Int64GetDatum(saga_id);
	if (NtaskExecPlan(&enq_step_plan, values, NULL, SPI_OK_INSERT_RETURNING) != 1)
		return -1;
	task_id = NtaskTupGetInt64(SPI_tuptable, 0, ENQ_STEP_TASK_ID);
	flags = NtaskTupGetInt32(SPI_tuptable, 0, ENQ_STEP_FLAGS);
	if (flags & ENQ_HTTP)
		NtaskWakeWorkerAtCommit();
	if (flags & ENQ_NOTIFY)
		enq_notify(q);
	NtaskWakeWaitersAtCommit(queue, 1, 0);
	return task_id;
}

/*
 * ntask_enqueue(queue, task_key, payload, run_at, partition_key, priority)
 *		RETURNS TABLE(task_id bigint, created boolean, state text,
 *					  outcome text, result jsonb)
 *
 * One row: the new task (created = true) or the existing task with the same
 * key and an equal payload (created = false).  A duplicate also returns
 * the existing task's outcome and stored result (ntask_transition result
 * => ...), so a retried request gets the answer of the first run; only
 * after the producer right on the queue is checked (42501 otherwise, the
 * same whether or not the key exists, nothing revealed).  Errors: unknown
 * queue 42704; same key, different payload NT001; NULL required argument
 * 22004; empty key 22023; key over 512 bytes 22001.
 */
Datum
ntask_enqueue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	text	   *key = NtaskArgText(fcinfo, 1, "task_key", NTASK_MAX_KEY_LEN);
	Jsonb	   *payload;
	bytea	   *digest;
	Datum		values[ENQ_PAIR_NARGS];
	char		nulls[ENQ_PAIR_NARGS];
	Datum		out[ENQ_OUT_NCOLS];
	bool		outnulls[ENQ_OUT_NCOLS] = ENQ_OUT_NULLS;
	SPITupleTable *tt;
	int			tries;
	NtaskDeps	deps;
	bool		has_deps;
	int32		flags;
	EnqPolicy	policy = {0};

	NtaskCheckNargs(fcinfo, 9);	/* before its new arguments are read */
	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: priority must not be NULL")));
	if (!PG_ARGISNULL(4))
		(void) NtaskArgText(fcinfo, 4, "partition_key", NTASK_MAX_KEY_LEN);
	if (!PG_ARGISNULL(3) && TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(3)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: run_at must be a finite timestamp")));
	payload = NtaskArgJsonb(fcinfo, 2, "payload");
	NtaskCheckPayload(payload, "payload", 0, NULL);
	digest = NtaskDigest(payload, NTASK_DIGEST_VERSION);
	has_deps = NtaskDepsArgs(fcinfo, 6, &deps);

	memset(nulls, ' ', sizeof(nulls));
	values[ENQ_ARG_QUEUE] = PointerGetDatum(queue);
	values[ENQ_ARG_KEY] = PointerGetDatum(key);
	values[ENQ_ARG_PAYLOAD] = JsonbPGetDatum(payload);
	values[ENQ_ARG_DIGEST] = PointerGetDatum(digest);
	values[ENQ_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);
	values[ENQ_ARG_PARTITION_KEY] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
	nulls[ENQ_ARG_PARTITION_KEY] = PG_ARGISNULL(4) ? 'n' : ' ';
	values[ENQ_ARG_PRIORITY] = PG_GETARG_DATUM(5);
	values[ENQ_ARG_RUN_AT] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	nulls[ENQ_ARG_RUN_AT] = PG_ARGISNULL(3) ? 'n' : ' ';
	values[ENQ_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	enq_traceparent(fcinfo, 6, &values[ENQ_ARG_TRACEPARENT], &nulls[ENQ_ARG_TRACEPARENT]);
	values[ENQ_ARG_POLICY] = PointerGetDatum(&policy);

	SPI_connect();
	/* the shard: of the partition key, or of the task key without one */
	values[ENQ_ARG_SHARD] = Int16GetDatum(NtaskShardFor(queue, PG_ARGISNULL(4) ? key :
														PG_GETARG_TEXT_PP(4)));
	/* on a Citus coordinator, its _on form delegated (coord.c: its rows) */
	if (NtaskCoordDelegate(fcinfo, DatumGetInt16(values[ENQ_ARG_SHARD]),
						   has_deps ? "the enqueue has parents (depends_on)" : NULL, 6,
						   &out[0]))
	{
		SPI_finish();
		return (Datum) 0;
	}
	InitMaterializedSRF(fcinfo, 0);

	/*
	 * On a Citus install, the direct path (docs/scaling.md "The enqueue and
	 * the release on the direct path") when the shard is this node's: the
	 * insert, the lookup and the queue's read on the shard relations.  With
	 * parents it runs routed: it reads them and writes ntask.task_dep, which
	 * the direct path does not name.
	 */
	(void) NtaskDirectBeginShard(fcinfo, DatumGetInt16(values[ENQ_ARG_SHARD]),
								 has_deps ? "the enqueue has parents (depends_on)" : NULL);
	if (has_deps)
	{
		NtaskCheckQueueRight(queue, true);
		deps.shard = DatumGetInt16(values[ENQ_ARG_SHARD]);
		NtaskDepsResolve(&deps, queue, &key, 1);
	}

	/*
	 * Insert, else read the existing row.  The loop only repeats if a task
	 * with this key vanished between the two statements (retention pruning of
	 * a finished task), which at most happens once.
	 */
	for (tries = 0;; tries++)
	{
		if (NtaskExecPair(&enq_insert, values, nulls) == 1)
		{
			tt = SPI_tuptable;
			out[ENQ_OUT_TASK_ID] = Int64GetDatum(NtaskTupGetInt64(tt, 0, ENQ_INSERT_TASK_ID));
			out[ENQ_OUT_CREATED] = BoolGetDatum(true);
			out[ENQ_OUT_STATE] = PointerGetDatum(NtaskTupGetText(tt, 0, ENQ_INSERT_STATE));
			flags = NtaskTupGetInt32(tt, 0, ENQ_INSERT_FLAGS);
			/* with parents that have not all succeeded: waiting, not due */
			if (has_deps)
				NtaskDepsAttach(&deps, &out[ENQ_OUT_TASK_ID], 1, &out[ENQ_OUT_STATE]);
			if (has_deps && strcmp(TextDatumGetCString(out[ENQ_OUT_STATE]), "ready") != 0)
				break;
			if (flags & ENQ_HTTP)
				NtaskWakeWorkerAtCommit();	/* an http task */
			if (flags & ENQ_NOTIFY)
				enq_notify(queue);
			enq_wake_waiters(queue, 1, values[ENQ_ARG_RUN_AT],
							 nulls[ENQ_ARG_RUN_AT] == 'n');
			break;
		}
		/* nothing inserted: no queue, no right, or the key exists */
		NtaskCheckQueueRight(queue, true);
		if (NtaskExecPair(&enq_existing_plan, values, nulls) == 1)
		{
			bool		isnull;

			tt = SPI_tuptable;
			if (!NtaskSameDigest(payload, digest,
								 DatumGetByteaPP(NtaskTupGetDatum(tt, 0, ENQ_EXISTING_DIGEST, &isnull)),
								 NtaskTupGetInt32(tt, 0, ENQ_EXISTING_DIGEST_VERSION)))
				ereport(ERROR,
						(errcode(ERRCODE_NTASK_KEY_CONFLICT),
						 errmsg("ntask: task key \"%s\" already exists in queue \"%s\" with a different payload",
								text_to_cstring(key), text_to_cstring(queue)),
						 errdetail("A task key names one logical piece of work; its payload cannot change."),
						 errhint("Use a new key for a new business version (for example a :v2 suffix).")));
			out[ENQ_OUT_TASK_ID] = Int64GetDatum(NtaskTupGetInt64(tt, 0, ENQ_EXISTING_TASK_ID));
			out[ENQ_OUT_CREATED] = BoolGetDatum(false);
			out[ENQ_OUT_STATE] = PointerGetDatum(NtaskTupGetText(tt, 0, ENQ_EXISTING_STATE));
			/* the replay of a retried request: what the first run stored */
			out[ENQ_OUT_OUTCOME] = NtaskTupGetDatum(tt, 0, ENQ_EXISTING_OUTCOME, &outnulls[ENQ_OUT_OUTCOME]);
			out[ENQ_OUT_RESULT] = NtaskTupGetDatum(tt, 0, ENQ_EXISTING_RESULT, &outnulls[ENQ_OUT_RESULT]);
			break;
		}
		if (tries > 0)
			elog(ERROR, "ntask: enqueue of \"%s\" found neither a new nor an existing task",
				 text_to_cstring(key));
	}

	enq_put(rsinfo, out, outnulls);
	NtaskDirectEnd();
	SPI_finish();
	return (Datum) 0;
}

/*
 * The insert of ntask_enqueue_many: enq_insert's plain statement over
 * arrays, one row per distinct key, in the order of each key's first
 * appearance (so task ids follow the input).  $2 keys, $3 payloads, $4
 * digests, $6 partition keys (NULL: none); the other parameters as in
 * enq_insert.
 */
#define ENQ_MANY_INSERT \
	"INSERT INTO ntask.task AS t (task_id, shard, queue, task_key, payload, " \
	"  payload_digest, digest_version, partition_key, priority, run_at, due_at, " \
	"  max_attempts, deadline, ordered, traceparent) " \
	"OVERRIDING SYSTEM VALUE " \
	"SELECT " ENQ_TASK_ID("i.s") ", i.s, q.queue, i.k, i.p, i.d, $5, " ENQ_PARTITION("i.pk") ", $7, " \
	"  coalesce($8, pg_catalog.statement_timestamp()), coalesce($8, pg_catalog.statement_timestamp()), " \
	"  q.max_attempts, " \
	"  GREATEST(pg_catalog.statement_timestamp(), $8) OPERATOR(pg_catalog.+) q.total_deadline, " \
	"  " ENQ_ORDERED ", $11 " \
	"FROM ntask.queue q, " \
	"  ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), " \
	"             pg_catalog.unnest($4), pg_catalog.unnest($6), pg_catalog.unnest($10)) " \
	"    WITH ORDINALITY AS i(k, p, d, pk, s, n) " \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND (q.producer_role IS NULL " \
	"       OR pg_catalog.pg_has_role($9, q.producer_role, 'USAGE')) " \
	"  AND " ENQ_KEY_IS_NEW("i.k") " " \
	"ORDER BY i.n " \
	"ON CONFLICT ON CONSTRAINT task_queue_task_key_key DO NOTHING "

/* the columns of enq_many_pair: one row per key it inserted */
typedef enum EnqManyInsertCol
{
	ENQ_MANY_INSERT_KEY = 1,
	ENQ_MANY_INSERT_TASK_ID,
	ENQ_MANY_INSERT_STATE,
	ENQ_MANY_INSERT_FLAGS,		/* ENQ_QUEUE_FLAGS */
	ENQ_MANY_INSERT_NCOLS = ENQ_MANY_INSERT_FLAGS
} EnqManyInsertCol;

/*
 * On a distributed install Citus inserts nothing from an INSERT ... SELECT
 * joining the queue with the unnested arrays (found with 12.1.6: it
 * returns INSERT 0 0), so the routed variant's before step
 * (enq_many_by_key) enqueues each key by one routed enq_insert and leaves
 * what it inserted in its own parameters, which its statement returns as
 * the plain one's rows (a local statement, no table read).
 */
typedef enum EnqManyArg
{
	ENQ_MANY_ARG_KEYS = ENQ_NARGS,	/* $12, the keys inserted */
	ENQ_MANY_ARG_TASK_IDS,		/* $13, their task ids */
	ENQ_MANY_ARG_STATES,		/* $14, their states */
	ENQ_MANY_ARG_FLAGS,			/* $15, the queue's ENQ_QUEUE_FLAGS */
	ENQ_MANY_NARGS
} EnqManyArg;

static bool enq_many_by_key(Datum *values, char *nulls);

static NtaskPair enq_many_pair = NTASK_PAIR("enqueue many insert",
											NTASK_PLAIN(ENQ_MANY_INSERT_NCOLS,
														ENQ_MANY_INSERT
														"RETURNING t.task_key, t.task_id, t.state, " ENQ_QUEUE_FLAGS,
														ENQ_NARGS, SPI_OK_INSERT_RETURNING),
											NTASK_ROUTED(ENQ_MANY_INSERT_NCOLS,
														 "SELECT i.k, i.id, i.st, $15 "
														 "FROM ROWS FROM (pg_catalog.unnest($12), pg_catalog.unnest($13), "
														 "  pg_catalog.unnest($14)) WITH ORDINALITY AS i(k, id, st, n) "
														 "ORDER BY i.n",
														 ENQ_MANY_NARGS, SPI_OK_SELECT,
														 enq_many_by_key, NULL),
											TEXTOID, TEXTARRAYOID, JSONBARRAYOID, BYTEAARRAYOID, INT2OID,
											TEXTARRAYOID, INT4OID, TIMESTAMPTZOID, OIDOID, INT2ARRAYOID, TEXTOID,
											TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4OID);

/*
 * enq_many_by_key
 *		enq_many_pair's routed before step: each key of the arrays in
 *		values (enq_many_pair's plain parameters) by one enq_insert,
 *		under one policy read; false when none was inserted.
 */
static bool
enq_many_by_key(Datum *values, char *nulls)
{
	Datum		sv[ENQ_PAIR_NARGS];
	char		sn[ENQ_PAIR_NARGS];
	Datum	   *keys;
	Datum	   *payloads;
	Datum	   *digests;
	Datum	   *pks;
	bool	   *pknulls;
	Datum	   *shards;
	Datum	   *ids;
	Datum	   *states;
	int			n;
	int			inserted = 0;
	int32		flags = 0;
	int			i;
	EnqPolicy	policy = {0};

	deconstruct_array(DatumGetArrayTypeP(values[ENQ_ARG_KEY]), TEXTOID, -1, false,
					  TYPALIGN_INT, &keys, NULL, &n);
	deconstruct_array(DatumGetArrayTypeP(values[ENQ_ARG_PAYLOAD]), JSONBOID, -1, false,
					  TYPALIGN_INT, &payloads, NULL, &i);
	deconstruct_array(DatumGetArrayTypeP(values[ENQ_ARG_DIGEST]), BYTEAOID, -1, false,
					  TYPALIGN_INT, &digests, NULL, &i);
	deconstruct_array(DatumGetArrayTypeP(values[ENQ_ARG_PARTITION_KEY]), TEXTOID, -1, false,
					  TYPALIGN_INT, &pks, &pknulls, &i);
	deconstruct_array(DatumGetArrayTypeP(values[ENQ_ARG_SHARD]), INT2OID, sizeof(int16), true,
					  TYPALIGN_SHORT, &shards, NULL, &i);
	ids = palloc(sizeof(Datum) * Max(n, 1));
	states = palloc(sizeof(Datum) * Max(n, 1));
	memcpy(sv, values, sizeof(Datum) * ENQ_NARGS);
	memcpy(sn, nulls, ENQ_NARGS);
	sv[ENQ_ARG_POLICY] = PointerGetDatum(&policy);
	for (i = 0; i < n; i++)
	{
		SPITupleTable *tt;

		sv[ENQ_ARG_KEY] = keys[i];
		sv[ENQ_ARG_PAYLOAD] = payloads[i];
		sv[ENQ_ARG_DIGEST] = digests[i];
		sv[ENQ_ARG_PARTITION_KEY] = pks[i];
		sn[ENQ_ARG_PARTITION_KEY] = pknulls[i] ? 'n' : ' ';
		sv[ENQ_ARG_SHARD] = shards[i];
		if (NtaskExecPair(&enq_insert, sv, sn) != 1)
			continue;
		tt = SPI_tuptable;
		keys[inserted] = keys[i];
		ids[inserted] = Int64GetDatum(NtaskTupGetInt64(tt, 0, ENQ_INSERT_TASK_ID));
		states[inserted++] = PointerGetDatum(NtaskTupGetText(tt, 0, ENQ_INSERT_STATE));
		flags = NtaskTupGetInt32(tt, 0, ENQ_INSERT_FLAGS);
	}
	values[ENQ_MANY_ARG_KEYS] = PointerGetDatum(construct_array(keys, inserted, TEXTOID, -1, false,
																TYPALIGN_INT));
	values[ENQ_MANY_ARG_TASK_IDS] = NtaskInt8Array(ids, inserted);
	values[ENQ_MANY_ARG_STATES] = PointerGetDatum(construct_array(states, inserted, TEXTOID, -1,
																  false, TYPALIGN_INT));
	values[ENQ_MANY_ARG_FLAGS] = Int32GetDatum(flags);
	memset(&nulls[ENQ_NARGS], ' ', ENQ_MANY_NARGS - ENQ_NARGS);
	return inserted > 0;
}

/* the columns of enq_many_existing_plan (its parameters: EnqArg's first two) */
typedef enum EnqManyExistingCol
{
	ENQ_MANY_EXISTING_KEY = 1,
	ENQ_MANY_EXISTING_TASK_ID,
	ENQ_MANY_EXISTING_STATE,
	ENQ_MANY_EXISTING_DIGEST,
	ENQ_MANY_EXISTING_DIGEST_VERSION,
	ENQ_MANY_EXISTING_OUTCOME,
	ENQ_MANY_EXISTING_RESULT,
	ENQ_MANY_EXISTING_NCOLS = ENQ_MANY_EXISTING_RESULT
} EnqManyExistingCol;

/* a pair, so that it runs on the direct path too (the keys of one shard there) */
static NtaskPair enq_many_existing_plan = NTASK_PAIR("enqueue many lookup",
													 NTASK_PLAIN(ENQ_MANY_EXISTING_NCOLS,
																 "SELECT t.task_key, t.task_id, t.state, t.payload_digest, t.digest_version, "
																 "  t.outcome, t.result "
																 "FROM ntask.task t "
																 "WHERE t.queue OPERATOR(pg_catalog.=) $1 "
																 "  AND t.task_key OPERATOR(pg_catalog.=) ANY ($2)",
																 ENQ_ARG_KEY + 1, SPI_OK_SELECT),
													 NTASK_ROUTED_LIKE_PLAIN,
													 TEXTOID, TEXTARRAYOID);

/* one distinct key of an ntask_enqueue_many call */
typedef struct EnqKey
{
	text	   *key;
	Jsonb	   *payload;		/* of its first appearance */
	bytea	   *digest;
	Datum		partition_key;
	bool		partition_null;
	int			first;			/* position of its first appearance */
	int16		shard;			/* ntask_shard(queue, partition or task key) */
	bool		resolved;		/* task_id and state are set */
	bool		created;
	int64		task_id;
	Datum		state;			/* text, in an SPI result */
	Datum		outcome;		/* an existing task's, in an SPI result */
	bool		outcome_null;
	Datum		result;
	bool		result_null;
} EnqKey;

/* one element of the call: its key's EnqKey */
typedef struct EnqItem
{
	int			pos;
	text	   *key;
	EnqKey	   *group;
} EnqItem;

/* enq_text_cmp: byte order of two keys */
static int
enq_text_cmp(text *a, text *b)
{
	int			la = VARSIZE_ANY_EXHDR(a);
	int			lb = VARSIZE_ANY_EXHDR(b);
	int			c = memcmp(VARDATA_ANY(a), VARDATA_ANY(b), Min(la, lb));

	if (c != 0)
		return c;
	return la < lb ? -1 : la > lb ? 1 : 0;
}

/* enq_item_cmp: qsort order of EnqItems, by key, then position */
static int
enq_item_cmp(const void *a, const void *b)
{
	const EnqItem *x = (const EnqItem *) a;
	const EnqItem *y = (const EnqItem *) b;
	int			c = enq_text_cmp(x->key, y->key);

	if (c != 0)
		return c;
	return x->pos < y->pos ? -1 : x->pos > y->pos ? 1 : 0;
}

/* enq_first_cmp: qsort order of EnqKey pointers, by first appearance */
static int
enq_first_cmp(const void *a, const void *b)
{
	int			x = (*(EnqKey *const *) a)->first;
	int			y = (*(EnqKey *const *) b)->first;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* enq_find: the EnqKey of key among the n keys of bykey (sorted by key) */
static EnqKey *
enq_find(EnqKey *bykey, int n, text *key)
{
	int			lo = 0;
	int			hi = n;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			c = enq_text_cmp(bykey[mid].key, key);

		if (c == 0)
			return &bykey[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* enq_conflict: raise NT001 for key */
static void
enq_conflict(text *key, text *queue, bool in_call)
{
	ereport(ERROR,
			(errcode(ERRCODE_NTASK_KEY_CONFLICT),
			 errmsg("ntask: task key \"%s\" already exists in queue \"%s\" with a different payload",
					text_to_cstring(key), text_to_cstring(queue)),
			 in_call ?
			 errdetail("The key appears twice in this call with different payloads.") :
			 errdetail("A task key names one logical piece of work; its payload cannot change."),
			 errhint("Use a new key for a new business version (for example a :v2 suffix).")));
}

/*
 * enq_many_signal
 *		After a batch inserted n tasks (flags: ENQ_QUEUE_FLAGS of the queue):
 *		wake the worker for an http queue, NOTIFY for a notify queue, and
 *		the waiting claims.
 */
static void
enq_many_signal(text *queue, int n, int flags, Datum run_at, bool run_at_null)
{
	if (n > 0 && (flags & ENQ_HTTP))
		NtaskWakeWorkerAtCommit();	/* http tasks */
	if (n > 0 && (flags & ENQ_NOTIFY))
		enq_notify(queue);
	enq_wake_waiters(queue, n, run_at, run_at_null);
}

/*
 * enq_many_read_existing
 *		Some keys of a batch were not inserted: no queue (42704), no right
 *		(42501), or they exist.  Reads the existing tasks of the batch's
 *		keys (args as enq_many_existing_plan takes them) and resolves each
 *		unresolved key to its task.  A key whose task has another payload
 *		is left in *conflict when it appears in the call before the one
 *		there (NT001 is raised for it by enq_many_insert, after every
 *		group's statements: the same element's whichever group, or order of
 *		rows, it comes in, as ntask_enqueue called in input order would
 *		raise it).  Returns how many keys it resolved.
 */
static int
enq_many_read_existing(text *queue, EnqKey *bykey, int nkeys, Datum *args,
					   EnqKey **conflict)
{
	int			nrows;
	SPITupleTable *tt;
	int			resolved = 0;
	int			r;

	NtaskCheckQueueRight(queue, true);
	nrows = NtaskExecPair(&enq_many_existing_plan, args, NULL);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		EnqKey	   *k = enq_find(bykey, nkeys, NtaskTupGetText(tt, r, ENQ_MANY_EXISTING_KEY));
		bool		isnull;

		if (k == NULL || k->resolved)
			continue;			/* inserted just now */
		k->resolved = true;
		if (!NtaskSameDigest(k->payload, k->digest,
							 DatumGetByteaPP(NtaskTupGetDatum(tt, r, ENQ_MANY_EXISTING_DIGEST, &isnull)),
							 NtaskTupGetInt32(tt, r, ENQ_MANY_EXISTING_DIGEST_VERSION)))
		{
			if (*conflict == NULL || k->first < (*conflict)->first)
				*conflict = k;
			continue;
		}
		k->task_id = NtaskTupGetInt64(tt, r, ENQ_MANY_EXISTING_TASK_ID);
		k->state = PointerGetDatum(NtaskTupGetText(tt, r, ENQ_MANY_EXISTING_STATE));
		k->outcome = NtaskTupGetDatum(tt, r, ENQ_MANY_EXISTING_OUTCOME, &k->outcome_null);
		k->result = NtaskTupGetDatum(tt, r, ENQ_MANY_EXISTING_RESULT, &k->result_null);
		resolved++;
	}
	return resolved;
}

/*
 * enq_many_round
 *		Insert the keys of pending (in first-appearance order) that are not
 *		resolved yet and are of shard value shard (-1: of any), then read
 *		the existing tasks of those the insert skipped and compare their
 *		payloads (*conflict: enq_many_read_existing).  Returns how many
 *		stay unresolved (a task that vanished between the two statements).
 */
static int
enq_many_round(text *queue, EnqKey *bykey, int nkeys, EnqKey **pending,
			   int npending, int shard, Datum *args, char *argnulls,
			   EnqKey **conflict)
{
	Datum	   *keys = palloc(sizeof(Datum) * npending);
	Datum	   *payloads = palloc(sizeof(Datum) * npending);
	Datum	   *digests = palloc(sizeof(Datum) * npending);
	Datum	   *pks = palloc(sizeof(Datum) * npending);
	bool	   *pknulls = palloc(sizeof(bool) * npending);
	Datum	   *shards = palloc(sizeof(Datum) * npending);
	int			dims[1];
	int			lbs[1] = {1};
	int			n = 0;
	int			nrows;
	SPITupleTable *tt;
	int			r;
	int			i;

	for (i = 0; i < npending; i++)
	{
		if (pending[i]->resolved || (shard >= 0 && pending[i]->shard != shard))
			continue;
		keys[n] = PointerGetDatum(pending[i]->key);
		payloads[n] = JsonbPGetDatum(pending[i]->payload);
		digests[n] = PointerGetDatum(pending[i]->digest);
		pks[n] = pending[i]->partition_key;
		pknulls[n] = pending[i]->partition_null;
		shards[n] = Int16GetDatum(pending[i]->shard);
		n++;
	}
	if (n == 0)
		return 0;
	dims[0] = n;
	args[ENQ_ARG_KEY] = PointerGetDatum(construct_array(keys, n, TEXTOID, -1, false, TYPALIGN_INT));
	args[ENQ_ARG_PAYLOAD] = PointerGetDatum(construct_array(payloads, n, JSONBOID, -1, false, TYPALIGN_INT));
	args[ENQ_ARG_DIGEST] = PointerGetDatum(construct_array(digests, n, BYTEAOID, -1, false, TYPALIGN_INT));
	args[ENQ_ARG_PARTITION_KEY] = PointerGetDatum(construct_md_array(pks, pknulls, 1, dims, lbs,
																	 TEXTOID, -1, false, TYPALIGN_INT));

	args[ENQ_ARG_SHARD] = PointerGetDatum(construct_array(shards, n, INT2OID, sizeof(int16), true,
														  TYPALIGN_SHORT));
	nrows = NtaskExecPair(&enq_many_pair, args, argnulls);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		EnqKey	   *k = enq_find(bykey, nkeys, NtaskTupGetText(tt, r, ENQ_MANY_INSERT_KEY));

		if (k == NULL || k->resolved)
			elog(ERROR, "ntask: enqueue inserted a key it was not asked for");
		k->resolved = k->created = true;
		k->task_id = NtaskTupGetInt64(tt, r, ENQ_MANY_INSERT_TASK_ID);
		k->state = PointerGetDatum(NtaskTupGetText(tt, r, ENQ_MANY_INSERT_STATE));
		k->outcome_null = k->result_null = true;
	}
	enq_many_signal(queue, nrows, nrows > 0 ? NtaskTupGetInt32(tt, 0, ENQ_MANY_INSERT_FLAGS) : 0,
					args[ENQ_ARG_RUN_AT], argnulls[ENQ_ARG_RUN_AT] == 'n');
	if (nrows == n)
		return 0;

	/* some keys were not inserted: no queue, no right, or they exist */
	(void) enq_many_read_existing(queue, bykey, nkeys, args, conflict);
	n = 0;
	for (i = 0; i < npending; i++)
		n += pending[i]->resolved || (shard >= 0 && pending[i]->shard != shard) ? 0 : 1;
	return n;
}

/* one call of ntask_enqueue_many */
typedef struct EnqMany
{
	text	   *queue;
	int			n;				/* elements */
	Datum	   *keyd;			/* task_keys */
	Datum	   *payd;			/* payloads */
	Datum	   *pkd;			/* partition_keys, NULL: none given */
	bool	   *pknull;
	EnqItem    *items;			/* the elements, by key, then position */
	int			nkeys;
	EnqKey	   *bykey;			/* the distinct keys, by key */
	EnqKey	  **byfirst;		/* the same, by first appearance */
	Datum		args[ENQ_MANY_NARGS];	/* enq_many_pair's */
	char		argnulls[ENQ_MANY_NARGS];
	NtaskDeps	deps;
	bool		has_deps;
	int16	   *groups;			/* on the direct path: its shard values */
	int			ngroups;		/* 0: one pass over every key */
} EnqMany;

/*
 * enq_many_check_args
 *		The arrays (of one length), priority, run_at and the parents.
 */
static void
enq_many_check_args(FunctionCallInfo fcinfo, EnqMany *m)
{
	NtaskCheckNargs(fcinfo, 9);	/* before its new arguments are read */
	m->n = NtaskArgArray(fcinfo, 1, "task_keys", TEXTOID, false, &m->keyd, NULL);
	if (NtaskArgArray(fcinfo, 2, "payloads", JSONBOID, false, &m->payd, NULL) != m->n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: task_keys and payloads must have the same length")));
	if (!PG_ARGISNULL(4) &&
		NtaskArgArray(fcinfo, 4, "partition_keys", TEXTOID, true, &m->pkd, &m->pknull) != m->n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: partition_keys must be NULL or as long as task_keys")));
	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: priority must not be NULL")));
	if (!PG_ARGISNULL(3) && TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(3)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: run_at must be a finite timestamp")));
	m->has_deps = NtaskDepsArgs(fcinfo, 6, &m->deps);
}

/*
 * enq_many_check_items
 *		Every element's key and partition key, in input order.
 */
static void
enq_many_check_items(EnqMany *m)
{
	int			i;

	m->items = palloc(sizeof(EnqItem) * Max(m->n, 1));
	for (i = 0; i < m->n; i++)
	{
		EnqItem    *it = &m->items[i];
		int			len;

		it->pos = i;
		it->key = DatumGetTextPP(m->keyd[i]);
		len = VARSIZE_ANY_EXHDR(it->key);
		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: task_keys[%d] must not be empty", i + 1)));
		if (len > NTASK_MAX_KEY_LEN)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("ntask: task_keys[%d] is too long", i + 1),
					 errdetail("It is %d bytes; the limit is %d.", len, NTASK_MAX_KEY_LEN)));
		if (m->pkd && !m->pknull[i] &&
			VARSIZE_ANY_EXHDR(DatumGetTextPP(m->pkd[i])) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: partition_keys[%d] must not be empty", i + 1),
					 errhint("Use NULL for no partition key.")));
		if (m->pkd && !m->pknull[i] &&
			VARSIZE_ANY_EXHDR(DatumGetTextPP(m->pkd[i])) > NTASK_MAX_KEY_LEN)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("ntask: partition_keys[%d] is too long", i + 1),
					 errdetail("The limit is %d bytes.", NTASK_MAX_KEY_LEN)));
	}
}

/*
 * enq_many_group
 *		Equal keys grouped (by key, then position): each distinct key's
 *		payload (of its first appearance) checked and digested, a repeat
 *		with another payload NT001; the keys also in order of first
 *		appearance.
 */
static void
enq_many_group(EnqMany *m)
{
	int			i;

	qsort(m->items, m->n, sizeof(EnqItem), enq_item_cmp);
	m->bykey = palloc(sizeof(EnqKey) * Max(m->n, 1));
	for (i = 0; i < m->n; i++)
	{
		EnqItem    *it = &m->items[i];
		Jsonb	   *payload = DatumGetJsonbP(m->payd[it->pos]);
		bytea	   *digest;
		EnqKey	   *k;

		NtaskCheckPayload(payload, "payloads", it->pos + 1, NULL);
		digest = NtaskDigest(payload, NTASK_DIGEST_VERSION);

		if (i > 0 && enq_text_cmp(it->key, m->items[i - 1].key) == 0)
		{
			k = m->items[i - 1].group;
			if (!NtaskSameDigest(payload, digest, k->digest, NTASK_DIGEST_VERSION))
				enq_conflict(it->key, m->queue, true);
			it->group = k;
			continue;
		}
		k = it->group = &m->bykey[m->nkeys++];
		memset(k, 0, sizeof(EnqKey));
		k->key = it->key;
		k->payload = payload;
		k->digest = digest;
		k->first = it->pos;
		k->partition_null = m->pkd == NULL || m->pknull[it->pos];
		k->partition_key = k->partition_null ? (Datum) 0 : m->pkd[it->pos];
	}
	m->byfirst = palloc(sizeof(EnqKey *) * Max(m->nkeys, 1));
	for (i = 0; i < m->nkeys; i++)
		m->byfirst[i] = &m->bykey[i];
	qsort(m->byfirst, m->nkeys, sizeof(EnqKey *), enq_first_cmp);
}

/*
 * enq_many_params
 *		The parameters all rounds share; the parents resolved (which needs
 *		the producer right).  In SPI.
 */
static void
enq_many_params(FunctionCallInfo fcinfo, EnqMany *m)
{
	memset(m->argnulls, ' ', sizeof(m->argnulls));
	m->args[ENQ_ARG_QUEUE] = PointerGetDatum(m->queue);
	m->args[ENQ_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);
	m->args[ENQ_ARG_PRIORITY] = PG_GETARG_DATUM(5);
	m->args[ENQ_ARG_RUN_AT] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	m->argnulls[ENQ_ARG_RUN_AT] = PG_ARGISNULL(3) ? 'n' : ' ';
	m->args[ENQ_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	enq_traceparent(fcinfo, 6, &m->args[ENQ_ARG_TRACEPARENT],
					&m->argnulls[ENQ_ARG_TRACEPARENT]);
	if (m->has_deps)
	{
		text	  **keys = palloc(sizeof(text *) * Max(m->nkeys, 1));
		int			i;

		for (i = 0; i < m->nkeys; i++)
			keys[i] = m->bykey[i].key;
		NtaskCheckQueueRight(m->queue, true);
		/* the first key's shard: a distributed install needs one for all */
		m->deps.shard = m->nkeys == 0 ? 0 :
			NtaskShardFor(m->queue, m->bykey[0].partition_null ? m->bykey[0].key :
						  DatumGetTextPP(m->bykey[0].partition_key));
		NtaskDepsResolve(&m->deps, m->queue, keys, m->nkeys);
	}
}

/*
 * enq_many_path
 *		Each key's shard value (of the partition key, or of the task key
 *		without one), then the call's path (docs/scaling.md "The enqueue and
 *		the release on the direct path", "`ntask_enqueue_many` over several
 *		shard values"): direct when every key is of a shard value of this
 *		node (several: their groups entered together, m->groups) and the
 *		call names no parents; else routed.  On a coordinator, delegated
 *		when every key is of one shard value.  In SPI, before the call's
 *		first statement of the task tables.
 */
static bool
enq_many_path(FunctionCallInfo fcinfo, EnqMany *m)
{
	int16	   *shards;
	int			ns;
	bool		several = false;
	const char *unless = NULL;
	int			i;
	Datum		d;

	for (i = 0; i < m->nkeys; i++)
		m->bykey[i].shard = NtaskShardFor(m->queue, m->bykey[i].partition_null ? m->bykey[i].key :
										  DatumGetTextPP(m->bykey[i].partition_key));
	if (m->nkeys == 0 || NtaskShardCount() == 0)
		return false;
	shards = palloc(sizeof(int16) * m->nkeys);
	for (i = 0; i < m->nkeys; i++)
	{
		shards[i] = m->bykey[i].shard;
		several |= shards[i] != shards[0];
	}
	if (m->has_deps)
		unless = "the enqueue has parents (depends_on)";
	/*
	 * On a Citus coordinator, its _on form delegated (coord.c): one shard
	 * value only, since one delegated call per value would not be atomic
	 */
	if (NtaskCoordDelegate(fcinfo, shards[0], unless != NULL ? unless :
						   several ? "keys of several shards" : NULL, 6, &d))
		return true;
	ns = m->nkeys;
	if (NtaskDirectBeginShards(fcinfo, shards, &ns, unless) == NTASK_PATH_DIRECT)
	{
		m->groups = shards;
		m->ngroups = ns;
	}
	return false;
}

/*
 * enq_many_insert
 *		Insert the new keys and read the existing ones, in rounds.  A
 *		second round only runs if a task with one of the keys vanished
 *		between the insert and the lookup (retention pruning of a finished
 *		task), which at most happens once.  In SPI.
 */
static void
enq_many_insert(EnqMany *m)
{
	EnqKey	   *conflict = NULL;
	int			g;

	/* on the direct path, each group's keys on its relations, in turn */
	for (g = 0; g < Max(m->ngroups, 1); g++)
	{
		int			shard = m->ngroups > 0 ? m->groups[g] : -1;
		int			npending = 1;
		int			round;

		if (shard >= 0)
			NtaskDirectUseShard((int16) shard);
		for (round = 0; npending > 0; round++)
		{
			if (round == 2)
				elog(ERROR, "ntask: enqueue found neither a new nor an existing task for %d keys",
					 npending);
			npending = enq_many_round(m->queue, m->bykey, m->nkeys, m->byfirst,
									  m->nkeys, shard, m->args, m->argnulls, &conflict);
		}
	}
	if (conflict != NULL)
		enq_conflict(conflict->key, m->queue, false);
}

/*
 * enq_many_attach
 *		Every task the call created depends on the parents (its state
 *		becomes waiting until they have all succeeded).  In SPI.
 */
static void
enq_many_attach(EnqMany *m)
{
	Datum	   *ids = palloc(sizeof(Datum) * Max(m->nkeys, 1));
	Datum	   *states = palloc(sizeof(Datum) * Max(m->nkeys, 1));
	EnqKey	  **made = palloc(sizeof(EnqKey *) * Max(m->nkeys, 1));
	int			n = 0;
	int			i;

	for (i = 0; i < m->nkeys; i++)
		if (m->byfirst[i]->created)
		{
			made[n] = m->byfirst[i];
			ids[n] = Int64GetDatum(m->byfirst[i]->task_id);
			states[n] = m->byfirst[i]->state;
			n++;
		}
	NtaskDepsAttach(&m->deps, ids, n, states);
	for (i = 0; i < n; i++)
		made[i]->state = states[i];
}

/*
 * enq_many_emit
 *		One result row per element, in input order (EnqOutCol).
 */
static void
enq_many_emit(ReturnSetInfo *rsinfo, EnqMany *m)
{
	EnqItem   **bypos = palloc(sizeof(EnqItem *) * Max(m->n, 1));
	int			i;

	for (i = 0; i < m->n; i++)
		bypos[m->items[i].pos] = &m->items[i];
	for (i = 0; i < m->n; i++)
	{
		EnqKey	   *k = bypos[i]->group;
		Datum		out[ENQ_OUT_NCOLS];
		bool		outnulls[ENQ_OUT_NCOLS] = ENQ_OUT_NULLS;

		out[ENQ_OUT_TASK_ID] = Int64GetDatum(k->task_id);
		out[ENQ_OUT_CREATED] = BoolGetDatum(k->created && k->first == i);
		out[ENQ_OUT_STATE] = k->state;
		if (!k->created)
		{
			out[ENQ_OUT_OUTCOME] = k->outcome;
			outnulls[ENQ_OUT_OUTCOME] = k->outcome_null;
			out[ENQ_OUT_RESULT] = k->result;
			outnulls[ENQ_OUT_RESULT] = k->result_null;
		}
		enq_put(rsinfo, out, outnulls);
	}
}

/*
 * ntask_enqueue_many(queue, task_keys, payloads, run_at, partition_keys,
 *					  priority)
 *		RETURNS TABLE(task_id bigint, created boolean, state text,
 *					  outcome text, result jsonb)
 *
 * ntask_enqueue for each (task_keys[i], payloads[i], partition_keys[i])
 * with the same queue, run_at and priority, in one call: one row per
 * element, in input order, as ntask_enqueue would answer it called in
 * that order.  So a key repeated inside the call with an equal payload
 * gives the same task twice (created only for its first appearance); with
 * a different payload it raises NT001, as does a key that exists with a
 * different payload (of several, the first in input order).  New tasks get
 * ids in input order (on Citus, within each shard value).
 *
 * Errors: NULL queue, array or element (partition_keys may be NULL, or
 * hold NULLs) 22004; arrays of different lengths, more than one
 * dimension, more than NTASK_MAX_BATCH elements, an empty key 22023; a
 * key over 512 bytes 22001; and the errors of ntask_enqueue, which fail
 * the whole call.
 */
Datum
ntask_enqueue_many(PG_FUNCTION_ARGS)
{
	EnqMany		m = {0};

	m.queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	enq_many_check_args(fcinfo, &m);
	enq_many_check_items(&m);
	enq_many_group(&m);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	if (enq_many_path(fcinfo, &m))
	{
		SPI_finish();
		return (Datum) 0;
	}
	enq_many_params(fcinfo, &m);
	enq_many_insert(&m);
	if (m.has_deps)
		enq_many_attach(&m);
	enq_many_emit((ReturnSetInfo *) fcinfo->resultinfo, &m);
	NtaskDirectEnd();
	SPI_finish();
	return (Datum) 0;
}
