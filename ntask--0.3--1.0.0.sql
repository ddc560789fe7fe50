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

-- The role that owned the guard function when ntask_queue_set stored it:
-- at every use the function the stored name resolves to must still have
-- that owner (and be neither in a temporary schema nor part of an
-- extension), else the task goes to repair_required (guard_error).  A role
-- name, not an OID: it survives dump and restore (pg_restore --no-owner
-- too, where the guard then fails closed until set again).  Backfilled from
-- the function each stored guard resolves to now; a guard that does not
-- resolve, or lives in a temporary schema, gets none and fails closed.
ALTER TABLE ntask.queue ADD COLUMN guard_owner name;
UPDATE ntask.queue q SET guard_owner = pg_catalog.pg_get_userbyid(p.proowner)
FROM pg_catalog.pg_proc p
WHERE q.guard IS NOT NULL
  AND p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(q.guard)
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n
				  WHERE n.oid OPERATOR(pg_catalog.=) p.pronamespace
					AND (n.nspname OPERATOR(pg_catalog.~) '^pg_temp_'
						 OR n.nspname OPERATOR(pg_catalog.~) '^pg_toast_temp_'));
COMMENT ON COLUMN ntask.queue.guard_owner IS 'the role that owned the guard function when it was set; a function of the guard''s name with another owner is refused at use (guard_error)';

/*
 * The guard's pin, from the objects a command drops
 * (pg_event_trigger_dropped_objects, on sql_drop of every command: DROP
 * FUNCTION, SCHEMA ... CASCADE, OWNED, EXTENSION, a CASCADE through
 * anything a guard's body depends on): a command that would drop a
 * function some queue uses as its guard fails with 2BP01.  Nothing else is
 * looked at, so a guard that no longer resolves (renamed, moved, dropped
 * with event triggers off) blocks no other DDL; its tasks go to
 * repair_required (guard_error) until the guard is set again or cleared.
 */
CREATE OR REPLACE FUNCTION ntask.guard_ddl_check() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	q record;
BEGIN
	FOR q IN SELECT qq.queue, qq.guard
			 FROM pg_catalog.pg_event_trigger_dropped_objects() d
			 JOIN ntask.queue qq
			   ON qq.guard OPERATOR(pg_catalog.=)
				  (pg_catalog.quote_ident(d.address_names[1]) OPERATOR(pg_catalog.||) '.'
				   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(d.address_names[2])
				   OPERATOR(pg_catalog.||) '(text,jsonb)')
			 WHERE d.object_type OPERATOR(pg_catalog.=) 'function'
			   AND pg_catalog.cardinality(d.address_args) OPERATOR(pg_catalog.=) 2
			   AND pg_catalog.to_regtype(d.address_args[1]) OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
			   AND pg_catalog.to_regtype(d.address_args[2]) OPERATOR(pg_catalog.=) 'pg_catalog.jsonb'::pg_catalog.regtype
			 ORDER BY qq.queue LOOP
		RAISE EXCEPTION 'ntask: function % is the guard of queue "%"', q.guard, q.queue
			USING ERRCODE = 'dependent_objects_still_exist',
				  HINT = pg_catalog.format('Remove it first: SELECT ntask_queue_clear_guard(%L);', q.queue);
	END LOOP;
END $$;
COMMENT ON FUNCTION ntask.guard_ddl_check() IS 'ntask: event trigger: refuses a command that drops a function some queue uses as its guard';
DROP EVENT TRIGGER ntask_guard_ddl;
CREATE EVENT TRIGGER ntask_guard_ddl ON sql_drop
	EXECUTE FUNCTION ntask.guard_ddl_check();

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
