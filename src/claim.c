/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  The claim (ntask_claim, NtaskClaimInto): hand out due tasks under a
 *	  lease with a new fencing token.  The waiting claim is wait.c's
 *	  (NtaskClaimWait); transition-and-claim is transition.c's.
 *
 * One round of a claim is at most three statements, each simple enough
 * that its generic plan cannot go wrong (no joins: every row is reached by
 * primary key or by the ready-set index):
 *
 *	pick	per priority, highest first (a loose index scan), SELECT ...
 *			WHERE queue = $1 AND priority = p AND due_at <= now()
 *			AND lease_until IS NULL ORDER BY due_at, task_id LIMIT 1000
 *			FOR UPDATE SKIP LOCKED (task_due_idx; finished and leased rows
 *			are not in that index), executed with an SPI row count of n:
 *			only the n rows returned are locked, and the constant LIMIT
 *			keeps the generic plan an index scan.  Before it the claim
 *			asks task_lease_idx in C whether the queue has an expired
 *			lease (claim_lease_expired, a descent or two); when it may,
 *			the claim runs instead a pick that, per priority, merges that
 *			range with the expired leases (CLAIM_PICK_READY_ONLY,
 *			CLAIM_PICK_MERGED; routed: CLAIM_PICK's gate in the statement)
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

#include "compat.h"
#include "context.h"
#include "coord.h"
#include "fair.h"
#include "guard.h"
#include "limit.h"
#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common/pg_prng.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(ntask_claim);

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
 * claim_pick_keys_pair, which passes the paused keys by (so only a queue
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
 * range of task_due_idx (and of task_lease_idx for the expired leases,
 * below).  A single ORDER BY priority DESC, due_at
 * scan would walk every not-yet-due entry of a higher priority (tasks
 * scheduled for later, retries in backoff) on every claim: 20k future tasks
 * at priority 5 made a claim of priority-0 work 7x slower (pgbench,
 * prepared, 4 clients); this form costs the same as that scan when there is
 * one priority.  The executor is stopped after the rows wanted, so later
 * priorities are not even looked up when the first one fills the claim.
 * Rows come out in pr order (a nested loop over the CTE).
 *
 * now: what "due" is measured against.  On one node the statement's own
 * timestamp; a distributed pick takes the claim's (NtaskStatementTs(), a
 * parameter), the time its lease and ledger row count from:
 * statement_timestamp() in a routed read is the shard node's, later than
 * the claim's by the hop and any wait for the shard's metadata lock (a
 * move), so a claim took a task released or retried after its own start
 * and its ledger row said it was claimed before the attempt before had
 * ended (t/027).
 */
#define CLAIM_NOW_LOCAL "pg_catalog.statement_timestamp()"

/*
 * The due tasks of queue $1 at priority pr.p, unlocked, in the claim's
 * order (due_at, task_id): the ready ones from task_due_idx, which holds
 * no leased row, merged (a Merge Append of two index scans) with the
 * expired leases from task_lease_idx, which holds the leased rows in the
 * same order (a leased row's due_at is its lease_until).  An expired
 * lease so competes at its lease_until, as it did when both were one
 * index (issue 48, lever (b): a claim writes no task_due_idx entry).
 * Each scan has its own ORDER BY and LIMIT: only a subquery sorted by
 * itself makes the planner merge (an arm with a WHERE is planned apart,
 * for all its rows, unless it says it wants them in order).  pred: the shard (and paused keys) predicate on t, applied in each scan;
 * now: what "due" is measured against; fresh: the first-attempts-only
 * test; lim: how many (the rows a claim may skip as locked included).
 */
#define CLAIM_DUE_MERGED(pred, now, fresh, lim) \
	"  SELECT u.task_id, u.due_at FROM ( " \
	"    (SELECT t.task_id, t.due_at FROM ntask.task t " \
	"     WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"       AND t.priority OPERATOR(pg_catalog.=) pr.p " \
	"       AND t.due_at OPERATOR(pg_catalog.<=) " now " AND t.lease_until IS NULL " fresh \
	"     ORDER BY t.due_at, t.task_id LIMIT " lim ") " \
	"    UNION ALL " \
	"    (SELECT t.task_id, t.lease_until FROM ntask.task t " \
	"     WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"       AND t.priority OPERATOR(pg_catalog.=) pr.p " \
	"       AND t.lease_until OPERATOR(pg_catalog.<=) " now " " fresh \
	"     ORDER BY t.lease_until, t.task_id LIMIT " lim ") " \
	"  ) u ORDER BY u.due_at, u.task_id LIMIT " lim " "

/*
 * Whether queue $1 has an expired lease at priority pr.p: one descent of
 * task_lease_idx (the gate of the pick below).
 */
#define CLAIM_EXPIRED_AT_P(pred, now) \
	"EXISTS (SELECT FROM ntask.task t " \
	"  WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"    AND t.priority OPERATOR(pg_catalog.=) pr.p " \
	"    AND t.lease_until OPERATOR(pg_catalog.<=) " now ")"

#define CLAIM_PICK_COLS \
	"t.task_id, t.state OPERATOR(pg_catalog.=) 'leased' AS was_leased, " \
	"t.task_key, t.payload, t.attempts OPERATOR(pg_catalog.>) 0 AS retry, t.token "

/*
 * The due tasks of a priority, locked: the pick's head and tail, shared by
 * the two statements of the plain pick below.
 */
#define CLAIM_PICK_HEAD \
	"SELECT x.task_id, x.was_leased, x.task_key, x.payload, q.lease, q.guard, " \
	"  " CLAIM_POLICY ", x.retry, x.token " \
	"FROM ntask.queue q, pr, "
#define CLAIM_PICK_TAIL(qpred) \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 AND pr.p IS NOT NULL " \
	"  AND q.fairness OPERATOR(pg_catalog.=) 'none' AND q.priority_aging IS NULL " \
	"  AND " CLAIM_RUNNING qpred \
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK

/* the range of task_due_idx at priority pr.p, locked as it is read */
#define CLAIM_PICK_READY(pred, limit, now) \
	"    SELECT " CLAIM_PICK_COLS \
	"    FROM ntask.task t " \
	"    WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"      AND t.priority OPERATOR(pg_catalog.=) pr.p " \
	"      AND t.due_at OPERATOR(pg_catalog.<=) " now " AND t.lease_until IS NULL " \
	"      AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) " \
	"    ORDER BY t.due_at, t.task_id " \
	"    LIMIT " limit " FOR UPDATE OF t SKIP LOCKED"

/*
 * The routed plain pick, the statement every routed claim runs (a claim
 * on one node runs CLAIM_PICK_READY_ONLY or CLAIM_PICK_MERGED, chosen by
 * its probe in C, below: that probe cannot read a shard on another node,
 * and a probe statement of its own would be one more round trip to it).
 * Per priority a gate g.expired (CLAIM_EXPIRED_AT_P, one descent of
 * task_lease_idx) chooses one of two arms (a one-time filter):
 *
 *	no expired lease (the common case): the range of task_due_idx, locked
 *		as it is read (ORDER BY due_at, task_id LIMIT ... FOR UPDATE SKIP
 *		LOCKED), the plan the pick had before lever (b);
 *	some expired lease: no task, but limit marker rows (task_id NULL, the
 *		priority in the token column, CLAIM_PICK_MARKER) from a lazy
 *		set-returning function: they fill the claim's count, so the
 *		executor stops there and no lower priority is read or locked.  The
 *		claim then runs CLAIM_PICK_MERGED from that priority down for what
 *		is left (claim_plain_run).
 *
 * So a claim with no expired lease in reach initialises a plan the size of
 * the old pick's plus the gate's index scan; the merged plan (Merge Append,
 * primary-key probes) is set up only by the claims that take a lease over.
 * The routed pick runs whole on the shard's node (the executor's stop after
 * n rows does not reach it), so there its LIMIT, the claim's count, bounds
 * each priority, as before lever (b).
 */
#define CLAIM_PICK(pred, limit, qpred, now) \
	NTASK_PRIORITY_WALK_ON(pred) \
	CLAIM_PICK_HEAD \
	"LATERAL (SELECT " CLAIM_EXPIRED_AT_P(pred, now) " AS expired OFFSET 0) g, LATERAL ( " \
	"  SELECT a.* FROM ( " CLAIM_PICK_READY(pred, limit, now) ") a " \
	"  WHERE NOT g.expired " \
	"  UNION ALL " \
	"  SELECT NULL, NULL, NULL, NULL, NULL, pr.p::pg_catalog.int8 " \
	"  FROM (SELECT pg_catalog.generate_series(1, " limit ")) s " \
	"  WHERE g.expired) x " \
	CLAIM_PICK_TAIL(qpred)

/*
 * The plain pick without the gate, the statement every claim runs on one
 * node (a plain install, the direct path): the range of task_due_idx per
 * priority, locked as it is read, the plan the pick had before lever (b).
 * The claim runs it only when its probe of task_lease_idx in C
 * (claim_lease_expired) found no expired lease in the queue; when it found
 * one it runs CLAIM_PICK_MERGED from the highest priority down instead.
 * So a claim sets up neither the gate nor the marker arm, and the
 * common claim's plan is the size of the old pick's (claim_plain_run).
 */
#define CLAIM_PICK_READY_ONLY(pred, limit, qpred, now) \
	NTASK_PRIORITY_WALK_ON(pred) \
	CLAIM_PICK_HEAD \
	"LATERAL ( " CLAIM_PICK_READY(pred, limit, now) ") x " \
	CLAIM_PICK_TAIL(qpred)

/*
 * The plain pick from priority $8 down, run only after CLAIM_PICK met an
 * expired lease at $8 (its marker), or, on one node, from the top ($8 the
 * largest priority) when the probe in C may have found one (the statement
 * is then the whole pick, gated per priority): per priority the same gate, and where
 * it says so the merged candidates (CLAIM_DUE_MERGED, at most
 * NTASK_MAX_CLAIM), each locked by its primary key with SKIP LOCKED and
 * its due time checked again (a claim that leased it meanwhile moved
 * due_at to its lease's end), in their order (a nested loop over the
 * candidates), at most limit of them: only the rows handed out are locked.
 * An expired lease so competes at its lease_until, as it did when both
 * were one index.  The walk starts at $8 (wpred bounds its descents; the
 * outer test passes priority 0 by when $8 is below it).
 */
#define CLAIM_PICK_MERGED(pred, limit, qpred, now) \
	NTASK_PRIORITY_WALK_ON(pred " AND t.priority OPERATOR(pg_catalog.<=) $8 ") \
	CLAIM_PICK_HEAD \
	"LATERAL (SELECT " CLAIM_EXPIRED_AT_P(pred, now) " AS expired OFFSET 0) g, LATERAL ( " \
	"  SELECT a.* FROM ( " CLAIM_PICK_READY(pred, limit, now) ") a " \
	"  WHERE NOT g.expired " \
	"  UNION ALL " \
	"  SELECT y.* FROM ( " \
	CLAIM_DUE_MERGED(pred, now, "AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) ", \
					 CppAsString2(NTASK_MAX_CLAIM)) \
	"  ) c, LATERAL ( " \
	"    SELECT " CLAIM_PICK_COLS \
	"    FROM ntask.task t " \
	"    WHERE t.task_id OPERATOR(pg_catalog.=) c.task_id " pred \
	"      AND t.queue OPERATOR(pg_catalog.=) $1 " \
	"      AND t.priority OPERATOR(pg_catalog.=) pr.p " \
	"      AND t.due_at OPERATOR(pg_catalog.<=) " now " " \
	"      AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) " \
	"    FOR UPDATE OF t SKIP LOCKED) y " \
	"  WHERE g.expired LIMIT " limit ") x " \
	CLAIM_PICK_TAIL(" AND pr.p OPERATOR(pg_catalog.<=) $8 " qpred)

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
	CLAIM_PICK_TOKEN,			/* the task's token as picked (the lease's
								 * check) */
	CLAIM_PICK_KEY				/* fair and ordered picks only */
} ClaimPickCol;

#define CLAIM_PICK_NCOLS CLAIM_PICK_TOKEN	/* the plain, aging, keyless picks' */
#define CLAIM_KEYED_NCOLS CLAIM_PICK_KEY	/* the fair and ordered picks' */

/*
 * The parameters of the plain picks (claim_pick_pair, its keys-paused
 * twin and the keyless one): values[CLAIM_PICK_ARG_X] is $(X + 1).  The
 * plain variants of claim_pick_pair and of the keyless pick take the
 * first three, the keys-paused one the first six (passing $4 and $5 by);
 * the routed variants all seven.
 */
typedef enum ClaimPickArg
{
	CLAIM_PICK_ARG_QUEUE,		/* $1 */
	CLAIM_PICK_ARG_CALLER,		/* $2, for the worker_role */
	CLAIM_PICK_ARG_FRESH_ONLY,	/* $3, first attempts only */
	CLAIM_PICK_ARG_SHARD,		/* $4, the routed picks' */
	CLAIM_PICK_ARG_LIMIT,		/* $5, the routed picks' */
	CLAIM_PICK_ARG_PAUSED_KEYS, /* $6, the keys-paused picks' */
	CLAIM_PICK_ARG_NOW,			/* $7, the routed picks': the claim's time */
	CLAIM_PICK_ARG_FROM,		/* $8, the merged picks': the priority of the
								 * expired lease the plain pick met */
	CLAIM_PICK_NARGS,
	CLAIM_PICK_ROUTED_NARGS = CLAIM_PICK_ARG_FROM,	/* the routed variants' */
	CLAIM_PICK_PLAIN_NARGS = CLAIM_PICK_ARG_SHARD,	/* the plain variants' */
	CLAIM_PICK_KEYS_NARGS = CLAIM_PICK_ARG_NOW	/* the keys-paused plain one's */
} ClaimPickArg;

/* the parameters of claim_aging_pair: the plain pick's first three */
typedef enum ClaimAgingArg
{
	CLAIM_AGING_ARG_QUEUE,		/* $1 */
	CLAIM_AGING_ARG_CALLER,		/* $2 */
	CLAIM_AGING_ARG_FRESH_ONLY, /* $3 */
	CLAIM_AGING_ARG_PER_LEVEL,	/* $4, candidates read per priority */
	CLAIM_AGING_NARGS
} ClaimAgingArg;

/*
 * The parameters of the fair and ordered picks (CLAIM_FAIR_PICK,
 * CLAIM_ORDERED_PICK), the same way; the first two as the plain pick's.
 * The last three are the routed picks' only.
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
	CLAIM_KEYED_ARG_NOW,		/* $10, the claim's statement timestamp */
	CLAIM_KEYED_NARGS,
	CLAIM_FAIR_PLAIN_NARGS = CLAIM_KEYED_ARG_SHARD,	/* the plain fair pick's */
	CLAIM_ORDERED_PLAIN_NARGS = CLAIM_KEYED_ARG_FRESH_ONLY	/* the plain ordered one's */
} ClaimKeyedArg;

/* the parameters of claim_paused_keys_plan */
typedef enum ClaimPausedArg
{
	CLAIM_PAUSED_ARG_QUEUE,		/* $1 */
	CLAIM_PAUSED_NARGS
} ClaimPausedArg;

/* the columns of claim_paused_keys_plan */
typedef enum ClaimPausedCol
{
	CLAIM_PAUSED_KEYS = 1,		/* text[], NULL: none paused now */
	CLAIM_PAUSED_ENDS			/* the earliest end of those pauses */
} ClaimPausedCol;

/* the parameters of claim_inflight_pair and claim_inflight_node_pair */
typedef enum ClaimInflightArg
{
	CLAIM_INFLIGHT_ARG_QUEUE,	/* $1 */
	CLAIM_INFLIGHT_ARG_SHARDS,	/* $2, the shard, or the node's (an array) */
	CLAIM_INFLIGHT_NARGS
} ClaimInflightArg;

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

#define CLAIM_QUEUE_NCOLS CLAIM_QUEUE_AGING

/* the parameters of claim_queue_plan */
typedef enum ClaimQueueArg
{
	CLAIM_QUEUE_ARG_QUEUE,		/* $1 */
	CLAIM_QUEUE_ARG_CALLER,		/* $2, for the worker_role */
	CLAIM_QUEUE_NARGS
} ClaimQueueArg;

/* the columns of claim_inflight_pair and claim_inflight_node_pair */
typedef enum ClaimInflightCol
{
	CLAIM_INFLIGHT_KEY = 1,
	CLAIM_INFLIGHT_COUNT
} ClaimInflightCol;

#define CLAIM_INFLIGHT_NCOLS CLAIM_INFLIGHT_COUNT

/*
 * The plain pick (the plain variant, on a plain install and the direct
 * path: CLAIM_PICK_READY_ONLY, run when the probe found no expired lease),
 * and (the routed variant, CLAIM_PICK with its gate) a distributed
 * install's within shard $4 (docs/scaling.md "Claims across shards"): one router statement,
 * with the claim's own count $5 as the LIMIT: the worker runs the
 * statement whole (the executor's stop after n rows does not reach it), so
 * the constant LIMIT would lock up to that many rows there until the claim
 * commits, and every concurrent claim would find the shard taken
 * (measured: 68 instead of hundreds of claims/s, bench/citus).  Its after
 * step refuses the flow control a distributed claim cannot keep where it
 * runs (claim_dist_policy).  The parameters are ClaimPickArg: the plain
 * variant takes the first three.
 */
static void claim_pick_policy(SPITupleTable *tt, int n, Datum *values, char *nulls);

#define CLAIM_PICK_TYPES \
	TEXTOID, OIDOID, BOOLOID, INT2OID, INT4OID, TEXTARRAYOID, TIMESTAMPTZOID, INT4OID
#define CLAIM_PICK_SHARD_PRED(alias) " AND " alias ".shard OPERATOR(pg_catalog.=) $4 "

static NtaskPair claim_pick_pair = NTASK_PAIR("claim pick",
											  NTASK_PLAIN(CLAIM_PICK_NCOLS, CLAIM_PICK_READY_ONLY("", CppAsString2(NTASK_MAX_CLAIM),
																					" AND " CLAIM_KEYS_FREE, CLAIM_NOW_LOCAL),
														  CLAIM_PICK_PLAIN_NARGS, SPI_OK_SELECT),
											  NTASK_ROUTED(CLAIM_PICK_NCOLS, CLAIM_PICK(CLAIM_PICK_SHARD_PRED("t"), "$5",
																		  " AND " CLAIM_KEYS_FREE, "$7"),
														   CLAIM_PICK_ROUTED_NARGS, SPI_OK_SELECT, NULL, claim_pick_policy),
											  CLAIM_PICK_TYPES);

/*
 * The plain pick of a queue with paused keys: the same, but a task whose
 * key is in $6 (the keys paused now, claim_read_mode) is passed by.  Only
 * a queue whose row says a key pause is live runs it.  Its plain variant
 * does not reference $4 and $5, the routed variant's shard and count.
 */
#define CLAIM_KEY_NOT_PAUSED \
	" AND (t.partition_key IS NULL " \
	"  OR t.partition_key OPERATOR(pg_catalog.<>) ALL ($6)) "

static NtaskPair claim_pick_keys_pair = NTASK_PAIR("claim pick (keys paused)",
												   NTASK_PLAIN(CLAIM_PICK_NCOLS, CLAIM_PICK_READY_ONLY(CLAIM_KEY_NOT_PAUSED,
																						 CppAsString2(NTASK_MAX_CLAIM), "",
																						 CLAIM_NOW_LOCAL),
															   CLAIM_PICK_KEYS_NARGS, SPI_OK_SELECT),
												   NTASK_ROUTED(CLAIM_PICK_NCOLS, CLAIM_PICK(CLAIM_PICK_SHARD_PRED("t") CLAIM_KEY_NOT_PAUSED,
																			   "$5", "", "$7"),
																CLAIM_PICK_ROUTED_NARGS, SPI_OK_SELECT, NULL, claim_pick_policy),
												   CLAIM_PICK_TYPES);

/*
 * The two picks above from priority $8 down with the expired leases
 * merged in (CLAIM_PICK_MERGED): run only when the probe may have found
 * an expired lease ($8 the largest priority: the whole walk) or after the
 * routed pick met one (claim_plain_run).  Every variant takes all eight
 * parameters; the plain ones pass $4, $5 and $7 by (and $6, the first).
 */
static NtaskPair claim_merged_pair = NTASK_PAIR("claim pick (expired leases)",
												NTASK_PLAIN(CLAIM_PICK_NCOLS, CLAIM_PICK_MERGED("", CppAsString2(NTASK_MAX_CLAIM),
																			   " AND " CLAIM_KEYS_FREE, CLAIM_NOW_LOCAL),
															CLAIM_PICK_NARGS, SPI_OK_SELECT),
												NTASK_ROUTED(CLAIM_PICK_NCOLS, CLAIM_PICK_MERGED(CLAIM_PICK_SHARD_PRED("t"), "$5",
																				" AND " CLAIM_KEYS_FREE, "$7"),
															 CLAIM_PICK_NARGS, SPI_OK_SELECT, NULL, claim_pick_policy),
												CLAIM_PICK_TYPES);

static NtaskPair claim_merged_keys_pair = NTASK_PAIR("claim pick (keys paused, expired leases)",
													 NTASK_PLAIN(CLAIM_PICK_NCOLS, CLAIM_PICK_MERGED(CLAIM_KEY_NOT_PAUSED,
																					CppAsString2(NTASK_MAX_CLAIM), "",
																					CLAIM_NOW_LOCAL),
																 CLAIM_PICK_NARGS, SPI_OK_SELECT),
													 NTASK_ROUTED(CLAIM_PICK_NCOLS, CLAIM_PICK_MERGED(CLAIM_PICK_SHARD_PRED("t") CLAIM_KEY_NOT_PAUSED,
																					 "$5", "", "$7"),
																  CLAIM_PICK_NARGS, SPI_OK_SELECT, NULL, claim_pick_policy),
													 CLAIM_PICK_TYPES);

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

/* the aging pick's candidates: fresh only ($3), no paused key */
#define CLAIM_AGING_FILTER \
	"AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) " \
	"AND (t.partition_key IS NULL OR NOT EXISTS ( " \
	"  SELECT FROM ntask.key_pause k " \
	"  WHERE k.queue OPERATOR(pg_catalog.=) $1 " \
	"    AND k.partition_key OPERATOR(pg_catalog.=) t.partition_key " \
	"    AND k.until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp())) "

#define CLAIM_AGING_PICK \
	NTASK_PRIORITY_WALK \
	", h AS MATERIALIZED ( " \
	"  SELECT c.task_id, c.due_at, " CLAIM_AGING_EFF " AS eff " \
	"  FROM ntask.queue a, pr, LATERAL ( " \
	CLAIM_DUE_MERGED("", CLAIM_NOW_LOCAL, CLAIM_AGING_FILTER, "$4") ") c " \
	"  WHERE a.queue OPERATOR(pg_catalog.=) $1 AND pr.p IS NOT NULL " \
	"    AND a.priority_aging IS NOT NULL " \
	"  ORDER BY eff DESC, c.due_at, c.task_id " \
	") " \
	"SELECT x.task_id, x.was_leased, x.task_key, x.payload, q.lease, q.guard, " \
	"  " CLAIM_POLICY ", x.retry, x.token " \
	"FROM ntask.queue q, h, LATERAL ( " \
	"  SELECT t.task_id, t.state OPERATOR(pg_catalog.=) 'leased' AS was_leased, " \
	"    t.task_key, t.payload, t.attempts OPERATOR(pg_catalog.>) 0 AS retry, t.token " \
	"  FROM ntask.task t " \
	"  WHERE t.task_id OPERATOR(pg_catalog.=) h.task_id " \
	"    AND t.queue OPERATOR(pg_catalog.=) $1 " \
	"    AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() " \
	"    AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) " \
	"  FOR UPDATE OF t SKIP LOCKED) x " \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND q.fairness OPERATOR(pg_catalog.=) 'none' AND q.priority_aging IS NOT NULL " \
	"  AND " CLAIM_RUNNING \
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK

/*
 * Not on a distributed install yet: the routed path runs no statement,
 * its before step refuses the claim (claim_aging_refuse).
 */
static bool claim_aging_refuse(Datum *values, char *nulls);

static NtaskPair claim_aging_pair = NTASK_PAIR("claim aging pick",
											   NTASK_PLAIN(CLAIM_PICK_NCOLS, CLAIM_AGING_PICK, CLAIM_AGING_NARGS, SPI_OK_SELECT),
											   NTASK_ROUTED_NONE(claim_aging_refuse),
											   TEXTOID, OIDOID, BOOLOID, INT4OID);

/* candidates per level beyond the claim's count (claim_aging_pair) */
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

#define CLAIM_KEYLESS_PICK \
	"SELECT x.task_id, x.was_leased, x.task_key, x.payload, q.lease, q.guard, " \
	"  " CLAIM_POLICY ", x.retry, x.token " \
	"FROM ntask.queue q, LATERAL ( " \
	"  SELECT t.task_id, t.state OPERATOR(pg_catalog.=) 'leased' AS was_leased, " \
	"    t.task_key, t.payload, t.attempts OPERATOR(pg_catalog.>) 0 AS retry, t.token " \
	"  FROM ntask.task t " \
	"  WHERE t.task_id OPERATOR(pg_catalog.=) ANY (ARRAY( " \
	"      SELECT d.task_id FROM ( " \
	"        SELECT u.task_id, u.partition_key FROM ( " \
	"          (SELECT d.task_id, d.partition_key, d.priority, d.due_at FROM ntask.task d " \
	"           WHERE d.queue OPERATOR(pg_catalog.=) $1 AND d.lease_until IS NULL " \
	"             AND d.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() " \
	"           ORDER BY d.priority DESC, d.due_at, d.task_id " \
	"           LIMIT " CppAsString2(CLAIM_KEYLESS_LOOK) ") " \
	"          UNION ALL " \
	"          (SELECT d.task_id, d.partition_key, d.priority, d.lease_until FROM ntask.task d " \
	"           WHERE d.queue OPERATOR(pg_catalog.=) $1 " \
	"             AND d.lease_until OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() " \
	"           ORDER BY d.priority DESC, d.lease_until, d.task_id " \
	"           LIMIT " CppAsString2(CLAIM_KEYLESS_LOOK) ")) u " \
	"        ORDER BY u.priority DESC, u.due_at, u.task_id " \
	"        LIMIT " CppAsString2(CLAIM_KEYLESS_LOOK) ") d " \
	"      WHERE d.partition_key IS NULL)) " \
	"    AND t.partition_key IS NULL " \
	"    AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() " \
	"    AND (NOT $3 OR t.attempts OPERATOR(pg_catalog.=) 0) " \
	"  ORDER BY t.priority DESC, t.due_at, t.task_id " \
	"  FOR UPDATE OF t SKIP LOCKED) x " \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 AND " CLAIM_RUNNING \
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK

/* a distributed install does not look for keyless tasks of a fair queue */
static bool claim_keyless_none(Datum *values, char *nulls);

static NtaskPair claim_keyless_pair = NTASK_PAIR("claim keyless pick",
												 NTASK_PLAIN(CLAIM_PICK_NCOLS, CLAIM_KEYLESS_PICK, CLAIM_PICK_PLAIN_NARGS, SPI_OK_SELECT),
												 NTASK_ROUTED_NONE(claim_keyless_none),
												 CLAIM_PICK_TYPES);

/*
 * When the plain pick found nothing: does the queue exist, may the caller
 * claim from it, and is it fair?  (The first round of an idle claim needs
 * the first two anyway, so asking for fairness in the same statement costs
 * a queue without fairness no statement.)
 */
static NtaskPlan claim_queue_plan = {
	"claim queue",
	.ncols = CLAIM_QUEUE_NCOLS,
	"SELECT q.fairness OPERATOR(pg_catalog.=) 'partition', "
	"  NOT " NTASK_WORKER_RIGHT("q", "2") ", q.ordered, "
	"  q.ordered OR q.partition_max_inflight IS NOT NULL, "
	"  CASE WHEN q.paused_at IS NOT NULL THEN 'infinity'::pg_catalog.timestamptz "
	"    WHEN q.paused_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() "
	"    THEN q.paused_until END, "
	"  NOT " CLAIM_KEYS_FREE ", "
	"  q.priority_aging IS NOT NULL "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	CLAIM_QUEUE_NARGS, {TEXTOID, OIDOID}
};

/*
 * The keys of queue $1 paused now and the earliest end of
 * those pauses; read only when the queue row says some key pause is live.
 */
static NtaskPlan claim_paused_keys_plan = {
	"claim paused keys",
	.ncols = CLAIM_PAUSED_ENDS,
	"SELECT pg_catalog.array_agg(k.partition_key), pg_catalog.min(k.until) "
	"FROM ntask.key_pause k WHERE k.queue OPERATOR(pg_catalog.=) $1 "
	"  AND k.until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()",
	CLAIM_PAUSED_NARGS, {TEXTOID}
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
#define CLAIM_FAIR_PICK(pred, dpred, tail, now) \
	CLAIM_KEY_WALK_ON(pred) \
	CLAIM_KEYED_PICK_HEAD \
	"  WHERE t.queue OPERATOR(pg_catalog.=) $1 " pred \
	"    AND t.partition_key OPERATOR(pg_catalog.=) k.pk " \
	"    AND t.partition_key IS NOT NULL AND t.due_at IS NOT NULL " \
	"    AND t.due_at OPERATOR(pg_catalog.<=) " now " " \
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
	"      AND d.due_at OPERATOR(pg_catalog.<=) " now ") " \
	"    THEN " CLAIM_TURN_LOCK("k.pk") " END)" tail

/*
 * The fair pick, and (the routed variant) a distributed install's within
 * shard $8 (each scan of the key walk says so: Citus plans a recursive
 * CTE only with a filter on the distribution column), one router
 * statement, with the claim's count as its LIMIT $9: the shard's node runs
 * the statement whole (the executor's stop after n rows does not reach
 * it), and without the LIMIT it would lock a task of every key of the
 * shard and take every key's turn lock.  The turn locks are taken on the
 * shard's node, in the claim's transaction: every task of a key is in that
 * shard.  Its after step is as the plain pick's (claim_keyed_policy).
 * The parameters are ClaimKeyedArg: the plain variant takes the first
 * seven.
 */
static void claim_keyed_policy(SPITupleTable *tt, int n, Datum *values, char *nulls);

#define CLAIM_KEYED_TYPES \
	TEXTOID, OIDOID, INT4OID, BOOLOID, TEXTOID, TEXTARRAYOID, BOOLOID, INT2OID, INT4OID, \
	TIMESTAMPTZOID
#define CLAIM_SHARD_PRED(alias) " AND " alias ".shard OPERATOR(pg_catalog.=) $8 "

static NtaskPair claim_fair_pick_pair = NTASK_PAIR("claim fair pick",
												   NTASK_PLAIN(CLAIM_KEYED_NCOLS, CLAIM_FAIR_PICK("", "", "", CLAIM_NOW_LOCAL),
															   CLAIM_FAIR_PLAIN_NARGS, SPI_OK_SELECT),
												   NTASK_ROUTED(CLAIM_KEYED_NCOLS, CLAIM_FAIR_PICK(CLAIM_SHARD_PRED("t"), CLAIM_SHARD_PRED("d"),
																					" LIMIT $9", "$10"),
																CLAIM_KEYED_NARGS, SPI_OK_SELECT, NULL, claim_keyed_policy),
												   CLAIM_KEYED_TYPES);

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
#define CLAIM_ORDERED_PICK(pred, hpred, tail, now) \
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
	"    AND CASE WHEN t.due_at OPERATOR(pg_catalog.<=) " now " " \
	"      THEN " CLAIM_TURN_LOCK("k.pk") " END " \
	"  FOR UPDATE OF t SKIP LOCKED) x " \
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND q.fairness OPERATOR(pg_catalog.=) 'partition' AND q.ordered " \
	"  AND " CLAIM_RUNNING \
	"  AND " NTASK_WORKER_RIGHT("q", "2") " AND " CLAIM_CAP_LOCK " " \
	"  AND k.pk OPERATOR(pg_catalog.<>) ALL ($6)" tail

/*
 * The ordered pick and its routed variant within shard $8, as the fair
 * ones above; the plain variant takes the first six parameters ($7, the
 * fair pick's fresh-only flag, is not the ordered one's).
 */
static NtaskPair claim_ordered_pick_pair = NTASK_PAIR("claim ordered pick",
													  NTASK_PLAIN(CLAIM_KEYED_NCOLS, CLAIM_ORDERED_PICK("", "", "", CLAIM_NOW_LOCAL),
																  CLAIM_ORDERED_PLAIN_NARGS, SPI_OK_SELECT),
													  NTASK_ROUTED(CLAIM_KEYED_NCOLS, CLAIM_ORDERED_PICK(CLAIM_SHARD_PRED("t"), CLAIM_SHARD_PRED("h"),
																						  " LIMIT $9", "$10"),
																   CLAIM_KEYED_NARGS, SPI_OK_SELECT, NULL, claim_keyed_policy),
													  CLAIM_KEYED_TYPES);

/*
 * The queue's leased tasks whose lease has not run out, per partition key.
 * Through task_lease_idx, the queue's range of it (task_due_idx holds no
 * leased row, so no plan can walk the queue's backlog there): it reads
 * the queue's leases, so it costs what is in flight, not what is queued.
 * pred: the routed variants' shard predicate.
 */
#define CLAIM_INFLIGHT(pred) \
	"SELECT t.partition_key, pg_catalog.count(*)::integer FROM ntask.task t " \
	"WHERE " pred "t.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND t.lease_until OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp() " \
	"  AND t.state OPERATOR(pg_catalog.=) 'leased' " \
	"GROUP BY t.partition_key"

/*
 * The leases of the picked keys (a per-key cap, an ordered queue): on a
 * distributed install within the picked tasks' shard $2: the picked keys
 * are of one shard, and all their tasks are in it (per-key caps and order
 * hold per shard).
 */
static NtaskPair claim_inflight_pair = NTASK_PAIR("claim in flight",
												  NTASK_PLAIN(CLAIM_INFLIGHT_NCOLS, CLAIM_INFLIGHT(""), CLAIM_INFLIGHT_ARG_SHARDS, SPI_OK_SELECT),
												  NTASK_ROUTED(CLAIM_INFLIGHT_NCOLS, CLAIM_INFLIGHT("t.shard OPERATOR(pg_catalog.=) $2 "
																				 "  AND "),
															   CLAIM_INFLIGHT_NARGS, SPI_OK_SELECT, NULL, NULL),
												  TEXTOID, INT2OID);

/*
 * The leases of the queue, for a queue-wide cap: on a distributed install
 * over the shards $2 of one node (claim_limit: each node holds its share
 * of the cap), read-only, each shard's part routed to that node.
 */
static NtaskPair claim_inflight_node_pair = NTASK_PAIR("claim in flight (queue)",
													   NTASK_PLAIN(CLAIM_INFLIGHT_NCOLS, CLAIM_INFLIGHT(""), CLAIM_INFLIGHT_ARG_SHARDS, SPI_OK_SELECT),
													   NTASK_ROUTED(CLAIM_INFLIGHT_NCOLS, CLAIM_INFLIGHT("t.shard OPERATOR(pg_catalog.=) ANY ($2) "
																					  "  AND "),
																	CLAIM_INFLIGHT_NARGS, SPI_OK_SELECT, NULL, NULL),
													   TEXTOID, INT2ARRAYOID);


/* claims of more tasks than this take no turn locks (see above) */
#define CLAIM_TURN_MAX 32

/* what a claim knows of its queue's order (ClaimPolicy.mode) */
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
 * What a claim knows of its queue, set where it is read and only read
 * elsewhere.  Its order and pauses, read once per claim (claim_read_mode):
 * mode (while unknown, the plain pick runs, which finds nothing in a fair
 * queue); turns, a per-key cap or order: only keys whose turn lock this
 * claim holds are served.  Its flow control, which comes with each pick
 * (claim_read_policy: a claim reads the queue row in its pick).
 */
typedef struct ClaimPolicy
{
	ClaimMode	mode;
	bool		turns;
	bool		paused;			/* the queue is paused (claim_read_mode) */
	bool		keys_paused;	/* some of its keys are (paused_keys) */
	TimestampTz pause_ends;		/* when the pause (or the first key pause)
								 * ends */
	Datum		paused_keys;	/* text[] of those keys */
	List	   *paused_key_list;	/* the same, text * (for the keyed picks) */
	int			max_inflight;	/* 0: none */
	int			partition_max_inflight; /* 0: none; 1 when ordered */
	int			rate_n;			/* 0: none */
	int64		rate_per;
	int			partition_rate_n;
	int64		partition_rate_per;
	float4		retry_share;	/* 1: no share */
} ClaimPolicy;

/*
 * What the rounds of a claim change as they go: per, the most a fair pick
 * takes from one key (1 in the first round, so each key gets a turn before
 * any gets a second; after a round that went around every key with work
 * and still left the claim short, the rest split over the keys that had
 * some); held, set when a queue-wide limit kept a picked task back (the
 * claim looks no further: the held rows stay locked by it); held_keys, the
 * keys a per-key limit held back (later rounds pass them); and the
 * retries' share.
 */
typedef struct ClaimState
{
	int			per;
	bool		held;
	bool		node_full;		/* held by a node's share of the cap (Citus):
								 * the claim goes on in other nodes' shards */
	List	   *held_keys;		/* text *: keys a per-key limit held back */
	bool		fresh_only;		/* retries over their share were held back */
	bool		share_off;		/* no first attempt is due: retries take all */
} ClaimState;

/*
 * The rows of one pick while a round works on them (the guard, the limits
 * and the lease run statements of their own in between: the rows are read
 * through rows, never SPI_tuptable).
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
 * as its pick read it, in $1's order (the routed lease only).  Then two
 * values no statement binds, of the routed lease's before and after steps
 * (claim_lease_receipts, claim_lease_committed): whether a task let
 * through had an attempt before (only then can one have a receipt), and
 * the tasks found with a receipt.
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
	CLAIM_LEASE_ARG_TOKENS,		/* $11, the routed lease's check */
	CLAIM_LEASE_NARGS,			/* the statements' parameters */
	CLAIM_LEASE_VAL_ANY_RETRY = CLAIM_LEASE_NARGS,	/* bool */
	CLAIM_LEASE_VAL_RECEIPTS,	/* ClaimReceipts *, set by the before step */
	CLAIM_LEASE_NVALUES
} ClaimLeaseArg;

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

/*
 * The columns of claim_lease_pair's result (both variants):
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

#define CLAIM_LEASE_NCOLS CLAIM_COL_HAS_PARENTS

/*
 * The lease.  On a plain install one statement: the update in a CTE and
 * the rows the caller gets, a receipt making the prior outcome
 * 'committed', sorted by task id.  Its parameters are up to $10: $11 is
 * the routed lease's alone.
 *
 * The routed variant: the update returns the rows the caller gets (same
 * columns); a receipt makes the prior outcome 'committed' (its before
 * step reads them, claim_lease_receipts: a RETURNING subquery keeps Citus
 * from routing the update; its after step marks them,
 * claim_lease_committed).  Rows are not sorted by task id there.  The
 * token floor is also the one of the node that holds the row
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
static bool claim_lease_receipts(Datum *values, char *nulls);
static void claim_lease_committed(SPITupleTable *tt, int n, Datum *values, char *nulls);

static NtaskPair claim_lease_pair = NTASK_PAIR("claim lease",
											   NTASK_PLAIN(CLAIM_LEASE_NCOLS,
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
														   CLAIM_LEASE_ARG_TOKENS, SPI_OK_SELECT),
											   NTASK_ROUTED(CLAIM_LEASE_NCOLS,
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
															CLAIM_LEASE_NARGS, SPI_OK_UPDATE_RETURNING,
															claim_lease_receipts, claim_lease_committed),
											   INT8ARRAYOID, TEXTOID, INTERVALOID, INT8ARRAYOID, INT8ARRAYOID, INT8OID,
											   TIMESTAMPTZOID, TIMESTAMPTZOID, INT2OID, BOOLOID, INT8ARRAYOID);

/*
 * of the tasks $1 (of shard $2), those with a receipt (prior 'committed');
 * its parameters are the lease's first and ninth, its column the task id
 */
typedef enum ClaimReceiptsArg
{
	CLAIM_RECEIPTS_ARG_IDS,		/* $1 */
	CLAIM_RECEIPTS_ARG_SHARD,	/* $2 */
	CLAIM_RECEIPTS_NARGS
} ClaimReceiptsArg;

typedef enum ClaimReceiptsCol
{
	CLAIM_RECEIPTS_TASK_ID = 1
} ClaimReceiptsCol;

static NtaskPlan claim_receipts_plan = {
	"claim receipts (distributed)",
	.ncols = CLAIM_RECEIPTS_TASK_ID,
	"SELECT DISTINCT r.task_id FROM ntask.receipt r "
	"WHERE r.task_id OPERATOR(pg_catalog.=) ANY ($1) " NTASK_SHARD_IS("r", "2"),
	CLAIM_RECEIPTS_NARGS, {INT8ARRAYOID, INT2OID}
};

/* the tasks with a receipt, claim_lease_receipts' answer */
typedef struct ClaimReceipts
{
	int64	   *ids;
	int			n;
} ClaimReceipts;


#define CLAIM_NCOLS CLAIM_COL_PRIOR_OUTCOME /* handed to the caller */
#define CLAIM_MAX_EXTRA 4		/* columns a caller may append
								 * (NtaskClaimInto) */

/* at most this many rounds when tasks are diverted to repair or the guard */
#define CLAIM_MAX_ROUNDS 10

static int	claim_pick(text *queue, int want, ClaimPolicy *pol, ClaimState *st,
					   SPITupleTable **rows);
static void claim_warn_old_xact(int64 lease_usecs, int64 waited_usecs);

/*
 * claim_exec
 *		Run p (NtaskExecPlanCount, stopped after count rows; 0: all) and
 *		return its rows, which its caller reads by that pointer while other
 *		statements run; *n is how many.
 */
static SPITupleTable *
claim_exec(NtaskPlan *p, Datum *args, int expected_rc, long count, int *n)
{
	*n = NtaskExecPlanCount(p, args, NULL, expected_rc, count);
	return SPI_tuptable;
}

/* claim_exec_pair: claim_exec of the call's variant of pair (NtaskExecPair) */
static SPITupleTable *
claim_exec_pair(NtaskPair *pair, Datum *args, long count, int *n)
{
	*n = NtaskExecPairCount(pair, args, NULL, count);
	return SPI_tuptable;
}

/* claim_run: a pick of at most want rows; *rows its rows (none read at 0) */
static int
claim_run(NtaskPair *pair, Datum *args, int want, SPITupleTable **rows)
{
	int			n;

	*rows = claim_exec_pair(pair, args, want, &n);
	return n;
}

/*
 * claim_mark_committed
 *		In the rows of the routed lease, the prior outcome of a task that
 *		has a receipt is 'committed', as the plain lease says.
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
 * claim_lease_receipts
 *		The routed lease's before step: of the tasks to lease, those with a
 *		receipt (claim_receipts_plan), into values[CLAIM_LEASE_VAL_RECEIPTS].
 *		A receipt is written with a token, so a task on its first attempt
 *		has none: the lookup is for retries and takeovers.
 */
static bool
claim_lease_receipts(Datum *values, char *nulls)
{
	ClaimReceipts *rc = palloc0(sizeof(ClaimReceipts));
	Datum		rv[CLAIM_RECEIPTS_NARGS];
	SPITupleTable *tt = NULL;
	int			r;

	rv[CLAIM_RECEIPTS_ARG_IDS] = values[CLAIM_LEASE_ARG_IDS];
	rv[CLAIM_RECEIPTS_ARG_SHARD] = values[CLAIM_LEASE_ARG_SHARD];
	if (DatumGetBool(values[CLAIM_LEASE_VAL_ANY_RETRY]))
		tt = claim_exec(&claim_receipts_plan, rv, SPI_OK_SELECT, 0, &rc->n);
	rc->ids = palloc(sizeof(int64) * Max(rc->n, 1));
	for (r = 0; r < rc->n; r++)
		rc->ids[r] = NtaskTupGetInt64(tt, r, CLAIM_RECEIPTS_TASK_ID);
	values[CLAIM_LEASE_VAL_RECEIPTS] = PointerGetDatum(rc);
	return true;
}

/* claim_lease_committed: the routed lease's after step (claim_mark_committed) */
static void
claim_lease_committed(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	ClaimReceipts *rc = (ClaimReceipts *) DatumGetPointer(values[CLAIM_LEASE_VAL_RECEIPTS]);

	claim_mark_committed(tt, n, rc->ids, rc->n);
}

/*
 * claim_context
 *		The context column of row r of the lease statement (ClaimCol), a
 *		task that has some (CLAIM_COL_HAS_CONTEXT): context.c builds it.
 */
static Datum
claim_context(SPITupleTable *tt, int r, text *queue, int64 *claim_bytes,
			  bool *isnull)
{
	NtaskContextIn in = {0};

	in.task_id = NtaskTupGetInt64(tt, r, CLAIM_COL_TASK_ID);
	in.token = NtaskTupGetInt64(tt, r, CLAIM_COL_TOKEN);
	in.queue = queue;
	in.traceparent = NtaskTupGetCString(tt, r, CLAIM_COL_TRACEPARENT);
	in.checkpoints = NtaskTupGetInt32(tt, r, CLAIM_COL_CHECKPOINTS);
	in.signal_key = NtaskTupGetText(tt, r, CLAIM_COL_SIGNAL_KEY);
	in.has_parents = NtaskTupGetBool(tt, r, CLAIM_COL_HAS_PARENTS);
	in.claim_bytes = claim_bytes;
	/* everything is read: context.c may run statements of its own */
	return NtaskClaimContext(&in, isnull);
}

/*
 * ntask.token_seq's oid, looked up once per backend (two catalog cache
 * lookups by name for every leased row before): forgotten by
 * token_seq_inval at any relcache invalidation of the sequence (its drop,
 * a rename, the rollback of the CREATE EXTENSION that made it) or of all
 * relations, and looked up again at the next claim.
 */
static Oid	token_seq_cached = InvalidOid;

static void
token_seq_inval(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == token_seq_cached)
		token_seq_cached = InvalidOid;
}

/*
 * token_seq_oid
 *		ntask.token_seq, this node's sequence of tokens.
 */
static Oid
token_seq_oid(void)
{
	static bool registered = false;
	Oid			seq;

	if (OidIsValid(token_seq_cached))
		return token_seq_cached;
	if (!registered)
	{
		CacheRegisterRelcacheCallback(token_seq_inval, (Datum) 0);
		registered = true;
	}
	seq = get_relname_relid("token_seq", get_namespace_oid("ntask", false));
	if (!OidIsValid(seq))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: the sequence ntask.token_seq is missing"),
				 errhint("Run ALTER EXTENSION ntask UPDATE.")));
	token_seq_cached = seq;
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


/* claim_held_keys: st->held_keys and the paused keys as a text[] */
static Datum
claim_held_keys(ClaimPolicy *pol, ClaimState *st)
{
	int			n = list_length(st->held_keys) +
	list_length(pol->paused_key_list);
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	ListCell   *lc;
	int			i = 0;

	foreach(lc, st->held_keys)
		elems[i++] = PointerGetDatum(lfirst(lc));
	/* and the keys paused by a rate limit */
	foreach(lc, pol->paused_key_list)
		elems[i++] = PointerGetDatum(lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

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
 *		order (per_key) hold within the key's shard.  rows are the pick's;
 *		shard is the picked shard.
 */
static void
claim_dist_policy(SPITupleTable *rows, text *queue, bool per_key, int16 shard)
{
	int			c;

	for (c = CLAIM_PICK_MAX_INFLIGHT; c <= CLAIM_PICK_RETRY_SHARE; c++)
	{
		bool		isnull;

		if (c == CLAIM_PICK_ORDERED || c == CLAIM_PICK_MAX_INFLIGHT)
			continue;			/* a boolean; a cap shared out by node */
		if (per_key && c == CLAIM_PICK_PARTITION_MAX_INFLIGHT)
			continue;
		(void) NtaskTupGetDatum(rows, 0, c, &isnull);
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
 * claim_pick_policy, claim_keyed_policy
 *		The after steps of the routed picks (plain; fair and ordered): the
 *		flow control a distributed claim cannot keep where it runs
 *		(claim_dist_policy) is refused once a shard gave rows.
 */
static void
claim_pick_policy(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	if (n > 0)
		claim_dist_policy(tt, (text *) DatumGetPointer(values[CLAIM_PICK_ARG_QUEUE]),
						  false, DatumGetInt16(values[CLAIM_PICK_ARG_SHARD]));
}

static void
claim_keyed_policy(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	if (n > 0)
		claim_dist_policy(tt, (text *) DatumGetPointer(values[CLAIM_KEYED_ARG_QUEUE]),
						  true, DatumGetInt16(values[CLAIM_KEYED_ARG_SHARD]));
}

/*
 * claim_read_paused_keys
 *		The queue row says some of its keys are paused: read
 *		them into pol (paused_keys, the earliest end into pause_ends).
 */
static void
claim_read_paused_keys(text *queue, ClaimPolicy *pol)
{
	Datum		args[CLAIM_PAUSED_NARGS];
	SPITupleTable *tt;
	int			n;
	bool		isnull;
	Datum		keys;

	args[CLAIM_PAUSED_ARG_QUEUE] = PointerGetDatum(queue);
	tt = claim_exec(&claim_paused_keys_plan, args, SPI_OK_SELECT, 0, &n);
	keys = NtaskTupGetDatum(tt, 0, CLAIM_PAUSED_KEYS, &isnull);
	if (isnull)
		return;					/* ended since the queue row was read */
	{
		ArrayType  *a = DatumGetArrayTypePCopy(keys);
		Datum	   *elems;
		int			i;

		deconstruct_array(a, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		for (i = 0; i < n; i++)
			pol->paused_key_list = lappend(pol->paused_key_list,
										   DatumGetTextPCopy(elems[i]));
		pol->paused_keys = PointerGetDatum(a);
	}
	pol->keys_paused = true;
	pol->pause_ends = DatumGetTimestampTz(NtaskTupGetDatum(tt, 0, CLAIM_PAUSED_ENDS,
														   &isnull));
}

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

/*
 * claim_read_mode
 *		A pick found nothing: read the queue (claim_queue_plan; args as the
 *		plain pick's, of which it uses the first two), raise 42704 when
 *		there is no such queue and 42501 without its worker_role, and set
 *		pol's mode, turns and pauses.
 */
static void
claim_read_mode(text *queue, Datum *args, ClaimPolicy *pol)
{
	SPITupleTable *tt;
	int			n;

	tt = claim_exec(&claim_queue_plan, args, SPI_OK_SELECT, 0, &n);
	if (n == 0)
		NtaskQueueNotFound(text_to_cstring(queue));
	if (NtaskTupGetBool(tt, 0, CLAIM_QUEUE_DENIED))
		NtaskCheckQueueRight(queue, false); /* raises 42501 */
	pol->mode = NtaskTupGetBool(tt, 0, CLAIM_QUEUE_FAIR) ?
		(NtaskTupGetBool(tt, 0, CLAIM_QUEUE_ORDERED) ? CLAIM_MODE_ORDERED : CLAIM_MODE_FAIR) :
		NtaskTupGetBool(tt, 0, CLAIM_QUEUE_AGING) ? CLAIM_MODE_AGING : CLAIM_MODE_PLAIN;
	claim_note_aging(queue, pol->mode == CLAIM_MODE_AGING);
	pol->turns = NtaskTupGetBool(tt, 0, CLAIM_QUEUE_TURNS);
	{
		bool		isnull;
		Datum		d = NtaskTupGetDatum(tt, 0, CLAIM_QUEUE_PAUSED_UNTIL, &isnull);

		if (!isnull)
		{
			/* paused: nothing is handed out */
			pol->paused = true;
			pol->pause_ends = DatumGetTimestampTz(d);
			return;
		}
	}
	if (NtaskTupGetBool(tt, 0, CLAIM_QUEUE_KEYS_PAUSED))
		claim_read_paused_keys(queue, pol);
}

/*
 * claim_aging_refuse
 *		The routed aging pick's before step: a distributed install does not
 *		support priority aging yet (0A000).
 */
static bool
claim_aging_refuse(Datum *values, char *nulls)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("ntask: queue \"%s\" has priority aging, which a distributed install does not support yet",
					TextDatumGetCString(values[CLAIM_AGING_ARG_QUEUE])),
			 errhint("Pass priority_aging => '0' to ntask_queue_set to turn it off.")));
	return false;
}

/* claim_keyless_none: the routed keyless pick's before step: no statement */
static bool
claim_keyless_none(Datum *values, char *nulls)
{
	return false;
}

/*
 * claim_aging_pick
 *		The pick of a queue with priority aging (claim_aging_pair; args as
 *		the plain pick's first three).  Not on a distributed install yet.
 */
static int
claim_aging_pick(text *queue, Datum *args, int want, SPITupleTable **rows)
{
	Datum		aargs[CLAIM_AGING_NARGS];
	int			n;

	aargs[CLAIM_AGING_ARG_QUEUE] = args[CLAIM_PICK_ARG_QUEUE];
	aargs[CLAIM_AGING_ARG_CALLER] = args[CLAIM_PICK_ARG_CALLER];
	aargs[CLAIM_AGING_ARG_FRESH_ONLY] = args[CLAIM_PICK_ARG_FRESH_ONLY];
	aargs[CLAIM_AGING_ARG_PER_LEVEL] =
		Int32GetDatum(Min(want + CLAIM_AGING_SLACK, NTASK_MAX_CLAIM));
	n = claim_run(&claim_aging_pair, aargs, want, rows);
	if (n == 0 && want + CLAIM_AGING_SLACK < NTASK_MAX_CLAIM)
	{
		/*
		 * Nothing due, or every candidate was locked by concurrent claims:
		 * look further down each level.
		 */
		aargs[CLAIM_AGING_ARG_PER_LEVEL] = Int32GetDatum(NTASK_MAX_CLAIM);
		n = claim_run(&claim_aging_pair, aargs, want, rows);
	}
	return n;
}

/*
 * The picks claim_pick chooses between, by what the claim knows of the
 * queue (ClaimPolicy.mode).
 */
typedef enum ClaimPickKind
{
	CLAIM_KIND_PLAIN,			/* not (yet) known to be keyed or aging */
	CLAIM_KIND_AGING,			/* priority aging */
	CLAIM_KIND_FAIR,			/* fairness partition */
	CLAIM_KIND_ORDERED			/* partition, one head per key */
} ClaimPickKind;

/* the pick for what the claim knows of its queue now */
static ClaimPickKind
claim_pick_kind(ClaimPolicy *pol)
{
	switch (pol->mode)
	{
		case CLAIM_MODE_AGING:
			return CLAIM_KIND_AGING;
		case CLAIM_MODE_FAIR:
			return CLAIM_KIND_FAIR;
		case CLAIM_MODE_ORDERED:
			return CLAIM_KIND_ORDERED;
		case CLAIM_MODE_UNKNOWN:
		case CLAIM_MODE_PLAIN:
			break;
	}
	return CLAIM_KIND_PLAIN;
}

/*
 * claim_walk
 *		The shards a claim's plain, fair and ordered picks walk, one at a
 *		time until one has due work (docs/scaling.md "Claims across
 *		shards"): those of NtaskWalkShardCount (the call's shard in
 *		ntask_claim_on, this worker node's own, or every shard), from this
 *		backend's cursor (random at first); the next pick starts after the
 *		one that gave rows (claim_walk_gave), so every shard gets its turn.
 *		A plain install walks one, shard 0.  Returns how many; *first is
 *		where the walk starts.
 */
static int
claim_walk(int *first)
{
	int			nshards = NtaskWalkShardCount();

	*first = 0;
	if (nshards == 0)
		return 1;
	if (claim_shard_cursor < 0)
		claim_shard_cursor = (int) (pg_prng_uint32(&pg_global_prng_state) % nshards);
	*first = claim_shard_cursor;
	return nshards;
}

/*
 * claim_walk_shard
 *		The i-th shard of the walk (0 on a plain install), its metadata
 *		lock taken first: a move's final phase waits for this claim, or
 *		this claim for the move (NtaskLockShards, docs/scaling.md "Shard
 *		moves"; nothing on a plain install); on the direct path with the
 *		rest of the move interlock (NtaskDirectClaimShard).
 */
static int16
claim_walk_shard(int i)
{
	int16		sv = NtaskWalkShardCount() > 0 ? NtaskWalkShardValue(i) : 0;

	/* on the direct path, the shard's interlock (shard.c) */
	NtaskDirectClaimShard(sv);
	return sv;
}

/* claim_walk_gave: the i-th of the nshards shards gave rows */
static void
claim_walk_gave(int i, int nshards)
{
	if (NtaskWalkShardCount() > 0)
		claim_shard_cursor = (i + 1) % nshards;
}

/*
 * claim_no_keys
 *		An empty text[], built once per backend (in TopMemoryContext) rather
 *		than at every pick: the $6 of a queue without paused keys.
 */
static Datum
claim_no_keys(void)
{
	static ArrayType *none = NULL;

	if (none == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		none = construct_empty_array(TEXTOID);
		MemoryContextSwitchTo(old);
	}
	return PointerGetDatum(none);
}

/*
 * The expired-lease probe (claim_lease_expired): ntask.task_lease_idx, its
 * oid kept per backend, forgotten on an invalidation of it or of all
 * relations (as token_seq_oid's).
 */
static Oid	claim_lease_idx_cached = InvalidOid;

static void
claim_lease_idx_inval(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == claim_lease_idx_cached)
		claim_lease_idx_cached = InvalidOid;
}

/* the columns of task_lease_idx the probe reads: (queue, priority DESC, lease_until, ...) */
#define CLAIM_LEASE_IDX_QUEUE 1
#define CLAIM_LEASE_IDX_PRIORITY 2
#define CLAIM_LEASE_IDX_UNTIL 3

/* the probe's most descents before it answers "maybe" */
#define CLAIM_PROBE_DESCENTS 8

/* the probe's scan of task_lease_idx (claim_lease_expired) */
typedef struct ClaimProbe
{
	Relation	heap;
	IndexScanDesc scan;
	ScanKeyData keys[3];		/* queue =, then two on the priority, or
								 * priority = 0 and lease_until <= ts */
	Oid			collation;		/* of the queue column */
	TimestampTz ts;				/* the claim's time */
	Buffer		vmbuf;
	TupleTableSlot *slot;		/* for heap fetches, made on first use */
	int			descents;
} ClaimProbe;

/* what claim_probe_read met */
typedef enum ClaimProbeRead
{
	CLAIM_PROBE_EXPIRED,		/* a live lease ended by ts */
	CLAIM_PROBE_END,			/* no more entries in the keys' range */
	CLAIM_PROBE_PAST			/* priority *p's next lease ends after ts */
} ClaimProbeRead;

/*
 * claim_lease_idx
 *		The lease index the probe reads on the call's path: the shard's on
 *		the direct path, ntask.task_lease_idx on a plain install; InvalidOid
 *		when there is none.
 */
static Oid
claim_lease_idx(void)
{
	static bool registered = false;

	if (NtaskCallPath() == NTASK_PATH_DIRECT)
		return NtaskDirectTaskIndex("task_lease_idx");
	if (OidIsValid(claim_lease_idx_cached))
		return claim_lease_idx_cached;
	if (!registered)
	{
		CacheRegisterRelcacheCallback(claim_lease_idx_inval, (Datum) 0);
		registered = true;
	}
	claim_lease_idx_cached = get_relname_relid("task_lease_idx",
											   get_namespace_oid("ntask", false));
	return claim_lease_idx_cached;
}

/* claim_lease_idx_fits: the index has the key the probe reads */
static bool
claim_lease_idx_fits(Relation index)
{
	TupleDesc	d = RelationGetDescr(index);

	return index->rd_rel->relam == BTREE_AM_OID &&
		IndexRelationGetNumberOfKeyAttributes(index) >= CLAIM_LEASE_IDX_UNTIL &&
		TupleDescAttr(d, CLAIM_LEASE_IDX_QUEUE - 1)->atttypid == TEXTOID &&
		TupleDescAttr(d, CLAIM_LEASE_IDX_PRIORITY - 1)->atttypid == INT4OID &&
		TupleDescAttr(d, CLAIM_LEASE_IDX_UNTIL - 1)->atttypid == TIMESTAMPTZOID &&
		(index->rd_indoption[CLAIM_LEASE_IDX_PRIORITY - 1] & INDOPTION_DESC) != 0 &&
		(index->rd_indoption[CLAIM_LEASE_IDX_UNTIL - 1] & INDOPTION_DESC) == 0;
}

/*
 * claim_probe_live
 *		Whether the row of the index entry the scan is on is visible in
 *		the probe's snapshot: the visibility map's all-visible bit is
 *		trusted, else the heap decides (nodeIndexonlyscan.c's rule; the
 *		fetch marks an entry no one can see dead for later scans).
 */
static bool
claim_probe_live(ClaimProbe *pr, ItemPointer tid)
{
	if (VM_ALL_VISIBLE(pr->heap, ItemPointerGetBlockNumber(tid), &pr->vmbuf))
		return true;
	if (pr->slot == NULL)
		pr->slot = table_slot_create(pr->heap, NULL);
	if (!index_fetch_heap(pr->scan, pr->slot))
		return false;
	ExecClearTuple(pr->slot);
	/* an MVCC snapshot sees one version of a HOT chain at most */
	if (pr->scan->xs_heap_continue)
		elog(ERROR, "ntask: the probe of expired leases met a non-MVCC snapshot");
	return true;
}

/*
 * claim_probe_read
 *		One descent with the probe's keys, then its entries in the
 *		index's order (priority DESC, lease_until): the first entry of a
 *		priority is its earliest lease.  *p: the priority of the last
 *		entry read.
 */
static ClaimProbeRead
claim_probe_read(ClaimProbe *pr, int32 *p)
{
	ItemPointer tid;

	index_rescan(pr->scan, pr->keys, lengthof(pr->keys), NULL, 0);
	pr->descents++;
	while ((tid = index_getnext_tid(pr->scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		*p = DatumGetInt32(index_getattr(pr->scan->xs_itup, CLAIM_LEASE_IDX_PRIORITY,
										 pr->scan->xs_itupdesc, &isnull));
		if (DatumGetTimestampTz(index_getattr(pr->scan->xs_itup, CLAIM_LEASE_IDX_UNTIL,
											  pr->scan->xs_itupdesc, &isnull)) > pr->ts)
			return CLAIM_PROBE_PAST;
		if (claim_probe_live(pr, tid))
			return CLAIM_PROBE_EXPIRED;
	}
	return CLAIM_PROBE_END;
}

/* claim_probe_key: the probe's key i, on column attno */
static void
claim_probe_key(ClaimProbe *pr, int i, AttrNumber attno, StrategyNumber strategy,
				RegProcedure proc, Oid collation, Datum arg)
{
	ScanKeyEntryInitialize(&pr->keys[i], 0, attno, strategy, InvalidOid, collation,
						   proc, arg);
}

/*
 * claim_probe_range
 *		Whether an expired lease is live at a priority in [lo, hi] (lo
 *		above 0 or hi below it): a loose scan, a descent per priority
 *		whose earliest lease ends after ts (to pass the rest of it by);
 *		true also ("maybe") once the probe made CLAIM_PROBE_DESCENTS.
 */
static bool
claim_probe_range(ClaimProbe *pr, int32 lo, int32 hi)
{
	int32		p = hi;

	claim_probe_key(pr, 1, CLAIM_LEASE_IDX_PRIORITY, BTGreaterEqualStrategyNumber,
					F_INT4GE, InvalidOid, Int32GetDatum(lo));
	for (;;)
	{
		if (pr->descents >= CLAIM_PROBE_DESCENTS)
			return true;
		claim_probe_key(pr, 2, CLAIM_LEASE_IDX_PRIORITY, BTLessEqualStrategyNumber,
						F_INT4LE, InvalidOid, Int32GetDatum(hi));
		switch (claim_probe_read(pr, &p))
		{
			case CLAIM_PROBE_EXPIRED:
				return true;
			case CLAIM_PROBE_END:
				return false;
			case CLAIM_PROBE_PAST:
				break;
		}
		if (p <= lo)
			return false;
		hi = p - 1;
	}
}

/*
 * claim_lease_expired
 *		Whether queue may have an expired lease (lease_until <= now) in
 *		the relation the call's pick reads: false only when it has none
 *		in a snapshot taken now; true when it has one, or when the probe
 *		cannot tell (no such index, one of another shape, more than
 *		CLAIM_PROBE_DESCENTS descents).  A true answer sends the claim to
 *		the merged pick, which decides again per priority in its own
 *		snapshot, so a "maybe" costs time, never a wrong answer.
 *
 *		Index scans of task_lease_idx (queue, priority DESC, lease_until,
 *		task_id) in C whose keys all bound the scan, so that a scan stops
 *		at the first entry past them (a btree reads a leaf page's entries
 *		until a key that bounds the scan fails: with keys that only the
 *		queue and a range of priorities bound, it would read the whole
 *		page of the leases of the queue's claims since the last vacuum,
 *		measured at 2-3% of a drained task's CPU): priority 0 with
 *		lease_until <= now, the priorities above 0, those below (a loose
 *		scan each, claim_probe_range).  An entry up to now is an expired
 *		lease if its row is live (claim_probe_live).  A queue whose
 *		tasks keep priority 0: three descents, at most one entry read
 *		each when no lease expired.  No other role can reach the answer:
 *		it is the index as this backend reads it, nothing kept.
 */
static bool
claim_lease_expired(Datum queue, Datum now)
{
	Oid			indexoid = claim_lease_idx();
	Oid			heapoid;
	Relation	index;
	ClaimProbe	pr;
	Snapshot	snap;
	bool		expired;
	int32		p;

	if (!OidIsValid(indexoid) ||
		!OidIsValid(heapoid = IndexGetRelation(indexoid, true)))
		return true;
	pr.heap = table_open(heapoid, AccessShareLock);
	index = index_open(indexoid, AccessShareLock);
	if (!claim_lease_idx_fits(index))
	{
		index_close(index, NoLock);
		table_close(pr.heap, NoLock);
		return true;
	}
	/* this transaction's own writes so far too (transition_and_claim's) */
	CommandCounterIncrement();
	snap = RegisterSnapshot(GetLatestSnapshot());
	pr.scan = NtaskIndexBeginscan(pr.heap, index, snap, lengthof(pr.keys), 0);
	pr.scan->xs_want_itup = true;
	pr.collation = index->rd_indcollation[CLAIM_LEASE_IDX_QUEUE - 1];
	pr.ts = DatumGetTimestampTz(now);
	pr.vmbuf = InvalidBuffer;
	pr.slot = NULL;
	pr.descents = 0;
	claim_probe_key(&pr, 0, CLAIM_LEASE_IDX_QUEUE, BTEqualStrategyNumber, F_TEXTEQ,
					pr.collation, queue);
	/* priority 0, where most leases are: only its entries up to now */
	claim_probe_key(&pr, 1, CLAIM_LEASE_IDX_PRIORITY, BTEqualStrategyNumber, F_INT4EQ,
					InvalidOid, Int32GetDatum(0));
	claim_probe_key(&pr, 2, CLAIM_LEASE_IDX_UNTIL, BTLessEqualStrategyNumber,
					F_TIMESTAMPTZ_LE, InvalidOid, now);
	expired = claim_probe_read(&pr, &p) == CLAIM_PROBE_EXPIRED ||
		claim_probe_range(&pr, 1, PG_INT32_MAX) ||
		claim_probe_range(&pr, PG_INT32_MIN, -1);
	if (BufferIsValid(pr.vmbuf))
		ReleaseBuffer(pr.vmbuf);
	index_endscan(pr.scan);
	if (pr.slot != NULL)
		ExecDropSingleTupleTableSlot(pr.slot);
	UnregisterSnapshot(snap);
	index_close(index, NoLock);
	table_close(pr.heap, NoLock);
	return expired;
}

/*
 * claim_plain_run
 *		The plain pick (claim_pick_pair) within shard sv, or, once the
 *		queue is known to have paused keys, the one that passes them by.
 *		On a plain install a constant LIMIT for the plan; the executor
 *		stops at want rows.
 *
 *		On one node (a plain install, the direct path) the probe in C
 *		(claim_lease_expired) decides first: no expired lease in the
 *		queue, the gateless pick (CLAIM_PICK_READY_ONLY, the statement
 *		almost every claim runs); maybe one, the merged pick from the
 *		highest priority down (CLAIM_PICK_MERGED, $8 the largest
 *		priority), which per priority gates again and takes an expired
 *		lease over at its place.  Routed (the shard on another node, where
 *		no probe in C reaches): the gated pick (CLAIM_PICK), and after its
 *		marker the merged pick from the marker's priority down.
 */
static int
claim_plain_run(Datum *args, int16 sv, int want, ClaimPolicy *pol,
				SPITupleTable **rows)
{
	NtaskPair  *merged = pol->keys_paused ? &claim_merged_keys_pair : &claim_merged_pair;
	SPITupleTable *more;
	int			n;
	int			m;
	int			k;
	int			j;

	args[CLAIM_PICK_ARG_SHARD] = Int16GetDatum(sv);
	args[CLAIM_PICK_ARG_LIMIT] = Int32GetDatum(want);
	args[CLAIM_PICK_ARG_NOW] = NtaskStatementTs();
	/* $6 is declared by both routed picks, read by the keys-paused ones */
	args[CLAIM_PICK_ARG_PAUSED_KEYS] = pol->keys_paused ? pol->paused_keys :
		claim_no_keys();
	if (NtaskCallPath() != NTASK_PATH_ROUTED &&
		claim_lease_expired(args[CLAIM_PICK_ARG_QUEUE], args[CLAIM_PICK_ARG_NOW]))
	{
		args[CLAIM_PICK_ARG_FROM] = Int32GetDatum(PG_INT32_MAX);
		return claim_run(merged, args, want, rows);
	}
	n = claim_run(pol->keys_paused ? &claim_pick_keys_pair : &claim_pick_pair,
				  args, want, rows);
	/* a marker row (routed only): an expired lease at its priority (CLAIM_PICK) */
	for (k = 0; k < n; k++)
	{
		bool		isnull;

		(void) SPI_getbinval((*rows)->vals[k], (*rows)->tupdesc,
							 CLAIM_PICK_TASK_ID, &isnull);
		if (isnull)
			break;
	}
	if (k == n)
		return n;
	/* from that priority down, the expired leases merged in */
	args[CLAIM_PICK_ARG_LIMIT] = Int32GetDatum(want - k);
	args[CLAIM_PICK_ARG_FROM] = Int32GetDatum((int32)
											  NtaskTupGetInt64(*rows, k, CLAIM_PICK_TOKEN));
	m = claim_run(merged, args, want - k, &more);
	/*
	 * The rows of the higher priorities, then these: (*rows) has room, as
	 * its markers filled the claim's count (want rows at least).
	 */
	Assert(k + m <= n);
	for (j = 0; j < m; j++)
		(*rows)->vals[k + j] = more->vals[j];
	(*rows)->numvals = k + m;
	return k + m;
}

/*
 * claim_pick_plain
 *		The pick of a queue not known to be keyed or aging, over the walk's
 *		shards (claim_walk).  When the first shard has nothing due and the
 *		mode is unknown: an idle queue, no right to it, no such queue,
 *		fair, paused, some of its keys are paused, or aging;
 *		claim_read_mode tells which, rather than after a probe of every
 *		shard.  Returns the rows picked, or -1 when the queue turned out to
 *		be aging, fair or ordered (claim_pick picks again in that mode).
 */
static int
claim_pick_plain(text *queue, Datum *args, int want, ClaimPolicy *pol,
				 SPITupleTable **rows)
{
	int			first;
	int			nshards = claim_walk(&first);
	int			k;

	for (k = 0; k < nshards; k++)
	{
		int			i = (first + k) % nshards;
		int			n = claim_plain_run(args, claim_walk_shard(i), want, pol, rows);

		if (n > 0)
		{
			claim_walk_gave(i, nshards);
			pol->mode = CLAIM_MODE_PLAIN;
			return n;
		}
		if (pol->mode != CLAIM_MODE_UNKNOWN)
			continue;
		claim_read_mode(queue, args, pol);
		if (pol->paused)
			return 0;
		if (pol->mode != CLAIM_MODE_PLAIN)
			return -1;			/* aging or keyed */
		if (pol->keys_paused)
			k--;				/* this shard again, past the paused keys */
	}
	return 0;
}

/*
 * claim_keyed_run
 *		The fair or ordered pick: its first pass (keys no other claim is
 *		serving), then, when that found nothing, its second (any key).  A
 *		per-key cap or order is kept by the turn locks (pol->turns): no
 *		second pass; nor for a claim of more than CLAIM_TURN_MAX tasks,
 *		which goes by the cursor alone.
 */
static int
claim_keyed_run(NtaskPair *pick, Datum *kargs, int want, ClaimPolicy *pol,
				SPITupleTable **rows)
{
	int			n;

	kargs[CLAIM_KEYED_ARG_FIRST_PASS] = BoolGetDatum(pol->turns || want <= CLAIM_TURN_MAX);
	n = claim_run(pick, kargs, want, rows);
	if (n == 0 && want <= CLAIM_TURN_MAX && !pol->turns)
	{
		kargs[CLAIM_KEYED_ARG_FIRST_PASS] = BoolGetDatum(false);
		n = claim_run(pick, kargs, want, rows);
	}
	return n;
}

/*
 * claim_pick_keyed
 *		The pick of a fair queue (claim_fair_pick_pair) or an ordered one
 *		(claim_ordered_pick_pair), over the walk's shards (a key lives in
 *		one shard), each shard with its own key cursor (fair.c; shard 0's
 *		is a plain install's): a pick moves it to the last key it picked
 *		from.  When no key gives a task, the keyless pick: a task enqueued
 *		without a key by a transaction that read the queue before it
 *		turned fair keeps NULL (not looked for on a distributed install).
 */
static int
claim_pick_keyed(text *queue, Datum *args, int want, ClaimPolicy *pol,
				 ClaimState *st, NtaskPair *pick, SPITupleTable **rows)
{
	Datum		kargs[CLAIM_KEYED_NARGS];
	char	   *qname = text_to_cstring(queue);
	int			first;
	int			nshards = claim_walk(&first);
	int			k;

	kargs[CLAIM_KEYED_ARG_QUEUE] = args[CLAIM_PICK_ARG_QUEUE];
	kargs[CLAIM_KEYED_ARG_CALLER] = args[CLAIM_PICK_ARG_CALLER];
	kargs[CLAIM_KEYED_ARG_PER] = Int32GetDatum(st->per);
	kargs[CLAIM_KEYED_ARG_HELD_KEYS] = claim_held_keys(pol, st);
	kargs[CLAIM_KEYED_ARG_FRESH_ONLY] = BoolGetDatum(st->fresh_only);
	for (k = 0; k < nshards; k++)
	{
		int			i = (first + k) % nshards;
		int16		sv = claim_walk_shard(i);
		int			n;

		kargs[CLAIM_KEYED_ARG_CURSOR] = PointerGetDatum(NtaskFairCursorShard(qname, sv));
		kargs[CLAIM_KEYED_ARG_SHARD] = Int16GetDatum(sv);
		kargs[CLAIM_KEYED_ARG_LIMIT] = Int32GetDatum(want);
		kargs[CLAIM_KEYED_ARG_NOW] = NtaskStatementTs();
		n = claim_keyed_run(pick, kargs, want, pol, rows);
		if (n > 0)
		{
			NtaskFairAdvanceShard(qname, sv,
								  NtaskTupGetText(*rows, n - 1, CLAIM_PICK_KEY));
			claim_walk_gave(i, nshards);
			return n;
		}
	}
	return claim_run(&claim_keyless_pair, args, want, rows);
}

/*
 * claim_pick_cached_aging
 *		A queue not known yet that this backend last found to have
 *		priority aging (claim_aging_queue): the aging pick first, then, when
 *		it finds nothing (idle, no right, gone, or no longer aging), the
 *		queue read.  Returns the rows picked, 0 when there is no more to
 *		pick (paused, or still aging and idle), or -1: not this queue, or
 *		its mode is read now and claim_pick picks in it.  Not on a
 *		distributed install, which refuses aging (claim_aging_refuse) but
 *		whose queue read may remember a paused aging queue all the same.
 */
static int
claim_pick_cached_aging(text *queue, Datum *args, int want, ClaimPolicy *pol,
						SPITupleTable **rows)
{
	char	   *q;
	bool		cached;
	int			n;

	if (pol->mode != CLAIM_MODE_UNKNOWN || claim_aging_queue == NULL ||
		NtaskShardCount() != 0)
		return -1;
	q = text_to_cstring(queue);
	cached = strcmp(claim_aging_queue, q) == 0;
	pfree(q);
	if (!cached)
		return -1;
	n = claim_aging_pick(queue, args, want, rows);
	if (n > 0)
	{
		pol->mode = CLAIM_MODE_AGING;
		return n;
	}
	claim_read_mode(queue, args, pol);
	if (pol->paused || pol->mode == CLAIM_MODE_AGING)
		return 0;
	return -1;
}

static char *claim_direct_queue = NULL;	/* in TopMemoryContext */

/* claim_note_fits: queue fits the direct path (the last claim found) */
static void
claim_note_fits(text *queue, bool fits)
{
	char	   *q;
	bool		same;

	/* nothing remembered, nothing to remember (a plain install) */
	if (!fits && claim_direct_queue == NULL)
		return;
	q = text_to_cstring(queue);
	same = claim_direct_queue != NULL && strcmp(claim_direct_queue, q) == 0;

	if (claim_direct_queue != NULL && fits != same)
	{
		pfree(claim_direct_queue);
		claim_direct_queue = NULL;
	}
	if (fits && !same)
		claim_direct_queue = MemoryContextStrdup(TopMemoryContext, q);
	pfree(q);
}

/*
 * NtaskClaimFitsDirect
 *		This backend's latest claim of queue that picked found it a plain
 *		queue without a guard, a cap or order (claim_direct_fits), on
 *		either path: ntask_transition_and_claim takes the direct path only
 *		for such a queue, since its transition writes before its claim
 *		reads the queue.
 */
bool
NtaskClaimFitsDirect(text *queue)
{
	char	   *q;
	bool		fits;

	if (claim_direct_queue == NULL)
		return false;
	q = text_to_cstring(queue);
	fits = strcmp(claim_direct_queue, q) == 0;
	pfree(q);
	return fits;
}

/*
 * claim_pick
 *		Pick (lock) up to want due tasks of queue, in the queue's order: a
 *		switch over the picks (ClaimPickKind) by what the claim knows of
 *		the queue.  The plain pick runs first while the queue is not known
 *		to be fair (it finds nothing in a fair queue); when it finds nothing
 *		and the mode is unknown, one statement checks the queue (42704 if
 *		unknown, 42501 without the right) and tells its mode, and the pick
 *		of that mode runs.  Returns the number of rows picked, in *rows:
 *		the columns of ClaimPickCol, the key (CLAIM_PICK_KEY) only for a
 *		fair or ordered pick.
 */
static int
claim_pick(text *queue, int want, ClaimPolicy *pol, ClaimState *st,
		   SPITupleTable **rows)
{
	Datum		args[CLAIM_PICK_NARGS];
	int			n;

	args[CLAIM_PICK_ARG_QUEUE] = PointerGetDatum(queue);
	args[CLAIM_PICK_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	args[CLAIM_PICK_ARG_FRESH_ONLY] = BoolGetDatum(st->fresh_only);
	n = claim_pick_cached_aging(queue, args, want, pol, rows);
	/* at most twice: a mode read in the first makes the second another */
	while (n < 0)
	{
		/* the direct path runs the plain pick only (claim_direct_fits) */
		if (claim_pick_kind(pol) != CLAIM_KIND_PLAIN)
		{
			claim_note_fits(queue, false);
			if (!NtaskDirectClaimRouted("the queue is fair, ordered or aging"))
				return 0;
		}
		switch (claim_pick_kind(pol))
		{
			case CLAIM_KIND_AGING:
				n = claim_aging_pick(queue, args, want, rows);
				break;
			case CLAIM_KIND_PLAIN:
				n = claim_pick_plain(queue, args, want, pol, rows);
				break;
			case CLAIM_KIND_FAIR:
				n = claim_pick_keyed(queue, args, want, pol, st,
									 &claim_fair_pick_pair, rows);
				break;
			case CLAIM_KIND_ORDERED:
				n = claim_pick_keyed(queue, args, want, pol, st,
									 &claim_ordered_pick_pair, rows);
				break;
		}
	}
	return n;
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
 *		CLAIM_PICK_MAX_INFLIGHT..CLAIM_PICK_RETRY_SHARE) into pol; true
 *		when the queue has any.
 */
static bool
claim_read_policy(SPITupleTable *rows, text *queue, ClaimPolicy *pol)
{
	bool		isnull;
	Datum		share;

	pol->max_inflight = NtaskTupGetInt32(rows, 0, CLAIM_PICK_MAX_INFLIGHT);
	pol->partition_max_inflight = NtaskTupGetBool(rows, 0, CLAIM_PICK_ORDERED) ? 1 :
		NtaskTupGetInt32(rows, 0, CLAIM_PICK_PARTITION_MAX_INFLIGHT);
	pol->rate_n = NtaskTupGetInt32(rows, 0, CLAIM_PICK_RATE_N);
	pol->rate_per = NtaskTupGetInt64(rows, 0, CLAIM_PICK_RATE_PER);
	pol->partition_rate_n = NtaskTupGetInt32(rows, 0, CLAIM_PICK_PARTITION_RATE_N);
	pol->partition_rate_per = NtaskTupGetInt64(rows, 0, CLAIM_PICK_PARTITION_RATE_PER);
	share = NtaskTupGetDatum(rows, 0, CLAIM_PICK_RETRY_SHARE, &isnull);
	pol->retry_share = isnull ? 1.0f : DatumGetFloat4(share);
	if ((pol->rate_n > 0 || pol->partition_rate_n > 0 ||
		 pol->retry_share < 1.0f) && !NtaskLimitAvailable())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: queue \"%s\" has a rate limit or a retry share, which needs ntask in shared_preload_libraries",
						text_to_cstring(queue))));
	return pol->max_inflight > 0 || pol->partition_max_inflight > 0 ||
		pol->rate_n > 0 || pol->partition_rate_n > 0 ||
		pol->retry_share < 1.0f;
}

/* claim_hold_key: later rounds of this claim pass key k by */
static void
claim_hold_key(ClaimState *st, Datum k, bool isnull)
{
	if (!isnull)
		st->held_keys = lappend(st->held_keys,
								DatumGetTextPCopy(k));
}

/*
 * claim_node_shards
 *		A queue-wide cap, shared out by node: the node that holds shard,
 *		L of the S shards, holds ceil(cap L / S) leases of the queue, *cap;
 *		returns the node's shards (int2[]).  The pick took the cap lock on
 *		that node (CLAIM_CAP_LOCK runs where the routed pick runs), so the
 *		node's leases are counted exactly, as on one node; across nodes the
 *		shares add up to at most cap + N - 1 for N nodes (docs/scaling.md
 *		"Caps across nodes").  A plain install is one node with every
 *		shard: *cap is the queue's, and its statement takes no shards.
 */
static Datum
claim_node_shards(int16 shard, int max_inflight, int *cap)
{
	int			nshards = NtaskShardCount();
	int16	   *same;
	Datum	   *elems;
	int			n;
	int			i;

	*cap = max_inflight;
	if (nshards == 0)
		return (Datum) 0;
	same = palloc(sizeof(int16) * nshards);
	elems = palloc(sizeof(Datum) * nshards);
	n = NtaskShardGroupShards(shard, same);
	for (i = 0; i < n; i++)
		elems[i] = Int16GetDatum(same[i]);
	*cap = (int) (((int64) max_inflight * n + nshards - 1) / nshards);
	return PointerGetDatum(construct_array(elems, n, INT2OID, sizeof(int16),
										   true, TYPALIGN_SHORT));
}

/*
 * claim_inflight
 *		The leases of the queue still running, per key, counted in a new
 *		snapshot: with a queue-wide cap, those of the node that holds the
 *		picked tasks' shard (claim_inflight_node_pair; on a plain install
 *		the queue's); else those of the picked tasks' shard, where their
 *		keys' tasks all are (claim_inflight_pair).  *cap is the queue-wide
 *		cap that holds where the picked tasks are, *nrows the keys counted.
 */
static SPITupleTable *
claim_inflight(text *queue, ClaimPicked *pick, ClaimPolicy *pol, int *cap,
			   int *nrows)
{
	Datum		args[CLAIM_INFLIGHT_NARGS];
	int16		shard = NTASK_ID_SHARD(NtaskTupGetInt64(pick->rows, 0, CLAIM_PICK_TASK_ID));

	*cap = pol->max_inflight;
	args[CLAIM_INFLIGHT_ARG_QUEUE] = PointerGetDatum(queue);
	if (pol->max_inflight > 0)
	{
		args[CLAIM_INFLIGHT_ARG_SHARDS] = claim_node_shards(shard, pol->max_inflight, cap);
		return claim_exec_pair(&claim_inflight_node_pair, args, 0, nrows);
	}
	args[CLAIM_INFLIGHT_ARG_SHARDS] = Int16GetDatum(shard);
	return claim_exec_pair(&claim_inflight_pair, args, 0, nrows);
}

/*
 * claim_key_inflight
 *		Per picked row of a keyed pick, the leases running for its key, of
 *		the nrows counts of claim_inflight.
 */
static int *
claim_key_inflight(ClaimPicked *pick, SPITupleTable *counts, int nrows)
{
	int		   *perkey = palloc0(sizeof(int) * pick->n);
	int			r;

	for (r = 0; r < pick->n; r++)
	{
		bool		knull;
		Datum		k = NtaskTupGetDatum(pick->rows, r, CLAIM_PICK_KEY, &knull);
		int			c;

		for (c = 0; c < nrows; c++)
		{
			bool		isnull;
			Datum		ck = NtaskTupGetDatum(counts, c, CLAIM_INFLIGHT_KEY, &isnull);

			if (claim_text_eq(k, knull, ck, isnull))
				perkey[r] = NtaskTupGetInt32(counts, c, CLAIM_INFLIGHT_COUNT);
		}
	}
	return perkey;
}

/* claim_kept_same_key: the rows kept before row r whose key is k */
static int
claim_kept_same_key(ClaimPicked *pick, int r, Datum k, bool knull)
{
	int			same = 0;
	int			p;

	for (p = 0; p < r; p++)
	{
		bool		pnull;

		if (pick->keep[p] &&
			claim_text_eq(k, knull,
						  NtaskTupGetDatum(pick->rows, p, CLAIM_PICK_KEY, &pnull),
						  pnull))
			same++;
	}
	return same;
}

/*
 * claim_limit_cap
 *		The caps (claim_limit): the picked tasks kept in pick order while
 *		they fit under max_inflight and, in a keyed pick, the key's
 *		partition_max_inflight; returns how many are kept.
 */
static int
claim_limit_cap(ClaimCall *call, ClaimPicked *pick, ClaimPolicy *pol,
				ClaimState *st)
{
	bool		per_key = pick->keyed && pol->partition_max_inflight > 0;
	int			total = 0;
	int			kept = 0;
	int			cap;
	int			nrows;
	int		   *perkey = NULL;
	SPITupleTable *counts;
	int			r;

	counts = claim_inflight(call->queue, pick, pol, &cap, &nrows);
	for (r = 0; r < nrows; r++)
		total += NtaskTupGetInt32(counts, r, CLAIM_INFLIGHT_COUNT);
	if (per_key)
		perkey = claim_key_inflight(pick, counts, nrows);
	for (r = 0; r < pick->n; r++)
	{
		if (pol->max_inflight > 0 && total + kept >= cap)
		{
			pick->keep[r] = false;
			st->held = true;
			st->node_full = cap < pol->max_inflight;
			call->held_cap = true;
		}
		else if (per_key)
		{
			bool		isnull;
			Datum		k = NtaskTupGetDatum(pick->rows, r, CLAIM_PICK_KEY, &isnull);

			if (perkey[r] + claim_kept_same_key(pick, r, k, isnull) >=
				pol->partition_max_inflight)
			{
				pick->keep[r] = false;
				claim_hold_key(st, k, isnull);
				call->held_cap = true;
			}
		}
		if (pick->keep[r])
			kept++;
	}
	return kept;
}

/*
 * claim_limit_share
 *		The retries' share (claim_limit): while first attempts are due, a
 *		retry goes only while retries have had at most retry_share of the
 *		queue's recent hand-outs (limit.c); one held back makes the next
 *		rounds look for first attempts only, and when those find none,
 *		retries take all.  Returns how many it held back.
 */
static int
claim_limit_share(ClaimCall *call, ClaimPicked *pick, ClaimPolicy *pol,
				  ClaimState *st)
{
	char	   *qname = text_to_cstring(call->queue);
	int			held = 0;
	int			r;

	for (r = 0; r < pick->n; r++)
	{
		if (!pick->keep[r])
			continue;
		if (!NtaskShareTake(qname, pol->retry_share,
							NtaskTupGetBool(pick->rows, r, CLAIM_PICK_RETRY)))
		{
			pick->keep[r] = false;
			held++;
			st->fresh_only = true;
		}
	}
	return held;
}

/*
 * claim_limit_rate
 *		The rates (claim_limit): one token of the queue's bucket and, in a
 *		keyed pick, of the key's (limit.c) per kept task, in pick order.
 *		Returns how many it held back; call->held_until is when the first
 *		of their buckets has a token again.
 */
static int
claim_limit_rate(ClaimCall *call, ClaimPicked *pick, ClaimPolicy *pol,
				 ClaimState *st)
{
	TimestampTz now = GetCurrentStatementStartTimestamp();
	char	   *qname = text_to_cstring(call->queue);
	int64		rate_per = pol->rate_per;
	int			held = 0;
	int			r;

	/*
	 * A distributed install: this node (the picked shard's,
	 * claim_dist_policy) holding L of the S shards runs the queue's bucket at
	 * L / S of its rate (rate_n per rate_per S / L), so the nodes' buckets
	 * add up to the rate.  A key lives in one shard: its bucket is whole on
	 * its node.
	 */
	if (pol->rate_n > 0 && NtaskShardCount() > 0 && NtaskLocalShardCount() > 0)
		rate_per = rate_per * NtaskShardCount() / NtaskLocalShardCount();

	for (r = 0; r < pick->n; r++)
	{
		text	   *k = NULL;
		TimestampTz next;
		int			empty;

		if (!pick->keep[r])
			continue;
		if (pick->keyed && pol->partition_rate_n > 0)
			k = NtaskTupGetText(pick->rows, r, CLAIM_PICK_KEY);
		empty = NtaskLimitTake(qname, pol->rate_n, rate_per,
							   k ? VARDATA_ANY(k) : NULL,
							   k ? VARSIZE_ANY_EXHDR(k) : 0,
							   pol->partition_rate_n, pol->partition_rate_per,
							   now, &next);
		if (empty == 0)
			continue;
		pick->keep[r] = false;
		held++;
		if (call->held_until == 0 || next < call->held_until)
			call->held_until = next;
		if (empty == NTASK_LIMIT_QUEUE)
			st->held = true;
		else
			claim_hold_key(st, PointerGetDatum(k), false);
	}
	return held;
}

/*
 * claim_limit
 *		Which of the picked tasks a limited queue may hand out
 *		(pick->keep[r]); returns how many.  In this order (docs/design.md
 *		"Flow control"):
 *
 *		caps	max_inflight: the queue's cap lock is held (the pick took it;
 *				a pick that could not picked nothing, CLAIM_CAP_LOCK);
 *				partition_max_inflight, or 1 for an ordered queue: the key's
 *				turn lock is held (the pick took it too).  Then the
 *				leases still running are counted in a new snapshot, which
 *				sees every lease committed before the lock was taken, and
 *				the picked tasks are kept in pick order while they fit
 *				(claim_limit_cap).
 *		share	the retries' share (claim_limit_share).
 *		rates	one token of the queue's bucket and of the key's (limit.c)
 *				per kept task, in pick order; a task without tokens stays
 *				(claim_limit_rate).
 *
 *		A task kept back stays as it is (due, no attempt, no budget); its
 *		row lock is held until the claim's transaction ends, so the claim
 *		looks no further (st->held).
 */
static int
claim_limit(ClaimCall *call, ClaimPicked *pick, ClaimPolicy *pol,
			ClaimState *st)
{
	int			kept = pick->n;
	int			r;

	for (r = 0; r < pick->n; r++)
		pick->keep[r] = true;
	if (pol->max_inflight > 0 || pol->partition_max_inflight > 0)
		kept = claim_limit_cap(call, pick, pol, st);
	if (pol->retry_share < 1.0f && !st->share_off &&
		pol->mode != CLAIM_MODE_ORDERED)
		kept -= claim_limit_share(call, pick, pol, st);
	if (pol->rate_n > 0 || (pol->partition_rate_n > 0 && pick->keyed))
		kept -= claim_limit_rate(call, pick, pol, st);
	return kept;
}

/*
 * Why a claim goes round again, or stops (claim_round_next): the claim
 * runs another round (at most CLAIM_MAX_ROUNDS, while short of its
 * max_tasks) only for a CLAIM_AGAIN_* reason.
 */
typedef enum ClaimNext
{
	CLAIM_STOP,					/* nothing says another round finds more */
	CLAIM_STOP_EMPTY,			/* the pick found nothing due */
	CLAIM_STOP_HELD,			/* rows a limit held back stay locked, or a
								 * guard met a lock: look no further */
	CLAIM_AGAIN_FIRST,			/* the first round */
	CLAIM_AGAIN_FULL,			/* the pick was full, not all handed out */
	CLAIM_AGAIN_SHARDS,			/* a distributed claim: the next shards */
	CLAIM_AGAIN_NODE_FULL,		/* a node's share of the cap is full: the next
								 * shards may be another node's */
	CLAIM_AGAIN_FRESH,			/* retries over their share held back: look
								 * for first attempts */
	CLAIM_AGAIN_RETRIES,		/* no first attempt is due: the held retries
								 * may go after all */
	CLAIM_AGAIN_KEYS,			/* ordered: keys held back, others may go */
	CLAIM_AGAIN_SPLIT			/* a keyed pick went around every key with
								 * work: split the rest over them */
} ClaimNext;

#define CLAIM_GO_AGAIN(next) ((next) >= CLAIM_AGAIN_FIRST)

/*
 * One round of a claim (claim_round), phase by phase: the pick, which of
 * its rows the limits let go (pick.keep), the lease and guard they come
 * with; what the guard let through (ids, each with its token as picked;
 * taken, the takeovers among them, whose attempt the lease phase closes);
 * and how many rows the emit phase handed out.
 */
typedef struct ClaimRound
{
	ClaimCall  *call;
	ClaimPolicy *pol;
	ClaimState *st;
	int			want;
	int			nheld;			/* st->held_keys before the round */
	ClaimPicked pick;
	Datum		lease;			/* the caller's, or the queue's */
	char	   *guard;			/* NULL: none */
	char	   *guard_owner;
	int			nkeys;			/* keys in a keyed pick */
	bool		guard_busy;		/* a guard met a lock (NTASK_GUARD_BUSY) */
	bool		any_retry;		/* a task let through had an attempt before */
	Datum	   *ids;			/* to lease, nids of them */
	Datum	   *tokens;			/* each id's token as picked */
	int			nids;
	Datum	   *taken;			/* the takeovers among them, ntaken */
	Datum	   *taken_tokens;
	int			ntaken;
	int			leased;			/* rows handed out */
} ClaimRound;

/*
 * claim_direct_fits
 *		A pick on the direct path (docs/scaling.md "The claim on the direct
 *		path") hands out its rows there only from a queue without a guard,
 *		a cap (max_inflight, partition_max_inflight) or order (the picked
 *		rows say so: the queue row comes with them); else the claim goes on
 *		routed, as the routed pick would have (its after step,
 *		claim_dist_policy), when it has written nothing directly yet, and
 *		hands out nothing more when it has (false).  A rate limit and a
 *		retry share stay on the direct path: their bucket and counts are in
 *		the shared memory of the node that runs the claim (limit.c), which
 *		on the direct path is the shard's, as claim_dist_policy requires of
 *		the routed claim; they read no other shard and write nothing
 *		(docs/scaling.md "Batches and flow control on the direct path").
 */
static bool
claim_direct_fits(ClaimRound *rd)
{
	SPITupleTable *rows = rd->pick.rows;
	bool		keyed = rows->tupdesc->natts >= CLAIM_PICK_KEY;
	bool		isnull;
	bool		plain;
	Datum		d;

	if (NtaskShardCount() == 0)
		return true;
	(void) NtaskTupGetDatum(rows, 0, CLAIM_PICK_GUARD, &isnull);
	plain = isnull;
	(void) NtaskTupGetDatum(rows, 0, CLAIM_PICK_MAX_INFLIGHT, &isnull);
	plain = plain && isnull;
	(void) NtaskTupGetDatum(rows, 0, CLAIM_PICK_PARTITION_MAX_INFLIGHT, &isnull);
	plain = plain && isnull;
	d = NtaskTupGetDatum(rows, 0, CLAIM_PICK_ORDERED, &isnull);
	plain = plain && (isnull || !DatumGetBool(d));
	/* what ntask_transition_and_claim's next call of the queue goes by */
	claim_note_fits(rd->call->queue, plain && !keyed &&
					rd->pol->mode == CLAIM_MODE_PLAIN);
	if (plain || NtaskCallPath() != NTASK_PATH_DIRECT)
		return true;
	if (!NtaskDirectClaimRouted("the queue has a guard or flow control"))
		return false;
	claim_dist_policy(rows, rd->call->queue, keyed,
					  NTASK_ID_SHARD(NtaskTupGetInt64(rows, 0, CLAIM_PICK_TASK_ID)));
	return true;
}

/*
 * claim_round_pick
 *		The pick phase: pick up to want due tasks (claim_pick); a pause's
 *		end for a waiting claim to sleep until; then, from the first picked
 *		row, the lease and the guard, and which of the picked tasks the
 *		queue's limits let go (claim_limit).  False when nothing was
 *		picked, *next saying whether to look again.
 */
static bool
claim_round_pick(ClaimRound *rd, int64 *lease_usecs, ClaimNext *next)
{
	ClaimCall  *call = rd->call;
	ClaimPolicy *pol = rd->pol;
	ClaimPicked *pick = &rd->pick;
	bool		isnull;

	rd->nheld = list_length(rd->st->held_keys);
	pick->n = claim_pick(call->queue, rd->want, pol, rd->st, &pick->rows);
	/* a waiting claim sleeps until a pause ends (or a resume wakes it) */
	if ((pol->paused || pol->keys_paused) && pol->pause_ends != 0 &&
		(call->held_until == 0 || pol->pause_ends < call->held_until))
		call->held_until = pol->pause_ends;
	if (pick->n == 0)
	{
		*next = CLAIM_STOP_EMPTY;
		if (rd->st->fresh_only)
		{
			/* no first attempt is due: the held retries may go after all */
			rd->st->fresh_only = false;
			rd->st->share_off = true;
			*next = CLAIM_AGAIN_RETRIES;
		}
		return false;
	}
	if (!claim_direct_fits(rd))
	{
		*next = CLAIM_STOP_HELD;	/* its rows stay locked, not handed out */
		return false;
	}
	rd->lease = call->lease ? call->lease :
		NtaskTupGetDatum(pick->rows, 0, CLAIM_PICK_LEASE, &isnull);
	*lease_usecs = NtaskIntervalUsecs(DatumGetIntervalP(rd->lease));
	rd->guard = NtaskTupGetCString(pick->rows, 0, CLAIM_PICK_GUARD);
	if (rd->guard != NULL)
	{
		/* the guard with the owner recorded with it, from one row */
		rd->guard = NtaskQueueGuard(call->queue, &rd->guard_owner);
	}
	pick->keep = palloc(sizeof(bool) * pick->n);
	pick->keyed = pick->rows->tupdesc->natts >= CLAIM_PICK_KEY;
	if (claim_read_policy(pick->rows, call->queue, pol))
		(void) claim_limit(call, pick, pol, rd->st);
	else
		memset(pick->keep, true, sizeof(bool) * pick->n);
	return true;
}

/*
 * claim_guard_lets
 *		The guard's verdict on picked row r (task task_id): true when the
 *		task may be leased.  A task the guard skips or cancels is finished
 *		with the guard's reason, one the guard could not decide on goes to
 *		repair; one whose guard met a lock stays due (rd->guard_busy).
 */
static bool
claim_guard_lets(ClaimRound *rd, int r, int64 task_id, bool was_leased)
{
	ClaimCall  *call = rd->call;
	SPITupleTable *rows = rd->pick.rows;
	bool		isnull;
	char	   *reason;
	NtaskGuardVerdict v;

	v = NtaskRunGuard(rd->guard, rd->guard_owner,
					  DatumGetTextPP(NtaskTupGetDatum(rows, r, CLAIM_PICK_TASK_KEY, &isnull)),
					  DatumGetJsonbP(NtaskTupGetDatum(rows, r, CLAIM_PICK_PAYLOAD, &isnull)),
					  &reason, true);
	if (v == NTASK_GUARD_PROCEED)
		return true;
	if (v == NTASK_GUARD_BUSY)
	{
		/*
		 * Something the guard reads was locked (lock timeout, deadlock): the
		 * task stays due for a later claim; this one looks no further
		 * (another round would pick it again).
		 */
		rd->guard_busy = true;
		return false;
	}
	if (v == NTASK_GUARD_ERROR)
	{
		/*
		 * The guard could not decide: the task needs a human, the queue goes
		 * on.  The error text is in the audit log.
		 */
		NtaskFinishTask(task_id, "repair_required", "guard_error",
						"guard_error", "permanent", "guard");
		call->writes++;
		NtaskAudit(text_to_cstring(call->worker), "guard_error", task_id,
				   text_to_cstring(call->queue), reason,
				   was_leased ? "leased" : "ready", "repair_required");
		return false;
	}
	{
		const char *to = v == NTASK_GUARD_SKIP ? "skipped" : "canceled";

		NtaskFinishTask(task_id, to,
						reason ? reason : psprintf("guard: %s", to),
						"guard", NULL, NULL);
		call->writes++;
	}
	return false;
}

/*
 * claim_round_guard
 *		The guard phase: of the picked tasks the limits let go, those the
 *		queue's guard lets through (all of them without a guard) go into
 *		rd->ids, the takeovers also into rd->taken; and the keys of a keyed
 *		pick are counted (for claim_round_next).
 */
static void
claim_round_guard(ClaimRound *rd)
{
	ClaimPicked *pick = &rd->pick;
	bool		isnull;
	int			r;

	rd->ids = palloc(sizeof(Datum) * pick->n);
	rd->tokens = palloc(sizeof(Datum) * pick->n);
	rd->taken = palloc(sizeof(Datum) * pick->n);
	rd->taken_tokens = palloc(sizeof(Datum) * pick->n);
	for (r = 0; r < pick->n; r++)
	{
		int64		task_id = NtaskTupGetInt64(pick->rows, r, CLAIM_PICK_TASK_ID);
		bool		was_leased = NtaskTupGetBool(pick->rows, r, CLAIM_PICK_WAS_LEASED);

		/* keys in this pick (rows of one key are adjacent) */
		if (pick->keyed &&
			(r == 0 || !DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID,
															 NtaskTupGetDatum(pick->rows, r, CLAIM_PICK_KEY, &isnull),
															 NtaskTupGetDatum(pick->rows, r - 1, CLAIM_PICK_KEY, &isnull)))))
			rd->nkeys++;
		if (!pick->keep[r])
			continue;			/* held back by a limit (claim_limit) */
		if (rd->guard != NULL && !claim_guard_lets(rd, r, task_id, was_leased))
			continue;
		rd->tokens[rd->nids] = Int64GetDatum(NtaskTupGetInt64(pick->rows, r, CLAIM_PICK_TOKEN));
		rd->ids[rd->nids++] = Int64GetDatum(task_id);
		if (was_leased)
		{
			rd->taken_tokens[rd->ntaken] = rd->tokens[rd->nids - 1];
			rd->taken[rd->ntaken++] = Int64GetDatum(task_id);
		}
		if (NtaskTupGetBool(pick->rows, r, CLAIM_PICK_RETRY))
			rd->any_retry = true;
	}
}

/*
 * claim_round_lease
 *		The lease phase: close the attempts of the tasks taken over, then
 *		lease rd->ids (or divert those whose budget or deadline is spent)
 *		(claim_lease_pair).  Returns its rows (ClaimCol), *nrows of them.
 */
static SPITupleTable *
claim_round_lease(ClaimRound *rd, int *nrows)
{
	ClaimCall  *call = rd->call;
	Datum		values[CLAIM_LEASE_NVALUES];
	Datum		invoked_ids;

	invoked_ids = rd->ntaken > 0 ?
		NtaskCloseExpiredAttempts(NtaskInt8Array(rd->taken, rd->ntaken),
								  NtaskInt8Array(rd->taken_tokens, rd->ntaken)) :
		NtaskInt8Array(NULL, 0);

	call->writes++;				/* closes and leases (or diverts) nids rows */
	values[CLAIM_LEASE_ARG_IDS] = NtaskInt8Array(rd->ids, rd->nids);
	values[CLAIM_LEASE_ARG_WORKER] = PointerGetDatum(call->worker);
	values[CLAIM_LEASE_ARG_LEASE] = rd->lease;
	values[CLAIM_LEASE_ARG_TAKEN] = NtaskInt8Array(rd->taken, rd->ntaken);
	values[CLAIM_LEASE_ARG_INVOKED_IDS] = invoked_ids;
	values[CLAIM_LEASE_ARG_TOKEN_FLOOR] = Int64GetDatum(NtaskTokenFloor());
	values[CLAIM_LEASE_ARG_NOW] = NtaskStatementTs();
	values[CLAIM_LEASE_ARG_LEASE_UNTIL] =
		DirectFunctionCall2(timestamptz_pl_interval,
							values[CLAIM_LEASE_ARG_NOW], rd->lease);
	values[CLAIM_LEASE_ARG_SHARD] =
		Int16GetDatum(NtaskIdsShard(values[CLAIM_LEASE_ARG_IDS]));
	values[CLAIM_LEASE_ARG_INVOKED] = BoolGetDatum(call->invoked);
	values[CLAIM_LEASE_ARG_TOKENS] = NtaskInt8Array(rd->tokens, rd->nids);
	values[CLAIM_LEASE_VAL_ANY_RETRY] = BoolGetDatum(rd->any_retry);
	values[CLAIM_LEASE_VAL_RECEIPTS] = (Datum) 0;
	return claim_exec_pair(&claim_lease_pair, values, 0, nrows);
}

/*
 * claim_round_emit
 *		The emit phase: each leased row of the lease statement (not those
 *		diverted to repair) goes into the result tuplestore, ntask_claim's
 *		columns, then the call->nextra columns of call->extra, then the
 *		context column.
 */
static void
claim_round_emit(ClaimRound *rd, SPITupleTable *leased_rows, int nrows)
{
	ClaimCall  *call = rd->call;
	int			r;

	for (r = 0; r < nrows; r++)
	{
		Datum		vals[CLAIM_NCOLS + CLAIM_MAX_EXTRA + 1];
		bool		nulls[CLAIM_NCOLS + CLAIM_MAX_EXTRA + 1];
		int			c;

		if (!NtaskTupGetBool(leased_rows, r, CLAIM_COL_LEASED))
			continue;			/* diverted to repair_required */
		for (c = 0; c < CLAIM_NCOLS; c++)
			vals[c] = NtaskTupGetDatum(leased_rows, r, CLAIM_COL_TASK_ID + c, &nulls[c]);
		for (c = 0; c < call->nextra; c++)
		{
			vals[CLAIM_NCOLS + c] = call->extra[c];
			nulls[CLAIM_NCOLS + c] = call->extranulls[c];
		}
		/* the context column, last: one test for a task without one */
		c = CLAIM_NCOLS + call->nextra;
		vals[c] = (Datum) 0;
		nulls[c] = true;
		if (NtaskTupGetBool(leased_rows, r, CLAIM_COL_HAS_CONTEXT))
			vals[c] = claim_context(leased_rows, r, call->queue,
									&call->context_bytes, &nulls[c]);
		tuplestore_putvalues(call->rsinfo->setResult, call->rsinfo->setDesc,
							 vals, nulls);
		rd->leased++;
	}
}

/*
 * claim_round_next
 *		The decision after a round that picked something: whether another
 *		round could find more, and why (ClaimNext).  A keyed pick that went
 *		around every key with work sets the next round's share per key.
 */
static ClaimNext
claim_round_next(ClaimRound *rd)
{
	ClaimState *st = rd->st;
	bool		short_of = rd->leased < rd->want;

	if (st->node_full && !rd->guard_busy && short_of &&
		NtaskWalkShardCount() > 1 && NtaskLocalShardCount() == 0)
		return CLAIM_AGAIN_NODE_FULL;	/* its rows stay locked; a worker node
										 * walks only its own shards */
	if (st->held || rd->guard_busy)
		return CLAIM_STOP_HELD;
	if (st->fresh_only && short_of)
		return CLAIM_AGAIN_FRESH;
	if (rd->pol->mode == CLAIM_MODE_ORDERED)
		return list_length(st->held_keys) > rd->nheld && short_of ?
			CLAIM_AGAIN_KEYS : CLAIM_STOP;
	if (rd->pick.keyed && rd->pick.n < rd->want && short_of)
	{
		st->per = (rd->want - rd->leased + rd->nkeys - 1) / rd->nkeys;
		return CLAIM_AGAIN_SPLIT;
	}
	if (rd->pick.n == rd->want && short_of)
		return CLAIM_AGAIN_FULL;
	if (short_of && NtaskWalkShardCount() > 1)
		return CLAIM_AGAIN_SHARDS;
	return CLAIM_STOP;
}

/*
 * claim_round
 *		One round of a claim, in phases: pick up to want due tasks (and
 *		apply the queue's limits), run the guard, close expired attempts
 *		and lease the rest, put the leased ones into the result tuplestore,
 *		and decide whether to go round again (*next).  call->lease is the
 *		caller's lease, or 0 for the queue's.  Returns how many were leased.
 *		All SPI results stay in the caller's SPI connection.
 */
static int
claim_round(ClaimCall *call, int want, ClaimPolicy *pol, ClaimState *st,
			int64 *lease_usecs, ClaimNext *next)
{
	ClaimRound	rd = {0};

	rd.call = call;
	rd.pol = pol;
	rd.st = st;
	rd.want = want;
	if (!claim_round_pick(&rd, lease_usecs, next))
		return 0;
	claim_round_guard(&rd);
	if (rd.nids > 0)
	{
		SPITupleTable *leased_rows;
		int			nrows;

		leased_rows = claim_round_lease(&rd, &nrows);
		claim_round_emit(&rd, leased_rows, nrows);
	}
	*next = claim_round_next(&rd);
	return rd.leased;
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
	ClaimNext	next = CLAIM_AGAIN_FIRST;
	int64		lease_usecs = 0;
	ClaimPolicy pol = {0};
	ClaimState	st = {0};

	/*
	 * Its decisions read the queue as of the statement: the in-flight count
	 * behind caps and ordered keys, in a transaction snapshot, would miss the
	 * leases committed since the transaction began (two in flight under
	 * max_inflight => 1, spec claim_repeatable_read).
	 */
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("ntask: a claim needs READ COMMITTED"),
				 errdetail("Under REPEATABLE READ or SERIALIZABLE its snapshot is the transaction's: caps and ordered keys would miss the leases committed since it began."),
				 errhint("Claim in a READ COMMITTED transaction (the default).")));
	pol.mode = CLAIM_MODE_UNKNOWN;
	pol.retry_share = 1.0f;
	st.per = 1;
	c->held_cap = false;
	c->held_until = 0;
	/* a shard moved since the last claim: read the placements again */
	NtaskRefreshPlacements();

	Assert(c->nextra >= 0 && c->nextra <= CLAIM_MAX_EXTRA);
	for (round = 0; round < CLAIM_MAX_ROUNDS && got < c->max_tasks &&
		 CLAIM_GO_AGAIN(next); round++)
		got += claim_round(c, c->max_tasks - got, &pol, &st, &lease_usecs,
						   &next);

	/*
	 * A token handed out must stay handed out: if this commit were
	 * acknowledged and then lost (synchronous_commit = off and a crash), the
	 * next claim would issue the same token to another worker.  So the commit
	 * of a transaction that leased a task is flushed whatever the session's
	 * synchronous_commit says.
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

/*
 * ntask_claim(queue, worker, max_tasks, lease, wait, invoked)
 *		RETURNS TABLE(task_id, task_key, payload, attempt, token, lease_until,
 *					  prior_outcome)
 *
 * Leases up to max_tasks due tasks (ready, retry_wait whose run_at passed,
 * or leased whose lease expired) to worker.  prior_outcome is 'committed'
 * when an earlier attempt left a commit receipt (ntask_receipt), else
 * 'unknown' when an earlier attempt may have had an effect, else NULL.
 * With wait (a positive interval, cut to ntask.max_wait) and nothing due,
 * it waits for work of the queue to be committed (NtaskClaimWait, wait.c)
 * and returns what it then claims, or no row when the wait ran out.  With
 * invoked, every attempt it leases is marked invoked in the lease itself,
 * as if ntask_invoked had been called for it in the same transaction (one
 * statement less per task for a worker that calls out at once).
 * Errors: unknown queue 42704; NULL argument 22004; max_tasks outside
 * 1..1000, a non-positive lease or a negative wait 22023; REPEATABLE READ
 * or SERIALIZABLE, or a wait after a write in the transaction 25000.
 */
Datum
ntask_claim(PG_FUNCTION_ARGS)
{
	ClaimCall	c;
	int64		wait_usecs = 0;

	NtaskClaimCallInit(&c, fcinfo, (ReturnSetInfo *) fcinfo->resultinfo,
					   0, 1, 2, 3);
	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: invoked must not be NULL")));
	c.invoked = PG_GETARG_BOOL(5);
	if (!PG_ARGISNULL(4))
	{
		Interval   *w = PG_GETARG_INTERVAL_P(4);

		if (w->month < 0 || w->day < 0 || w->time < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: wait must not be negative")));
		/* anything over a day is over ntask.max_wait's maximum: no overflow */
		wait_usecs = (w->month > 0 || w->day > 0) ? USECS_PER_DAY :
			Min(w->time, USECS_PER_DAY);
	}
	/* on a Citus coordinator, its _on form delegated (coord.c) */
	if (NtaskCoordClaim(fcinfo, -1, 0, wait_usecs > 0 ? "a waiting claim" :
						c.max_tasks > 1 ? "a claim of more than one task" : NULL))
		return (Datum) 0;
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	/* its walk on the direct path where it may (shard.c), a wait's look by look */
	NtaskDirectClaimBegin(fcinfo, wait_usecs > 0);
	if (wait_usecs > 0)
		(void) NtaskClaimWait(&c, wait_usecs, NtaskClaimInto);
	else
		(void) NtaskClaimInto(&c);
	NtaskDirectEnd();
	SPI_finish();
	return (Datum) 0;
}
