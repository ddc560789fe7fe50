/*-------------------------------------------------------------------------
 *
 * fence.c
 *	  ntask_fence: a general monotonic fence with content digests.
 *
 * A fence guards a target that must only move forward, such as a config
 * document applied to a host (fence_key 'config:doc-7:host-3', token = the
 * published version).  Called in the same transaction as the write to the
 * target:
 *
 *	token > watermark					-> applied: the watermark and digest
 *										   advance, a fence_receipt is kept
 *	token = watermark, same digest		-> duplicate
 *	token = watermark, other digest		-> conflict
 *	token < watermark, but it advanced the fence once (a fence_receipt):
 *	same digest -> duplicate, other -> conflict (a retry after a lost
 *	response, answered as ntask_receipt would)
 *	token < watermark otherwise			-> stale
 *
 * Check and write are one statement: INSERT ... ON CONFLICT DO UPDATE ...
 * WHERE fence.token < EXCLUDED.token.  It locks the fence row whether or
 * not the WHERE passes, so concurrent callers of one fence serialize on it
 * until their transactions end: a version 2 that got 'applied' holds the
 * row while its business write runs, a version 3 waits, then applies; a
 * version 2 arriving after version 3 committed is stale.  (On a
 * distributed install the receipt is a second statement after the upsert,
 * in the same transaction: fence_advance.)
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"
#include "ntask_task.h"
#include "shard.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_fence);
PG_FUNCTION_INFO_V1(ntask_fence_grant);

/*
 * The grant of the longest registered prefix of the key: true when the
 * caller lacks its role.  No row: the key is not restricted.  The key's
 * prefixes are probed in fence_grant's primary key (one probe per length,
 * keys are at most 512 bytes): a "starts_with(key, prefix)" filter would be
 * a sequential scan, which with enable_seqscan off carries a cost high
 * enough to JIT-compile the statement on every call.
 */
typedef enum FenceRightArg
{
	FENCE_RIGHT_ARG_KEY,		/* $1 */
	FENCE_RIGHT_ARG_CALLER,		/* $2 */
	FENCE_RIGHT_NARGS
} FenceRightArg;

typedef enum FenceRightCol
{
	FENCE_RIGHT_DENIED = 1,		/* the caller lacks the grant's role */
	FENCE_RIGHT_NCOLS = FENCE_RIGHT_DENIED
} FenceRightCol;

static NtaskPlan fence_right_plan = {
	"fence right",
	.ncols = FENCE_RIGHT_NCOLS,
	"SELECT NOT pg_catalog.pg_has_role($2, g.role, 'USAGE') "
	"FROM pg_catalog.generate_series(pg_catalog.length($1), 1, -1) AS n(len) "
	"JOIN ntask.fence_grant g "
	"  ON g.prefix OPERATOR(pg_catalog.=) pg_catalog.\"left\"($1, n.len) "
	"ORDER BY n.len DESC LIMIT 1",
	FENCE_RIGHT_NARGS, {TEXTOID, OIDOID}
};

/*
 * The statement timestamp of an upsert's DO UPDATE SET is a parameter
 * ($3 here, $5 in fence_advance: NtaskStatementTs(), the value
 * statement_timestamp() returns): Citus refuses a non-immutable function
 * there ("functions used in the DO UPDATE SET clause of INSERTs on
 * distributed tables must be marked IMMUTABLE"), reference tables too.
 */
typedef enum FenceGrantArg
{
	FENCE_GRANT_ARG_PREFIX,		/* $1 */
	FENCE_GRANT_ARG_ROLE,		/* $2, NULL: drop the grant */
	FENCE_GRANT_ARG_NOW,		/* $3 */
	FENCE_GRANT_NARGS
} FenceGrantArg;

static NtaskPlan fence_grant_set_plan = {
	"fence grant set",
	.ncols = 0,
	"INSERT INTO ntask.fence_grant AS g (prefix, role) VALUES ($1, $2) "
	"ON CONFLICT (prefix) DO UPDATE SET role = EXCLUDED.role, "
	"  granted_at = $3",
	FENCE_GRANT_NARGS, {TEXTOID, REGROLEOID, TIMESTAMPTZOID}
};

static NtaskPlan fence_grant_drop_plan = {
	"fence grant drop",
	.ncols = 0,
	"DELETE FROM ntask.fence_grant g WHERE g.prefix OPERATOR(pg_catalog.=) $1",
	FENCE_GRANT_ARG_PREFIX + 1, {TEXTOID}
};

/*
 * The parameters of fence_advance; fence_current_plan and
 * fence_receipt_plan take the first one or two of the same values[].
 */
typedef enum FenceArg
{
	FENCE_ARG_KEY,				/* $1 */
	FENCE_ARG_TOKEN,			/* $2 */
	FENCE_ARG_DIGEST,			/* $3 */
	FENCE_ARG_DIGEST_VERSION,	/* $4 */
	FENCE_ARG_NOW,				/* $5: the statement timestamp */
	FENCE_NARGS
} FenceArg;

/* fence_receipt_insert_plan takes $1..$4 */
#define FENCE_DIGEST_VERSION_NARGS (FENCE_ARG_DIGEST_VERSION + 1)

static void fence_receipt_after(SPITupleTable *tt, int n, Datum *values,
								char *nulls);

/*
 * The advance and its receipt.  A plain install's is one statement.  On a
 * distributed install it is two, each a router statement on the fence's
 * node (local execution there in a delegated call): Citus plans a
 * modifying CTE apart, the upsert into an intermediate result and the
 * receipt insert as an INSERT ... SELECT collected on the calling node.
 * There the receipt is inserted when the upsert returned a row (applied),
 * in the same transaction (fence_receipt_after).
 */
#define FENCE_UPSERT \
	"INSERT INTO ntask.fence AS f (fence_key, token, payload_digest, digest_version) " \
	"VALUES ($1, $2, $3, $4) " \
	"ON CONFLICT (fence_key) DO UPDATE SET token = EXCLUDED.token, " \
	"  payload_digest = EXCLUDED.payload_digest, " \
	"  digest_version = EXCLUDED.digest_version, updated_at = $5 " \
	"WHERE f.token OPERATOR(pg_catalog.<) EXCLUDED.token "

/* the column of fence_advance: a row when the fence advanced */
typedef enum FenceAdvanceCol
{
	FENCE_ADVANCED = 1
} FenceAdvanceCol;

static NtaskPair fence_advance = NTASK_PAIR("fence advance",
											NTASK_PLAIN(FENCE_ADVANCED,
														"WITH f AS ( " FENCE_UPSERT
														"  RETURNING f.fence_key, f.token, f.payload_digest, f.digest_version "
														") "
														"INSERT INTO ntask.fence_receipt (fence_key, token, payload_digest, digest_version) "
														"SELECT * FROM f RETURNING 1",
														FENCE_NARGS, SPI_OK_INSERT_RETURNING),
											NTASK_ROUTED(FENCE_ADVANCED, FENCE_UPSERT "RETURNING 1",
														 FENCE_NARGS, SPI_OK_INSERT_RETURNING,
														 NULL, fence_receipt_after),
											TEXTOID, INT8OID, BYTEAOID, INT2OID, TIMESTAMPTZOID);

/* the receipt of a routed advance, a statement of its own */
static NtaskPlan fence_receipt_insert_plan = {
	"fence receipt insert",
	.ncols = 0,
	"INSERT INTO ntask.fence_receipt (fence_key, token, payload_digest, digest_version) "
	"VALUES ($1, $2, $3, $4)",
	FENCE_DIGEST_VERSION_NARGS, {TEXTOID, INT8OID, BYTEAOID, INT2OID}
};

static void
fence_receipt_after(SPITupleTable *tt, int n, Datum *values, char *nulls)
{
	if (n == 1)
		NtaskExecPlan(&fence_receipt_insert_plan, values, NULL, SPI_OK_INSERT);
}

/* the row is already locked by the failed ON CONFLICT DO UPDATE */
typedef enum FenceCurrentCol
{
	FENCE_CURRENT_TOKEN = 1,	/* the watermark */
	FENCE_CURRENT_DIGEST,
	FENCE_CURRENT_DIGEST_VERSION,
	FENCE_CURRENT_NCOLS = FENCE_CURRENT_DIGEST_VERSION
} FenceCurrentCol;

static NtaskPlan fence_current_plan = {
	"fence lookup",
	.ncols = FENCE_CURRENT_NCOLS,
	"SELECT f.token, f.payload_digest, f.digest_version FROM ntask.fence f "
	"WHERE f.fence_key OPERATOR(pg_catalog.=) $1",
	FENCE_ARG_KEY + 1, {TEXTOID}
};

/* an older token that did advance the fence once */
typedef enum FenceReceiptCol
{
	FENCE_RECEIPT_DIGEST = 1,
	FENCE_RECEIPT_DIGEST_VERSION,
	FENCE_RECEIPT_NCOLS = FENCE_RECEIPT_DIGEST_VERSION
} FenceReceiptCol;

static NtaskPlan fence_receipt_plan = {
	"fence receipt lookup",
	.ncols = FENCE_RECEIPT_NCOLS,
	"SELECT r.payload_digest, r.digest_version FROM ntask.fence_receipt r "
	"WHERE r.fence_key OPERATOR(pg_catalog.=) $1 "
	"  AND r.token OPERATOR(pg_catalog.=) $2",
	FENCE_ARG_TOKEN + 1, {TEXTOID, INT8OID}
};

/*
 * ntask_fence(fence_key text, token bigint, payload jsonb) RETURNS text
 *		See the file header.  Errors: NULL argument 22004; empty key 22023;
 *		key over 512 bytes 22001; token below 1 22023; the key falls under a
 *		fence grant (ntask_fence_grant) whose role the caller lacks 42501;
 *		a stored digest of an unknown version NT004.  Locks the fence row until the caller's
 *		transaction ends.
 */
Datum
ntask_fence(PG_FUNCTION_ARGS)
{
	text	   *key = NtaskArgText(fcinfo, 0, "fence_key", NTASK_MAX_KEY_LEN);
	int64		token = NtaskArgInt64(fcinfo, 1, "token");
	Jsonb	   *payload;
	bytea	   *digest;
	Datum		values[FENCE_NARGS];
	const char *result;
	int64		watermark;
	bool		isnull;
	bool		applied;

	if (token < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: token must be positive")));
	payload = NtaskArgJsonb(fcinfo, 2, "payload");
	digest = NtaskDigest(payload, NTASK_DIGEST_VERSION);

	values[FENCE_ARG_KEY] = PointerGetDatum(key);
	values[FENCE_ARG_TOKEN] = Int64GetDatum(token);
	values[FENCE_ARG_DIGEST] = PointerGetDatum(digest);
	values[FENCE_ARG_DIGEST_VERSION] = Int16GetDatum(NTASK_DIGEST_VERSION);
	values[FENCE_ARG_NOW] = NtaskStatementTs();

	SPI_connect();
	{
		Datum		rv[FENCE_RIGHT_NARGS];

		rv[FENCE_RIGHT_ARG_KEY] = PointerGetDatum(key);
		rv[FENCE_RIGHT_ARG_CALLER] = ObjectIdGetDatum(NtaskCaller());
		if (NtaskExecPlan(&fence_right_plan, rv, NULL, SPI_OK_SELECT) == 1 &&
			NtaskTupGetBool(SPI_tuptable, 0, FENCE_RIGHT_DENIED))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("ntask: permission denied for fence \"%s\"",
							text_to_cstring(key)),
					 errhint("A fence grant (ntask_fence_grant) restricts keys with this prefix to a role.")));
	}
	applied = NtaskExecPair(&fence_advance, values, NULL) == 1;
	if (applied)
		result = "applied";
	else
	{
		if (NtaskExecPlan(&fence_current_plan, values, NULL, SPI_OK_SELECT) != 1)
			elog(ERROR, "ntask: fence \"%s\" neither advanced nor found",
				 text_to_cstring(key));
		watermark = NtaskTupGetInt64(SPI_tuptable, 0, FENCE_CURRENT_TOKEN);
		if (token < watermark)
		{
			/* stale, unless this token applied once (a late retry) */
			if (NtaskExecPlan(&fence_receipt_plan, values, NULL, SPI_OK_SELECT) == 0)
				result = "stale";
			else
				result = NtaskSameDigest(payload, digest,
										 DatumGetByteaPP(NtaskTupGetDatum(SPI_tuptable, 0, FENCE_RECEIPT_DIGEST, &isnull)),
										 NtaskTupGetInt32(SPI_tuptable, 0, FENCE_RECEIPT_DIGEST_VERSION)) ? "duplicate" : "conflict";
		}
		else if (NtaskSameDigest(payload, digest,
								 DatumGetByteaPP(NtaskTupGetDatum(SPI_tuptable, 0, FENCE_CURRENT_DIGEST, &isnull)),
								 NtaskTupGetInt32(SPI_tuptable, 0, FENCE_CURRENT_DIGEST_VERSION)))
			result = "duplicate";
		else
			result = "conflict";
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/*
 * ntask_fence_grant(prefix text, role regrole) RETURNS void
 *		Restrict every fence key that starts with prefix (the longest
 *		registered prefix of a key decides) to members of role; a NULL role
 *		removes the grant.  Keys under no grant are open to every
 *		ntask_worker.  Audited.  Errors: NULL or empty prefix 22004/22023.
 */
Datum
ntask_fence_grant(PG_FUNCTION_ARGS)
{
	text	   *prefix = NtaskArgText(fcinfo, 0, "prefix", NTASK_MAX_KEY_LEN);
	Datum		values[FENCE_GRANT_NARGS];

	values[FENCE_GRANT_ARG_PREFIX] = PointerGetDatum(prefix);
	values[FENCE_GRANT_ARG_ROLE] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	values[FENCE_GRANT_ARG_NOW] = NtaskStatementTs();
	SPI_connect();
	if (PG_ARGISNULL(1))
		NtaskExecPlan(&fence_grant_drop_plan, values, NULL, SPI_OK_DELETE);
	else
		NtaskExecPlan(&fence_grant_set_plan, values, NULL, SPI_OK_INSERT);
	NtaskAudit(GetUserNameFromId(GetUserId(), false), "fence_grant", 0, NULL,
			   psprintf("prefix %s: %s", text_to_cstring(prefix),
						PG_ARGISNULL(1) ? "open to every worker" :
						GetUserNameFromId(PG_GETARG_OID(1), false)),
			   NULL, NULL);
	SPI_finish();
	PG_RETURN_VOID();
}
