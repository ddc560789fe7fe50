/*-------------------------------------------------------------------------
 *
 * fair.h
 *	  Floor 2: the cursors of fair picks in shared memory (fair.c): the
 *	  partition key a fair queue (or one shard of it) served last.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/fair.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_FAIR_H
#define NTASK_FAIR_H

/* fair.c */
extern void NtaskFairShmemRequest(void);
extern void NtaskFairShmemStartup(void);
extern text *NtaskFairCursor(const char *queue);
extern void NtaskFairAdvance(const char *queue, text *key);
extern text *NtaskFairCursorShard(const char *queue, int16 shard);
extern void NtaskFairAdvanceShard(const char *queue, int16 shard, text *key);

#endif							/* NTASK_FAIR_H */
