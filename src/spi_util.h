/*-------------------------------------------------------------------------
 *
 * spi_util.h
 *	  Floor 2: the saved SPI plan (NtaskPlan) and its execution, the
 *	  readers of its rows, the checks of SQL-callable arguments and the
 *	  small helpers every SQL function shares (spi_util.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/spi_util.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_SPI_UTIL_H
#define NTASK_SPI_UTIL_H

#include "compat.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/jsonb.h"

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
	bool		direct;			/* shard.c's direct variant: a generic plan */
} NtaskPlan;

/* spi_util.c */
extern void NtaskCheckNargs(FunctionCallInfo fcinfo, int nargs);
extern int	NtaskExecPlan(NtaskPlan *p, Datum *values, const char *nulls,
						  int expected_rc);
extern int	NtaskExecPlanCount(NtaskPlan *p, Datum *values, const char *nulls,
							   int expected_rc, long count);
extern bool NtaskPlansForCitus(void);
extern Datum NtaskInt8Array(Datum *elems, int n);
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
extern int64 NtaskTokenFloor(void);
extern void NtaskPlanSetDirect(bool on);
extern bool NtaskPlanWrites(SPIPlanPtr plan, bool locks);
extern Oid	NtaskCaller(void);
extern Oid	NtaskOwner(void);
extern int64 NtaskIntervalUsecs(const Interval *iv);
extern Interval *NtaskUsecsInterval(int64 usecs);
extern bool NtaskTrySubxact(void (*fn) (void *arg), void *arg, ErrorData **edata);
extern void NtaskAudit(const char *actor, const char *action, int64 task_id,
					   const char *queue, const char *reason,
					   const char *from_state, const char *to_state);
#endif							/* NTASK_SPI_UTIL_H */
