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

-- end of issue 29.10


-- issue 30

-- end of issue 30
