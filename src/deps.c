/*-------------------------------------------------------------------------
 *
 * deps.c
 *	  Task dependencies (docs/design.md "Operator controls and
 *	  workflows"): the parents an enqueue names (depends_on), the child's
 *	  wait for them (state waiting), and what a parent's end does to its
 *	  children (trigger ntask.task_deps_changed).
 *
 * Enqueue: the parents are resolved (a key of the child's queue, else
 * queue:key split at the first colon), the producer right on each
 * parent's queue is checked, then, for a child the call created, the
 * dependency rows are written and the child moved to waiting with the
 * number of parents that have not succeeded as read then (0: it stays
 * ready).  The parents are not locked then: a producer's (outbox)
 * transaction may stay open long, and the parent's holder must not wait
 * for it.  At the producer's commit a deferred constraint trigger on
 * ntask.task_dep (ntask_task_dep_settle) settles every child the
 * transaction attached: it locks their parents in task_id order (FOR NO
 * KEY UPDATE, and has_children set), reads their states again and makes
 * each child ready, keeps it waiting, cancels it or sends it to repair,
 * as a parent's end would have.  The lock orders the settle against a
 * parent's transition: the transition either committed before (the settle
 * reads its end) or waits for the producer's commit, which is short, and
 * then sees the dependency rows.  Parents must exist when the child is
 * enqueued, so no cycle can be built.
 *
 * A parent's end (any statement that changes the state of a task with
 * has_children: the transitions, the HTTP dispatcher, cancel, replay,
 * housekeeping, the claim's budget check) runs the trigger in the same
 * transaction.  It locks the parent's waiting children in task_id order
 * after the parent's own row, so two parents of one child serialize on
 * the child's row and exactly one of them counts it down to 0:
 *
 *	parent succeeded				-> parents_left - 1; at 0 the child is
 *									   ready (due at max(run_at, now), its
 *									   deadline starts now)
 *	repair_required, canceled, skipped
 *									-> children whose policy (their own, else
 *									   their queue's on_parent_failed) is
 *									   cancel are canceled, reason
 *									   parent_failed, audited
 *	repair_required					-> the others wait (a replayed parent
 *									   that succeeds releases them)
 *	canceled, skipped				-> the others go to repair_required,
 *									   reason parent_canceled or
 *									   parent_skipped, audited: such a
 *									   parent can never succeed, so a human
 *									   decides (replay runs the child
 *									   without that parent's result, cancel
 *									   ends it)
 *
 * A child so ended with children of its own is a failed parent in turn.
 * The walk over the descendants is iterative, never nested: the first
 * trigger that sees a failed parent runs the cascade (deps_cascade), and
 * the state changes the cascade makes fire the trigger again inside it,
 * which only queues the child as the next failed parent.  So a chain of
 * any depth costs a constant C stack, and a fan-out of any width one lock
 * per child; the memory held is the queue of failed parents not yet
 * walked (at most the width of one level of the workflow).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/deps.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "settings.h"
#include "spi_util.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "access/xact.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(ntask_task_deps_changed);
PG_FUNCTION_INFO_V1(ntask_task_dep_settle);

/*
 * deps_resolve_plan: $1 the child's queue, $2 the elements, $3 the
 * caller.  One row per element, in order: the task it names (NULL: none),
 * the queue and key it names, whether that queue refuses the caller the
 * producer right, and the child queue's policy.
 */
typedef enum DepsResolveCol
{
	DEPS_RESOLVE_TASK_ID = 1,
	DEPS_RESOLVE_QUEUE,
	DEPS_RESOLVE_KEY,
	DEPS_RESOLVE_DENIED
} DepsResolveCol;

static NtaskPlan deps_resolve_plan = {
	"dependency resolve",
	.ncols = 4,
	"SELECT r.task_id, r.rq, r.rk, "
	"  EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) r.rq "
	"          AND q.producer_role IS NOT NULL "
	"          AND NOT pg_catalog.pg_has_role($3, q.producer_role, 'USAGE')) "
	"FROM pg_catalog.unnest($2) WITH ORDINALITY AS i(e, n) "
	"CROSS JOIN LATERAL ( "
	"  SELECT coalesce(s.task_id, c.task_id) AS task_id, "
	"    CASE WHEN s.task_id IS NOT NULL OR pg_catalog.strpos(i.e, ':') OPERATOR(pg_catalog.=) 0 "
	"      THEN $1 ELSE pg_catalog.split_part(i.e, ':', 1) END AS rq, "
	"    CASE WHEN s.task_id IS NOT NULL OR pg_catalog.strpos(i.e, ':') OPERATOR(pg_catalog.=) 0 "
	"      THEN i.e ELSE pg_catalog.substr(i.e, pg_catalog.strpos(i.e, ':') OPERATOR(pg_catalog.+) 1) END AS rk "
	"  FROM (SELECT 1) d "
	"  LEFT JOIN ntask.task s ON s.queue OPERATOR(pg_catalog.=) $1 "
	"    AND s.task_key OPERATOR(pg_catalog.=) i.e "
	"  LEFT JOIN ntask.task c ON s.task_id IS NULL "
	"    AND pg_catalog.strpos(i.e, ':') OPERATOR(pg_catalog.>) 0 "
	"    AND c.queue OPERATOR(pg_catalog.=) pg_catalog.split_part(i.e, ':', 1) "
	"    AND c.task_key OPERATOR(pg_catalog.=) "
	"      pg_catalog.substr(i.e, pg_catalog.strpos(i.e, ':') OPERATOR(pg_catalog.+) 1) "
	") r "
	"ORDER BY i.n",
	3, {TEXTOID, TEXTARRAYOID, OIDOID}
};

/*
 * deps_attach_plan: $1 the parents (sorted), $2 the new children, $3 the
 * per-call policy (NULL: the queue's).  Reads the parents' states (no
 * lock: deps_settle_plan takes them at commit), writes one dependency row
 * per (child, parent) and moves each child to waiting when some parent
 * has not succeeded.  Returns per child: its state now, whether a parent has
 * failed (repair_required, canceled, skipped), and its policy.
 */
typedef enum DepsAttachCol
{
	DEPS_ATTACH_TASK_ID = 1,
	DEPS_ATTACH_STATE,
	DEPS_ATTACH_FAILED,
	DEPS_ATTACH_POLICY,
	DEPS_ATTACH_QUEUE,
	DEPS_ATTACH_FINAL			/* a parent's state, canceled or skipped */
} DepsAttachCol;

static NtaskPlan deps_attach_plan = {
	"dependency attach",
	.ncols = 6,
	"WITH p AS ( "
	"  SELECT t.task_id, t.state FROM ntask.task t "
	"  WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) "
	"), dep AS ( "
	"  INSERT INTO ntask.task_dep (task_id, parent_id, shard) "
	"  SELECT c.id, p.task_id, (c.id OPERATOR(pg_catalog.>>) " CppAsString2(NTASK_SHARD_SHIFT) ")::pg_catalog.int2 "
	"  FROM pg_catalog.unnest($2) AS c(id), p "
	"), n AS ( "
	"  SELECT pg_catalog.count(*) FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded')::pg_catalog.int4 AS left_, "
	"    pg_catalog.bool_or(p.state OPERATOR(pg_catalog.=) ANY ('{repair_required,canceled,skipped}')) AS failed, "
	"    (pg_catalog.array_agg(p.state ORDER BY p.task_id) "
	"      FILTER (WHERE p.state OPERATOR(pg_catalog.=) ANY ('{canceled,skipped}')))[1] AS final "
	"  FROM p "
	") "
	"UPDATE ntask.task t SET has_parents = true, on_parent_failed = $3, "
	"  parents_left = n.left_, "
	"  state = CASE WHEN n.left_ OPERATOR(pg_catalog.>) 0 THEN 'waiting' ELSE t.state END, "
	"  due_at = CASE WHEN n.left_ OPERATOR(pg_catalog.>) 0 THEN NULL ELSE t.due_at END "
	"FROM n, ntask.queue q "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($2) AND q.queue OPERATOR(pg_catalog.=) t.queue "
	"RETURNING t.task_id, t.state, n.failed, coalesce($3, q.on_parent_failed), t.queue, n.final",
	3, {INT8ARRAYOID, INT8ARRAYOID, TEXTOID}
};

/*
 * deps_release_plan: $1 the parent that succeeded, $2 now.  Counts its
 * waiting children down (locked in task_id order); the last parent makes
 * a child ready.  Returns the children made ready: queue, an http queue,
 * its notify policy.
 */
typedef enum DepsReleaseCol
{
	DEPS_RELEASE_QUEUE = 1,
	DEPS_RELEASE_READY,
	DEPS_RELEASE_HTTP,
	DEPS_RELEASE_NOTIFY
} DepsReleaseCol;

static NtaskPlan deps_release_plan = {
	"dependency release",
	.ncols = 4,
	"WITH c AS ( "
	"  SELECT t.task_id FROM ntask.task t "
	"  WHERE t.task_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT d.task_id FROM ntask.task_dep d "
	"      WHERE d.parent_id OPERATOR(pg_catalog.=) $1)) "
	"    AND t.state OPERATOR(pg_catalog.=) 'waiting' "
	"  ORDER BY t.task_id FOR NO KEY UPDATE "
	") "
	"UPDATE ntask.task t SET parents_left = t.parents_left OPERATOR(pg_catalog.-) 1, "
	"  state = CASE WHEN t.parents_left OPERATOR(pg_catalog.<=) 1 THEN 'ready' ELSE 'waiting' END, "
	"  run_at = CASE WHEN t.parents_left OPERATOR(pg_catalog.<=) 1 "
	"    THEN GREATEST(t.run_at, $2) ELSE t.run_at END, "
	"  due_at = CASE WHEN t.parents_left OPERATOR(pg_catalog.<=) 1 "
	"    THEN GREATEST(t.run_at, $2) END, "
	"  deadline = CASE WHEN t.parents_left OPERATOR(pg_catalog.<=) 1 "
	"    THEN GREATEST(t.run_at, $2) OPERATOR(pg_catalog.+) q.total_deadline ELSE t.deadline END, "
	"  updated_at = $2 "
	"FROM c, ntask.queue q "
	"WHERE t.task_id OPERATOR(pg_catalog.=) c.task_id AND q.queue OPERATOR(pg_catalog.=) t.queue "
	"  AND t.state OPERATOR(pg_catalog.=) 'waiting' "
	"RETURNING t.queue, t.state OPERATOR(pg_catalog.=) 'ready', "
	"  coalesce(q.target OPERATOR(pg_catalog.->>) 'type' OPERATOR(pg_catalog.=) 'http', false), q.notify",
	2, {INT8OID, TIMESTAMPTZOID}
};

/*
 * deps_failed_plan: $1 the parent that failed.  Its waiting children,
 * locked in task_id order, with their policy and queue.
 */
typedef enum DepsFailedCol
{
	DEPS_FAILED_TASK_ID = 1,
	DEPS_FAILED_POLICY,
	DEPS_FAILED_QUEUE
} DepsFailedCol;

static NtaskPlan deps_failed_plan = {
	"dependency failed parent",
	.ncols = 3,
	"SELECT t.task_id, coalesce(t.on_parent_failed, q.on_parent_failed), t.queue "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT d.task_id FROM ntask.task_dep d "
	"    WHERE d.parent_id OPERATOR(pg_catalog.=) $1)) "
	"  AND t.state OPERATOR(pg_catalog.=) 'waiting' "
	"ORDER BY t.task_id FOR NO KEY UPDATE OF t",
	1, {INT8OID}
};

/*
 * At the producer's commit (ntask_task_dep_settle): lock the parents of
 * the children $1 in task_id order and mark them has_children; a new
 * statement then reads their states.
 */
static NtaskPlan deps_lock_parents_plan = {
	"dependency settle: lock parents",
	.ncols = 0,
	"WITH p AS ( "
	"  SELECT t.task_id, t.has_children FROM ntask.task t "
	"  WHERE t.task_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT d.parent_id FROM ntask.task_dep d "
	"      WHERE d.task_id OPERATOR(pg_catalog.=) ANY ($1))) "
	"  ORDER BY t.task_id FOR NO KEY UPDATE "
	") "
	"UPDATE ntask.task t SET has_children = true FROM p "
	"WHERE t.task_id OPERATOR(pg_catalog.=) p.task_id AND NOT p.has_children",
	1, {INT8ARRAYOID}
};

/*
 * Then each child $1 still waiting is counted again: ready when every
 * parent succeeded (as deps_release_plan makes it), else waiting with the
 * parents left; $2 now.  Returns per child what the caller decides on: a
 * failed parent (repair_required, canceled, skipped), one that can never
 * succeed (canceled, skipped), the first failed parent in words, the
 * child's policy, queue, an http queue and its notify policy.
 */
typedef enum DepsSettleCol
{
	DEPS_SETTLE_TASK_ID = 1,
	DEPS_SETTLE_READY,
	DEPS_SETTLE_FAILED,
	DEPS_SETTLE_FINAL,
	DEPS_SETTLE_WHY,
	DEPS_SETTLE_POLICY,
	DEPS_SETTLE_QUEUE,
	DEPS_SETTLE_HTTP,
	DEPS_SETTLE_NOTIFY,
	DEPS_SETTLE_FINAL_STATE		/* the first canceled or skipped parent's */
} DepsSettleCol;

static NtaskPlan deps_settle_plan = {
	"dependency settle",
	.ncols = 10,
	"WITH x AS ( "
	"  SELECT d.task_id, "
	"    pg_catalog.count(*) FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded')::pg_catalog.int4 AS left_, "
	"    pg_catalog.bool_or(p.state OPERATOR(pg_catalog.=) ANY ('{repair_required,canceled,skipped}')) AS failed, "
	"    pg_catalog.bool_or(p.state OPERATOR(pg_catalog.=) ANY ('{canceled,skipped}')) AS final, "
	"    (pg_catalog.array_agg(p.queue OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) p.task_key "
	"        OPERATOR(pg_catalog.||) ' ended ' OPERATOR(pg_catalog.||) p.state ORDER BY p.task_id) "
	"      FILTER (WHERE p.state OPERATOR(pg_catalog.=) ANY ('{repair_required,canceled,skipped}')))[1] AS why, "
	"    (pg_catalog.array_agg(p.state ORDER BY p.task_id) "
	"      FILTER (WHERE p.state OPERATOR(pg_catalog.=) ANY ('{canceled,skipped}')))[1] AS final_state "
	"  FROM ntask.task_dep d JOIN ntask.task p ON p.task_id OPERATOR(pg_catalog.=) d.parent_id "
	"  WHERE d.task_id OPERATOR(pg_catalog.=) ANY ($1) "
	"  GROUP BY d.task_id "
	") "
	"UPDATE ntask.task t SET parents_left = x.left_, "
	"  state = CASE WHEN x.left_ OPERATOR(pg_catalog.=) 0 THEN 'ready' ELSE 'waiting' END, "
	"  run_at = CASE WHEN x.left_ OPERATOR(pg_catalog.=) 0 "
	"    THEN GREATEST(t.run_at, $2) ELSE t.run_at END, "
	"  due_at = CASE WHEN x.left_ OPERATOR(pg_catalog.=) 0 THEN GREATEST(t.run_at, $2) END, "
	"  deadline = CASE WHEN x.left_ OPERATOR(pg_catalog.=) 0 "
	"    THEN GREATEST(t.run_at, $2) OPERATOR(pg_catalog.+) q.total_deadline ELSE t.deadline END, "
	"  updated_at = $2 "
	"FROM x, ntask.queue q "
	"WHERE t.task_id OPERATOR(pg_catalog.=) x.task_id AND q.queue OPERATOR(pg_catalog.=) t.queue "
	"  AND t.state OPERATOR(pg_catalog.=) 'waiting' "
	"RETURNING t.task_id, t.state OPERATOR(pg_catalog.=) 'ready', x.failed, x.final, "
	"  x.why, coalesce(t.on_parent_failed, q.on_parent_failed), t.queue, "
	"  coalesce(q.target OPERATOR(pg_catalog.->>) 'type' OPERATOR(pg_catalog.=) 'http', false), "
	"  q.notify, x.final_state",
	2, {INT8ARRAYOID, TIMESTAMPTZOID}
};

/*
 * The children this transaction attached, settled at its commit: an
 * array in TopTransactionContext, dropped when the transaction ends
 * (deps_xact_callback).
 */
static int64 *deps_settle_ids = NULL;
static int	deps_settle_n = 0;
static int	deps_settle_max = 0;
static bool deps_callback_registered = false;

static void
deps_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			deps_settle_ids = NULL;
			deps_settle_n = deps_settle_max = 0;
			break;
		default:
			break;
	}
}

/* deps_note_child: settle child at this transaction's commit */
static void
deps_note_child(int64 child)
{
	if (!deps_callback_registered)
	{
		RegisterXactCallback(deps_xact_callback, NULL);
		deps_callback_registered = true;
	}
	if (deps_settle_n == deps_settle_max)
	{
		int			max = Max(16, deps_settle_max * 2);

		deps_settle_ids = deps_settle_ids == NULL ?
			MemoryContextAlloc(TopTransactionContext, sizeof(int64) * max) :
			repalloc(deps_settle_ids, sizeof(int64) * max);
		deps_settle_max = max;
	}
	deps_settle_ids[deps_settle_n++] = child;
}

/*
 * NtaskCheckParentPolicy
 *		on_parent_failed must be wait or cancel (22023).
 */
void
NtaskCheckParentPolicy(text *policy)
{
	char	   *p = text_to_cstring(policy);

	if (strcmp(p, "wait") != 0 && strcmp(p, "cancel") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: on_parent_failed must be 'wait' or 'cancel', not \"%s\"", p)));
}

/* deps_text_eq: two texts are equal byte for byte */
static bool
deps_text_eq(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* deps_id_cmp: qsort order of int64 */
static int
deps_id_cmp(const void *a, const void *b)
{
	int64		x = DatumGetInt64(*(const Datum *) a);
	int64		y = DatumGetInt64(*(const Datum *) b);

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * NtaskDepsArgs
 *		Read an enqueue's depends_on and on_parent_failed arguments
 *		(positions a_trace + 1 and a_trace + 2; a_trace is its traceparent,
 *		which enqueue.c reads) into *d; returns false when the call names no
 *		parents (d->n = 0).  Checks what needs no lookup: NULL elements
 *		22004, more than ntask.max_parents 54000, a policy other than
 *		wait/cancel 22023, a policy without parents 22023.
 */
bool
NtaskDepsArgs(FunctionCallInfo fcinfo, int a_trace, NtaskDeps *d)
{
	memset(d, 0, sizeof(NtaskDeps));
	/* a_trace is traceparent (enqueue.c reads it); then these two */
	if (!PG_ARGISNULL(a_trace + 2))
	{
		d->policy = PG_GETARG_TEXT_PP(a_trace + 2);
		NtaskCheckParentPolicy(d->policy);
	}
	if (!PG_ARGISNULL(a_trace + 1))
	{
		d->n = NtaskArgArray(fcinfo, a_trace + 1, "depends_on", TEXTOID, false,
							 &d->elems, NULL);
		if (d->n > ntask_max_parents)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("ntask: depends_on names %d parents, more than ntask.max_parents (%d)",
							d->n, ntask_max_parents)));
		d->array = PG_GETARG_DATUM(a_trace + 1);
	}
	if (d->policy != NULL && d->n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: on_parent_failed needs depends_on")));
	return d->n > 0;
}

/*
 * NtaskDepsResolve
 *		Inside the caller's SPI connection: resolve d's elements to tasks,
 *		for a child of queue whose keys are keys[0..nkeys-1].  42501 when a
 *		parent's queue refuses the caller the producer right (checked
 *		before existence, so nothing is revealed), 22023 for a parent that
 *		does not exist, for the child itself, or a parent named twice.
 *		Fills d->ids (sorted).
 */
void
NtaskDepsResolve(NtaskDeps *d, text *queue, text **keys, int nkeys)
{
	Datum		values[3];
	int			nrows;
	int			r;
	int			k;

	NtaskRefuseDistributed("depends_on");
	values[0] = PointerGetDatum(queue);
	values[1] = d->array;
	values[2] = ObjectIdGetDatum(NtaskCaller());
	nrows = NtaskExecPlan(&deps_resolve_plan, values, NULL, SPI_OK_SELECT);
	if (nrows != d->n)
		elog(ERROR, "ntask: depends_on resolved %d of %d elements", nrows, d->n);
	d->ids = palloc(sizeof(Datum) * d->n);
	for (r = 0; r < nrows; r++)
	{
		text	   *rq = NtaskGetText(r, DEPS_RESOLVE_QUEUE);
		text	   *rk = NtaskGetText(r, DEPS_RESOLVE_KEY);
		bool		isnull;
		Datum		id;

		if (NtaskGetBool(r, DEPS_RESOLVE_DENIED))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("ntask: permission denied to depend on tasks of queue \"%s\"",
							text_to_cstring(rq)),
					 errhint("A parent's queue must grant its producer_role to the role (ntask_queue_set_roles).")));
		if (deps_text_eq(rq, queue))
			for (k = 0; k < nkeys; k++)
				if (deps_text_eq(rk, keys[k]))
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("ntask: task \"%s\" cannot depend on itself",
									text_to_cstring(rk))));
		id = NtaskGetDatum(r, DEPS_RESOLVE_TASK_ID, &isnull);
		if (isnull && (VARSIZE_ANY_EXHDR(rq) > NTASK_MAX_QUEUE_LEN ||
					   VARSIZE_ANY_EXHDR(rk) > NTASK_MAX_KEY_LEN))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: depends_on[%d] names no task: its queue or key is too long", r + 1),
					 errdetail("A queue name has at most %d bytes and a task key at most %d.",
							   NTASK_MAX_QUEUE_LEN, NTASK_MAX_KEY_LEN),
					 errhint("Enqueue the parents first.")));
		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: parent %s:%s does not exist",
							text_to_cstring(rq), text_to_cstring(rk)),
					 errdetail("depends_on[%d] must name a task that exists: a key of the queue, or queue:key.", r + 1),
					 errhint("Enqueue the parents first.")));
		d->ids[r] = id;
	}
	qsort(d->ids, d->n, sizeof(Datum), deps_id_cmp);
	for (r = 1; r < d->n; r++)
		if (DatumGetInt64(d->ids[r]) == DatumGetInt64(d->ids[r - 1]))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: depends_on names task %lld twice",
							(long long) DatumGetInt64(d->ids[r]))));
}

/*
 * deps_cancel_child
 *		Cancel a waiting child whose parent failed (reason parent_failed),
 *		audited.  The caller holds its row lock.
 */
static void
deps_cancel_child(int64 child, const char *queue, const char *why)
{
	NtaskFinishTask(child, "canceled", "parent_failed", "canceled", NULL, NULL);
	NtaskAudit("ntask", "cancel", child, queue,
			   psprintf("parent_failed: %s", why), "waiting", "canceled");
}

/*
 * deps_repair_child
 *		A waiting child (policy wait) whose parent was canceled or skipped,
 *		which can never succeed: to repair_required (reason parent_canceled
 *		or parent_skipped), audited.  The caller holds its row lock.
 */
static void
deps_repair_child(int64 child, const char *queue, const char *pstate, const char *why)
{
	const char *reason = strcmp(pstate, "skipped") == 0 ? "parent_skipped" : "parent_canceled";

	NtaskFinishTask(child, "repair_required", reason, "repair_required", NULL, NULL);
	NtaskAudit("ntask", "repair", child, queue,
			   psprintf("%s: %s", reason, why), "waiting", "repair_required");
}

/*
 * NtaskDepsAttach
 *		Inside the caller's SPI connection, after the enqueue created the
 *		children ids[0..n-1]: attach them to d's parents (resolved).  A
 *		child whose policy is cancel and one of whose parents has already
 *		failed is canceled at once.  Returns the number of children left
 *		waiting, and their states in states[] (text, by position).
 */
void
NtaskDepsAttach(NtaskDeps *d, Datum *ids, int n, Datum *states)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	int			nrows;
	int			r;
	int			i;
	SPITupleTable *tt;

	if (n == 0)
		return;
	values[0] = NtaskInt8Array(d->ids, d->n);
	values[1] = NtaskInt8Array(ids, n);
	values[2] = d->policy ? PointerGetDatum(d->policy) : (Datum) 0;
	nulls[2] = d->policy ? ' ' : 'n';
	nrows = NtaskExecPlan(&deps_attach_plan, values, nulls, SPI_OK_UPDATE_RETURNING);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		int64		child;
		char	   *state;
		bool		failed;
		char	   *policy;
		char	   *queue;

		child = NtaskTupGetInt64(tt, r, DEPS_ATTACH_TASK_ID);
		state = NtaskTupGetCString(tt, r, DEPS_ATTACH_STATE);
		failed = NtaskTupGetBool(tt, r, DEPS_ATTACH_FAILED);
		policy = NtaskTupGetCString(tt, r, DEPS_ATTACH_POLICY);
		queue = NtaskTupGetCString(tt, r, DEPS_ATTACH_QUEUE);
		if (strcmp(state, "waiting") == 0 && failed && strcmp(policy, "cancel") == 0)
		{
			deps_cancel_child(child, queue, "a parent had failed when it was enqueued");
			state = "canceled";
		}
		else if (strcmp(state, "waiting") == 0 && NtaskTupGetText(tt, r, DEPS_ATTACH_FINAL) != NULL)
		{
			deps_repair_child(child, queue, NtaskTupGetCString(tt, r, DEPS_ATTACH_FINAL),
							  "a parent had ended when it was enqueued");
			state = "repair_required";
		}
		for (i = 0; i < n; i++)
			if (DatumGetInt64(ids[i]) == child)
				states[i] = CStringGetTextDatum(state);
		if (strcmp(state, "waiting") == 0)
			deps_note_child(child);
	}
}

/* deps_attr: a column of the trigger's row */
static Datum
deps_attr(TriggerData *td, HeapTuple tup, const char *name, bool *isnull)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	int			attno = SPI_fnumber(desc, name);

	if (attno <= 0)
		elog(ERROR, "ntask: ntask.task has no column %s", name);
	return heap_getattr(tup, attno, desc, isnull);
}

/*
 * deps_wake_ready
 *		A child of queue became ready: wake the queue's waiting claims at
 *		commit, and the background worker (an http queue) or listeners
 *		(notify).
 */
static void
deps_wake_ready(const char *queue, bool http, bool notify)
{
	NtaskWakeWaitersAtCommit(queue, 1, 0);
	if (http)
		NtaskWakeWorkerAtCommit();
	if (notify)
		Async_Notify(psprintf("ntask_%s", queue), NULL);
}

/*
 * deps_release
 *		The parent succeeded: count its waiting children down; wake the
 *		claims (and the worker, NOTIFY) of the queues of those made ready.
 */
static void
deps_release(int64 parent)
{
	Datum		values[2];
	int			nrows;
	int			r;

	values[0] = Int64GetDatum(parent);
	values[1] = NtaskStatementTs();
	nrows = NtaskExecPlan(&deps_release_plan, values, NULL, SPI_OK_UPDATE_RETURNING);
	for (r = 0; r < nrows; r++)
	{
		char	   *queue;

		if (!NtaskGetBool(r, DEPS_RELEASE_READY))
			continue;
		queue = NtaskGetCString(r, DEPS_RELEASE_QUEUE);
		deps_wake_ready(queue, NtaskGetBool(r, DEPS_RELEASE_HTTP),
						NtaskGetBool(r, DEPS_RELEASE_NOTIFY));
	}
}

/*
 * deps_failed
 *		The parent ended in repair_required, canceled or skipped: cancel the
 *		waiting children whose policy says so; a canceled or skipped
 *		parent sends the others to repair_required.  Each child so ended
 *		fires the trigger, which queues it for the cascade.
 */
static void
deps_failed(int64 parent, const char *pqueue, const char *pkey, const char *state)
{
	Datum		values[1];
	int			nrows;
	int			r;
	SPITupleTable *tt;
	bool		final = strcmp(state, "repair_required") != 0;
	char	   *why = psprintf("parent %s:%s ended %s", pqueue, pkey, state);

	values[0] = Int64GetDatum(parent);
	nrows = NtaskExecPlan(&deps_failed_plan, values, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		int64		child;
		char	   *queue;

		child = NtaskTupGetInt64(tt, r, DEPS_FAILED_TASK_ID);
		queue = NtaskTupGetCString(tt, r, DEPS_FAILED_QUEUE);
		if (strcmp(NtaskTupGetCString(tt, r, DEPS_FAILED_POLICY), "cancel") == 0)
			deps_cancel_child(child, queue, why);
		else if (final)
			deps_repair_child(child, queue, state, why);
	}
}

/*
 * The cascade of a failed parent.  deps_pending holds the failed parents
 * not yet walked (from deps_next on), in deps_cxt, a child of the
 * transaction's context; deps_cascading says that a cascade runs, so
 * that the trigger queues instead of walking.  Both are reset when the
 * cascade ends, also by an error.
 */
typedef struct DepsFailedParent
{
	int64		task_id;
	char	   *queue;
	char	   *key;
	char	   *state;
} DepsFailedParent;

static bool deps_cascading = false;
static List *deps_pending = NIL;
static int	deps_next = 0;
static MemoryContext deps_cxt = NULL;

/* deps_queue: add a failed parent to the cascade's queue */
static void
deps_queue(int64 task_id, const char *queue, const char *key, const char *state)
{
	MemoryContext old = MemoryContextSwitchTo(deps_cxt);
	DepsFailedParent *f = palloc(sizeof(DepsFailedParent));

	f->task_id = task_id;
	f->queue = pstrdup(queue);
	f->key = pstrdup(key);
	f->state = pstrdup(state);
	deps_pending = lappend(deps_pending, f);
	MemoryContextSwitchTo(old);
}

/*
 * deps_cascade
 *		Walk the failed parent and, breadth first, every descendant its end
 *		ends, one parent at a time in its own SPI connection (so each
 *		step's memory is freed), the queue compacted as it is consumed.
 */
static void
deps_cascade(int64 task_id, const char *queue, const char *key, const char *state)
{
	deps_cxt = AllocSetContextCreate(TopTransactionContext, "ntask dependency cascade",
									 ALLOCSET_DEFAULT_SIZES);
	deps_pending = NIL;
	deps_next = 0;
	deps_cascading = true;
	PG_TRY();
	{
		deps_queue(task_id, queue, key, state);
		while (deps_next < list_length(deps_pending))
		{
			DepsFailedParent *f = (DepsFailedParent *) list_nth(deps_pending, deps_next++);

			CHECK_FOR_INTERRUPTS();
			SPI_connect();
			deps_failed(f->task_id, f->queue, f->key, f->state);
			SPI_finish();
			pfree(f->queue);
			pfree(f->key);
			pfree(f->state);
			pfree(f);
			if (deps_next >= 1024 && deps_next * 2 >= list_length(deps_pending))
			{
				deps_pending = list_delete_first_n(deps_pending, deps_next);
				deps_next = 0;
			}
		}
	}
	PG_FINALLY();
	{
		deps_cascading = false;
		deps_pending = NIL;
		deps_next = 0;
		MemoryContextDelete(deps_cxt);
		deps_cxt = NULL;
	}
	PG_END_TRY();
}

/*
 * ntask.task_deps_changed() trigger: AFTER UPDATE OF state ON ntask.task
 * FOR EACH ROW WHEN (NEW.has_children).  The WHEN clause is one column:
 * its node tree is read back by every statement that updates the state
 * of ntask.task, so the rest (did the state change) is tested here.
 */
Datum
ntask_task_deps_changed(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	bool		isnull;
	int64		task_id;
	char	   *state;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		elog(ERROR, "ntask: task_deps_changed must be an AFTER UPDATE row trigger");
	task_id = DatumGetInt64(deps_attr(td, td->tg_newtuple, "task_id", &isnull));
	state = TextDatumGetCString(deps_attr(td, td->tg_newtuple, "state", &isnull));
	if (strcmp(state, TextDatumGetCString(deps_attr(td, td->tg_trigtuple, "state", &isnull))) == 0)
		return PointerGetDatum(NULL);

	if (strcmp(state, "succeeded") == 0)
	{
		SPI_connect();
		deps_release(task_id);
		SPI_finish();
	}
	else if (strcmp(state, "repair_required") == 0 || strcmp(state, "canceled") == 0 ||
			 strcmp(state, "skipped") == 0)
	{
		char	   *queue = TextDatumGetCString(deps_attr(td, td->tg_newtuple, "queue", &isnull));
		char	   *key = TextDatumGetCString(deps_attr(td, td->tg_newtuple, "task_key", &isnull));

		if (deps_cascading)
			deps_queue(task_id, queue, key, state);
		else
			deps_cascade(task_id, queue, key, state);
	}
	return PointerGetDatum(NULL);
}

/*
 * deps_settle
 *		At the producer's commit: settle every child this transaction
 *		attached that is still waiting (see the file header).
 */
static void
deps_settle(void)
{
	Datum		values[2];
	Datum	   *ids;
	int			nrows;
	int			r;
	int			i;
	SPITupleTable *tt;

	ids = palloc(sizeof(Datum) * deps_settle_n);
	for (i = 0; i < deps_settle_n; i++)
		ids[i] = Int64GetDatum(deps_settle_ids[i]);
	values[0] = NtaskInt8Array(ids, deps_settle_n);
	values[1] = NtaskStatementTs();
	deps_settle_n = 0;			/* a later event of this commit has nothing to do */
	(void) NtaskExecPlan(&deps_lock_parents_plan, values, NULL, SPI_OK_UPDATE);
	nrows = NtaskExecPlan(&deps_settle_plan, values, NULL, SPI_OK_UPDATE_RETURNING);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		int64		child;
		char	   *queue;

		child = NtaskTupGetInt64(tt, r, DEPS_SETTLE_TASK_ID);
		queue = NtaskTupGetCString(tt, r, DEPS_SETTLE_QUEUE);
		if (NtaskTupGetBool(tt, r, DEPS_SETTLE_READY))
		{
			deps_wake_ready(queue, NtaskTupGetBool(tt, r, DEPS_SETTLE_HTTP),
							NtaskTupGetBool(tt, r, DEPS_SETTLE_NOTIFY));
			continue;
		}
		if (!NtaskTupGetBool(tt, r, DEPS_SETTLE_FAILED))
			continue;
		if (strcmp(NtaskTupGetCString(tt, r, DEPS_SETTLE_POLICY), "cancel") == 0)
			deps_cancel_child(child, queue,
							  psprintf("parent %s", NtaskTupGetCString(tt, r, DEPS_SETTLE_WHY)));
		else if (NtaskTupGetBool(tt, r, DEPS_SETTLE_FINAL))
			deps_repair_child(child, queue, NtaskTupGetCString(tt, r, DEPS_SETTLE_FINAL_STATE),
							  psprintf("parent %s", NtaskTupGetCString(tt, r, DEPS_SETTLE_WHY)));
	}
}

/*
 * ntask.task_dep_settle() constraint trigger: AFTER INSERT ON
 * ntask.task_dep, DEFERRABLE INITIALLY DEFERRED, FOR EACH ROW.  The first
 * event at the commit settles every child the transaction attached (in
 * one pass, the parents locked in task_id order); the others find nothing
 * left.  Rows not written by an enqueue (a restore) find nothing either.
 */
Datum
ntask_task_dep_settle(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_INSERT(td->tg_event))
		elog(ERROR, "ntask: task_dep_settle must be an AFTER INSERT row trigger");
	if (deps_settle_n > 0)
	{
		SPI_connect();
		deps_settle();
		SPI_finish();
	}
	return PointerGetDatum(NULL);
}
