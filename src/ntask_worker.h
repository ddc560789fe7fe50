/*-------------------------------------------------------------------------
 *
 * ntask_worker.h
 *	  Floor 5, the background worker: the launcher and the loop (worker.c),
 *	  housekeeping, HTTP dispatch and its circuit breaker.  It calls the
 *	  SQL API through SPI statements, never by C calls.
 *
 * The floors of src/ (docs/design.md "Floors"; src/floors.txt, checked by
 * scripts/check_layers.sh): a .c file includes postgres.h first, then the
 * headers whose names it uses, each of its level or a lower one; no file
 * calls a function of a higher level.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/ntask_worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_WORKER_H
#define NTASK_WORKER_H

/* housekeeping.c: counts[] = expired, repaired, pruned */
extern void NtaskHousekeep(int max_rows, bool deadlines, int64 *counts);
extern void NtaskHousekeepShard(int16 shard, int max_rows, bool deadlines, int64 *counts);
extern void NtaskHousekeepHistoryDist(int max_rows);

/* dispatch.c (runs only in the background worker) */
extern void NtaskDispatchInit(const char *schema);
extern bool NtaskDispatchTick(bool claim);
extern int	NtaskDispatchInFlight(void);
extern int	NtaskDispatchWait(long timeout_ms);
extern void NtaskDispatchRefreshQueues(void);

/* breaker.c: the circuit breaker of http queues (dispatch only) */
extern void NtaskBreakerLoad(void);
extern bool NtaskBreakerProbeDue(void);
extern long NtaskBreakerWaitMs(void);
extern int	NtaskBreakerClaimLimit(const char *queue, int inflight);
extern void NtaskBreakerSent(const char *queue);
extern void NtaskBreakerObserve(const char *queue, long http_status,
								int curl_code, bool refused);
extern void NtaskBreakerSync(void);

#endif							/* NTASK_WORKER_H */
