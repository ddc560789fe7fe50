/*-------------------------------------------------------------------------
 *
 * worker_shared.h
 *	  Floor 2: what a background worker shares (worker_shared.c): the
 *	  counters of ntask.worker_stats, its in-flight count and last error,
 *	  and the transaction helper of the worker's loop (worker.c,
 *	  dispatch.c, breaker.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/worker_shared.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_WORKER_SHARED_H
#define NTASK_WORKER_SHARED_H

/* ntask.worker_stats counters, in the view's column order */
typedef enum NtaskCounter
{
	NTASK_COUNT_DISPATCHED,
	NTASK_COUNT_ACCEPTED,
	NTASK_COUNT_TRANSIENT,
	NTASK_COUNT_PERMANENT,
	NTASK_COUNT_UNKNOWN,
	NTASK_COUNT_RECONCILED,
	NTASK_COUNT_EXPIRED_LEASES,
	NTASK_COUNT_REPAIRED,
	NTASK_COUNT_PRUNED,
	/* after last_error, last_error_at and database in the view */
	NTASK_COUNT_BREAKER_OPENED,
	NTASK_COUNT_BREAKER_CLOSED,
	NTASK_COUNT_BREAKER_PROBES,
	NTASK_COUNT_BREAKER_SKIPS,
	NTASK_NCOUNTERS
} NtaskCounter;

extern void NtaskWorkerCount(NtaskCounter counter, int64 n);
extern void NtaskWorkerSetInFlight(int n);
extern void NtaskWorkerError(const char *msg);
extern bool NtaskWorkerRunXact(void (*fn) (void *arg), void *arg,
							   const char *what);

#endif							/* NTASK_WORKER_SHARED_H */
