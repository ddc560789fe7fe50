/*-------------------------------------------------------------------------
 *
 * wake.h
 *	  Floor 2: whom a transaction wakes when it commits: the worker
 *	  (worker_shared.c), the launcher, and the waiting claims of a queue
 *	  (waiter.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/wake.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_WAKE_H
#define NTASK_WAKE_H

#include "datatype/timestamp.h"

/* worker_shared.c */
extern void NtaskWakeWorkerAtCommit(void);
extern void NtaskWakeLauncherAtCommit(void);

/* waiter.c: the waiters of a queue (ndue tasks due now, or one at later) */
extern void NtaskWakeCappedAtCommit(const char *queue, int nfreed);
extern void NtaskWakeWaitersAtCommit(const char *queue, int ndue,
									 TimestampTz later);

#endif							/* NTASK_WAKE_H */
