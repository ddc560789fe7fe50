/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  Calling a queue's guard function and parsing its answer.
 *
 * A guard is (task_key text, payload jsonb) RETURNS text.  It runs in the
 * claiming (or replaying) transaction while that transaction holds the
 * task's row lock, so it must be a quick database check (message edited,
 * recipient no longer a member), never an external call.  Its answer is
 * 'proceed', 'skip' or 'cancel', optionally followed by ':' and a reason
 * that is recorded on the task.  Anything else raises NT005.
 *
 * IDENTIFICATION
 *	  src/guard.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "utils/builtins.h"
#include "utils/regproc.h"

static bool guard_word(const char *answer, const char *word, char **reason);

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
 * NtaskRunGuard
 *		Call guard(task_key, payload) and classify the answer.  *reason gets
 *		the answer's reason (palloc'd in the current context) or NULL.
 *		A NULL or unrecognised answer raises NT005 naming the function.
 */
NtaskGuardVerdict
NtaskRunGuard(Oid guard, text *task_key, Jsonb *payload, char **reason)
{
	LOCAL_FCINFO(gcinfo, 2);
	FmgrInfo	flinfo;
	Datum		result;
	char	   *answer;

	fmgr_info(guard, &flinfo);
	InitFunctionCallInfoData(*gcinfo, &flinfo, 2, InvalidOid, NULL, NULL);
	gcinfo->args[0].value = PointerGetDatum(task_key);
	gcinfo->args[0].isnull = false;
	gcinfo->args[1].value = JsonbPGetDatum(payload);
	gcinfo->args[1].isnull = false;
	result = FunctionCallInvoke(gcinfo);
	if (gcinfo->isnull)
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
