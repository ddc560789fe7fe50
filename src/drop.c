/*-------------------------------------------------------------------------
 *
 * drop.c
 *	  ntask.drop_extension_check: the event trigger that runs before
 *	  DROP EXTENSION ntask.
 *
 * A ddl_command_start trigger fires for every DROP EXTENSION, whichever
 * extension it names, and sees no list of dropped objects (sql_drop would,
 * but it runs after the drop, when this trigger and its function are gone
 * with the extension).  So the trigger reads the statement itself: a
 * DropStmt of OBJECT_EXTENSION naming "ntask".  Then ntask.drop_cleanup()
 * (SQL) unschedules ntask's pg_cron jobs and warns about the unfinished
 * tasks the drop takes with it.  All of it is in the DROP's transaction:
 * a drop that fails (dependent objects without CASCADE) keeps the jobs.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/drop.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/event_trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"

PG_FUNCTION_INFO_V1(ntask_drop_extension_check);

/*
 * ntask.drop_extension_check() RETURNS event_trigger
 *		On DROP EXTENSION ... ntask ...: SELECT ntask.drop_cleanup().
 */
Datum
ntask_drop_extension_check(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata;
	DropStmt   *stmt;
	ListCell   *lc;
	bool		ours = false;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("ntask: drop_extension_check must be called as an event trigger")));
	trigdata = (EventTriggerData *) fcinfo->context;
	if (trigdata->parsetree == NULL || !IsA(trigdata->parsetree, DropStmt))
		PG_RETURN_VOID();
	stmt = (DropStmt *) trigdata->parsetree;
	if (stmt->removeType != OBJECT_EXTENSION)
		PG_RETURN_VOID();
	foreach(lc, stmt->objects)
	{
		Node	   *obj = (Node *) lfirst(lc);

		if (IsA(obj, String) && strcmp(strVal(obj), "ntask") == 0)
			ours = true;
	}
	if (!ours)
		PG_RETURN_VOID();

	SPI_connect();
	if (SPI_execute("SELECT ntask.drop_cleanup()", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "ntask: ntask.drop_cleanup() failed");
	SPI_finish();
	PG_RETURN_VOID();
}
