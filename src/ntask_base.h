/*-------------------------------------------------------------------------
 *
 * ntask_base.h
 *	  Floor 2, the foundations: ntask's SQLSTATEs, version and limits on
 *	  arguments, the digest, the shards of task ids and the SQL fragments
 *	  several files share.  The rest of floor 2 has a header per purpose:
 *	  spi_util.h (saved plans, row readers, argument checks), settings.h
 *	  and worker_settings.h (GUCs), wake.h (wake-at-commit), waiter.h,
 *	  fair.h, limit.h, worker_shared.h and launcher.h (shared memory).
 *
 * Exported internals use the NtaskXxx() prefix; SQL-callable C symbols
 * equal their SQL names (ntask_claim, ...).  File-local statics use a short
 * per-file prefix.
 *
 * The floors of src/ (docs/design.md "Floors"; src/floors.txt, checked by
 * scripts/check_layers.sh): a .c file includes postgres.h first, then the
 * headers whose names it uses, each of its level or a lower one; no file
 * calls a function of a higher level.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/ntask_base.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_BASE_H
#define NTASK_BASE_H

#include "compat.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

/*
 * ntask's own SQLSTATEs (class NT).  Standard codes are used wherever one
 * fits (42704 unknown queue, P0002 unknown task, 22023 bad argument,
 * 22004 NULL argument, 22001 value too long); docs/errors.md lists all.
 */
#define ERRCODE_NTASK_KEY_CONFLICT			MAKE_SQLSTATE('N','T','0','0','1')
#define ERRCODE_NTASK_INVALID_TASK_STATE	MAKE_SQLSTATE('N','T','0','0','2')
#define ERRCODE_NTASK_TOKEN_NOT_ISSUED		MAKE_SQLSTATE('N','T','0','0','3')
#define ERRCODE_NTASK_DIGEST_VERSION		MAKE_SQLSTATE('N','T','0','0','4')
#define ERRCODE_NTASK_GUARD_ANSWER			MAKE_SQLSTATE('N','T','0','0','5')

/* the SQL objects this library is written for (ntask.control default_version) */
#define NTASK_VERSION			"1.1.0"

/* limits on caller-supplied values */
#define NTASK_MAX_KEY_LEN		512		/* task_key, bytes */
#define NTASK_MAX_QUEUE_LEN		63		/* queue names (queue.c's check) */
#define NTASK_QUEUE_BUF			(NTASK_MAX_QUEUE_LEN + 1)	/* a name and its NUL */
#define NTASK_MAX_NAME_LEN		200		/* worker, actor, outcome, stage */
#define NTASK_MAX_REASON_LEN	2000	/* audit reasons */
#define NTASK_MAX_CLAIM			1000	/* max_tasks per ntask_claim call */
#define NTASK_MAX_BATCH			10000	/* elements per *_many call */

/* the digest algorithm ntask writes today (see digest.c) */
#define NTASK_DIGEST_VERSION	1
#define NTASK_DIGEST_LEN		32

/* digest.c */
extern bytea *NtaskDigest(Jsonb *jb, int version);

/*
 * An UPDATE of a task table that adds the statement timestamp to a column
 * (now + q.lease) or has it in a CASE gets it as a parameter,
 * NtaskStatementTs(): Citus refuses "STABLE functions used in UPDATE
 * queries cannot be called with column references" and "non-IMMUTABLE
 * functions are not allowed in CASE or COALESCE statements" on a
 * distributed table.  It is the value pg_catalog.statement_timestamp()
 * returns in the statement (the caller's statement start).  The sum of
 * a timestamp and an interval column is itself a stable operator: it stays
 * in a subquery (replay's deadline) or behind coalesce (the heartbeat's
 * lease), which Citus accepts.
 */
#define NtaskStatementTs() TimestampTzGetDatum(GetCurrentStatementStartTimestamp())

/*
 * SQL: " OR <the attempt row a committed a receipt>", for the outcome_known
 * of an attempt being closed: a committed receipt is a known outcome.
 */
#define NTASK_RECEIPT_OF(a) \
	" OR EXISTS (SELECT 1 FROM ntask.receipt r " \
	"  WHERE r.task_id OPERATOR(pg_catalog.=) " a ".task_id " \
	"    AND r.shard OPERATOR(pg_catalog.=) " a ".shard " \
	"    AND r.token OPERATOR(pg_catalog.=) " a ".token)"

/*
 * SQL: true when the caller (parameter $n, an oid) may act as a worker on
 * the tasks of queue row q: the queue has no worker_role, or the caller has
 * its privileges.  Checked by every function that takes a task id and a
 * token (transition, heartbeat, invoked, receipt), not only by claim.
 */
#define NTASK_WORKER_RIGHT(q, n) \
	"(" q ".worker_role IS NULL OR pg_catalog.pg_has_role($" n ", " \
	q ".worker_role, 'USAGE'))"
/*
 * The same test for the WHERE clause of an UPDATE of a task table: Citus
 * refuses a stable function with a column reference there (pg_has_role of
 * q.worker_role), not inside a scalar subquery.  The subquery is evaluated
 * only for a queue that has a worker_role.
 */
#define NTASK_WORKER_RIGHT_SUB(q, n) \
	"(" q ".worker_role IS NULL OR (SELECT pg_catalog.pg_has_role($" n ", " \
	q ".worker_role, 'USAGE')))"

#endif							/* NTASK_BASE_H */
