/*-------------------------------------------------------------------------
 *
 * limit.h
 *	  Floor 2: the token buckets of rate limits and shares in shared memory
 *	  (limit.c), and the bounded shared hash tables they and fair.c keep.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/limit.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_LIMIT_H
#define NTASK_LIMIT_H

#include "datatype/timestamp.h"
#include "utils/hsearch.h"

/* limit.c: token buckets of rate limits */
extern void NtaskLimitShmemRequest(void);
extern void NtaskLimitShmemStartup(void);
extern bool NtaskLimitAvailable(void);
#define NTASK_LIMIT_QUEUE	1
#define NTASK_LIMIT_KEY		2
extern int	NtaskLimitTake(const char *queue, int qn, int64 qper_usecs,
						   const char *key, int keylen, int kn,
						   int64 kper_usecs, TimestampTz now,
						   TimestampTz *next);
extern bool NtaskShareTake(const char *queue, float4 share, bool retry);

/* the bounded hash tables in shared memory of limit.c and fair.c */
extern TimestampTz NtaskShmemEvict(HTAB *htab, TimestampTz now,
								   TimestampTz (*evictable_at) (void *entry),
								   void *keep);
extern void *NtaskShmemEnter(HTAB *htab, const void *id, int slots,
							 TimestampTz now, TimestampTz *evict_after,
							 TimestampTz (*evictable_at) (void *entry),
							 void *keep, bool *found);
extern bool NtaskShmemFullLog(TimestampTz *logged_at, TimestampTz now);

#endif							/* NTASK_LIMIT_H */
