/*-------------------------------------------------------------------------
 *
 * settings.h
 *	  Floor 2: the settings (GUCs) the SQL functions read, defined and
 *	  registered by module.c (docs/reference.md lists them), and the check
 *	  of a W3C traceparent.  The background worker's settings are in
 *	  worker_settings.h.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/settings.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_SETTINGS_H
#define NTASK_SETTINGS_H

extern bool ntask_backoff_jitter;
extern bool ntask_attempt_on_row;
extern int	ntask_max_wait_ms;
extern int	ntask_max_result_bytes;
extern int	ntask_max_context_bytes;
extern int	ntask_max_claim_context_bytes;
extern int	ntask_max_parents;
extern int	ntask_rate_limit_slots;
extern int	ntask_fair_cursor_slots;
extern int	ntask_max_payload_bytes;
extern char *ntask_traceparent;

/* module.c: W3C Trace Context (version 00) */
#define NTASK_TRACEPARENT_LEN	55
extern bool NtaskTraceparentValid(const char *tp, const char **why);

#endif							/* NTASK_SETTINGS_H */
