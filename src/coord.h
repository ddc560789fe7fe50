/*-------------------------------------------------------------------------
 *
 * coord.h
 *	  The plain API through a Citus coordinator, delegated (coord.c): the
 *	  hooks at the start of the plain entry points, after their arguments
 *	  are checked.  docs/scaling.md "The plain API through the coordinator,
 *	  delegated".
 *
 * IDENTIFICATION
 *	  src/coord.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_COORD_H
#define NTASK_COORD_H

#include "fmgr.h"

extern bool NtaskCoordDelegate(FunctionCallInfo fcinfo, int16 shard, const char *unless,
							   int trace_arg, Datum *result);
extern bool NtaskCoordClaim(FunctionCallInfo fcinfo, int16 shard, int queue_arg,
							const char *unless);

#endif							/* NTASK_COORD_H */
