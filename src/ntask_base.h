/*-------------------------------------------------------------------------
 *
 * ntask_base.h
 *	  Floor 2, the foundations: ntask's SQLSTATEs, limits and GUCs (module.c),
 *	  the saved SPI plan and argument helpers (spi_util.c), the digest,
 *	  the shared SQL fragments, and the shared-memory tables (fair.c,
 *	  limit.c, waiter.c, worker_shared.c).
 *
 * Exported internals use the NtaskXxx() prefix; SQL-callable C symbols
 * equal their SQL names (ntask_claim, ...).  File-local statics use a short
 * per-file prefix.
 *
 * The floors of src/ (docs/design.md "Floors"; scripts/check_layers.sh):
 * a file includes the header of its floor, which includes the ones below;
 * no file calls a file on a floor above it.  A .c file includes
 * postgres.h first, then its floor's header.
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

/* GUCs (module.c; docs/worker.md lists the worker's) */
extern void NtaskCheckNargs(FunctionCallInfo fcinfo, int nargs);
extern bool ntask_backoff_jitter;
extern char *ntask_database;
extern bool ntask_worker_enabled;
extern int	ntask_max_databases;
extern int	ntask_naptime_ms;
extern int	ntask_http_max_inflight;
extern char *ntask_http_allowed_hosts;
/* its parsed form (the GUC's extra; http_parse.h), NULL: allows nothing */
extern const struct NtaskHostList *ntask_http_allowed_list;
extern int	ntask_http_connect_timeout_ms;
extern int	ntask_http_max_response_bytes;
extern int	ntask_http_retry_after_max;
extern char *ntask_worker_role;
extern int	ntask_worker_lock_timeout_ms;
extern int	ntask_worker_statement_timeout_ms;
extern int	ntask_audit_retention_s;
extern int	ntask_history_retention_s;
extern int	ntask_max_wait_ms;
extern int	ntask_max_result_bytes;
extern int	ntask_max_context_bytes;
extern int	ntask_max_claim_context_bytes;
extern int	ntask_max_parents;
extern int	ntask_rate_limit_slots;
extern int	ntask_fair_cursor_slots;
extern int	ntask_max_payload_bytes;
extern char *ntask_traceparent;

/* module.c: W3C Trace Context (version 00) */
#define NTASK_TRACEPARENT_LEN	55
extern bool NtaskTraceparentValid(const char *tp, const char **why);

/*
 * A statement prepared once per backend with SPI_prepare + SPI_keepplan.
 * Declared as a static in the file that owns the SQL; "plan" starts NULL.
 *
 * The statement checks itself (spi_util.c): when prepared, the highest $N
 * in sql must be nargs and its result must have ncols columns (0: it
 * returns no rows), and every execution that returns a tuple table must
 * return ncols columns.  ncols comes second, written on a line of its own
 * after the name (.ncols = N, then the SQL text, nargs and the types), so
 * an initializer that leaves it out puts the SQL text in an int: a compile
 * error, not a silent 0.
 */
#define NTASK_PLAN_MAX_ARGS 28
typedef struct NtaskPlan
{
	const char *name;			/* for error messages */
	int			ncols;			/* result columns; 0: returns no rows */
	const char *sql;
	int			nargs;
	Oid			argtypes[NTASK_PLAN_MAX_ARGS];
	bool		as_caller;		/* run as the caller, not the owner */
	SPIPlanPtr	plan;
} NtaskPlan;

/* spi_util.c */
extern int	NtaskExecPlan(NtaskPlan *p, Datum *values, const char *nulls,
						  int expected_rc);
extern int	NtaskExecPlanCount(NtaskPlan *p, Datum *values, const char *nulls,
							   int expected_rc, long count);
extern bool NtaskPlansForCitus(void);
extern Datum NtaskInt8Array(Datum *elems, int n);
extern Datum NtaskGetDatum(int row, int col, bool *isnull);
extern text *NtaskGetText(int row, int col);
extern char *NtaskGetCString(int row, int col);
extern int64 NtaskGetInt64(int row, int col);
extern int32 NtaskGetInt32(int row, int col);
extern bool NtaskGetBool(int row, int col);
extern Datum NtaskTupGetDatum(SPITupleTable *tt, int row, int col, bool *isnull);
extern text *NtaskTupGetText(SPITupleTable *tt, int row, int col);
extern char *NtaskTupGetCString(SPITupleTable *tt, int row, int col);
extern int64 NtaskTupGetInt64(SPITupleTable *tt, int row, int col);
extern int32 NtaskTupGetInt32(SPITupleTable *tt, int row, int col);
extern bool NtaskTupGetBool(SPITupleTable *tt, int row, int col);
extern text *NtaskArgText(FunctionCallInfo fcinfo, int argno,
						  const char *argname, int maxlen);
extern int64 NtaskArgInt64(FunctionCallInfo fcinfo, int argno,
						   const char *argname);
extern int	NtaskArgArray(FunctionCallInfo fcinfo, int argno, const char *argname,
						  Oid elmtype, bool nulls_ok, Datum **elems, bool **nulls);
extern Jsonb *NtaskArgJsonb(FunctionCallInfo fcinfo, int argno,
							const char *argname);
extern void NtaskCheckPositiveInterval(Interval *iv, const char *argname);
pg_noreturn extern void NtaskTaskNotFound(int64 task_id);
extern void NtaskCheckTokenIssued(int64 task_id, int64 token, int64 current);
extern int64 NtaskTokenFloor(void);
extern Oid	NtaskCaller(void);
extern int64 NtaskIntervalUsecs(const Interval *iv);
extern Interval *NtaskUsecsInterval(int64 usecs);
extern bool NtaskTrySubxact(void (*fn) (void *arg), void *arg, ErrorData **edata);
extern void NtaskAudit(const char *actor, const char *action, int64 task_id,
					   const char *queue, const char *reason,
					   const char *from_state, const char *to_state);

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

/*
 * worker_shared.c: the worker's shared state, counters, wake-at-commit and
 * transaction helper (used by worker.c, dispatch.c and the SQL functions
 * that wake the worker; it calls neither of the first two)
 */
extern void NtaskShmemRequest(void);
extern void NtaskShmemStartup(void);
extern void NtaskWakeWorkerAtCommit(void);
extern void NtaskWakeLauncherAtCommit(void);
extern void NtaskWorkerHoldDatabase(const char *dbname);
extern int	NtaskWorkerSlots(void);
extern void NtaskWorkerRegister(void);

/* what a probe (or a worker) saw in its database */
#define NTASK_PROBE_NONE		0	/* nothing yet: it could not connect? */
#define NTASK_PROBE_INSTALLED	1
#define NTASK_PROBE_ABSENT		2

/* a DDL that needs its database alone holds workers off that long */
#define NTASK_HOLD_MS			10000

extern void NtaskLauncherAttach(void);
extern void NtaskLauncherDetach(void);
extern uint32 NtaskLauncherProbeGeneration(void);
extern void NtaskLauncherSetProblem(const char *problem, int nserving);
extern void NtaskSlotBind(int i, Oid dboid, const char *dbname, bool serving);
extern void NtaskSlotServe(int i);
extern void NtaskSlotRename(int i, const char *dbname);
extern void NtaskSlotFree(int i);
extern pid_t NtaskSlotPid(int i);
extern Oid	NtaskSlotPeek(int i, int *probe, TimestampTz *hold_until);
extern pid_t NtaskWorkerTakeSlot(int i);
extern void NtaskWorkerReleaseSlot(void);
extern void NtaskWorkerSetProbe(int probe);
extern void NtaskWorkerSetState(const char *state);
extern void NtaskWorkerSetLastTick(TimestampTz now);
/* ntask.worker_stats counters, in the view's column order */
typedef enum NtaskCounter
{
	NTASK_COUNT_DISPATCHED,
	NTASK_COUNT_ACCEPTED,
	NTASK_COUNT_TRANSIENT,
	NTASK_COUNT_PERMANENT,
	NTASK_COUNT_UNKNOWN,
	NTASK_COUNT_RECONCILED,
	NTASK_COUNT_EXPIRED_LEASES,
	NTASK_COUNT_REPAIRED,
	NTASK_COUNT_PRUNED,
	/* after last_error, last_error_at and database in the view */
	NTASK_COUNT_BREAKER_OPENED,
	NTASK_COUNT_BREAKER_CLOSED,
	NTASK_COUNT_BREAKER_PROBES,
	NTASK_COUNT_BREAKER_SKIPS,
	NTASK_NCOUNTERS
} NtaskCounter;

extern void NtaskWorkerCount(NtaskCounter counter, int64 n);
extern void NtaskWorkerSetInFlight(int n);
extern void NtaskWorkerError(const char *msg);
extern bool NtaskWorkerRunXact(void (*fn) (void *arg), void *arg,
							   const char *what);

/* waiter.c: the waiter slots and the wake-at-commit of waiters */
extern void NtaskWaitShmemRequest(void);
extern void NtaskWaitShmemStartup(void);
extern bool NtaskWaiterAvailable(void);
extern bool NtaskWaiterBusy(void);
extern void NtaskWaiterRegister(const char *queue, int max_tasks,
								TimestampTz until);
extern TimestampTz NtaskWaiterRearm(TimestampTz now);
extern TimestampTz NtaskWaiterHint(bool *woken);
extern void NtaskWaiterSetCapped(bool capped);
extern void NtaskWaiterUnregister(bool filled);
extern void NtaskWakeCappedAtCommit(const char *queue, int nfreed);
extern void NtaskWakeWaitersAtCommit(const char *queue, int ndue,
									 TimestampTz later);

/* fair.c */
extern void NtaskFairShmemRequest(void);
extern void NtaskFairShmemStartup(void);
extern text *NtaskFairCursor(const char *queue);
extern void NtaskFairAdvance(const char *queue, text *key);
extern text *NtaskFairCursorShard(const char *queue, int16 shard);
extern void NtaskFairAdvanceShard(const char *queue, int16 shard, text *key);

/* limit.c: token buckets of rate limits */
extern void NtaskLimitShmemRequest(void);
extern void NtaskLimitShmemStartup(void);
extern bool NtaskLimitAvailable(void);
#define NTASK_LIMIT_QUEUE	1
#define NTASK_LIMIT_KEY		2
extern int	NtaskLimitTake(const char *queue, int qn, int64 qper_usecs,
						   const char *key, int keylen, int kn,
						   int64 kper_usecs, TimestampTz now,
						   TimestampTz *next);
extern bool NtaskShareTake(const char *queue, float4 share, bool retry);
extern TimestampTz NtaskShmemEvict(HTAB *htab, TimestampTz now,
								   TimestampTz (*evictable_at) (void *entry),
								   void *keep);
extern void *NtaskShmemEnter(HTAB *htab, const void *id, int slots,
							 TimestampTz now, TimestampTz *evict_after,
							 TimestampTz (*evictable_at) (void *entry),
							 void *keep, bool *found);
extern bool NtaskShmemFullLog(TimestampTz *logged_at, TimestampTz now);

#endif							/* NTASK_BASE_H */
