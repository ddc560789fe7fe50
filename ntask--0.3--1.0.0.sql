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

-- end of issue 29.8


-- issue 29.10 and the suspicions: upgrade grants, schedules, results

-- end of issue 29.10


-- issue 30

-- 30.2: a schedule's first firing is its next slot, catchup bounds the
-- latest slot too, and a local time a DST gap skipped is recorded as
-- missed.  ntask_fire keeps its signature; its slot logic (firing "now")
-- moves to ntask.fire_due(name, at), which tests call with a given time.
CREATE FUNCTION ntask.cron_gaps(expr text, after timestamptz, upto timestamptz, timezone text,
								OUT slot timestamptz, OUT local_time timestamp)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ntask_cron_gaps'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION ntask.cron_gaps(text, timestamptz, timestamptz, text) IS
'ntask: internal: local times a cron expression matches that a DST gap skipped, with the instant of the gap, for gaps in (after, upto]';
REVOKE ALL ON FUNCTION ntask.cron_gaps(text, timestamptz, timestamptz, text) FROM PUBLIC;

CREATE FUNCTION ntask.fire_due(name text, at timestamptz)
RETURNS TABLE (fired_slot timestamptz, task_id bigint, outcome text, reason text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	base timestamptz;
	handled timestamptz;
	cur timestamptz;
	lo timestamptz;
	missed timestamptz;
	n integer := 0;
	r record;
	g record;
BEGIN
	-- the schedule row lock serializes concurrent firings of one schedule
	SELECT * INTO s FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) fire_due.name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;

	-- the latest slot handled; a schedule that never fired counts from its
	-- creation, so its first firing is its next slot, not a past one
	base := COALESCE(s.last_slot, @extschema@.ntask_cron_prev(s.cron, s.created_at, s.timezone));
	handled := base;
	cur := @extschema@.ntask_cron_prev(s.cron, at, s.timezone);
	-- the catch-up window, measured from now; pg_cron fires once a minute,
	-- so a slot is on time for at least a minute
	lo := at OPERATOR(pg_catalog.-) GREATEST(s.catchup, interval '1 minute');

	-- local times a DST gap skipped since then (at most 8 days back: the
	-- catch-up window is at most 7): recorded as missed, once
	FOR g IN SELECT cg.slot, cg.local_time
			 FROM ntask.cron_gaps(s.cron, GREATEST(base, at OPERATOR(pg_catalog.-) interval '8 days'),
								  at, s.timezone) cg
			 ORDER BY cg.local_time LOOP
		fired_slot := g.slot; task_id := NULL; outcome := 'missed';
		reason := format('local time %s does not exist in time zone %s (daylight saving time gap)',
						 to_char(g.local_time, 'YYYY-MM-DD HH24:MI'), s.timezone);
		INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
		VALUES (s.name, g.slot, 'missed', reason);
		RETURN NEXT;
		handled := GREATEST(handled, g.slot);
	END LOOP;

	IF cur OPERATOR(pg_catalog.<=) base THEN
		IF handled OPERATOR(pg_catalog.>) base THEN
			UPDATE ntask.schedule sc SET last_slot = handled, updated_at = now()
			WHERE sc.name OPERATOR(pg_catalog.=) s.name;
			RETURN;
		END IF;
		-- no new slot since the last firing: say so (nothing is recorded)
		fired_slot := cur;
		SELECT ss.task_id INTO task_id FROM ntask.schedule_slot ss
		WHERE ss.schedule OPERATOR(pg_catalog.=) s.name AND ss.slot OPERATOR(pg_catalog.=) cur
		ORDER BY ss.id DESC LIMIT 1;
		outcome := 'duplicate';
		reason := 'no new slot since the last firing';
		RETURN NEXT;
		RETURN;
	END IF;

	-- slots missed since the last one handled: within the window enqueued
	-- (caught_up), older ones recorded as missed
	missed := @extschema@.ntask_cron_next(s.cron, base, s.timezone);
	WHILE missed OPERATOR(pg_catalog.<) cur LOOP
		n := n + 1;
		IF missed OPERATOR(pg_catalog.>=) lo THEN
			SELECT * INTO r FROM ntask.fire_slot(s, missed, 'caught_up');
			fired_slot := missed; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
		ELSIF n > 1000 THEN
			-- do not write one row per minute for a week of downtime
			INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
			VALUES (s.name, missed, 'missed',
					'beyond the catch-up window; later missed slots up to '
					|| ntask.slot_key(s.name, cur) || ' not listed');
			fired_slot := missed; task_id := NULL; outcome := 'missed'; reason := 'beyond the catch-up window';
			RETURN NEXT;
			missed := GREATEST(lo, missed);
			missed := @extschema@.ntask_cron_prev(s.cron, missed, s.timezone);
			missed := @extschema@.ntask_cron_next(s.cron, missed, s.timezone);
			n := -1000000;
			CONTINUE;
		ELSE
			INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
			VALUES (s.name, missed, 'missed', 'beyond the catch-up window of ' || s.catchup);
			fired_slot := missed; task_id := NULL; outcome := 'missed'; reason := 'beyond the catch-up window of ' || s.catchup;
		END IF;
		RETURN NEXT;
		missed := @extschema@.ntask_cron_next(s.cron, missed, s.timezone);
	END LOOP;

	-- the latest slot, unless it is beyond the window too (an outage longer
	-- than catchup enqueues nothing late)
	IF cur OPERATOR(pg_catalog.>=) lo THEN
		SELECT * INTO r FROM ntask.fire_slot(s, cur, 'enqueued');
		fired_slot := cur; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
	ELSE
		reason := 'beyond the catch-up window of ' || s.catchup;
		INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
		VALUES (s.name, cur, 'missed', reason);
		fired_slot := cur; task_id := NULL; outcome := 'missed';
	END IF;
	RETURN NEXT;
	UPDATE ntask.schedule sc SET last_slot = GREATEST(cur, handled), updated_at = now()
	WHERE sc.name OPERATOR(pg_catalog.=) s.name;
END $$;
COMMENT ON FUNCTION ntask.fire_due(text, timestamptz) IS
'ntask: internal: ntask_fire(name) as of a given time: DST-gap slots and slots beyond the catch-up window recorded as missed, the rest enqueued';
REVOKE ALL ON FUNCTION ntask.fire_due(text, timestamptz) FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.ntask_fire(name text, slot timestamptz DEFAULT NULL, rerun text DEFAULT NULL)
RETURNS TABLE (fired_slot timestamptz, task_id bigint, outcome text, reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	r record;
BEGIN
	IF name IS NULL THEN
		RAISE EXCEPTION 'ntask: name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	-- the schedule row lock serializes concurrent firings of one schedule
	SELECT * INTO s FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) ntask_fire.name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;

	IF ntask_fire.slot IS NOT NULL THEN
		-- a manual (re-)run of a given slot
		IF @extschema@.ntask_cron_prev(s.cron, ntask_fire.slot, s.timezone) OPERATOR(pg_catalog.<>) ntask_fire.slot THEN
			RAISE EXCEPTION 'ntask: % is not a slot of schedule "%"', ntask_fire.slot, s.name
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = format('Its cron expression is "%s" in time zone %s.', s.cron, s.timezone);
		END IF;
		IF rerun IS NOT NULL AND (rerun = '' OR length(rerun) > 63) THEN
			RAISE EXCEPTION 'ntask: rerun must be 1 to 63 characters' USING ERRCODE = 'invalid_parameter_value';
		END IF;
		SELECT * INTO r FROM ntask.fire_slot(s, ntask_fire.slot,
			CASE WHEN rerun IS NULL THEN 'enqueued' ELSE 'rerun' END, rerun);
		fired_slot := ntask_fire.slot; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
		RETURN NEXT;
		UPDATE ntask.schedule sc SET last_slot = GREATEST(sc.last_slot, ntask_fire.slot), updated_at = now()
		WHERE sc.name OPERATOR(pg_catalog.=) s.name;
		RETURN;
	END IF;
	IF rerun IS NOT NULL THEN
		RAISE EXCEPTION 'ntask: rerun needs an explicit slot' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	RETURN QUERY SELECT f.fired_slot, f.task_id, f.outcome, f.reason
				 FROM ntask.fire_due(s.name, pg_catalog.now()) f;
END $$;
COMMENT ON FUNCTION @extschema@.ntask_fire(text, timestamptz, text) IS
'ntask: fire a schedule: enqueue its latest slot (key <name>:<slot UTC>) if within the catch-up window (a new schedule starts with its next slot), catch up missed slots within the window, record older ones and DST-gap ones as missed; with slot, (re-)run that slot (a repeat is a duplicate); with rerun, a deliberate second run under a new key';

-- 30.6: payloads are at most ntask.max_payload_bytes (SQLSTATE 54000);
-- the C functions check it themselves, SQL ones call this
CREATE FUNCTION ntask.check_payload(payload jsonb, what text) RETURNS void
AS 'MODULE_PATHNAME', 'ntask_check_payload'
LANGUAGE C STRICT;
COMMENT ON FUNCTION ntask.check_payload(jsonb, text) IS
'ntask: internal: raise 54000 when a payload is over ntask.max_payload_bytes';
REVOKE ALL ON FUNCTION ntask.check_payload(jsonb, text) FROM PUBLIC;

-- ntask_schedule: a replaced schedule whose cron expression or time zone
-- changes starts with the next slot of the new one (no catch-up of the
-- new expression's past slots), and its payload is checked against
-- ntask.max_payload_bytes (30.6) when it is stored, not first at a firing
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
	prev_slot timestamptz;
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
	PERFORM ntask.check_payload(payload, 'payload');
	-- validates both; the slot before now is where a new expression starts
	prev_slot := @extschema@.ntask_cron_prev(cron, now(), timezone);

	INSERT INTO ntask.schedule AS sc (name, cron, queue, payload, overlap, catchup, timezone,
									  bound_to_next_slot)
	VALUES (name, cron, queue, payload, overlap, catchup, timezone, bound_to_next_slot)
	ON CONFLICT ON CONSTRAINT schedule_pkey DO UPDATE SET cron = EXCLUDED.cron, queue = EXCLUDED.queue,
		payload = EXCLUDED.payload, overlap = EXCLUDED.overlap, catchup = EXCLUDED.catchup,
		timezone = EXCLUDED.timezone, bound_to_next_slot = EXCLUDED.bound_to_next_slot,
		last_slot = CASE WHEN sc.cron IS DISTINCT FROM EXCLUDED.cron
							  OR sc.timezone IS DISTINCT FROM EXCLUDED.timezone
						 THEN GREATEST(sc.last_slot, prev_slot) ELSE sc.last_slot END,
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

-- 30.4: DROP EXTENSION ntask unschedules ntask's pg_cron jobs (else they
-- fail every minute) and warns about the unfinished tasks it drops.  A
-- trigger of its own (ntask_guard_ddl is the guards'); see src/drop.c for
-- why it reads the statement on ddl_command_start.
CREATE FUNCTION ntask.drop_cleanup() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	t record;
	jobs integer := 0;
BEGIN
	-- the jobs ntask_schedule registered in this database (by id: the
	-- dropping role need not be the one that owns them)
	IF to_regprocedure('cron.unschedule(bigint)') IS NOT NULL
	   AND to_regclass('cron.job') IS NOT NULL THEN
		EXECUTE 'SELECT count(cron.unschedule(j.jobid))::integer FROM cron.job j
				 WHERE j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
				   AND j.jobname OPERATOR(pg_catalog.=) ANY (
					   SELECT s.cron_job FROM ntask.schedule s WHERE s.cron_job IS NOT NULL)'
		INTO jobs;
	END IF;
	IF jobs > 0 THEN
		RAISE NOTICE 'ntask: unscheduled % pg_cron job(s) of ntask schedules', jobs;
	END IF;
	IF EXISTS (SELECT 1 FROM ntask.schedule s WHERE s.cron_job IS NULL) THEN
		RAISE NOTICE 'ntask: schedules registered by hand in pg_cron''s database (jobs named ntask:<name>) must be unscheduled there';
	END IF;

	SELECT count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) ANY ('{ready,leased,retry_wait}')) AS unfinished,
		   count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) 'repair_required') AS repair,
		   max(tt.task_id) AS max_id
	INTO t FROM ntask.task tt;
	IF t.unfinished > 0 OR t.repair > 0 THEN
		RAISE WARNING 'ntask: DROP EXTENSION ntask drops % unfinished task(s) and % awaiting repair', t.unfinished, t.repair
			USING DETAIL = format('The highest task id was %s; a new CREATE EXTENSION ntask numbers tasks from 1 again.', t.max_id),
				  HINT = format('To keep task ids unique after re-creating it: SELECT setval(''ntask.task_task_id_seq'', %s);', t.max_id);
	END IF;
END $$;
COMMENT ON FUNCTION ntask.drop_cleanup() IS
'ntask: internal: before DROP EXTENSION ntask: unschedule its pg_cron jobs, warn about unfinished tasks and the task id sequence';
REVOKE ALL ON FUNCTION ntask.drop_cleanup() FROM PUBLIC;

CREATE FUNCTION ntask.drop_extension_check() RETURNS event_trigger
AS 'MODULE_PATHNAME', 'ntask_drop_extension_check'
LANGUAGE C;
COMMENT ON FUNCTION ntask.drop_extension_check() IS
'ntask: event trigger: before DROP EXTENSION ntask, run ntask.drop_cleanup()';
REVOKE ALL ON FUNCTION ntask.drop_extension_check() FROM PUBLIC;
CREATE EVENT TRIGGER ntask_drop_extension ON ddl_command_start
	WHEN TAG IN ('DROP EXTENSION')
	EXECUTE FUNCTION ntask.drop_extension_check();

-- end of issue 30
