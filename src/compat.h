/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  The one place where ntask copes with the PostgreSQL versions it is
 *	  built against (15 and 18 are tested; docs/design.md "PostgreSQL
 *	  versions" lists every API that differs and the test that covers it).
 *
 * The code is written against the newest API; each guard below supplies
 * it on older servers, keyed on PG_VERSION_NUM, the way pg_cron and
 * pgvector do.  No .c file tests PG_VERSION_NUM itself.
 *
 * IDENTIFICATION
 *	  src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_COMPAT_H
#define NTASK_COMPAT_H

#include "postgres.h"

#if PG_VERSION_NUM < 150000
#error "ntask needs PostgreSQL 15 or later"
#endif

/*
 * 18 replaced the trailing pg_attribute_noreturn() by the C11-style
 * pg_noreturn specifier in front of the declaration (c.h); 15-17 have
 * only the former, which expands to __attribute__((noreturn)), and GCC
 * and clang accept that in front as well.
 */
#if PG_VERSION_NUM < 180000 && !defined(pg_noreturn)
#define pg_noreturn pg_attribute_noreturn()
#endif

#endif							/* NTASK_COMPAT_H */
