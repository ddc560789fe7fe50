-- upgrade_bound: the update from 0.3 drops and creates again ntask_enqueue,
-- ntask_enqueue_many, ntask_heartbeat and ntask_queue_set (their arguments
-- or result columns change).  A user object bound to one of them (a
-- BEGIN ATOMIC function, a view calling it) stops the update: PostgreSQL
-- refuses the DROP FUNCTION with 2BP01 and names the object, and the whole
-- update rolls back (docs/guarantees.md "What you built on ntask survives
-- an update").  Once the object is gone, the same update goes through.
-- (The last file of REGRESS: it leaves a fresh extension behind.)
SET client_min_messages = error;
DROP EXTENSION ntask;
CREATE EXTENSION ntask VERSION '0.3';
RESET client_min_messages;
-- (18 names the update script's line in a CONTEXT line; 15 does not)
\set SHOW_CONTEXT never
SELECT extversion FROM pg_extension WHERE extname = 'ntask';

-- a BEGIN ATOMIC function bound to 0.3's ntask_enqueue
CREATE FUNCTION ub_submit(k text) RETURNS SETOF bigint LANGUAGE sql
BEGIN ATOMIC SELECT task_id FROM ntask_enqueue('ub', k); END;
ALTER EXTENSION ntask UPDATE;
\echo :SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
DROP FUNCTION ub_submit(text);

-- a view calling 0.3's ntask_heartbeat
CREATE VIEW ub_beat AS SELECT ntask_heartbeat(1, 1) AS lease_until;
ALTER EXTENSION ntask UPDATE;
\echo :SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
DROP VIEW ub_beat;

-- nothing bound: the update goes through.  A user's grants on the four
-- functions it creates again do not survive it (the documented limit:
-- grant again after the update); those on ntask_claim, changed in place,
-- do (regress upgrade)
CREATE ROLE regress_ub_app;
GRANT EXECUTE ON FUNCTION ntask_enqueue(text, text, jsonb, timestamptz, text, integer) TO regress_ub_app;
GRANT EXECUTE ON FUNCTION ntask_claim(text, text, integer, interval, interval, boolean) TO regress_ub_app;
ALTER EXTENSION ntask UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
SELECT has_function_privilege('regress_ub_app',
	'ntask_enqueue(text, text, jsonb, timestamptz, text, integer, text, text[], text)', 'EXECUTE') AS may_enqueue,
	   has_function_privilege('regress_ub_app',
	'ntask_claim(text, text, integer, interval, interval, boolean)', 'EXECUTE') AS may_claim;
REVOKE ALL ON FUNCTION ntask_claim(text, text, integer, interval, interval, boolean) FROM regress_ub_app;
DROP ROLE regress_ub_app;

SET client_min_messages = error;
DROP EXTENSION ntask;
CREATE EXTENSION ntask;
RESET client_min_messages;
