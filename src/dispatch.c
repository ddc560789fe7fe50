/*-------------------------------------------------------------------------
 *
 * dispatch.c
 *	  HTTP dispatch in the background worker: claim due tasks of http
 *	  queues, mark them invoked, send them with the libcurl multi interface,
 *	  classify what came back and record it with ntask_transition.
 *
 * A request moves through four lists (docs/worker.md "Dispatch"):
 *
 *	claim		(transaction)	ntask_claim, and in the same transaction
 *								ntask_invoked for every task to be sent;
 *								once committed -> dq_running (sent at once,
 *								or a reconcile GET), or dq_finished for a
 *								task that must not be sent (host not
 *								allowed, key unusable as a header)
 *	invoke		(transaction)	a reconcile answered 404: ntask_heartbeat
 *								and ntask_invoked for dq_to_invoke;
 *								committed before the first byte leaves ->
 *								dq_running
 *	send		(no transaction) curl; a finished transfer is classified ->
 *								dq_finished (or, a reconcile answered 404,
 *								to dq_to_invoke)
 *	record		(transaction)	ntask_transition for dq_finished: alike
 *								results with one ntask_transition_many,
 *								the rest in one statement (one
 *								subtransaction per result if that
 *								fails); done by the round's first claim
 *								transaction, before it claims (the claim
 *								in a subtransaction), so a round is one
 *								commit; by a transaction of its own when
 *								no claim follows
 *
 * Every request has its own memory context and curl easy handle; nothing
 * it owns outlives it.  If a transaction fails, the requests it was about
 * are dropped: their leases expire and housekeeping releases them (an
 * invoked attempt then counts as outcome unknown), so a failure here can
 * delay a task but never record it as not sent when it may have left.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/dispatch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "context.h"
#include "ntask_base.h"
#include "ntask_worker.h"
#include "shard.h"
#include "spi_util.h"
#include "target.h"
#include "worker_settings.h"
#include "worker_shared.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "http_parse.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define DQ_WORKER_NAME "ntask worker"
#define DQ_KEEPALIVE_MAX_IDLE_S 4	/* keep_alive: reuse idle connections */
#define DQ_QUEUE_LEN NTASK_QUEUE_BUF

typedef enum DqKind
{
	DQ_SEND,
	DQ_RECONCILE
} DqKind;

/* one task on its way out (or back) */
typedef struct DqReq
{
	struct DqReq *next;
	MemoryContext cxt;
	char		queue[DQ_QUEUE_LEN];
	NtaskHttpTarget *target;
	int64		task_id;
	int64		token;
	int32		attempt;
	char	   *task_key;
	char	   *body;
	char	   *traceparent;	/* this attempt's (the claim's context), or NULL */
	DqKind		kind;
	bool		confirmed;		/* ntask_invoked answered applied/duplicate */
	bool		reconciled;		/* a reconcile GET answered 404 first */
	int64		lease_ms;		/* the queue's lease, for a heartbeat */
	char	   *refused_addr;	/* connect refused: this address */
	CURLU	   *curlu;			/* the URL being fetched, as curl parsed it */
	int			record_tries;	/* failed attempts to record the result */
	TimestampTz next_record;	/* do not try again before */
	CURL	   *easy;
	struct curl_slist *hdrs;
	int64		received;
	size_t		body_sent;		/* bytes of body given to curl (dq_read_cb) */
	int64		retry_after_s;	/* -1: none */
	char		on_rate_limited;	/* the queue's, at claim: 'r'etry, 'k'ey, 'q'ueue */
	bool		rate_limited;	/* a 429 or 503 with Retry-After came back */
	/* the classification, for ntask_transition */
	const char *to_state;
	const char *error_class;
	const char *stage;
	const char *outcome;
	char	   *detail;			/* jsonb text */
	NtaskCounter counter;		/* worker_stats counter */
} DqReq;

/* an http queue as of the last refresh */
typedef struct DqQueue
{
	char		name[DQ_QUEUE_LEN];
	Jsonb	   *target;
	int64		lease_ms;
	int			max_inflight;
	int			timeout_ms;
	int			breaker_limit;	/* NtaskBreakerClaimLimit, for the claim */
	char		on_rate_limited;	/* 'r'etry, pause_'k'ey, pause_'q'ueue */
} DqQueue;

static MemoryContext dq_cxt = NULL;
static MemoryContext dq_queues_cxt = NULL;
static DqQueue *dq_queues = NULL;
static int	dq_nqueues = 0;
static CURLM *dq_multi = NULL;

static DqReq *dq_claimed = NULL;	/* claimed, not yet committed */
static DqReq *dq_to_invoke = NULL;
static DqReq *dq_running = NULL;
static DqReq *dq_finished = NULL;
static int	dq_nrunning = 0;
static bool dq_more = false;	/* the last claim was full: look again */

/* a socket curl asked to be watched (dq_socket_cb) */
typedef struct DqSock
{
	curl_socket_t fd;
	int			what;			/* CURL_POLL_IN, _OUT or _INOUT */
} DqSock;

#define DQ_WAIT_EVENTS 64

static DqSock *dq_socks = NULL;
static int	dq_nsocks = 0;
static int	dq_maxsocks = 0;
static bool dq_socks_changed = true;	/* dq_wes must be built again */
static WaitEventSet *dq_wes = NULL;

/*
 * The worker calls the SQL API as itself (ntask.worker_role), like any
 * external worker: as_caller plans, so EXECUTE rights and each queue's
 * worker_role are checked against that role.  Their SQL names the schema
 * ntask is installed in, so it is built in dq_init; the column enums
 * follow its column lists there.
 */
typedef enum DqClaimCol
{
	DQ_CLAIM_TASK_ID = 1,
	DQ_CLAIM_TASK_KEY,
	DQ_CLAIM_BODY,				/* the payload as text */
	DQ_CLAIM_ATTEMPT,
	DQ_CLAIM_TOKEN,
	DQ_CLAIM_PRIOR_OUTCOME,
	DQ_CLAIM_TRACEPARENT,		/* the context's traceparent */
	DQ_CLAIM_NCOLS = DQ_CLAIM_TRACEPARENT
} DqClaimCol;

typedef enum DqClaimArg
{
	DQ_CLAIM_ARG_QUEUE,			/* $1 */
	DQ_CLAIM_ARG_WANT,			/* $2 */
	DQ_CLAIM_ARG_LEASE,			/* $3 */
	DQ_CLAIM_ARG_INVOKED,		/* $4, mark them invoked at the claim */
	DQ_CLAIM_NARGS
} DqClaimArg;

static NtaskPlan dq_claim_plan = {
	"worker claim",
	.ncols = DQ_CLAIM_NCOLS,
	NULL, DQ_CLAIM_NARGS,
	{TEXTOID, INT4OID, INTERVALOID, BOOLOID}, true
};

typedef enum DqInvokedCol
{
	DQ_INVOKED_TASK_ID = 1,
	DQ_INVOKED_RESULT,			/* ntask_invoked's answer */
	DQ_INVOKED_NCOLS = DQ_INVOKED_RESULT
} DqInvokedCol;

typedef enum DqInvokedArg
{
	DQ_INVOKED_ARG_TASK_IDS,	/* $1 */
	DQ_INVOKED_ARG_TOKENS,		/* $2 */
	DQ_INVOKED_NARGS
} DqInvokedArg;

static NtaskPlan dq_invoked_plan = {
	"worker invoked",
	.ncols = DQ_INVOKED_NCOLS,
	NULL, DQ_INVOKED_NARGS,
	{INT8ARRAYOID, INT8ARRAYOID}, true
};

typedef enum DqHeartbeatCol
{
	DQ_HEARTBEAT_HELD = 1,		/* the lease was extended */
	DQ_HEARTBEAT_NCOLS = DQ_HEARTBEAT_HELD
} DqHeartbeatCol;

typedef enum DqHeartbeatArg
{
	DQ_HEARTBEAT_ARG_TASK_ID,	/* $1 */
	DQ_HEARTBEAT_ARG_TOKEN,		/* $2 */
	DQ_HEARTBEAT_ARG_LEASE,		/* $3 */
	DQ_HEARTBEAT_NARGS
} DqHeartbeatArg;

static NtaskPlan dq_heartbeat_plan = {
	"worker heartbeat",
	.ncols = DQ_HEARTBEAT_NCOLS,
	NULL, DQ_HEARTBEAT_NARGS,
	{INT8OID, INT8OID, INTERVALOID}, true
};

/* the column of the three transition plans */
typedef enum DqTransitionCol
{
	DQ_TRANSITION_RESULT = 1,	/* applied, duplicate, conflict or stale */
	DQ_TRANSITION_NCOLS = DQ_TRANSITION_RESULT
} DqTransitionCol;

/*
 * the parameters of dq_transition_plan (ntask_transition's arguments) and
 * of dq_transition_many_plan (an array of each)
 */
typedef enum DqTransitionArg
{
	DQ_TRANSITION_ARG_TASK_ID,	/* $1 */
	DQ_TRANSITION_ARG_TOKEN,	/* $2 */
	DQ_TRANSITION_ARG_TO_STATE, /* $3 */
	DQ_TRANSITION_ARG_ERROR_CLASS,	/* $4 */
	DQ_TRANSITION_ARG_DETAIL,	/* $5 */
	DQ_TRANSITION_ARG_RETRY_AT, /* $6 */
	DQ_TRANSITION_ARG_OUTCOME,	/* $7 */
	DQ_TRANSITION_ARG_STAGE,	/* $8 */
	DQ_TRANSITION_NARGS
} DqTransitionArg;

static NtaskPlan dq_transition_plan = {
	"worker transition",
	.ncols = DQ_TRANSITION_NCOLS,
	NULL, DQ_TRANSITION_NARGS,
	{INT8OID, INT8OID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TEXTOID, TEXTOID},
	true
};
static NtaskPlan dq_transition_many_plan = {
	"worker transition batch",
	.ncols = DQ_TRANSITION_NCOLS,
	NULL, DQ_TRANSITION_NARGS,
	{INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
	TIMESTAMPTZARRAYOID, TEXTARRAYOID, TEXTARRAYOID},
	true
};

/* the parameters of dq_transition_group (ntask_transition_many's) */
typedef enum DqGroupArg
{
	DQ_GROUP_ARG_TASK_IDS,		/* $1 */
	DQ_GROUP_ARG_TOKENS,		/* $2 */
	DQ_GROUP_ARG_TO_STATE,		/* $3 */
	DQ_GROUP_ARG_ERROR_CLASS,	/* $4 */
	DQ_GROUP_ARG_DETAIL,		/* $5 */
	DQ_GROUP_ARG_OUTCOME,		/* $6 */
	DQ_GROUP_ARG_STAGE,			/* $7 */
	DQ_GROUP_NARGS
} DqGroupArg;

/*
 * A group of alike results, one ntask_transition_many call (its plain
 * variant's sql is set by NtaskDispatchInit, run as the caller).  On a
 * distributed install a batch would be a multi-shard statement: the
 * routed path does without it (dq_group_none), and every result is its
 * own routed ntask_transition (dq_record_batch groups only where the pair
 * runs).
 */
static bool
dq_group_none(Datum *values, char *nulls)
{
	return false;
}

static NtaskPair dq_transition_group = NTASK_PAIR("worker transition group",
												  NTASK_PLAIN(DQ_TRANSITION_NCOLS, NULL,
															  DQ_GROUP_NARGS, SPI_OK_SELECT),
												  NTASK_ROUTED_NONE(dq_group_none),
												  INT8ARRAYOID, INT8ARRAYOID, TEXTOID, TEXTOID,
												  TEXTOID, TEXTOID, TEXTOID);
typedef enum DqQueuesCol
{
	DQ_QUEUES_QUEUE = 1,
	DQ_QUEUES_TARGET,
	DQ_QUEUES_LEASE_MS,
	DQ_QUEUES_ON_RATE_LIMITED,
	DQ_QUEUES_NCOLS = DQ_QUEUES_ON_RATE_LIMITED
} DqQueuesCol;

static NtaskPlan dq_queues_plan = {
	"worker queues",
	.ncols = DQ_QUEUES_NCOLS,
	"SELECT q.queue, q.target, "
	"  (EXTRACT(EPOCH FROM q.lease) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8, "
	"  q.on_rate_limited "
	"FROM ntask.queue q "
	"WHERE (q.target OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'http' "
	"ORDER BY q.queue",
	0, {InvalidOid}
};

/*
 * A provider's rate limit (on_rate_limited): a 429 or 503
 * with Retry-After holds every task of the queue (pause_queue) or of the
 * task's partition key (pause_key) until then.  Run as the owner (the
 * worker's role has no right to write ntask.queue), in the transaction
 * that records the result, before it: the task's key is read (no lock),
 * then the queue row, then the key's row, then the task rows (the lock
 * order of docs/design.md).  The latest end wins; a key pause needs the
 * task's key (a task without one is only retried).  Three statements, not
 * one: on a distributed install ntask.queue and ntask.key_pause are
 * reference tables, which Citus does not write in a statement that reads
 * a distributed table; the key is read by a statement routed to the
 * task's shard.  dq_pause_queue_plan and dq_pause_keys_until_plan take
 * the queue and the end (DqPauseArg).
 */
typedef enum DqPauseArg
{
	DQ_PAUSE_ARG_QUEUE,			/* $1 */
	DQ_PAUSE_ARG_UNTIL,			/* $2 */
	DQ_PAUSE_NARGS
} DqPauseArg;

static NtaskPlan dq_pause_queue_plan = {
	"worker pause queue",
	.ncols = 0,
	"UPDATE ntask.queue q SET paused_until = GREATEST(q.paused_until, $2) "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1",
	DQ_PAUSE_NARGS, {TEXTOID, TIMESTAMPTZOID}
};
typedef enum DqPauseTaskKeyArg
{
	DQ_PAUSE_TASK_KEY_ARG_TASK_ID,	/* $1 */
	DQ_PAUSE_TASK_KEY_NARGS
} DqPauseTaskKeyArg;

typedef enum DqPauseTaskKeyCol
{
	DQ_PAUSE_TASK_KEY_KEY = 1,	/* the task's partition key */
	DQ_PAUSE_TASK_KEY_SHARD,
	DQ_PAUSE_TASK_KEY_NCOLS = DQ_PAUSE_TASK_KEY_SHARD
} DqPauseTaskKeyCol;

static NtaskPlan dq_pause_task_key_plan = {
	"worker pause key (the task's key)",
	.ncols = DQ_PAUSE_TASK_KEY_NCOLS,
	"SELECT t.partition_key, t.shard FROM ntask.task t "
	"WHERE t.task_id OPERATOR(pg_catalog.=) $1 " NTASK_SHARD_OF("t", "$1")
	"  AND t.partition_key IS NOT NULL",
	DQ_PAUSE_TASK_KEY_NARGS, {INT8OID}
};
static NtaskPlan dq_pause_keys_until_plan = {
	"worker pause key (queue)",
	.ncols = 1,
	"UPDATE ntask.queue q SET keys_paused_until = GREATEST(q.keys_paused_until, $2) "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 "
	"RETURNING 1",
	DQ_PAUSE_NARGS, {TEXTOID, TIMESTAMPTZOID}
};
typedef enum DqPauseKeyArg
{
	DQ_PAUSE_KEY_ARG_QUEUE,		/* $1 */
	DQ_PAUSE_KEY_ARG_UNTIL,		/* $2 */
	DQ_PAUSE_KEY_ARG_KEY,		/* $3 */
	DQ_PAUSE_KEY_ARG_REASON,	/* $4 */
	DQ_PAUSE_KEY_ARG_SHARD,		/* $5, the task's */
	DQ_PAUSE_KEY_NARGS
} DqPauseKeyArg;

static NtaskPlan dq_pause_key_plan = {
	"worker pause key",
	.ncols = 0,
	"INSERT INTO ntask.key_pause AS k (queue, partition_key, until, reason, set_by, shard) "
	"VALUES ($1, $3, $2, $4, '" DQ_WORKER_NAME "', $5) "
	"ON CONFLICT (queue, partition_key) DO UPDATE SET "
	"  until = GREATEST(k.until, excluded.until), reason = excluded.reason, "
	"  set_at = excluded.set_at, set_by = excluded.set_by",
	DQ_PAUSE_KEY_NARGS, {TEXTOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, INT2OID}
};

static int	dq_inflight_of(const char *queue);
static void dq_free(DqReq *r);
static void dq_push(DqReq **list, DqReq *r);
static void dq_finish(DqReq *r, const char *to_state, const char *error_class,
					  const char *stage, const char *outcome, char *detail,
					  NtaskCounter counter);
static void dq_claim_step(void *arg);
static bool dq_sendable(DqReq *r);
static void dq_mark_invoked(DqReq **reqs, int n);
static void dq_route(DqReq *r);
static void dq_claim(void);
static void dq_record_one(void *arg);
static void dq_record_batch(void *arg);
static void dq_pause_step(void *arg);
static TimestampTz dq_retry_at(DqReq *r);
static curl_socket_t dq_open_socket(void *clientp, curlsocktype purpose,
									struct curl_sockaddr *address);
static void dq_invoke_step(void *arg);
static void dq_record_step(void *arg);
static void dq_queues_step(void *arg);
static bool dq_start(DqReq *r);
static bool dq_set_url(DqReq *r, const char *url);
static void dq_classify(DqReq *r, CURLcode code);
static void dq_flush(bool record);
static void dq_recorded(bool ok);
static bool dq_record_due(void);
static size_t dq_write_cb(char *ptr, size_t size, size_t nmemb, void *userdata);
static size_t dq_read_cb(char *buf, size_t size, size_t nitems, void *userdata);
static char *dq_curl_detail(CURLcode code);
static int	dq_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
						 void *socketp);
static void dq_build_wait_set(void);
static void dq_done(void);

/*
 * NtaskDispatchInit
 *		Once per worker, after the extension was found in schema: curl,
 *		memory, and the statements (they call the API functions by their
 *		schema-qualified names).
 */
void
NtaskDispatchInit(const char *schema)
{
	const char *s = quote_identifier(schema);
	MemoryContext old;

	if (dq_cxt != NULL)
		return;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		ereport(FATAL, (errmsg("ntask worker: curl_global_init failed")));
	dq_multi = curl_multi_init();
	if (dq_multi == NULL)
		ereport(FATAL, (errmsg("ntask worker: curl_multi_init failed")));

	dq_cxt = AllocSetContextCreate(TopMemoryContext, "ntask dispatch",
								   ALLOCSET_DEFAULT_SIZES);
	dq_queues_cxt = AllocSetContextCreate(dq_cxt, "ntask dispatch queues",
										  ALLOCSET_SMALL_SIZES);
	dq_maxsocks = 16;
	dq_socks = MemoryContextAlloc(dq_cxt, sizeof(DqSock) * dq_maxsocks);
	if (curl_multi_setopt(dq_multi, CURLMOPT_SOCKETFUNCTION, dq_socket_cb) != CURLM_OK)
		ereport(FATAL, (errmsg("ntask worker: CURLMOPT_SOCKETFUNCTION failed")));
	old = MemoryContextSwitchTo(dq_cxt);
	dq_claim_plan.sql = psprintf(
		"SELECT c.task_id, c.task_key, c.payload::pg_catalog.text, c.attempt, c.token, "
		"  c.prior_outcome, c.context OPERATOR(pg_catalog.->>) 'traceparent' "
		"FROM %s.ntask_claim($1, '" DQ_WORKER_NAME "', $2, $3, invoked => $4) c", s);
	dq_heartbeat_plan.sql = psprintf(
		"SELECT %s.ntask_heartbeat($1, $2, $3) IS NOT NULL", s);
	dq_invoked_plan.sql = psprintf(
		"SELECT i.id, %s.ntask_invoked(i.id, i.tok) "
		"FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS i(id, tok)", s);
	dq_transition_plan.sql = psprintf(
		"SELECT r.result FROM %s.ntask_transition($1, $2, $3, $4, $5, $6, $7, $8) r",
		s);
	dq_transition_many_plan.sql = psprintf(
		"SELECT r.result "
		"FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), "
		"  pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5), "
		"  pg_catalog.unnest($6), pg_catalog.unnest($7), pg_catalog.unnest($8)) "
		"  AS i(id, tok, st, ec, det, ra, oc, sg), "
		"LATERAL %s.ntask_transition(i.id, i.tok, i.st, i.ec, i.det::pg_catalog.jsonb, "
		"  i.ra, i.oc, i.sg) r",
		s);
	dq_transition_group.v[NTASK_PATH_PLAIN].plan.as_caller = true;
	dq_transition_group.v[NTASK_PATH_PLAIN].plan.sql = psprintf(
		"SELECT r.result "
		"FROM %s.ntask_transition_many($1, $2, $3, $4, $5::pg_catalog.jsonb, "
		"  NULL::pg_catalog.timestamptz, $6, $7) r",
		s);
	MemoryContextSwitchTo(old);
}

static int
dq_inflight_of(const char *queue)
{
	int			n = 0;
	DqReq	   *r;

	for (r = dq_running; r; r = r->next)
		n += strcmp(r->queue, queue) == 0;
	for (r = dq_to_invoke; r; r = r->next)
		n += strcmp(r->queue, queue) == 0;
	return n;
}

/*
 * NtaskDispatchInFlight
 *		Requests that hold a slot of ntask.http_max_inflight: running,
 *		waiting to be invoked, or finished with a result that failed to be
 *		recorded and waits to be tried again.  A result due to be recorded
 *		now does not count: the next claim's transaction records it before
 *		it claims (dq_claim), and if that transaction fails, the claim is
 *		rolled back with it.
 */
int
NtaskDispatchInFlight(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;
	DqReq	   *r;

	for (r = dq_to_invoke; r; r = r->next)
		n++;
	for (r = dq_finished; r; r = r->next)
		n += r->next_record > now;
	return n + dq_nrunning;
}

static void
dq_push(DqReq **list, DqReq *r)
{
	r->next = *list;
	*list = r;
}

static void
dq_free(DqReq *r)
{
	if (r->easy)
		curl_easy_cleanup(r->easy);
	if (r->curlu)
		curl_url_cleanup(r->curlu);
	if (r->hdrs)
		curl_slist_free_all(r->hdrs);
	MemoryContextDelete(r->cxt);
}

/* dq_set_result: what ntask_transition is to record for r */
static void
dq_set_result(DqReq *r, const char *to_state, const char *error_class,
			  const char *stage, const char *outcome, char *detail,
			  NtaskCounter counter)
{
	r->to_state = to_state;
	r->error_class = error_class;
	r->stage = stage;
	r->outcome = outcome;
	r->detail = detail;
	r->counter = counter;
}

/* dq_finish: classify r and put it on dq_finished */
static void
dq_finish(DqReq *r, const char *to_state, const char *error_class,
		  const char *stage, const char *outcome, char *detail,
		  NtaskCounter counter)
{
	dq_set_result(r, to_state, error_class, stage, outcome, detail, counter);
	dq_push(&dq_finished, r);
}

/* ---- queues ---- */

static void
dq_queues_step(void *arg)
{
	int			n = NtaskExecPlan(&dq_queues_plan, NULL, NULL, SPI_OK_SELECT);
	SPITupleTable *tt = SPI_tuptable;
	int			i;
	MemoryContext old;

	MemoryContextReset(dq_queues_cxt);
	dq_queues = NULL;
	dq_nqueues = 0;
	old = MemoryContextSwitchTo(dq_queues_cxt);
	dq_queues = palloc0(sizeof(DqQueue) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		DqQueue    *q = &dq_queues[dq_nqueues];
		bool		isnull;
		char	   *name = NtaskTupGetCString(tt, i, DQ_QUEUES_QUEUE);
		Jsonb	   *target = DatumGetJsonbPCopy(NtaskTupGetDatum(tt, i, DQ_QUEUES_TARGET, &isnull));
		MemoryContext probe = AllocSetContextCreate(CurrentMemoryContext,
													"ntask target check",
													ALLOCSET_SMALL_SIZES);
		MemoryContext inner = MemoryContextSwitchTo(probe);
		NtaskHttpTarget *t;

		volatile bool valid = true;

		/* a target written around ntask_queue_set may be bad: skip it */
		PG_TRY();
		{
			t = NtaskParseHttpTarget(target);
			q->timeout_ms = t->timeout_ms;
			q->max_inflight = t->max_inflight;
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(inner);
			FlushErrorState();
			valid = false;
		}
		PG_END_TRY();
		MemoryContextSwitchTo(inner);
		MemoryContextDelete(probe);
		if (!valid)
		{
			ereport(LOG,
					(errmsg("ntask worker: queue \"%s\" has an invalid http target; not dispatching it",
							name)));
			continue;
		}
		strlcpy(q->name, name, DQ_QUEUE_LEN);
		q->target = target;
		q->lease_ms = Max(NtaskTupGetInt64(tt, i, DQ_QUEUES_LEASE_MS),
						  (int64) q->timeout_ms + ntask_http_connect_timeout_ms + 1000);
		{
			char	   *orl = NtaskTupGetCString(tt, i, DQ_QUEUES_ON_RATE_LIMITED);

			q->on_rate_limited = orl == NULL ? 'r' :
				strcmp(orl, "pause_key") == 0 ? 'k' :
				strcmp(orl, "pause_queue") == 0 ? 'q' : 'r';
		}
		dq_nqueues++;
	}
	MemoryContextSwitchTo(old);
	NtaskBreakerLoad();			/* the breakers of these queues (breaker.c) */
}

/* NtaskDispatchRefreshQueues: reread the http queues (every tick) */
void
NtaskDispatchRefreshQueues(void)
{
	(void) NtaskWorkerRunXact(dq_queues_step, NULL, "ntask dispatch: read queues");
}

/* ---- claim ---- */

/*
 * dq_claim_step
 *		Claim for the queue *(int *) arg, in its own transaction, and mark
 *		the tasks that will be sent invoked in the same transaction: once it
 *		has committed they may be sent (the invoked mark is durable before
 *		the first byte leaves), and a crash before the commit leaves
 *		nothing claimed.
 */
/*
 * dq_claim_exec: the claim; only the traceparent of the context is sent,
 * so only it is built
 */
static int
dq_claim_exec(Datum *values)
{
	volatile int n = 0;

	ntask_context_trace_only = true;
	PG_TRY();
	{
		n = NtaskExecPlan(&dq_claim_plan, values, NULL, SPI_OK_SELECT);
	}
	PG_FINALLY();
	{
		ntask_context_trace_only = false;
	}
	PG_END_TRY();
	return n;
}

static void
dq_claim_step(void *arg)
{
	DqQueue    *q = &dq_queues[*(int *) arg];
	int			free_slots = ntask_http_max_inflight - (NtaskDispatchInFlight());
	int			want = free_slots;
	Datum		values[DQ_CLAIM_NARGS];
	SPITupleTable *tt;
	NtaskHttpTarget *target;
	bool		at_claim;
	int			n;
	int			i;
	DqReq	  **send;
	int			nsend = 0;
	DqReq	   *r;

	if (q->max_inflight > 0)
		want = Min(want, q->max_inflight - dq_inflight_of(q->name));
	if (q->breaker_limit >= 0)
		want = Min(want, q->breaker_limit); /* a half-open breaker's probe */
	want = Min(want, NTASK_MAX_CLAIM);
	if (want <= 0)
		return;
	values[DQ_CLAIM_ARG_QUEUE] = CStringGetTextDatum(q->name);
	values[DQ_CLAIM_ARG_WANT] = Int32GetDatum(want);
	values[DQ_CLAIM_ARG_LEASE] = IntervalPGetDatum(NtaskUsecsInterval(q->lease_ms * 1000));

	/*
	 * Every task claimed will be sent when the queue's host is allowed and
	 * it has no reconcile_url (a task whose prior outcome is unknown is then
	 * reconciled first, not sent): the claim marks them invoked itself, one
	 * statement less per round.  A task whose key is no valid header value
	 * is then recorded as a permanent failure of an invoked attempt, with a
	 * known outcome (the detail says nothing was sent).
	 */
	target = NtaskParseHttpTarget(q->target);
	at_claim = target->reconcile_url == NULL &&
		ntask_host_allowed(target->host, ntask_http_allowed_list);
	values[DQ_CLAIM_ARG_INVOKED] = BoolGetDatum(at_claim);
	n = dq_claim_exec(values);
	tt = SPI_tuptable;
	if (n == want)
		dq_more = true;

	for (i = 0; i < n; i++)
	{
		MemoryContext cxt = AllocSetContextCreate(dq_cxt, "ntask request",
												  ALLOCSET_SMALL_SIZES);
		MemoryContext old = MemoryContextSwitchTo(cxt);
		char	   *prior;

		r = palloc0(sizeof(DqReq));
		r->cxt = cxt;
		r->kind = DQ_SEND;
		dq_push(&dq_claimed, r);	/* freed by dq_claim if this fails */
		strlcpy(r->queue, q->name, DQ_QUEUE_LEN);
		r->target = NtaskParseHttpTarget(q->target);
		r->lease_ms = q->lease_ms;
		r->task_id = NtaskTupGetInt64(tt, i, DQ_CLAIM_TASK_ID);
		r->task_key = NtaskTupGetCString(tt, i, DQ_CLAIM_TASK_KEY);
		r->body = NtaskTupGetCString(tt, i, DQ_CLAIM_BODY);
		r->attempt = NtaskTupGetInt32(tt, i, DQ_CLAIM_ATTEMPT);
		r->token = NtaskTupGetInt64(tt, i, DQ_CLAIM_TOKEN);
		prior = NtaskTupGetCString(tt, i, DQ_CLAIM_PRIOR_OUTCOME);
		r->traceparent = NtaskTupGetCString(tt, i, DQ_CLAIM_TRACEPARENT);
		r->retry_after_s = -1;
		r->on_rate_limited = q->on_rate_limited;
		MemoryContextSwitchTo(old);

		if (prior != NULL && strcmp(prior, "unknown") == 0 &&
			r->target->reconcile_url != NULL)
			r->kind = DQ_RECONCILE;
	}

	/* the ones to send now: invoked, in this transaction */
	send = palloc(sizeof(DqReq *) * Max(n, 1));
	for (r = dq_claimed; r; r = r->next)
		if (dq_sendable(r) && r->kind == DQ_SEND)
			send[nsend++] = r;
	if (at_claim)
	{
		for (i = 0; i < nsend; i++)
			send[i]->confirmed = true;	/* the claim marked them */
	}
	else if (nsend > 0)
		dq_mark_invoked(send, nsend);
}

/*
 * dq_sendable
 *		May r be sent (or reconciled)?  If not, set the result to record
 *		for it (repair, nothing was sent) and return false.
 */
static bool
dq_sendable(DqReq *r)
{
	if (!ntask_host_allowed(r->target->host, ntask_http_allowed_list))
		dq_set_result(r, "repair_required", "permanent", "config", NULL,
					  "{\"reason\": \"host not in ntask.http_allowed_hosts\"}",
					  NTASK_COUNT_PERMANENT);
	else if (!ntask_header_value_ok(r->task_key, strlen(r->task_key)))
		dq_set_result(r, "repair_required", "permanent", "config", NULL,
					  "{\"reason\": \"task_key is not a valid header value\"}",
					  NTASK_COUNT_PERMANENT);
	else if (r->kind == DQ_RECONCILE &&
			 !ntask_host_allowed(r->target->reconcile_host, ntask_http_allowed_list))
		dq_set_result(r, "repair_required", "permanent", "config", NULL,
					  "{\"reason\": \"reconcile_url host not in ntask.http_allowed_hosts\"}",
					  NTASK_COUNT_PERMANENT);
	else
		return true;
	return false;
}

/*
 * dq_mark_invoked
 *		ntask_invoked for reqs[0..n-1], in one statement; sets confirmed
 *		on those that may be sent (applied, or duplicate: already ours).
 */
static void
dq_mark_invoked(DqReq **reqs, int n)
{
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *toks = palloc(sizeof(Datum) * n);
	Datum		values[DQ_INVOKED_NARGS];
	SPITupleTable *tt;
	int			rows;
	int			i;
	int			j;

	for (i = 0; i < n; i++)
	{
		reqs[i]->confirmed = false;
		ids[i] = Int64GetDatum(reqs[i]->task_id);
		toks[i] = Int64GetDatum(reqs[i]->token);
	}
	values[DQ_INVOKED_ARG_TASK_IDS] = NtaskInt8Array(ids, n);
	values[DQ_INVOKED_ARG_TOKENS] = NtaskInt8Array(toks, n);
	rows = NtaskExecPlan(&dq_invoked_plan, values, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	for (i = 0; i < rows; i++)
	{
		int64		id = NtaskTupGetInt64(tt, i, DQ_INVOKED_TASK_ID);
		char	   *res = NtaskTupGetCString(tt, i, DQ_INVOKED_RESULT);

		for (j = 0; j < n; j++)
			if (reqs[j]->task_id == id && strcmp(res, "stale") != 0)
				reqs[j]->confirmed = true;
	}
}

/*
 * dq_route
 *		A claim (with its invoked marks) committed: route each task it
 *		handed out.  Not sendable -> dq_finished, reconcile -> started at
 *		once (a GET, not an effect), send -> started if its invoked mark
 *		was confirmed, else dropped (its lease expires; nothing was sent).
 */
static void
dq_route(DqReq *r)
{
	if (r->to_state != NULL)
		dq_push(&dq_finished, r);	/* dq_sendable said no */
	else if (r->kind == DQ_RECONCILE || r->confirmed)
	{
		if (!dq_start(r))
			dq_free(r);			/* its lease expires; nothing was sent */
	}
	else
		dq_free(r);
}

/* one claim transaction of dq_claim */
typedef struct DqClaimXact
{
	int			qi;				/* the queue, in dq_queues */
	bool		record;			/* record the due results first */
	bool		claimed;		/* the claim step completed */
} DqClaimXact;

/*
 * dq_claim_xact
 *		The claim of one queue; the first of a round also records the
 *		results due (dq_record_step, in subtransactions of its own), so a
 *		round is one commit.  Then the claim runs in a subtransaction: a
 *		claim that fails (a lock timeout, a missing worker_role grant) is
 *		logged and rolled back alone, and the results still commit.
 */
static void
dq_claim_xact(void *arg)
{
	DqClaimXact *x = (DqClaimXact *) arg;
	ErrorData  *edata;

	if (!x->record)
	{
		dq_claim_step(&x->qi);
		x->claimed = true;
		return;
	}
	dq_record_step(NULL);
	if (NtaskTrySubxact(dq_claim_step, &x->qi, &edata))
	{
		x->claimed = true;
		return;
	}
	NtaskWorkerError(edata->message);
	ereport(LOG,
			(errmsg("ntask worker: ntask dispatch: claim failed: %s", edata->message)));
	FreeErrorData(edata);
}

/*
 * dq_claim
 *		Claim queue by queue, each in its own transaction, so a queue whose
 *		claim fails does not stop the others; the first transaction also
 *		records the round's results (dq_claim_xact).  Only once a claim has
 *		committed, route what it handed out.
 */
static void
dq_claim(void)
{
	int			qi;
	bool		record = dq_finished != NULL && dq_record_due();

	dq_more = false;
	for (qi = 0; qi < dq_nqueues; qi++)
	{
		DqReq	   *r;
		DqReq	   *next;
		bool		ok;
		DqClaimXact x;

		if (NtaskDispatchInFlight() >= ntask_http_max_inflight)
			break;
		/* an open breaker: claim nothing, send nothing, spend nothing */
		dq_queues[qi].breaker_limit =
			NtaskBreakerClaimLimit(dq_queues[qi].name,
								   dq_inflight_of(dq_queues[qi].name));
		if (dq_queues[qi].breaker_limit == 0)
			continue;
		dq_claimed = NULL;
		x.qi = qi;
		x.record = record;
		x.claimed = false;
		ok = NtaskWorkerRunXact(dq_claim_xact, &x,
								record ? "ntask dispatch: record results and claim" :
								"ntask dispatch: claim");
		if (record)
			dq_recorded(ok);
		record = false;
		for (r = dq_claimed; r; r = next)
		{
			next = r->next;
			if (!ok || !x.claimed)
				dq_free(r);		/* rolled back: the task was never ours */
			else
				dq_route(r);
		}
		dq_claimed = NULL;
	}
}

/* ---- invoke ---- */

/*
 * dq_invoke_step
 *		For dq_to_invoke (tasks whose reconcile GET answered 404): renew the
 *		lease (the GET took time; send nothing for a task that is no longer
 *		ours), then mark them invoked, in one transaction committed before
 *		any of them is sent.
 */
static void
dq_invoke_step(void *arg)
{
	DqReq	   *r;
	DqReq	  **reqs;
	int			n = 0;

	for (r = dq_to_invoke; r; r = r->next)
	{
		r->confirmed = false;
		n++;
	}
	reqs = palloc(sizeof(DqReq *) * Max(n, 1));
	n = 0;
	for (r = dq_to_invoke; r; r = r->next)
	{
		if (r->reconciled)
		{
			Datum		hv[DQ_HEARTBEAT_NARGS];

			hv[DQ_HEARTBEAT_ARG_TASK_ID] = Int64GetDatum(r->task_id);
			hv[DQ_HEARTBEAT_ARG_TOKEN] = Int64GetDatum(r->token);
			hv[DQ_HEARTBEAT_ARG_LEASE] = IntervalPGetDatum(NtaskUsecsInterval(r->lease_ms * 1000));
			(void) NtaskExecPlan(&dq_heartbeat_plan, hv, NULL, SPI_OK_SELECT);
			if (!NtaskTupGetBool(SPI_tuptable, 0, DQ_HEARTBEAT_HELD))
				continue;		/* stays unconfirmed: never sent */
		}
		reqs[n++] = r;
	}
	if (n > 0)
		dq_mark_invoked(reqs, n);
}

/* ---- send ---- */

static size_t
dq_write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	DqReq	   *r = (DqReq *) userdata;

	r->received += (int64) (size * nmemb);
	if (r->received > ntask_http_max_response_bytes)
		return 0;				/* cut the transfer; the status is known */
	return size * nmemb;
}

/*
 * dq_read_cb
 *		CURLOPT_READFUNCTION: the request body, once.  There is no seek
 *		callback, so libcurl cannot rewind it: see dq_start.
 */
static size_t
dq_read_cb(char *buf, size_t size, size_t nitems, void *userdata)
{
	DqReq	   *r = (DqReq *) userdata;
	size_t		len = strlen(r->body) - r->body_sent;

	len = Min(len, size * nitems);
	memcpy(buf, r->body + r->body_sent, len);
	r->body_sent += len;
	return len;
}

/*
 * dq_set_url
 *		Give curl the URL as a parsed handle (CURLOPT_CURLU), parsed by the
 *		same URL API target.c checked the host with: the host checked
 *		against ntask.http_allowed_hosts is the host curl connects to.
 */
static bool
dq_set_url(DqReq *r, const char *url)
{
	if (r->curlu)
		curl_url_cleanup(r->curlu);
	r->curlu = curl_url();
	return r->curlu != NULL &&
		curl_url_set(r->curlu, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_easy_setopt(r->easy, CURLOPT_CURLU, r->curlu) == CURLE_OK;
}

/*
 * dq_task_header
 *		Whether a target's header line ("Name: value") is one the task sets
 *		itself: traceparent, when the task has a trace context (a target's
 *		own would make two).
 */
static bool
dq_task_header(DqReq *r, const char *line)
{
	return r->traceparent != NULL && pg_strncasecmp(line, "traceparent:", 12) == 0;
}

/* set one curl option on e, keeping the first failure in ok */
#define DQ_SET(opt, val) (ok = ok && curl_easy_setopt(e, opt, val) == CURLE_OK)

/*
 * dq_task_headers
 *		The headers every request of r carries (attempt, task id,
 *		Idempotency-Key, traceparent), then the target's own (but the
 *		task's), appended to r->hdrs.  curl copies header lines;
 *		r->task_key was checked for CR/LF.
 */
static void
dq_task_headers(DqReq *r)
{
	NtaskHttpTarget *t = r->target;
	MemoryContext old;
	char		line[128];
	int			i;

	snprintf(line, sizeof(line), "NTask-Attempt: %d", r->attempt);
	r->hdrs = curl_slist_append(r->hdrs, line);
	snprintf(line, sizeof(line), "NTask-Task-Id: " INT64_FORMAT, r->task_id);
	r->hdrs = curl_slist_append(r->hdrs, line);
	old = MemoryContextSwitchTo(r->cxt);
	r->hdrs = curl_slist_append(r->hdrs,
								psprintf("Idempotency-Key: %s", r->task_key));
	/* W3C Trace Context: the enqueue's trace, this attempt's span */
	if (r->traceparent != NULL)
		r->hdrs = curl_slist_append(r->hdrs,
									psprintf("traceparent: %s", r->traceparent));
	MemoryContextSwitchTo(old);
	if (r->kind == DQ_SEND)
	{
		r->hdrs = curl_slist_append(r->hdrs, "Expect:");
		if (!t->has_content_type)
			r->hdrs = curl_slist_append(r->hdrs, "Content-Type: application/json");
	}
	for (i = 0; i < t->nheaders; i++)
		if (!dq_task_header(r, t->headers[i]))
			r->hdrs = curl_slist_append(r->hdrs, t->headers[i]);
}

/*
 * dq_send_options
 *		A send's options on e: its connection reuse, the target's URL and
 *		the body.  False if curl refused one.
 */
static bool
dq_send_options(DqReq *r, CURL *e)
{
	NtaskHttpTarget *t = r->target;
	bool		ok = true;

	/*
	 * On a reused connection that dies without an answer, libcurl sends
	 * the request again on a fresh one ("Connection died, retrying a fresh
	 * connect"): a second request inside one attempt, whose answer would
	 * then be recorded as if the first had never left.  libcurl 7.88 has
	 * no switch for that retry, but before it resends a body it has begun
	 * to send it must rewind it, and a body given by a read callback
	 * without a seek callback cannot be rewound: the transfer fails
	 * instead (CURLE_SEND_FAIL_REWIND, classified unknown).  A retry with
	 * no body byte sent resends a request the provider cannot have acted
	 * on (it never had its body; a payload is never empty).  So a target
	 * with "keep_alive" reuses connections; the others still get a new
	 * connection for every send, closed afterwards.
	 */
	if (!t->keep_alive)
	{
		DQ_SET(CURLOPT_FRESH_CONNECT, 1L);
		DQ_SET(CURLOPT_FORBID_REUSE, 1L);
	}
	else
	{
		/*
		 * A connection idle for longer is not reused: most servers close
		 * idle connections after 5 s or more, and one closed while the
		 * request goes out makes its outcome unknown.
		 */
		DQ_SET(CURLOPT_MAXAGE_CONN, (long) DQ_KEEPALIVE_MAX_IDLE_S);
	}
	ok = ok && dq_set_url(r, t->url);
	r->body_sent = 0;
	DQ_SET(CURLOPT_POST, 1L);
	DQ_SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) strlen(r->body));
	DQ_SET(CURLOPT_READFUNCTION, dq_read_cb);
	DQ_SET(CURLOPT_READDATA, r);
	if (t->put)
		DQ_SET(CURLOPT_CUSTOMREQUEST, "PUT");
	return ok;
}

/*
 * dq_start
 *		Build r's curl handle and add it to the multi handle.  False (and
 *		nothing started) if curl refuses; the caller drops r, whose lease
 *		then expires.
 */
static bool
dq_start(DqReq *r)
{
	CURL	   *e = curl_easy_init();
	bool		ok = true;

	if (e == NULL)
		return false;
	r->easy = e;
	r->received = 0;
	r->retry_after_s = -1;

	DQ_SET(CURLOPT_PRIVATE, r);
	DQ_SET(CURLOPT_NOSIGNAL, 1L);
	DQ_SET(CURLOPT_PROTOCOLS_STR, "http,https");
	DQ_SET(CURLOPT_FOLLOWLOCATION, 0L);
	DQ_SET(CURLOPT_SSL_VERIFYPEER, 1L);
	DQ_SET(CURLOPT_SSL_VERIFYHOST, 2L);
	DQ_SET(CURLOPT_PROXY, "");	/* never an environment proxy */
	DQ_SET(CURLOPT_CONNECTTIMEOUT_MS, (long) ntask_http_connect_timeout_ms);
	DQ_SET(CURLOPT_TIMEOUT_MS, (long) r->target->timeout_ms);
	DQ_SET(CURLOPT_WRITEFUNCTION, dq_write_cb);
	DQ_SET(CURLOPT_WRITEDATA, r);
	DQ_SET(CURLOPT_USERAGENT, "ntask/" NTASK_VERSION);
	DQ_SET(CURLOPT_OPENSOCKETFUNCTION, dq_open_socket);
	DQ_SET(CURLOPT_OPENSOCKETDATA, r);

	dq_task_headers(r);
	if (r->kind == DQ_SEND)
		ok = ok && dq_send_options(r, e);
	else
	{
		ok = ok && dq_set_url(r, r->target->reconcile_url);
		DQ_SET(CURLOPT_HTTPGET, 1L);
	}
	ok = ok && r->hdrs != NULL;
	DQ_SET(CURLOPT_HTTPHEADER, r->hdrs);

	if (!ok || curl_multi_add_handle(dq_multi, e) != CURLM_OK)
	{
		ereport(LOG,
				(errmsg("ntask worker: could not start a transfer for task " INT64_FORMAT,
						r->task_id)));
		return false;
	}
	dq_push(&dq_running, r);
	dq_nrunning++;
	if (r->kind == DQ_SEND)
		NtaskWorkerCount(NTASK_COUNT_DISPATCHED, 1);
	NtaskBreakerSent(r->queue);
	return true;
}

#undef DQ_SET

/*
 * dq_open_socket
 *		curl's socket opener, called for every address curl is about to
 *		connect to: refuse every address that is not global unicast
 *		(loopback, link-local with 169.254.169.254, private, shared,
 *		unique-local, reserved, multicast, the IANA special-purpose blocks
 *		and IPv6 forms of such IPv4 addresses: http_parse.c), whatever
 *		name led there (a listed host that resolves to one, by mistake or
 *		DNS rebinding), unless ntask.http_allowed_hosts names the address or
 *		a range holding it (http_parse.c).  Nothing is sent on a refused
 *		connection; the task goes to repair at stage config, naming the host
 *		and the address.
 */
static curl_socket_t
dq_open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
	DqReq	   *r = (DqReq *) clientp;
	char		text[INET6_ADDRSTRLEN];
	bool		permitted = false;

	text[0] = '\0';
	if (address->family == AF_INET)
	{
		struct sockaddr_in *in = (struct sockaddr_in *) &address->addr;

		permitted = ntask_addr_permitted(4, (const unsigned char *) &in->sin_addr,
										 ntask_http_allowed_list);
		inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
	}
	else if (address->family == AF_INET6)
	{
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &address->addr;

		permitted = ntask_addr_permitted(6, in6->sin6_addr.s6_addr,
										 ntask_http_allowed_list);
		inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
	}
	if (!permitted)
	{
		MemoryContext old = MemoryContextSwitchTo(r->cxt);

		r->refused_addr = pstrdup(text[0] ? text : "(not IPv4 or IPv6)");
		MemoryContextSwitchTo(old);
		return CURL_SOCKET_BAD;
	}
	return socket(address->family, address->socktype, address->protocol);
}

static char *
dq_curl_detail(CURLcode code)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"curl_code\": %d, \"curl_error\": ", (int) code);
	escape_json(&buf, curl_easy_strerror(code));
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * dq_transfer_info
 *		Read what r's transfer left (status, Retry-After, whether any request
 *		byte left this host), tell the breaker, and free the transfer's curl
 *		handles.  Returns the HTTP status (0: no response); *not_sent says
 *		that nothing can have reached the provider.
 */
static long
dq_transfer_info(DqReq *r, CURLcode code, bool *not_sent)
{
	long		status = 0;
	curl_off_t	pretransfer = 0;
	long		request_size = 0;
	curl_off_t	ra = 0;

	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(r->easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer);
	curl_easy_getinfo(r->easy, CURLINFO_REQUEST_SIZE, &request_size);

	/*
	 * libcurl parses Retry-After (seconds or an HTTP-date); 0: none.
	 * ntask.http_retry_after_max = 0 ignores it: the queue's backoff
	 * decides, as without the header (not a retry at once).
	 */
	r->retry_after_s = -1;
	if (ntask_http_retry_after_max > 0 &&
		curl_easy_getinfo(r->easy, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
		r->retry_after_s = Min((int64) ra, (int64) ntask_http_retry_after_max);
	/* a provider's rate limit with an end: may pause the key or queue */
	r->rate_limited = (status == 429 || status == 503) && r->retry_after_s > 0;
	NtaskBreakerObserve(r->queue, status, (int) code, r->refused_addr != NULL);
	curl_multi_remove_handle(dq_multi, r->easy);
	curl_easy_cleanup(r->easy);
	r->easy = NULL;
	if (r->curlu)
		curl_url_cleanup(r->curlu);
	r->curlu = NULL;
	curl_slist_free_all(r->hdrs);
	r->hdrs = NULL;

	/*
	 * Nothing left this host: failures of name resolution, connect or the
	 * TLS handshake, or a transfer that never reached curl's pre-transfer
	 * point and wrote no request byte.  Anything else may have been seen
	 * by the provider, in particular a body libcurl refused to send again
	 * on a fresh connection (CURLE_SEND_FAIL_REWIND, see dq_start).  And
	 * once libcurl has read any of the body, the request may have gone
	 * out whatever the code says: on a reused connection that died,
	 * libcurl connects again, and that connect can fail too.
	 */
	*not_sent = r->body_sent == 0 && code != CURLE_SEND_FAIL_REWIND &&
		(code == CURLE_COULDNT_RESOLVE_HOST ||
		 code == CURLE_COULDNT_RESOLVE_PROXY ||
		 code == CURLE_COULDNT_CONNECT ||
		 code == CURLE_SSL_CONNECT_ERROR ||
		 code == CURLE_PEER_FAILED_VERIFICATION ||
		 code == CURLE_SSL_CERTPROBLEM ||
		 code == CURLE_SSL_CACERT_BADFILE ||
		 (pretransfer == 0 && request_size == 0));
	return status;
}

/* dq_refused_detail: the attempt's detail when the target's address was refused */
static char *
dq_refused_detail(DqReq *r)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"reason\": ");
	escape_json(&buf, psprintf("host %s resolved to %s, a loopback, link-local, private, unique-local or other special-purpose address that ntask.http_allowed_hosts does not list",
							   r->target->host, r->refused_addr));
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * dq_classify
 *		r's transfer ended with code: decide what it means (the table in
 *		docs/worker.md) and queue it for recording, or for sending after a
 *		reconcile that found nothing.
 */
static void
dq_classify(DqReq *r, CURLcode code)
{
	MemoryContext old = MemoryContextSwitchTo(r->cxt);
	bool		not_sent;
	long		status = dq_transfer_info(r, code, &not_sent);
	char	   *detail;

	if (status > 0)
		detail = r->retry_after_s >= 0 ?
			psprintf("{\"http_status\": %ld, \"retry_after_s\": " INT64_FORMAT "}",
					 status, (int64) r->retry_after_s) :
			psprintf("{\"http_status\": %ld}", status);
	else
		detail = dq_curl_detail(code);
	MemoryContextSwitchTo(old);

	if (r->kind == DQ_RECONCILE)
	{
		if (status == 200)
			dq_finish(r, "succeeded", NULL, NULL, "provider_reconciled", detail,
					  NTASK_COUNT_RECONCILED);
		else if (status == 404)
		{
			r->kind = DQ_SEND;	/* the provider never saw it: send now */
			r->reconciled = true;	/* after a heartbeat */
			dq_push(&dq_to_invoke, r);
		}
		else
			dq_finish(r, "retry_wait", "transient", "reconcile", NULL, detail,
					  NTASK_COUNT_TRANSIENT);
		return;
	}

	if (r->refused_addr != NULL)
	{
		/* nothing was sent: the connection was never opened */
		old = MemoryContextSwitchTo(r->cxt);
		detail = dq_refused_detail(r);
		MemoryContextSwitchTo(old);
		dq_finish(r, "repair_required", "permanent", "config", NULL, detail,
				  NTASK_COUNT_PERMANENT);
	}
	else if (status > 0)
	{
		/* a response arrived: its status decides, whatever curl says after */
		switch (ntask_http_classify(status))
		{
			case NTASK_HTTP_ACCEPTED:
				dq_finish(r, "succeeded", NULL, NULL, "provider_accepted", detail,
						  NTASK_COUNT_ACCEPTED);
				break;
			case NTASK_HTTP_TRANSIENT:
				dq_finish(r, "retry_wait", "transient", "http_status", NULL, detail,
						  NTASK_COUNT_TRANSIENT);
				break;
			case NTASK_HTTP_UNKNOWN:
				/* 500/502/504: the request arrived; it may have had effect */
				dq_finish(r, "retry_wait", "unknown", "response", NULL, detail,
						  NTASK_COUNT_UNKNOWN);
				break;
			case NTASK_HTTP_PERMANENT:
				dq_finish(r, "repair_required", "permanent", "http_status", NULL,
						  detail, NTASK_COUNT_PERMANENT);
				break;
		}
	}
	else if (not_sent)
		dq_finish(r, "retry_wait", "transient", "connect", NULL, detail,
				  NTASK_COUNT_TRANSIENT);
	else
		dq_finish(r, "retry_wait", "unknown", "response", NULL, detail,
				  NTASK_COUNT_UNKNOWN);
}

/* ---- record ---- */

/* dq_record_one: ntask_transition for one finished request (a DqReq *) */
/* dq_opt_text: parameter k of values/nulls is the text v, or NULL */
static void
dq_opt_text(Datum *values, char *nulls, int k, const char *v)
{
	values[k] = v ? CStringGetTextDatum(v) : (Datum) 0;
	nulls[k] = v ? ' ' : 'n';
}

static void
dq_record_one(void *arg)
{
	DqReq	   *r = (DqReq *) arg;
	Datum		values[DQ_TRANSITION_NARGS];
	char		nulls[DQ_TRANSITION_NARGS];
	TimestampTz retry_at = dq_retry_at(r);

	memset(nulls, ' ', sizeof(nulls));
	values[DQ_TRANSITION_ARG_TASK_ID] = Int64GetDatum(r->task_id);
	values[DQ_TRANSITION_ARG_TOKEN] = Int64GetDatum(r->token);
	values[DQ_TRANSITION_ARG_TO_STATE] = CStringGetTextDatum(r->to_state);
	dq_opt_text(values, nulls, DQ_TRANSITION_ARG_ERROR_CLASS, r->error_class);
	values[DQ_TRANSITION_ARG_DETAIL] = DirectFunctionCall1(jsonb_in, CStringGetDatum(r->detail));
	values[DQ_TRANSITION_ARG_RETRY_AT] = TimestampTzGetDatum(retry_at);
	nulls[DQ_TRANSITION_ARG_RETRY_AT] = retry_at != 0 ? ' ' : 'n';
	dq_opt_text(values, nulls, DQ_TRANSITION_ARG_OUTCOME, r->outcome);
	dq_opt_text(values, nulls, DQ_TRANSITION_ARG_STAGE, r->stage);
	(void) NtaskExecPlan(&dq_transition_plan, values, nulls, SPI_OK_SELECT);
}

/* a round's results to record in one statement */
typedef struct DqBatch
{
	DqReq	  **reqs;
	int			n;
} DqBatch;

/* dq_text_array: a text[] of vals[0..n-1], a NULL pointer a NULL element */
static Datum
dq_text_array(const char **vals, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * n);
	bool	   *nulls = palloc(sizeof(bool) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int			i;

	for (i = 0; i < n; i++)
	{
		nulls[i] = vals[i] == NULL;
		elems[i] = nulls[i] ? (Datum) 0 : CStringGetTextDatum(vals[i]);
	}
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs,
											  TEXTOID, -1, false, TYPALIGN_INT));
}

/* dq_retry_at: the retry_at to record for r, or 0 for none */
static TimestampTz
dq_retry_at(DqReq *r)
{
	if (strcmp(r->to_state, "retry_wait") == 0 && r->retry_after_s >= 0)
		return GetCurrentTimestamp() + r->retry_after_s * USECS_PER_SEC;
	return 0;
}

/* dq_streq: equal strings, or both NULL */
static bool
dq_streq(const char *a, const char *b)
{
	return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/*
 * dq_same_record
 *		May a and b be recorded by one ntask_transition_many call?  The same
 *		transition with the same arguments (a round's successes usually
 *		are), not retry_wait (its retry_at is per request, and a batch of
 *		it is applied task by task anyway).  A task goes into a group at
 *		most once: dq_record_batch's scan sees to that.
 */
static bool
dq_same_record(DqReq *a, DqReq *b)
{
	return strcmp(a->to_state, "retry_wait") != 0 &&
		strcmp(a->to_state, b->to_state) == 0 &&
		dq_streq(a->error_class, b->error_class) &&
		dq_streq(a->stage, b->stage) &&
		dq_streq(a->outcome, b->outcome) &&
		dq_streq(a->detail, b->detail);
}

/*
 * dq_record_group
 *		ntask_transition_many for reqs[0..n-1], which dq_same_record found
 *		alike: one set-based statement instead of n calls.
 */
static void
dq_record_group(DqReq **reqs, int n)
{
	DqReq	   *r = reqs[0];
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *toks = palloc(sizeof(Datum) * n);
	Datum		values[DQ_GROUP_NARGS];
	char		nulls[DQ_GROUP_NARGS];
	int			i;
	int			rows;

	for (i = 0; i < n; i++)
	{
		ids[i] = Int64GetDatum(reqs[i]->task_id);
		toks[i] = Int64GetDatum(reqs[i]->token);
	}
	memset(nulls, ' ', sizeof(nulls));
	values[DQ_GROUP_ARG_TASK_IDS] = NtaskInt8Array(ids, n);
	values[DQ_GROUP_ARG_TOKENS] = NtaskInt8Array(toks, n);
	values[DQ_GROUP_ARG_TO_STATE] = CStringGetTextDatum(r->to_state);
	dq_opt_text(values, nulls, DQ_GROUP_ARG_ERROR_CLASS, r->error_class);
	dq_opt_text(values, nulls, DQ_GROUP_ARG_DETAIL, r->detail);
	dq_opt_text(values, nulls, DQ_GROUP_ARG_OUTCOME, r->outcome);
	dq_opt_text(values, nulls, DQ_GROUP_ARG_STAGE, r->stage);
	rows = NtaskExecPair(&dq_transition_group, values, nulls);
	if (rows != n)
		elog(ERROR, "ntask: worker transition group answered %d rows for %d results",
			 rows, n);
}

/*
 * dq_record_rows
 *		ntask_transition for reqs[0..n-1], one call per row of one
 *		statement (the same calls dq_record_one makes).
 */
static void
dq_record_rows(DqReq **reqs, int n)
{
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *toks = palloc(sizeof(Datum) * n);
	Datum	   *ras = palloc(sizeof(Datum) * n);
	bool	   *ra_nulls = palloc(sizeof(bool) * n);
	const char **st = palloc(sizeof(char *) * n);
	const char **ec = palloc(sizeof(char *) * n);
	const char **det = palloc(sizeof(char *) * n);
	const char **oc = palloc(sizeof(char *) * n);
	const char **sg = palloc(sizeof(char *) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	Datum		values[DQ_TRANSITION_NARGS];
	int			i;
	int			rows;

	for (i = 0; i < n; i++)
	{
		DqReq	   *r = reqs[i];
		TimestampTz ra = dq_retry_at(r);

		ids[i] = Int64GetDatum(r->task_id);
		toks[i] = Int64GetDatum(r->token);
		ras[i] = TimestampTzGetDatum(ra);
		ra_nulls[i] = ra == 0;
		st[i] = r->to_state;
		ec[i] = r->error_class;
		det[i] = r->detail;
		oc[i] = r->outcome;
		sg[i] = r->stage;
	}
	values[DQ_TRANSITION_ARG_TASK_ID] = NtaskInt8Array(ids, n);
	values[DQ_TRANSITION_ARG_TOKEN] = NtaskInt8Array(toks, n);
	values[DQ_TRANSITION_ARG_TO_STATE] = dq_text_array(st, n);
	values[DQ_TRANSITION_ARG_ERROR_CLASS] = dq_text_array(ec, n);
	values[DQ_TRANSITION_ARG_DETAIL] = dq_text_array(det, n);
	values[DQ_TRANSITION_ARG_RETRY_AT] =
		PointerGetDatum(construct_md_array(ras, ra_nulls, 1, dims, lbs,
										   TIMESTAMPTZOID, sizeof(TimestampTz),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[DQ_TRANSITION_ARG_OUTCOME] = dq_text_array(oc, n);
	values[DQ_TRANSITION_ARG_STAGE] = dq_text_array(sg, n);
	rows = NtaskExecPlan(&dq_transition_many_plan, values, NULL, SPI_OK_SELECT);
	if (rows != n)
		elog(ERROR, "ntask: worker transition batch answered %d rows for %d results",
			 rows, n);
}

/*
 * dq_record_batch
 *		Record every request of the DqBatch arg in as few statements as it
 *		takes: each group of two or more alike results (dq_same_record)
 *		with one ntask_transition_many, the rest with one statement of
 *		ntask_transition calls.  Each element gets exactly the answer its
 *		own ntask_transition would give.  On a distributed install every
 *		result is its own routed ntask_transition (dq_transition_group
 *		runs no statement there: a batch would be a multi-shard
 *		statement).  Any error fails the whole step; the caller then
 *		records them one by one.
 */
static void
dq_record_batch(void *arg)
{
	DqBatch    *b = (DqBatch *) arg;
	int			n = b->n;
	bool	   *taken = palloc0(sizeof(bool) * n);
	DqReq	  **group = palloc(sizeof(DqReq *) * n);
	DqReq	  **rest = palloc(sizeof(DqReq *) * n);
	int			nrest = 0;
	bool		grouping = NtaskPairRuns(&dq_transition_group);
	int			i;
	int			j;

	for (i = 0; i < n; i++)
	{
		int			ng = 0;

		if (taken[i])
			continue;
		taken[i] = true;
		group[ng++] = b->reqs[i];
		for (j = i + 1; grouping && j < n; j++)
		{
			int			k;

			if (taken[j] || !dq_same_record(b->reqs[i], b->reqs[j]))
				continue;
			for (k = 0; k < ng; k++)
				if (group[k]->task_id == b->reqs[j]->task_id)
					break;
			if (k < ng)
				continue;		/* a task twice: the second goes on its own */
			taken[j] = true;
			group[ng++] = b->reqs[j];
		}
		if (ng > 1)
			dq_record_group(group, ng);
		else
			rest[nrest++] = group[0];
	}
	if (nrest > 0)
		dq_record_rows(rest, nrest);
}

/*
 * dq_record_step
 *		Record every finished request that is due for it: all in one
 *		statement (dq_record_batch) in a subtransaction.  If that fails,
 *		each in its own subtransaction instead: one that fails (a lock
 *		timeout behind someone's open transaction, anything else) is rolled
 *		back alone and tried again later; the others commit.
 *		r->record_tries counts failures (0: it was recorded).
 */
static void
dq_record_step(void *arg)
{
	TimestampTz now = GetCurrentTimestamp();
	DqReq	   *r;
	DqBatch		batch;
	ErrorData  *edata;
	int			i;

	batch.n = 0;
	for (r = dq_finished; r; r = r->next)
		batch.n++;
	batch.reqs = palloc(sizeof(DqReq *) * Max(batch.n, 1));
	batch.n = 0;
	for (r = dq_finished; r; r = r->next)
		if (r->next_record <= now)
			batch.reqs[batch.n++] = r;
	if (batch.n == 0)
		return;

	/* a provider's rate limit pauses the key or the queue first (35.5) */
	for (i = 0; i < batch.n; i++)
	{
		r = batch.reqs[i];
		if (r->rate_limited && r->on_rate_limited != 'r' &&
			!NtaskTrySubxact(dq_pause_step, r, &edata))
		{
			ereport(LOG,
					(errmsg("ntask worker: pausing %s of queue \"%s\" after HTTP 429/503 failed: %s",
							r->on_rate_limited == 'k' ? "the key" : "the queue",
							r->queue, edata->message)));
			FreeErrorData(edata);
		}
	}

	if (batch.n > 1)
	{
		if (NtaskTrySubxact(dq_record_batch, &batch, &edata))
		{
			for (i = 0; i < batch.n; i++)
			{
				batch.reqs[i]->record_tries = 0;
				batch.reqs[i]->next_record = -1;	/* recorded */
			}
			return;
		}
		ereport(LOG,
				(errmsg("ntask worker: recording %d results in one statement failed, recording them one by one: %s",
						batch.n, edata->message)));
		FreeErrorData(edata);
	}

	for (i = 0; i < batch.n; i++)
	{
		r = batch.reqs[i];
		if (NtaskTrySubxact(dq_record_one, r, &edata))
		{
			r->record_tries = 0;
			r->next_record = -1;	/* recorded */
			continue;
		}
		r->record_tries++;
		r->next_record = now + (TimestampTz) Min(r->record_tries, 10) * 500 * 1000;
		NtaskWorkerError(edata->message);
		ereport(LOG,
				(errmsg("ntask worker: recording the result of task " INT64_FORMAT " failed (try %d): %s",
						r->task_id, r->record_tries, edata->message)));
		FreeErrorData(edata);
	}
}

/*
 * dq_pause_step
 *		The DqReq arg came back 429 or 503 with Retry-After and its queue
 *		says pause_key or pause_queue: hold the key (ntask.key_pause and
 *		the queue row's keys_paused_until) or the queue (paused_until) until
 *		then.  Each call sets it again (the latest end wins): not before the
 *		result is recorded, so a pause is never longer than the retry of the
 *		task that caused it.
 */
static void
dq_pause_step(void *arg)
{
	DqReq	   *r = (DqReq *) arg;
	TimestampTz until = GetCurrentTimestamp() + r->retry_after_s * USECS_PER_SEC;
	Datum		values[DQ_PAUSE_NARGS];
	Datum		taskarg[DQ_PAUSE_TASK_KEY_NARGS];
	Datum		keyargs[DQ_PAUSE_KEY_NARGS];
	SPITupleTable *tt;
	long		status = 0;
	char	   *reason;
	char	   *key;
	bool		isnull;

	values[DQ_PAUSE_ARG_QUEUE] = CStringGetTextDatum(r->queue);
	values[DQ_PAUSE_ARG_UNTIL] = TimestampTzGetDatum(until);
	if (r->detail != NULL)
	{
		const char *st = strstr(r->detail, "\"http_status\": ");

		if (st != NULL)
			status = strtol(st + strlen("\"http_status\": "), NULL, 10);
	}
	reason = psprintf("HTTP %ld with Retry-After " INT64_FORMAT " s to task " INT64_FORMAT,
					  status, r->retry_after_s, r->task_id);
	if (r->on_rate_limited == 'q')
	{
		(void) NtaskExecPlan(&dq_pause_queue_plan, values, NULL, SPI_OK_UPDATE);
		ereport(LOG,
				(errmsg("ntask worker: queue \"%s\" paused for " INT64_FORMAT " s: %s",
						r->queue, r->retry_after_s, reason)));
		return;
	}
	taskarg[DQ_PAUSE_TASK_KEY_ARG_TASK_ID] = Int64GetDatum(r->task_id);
	if (NtaskExecPlan(&dq_pause_task_key_plan, taskarg, NULL, SPI_OK_SELECT) == 0)
		return;					/* the task has no key (or is gone) */
	tt = SPI_tuptable;
	key = NtaskTupGetCString(tt, 0, DQ_PAUSE_TASK_KEY_KEY);
	keyargs[DQ_PAUSE_KEY_ARG_SHARD] = NtaskTupGetDatum(tt, 0, DQ_PAUSE_TASK_KEY_SHARD, &isnull);
	if (NtaskExecPlan(&dq_pause_keys_until_plan, values, NULL,
					  SPI_OK_UPDATE_RETURNING) == 0)
		return;					/* no such queue */
	keyargs[DQ_PAUSE_KEY_ARG_QUEUE] = values[DQ_PAUSE_ARG_QUEUE];
	keyargs[DQ_PAUSE_KEY_ARG_UNTIL] = values[DQ_PAUSE_ARG_UNTIL];
	keyargs[DQ_PAUSE_KEY_ARG_KEY] = CStringGetTextDatum(key);
	keyargs[DQ_PAUSE_KEY_ARG_REASON] = CStringGetTextDatum(reason);
	(void) NtaskExecPlan(&dq_pause_key_plan, keyargs, NULL, SPI_OK_INSERT);
	ereport(LOG,
			(errmsg("ntask worker: key \"%s\" of queue \"%s\" paused for " INT64_FORMAT " s: %s",
					key, r->queue, r->retry_after_s, reason)));
}

/* dq_record_due: some finished request may be recorded now */
static bool
dq_record_due(void)
{
	TimestampTz now = GetCurrentTimestamp();
	DqReq	   *r;

	for (r = dq_finished; r; r = r->next)
		if (r->next_record <= now)
			return true;
	return false;
}

/*
 * dq_flush
 *		Move requests along: invoke what waits for it, start what was
 *		invoked, and, if record, record what finished.  Each step is one
 *		transaction.
 */
static void
dq_flush(bool record)
{
	DqReq	   *r;
	DqReq	   *next;

	if (dq_to_invoke)
	{
		DqReq	   *list = dq_to_invoke;
		bool		ok = NtaskWorkerRunXact(dq_invoke_step, NULL,
											"ntask dispatch: invoked");

		dq_to_invoke = NULL;
		for (r = list; r; r = next)
		{
			next = r->next;
			if (ok && r->confirmed && dq_start(r))
				continue;
			dq_free(r);			/* stale, or not recorded: never send */
		}
	}
	if (record && dq_finished && dq_record_due())
		dq_recorded(NtaskWorkerRunXact(dq_record_step, NULL,
									   "ntask dispatch: record results"));
	NtaskBreakerSync();			/* breaker changes of this round */
	NtaskWorkerSetInFlight(dq_nrunning);
}

/*
 * dq_recorded
 *		After a transaction that ran dq_record_step (committed if ok):
 *		recorded ones are done.  A result that could not be recorded is
 *		kept and tried again, for as long as its lease lasts: after that
 *		the lease is released by housekeeping (as unknown if it was
 *		invoked), and a late record would be stale anyway.
 */
static void
dq_recorded(bool ok)
{
	DqReq	   *list = dq_finished;
	DqReq	   *r;
	DqReq	   *next;

	dq_finished = NULL;
	for (r = list; r; r = next)
	{
		next = r->next;
		if (ok && r->next_record < 0)
		{
			NtaskWorkerCount(r->counter, 1);
			dq_free(r);
		}
		else if (!ok || (int64) r->record_tries * 500 > r->lease_ms + 5000)
		{
			ereport(LOG,
					(errmsg("ntask worker: giving up recording the result of task " INT64_FORMAT "; its lease will expire",
							r->task_id)));
			dq_free(r);
		}
		else
			dq_push(&dq_finished, r);
	}
}

/*
 * NtaskDispatchTick
 *		Claim due http tasks when asked to (woken, or a tick) or when the
 *		last claim was full, then move requests along.  Returns true when
 *		a claim was full and there is room for more: call again at once.
 */
bool
NtaskDispatchTick(bool claim)
{
	if (dq_cxt == NULL)
		return false;
	if (NtaskBreakerProbeDue())
		claim = true;			/* a breaker turned half-open: probe */
	if ((claim || dq_more) && dq_nqueues > 0 &&
		NtaskDispatchInFlight() < ntask_http_max_inflight)
		dq_claim();
	else
		dq_more = false;
	dq_flush(true);				/* what the claim did not record */
	return dq_more && NtaskDispatchInFlight() < ntask_http_max_inflight;
}

/* ---- waiting: curl's sockets and the latch in one WaitEventSet ---- */

/*
 * dq_socket_cb
 *		CURLMOPT_SOCKETFUNCTION: curl says which of its sockets to watch for
 *		what (CURL_POLL_IN / OUT / INOUT) or to forget (CURL_POLL_REMOVE,
 *		called before curl closes it).  Kept in dq_socks; the wait set is
 *		rebuilt from it before the next wait.
 */
static int
dq_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	int			i;

	for (i = 0; i < dq_nsocks; i++)
		if (dq_socks[i].fd == fd)
			break;
	if (what == CURL_POLL_REMOVE)
	{
		if (i < dq_nsocks)
			dq_socks[i] = dq_socks[--dq_nsocks];
	}
	else if (i < dq_nsocks)
		dq_socks[i].what = what;
	else
	{
		if (dq_nsocks == dq_maxsocks)
		{
			dq_maxsocks *= 2;
			dq_socks = repalloc(dq_socks, sizeof(DqSock) * dq_maxsocks);
		}
		dq_socks[dq_nsocks].fd = fd;
		dq_socks[dq_nsocks].what = what;
		dq_nsocks++;
	}
	dq_socks_changed = true;
	return 0;
}

/*
 * dq_build_wait_set
 *		The wait set: the latch, postmaster death and every socket curl
 *		watches.  PostgreSQL 15 cannot remove an event from a set, so it is
 *		built again whenever curl's sockets changed.
 */
static void
dq_build_wait_set(void)
{
	int			i;

	if (dq_wes != NULL)
		FreeWaitEventSet(dq_wes);
	dq_wes = NtaskCreateWaitEventSet(dq_cxt, dq_nsocks + 2);
	(void) AddWaitEventToSet(dq_wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	(void) AddWaitEventToSet(dq_wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (i = 0; i < dq_nsocks; i++)
	{
		uint32		events = 0;

		if (dq_socks[i].what & CURL_POLL_IN)
			events |= WL_SOCKET_READABLE;
		if (dq_socks[i].what & CURL_POLL_OUT)
			events |= WL_SOCKET_WRITEABLE;
		if (events != 0)
			(void) AddWaitEventToSet(dq_wes, events, dq_socks[i].fd, NULL, NULL);
	}
	dq_socks_changed = false;
}

/*
 * dq_done
 *		Classify every transfer curl has finished (it goes to dq_finished,
 *		or to dq_to_invoke after a reconcile that found nothing).
 */
static void
dq_done(void)
{
	int			left;
	CURLMsg    *msg;

	while ((msg = curl_multi_info_read(dq_multi, &left)) != NULL)
	{
		DqReq	   *r = NULL;
		DqReq	  **p;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &r);
		for (p = &dq_running; *p; p = &(*p)->next)
			if (*p == r)
			{
				*p = r->next;
				dq_nrunning--;
				break;
			}
		dq_classify(r, msg->data.result);
		dq_more = true;			/* room again: more may be due */
	}
}

/*
 * NtaskDispatchWait
 *		Sleep until the latch is set, one of curl's sockets is ready,
 *		curl's next timeout (curl_multi_timeout), a result waiting to be
 *		recorded again is due, or timeout_ms; exits if the postmaster
 *		dies.  Then let curl act on what is ready, classify the finished
 *		transfers and record them.  Returns WL_LATCH_SET if the latch was
 *		set (the caller resets it, if this has not already), else 0.
 */
int
NtaskDispatchWait(long timeout_ms)
{
	WaitEvent	events[DQ_WAIT_EVENTS];
	TimestampTz now = GetCurrentTimestamp();
	long		curl_ms = -1;
	int			running = 0;
	int			rc = 0;
	int			nev;
	int			i;
	DqReq	   *r;

	if (dq_multi == NULL)
		return WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION) & WL_LATCH_SET;

	/* results waiting to be recorded again: wake when the first is due */
	for (r = dq_finished; r; r = r->next)
		if (r->next_record > 0)
			timeout_ms = Min(timeout_ms,
							 Max((long) ((r->next_record - now + 999) / 1000), 0));
	if (dq_nrunning > 0 && curl_multi_timeout(dq_multi, &curl_ms) == CURLM_OK &&
		curl_ms >= 0)
		timeout_ms = Min(timeout_ms, curl_ms);
	{
		/* the end of an open breaker's cooldown: wake to probe */
		long		br_ms = NtaskBreakerWaitMs();

		if (br_ms >= 0)
			timeout_ms = Min(timeout_ms, br_ms);
	}

	if (dq_wes == NULL || dq_socks_changed)
		dq_build_wait_set();
	nev = WaitEventSetWait(dq_wes, Max(timeout_ms, 0), events, lengthof(events),
						   PG_WAIT_EXTENSION);

	/*
	 * A set latch is reported alone, before any socket is looked at: under
	 * a steady stream of wake-ups the sockets would never get their turn.
	 * So reset it (the caller acts on WL_LATCH_SET after this returns, so
	 * no wake-up is lost) and look at the sockets once more, not waiting.
	 */
	if (nev == 1 && (events[0].events & WL_LATCH_SET) && dq_nsocks > 0)
	{
		ResetLatch(MyLatch);
		rc = WL_LATCH_SET;
		nev = WaitEventSetWait(dq_wes, 0, events, lengthof(events),
							   PG_WAIT_EXTENSION);
	}
	for (i = 0; i < nev; i++)
	{
		int			flags = 0;

		if (events[i].events & WL_LATCH_SET)
		{
			rc = WL_LATCH_SET;
			continue;
		}
		if (events[i].events & WL_SOCKET_READABLE)
			flags |= CURL_CSELECT_IN;
		if (events[i].events & WL_SOCKET_WRITEABLE)
			flags |= CURL_CSELECT_OUT;
		if (flags != 0)
			(void) curl_multi_socket_action(dq_multi, events[i].fd, flags, &running);
	}

	/* curl's timeouts (a new transfer to start, connect or total timeouts) */
	if (dq_nrunning > 0 && curl_multi_timeout(dq_multi, &curl_ms) == CURLM_OK &&
		curl_ms == 0)
		(void) curl_multi_socket_action(dq_multi, CURL_SOCKET_TIMEOUT, 0, &running);

	dq_done();

	/*
	 * Record now only if no claim follows: NtaskDispatchTick, which the
	 * worker's loop calls next, records them in its claim's transaction.
	 */
	dq_flush(!(dq_more && dq_nqueues > 0));
	return rc;
}
