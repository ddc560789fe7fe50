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

-- end of issue 29.2


-- issue 29.3 and 29.6: guards

-- end of issue 29.3 and 29.6


-- issue 29.4 and 29.5: rate-limit buckets, retry shares, fair cursors

-- end of issue 29.4 and 29.5


-- issue 29.7 and 29.9: http retry-after, connected addresses

-- end of issue 29.7 and 29.9


-- issue 29.8: saga keys
-- A saga key is scoped by the queues its definition names (forward and
-- compensation): unique on (saga_key, scope).  ntask_saga_start answers
-- created = false or NT001 only from a saga whose scope the caller has the
-- producer right on every queue of; a saga it cannot see is as if the key
-- were free (docs/design.md "Sagas"), so a producer of one queue neither
-- learns nor squats the keys of another's.
CREATE FUNCTION ntask.saga_scope(steps jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
	SELECT pg_catalog.array_agg(x.q ORDER BY x.q)
	FROM (SELECT DISTINCT (v.q COLLATE "C") AS q
		  FROM pg_catalog.jsonb_array_elements(steps) e(step),
			   LATERAL (VALUES (e.step OPERATOR(pg_catalog.->>) 'queue'),
							   ((e.step OPERATOR(pg_catalog.->) 'compensate')
									OPERATOR(pg_catalog.->>) 'queue')) v(q)
		  WHERE v.q IS NOT NULL) x
$$;
COMMENT ON FUNCTION ntask.saga_scope(jsonb) IS 'ntask: the queues a saga definition names (forward and compensation), distinct, in byte order: the scope of its saga_key';
REVOKE ALL ON FUNCTION ntask.saga_scope(jsonb) FROM PUBLIC;
ALTER TABLE ntask.saga ADD COLUMN scope text[] COLLATE "C";
UPDATE ntask.saga SET scope = ntask.saga_scope(steps);
ALTER TABLE ntask.saga ALTER COLUMN scope SET NOT NULL,
	DROP CONSTRAINT saga_saga_key_key,
	ADD CONSTRAINT saga_key_scope_key UNIQUE (saga_key, scope);
COMMENT ON COLUMN ntask.saga.scope IS 'the queues the definition names (ntask.saga_scope): the saga_key is unique within it, and only a producer with the right on all of them sees the saga from ntask_saga_start';

-- end of issue 29.8


-- issue 29.10 and the suspicions: upgrade grants, schedules, results
-- RULE for every section of this file (29.10): users build on ntask, and an
-- update must keep it.  Never DROP a public view: CREATE OR REPLACE VIEW with
-- the same columns (names, types, collations), new ones only at the end.
-- Never DROP a public function whose signature can stay: CREATE OR REPLACE.
-- Where the arguments or result columns truly change, an overload must not
-- make old calls ambiguous; otherwise drop it the way ntask--0.2--0.3.sql
-- does (refuse, naming them, when user objects depend on it; carry the
-- users' GRANTs and REVOKEs over and keep them out of pg_init_privs): copy
-- its upgrade_* helpers here, dropping them at the end of the file.
-- regress "upgrade" keeps a user view, a user function and a grant.

-- Suspicion (issue 29): ntask_fire and ntask.fire_slot are SECURITY
-- DEFINER, so a schedule's tasks are enqueued past the queue's
-- producer_role.  The right is checked where a person acts: when
-- ntask_schedule sets (or moves) a schedule, the role setting it needs the
-- queue's producer right (42501), and ntask.schedule.set_by records it.
-- ntask_schedule is replaced with its 0.3 body plus that check (not a
-- trigger: Citus refuses to distribute a table with triggers); ntask_fire
-- and fire_slot are left as they are.
-- The fired tasks' enqueued_by is still the extension's owner (README
-- "Schedules"); ntask.schedule.set_by says on whose behalf.
CREATE FUNCTION ntask.outer_role() RETURNS oid
AS 'MODULE_PATHNAME', 'ntask_outer_role'
LANGUAGE C STABLE;
COMMENT ON FUNCTION ntask.outer_role() IS 'ntask: the role the session acts as (SET ROLE, else the session user), under any SECURITY DEFINER function: who called the API';
REVOKE ALL ON FUNCTION ntask.outer_role() FROM PUBLIC;
ALTER TABLE ntask.schedule ADD COLUMN set_by name;
COMMENT ON COLUMN ntask.schedule.set_by IS 'the role that last set the schedule (ntask_schedule; its producer right on the queue was checked then); NULL for schedules set before 1.0.0';
CREATE OR REPLACE FUNCTION @extschema@.ntask_schedule(name text, cron text, queue text, payload jsonb DEFAULT '{}',
										   overlap text DEFAULT 'skip', catchup interval DEFAULT '1 hour',
										   timezone text DEFAULT 'UTC', bound_to_next_slot boolean DEFAULT true)
RETURNS ntask.schedule
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	job text := 'ntask:' || name;
	cmd text := format('SELECT * FROM %I.ntask_fire(%L)', '@extschema@', name);
	cron_expr text;
	who oid := ntask.outer_role();
	who_name name;
BEGIN
	IF name IS NULL OR cron IS NULL OR queue IS NULL OR payload IS NULL
	   OR overlap IS NULL OR catchup IS NULL OR timezone IS NULL OR bound_to_next_slot IS NULL THEN
		RAISE EXCEPTION 'ntask: ntask_schedule arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF name !~ '^[A-Za-z0-9_.:-]{1,63}$' THEN
		RAISE EXCEPTION 'ntask: invalid schedule name "%"', name
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use 1 to 63 letters, digits, ''_'', ''.'', '':'' or ''-''.';
	END IF;
	IF overlap NOT IN ('skip', 'allow', 'buffer_one') THEN
		RAISE EXCEPTION 'ntask: unknown overlap policy "%"', overlap
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use skip, allow or buffer_one.';
	END IF;
	IF catchup < '0'::interval THEN
		RAISE EXCEPTION 'ntask: catchup must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) ntask_schedule.queue) THEN
		RAISE EXCEPTION 'ntask: queue "%" does not exist', queue USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM @extschema@.ntask_cron_next(cron, now(), timezone);	-- validates both
	-- the schedule enqueues on behalf of the role setting it (ntask_fire
	-- runs as the owner): that role needs the queue's producer right now
	IF EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) ntask_schedule.queue
			   AND q.producer_role IS NOT NULL AND NOT pg_has_role(who, q.producer_role, 'USAGE')) THEN
		RAISE EXCEPTION 'ntask: permission denied to enqueue into queue "%"', queue
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'A schedule enqueues on behalf of the role that sets it: that role needs the queue''s producer_role (ntask_queue_set_roles).';
	END IF;
	who_name := (SELECT r.rolname FROM pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) who);

	INSERT INTO ntask.schedule AS sc (name, cron, queue, payload, overlap, catchup, timezone,
									  bound_to_next_slot, set_by)
	VALUES (name, cron, queue, payload, overlap, catchup, timezone, bound_to_next_slot, who_name)
	ON CONFLICT ON CONSTRAINT schedule_pkey DO UPDATE SET cron = EXCLUDED.cron, queue = EXCLUDED.queue,
		payload = EXCLUDED.payload, overlap = EXCLUDED.overlap, catchup = EXCLUDED.catchup,
		timezone = EXCLUDED.timezone, bound_to_next_slot = EXCLUDED.bound_to_next_slot,
		set_by = EXCLUDED.set_by,
		updated_at = EXCLUDED.updated_at	-- its default, now(): Citus refuses a function in DO UPDATE SET
	RETURNING * INTO s;

	-- pg_cron evaluates its expressions in GMT: a UTC schedule is handed
	-- over as is, any other is fired every minute (a firing with no new
	-- slot does nothing)
	cron_expr := CASE WHEN timezone IN ('UTC', 'GMT', 'Etc/UTC') THEN cron ELSE '* * * * *' END;
	IF to_regprocedure('cron.schedule_in_database(text,text,text,text,text,boolean)') IS NOT NULL THEN
		EXECUTE 'SELECT cron.schedule_in_database($1, $2, $3, current_database())'
			USING job, cron_expr, cmd;
		UPDATE ntask.schedule sc SET cron_job = job WHERE sc.name OPERATOR(pg_catalog.=) ntask_schedule.name
		RETURNING * INTO s;
	ELSE
		RAISE NOTICE 'ntask: pg_cron is not installed in this database; schedule "%" is stored but nothing fires it', name
			USING HINT = format('In pg_cron''s database run: SELECT cron.schedule_in_database(%L, %L, %L, %L);',
								job, cron_expr, cmd, current_database());
	END IF;
	RETURN s;
END $$;

-- end of issue 29.10


-- issue 30

-- end of issue 30
