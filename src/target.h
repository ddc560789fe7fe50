/*-------------------------------------------------------------------------
 *
 * target.h
 *	  Floor 3: a queue's http target, parsed and checked (target.c).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/target.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_TARGET_H
#define NTASK_TARGET_H

#include "utils/jsonb.h"

/* target.c: a queue's http target, parsed and checked */
typedef struct NtaskHttpTarget
{
	char	   *url;
	char	   *host;			/* lower-case, no brackets */
	bool		put;			/* PUT instead of POST */
	int			timeout_ms;
	int			max_inflight;	/* 0: only the GUC limits it */
	bool		keep_alive;		/* sends may reuse connections */
	char	   *reconcile_url;	/* NULL: none */
	char	   *reconcile_host; /* its host, as host */
	bool		has_content_type;
	int			nheaders;
	char	  **headers;		/* "Name: value" lines */
} NtaskHttpTarget;

extern bool NtaskTargetIsHttp(Jsonb *target);
extern void NtaskCheckTargetType(Jsonb *target);
extern NtaskHttpTarget *NtaskParseHttpTarget(Jsonb *target);

#endif							/* NTASK_TARGET_H */
