/* ntask--1.0.0--1.1.0.sql: every schema change of the 1.1 wave (issues 45-51) */
-- Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ntask UPDATE TO '1.1.0'" to load this file. \quit

/*
 * THE RULE: every schema change of the 1.1 wave goes into BOTH this file
 * and ntask--1.1.0.sql, the complete install script a fresh CREATE
 * EXTENSION runs.  Regress "upgrade" installs 0.3 and 1.0.0 (test/frozen/),
 * updates each along 0.3 -> 1.0.0 -> 1.1.0 and fails on any difference
 * from a fresh 1.1.0: objects, columns and their order, defaults,
 * constraints, indexes, triggers, comments, privileges, view definitions
 * and every function's body.
 *
 * A C function of an earlier version is never removed from the library:
 * the older scripts of the path create it before this one drops it.
 *
 * One upgrade script for the whole wave: each issue adds its part under its
 * own heading below (keep the headings: parallel work merges cleanly).
 */

-- issue 45: hardening, third review

-- end of issue 45


-- issue 46: the third first hour

-- end of issue 46


-- issue 48: a leaner task

-- end of issue 48


-- issue 49: Citus, direct shard execution

-- the guard's event trigger reads ntask.queue only when a function is
-- dropped: a shard move's cleanup on a worker node drops tables
CREATE OR REPLACE FUNCTION ntask.guard_ddl_check() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	q record;
BEGIN
	-- only a command that drops a function reads ntask.queue: on a Citus
	-- worker node a shard move's cleanup drops the moved shard's old
	-- tables, and a read of the reference table there fails that DROP
	-- ("cannot execute a distributed query from a query on a shard")
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger_dropped_objects() d
				   WHERE d.object_type OPERATOR(pg_catalog.=) 'function') THEN
		RETURN;
	END IF;
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

-- end of issue 49
