/*-------------------------------------------------------------------------
 *
 * breaker.c
 *	  The circuit breaker of http queues, in the background worker's
 *	  dispatch (docs/worker.md "Circuit breaker").
 *
 * A queue with breaker_failures = n has one breaker:
 *
 *	closed		claims as usual; every transfer's answer is judged
 *				(br_verdict): a failure adds one to the count, a sign of
 *				life sets it back to 0; n failures in a row open it
 *	open		the worker claims nothing of the queue until open_until
 *				(opened_at + breaker_cooldown): nothing is sent, no attempt
 *				is made and no budget is spent; the tasks stay as they are
 *	half_open	after open_until: the worker claims one task and sends it
 *				(the probe), and nothing else of the queue while it is in
 *				flight; its answer closes the breaker (sign of life) or
 *				opens it again for another cooldown (failure)
 *
 * The worker holds the state in memory (it is the only writer) and writes
 * it to ntask.breaker after a change, in its own short transaction
 * (NtaskBreakerSync, called after each round's record step), with an
 * ntask.audit row per change of state; a state change is also logged once.
 * A queue seen for the first time (every queue, when the worker starts) is
 * loaded from ntask.breaker, so a breaker that was open when the worker
 * stopped stays open until its open_until.  A new failure count of a
 * closed breaker is written at most once a second; a closed breaker with
 * no failures is not written again: a healthy queue costs nothing here.
 *
 * Only the worker's claims are held back: ntask_claim called by anyone
 * else does not look at the breaker.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/breaker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"
#include "ntask_worker.h"
#include "shard.h"
#include "spi_util.h"
#include "worker_shared.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define BR_QUEUE_LEN NTASK_QUEUE_BUF
#define BR_WHY_LEN 64
#define BR_MAX_EVENTS 256		/* state changes waiting to be audited */

typedef enum BrState
{
	BR_CLOSED,
	BR_OPEN,
	BR_HALF_OPEN
} BrState;

static const char *const br_state_names[] = {"closed", "open", "half_open"};

typedef struct BrEntry
{
	char		queue[BR_QUEUE_LEN];
	int			threshold;		/* queue.breaker_failures */
	int64		cooldown_us;	/* queue.breaker_cooldown */
	BrState		state;
	int			failures;		/* consecutive failures */
	TimestampTz opened_at;		/* 0: never opened */
	TimestampTz open_until;
	TimestampTz changed_at;		/* last change of state */
	bool		dirty;			/* to be written to ntask.breaker */
	bool		seen;			/* in the last load */
} BrEntry;

/* a change of state, to be audited with the next write */
typedef struct BrEvent
{
	char		queue[BR_QUEUE_LEN];
	BrState		from;
	BrState		to;
	char		reason[256];
} BrEvent;

static MemoryContext br_cxt = NULL;
static BrEntry *br_entries = NULL;
static int	br_n = 0;
static int	br_max = 0;
static BrEvent *br_events = NULL;
static int	br_nevents = 0;
static TimestampTz br_last_sync = 0;

/* a change of the failure count alone is written at most this often */
#define BR_COUNT_SYNC_MS 1000

/* the columns of br_load_plan: the queue's settings, then its stored row */
typedef enum BrLoadCol
{
	BR_LOAD_QUEUE = 1,
	BR_LOAD_THRESHOLD,			/* breaker_failures */
	BR_LOAD_COOLDOWN_US,
	BR_LOAD_STATE,				/* NULL: no stored row */
	BR_LOAD_FAILURES,
	BR_LOAD_OPENED_AT,
	BR_LOAD_OPEN_UNTIL,
	BR_LOAD_CHANGED_AT,
	BR_LOAD_ACTIVE,				/* it has a breaker and is an http queue */
	BR_LOAD_NCOLS = BR_LOAD_ACTIVE
} BrLoadCol;

static NtaskPlan br_load_plan = {
	"worker breaker load",
	.ncols = BR_LOAD_NCOLS,
	"SELECT q.queue, q.breaker_failures, "
	"  (LEAST(EXTRACT(EPOCH FROM q.breaker_cooldown), 315576000) "
	"   OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8, "
	"  b.state, b.failures, b.opened_at, b.open_until, b.changed_at, "
	"  (q.breaker_failures IS NOT NULL AND "
	"   (q.target OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'http') "
	"FROM ntask.queue q "
	"LEFT JOIN ntask.breaker b ON b.queue OPERATOR(pg_catalog.=) q.queue "
	"WHERE b.queue IS NOT NULL OR (q.breaker_failures IS NOT NULL AND "
	"  (q.target OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'http')",
	0, {InvalidOid}
};

typedef enum BrForgetArg
{
	BR_FORGET_ARG_QUEUE,		/* $1 */
	BR_FORGET_NARGS
} BrForgetArg;

static NtaskPlan br_forget_plan = {
	"worker breaker forget",
	.ncols = 0,
	"DELETE FROM ntask.breaker b WHERE b.queue OPERATOR(pg_catalog.=) $1",
	BR_FORGET_NARGS, {TEXTOID}
};

/* the parameters of br_save_plan: a breaker's stored row */
typedef enum BrSaveArg
{
	BR_SAVE_ARG_QUEUE,			/* $1 */
	BR_SAVE_ARG_STATE,			/* $2 */
	BR_SAVE_ARG_FAILURES,		/* $3 */
	BR_SAVE_ARG_OPENED_AT,		/* $4, NULL: never opened */
	BR_SAVE_ARG_OPEN_UNTIL,		/* $5, NULL: closed */
	BR_SAVE_ARG_CHANGED_AT,		/* $6 */
	BR_SAVE_NARGS
} BrSaveArg;

/* the queue row may be gone (deleted since the last load): write nothing */
static NtaskPlan br_save_plan = {
	"worker breaker save",
	.ncols = 0,
	"INSERT INTO ntask.breaker AS b "
	"  (queue, state, failures, opened_at, open_until, changed_at) "
	"SELECT q.queue, $2, $3, $4, $5, $6 FROM ntask.queue q "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1 "
	"ON CONFLICT (queue) DO UPDATE SET state = EXCLUDED.state, "
	"  failures = EXCLUDED.failures, opened_at = EXCLUDED.opened_at, "
	"  open_until = EXCLUDED.open_until, changed_at = EXCLUDED.changed_at",
	BR_SAVE_NARGS, {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static BrEntry *
br_find(const char *queue)
{
	int			i;

	for (i = 0; i < br_n; i++)
		if (strcmp(br_entries[i].queue, queue) == 0)
			return &br_entries[i];
	return NULL;
}

static BrState
br_parse_state(const char *s)
{
	if (s != NULL && strcmp(s, "open") == 0)
		return BR_OPEN;
	if (s != NULL && strcmp(s, "half_open") == 0)
		return BR_HALF_OPEN;
	return BR_CLOSED;
}

/*
 * br_change
 *		Move e to state to: logged once, audited with the next write.
 */
static void
br_change(BrEntry *e, BrState to, TimestampTz now, const char *reason)
{
	BrEvent    *ev;

	if (to == BR_OPEN)
	{
		e->opened_at = now;
		e->open_until = now + e->cooldown_us;
		NtaskWorkerCount(NTASK_COUNT_BREAKER_OPENED, 1);
	}
	else if (to == BR_CLOSED)
	{
		e->failures = 0;
		NtaskWorkerCount(NTASK_COUNT_BREAKER_CLOSED, 1);
	}
	ereport(LOG,
			(errmsg("ntask worker: circuit breaker of queue \"%s\" %s -> %s: %s",
					e->queue, br_state_names[e->state], br_state_names[to], reason)));
	if (br_nevents == BR_MAX_EVENTS)
	{
		/* the audit cannot be written (the writes fail): keep the newest */
		memmove(&br_events[0], &br_events[1], sizeof(BrEvent) * (BR_MAX_EVENTS - 1));
		br_nevents--;
	}
	ev = &br_events[br_nevents++];
	strlcpy(ev->queue, e->queue, BR_QUEUE_LEN);
	ev->from = e->state;
	ev->to = to;
	strlcpy(ev->reason, reason, sizeof(ev->reason));
	e->state = to;
	e->changed_at = now;
	e->dirty = true;
}

/* br_open: open (or open again) e after a failure described by why */
static void
br_open(BrEntry *e, const char *why)
{
	char		reason[256];
	char		until[64];
	TimestampTz now = GetCurrentTimestamp();

	strlcpy(until, timestamptz_to_str(now + e->cooldown_us), sizeof(until));
	if (e->state == BR_HALF_OPEN)
		snprintf(reason, sizeof(reason),
				 "the probe failed (%s); nothing is sent to its target until %s",
				 why, until);
	else
		snprintf(reason, sizeof(reason),
				 "%d consecutive failures (the last: %s); nothing is sent to its target until %s",
				 e->failures, why, until);
	br_change(e, BR_OPEN, now, reason);
}

/*
 * NtaskBreakerLoad
 *		In the worker's queue refresh (a transaction): the breaker settings
 *		of every http queue that has one, and for a queue not seen before
 *		its stored state.  Breakers of queues that no longer have one (off,
 *		not http, deleted) are forgotten, their rows deleted.
 */
void
NtaskBreakerLoad(void)
{
	SPITupleTable *tt;
	int			n;
	int			i;
	int			j;
	char	  **forget;
	int			nforget = 0;

	if (br_cxt == NULL)
	{
		br_cxt = AllocSetContextCreate(TopMemoryContext, "ntask breaker",
									   ALLOCSET_SMALL_SIZES);
		br_max = 8;
		br_entries = MemoryContextAllocZero(br_cxt, sizeof(BrEntry) * br_max);
		br_events = MemoryContextAllocZero(br_cxt, sizeof(BrEvent) * BR_MAX_EVENTS);
	}
	n = NtaskExecPlan(&br_load_plan, NULL, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	forget = palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < br_n; i++)
		br_entries[i].seen = false;
	for (i = 0; i < n; i++)
	{
		char	   *queue = NtaskTupGetCString(tt, i, BR_LOAD_QUEUE);
		bool		isnull;
		bool		active = DatumGetBool(NtaskTupGetDatum(tt, i, BR_LOAD_ACTIVE, &isnull)) && !isnull;
		bool		stored;
		BrEntry    *e;

		if (!active)
		{
			forget[nforget++] = queue;	/* a row, and no breaker */
			continue;
		}
		e = br_find(queue);
		if (e == NULL)
		{
			if (br_n == br_max)
			{
				br_max *= 2;
				br_entries = repalloc(br_entries, sizeof(BrEntry) * br_max);
			}
			e = &br_entries[br_n++];
			memset(e, 0, sizeof(BrEntry));
			strlcpy(e->queue, queue, BR_QUEUE_LEN);
			(void) NtaskTupGetDatum(tt, i, BR_LOAD_STATE, &isnull);
			stored = !isnull;
			if (stored)
			{
				char	   *st = NtaskTupGetCString(tt, i, BR_LOAD_STATE);
				Datum		d;

				e->state = br_parse_state(st);
				e->failures = NtaskTupGetInt32(tt, i, BR_LOAD_FAILURES);
				d = NtaskTupGetDatum(tt, i, BR_LOAD_OPENED_AT, &isnull);
				e->opened_at = isnull ? 0 : DatumGetTimestampTz(d);
				d = NtaskTupGetDatum(tt, i, BR_LOAD_OPEN_UNTIL, &isnull);
				e->open_until = isnull ? 0 : DatumGetTimestampTz(d);
				d = NtaskTupGetDatum(tt, i, BR_LOAD_CHANGED_AT, &isnull);
				e->changed_at = isnull ? 0 : DatumGetTimestampTz(d);
				if (e->state != BR_CLOSED)
					ereport(LOG,
							(errmsg("ntask worker: circuit breaker of queue \"%s\" is %s (stored)%s%s",
									e->queue, br_state_names[e->state],
									e->state == BR_OPEN ? "; nothing is sent to its target until " : "",
									e->state == BR_OPEN ? timestamptz_to_str(e->open_until) : "")));
			}
		}
		e->threshold = NtaskTupGetInt32(tt, i, BR_LOAD_THRESHOLD);
		e->cooldown_us = Max(NtaskTupGetInt64(tt, i, BR_LOAD_COOLDOWN_US), 1);
		e->seen = true;
	}

	/* forget breakers that were turned off (or whose queue went away) */
	for (i = 0, j = 0; i < br_n; i++)
		if (br_entries[i].seen)
			br_entries[j++] = br_entries[i];
	br_n = j;
	for (i = 0; i < nforget; i++)
	{
		Datum		v[BR_FORGET_NARGS];

		v[BR_FORGET_ARG_QUEUE] = CStringGetTextDatum(forget[i]);
		(void) NtaskExecPlan(&br_forget_plan, v, NULL, SPI_OK_DELETE);
		ereport(LOG,
				(errmsg("ntask worker: circuit breaker of queue \"%s\" turned off; its state is forgotten",
						forget[i])));
	}
}

/*
 * br_due
 *		Every open breaker whose cooldown has passed becomes half-open.
 *		True if one did.
 */
static bool
br_due(void)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		any = false;
	int			i;

	for (i = 0; i < br_n; i++)
		if (br_entries[i].state == BR_OPEN && br_entries[i].open_until <= now)
		{
			br_change(&br_entries[i], BR_HALF_OPEN, now,
					  "the cooldown is over; one probe request decides");
			any = true;
		}
	return any;
}

/*
 * NtaskBreakerProbeDue
 *		Called before each round: true when a breaker just became half-open
 *		(the worker should claim, to send its probe).
 */
bool
NtaskBreakerProbeDue(void)
{
	return br_due();
}

/*
 * NtaskBreakerWaitMs
 *		Milliseconds until the first open breaker's cooldown ends (the
 *		worker wakes then to probe), -1 if none is open.
 */
long
NtaskBreakerWaitMs(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms = -1;
	int			i;

	for (i = 0; i < br_n; i++)
		if (br_entries[i].state == BR_OPEN)
		{
			long		m = (long) Max((br_entries[i].open_until - now + 999) / 1000, 0);

			ms = ms < 0 ? m : Min(ms, m);
		}
	return ms;
}

/*
 * NtaskBreakerClaimLimit
 *		How many tasks of queue the worker may claim now, with inflight of
 *		its transfers in flight: -1 no limit from the breaker, 0 none (open,
 *		or half-open with its probe in flight), 1 the probe.
 */
int
NtaskBreakerClaimLimit(const char *queue, int inflight)
{
	BrEntry    *e = br_find(queue);

	if (e == NULL)
		return -1;
	if (e->state == BR_OPEN)
		(void) br_due();
	switch (e->state)
	{
		case BR_OPEN:
			NtaskWorkerCount(NTASK_COUNT_BREAKER_SKIPS, 1);
			return 0;
		case BR_HALF_OPEN:
			return inflight > 0 ? 0 : 1;
		case BR_CLOSED:
			break;
	}
	return -1;
}

/*
 * NtaskBreakerSent
 *		A transfer of queue is starting: counted as the probe if its
 *		breaker is half-open.
 */
void
NtaskBreakerSent(const char *queue)
{
	BrEntry    *e = br_find(queue);

	if (e != NULL && e->state == BR_HALF_OPEN)
		NtaskWorkerCount(NTASK_COUNT_BREAKER_PROBES, 1);
}

/*
 * NtaskBreakerObserve
 *		A transfer of queue ended with HTTP status http_status (0: no
 *		answer; curl_code says why).  refused: the worker refused the
 *		connection itself (an address not allowed): says nothing about the
 *		target.
 *
 *		A failure: no answer at all (connect error, DNS, TLS, timeout,
 *		reset, a connection closed without an answer), 408, 425, 429, and
 *		every 5xx.  Any other answer is a sign of life, even 4xx: the target
 *		is up and deciding.  Whether the task succeeds is another matter.
 */
void
NtaskBreakerObserve(const char *queue, long http_status, int curl_code,
					bool refused)
{
	BrEntry    *e = br_find(queue);
	bool		failed;
	char		why[BR_WHY_LEN];

	if (e == NULL || refused)
		return;
	failed = http_status <= 0 || http_status == 408 || http_status == 425 ||
		http_status == 429 || http_status >= 500;
	if (http_status > 0)
		snprintf(why, sizeof(why), "HTTP %ld", http_status);
	else
		snprintf(why, sizeof(why), "no answer, curl code %d", curl_code);

	switch (e->state)
	{
		case BR_CLOSED:
			if (!failed)
			{
				if (e->failures > 0)
				{
					e->failures = 0;
					e->dirty = true;
				}
				return;
			}
			e->failures++;
			e->dirty = true;
			if (e->failures >= e->threshold)
				br_open(e, why);
			break;
		case BR_HALF_OPEN:
			if (failed)
			{
				e->failures++;
				br_open(e, why);
			}
			else
			{
				char		reason[128];

				snprintf(reason, sizeof(reason), "the probe was answered (%s)", why);
				br_change(e, BR_CLOSED, GetCurrentTimestamp(), reason);
			}
			break;
		case BR_OPEN:
			/* a transfer started before it opened: the cooldown runs on */
			break;
	}
}

/* br_sync_step: write the changed breakers and audit their changes */
static void
br_sync_step(void *arg)
{
	int			i;

	for (i = 0; i < br_n; i++)
	{
		BrEntry    *e = &br_entries[i];
		Datum		v[BR_SAVE_NARGS];
		char		nulls[BR_SAVE_NARGS];

		if (!e->dirty)
			continue;
		if (e->changed_at == 0)
			e->changed_at = GetCurrentTimestamp();
		memset(nulls, ' ', sizeof(nulls));
		v[BR_SAVE_ARG_QUEUE] = CStringGetTextDatum(e->queue);
		v[BR_SAVE_ARG_STATE] = CStringGetTextDatum(br_state_names[e->state]);
		v[BR_SAVE_ARG_FAILURES] = Int32GetDatum(e->failures);
		v[BR_SAVE_ARG_OPENED_AT] = TimestampTzGetDatum(e->opened_at);
		nulls[BR_SAVE_ARG_OPENED_AT] = e->opened_at == 0 ? 'n' : ' ';
		v[BR_SAVE_ARG_OPEN_UNTIL] = TimestampTzGetDatum(e->open_until);
		nulls[BR_SAVE_ARG_OPEN_UNTIL] = e->state == BR_CLOSED || e->open_until == 0 ? 'n' : ' ';
		v[BR_SAVE_ARG_CHANGED_AT] = TimestampTzGetDatum(e->changed_at);
		(void) NtaskExecPlan(&br_save_plan, v, nulls, SPI_OK_INSERT);
	}
	for (i = 0; i < br_nevents; i++)
	{
		BrEvent    *ev = &br_events[i];

		NtaskAudit("ntask worker", "breaker", 0, ev->queue, ev->reason,
				   br_state_names[ev->from], br_state_names[ev->to]);
	}
}

/*
 * NtaskBreakerSync
 *		Outside a transaction, after each round: write what changed, in
 *		one short transaction.  If that fails it is tried again after the
 *		next round; the state in memory goes on deciding meanwhile.
 */
void
NtaskBreakerSync(void)
{
	int			i;
	bool		any = false;
	TimestampTz now = GetCurrentTimestamp();

	for (i = 0; i < br_n && !any; i++)
		any = br_entries[i].dirty;
	if (!any && br_nevents == 0)
		return;

	/*
	 * A change of state is written at once; a new failure count alone (a
	 * closed breaker counting) at most every BR_COUNT_SYNC_MS, so a target
	 * that fails now and then does not cost a commit per round.
	 */
	if (br_nevents == 0 &&
		!TimestampDifferenceExceeds(br_last_sync, now, BR_COUNT_SYNC_MS))
		return;
	br_last_sync = now;
	if (!NtaskWorkerRunXact(br_sync_step, NULL, "ntask dispatch: breaker state"))
		return;
	for (i = 0; i < br_n; i++)
		br_entries[i].dirty = false;
	br_nevents = 0;
}
