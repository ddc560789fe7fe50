/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  Resolving, checking and calling a queue's guard function.
 *
 * A guard is (task_key text, payload jsonb) RETURNS text.  It runs in the
 * claiming (or replaying) transaction while that transaction holds the
 * task's row lock, so it must be a quick database check (message edited,
 * recipient no longer a member), never an external call.  Its answer is
 * 'proceed', 'skip' or 'cancel', optionally followed by ':' and a reason
 * that is recorded on the task.  Anything else raises NT005.
 *
 * The queue stores the guard as a schema-qualified signature text
 * ("public.notify_guard(text,jsonb)"), never as an OID or regprocedure:
 * pg_upgrade refuses regprocedure columns, and OIDs do not survive a dump.
 * It is resolved at every use, so the name alone cannot be trusted: the
 * queue also records the role that owned the function when the guard was
 * set (guard_owner), and the function the name resolves to is used only
 * when it still has that owner and is neither in a temporary schema nor
 * part of an extension (NtaskCheckGuardHome; the same is required to set
 * it).  Otherwise, or when it does not resolve (renamed, moved, dropped
 * with event triggers off), that is an error of that task, not of the
 * queue.  An event trigger (ntask_guard_ddl, on sql_drop) refuses a
 * command that drops a function some queue uses; it looks only at what
 * that command drops.
 *
 * Rights: the guard runs as its own owner, never as the caller of the
 * claim (the background worker, or any worker role), under
 * SECURITY_RESTRICTED_OPERATION and with search_path pinned to
 * pg_catalog, the guard's own schema, pg_temp, the way PostgreSQL runs
 * index expressions: a guard written by an ntask_admin can do what that
 * admin can do and nothing more, and cannot change session state (SET
 * ROLE, SET SESSION AUTHORIZATION, temporary objects) of the process that
 * calls it.  The owner needs EXECUTE on the function.  Whatever settings
 * the guard changes (SET, set_config, session-level or local) are undone
 * when it returns.
 *
 * A cancel or statement timeout during a guard is never caught: it aborts
 * the claim (57014).  A lock timeout or deadlock in a guard leaves that
 * task due (NTASK_GUARD_BUSY) instead of sending it to repair.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/guard.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "guard.h"
#include "ntask_base.h"
#include "spi_util.h"

#include "access/htup_details.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

static bool guard_word(const char *answer, const char *word, char **reason);
static NtaskGuardVerdict guard_call(Oid guard, const char *owner_name,
									text *task_key, Jsonb *payload,
									char **reason);

/* a queue's guard and the owner recorded with it, read from one row */
typedef enum GuardQueueArg
{
	GUARD_QUEUE_ARG_QUEUE,		/* $1 */
	GUARD_QUEUE_NARGS
} GuardQueueArg;

typedef enum GuardQueueCol
{
	GUARD_QUEUE_GUARD = 1,
	GUARD_QUEUE_OWNER,
	GUARD_QUEUE_NCOLS = GUARD_QUEUE_OWNER
} GuardQueueCol;

static NtaskPlan guard_queue_plan = {
	"guard of queue",
	.ncols = GUARD_QUEUE_NCOLS,
	"SELECT q.guard, q.guard_owner::pg_catalog.text FROM ntask.queue q "
	"WHERE q.queue OPERATOR(pg_catalog.=) $1",
	GUARD_QUEUE_NARGS, {TEXTOID}
};

/*
 * guard_word
 *		True when answer is word, or word followed by ':' and a reason; the
 *		trimmed reason (or NULL) goes to *reason.
 */
static bool
guard_word(const char *answer, const char *word, char **reason)
{
	size_t		n = strlen(word);

	if (pg_strncasecmp(answer, word, n) != 0)
		return false;
	if (answer[n] == '\0')
	{
		*reason = NULL;
		return true;
	}
	if (answer[n] != ':')
		return false;
	answer += n + 1;
	while (*answer == ' ')
		answer++;
	*reason = *answer ? pstrdup(answer) : NULL;
	return true;
}

/*
 * NtaskGuardName
 *		The text a queue stores for guard, a function the caller checked to
 *		be (text, jsonb): "schema.name(text,jsonb)", schema-qualified, read
 *		back by NtaskResolveGuard with search_path pinned.
 */
char *
NtaskGuardName(Oid guard)
{
	char	   *name = get_func_name(guard);
	char	   *nsp = get_namespace_name(get_func_namespace(guard));

	if (name == NULL || nsp == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("ntask: guard function %u does not exist", guard)));
	return psprintf("%s(text,jsonb)", quote_qualified_identifier(nsp, name));
}

/*
 * NtaskResolveGuard
 *		The function a stored guard name ("schema.name(text,jsonb)") means
 *		now.  Looked up in the catalogs directly: the caller of the claim
 *		needs no USAGE on the guard's schema (the guard runs as its owner),
 *		and no search_path is involved.  42883 when it does not resolve
 *		(dropped or renamed behind ntask's back).
 */
Oid
NtaskResolveGuard(const char *name)
{
	static const char suffix[] = "(text,jsonb)";
	size_t		len = strlen(name);
	Oid			guard = InvalidOid;

	if (len > sizeof(suffix) - 1 &&
		strcmp(name + len - (sizeof(suffix) - 1), suffix) == 0)
	{
		char	   *qualified = pnstrdup(name, len - (sizeof(suffix) - 1));
		List	   *names = stringToQualifiedNameList(qualified, NULL);
		char	   *nspname;
		char	   *proname;

		DeconstructQualifiedName(names, &nspname, &proname);
		if (nspname != NULL)
		{
			Oid			nsp = get_namespace_oid(nspname, true);
			Oid			argtypes[2] = {TEXTOID, JSONBOID};
			oidvector  *args = buildoidvector(argtypes, 2);

			if (OidIsValid(nsp))
				guard = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
										CStringGetDatum(proname),
										PointerGetDatum(args),
										ObjectIdGetDatum(nsp));
		}
	}
	if (!OidIsValid(guard))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("ntask: guard function %s does not exist", name),
				 errhint("Set the queue's guard again with ntask_queue_set, or remove it with ntask_queue_clear_guard.")));
	return guard;
}

/*
 * NtaskCheckGuardHome
 *		A guard (in schema nsp) must not live in a temporary schema (once its
 *		session ends, whoever next gets that pg_temp_N could define a
 *		function of its name, and it is dropped without any DDL event) nor
 *		belong to an extension (an extension's update or drop replaces or
 *		removes it behind the queue's back).  22023 otherwise.  Checked when
 *		the guard is set and at every use.
 */
void
NtaskCheckGuardHome(Oid guard, Oid nsp)
{
	Oid			ext = getExtensionOfObject(ProcedureRelationId, guard);

	if (isAnyTempNamespace(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: guard function %s is in a temporary schema",
						quote_identifier(get_func_name(guard))),
				 errhint("Create the guard function in a permanent schema.")));
	if (OidIsValid(ext))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: guard %s belongs to extension \"%s\"",
						format_procedure(guard),
						get_extension_name(ext)),
				 errhint("A guard is a function of its own; it may call the extension's functions.")));
}

/*
 * NtaskQueueGuard
 *		The stored guard of queue (NULL when it has none) and in *owner the
 *		role recorded with it (NULL when none was), from one read of the
 *		queue row.  In SPI; changes SPI_tuptable.
 */
char *
NtaskQueueGuard(text *queue, char **owner)
{
	Datum		values[GUARD_QUEUE_NARGS];

	values[GUARD_QUEUE_ARG_QUEUE] = PointerGetDatum(queue);
	*owner = NULL;
	if (NtaskExecPlan(&guard_queue_plan, values, NULL, SPI_OK_SELECT) == 0)
		return NULL;
	*owner = NtaskTupGetCString(SPI_tuptable, 0, GUARD_QUEUE_OWNER);
	return NtaskTupGetCString(SPI_tuptable, 0, GUARD_QUEUE_GUARD);
}

/*
 * guard_call
 *		Call guard(task_key, payload) as the guard's owner in a restricted
 *		security context, and classify the answer.  owner_name is the role
 *		recorded when the guard was set: a function with another owner (one
 *		defined under the guard's name after it was renamed or dropped) is
 *		refused (42501).  Raises on any problem.
 */
static NtaskGuardVerdict
guard_call(Oid guard, const char *owner_name, text *task_key, Jsonb *payload,
		   char **reason)
{
	LOCAL_FCINFO(gcinfo, 2);
	FmgrInfo	flinfo;
	volatile Datum result = (Datum) 0;
	char	   *answer;
	HeapTuple	tup;
	Oid			owner;
	Oid			nsp;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	volatile bool isnull = true;

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(guard));
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("ntask: guard function %u does not exist", guard)));
	owner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	nsp = ((Form_pg_proc) GETSTRUCT(tup))->pronamespace;
	ReleaseSysCache(tup);
	NtaskCheckGuardHome(guard, nsp);
	if (owner_name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: guard %s has no recorded owner",
						format_procedure(guard)),
				 errhint("Set the queue's guard again with ntask_queue_set.")));
	{
		char	   *actual = GetUserNameFromId(owner, true);

		if (actual == NULL || strcmp(actual, owner_name) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("ntask: guard %s is owned by %s, not by %s, its owner when it was set",
							format_procedure(guard),
							actual ? actual : "an unknown role", owner_name),
					 errhint("If this function is meant to be the guard, set it again with ntask_queue_set.")));
	}
	if (object_aclcheck(ProcedureRelationId, guard, owner, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ntask: the owner of guard %s may not execute it",
						format_procedure(guard))));

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	save_nestlevel = NewGUCNestLevel();
	PG_TRY();
	{
		char	   *nspname = get_namespace_name(nsp);

		SetUserIdAndSecContext(owner, save_sec_context |
							   SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		(void) set_config_option("search_path",
								 psprintf("pg_catalog, %s, pg_temp",
										  quote_identifier(nspname ? nspname : "pg_catalog")),
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		fmgr_info(guard, &flinfo);
		InitFunctionCallInfoData(*gcinfo, &flinfo, 2, DEFAULT_COLLATION_OID,
								 NULL, NULL);
		gcinfo->args[0].value = PointerGetDatum(task_key);
		gcinfo->args[0].isnull = false;
		gcinfo->args[1].value = JsonbPGetDatum(payload);
		gcinfo->args[1].isnull = false;
		result = FunctionCallInvoke(gcinfo);
		isnull = gcinfo->isnull;
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	/* undo every setting the guard changed, not only search_path */
	AtEOXact_GUC(false, save_nestlevel);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NTASK_GUARD_ANSWER),
				 errmsg("ntask: guard %s returned NULL", format_procedure(guard)),
				 errhint("A guard answers 'proceed', 'skip[: reason]' or 'cancel[: reason]'.")));
	answer = TextDatumGetCString(result);

	if (guard_word(answer, "proceed", reason))
		return NTASK_GUARD_PROCEED;
	if (guard_word(answer, "skip", reason))
		return NTASK_GUARD_SKIP;
	if (guard_word(answer, "cancel", reason))
		return NTASK_GUARD_CANCEL;
	ereport(ERROR,
			(errcode(ERRCODE_NTASK_GUARD_ANSWER),
			 errmsg("ntask: guard %s returned an invalid answer \"%s\"",
					format_procedure(guard), answer),
			 errhint("A guard answers 'proceed', 'skip[: reason]' or 'cancel[: reason]'.")));
	pg_unreachable();
}

/*
 * NtaskRunGuard
 *		Resolve and call the guard stored as name, classify the answer.
 *		*reason gets the answer's reason (palloc'd in the current context)
 *		or NULL.
 *
 *		With catch_errors (claim), the call runs in a subtransaction: an
 *		error (the guard raised, returned NULL or nonsense, does not resolve,
 *		has another owner, its owner lost EXECUTE) is rolled back and
 *		reported as NTASK_GUARD_ERROR with the message in *reason, so one bad
 *		guard never stops its queue; a lock timeout or deadlock is
 *		NTASK_GUARD_BUSY (the task is fine, something it reads was busy);
 *		a cancel or statement timeout (57014) is raised again: it is meant
 *		for the whole statement, and caught here it would leave the rest of
 *		the claim with no timeout.  Without catch_errors (replay), errors
 *		propagate to the operator who asked.
 */
/* one guard call, for NtaskTrySubxact */
typedef struct GuardCall
{
	const char *name;
	const char *owner;
	text	   *task_key;
	Jsonb	   *payload;
	char	   *reason;
	NtaskGuardVerdict verdict;
} GuardCall;

static void
guard_call_step(void *arg)
{
	GuardCall  *c = (GuardCall *) arg;

	c->verdict = guard_call(NtaskResolveGuard(c->name), c->owner, c->task_key,
							c->payload, &c->reason);
}

NtaskGuardVerdict
NtaskRunGuard(const char *name, const char *owner, text *task_key,
			  Jsonb *payload, char **reason, bool catch_errors)
{
	GuardCall	c;
	ErrorData  *edata;

	c.name = name;
	c.owner = owner;
	c.task_key = task_key;
	c.payload = payload;
	c.reason = NULL;
	c.verdict = NTASK_GUARD_ERROR;
	if (!catch_errors)
		guard_call_step(&c);
	else if (!NtaskTrySubxact(guard_call_step, &c, &edata))
	{
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(edata);
		c.verdict = edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
			edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ?
			NTASK_GUARD_BUSY : NTASK_GUARD_ERROR;
		c.reason = psprintf("%s (SQLSTATE %s)", edata->message,
							unpack_sql_state(edata->sqlerrcode));
		FreeErrorData(edata);
	}
	*reason = c.reason;
	return c.verdict;
}
