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
 * On a distributed install (Citus; docs/scaling.md "Dependencies on a
 * distributed install") a child, its parents and their dependency rows
 * share one shard (0A000 otherwise, at the enqueue).  The enqueue's
 * statements are routed to that shard.  Both triggers run on the shards
 * (ntask.task_<id>, ntask.task_dep_<id>), on the shard's node, where Citus
 * allows a trigger only local work: they run the statements below on the
 * relations of the fired shard's group (DepsRels: the plain statements
 * with the shard relations' names), write no audit row (the audit is
 * hashed onto any node) and send no NOTIFY (the shard's transaction may be
 * prepared).  The settle there settles the child of the row it fired for:
 * the commit that fires it is the shard node's, not the enqueuing
 * backend's.
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
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "access/xact.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(ntask_task_deps_changed);
PG_FUNCTION_INFO_V1(ntask_task_dep_settle);

/*
 * deps_release_plan: $1 the parent that succeeded, $2 now.  Counts its
 * waiting children down (locked in task_id order); the last parent makes
 * a child ready.  Returns the children made ready: queue, an http queue,
 * its notify policy.
 */
typedef enum DepsReleaseArg
{
	DEPS_RELEASE_ARG_PARENT,	/* $1 */
	DEPS_RELEASE_ARG_NOW,		/* $2 */
	DEPS_RELEASE_NARGS
} DepsReleaseArg;

typedef enum DepsReleaseCol
{
	DEPS_RELEASE_QUEUE = 1,
	DEPS_RELEASE_READY,
	DEPS_RELEASE_HTTP,
	DEPS_RELEASE_NOTIFY,
	DEPS_RELEASE_NCOLS = DEPS_RELEASE_NOTIFY
} DepsReleaseCol;

static NtaskPlan deps_release_plan = {
	"dependency release",
	.ncols = DEPS_RELEASE_NCOLS,
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
	DEPS_RELEASE_NARGS, {INT8OID, TIMESTAMPTZOID}
};

/*
 * deps_failed_plan: $1 the parent that failed.  Its waiting children,
 * locked in task_id order, with their policy and queue.
 */
typedef enum DepsFailedArg
{
	DEPS_FAILED_ARG_PARENT,		/* $1 */
	DEPS_FAILED_NARGS
} DepsFailedArg;

typedef enum DepsFailedCol
{
	DEPS_FAILED_TASK_ID = 1,
	DEPS_FAILED_POLICY,
	DEPS_FAILED_QUEUE,
	DEPS_FAILED_NCOLS = DEPS_FAILED_QUEUE
} DepsFailedCol;

static NtaskPlan deps_failed_plan = {
	"dependency failed parent",
	.ncols = DEPS_FAILED_NCOLS,
	"SELECT t.task_id, coalesce(t.on_parent_failed, q.on_parent_failed), t.queue "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT d.task_id FROM ntask.task_dep d "
	"    WHERE d.parent_id OPERATOR(pg_catalog.=) $1)) "
	"  AND t.state OPERATOR(pg_catalog.=) 'waiting' "
	"ORDER BY t.task_id FOR NO KEY UPDATE OF t",
	DEPS_FAILED_NARGS, {INT8OID}
};

/*
 * At the producer's commit (ntask_task_dep_settle): lock the parents of
 * the children $1 in task_id order and mark them has_children; a new
 * statement then reads their states.
 */
typedef enum DepsSettleArg
{
	DEPS_SETTLE_ARG_CHILDREN,	/* $1 (deps_lock_parents_plan's only one) */
	DEPS_SETTLE_ARG_NOW,		/* $2 */
	DEPS_SETTLE_NARGS
} DepsSettleArg;

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
	DEPS_SETTLE_ARG_CHILDREN + 1, {INT8ARRAYOID}
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
	DEPS_SETTLE_FINAL_STATE,	/* the first canceled or skipped parent's */
	DEPS_SETTLE_NCOLS = DEPS_SETTLE_FINAL_STATE
} DepsSettleCol;

static NtaskPlan deps_settle_plan = {
	"dependency settle",
	.ncols = DEPS_SETTLE_NCOLS,
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
	DEPS_SETTLE_NARGS, {INT8ARRAYOID, TIMESTAMPTZOID}
};

/*
 * On a distributed install (docs/scaling.md "Dependencies on a
 * distributed install") a child and its parents share a shard, and the
 * enqueue's statements are routed to it (Citus plans neither the resolve's
 * joins over every shard nor the attach's modifying CTE as one router
 * statement).
 *
 * deps_find_dist_plan: $1 the child's shard, $2 and $3 the queues and keys
 * named (every pair a depends_on element may mean; C matches the pairs).
 * deps_find_any_plan: the same over every shard, only for a name the
 * child's shard lacks, to tell "another shard" (0A000) from "none" (22023).
 */
typedef enum DepsFindArg
{
	DEPS_FIND_ARG_SHARD,		/* $1, deps_find_dist_plan's only */
	DEPS_FIND_ARG_QUEUES,		/* $2 ($1 of deps_find_any_plan) */
	DEPS_FIND_ARG_KEYS,			/* $3 ($2) */
	DEPS_FIND_NARGS
} DepsFindArg;

typedef enum DepsFindCol
{
	DEPS_FIND_TASK_ID = 1,
	DEPS_FIND_QUEUE,
	DEPS_FIND_KEY,
	DEPS_FIND_SHARD,
	DEPS_FIND_NCOLS = DEPS_FIND_SHARD
} DepsFindCol;

static NtaskPlan deps_find_dist_plan = {
	"dependency find (distributed)",
	.ncols = DEPS_FIND_NCOLS,
	"SELECT t.task_id, t.queue, t.task_key, t.shard FROM ntask.task t "
	"WHERE t.shard OPERATOR(pg_catalog.=) $1 "
	"  AND t.queue OPERATOR(pg_catalog.=) ANY ($2) "
	"  AND t.task_key OPERATOR(pg_catalog.=) ANY ($3)",
	DEPS_FIND_NARGS, {INT2OID, TEXTARRAYOID, TEXTARRAYOID}
};

static NtaskPlan deps_find_any_plan = {
	"dependency find (every shard)",
	.ncols = DEPS_FIND_NCOLS,
	"SELECT t.task_id, t.queue, t.task_key, t.shard FROM ntask.task t "
	"WHERE t.queue OPERATOR(pg_catalog.=) ANY ($1) "
	"  AND t.task_key OPERATOR(pg_catalog.=) ANY ($2)",
	DEPS_FIND_NARGS - 1, {TEXTARRAYOID, TEXTARRAYOID}
};

/* the queues of $1 that refuse the caller $2 the producer right */
typedef enum DepsDeniedArg
{
	DEPS_DENIED_ARG_QUEUES,		/* $1 */
	DEPS_DENIED_ARG_CALLER,		/* $2 */
	DEPS_DENIED_NARGS
} DepsDeniedArg;

typedef enum DepsDeniedCol
{
	DEPS_DENIED_QUEUE = 1,
	DEPS_DENIED_NCOLS = DEPS_DENIED_QUEUE
} DepsDeniedCol;

static NtaskPlan deps_denied_dist_plan = {
	"dependency producer right (distributed)",
	.ncols = DEPS_DENIED_NCOLS,
	"SELECT q.queue FROM ntask.queue q "
	"WHERE q.queue OPERATOR(pg_catalog.=) ANY ($1) "
	"  AND q.producer_role IS NOT NULL "
	"  AND NOT pg_catalog.pg_has_role($2, q.producer_role, 'USAGE')",
	DEPS_DENIED_NARGS, {TEXTARRAYOID, OIDOID}
};

/* the attach: the parents' states ($1 ids, $2 shard), read without a lock */
typedef enum DepsParentsArg
{
	DEPS_PARENTS_ARG_IDS,		/* $1 */
	DEPS_PARENTS_ARG_SHARD,		/* $2 */
	DEPS_PARENTS_NARGS
} DepsParentsArg;

typedef enum DepsParentsCol
{
	DEPS_PARENTS_TASK_ID = 1,
	DEPS_PARENTS_STATE,
	DEPS_PARENTS_NCOLS = DEPS_PARENTS_STATE
} DepsParentsCol;

static NtaskPlan deps_parents_dist_plan = {
	"dependency parents (distributed)",
	.ncols = DEPS_PARENTS_NCOLS,
	"SELECT t.task_id, t.state FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) AND t.shard OPERATOR(pg_catalog.=) $2 "
	"ORDER BY t.task_id",
	DEPS_PARENTS_NARGS, {INT8ARRAYOID, INT2OID}
};

/* one dependency row: child $1, parent $2, shard $3 */
typedef enum DepsRowArg
{
	DEPS_ROW_ARG_CHILD,			/* $1 */
	DEPS_ROW_ARG_PARENT,		/* $2 */
	DEPS_ROW_ARG_SHARD,			/* $3 */
	DEPS_ROW_NARGS
} DepsRowArg;

static NtaskPlan deps_row_dist_plan = {
	"dependency row (distributed)",
	.ncols = 0,
	"INSERT INTO ntask.task_dep (task_id, parent_id, shard) VALUES ($1, $2, $3)",
	DEPS_ROW_NARGS, {INT8OID, INT8OID, INT2OID}
};

/*
 * the children $1 of shard $2: policy $3, parents left $4 (waiting when
 * some are); their states and queue
 */
typedef enum DepsChildrenArg
{
	DEPS_CHILDREN_ARG_IDS,		/* $1 */
	DEPS_CHILDREN_ARG_SHARD,	/* $2 */
	DEPS_CHILDREN_ARG_POLICY,	/* $3 */
	DEPS_CHILDREN_ARG_LEFT,		/* $4 */
	DEPS_CHILDREN_NARGS
} DepsChildrenArg;

typedef enum DepsChildrenCol
{
	DEPS_CHILDREN_TASK_ID = 1,
	DEPS_CHILDREN_STATE,
	DEPS_CHILDREN_QUEUE,
	DEPS_CHILDREN_NCOLS = DEPS_CHILDREN_QUEUE
} DepsChildrenCol;

static NtaskPlan deps_children_dist_plan = {
	"dependency children (distributed)",
	.ncols = DEPS_CHILDREN_NCOLS,
	"UPDATE ntask.task t SET has_parents = true, on_parent_failed = $3, "
	"  parents_left = $4, "
	"  state = CASE WHEN $4 OPERATOR(pg_catalog.>) 0 THEN 'waiting' ELSE t.state END, "
	"  due_at = CASE WHEN $4 OPERATOR(pg_catalog.>) 0 THEN NULL ELSE t.due_at END "
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) AND t.shard OPERATOR(pg_catalog.=) $2 "
	"RETURNING t.task_id, t.state, t.queue",
	DEPS_CHILDREN_NARGS, {INT8ARRAYOID, INT2OID, TEXTOID, INT4OID}
};

/* the children's policy: $2, else their queue $1's */
typedef enum DepsPolicyArg
{
	DEPS_POLICY_ARG_QUEUE,		/* $1 */
	DEPS_POLICY_ARG_POLICY,		/* $2 */
	DEPS_POLICY_NARGS
} DepsPolicyArg;

typedef enum DepsPolicyCol
{
	DEPS_POLICY_POLICY = 1,
	DEPS_POLICY_NCOLS = DEPS_POLICY_POLICY
} DepsPolicyCol;

static NtaskPlan deps_policy_dist_plan = {
	"dependency policy (distributed)",
	.ncols = DEPS_POLICY_NCOLS,
	"SELECT coalesce($2, q.on_parent_failed) FROM ntask.queue q "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1",
	DEPS_POLICY_NARGS, {TEXTOID, TEXTOID}
};

/*
 * deps_resolve: $1 the child's queue, $2 the elements, $3 the caller.  One
 * row per element, in order: the task it names (NULL: none), the queue
 * and key it names, whether that queue refuses the caller the producer
 * right, and the task's shard when it is not the child's (NULL on one
 * node, where every task is in shard 0).  The routed variant's before step
 * (deps_resolve_routed) looks them up in the child's shard $4 with the
 * statements above and leaves its answer in $5 to $9, which its statement
 * returns as the plain one's rows.
 */
typedef enum DepsResolveArg
{
	DEPS_RESOLVE_ARG_QUEUE,		/* $1 */
	DEPS_RESOLVE_ARG_ELEMS,		/* $2 */
	DEPS_RESOLVE_ARG_CALLER,	/* $3 */
	DEPS_RESOLVE_PLAIN_NARGS,
	DEPS_RESOLVE_ARG_SHARD = DEPS_RESOLVE_PLAIN_NARGS,	/* $4, the child's */
	DEPS_RESOLVE_ARG_IDS,		/* $5, the routed before step's answer */
	DEPS_RESOLVE_ARG_QUEUES,	/* $6 */
	DEPS_RESOLVE_ARG_KEYS,		/* $7 */
	DEPS_RESOLVE_ARG_DENIED,	/* $8 */
	DEPS_RESOLVE_ARG_ELSEWHERE,	/* $9 */
	DEPS_RESOLVE_NARGS
} DepsResolveArg;

typedef enum DepsResolveCol
{
	DEPS_RESOLVE_TASK_ID = 1,
	DEPS_RESOLVE_QUEUE,
	DEPS_RESOLVE_KEY,
	DEPS_RESOLVE_DENIED,
	DEPS_RESOLVE_ELSEWHERE,		/* the task's shard, not the child's */
	DEPS_RESOLVE_NCOLS = DEPS_RESOLVE_ELSEWHERE
} DepsResolveCol;

static bool deps_resolve_routed(Datum *values, char *nulls);

static NtaskPair deps_resolve = NTASK_PAIR("dependency resolve",
										   NTASK_PLAIN(DEPS_RESOLVE_NCOLS,
													   "SELECT r.task_id, r.rq, r.rk, "
													   "  EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) r.rq "
													   "          AND q.producer_role IS NOT NULL "
													   "          AND NOT pg_catalog.pg_has_role($3, q.producer_role, 'USAGE')), "
													   "  NULL::pg_catalog.int2 "
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
													   DEPS_RESOLVE_PLAIN_NARGS, SPI_OK_SELECT),
										   NTASK_ROUTED(DEPS_RESOLVE_NCOLS,
														"SELECT i.id, i.q, i.k, i.dn, i.sh "
														"FROM ROWS FROM (pg_catalog.unnest($5), pg_catalog.unnest($6), "
														"  pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9)) "
														"  WITH ORDINALITY AS i(id, q, k, dn, sh, n) "
														"ORDER BY i.n",
														DEPS_RESOLVE_NARGS, SPI_OK_SELECT,
														deps_resolve_routed, NULL),
										   TEXTOID, TEXTARRAYOID, OIDOID, INT2OID,
										   INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, BOOLARRAYOID, INT2ARRAYOID);

/*
 * deps_attach: $1 the parents (sorted), $2 the new children, $3 the
 * per-call policy (NULL: the queue's).  Reads the parents' states (no
 * lock: deps_settle_plan takes them at commit), writes one dependency row
 * per (child, parent) and moves each child to waiting when some parent
 * has not succeeded.  Returns per child: its state now, whether a parent has
 * failed (repair_required, canceled, skipped), and its policy.  The
 * routed variant's before step (deps_attach_routed) runs these steps as
 * routed statements in the children's shard $4 and leaves its answer in
 * $5 to $10, which its statement returns as the plain one's rows.
 */
typedef enum DepsAttachArg
{
	DEPS_ATTACH_ARG_PARENTS,	/* $1 */
	DEPS_ATTACH_ARG_CHILDREN,	/* $2 */
	DEPS_ATTACH_ARG_POLICY,		/* $3 */
	DEPS_ATTACH_PLAIN_NARGS,
	DEPS_ATTACH_ARG_SHARD = DEPS_ATTACH_PLAIN_NARGS,	/* $4, the parents' */
	DEPS_ATTACH_ARG_IDS,		/* $5, the routed before step's answer */
	DEPS_ATTACH_ARG_STATES,		/* $6 */
	DEPS_ATTACH_ARG_QUEUES,		/* $7 */
	DEPS_ATTACH_ARG_FAILED,		/* $8 */
	DEPS_ATTACH_ARG_CHILD_POLICY,	/* $9 */
	DEPS_ATTACH_ARG_FINAL,		/* $10 */
	DEPS_ATTACH_NARGS
} DepsAttachArg;

typedef enum DepsAttachCol
{
	DEPS_ATTACH_TASK_ID = 1,
	DEPS_ATTACH_STATE,
	DEPS_ATTACH_FAILED,
	DEPS_ATTACH_POLICY,
	DEPS_ATTACH_QUEUE,
	DEPS_ATTACH_FINAL,			/* a parent's state, canceled or skipped */
	DEPS_ATTACH_NCOLS = DEPS_ATTACH_FINAL
} DepsAttachCol;

static bool deps_attach_routed(Datum *values, char *nulls);

static NtaskPair deps_attach = NTASK_PAIR("dependency attach",
										  NTASK_PLAIN(DEPS_ATTACH_NCOLS,
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
													  DEPS_ATTACH_PLAIN_NARGS, SPI_OK_UPDATE_RETURNING),
										  NTASK_ROUTED(DEPS_ATTACH_NCOLS,
													   "SELECT i.id, i.st, $8, $9, i.q, $10 "
													   "FROM ROWS FROM (pg_catalog.unnest($5), pg_catalog.unnest($6), "
													   "  pg_catalog.unnest($7)) WITH ORDINALITY AS i(id, st, q, n) "
													   "ORDER BY i.n",
													   DEPS_ATTACH_NARGS, SPI_OK_SELECT,
													   deps_attach_routed, NULL),
										  INT8ARRAYOID, INT8ARRAYOID, TEXTOID, INT2OID,
										  INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, BOOLOID, TEXTOID, TEXTOID);


/*
 * A parent's end and the producer's commit on a distributed install run in
 * the triggers on the shard (ntask.task_<id>, ntask.task_dep_<id>), where
 * Citus runs only local work: the statements above, on the relations of the
 * fired shard (DepsRels).  A waiting child has no open attempt, so its end
 * by a parent's is one UPDATE: $1 the child, $2 the state, $3 the reason,
 * $4 now (what NtaskFinishTask writes for a task that is not leased).
 */
typedef enum DepsFinishArg
{
	DEPS_FINISH_ARG_CHILD,		/* $1 */
	DEPS_FINISH_ARG_STATE,		/* $2 */
	DEPS_FINISH_ARG_REASON,		/* $3 */
	DEPS_FINISH_ARG_NOW,		/* $4 */
	DEPS_FINISH_NARGS
} DepsFinishArg;

static NtaskPlan deps_finish_child_plan = {
	"dependency child ends",
	.ncols = 0,
	"UPDATE ntask.task t SET state = $2, reason = $3, due_at = NULL, "
	"  lease_owner = NULL, lease_until = NULL, finished_at = $4, updated_at = $4 "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 AND t.state OPERATOR(pg_catalog.=) 'waiting'",
	DEPS_FINISH_NARGS, {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

/*
 * deps_rels_plan: the relations co-located with the shard $1 (Citus' shard
 * id of a shard of ntask.task or ntask.task_dep): the shards of task and
 * task_dep of its group, and the local placement of the reference table
 * ntask.queue.
 */
typedef enum DepsRelsArg
{
	DEPS_RELS_ARG_SHARD_ID,		/* $1 */
	DEPS_RELS_NARGS
} DepsRelsArg;

typedef enum DepsRelsCol
{
	DEPS_RELS_TABLE = 1,
	DEPS_RELS_SHARD,
	DEPS_RELS_NCOLS = DEPS_RELS_SHARD
} DepsRelsCol;

static NtaskPlan deps_rels_plan = {
	"dependency shard relations",
	.ncols = DEPS_RELS_NCOLS,
	"SELECT c.relname::pg_catalog.text, pg_catalog.shard_name(s2.logicalrelid, s2.shardid) "
	"FROM pg_catalog.pg_dist_shard s1 "
	"JOIN pg_catalog.pg_dist_partition p1 ON p1.logicalrelid OPERATOR(pg_catalog.=) s1.logicalrelid "
	"JOIN pg_catalog.pg_dist_partition p2 ON p2.colocationid OPERATOR(pg_catalog.=) p1.colocationid "
	"JOIN pg_catalog.pg_dist_shard s2 ON s2.logicalrelid OPERATOR(pg_catalog.=) p2.logicalrelid "
	"  AND s2.shardminvalue OPERATOR(pg_catalog.=) s1.shardminvalue "
	"JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) s2.logicalrelid "
	"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
	"WHERE s1.shardid OPERATOR(pg_catalog.=) $1 AND n.nspname OPERATOR(pg_catalog.=) 'ntask' "
	"  AND c.relname OPERATOR(pg_catalog.=) ANY ('{task,task_dep}') "
	"UNION ALL "
	"SELECT 'queue', pg_catalog.shard_name(s.logicalrelid, s.shardid) "
	"FROM pg_catalog.pg_dist_shard s "
	"JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) s.logicalrelid "
	"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
	"WHERE n.nspname OPERATOR(pg_catalog.=) 'ntask' AND c.relname OPERATOR(pg_catalog.=) 'queue'",
	DEPS_RELS_NARGS, {INT8OID}
};

/* the statements a trigger on a shard runs, by DepsRels.plans[] */
typedef enum DepsPlanId
{
	DEPS_P_RELEASE,
	DEPS_P_FAILED,
	DEPS_P_LOCK_PARENTS,
	DEPS_P_SETTLE,
	DEPS_P_FINISH,
	DEPS_NPLANS
} DepsPlanId;

/*
 * The shard relations of one shard group, found once per backend by the
 * name of the relation a trigger fired on (a shard's name is its table's
 * and its shard id: a move back to this node makes a new relation of the
 * same name, which the plans find again by name), and the statements
 * prepared on them, in TopMemoryContext.
 */
typedef struct DepsRels
{
	char		name[NAMEDATALEN];	/* the fired relation's */
	char	   *task;
	char	   *dep;
	char	   *queue;
	NtaskPlan  *plans[DEPS_NPLANS];
	struct DepsRels *next;
} DepsRels;

static DepsRels *deps_rels_list = NULL;

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
 * deps_subst
 *		sql with the names ntask.task, ntask.task_dep and ntask.queue
 *		replaced by r's shard relations (a name followed by a letter, digit
 *		or underscore is another name and stays).
 */
static char *
deps_subst(const char *sql, DepsRels *r)
{
	StringInfoData buf;
	const char *c = sql;

	initStringInfo(&buf);
	while (*c != '\0')
	{
		static const char *const names[3] = {"ntask.task_dep", "ntask.task", "ntask.queue"};
		const char *to[3];
		int			i;
		bool		done = false;

		to[0] = r->dep;
		to[1] = r->task;
		to[2] = r->queue;
		for (i = 0; i < 3 && !done; i++)
		{
			size_t		len = strlen(names[i]);

			if (strncmp(c, names[i], len) == 0 &&
				!(isalnum((unsigned char) c[len]) || c[len] == '_'))
			{
				appendStringInfoString(&buf, to[i]);
				c += len;
				done = true;
			}
		}
		if (!done)
			appendStringInfoChar(&buf, *c++);
	}
	return buf.data;
}

/*
 * deps_rels_for
 *		For a trigger fired on rel: NULL when rel is the table
 *		itself (a plain install: its name is table), else the relations of
 *		the shard group of the shard rel is (a distributed install).
 */
static DepsRels *
deps_rels_for(Relation rel, const char *table)
{
	const char *name = RelationGetRelationName(rel);
	const char *us = strrchr(name, '_');
	DepsRels   *r;
	Datum		v[DEPS_RELS_NARGS];
	int			nrows;
	int			i;
	MemoryContext old;
	SPITupleTable *tt;

	if (strcmp(name, table) == 0)
		return NULL;
	for (r = deps_rels_list; r != NULL; r = r->next)
		if (strcmp(r->name, name) == 0)
			return r;
	if (us == NULL || !isdigit((unsigned char) us[1]))
		elog(ERROR, "ntask: dependency trigger fired on \"%s\", neither %s nor one of its shards",
			 name, table);
	v[DEPS_RELS_ARG_SHARD_ID] = Int64GetDatum(strtoll(us + 1, NULL, 10));
	SPI_connect();
	nrows = NtaskExecPlan(&deps_rels_plan, v, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	old = MemoryContextSwitchTo(TopMemoryContext);
	r = palloc0(sizeof(DepsRels));
	strlcpy(r->name, name, NAMEDATALEN);
	for (i = 0; i < nrows; i++)
	{
		char	   *t = NtaskTupGetCString(tt, i, DEPS_RELS_TABLE);
		char	   *sh = pstrdup(NtaskTupGetCString(tt, i, DEPS_RELS_SHARD));

		if (strcmp(t, "task") == 0)
			r->task = sh;
		else if (strcmp(t, "task_dep") == 0)
			r->dep = sh;
		else if (strcmp(t, "queue") == 0)
			r->queue = sh;
	}
	MemoryContextSwitchTo(old);
	SPI_finish();
	if (r->task == NULL || r->dep == NULL || r->queue == NULL)
		elog(ERROR, "ntask: the shards co-located with \"%s\" were not found (task %s, task_dep %s, queue %s)",
			 name, r->task ? r->task : "-", r->dep ? r->dep : "-", r->queue ? r->queue : "-");
	r->next = deps_rels_list;
	deps_rels_list = r;
	return r;
}

/*
 * deps_plan: tmpl, or its copy on r's shard relations (r not NULL).
 *
 * The copy names the fired shard's group only (the task, task_dep and
 * local queue placement of one shard), so it is a direct statement
 * (shard.h): a call on the direct path whose write fired the trigger
 * holds that group's move interlock already, and may run it (a parent
 * ended there releases or decides its children there; docs/scaling.md
 * "Dependencies on the direct path").  Run from Citus' own execution of
 * a routed write it is the same local statement, planned once.
 */
static NtaskPlan *
deps_plan(DepsRels *r, DepsPlanId id, NtaskPlan *tmpl)
{
	MemoryContext old;
	NtaskPlan  *np;

	if (r == NULL)
		return tmpl;
	if (r->plans[id] != NULL)
		return r->plans[id];
	old = MemoryContextSwitchTo(TopMemoryContext);
	np = palloc(sizeof(NtaskPlan));
	*np = *tmpl;
	np->name = psprintf("%s (shard)", tmpl->name);
	np->sql = deps_subst(tmpl->sql, r);
	np->plan = NULL;
	np->direct = true;
	MemoryContextSwitchTo(old);
	r->plans[id] = np;
	return np;
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
	d->shard = -1;			/* enqueue.c sets it before NtaskDepsResolve */
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

/* deps_found: the task id of (queue, key) among n rows of tt, or -1 */
static int64
deps_found(SPITupleTable *tt, int n, text *queue, text *key, int16 *shard)
{
	int			r;

	for (r = 0; r < n; r++)
		if (deps_text_eq(NtaskTupGetText(tt, r, DEPS_FIND_QUEUE), queue) &&
			deps_text_eq(NtaskTupGetText(tt, r, DEPS_FIND_KEY), key))
		{
			bool		isnull;

			*shard = DatumGetInt16(NtaskTupGetDatum(tt, r, DEPS_FIND_SHARD, &isnull));
			return NtaskTupGetInt64(tt, r, DEPS_FIND_TASK_ID);
		}
	return -1;
}

/* deps_text_array: a text[] Datum of n texts */
static Datum
deps_text_array(text **t, int n)
{
	Datum	   *e = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		e[i] = PointerGetDatum(t[i]);
	return PointerGetDatum(construct_array(e, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * deps_check_layout
 *		On Citus, ntask.task_dep must be distributed with the tasks (as
 *		ntask_distribute of 1.1.0 lays it out): an install distributed by an
 *		earlier version keeps it on the coordinator, without its triggers on
 *		the shards, where no parent's end would reach it (0A000).  Without
 *		Citus (a simulated install, regress distribute) there is nothing to
 *		check.  Read once per backend while it holds.
 */
static void
deps_check_layout(void)
{
	static bool ok = false;
	bool		dist = true;

	if (ok)
		return;
	if (SPI_execute("SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1 &&
		strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "t") == 0)
		dist = SPI_execute("SELECT 1 FROM pg_catalog.pg_dist_partition p "
						   "  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) p.logicalrelid "
						   "  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
						   "  WHERE n.nspname OPERATOR(pg_catalog.=) 'ntask' "
						   "    AND c.relname OPERATOR(pg_catalog.=) 'task_dep'",
						   true, 1) == SPI_OK_SELECT && SPI_processed == 1;
	if (!dist)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ntask: depends_on needs ntask.task_dep distributed with the tasks, and this install was distributed before ntask 1.1.0"),
				 errdetail("ntask_distribute of 1.1.0 distributes it by shard and keeps its triggers on every shard (docs/scaling.md \"Dependencies on a distributed install\")."),
				 errhint("Distribute ntask.task_dep as ntask_distribute does (its key widened by shard, with citus.enable_unsafe_triggers on), or enqueue without depends_on.")));
	ok = true;
}

/* the names the depends_on elements may mean (deps_resolve_routed) */
typedef struct DepsNames
{
	int			n;				/* elements */
	text	  **aq;				/* the element: a key of the child's queue */
	text	  **bq;				/* queue:key split, NULL: no colon */
	text	  **bk;
	int			nc;				/* the (queue, key) pairs to look up */
	text	  **cq;
	text	  **ck;
} DepsNames;

/* deps_split: the names of the n elements of a child of queue */
static void
deps_split(DepsNames *nm, text *queue, Datum *elems, int n)
{
	int			r;

	nm->n = n;
	nm->aq = palloc(sizeof(text *) * Max(n, 1));
	nm->bq = palloc(sizeof(text *) * Max(n, 1));
	nm->bk = palloc(sizeof(text *) * Max(n, 1));
	nm->cq = palloc(sizeof(text *) * Max(n, 1) * 2);
	nm->ck = palloc(sizeof(text *) * Max(n, 1) * 2);
	nm->nc = 0;
	for (r = 0; r < n; r++)
	{
		text	   *e = DatumGetTextPP(elems[r]);
		char	   *ec = text_to_cstring(e);
		char	   *colon = strchr(ec, ':');

		nm->aq[r] = e;
		nm->bq[r] = nm->bk[r] = NULL;
		nm->cq[nm->nc] = queue;
		nm->ck[nm->nc++] = e;
		if (colon != NULL)
		{
			nm->bq[r] = cstring_to_text_with_len(ec, colon - ec);
			nm->bk[r] = cstring_to_text(colon + 1);
			nm->cq[nm->nc] = nm->bq[r];
			nm->ck[nm->nc++] = nm->bk[r];
		}
	}
}

/*
 * deps_lookup
 *		For each element not found yet (id < 0), its task among the n rows
 *		of tt (DepsFindCol's): a key of the child's queue first, then
 *		queue:key.  Returns how many are still not found.
 */
static int
deps_lookup(SPITupleTable *tt, int n, DepsNames *nm, text *queue,
			int64 *id, int16 *where, bool *child_queue)
{
	int			missing = 0;
	int			r;

	for (r = 0; r < nm->n; r++)
	{
		if (id[r] >= 0)
			continue;
		id[r] = deps_found(tt, n, queue, nm->aq[r], &where[r]);
		child_queue[r] = id[r] >= 0;
		if (id[r] < 0 && nm->bq[r] != NULL)
			id[r] = deps_found(tt, n, nm->bq[r], nm->bk[r], &where[r]);
		if (id[r] < 0)
			missing++;
	}
	return missing;
}

/* deps_denied: per queue of rq[0..n-1], whether it refuses caller the producer right */
static bool *
deps_denied(text **rq, int n, Datum caller)
{
	Datum		dv[DEPS_DENIED_NARGS];
	bool	   *out = palloc0(sizeof(bool) * Max(n, 1));
	int			ndenied;
	int			k;
	int			r;

	dv[DEPS_DENIED_ARG_QUEUES] = deps_text_array(rq, n);
	dv[DEPS_DENIED_ARG_CALLER] = caller;
	ndenied = NtaskExecPlan(&deps_denied_dist_plan, dv, NULL, SPI_OK_SELECT);
	for (k = 0; k < ndenied; k++)
	{
		text	   *q = NtaskTupGetText(SPI_tuptable, k, DEPS_DENIED_QUEUE);

		for (r = 0; r < n; r++)
			out[r] = out[r] || deps_text_eq(q, rq[r]);
	}
	return out;
}

/* deps_array: a one-dimensional array of n values of type (isnull may be NULL) */
static Datum
deps_array(Datum *v, bool *isnull, int n, Oid type)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int16		len;
	bool		byval;
	char		align;

	get_typlenbyvalalign(type, &len, &byval, &align);
	return PointerGetDatum(construct_md_array(v, isnull, 1, dims, lbs, type, len, byval, align));
}

/*
 * deps_resolve_answer
 *		deps_resolve's routed answer in values, per element: its task (NULL:
 *		none), the queue and key it names, whether that queue refuses the
 *		caller, and the task's shard when it is not the child's shard.
 */
static void
deps_resolve_answer(Datum *values, char *nulls, DepsNames *nm, text *queue,
					int64 *id, int16 *where, bool *child_queue)
{
	int			n = nm->n;
	int16		shard = DatumGetInt16(values[DEPS_RESOLVE_ARG_SHARD]);
	text	  **rq = palloc(sizeof(text *) * Max(n, 1));
	text	  **rk = palloc(sizeof(text *) * Max(n, 1));
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *idnull = palloc(sizeof(bool) * Max(n, 1));
	Datum	   *other = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *samenull = palloc(sizeof(bool) * Max(n, 1));
	Datum	   *dn = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *denied;
	int			r;

	for (r = 0; r < n; r++)
	{
		bool		own = child_queue[r] || nm->bq[r] == NULL;

		rq[r] = own ? queue : nm->bq[r];
		rk[r] = own ? nm->aq[r] : nm->bk[r];
		ids[r] = Int64GetDatum(id[r]);
		idnull[r] = id[r] < 0;
		other[r] = Int16GetDatum(where[r]);
		samenull[r] = id[r] < 0 || where[r] == shard;
	}
	denied = deps_denied(rq, n, values[DEPS_RESOLVE_ARG_CALLER]);
	for (r = 0; r < n; r++)
		dn[r] = BoolGetDatum(denied[r]);
	values[DEPS_RESOLVE_ARG_IDS] = deps_array(ids, idnull, n, INT8OID);
	values[DEPS_RESOLVE_ARG_QUEUES] = deps_text_array(rq, n);
	values[DEPS_RESOLVE_ARG_KEYS] = deps_text_array(rk, n);
	values[DEPS_RESOLVE_ARG_DENIED] = deps_array(dn, NULL, n, BOOLOID);
	values[DEPS_RESOLVE_ARG_ELSEWHERE] = deps_array(other, samenull, n, INT2OID);
	memset(&nulls[DEPS_RESOLVE_ARG_IDS], ' ', DEPS_RESOLVE_NARGS - DEPS_RESOLVE_ARG_IDS);
}

/*
 * deps_resolve_routed
 *		deps_resolve's routed before step: the parents are looked up in the
 *		child's shard, a key of the child's queue first, then queue:key, as
 *		on one node; a name the shard lacks is looked up in every shard, to
 *		tell one in another shard (refused, 0A000, by NtaskDepsResolve) from
 *		none (22023); then the queues that refuse the caller.
 */
static bool
deps_resolve_routed(Datum *values, char *nulls)
{
	text	   *queue = DatumGetTextPP(values[DEPS_RESOLVE_ARG_QUEUE]);
	DepsNames	nm;
	Datum	   *elems;
	int			n;
	int64	   *id;
	int16	   *where;
	bool	   *child_queue;
	Datum		fv[DEPS_FIND_NARGS];
	int			nrows;
	int			r;

	if (DatumGetInt16(values[DEPS_RESOLVE_ARG_SHARD]) < 0)
		elog(ERROR, "ntask: depends_on without the child's shard");
	deps_check_layout();
	deconstruct_array(DatumGetArrayTypeP(values[DEPS_RESOLVE_ARG_ELEMS]), TEXTOID, -1, false,
					  TYPALIGN_INT, &elems, NULL, &n);
	deps_split(&nm, queue, elems, n);
	id = palloc(sizeof(int64) * Max(n, 1));
	where = palloc0(sizeof(int16) * Max(n, 1));
	child_queue = palloc0(sizeof(bool) * Max(n, 1));
	for (r = 0; r < n; r++)
		id[r] = -1;

	fv[DEPS_FIND_ARG_SHARD] = values[DEPS_RESOLVE_ARG_SHARD];
	fv[DEPS_FIND_ARG_QUEUES] = deps_text_array(nm.cq, nm.nc);
	fv[DEPS_FIND_ARG_KEYS] = deps_text_array(nm.ck, nm.nc);
	nrows = NtaskExecPlan(&deps_find_dist_plan, fv, NULL, SPI_OK_SELECT);
	if (deps_lookup(SPI_tuptable, nrows, &nm, queue, id, where, child_queue) > 0)
	{
		/* deps_find_any_plan takes the same values without the shard */
		nrows = NtaskExecPlan(&deps_find_any_plan, &fv[DEPS_FIND_ARG_QUEUES], NULL,
							  SPI_OK_SELECT);
		(void) deps_lookup(SPI_tuptable, nrows, &nm, queue, id, where, child_queue);
	}
	deps_resolve_answer(values, nulls, &nm, queue, id, where, child_queue);
	return true;
}

/*
 * deps_check_parent
 *		Row r of deps_resolve's answer: the task it names, else the error,
 *		in the order of one node's: the producer right (42501), the child
 *		itself, the parent's existence (22023), then, on a distributed
 *		install, a parent in another shard than the child's (0A000).
 */
static Datum
deps_check_parent(SPITupleTable *tt, int r, NtaskDeps *d, text *queue,
				  text **keys, int nkeys)
{
	text	   *rq = NtaskTupGetText(tt, r, DEPS_RESOLVE_QUEUE);
	text	   *rk = NtaskTupGetText(tt, r, DEPS_RESOLVE_KEY);
	bool		isnull;
	bool		same;
	Datum		id;
	Datum		other;
	int			k;

	if (NtaskTupGetBool(tt, r, DEPS_RESOLVE_DENIED))
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
	id = NtaskTupGetDatum(tt, r, DEPS_RESOLVE_TASK_ID, &isnull);
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
	other = NtaskTupGetDatum(tt, r, DEPS_RESOLVE_ELSEWHERE, &same);
	if (!same)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ntask: on a distributed install a task can depend only on tasks of its own shard, and parent %s:%s is in shard %d, the task in shard %d",
						text_to_cstring(rq), text_to_cstring(rk),
						(int) DatumGetInt16(other), (int) d->shard),
				 errdetail("A task, its parents and their dependency rows live in one shard, so that a parent's end decides its children in its own transaction (docs/scaling.md \"Dependencies on a distributed install\")."),
				 errhint("Enqueue the task with a partition key for which ntask_shard(queue, key) is its parents' shard: the parents' partition key, when they are of the task's queue.")));
	return id;
}

/*
 * NtaskDepsResolve
 *		Inside the caller's SPI connection: resolve d's elements to tasks,
 *		for a child of queue whose keys are keys[0..nkeys-1] (in shard
 *		d->shard).  42501 when a parent's queue refuses the caller the
 *		producer right (checked before existence, so nothing is revealed),
 *		22023 for a parent that does not exist, for the child itself, or a
 *		parent named twice; 0A000 for a parent in another shard.  Fills
 *		d->ids (sorted).
 */
void
NtaskDepsResolve(NtaskDeps *d, text *queue, text **keys, int nkeys)
{
	Datum		values[DEPS_RESOLVE_NARGS];
	char		nulls[DEPS_RESOLVE_NARGS];
	int			nrows;
	int			r;
	SPITupleTable *tt;

	memset(nulls, ' ', sizeof(nulls));
	values[DEPS_RESOLVE_ARG_QUEUE] = PointerGetDatum(queue);
	values[DEPS_RESOLVE_ARG_ELEMS] = d->array;
	values[DEPS_RESOLVE_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	values[DEPS_RESOLVE_ARG_SHARD] = Int16GetDatum(d->shard);
	nrows = NtaskExecPair(&deps_resolve, values, nulls);
	tt = SPI_tuptable;
	if (nrows != d->n)
		elog(ERROR, "ntask: depends_on resolved %d of %d elements", nrows, d->n);
	d->ids = palloc(sizeof(Datum) * d->n);
	for (r = 0; r < nrows; r++)
		d->ids[r] = deps_check_parent(tt, r, d, queue, keys, nkeys);
	qsort(d->ids, d->n, sizeof(Datum), deps_id_cmp);
	for (r = 1; r < d->n; r++)
		if (DatumGetInt64(d->ids[r]) == DatumGetInt64(d->ids[r - 1]))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: depends_on names task %lld twice",
							(long long) DatumGetInt64(d->ids[r]))));
}

/*
 * deps_finish_child
 *		On a shard (a trigger's, r): a waiting child ends by its parent's
 *		end, state to with reason.  No audit row: the audit is hashed by
 *		its id onto any node, and a trigger on a shard writes only its own
 *		node's (docs/scaling.md "Dependencies on a distributed install");
 *		the child keeps the reason.
 */
static void
deps_finish_child(DepsRels *r, int64 child, const char *to, const char *reason)
{
	Datum		v[DEPS_FINISH_NARGS];

	v[DEPS_FINISH_ARG_CHILD] = Int64GetDatum(child);
	v[DEPS_FINISH_ARG_STATE] = CStringGetTextDatum(to);
	v[DEPS_FINISH_ARG_REASON] = CStringGetTextDatum(reason);
	v[DEPS_FINISH_ARG_NOW] = NtaskStatementTs();
	(void) NtaskExecPlan(deps_plan(r, DEPS_P_FINISH, &deps_finish_child_plan), v, NULL,
						 SPI_OK_UPDATE);
}

/*
 * deps_cancel_child
 *		Cancel a waiting child whose parent failed (reason parent_failed),
 *		audited.  The caller holds its row lock.
 */
static void
deps_cancel_child(DepsRels *r, int64 child, const char *queue, const char *why)
{
	if (r != NULL)
	{
		deps_finish_child(r, child, "canceled", "parent_failed");
		return;
	}
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
deps_repair_child(DepsRels *r, int64 child, const char *queue, const char *pstate, const char *why)
{
	const char *reason = strcmp(pstate, "skipped") == 0 ? "parent_skipped" : "parent_canceled";

	if (r != NULL)
	{
		deps_finish_child(r, child, "repair_required", reason);
		return;
	}
	NtaskFinishTask(child, "repair_required", reason, "repair_required", NULL, NULL);
	NtaskAudit("ntask", "repair", child, queue,
			   psprintf("%s: %s", reason, why), "waiting", "repair_required");
}

/*
 * deps_attach_parents
 *		The routed attach's first steps: the parents' states as read now
 *		(the settle reads them again): how many have not succeeded, whether
 *		one has failed, the first canceled or skipped one's state (NULL:
 *		none); then the dependency rows of the n children ids, in the shard.
 */
static int
deps_attach_parents(Datum parents, int16 shard, Datum *ids, int n,
					bool *failed, char **final)
{
	Datum		pv[DEPS_PARENTS_NARGS];
	Datum		rv[DEPS_ROW_NARGS];
	Datum	   *pids;
	int			np;
	int			left = 0;
	int			nrows;
	int			r;
	int			i;

	pv[DEPS_PARENTS_ARG_IDS] = parents;
	pv[DEPS_PARENTS_ARG_SHARD] = Int16GetDatum(shard);
	nrows = NtaskExecPlan(&deps_parents_dist_plan, pv, NULL, SPI_OK_SELECT);
	for (r = 0; r < nrows; r++)
	{
		char	   *st = NtaskTupGetCString(SPI_tuptable, r, DEPS_PARENTS_STATE);

		if (strcmp(st, "succeeded") != 0)
			left++;
		if (strcmp(st, "repair_required") == 0 || strcmp(st, "canceled") == 0 ||
			strcmp(st, "skipped") == 0)
			*failed = true;
		if (*final == NULL && (strcmp(st, "canceled") == 0 || strcmp(st, "skipped") == 0))
			*final = st;
	}

	deconstruct_array(DatumGetArrayTypeP(parents), INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &pids, NULL, &np);
	for (i = 0; i < n; i++)
		for (r = 0; r < np; r++)
		{
			rv[DEPS_ROW_ARG_CHILD] = ids[i];
			rv[DEPS_ROW_ARG_PARENT] = pids[r];
			rv[DEPS_ROW_ARG_SHARD] = Int16GetDatum(shard);
			(void) NtaskExecPlan(&deps_row_dist_plan, rv, NULL, SPI_OK_INSERT);
		}
	return left;
}

/*
 * deps_children_in
 *		The children of the int8[] children, every one in the parents'
 *		shard (else 0A000: the children of one ntask_enqueue_many in
 *		several shards); their number in *n.
 */
static Datum *
deps_children_in(Datum children, int16 shard, int *n)
{
	Datum	   *ids;
	int			i;

	deconstruct_array(DatumGetArrayTypeP(children), INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &ids, NULL, n);
	for (i = 0; i < *n; i++)
		if (NTASK_ID_SHARD(DatumGetInt64(ids[i])) != shard)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("ntask: on a distributed install a task can depend only on tasks of its own shard, and task %lld of this call is in shard %d, its parents in shard %d",
							(long long) DatumGetInt64(ids[i]),
							(int) NTASK_ID_SHARD(DatumGetInt64(ids[i])), (int) shard),
					 errdetail("A task, its parents and their dependency rows live in one shard (docs/scaling.md \"Dependencies on a distributed install\")."),
					 errhint("Give the tasks of the call partition keys for which ntask_shard(queue, key) is their parents' shard.")));
	return ids;
}

/*
 * deps_attach_routed
 *		deps_attach's routed before step: every child in the parents'
 *		shard (deps_children_in), then the plain statement's steps as routed
 *		statements: the parents' states, the dependency rows, the
 *		children's waiting state and their policy.  false: no child.
 */
static bool
deps_attach_routed(Datum *values, char *nulls)
{
	int16		shard = DatumGetInt16(values[DEPS_ATTACH_ARG_SHARD]);
	Datum		cv[DEPS_CHILDREN_NARGS];
	char		cn[DEPS_CHILDREN_NARGS] = {' ', ' ', ' ', ' '};
	Datum		qv[DEPS_POLICY_NARGS];
	char		qn[DEPS_POLICY_NARGS] = {' ', ' '};
	Datum	   *ids;
	Datum	   *st;
	Datum	   *qs;
	int			n;
	int			nrows;
	bool		failed = false;
	char	   *final = NULL;
	bool		isnull;
	int			i;
	SPITupleTable *tt;

	ids = deps_children_in(values[DEPS_ATTACH_ARG_CHILDREN], shard, &n);

	/* the children: waiting while a parent has not succeeded */
	cv[DEPS_CHILDREN_ARG_LEFT] =
		Int32GetDatum(deps_attach_parents(values[DEPS_ATTACH_ARG_PARENTS], shard, ids, n,
										  &failed, &final));
	cv[DEPS_CHILDREN_ARG_IDS] = values[DEPS_ATTACH_ARG_CHILDREN];
	cv[DEPS_CHILDREN_ARG_SHARD] = Int16GetDatum(shard);
	cv[DEPS_CHILDREN_ARG_POLICY] = values[DEPS_ATTACH_ARG_POLICY];
	cn[DEPS_CHILDREN_ARG_POLICY] = nulls[DEPS_ATTACH_ARG_POLICY];
	nrows = NtaskExecPlan(&deps_children_dist_plan, cv, cn, SPI_OK_UPDATE_RETURNING);
	if (nrows == 0)
		return false;
	tt = SPI_tuptable;
	qv[DEPS_POLICY_ARG_QUEUE] = NtaskTupGetDatum(tt, 0, DEPS_CHILDREN_QUEUE, &isnull);
	qv[DEPS_POLICY_ARG_POLICY] = cv[DEPS_CHILDREN_ARG_POLICY];
	qn[DEPS_POLICY_ARG_POLICY] = cn[DEPS_CHILDREN_ARG_POLICY];
	if (NtaskExecPlan(&deps_policy_dist_plan, qv, qn, SPI_OK_SELECT) != 1)
		elog(ERROR, "ntask: the queue of a new task is gone");

	memset(&nulls[DEPS_ATTACH_ARG_IDS], ' ', DEPS_ATTACH_NARGS - DEPS_ATTACH_ARG_IDS);
	values[DEPS_ATTACH_ARG_CHILD_POLICY] =
		PointerGetDatum(NtaskTupGetText(SPI_tuptable, 0, DEPS_POLICY_POLICY));
	values[DEPS_ATTACH_ARG_FAILED] = BoolGetDatum(failed);
	values[DEPS_ATTACH_ARG_FINAL] = final ? CStringGetTextDatum(final) : (Datum) 0;
	nulls[DEPS_ATTACH_ARG_FINAL] = final ? ' ' : 'n';
	ids = palloc(sizeof(Datum) * nrows);
	st = palloc(sizeof(Datum) * nrows);
	qs = palloc(sizeof(Datum) * nrows);
	for (i = 0; i < nrows; i++)
	{
		ids[i] = NtaskTupGetDatum(tt, i, DEPS_CHILDREN_TASK_ID, &isnull);
		st[i] = PointerGetDatum(NtaskTupGetText(tt, i, DEPS_CHILDREN_STATE));
		qs[i] = PointerGetDatum(NtaskTupGetText(tt, i, DEPS_CHILDREN_QUEUE));
	}
	values[DEPS_ATTACH_ARG_IDS] = deps_array(ids, NULL, nrows, INT8OID);
	values[DEPS_ATTACH_ARG_STATES] = deps_array(st, NULL, nrows, TEXTOID);
	values[DEPS_ATTACH_ARG_QUEUES] = deps_array(qs, NULL, nrows, TEXTOID);
	return true;
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
	Datum		values[DEPS_ATTACH_NARGS];
	char		nulls[DEPS_ATTACH_NARGS];
	int			nrows;
	int			r;
	int			i;
	SPITupleTable *tt;

	if (n == 0)
		return;
	memset(nulls, ' ', sizeof(nulls));
	values[DEPS_ATTACH_ARG_PARENTS] = NtaskInt8Array(d->ids, d->n);
	values[DEPS_ATTACH_ARG_CHILDREN] = NtaskInt8Array(ids, n);
	values[DEPS_ATTACH_ARG_POLICY] = d->policy ? PointerGetDatum(d->policy) : (Datum) 0;
	nulls[DEPS_ATTACH_ARG_POLICY] = d->policy ? ' ' : 'n';
	values[DEPS_ATTACH_ARG_SHARD] = Int16GetDatum(d->shard);
	nrows = NtaskExecPair(&deps_attach, values, nulls);
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
			deps_cancel_child(NULL, child, queue, "a parent had failed when it was enqueued");
			state = "canceled";
		}
		else if (strcmp(state, "waiting") == 0 && NtaskTupGetText(tt, r, DEPS_ATTACH_FINAL) != NULL)
		{
			deps_repair_child(NULL, child, queue, NtaskTupGetCString(tt, r, DEPS_ATTACH_FINAL),
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
deps_wake_ready(DepsRels *rels, const char *queue, bool http, bool notify)
{
	NtaskWakeWaitersAtCommit(queue, 1, 0);
	if (http)
		NtaskWakeWorkerAtCommit();

	/*
	 * Not on a shard (rels): a transaction that wrote on several nodes
	 * prepares there, and PREPARE TRANSACTION refuses one that notified
	 */
	if (notify && rels == NULL)
		Async_Notify(psprintf("ntask_%s", queue), NULL);
}

/*
 * deps_release
 *		The parent succeeded: count its waiting children down; wake the
 *		claims (and the worker, NOTIFY) of the queues of those made ready.
 */
static void
deps_release(DepsRels *rels, int64 parent)
{
	Datum		values[DEPS_RELEASE_NARGS];
	int			nrows;
	int			r;
	SPITupleTable *tt;

	values[DEPS_RELEASE_ARG_PARENT] = Int64GetDatum(parent);
	values[DEPS_RELEASE_ARG_NOW] = NtaskStatementTs();
	nrows = NtaskExecPlan(deps_plan(rels, DEPS_P_RELEASE, &deps_release_plan), values, NULL,
						  SPI_OK_UPDATE_RETURNING);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		char	   *queue;

		if (!NtaskTupGetBool(tt, r, DEPS_RELEASE_READY))
			continue;
		queue = NtaskTupGetCString(tt, r, DEPS_RELEASE_QUEUE);
		deps_wake_ready(rels, queue, NtaskTupGetBool(tt, r, DEPS_RELEASE_HTTP),
						NtaskTupGetBool(tt, r, DEPS_RELEASE_NOTIFY));
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
deps_failed(DepsRels *rels, int64 parent, const char *pqueue, const char *pkey,
			const char *state)
{
	Datum		values[DEPS_FAILED_NARGS];
	int			nrows;
	int			r;
	SPITupleTable *tt;
	bool		final = strcmp(state, "repair_required") != 0;
	char	   *why = psprintf("parent %s:%s ended %s", pqueue, pkey, state);

	values[DEPS_FAILED_ARG_PARENT] = Int64GetDatum(parent);
	nrows = NtaskExecPlan(deps_plan(rels, DEPS_P_FAILED, &deps_failed_plan), values, NULL,
						  SPI_OK_SELECT);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		int64		child;
		char	   *queue;

		child = NtaskTupGetInt64(tt, r, DEPS_FAILED_TASK_ID);
		queue = NtaskTupGetCString(tt, r, DEPS_FAILED_QUEUE);
		if (strcmp(NtaskTupGetCString(tt, r, DEPS_FAILED_POLICY), "cancel") == 0)
			deps_cancel_child(rels, child, queue, why);
		else if (final)
			deps_repair_child(rels, child, queue, state, why);
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
	DepsRels   *rels;			/* its shard's relations; NULL: one node */
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
deps_queue(DepsRels *rels, int64 task_id, const char *queue, const char *key, const char *state)
{
	MemoryContext old = MemoryContextSwitchTo(deps_cxt);
	DepsFailedParent *f = palloc(sizeof(DepsFailedParent));

	f->rels = rels;
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
deps_cascade(DepsRels *rels, int64 task_id, const char *queue, const char *key, const char *state)
{
	deps_cxt = AllocSetContextCreate(TopTransactionContext, "ntask dependency cascade",
									 ALLOCSET_DEFAULT_SIZES);
	deps_pending = NIL;
	deps_next = 0;
	deps_cascading = true;
	PG_TRY();
	{
		deps_queue(rels, task_id, queue, key, state);
		while (deps_next < list_length(deps_pending))
		{
			DepsFailedParent *f = (DepsFailedParent *) list_nth(deps_pending, deps_next++);

			CHECK_FOR_INTERRUPTS();
			SPI_connect();
			deps_failed(f->rels, f->task_id, f->queue, f->key, f->state);
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
		deps_release(deps_rels_for(td->tg_relation, "task"), task_id);
		SPI_finish();
	}
	else if (strcmp(state, "repair_required") == 0 || strcmp(state, "canceled") == 0 ||
			 strcmp(state, "skipped") == 0)
	{
		char	   *queue = TextDatumGetCString(deps_attr(td, td->tg_newtuple, "queue", &isnull));
		char	   *key = TextDatumGetCString(deps_attr(td, td->tg_newtuple, "task_key", &isnull));
		DepsRels   *rels;

		rels = deps_rels_for(td->tg_relation, "task");
		if (deps_cascading)
			deps_queue(rels, task_id, queue, key, state);
		else
			deps_cascade(rels, task_id, queue, key, state);
	}
	return PointerGetDatum(NULL);
}

/*
 * deps_settle
 *		At the producer's commit: settle the children ids (bigint[]) that
 *		are still waiting (see the file header): every child this
 *		transaction attached, or on a shard (rels) the child of the
 *		dependency row the trigger fired for.
 */
static void
deps_settle(DepsRels *rels, Datum ids)
{
	Datum		values[DEPS_SETTLE_NARGS];
	int			nrows;
	int			r;
	SPITupleTable *tt;

	values[DEPS_SETTLE_ARG_CHILDREN] = ids;
	values[DEPS_SETTLE_ARG_NOW] = NtaskStatementTs();
	(void) NtaskExecPlan(deps_plan(rels, DEPS_P_LOCK_PARENTS, &deps_lock_parents_plan),
						 values, NULL, SPI_OK_UPDATE);
	nrows = NtaskExecPlan(deps_plan(rels, DEPS_P_SETTLE, &deps_settle_plan), values, NULL,
						  SPI_OK_UPDATE_RETURNING);
	tt = SPI_tuptable;
	for (r = 0; r < nrows; r++)
	{
		int64		child;
		char	   *queue;

		child = NtaskTupGetInt64(tt, r, DEPS_SETTLE_TASK_ID);
		queue = NtaskTupGetCString(tt, r, DEPS_SETTLE_QUEUE);
		if (NtaskTupGetBool(tt, r, DEPS_SETTLE_READY))
		{
			deps_wake_ready(rels, queue, NtaskTupGetBool(tt, r, DEPS_SETTLE_HTTP),
							NtaskTupGetBool(tt, r, DEPS_SETTLE_NOTIFY));
			continue;
		}
		if (!NtaskTupGetBool(tt, r, DEPS_SETTLE_FAILED))
			continue;
		if (strcmp(NtaskTupGetCString(tt, r, DEPS_SETTLE_POLICY), "cancel") == 0)
			deps_cancel_child(rels, child, queue,
							  psprintf("parent %s", NtaskTupGetCString(tt, r, DEPS_SETTLE_WHY)));
		else if (NtaskTupGetBool(tt, r, DEPS_SETTLE_FINAL))
			deps_repair_child(rels, child, queue, NtaskTupGetCString(tt, r, DEPS_SETTLE_FINAL_STATE),
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
	DepsRels   *rels;
	bool		isnull;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_INSERT(td->tg_event))
		elog(ERROR, "ntask: task_dep_settle must be an AFTER INSERT row trigger");
	rels = deps_rels_for(td->tg_relation, "task_dep");
	if (rels != NULL)
	{
		/*
		 * On a shard: this commit is the shard node's, maybe not the
		 * enqueuing backend's (a routed insert), so settle this row's child.
		 * A child of k parents is settled k times; the second finds it
		 * settled (counts the same, or no longer waiting).
		 */
		Datum		child = deps_attr(td, td->tg_trigtuple, "task_id", &isnull);

		SPI_connect();
		deps_settle(rels, NtaskInt8Array(&child, 1));
		SPI_finish();
	}
	else if (deps_settle_n > 0)
	{
		Datum	   *ids = palloc(sizeof(Datum) * deps_settle_n);
		int			i;

		for (i = 0; i < deps_settle_n; i++)
			ids[i] = Int64GetDatum(deps_settle_ids[i]);
		i = deps_settle_n;
		deps_settle_n = 0;		/* a later event of this commit has nothing to do */
		SPI_connect();
		deps_settle(NULL, NtaskInt8Array(ids, i));
		SPI_finish();
	}
	return PointerGetDatum(NULL);
}
