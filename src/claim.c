/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  The claim (NtaskClaimInto): hand out due tasks under a lease with a
 *	  new fencing token.  ntask_claim's entry point and the waiting claim
 *	  are wait.c's; transition-and-claim is transition.c's.
 *
 * One round of a claim is at most three statements, each simple enough
 * that its generic plan cannot go wrong (no joins: every row is reached by
 * primary key or by the ready-set index):
 *
 *	pick	per priority, highest first (a loose index scan), SELECT ...
 *			WHERE queue = $1 AND priority = p AND due_at <= now()
 *			ORDER BY due_at, task_id LIMIT 1000 FOR UPDATE SKIP LOCKED
 *			(task_due_idx; finished rows are not in that index), executed
 *			with an SPI row count of n: only the n rows returned are locked,
 *			and the constant LIMIT keeps the generic plan an index scan
 *	close	only when a picked task was leased (its lease expired): write
 *			the ledger row of that attempt from the task row (result
 *			lease_expired; outcome known only if it was never invoked)
 *	lease	UPDATE ... WHERE task_id = ANY($ids): leased, a new token (NtaskTokenNext),
 *			attempts + 1, lease_until = due_at = now() + lease; or
 *			repair_required when the budget (attempts >= max_attempts) or the
 *			deadline is spent; the new attempt lives on the task row
 *			(claimed_at, invoked_at) until it ends, when its ntask.attempt
 *			row is written once (write-once ledger, docs/design.md)
 *
 * A fair queue (fairness = 'partition', docs/design.md "Fairness") picks
 * differently: round robin over its partition keys from a cursor (fair.c),
 * one loose index scan of task_partition_due_idx, the due tasks of each key
 * in turn (claim_pick).  The plain pick finds nothing there, and its empty
 * first round asks for the fairness in the statement that checks the
 * queue and the right, so a queue without fairness runs what it ran
 * before.
 *
 * With a guard, the guard runs for each picked task between pick and lease;
 * skip/cancel answers finish the task with the guard's reason.  Tasks
 * diverted to repair or finished by the guard are not handed out; the claim
 * then looks again for the remaining slots (at most CLAIM_MAX_ROUNDS).
 *
 * Locks: row locks on the picked task rows (never waits for them: SKIP
 * LOCKED; a fair pick also tries, never waits for, a turn lock
 * per key it serves), then the open attempt rows of taken-over tasks, held until the
 * caller's short transaction commits.  Never call this in a transaction
 * that then does the work.  Refused (25000) under REPEATABLE READ and
 * SERIALIZABLE: the in-flight counts of caps need a statement snapshot.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/claim.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "context.h"
#include "fair.h"
#include "guard.h"
#include "limit.h"
#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "spi_util.h"
#include "wake.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common/pg_prng.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"


/*
 * Columns CLAIM_PICK_MAX_INFLIGHT..CLAIM_PICK_RETRY_SHARE of every pick:
 * the queue's flow control (docs/design.md "Flow control"; the rate
 * intervals in microseconds).  When any is set,
 * claim_limit decides which of the picked tasks may go; they come with the
 * pick so that a limited claim reads the queue row once, in the pick.
 */
#define CLAIM_POLICY \
	"q.max_inflight, q.partition_max_inflight, q.ordered, q.rate_n, " \
	"(pg_catalog.date_part('epoch', q.rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, " \
	"q.partition_rate_n, " \
	"(pg_catalog.date_part('epoch', q.partition_rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, " \
	"q.retry_share"

/*
 * The queue's cap lock (max_inflight), taken by every pick of a queue with
 * a cap: a transaction-level lock only ntask can take (claim_lock.c: no
 * other role can hold it to stall the queue), only tried, held to commit
 * by the claim that holds it.  A pick that does not get it picks nothing
 * (the test is on the queue row, before any task is looked at; a queue
 * without a cap never calls it).  The in-flight count claim_limit reads
 * after the pick, in a new snapshot, is then exact: no other claim can
 * lease a task of the queue meanwhile.  Its argument is the queue row's
 * column, not $1, so that no planner (Citus' coordinator evaluation of
 * a routed statement included) can call it once for the statement.
 */
#define CLAIM_CAP_LOCK \
	"(q.max_inflight IS NULL OR ntask.claim_cap_lock(q.queue))"

/*
 * A paused queue (ntask_queue_pause, or a rate limit's paused_until)
 * hands out nothing: every pick tests the queue row it reads
 * anyway, before any task is looked at, so an unpaused queue pays two NULL
 * tests.  CLAIM_KEYS_FREE: no key of the queue is paused now; the
 * plain pick finds nothing while some key is, and the claim then runs
 * claim_pick_keys_plan, which passes the paused keys by (so only a queue
 * with a live key pause runs it).
 */
#define CLAIM_RUNNING \
	"q.paused_at IS NULL AND (q.paused_until IS NULL " \
	"  OR q.paused_until OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp())"
#define CLAIM_KEYS_FREE \
	"(q.keys_paused_until IS NULL " \
	"  OR q.keys_paused_until OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp())"

/*
 * The queue's lease and guard come along with every picked row.
 *
 * Priorities are walked one at a time, highest first (a loose index scan:
 * each step is one descent of task_priority_idx to the next lower priority
 * other than 0 that has unfinished tasks; 0 is tried in its place without
 * a lookup, NTASK_PRIORITY_WALK), and within a priority the due rows are a
 * range of task_due_idx.  A single ORDER BY priority DESC, due_at
 * scan would walk every not-yet-due entry of a higher priority (tasks
 * scheduled for later, retries in backoff) on every claim: 20k future tasks
 * at priority 5 made a claim of priority-0 work 7x slower (pgbench,
 * prepared, 4 clients); this form costs the same as that scan when there is
 * one priority.  The executor is stopped after the rows wanted, so later
 * priorities are not even looked up when the first one fills the claim.
 * Rows come out in pr order (a nested loop over the CTE).
 */
#define CLAIM_PICK(pred, limit, qpred) \
	NTASK_PRIORITY_WALK_ON(pred) \
	"SELECT x.task_id, x.was_leased, x.task_key, x.payload, q.lease, q.guard, " \
	"  " CLAIM_POLICY ", x.retry, x.token " \
	"FROM ntask.queue q, pr, LATERAL ( " \
	"  SELECT t.task_id, t.state OPERATOR(pg_catalog.=) 'leased' AS was_leased, " \
	"    t.task_key, t.payload, t.attempts OPERATOR(pg_catalog.>) 0 AS retry, t.token " \
	"  FROM ntask.task t " \
	"  WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"    AND t.priority OPERATOR(pg_catalog.=) pr.p " \
	"    AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() " \
	"    AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) " \
	"  ORDER BY t.due_at, t.task_id " \
	"  LIMIT " limit " FOR UPDATE OF t SKIP LOCKED) x " \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 AND pr.p IS NOT NULL " \
	"  AND q.fairness OPERATOR(pg_catalog.=) 'none' AND q.priority_aging IS NULL " \
	"  AND " CLAIM_RUNNING qpred \
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK

static NtaskPlan claim_pick_plan = {
	"claim pick",
	.ncols = 16,
	CLAIM_PICK("", CppAsString2(NTASK_MAX_CLAIM), " AND " CLAIM_KEYS_FREE),
	3, {TEXTOID, OIDOID, BOOLOID}
};

/*
 * The plain pick of a queue with paused keys: the same, but
 * a task whose key is in $4 (the keys paused now, claim_read_mode) is
 * passed by.  Only a queue whose row says a key pause is live runs it.
 */
static NtaskPlan claim_pick_keys_plan = {
	"claim pick (keys paused)",
	.ncols = 16,
	CLAIM_PICK(" AND (t.partition_key IS NULL "
			   "  OR t.partition_key OPERATOR(pg_catalog.<>) ALL ($4)) ",
			   CppAsString2(NTASK_MAX_CLAIM), ""),
	4, {TEXTOID, OIDOID, BOOLOID, TEXTARRAYOID}
};

/*
 * The pick of a distributed install (docs/scaling.md "Claims across
 * shards"): the same within shard $4, one router statement, with the
 * claim's own count as the LIMIT: the worker runs the statement whole (the
 * executor's stop after n rows does not reach it), so the constant LIMIT
 * would lock up to that many rows there until the claim commits, and
 * every concurrent claim would find the shard taken (measured: 68 instead
 * of hundreds of claims/s, bench/citus).
 */
static NtaskPlan claim_pick_shard_plan = {
	"claim pick (one shard)",
	.ncols = 16,
	CLAIM_PICK(" AND t.shard OPERATOR(pg_catalog.=) $4 ", "$5", " AND " CLAIM_KEYS_FREE),
	5, {TEXTOID, OIDOID, BOOLOID, INT2OID, INT4OID}
};

/* the same with keys paused: as claim_pick_keys_plan, the keys in $6 */
static NtaskPlan claim_pick_shard_keys_plan = {
	"claim pick (one shard, keys paused)",
	.ncols = 16,
	CLAIM_PICK(" AND t.shard OPERATOR(pg_catalog.=) $4 "
			   " AND (t.partition_key IS NULL "
			   "  OR t.partition_key OPERATOR(pg_catalog.<>) ALL ($6)) ", "$5", ""),
	6, {TEXTOID, OIDOID, BOOLOID, INT2OID, INT4OID, TEXTARRAYOID}
};

/*
 * The pick of a queue with priority aging (priority_aging, docs/design.md
 * "Priority aging"); the plain pick finds nothing there (q.priority_aging IS
 * NULL), and its empty first round reads the queue's mode, as for a fair
 * queue, so a queue without aging runs the statements it ran before; the
 * backend then remembers the queue and runs this pick first for it
 * (claim_aging_queue).
 *
 * A task's effective priority is its priority plus one per priority_aging
 * it has waited since its due_at, at most priority_aging_max (NULL: the
 * highest priority among the levels with due work), never less than its
 * priority; ties go to the earlier due_at, then the lower task id.  Within
 * one level the effective priority never rises along task_due_idx's order
 * (due_at, task_id), so the best n tasks of the queue are among the first n
 * of each level: h reads, for each priority of the walk (pr, one descent of
 * task_priority_idx per level), the first $4 due tasks of the level in
 * task_due_idx without a lock, and orders those few (levels x $4 rows, never
 * the queue) by effective priority.  Then each candidate in that order is
 * locked by its primary key with SKIP LOCKED and its due time checked again
 * (a claim that leased it meanwhile moved due_at to its lease's end), and
 * the executor stops at the rows wanted: only those are locked, so a
 * concurrent claim takes the next best candidate rather than finding heads
 * locked that this claim does not hand out.  $4 is the claim's count plus
 * CLAIM_AGING_SLACK (candidates concurrent claims may have locked first);
 * a pick that locked nothing is tried once more with $4 NTASK_MAX_CLAIM
 * (claim_aging_pick).
 */
#define CLAIM_AGING_EFF \
	"GREATEST(pr.p::pg_catalog.float8, LEAST(pr.p::pg_catalog.float8 OPERATOR(pg_catalog.+) " \
	"  pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.statement_timestamp() " \
	"      OPERATOR(pg_catalog.-) c.due_at) " \
	"    OPERATOR(pg_catalog./) pg_catalog.date_part('epoch', a.priority_aging)), " \
	"  coalesce(a.priority_aging_max, pg_catalog.max(pr.p) OVER ())::pg_catalog.float8))"

static NtaskPlan claim_aging_pick_plan = {
	"claim aging pick",
	.ncols = 16,
	NTASK_PRIORITY_WALK
	", h AS MATERIALIZED ( "
	"  SELECT c.task_id, c.due_at, " CLAIM_AGING_EFF " AS eff "
	"  FROM ntask.queue a, pr, LATERAL ( "
	"    SELECT t.task_id, t.due_at FROM ntask.task t "
	"    WHERE t.queue OPERATOR(pg_catalog.=) $1 "
	"      AND t.priority OPERATOR(pg_catalog.=) pr.p "
	"      AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() "
	"      AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) "
	"      AND (t.partition_key IS NULL OR NOT EXISTS ( "
	"        SELECT FROM ntask.key_pause k "
	"        WHERE k.queue OPERATOR(pg_catalog.=) $1 "
	"          AND k.partition_key OPERATOR(pg_catalog.=) t.partition_key "
	"          AND k.until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp())) "
	"    ORDER BY t.due_at, t.task_id LIMIT $4) c "
	"  WHERE a.queue OPERATOR(pg_catalog.=) $1 AND pr.p IS NOT NULL "
	"    AND a.priority_aging IS NOT NULL "
	"  ORDER BY eff DESC, c.due_at, c.task_id "
	") "
	"SELECT x.task_id, x.was_leased, x.task_key, x.payload, q.lease, q.guard, "
	"  " CLAIM_POLICY ", x.retry, x.token "
	"FROM ntask.queue q, h, LATERAL ( "
	"  SELECT t.task_id, t.state OPERATOR(pg_catalog.=) 'leased' AS was_leased, "
	"    t.task_key, t.payload, t.attempts OPERATOR(pg_catalog.>) 0 AS retry, t.token "
	"  FROM ntask.task t "
	"  WHERE t.task_id OPERATOR(pg_catalog.=) h.task_id "
	"    AND t.queue OPERATOR(pg_catalog.=) $1 "
	"    AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() "
	"    AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) "
	"  FOR UPDATE OF t SKIP LOCKED) x "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 "
	"  AND q.fairness OPERATOR(pg_catalog.=) 'none' AND q.priority_aging IS NOT NULL "
	"  AND " CLAIM_RUNNING
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK,
	4, {TEXTOID, OIDOID, BOOLOID, INT4OID}
};

/* candidates per level beyond the claim's count (claim_aging_pick_plan) */
#define CLAIM_AGING_SLACK 8

/* where this backend's next claim on a distributed install starts */
static int	claim_shard_cursor = -1;

/*
 * The last resort of a fair queue whose keys gave nothing: a task enqueued
 * without a key by a transaction that read the queue before it turned fair
 * keeps NULL (no key, so no turn).  Such tasks are looked for among the
 * queue's first CLAIM_KEYLESS_LOOK due tasks in the plain order only, so a
 * queue whose keys are all blocked (ordered heads, caps) does not walk its
 * whole backlog on every claim; they are old, so they come to the front.
 */
#define CLAIM_KEYLESS_LOOK 100

static NtaskPlan claim_keyless_pick_plan = {
	"claim keyless pick",
	.ncols = 16,
	"SELECT x.task_id, x.was_leased, x.task_key, x.payload, q.lease, q.guard, "
	"  " CLAIM_POLICY ", x.retry, x.token "
	"FROM ntask.queue q, LATERAL ( "
	"  SELECT t.task_id, t.state OPERATOR(pg_catalog.=) 'leased' AS was_leased, "
	"    t.task_key, t.payload, t.attempts OPERATOR(pg_catalog.>) 0 AS retry, t.token "
	"  FROM ntask.task t "
	"  WHERE t.task_id OPERATOR(pg_catalog.=) ANY (ARRAY( "
	"      SELECT d.task_id FROM ( "
	"        SELECT d.task_id, d.partition_key FROM ntask.task d "
	"        WHERE d.queue OPERATOR(pg_catalog.=) $1 AND d.due_at IS NOT NULL "
	"          AND d.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() "
	"        ORDER BY d.priority DESC, d.due_at, d.task_id "
	"        LIMIT " CppAsString2(CLAIM_KEYLESS_LOOK) ") d "
	"      WHERE d.partition_key IS NULL)) "
	"    AND t.partition_key IS NULL "
	"    AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() "
	"    AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) "
	"  ORDER BY t.priority DESC, t.due_at, t.task_id "
	"  FOR UPDATE OF t SKIP LOCKED) x "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 AND " CLAIM_RUNNING
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK,
	3, {TEXTOID, OIDOID, BOOLOID}
};

/*
 * When the plain pick found nothing: does the queue exist, may the caller
 * claim from it, and is it fair?  (The first round of an idle claim needs
 * the first two anyway, so asking for fairness in the same statement costs
 * a queue without fairness no statement.)
 */
static NtaskPlan claim_queue_plan = {
	"claim queue",
	.ncols = 7,
	"SELECT q.fairness OPERATOR(pg_catalog.=) 'partition', "
	"  NOT " NTASK_WORKER_RIGHT("q", "2") ", q.ordered, "
	"  q.ordered OR q.partition_max_inflight IS NOT NULL, "
	"  CASE WHEN q.paused_at IS NOT NULL THEN 'infinity'::pg_catalog.timestamptz "
	"    WHEN q.paused_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() "
	"    THEN q.paused_until END, "
	"  NOT " CLAIM_KEYS_FREE ", "
	"  q.priority_aging IS NOT NULL "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	2, {TEXTOID, OIDOID}
};

/*
 * The keys of queue $1 paused now and the earliest end of
 * those pauses; read only when the queue row says some key pause is live.
 */
static NtaskPlan claim_paused_keys_plan = {
	"claim paused keys",
	.ncols = 2,
	"SELECT pg_catalog.array_agg(k.partition_key), pg_catalog.min(k.until) "
	"FROM ntask.key_pause k WHERE k.queue OPERATOR(pg_catalog.=) $1 "
	"  AND k.until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()",
	1, {TEXTOID}
};

/*
 * Try the turn lock of partition key pk: a transaction-level lock on a
 * 64-bit hash of (queue, key) that only ntask can take (claim_lock.c),
 * only tried (never waited for).  A claim giving a key its turn holds it
 * until its transaction ends, so concurrent claims pass that key by in
 * their first pass.  A hash collision (with another key) only makes a key
 * skip one first pass; no other role's lock can.
 */
#define CLAIM_TURN_LOCK(pk) \
	"ntask.claim_turn_lock($1, " pk ")"

/*
 * the next key after k (a step of the loose scan), at most $6 when b; pred
 * is the shard predicate of a distributed install's pick ("" on a plain one)
 */
#define CLAIM_NEXT_KEY(k, cond) CLAIM_NEXT_KEY_ON("", k, cond)
#define CLAIM_NEXT_KEY_ON(pred, k, cond) \
	"(SELECT t.partition_key FROM ntask.task t " \
	" WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.due_at IS NOT NULL " pred \
	"   AND t.partition_key IS NOT NULL " \
	"   AND t.partition_key OPERATOR(pg_catalog.>) " k cond " " \
	" ORDER BY t.partition_key LIMIT 1)"

/*
 * The keys of a fair queue from the cursor $5 on, wrapping around (see
 * the fair pick below): the CTE k.
 */
#define CLAIM_KEY_WALK CLAIM_KEY_WALK_ON("")
#define CLAIM_KEY_WALK_ON(pred) \
	"WITH RECURSIVE k1(pk) AS ( " \
	"  " CLAIM_NEXT_KEY_ON(pred, "$5", "") " " \
	"  UNION ALL " \
	"  SELECT " CLAIM_NEXT_KEY_ON(pred, "k1.pk", "") " FROM k1 WHERE k1.pk IS NOT NULL " \
	"), k2(pk) AS ( " \
	"  (SELECT t.partition_key FROM ntask.task t " \
	"   WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.due_at IS NOT NULL " pred \
	"     AND t.partition_key IS NOT NULL " \
	"     AND t.partition_key OPERATOR(pg_catalog.<=) $5 " \
	"   ORDER BY t.partition_key LIMIT 1) " \
	"  UNION ALL " \
	"  SELECT " CLAIM_NEXT_KEY_ON(pred, "k2.pk", " AND t.partition_key OPERATOR(pg_catalog.<=) $5") \
	"  FROM k2 WHERE k2.pk IS NOT NULL " \
	"), k AS ( " \
	"  SELECT k1.pk FROM k1 WHERE k1.pk IS NOT NULL " \
	"  UNION ALL " \
	"  SELECT k2.pk FROM k2 WHERE k2.pk IS NOT NULL " \
	") "

/*
 * The head of the fair and the ordered pick: per key k of the key walk,
 * a LATERAL choice of its task(s) and the queue's policy columns.
 */
#define CLAIM_KEYED_PICK_HEAD \
	"SELECT x.task_id, x.was_leased, x.task_key, x.payload, q.lease, q.guard, " \
	"  " CLAIM_POLICY ", x.retry, x.token, k.pk " \
	"FROM ntask.queue q, k, LATERAL ( " \
	"  SELECT t.task_id, t.state OPERATOR(pg_catalog.=) 'leased' AS was_leased, " \
	"    t.task_key, t.payload, t.attempts OPERATOR(pg_catalog.>) 0 AS retry, t.token " \
	"  FROM ntask.task t "

/*
 * The pick of a fair queue (fairness = 'partition', docs/design.md
 * "Fairness"): round robin over the partition keys in key order (C
 * collation), starting after $5, the key that had the latest turn (fair.c)
 * and wrapping around: first the keys after $5 (k1), then those up to it
 * (k2), each a loose index scan of task_partition_due_idx (one descent per
 * key, evaluated only as far as the claim needs).  From each key its due
 * tasks by priority, due time and id, at most $3 of them, locked with SKIP
 * LOCKED.  The executor is stopped after the rows wanted, so only the keys
 * visited are probed and only the rows returned are locked (a nested loop
 * over the keys in order).  A key with nothing due, or whose due tasks are
 * all locked by other claims, yields nothing: the next key is tried, and a
 * claim walks past every such key between the cursor and the next key
 * with work.  With $4 (the first pass) a key whose turn lock another claim
 * holds (it is giving that key a turn right now) is passed by; the second
 * pass ($4 false) takes any key, so a queue with one busy key still serves
 * every claimer.  Only keys with due work are try-locked (the CASE keeps
 * the lock from being tried on keys walked past), and only by claims of
 * at most CLAIM_TURN_MAX tasks, so a claim holds at most about that many
 * turn locks plus the keys it found all taken (the shared lock table is
 * max_locks_per_transaction per connection); a bigger batch goes by the
 * cursor alone (a queue with a per-key cap takes them whatever the
 * claim's size: at most one per key visited).  $6 are keys a limit held
 * back earlier in this claim (claim_limit): they are passed by.  With $7
 * only first attempts are picked (the retries' share, claim_limit).
 * Columns: ClaimPickCol, CLAIM_PICK_KEY included.
 */
#define CLAIM_FAIR_PICK(pred, dpred, tail) \
	CLAIM_KEY_WALK_ON(pred) \
	CLAIM_KEYED_PICK_HEAD \
	"  WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"    AND t.partition_key OPERATOR(pg_catalog.=) k.pk " \
	"    AND t.partition_key IS NOT NULL AND t.due_at IS NOT NULL " \
	"    AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() " \
	"    AND (NOT $7 OR t.attempts OPERATOR(pg_catalog.=) 0) " \
	"  ORDER BY t.priority DESC, t.due_at, t.task_id " \
	"  LIMIT $3 FOR UPDATE OF t SKIP LOCKED) x " \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND q.fairness OPERATOR(pg_catalog.=) 'partition' AND NOT q.ordered " \
	"  AND " CLAIM_RUNNING \
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK " " \
	"  AND k.pk OPERATOR(pg_catalog.<>) ALL ($6) " \
	"  AND (NOT $4 OR CASE WHEN EXISTS (SELECT 1 FROM ntask.task d " \
	"    WHERE d.queue OPERATOR(pg_catalog.=) $1 " dpred \
	"      AND d.partition_key OPERATOR(pg_catalog.=) k.pk " \
	"      AND d.partition_key IS NOT NULL AND d.due_at IS NOT NULL " \
	"      AND d.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()) " \
	"    THEN " CLAIM_TURN_LOCK("k.pk") " END)" tail

static NtaskPlan claim_fair_pick_plan = {
	"claim fair pick",
	.ncols = 17,
	CLAIM_FAIR_PICK("", "", ""),
	7, {TEXTOID, OIDOID, INT4OID, BOOLOID, TEXTOID, TEXTARRAYOID, BOOLOID}
};

/*
 * The fair pick of a distributed install, within shard $8 (each scan of
 * the key walk says so: Citus plans a recursive CTE only with a filter on
 * the distribution column), one router statement, with the claim's count
 * as its LIMIT $9: the shard's node runs the statement whole (the
 * executor's stop after n rows does not reach it), and without the LIMIT
 * it would lock a task of every key of the shard and take every key's
 * turn lock.  The turn locks are taken on the shard's node, in the claim's
 * transaction: every task of a key is in that shard.
 */
#define CLAIM_SHARD_PRED(alias) " AND " alias ".shard OPERATOR(pg_catalog.=) $8 "
static NtaskPlan claim_fair_pick_shard_plan = {
	"claim fair pick (one shard)",
	.ncols = 17,
	CLAIM_FAIR_PICK(CLAIM_SHARD_PRED("t"), CLAIM_SHARD_PRED("d"), " LIMIT $9"),
	9, {TEXTOID, OIDOID, INT4OID, BOOLOID, TEXTOID, TEXTARRAYOID, BOOLOID, INT2OID, INT4OID}
};

/*
 * The pick of an ordered queue (ordered => true, docs/design.md "Flow
 * control"): the same walk over keys, and from each key only its head, the
 * task with the lowest id among the key's unfinished tasks (awaiting ones
 * included, with or without a timeout, and those waiting for their
 * parents) and those in repair
 * (task_ordered_idx; with ordered_skip_repair the ones in repair are
 * passed), if it is due and this claim gets the key's turn lock (tried
 * only for a due head, before the row lock).  A head that is leased,
 * waiting for its retry or its parents, scheduled for later or in repair
 * blocks its key
 * and only its key.  The turn lock, held to commit, makes the in-flight
 * count claim_limit reads afterwards (in a new snapshot) exact: no other
 * claim can lease a task of the key meanwhile.
 */
#define CLAIM_ORDERED_PICK(pred, hpred, tail) \
	CLAIM_KEY_WALK_ON(pred) \
	CLAIM_KEYED_PICK_HEAD \
	"  WHERE t.task_id OPERATOR(pg_catalog.=) (SELECT h.task_id FROM ntask.task h " \
	"      WHERE h.queue OPERATOR(pg_catalog.=) $1 " hpred \
	"        AND h.partition_key OPERATOR(pg_catalog.=) k.pk AND h.ordered " \
	"        AND (h.due_at IS NOT NULL OR h.state OPERATOR(pg_catalog.=) 'repair_required' " \
	"             OR h.state OPERATOR(pg_catalog.=) 'awaiting' " \
	"             OR h.state OPERATOR(pg_catalog.=) 'waiting') " \
	"        AND NOT (q.ordered_skip_repair AND h.state OPERATOR(pg_catalog.=) 'repair_required') " \
	"      ORDER BY h.task_id LIMIT 1) " pred \
	"    AND CASE WHEN t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() " \
	"      THEN " CLAIM_TURN_LOCK("k.pk") " END " \
	"  FOR UPDATE OF t SKIP LOCKED) x " \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND q.fairness OPERATOR(pg_catalog.=) 'partition' AND q.ordered " \
	"  AND " CLAIM_RUNNING \
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK " " \
	"  AND k.pk OPERATOR(pg_catalog.<>) ALL ($6)" tail

static NtaskPlan claim_ordered_pick_plan = {
	"claim ordered pick",
	.ncols = 17,
	CLAIM_ORDERED_PICK("", "", ""),
	/* up to $6: $7, the fair pick's fresh-only flag, is not the ordered one's */
	6, {TEXTOID, OIDOID, INT4OID, BOOLOID, TEXTOID, TEXTARRAYOID}
};

/* the ordered pick of a distributed install, as the fair one above */
static NtaskPlan claim_ordered_pick_shard_plan = {
	"claim ordered pick (one shard)",
	.ncols = 17,
	CLAIM_ORDERED_PICK(CLAIM_SHARD_PRED("t"), CLAIM_SHARD_PRED("h"), " LIMIT $9"),
	9, {TEXTOID, OIDOID, INT4OID, BOOLOID, TEXTOID, TEXTARRAYOID, BOOLOID, INT2OID, INT4OID}
};

/*
 * The queue's leased tasks whose lease has not run out, per partition key.
 * Through task_lease_idx (the queue test is kept out of the index's reach,
 * so no plan walks the queue's backlog in task_due_idx): it reads every
 * lease of the database that is still running, so it costs what is in
 * flight, not what is queued.
 */
static NtaskPlan claim_inflight_plan = {
	"claim in flight",
	.ncols = 2,
	"SELECT t.partition_key, pg_catalog.count(*)::integer FROM ntask.task t "
	"WHERE t.lease_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() "
	"  AND (t.queue OPERATOR(pg_catalog.=) $1) IS TRUE "
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
	"GROUP BY t.partition_key",
	1, {TEXTOID}
};

/*
 * The same within shard $2 on a distributed install: the picked keys are
 * of one shard, and all their tasks are in it (per-key caps and order hold
 * per shard; queue-wide caps are refused there).
 */
static NtaskPlan claim_inflight_shard_plan = {
	"claim in flight (one shard)",
	.ncols = 2,
	"SELECT t.partition_key, pg_catalog.count(*)::integer FROM ntask.task t "
	"WHERE t.shard OPERATOR(pg_catalog.=) $2 "
	"  AND t.lease_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() "
	"  AND (t.queue OPERATOR(pg_catalog.=) $1) IS TRUE "
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
	"GROUP BY t.partition_key",
	2, {TEXTOID, INT2OID}
};

/*
 * The same over the shards $2 of one node, for a queue-wide cap on a
 * distributed install (claim_limit: each node holds its share of the cap).
 * Read-only, each shard's part routed to that node.
 */
static NtaskPlan claim_inflight_node_plan = {
	"claim in flight (one node)",
	.ncols = 2,
	"SELECT t.partition_key, pg_catalog.count(*)::integer FROM ntask.task t "
	"WHERE t.shard OPERATOR(pg_catalog.=) ANY ($2) "
	"  AND t.lease_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() "
	"  AND (t.queue OPERATOR(pg_catalog.=) $1) IS TRUE "
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' "
	"GROUP BY t.partition_key",
	2, {TEXTOID, INT2ARRAYOID}
};

/*
 * The result columns of every pick (CLAIM_PICK and the keyless, fair and
 * ordered ones): the task, the queue's lease and guard, the queue's flow
 * control (CLAIM_POLICY), whether the task is a retry (an attempt was
 * made), its token as picked (the distributed lease and takeover check
 * it), and, of a fair or ordered pick only, the task's key.  SPI
 * attribute numbers, from 1.
 */
typedef enum ClaimPickCol
{
	CLAIM_PICK_TASK_ID = 1,
	CLAIM_PICK_WAS_LEASED,		/* a takeover: its lease ran out */
	CLAIM_PICK_TASK_KEY,
	CLAIM_PICK_PAYLOAD,
	CLAIM_PICK_LEASE,			/* the queue's */
	CLAIM_PICK_GUARD,
	/* CLAIM_POLICY */
	CLAIM_PICK_MAX_INFLIGHT,
	CLAIM_PICK_PARTITION_MAX_INFLIGHT,
	CLAIM_PICK_ORDERED,
	CLAIM_PICK_RATE_N,
	CLAIM_PICK_RATE_PER,		/* microseconds */
	CLAIM_PICK_PARTITION_RATE_N,
	CLAIM_PICK_PARTITION_RATE_PER,	/* microseconds */
	CLAIM_PICK_RETRY_SHARE,
	CLAIM_PICK_RETRY,
	CLAIM_PICK_TOKEN,			/* the task's token as picked (the lease's check) */
	CLAIM_PICK_KEY				/* fair and ordered picks only */
} ClaimPickCol;

/*
 * The parameters of the plain picks (claim_pick_plan, the keyless one and
 * the one of a shard): values[CLAIM_PICK_ARG_X] is $(X + 1).  The last two
 * are the shard pick's only.
 */
typedef enum ClaimPickArg
{
	CLAIM_PICK_ARG_QUEUE,		/* $1 */
	CLAIM_PICK_ARG_CALLER,		/* $2, for the worker_role */
	CLAIM_PICK_ARG_FRESH_ONLY,	/* $3, first attempts only */
	CLAIM_PICK_ARG_SHARD,		/* $4 */
	CLAIM_PICK_ARG_LIMIT,		/* $5 */
	CLAIM_PICK_ARG_PAUSED_KEYS, /* $6, claim_pick_shard_keys_plan */
	CLAIM_PICK_NARGS
} ClaimPickArg;

/*
 * The parameters of the fair and ordered picks (CLAIM_FAIR_PICK,
 * CLAIM_ORDERED_PICK), the same way; the first two as the plain pick's.
 * The last two are the shard picks' only.
 */
typedef enum ClaimKeyedArg
{
	CLAIM_KEYED_ARG_QUEUE,		/* $1 */
	CLAIM_KEYED_ARG_CALLER,		/* $2 */
	CLAIM_KEYED_ARG_PER,		/* $3, tasks per key */
	CLAIM_KEYED_ARG_FIRST_PASS, /* $4, pass by keys another claim serves */
	CLAIM_KEYED_ARG_CURSOR,		/* $5, the key that had the latest turn */
	CLAIM_KEYED_ARG_HELD_KEYS,	/* $6, keys a limit held back */
	CLAIM_KEYED_ARG_FRESH_ONLY, /* $7 */
	CLAIM_KEYED_ARG_SHARD,		/* $8 */
	CLAIM_KEYED_ARG_LIMIT,		/* $9 */
	CLAIM_KEYED_NARGS
} ClaimKeyedArg;

/* the columns of claim_queue_plan */
typedef enum ClaimQueueCol
{
	CLAIM_QUEUE_FAIR = 1,
	CLAIM_QUEUE_DENIED,			/* the caller lacks the worker_role */
	CLAIM_QUEUE_ORDERED,
	CLAIM_QUEUE_TURNS,			/* ordered or a per-key cap */
	CLAIM_QUEUE_PAUSED_UNTIL,	/* NULL: not paused; infinity: until resumed */
	CLAIM_QUEUE_KEYS_PAUSED,	/* some key pause is live */
	CLAIM_QUEUE_AGING			/* priority_aging is set */
} ClaimQueueCol;

/* the columns of claim_inflight_plan (and of its shard twin) */
typedef enum ClaimInflightCol
{
	CLAIM_INFLIGHT_KEY = 1,
	CLAIM_INFLIGHT_COUNT
} ClaimInflightCol;

/* claims of more tasks than this take no turn locks (see above) */
#define CLAIM_TURN_MAX 32

/* what a claim knows of its queue's order (ClaimOrder.mode) */
typedef enum ClaimMode
{
	CLAIM_MODE_UNKNOWN = -1,	/* not yet: the plain pick runs first */
	CLAIM_MODE_PLAIN,			/* fairness none */
	CLAIM_MODE_FAIR,			/* fairness partition */
	CLAIM_MODE_ORDERED,			/* partition, one head per key */
	CLAIM_MODE_AGING			/* fairness none, priority aging */
} ClaimMode;

/* a fair or an ordered queue: the keyed picks, not the plain one */
#define CLAIM_KEYED(mode) \
	((mode) == CLAIM_MODE_FAIR || (mode) == CLAIM_MODE_ORDERED)

/*
 * What a claim knows about its queue's order across rounds: mode (while
 * unknown, the plain pick runs, which finds nothing in a fair queue); per, the most a fair pick takes from one key (1 in the
 * first round, so each key gets a turn before any gets a second; after a
 * round that went around every key with work and still left the claim
 * short, the rest split over the keys that had some); turns, a per-key
 * cap or order: only keys whose turn lock this claim holds are served.
 * The limits (policy) come with each pick; held is set when a queue-wide limit kept a picked task back (the
 * claim looks no further: the held rows stay locked by it), held_keys
 * collects the keys a per-key limit held back (later rounds pass them).
 */
typedef struct ClaimOrder
{
	ClaimMode	mode;
	int			per;
	bool		turns;
	bool		held;
	bool		node_full;		/* held by a node's share of the cap (Citus):
								 * the claim goes on in other nodes' shards */
	int			max_inflight;	/* 0: none */
	int			partition_max_inflight; /* 0: none; 1 when ordered */
	int			rate_n;			/* 0: none */
	int64		rate_per;
	int			partition_rate_n;
	int64		partition_rate_per;
	List	   *held_keys;		/* text *: keys a per-key limit held back */
	float4		retry_share;	/* 1: no share */
	bool		fresh_only;		/* retries over their share were held back */
	bool		share_off;		/* no first attempt is due: retries take all */
	bool		invoked;		/* mark the leased attempts invoked (ntask_claim invoked => true) */
	bool		paused;			/* the queue is paused (claim_read_mode) */
	bool		keys_paused;	/* some of its keys are (paused_keys) */
	TimestampTz pause_ends;		/* when the pause (or the first key pause) ends */
	Datum		paused_keys;	/* text[] of those keys */
	List	   *paused_key_list;	/* the same, text * (for the keyed picks) */
} ClaimOrder;

/*
 * The rows of one pick while a round works on them.  The guard, the limits
 * and the lease run statements of their own, each of which replaces
 * SPI_tuptable, so a reader of the picked rows makes rows current again
 * first.
 */
typedef struct ClaimPicked
{
	SPITupleTable *rows;		/* columns ClaimPickCol */
	int			n;
	bool		keyed;			/* a fair or ordered pick: has CLAIM_PICK_KEY */
	bool	   *keep;			/* per row: may be handed out (claim_limit) */
} ClaimPicked;

/*
 * A picked awaiting task is one whose await timed out (its
 * due_at is the timeout; a signal makes it ready and clears
 * await_on_timeout): with on_timeout 'repair' it is diverted like a spent
 * budget, reason await_timeout.  For every other task one NULL test; the
 * state test keeps a task that left awaiting another way (housekeeping's
 * deadline sweep, then a replay) from being diverted again.
 */
#define CLAIM_AWAIT_REPAIR \
	"(t.await_on_timeout IS NOT NULL AND t.state OPERATOR(pg_catalog.=) 'awaiting' " \
	" AND t.await_on_timeout OPERATOR(pg_catalog.=) 'repair')"

/* budget test on the (locked) task row; $7 the statement timestamp */
#define CLAIM_SPENT \
	"(t.attempts OPERATOR(pg_catalog.>=) t.max_attempts " \
	" OR $7 OPERATOR(pg_catalog.>=) t.deadline OR " CLAIM_AWAIT_REPAIR ")"

/*
 * $1 ids to lease, $2 worker, $3 lease, $4 ids taken over (their attempt
 * was just closed), $5 of those, the ones whose attempt had been invoked,
 * $6 the lowest token this timeline may issue (NtaskTokenFloor: the new
 * token is ntask.token_next(t.token, $6), NtaskTokenNext), $9 the
 * tasks' shard (NtaskIdsShard), $7 the
 * statement timestamp and $8 the lease's end ($7 + $3), both parameters:
 * Citus refuses a stable function (statement_timestamp(), timestamptz +
 * interval) in a CASE of an UPDATE of a distributed table.  $10: mark the
 * leased attempts invoked (ntask_claim's invoked).  $11: each task's token
 * as its pick read it, in $1's order (the distributed lease only).
 * CLAIM_LEASE_ARGS: their types, for the plain and the distributed lease
 * statement.
 */
typedef enum ClaimLeaseArg
{
	CLAIM_LEASE_ARG_IDS,		/* $1 */
	CLAIM_LEASE_ARG_WORKER,		/* $2 */
	CLAIM_LEASE_ARG_LEASE,		/* $3 */
	CLAIM_LEASE_ARG_TAKEN,		/* $4 */
	CLAIM_LEASE_ARG_INVOKED_IDS,	/* $5 */
	CLAIM_LEASE_ARG_TOKEN_FLOOR,	/* $6 */
	CLAIM_LEASE_ARG_NOW,		/* $7 */
	CLAIM_LEASE_ARG_LEASE_UNTIL,	/* $8 */
	CLAIM_LEASE_ARG_SHARD,		/* $9 */
	CLAIM_LEASE_ARG_INVOKED,	/* $10 */
	CLAIM_LEASE_ARG_TOKENS,		/* $11, the distributed lease's check */
	CLAIM_LEASE_NARGS
} ClaimLeaseArg;

#define CLAIM_LEASE_TYPES \
	{INT8ARRAYOID, TEXTOID, INTERVALOID, INT8ARRAYOID, INT8ARRAYOID, INT8OID, \
	TIMESTAMPTZOID, TIMESTAMPTZOID, INT2OID, BOOLOID, INT8ARRAYOID}
#define CLAIM_LEASE_ARGS CLAIM_LEASE_NARGS, CLAIM_LEASE_TYPES

#define CLAIM_LEASE_SET(floor) \
	"    state = CASE WHEN " CLAIM_SPENT " THEN 'repair_required' ELSE 'leased' END, " \
	"    reason = CASE WHEN NOT " CLAIM_SPENT " THEN t.reason " \
	"      WHEN " CLAIM_AWAIT_REPAIR " THEN 'await_timeout' " \
	"      WHEN t.attempts OPERATOR(pg_catalog.>=) t.max_attempts THEN 'budget_exhausted' " \
	"      ELSE 'deadline_exceeded' END, " \
	"    token = CASE WHEN " CLAIM_SPENT " THEN t.token " \
	"      ELSE ntask.token_next(t.token, " floor ") END, " \
	"    attempts = t.attempts OPERATOR(pg_catalog.+) CASE WHEN " CLAIM_SPENT " THEN 0 ELSE 1 END, " \
	"    lease_owner = CASE WHEN " CLAIM_SPENT " THEN NULL ELSE $2 END, " \
	"    lease_until = CASE WHEN " CLAIM_SPENT " THEN NULL " \
	"      ELSE $8 END, " \
	"    due_at = CASE WHEN " CLAIM_SPENT " THEN NULL " \
	"      ELSE $8 END, " \
	"    finished_at = CASE WHEN " CLAIM_SPENT " THEN $7 END, " \
	"    unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) " \
	"      CASE WHEN t.task_id OPERATOR(pg_catalog.=) ANY ($5) THEN 1 ELSE 0 END, " \
	"    last_error_class = CASE WHEN t.task_id OPERATOR(pg_catalog.<>) ALL ($4) " \
	"      THEN t.last_error_class " \
	"      WHEN t.task_id OPERATOR(pg_catalog.=) ANY ($5) THEN 'unknown' " \
	"      ELSE 'transient' END, " \
	"    last_error_stage = CASE WHEN t.task_id OPERATOR(pg_catalog.<>) ALL ($4) " \
	"      THEN t.last_error_stage ELSE 'lease_expired' END, " \
	"    claimed_at = CASE WHEN " CLAIM_SPENT " THEN t.claimed_at ELSE $7 END, " \
	"    invoked_at = CASE WHEN " CLAIM_SPENT " THEN t.invoked_at WHEN $10 THEN $7 END, " \
	"    progress = NULL, progress_at = NULL, await_on_timeout = NULL, " \
	"    updated_at = $7 "

/*
 * The lease statement's columns behind ClaimCol's CLAIM_COL_LEASED, for the
 * context column (context.c): whether the task has any context, then what
 * each key is built from.  A later key adds its column and a term of the
 * first (docs/design.md "The claim's context column").
 */
#define CLAIM_CONTEXT_COLS(alias) \
	alias "traceparent IS NOT NULL OR " alias "checkpoints OPERATOR(pg_catalog.>) 0 " \
	"  OR " alias "signal_key IS NOT NULL OR " alias "has_parents, " \
	alias "traceparent, " alias "checkpoints, " alias "signal_key, " alias "has_parents"

static NtaskPlan claim_lease_plan = {
	"claim lease",
	.ncols = 13,
	"WITH upd AS ( "
	"  UPDATE ntask.task t SET "
	CLAIM_LEASE_SET("$6")
	"  WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("t", "9")
	"  RETURNING t.task_id, t.task_key, t.payload, t.attempts, t.token, "
	"    t.lease_until, t.unknown_attempts, t.state, t.shard, t.traceparent, "
	"    t.checkpoints, t.signal_key, t.has_parents, "
	"    EXISTS (SELECT 1 FROM ntask.receipt r "
	"            WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id "
	"              AND r.shard OPERATOR(pg_catalog.=) t.shard) AS committed "
	") "
	"SELECT u.task_id, u.task_key, u.payload, u.attempts, u.token, u.lease_until, "
	"  CASE WHEN u.committed THEN 'committed' "
	"    WHEN u.unknown_attempts OPERATOR(pg_catalog.>) 0 THEN 'unknown' END, "
	"  u.state OPERATOR(pg_catalog.=) 'leased', " CLAIM_CONTEXT_COLS("u.") " "
	"FROM upd u ORDER BY u.task_id",
	/* up to $10: $11 is the distributed lease's alone */
	CLAIM_LEASE_ARG_TOKENS, CLAIM_LEASE_TYPES
};

/*
 * claim_lease_plan on a distributed install: the update returns the rows
 * the caller gets (same columns); a receipt makes the prior outcome
 * 'committed' (claim_receipts_plan, read first: a RETURNING subquery keeps
 * Citus from routing the update).  Rows are not sorted by task id here.
 * The token floor is also the one of the node that holds the row
 * (ntask.token_floor, evaluated there: docs/scaling.md "Task ids and
 * tokens"), so a promoted standby of that node issues tokens above any an
 * earlier timeline of it issued, wherever the claim runs.
 *
 * The pick's row locks hold only while the task stays on the placement the
 * pick read: the claim takes the shard's metadata lock before its pick
 * (NtaskLockShards), so a shard move cannot complete in between; and the
 * lease itself leases a task only as the pick saw it, with the pick's
 * token ($11) and state (leased: a takeover, $4; otherwise due), so a
 * pick made stale in any other way leases nothing for that task (the claim
 * goes on), never a task another claim has leased since (a pick made
 * before a shard move could otherwise lease a task another claim had
 * just leased on the shard's new placement, losing that attempt from the
 * ledger).
 */
static NtaskPlan claim_lease_dist_plan = {
	"claim lease (distributed)",
	.ncols = 13,
	"UPDATE ntask.task t SET "
	CLAIM_LEASE_SET("GREATEST($6, ntask.token_floor(t.shard))")
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("t", "9")
	"  AND t.token OPERATOR(pg_catalog.=) ($11)[pg_catalog.array_position($1, t.task_id)] "
	"  AND t.due_at IS NOT NULL "
	"  AND (t.state OPERATOR(pg_catalog.=) 'leased') "
	"    OPERATOR(pg_catalog.=) (t.task_id OPERATOR(pg_catalog.=) ANY ($4)) "
	"RETURNING t.task_id, t.task_key, t.payload, t.attempts, t.token, t.lease_until, "
	"  CASE WHEN t.unknown_attempts OPERATOR(pg_catalog.>) 0 THEN 'unknown' END, "
	"  t.state OPERATOR(pg_catalog.=) 'leased', " CLAIM_CONTEXT_COLS("t."),
	CLAIM_LEASE_ARGS
};

/*
 * of the tasks $1 (of shard $2), those with a receipt (prior 'committed');
 * its parameters are the lease's first and ninth, its column the task id
 */
static NtaskPlan claim_receipts_plan = {
	"claim receipts (distributed)",
	.ncols = 1,
	"SELECT DISTINCT r.task_id FROM ntask.receipt r "
	"WHERE r.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("r", "2"),
	2, {INT8ARRAYOID, INT2OID}
};


/*
 * The columns of claim_lease_plan's result (and claim_lease_dist_plan's):
 * ntask_claim's columns but context, then whether the task was leased,
 * then CLAIM_CONTEXT_COLS (what claim_context builds context from).
 */
typedef enum ClaimCol
{
	CLAIM_COL_TASK_ID = 1,
	CLAIM_COL_TASK_KEY,
	CLAIM_COL_PAYLOAD,
	CLAIM_COL_ATTEMPT,
	CLAIM_COL_TOKEN,
	CLAIM_COL_LEASE_UNTIL,
	CLAIM_COL_PRIOR_OUTCOME,
	CLAIM_COL_LEASED,			/* false: diverted to repair_required */
	CLAIM_COL_HAS_CONTEXT,		/* CLAIM_CONTEXT_COLS: any of the next */
	CLAIM_COL_TRACEPARENT,
	CLAIM_COL_CHECKPOINTS,
	CLAIM_COL_SIGNAL_KEY,
	CLAIM_COL_HAS_PARENTS
} ClaimCol;

#define CLAIM_NCOLS CLAIM_COL_PRIOR_OUTCOME /* handed to the caller */
#define CLAIM_MAX_EXTRA 4		/* columns a caller may append (NtaskClaimInto) */

/* at most this many rounds when tasks are diverted to repair or the guard */
#define CLAIM_MAX_ROUNDS 10

static int	claim_round(ClaimCall *call, int want, bool *more,
						int64 *lease_usecs, ClaimOrder *order);
static int	claim_pick(text *queue, int want, ClaimOrder *order);
static void claim_warn_old_xact(int64 lease_usecs, int64 waited_usecs);

/*
 * claim_mark_committed
 *		In the rows of claim_lease_dist_plan, the prior outcome of a task
 *		that has a receipt is 'committed', as claim_lease_plan says.
 */
static void
claim_mark_committed(SPITupleTable *rows, int nrows, int64 *rcpt, int nrcpt)
{
	int			r;
	int			k;

	for (r = 0; r < nrows && nrcpt > 0; r++)
	{
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(rows->vals[r], rows->tupdesc,
													 CLAIM_COL_TASK_ID, &isnull));

		for (k = 0; k < nrcpt; k++)
			if (rcpt[k] == id)
			{
				Datum		v[CLAIM_COL_HAS_PARENTS];
				bool		n[CLAIM_COL_HAS_PARENTS];
				bool		repl[CLAIM_COL_HAS_PARENTS] = {0};

				v[CLAIM_COL_PRIOR_OUTCOME - 1] = CStringGetTextDatum("committed");
				n[CLAIM_COL_PRIOR_OUTCOME - 1] = false;
				repl[CLAIM_COL_PRIOR_OUTCOME - 1] = true;
				rows->vals[r] = heap_modify_tuple(rows->vals[r], rows->tupdesc, v, n, repl);
				break;
			}
	}
}

/*
 * claim_context
 *		The context column of row r of the lease statement (ClaimCol), a
 *		task that has some (CLAIM_COL_HAS_CONTEXT): context.c builds it.
 */
static Datum
claim_context(int r, text *queue, int64 *claim_bytes, bool *isnull)
{
	NtaskContextIn in = {0};
	bool		sknull;
	Datum		sk;

	in.task_id = NtaskGetInt64(r, CLAIM_COL_TASK_ID);
	in.token = NtaskGetInt64(r, CLAIM_COL_TOKEN);
	in.queue = queue;
	in.traceparent = NtaskGetCString(r, CLAIM_COL_TRACEPARENT);
	in.checkpoints = NtaskGetInt32(r, CLAIM_COL_CHECKPOINTS);
	sk = NtaskGetDatum(r, CLAIM_COL_SIGNAL_KEY, &sknull);
	in.signal_key = sknull ? NULL : DatumGetTextPP(sk);
	in.has_parents = NtaskGetBool(r, CLAIM_COL_HAS_PARENTS);
	in.claim_bytes = claim_bytes;
	/* everything is read: context.c may run statements of its own */
	return NtaskClaimContext(&in, isnull);
}

/*
 * token_seq_oid
 *		ntask.token_seq, this node's sequence of tokens.
 */
static Oid
token_seq_oid(void)
{
	Oid			seq = get_relname_relid("token_seq", get_namespace_oid("ntask", false));

	if (!OidIsValid(seq))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: the sequence ntask.token_seq is missing"),
				 errhint("Run ALTER EXTENSION ntask UPDATE.")));
	return seq;
}

/*
 * token_next_past
 *		A value of ntask.token_seq above floor_v, drawn after moving the
 *		sequence past it: the sequence moves only forward, and in its own
 *		steps (256 on a Citus node: a value keeps the node's group).  The
 *		lock (self-exclusive, and exclusive of the RowExclusiveLock every
 *		nextval holds to its transaction's end) waits until no transaction
 *		that drew a value is open and keeps others from drawing, so the
 *		value read just before the setval is the sequence's last: setval
 *		never moves it back over a value another backend holds.  Released
 *		at once.  Rare (a shard moved here, a restore): it may wait for
 *		open claims to end, and a deadlock with one is reported (40P01).
 */
static int64
token_next_past(Oid seq, int64 floor_v)
{
	HeapTuple	tup;
	int64		inc;
	int64		v;

	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seq));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "ntask: cache lookup failed for sequence %u", seq);
	inc = ((Form_pg_sequence) GETSTRUCT(tup))->seqincrement;
	ReleaseSysCache(tup);
	if (inc < 1)
		elog(ERROR, "ntask: ntask.token_seq must ascend");

	LockRelationOid(seq, ShareRowExclusiveLock);
	v = nextval_internal(seq, false);
	if (v <= floor_v)
	{
		/* the first value above floor_v in the sequence's steps from v */
		int64		y = v + ((floor_v - v) / inc + 1) * inc;

		DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(seq),
							Int64GetDatum(y), BoolGetDatum(false));
		v = nextval_internal(seq, false);
	}
	UnlockRelationOid(seq, ShareRowExclusiveLock);
	return v;
}

/*
 * NtaskTokenNext
 *		The token of a new attempt of a task whose latest token is prev, on
 *		this node's timeline of floor (NtaskTokenFloor there): floor - 1
 *		plus the next value of ntask.token_seq, the node's one sequence of
 *		tokens (docs/design.md "Tokens: one sequence, an attempt's name").
 *		So a token names one attempt of one task: no two attempts of any
 *		tasks share one, and a worker's token on another task's id is
 *		never that task's (NT003, NtaskCheckToken).  On a Citus node the
 *		sequence steps by 256 from the node's group (ntask.set_id_range),
 *		so nodes never draw the same token either.
 *
 *		A task's tokens must also only grow.  The sequence gives that for
 *		every task whose tokens it drew; a task holding a token above the
 *		sequence's next value (its shard moved here from a node whose
 *		sequence is ahead; a table restored without its sequence) is the
 *		rare case token_next_past handles.
 */
int64
NtaskTokenNext(int64 prev, int64 floor)
{
	Oid			seq = token_seq_oid();
	int64		v = nextval_internal(seq, false);

	if (v > prev - (floor - 1))
		return (floor - 1) + v;
	return (floor - 1) + token_next_past(seq, prev - (floor - 1));
}

/*
 * claim_warn_old_xact
 *		Leases count from the claim statement's start, not the transaction's
 *		(a lease computed from an old transaction start could be over before
 *		it is handed out).  But nobody sees the claim before the transaction
 *		commits: when the transaction is already older than half the lease,
 *		say so (SQLSTATE 01000), since the lease is running while it stays
 *		open and the work is meant to run after the commit.
 */
static void
claim_warn_old_xact(int64 lease_usecs, int64 waited_usecs)
{
	TimestampTz xact = GetCurrentTransactionStartTimestamp();
	TimestampTz stmt = GetCurrentStatementStartTimestamp();

	/* a waiting claim's own wait is not work done in the transaction */
	stmt -= waited_usecs;
	if (lease_usecs > 0 && stmt - xact > lease_usecs / 2)
		ereport(NOTICE,
				(errmsg("ntask: this claim runs in a transaction older than half its lease"),
				 errdetail("The lease counts from the claim statement, and runs while the transaction stays open; the transaction began %.1f s before the claim.",
						   (double) (stmt - xact) / USECS_PER_SEC),
				 errhint("Claim in its own short transaction and commit before doing the work.")));
}


/* claim_held_keys: order->held_keys and the paused keys as a text[] */
static Datum
claim_held_keys(ClaimOrder *order)
{
	int			n = list_length(order->held_keys) +
		list_length(order->paused_key_list);
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	ListCell   *lc;
	int			i = 0;

	foreach(lc, order->held_keys)
		elems[i++] = PointerGetDatum(lfirst(lc));
	/* and the keys paused by a rate limit */
	foreach(lc, order->paused_key_list)
		elems[i++] = PointerGetDatum(lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * claim_pick
 *		Pick (lock) up to want due tasks of queue, in the queue's order.
 *		The plain pick runs first while the queue is not known to be fair
 *		(it finds nothing in a fair queue); when it finds nothing and the mode is
 *		unknown, one statement checks the queue (42704 if unknown, 42501
 *		without the right) and tells its fairness.  A fair queue runs the
 *		fair pick's first pass (keys no other claim is serving), then its
 *		second (any key), and, when both find nothing, the keyless pick (a
 *		task enqueued without a key by a transaction that read the queue
 *		before it turned fair keeps NULL: it is served when no key gives
 *		a task).  An ordered queue runs the ordered pick instead of
 *		the fair one, and a queue with a per-key cap or order only the
 *		first pass.  A fair pick moves the queue's cursor (fair.c) to
 *		the last key it picked from.  Returns the number of rows picked, in
 *		SPI_tuptable: the columns of ClaimPickCol, the key
 *		(CLAIM_PICK_KEY) only for a fair or ordered pick.
 */
/*
 * claim_dist_policy
 *		On a distributed install, the picked queue's flow control that counts
 *		in the shared memory of the node that runs the claim: rate limits
 *		and the retries' share.  They hold by node, as the cap does
 *		(claim_limit: each node's bucket runs at its share of the rate), so
 *		the claim must run on the node that holds the picked shard (a
 *		worker node's own walk, or ntask_claim_on delegated there); else
 *		0A000.  A queue-wide cap is shared out by node wherever the claim
 *		runs (its lock is taken on the shard's node); per-key caps and
 *		order (per_key) hold within the key's shard.  The pick's first row
 *		is in SPI_tuptable; shard is the picked shard.
 */
static void
claim_dist_policy(text *queue, bool per_key, int16 shard)
{
	int			c;

	for (c = CLAIM_PICK_MAX_INFLIGHT; c <= CLAIM_PICK_RETRY_SHARE; c++)
	{
		bool		isnull;

		if (c == CLAIM_PICK_ORDERED || c == CLAIM_PICK_MAX_INFLIGHT)
			continue;			/* a boolean; a cap shared out by node */
		if (per_key && c == CLAIM_PICK_PARTITION_MAX_INFLIGHT)
			continue;
		(void) NtaskGetDatum(0, c, &isnull);
		if (isnull)
			continue;
		if (c == CLAIM_PICK_PARTITION_MAX_INFLIGHT)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("ntask: queue \"%s\" has a per-key cap, which a distributed install supports on fair queues only",
							text_to_cstring(queue))));
		if (!NtaskIsLocalShard(shard))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("ntask: queue \"%s\" has a rate limit or a retry share, and on a distributed install its claims must run on the node that holds the shard",
							text_to_cstring(queue)),
					 errdetail("Shard %d is not on this node: each node keeps its share of the rate in its own memory.", shard),
					 errhint("Claim it on the worker nodes (ntask_claim there), or with ntask_claim_on outside a transaction block (docs/scaling.md \"Rate limits across nodes\").")));
		return;
	}
}

/*
 * claim_read_paused_keys
 *		The queue row says some of its keys are paused: read
 *		them into order (paused_keys, the earliest end into pause_ends).
 */
static void
claim_read_paused_keys(text *queue, ClaimOrder *order)
{
	Datum		args[1];
	bool		isnull;
	Datum		keys;

	args[0] = PointerGetDatum(queue);
	NtaskExecPlan(&claim_paused_keys_plan, args, NULL, SPI_OK_SELECT);
	keys = NtaskGetDatum(0, 1, &isnull);
	if (isnull)
		return;					/* ended since the queue row was read */
	{
		ArrayType  *a = DatumGetArrayTypePCopy(keys);
		Datum	   *elems;
		int			n;
		int			i;

		deconstruct_array(a, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		for (i = 0; i < n; i++)
			order->paused_key_list = lappend(order->paused_key_list,
											 DatumGetTextPCopy(elems[i]));
		order->paused_keys = PointerGetDatum(a);
	}
	order->keys_paused = true;
	order->pause_ends = DatumGetTimestampTz(NtaskGetDatum(0, 2, &isnull));
}

/*
 * claim_read_mode
 *		A pick found nothing: read the queue (claim_queue_plan; args as
 *		the plain pick's, of which it uses the first two), raise 42704 when there is no such queue and 42501
 *		without its worker_role, and set order->mode and order->turns.
 */
/*
 * The queue this backend last found to have priority aging (in
 * TopMemoryContext; NULL: none).  A claim of that queue runs the aging
 * pick first, skipping the plain pick (which finds nothing there) and the
 * queue read; when the aging pick finds nothing, the queue read says
 * whether the queue still ages (an idle queue) or not (aging turned off:
 * the cache is cleared and the claim goes on in the queue's mode).  A
 * queue without aging is never cached, so it runs what it ran before.
 */
static char *claim_aging_queue = NULL;

/* set or clear claim_aging_queue for queue after its mode was read */
static void
claim_note_aging(text *queue, bool aging)
{
	char	   *q = text_to_cstring(queue);

	if (aging)
	{
		if (claim_aging_queue == NULL || strcmp(claim_aging_queue, q) != 0)
		{
			if (claim_aging_queue)
				pfree(claim_aging_queue);
			claim_aging_queue = MemoryContextStrdup(TopMemoryContext, q);
		}
	}
	else if (claim_aging_queue && strcmp(claim_aging_queue, q) == 0)
	{
		pfree(claim_aging_queue);
		claim_aging_queue = NULL;
	}
	pfree(q);
}

static void
claim_read_mode(text *queue, Datum *args, ClaimOrder *order)
{
	if (NtaskExecPlan(&claim_queue_plan, args, NULL, SPI_OK_SELECT) == 0)
		NtaskQueueNotFound(text_to_cstring(queue));
	if (NtaskGetBool(0, CLAIM_QUEUE_DENIED))
		NtaskCheckQueueRight(queue, false); /* raises 42501 */
	order->mode = NtaskGetBool(0, CLAIM_QUEUE_FAIR) ?
		(NtaskGetBool(0, CLAIM_QUEUE_ORDERED) ? CLAIM_MODE_ORDERED : CLAIM_MODE_FAIR) :
		NtaskGetBool(0, CLAIM_QUEUE_AGING) ? CLAIM_MODE_AGING : CLAIM_MODE_PLAIN;
	claim_note_aging(queue, order->mode == CLAIM_MODE_AGING);
	order->turns = NtaskGetBool(0, CLAIM_QUEUE_TURNS);
	{
		bool		isnull;
		Datum		d = NtaskGetDatum(0, CLAIM_QUEUE_PAUSED_UNTIL, &isnull);

		if (!isnull)
		{
			/* paused: nothing is handed out */
			order->paused = true;
			order->pause_ends = DatumGetTimestampTz(d);
			return;
		}
	}
	if (NtaskGetBool(0, CLAIM_QUEUE_KEYS_PAUSED))
		claim_read_paused_keys(queue, order);
}

/*
 * claim_aging_pick
 *		The pick of a queue with priority aging (claim_aging_pick_plan; args
 *		as the plain pick's first three).  Not on a distributed install yet.
 */
static int
claim_aging_pick(text *queue, Datum *args, int want)
{
	Datum		aargs[4];
	int			n;

	if (NtaskShardCount() > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ntask: queue \"%s\" has priority aging, which a distributed install does not support yet",
						text_to_cstring(queue)),
				 errhint("Pass priority_aging => '0' to ntask_queue_set to turn it off.")));
	aargs[0] = args[CLAIM_PICK_ARG_QUEUE];
	aargs[1] = args[CLAIM_PICK_ARG_CALLER];
	aargs[2] = args[CLAIM_PICK_ARG_FRESH_ONLY];
	aargs[3] = Int32GetDatum(Min(want + CLAIM_AGING_SLACK, NTASK_MAX_CLAIM));
	n = NtaskExecPlanCount(&claim_aging_pick_plan, aargs, NULL, SPI_OK_SELECT, want);
	if (n == 0 && want + CLAIM_AGING_SLACK < NTASK_MAX_CLAIM)
	{
		/*
		 * Nothing due, or every candidate was locked by concurrent claims:
		 * look further down each level.
		 */
		aargs[3] = Int32GetDatum(NTASK_MAX_CLAIM);
		n = NtaskExecPlanCount(&claim_aging_pick_plan, aargs, NULL, SPI_OK_SELECT, want);
	}
	return n;
}

static int
claim_pick(text *queue, int want, ClaimOrder *order)
{
	Datum		args[CLAIM_PICK_NARGS];
	Datum		kargs[CLAIM_KEYED_NARGS];
	int			n;
	char	   *qname;
	bool		isnull;
	NtaskPlan  *fair;

	args[CLAIM_PICK_ARG_QUEUE] = PointerGetDatum(queue);
	args[CLAIM_PICK_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	args[CLAIM_PICK_ARG_FRESH_ONLY] = BoolGetDatum(order->fresh_only);
	if (order->mode == CLAIM_MODE_AGING)
		return claim_aging_pick(queue, args, want);
	if (order->mode == CLAIM_MODE_UNKNOWN && claim_aging_queue != NULL &&
		NtaskShardCount() == 0)
	{
		char	   *q = text_to_cstring(queue);
		bool		cached = strcmp(claim_aging_queue, q) == 0;

		pfree(q);
		if (cached)
		{
			n = claim_aging_pick(queue, args, want);
			if (n > 0)
			{
				order->mode = CLAIM_MODE_AGING;
				return n;
			}
			/* idle, no right, gone, or no longer aging: ask the queue */
			claim_read_mode(queue, args, order);
			if (order->paused || order->mode == CLAIM_MODE_AGING)
				return 0;
			if (order->mode == CLAIM_MODE_PLAIN)
			{
				if (!order->keys_paused)
					return NtaskExecPlanCount(&claim_pick_plan, args, NULL,
											  SPI_OK_SELECT, want);
				args[CLAIM_PICK_ARG_SHARD] = order->paused_keys;	/* $4 */
				return NtaskExecPlanCount(&claim_pick_keys_plan, args, NULL,
										  SPI_OK_SELECT, want);
			}
		}
	}
	if (!CLAIM_KEYED(order->mode) && NtaskShardCount() > 0)
	{
		int			nshards = NtaskWalkShardCount();
		int			k;

		/*
		 * A distributed install: one shard at a time, from this backend's
		 * cursor (random at first), until one has due work; the next pick
		 * starts after it, so every shard gets its turn.  The shards are
		 * those the claim walks (NtaskWalkShardCount): the call's shard in
		 * ntask_claim_on, this worker node's own, or every shard.
		 */
		if (claim_shard_cursor < 0)
			claim_shard_cursor = (int) (pg_prng_uint32(&pg_global_prng_state) % nshards);
		for (k = 0; k < nshards; k++)
		{
			int			i = (claim_shard_cursor + k) % nshards;

			/*
			 * The shard's metadata lock before its pick: a move's final
			 * phase waits for this claim, or this claim for the move
			 * (NtaskLockShards, docs/scaling.md "Shard moves").
			 */
			NtaskLockShard(NtaskWalkShardValue(i));
			args[CLAIM_PICK_ARG_SHARD] = Int16GetDatum(NtaskWalkShardValue(i));
			args[CLAIM_PICK_ARG_LIMIT] = Int32GetDatum(want);
			if (order->keys_paused)
			{
				args[CLAIM_PICK_ARG_PAUSED_KEYS] = order->paused_keys;
				n = NtaskExecPlanCount(&claim_pick_shard_keys_plan, args, NULL,
									   SPI_OK_SELECT, want);
			}
			else
				n = NtaskExecPlanCount(&claim_pick_shard_plan, args, NULL,
									   SPI_OK_SELECT, want);
			if (n > 0)
			{
				/*
				 * Rate limits and retry shares count in the claiming
				 * node's shared memory: on the shard's node only.
				 */
				claim_dist_policy(queue, false, NtaskWalkShardValue(i));
				claim_shard_cursor = (i + 1) % nshards;
				order->mode = CLAIM_MODE_PLAIN;
				return n;
			}
			if (order->mode == CLAIM_MODE_UNKNOWN)
			{
				/*
				 * The first shard has nothing due and the queue is not
				 * known yet (the plain pick finds nothing in a fair
				 * queue): check it now, as below, rather than after a
				 * probe of every shard.
				 */
				claim_read_mode(queue, args, order);
				if (order->paused)
					return 0;
				if (order->mode == CLAIM_MODE_AGING)
					return claim_aging_pick(queue, args, want); /* refuses */
				if (order->mode != CLAIM_MODE_PLAIN)
					break;		/* fair or ordered: the per-shard pick below */
				if (order->keys_paused)
					k--;		/* this shard again, passing the paused keys by */
			}
		}
		if (order->mode == CLAIM_MODE_PLAIN)
			return 0;
	}
	if (!CLAIM_KEYED(order->mode))
	{
		/*
		 * A constant LIMIT for the plan; the executor stops at want rows.
		 * Once the queue is known to have paused keys, the pick that
		 * passes them by.
		 */
		if (order->keys_paused)
		{
			args[CLAIM_PICK_ARG_SHARD] = order->paused_keys;	/* $4 */
			n = NtaskExecPlanCount(&claim_pick_keys_plan, args, NULL,
								   SPI_OK_SELECT, want);
		}
		else
			n = NtaskExecPlanCount(&claim_pick_plan, args, NULL,
								   SPI_OK_SELECT, want);
		if (n > 0)
		{
			order->mode = CLAIM_MODE_PLAIN;
			return n;
		}
		if (order->mode == CLAIM_MODE_PLAIN)
			return 0;

		/*
		 * Nothing due: an idle queue, no right to it, no such queue, fair,
		 * paused, some of its keys are paused, or aging
		 */
		claim_read_mode(queue, args, order);
		if (order->paused)
			return 0;
		if (order->mode == CLAIM_MODE_AGING)
			return claim_aging_pick(queue, args, want);
		if (order->mode == CLAIM_MODE_PLAIN)
		{
			if (!order->keys_paused)
				return 0;
			args[CLAIM_PICK_ARG_SHARD] = order->paused_keys;	/* $4 */
			return NtaskExecPlanCount(&claim_pick_keys_plan, args, NULL,
									  SPI_OK_SELECT, want);
		}
	}
	qname = text_to_cstring(queue);
	kargs[CLAIM_KEYED_ARG_QUEUE] = args[CLAIM_PICK_ARG_QUEUE];
	kargs[CLAIM_KEYED_ARG_CALLER] = args[CLAIM_PICK_ARG_CALLER];
	kargs[CLAIM_KEYED_ARG_PER] = Int32GetDatum(order->per);
	kargs[CLAIM_KEYED_ARG_FIRST_PASS] = BoolGetDatum(order->turns || want <= CLAIM_TURN_MAX);
	kargs[CLAIM_KEYED_ARG_HELD_KEYS] = claim_held_keys(order);
	kargs[CLAIM_KEYED_ARG_FRESH_ONLY] = BoolGetDatum(order->fresh_only);
	if (NtaskShardCount() > 0)
	{
		int			nshards = NtaskWalkShardCount();
		int			k;

		/*
		 * A distributed install: the fair or ordered pick within one shard
		 * at a time (a key lives in one shard), from the backend's shard
		 * cursor, each shard with its own key cursor.  Keyless tasks of a
		 * fair queue (the last resort below) are not looked for there.
		 */
		fair = order->mode == CLAIM_MODE_ORDERED ? &claim_ordered_pick_shard_plan :
			&claim_fair_pick_shard_plan;
		if (claim_shard_cursor < 0)
			claim_shard_cursor = (int) (pg_prng_uint32(&pg_global_prng_state) % nshards);
		for (k = 0; k < nshards; k++)
		{
			int			i = (claim_shard_cursor + k) % nshards;
			int16		sv = NtaskWalkShardValue(i);

			NtaskLockShard(sv);		/* as the plain pick's */
			kargs[CLAIM_KEYED_ARG_FIRST_PASS] = BoolGetDatum(order->turns || want <= CLAIM_TURN_MAX);
			kargs[CLAIM_KEYED_ARG_CURSOR] = PointerGetDatum(NtaskFairCursorShard(qname, sv));
			kargs[CLAIM_KEYED_ARG_SHARD] = Int16GetDatum(sv);
			kargs[CLAIM_KEYED_ARG_LIMIT] = Int32GetDatum(want);
			n = NtaskExecPlanCount(fair, kargs, NULL, SPI_OK_SELECT, want);
			if (n == 0 && want <= CLAIM_TURN_MAX && !order->turns)
			{
				kargs[CLAIM_KEYED_ARG_FIRST_PASS] = BoolGetDatum(false);
				n = NtaskExecPlanCount(fair, kargs, NULL, SPI_OK_SELECT, want);
			}
			if (n > 0)
			{
				claim_dist_policy(queue, true, sv);
				NtaskFairAdvanceShard(qname, sv,
									  DatumGetTextPP(NtaskGetDatum(n - 1, CLAIM_PICK_KEY, &isnull)));
				claim_shard_cursor = (i + 1) % nshards;
				return n;
			}
		}
		return 0;
	}
	kargs[CLAIM_KEYED_ARG_CURSOR] = PointerGetDatum(NtaskFairCursor(qname));
	fair = order->mode == CLAIM_MODE_ORDERED ? &claim_ordered_pick_plan : &claim_fair_pick_plan;
	n = NtaskExecPlanCount(fair, kargs, NULL, SPI_OK_SELECT, want);
	/* a per-key cap or order is kept by the turn locks: no second pass */
	if (n == 0 && want <= CLAIM_TURN_MAX && !order->turns)
	{
		kargs[CLAIM_KEYED_ARG_FIRST_PASS] = BoolGetDatum(false);
		n = NtaskExecPlanCount(fair, kargs, NULL, SPI_OK_SELECT, want);
	}
	if (n > 0)
	{
		NtaskFairAdvance(qname, DatumGetTextPP(NtaskGetDatum(n - 1, CLAIM_PICK_KEY, &isnull)));
		return n;
	}
	return NtaskExecPlanCount(&claim_keyless_pick_plan, args, NULL,
							  SPI_OK_SELECT, want);
}

/* claim_text_eq: two text Datums (possibly NULL) hold the same bytes */
static bool
claim_text_eq(Datum a, bool anull, Datum b, bool bnull)
{
	text	   *ta;
	text	   *tb;

	if (anull || bnull)
		return anull && bnull;
	ta = DatumGetTextPP(a);
	tb = DatumGetTextPP(b);
	return VARSIZE_ANY_EXHDR(ta) == VARSIZE_ANY_EXHDR(tb) &&
		memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), VARSIZE_ANY_EXHDR(ta)) == 0;
}

/*
 * claim_read_policy
 *		The queue's flow control from the pick's first row (columns
 *		CLAIM_PICK_MAX_INFLIGHT..CLAIM_PICK_RETRY_SHARE) into order; true
 *		when the queue has any.
 */
static bool
claim_read_policy(text *queue, ClaimOrder *order)
{
	bool		isnull;
	Datum		share;

	order->max_inflight = NtaskGetInt32(0, CLAIM_PICK_MAX_INFLIGHT);
	order->partition_max_inflight = NtaskGetBool(0, CLAIM_PICK_ORDERED) ? 1 :
		NtaskGetInt32(0, CLAIM_PICK_PARTITION_MAX_INFLIGHT);
	order->rate_n = NtaskGetInt32(0, CLAIM_PICK_RATE_N);
	order->rate_per = NtaskGetInt64(0, CLAIM_PICK_RATE_PER);
	order->partition_rate_n = NtaskGetInt32(0, CLAIM_PICK_PARTITION_RATE_N);
	order->partition_rate_per = NtaskGetInt64(0, CLAIM_PICK_PARTITION_RATE_PER);
	share = NtaskGetDatum(0, CLAIM_PICK_RETRY_SHARE, &isnull);
	order->retry_share = isnull ? 1.0f : DatumGetFloat4(share);
	if ((order->rate_n > 0 || order->partition_rate_n > 0 ||
		 order->retry_share < 1.0f) && !NtaskLimitAvailable())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: queue \"%s\" has a rate limit or a retry share, which needs ntask in shared_preload_libraries",
						text_to_cstring(queue))));
	return order->max_inflight > 0 || order->partition_max_inflight > 0 ||
		order->rate_n > 0 || order->partition_rate_n > 0 ||
		order->retry_share < 1.0f;
}

/* claim_hold_key: later rounds of this claim pass key k by */
static void
claim_hold_key(ClaimOrder *order, Datum k, bool isnull)
{
	if (!isnull)
		order->held_keys = lappend(order->held_keys,
								   DatumGetTextPCopy(k));
}

/*
 * claim_limit
 *		Which of the picked tasks a limited queue may hand out
 *		(pick->keep[r]); returns how many.  In this order (docs/design.md "Flow
 *		control"):
 *
 *		caps	max_inflight: the queue's cap lock is held (the pick took it;
 *				a pick that could not picked nothing, CLAIM_CAP_LOCK);
 *				partition_max_inflight, or 1 for an ordered queue: the key's
 *				turn lock is held (the pick took it too).  Then the
 *				leases still running are counted in a new snapshot, which
 *				sees every lease committed before the lock was taken, and
 *				the picked tasks are kept in pick order while they fit.
 *		rates	one token of the queue's bucket and of the key's (limit.c)
 *				per kept task, in pick order; a task without tokens stays.
 *
 *		A task kept back stays as it is (due, no attempt, no budget); its
 *		row lock is held until the claim's transaction ends, so the claim
 *		looks no further (order->held).
 */
static int
claim_limit(ClaimCall *call, ClaimPicked *pick, ClaimOrder *order)
{
	text	   *queue = call->queue;
	int			npicked = pick->n;
	bool		fair_pick = pick->keyed;
	bool	   *keep = pick->keep;
	int			kept = 0;
	int			r;
	bool		isnull;

	for (r = 0; r < npicked; r++)
		keep[r] = true;
	kept = npicked;

	if (order->max_inflight > 0 || order->partition_max_inflight > 0)
	{
		SPITupleTable *counts;
		int			nrows;
		int			total = 0;
		int		   *perkey = palloc0(sizeof(int) * npicked);
		int			cap = order->max_inflight;

		/* $1 the queue, $2 (of a shard) the picked tasks' shard */
		Datum		args[2];

		args[0] = PointerGetDatum(queue);
		if (NtaskShardCount() > 0 && order->max_inflight > 0)
		{
			/*
			 * A queue-wide cap on a distributed install, shared out by node:
			 * the node that holds the picked shard, L of the S shards, holds
			 * ceil(cap L / S) leases of the queue.  The pick took the cap
			 * lock on that node (CLAIM_CAP_LOCK runs where the routed pick
			 * runs), so the node's leases are counted exactly, as on one
			 * node; across nodes the shares add up to at most cap + N - 1
			 * for N nodes (docs/scaling.md "Caps across nodes").
			 */
			int			nshards = NtaskShardCount();
			int16	   *same = palloc(sizeof(int16) * nshards);
			Datum	   *elems = palloc(sizeof(Datum) * nshards);
			int			n;
			int			i;

			SPI_tuptable = pick->rows;
			n = NtaskShardGroupShards(NTASK_ID_SHARD(NtaskGetInt64(0, CLAIM_PICK_TASK_ID)), same);
			for (i = 0; i < n; i++)
				elems[i] = Int16GetDatum(same[i]);
			cap = (int) (((int64) order->max_inflight * n + nshards - 1) / nshards);
			args[1] = PointerGetDatum(construct_array(elems, n, INT2OID, sizeof(int16), true,
													  TYPALIGN_SHORT));
			nrows = NtaskExecPlan(&claim_inflight_node_plan, args, NULL, SPI_OK_SELECT);
		}
		else if (NtaskShardCount() > 0)
		{
			/* the picked tasks' shard: their keys' tasks are all there */
			SPI_tuptable = pick->rows;
			args[1] = Int16GetDatum(NTASK_ID_SHARD(NtaskGetInt64(0, CLAIM_PICK_TASK_ID)));
			nrows = NtaskExecPlan(&claim_inflight_shard_plan, args, NULL, SPI_OK_SELECT);
		}
		else
			nrows = NtaskExecPlan(&claim_inflight_plan, args, NULL, SPI_OK_SELECT);
		counts = SPI_tuptable;
		for (r = 0; r < nrows; r++)
			total += NtaskGetInt32(r, CLAIM_INFLIGHT_COUNT);
		/* the leases running for each picked task's key */
		if (fair_pick && order->partition_max_inflight > 0)
			for (r = 0; r < npicked; r++)
			{
				Datum		k;
				bool		knull;
				int			c;

				SPI_tuptable = pick->rows;
				k = NtaskGetDatum(r, CLAIM_PICK_KEY, &knull);
				SPI_tuptable = counts;
				for (c = 0; c < nrows; c++)
				{
					Datum		ck = NtaskGetDatum(c, CLAIM_INFLIGHT_KEY, &isnull);

					if (claim_text_eq(k, knull, ck, isnull))
						perkey[r] = NtaskGetInt32(c, CLAIM_INFLIGHT_COUNT);
				}
			}
		SPI_tuptable = pick->rows;
		kept = 0;
		for (r = 0; r < npicked; r++)
		{
			int			same = 0;	/* kept before r with r's key */
			int			p;

			if (order->max_inflight > 0 && total + kept >= cap)
			{
				keep[r] = false;
				order->held = true;
				order->node_full = cap < order->max_inflight;
				call->held_cap = true;
			}
			else if (fair_pick && order->partition_max_inflight > 0)
			{
				Datum		k = NtaskGetDatum(r, CLAIM_PICK_KEY, &isnull);

				for (p = 0; p < r; p++)
				{
					bool		pnull;

					if (keep[p] &&
						claim_text_eq(k, isnull, NtaskGetDatum(p, CLAIM_PICK_KEY, &pnull), pnull))
						same++;
				}
				if (perkey[r] + same >= order->partition_max_inflight)
				{
					keep[r] = false;
					claim_hold_key(order, k, isnull);
					call->held_cap = true;
				}
			}
			if (keep[r])
				kept++;
		}
	}

	/*
	 * The retries' share: while first attempts are due, a retry goes only
	 * while retries have had at most retry_share of the queue's recent
	 * hand-outs (limit.c); one held back makes the next rounds look for
	 * first attempts only, and when those find none, retries take all.
	 */
	if (order->retry_share < 1.0f && !order->share_off &&
		order->mode != CLAIM_MODE_ORDERED)
	{
		char	   *qname = text_to_cstring(queue);

		SPI_tuptable = pick->rows;
		for (r = 0; r < npicked; r++)
		{
			if (!keep[r])
				continue;
			if (!NtaskShareTake(qname, order->retry_share,
								NtaskGetBool(r, CLAIM_PICK_RETRY)))
			{
				keep[r] = false;
				kept--;
				order->fresh_only = true;
			}
		}
	}

	if (order->rate_n > 0 || (order->partition_rate_n > 0 && fair_pick))
	{
		TimestampTz now = GetCurrentStatementStartTimestamp();
		char	   *qname = text_to_cstring(queue);
		int64		rate_per = order->rate_per;

		/*
		 * A distributed install: this node (the picked shard's,
		 * claim_dist_policy) holding L of the S shards runs the queue's
		 * bucket at L / S of its rate (rate_n per rate_per S / L), so the
		 * nodes' buckets add up to the rate.  A key lives in one shard: its
		 * bucket is whole on its node.
		 */
		if (order->rate_n > 0 && NtaskShardCount() > 0 && NtaskLocalShardCount() > 0)
			rate_per = rate_per * NtaskShardCount() / NtaskLocalShardCount();

		SPI_tuptable = pick->rows;
		for (r = 0; r < npicked; r++)
		{
			text	   *k = NULL;
			TimestampTz next;
			int			empty;

			if (!keep[r])
				continue;
			if (fair_pick && order->partition_rate_n > 0)
			{
				Datum		kd = NtaskGetDatum(r, CLAIM_PICK_KEY, &isnull);

				k = isnull ? NULL : DatumGetTextPP(kd);
			}
			empty = NtaskLimitTake(qname, order->rate_n, rate_per,
								   k ? VARDATA_ANY(k) : NULL,
								   k ? VARSIZE_ANY_EXHDR(k) : 0,
								   order->partition_rate_n, order->partition_rate_per,
								   now, &next);
			if (empty != 0)
			{
				keep[r] = false;
				kept--;
				if (call->held_until == 0 || next < call->held_until)
					call->held_until = next;
				if (empty == NTASK_LIMIT_QUEUE)
					order->held = true;
				else
					claim_hold_key(order, PointerGetDatum(k), false);
			}
		}
	}
	SPI_tuptable = pick->rows;
	return kept;
}

/*
 * claim_round
 *		Pick up to want due tasks, run the guard, close expired attempts,
 *		lease the rest, and put the leased ones into the result tuplestore.
 *		call->lease is the caller's lease, or 0 for the queue's.  Returns how
 *		many were leased, or -1 if nothing was due.  *more is set when
 *		another round could find more (some picked tasks were not handed out
 *		and the pick was full).  Each result row gets the call->nextra
 *		columns of call->extra appended.  All SPI results stay in the caller's SPI
 *		connection.
 */
static int
claim_round(ClaimCall *call, int want, bool *more, int64 *lease_usecs,
			ClaimOrder *order)
{
	text	   *queue = call->queue;
	Datum		worker = PointerGetDatum(call->worker);
	Datum		lease;
	char	   *guard;
	char	   *guard_owner = NULL;
	bool		guard_busy = false;
	bool		any_retry = false;	/* a picked task had an attempt before */
	bool		isnull;
	Datum		values[CLAIM_LEASE_NARGS];
	ClaimPicked pick;
	Datum	   *ids;
	Datum	   *tokens;			/* each id's token as picked */
	Datum	   *taken;
	Datum	   *taken_tokens;
	int			nheld;
	Datum		invoked_ids;
	int			nkeys = 0;
	int			nids = 0;
	int			ntaken = 0;
	int			nrows;
	int			leased = 0;
	int			r;
	SPITupleTable *leased_rows;

	nheld = list_length(order->held_keys);
	pick.n = claim_pick(queue, want, order);
	pick.rows = SPI_tuptable;
	*more = false;
	/* a waiting claim sleeps until a pause ends (or a resume wakes it) */
	if ((order->paused || order->keys_paused) && order->pause_ends != 0 &&
		(call->held_until == 0 || order->pause_ends < call->held_until))
		call->held_until = order->pause_ends;
	if (pick.n == 0 && order->fresh_only)
	{
		/* no first attempt is due: the held retries may go after all */
		order->fresh_only = false;
		order->share_off = true;
		*more = true;
		return 0;
	}
	if (pick.n == 0)
		return -1;
	lease = call->lease ? call->lease : NtaskGetDatum(0, CLAIM_PICK_LEASE, &isnull);
	*lease_usecs = NtaskIntervalUsecs(DatumGetIntervalP(lease));
	guard = NtaskGetCString(0, CLAIM_PICK_GUARD);
	if (guard != NULL)
	{
		/* the guard with the owner recorded with it, from one row */
		guard = NtaskQueueGuard(queue, &guard_owner);
		SPI_tuptable = pick.rows;
	}

	ids = palloc(sizeof(Datum) * pick.n);
	tokens = palloc(sizeof(Datum) * pick.n);
	taken = palloc(sizeof(Datum) * pick.n);
	taken_tokens = palloc(sizeof(Datum) * pick.n);
	pick.keep = palloc(sizeof(bool) * pick.n);
	pick.keyed = pick.rows->tupdesc->natts >= CLAIM_PICK_KEY;
	if (claim_read_policy(queue, order))
		(void) claim_limit(call, &pick, order);
	else
		memset(pick.keep, true, sizeof(bool) * pick.n);
	for (r = 0; r < pick.n; r++)
	{
		int64		task_id;
		bool		was_leased;

		SPI_tuptable = pick.rows;	/* the guard may run SPI statements */
		task_id = NtaskGetInt64(r, CLAIM_PICK_TASK_ID);
		was_leased = NtaskGetBool(r, CLAIM_PICK_WAS_LEASED);
		/* keys in this pick (rows of one key are adjacent) */
		if (pick.keyed &&
			(r == 0 || !DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID,
															 NtaskGetDatum(r, CLAIM_PICK_KEY, &isnull),
															 NtaskGetDatum(r - 1, CLAIM_PICK_KEY, &isnull)))))
			nkeys++;
		if (!pick.keep[r])
			continue;			/* held back by a limit (claim_limit) */
		if (guard != NULL)
		{
			char	   *reason;
			NtaskGuardVerdict v;

			v = NtaskRunGuard(guard, guard_owner,
							  DatumGetTextPP(NtaskGetDatum(r, CLAIM_PICK_TASK_KEY, &isnull)),
							  DatumGetJsonbP(NtaskGetDatum(r, CLAIM_PICK_PAYLOAD, &isnull)),
							  &reason, true);
			if (v == NTASK_GUARD_BUSY)
			{
				/*
				 * Something the guard reads was locked (lock timeout,
				 * deadlock): the task stays due for a later claim; this one
				 * looks no further (another round would pick it again).
				 */
				guard_busy = true;
				continue;
			}
			if (v == NTASK_GUARD_ERROR)
			{
				/*
				 * The guard could not decide: the task needs a human, the
				 * queue goes on.  The error text is in the audit log.
				 */
				NtaskFinishTask(task_id, "repair_required", "guard_error",
								"guard_error", "permanent", "guard");
				call->writes++;
				NtaskAudit(TextDatumGetCString(worker), "guard_error", task_id,
						   text_to_cstring(queue), reason,
						   was_leased ? "leased" : "ready", "repair_required");
				continue;
			}
			if (v != NTASK_GUARD_PROCEED)
			{
				const char *to = v == NTASK_GUARD_SKIP ? "skipped" : "canceled";

				NtaskFinishTask(task_id, to,
								reason ? reason : psprintf("guard: %s", to),
								"guard", NULL, NULL);
				call->writes++;
				continue;
			}
		}
		SPI_tuptable = pick.rows;	/* the guard may have run statements */
		tokens[nids] = Int64GetDatum(NtaskGetInt64(r, CLAIM_PICK_TOKEN));
		ids[nids++] = Int64GetDatum(task_id);
		if (was_leased)
		{
			taken_tokens[ntaken] = tokens[nids - 1];
			taken[ntaken++] = Int64GetDatum(task_id);
		}
		if (NtaskGetBool(r, CLAIM_PICK_RETRY))
			any_retry = true;
	}

	invoked_ids = ntaken > 0 ?
		NtaskCloseExpiredAttempts(NtaskInt8Array(taken, ntaken),
								  NtaskInt8Array(taken_tokens, ntaken)) :
		NtaskInt8Array(NULL, 0);

	if (nids > 0)
	{
		call->writes++;		/* closes and leases (or diverts) nids rows */
		values[CLAIM_LEASE_ARG_IDS] = NtaskInt8Array(ids, nids);
		values[CLAIM_LEASE_ARG_WORKER] = worker;
		values[CLAIM_LEASE_ARG_LEASE] = lease;
		values[CLAIM_LEASE_ARG_TAKEN] = NtaskInt8Array(taken, ntaken);
		values[CLAIM_LEASE_ARG_INVOKED_IDS] = invoked_ids;
		values[CLAIM_LEASE_ARG_TOKEN_FLOOR] = Int64GetDatum(NtaskTokenFloor());
		values[CLAIM_LEASE_ARG_NOW] = NtaskStatementTs();
		values[CLAIM_LEASE_ARG_LEASE_UNTIL] =
			DirectFunctionCall2(timestamptz_pl_interval,
								values[CLAIM_LEASE_ARG_NOW], lease);
		values[CLAIM_LEASE_ARG_SHARD] =
			Int16GetDatum(NtaskIdsShard(values[CLAIM_LEASE_ARG_IDS]));
		values[CLAIM_LEASE_ARG_INVOKED] = BoolGetDatum(order->invoked);
		values[CLAIM_LEASE_ARG_TOKENS] = NtaskInt8Array(tokens, nids);
		if (NtaskShardCount() == 0)
			nrows = NtaskExecPlan(&claim_lease_plan, values, NULL, SPI_OK_SELECT);
		else
		{
			Datum		rv[2];
			int			nrcpt;
			int64	   *rcpt;

			/*
			 * A receipt is written with a token, so a task on its first
			 * attempt has none: the lookup is for retries and takeovers.
			 */
			rv[0] = values[CLAIM_LEASE_ARG_IDS];
			rv[1] = values[CLAIM_LEASE_ARG_SHARD];
			nrcpt = any_retry ?
				NtaskExecPlan(&claim_receipts_plan, rv, NULL, SPI_OK_SELECT) : 0;
			rcpt = palloc(sizeof(int64) * Max(nrcpt, 1));
			for (r = 0; r < nrcpt; r++)
				rcpt[r] = NtaskGetInt64(r, 1);	/* the task id */
			nrows = NtaskExecPlan(&claim_lease_dist_plan, values, NULL,
								  SPI_OK_UPDATE_RETURNING);
			leased_rows = SPI_tuptable;
			claim_mark_committed(leased_rows, nrows, rcpt, nrcpt);
			SPI_tuptable = leased_rows;
		}
		leased_rows = SPI_tuptable;
		for (r = 0; r < nrows; r++)
		{
			Datum		vals[CLAIM_NCOLS + CLAIM_MAX_EXTRA + 1];
			bool		nulls[CLAIM_NCOLS + CLAIM_MAX_EXTRA + 1];
			int			c;

			SPI_tuptable = leased_rows;
			if (!NtaskGetBool(r, CLAIM_COL_LEASED))
				continue;		/* diverted to repair_required */
			for (c = 0; c < CLAIM_NCOLS; c++)
				vals[c] = NtaskGetDatum(r, CLAIM_COL_TASK_ID + c, &nulls[c]);
			for (c = 0; c < call->nextra; c++)
			{
				vals[CLAIM_NCOLS + c] = call->extra[c];
				nulls[CLAIM_NCOLS + c] = call->extranulls[c];
			}
			/* the context column, last: one test for a task without one */
			c = CLAIM_NCOLS + call->nextra;
			vals[c] = (Datum) 0;
			nulls[c] = true;
			if (NtaskGetBool(r, CLAIM_COL_HAS_CONTEXT))
				vals[c] = claim_context(r, queue, &call->context_bytes, &nulls[c]);
			tuplestore_putvalues(call->rsinfo->setResult, call->rsinfo->setDesc,
								 vals, nulls);
			leased++;
		}
	}

	*more = pick.n == want && leased < want;
	/* a distributed install: the next round looks in the next shards */
	if (pick.n > 0 && leased < want && NtaskWalkShardCount() > 1)
		*more = true;
	if (order->node_full && !guard_busy && leased < want &&
		NtaskWalkShardCount() > 1 && NtaskLocalShardCount() == 0)
		*more = true;			/* a node's share is full: the next shards may
								 * be another node's (its rows stay locked);
								 * a worker node walks only its own */
	else if (order->held || guard_busy)
		*more = false;			/* held rows stay locked, a busy guard's task
								 * is due still: look no further */
	else if (order->fresh_only && leased < want)
		*more = true;			/* look for first attempts */
	else if (order->mode == CLAIM_MODE_ORDERED)
		*more = list_length(order->held_keys) > nheld && leased < want;
	else if (pick.keyed && pick.n < want && leased < want)
	{
		/* went around every key with work: split the rest over them */
		order->per = (want - leased + nkeys - 1) / nkeys;
		*more = true;
	}
	return leased;
}

/*
 * NtaskClaimCallInit
 *		Read and check a claim's queue, worker, max_tasks (required,
 *		1..NTASK_MAX_CLAIM) and lease (NULL or positive) arguments, given
 *		their positions, into c; the rest of c is zero (no extra columns,
 *		not invoked, no wait).
 */
void
NtaskClaimCallInit(ClaimCall *c, FunctionCallInfo fcinfo, ReturnSetInfo *rsinfo,
				   int a_queue, int a_worker, int a_max_tasks, int a_lease)
{
	int32		max_tasks;

	memset(c, 0, sizeof(ClaimCall));
	c->rsinfo = rsinfo;
	c->queue = NtaskArgText(fcinfo, a_queue, "queue", NTASK_MAX_QUEUE_LEN);
	c->worker = NtaskArgText(fcinfo, a_worker, "worker", NTASK_MAX_NAME_LEN);
	if (PG_ARGISNULL(a_max_tasks))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: max_tasks must not be NULL")));
	max_tasks = PG_GETARG_INT32(a_max_tasks);
	if (max_tasks < 1 || max_tasks > NTASK_MAX_CLAIM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: max_tasks must be between 1 and %d", NTASK_MAX_CLAIM)));
	if (!PG_ARGISNULL(a_lease))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(a_lease), "lease");
	c->max_tasks = max_tasks;
	c->lease = PG_ARGISNULL(a_lease) ? (Datum) 0 : PG_GETARG_DATUM(a_lease);
}

/*
 * NtaskClaimInto
 *		The body of a claim, inside the caller's SPI connection: lease up to
 *		c->max_tasks due tasks of c->queue to c->worker (c->lease: the
 *		caller's lease, or 0 for the queue's) and put one row per leased
 *		task into c->rsinfo's tuplestore, ntask_claim's columns followed by
 *		the c->nextra columns of c->extra (at most CLAIM_MAX_EXTRA), then the
 *		context column.
 *		Returns how many were leased; when that is more than zero, the
 *		commit is made durable.  Sets c's out fields.
 */
int
NtaskClaimInto(ClaimCall *c)
{
	int			got = 0;
	int			round;
	bool		more = true;
	int64		lease_usecs = 0;
	ClaimOrder	order = {.mode = CLAIM_MODE_UNKNOWN, .per = 1};	/* the rest zero */

	/*
	 * Its decisions read the queue as of the statement: the in-flight
	 * count behind caps and ordered keys, in a transaction snapshot, would
	 * miss the leases committed since the transaction began (two in flight
	 * under max_inflight => 1, spec claim_repeatable_read).
	 */
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("ntask: a claim needs READ COMMITTED"),
				 errdetail("Under REPEATABLE READ or SERIALIZABLE its snapshot is the transaction's: caps and ordered keys would miss the leases committed since it began."),
				 errhint("Claim in a READ COMMITTED transaction (the default).")));
	order.retry_share = 1.0f;
	order.invoked = c->invoked;
	c->held_cap = false;
	c->held_until = 0;
	/* a shard moved since the last claim: read the placements again */
	NtaskRefreshPlacements();

	Assert(c->nextra >= 0 && c->nextra <= CLAIM_MAX_EXTRA);
	for (round = 0; round < CLAIM_MAX_ROUNDS && got < c->max_tasks && more; round++)
	{
		int			n = claim_round(c, c->max_tasks - got, &more, &lease_usecs,
									&order);

		got += Max(n, 0);
	}

	/*
	 * A token handed out must stay handed out: if this commit were
	 * acknowledged and then lost (synchronous_commit = off and a crash),
	 * the next claim would issue the same token to another worker.  So the
	 * commit of a transaction that leased a task is flushed whatever the
	 * session's synchronous_commit says.
	 */
	if (got > 0)
	{
		ForceSyncCommit();
		claim_warn_old_xact(lease_usecs, c->waited_usecs);
		/* a takeover may claim these when their leases run out */
		NtaskWakeWaitersAtCommit(text_to_cstring(c->queue), 0,
								 GetCurrentStatementStartTimestamp() + lease_usecs);
	}
	return got;
}
