/*-------------------------------------------------------------------------
 *
 * spi_util.c
 *	  The one SPI pattern ntask uses (saved plans in statics, every return
 *	  code checked), result accessors, argument checks shared by the SQL
 *	  entry points, and the audit writer.
 *
 * All functions here run inside an SPI connection opened by the caller;
 * values they return live in the current (SPI procedure) memory context
 * unless noted.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/spi_util.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "ntask_base.h"
#include "spi_util.h"

#include "common/hashfn.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "utils/array.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(ntask_caller_name);
PG_FUNCTION_INFO_V1(ntask_outer_role);

/* the role that called into ntask while a statement runs as the owner */
static Oid	spi_caller = InvalidOid;

/*
 * A call is on the Citus direct path (shard.c sets it, NtaskPlanSetDirect):
 * a plan that is not one of its direct statements may then read, not write.
 */
static bool spi_direct_call = false;

static Oid	spi_owner(void);
static void spi_prepare(NtaskPlan *p);
static int	spi_highest_param(const char *sql);
static void spi_check_version(void);
pg_noreturn static void spi_rethrow_without_statement(NtaskPlan *p);

typedef enum SpiAuditArg
{
	SPI_AUDIT_ARG_ACTOR,		/* $1 */
	SPI_AUDIT_ARG_ACTION,		/* $2 */
	SPI_AUDIT_ARG_TASK_ID,		/* $3, NULL: none */
	SPI_AUDIT_ARG_QUEUE,		/* $4, NULL: none */
	SPI_AUDIT_ARG_REASON,		/* $5 */
	SPI_AUDIT_ARG_FROM_STATE,	/* $6, NULL: none */
	SPI_AUDIT_ARG_TO_STATE,		/* $7, NULL: none */
	SPI_AUDIT_NARGS
} SpiAuditArg;

static NtaskPlan spi_audit_plan = {
	"audit insert",
	.ncols = 0,
	"INSERT INTO ntask.audit (actor, action, task_id, queue, reason, "
	"                         from_state, to_state) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7)",
	SPI_AUDIT_NARGS, {TEXTOID, TEXTOID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID}
};

/*
 * NtaskExecPlan
 *		Prepare p once per backend (SPI_prepare_cursor with a forced generic
 *		plan, then SPI_keepplan), execute it
 *		with the given parameters, and check the return code.
 *
 * The statement runs as the owner of schema ntask (the role that created
 * the extension), like the body of a SECURITY DEFINER function: callers
 * hold only EXECUTE on the API functions (see "Privileges" in
 * docs/design.md), never rights on the tables.  The caller's identity
 * stays available to the statement as ntask.caller_name() (the db_user
 * columns) and is what the C code checks queue rights against.
 *
 * nulls follows SPI conventions (' ' not null, 'n' null) and may be NULL.
 * Raises an internal error when SPI returns anything but expected_rc.
 * Returns SPI_processed.  Results are in SPI_tuptable.
 */
int
NtaskExecPlan(NtaskPlan *p, Datum *values, const char *nulls, int expected_rc)
{
	return NtaskExecPlanCount(p, values, nulls, expected_rc, 0);
}

/*
 * NtaskExecPlanCount
 *		NtaskExecPlan that stops the executor after count rows (0: all).  A
 *		locking SELECT locks only the rows it returns, so a statement may
 *		carry a generous constant LIMIT (which its generic plan is costed
 *		for) while each call fetches and locks just what it needs.
 */
int
NtaskExecPlanCount(NtaskPlan *p, Datum *values, const char *nulls,
				   int expected_rc, long count)
{
	volatile int rc = 0;
	Oid			save_userid;
	int			save_sec_context;
	Oid			save_caller;
	volatile Oid owner = InvalidOid;
	int			save_nestlevel;

	/*
	 * The generic plan is built (or rebuilt after an invalidation) inside
	 * SPI_execute_plan, and then kept.  Built while a table was small or
	 * freshly analyzed as empty, it would be a sequential scan that stays in
	 * use as the table grows (every statement here reaches its rows by an
	 * index).  So plan with enable_seqscan (and jit) off, as a function's SET
	 * clause would; an error unwinds the settings with the transaction.
	 * search_path is pinned the same way: the statement runs as the owner,
	 * and a caller's search_path must never decide which type, cast or
	 * function a name in it means.  Parse analysis (prepare, and re-analysis
	 * after an invalidation) and execution both run as the owner.  A plan
	 * marked as_caller (the worker's calls of the API functions) runs as the
	 * caller, with only search_path pinned.
	 */
	if (!p->as_caller)
		owner = spi_owner();	/* may raise: nothing is changed yet */
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (!p->as_caller)
	{
		(void) set_config_option("enable_seqscan", "off", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);

		/*
		 * Nor JIT: the decision is taken when the plan is built, from its
		 * estimated cost, and a generic plan over a big table can pass
		 * jit_above_cost while each run touches a handful of rows; then every
		 * execution compiles (measured: a fair claim went from 4500 to 140
		 * claims/s, bench/fairness, once the table held 270k rows).
		 */
		(void) set_config_option("jit", "off", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	}
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	save_caller = spi_caller;
	PG_TRY();
	{
		if (!p->as_caller)
		{
			spi_caller = save_userid;
			SetUserIdAndSecContext(owner,
								   save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
		}
		if (p->plan == NULL)
			spi_prepare(p);

		/*
		 * A call on the direct path writes through its pairs' direct
		 * variants only (shard.h): a routed write next to a direct one would
		 * not be atomic.  A routed read (an error's details) may run.
		 */
		if (!p->direct && spi_direct_call && NtaskPlanWrites(p->plan, true))
			elog(ERROR, "ntask: %s would write routed in a call on the direct path", p->name);
		rc = SPI_execute_plan(p->plan, values, nulls, false, count);
	}
	PG_CATCH();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
		spi_caller = save_caller;
		spi_rethrow_without_statement(p);
	}
	PG_END_TRY();
	SetUserIdAndSecContext(save_userid, save_sec_context);
	spi_caller = save_caller;
	AtEOXact_GUC(true, save_nestlevel);
	if (rc != expected_rc)
		elog(ERROR, "ntask: %s failed: %s", p->name, SPI_result_code_string(rc));

	/*
	 * The callers read the result by column number (each file's column enum):
	 * a statement whose column list and enum have drifted apart fails here,
	 * not by reading the wrong column.  Not an Assert: builds are not
	 * cassert.
	 */
	if ((SPI_tuptable != NULL ? SPI_tuptable->tupdesc->natts : 0) != p->ncols)
		elog(ERROR, "ntask: %s returned %d columns, declared %d",
			 p->name, SPI_tuptable != NULL ? SPI_tuptable->tupdesc->natts : 0,
			 p->ncols);
	return (int) SPI_processed;
}

/*
 * NtaskPlanWrites
 *		plan may write a table: anything but a plain SELECT (a modifying
 *		CTE included; a plan not analyzed now counts as writing), and with
 *		locks also a row lock (FOR UPDATE and the like).
 */
bool
NtaskPlanWrites(SPIPlanPtr plan, bool locks)
{
	ListCell   *lc;

	foreach(lc, SPI_plan_get_plan_sources(plan))
	{
		CachedPlanSource *src = (CachedPlanSource *) lfirst(lc);
		ListCell   *lq;

		if (src->query_list == NIL)
			return true;
		foreach(lq, src->query_list)
		{
			Query	   *q = lfirst_node(Query, lq);

			if (q->commandType != CMD_SELECT || q->hasModifyingCTE ||
				(locks && q->rowMarks != NIL))
				return true;
		}
	}
	return false;
}

/*
 * spi_rethrow_without_statement
 *		Re-raise the error being handled without the text of ntask's own
 *		statement p: SPI adds it as a context line ("SQL statement ...") and,
 *		for an error at parse analysis, as the internal query.  Those
 *		hundreds of characters of internal SQL tell a user nothing (the
 *		message, detail and hint say what went wrong) and would make the
 *		statement text part of what users see.  The other context lines (a
 *		PL/pgSQL function of the user's, an outer statement) are kept.
 *		Called in PG_CATCH, only on the error path.
 */
static void
spi_rethrow_without_statement(NtaskPlan *p)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	ErrorData  *edata;
	char	   *line;

	/* an error while aborting, or out of memory: leave it as it is */
	if (!IsTransactionState())
	{
		MemoryContextSwitchTo(oldcxt);
		PG_RE_THROW();
	}
	edata = CopyErrorData();
	FlushErrorState();
	if (edata->internalquery != NULL && strcmp(edata->internalquery, p->sql) == 0)
	{
		edata->internalquery = NULL;
		edata->internalpos = 0;
	}
	line = psprintf("SQL statement \"%s\"", p->sql);
	if (edata->context != NULL)
	{
		char	   *at = strstr(edata->context, line);

		if (at != NULL)
		{
			StringInfoData buf;
			const char *rest = at + strlen(line);

			/* the line and its separator: "\n" after it, else before it */
			initStringInfo(&buf);
			if (*rest == '\n')
				rest++;
			else if (at > edata->context && at[-1] == '\n')
				at--;
			appendBinaryStringInfo(&buf, edata->context, at - edata->context);
			appendStringInfoString(&buf, rest);
			edata->context = buf.len > 0 ? buf.data : NULL;
		}
	}
	MemoryContextSwitchTo(oldcxt);
	ReThrowError(edata);
}

/*
 * spi_check_version
 *		The statements are written for this library's SQL objects.  After
 *		a new library is installed and before ALTER EXTENSION ntask UPDATE,
 *		say so instead of failing on a missing column.
 */
/*
 * Whether ntask.task is a Citus distributed table here (ntask_distribute):
 * found by spi_check_version before each prepare.  Citus plans a
 * statement over a distributed table only once its parameters are known
 * (a generic plan fails with "could not create distributed plan",
 * docs/scaling.md "Scaling out with Citus"), so there every statement is
 * prepared for custom plans.  A plain install, and a database that has
 * Citus but a local ntask, keep the forced generic plans.  The test reads
 * the catalogs only: an as_caller plan is prepared as the background
 * worker's role, which has no USAGE on schema ntask ('ntask.task'::regclass
 * failed its claims with "permission denied for schema ntask").
 */
static bool spi_distributed = false;

/* the columns of spi_check_version's reads */
typedef enum SpiVersionCol
{
	SPI_VERSION_EXTVERSION = 1,
	SPI_VERSION_CITUS,			/* Citus' catalogs are here */
	SPI_VERSION_DISTRIBUTED = 1 /* the second read's: ntask.task is
								 * distributed */
} SpiVersionCol;

static void
spi_check_version(void)
{
	char	   *v = NULL;
	char	   *c = NULL;

	if (SPI_execute("SELECT extversion, "
					"  pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL "
					"FROM pg_catalog.pg_extension "
					"WHERE extname OPERATOR(pg_catalog.=) 'ntask'",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
	{
		v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, SPI_VERSION_EXTVERSION);
		c = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, SPI_VERSION_CITUS);
	}
	spi_distributed = false;
	if (c != NULL && c[0] == 't' &&
		SPI_execute("SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p "
					"  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) p.logicalrelid "
					"  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
					"  WHERE n.nspname OPERATOR(pg_catalog.=) 'ntask' "
					"    AND c.relname OPERATOR(pg_catalog.=) 'task')",
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
	{
		c = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, SPI_VERSION_DISTRIBUTED);
		spi_distributed = (c != NULL && c[0] == 't');
	}
	if (v == NULL || strcmp(v, NTASK_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ntask: the library is version %s but the extension in this database is version %s",
						NTASK_VERSION, v ? v : "(none)"),
				 errhint("Run ALTER EXTENSION ntask UPDATE.")));
}

/*
 * NtaskPlansForCitus: whether ntask.task was a Citus distributed table when
 * this backend last prepared a statement (spi_distributed); shard.c's lock
 * of a shard's placement metadata is taken only then
 */
bool
NtaskPlansForCitus(void)
{
	return spi_distributed;
}

/*
 * NtaskCheckNargs
 *		First thing in a C entry point whose SQL signature gained arguments
 *		since an earlier version: called through that version's definition
 *		(the library updated, ALTER EXTENSION not run yet) it has fewer
 *		arguments than the code reads, so refuse before reading any (55000,
 *		as spi_check_version says it).
 */
void
NtaskCheckNargs(FunctionCallInfo fcinfo, int nargs)
{
	if (PG_NARGS() == nargs)
		return;
	SPI_connect();
	spi_check_version();		/* raises, naming both versions */
	elog(ERROR, "ntask: %s called with %d arguments, not %d",
		 get_func_name(fcinfo->flinfo->fn_oid), PG_NARGS(), nargs);
}

/*
 * spi_prepare
 *		Prepare p and keep the plan for the life of the backend.  A generic
 *		plan (except on a distributed install, spi_distributed): these
 *		statements are short and keyed on indexes, and letting the plancache
 *		try custom plans first makes it replan on every call whenever it
 *		judges LIMIT $n generically too costly.
 */
static void
spi_prepare(NtaskPlan *p)
{
	SPIPlanPtr	plan;
	CachedPlanSource *src;
	int			highest;

	spi_check_version();
	/* a direct variant names shard relations only: PostgreSQL plans it */
	plan = SPI_prepare_cursor(p->sql, p->nargs, p->argtypes,
							  spi_distributed && !p->direct ? CURSOR_OPT_CUSTOM_PLAN :
							  CURSOR_OPT_GENERIC_PLAN);

	if (plan == NULL)
		elog(ERROR, "ntask: could not prepare %s: %s",
			 p->name, SPI_result_code_string(SPI_result));

	/*
	 * The statement checks itself once, here: its parameters against nargs,
	 * its result columns against ncols (the result of the last of its
	 * statements is the one SPI returns).  A plan that shares a longer
	 * argument list with its distributed twin and does not use the last ones
	 * declares only the ones it uses (nargs = its highest $N): SPI reads just
	 * the first nargs values of the array the caller passes.
	 */
	highest = spi_highest_param(p->sql);
	if (highest != p->nargs)
		elog(ERROR, "ntask: %s uses $%d, declared %d parameters",
			 p->name, highest, p->nargs);
	src = llast(SPI_plan_get_plan_sources(plan));
	if ((src->resultDesc != NULL ? src->resultDesc->natts : 0) != p->ncols)
		elog(ERROR, "ntask: %s returns %d columns, declared %d",
			 p->name, src->resultDesc != NULL ? src->resultDesc->natts : 0,
			 p->ncols);
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "ntask: could not keep plan %s", p->name);
	p->plan = plan;
}

/*
 * spi_highest_param
 *		The highest $N in the text of one of ntask's statements, outside
 *		string literals and quoted identifiers ('...', "...": a doubled
 *		quote inside one closes and reopens it, which leaves the scan in the
 *		right state).  ntask's SQL has no comments, dollar quotes or E''
 *		strings, so this is all the lexing it needs.
 */
static int
spi_highest_param(const char *sql)
{
	int			highest = 0;
	char		quote = '\0';
	const char *c;

	for (c = sql; *c != '\0'; c++)
	{
		if (quote != '\0')
		{
			if (*c == quote)
				quote = '\0';
		}
		else if (*c == '\'' || *c == '"')
			quote = *c;
		else if (*c == '$' && isdigit((unsigned char) c[1]))
		{
			int			n = 0;

			while (isdigit((unsigned char) c[1]))
				n = n * 10 + (*++c - '0');
			highest = Max(highest, n);
		}
	}
	return highest;
}

/* NtaskInt8Array: a bigint[] Datum of n int64 Datums (palloc'd). */
Datum
NtaskInt8Array(Datum *elems, int n)
{
	return PointerGetDatum(construct_array(elems, n, INT8OID, sizeof(int64),
										   true, TYPALIGN_DOUBLE));
}

/*
 * NtaskTupGetDatum
 *		Column col (1-based) of row of tuple table tt: the result a caller
 *		kept (tt = SPI_tuptable right after its NtaskExecPlan), read while
 *		statements run in between have replaced SPI_tuptable.
 */
Datum
NtaskTupGetDatum(SPITupleTable *tt, int row, int col, bool *isnull)
{
	Assert(tt != NULL && row < (int) tt->numvals);
	return SPI_getbinval(tt->vals[row], tt->tupdesc, col, isnull);
}

/* NtaskTupGetText: a text column, or NULL for SQL NULL. */
text	   *
NtaskTupGetText(SPITupleTable *tt, int row, int col)
{
	bool		isnull;
	Datum		d = NtaskTupGetDatum(tt, row, col, &isnull);

	return isnull ? NULL : DatumGetTextPP(d);
}

/* NtaskTupGetCString: a text column as a palloc'd C string, or NULL. */
char	   *
NtaskTupGetCString(SPITupleTable *tt, int row, int col)
{
	text	   *t = NtaskTupGetText(tt, row, col);

	return t ? text_to_cstring(t) : NULL;
}

/* NtaskTupGetInt64: a bigint column; SQL NULL reads as 0. */
int64
NtaskTupGetInt64(SPITupleTable *tt, int row, int col)
{
	bool		isnull;
	Datum		d = NtaskTupGetDatum(tt, row, col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

/* NtaskTupGetInt32: an integer column; SQL NULL reads as 0. */
int32
NtaskTupGetInt32(SPITupleTable *tt, int row, int col)
{
	bool		isnull;
	Datum		d = NtaskTupGetDatum(tt, row, col, &isnull);

	return isnull ? 0 : DatumGetInt32(d);
}

/* NtaskTupGetBool: a boolean column; SQL NULL reads as false. */
bool
NtaskTupGetBool(SPITupleTable *tt, int row, int col)
{
	bool		isnull;
	Datum		d = NtaskTupGetDatum(tt, row, col, &isnull);

	return isnull ? false : DatumGetBool(d);
}

/*
 * NtaskArgText
 *		Fetch a required text argument: NULL raises 22004, an empty string
 *		22023, more than maxlen bytes 22001.
 */
text	   *
NtaskArgText(FunctionCallInfo fcinfo, int argno, const char *argname, int maxlen)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: %s must not be NULL", argname)));
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s must not be empty", argname)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("ntask: %s is too long", argname),
				 errdetail("It is %d bytes; the limit is %d.", len, maxlen)));
	return t;
}

/*
 * NtaskArgArray
 *		Fetch a one-dimensional array argument of elmtype for a batch call.
 *		NULL raises 22004; more than one dimension, or more than
 *		NTASK_MAX_BATCH elements, 22023; a NULL element 22004 unless
 *		nulls_ok (then *nulls says which, else *nulls may be NULL).  Returns
 *		the element count (0 for an empty array).
 */
int
NtaskArgArray(FunctionCallInfo fcinfo, int argno, const char *argname,
			  Oid elmtype, bool nulls_ok, Datum **elems, bool **nulls)
{
	ArrayType  *arr;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	bool	   *isnull;
	int			n;
	int			i;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: %s must not be NULL", argname)));
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s must be a one-dimensional array", argname)));
	if (ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr)) > NTASK_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s has more than %d elements", argname,
						NTASK_MAX_BATCH),
				 errhint("Split the batch.")));
	get_typlenbyvalalign(elmtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elmtype, typlen, typbyval, typalign,
					  elems, &isnull, &n);
	if (!nulls_ok)
		for (i = 0; i < n; i++)
			if (isnull[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("ntask: %s[%d] must not be NULL", argname, i + 1)));
	if (nulls)
		*nulls = isnull;
	return n;
}

/*
 * NtaskArgJsonb
 *		Fetch a required jsonb argument; NULL raises 22004.
 */
Jsonb	   *
NtaskArgJsonb(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: %s must not be NULL", argname),
				 errhint("Use '{}' for an empty payload.")));
	return PG_GETARG_JSONB_P(argno);
}

/*
 * NtaskArgInt64
 *		Fetch a required bigint argument; NULL raises 22004.
 */
int64
NtaskArgInt64(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: %s must not be NULL", argname)));
	return PG_GETARG_INT64(argno);
}

/*
 * NtaskTaskNotFound
 *		Raise P0002 for an unknown task_id.
 */
void
NtaskTaskNotFound(int64 task_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_NO_DATA_FOUND),
			 errmsg("ntask: task %lld does not exist", (long long) task_id)));
}

/*
 * A token carries the WAL timeline it was issued on in its high bits, from
 * NTASK_TIMELINE_SHIFT up (docs/scaling.md "Task ids and tokens").  The
 * same bit as NTASK_SHARD_SHIFT, but of another number: a task id's shard
 * bits and a token's timeline bits have nothing to do with each other.
 * Timelines above NTASK_MAX_TIMELINE count as that one: a higher one
 * would overflow the sign bit.
 */
#define NTASK_TIMELINE_SHIFT	48
#define NTASK_MAX_TIMELINE		((INT64CONST(1) << (63 - NTASK_TIMELINE_SHIFT)) - 1)

/*
 * NtaskTokenFloor
 *		The lowest token a claim on this WAL timeline may issue:
 *		((timeline - 1) << 48) + 1.  On timeline 1 that is 1, so tokens are
 *		1, 2, 3, ...; after a promotion every token is above any token an
 *		older timeline can have issued, even one whose claim never reached
 *		the new primary (failover to an asynchronous standby).  2^48 claims
 *		of one task per timeline are far beyond any budget.
 */
int64
NtaskTokenFloor(void)
{
	int64		tli = (int64) GetWALInsertionTimeLine();

	tli = Min(Max(tli, 1), NTASK_MAX_TIMELINE);
	return ((tli - 1) << NTASK_TIMELINE_SHIFT) + 1;
}

/*
 * NtaskCheckPositiveInterval
 *		Raise 22023 unless iv is strictly positive and finite-sized
 *		(at most 10 years; a longer lease or deadline is a typo).
 */
void
NtaskCheckPositiveInterval(Interval *iv, const char *argname)
{
	Interval	zero = {0};
	Interval	ten_years = {0};

	ten_years.month = 120;
	if (DatumGetBool(DirectFunctionCall2(interval_le,
										 IntervalPGetDatum(iv),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s must be a positive interval", argname)));
	if (DatumGetBool(DirectFunctionCall2(interval_gt,
										 IntervalPGetDatum(iv),
										 IntervalPGetDatum(&ten_years))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s must not exceed 10 years", argname)));
}

/*
 * NtaskAudit
 *		Append one row to ntask.audit in the caller's transaction, so the
 *		audit record commits or rolls back with the action it describes.
 */
void
NtaskAudit(const char *actor, const char *action, int64 task_id,
		   const char *queue, const char *reason,
		   const char *from_state, const char *to_state)
{
	Datum		values[SPI_AUDIT_NARGS];
	char		nulls[SPI_AUDIT_NARGS];

	memset(nulls, ' ', sizeof(nulls));
	values[SPI_AUDIT_ARG_ACTOR] = CStringGetTextDatum(actor);
	values[SPI_AUDIT_ARG_ACTION] = CStringGetTextDatum(action);
	values[SPI_AUDIT_ARG_TASK_ID] = Int64GetDatum(task_id);
	if (task_id == 0)
		nulls[SPI_AUDIT_ARG_TASK_ID] = 'n';
	values[SPI_AUDIT_ARG_QUEUE] = queue ? CStringGetTextDatum(queue) : (Datum) 0;
	if (queue == NULL)
		nulls[SPI_AUDIT_ARG_QUEUE] = 'n';
	values[SPI_AUDIT_ARG_REASON] = CStringGetTextDatum(reason);
	values[SPI_AUDIT_ARG_FROM_STATE] = from_state ? CStringGetTextDatum(from_state) : (Datum) 0;
	if (from_state == NULL)
		nulls[SPI_AUDIT_ARG_FROM_STATE] = 'n';
	values[SPI_AUDIT_ARG_TO_STATE] = to_state ? CStringGetTextDatum(to_state) : (Datum) 0;
	if (to_state == NULL)
		nulls[SPI_AUDIT_ARG_TO_STATE] = 'n';
	NtaskExecPlan(&spi_audit_plan, values, nulls, SPI_OK_INSERT);
}

/*
 * spi_owner
 *		The owner of schema ntask: the role whose rights ntask's statements
 *		run with.  A syscache lookup, cheap enough per statement, and right
 *		after DROP/CREATE EXTENSION in the same session.
 */
static Oid
spi_owner(void)
{
	HeapTuple	tup = SearchSysCache1(NAMESPACENAME, CStringGetDatum("ntask"));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_SCHEMA),
				 errmsg("ntask: schema \"ntask\" does not exist"),
				 errhint("CREATE EXTENSION ntask in this database.")));
	owner = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner;
	ReleaseSysCache(tup);
	return owner;
}

/* NtaskOwner: spi_owner for shard.c's fmgr calls (the move interlock) */
Oid
NtaskOwner(void)
{
	return spi_owner();
}

/*
 * NtaskCaller
 *		The role that called the API function: the current user, or, while
 *		a statement of ours runs as the owner, the user from before.
 */
Oid
NtaskCaller(void)
{
	return OidIsValid(spi_caller) ? spi_caller : GetUserId();
}

/*
 * ntask.caller_name() RETURNS name
 *		The default of the db_user columns (audit, receipt, fence_receipt):
 *		who called ntask, not the owner its statements run as.
 */
Datum
ntask_caller_name(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(DirectFunctionCall1(namein,
										CStringGetDatum(GetUserNameFromId(NtaskCaller(), false))));
}

/*
 * ntask.outer_role() RETURNS oid
 *		The role the session is acting as (SET ROLE, else the session user),
 *		whatever SECURITY DEFINER functions run now: who called the API from
 *		outside.  For a trigger under a SECURITY DEFINER plpgsql function
 *		(ntask_schedule), where current_user is the owner.  A SECURITY
 *		DEFINER function of the application that calls ntask is seen as the
 *		session's role, not its owner.
 */
Datum
ntask_outer_role(PG_FUNCTION_ARGS)
{
	PG_RETURN_OID(GetOuterUserId());
}

/*
 * NtaskIntervalUsecs
 *		An interval as microseconds, a month counting 30 days: for lease and
 *		backoff arithmetic, never for calendar arithmetic.
 */
int64
NtaskIntervalUsecs(const Interval *iv)
{
	return iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/* NtaskUsecsInterval: a palloc'd interval of usecs microseconds (no days) */
Interval   *
NtaskUsecsInterval(int64 usecs)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = usecs;
	return iv;
}

/*
 * NtaskTrySubxact
 *		Run fn(arg) in a subtransaction of the current transaction (the way
 *		PL/pgSQL runs an EXCEPTION block).  True when it completed; false
 *		when it raised: the subtransaction (and whatever fn did) is rolled
 *		back, and the error is copied into *edata, allocated in the calling
 *		memory context, and cleared.  Row locks and SPI state of the outer
 *		transaction are kept; SPI_tuptable is restored.
 */
bool
NtaskTrySubxact(void (*fn) (void *arg), void *arg, ErrorData **edata)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	SPITupleTable *save_tuptable = SPI_tuptable;
	volatile bool ok = true;

	*edata = NULL;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		*edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		ok = false;
	}
	PG_END_TRY();
	SPI_tuptable = save_tuptable;
	return ok;
}

/*
 * NtaskPlanSetDirect
 *		A call is on the direct path from now (true) or no longer (false);
 *		shard.c says so as it chooses, ends or loses (the transaction's end)
 *		the path.  NtaskExecPlan refuses a routed write in between.
 */
void
NtaskPlanSetDirect(bool on)
{
	spi_direct_call = on;
}
