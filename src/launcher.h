/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  Floor 2: the launcher's and the workers' slots in shared memory
 *	  (worker_shared.c): who serves which database, the probes and the
 *	  holds of a database, the registration of the launcher.  Only
 *	  worker.c and the module's start-up (module.c) use them.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/launcher.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_LAUNCHER_H
#define NTASK_LAUNCHER_H

#include "datatype/timestamp.h"

/* the shared memory of the launcher and the workers (module.c's start-up) */
extern void NtaskShmemRequest(void);
extern void NtaskShmemStartup(void);
extern void NtaskWorkerHoldDatabase(const char *dbname);
extern int	NtaskWorkerSlots(void);
extern void NtaskWorkerRegister(void);

/* what a probe (or a worker) saw in its database */
#define NTASK_PROBE_NONE		0	/* nothing yet: it could not connect? */
#define NTASK_PROBE_INSTALLED	1
#define NTASK_PROBE_ABSENT		2

/* a DDL that needs its database alone holds workers off that long */
#define NTASK_HOLD_MS			10000

extern void NtaskLauncherAttach(void);
extern void NtaskLauncherDetach(void);
extern uint32 NtaskLauncherProbeGeneration(void);
extern void NtaskLauncherSetProblem(const char *problem, int nserving);
extern void NtaskSlotBind(int i, Oid dboid, const char *dbname, bool serving);
extern void NtaskSlotServe(int i);
extern void NtaskSlotRename(int i, const char *dbname);
extern void NtaskSlotFree(int i);
extern pid_t NtaskSlotPid(int i);
extern Oid	NtaskSlotPeek(int i, int *probe, TimestampTz *hold_until);
extern pid_t NtaskWorkerTakeSlot(int i);
extern void NtaskWorkerReleaseSlot(void);
extern void NtaskWorkerSetProbe(int probe);
extern void NtaskWorkerSetState(const char *state);
extern void NtaskWorkerSetLastTick(TimestampTz now);

#endif							/* NTASK_LAUNCHER_H */
