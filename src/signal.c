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

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_await);
PG_FUNCTION_INFO_V1(ntask_signal);
PG_FUNCTION_INFO_V1(ntask_queue_set_signal_role);

/* sig_await_plan's parameters */
typedef enum SigAwaitArg
{
	SIG_AWAIT_ARG_TASK_ID,		/* $1 */
	SIG_AWAIT_ARG_TOKEN,		/* $2 */
	SIG_AWAIT_ARG_KEY,			/* $3 */
	SIG_AWAIT_ARG_DUE,			/* $4, the timeout's end or NULL */
	SIG_AWAIT_ARG_ON_TIMEOUT,	/* $5 */
	SIG_AWAIT_ARG_CALLER,		/* $6 */
	SIG_AWAIT_NARGS
} SigAwaitArg;

/* its columns (one row when it applied) */
typedef enum SigAwaitCol
{
	SIG_AWAIT_QUEUE = 1,
	SIG_AWAIT_SHARD
} SigAwaitCol;

/*
 * Park: the task row (only the current token of a leased task, only with
 * the queue's worker_role), then the attempt's ledger row, as the release
 * writes it (lease.c); o is the row as the statement's snapshot saw it.
 */
static NtaskPlan sig_await_plan = {
	"await",
	.ncols = 2,
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
	SIG_AWAIT_NARGS, {INT8OID, INT8OID, TEXTOID, TIMESTAMPTZOID, TEXTOID, OIDOID}
};

/*
 * The await's side of the meeting: the signal row of (queue $1, key $2),
 * awaited by task $3 (of shard $4); true when the signal was already sent.
 * Waits for a signal's uncommitted insert of the key.
 */
static NtaskPlan sig_meet_plan = {
	"await signal row",
	.ncols = 1,
	"INSERT INTO ntask.signal AS s (queue, signal_key, task_id, shard) "
	"VALUES ($1, $2, $3, $4) "
	"ON CONFLICT (queue, signal_key) DO UPDATE SET task_id = EXCLUDED.task_id, "
	"  shard = EXCLUDED.shard "
	"RETURNING s.sent_at IS NOT NULL",
	4, {TEXTOID, TEXTOID, INT8OID, INT2OID}
};

/*
 * A task that wakes from an await has at least its queue's total_deadline
 * left (the deadline did not run while it awaited); q the task's queue.
 */
#define SIG_WAKE_SET \
	"state = 'ready', await_on_timeout = NULL, " \
	"  run_at = pg_catalog.statement_timestamp(), due_at = pg_catalog.statement_timestamp(), " \
	"  deadline = GREATEST(t.deadline, pg_catalog.statement_timestamp() OPERATOR(pg_catalog.+) q.total_deadline), " \
	"  updated_at = pg_catalog.statement_timestamp() "

/* the signal was sent: task $1 is due now */
static NtaskPlan sig_ready_plan = {
	"await: signal already sent",
	.ncols = 0,
	"UPDATE ntask.task t SET " SIG_WAKE_SET
	"FROM ntask.queue q "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND q.queue OPERATOR(pg_catalog.=) t.queue",
	1, {INT8OID}
};

/* not applied: the task's token, the caller's right, this token's attempt */
typedef enum SigTokenCol
{
	SIG_TOKEN_TOKEN = 1,
	SIG_TOKEN_RIGHT,
	SIG_TOKEN_REQUESTED,
	SIG_TOKEN_KEY				/* the key of this token's await */
} SigTokenCol;

static NtaskPlan sig_token_plan = {
	"await token lookup",
	.ncols = 4,
	"SELECT t.token, " NTASK_WORKER_RIGHT("q", "2") ", a.requested, "
	"  a.detail OPERATOR(pg_catalog.->>) 'signal_key' "
	"FROM ntask.task t JOIN ntask.queue q ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"LEFT JOIN ntask.attempt a ON a.task_id OPERATOR(pg_catalog.=) t.task_id "
	"  AND a.shard OPERATOR(pg_catalog.=) t.shard AND a.token OPERATOR(pg_catalog.=) $3 "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1" NTASK_SHARD_OF("t", "$1"),
	3, {INT8OID, OIDOID, INT8OID}
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
	Datum		values[SIG_AWAIT_NARGS];
	char		nulls[SIG_AWAIT_NARGS];
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

	SPI_connect();
	NtaskRefuseDistributed("ntask_await");
	if (NtaskExecPlan(&sig_await_plan, values, nulls, SPI_OK_SELECT) == 1)
	{
		char	   *queue = NtaskGetCString(0, SIG_AWAIT_QUEUE);
		Datum		meet[4];
		bool		isnull;

		meet[0] = NtaskGetDatum(0, SIG_AWAIT_QUEUE, &isnull);
		meet[1] = PointerGetDatum(key);
		meet[2] = Int64GetDatum(task_id);
		meet[3] = NtaskGetDatum(0, SIG_AWAIT_SHARD, &isnull);
		result = "applied";
		NtaskWakeCappedAtCommit(queue, 1);	/* a slot is free */
		if (NtaskExecPlan(&sig_meet_plan, meet, NULL, SPI_OK_INSERT_RETURNING) == 1 &&
			NtaskGetBool(0, 1))
		{
			/* the signal came first: due now */
			(void) NtaskExecPlan(&sig_ready_plan, values, NULL, SPI_OK_UPDATE);
			NtaskWakeWorkerAtCommit();
			NtaskWakeWaitersAtCommit(queue, 1, 0);
		}
		else if (!PG_ARGISNULL(3))
			NtaskWakeWaitersAtCommit(queue, 0, due);
	}
	else
	{
		Datum		tv[3];
		int64		current;

		tv[0] = Int64GetDatum(task_id);
		tv[1] = ObjectIdGetDatum(NtaskCaller());
		tv[2] = Int64GetDatum(token);
		if (NtaskExecPlan(&sig_token_plan, tv, NULL, SPI_OK_SELECT) == 0)
			NtaskTaskNotFound(task_id);
		if (!NtaskGetBool(0, SIG_TOKEN_RIGHT))
			NtaskTaskRightDenied(task_id);
		current = NtaskGetInt64(0, SIG_TOKEN_TOKEN);
		NtaskCheckTokenIssued(task_id, token, current);
		if (NtaskGetText(0, SIG_TOKEN_REQUESTED) == NULL)
			result = "stale";
		else if (strcmp(NtaskGetCString(0, SIG_TOKEN_REQUESTED), "awaiting") == 0 &&
				 NtaskGetText(0, SIG_TOKEN_KEY) != NULL &&
				 strcmp(NtaskGetCString(0, SIG_TOKEN_KEY), text_to_cstring(key)) == 0)
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
static NtaskPlan sig_right_plan = {
	"signal right",
	.ncols = 1,
	"SELECT CASE WHEN q.signal_role IS NOT NULL "
	"  THEN pg_catalog.pg_has_role($2, q.signal_role, 'USAGE') "
	"  ELSE (pg_catalog.pg_has_role($2, 'ntask_producer', 'USAGE') "
	"        OR pg_catalog.pg_has_role($2, 'ntask_worker', 'USAGE')) "
	"   AND (q.producer_role IS NULL OR pg_catalog.pg_has_role($2, q.producer_role, 'USAGE')) END "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	2, {TEXTOID, OIDOID}
};

typedef enum SigSendArg
{
	SIG_SEND_ARG_QUEUE,			/* $1 */
	SIG_SEND_ARG_KEY,			/* $2 */
	SIG_SEND_ARG_PAYLOAD,		/* $3 */
	SIG_SEND_ARG_DIGEST,		/* $4 */
	SIG_SEND_ARG_DIGEST_VERSION,	/* $5 */
	SIG_SEND_NARGS
} SigSendArg;

/*
 * Send: insert the row, or fill the row an await left (sent_at NULL); a
 * row already sent is only locked (no row returned).  Waits for an
 * await's uncommitted insert of the key.
 */
static NtaskPlan sig_send_plan = {
	"signal send",
	.ncols = 1,
	"INSERT INTO ntask.signal AS s (queue, signal_key, payload, payload_digest, "
	"  digest_version, sent_at, sent_by) "
	"VALUES ($1, $2, $3, $4, $5, pg_catalog.statement_timestamp(), ntask.caller_name()) "
	"ON CONFLICT (queue, signal_key) DO UPDATE SET payload = EXCLUDED.payload, "
	"  payload_digest = EXCLUDED.payload_digest, digest_version = EXCLUDED.digest_version, "
	"  sent_at = EXCLUDED.sent_at, sent_by = EXCLUDED.sent_by "
	"  WHERE s.sent_at IS NULL "
	"RETURNING s.task_id",
	SIG_SEND_NARGS, {TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT2OID}
};

/* the signal already sent (a new statement: sees the row the upsert locked) */
static NtaskPlan sig_sent_plan = {
	"signal sent",
	.ncols = 3,
	"SELECT s.payload, s.payload_digest, s.digest_version FROM ntask.signal s "
	"WHERE s.queue OPERATOR(pg_catalog.=) $1 AND s.signal_key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID}
};

/* the tasks awaiting the key become due now (task_awaiting_idx) */
static NtaskPlan sig_wake_plan = {
	"signal wake",
	.ncols = 1,
	"UPDATE ntask.task t SET " SIG_WAKE_SET
	"FROM ntask.queue q "
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 AND t.signal_key OPERATOR(pg_catalog.=) $2 "
	"  AND t.state OPERATOR(pg_catalog.=) 'awaiting' AND q.queue OPERATOR(pg_catalog.=) $1 "
	"RETURNING t.task_id",
	2, {TEXTOID, TEXTOID}
};

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
	NtaskRefuseDistributed("ntask_signal");
	{
		Datum		rv[2];

		rv[0] = values[SIG_SEND_ARG_QUEUE];
		rv[1] = ObjectIdGetDatum(NtaskCaller());
		if (NtaskExecPlan(&sig_right_plan, rv, NULL, SPI_OK_SELECT) == 0 ||
			!NtaskGetBool(0, 1))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("ntask: permission denied to signal queue \"%s\"", qname),
					 errhint("The queue's signal_role (ntask_queue_set_signal_role), or its producer right when it has none, must be granted to the role.")));
	}
	if (NtaskExecPlan(&sig_send_plan, values, NULL, SPI_OK_INSERT_RETURNING) == 1)
	{
		int			n;
		int			r;
		SPITupleTable *woken;
		char	   *actor = GetUserNameFromId(NtaskCaller(), false);
		char	   *k = text_to_cstring(key);
		bool		awaited;

		/* a task awaited the key before (the row's task_id) */
		(void) NtaskGetDatum(0, 1, &awaited);
		awaited = !awaited;
		result = "applied";
		n = NtaskExecPlan(&sig_wake_plan, values, NULL, SPI_OK_UPDATE_RETURNING);
		woken = SPI_tuptable;
		for (r = 0; r < n; r++)
		{
			SPI_tuptable = woken;
			NtaskAudit(actor, "signal", NtaskGetInt64(r, 1), qname,
					   psprintf("signal %s", k), "awaiting", "ready");
		}
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
								 DatumGetByteaPP(NtaskGetDatum(0, 2, &isnull)),
								 NtaskGetInt32(0, 3)) ? "duplicate" : "conflict";
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

static NtaskPlan sig_role_plan = {
	"queue set signal role",
	.ncols = 1,
	"UPDATE ntask.queue q SET signal_role = $2, "
	"  updated_at = pg_catalog.statement_timestamp() "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 RETURNING 1",
	2, {TEXTOID, REGROLEOID}
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
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	char	   *qname = text_to_cstring(queue);

	values[0] = PointerGetDatum(queue);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';
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
