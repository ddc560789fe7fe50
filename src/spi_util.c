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

static Oid	spi_owner(void);
static void spi_prepare(NtaskPlan *p);
static int	spi_highest_param(const char *sql);
static void spi_check_version(void);
pg_noreturn static void spi_rethrow_without_statement(NtaskPlan *p);

static NtaskPlan spi_audit_plan = {
	"audit insert",
	.ncols = 0,
	"INSERT INTO ntask.audit (actor, action, task_id, queue, reason, "
	"                         from_state, to_state) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7)",
	7, {TEXTOID, TEXTOID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID}
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
	 * freshly analyzed as empty, it would be a sequential scan that stays
	 * in use as the table grows (every statement here reaches its rows by
	 * an index).  So plan with enable_seqscan (and jit) off, as a function's SET
	 * clause would; an error unwinds the settings with the transaction.
	 * search_path is pinned the same way: the statement runs as the owner,
	 * and a caller's search_path must never decide which type, cast or
	 * function a name in it means.  Parse analysis (prepare, and
	 * re-analysis after an invalidation) and execution both run as the
	 * owner.  A plan marked as_caller (the worker's calls of the API
	 * functions) runs as the caller, with only search_path pinned.
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
		 * jit_above_cost while each run touches a handful of rows; then
		 * every execution compiles (measured: a fair claim went from 4500
		 * to 140 claims/s, bench/fairness, once the table held 270k rows).
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
		v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		c = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
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
		c = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
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
	plan = SPI_prepare_cursor(p->sql, p->nargs, p->argtypes,
							  spi_distributed ? CURSOR_OPT_CUSTOM_PLAN :
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
text *
NtaskTupGetText(SPITupleTable *tt, int row, int col)
{
	bool		isnull;
	Datum		d = NtaskTupGetDatum(tt, row, col, &isnull);

	return isnull ? NULL : DatumGetTextPP(d);
}

/* NtaskTupGetCString: a text column as a palloc'd C string, or NULL. */
char *
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
 * NtaskGetDatum, NtaskGetText, ...: the same, of the last SPI result
 * (SPI_tuptable), for a caller that reads it before it runs anything else.
 */
Datum
NtaskGetDatum(int row, int col, bool *isnull)
{
	return NtaskTupGetDatum(SPI_tuptable, row, col, isnull);
}

text *
NtaskGetText(int row, int col)
{
	return NtaskTupGetText(SPI_tuptable, row, col);
}

char *
NtaskGetCString(int row, int col)
{
	return NtaskTupGetCString(SPI_tuptable, row, col);
}

int64
NtaskGetInt64(int row, int col)
{
	return NtaskTupGetInt64(SPI_tuptable, row, col);
}

int32
NtaskGetInt32(int row, int col)
{
	return NtaskTupGetInt32(SPI_tuptable, row, col);
}

bool
NtaskGetBool(int row, int col)
{
	return NtaskTupGetBool(SPI_tuptable, row, col);
}

/*
 * NtaskArgText
 *		Fetch a required text argument: NULL raises 22004, an empty string
 *		22023, more than maxlen bytes 22001.
 */
text *
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
Jsonb *
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
 * Whether the ledger holds an ended attempt of task $1 with token $2
 * (NtaskCheckTokenIssued's slow path; routed by the task id's shard).
 */
static NtaskPlan token_ledger_plan = {
	"token in the ledger",
	.ncols = 1,
	"SELECT 1 FROM ntask.attempt a "
	"WHERE a.task_id OPERATOR(pg_catalog.=) $1 "
	"  AND a.token OPERATOR(pg_catalog.=) $2" NTASK_SHARD_OF("a", "$1"),
	2, {INT8OID, INT8OID}
};

/*
 * NtaskCheckTokenIssued
 *		Raise NT003 unless token was issued for task_id, whose latest token
 *		is current: current itself, or the token of one of its ended
 *		attempts, each in the ledger (ntask.attempt).  Tokens come from one
 *		sequence per node (NtaskTokenNext), so a token issued for another
 *		task is never one of this task's: a worker that reports on the
 *		wrong task id is refused, never a race (races yield stale).  The
 *		common case, the current token, reads nothing; the others read the
 *		ledger by its key.  A token of an earlier timeline is taken as
 *		issued (see below).  Keeps the caller's SPI_tuptable.
 */
void
NtaskCheckTokenIssued(int64 task_id, int64 token, int64 current)
{
	bool		issued = (token == current);

	if (!issued && token >= 1 && token < current)
	{
		SPITupleTable *save_tt = SPI_tuptable;
		uint64		save_processed = SPI_processed;
		Datum		values[2];

		values[0] = Int64GetDatum(task_id);
		values[1] = Int64GetDatum(token);
		issued = NtaskExecPlan(&token_ledger_plan, values, NULL, SPI_OK_SELECT) > 0;
		SPI_tuptable = save_tt;
		SPI_processed = save_processed;

		/*
		 * A token of an earlier WAL timeline that the ledger does not hold:
		 * that timeline may have issued it in a claim whose WAL never
		 * reached this one (a failover to an asynchronous standby), so its
		 * holder did nothing wrong and gets the call's answer (stale), not
		 * NT003.  Such a token of another task gets stale too: NT003 can
		 * only be sure of tokens of this timeline.
		 */
		if (!issued && token < NtaskTokenFloor())
			issued = true;
	}
	if (!issued)
		ereport(ERROR,
				(errcode(ERRCODE_NTASK_TOKEN_NOT_ISSUED),
				 errmsg("ntask: token %lld was never issued for task %lld",
						(long long) token, (long long) task_id),
				 errhint("Use the token ntask_claim returned for this attempt of this task.")));
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
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(actor);
	values[1] = CStringGetTextDatum(action);
	values[2] = Int64GetDatum(task_id);
	if (task_id == 0)
		nulls[2] = 'n';
	values[3] = queue ? CStringGetTextDatum(queue) : (Datum) 0;
	if (queue == NULL)
		nulls[3] = 'n';
	values[4] = CStringGetTextDatum(reason);
	values[5] = from_state ? CStringGetTextDatum(from_state) : (Datum) 0;
	if (from_state == NULL)
		nulls[5] = 'n';
	values[6] = to_state ? CStringGetTextDatum(to_state) : (Datum) 0;
	if (to_state == NULL)
		nulls[6] = 'n';
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
Interval *
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
 * The shard values of a distributed install (ntask.shard_map, filled by
 * ntask_distribute; empty on a plain install), read once per backend by
 * the first enqueue or claim.  A backend that started before
 * ntask_distribute keeps what it read: reconnect after distributing.
 */
static NtaskPlan spi_shard_map_plan = {
	"shard map",
	.ncols = 1,
	"SELECT s.shard FROM ntask.shard_map s ORDER BY s.shard",
	0, {InvalidOid}
};
static int	spi_nshards = -1;
static int16 *spi_shards = NULL;

/* NtaskShardCount: how many shard values (0: a plain install); in SPI */
int
NtaskShardCount(void)
{
	if (spi_nshards < 0)
	{
		int			n = NtaskExecPlan(&spi_shard_map_plan, NULL, NULL, SPI_OK_SELECT);
		int16	   *v = MemoryContextAlloc(TopMemoryContext, sizeof(int16) * Max(n, 1));
		int			i;

		for (i = 0; i < n; i++)
			v[i] = (int16) NtaskGetInt32(i, 1);
		spi_shards = v;
		spi_nshards = n;
	}
	return spi_nshards;
}

/*
 * NtaskShardCountKnown: NtaskShardCount() when this backend has read the
 * shard map, else -1; outside SPI too (waiter.c's commit-time note)
 */
int
NtaskShardCountKnown(void)
{
	return spi_nshards;
}

/*
 * NtaskRefuseDistributed
 *		In SPI: 0A000 on a distributed install for a call whose rows are not
 *		laid out for it yet (docs/scaling.md "What is left": dependencies,
 *		checkpoints, signals, bulk actions).
 */
void
NtaskRefuseDistributed(const char *what)
{
	if (NtaskShardCount() > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ntask: %s is not supported on a distributed install yet", what),
				 errdetail("Its rows are not distributed with the tasks (docs/scaling.md, \"What is left\").")));
}

/* NtaskShardValue: the i-th shard value, 0 <= i < NtaskShardCount() */
int16
NtaskShardValue(int i)
{
	Assert(i >= 0 && i < spi_nshards);
	return spi_shards[i];
}

/*
 * NtaskShardOfKey
 *		The shard of a task of queue keyed by key (its partition key, or
 *		its task key without one): a hash of both over the shard values,
 *		so that an enqueue of the same key reaches the shard of the first
 *		(docs/scaling.md "The distribution column, decided").  0 on a plain
 *		install.  In SPI.
 */
int16
NtaskShardOfKey(text *queue, text *key)
{
	uint32		h;

	if (NtaskShardCount() == 0)
		return 0;
	h = hash_bytes((const unsigned char *) VARDATA_ANY(queue), VARSIZE_ANY_EXHDR(queue));
	h = hash_combine(h, hash_bytes((const unsigned char *) VARDATA_ANY(key),
								   VARSIZE_ANY_EXHDR(key)));
	return spi_shards[h % (uint32) spi_nshards];
}

/*
 * The shard a shard-addressed call (ntask_<f>_on, delegate.c) names, or -1
 * outside one: an enqueue's key must hash to it, and a claim looks in it
 * only (docs/scaling.md "One hop: delegated calls").
 */
static int	spi_shard_scope = -1;

/* NtaskSetShardScope: set the scope (-1: none); returns the one before */
int
NtaskSetShardScope(int shard)
{
	int			old = spi_shard_scope;

	spi_shard_scope = shard;
	return old;
}

/*
 * NtaskShardFor
 *		NtaskShardOfKey for an enqueue: in a shard-addressed call, a key of
 *		another shard is refused (22023), since the call runs on the node
 *		of the shard it names.  In SPI.
 */
int16
NtaskShardFor(text *queue, text *key)
{
	int16		shard = NtaskShardOfKey(queue, key);

	if (spi_shard_scope >= 0 && shard != spi_shard_scope)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: the task \"%s\" of queue \"%s\" belongs to shard %d, not %d",
						text_to_cstring(key), text_to_cstring(queue), shard, spi_shard_scope),
				 errhint("Pass ntask_shard(queue, key) as the shard: the partition key, or the task key without one.")));
	return shard;
}

/*
 * Citus' shard id of the shard value m.shard in ntask.task, the relation
 * found by name in the catalogs: a caller without USAGE on schema ntask
 * (a worker's role) cannot cast 'ntask.task' to regclass.
 */
#define SPI_SHARD_ID_OF_M \
	"pg_catalog.get_shard_id_for_distribution_column( " \
	"  (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n " \
	"   ON n.oid OPERATOR(pg_catalog.=) c.relnamespace " \
	"   WHERE n.nspname OPERATOR(pg_catalog.=) 'ntask' AND c.relname OPERATOR(pg_catalog.=) 'task')" \
	"  ::pg_catalog.regclass, m.shard) "

/*
 * The shards a claim walks: the call's shard in a shard-addressed call;
 * on a worker node, the shards whose placement is on this node; else every
 * shard value.  The placements (this node's shards, and each shard's node
 * below) are read once and kept until Citus moves a shard: a placement
 * change invalidates ntask.task's relcache entry on every node (Citus'
 * trigger on pg_dist_placement), spi_placement_inval marks the copies
 * stale, and the next claim reads them again (NtaskRefreshPlacements).
 * Marked, not freed: the callback can run within a claim that walks them.
 */
static NtaskPlan spi_local_shards_plan = {
	"local shards",
	.ncols = 1,
	"SELECT m.shard FROM ntask.shard_map m "
	"WHERE " SPI_SHARD_ID_OF_M "OPERATOR(pg_catalog.=) ANY (ARRAY( "
	"  SELECT p.shardid FROM pg_catalog.pg_dist_placement p "
	"  WHERE p.groupid OPERATOR(pg_catalog.=) (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l) "
	"    AND p.groupid OPERATOR(pg_catalog.<>) 0)) "
	"ORDER BY m.shard",
	0, {InvalidOid}
};
static int	spi_nlocal = -1;
static int16 *spi_local = NULL;
static int32 *spi_groups = NULL;
static bool spi_placements_stale = false;
static Oid	spi_task_relid = InvalidOid;

/* a relcache invalidation: of ntask.task, or of every relation (InvalidOid) */
static void
spi_placement_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == spi_task_relid)
		spi_placements_stale = true;
}

/*
 * spi_watch_placements: before a read of the placements, note ntask.task's
 * oid for spi_placement_inval, registered once per backend
 */
static void
spi_watch_placements(void)
{
	static bool registered = false;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(spi_placement_inval, (Datum) 0);
		registered = true;
	}
	spi_task_relid = get_relname_relid("task", get_namespace_oid("ntask", true));
}

/*
 * NtaskRefreshPlacements
 *		At the start of a claim: forget the placements read before Citus
 *		moved a shard, so that they are read again when needed.
 */
void
NtaskRefreshPlacements(void)
{
	if (!spi_placements_stale)
		return;
	spi_placements_stale = false;
	if (spi_local != NULL)
		pfree(spi_local);
	spi_local = NULL;
	spi_nlocal = -1;
	if (spi_groups != NULL)
		pfree(spi_groups);
	spi_groups = NULL;
}

/* spi_read_local_shards: fill spi_local; in SPI, on a distributed install */
static void
spi_read_local_shards(void)
{
	int			n;
	int16	   *v;
	int			i;

	spi_watch_placements();
	n = NtaskExecPlan(&spi_local_shards_plan, NULL, NULL, SPI_OK_SELECT);
	v = MemoryContextAlloc(TopMemoryContext, sizeof(int16) * Max(n, 1));

	for (i = 0; i < n; i++)
		v[i] = (int16) NtaskGetInt32(i, 1);
	spi_local = v;
	spi_nlocal = n;
}

/*
 * NtaskLocalShardCount: how many shard values this node holds (0 on the
 * coordinator without task shards); on a distributed install, in SPI
 */
int
NtaskLocalShardCount(void)
{
	if (spi_nlocal < 0)
		spi_read_local_shards();
	return spi_nlocal;
}

/* NtaskIsLocalShard: this node holds shard; on a distributed install, in SPI */
bool
NtaskIsLocalShard(int16 shard)
{
	int			i;

	for (i = 0; i < NtaskLocalShardCount(); i++)
		if (spi_local[i] == shard)
			return true;
	return false;
}

/*
 * The move interlock (docs/scaling.md "Shard moves").  A
 * distributed claim picks its tasks with a routed read (FOR UPDATE SKIP
 * LOCKED) and leases them with a second routed statement.  Citus takes a
 * shard's distribution-metadata lock (LockShardDistributionMetadata,
 * ShareLock) for routed writes only (citus_custom_scan.c:
 * CitusBeginModifyScan -> distributed_execution_locks.c:
 * AcquireMetadataLocks), so a shard move's final phase (shard_transfer.c:
 * BlockWritesToShardList, ExclusiveLock here and, through
 * lock_shard_metadata, on every node with metadata) did not wait for a
 * claim between its pick and its lease: the lease then went to the new
 * placement, where the pick's row locks are not, and could take a task
 * another claim had just leased there.  So a claim, housekeeping's sweep
 * of a shard and a receipt take that lock first, through Citus' own UDF
 * (resource_lock.c: lock_shard_metadata, which checks that the caller
 * owns the table: ntask's statements run as the extension's owner), held
 * to the end of the transaction: a move's final phase then waits for the
 * transaction, or the transaction waits for the move and runs on the new
 * placement.  The lock is of the shard's co-location group (Citus'
 * SetLocktagForShardDistributionMetadata: by co-location id and shard
 * index), so it covers the task's attempt and receipt shards too.  $1 the
 * shard value; ShareLock is 5.
 */
static NtaskPlan spi_shard_lock_plan = {
	"shard metadata lock",
	.ncols = 1,
	"SELECT pg_catalog.lock_shard_metadata(5, ARRAY( "
	"  SELECT DISTINCT pg_catalog.get_shard_id_for_distribution_column($1, s.v) "
	"  FROM pg_catalog.unnest($2) s(v) ORDER BY 1))",
	2, {REGCLASSOID, INT2ARRAYOID}
};

/*
 * NtaskLockShards
 *		On a distributed install, take the distribution-metadata lock
 *		(ShareLock) of the Citus shards of the n shard values in shards, in
 *		shard id order, held to the end of the transaction; then take in
 *		the invalidations of a move that committed while this waited, so
 *		that the next routed statement goes to the shard's new placement
 *		(its relation lock may be held already: no invalidations are read
 *		then).  Nothing on a plain install, nor where ntask.task is not a
 *		Citus table.  In SPI.
 */
void
NtaskLockShards(const int16 *shards, int n)
{
	Datum		values[2];
	Datum	   *elems;
	Oid			task_relid;
	int			i;

	/*
	 * not a Citus table (regress "distribute" fills the shard map of a
	 * plain install): nothing to lock
	 */
	if (n <= 0 || NtaskShardCount() == 0 || !spi_distributed)
		return;
	task_relid = get_relname_relid("task", get_namespace_oid("ntask", false));
	elems = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
		elems[i] = Int16GetDatum(shards[i]);
	values[0] = ObjectIdGetDatum(task_relid);
	values[1] = PointerGetDatum(construct_array(elems, n, INT2OID, sizeof(int16),
												true, TYPALIGN_SHORT));
	(void) NtaskExecPlan(&spi_shard_lock_plan, values, NULL, SPI_OK_SELECT);
	AcceptInvalidationMessages();
}

/* NtaskLockShard: NtaskLockShards of one shard value */
void
NtaskLockShard(int16 shard)
{
	NtaskLockShards(&shard, 1);
}

/* NtaskWalkShardCount: how many shards a claim walks (0: a plain install) */
int
NtaskWalkShardCount(void)
{
	if (NtaskShardCount() == 0)
		return 0;
	if (spi_shard_scope >= 0)
		return 1;
	if (spi_nlocal < 0)
		spi_read_local_shards();
	return spi_nlocal > 0 ? spi_nlocal : spi_nshards;
}

/* NtaskWalkShardValue: the i-th of them, 0 <= i < NtaskWalkShardCount() */
int16
NtaskWalkShardValue(int i)
{
	if (spi_shard_scope >= 0)
		return (int16) spi_shard_scope;
	if (spi_nlocal > 0)
		return spi_local[i];
	return NtaskShardValue(i);
}

/*
 * The Citus group (node) of each shard value, in spi_shards' order (both
 * sorted by shard), read like the local shards above (kept until a shard
 * moves): a queue-wide cap is shared out by node (claim.c, claim_limit).
 */
static NtaskPlan spi_shard_groups_plan = {
	"shard groups",
	.ncols = 2,
	"SELECT m.shard, pg_catalog.min(p.groupid) FROM ntask.shard_map m "
	"JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) "
	"  " SPI_SHARD_ID_OF_M
	"GROUP BY m.shard ORDER BY m.shard",
	0, {InvalidOid}
};

/*
 * NtaskShardGroupShards
 *		The shard values held by the node that holds shard (shard among
 *		them) into out (room for NtaskShardCount()); returns how many.  On
 *		a distributed install, in SPI.
 */
int
NtaskShardGroupShards(int16 shard, int16 *out)
{
	int			i;
	int			n = 0;
	int32		g = -1;

	if (spi_groups == NULL)
	{
		int			rows;
		int32	   *v;

		spi_watch_placements();
		rows = NtaskExecPlan(&spi_shard_groups_plan, NULL, NULL, SPI_OK_SELECT);
		v = MemoryContextAlloc(TopMemoryContext, sizeof(int32) * Max(spi_nshards, 1));

		if (rows != spi_nshards)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("ntask: %d of the %d shard values have a placement", rows, spi_nshards)));
		for (i = 0; i < rows; i++)
			v[i] = NtaskGetInt32(i, 2);
		spi_groups = v;
	}
	for (i = 0; i < spi_nshards; i++)
		if (spi_shards[i] == shard)
			g = spi_groups[i];
	for (i = 0; i < spi_nshards; i++)
		if (spi_groups[i] == g)
			out[n++] = spi_shards[i];
	return n;
}

/* NtaskIsShardValue: shard is a shard value of this install (0 on a plain one) */
bool
NtaskIsShardValue(int shard)
{
	int			i;

	if (NtaskShardCount() == 0)
		return shard == 0;
	for (i = 0; i < spi_nshards; i++)
		if (spi_shards[i] == shard)
			return true;
	return false;
}
