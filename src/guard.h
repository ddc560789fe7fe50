/*-------------------------------------------------------------------------
 *
 * guard.h
 *	  Floor 3: a queue's guard, the function a claim asks before it hands
 *	  a task out (guard.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/guard.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_GUARD_H
#define NTASK_GUARD_H

#include "utils/jsonb.h"

/* guard.c */
typedef enum NtaskGuardVerdict
{
	NTASK_GUARD_PROCEED,
	NTASK_GUARD_SKIP,
	NTASK_GUARD_CANCEL,
	NTASK_GUARD_ERROR,			/* raised; *reason holds the message */
	NTASK_GUARD_BUSY			/* a lock timeout or deadlock: leave it due */
} NtaskGuardVerdict;

extern NtaskGuardVerdict NtaskRunGuard(const char *name, const char *owner,
									   text *task_key, Jsonb *payload,
									   char **reason, bool catch_errors);
extern char *NtaskGuardName(Oid guard);
extern Oid	NtaskResolveGuard(const char *name);
extern void NtaskCheckGuardHome(Oid guard, Oid nsp);
extern char *NtaskQueueGuard(text *queue, char **owner);

#endif							/* NTASK_GUARD_H */
