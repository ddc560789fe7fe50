/*-------------------------------------------------------------------------
 *
 * cron_parse.h
 *	  Pure-C parser of a 5-field cron expression (see the grammar in
 *	  cron.c): fields, ranges, lists, steps, month and day names, @aliases
 *	  and the "never fires" check.
 *
 * Nothing here includes postgres.h, allocates or reports errors: the
 * parser takes (pointer, length) input of any content, NUL bytes included,
 * and answers with a status and an error description, so the same file
 * links into the server module (cron.c turns the error into an ereport)
 * and into the fuzz harness fuzz/fuzz_cron.c.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/cron_parse.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_CRON_PARSE_H
#define NTASK_CRON_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* longest expression the SQL functions accept (22001 above); the parser
 * itself takes any length */
#define NTASK_CRON_MAX_EXPR_LEN		200

/* a parsed expression: bit v set when value v matches */
typedef struct NtaskCronSpec
{
	uint64_t	minute;			/* bits 0-59 */
	uint64_t	hour;			/* bits 0-23 */
	uint64_t	dom;			/* bits 1-31 */
	uint64_t	month;			/* bits 1-12 */
	uint64_t	dow;			/* bits 0-6, Sunday = 0 (7 is folded to 0) */
	bool		dom_star;		/* the day-of-month field starts with '*' */
	bool		dow_star;		/* the day-of-week field starts with '*' */
} NtaskCronSpec;

typedef enum NtaskCronStatus
{
	NTASK_CRON_OK = 0,
	NTASK_CRON_INVALID,			/* syntax or range error */
	NTASK_CRON_NEVER_FIRES		/* valid, but no day ever matches */
} NtaskCronStatus;

/*
 * What went wrong.  field is a static field name ("minute", ...,
 * "day-of-week") or NULL when the error is about the expression as a
 * whole; detail is the reason, formatted (and NUL-terminated) in place.
 * For an expression of at most NTASK_CRON_MAX_EXPR_LEN bytes the detail is
 * never truncated.
 */
typedef struct NtaskCronError
{
	const char *field;
	char		detail[512];
} NtaskCronError;

/*
 * ntask_cron_parse
 *		Parse expr[0..len) into *spec.  Returns NTASK_CRON_OK, or another
 *		status with *err filled in (and *spec unspecified).
 */
extern NtaskCronStatus ntask_cron_parse(const char *expr, size_t len,
										NtaskCronSpec *spec,
										NtaskCronError *err);

#endif							/* NTASK_CRON_PARSE_H */
