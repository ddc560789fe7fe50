/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *	  ntask_enqueue: idempotent enqueue on (queue, task_key).
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
 * IDENTIFICATION
 *	  src/enqueue.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_enqueue);

static NtaskPlan enq_insert_plan = {
	"enqueue insert",
	"INSERT INTO ntask.task AS t (queue, task_key, payload, payload_digest, "
	"  digest_version, partition_key, priority, run_at, due_at, max_attempts, "
	"  deadline) "
	"SELECT q.queue, $2, $3, $4, $5, $6, $7, "
	"  coalesce($8, pg_catalog.statement_timestamp()), coalesce($8, pg_catalog.statement_timestamp()), "
	"  q.max_attempts, "
	"  GREATEST(pg_catalog.statement_timestamp(), $8) OPERATOR(pg_catalog.+) q.total_deadline "
	"FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1 "
	"  AND (q.producer_role IS NULL "
	"       OR pg_catalog.pg_has_role($9, q.producer_role, 'USAGE')) "
	"ON CONFLICT (queue, task_key) DO NOTHING "
	"RETURNING t.task_id, t.state",
	9, {TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT2OID, TEXTOID, INT4OID,
	TIMESTAMPTZOID, OIDOID}
};

static NtaskPlan enq_existing_plan = {
	"enqueue lookup",
	"SELECT t.task_id, t.state, t.payload_digest, t.digest_version "
	"FROM ntask.task t "
	"WHERE t.queue OPERATOR(pg_catalog.=) $1 "
	"  AND t.task_key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID}
};

/*
 * ntask_enqueue(queue, task_key, payload, run_at, partition_key, priority)
 *		RETURNS TABLE(task_id bigint, created boolean, state text)
 *
 * One row: the new task (created = true) or the existing task with the same
 * key and an equal payload (created = false).  Errors: unknown queue 42704;
 * same key, different payload NT001; NULL required argument 22004; empty
 * key 22023; key over 512 bytes 22001.
 */
Datum
ntask_enqueue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *queue = NtaskArgText(fcinfo, 0, "queue", 63);
	text	   *key = NtaskArgText(fcinfo, 1, "task_key", NTASK_MAX_KEY_LEN);
	Jsonb	   *payload;
	bytea	   *digest;
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Datum		out[3];
	bool		outnulls[3] = {false, false, false};
	int			tries;

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
	digest = NtaskDigest(payload, NTASK_DIGEST_VERSION);

	values[0] = PointerGetDatum(queue);
	values[1] = PointerGetDatum(key);
	values[2] = JsonbPGetDatum(payload);
	values[3] = PointerGetDatum(digest);
	values[4] = Int16GetDatum(NTASK_DIGEST_VERSION);
	values[5] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
	nulls[5] = PG_ARGISNULL(4) ? 'n' : ' ';
	values[6] = PG_GETARG_DATUM(5);
	values[7] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	nulls[7] = PG_ARGISNULL(3) ? 'n' : ' ';
	values[8] = ObjectIdGetDatum(NtaskCaller());

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();

	/*
	 * Insert, else read the existing row.  The loop only repeats if a task
	 * with this key vanished between the two statements (retention pruning
	 * of a finished task), which at most happens once.
	 */
	for (tries = 0;; tries++)
	{
		if (NtaskExecPlan(&enq_insert_plan, values, nulls,
						  SPI_OK_INSERT_RETURNING) == 1)
		{
			out[0] = Int64GetDatum(NtaskGetInt64(0, 1));
			out[1] = BoolGetDatum(true);
			out[2] = PointerGetDatum(NtaskGetText(0, 2));
			NtaskWakeWorkerAtCommit();	/* it may be an http task */
			break;
		}
		/* nothing inserted: no queue, no right, or the key exists */
		NtaskCheckQueueRight(queue, true);
		if (NtaskExecPlan(&enq_existing_plan, values, NULL, SPI_OK_SELECT) == 1)
		{
			bool		isnull;

			if (!NtaskSameDigest(payload, digest,
								 DatumGetByteaPP(NtaskGetDatum(0, 3, &isnull)),
								 NtaskGetInt32(0, 4)))
				ereport(ERROR,
						(errcode(ERRCODE_NTASK_KEY_CONFLICT),
						 errmsg("ntask: task key \"%s\" already exists in queue \"%s\" with a different payload",
								text_to_cstring(key), text_to_cstring(queue)),
						 errdetail("A task key names one logical piece of work; its payload cannot change."),
						 errhint("Use a new key for a new business version (for example a :v2 suffix).")));
			out[0] = Int64GetDatum(NtaskGetInt64(0, 1));
			out[1] = BoolGetDatum(false);
			out[2] = PointerGetDatum(NtaskGetText(0, 2));
			break;
		}
		if (tries > 0)
			elog(ERROR, "ntask: enqueue of \"%s\" found neither a new nor an existing task",
				 text_to_cstring(key));
	}

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	SPI_finish();
	return (Datum) 0;
}
