/*-------------------------------------------------------------------------
 *
 * worker_settings.h
 *	  Floor 2: the background worker's settings (GUCs), defined and
 *	  registered by module.c (docs/worker.md lists them).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/worker_settings.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_WORKER_SETTINGS_H
#define NTASK_WORKER_SETTINGS_H

extern char *ntask_database;
extern bool ntask_worker_enabled;
extern int	ntask_max_databases;
extern int	ntask_naptime_ms;
extern int	ntask_http_max_inflight;
extern char *ntask_http_allowed_hosts;
/* its parsed form (the GUC's extra; http_parse.h), NULL: allows nothing */
extern const struct NtaskHostList *ntask_http_allowed_list;
extern int	ntask_http_connect_timeout_ms;
extern int	ntask_http_max_response_bytes;
extern int	ntask_http_retry_after_max;
extern char *ntask_worker_role;
extern int	ntask_worker_lock_timeout_ms;
extern int	ntask_worker_statement_timeout_ms;
extern int	ntask_audit_retention_s;
extern int	ntask_history_retention_s;

#endif							/* NTASK_WORKER_SETTINGS_H */
