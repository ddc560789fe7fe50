/*-------------------------------------------------------------------------
 *
 * transition.c
 *	  ntask_transition: the fenced, conditional end of an attempt, and the
 *	  retry backoff.
 *
 * The task row is locked (FOR UPDATE) first; that lock serializes the
 * transition against claim takeover, cancel and replay.  Then:
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
	"  q.backoff_base, q.backoff_max, t.run_at "
	"FROM ntask.task t JOIN ntask.queue q "
	"  ON q.queue OPERATOR(pg_catalog.=) t.queue "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 FOR UPDATE OF t",
	1, {INT8OID}
};

static NtaskPlan tr_apply_plan = {
	"transition apply",
	"WITH a AS ( "
	"  UPDATE ntask.attempt SET ended_at = pg_catalog.now(), result = $3, "
	"    requested = $4, error_class = $5, error_stage = $6, "
	"    outcome_known = $7, outcome = $8, retry_at = $9, detail = $10 "
	"  WHERE task_id OPERATOR(pg_catalog.=) $1 "
	"    AND token OPERATOR(pg_catalog.=) $2 "
	") "
	"UPDATE ntask.task SET state = $3, "
	"  run_at = coalesce($11, run_at), due_at = $11, "
	"  lease_owner = NULL, lease_until = NULL, "
	"  last_error_class = coalesce($5, last_error_class), "
	"  last_error_stage = coalesce($6, last_error_stage), "
	"  outcome = $8, "
	"  reason = CASE WHEN $13 "
	"    THEN coalesce($10 OPERATOR(pg_catalog.->>) 'reason', $12) ELSE $12 END, "
	"  unknown_attempts = unknown_attempts OPERATOR(pg_catalog.+) "
	"    CASE WHEN $7 THEN 0 ELSE 1 END, "
	"  finished_at = CASE WHEN $11 IS NULL THEN pg_catalog.now() END, "
	"  updated_at = pg_catalog.now() "
	"WHERE task_id OPERATOR(pg_catalog.=) $1 "
	"RETURNING state, run_at",
	13, {INT8OID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID,
	TEXTOID, TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, TEXTOID, BOOLOID}
};

static NtaskPlan tr_attempt_plan = {
	"transition attempt lookup",
	"SELECT a.requested, a.error_class, a.outcome FROM ntask.attempt a "
	"WHERE a.task_id OPERATOR(pg_catalog.=) $1 "
	"  AND a.token OPERATOR(pg_catalog.=) $2",
	2, {INT8OID, INT8OID}
};

static const char *tr_check_args(const char *to_state, const char **error_class,
								 bool has_outcome, bool has_retry_at);
static int64 tr_interval_usecs(Interval *iv);
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
 * tr_interval_usecs
 *		An interval as microseconds (a month counts 30 days), for backoff
 *		arithmetic only.
 */
static int64
tr_interval_usecs(Interval *iv)
{
	return iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/*
 * NtaskBackoff
 *		When the retry after the given attempt (1-based) is due:
 *		now() + min(base * 2^(attempt-1), max), with equal jitter (half the
 *		delay fixed, half random) unless ntask.backoff_jitter is off.
 */
TimestampTz
NtaskBackoff(int attempt, Interval *base, Interval *max)
{
	double		b = (double) tr_interval_usecs(base);
	double		m = (double) tr_interval_usecs(max);
	double		delay = b * pow(2.0, (double) Min(Max(attempt, 1) - 1, 60));

	if (delay > m)
		delay = m;
	if (ntask_backoff_jitter)
		delay = delay / 2.0 + pg_prng_double(&pg_global_prng_state) * delay / 2.0;
	return GetCurrentTransactionStartTimestamp() + (int64) delay;
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
 * ntask_transition(task_id, token, to_state, error_class, detail, retry_at,
 *					outcome, error_stage)
 *		RETURNS TABLE(result text, state text, run_at timestamptz)
 *
 * One row: result is applied, duplicate, conflict or stale (see the file
 * header); state and run_at are the task's after the call.  Takes the task
 * row lock until the caller's transaction ends.
 */
Datum
ntask_transition(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64		task_id = NtaskArgInt64(fcinfo, 0, "task_id");
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	char	   *to_state = text_to_cstring(NtaskArgText(fcinfo, 2, "to_state", 64));
	const char *error_class = PG_ARGISNULL(3) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, 3, "error_class", 64));
	const char *outcome = PG_ARGISNULL(6) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, 6, "outcome", NTASK_MAX_NAME_LEN));
	const char *stage = PG_ARGISNULL(7) ? NULL :
		text_to_cstring(NtaskArgText(fcinfo, 7, "error_stage", NTASK_MAX_NAME_LEN));
	const char *reason;
	const char *result;
	Datum		out[3];
	bool		outnulls[3] = {false, false, false};
	Datum		values[13];
	char		nulls[13];
	bool		isnull;
	char	   *state;
	int64		current;

	reason = tr_check_args(to_state, &error_class, outcome != NULL,
						   !PG_ARGISNULL(5));

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();

	values[0] = Int64GetDatum(task_id);
	values[1] = Int64GetDatum(token);
	if (NtaskExecPlan(&tr_lock_plan, values, NULL, SPI_OK_SELECT) == 0)
		NtaskTaskNotFound(task_id);
	state = NtaskGetCString(0, 1);
	current = NtaskGetInt64(0, 2);
	NtaskCheckTokenRange(task_id, token, current);

	if (token == current && strcmp(state, "leased") == 0)
	{
		int32		attempts = NtaskGetInt32(0, 3);
		int32		max_attempts = NtaskGetInt32(0, 4);
		TimestampTz deadline = DatumGetTimestampTz(NtaskGetDatum(0, 5, &isnull));
		const char *final = to_state;
		bool		engine_reason = false;	/* ntask's own reason wins */
		TimestampTz next = 0;
		bool		known = error_class == NULL || strcmp(error_class, "unknown") != 0;

		if (strcmp(to_state, "retry_wait") == 0)
		{
			TimestampTz now = GetCurrentTransactionStartTimestamp();

			if (!PG_ARGISNULL(5))
				next = Max(PG_GETARG_TIMESTAMPTZ(5), now);
			else
				next = NtaskBackoff(attempts,
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
		}
		if (strcmp(to_state, "succeeded") == 0 && outcome == NULL)
			outcome = "completed";

		memset(nulls, ' ', sizeof(nulls));
		values[2] = CStringGetTextDatum(final);
		values[3] = CStringGetTextDatum(to_state);
		values[4] = error_class ? CStringGetTextDatum(error_class) : (Datum) 0;
		nulls[4] = error_class ? ' ' : 'n';
		values[5] = stage ? CStringGetTextDatum(stage) : (Datum) 0;
		nulls[5] = stage ? ' ' : 'n';
		values[6] = BoolGetDatum(known);
		values[7] = outcome ? CStringGetTextDatum(outcome) : (Datum) 0;
		nulls[7] = outcome ? ' ' : 'n';
		values[8] = PG_ARGISNULL(5) ? (Datum) 0 : PG_GETARG_DATUM(5);
		nulls[8] = PG_ARGISNULL(5) ? 'n' : ' ';
		values[9] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
		nulls[9] = PG_ARGISNULL(4) ? 'n' : ' ';
		values[10] = TimestampTzGetDatum(next);
		nulls[10] = strcmp(final, "retry_wait") == 0 ? ' ' : 'n';
		values[11] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
		nulls[11] = reason ? ' ' : 'n';
		/* detail->>'reason' may name why, unless ntask enforced the budget */
		values[12] = BoolGetDatum(reason != NULL && !engine_reason);
		if (NtaskExecPlan(&tr_apply_plan, values, nulls,
						  SPI_OK_UPDATE_RETURNING) != 1)
			elog(ERROR, "ntask: locked task %lld vanished", (long long) task_id);
		result = "applied";
		out[1] = PointerGetDatum(NtaskGetText(0, 1));
		out[2] = NtaskGetDatum(0, 2, &outnulls[2]);
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
			char	   *out = NtaskGetCString(0, 3);

			if (strcmp(to_state, "succeeded") == 0 && outcome == NULL)
				outcome = "completed";
			if (strcmp(req, to_state) == 0 &&
				tr_same(cls, error_class) && tr_same(out, outcome))
				result = "duplicate";
			else
				result = "conflict";
		}
		else
			result = "stale";
	}

	out[0] = CStringGetTextDatum(result);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	SPI_finish();
	return (Datum) 0;
}
