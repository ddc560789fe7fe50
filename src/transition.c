/*-------------------------------------------------------------------------
 *
 * transition.c
 *	  ntask_transition: the fenced, conditional end of an attempt, and the
 *	  retry backoff.
 *
 * Every to_state but retry_wait is first tried as one conditional
 * statement (task row: token = $token AND state = leased; attempt row:
 * still open), which locks the task row, then the attempt row.  When that
 * matches nothing, or for retry_wait, the task row is locked (FOR UPDATE)
 * and the call classified; that lock serializes it against claim takeover,
 * cancel and replay:
 *
 *	token > task.token			-> NT003 (never issued)
 *	token = task.token, leased	-> applied: the attempt is closed, the task
 *								   moves (budget and deadline enforced)
 *	otherwise, look at the attempt of this token:
 *	  it asked for this same transition		-> duplicate
 *	  (same to_state, error class and outcome label)
 *	  it asked for a different one			-> conflict
 *	  it never asked (taken over, canceled)	-> stale
 *
 * A requested retry_wait becomes repair_required when the attempts
 * (including the first) reach max_attempts, or when the next run would
 * start at or after the task's deadline.
 *
 * IDENTIFICATION
 *	  src/transition.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "funcapi.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_transition);

static NtaskPlan tr_lock_plan = {
	"transition lock",
	"SELECT t.state, t.token, t.attempts, t.max_attempts, t.deadline, "
	"  q.backoff_base, q.backoff_max, "
	"  CASE WHEN t.due_at IS NOT NULL THEN t.run_at END, " NTASK_WORKER_RIGHT("q", "2") " "
	"FROM ntask.task t JOIN ntask.queue q "
	"  ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 FOR UPDATE OF t",
	2, {INT8OID, OIDOID}
};

/*
 * The task row first (locked by the UPDATE), then its attempt row: the
 * attempt is closed only if the task moved, and only for a caller with the
 * queue's worker_role.  Both rows are reached by primary key (the attempt
 * by ($1, $2), with "the task moved" as a one-time filter: a join with the
 * CTE would let the generic plan scan attempt_pkey by token alone).
 */
static NtaskPlan tr_apply_plan = {
	"transition apply",
	"WITH upd AS ( "
	"  UPDATE ntask.task t SET state = $3, "
	"    run_at = coalesce($11, t.run_at), due_at = $11, "
	"    lease_owner = NULL, lease_until = NULL, "
	"    last_error_class = coalesce($5, t.last_error_class), "
	"    last_error_stage = coalesce($6, t.last_error_stage), "
	"    outcome = $8, "
	"    reason = CASE WHEN $13 "
	"      THEN coalesce($10 OPERATOR(pg_catalog.->>) 'reason', $12) ELSE $12 END, "
	"    unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) "
	"      CASE WHEN $7 THEN 0 WHEN EXISTS (SELECT 1 FROM ntask.receipt r "
	"        WHERE r.task_id OPERATOR(pg_catalog.=) $1 "
	"          AND r.token OPERATOR(pg_catalog.=) $2) THEN 0 ELSE 1 END, "
	"    finished_at = CASE WHEN $11 IS NULL THEN pg_catalog.statement_timestamp() END, "
	"    updated_at = pg_catalog.statement_timestamp() "
	"  WHERE t.task_id OPERATOR(pg_catalog.=) $1 "
	"    AND t.token OPERATOR(pg_catalog.=) $2 "
	"    AND t.state OPERATOR(pg_catalog.=) 'leased' "
	"    AND EXISTS (SELECT 1 FROM ntask.queue q "
	"                WHERE q.queue OPERATOR(pg_catalog.=) t.queue "
	"                  AND " NTASK_WORKER_RIGHT("q", "14") ") "
	"  RETURNING t.task_id, t.state, "
	"    CASE WHEN t.due_at IS NOT NULL THEN t.run_at END AS run_at "
	"), att AS ( "
	"  UPDATE ntask.attempt a SET ended_at = pg_catalog.statement_timestamp(), result = $3, "
	"    requested = $4, error_class = $5, error_stage = $6, "
	"    outcome_known = CASE WHEN $7 THEN true ELSE EXISTS (SELECT 1 FROM ntask.receipt r "
	"      WHERE r.task_id OPERATOR(pg_catalog.=) $1 "
	"        AND r.token OPERATOR(pg_catalog.=) $2) END, "
	"    outcome = $8, retry_at = $9, detail = $10 "
	"  WHERE a.task_id OPERATOR(pg_catalog.=) $1 "
	"    AND a.token OPERATOR(pg_catalog.=) $2 AND a.ended_at IS NULL "
	"    AND EXISTS (SELECT 1 FROM upd) "
	") "
	"SELECT upd.state, upd.run_at FROM upd",
	14, {INT8OID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID,
	TEXTOID, TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, TEXTOID, BOOLOID, OIDOID}
};

static NtaskPlan tr_attempt_plan = {
	"transition attempt lookup",
	"SELECT a.requested, a.error_class, a.outcome FROM ntask.attempt a "
	"WHERE a.task_id OPERATOR(pg_catalog.=) $1 "
	"  AND a.token OPERATOR(pg_catalog.=) $2",
	2, {INT8OID, INT8OID}
};

/* one ntask_transition call's arguments, after validation */
typedef struct TrCall
{
	int64		task_id;
	int64		token;
	const char *to_state;
	const char *error_class;	/* with defaults filled in */
	const char *outcome;		/* "completed" for a bare succeeded */
	const char *stage;
	Datum		detail;
	bool		detail_null;
	Datum		retry_at;
	bool		retry_at_null;
} TrCall;

static bool tr_apply(TrCall *c, const char *final, TimestampTz next,
					 const char *reason, bool engine_reason);
static const char *tr_check_args(const char *to_state, const char **error_class,
								 bool has_outcome, bool has_retry_at);
static TimestampTz tr_backoff(int attempt, Interval *base, Interval *max);
static bool tr_same(const char *a, const char *b);

/* tr_same: two optional strings are equal (both NULL counts as equal). */
static bool
tr_same(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/*
 * tr_backoff
 *		When the retry after the given attempt (1-based) is due:
 *		statement start + min(base * 2^(attempt-1), max), with equal jitter (half the
 *		delay fixed, half random) unless ntask.backoff_jitter is off.
 */
static TimestampTz
tr_backoff(int attempt, Interval *base, Interval *max)
{
	double		b = (double) NtaskIntervalUsecs(base);
	double		m = (double) NtaskIntervalUsecs(max);
	double		delay = b * pow(2.0, (double) Min(Max(attempt, 1) - 1, 60));

	if (delay > m)
		delay = m;
	if (ntask_backoff_jitter)
		delay = delay / 2.0 + pg_prng_double(&pg_global_prng_state) * delay / 2.0;
	return GetCurrentStatementStartTimestamp() + (int64) delay;
}

/*
 * tr_check_args
 *		Validate to_state and error_class together; fill in the default class
 *		(transient for retry_wait, permanent for repair_required).  Returns
 *		the default reason recorded on the task.  Raises 22023 on nonsense.
 */
static const char *
tr_check_args(const char *to_state, const char **error_class,
			  bool has_outcome, bool has_retry_at)
{
	const char *cls = *error_class;

	if (cls && strcmp(cls, "transient") != 0 && strcmp(cls, "permanent") != 0 &&
		strcmp(cls, "unknown") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: unknown error_class \"%s\"", cls),
				 errhint("Use transient, permanent or unknown.")));
	if (has_outcome && strcmp(to_state, "succeeded") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: outcome is only recorded for to_state succeeded")));
	if (has_retry_at && strcmp(to_state, "retry_wait") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: retry_at is only allowed with to_state retry_wait")));

	if (strcmp(to_state, "retry_wait") == 0)
	{
		if (cls == NULL)
			*error_class = "transient";
		else if (strcmp(cls, "permanent") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: a permanent error is not retried"),
					 errhint("Use to_state repair_required for permanent errors.")));
		return NULL;
	}
	if (strcmp(to_state, "repair_required") == 0)
	{
		if (cls == NULL)
			*error_class = "permanent";
		return strcmp(*error_class, "permanent") == 0 ? "permanent_error"
			: "worker_requested";
	}
	if (strcmp(to_state, "succeeded") == 0 || strcmp(to_state, "canceled") == 0 ||
		strcmp(to_state, "skipped") == 0)
	{
		if (cls != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: error_class is not allowed with to_state %s",
							to_state)));
		return strcmp(to_state, "succeeded") == 0 ? NULL : "worker";
	}
	if (strcmp(to_state, "ready") == 0 || strcmp(to_state, "leased") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s is not a transition target", to_state),
				 errhint("A worker ends an attempt with succeeded, retry_wait, repair_required, canceled or skipped.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ntask: unknown task state \"%s\"", to_state),
			 errhint("A worker ends an attempt with succeeded, retry_wait, repair_required, canceled or skipped.")));
	pg_unreachable();
}

/*
 * tr_apply
 *		Run tr_apply_plan: close the attempt and move the task to final, but
 *		only if token still holds the lease (the statement is conditional, so
 *		it is safe without a prior lock).  Returns true if it applied; then
 *		SPI_tuptable holds (state, run_at).  has_next: final is retry_wait
 *		and next is its run_at.
 */
static bool
tr_apply(TrCall *c, const char *final, TimestampTz next, const char *reason,
		 bool engine_reason)
{
	Datum		values[14];
	char		nulls[14];

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(c->task_id);
	values[1] = Int64GetDatum(c->token);
	values[2] = CStringGetTextDatum(final);
	values[3] = CStringGetTextDatum(c->to_state);
	values[4] = c->error_class ? CStringGetTextDatum(c->error_class) : (Datum) 0;
	nulls[4] = c->error_class ? ' ' : 'n';
	values[5] = c->stage ? CStringGetTextDatum(c->stage) : (Datum) 0;
	nulls[5] = c->stage ? ' ' : 'n';
	values[6] = BoolGetDatum(c->error_class == NULL ||
							 strcmp(c->error_class, "unknown") != 0);
	values[7] = c->outcome ? CStringGetTextDatum(c->outcome) : (Datum) 0;
	nulls[7] = c->outcome ? ' ' : 'n';
	values[8] = c->retry_at;
	nulls[8] = c->retry_at_null ? 'n' : ' ';
	values[9] = c->detail;
	nulls[9] = c->detail_null ? 'n' : ' ';
	values[10] = TimestampTzGetDatum(next);
	nulls[10] = strcmp(final, "retry_wait") == 0 ? ' ' : 'n';
	values[11] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[11] = reason ? ' ' : 'n';
	/* detail->>'reason' may name why, unless ntask enforced the budget */
	values[12] = BoolGetDatum(reason != NULL && !engine_reason);
	values[13] = ObjectIdGetDatum(NtaskCaller());
	return NtaskExecPlan(&tr_apply_plan, values, nulls, SPI_OK_SELECT) == 1;
}

/*
 * ntask_transition(task_id, token, to_state, error_class, detail, retry_at,
 *					outcome, error_stage)
 *		RETURNS TABLE(result text, state text, run_at timestamptz)
 *
 * One row: result is applied, duplicate, conflict or stale (see the file
 * header); state and run_at are the task's after the call.
 *
 * Fast path: a to_state whose effect does not depend on the budget
 * (everything but retry_wait) is applied by one conditional statement.
 * Otherwise, or when that statement matched nothing, the task row is locked
 * and the call classified.  Either way the task row lock is held until the
 * caller's transaction ends.
 */
Datum
ntask_transition(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TrCall		c;
	const char *reason;
	const char *result = NULL;
	Datum		out[3];
	bool		outnulls[3] = {false, false, false};
	Datum		values[2];
	bool		isnull;
	bool		retry;

	c.task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	c.token = NtaskArgInt64(fcinfo, 1, "token");
	c.to_state = text_to_cstring(NtaskArgText(fcinfo, 2, "to_state", 64));
	c.error_class = PG_ARGISNULL(3) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, 3, "error_class", 64));
	c.detail = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
	c.detail_null = PG_ARGISNULL(4);
	c.retry_at = PG_ARGISNULL(5) ? (Datum) 0 : PG_GETARG_DATUM(5);
	c.retry_at_null = PG_ARGISNULL(5);
	c.outcome = PG_ARGISNULL(6) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, 6, "outcome", NTASK_MAX_NAME_LEN));
	c.stage = PG_ARGISNULL(7) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, 7, "error_stage", NTASK_MAX_NAME_LEN));

	reason = tr_check_args(c.to_state, &c.error_class, c.outcome != NULL,
						   !c.retry_at_null);
	if (!c.retry_at_null && TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(c.retry_at)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: retry_at must be a finite timestamp")));
	if (strcmp(c.to_state, "succeeded") == 0 && c.outcome == NULL)
		c.outcome = "completed";
	retry = strcmp(c.to_state, "retry_wait") == 0;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();

	if (!retry && tr_apply(&c, c.to_state, 0, reason, false))
		result = "applied";
	else
	{
		char	   *state;
		int64		current;

		values[0] = Int64GetDatum(c.task_id);
		values[1] = ObjectIdGetDatum(NtaskCaller());
		if (NtaskExecPlan(&tr_lock_plan, values, NULL, SPI_OK_SELECT) == 0)
			NtaskTaskNotFound(c.task_id);
		if (!NtaskGetBool(0, 9))
			NtaskTaskRightDenied(c.task_id);
		values[1] = Int64GetDatum(c.token);
		state = NtaskGetCString(0, 1);
		current = NtaskGetInt64(0, 2);
		NtaskCheckTokenRange(c.task_id, c.token, current);

		if (c.token == current && strcmp(state, "leased") == 0)
		{
			/* a retry_wait, decided against the budget of the locked row */
			int32		attempts = NtaskGetInt32(0, 3);
			int32		max_attempts = NtaskGetInt32(0, 4);
			TimestampTz deadline = DatumGetTimestampTz(NtaskGetDatum(0, 5, &isnull));
			TimestampTz now = GetCurrentStatementStartTimestamp();
			TimestampTz next;
			const char *final = c.to_state;
			bool		engine_reason = false;

			Assert(retry);
			if (!c.retry_at_null)
				next = Max(DatumGetTimestampTz(c.retry_at), now);
			else
				next = tr_backoff(attempts,
									DatumGetIntervalP(NtaskGetDatum(0, 6, &isnull)),
									DatumGetIntervalP(NtaskGetDatum(0, 7, &isnull)));
			if (attempts >= max_attempts)
			{
				final = "repair_required";
				reason = "budget_exhausted";
				engine_reason = true;
			}
			else if (next >= deadline)
			{
				final = "repair_required";
				reason = "deadline_exceeded";
				engine_reason = true;
			}
			if (!tr_apply(&c, final, next, reason, engine_reason))
				elog(ERROR, "ntask: locked task %lld did not take its transition",
					 (long long) c.task_id);
			result = "applied";
		}
		else
		{
			out[1] = PointerGetDatum(NtaskGetText(0, 1));
			out[2] = NtaskGetDatum(0, 8, &outnulls[2]);
			if (NtaskExecPlan(&tr_attempt_plan, values, NULL, SPI_OK_SELECT) == 1 &&
				NtaskGetText(0, 1) != NULL)
			{
				char	   *req = NtaskGetCString(0, 1);
				char	   *cls = NtaskGetCString(0, 2);
				char	   *outc = NtaskGetCString(0, 3);

				if (strcmp(req, c.to_state) == 0 &&
					tr_same(cls, c.error_class) && tr_same(outc, c.outcome))
					result = "duplicate";
				else
					result = "conflict";
			}
			else
				result = "stale";
		}
	}

	if (strcmp(result, "applied") == 0)
	{
		/* tr_apply_plan returned (state, run_at) */
		out[1] = PointerGetDatum(NtaskGetText(0, 1));
		out[2] = NtaskGetDatum(0, 2, &outnulls[2]);
	}
	out[0] = CStringGetTextDatum(result);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	SPI_finish();
	return (Datum) 0;
}
