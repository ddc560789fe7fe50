/* ntask--0.2--0.3.sql: hardening (issue 11); the rest of 0.3 adds to it */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ntask UPDATE TO '0.3'" to load this file. \quit

/*
 * docs/design.md "The 0.3 schema" designs every 0.3 change at once; this
 * script holds the parts that have landed.  A fresh CREATE EXTENSION runs
 * 0.1, 0.1--0.2 and this script, so new and upgraded installations are the
 * same (regress "upgrade").
 */

-- The background worker's role (docs/worker.md "Identity").  The launcher
-- starts the worker as ntask.worker_role, by default this role: it can log
-- in (background workers of PostgreSQL 15 can only connect as a LOGIN
-- role), has no password (nobody can log in as it with password
-- authentication) and is not a superuser.  It calls the API as a worker.
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ntask_bgworker') THEN
		CREATE ROLE ntask_bgworker LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
	END IF;
	IF NOT pg_catalog.pg_has_role('ntask_bgworker', 'ntask_worker', 'MEMBER') THEN
		GRANT ntask_worker TO ntask_bgworker;
	END IF;
	EXECUTE pg_catalog.format('GRANT CONNECT ON DATABASE %I TO ntask_bgworker',
							  pg_catalog.current_database());
END $$;
GRANT USAGE ON SCHEMA @extschema@ TO ntask_bgworker;

-- A queue's guard as schema-qualified signature text, resolved at use:
-- pg_upgrade refuses regprocedure columns in user tables, and an OID would
-- not survive a dump and restore.  ntask_queue_set accepted only
-- (text, jsonb) guards, and writes the same form.
ALTER TABLE ntask.queue ADD COLUMN guard_name text;
UPDATE ntask.queue q SET guard_name =
	pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||)
	pg_catalog.quote_ident(p.proname) OPERATOR(pg_catalog.||) '(text,jsonb)'
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
WHERE p.oid OPERATOR(pg_catalog.=) q.guard::pg_catalog.oid;
ALTER TABLE ntask.queue DROP COLUMN guard;
ALTER TABLE ntask.queue RENAME COLUMN guard_name TO guard;
COMMENT ON COLUMN ntask.queue.guard IS 'guard function as schema-qualified signature text (e.g. public.notify_guard(text,jsonb)); resolved at use; runs as its owner';

/*
 * No DROP or rename of a function a queue uses as its guard: after any
 * command that can drop or rename a function, every guard must still
 * resolve, else the command fails (2BP01).  A guard that does not resolve
 * anyway (event triggers disabled) sends each task it meets to
 * repair_required with reason guard_error.
 */
CREATE FUNCTION ntask.guard_ddl_check() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	q record;
BEGIN
	FOR q IN SELECT qq.queue, qq.guard FROM ntask.queue qq
			 WHERE qq.guard IS NOT NULL AND pg_catalog.to_regprocedure(qq.guard) IS NULL
			 ORDER BY qq.queue LOOP
		RAISE EXCEPTION 'ntask: function % is the guard of queue "%"', q.guard, q.queue
			USING ERRCODE = 'dependent_objects_still_exist',
				  HINT = pg_catalog.format('Remove it first: SELECT ntask_queue_clear_guard(%L);', q.queue);
	END LOOP;
END $$;
COMMENT ON FUNCTION ntask.guard_ddl_check() IS 'ntask: event trigger: refuses a DROP or rename that would leave a queue''s guard unresolvable';
CREATE EVENT TRIGGER ntask_guard_ddl ON ddl_command_end
	WHEN TAG IN ('DROP FUNCTION', 'DROP ROUTINE', 'ALTER FUNCTION', 'ALTER ROUTINE',
				 'DROP SCHEMA', 'ALTER SCHEMA', 'DROP OWNED', 'ALTER EXTENSION')
	EXECUTE FUNCTION ntask.guard_ddl_check();
REVOKE ALL ON FUNCTION ntask.guard_ddl_check() FROM PUBLIC;

-- The leased rows, for housekeeping's expired-lease pick.  Its predicate is
-- lease_until IS NOT NULL (set exactly while leased), not state = 'leased':
-- a partial index whose predicate the hot statements' "state = 'leased'"
-- implies was a candidate for their generic plans (transition, heartbeat:
-- task_id = $1 AND state = 'leased'), which could then scan every leased
-- row instead of one primary-key probe.
DROP INDEX ntask.task_lease_idx;
CREATE INDEX task_lease_idx ON ntask.task (lease_until)
	WHERE lease_until IS NOT NULL;

-- The deadline sweep reads only past-deadline rows (every tick, not once a
-- minute over every unfinished row).
CREATE INDEX task_deadline_idx ON ntask.task (deadline)
	WHERE due_at IS NOT NULL AND state <> 'leased';

-- History is pruned by housekeeping (ntask.audit_retention,
-- ntask.history_retention).
CREATE INDEX audit_at_idx ON ntask.audit (at);
CREATE INDEX schedule_slot_fired_idx ON ntask.schedule_slot (fired_at);
CREATE INDEX fence_receipt_applied_idx ON ntask.fence_receipt (applied_at);

-- Fence grants: a fence key under a registered prefix may be advanced only
-- by members of its role (the longest prefix decides).
CREATE TABLE ntask.fence_grant (
	prefix			text PRIMARY KEY
		CHECK (prefix <> '' AND length(prefix) <= 512),
	role			regrole NOT NULL,
	granted_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ntask.fence_grant IS 'ntask: fence keys starting with prefix may only be advanced by members of role; see ntask_fence_grant()';
SELECT pg_catalog.pg_extension_config_dump('ntask.fence_grant', '');
GRANT SELECT ON ntask.fence_grant TO ntask_admin;

CREATE FUNCTION @extschema@.ntask_fence_grant(prefix text, role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_fence_grant'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_fence_grant(text, regrole) IS
'ntask: restrict fence keys starting with prefix to members of role (NULL removes the restriction); the longest registered prefix of a key decides; audited';
REVOKE ALL ON FUNCTION @extschema@.ntask_fence_grant(text, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.ntask_fence_grant(text, regrole) TO ntask_admin;
