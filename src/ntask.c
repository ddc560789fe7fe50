/*-------------------------------------------------------------------------
 *
 * ntask.c
 *	  Module entry: PG_MODULE_MAGIC, _PG_init and the ntask.* GUCs.
 *
 * ntask keeps durable tasks in the application's database and hands them
 * to workers under leases with fencing tokens.  This file owns only
 * start-up; each SQL function lives in the file named after its area
 * (enqueue.c, claim.c, transition.c, ...).  The background worker
 * registers here once it exists (issue: background worker).
 *
 * IDENTIFICATION
 *	  src/ntask.c
 *
 *-------------------------------------------------------------------------
 */
#include "ntask.h"

#include "utils/guc.h"

PG_MODULE_MAGIC;

/* ntask.backoff_jitter: randomise retry delays (tests turn it off) */
bool		ntask_backoff_jitter = true;

void		_PG_init(void);

/*
 * _PG_init
 *		Define the GUCs.  Safe to run both from shared_preload_libraries and
 *		on first use in a backend.
 */
void
_PG_init(void)
{
	DefineCustomBoolVariable("ntask.backoff_jitter",
							 "Randomise retry delays (equal jitter).",
							 "When off, a transient failure waits exactly "
							 "min(backoff_base * 2^(attempt-1), backoff_max); "
							 "meant for deterministic tests.",
							 &ntask_backoff_jitter,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	MarkGUCPrefixReserved("ntask");
}
