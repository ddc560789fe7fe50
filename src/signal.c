/*-------------------------------------------------------------------------
 *
 * signal.c
 *	  Waiting for a signal: ntask_await parks the task its
 *	  token holds until ntask_signal(queue, signal_key) or a timeout;
 *	  ntask_queue_set_signal_role says who may signal a queue.
 *
 * States (docs/design.md "New states"): the await ends the attempt with
 * result and requested 'awaiting' and moves the task to state 'awaiting',
 * lease released, due_at = now + timeout (NULL: none), await_on_timeout
 * set.  The attempt does not count against the budget: attempts keeps
 * counting claims (one ledger row each), max_attempts grows by one, as
 * ntask_release does for a never-invoked attempt, so the attempts left
 * are what they were before the claim.  The deadline does not run while
 * the task awaits (housekeeping's sweep passes it by): when it wakes, by
 * the signal or its timeout, it has at least the queue's total_deadline
 * left (deadline = max(deadline, wake + total_deadline)), as a task
 * waiting for its parents gets when it becomes ready.
 *
 * The signal's row, ntask.signal (queue, signal_key), is where an await
 * and a signal meet: the await, after it moved the task row, upserts the
 * row (sent_at NULL: awaited); the signal upserts it with its payload and
 * then readies the tasks that await the key.  Whichever comes second
 * waits on the first's uncommitted index entry and then sees it:
 *
 *	signal first	the await finds the row sent: the task is ready at once
 *	await first		the signal's update, a new statement after its upsert
 *					waited for the await's commit, finds the task awaiting
 *
 * so the race cannot lose the signal, and the task becomes due once
 * (isolation spec signal_vs_await).  Lock order: the await locks the task
 * row, then the signal's key; the signal the key, then the awaiting task
 * rows; the signal's update never waits for a task row whose committed
 * version is not awaiting (an await in progress), so the two cannot
 * deadlock.  A timed-out await is found by the claim's usual pick
 * (claim.c): 'ready' leases it with context.signal.timed_out, 'repair'
 * diverts it to repair_required (await_timeout).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/signal.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_api.h"
#include "ntask_base.h"
#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_await);
PG_FUNCTION_INFO_V1(ntask_signal);
PG_FUNCTION_INFO_V1(ntask_queue_set_signal_role);

/*
 * sig_await's parameters.  On a distributed install (docs/scaling.md
 * "Signals on a distributed install") a signal's row lives in the shard
 * of its queue and key (ntask_shard(queue, signal_key)), co-located with
 * the tasks of that shard, and a task may await only a key of its own
 * shard: then the await, the signal and the tasks it wakes are each
 * routed to one shard.  Citus refuses a STABLE function of a column in an
 * UPDATE (the deadline's timestamptz + interval): the queue's
 * total_deadline is added in a read first (sig_await_pre, the before
 * step, which fills $7 and $8), and the UPDATE and the ledger row run
 * apart (sig_await_ledger, the after step), each routed.
 */
typedef enum SigAwaitArg
{
	SIG_AWAIT_ARG_TASK_ID,		/* $1 */
	SIG_AWAIT_ARG_TOKEN,		/* $2 */
	SIG_AWAIT_ARG_KEY,			/* $3 */
	SIG_AWAIT_ARG_DUE,			/* $4, the timeout's end or NULL */
	SIG_AWAIT_ARG_ON_TIMEOUT,	/* $5 */
	SIG_AWAIT_ARG_CALLER,		/* $6 */
	SIG_AWAIT_ARG_FLOOR,		/* $7, routed: the deadline floor of the
								 * timeout */
	SIG_AWAIT_ARG_NOW,			/* $8, routed: now */
	SIG_AWAIT_NARGS,
	/* not a parameter: routed, the floor of a wake now, for sig_ready */
	SIG_AWAIT_NOW_FLOOR = SIG_AWAIT_NARGS,
	SIG_AWAIT_NVALUES
} SigAwaitArg;

/* its columns (one row when it applied) */
typedef enum SigAwaitCol
{
	SIG_AWAIT_QUEUE = 1,
	SIG_AWAIT_SHARD,
	SIG_AWAIT_NCOLS = SIG_AWAIT_SHARD
} SigAwaitCol;

/* the routed UPDATE's columns after those, for its ledger row */
typedef enum SigAwaitDistCol
{
	SIG_AWAIT_DIST_TASK_ID = SIG_AWAIT_NCOLS + 1,
	SIG_AWAIT_DIST_TOKEN,
	SIG_AWAIT_DIST_ATTEMPTS,
	SIG_AWAIT_DIST_CLAIMED_AT,
	SIG_AWAIT_DIST_INVOKED_AT,
	SIG_AWAIT_DIST_WORKER,
	SIG_AWAIT_DIST_NCOLS = SIG_AWAIT_DIST_WORKER
} SigAwaitDistCol;

static bool sig_await_pre(Datum *values, char *nulls);
static void sig_await_ledger(SPITupleTable *tt, int n, Datum *values, char *nulls);

/*
 * Park: the task row (only the current token of a leased task, only with
 * the queue's worker_role), then the attempt's ledger row, as the release
 * writes it (lease.c); o is the row as the statement's snapshot saw it.
 */
static NtaskPair sig_await = NTASK_PAIR("await",
										NTASK_PLAIN(SIG_AWAIT_NCOLS,
													"WITH upd AS ( "
													"  UPDATE ntask.task t SET state = 'awaiting', "
													"    signal_key = $3, await_on_timeout = $5, "
													"    run_at = coalesce($4, t.run_at), due_at = $4, "
													"    deadline = GREATEST(t.deadline, $4 OPERATOR(pg_catalog.+) q.total_deadline), "
													"    lease_owner = NULL, lease_until = NULL, "
													"    max_attempts = t.max_attempts OPERATOR(pg_catalog.+) 1, "
													"    updated_at = pg_catalog.statement_timestamp() "
													"  FROM ntask.task o, ntask.queue q "
													"  WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
													"    AND t.token OPERATOR(pg_catalog.=) $2 "
													"    AND t.state OPERATOR(pg_catalog.=) 'leased' "
													"    AND o.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("o", "$1")
													"    AND q.queue OPERATOR(pg_catalog.=) t.queue "
													"    AND " NTASK_WORKER_RIGHT("q", "6") " "
													"  RETURNING t.queue, t.task_id, t.shard, t.token, t.attempts, "
													"    coalesce(o.claimed_at, o.updated_at) AS claimed_at, t.invoked_at, "
													"    o.lease_owner AS worker "
													"), att AS ( "
													"  INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker, claimed_at, "
													"    invoked_at, ended_at, result, requested, outcome_known, retry_at, detail) "
													"  SELECT u.task_id, u.shard, u.token, u.attempts, u.worker, u.claimed_at, "
													"    u.invoked_at, pg_catalog.statement_timestamp(), 'awaiting', 'awaiting', "
													"    true, $4, pg_catalog.jsonb_build_object('signal_key', $3) "
													"  FROM upd u "
													") "
													"SELECT upd.queue, upd.shard FROM upd",
													SIG_AWAIT_ARG_FLOOR, SPI_OK_SELECT),
										NTASK_ROUTED(SIG_AWAIT_DIST_NCOLS,
													 "UPDATE ntask.task t SET state = 'awaiting', "
													 "  signal_key = $3, await_on_timeout = $5, "
													 "  run_at = coalesce($4, t.run_at), due_at = $4, "
													 "  deadline = GREATEST(t.deadline, $7), "
													 "  lease_owner = NULL, lease_until = NULL, "
													 "  max_attempts = t.max_attempts OPERATOR(pg_catalog.+) 1, "
													 "  updated_at = $8 "
													 "FROM ntask.task o "
													 "WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
													 "  AND t.token OPERATOR(pg_catalog.=) $2 "
													 "  AND t.state OPERATOR(pg_catalog.=) 'leased' "
													 "  AND o.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("o", "$1")
													 "  AND EXISTS (SELECT 1 FROM ntask.queue q "
													 "              WHERE q.queue OPERATOR(pg_catalog.=) t.queue "
													 "                AND " NTASK_WORKER_RIGHT("q", "6") ") "
													 "RETURNING t.queue, t.shard, t.task_id, t.token, t.attempts, "
													 "  coalesce(o.claimed_at, o.updated_at), t.invoked_at, o.lease_owner",
													 SIG_AWAIT_NARGS, SPI_OK_UPDATE_RETURNING,
													 sig_await_pre, sig_await_ledger),
										INT8OID, INT8OID, TEXTOID, TIMESTAMPTZOID, TEXTOID, OIDOID, TIMESTAMPTZOID,
										TIMESTAMPTZOID);

/*
 * The await's side of the meeting: the signal row of (queue $1, key $2),
 * awaited by task $3 (of shard $4: the key's, SIG_KEY_SHARD); true when
 * the signal was already sent.  Waits for a signal's uncommitted insert of
 * the key.  The arbiter is named: ntask_distribute widens the key by shard.
 */
typedef enum SigMeetArg
{
	SIG_MEET_ARG_QUEUE,			/* $1 */
	SIG_MEET_ARG_KEY,			/* $2 */
	SIG_MEET_ARG_TASK_ID,		/* $3 */
	SIG_MEET_ARG_SHARD,			/* $4 */
	SIG_MEET_NARGS
} SigMeetArg;

typedef enum SigMeetCol
{
	SIG_MEET_SENT = 1,
	SIG_MEET_NCOLS = SIG_MEET_SENT
} SigMeetCol;

static NtaskPlan sig_meet_plan = {
	"await signal row",
	.ncols = SIG_MEET_NCOLS,
	"INSERT INTO ntask.signal AS s (queue, signal_key, task_id, shard) "
	"VALUES ($1, $2, $3, $4) "
	"ON CONFLICT ON CONSTRAINT signal_pkey DO UPDATE SET task_id = EXCLUDED.task_id "
	"RETURNING s.sent_at IS NOT NULL",
	SIG_MEET_NARGS, {TEXTOID, TEXTOID, INT8OID, INT2OID}
};

/*
 * sig_pre_dist_plan: the task's queue, the caller's right, the deadline
 * floors of a wake by the timeout $3 and of a wake now ($4).
 */
typedef enum SigPreArg
{
	SIG_PRE_ARG_TASK_ID,		/* $1 */
	SIG_PRE_ARG_CALLER,			/* $2 */
	SIG_PRE_ARG_DUE,			/* $3 */
	SIG_PRE_ARG_NOW,			/* $4 */
	SIG_PRE_NARGS
} SigPreArg;

typedef enum SigPreDistCol
{
	SIG_PRE_QUEUE = 1,
	SIG_PRE_RIGHT,
	SIG_PRE_DUE_FLOOR,
	SIG_PRE_NOW_FLOOR,
	SIG_PRE_NCOLS = SIG_PRE_NOW_FLOOR
} SigPreDistCol;

static NtaskPlan sig_pre_dist_plan = {
	"await task read (distributed)",
	.ncols = SIG_PRE_NCOLS,
	"SELECT t.queue, " NTASK_WORKER_RIGHT("q", "2") ", "
	"  $3 OPERATOR(pg_catalog.+) q.total_deadline, $4 OPERATOR(pg_catalog.+) q.total_deadline "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1"),
	SIG_PRE_NARGS, {INT8OID, OIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* the await's ledger row (distributed): the UPDATE's columns, $9 retry_at, $10 key */
typedef enum SigLedgerArg
{
	SIG_LEDGER_ARG_TASK_ID,		/* $1 */
	SIG_LEDGER_ARG_SHARD,
	SIG_LEDGER_ARG_TOKEN,
	SIG_LEDGER_ARG_ATTEMPT,
	SIG_LEDGER_ARG_WORKER,
	SIG_LEDGER_ARG_CLAIMED_AT,
	SIG_LEDGER_ARG_INVOKED_AT,
	SIG_LEDGER_ARG_ENDED_AT,
	SIG_LEDGER_ARG_RETRY_AT,
	SIG_LEDGER_ARG_KEY,			/* $10 */
	SIG_LEDGER_NARGS
} SigLedgerArg;

static NtaskPlan sig_await_att_dist_plan = {
	"await ledger row (distributed)",
	.ncols = 0,
	"INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker, claimed_at, "
	"  invoked_at, ended_at, result, requested, outcome_known, retry_at, detail) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'awaiting', 'awaiting', true, $9, "
	"  pg_catalog.jsonb_build_object('signal_key', $10)) ",
	SIG_LEDGER_NARGS, {INT8OID, INT2OID, INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID}
};

/*
 * sig_await_pre
 *		sig_await's routed before step: the task's queue and the caller's
 *		right (P0002, 42501), the deadline floors ($7, and the one of a
 *		wake now for sig_ready), now ($8), and the shard's metadata lock.
 *		Refuses (0A000) a key of another shard than the task's.
 */
static bool
sig_await_pre(Datum *values, char *nulls)
{
	Datum		pv[SIG_PRE_NARGS];
	char		pn[SIG_PRE_NARGS];
	int64		task_id = DatumGetInt64(values[SIG_AWAIT_ARG_TASK_ID]);
	text	   *key = DatumGetTextPP(values[SIG_AWAIT_ARG_KEY]);
	SPITupleTable *tt;
	text	   *queue;
	int16		key_shard;
	bool		isnull;

	memset(pn, ' ', sizeof(pn));
	pv[SIG_PRE_ARG_TASK_ID] = values[SIG_AWAIT_ARG_TASK_ID];
	pv[SIG_PRE_ARG_CALLER] = values[SIG_AWAIT_ARG_CALLER];
	pv[SIG_PRE_ARG_DUE] = values[SIG_AWAIT_ARG_DUE];
	pn[SIG_PRE_ARG_DUE] = nulls[SIG_AWAIT_ARG_DUE];
	pv[SIG_PRE_ARG_NOW] = NtaskStatementTs();
	if (NtaskExecPlan(&sig_pre_dist_plan, pv, pn, SPI_OK_SELECT) == 0)
		NtaskTaskNotFound(task_id);
	tt = SPI_tuptable;
	if (!NtaskTupGetBool(tt, 0, SIG_PRE_RIGHT))
		NtaskTaskRightDenied(task_id);
	queue = NtaskTupGetText(tt, 0, SIG_PRE_QUEUE);
	key_shard = NtaskShardOfKey(queue, key);
	if (key_shard != NTASK_ID_SHARD(task_id))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ntask: on a distributed install task %lld can await only a signal key of its own shard (%d), and key \"%s\" of its queue is in shard %d",
						(long long) task_id, (int) NTASK_ID_SHARD(task_id),
						text_to_cstring(key), (int) key_shard),
				 errdetail("A signal's row lives in the shard of its queue and key, with the tasks of that shard (docs/scaling.md \"Signals on a distributed install\")."),
				 errhint("Enqueue the task with the signal key as its partition key, or pick a key for which ntask_shard(queue, key) is the task's shard.")));
	values[SIG_AWAIT_ARG_FLOOR] = NtaskTupGetDatum(tt, 0, SIG_PRE_DUE_FLOOR, &isnull);
	nulls[SIG_AWAIT_ARG_FLOOR] = isnull ? 'n' : ' ';
	values[SIG_AWAIT_NOW_FLOOR] = NtaskTupGetDatum(tt, 0, SIG_PRE_NOW_FLOOR, &isnull);
	nulls[SIG_AWAIT_NOW_FLOOR] = isnull ? 'n' : ' ';
	values[SIG_AWAIT_ARG_NOW] = pv[SIG_PRE_ARG_NOW];
	nulls[SIG_AWAIT_ARG_NOW] = ' ';

	/* the row lock and the writes hold only where the shard is now */
	NtaskLockShard(NTASK_ID_SHARD(task_id));
	return true;
}

/* sig_await_ledger: sig_await's routed after step, the attempt's ledger row */
static void
sig_await_ledger(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	static const int cols[SIG_LEDGER_NARGS] = {
		[SIG_LEDGER_ARG_TASK_ID] = SIG_AWAIT_DIST_TASK_ID,
		[SIG_LEDGER_ARG_SHARD] = SIG_AWAIT_SHARD,
		[SIG_LEDGER_ARG_TOKEN] = SIG_AWAIT_DIST_TOKEN,
		[SIG_LEDGER_ARG_ATTEMPT] = SIG_AWAIT_DIST_ATTEMPTS,
		[SIG_LEDGER_ARG_WORKER] = SIG_AWAIT_DIST_WORKER,
		[SIG_LEDGER_ARG_CLAIMED_AT] = SIG_AWAIT_DIST_CLAIMED_AT,
		[SIG_LEDGER_ARG_INVOKED_AT] = SIG_AWAIT_DIST_INVOKED_AT,
	};
	Datum		av[SIG_LEDGER_NARGS];
	char		an[SIG_LEDGER_NARGS];
	int			i;

	if (n != 1)
		return;
	for (i = 0; i < SIG_LEDGER_NARGS; i++)
	{
		bool		isnull = true;

		av[i] = cols[i] != 0 ? NtaskTupGetDatum(tt, 0, cols[i], &isnull) : (Datum) 0;
		an[i] = isnull ? 'n' : ' ';
	}
	av[SIG_LEDGER_ARG_ENDED_AT] = values[SIG_AWAIT_ARG_NOW];
	an[SIG_LEDGER_ARG_ENDED_AT] = ' ';
	av[SIG_LEDGER_ARG_RETRY_AT] = values[SIG_AWAIT_ARG_DUE];	/* the timeout's end */
	an[SIG_LEDGER_ARG_RETRY_AT] = nulls[SIG_AWAIT_ARG_DUE];
	av[SIG_LEDGER_ARG_KEY] = values[SIG_AWAIT_ARG_KEY];
	an[SIG_LEDGER_ARG_KEY] = ' ';
	(void) NtaskExecPlan(&sig_await_att_dist_plan, av, an, SPI_OK_INSERT);
}

/*
 * A task that wakes from an await has at least its queue's total_deadline
 * left (the deadline did not run while it awaited); q the task's queue.
 * On a distributed install the wake's now and the deadline floor are
 * parameters (SIG_WAKE_DIST_SET(now, floor)).
 */
#define SIG_WAKE_SET \
	"state = 'ready', await_on_timeout = NULL, " \
	"  run_at = pg_catalog.statement_timestamp(), due_at = pg_catalog.statement_timestamp(), " \
	"  deadline = GREATEST(t.deadline, pg_catalog.statement_timestamp() OPERATOR(pg_catalog.+) q.total_deadline), " \
	"  updated_at = pg_catalog.statement_timestamp() "
#define SIG_WAKE_DIST_SET(now, floor) \
	"state = 'ready', await_on_timeout = NULL, run_at = " now ", due_at = " now ", " \
	"  deadline = GREATEST(t.deadline, " floor "), updated_at = " now " "

/* the signal was sent: task $1 is due now */
typedef enum SigReadyArg
{
	SIG_READY_ARG_TASK_ID,		/* $1 */
	SIG_READY_ARG_NOW,			/* $2, routed */
	SIG_READY_ARG_FLOOR,		/* $3, routed: SIG_AWAIT_NOW_FLOOR */
	SIG_READY_NARGS
} SigReadyArg;

static NtaskPair sig_ready = NTASK_PAIR("await: signal already sent",
										NTASK_PLAIN(0,
													"UPDATE ntask.task t SET " SIG_WAKE_SET
													"FROM ntask.queue q "
													"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
													"  AND q.queue OPERATOR(pg_catalog.=) t.queue",
													SIG_READY_ARG_NOW, SPI_OK_UPDATE),
										NTASK_ROUTED(0,
													 "UPDATE ntask.task t SET " SIG_WAKE_DIST_SET("$2", "$3")
													 "WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1"),
													 SIG_READY_NARGS, SPI_OK_UPDATE, NULL, NULL),
										INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID);

/* not applied: the task's token, the caller's right, this token's attempt */
typedef enum SigTokenArg
{
	SIG_TOKEN_ARG_TASK_ID,		/* $1 */
	SIG_TOKEN_ARG_CALLER,		/* $2 */
	SIG_TOKEN_ARG_TOKEN,		/* $3 */
	SIG_TOKEN_NARGS
} SigTokenArg;

typedef enum SigTokenCol
{
	SIG_TOKEN_TOKEN = 1,
	SIG_TOKEN_RIGHT,
	SIG_TOKEN_REQUESTED,
	SIG_TOKEN_KEY,				/* the key of this token's await */
	SIG_TOKEN_NCOLS = SIG_TOKEN_KEY
} SigTokenCol;

static NtaskPlan sig_token_plan = {
	"await token lookup",
	.ncols = SIG_TOKEN_NCOLS,
	"SELECT t.token, " NTASK_WORKER_RIGHT("q", "2") ", "
	/* the holder's final attempt may be on the task row (no ledger row) */
	"  CASE WHEN t.attempt_worker IS NOT NULL AND t.token OPERATOR(pg_catalog.=) $3 "
	"    THEN t.state ELSE a.requested END, "
	"  CASE WHEN t.attempt_worker IS NOT NULL AND t.token OPERATOR(pg_catalog.=) $3 "
	"    THEN t.attempt_detail ELSE a.detail END OPERATOR(pg_catalog.->>) 'signal_key' "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"LEFT JOIN ntask.attempt a ON a.task_id OPERATOR(pg_catalog.=) t.task_id "
	"  AND a.shard OPERATOR(pg_catalog.=) t.shard AND a.token OPERATOR(pg_catalog.=) $3 "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1"),
	SIG_TOKEN_NARGS, {INT8OID, OIDOID, INT8OID}
};

/*
 * ntask_await(task_id, token, signal_key, timeout interval DEFAULT NULL,
 *			   on_timeout text DEFAULT 'ready') RETURNS text
 *		See the file header.  Returns 'applied' (parked, or due at once when
 *		the signal was already sent); 'duplicate' when this token already
 *		awaited this key; 'conflict' when it did something else with its
 *		attempt (another key, a transition, a release); 'stale' when the
 *		task moved on.  Errors: NULL task_id, token, signal_key or
 *		on_timeout 22004; an empty signal_key, a zero, negative or
 *		over-10-years timeout, an on_timeout other than ready and repair
 *		22023; a signal_key over 512 bytes 22001; unknown task P0002; no
 *		right 42501; a token never issued NT003.
 */
Datum
ntask_await(PG_FUNCTION_ARGS)
{
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	text	   *key = NtaskArgText(fcinfo, 2, "signal_key", NTASK_MAX_KEY_LEN);
	char	   *on_timeout;
	Datum		values[SIG_AWAIT_NVALUES];
	char		nulls[SIG_AWAIT_NVALUES];
	TimestampTz due = 0;
	const char *result;

	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: on_timeout must not be NULL")));
	on_timeout = text_to_cstring(PG_GETARG_TEXT_PP(4));
	if (strcmp(on_timeout, "ready") != 0 && strcmp(on_timeout, "repair") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: on_timeout must be ready or repair, not \"%s\"", on_timeout)));
	memset(nulls, ' ', sizeof(nulls));
	if (!PG_ARGISNULL(3))
	{
		Interval   *timeout = PG_GETARG_INTERVAL_P(3);

		NtaskCheckPositiveInterval(timeout, "timeout");
		due = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													  NtaskStatementTs(),
													  IntervalPGetDatum(timeout)));
	}
	else
		nulls[SIG_AWAIT_ARG_DUE] = 'n';
	values[SIG_AWAIT_ARG_TASK_ID] = Int64GetDatum(task_id);
	values[SIG_AWAIT_ARG_TOKEN] = Int64GetDatum(token);
	values[SIG_AWAIT_ARG_KEY] = PointerGetDatum(key);
	values[SIG_AWAIT_ARG_DUE] = TimestampTzGetDatum(due);
	values[SIG_AWAIT_ARG_ON_TIMEOUT] = CStringGetTextDatum(on_timeout);
	values[SIG_AWAIT_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
	/* the routed before step's (sig_await_pre) */
	values[SIG_AWAIT_ARG_FLOOR] = values[SIG_AWAIT_ARG_NOW] =
		values[SIG_AWAIT_NOW_FLOOR] = (Datum) 0;
	nulls[SIG_AWAIT_ARG_FLOOR] = nulls[SIG_AWAIT_ARG_NOW] =
		nulls[SIG_AWAIT_NOW_FLOOR] = 'n';

	SPI_connect();
	if (NtaskExecPair(&sig_await, values, nulls) == 1)
	{
		SPITupleTable *tt = SPI_tuptable;
		char	   *queue = NtaskTupGetCString(tt, 0, SIG_AWAIT_QUEUE);
		Datum		meet[SIG_MEET_NARGS];
		bool		isnull;

		meet[SIG_MEET_ARG_QUEUE] = NtaskTupGetDatum(tt, 0, SIG_AWAIT_QUEUE, &isnull);
		meet[SIG_MEET_ARG_KEY] = PointerGetDatum(key);
		meet[SIG_MEET_ARG_TASK_ID] = Int64GetDatum(task_id);
		meet[SIG_MEET_ARG_SHARD] = NtaskTupGetDatum(tt, 0, SIG_AWAIT_SHARD, &isnull);
		result = "applied";
		NtaskWakeCappedAtCommit(queue, 1);	/* a slot is free */
		if (NtaskExecPlan(&sig_meet_plan, meet, NULL, SPI_OK_INSERT_RETURNING) == 1 &&
			NtaskTupGetBool(SPI_tuptable, 0, SIG_MEET_SENT))
		{
			Datum		rv[SIG_READY_NARGS];
			char		rn[SIG_READY_NARGS];

			/* the signal came first: due now */
			rv[SIG_READY_ARG_TASK_ID] = values[SIG_AWAIT_ARG_TASK_ID];
			rn[SIG_READY_ARG_TASK_ID] = ' ';
			rv[SIG_READY_ARG_NOW] = NtaskStatementTs();
			rn[SIG_READY_ARG_NOW] = ' ';
			rv[SIG_READY_ARG_FLOOR] = values[SIG_AWAIT_NOW_FLOOR];
			rn[SIG_READY_ARG_FLOOR] = nulls[SIG_AWAIT_NOW_FLOOR];
			(void) NtaskExecPair(&sig_ready, rv, rn);
			NtaskWakeWorkerAtCommit();
			NtaskWakeWaitersAtCommit(queue, 1, 0);
		}
		else if (!PG_ARGISNULL(3))
			NtaskWakeWaitersAtCommit(queue, 0, due);
	}
	else
	{
		Datum		tv[SIG_TOKEN_NARGS];
		SPITupleTable *tt;
		int64		current;

		tv[SIG_TOKEN_ARG_TASK_ID] = Int64GetDatum(task_id);
		tv[SIG_TOKEN_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
		tv[SIG_TOKEN_ARG_TOKEN] = Int64GetDatum(token);
		if (NtaskExecPlan(&sig_token_plan, tv, NULL, SPI_OK_SELECT) == 0)
			NtaskTaskNotFound(task_id);
		tt = SPI_tuptable;
		if (!NtaskTupGetBool(tt, 0, SIG_TOKEN_RIGHT))
			NtaskTaskRightDenied(task_id);
		current = NtaskTupGetInt64(tt, 0, SIG_TOKEN_TOKEN);
		NtaskCheckTokenIssued(task_id, token, current);
		if (NtaskTupGetText(tt, 0, SIG_TOKEN_REQUESTED) == NULL)
			result = "stale";
		else if (strcmp(NtaskTupGetCString(tt, 0, SIG_TOKEN_REQUESTED), "awaiting") == 0 &&
				 NtaskTupGetText(tt, 0, SIG_TOKEN_KEY) != NULL &&
				 strcmp(NtaskTupGetCString(tt, 0, SIG_TOKEN_KEY), text_to_cstring(key)) == 0)
			result = "duplicate";
		else
			result = "conflict";
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/*
 * The caller's right to signal queue $1: its signal_role
 * alone, so a webhook's role of its own needs no ntask role; else the
 * producer right (ntask_producer or ntask_worker, and the producer_role
 * when the queue has one).  EXECUTE on ntask_signal is PUBLIC's: this is
 * the whole check.  No row: no such queue.
 */
typedef enum SigRightArg
{
	SIG_RIGHT_ARG_QUEUE,		/* $1 */
	SIG_RIGHT_ARG_CALLER,		/* $2 */
	SIG_RIGHT_NARGS
} SigRightArg;

typedef enum SigRightCol
{
	SIG_RIGHT_MAY = 1,			/* the caller may signal the queue */
	SIG_RIGHT_NCOLS = SIG_RIGHT_MAY
} SigRightCol;

static NtaskPlan sig_right_plan = {
	"signal right",
	.ncols = SIG_RIGHT_NCOLS,
	"SELECT CASE WHEN q.signal_role IS NOT NULL "
	"  THEN pg_catalog.pg_has_role($2, q.signal_role, 'USAGE') "
	"  ELSE (pg_catalog.pg_has_role($2, 'ntask_producer', 'USAGE') "
	"        OR pg_catalog.pg_has_role($2, 'ntask_worker', 'USAGE')) "
	"   AND (q.producer_role IS NULL OR pg_catalog.pg_has_role($2, q.producer_role, 'USAGE')) END "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	SIG_RIGHT_NARGS, {TEXTOID, OIDOID}
};

typedef enum SigSendArg
{
	SIG_SEND_ARG_QUEUE,			/* $1 */
	SIG_SEND_ARG_KEY,			/* $2 */
	SIG_SEND_ARG_PAYLOAD,		/* $3 */
	SIG_SEND_ARG_DIGEST,		/* $4 */
	SIG_SEND_ARG_DIGEST_VERSION,	/* $5 */
	SIG_SEND_ARG_SHARD,			/* $6, the key's (SIG_KEY_SHARD) */
	SIG_SEND_NARGS
} SigSendArg;

/*
 * Send: insert the row, or fill the row an await left (sent_at NULL); a
 * row already sent is only locked (no row returned).  Waits for an
 * await's uncommitted insert of the key.
 */
typedef enum SigSendCol
{
	SIG_SEND_TASK_ID = 1,		/* the task that awaited the key, or NULL */
	SIG_SEND_NCOLS = SIG_SEND_TASK_ID
} SigSendCol;

static NtaskPlan sig_send_plan = {
	"signal send",
	.ncols = SIG_SEND_NCOLS,
	"INSERT INTO ntask.signal AS s (queue, signal_key, payload, payload_digest, "
	"  digest_version, sent_at, sent_by, shard) "
	"VALUES ($1, $2, $3, $4, $5, pg_catalog.statement_timestamp(), ntask.caller_name(), $6) "
	"ON CONFLICT ON CONSTRAINT signal_pkey DO UPDATE SET payload = EXCLUDED.payload, "
	"  payload_digest = EXCLUDED.payload_digest, digest_version = EXCLUDED.digest_version, "
	"  sent_at = EXCLUDED.sent_at, sent_by = EXCLUDED.sent_by "
	"  WHERE s.sent_at IS NULL "
	"RETURNING s.task_id",
	SIG_SEND_NARGS, {TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT2OID, INT2OID}
};

/* the signal already sent (a new statement: sees the row the upsert locked) */
typedef enum SigSentCol
{
	SIG_SENT_PAYLOAD = 1,
	SIG_SENT_DIGEST,
	SIG_SENT_DIGEST_VERSION,
	SIG_SENT_NCOLS = SIG_SENT_DIGEST_VERSION
} SigSentCol;

static NtaskPlan sig_sent_plan = {
	"signal sent",
	.ncols = SIG_SENT_NCOLS,
	"SELECT s.payload, s.payload_digest, s.digest_version FROM ntask.signal s "
	"WHERE s.queue OPERATOR(pg_catalog.=) $1 AND s.signal_key OPERATOR(pg_catalog.=) $2 "
	"  AND s.shard OPERATOR(pg_catalog.=) $6",
	SIG_SEND_NARGS, {TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT2OID, INT2OID}
};

/*
 * The tasks awaiting the key become due now (task_awaiting_idx).  On a
 * distributed install: the deadline floor of a wake now of queue $1's
 * tasks (sig_wake_floor, the before step, fills $3 now and $4 the floor),
 * then the wake of the key's shard $5.
 */
typedef enum SigWakeArg
{
	SIG_WAKE_ARG_QUEUE,			/* $1 */
	SIG_WAKE_ARG_KEY,			/* $2 */
	SIG_WAKE_ARG_NOW,			/* $3, routed */
	SIG_WAKE_ARG_FLOOR,			/* $4, routed */
	SIG_WAKE_ARG_SHARD,			/* $5, routed: the key's */
	SIG_WAKE_NARGS
} SigWakeArg;

typedef enum SigWakeCol
{
	SIG_WAKE_TASK_ID = 1,		/* a task it woke */
	SIG_WAKE_NCOLS = SIG_WAKE_TASK_ID
} SigWakeCol;

static bool sig_wake_floor(Datum *values, char *nulls);

static NtaskPair sig_wake = NTASK_PAIR("signal wake",
									   NTASK_PLAIN(SIG_WAKE_NCOLS,
												   "UPDATE ntask.task t SET " SIG_WAKE_SET
												   "FROM ntask.queue q "
												   "WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.signal_key OPERATOR(pg_catalog.=) $2 "
												   "  AND t.state OPERATOR(pg_catalog.=) 'awaiting' AND q.queue OPERATOR(pg_catalog.=) $1 "
												   "RETURNING t.task_id",
												   SIG_WAKE_ARG_NOW, SPI_OK_UPDATE_RETURNING),
									   NTASK_ROUTED(SIG_WAKE_NCOLS,
													"UPDATE ntask.task t SET " SIG_WAKE_DIST_SET("$3", "$4")
													"WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.signal_key OPERATOR(pg_catalog.=) $2 "
													"  AND t.state OPERATOR(pg_catalog.=) 'awaiting' AND t.shard OPERATOR(pg_catalog.=) $5 "
													"RETURNING t.task_id",
													SIG_WAKE_NARGS, SPI_OK_UPDATE_RETURNING, sig_wake_floor, NULL),
									   TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT2OID);

/* the deadline floor of a wake now ($2) of queue $1's tasks */
typedef enum SigFloorArg
{
	SIG_FLOOR_ARG_QUEUE,		/* $1 */
	SIG_FLOOR_ARG_NOW,			/* $2 */
	SIG_FLOOR_NARGS
} SigFloorArg;

typedef enum SigFloorCol
{
	SIG_FLOOR_FLOOR = 1,
	SIG_FLOOR_NCOLS = SIG_FLOOR_FLOOR
} SigFloorCol;

static NtaskPlan sig_floor_dist_plan = {
	"signal deadline floor (distributed)",
	.ncols = SIG_FLOOR_NCOLS,
	"SELECT $2 OPERATOR(pg_catalog.+) q.total_deadline FROM ntask.queue q "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1",
	SIG_FLOOR_NARGS, {TEXTOID, TIMESTAMPTZOID}
};

/* sig_wake_floor: sig_wake's routed before step, now and the floor */
static bool
sig_wake_floor(Datum *values, char *nulls)
{
	Datum		fv[SIG_FLOOR_NARGS];
	bool		isnull = true;

	fv[SIG_FLOOR_ARG_QUEUE] = values[SIG_WAKE_ARG_QUEUE];
	fv[SIG_FLOOR_ARG_NOW] = NtaskStatementTs();
	values[SIG_WAKE_ARG_NOW] = fv[SIG_FLOOR_ARG_NOW];
	nulls[SIG_WAKE_ARG_NOW] = ' ';
	values[SIG_WAKE_ARG_FLOOR] = (Datum) 0;
	if (NtaskExecPlan(&sig_floor_dist_plan, fv, NULL, SPI_OK_SELECT) == 1)
		values[SIG_WAKE_ARG_FLOOR] = NtaskTupGetDatum(SPI_tuptable, 0, SIG_FLOOR_FLOOR, &isnull);
	nulls[SIG_WAKE_ARG_FLOOR] = isnull ? 'n' : ' ';
	return true;
}

/*
 * ntask_signal(queue, signal_key, payload jsonb DEFAULT '{}') RETURNS text
 *		Send a queue's signal: 'applied' (stored; the tasks awaiting it
 *		are due now, their next claim carries payload in context.signal;
 *		kept for an await that comes later), 'stale' (stored, but the task
 *		that awaited the key no longer awaits it: timed out, canceled or in
 *		repair; nothing woke), 'duplicate' (sent before with
 *		the same payload, by canonical digest), 'conflict' (another payload:
 *		the first one stays).  Each task it readies is audited (action
 *		signal).  Errors: NULL argument 22004; empty queue or key 22023;
 *		over-long queue or key 22001; a payload over ntask.max_payload_bytes
 *		54000; no right to signal the queue 42501, raised before the key is
 *		looked at, and for a queue that does not exist as well, so a caller
 *		without the right learns nothing about queues or keys.
 */
Datum
ntask_signal(PG_FUNCTION_ARGS)
{
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	text	   *key = NtaskArgText(fcinfo, 1, "signal_key", NTASK_MAX_KEY_LEN);
	Jsonb	   *payload = NtaskArgJsonb(fcinfo, 2, "payload");
	bytea	   *digest;
	Datum		values[SIG_SEND_NARGS];
	char	   *qname = text_to_cstring(queue);
	const char *result;

	NtaskCheckPayload(payload, "payload", 0, NULL);
	digest = NtaskDigest(payload, NTASK_DIGEST_VERSION);
	values[SIG_SEND_ARG_QUEUE] = PointerGetDatum(queue);
	values[SIG_SEND_ARG_KEY] = PointerGetDatum(key);
	values[SIG_SEND_ARG_PAYLOAD] = JsonbPGetDatum(payload);
	values[SIG_SEND_ARG_DIGEST] = PointerGetDatum(digest);
	values[SIG_SEND_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);

	SPI_connect();
	{
		Datum		rv[SIG_RIGHT_NARGS];

		rv[SIG_RIGHT_ARG_QUEUE] = values[SIG_SEND_ARG_QUEUE];
		rv[SIG_RIGHT_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
		if (NtaskExecPlan(&sig_right_plan, rv, NULL, SPI_OK_SELECT) == 0 ||
			!NtaskTupGetBool(SPI_tuptable, 0, SIG_RIGHT_MAY))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("ntask: permission denied to signal queue \"%s\"", qname),
					 errhint("The queue's signal_role (ntask_queue_set_signal_role), or its producer right when it has none, must be granted to the role.")));
	}

	/*
	 * the key's shard (0 on a plain install), locked as a receipt locks its
	 * task's
	 */
	values[SIG_SEND_ARG_SHARD] = Int16GetDatum(NtaskShardOfKey(queue, key));
	NtaskLockShard(DatumGetInt16(values[SIG_SEND_ARG_SHARD]));
	if (NtaskExecPlan(&sig_send_plan, values, NULL, SPI_OK_INSERT_RETURNING) == 1)
	{
		int			n;
		int			r;
		SPITupleTable *woken;
		char	   *actor = GetUserNameFromId(NtaskCaller(), false);
		char	   *k = text_to_cstring(key);
		bool		awaited;

		Datum		wv[SIG_WAKE_NARGS];

		/* a task awaited the key before (the row's task_id) */
		(void) NtaskTupGetDatum(SPI_tuptable, 0, SIG_SEND_TASK_ID, &awaited);
		awaited = !awaited;
		result = "applied";
		wv[SIG_WAKE_ARG_QUEUE] = values[SIG_SEND_ARG_QUEUE];
		wv[SIG_WAKE_ARG_KEY] = values[SIG_SEND_ARG_KEY];
		wv[SIG_WAKE_ARG_SHARD] = values[SIG_SEND_ARG_SHARD];
		n = NtaskExecPair(&sig_wake, wv, NULL);
		woken = SPI_tuptable;
		for (r = 0; r < n; r++)
			NtaskAudit(actor, "signal", NtaskTupGetInt64(woken, r, SIG_WAKE_TASK_ID), qname,
					   psprintf("signal %s", k), "awaiting", "ready");
		if (n > 0)
		{
			NtaskWakeWorkerAtCommit();
			NtaskWakeWaitersAtCommit(qname, n, 0);
		}
		else if (awaited)
			result = "stale";	/* the task that awaited it has ended */
	}
	else
	{
		bool		isnull;

		if (NtaskExecPlan(&sig_sent_plan, values, NULL, SPI_OK_SELECT) != 1)
			elog(ERROR, "ntask: signal \"%s\" of queue \"%s\" vanished",
				 text_to_cstring(key), qname);
		result = NtaskSameDigest(payload, digest,
								 DatumGetByteaPP(NtaskTupGetDatum(SPI_tuptable, 0, SIG_SENT_DIGEST, &isnull)),
								 NtaskTupGetInt32(SPI_tuptable, 0, SIG_SENT_DIGEST_VERSION)) ? "duplicate" : "conflict";
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

typedef enum SigRoleArg
{
	SIG_ROLE_ARG_QUEUE,			/* $1 */
	SIG_ROLE_ARG_ROLE,			/* $2, NULL: none */
	SIG_ROLE_NARGS
} SigRoleArg;

static NtaskPlan sig_role_plan = {
	"queue set signal role",
	.ncols = 1,
	"UPDATE ntask.queue q SET signal_role = $2, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 RETURNING 1",
	SIG_ROLE_NARGS, {TEXTOID, REGROLEOID}
};

/*
 * ntask_queue_set_signal_role(queue, role regrole) RETURNS void
 *		Who may ntask_signal the queue: the members of role; NULL: whoever
 *		has the queue's producer right.  Audited (queue_set_signal_role).
 *		Errors: NULL or bad queue 22004 / 22023 / 22001; unknown queue 42704.
 */
Datum
ntask_queue_set_signal_role(PG_FUNCTION_ARGS)
{
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", NTASK_MAX_QUEUE_LEN);
	Datum		values[SIG_ROLE_NARGS];
	char		nulls[SIG_ROLE_NARGS] = {' ', ' '};
	char	   *qname = text_to_cstring(queue);

	values[SIG_ROLE_ARG_QUEUE] = PointerGetDatum(queue);
	values[SIG_ROLE_ARG_ROLE] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[SIG_ROLE_ARG_ROLE] = PG_ARGISNULL(1) ? 'n' : ' ';
	SPI_connect();
	if (NtaskExecPlan(&sig_role_plan, values, nulls, SPI_OK_UPDATE_RETURNING) == 0)
		NtaskQueueNotFound(qname);
	NtaskAudit(GetUserNameFromId(GetUserId(), false), "queue_set_signal_role", 0, qname,
			   psprintf("signal_role %s", PG_ARGISNULL(1) ? "none" :
						GetUserNameFromId(PG_GETARG_OID(1), false)),
			   NULL, NULL);
	SPI_finish();
	PG_RETURN_VOID();
}
