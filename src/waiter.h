/*-------------------------------------------------------------------------
 *
 * waiter.h
 *	  Floor 2: the slots of the waiting claims in shared memory (waiter.c;
 *	  the waiting claim itself is wait.c).  Their wake-at-commit is in
 *	  wake.h.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/waiter.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_WAITER_H
#define NTASK_WAITER_H

#include "datatype/timestamp.h"

/* waiter.c */
extern void NtaskWaitShmemRequest(void);
extern void NtaskWaitShmemStartup(void);
extern bool NtaskWaiterAvailable(void);
extern bool NtaskWaiterBusy(void);
extern void NtaskWaiterRegister(const char *queue, int max_tasks,
								TimestampTz until);
extern TimestampTz NtaskWaiterRearm(TimestampTz now);
extern TimestampTz NtaskWaiterHint(bool *woken);
extern void NtaskWaiterSetCapped(bool capped);
extern void NtaskWaiterUnregister(bool filled);

#endif							/* NTASK_WAITER_H */
