/* ntask--0.3--1.0.0.sql: every schema change of the 1.0 wave (issues 29-36) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ntask UPDATE TO '1.0.0'" to load this file. \quit

/*
 * One upgrade script for the whole 1.0 wave: each issue adds its part under
 * its own heading below (keep the headings: parallel work merges cleanly).
 * A fresh CREATE EXTENSION runs 0.1, 0.1--0.2, 0.2--0.3 and this script, so
 * new and upgraded installations are the same (regress "upgrade").
 */

-- issue 29.1: waiting claims on limited queues

-- end of issue 29.1


-- issue 29.2: cap and turn locks
--
-- A queue's cap lock (max_inflight) and a partition key's turn lock (fair
-- and ordered picks, per-key caps) were advisory locks, which any role that
-- can connect could take and hold (pg_advisory_lock, the keys computed with
-- hashtextextended or read from pg_locks), stalling a capped queue or a
-- key.  They are now locks of a locktag class of ntask's own (src/
-- claim_lock.c), which no SQL advisory function can take; these two
-- functions are the only way to them, and nobody is granted them: the
-- claim's statements run as the extension's owner.  docs/design.md "Who
-- may block a claim".
CREATE FUNCTION ntask.claim_cap_lock(queue text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_claim_cap_lock'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION ntask.claim_cap_lock(text) IS 'ntask: try the cap lock of a queue with max_inflight, held to the end of the transaction (claims only; not granted to any role)';
REVOKE ALL ON FUNCTION ntask.claim_cap_lock(text) FROM PUBLIC;

CREATE FUNCTION ntask.claim_turn_lock(queue text, partition_key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_claim_turn_lock'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION ntask.claim_turn_lock(text, text) IS 'ntask: try the turn lock of a partition key of a queue, held to the end of the transaction (claims only; not granted to any role)';
REVOKE ALL ON FUNCTION ntask.claim_turn_lock(text, text) FROM PUBLIC;

-- end of issue 29.2


-- issue 29.3 and 29.6: guards

-- end of issue 29.3 and 29.6


-- issue 29.4 and 29.5: rate-limit buckets, retry shares, fair cursors

-- end of issue 29.4 and 29.5


-- issue 29.7 and 29.9: http retry-after, connected addresses

-- end of issue 29.7 and 29.9


-- issue 29.8: saga keys

-- end of issue 29.8


-- issue 29.10 and the suspicions: upgrade grants, schedules, results

-- end of issue 29.10


-- issue 30

-- end of issue 30
