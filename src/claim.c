/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  ntask_claim: hand out due tasks under a lease with a new fencing token.
 *
 * One statement does the work for a queue without a guard:
 *
 *	cand	SELECT ... WHERE queue = $1 AND due_at <= now()
 *			ORDER BY priority DESC, due_at, task_id LIMIT n
 *			FOR UPDATE SKIP LOCKED		(task_due_idx; finished rows are
 *										 not in that index)
 *	closed	close the open attempt of every candidate whose lease expired
 *			(result lease_expired; outcome known only if never invoked)
 *	upd		leased, token + 1, attempts + 1, lease_until / due_at = now() +
 *			lease; or repair_required when the budget (attempts >=
 *			max_attempts) or the deadline is spent
 *	ins		one ntask.attempt row per leased task
 *
 * Tasks diverted to repair are not handed out; the loop then claims again
 * for the remaining slots (bounded).  With a guard, the candidates are
 * locked first, the guard runs for each, skip/cancel answers finish the
 * task with the reason, and the same statement leases the rest by id.
 *
 * Locks: row locks on the claimed task rows only, held until the caller's
 * (short) transaction commits.  Never call this in a transaction that then
 * does the work.  Expects READ COMMITTED (the default).
 *
 * IDENTIFICATION
 *	  src/claim.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_claim);

/* budget test, evaluated on the locked candidate row */
#define CLAIM_SPENT \
	"(t.attempts OPERATOR(pg_catalog.>=) t.max_attempts " \
	" OR pg_catalog.now() OPERATOR(pg_catalog.>=) t.deadline) AS spent "

#define CLAIM_CAND_SCAN \
	"SELECT t.task_id, t.state AS old_state, t.token AS old_token, " \
	CLAIM_SPENT \
	"FROM ntask.task t " \
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 " \
	"  AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now() " \
	"ORDER BY t.priority DESC, t.due_at, t.task_id " \
	"LIMIT $2 FOR UPDATE SKIP LOCKED"

#define CLAIM_CAND_IDS \
	"SELECT t.task_id, t.state AS old_state, t.token AS old_token, " \
	CLAIM_SPENT \
	"FROM ntask.task t " \
	"WHERE t.task_id OPERATOR(pg_catalog.=) ANY ($5) " \
	"  AND t.due_at IS NOT NULL " \
	"FOR UPDATE"

#define CLAIM_BODY \
	"), closed AS ( " \
	"  UPDATE ntask.attempt a SET ended_at = pg_catalog.now(), " \
	"    result = 'lease_expired', outcome_known = (a.invoked_at IS NULL) " \
	"  FROM cand c " \
	"  WHERE c.old_state OPERATOR(pg_catalog.=) 'leased' " \
	"    AND a.task_id OPERATOR(pg_catalog.=) c.task_id " \
	"    AND a.token OPERATOR(pg_catalog.=) c.old_token " \
	"    AND a.ended_at IS NULL " \
	"  RETURNING a.task_id, (a.invoked_at IS NOT NULL) AS was_invoked " \
	"), upd AS ( " \
	"  UPDATE ntask.task t SET " \
	"    state = CASE WHEN c.spent THEN 'repair_required' ELSE 'leased' END, " \
	"    token = t.token OPERATOR(pg_catalog.+) CASE WHEN c.spent THEN 0 ELSE 1 END, " \
	"    attempts = t.attempts OPERATOR(pg_catalog.+) CASE WHEN c.spent THEN 0 ELSE 1 END, " \
	"    lease_owner = CASE WHEN c.spent THEN NULL ELSE $3 END, " \
	"    lease_until = CASE WHEN c.spent THEN NULL " \
	"      ELSE pg_catalog.now() OPERATOR(pg_catalog.+) $4 END, " \
	"    due_at = CASE WHEN c.spent THEN NULL " \
	"      ELSE pg_catalog.now() OPERATOR(pg_catalog.+) $4 END, " \
	"    unknown_attempts = t.unknown_attempts OPERATOR(pg_catalog.+) " \
	"      CASE WHEN cl.was_invoked THEN 1 ELSE 0 END, " \
	"    last_error_class = CASE WHEN cl.task_id IS NULL THEN t.last_error_class " \
	"      WHEN cl.was_invoked THEN 'unknown' ELSE 'transient' END, " \
	"    last_error_stage = CASE WHEN cl.task_id IS NULL THEN t.last_error_stage " \
	"      ELSE 'lease_expired' END, " \
	"    reason = CASE WHEN NOT c.spent THEN t.reason " \
	"      WHEN t.attempts OPERATOR(pg_catalog.>=) t.max_attempts THEN 'budget_exhausted' " \
	"      ELSE 'deadline_exceeded' END, " \
	"    finished_at = CASE WHEN c.spent THEN pg_catalog.now() END, " \
	"    updated_at = pg_catalog.now() " \
	"  FROM cand c LEFT JOIN closed cl ON cl.task_id OPERATOR(pg_catalog.=) c.task_id " \
	"  WHERE t.task_id OPERATOR(pg_catalog.=) c.task_id " \
	"  RETURNING t.task_id, t.task_key, t.payload, t.attempts, t.token, " \
	"    t.lease_until, t.unknown_attempts, t.state " \
	"), ins AS ( " \
	"  INSERT INTO ntask.attempt (task_id, token, attempt, worker) " \
	"  SELECT u.task_id, u.token, u.attempts, $3 FROM upd u " \
	"  WHERE u.state OPERATOR(pg_catalog.=) 'leased' " \
	") " \
	"SELECT u.task_id, u.task_key, u.payload, u.attempts, u.token, u.lease_until, " \
	"  CASE WHEN u.unknown_attempts OPERATOR(pg_catalog.>) 0 THEN 'unknown' END, " \
	"  u.state OPERATOR(pg_catalog.=) 'leased' " \
	"FROM upd u ORDER BY u.task_id"

/* columns of the lease statements' result */
#define CLAIM_NCOLS 7			/* handed to the caller */
#define CLAIM_COL_LEASED 8		/* false: diverted to repair_required */

static NtaskPlan claim_queue_plan = {
	"claim queue lookup",
	"SELECT q.lease, q.guard FROM ntask.queue q "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

static NtaskPlan claim_scan_plan = {
	"claim",
	"WITH cand AS (" CLAIM_CAND_SCAN CLAIM_BODY,
	4, {TEXTOID, INT4OID, TEXTOID, INTERVALOID}
};

static NtaskPlan claim_ids_plan = {
	"claim by id",
	"WITH cand AS (" CLAIM_CAND_IDS CLAIM_BODY,
	5, {TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT8ARRAYOID}
};

static NtaskPlan claim_pick_plan = {
	"claim pick for guard",
	"SELECT t.task_id, t.task_key, t.payload FROM ntask.task t "
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 "
	"  AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now() "
	"ORDER BY t.priority DESC, t.due_at, t.task_id "
	"LIMIT $2 FOR UPDATE SKIP LOCKED",
	2, {TEXTOID, INT4OID}
};

/* at most this many rounds when tasks are diverted to repair */
#define CLAIM_MAX_ROUNDS 10

static int	claim_emit(ReturnSetInfo *rsinfo, int nrows, int *diverted);
static Datum claim_guarded_ids(Oid guard, Datum *values, int *picked,
							   int *nids);

/*
 * claim_emit
 *		Copy the leased rows of the last lease statement into the result
 *		tuplestore.  Returns how many were leased; *diverted counts rows sent
 *		to repair_required instead.
 */
static int
claim_emit(ReturnSetInfo *rsinfo, int nrows, int *diverted)
{
	int			leased = 0;
	int			r;

	*diverted = 0;
	for (r = 0; r < nrows; r++)
	{
		Datum		vals[CLAIM_NCOLS];
		bool		nulls[CLAIM_NCOLS];
		int			c;

		if (!NtaskGetBool(r, CLAIM_COL_LEASED))
		{
			(*diverted)++;
			continue;
		}
		for (c = 0; c < CLAIM_NCOLS; c++)
			vals[c] = NtaskGetDatum(r, c + 1, &nulls[c]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, vals, nulls);
		leased++;
	}
	return leased;
}

/*
 * claim_guarded_ids
 *		Lock up to values[1] due tasks of queue values[0], run the guard on
 *		each, finish skip/cancel answers, and return the ids the guard let
 *		through as a bigint[] Datum (*nids of them); *picked is the number
 *		of candidates locked.
 */
static Datum
claim_guarded_ids(Oid guard, Datum *values, int *picked, int *nids)
{
	int			n = NtaskExecPlan(&claim_pick_plan, values, NULL, SPI_OK_SELECT);
	SPITupleTable *pick = SPI_tuptable;
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	int			r;

	*picked = n;
	*nids = 0;
	for (r = 0; r < n; r++)
	{
		bool		isnull;
		int64		task_id;
		text	   *key;
		Jsonb	   *payload;
		char	   *reason;
		NtaskGuardVerdict v;

		SPI_tuptable = pick;	/* NtaskGet* read SPI_tuptable */
		task_id = DatumGetInt64(NtaskGetDatum(r, 1, &isnull));
		key = DatumGetTextPP(NtaskGetDatum(r, 2, &isnull));
		payload = DatumGetJsonbP(NtaskGetDatum(r, 3, &isnull));
		v = NtaskRunGuard(guard, key, payload, &reason);
		if (v == NTASK_GUARD_PROCEED)
			ids[(*nids)++] = Int64GetDatum(task_id);
		else
			NtaskFinishTask(task_id,
							v == NTASK_GUARD_SKIP ? "skipped" : "canceled",
							reason ? reason : (v == NTASK_GUARD_SKIP ?
											   "guard: skip" : "guard: cancel"),
							"guard");
	}
	return PointerGetDatum(construct_array(ids, *nids, INT8OID,
										   sizeof(int64), true, TYPALIGN_DOUBLE));
}

/*
 * ntask_claim(queue, worker, max_tasks, lease)
 *		RETURNS TABLE(task_id, task_key, payload, attempt, token, lease_until,
 *					  prior_outcome)
 *
 * Leases up to max_tasks due tasks (ready, retry_wait whose run_at passed,
 * or leased whose lease expired) to worker.  prior_outcome is 'unknown'
 * when an earlier attempt of the task may have had an effect, else NULL.
 * Errors: unknown queue 42704; NULL argument 22004; max_tasks outside
 * 1..1000 or a non-positive lease 22023.
 */
Datum
ntask_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", 63);
	text	   *worker = NtaskArgText(fcinfo, 1, "worker", NTASK_MAX_NAME_LEN);
	int32		max_tasks;
	Datum		values[5];
	bool		isnull;
	Oid			guard;
	int			got = 0;
	int			round;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: max_tasks must not be NULL")));
	max_tasks = PG_GETARG_INT32(2);
	if (max_tasks < 1 || max_tasks > NTASK_MAX_CLAIM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: max_tasks must be between 1 and %d", NTASK_MAX_CLAIM)));
	if (!PG_ARGISNULL(3))
		NtaskCheckPositiveInterval(PG_GETARG_INTERVAL_P(3), "lease");

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();

	values[0] = PointerGetDatum(queue);
	if (NtaskExecPlan(&claim_queue_plan, values, NULL, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("ntask: queue \"%s\" does not exist", text_to_cstring(queue))));
	values[3] = PG_ARGISNULL(3) ? NtaskGetDatum(0, 1, &isnull) : PG_GETARG_DATUM(3);
	guard = DatumGetObjectId(NtaskGetDatum(0, 2, &isnull));
	if (isnull)
		guard = InvalidOid;
	values[2] = PointerGetDatum(worker);

	for (round = 0; round < CLAIM_MAX_ROUNDS && got < max_tasks; round++)
	{
		int			n;
		int			diverted;

		int			want = max_tasks - got;

		values[1] = Int32GetDatum(want);
		if (OidIsValid(guard))
		{
			int			picked;
			int			nids;

			values[4] = claim_guarded_ids(guard, values, &picked, &nids);
			n = nids == 0 ? 0 :
				NtaskExecPlan(&claim_ids_plan, values, NULL, SPI_OK_SELECT);
			got += claim_emit(rsinfo, n, &diverted);
			if (picked < want)
				break;			/* no more due tasks */
		}
		else
		{
			n = NtaskExecPlan(&claim_scan_plan, values, NULL, SPI_OK_SELECT);
			got += claim_emit(rsinfo, n, &diverted);
			if (diverted == 0)
				break;			/* every candidate was leased */
		}
	}

	SPI_finish();
	return (Datum) 0;
}
