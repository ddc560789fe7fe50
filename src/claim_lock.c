/*-------------------------------------------------------------------------
 *
 * claim_lock.c
 *	  The cap lock of a queue and the turn lock of a partition key: locks
 *	  that only ntask can take (docs/design.md "Who may block a claim").
 *
 * A claim of a queue with a cap (max_inflight) tries the queue's cap lock,
 * and a fair or ordered pick tries a key's turn lock, before it hands out
 * work of the queue or the key (claim.c).  Both were advisory locks
 * (pg_try_advisory_xact_lock of a hash): any role that can connect can
 * call pg_advisory_lock, compute the hash (hashtextextended is executable
 * by PUBLIC) or read it from pg_locks, and hold the lock for as long as it
 * likes, and every claim of a capped queue, or of that key, then got
 * nothing.
 *
 * Here they are heavyweight locks in the lock manager's user lock method
 * with a locktag class of ntask's own: an advisory LOCKTAG whose fourth
 * field is NTASK_LOCKTAG_CAP or NTASK_LOCKTAG_TURN.  The SQL advisory lock
 * functions only ever make the classes 1 (one bigint) and 2 (two integers),
 * so no SQL statement of another role can take, wait for or release these:
 * the only way to them is the two functions below, whose EXECUTE right
 * nobody holds (REVOKE ALL FROM PUBLIC, granted to no role; the claim's
 * statements run as the extension's owner, spi_util.c).  pg_locks still
 * shows them (locktype advisory, objsubid the class), so an operator can
 * see who holds a turn.
 *
 * Semantics are those of pg_try_advisory_xact_lock, on purpose: only tried,
 * never waited for (so no deadlock with the row locks a claim takes, which
 * are SKIP LOCKED too), held until the transaction (or the subtransaction
 * that took it) ends, no xid, no WAL, no row written: an idle capped
 * queue's claim stays read-only.  A hash collision (two keys of one queue,
 * or of two queues, on the same 64 bits) only makes one key skip a first
 * pass; it cannot collide with an application's
 * advisory lock.  The classes are far from those Citus uses for its own
 * advisory locktags (4 and up, a few dozen at most).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/claim_lock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(ntask_claim_cap_lock);
PG_FUNCTION_INFO_V1(ntask_claim_turn_lock);

/* locktag_field4 of ntask's locks ("NT"): never 1 or 2 (SQL advisory locks) */
#define NTASK_LOCKTAG_CAP	0x4E54
#define NTASK_LOCKTAG_TURN	0x4E55

/*
 * The seed of the cap lock's hash of the queue name: the seed of the
 * advisory key the cap lock once was
 * (hashtextextended(queue, 1851880299)), kept on purpose.  Any constant
 * would do for ntask (the class keeps the cap locks apart from the turn
 * locks and from SQL advisory locks); with this one, spec
 * claim_locks_unreachable takes the very key a role could compute from
 * the old statement as an advisory lock and shows that it stalls no claim.
 */
#define NTASK_CAP_SEED		1851880299

/*
 * claim_try_lock
 *		Try the transaction-level lock of class cls on the 64-bit key, in
 *		this database; true when this transaction holds it now.
 */
static bool
claim_try_lock(uint64 key, uint16 cls)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, cls);
	return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * ntask.claim_cap_lock(queue text) RETURNS boolean
 *		Try the cap lock of queue (taken by every pick of a queue with a
 *		max_inflight, CLAIM_CAP_LOCK in claim.c).
 */
Datum
ntask_claim_cap_lock(PG_FUNCTION_ARGS)
{
	text	   *q = PG_GETARG_TEXT_PP(0);

	PG_RETURN_BOOL(claim_try_lock(DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(q),
																   VARSIZE_ANY_EXHDR(q),
																   NTASK_CAP_SEED)),
								  NTASK_LOCKTAG_CAP));
}

/*
 * ntask.claim_turn_lock(queue text, partition_key text) RETURNS boolean
 *		Try the turn lock of a partition key of queue (CLAIM_TURN_LOCK in
 *		claim.c): the key's bytes hashed with the queue's hash as the seed.
 */
Datum
ntask_claim_turn_lock(PG_FUNCTION_ARGS)
{
	text	   *q = PG_GETARG_TEXT_PP(0);
	text	   *k = PG_GETARG_TEXT_PP(1);
	uint32		qh = DatumGetUInt32(hash_any((unsigned char *) VARDATA_ANY(q),
											 VARSIZE_ANY_EXHDR(q)));

	PG_RETURN_BOOL(claim_try_lock(DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(k),
																   VARSIZE_ANY_EXHDR(k),
																   qh)),
								  NTASK_LOCKTAG_TURN));
}
