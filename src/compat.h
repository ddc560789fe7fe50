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
 * 16 moved the varlena macros (VARDATA_ANY, VARSIZE_ANY_EXHDR, ...) from
 * postgres.h to varatt.h; a file that uses them and includes none of the
 * headers that bring varatt.h along includes this one.
 */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
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

/*
 * 16 replaced the per-class pg_proc_aclcheck(), pg_database_ownercheck() ...
 * by object_aclcheck() and object_ownercheck() taking the catalog's OID,
 * and gave stringToQualifiedNameList() a soft-error context (NULL: throw).
 * For 15, the classes ntask checks (functions, databases); another class
 * is a programming error.
 */
#if PG_VERSION_NUM < 160000
#include "catalog/pg_database_d.h"
#include "catalog/pg_proc_d.h"
#include "utils/acl.h"
#include "utils/regproc.h"

static inline AclResult
object_aclcheck(Oid classid, Oid objectid, Oid roleid, AclMode mode)
{
	if (classid != ProcedureRelationId)
		elog(ERROR, "ntask: object_aclcheck for class %u is not in compat.h", classid);
	return pg_proc_aclcheck(objectid, roleid, mode);
}

static inline bool
object_ownercheck(Oid classid, Oid objectid, Oid roleid)
{
	if (classid != DatabaseRelationId)
		elog(ERROR, "ntask: object_ownercheck for class %u is not in compat.h", classid);
	return pg_database_ownercheck(objectid, roleid);
}

#define stringToQualifiedNameList(string, escontext) \
	stringToQualifiedNameList(string)
#endif

/*
 * 17 made a WaitEventSet belong to a resource owner instead of a memory
 * context; the dispatcher's set lives across transactions and is freed by
 * FreeWaitEventSet(), so on 17+ it belongs to none (NULL: the caller
 * frees it) and on 15-16 it is allocated in the caller's long-lived cxt.
 */
#if PG_VERSION_NUM >= 170000
#define NtaskCreateWaitEventSet(cxt, nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define NtaskCreateWaitEventSet(cxt, nevents) CreateWaitEventSet((cxt), (nevents))
#endif

/*
 * A GUC's "extra" (check hooks): from 16 guc.c frees it with guc_free(),
 * which is pfree() in its own memory context, so it must come from
 * guc_malloc(); 15 frees it with free() (malloc).  A block from malloc()
 * made the postmaster of 18 stop at start: "pfree called with invalid
 * pointer" (TAP 003 on 18, ntask.http_allowed_hosts' check hook).
 */
#if PG_VERSION_NUM >= 160000
#define NtaskGucMalloc(size) guc_malloc(LOG, (size))
#else
#define NtaskGucMalloc(size) malloc(size)
#endif

/*
 * 18 gave index_beginscan() an instrumentation argument (EXPLAIN's counts
 * of an index scan; NULL: none); claim.c's probe of expired leases scans
 * an index in C.
 */
#if PG_VERSION_NUM >= 180000
#define NtaskIndexBeginscan(heap, index, snap, nkeys, norderbys) \
	index_beginscan((heap), (index), (snap), NULL, (nkeys), (norderbys))
#else
#define NtaskIndexBeginscan(heap, index, snap, nkeys, norderbys) \
	index_beginscan((heap), (index), (snap), (nkeys), (norderbys))
#endif

/* intervals can be infinite from 17 on */
#if PG_VERSION_NUM >= 170000
#define NtaskIntervalNotFinite(iv) INTERVAL_NOT_FINITE(iv)
#else
#define NtaskIntervalNotFinite(iv) false
#endif

#endif							/* NTASK_COMPAT_H */
