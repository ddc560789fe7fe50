/*-------------------------------------------------------------------------
 *
 * coord.c
 *	  The plain API through a Citus coordinator, delegated: a plain call
 *	  (ntask_transition, _many, _and_claim, ntask_heartbeat, ntask_invoked,
 *	  ntask_release, ntask_enqueue, _many, ntask_claim) made on the
 *	  coordinator outside a transaction block as the whole statement runs
 *	  as one call of its shard-addressed form, ntask_<f>_on(shard, <its
 *	  arguments>), which Citus delegates to the node of the shard: one small
 *	  plan and one network hop on the coordinator instead of every
 *	  statement of the call planned and routed there, and the node of the
 *	  shard runs the call on the direct path (shard.c).
 *
 * How: the entry point, after checking its arguments, asks
 * NtaskCoordDelegate (NtaskCoordClaim for a claim); when the call may be
 * delegated, the _on form is run by SPI, `SELECT * FROM <schema>.<f>_on($1,
 * ...)` (the schema the plain function is in, quoted: the statement never
 * resolves a name through the caller's search_path, which NtaskExecPlan
 * pins for the parse), as the caller (the same rights as the plain call:
 * the _on forms are granted to the roles the plain ones are, and a caller
 * without EXECUTE on the _on form stays routed), with
 * citus.function_opens_transaction_block off for that statement only (a
 * GUC nest level, as a function's SET clause: an error unwinds it with the
 * transaction).  Citus then delegates the call
 * (planner/function_call_delegation.c: TryToDelegateFunctionCall; its
 * IsMultiStatementTransaction is false), t/038.  The rows it returns are
 * the call's.
 *
 * What it costs in meaning: Citus runs the delegated call on the node as
 * a statement of its own, outside the coordinator's transaction, so it
 * commits there by itself.  Nothing follows it in the coordinator's
 * transaction (the whole statement), so that differs from the routed path
 * only when the coordinator fails between the two commits, where the
 * client sees an error for a call that took effect: every one of these
 * calls is idempotent (an enqueue by its key, a transition, release or
 * invoked by its token: duplicate) or fenced (a claim's lease runs out and
 * its token goes stale), t/039.  A claim walks the shard values with one
 * delegated call, one commit, per value: so only a claim of one task is
 * delegated (it stops at the first value that gives a task, the routed
 * claim's answer); one of more stays routed, since it gathers several
 * values' tasks into one answer.
 *
 * Stays routed (the reason at DEBUG1): a transaction block, not the whole
 * statement, REPEATABLE READ, ntask.citus_delegate off, a shard on this
 * node (the direct path serves it), a batch of several shard values, an
 * enqueue with depends_on, a waiting claim, a claim of more than one
 * task, a claim of a queue with a
 * guard, flow control, order, fairness or aging (the routed claim decides
 * those on the coordinator, rate limits by refusing), a caller without
 * EXECUTE on the _on form.  docs/scaling.md "The plain API through the
 * coordinator, delegated".
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/coord.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "coord.h"
#include "settings.h"
#include "shard.h"
#include "spi_util.h"
#include "wake.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

/* one plain function's delegated statement (per backend) */
typedef struct CoordForm
{
	Oid			fn;				/* the plain function */
	uint64		looked;			/* coord_inval_count at its lookup; 0: none */
	Oid			on_fn;			/* its _on form */
	const char *why;			/* why it has none (a constant), or NULL */
	NtaskPlan	plan;			/* SELECT * FROM <schema>.<f>_on($1, ...) */
} CoordForm;

#define COORD_MAX_FORMS 16
static CoordForm coord_forms[COORD_MAX_FORMS];
static int	coord_nforms = 0;

/*
 * The claim's walk over the shard values, per backend, as the routed
 * claim's (claim.c: claim_walk): random at first, then after the value
 * that last gave tasks, so that every value gets its turn and a
 * backend's claims spread over them.  -1: not started.
 */
static int	coord_walk = -1;

/* is the queue a plain one (no guard, flow control, order or aging)? */
#define COORD_QUEUE_PLAIN \
	"SELECT q.guard IS NULL AND q.max_inflight IS NULL " \
	"  AND q.partition_max_inflight IS NULL AND NOT q.ordered " \
	"  AND q.rate_n IS NULL AND q.partition_rate_n IS NULL " \
	"  AND q.retry_share IS NULL AND q.priority_aging IS NULL " \
	"  AND q.fairness OPERATOR(pg_catalog.=) 'none' "
static NtaskPlan coord_queue_plan = {
	"delegated claim's queue", 1,
	COORD_QUEUE_PLAIN "FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

/*
 * The same read of the coordinator's own placement of the reference table
 * ntask.queue (ntask.queue_<shardid>), as the direct path reads a worker
 * node's: PostgreSQL plans it once (generic), where Citus would plan the
 * read of ntask.queue at every claim.  Found once per backend; looked up
 * again when the relation of that name is gone.  Without a placement on
 * the coordinator, the read of ntask.queue.
 */
static NtaskPlan coord_queue_local_plan = {
	"delegated claim's queue (local placement)", 1, NULL, 1, {TEXTOID},
	.direct = true
};
static Oid	coord_queue_relid = InvalidOid;
static char *coord_queue_rel = NULL;	/* its name, in TopMemoryContext */
static bool coord_queue_looked = false;

static NtaskPlan coord_queue_shard_plan = {
	"delegated claim's queue placement", 1,
	"SELECT pg_catalog.to_regclass(pg_catalog.shard_name(c.oid, s.shardid))::pg_catalog.oid "
	"FROM pg_catalog.pg_class c "
	"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
	"JOIN pg_catalog.pg_dist_shard s ON s.logicalrelid OPERATOR(pg_catalog.=) c.oid "
	"JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) s.shardid "
	"JOIN pg_catalog.pg_dist_local_group l ON l.groupid OPERATOR(pg_catalog.=) p.groupid "
	"WHERE n.nspname OPERATOR(pg_catalog.=) 'ntask' AND c.relname OPERATOR(pg_catalog.=) 'queue'",
	0, {InvalidOid}
};

/*
 * The columns coord_queue_scan reads, by name; their numbers in the
 * placement are found once per placement (a placement made after DROP
 * COLUMN may number them differently) and checked against its
 * descriptor at every read.
 */
static const char *const coord_queue_cols[] = {
	"queue", "guard", "max_inflight", "partition_max_inflight", "rate_n",
	"partition_rate_n", "retry_share", "priority_aging", "ordered", "fairness"
};
#define COORD_QCOLS lengthof(coord_queue_cols)
#define COORD_QCOL_NULLS 8		/* those before "ordered" must be NULL */
static AttrNumber coord_queue_att[COORD_QCOLS];
static Oid	coord_queue_att_of = InvalidOid;

/*
 * coord_queue_scan
 *		COORD_QUEUE_PLAIN's answer read from the placement relid by its
 *		primary key, without the executor: 1 plain, 0 not (or no such
 *		queue), -1 when the placement's columns or key are not the expected
 *		ones (the caller runs the statement instead).  The snapshot is a
 *		fresh one, as the statement's in READ COMMITTED would be.
 */
static int
coord_queue_scan(Oid relid, Datum queue)
{
	Relation	rel = table_open(relid, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			pk;
	ScanKeyData key;
	SysScanDesc scan;
	Snapshot	snap;
	HeapTuple	tup;
	int			plain = 0;
	int			i;

	/* the numbers found, still those columns' (a column dropped and added) */
	for (i = 0; i < (int) COORD_QCOLS && coord_queue_att_of == relid; i++)
	{
		AttrNumber	a = coord_queue_att[i];

		if (a < 1 || a > desc->natts || TupleDescAttr(desc, a - 1)->attisdropped ||
			strcmp(NameStr(TupleDescAttr(desc, a - 1)->attname), coord_queue_cols[i]) != 0)
			coord_queue_att_of = InvalidOid;
	}
	if (coord_queue_att_of != relid)
	{
		coord_queue_att_of = InvalidOid;
		for (i = 0; i < (int) COORD_QCOLS; i++)
			if ((coord_queue_att[i] = get_attnum(relid, coord_queue_cols[i])) == InvalidAttrNumber)
			{
				table_close(rel, AccessShareLock);
				return -1;
			}
		coord_queue_att_of = relid;
	}
	list_free(RelationGetIndexList(rel));
	pk = rel->rd_pkindex;
	if (!OidIsValid(pk) ||
		TupleDescAttr(desc, coord_queue_att[0] - 1)->atttypid != TEXTOID ||
		TupleDescAttr(desc, coord_queue_att[COORD_QCOLS - 1] - 1)->atttypid != TEXTOID ||
		TupleDescAttr(desc, coord_queue_att[COORD_QCOLS - 2] - 1)->atttypid != BOOLOID)
	{
		table_close(rel, AccessShareLock);
		return -1;
	}
	ScanKeyEntryInitialize(&key, 0, coord_queue_att[0], BTEqualStrategyNumber, InvalidOid,
						   TupleDescAttr(desc, coord_queue_att[0] - 1)->attcollation,
						   F_TEXTEQ, queue);
	snap = RegisterSnapshot(GetLatestSnapshot());
	scan = systable_beginscan(rel, pk, true, snap, 1, &key);
	if ((tup = systable_getnext(scan)) != NULL)
	{
		bool		isnull;
		Datum		d;

		plain = 1;
		for (i = 1; i < COORD_QCOL_NULLS && plain; i++)
		{
			(void) heap_getattr(tup, coord_queue_att[i], desc, &isnull);
			plain = isnull;
		}
		d = heap_getattr(tup, coord_queue_att[COORD_QCOLS - 2], desc, &isnull);
		if (plain && (isnull || DatumGetBool(d)))
			plain = 0;
		d = heap_getattr(tup, coord_queue_att[COORD_QCOLS - 1], desc, &isnull);
		if (plain && (isnull || strcmp(TextDatumGetCString(d), "none") != 0))
			plain = 0;
	}
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	return plain;
}

/*
 * coord_queue_plain
 *		Whether queue is a known queue without a guard, flow control, order,
 *		fairness or aging.  In SPI.
 */
static bool
coord_queue_plain(Datum queue)
{
	NtaskPlan  *p = &coord_queue_plan;
	char	   *now;

	if (coord_queue_rel != NULL &&
		((now = get_rel_name(coord_queue_relid)) == NULL || strcmp(now, coord_queue_rel) != 0))
	{
		/* the placement is gone: look again */
		if (coord_queue_local_plan.plan != NULL)
			SPI_freeplan(coord_queue_local_plan.plan);
		coord_queue_local_plan.plan = NULL;
		pfree(coord_queue_rel);
		coord_queue_rel = NULL;
		coord_queue_looked = false;
	}
	if (!coord_queue_looked)
	{
		bool		isnull;
		Datum		d;

		coord_queue_looked = true;
		if (NtaskExecPlan(&coord_queue_shard_plan, NULL, NULL, SPI_OK_SELECT) == 1 &&
			(d = NtaskTupGetDatum(SPI_tuptable, 0, 1, &isnull), !isnull) &&
			(now = get_rel_name(DatumGetObjectId(d))) != NULL &&
			get_rel_namespace(DatumGetObjectId(d)) == get_namespace_oid("ntask", true))
		{
			coord_queue_relid = DatumGetObjectId(d);
			coord_queue_rel = MemoryContextStrdup(TopMemoryContext, now);
			coord_queue_local_plan.sql =
				MemoryContextStrdup(TopMemoryContext,
									psprintf(COORD_QUEUE_PLAIN "FROM ntask.%s q "
											 "WHERE q.queue OPERATOR(pg_catalog.=) $1",
											 quote_identifier(now)));
		}
	}
	if (coord_queue_rel != NULL)
	{
		int			plain = coord_queue_scan(coord_queue_relid, queue);

		if (plain >= 0)
			return plain == 1;
		p = &coord_queue_local_plan;
	}
	return NtaskExecPlan(p, &queue, NULL, SPI_OK_SELECT) == 1 &&
		NtaskTupGetBool(SPI_tuptable, 0, 1);
}

/*
 * Each form's lookup (the _on function's OID, its schema and name, the
 * statement) is made once per backend and kept until pg_proc or
 * pg_namespace changes: a function renamed, dropped, made again, granted
 * or revoked, or a schema renamed (coord_inval, registered on first use)
 * makes every form look up again at its next call.  The EXECUTE check is
 * made at every call (a SET ROLE, or a role's membership, changes no
 * function).
 */
static uint64 coord_inval_count = 1;
static bool coord_inval_registered = false;

static void
coord_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	coord_inval_count++;
}

/* coord_form_drop: forget f's statement and lookup */
static void
coord_form_drop(CoordForm *f)
{
	if (f->plan.plan != NULL)
		SPI_freeplan(f->plan.plan);
	f->plan.plan = NULL;
	f->looked = 0;
	f->on_fn = InvalidOid;
	f->why = NULL;
}

/*
 * coord_form_look
 *		Look up fn's _on form into f (the schema fn is in, its name with
 *		"_on", the shard first): the statement's text, or f->why.
 */
static void
coord_form_look(CoordForm *f, Oid fn)
{
	Oid			nsp = get_func_namespace(fn);
	char	   *name = get_func_name(fn);
	char	   *nspname = get_namespace_name(nsp);
	char	   *on_name;
	Oid		   *argtypes;
	Oid			on_types[FUNC_MAX_ARGS];
	int			nargs;
	int			i;
	StringInfoData sql;
	TupleDesc	desc;

	f->fn = fn;
	if (name == NULL || nspname == NULL)
	{
		f->why = "the function is gone";
		return;
	}
	on_name = psprintf("%s_on", name);
	(void) get_func_signature(fn, &argtypes, &nargs);
	if (nargs + 1 > NTASK_PLAN_MAX_ARGS)
	{
		f->why = "too many arguments";
		return;
	}
	on_types[0] = INT2OID;
	for (i = 0; i < nargs; i++)
		on_types[i + 1] = argtypes[i];
	f->on_fn = LookupFuncName(list_make2(makeString(nspname), makeString(on_name)),
							  nargs + 1, on_types, true);
	if (!OidIsValid(f->on_fn))
	{
		f->why = "no shard-addressed form";
		return;
	}
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT * FROM %s.%s(",
					 quote_identifier(nspname), quote_identifier(on_name));
	for (i = 0; i <= nargs; i++)
		appendStringInfo(&sql, "%s$%d", i > 0 ? ", " : "", i + 1);
	appendStringInfoChar(&sql, ')');
	if (f->plan.name != NULL)
		pfree((char *) f->plan.name);
	if (f->plan.sql != NULL)
		pfree((char *) f->plan.sql);
	f->plan.name = MemoryContextStrdup(TopMemoryContext, psprintf("delegated %s", on_name));
	f->plan.sql = MemoryContextStrdup(TopMemoryContext, sql.data);
	f->plan.nargs = nargs + 1;
	memcpy(f->plan.argtypes, on_types, sizeof(Oid) * (nargs + 1));
	f->plan.as_caller = true;
	f->plan.ncols = get_func_result_type(fn, NULL, &desc) == TYPEFUNC_COMPOSITE ?
		desc->natts : 1;
}

/*
 * coord_form
 *		The delegated statement of the plain function fn, its lookup made on
 *		first use and again after an invalidation of pg_proc or pg_namespace
 *		(above).  NULL when the _on form is missing, or the caller may not
 *		execute it: *why says so.
 */
static CoordForm *
coord_form(Oid fn, const char **why)
{
	CoordForm  *f = NULL;
	int			i;

	if (!coord_inval_registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, coord_inval, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, coord_inval, (Datum) 0);
		coord_inval_registered = true;
	}
	for (i = 0; i < coord_nforms && f == NULL; i++)
		if (coord_forms[i].fn == fn)
			f = &coord_forms[i];
	if (f == NULL)
	{
		if (coord_nforms == COORD_MAX_FORMS)
		{
			/* an extension dropped and made again, many times: start over */
			for (i = 0; i < coord_nforms; i++)
				coord_form_drop(&coord_forms[i]);
			coord_nforms = 0;
		}
		f = &coord_forms[coord_nforms++];
		coord_form_drop(f);
	}
	if (f->looked != coord_inval_count)
	{
		/* an invalidation while looking up makes the next call look again */
		uint64		count = coord_inval_count;

		coord_form_drop(f);
		coord_form_look(f, fn);
		f->looked = count;
	}
	if (f->why != NULL)
	{
		*why = f->why;
		return NULL;
	}
	if (object_aclcheck(ProcedureRelationId, f->on_fn, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
	{
		*why = "no EXECUTE on its shard-addressed form";
		return NULL;
	}
	return f;
}

/*
 * coord_run
 *		Run f's statement with the shard and fcinfo's arguments (trace_arg,
 *		when not -1 and NULL: ntask.traceparent's value in its place, which
 *		the node of the shard would not see), citus.function_opens_
 *		transaction_block off for it.  Returns the rows; SPI_tuptable holds
 *		them.
 */
static int
coord_run(CoordForm *f, FunctionCallInfo fcinfo, int16 shard, int trace_arg)
{
	Datum		values[NTASK_PLAN_MAX_ARGS];
	char		nulls[NTASK_PLAN_MAX_ARGS];
	int			nest;
	int			n;
	int			i;

	values[0] = Int16GetDatum(shard);
	nulls[0] = ' ';
	for (i = 0; i < fcinfo->nargs && i + 1 < NTASK_PLAN_MAX_ARGS; i++)
	{
		values[i + 1] = fcinfo->args[i].value;
		nulls[i + 1] = fcinfo->args[i].isnull ? 'n' : ' ';
	}
	if (trace_arg >= 0 && fcinfo->args[trace_arg].isnull &&
		ntask_traceparent != NULL && ntask_traceparent[0] != '\0')
	{
		values[trace_arg + 1] = CStringGetTextDatum(ntask_traceparent);
		nulls[trace_arg + 1] = ' ';
	}
	nest = NewGUCNestLevel();
	(void) set_config_option("citus.function_opens_transaction_block", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	n = NtaskExecPlan(&f->plan, values, nulls, SPI_OK_SELECT);
	AtEOXact_GUC(true, nest);
	return n;
}

/*
 * coord_begin
 *		The checks every delegated call makes (NtaskDelegateWhy, Citus
 *		loaded, the _on form and the right to it): its form, or NULL with a
 *		DEBUG1 line saying why not (none when quiet).  In SPI.
 */
static CoordForm *
coord_begin(FunctionCallInfo fcinfo, int16 shard, const char *unless)
{
	const char *why;
	bool		quiet;
	CoordForm  *f;

	why = NtaskDelegateWhy(fcinfo, &quiet);
	if (why == NULL && unless != NULL)
		why = unless;
	if (why == NULL && GetConfigOption("citus.function_opens_transaction_block", true, false) == NULL)
		why = "Citus is not loaded";
	if (why == NULL && fcinfo->flinfo == NULL)
		why = "no function";
	if (why == NULL && shard >= 0 && !NtaskIsShardValue(shard))
		why = "not a shard value";
	if (why == NULL && shard >= 0 && NtaskIsLocalShard(shard))
		why = "the shard is on this node";
	f = why == NULL ? coord_form(fcinfo->flinfo->fn_oid, &why) : NULL;
	if (f == NULL && !quiet)
		elog(DEBUG1, "ntask: not delegated (shard %d): %s", shard, why);
	return f;
}

/*
 * coord_enter
 *		SPI_connect and the checks of a delegated call (coord_begin), and for
 *		a claim (queue_arg, else -1) those of its queue: its form, in SPI, or
 *		NULL (SPI finished: the call runs routed).
 */
static CoordForm *
coord_enter(FunctionCallInfo fcinfo, int16 shard, const char *unless, int queue_arg)
{
	CoordForm  *f;
	const char *why = NULL;

	if (NtaskShardCountKnown() == 0)
		return NULL;			/* a plain install: nothing to ask */
	SPI_connect();
	f = coord_begin(fcinfo, shard, unless);
	if (f != NULL && queue_arg >= 0)
	{
		if (shard < 0 && NtaskLocalShardCount() > 0)
			why = "the coordinator holds shards";
		else if (fcinfo->args[queue_arg].isnull ||
				 !coord_queue_plain(fcinfo->args[queue_arg].value))
			why = "the queue is unknown, or has a guard, flow control, order, fairness or aging";
		if (why != NULL)
		{
			elog(DEBUG1, "ntask: not delegated (shard %d): %s", shard, why);
			f = NULL;
		}
	}
	if (f == NULL)
		SPI_finish();
	return f;
}

/*
 * coord_srf
 *		Set up fcinfo's rows (a materialized SRF), with the caller's expected
 *		descriptor when it has one (the function scan's, the function's
 *		result columns): no build of the result type at every call.
 */
static void
coord_srf(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (rsinfo->setResult == NULL)
		InitMaterializedSRF(fcinfo, rsinfo->expectedDesc != NULL ? MAT_SRF_USE_EXPECTED_DESC : 0);
}

/* coord_put: the SPI result's rows as the rows of the SRF fcinfo */
static void
coord_put(FunctionCallInfo fcinfo, int n)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	desc = SPI_tuptable->tupdesc;
	Datum	   *values = palloc(sizeof(Datum) * desc->natts);
	bool	   *nulls = palloc(sizeof(bool) * desc->natts);
	int			i;

	for (i = 0; i < n; i++)
	{
		heap_deform_tuple(SPI_tuptable->vals[i], desc, values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * coord_wake
 *		A delegated enqueue committed its tasks on the node of their shard:
 *		wake what the coordinator's routed enqueue would have woken, its
 *		waiting claims of the queue and its worker (an http queue's
 *		dispatcher), at this transaction's commit.
 */
static void
coord_wake(FunctionCallInfo fcinfo, int n)
{
	int			created = 0;
	int			i;
	bool		isnull;
	char	   *queue;

	for (i = 0; i < n; i++)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull);

		if (!isnull && DatumGetBool(d))
			created++;
	}
	if (created == 0 || fcinfo->args[0].isnull)
		return;
	queue = TextDatumGetCString(fcinfo->args[0].value);
	if (fcinfo->args[3].isnull ||
		DatumGetTimestampTz(fcinfo->args[3].value) <= GetCurrentStatementStartTimestamp())
		NtaskWakeWaitersAtCommit(queue, created, 0);
	else
		NtaskWakeWaitersAtCommit(queue, 0, DatumGetTimestampTz(fcinfo->args[3].value));
	NtaskWakeWorkerAtCommit();
}

/*
 * NtaskCoordDelegate
 *		A plain call on the coordinator: when it may be delegated (above),
 *		run its _on form for shard and return true with its result: an SRF's
 *		rows materialized (InitMaterializedSRF), else *result and
 *		fcinfo->isnull.  False: the caller runs the call itself, routed (or
 *		on a plain install, or on a worker node, as before).  unless: why
 *		the call cannot be delegated, or NULL.  trace_arg: the index of an
 *		enqueue's traceparent argument, else -1.  Outside SPI.
 */
bool
NtaskCoordDelegate(FunctionCallInfo fcinfo, int16 shard, const char *unless,
				   int trace_arg, Datum *result)
{
	CoordForm  *f;
	int			n;

	*result = (Datum) 0;
	if ((f = coord_enter(fcinfo, shard, unless, -1)) == NULL)
		return false;
	elog(DEBUG1, "ntask: delegated path for shard %d", shard);
	n = coord_run(f, fcinfo, shard, trace_arg);
	if (fcinfo->flinfo->fn_retset)
	{
		coord_srf(fcinfo);
		coord_put(fcinfo, n);
		if (trace_arg >= 0)
			coord_wake(fcinfo, n);
	}
	else if (n != 1)
		elog(ERROR, "ntask: %s returned %d rows", f->plan.name, n);
	else
	{
		bool		isnull;
		int16		typlen;
		bool		typbyval;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		get_typlenbyval(SPI_gettypeid(SPI_tuptable->tupdesc, 1), &typlen, &typbyval);
		fcinfo->isnull = isnull;
		if (!isnull)
			*result = SPI_datumTransfer(d, typbyval, typlen);
	}
	SPI_finish();
	return true;
}

/*
 * coord_claim_on
 *		One delegated ntask_claim_on(s, queue, worker, 1, lease) for a
 *		ntask_transition_and_claim whose own shard value gave no task, with
 *		that call's queue (3), worker (4) and lease (11): its rows (0 or 1),
 *		in SPI_tuptable.  The plain ntask_claim of the same schema names
 *		the form.  -1: no such form, or no right to it.
 */
static int
coord_claim_on(FunctionCallInfo tac, int16 s)
{
	LOCAL_FCINFO(cf, 6);
	Oid			types[6] = {TEXTOID, TEXTOID, INT4OID, INTERVALOID, INTERVALOID, BOOLOID};
	Oid			fn;
	const char *why;
	CoordForm  *f;
	static Oid	claim_for = InvalidOid;
	static Oid	claim_fn = InvalidOid;
	static uint64 claim_looked = 0;

	/* looked up once per backend, again after an invalidation (coord_inval) */
	if (claim_for != tac->flinfo->fn_oid || claim_looked != coord_inval_count)
	{
		uint64		count = coord_inval_count;
		char	   *nsp = get_namespace_name(get_func_namespace(tac->flinfo->fn_oid));

		claim_fn = nsp == NULL ? InvalidOid :
			LookupFuncName(list_make2(makeString(nsp), makeString("ntask_claim")), 6, types, true);
		claim_for = tac->flinfo->fn_oid;
		claim_looked = count;
	}
	fn = claim_fn;
	if (!OidIsValid(fn) || (f = coord_form(fn, &why)) == NULL)
		return -1;
	InitFunctionCallInfoData(*cf, NULL, 6, InvalidOid, NULL, NULL);
	cf->args[0] = tac->args[3];
	cf->args[1] = tac->args[4];
	cf->args[2].value = Int32GetDatum(1);
	cf->args[2].isnull = false;
	cf->args[3] = tac->args[11];
	cf->args[4].value = (Datum) 0;
	cf->args[4].isnull = true;
	cf->args[5].value = BoolGetDatum(false);
	cf->args[5].isnull = false;
	elog(DEBUG1, "ntask: delegated path for shard %d", s);
	return coord_run(f, cf, s, -1);
}

/*
 * coord_tac_walk
 *		A delegated ntask_transition_and_claim of one task (its claim of 1)
 *		whose one row (tt) says it claimed nothing in its finished task's
 *		shard value: the walk goes on over the other values, as the routed
 *		claim's would, one delegated ntask_claim_on each, up to the first
 *		that gives a task; its row then carries the transition's answer.
 *		True when a row was put.
 */
static bool
coord_tac_walk(FunctionCallInfo fcinfo, int16 shard, SPITupleTable *tt)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tdesc = tt->tupdesc;
	Datum		finish[3];
	bool		finnull[3];
	int			ns = NtaskShardCount();
	int			i;

	/* the finish's columns: finish_result, finish_state, finish_run_at */
	if (tdesc->natts != 11 || ns < 2)
		return false;
	for (i = 0; i < 3; i++)
		finish[i] = SPI_getbinval(tt->vals[0], tdesc, 8 + i, &finnull[i]);
	if (coord_walk < 0 || coord_walk >= ns)
		coord_walk = (int) (pg_prng_uint32(&pg_global_prng_state) % (uint32) ns);
	for (i = 0; i < ns; i++)
	{
		int			at = (coord_walk + i) % ns;
		int16		s = NtaskShardValue(at);
		int			n;

		if (s == shard)
			continue;
		n = coord_claim_on(fcinfo, s);
		if (n < 0)
			return false;
		if (n > 0 && SPI_tuptable->tupdesc->natts == 8)
		{
			Datum		v[11];
			bool		nl[11];
			Datum		c[8];
			bool		cn[8];

			heap_deform_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, c, cn);
			/* the claim's 7 columns, the finish's 3, the claim's context */
			memcpy(v, c, sizeof(Datum) * 7);
			memcpy(nl, cn, sizeof(bool) * 7);
			memcpy(v + 7, finish, sizeof(finish));
			memcpy(nl + 7, finnull, sizeof(finnull));
			v[10] = c[7];
			nl[10] = cn[7];
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nl);
			coord_walk = (at + 1) % ns;
			return true;
		}
	}
	return false;
}

/*
 * NtaskCoordClaim
 *		A plain claim of one task (ntask_claim; ntask_transition_and_claim
 *		with shard its finished task's) on the coordinator: when it may be
 *		delegated and its queue (argument queue_arg) is plain, run its _on
 *		form and return true with its rows materialized.  shard -1
 *		(ntask_claim): walk the shard values from this backend's cursor, one
 *		delegated call each, up to the first that gives a task; a
 *		transition_and_claim whose own value gave none walks on the same
 *		way (coord_tac_walk).  So the answer is the routed claim's: a task
 *		when one is due in any shard value.  Outside SPI.
 */
bool
NtaskCoordClaim(FunctionCallInfo fcinfo, int16 shard, int queue_arg, const char *unless)
{
	CoordForm  *f;
	int			ns;
	int			n = 0;
	int			i;

	if ((f = coord_enter(fcinfo, shard, unless, queue_arg)) == NULL)
		return false;
	coord_srf(fcinfo);
	if (shard >= 0)
	{
		bool		isnull;
		SPITupleTable *tt;

		elog(DEBUG1, "ntask: delegated path for shard %d", shard);
		n = coord_run(f, fcinfo, shard, -1);
		tt = SPI_tuptable;
		if (n == 1)
			(void) SPI_getbinval(tt->vals[0], tt->tupdesc, 1, &isnull);
		if (n != 1 || !isnull || !coord_tac_walk(fcinfo, shard, tt))
		{
			SPI_tuptable = tt;
			coord_put(fcinfo, n);
		}
		SPI_finish();
		return true;
	}
	ns = NtaskShardCount();
	if (coord_walk < 0 || coord_walk >= ns)
		coord_walk = (int) (pg_prng_uint32(&pg_global_prng_state) % (uint32) ns);
	for (i = 0; i < ns && n == 0; i++)
	{
		int			at = (coord_walk + i) % ns;
		int16		s = NtaskShardValue(at);

		elog(DEBUG1, "ntask: delegated path for shard %d", s);
		n = coord_run(f, fcinfo, s, -1);
		coord_put(fcinfo, n);
		if (n > 0)
			coord_walk = (at + 1) % ns;
	}
	SPI_finish();
	return true;
}
