-- upgrade: ntask--1.1.0.sql (a fresh CREATE EXTENSION), 0.3 updated along
-- the one upgrade path (ntask--0.3--1.0.0.sql, ntask--1.0.0--1.1.0.sql) and
-- 1.0.0 updated by ntask--1.0.0--1.1.0.sql must be the same, object for
-- object, down to every function's body (0.3 and 1.0.0 are installed from
-- test/frozen/ by scripts/test.sh): an edit that reaches only one of the
-- scripts fails here.  The update keeps the data, and what
-- users built on ntask: a view, a function, grants (issue 29.10).
--
-- pg_temp.ntask_shape(): the extension as one line per fact
CREATE FUNCTION pg_temp.ntask_shape() RETURNS TABLE (item text) LANGUAGE sql AS $$
  WITH ext AS (SELECT oid, extconfig, extcondition FROM pg_extension WHERE extname = 'ntask'),
  members AS (
    SELECT d.classid, d.objid FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e')
  -- every member object, with its comment and its initial privileges
  SELECT format('member %s comment %s initprivs %s', pg_describe_object(m.classid, m.objid, 0),
                quote_nullable(obj_description(m.objid, c.relname)),
                (SELECT array_agg(x ORDER BY x::text) FROM pg_init_privs i, unnest(i.initprivs) x
                 WHERE i.classoid = m.classid AND i.objoid = m.objid AND i.objsubid = 0))
  FROM members m JOIN pg_class c ON c.oid = m.classid
  UNION ALL
  -- columns, in order (dropped ones do not count), with their comments
  SELECT format('column %s.%s #%s %s%s%s%s%s comment %s acl %s', c.relname, a.attname,
                row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                format_type(a.atttypid, a.atttypmod),
                CASE WHEN a.attcollation <> 0 THEN ' collate ' || a.attcollation::regcollation ELSE '' END,
                CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END,
                coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''),
                quote_nullable(col_description(c.oid, a.attnum)), a.attacl)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  WHERE n.nspname = 'ntask' AND c.relkind IN ('r', 'v', 'p')
  UNION ALL
  -- relations: kind, options, privileges; views with their definition
  SELECT format('relation %s %s options %s acl %s%s', c.oid::regclass, c.relkind, c.reloptions, (SELECT array_agg(x ORDER BY x::text) FROM unnest(c.relacl) x),
                CASE WHEN c.relkind = 'v' THEN ' as ' || pg_get_viewdef(c.oid) ELSE '' END)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'ntask' AND c.relkind IN ('r', 'v', 'p', 'S')
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'ntask'
  UNION ALL
  SELECT format('constraint %s %s %s', co.conrelid::regclass, co.conname, pg_get_constraintdef(co.oid))
  FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace
  WHERE n.nspname = 'ntask'
  UNION ALL
  SELECT format('trigger %s %s', tg.tgenabled, pg_get_triggerdef(tg.oid))
  FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'ntask' AND NOT tg.tgisinternal
  UNION ALL
  SELECT format('event trigger %s on %s tags %s runs %s %s', e.evtname, e.evtevent, e.evttags,
                e.evtfoid::regprocedure, e.evtenabled)
  FROM pg_event_trigger e JOIN members m ON m.objid = e.oid
  UNION ALL
  -- functions: the whole definition, body included, and their privileges
  SELECT format('function %s returns %s %s lang %s volatile %s strict %s parallel %s secdef %s config %s acl %s src %s bin %s',
                p.oid::regprocedure, pg_get_function_result(p.oid), pg_get_function_arguments(p.oid),
                l.lanname, p.provolatile, p.proisstrict, p.proparallel, p.prosecdef, p.proconfig,
                (SELECT array_agg(x ORDER BY x::text) FROM unnest(p.proacl) x), p.prosrc, p.probin)
  FROM pg_proc p JOIN members m ON m.objid = p.oid AND m.classid = 'pg_proc'::regclass
  JOIN pg_language l ON l.oid = p.prolang
  UNION ALL
  -- the tables pg_dump dumps the rows of
  SELECT format('config %s %s', x.rel::regclass, ext.extcondition[x.n])
  FROM ext, unnest(ext.extconfig) WITH ORDINALITY x(rel, n)
  UNION ALL
  -- the schemas' privileges
  SELECT format('schema %s acl %s', n.nspname, (SELECT array_agg(x ORDER BY x::text) FROM unnest(n.nspacl) x))
  FROM pg_namespace n WHERE n.nspname IN ('ntask', (SELECT e.extnamespace::regnamespace::name FROM pg_extension e WHERE e.extname = 'ntask'))
$$;

-- (quietly: what earlier tests left behind is not this file's business;
-- the drop's own warning is tested in TAP 002_schedule_pg_cron)
SET client_min_messages = error;
DROP EXTENSION ntask;
CREATE EXTENSION ntask;
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
CREATE TEMP TABLE fresh_shape AS SELECT * FROM pg_temp.ntask_shape();
-- the snapshot sees what it must: members, columns, function bodies, grants
SELECT count(*) FILTER (WHERE item LIKE 'member %') > 80 AS members,
	   count(*) FILTER (WHERE item LIKE 'column task.%') > 30 AS task_columns,
	   count(*) FILTER (WHERE item LIKE 'function ntask_fire(%' AND item LIKE '%ntask.fire_due(s.name%') AS fire_body,
	   count(*) FILTER (WHERE item LIKE 'relation ntask.queue_stats v %ntask_monitor=r%') AS view_grant
FROM fresh_shape;

-- 0.3, with work in flight across the update (written as the 0.3 library
-- would have)
DROP EXTENSION ntask;
CREATE EXTENSION ntask VERSION '0.3';
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
-- the 1.1.0 library refuses to work on the 0.3 objects, with a clear hint
SELECT queue FROM ntask_queue_set('up');
\echo :SQLSTATE
-- also through the 0.3 definitions of the calls that gained arguments in
-- 1.0.0 (they read none of the new ones: before, ntask_queue_set crashed)
SELECT * FROM ntask_enqueue('up', 'k', '{}');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('up', ARRAY['k'], ARRAY['{}']::jsonb[]);
\echo :SQLSTATE
SELECT ntask_heartbeat(1, tok(1, 1));
\echo :SQLSTATE
INSERT INTO ntask.queue (queue) VALUES ('up');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline)
VALUES ('up', 'u1', '{"m": 9}', ntask_digest('{"m": 9}'), 1, now(), now(), 3,
		now() + interval '1 day');
-- a guarded queue (0.3 has no guard_owner: the update records it)
CREATE FUNCTION upg_guard(task_key text, payload jsonb) RETURNS text
LANGUAGE sql AS $$ SELECT CASE WHEN payload ? 'stale' THEN 'skip: stale' ELSE 'proceed' END $$;
INSERT INTO ntask.queue (queue, guard) VALUES ('ug', 'public.upg_guard(text,jsonb)');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline)
SELECT 'ug', k, p, ntask_digest(p), 1, now(), now(), 3, now() + interval '1 day'
FROM (VALUES ('g1', '{}'::jsonb), ('g2', '{"stale": 1}'::jsonb)) v(k, p);
-- a running attempt (0.3 keeps it on the task row)
INSERT INTO ntask.queue (queue) VALUES ('ul');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline, state, token,
						attempts, lease_owner, lease_until, claimed_at, invoked_at)
VALUES ('ul', 'l1', '{}', ntask_digest('{}'), 1, now(), now() + interval '1 hour', 3,
		now() + interval '1 day', 'leased', 1, 1, 'W0', now() + interval '1 hour',
		'2026-01-01 00:00:00+00', '2026-01-01 00:00:01+00');
SELECT task_id AS l1 FROM ntask.task WHERE task_key = 'l1' \gset
-- what users built on 0.3 (issue 29.10): grants on an ntask function and
-- an ntask view, a view over an ntask view, one over the worker's view, a
-- function calling an ntask function, a BEGIN ATOMIC function bound to one
CREATE ROLE regress_upg_app;
GRANT EXECUTE ON FUNCTION ntask_claim(text, text, integer, interval, interval, boolean) TO regress_upg_app;
GRANT SELECT ON ntask.queue_stats TO regress_upg_app;
CREATE VIEW upg_backlog AS SELECT queue, ready, repair_count FROM ntask.queue_stats;
CREATE VIEW upg_workers AS SELECT pid, state FROM ntask.worker_stats;
CREATE FUNCTION upg_submit(k text) RETURNS bigint LANGUAGE sql
AS $$ SELECT task_id FROM ntask_enqueue('uv', k) $$;
CREATE FUNCTION upg_atomic() RETURNS SETOF bigint LANGUAGE sql
BEGIN ATOMIC SELECT task_id FROM ntask_claim('uv', 'W'); END;

ALTER EXTENSION ntask UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';

-- the same extension as a fresh 1.1.0 but for the user's grants, which
-- the update kept (the full comparison, both ways, is at the end)
SELECT substring(item from '^\S+ \S+') AS only_after_update,
	   item LIKE '%regress_upg_app=%' AS users_grant
FROM (SELECT item FROM pg_temp.ntask_shape() EXCEPT SELECT item FROM fresh_shape) x
ORDER BY 1;

-- the work in flight goes on; a new lease's token is above every token
-- 1.0.0 issued (ntask.token_seq starts past them)
SELECT task_id AS u, attempt, token FROM ntask_claim('up', 'W1') \gset
SELECT :attempt AS attempt, :token AS token;
SELECT result, state FROM ntask_transition(:u, tok(:u, 1), 'succeeded');
SELECT created, state FROM ntask_enqueue('up', 'u1', '{"m": 9}');
SELECT worker, token, ended_at IS NULL AS running,
	   claimed_at = '2026-01-01 00:00:00+00' AS claimed_kept
FROM ntask.attempt_all WHERE task_id = :l1;
SELECT result FROM ntask_transition(:l1, tok(:l1, 1), 'succeeded');
SELECT worker, token, result, invoked_at = '2026-01-01 00:00:01+00' AS invoked_kept, outcome_known
FROM ntask.attempt_all WHERE task_id = :l1;
-- the guard's owner is recorded from the function it resolves to, and the
-- guard still decides
SELECT queue, guard, guard_owner = current_user AS guard_owner_backfilled
FROM ntask.queue WHERE queue = 'ug';
SELECT task_key, token FROM ntask_claim('ug', 'W1', max_tasks => 10);
SELECT task_key, state, reason FROM ntask.task WHERE queue = 'ug' ORDER BY task_key;
-- the guard is a dependency now: it cannot be dropped while a queue uses it
DROP FUNCTION upg_guard(text, jsonb);
\echo :SQLSTATE
SELECT ntask_queue_clear_guard('ug');
DROP FUNCTION upg_guard(text, jsonb);

-- what users built survives
SELECT queue FROM ntask_queue_set('uv');
SELECT upg_submit('via-user-function') IS NOT NULL AS enqueued_by_user_function;
SELECT queue, ready, repair_count FROM upg_backlog WHERE queue = 'uv';
SELECT count(*) >= 0 AS user_view_over_worker_stats FROM upg_workers;
SELECT count(*) AS claimed_by_atomic_function FROM upg_atomic();
SELECT has_function_privilege('regress_upg_app',
	'ntask_claim(text, text, integer, interval, interval, boolean)', 'EXECUTE') AS app_may_claim,
	   has_table_privilege('regress_upg_app', 'ntask.queue_stats', 'SELECT') AS app_may_read_stats;
-- the user's grants are the user's, not the extension's: pg_dump dumps them
SELECT count(*) AS user_grants_in_init_privs
FROM pg_init_privs i, aclexplode(i.initprivs) x
WHERE x.grantee = 'regress_upg_app'::regrole;
DROP VIEW upg_backlog, upg_workers;
DROP FUNCTION upg_submit(text), upg_atomic();
REVOKE ALL ON FUNCTION ntask_claim(text, text, integer, interval, interval, boolean) FROM regress_upg_app;
REVOKE ALL ON ntask.queue_stats FROM regress_upg_app;
DROP ROLE regress_upg_app;
-- and now exactly a fresh 1.1.0, in both directions
SELECT item AS only_after_update FROM pg_temp.ntask_shape()
EXCEPT SELECT item FROM fresh_shape
ORDER BY 1;
SELECT item AS only_in_fresh FROM fresh_shape
EXCEPT SELECT item FROM pg_temp.ntask_shape()
ORDER BY 1;

-- 1.0.0, with work in flight across the update (written as the 1.0.0
-- library would have: the 1.1.0 library refuses the 1.0.0 objects)
DROP EXTENSION ntask;
CREATE EXTENSION ntask VERSION '1.0.0';
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
INSERT INTO ntask.queue (queue) VALUES ('v1');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline)
VALUES ('v1', 'v1-r1', '{"m": 1}', ntask_digest('{"m": 1}'), 1, now(), now(), 3,
		now() + interval '1 day');
-- a leased task mid-lease, with an ended first attempt in the ledger
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline, state, token,
						attempts, lease_owner, lease_until, claimed_at)
VALUES ('v1', 'v1-l1', '{}', ntask_digest('{}'), 1, now(), now() + interval '1 hour', 3,
		now() + interval '1 day', 'leased', 2, 2, 'W0', now() + interval '1 hour',
		'2026-01-01 00:00:00+00');
SELECT task_id AS v1l FROM ntask.task WHERE task_key = 'v1-l1' AND queue = 'v1' \gset
INSERT INTO ntask.attempt (task_id, token, attempt, worker, claimed_at, ended_at, result,
						   error_class, outcome_known)
VALUES (:v1l, 1, 1, 'W9', '2025-12-31 00:00:00+00', '2025-12-31 00:01:00+00',
		'retry_wait', 'transient', true);
-- a task in every other state, one waiting for v1-r1 (its dependency row
-- and the parent's has_children), written as the 1.0.0 library would have
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline, state, reason, token,
						attempts, finished_at, signal_key, await_on_timeout)
SELECT 'v1', 'v1-' || s, '{}', ntask_digest('{}'), 1, now(),
	   CASE WHEN s IN ('retry_wait', 'awaiting') THEN now() + interval '1 hour' END, 3,
	   now() + interval '1 day', s,
	   CASE WHEN s IN ('repair_required', 'canceled', 'skipped') THEN 'by hand' END, 1, 1,
	   CASE WHEN s IN ('repair_required', 'succeeded', 'canceled', 'skipped') THEN now() END,
	   CASE WHEN s = 'awaiting' THEN 'sig-v1' END, CASE WHEN s = 'awaiting' THEN 'ready' END
FROM unnest(ARRAY['retry_wait', 'repair_required', 'succeeded', 'canceled', 'skipped',
				  'awaiting']) s;
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline, state, has_parents, parents_left)
VALUES ('v1', 'v1-waiting', '{}', ntask_digest('{}'), 1, now(), NULL, 3,
		now() + interval '1 day', 'waiting', true, 1);
INSERT INTO ntask.task_dep (task_id, parent_id)
SELECT c.task_id, p.task_id FROM ntask.task c, ntask.task p
WHERE c.task_key = 'v1-waiting' AND p.task_key = 'v1-r1';
UPDATE ntask.task SET has_children = true WHERE task_key = 'v1-r1';
SELECT state FROM ntask.task WHERE queue = 'v1' ORDER BY state;
-- issue 51: a user's grant on ntask_repair_assign, whose arguments change
-- (it gains actor): carried over to the new function
CREATE ROLE regress_upg_oncall;
GRANT EXECUTE ON FUNCTION ntask_repair_assign(bigint, text, text) TO regress_upg_oncall;
-- issue 51: what the summary views of 1.0.0 answer over a task in every
-- state; the rewritten views of 1.1.0 must answer the same (ages as
-- present or not: they move with now())
CREATE TEMP VIEW views_now AS
SELECT 'queue_stats ' || row(s.queue, s.ready, s.leased, s.retry_wait, s.succeeded, s.repair_required,
		s.canceled, s.skipped, s.oldest_ready_age IS NULL, s.oldest_unfinished_age IS NULL,
		s.unknown_attempts, s.repair_count, s.paused, s.keys_paused, s.awaiting,
		s.oldest_awaiting_age IS NULL, s.waiting, s.oldest_waiting_age IS NULL)::text AS r
FROM ntask.queue_stats s
UNION ALL SELECT 'queue_metrics ' || row(m.queue, m.leases_expired, m.enqueued_total, m.claims_total,
		m.unknown_outcomes_total, m.succeeded_total, m.canceled_total, m.skipped_total, m.paused,
		m.keys_paused)::text FROM ntask.queue_metrics m
UNION ALL SELECT 'repair_queue ' || row(q.task_id, q.queue, q.task_key, q.reason, q.attempts,
		q.first_attempt_at, q.last_attempt_at, q.last_error_class, q.known_outcomes,
		q.unknown_outcomes, q.owner, q.next_action, q.since)::text FROM ntask.repair_queue q;
CREATE TEMP TABLE views_before AS SELECT * FROM views_now;
-- every row as text, before the update: none is lost or changed by it
-- (a task's row without the columns 1.1 added, which the update leaves NULL)
CREATE TEMP TABLE v1_before AS
SELECT 'task ' || (to_jsonb(t) - 'attempt_worker' - 'attempt_detail')::text AS r
FROM ntask.task t WHERE t.queue = 'v1'
UNION ALL SELECT 'attempt ' || a::text FROM ntask.attempt a
UNION ALL SELECT 'dep ' || d::text FROM ntask.task_dep d;
ALTER EXTENSION ntask UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
SELECT r AS lost_or_changed FROM v1_before
EXCEPT (SELECT 'task ' || (to_jsonb(t) - 'attempt_worker' - 'attempt_detail')::text
		FROM ntask.task t WHERE t.queue = 'v1'
		UNION ALL SELECT 'attempt ' || a::text FROM ntask.attempt a
		UNION ALL SELECT 'dep ' || d::text FROM ntask.task_dep d);
SELECT count(*) AS rows_after FROM (SELECT 1 FROM ntask.task t WHERE t.queue = 'v1'
		UNION ALL SELECT 1 FROM ntask.attempt a UNION ALL SELECT 1 FROM ntask.task_dep d) x;
SELECT count(*) AS rows_before FROM v1_before;
-- issue 48: no upgraded task keeps an attempt on its row
SELECT count(*) AS attempts_on_rows FROM ntask.task
WHERE attempt_worker IS NOT NULL OR attempt_detail IS NOT NULL;
-- issue 51: the views answer as before; the user's grant is on the new
-- ntask_repair_assign and is the user's (pg_dump dumps it)
SELECT count(*) AS view_rows FROM views_before;
SELECT r AS view_answer_changed FROM (TABLE views_before EXCEPT TABLE views_now) x
UNION ALL SELECT r FROM (TABLE views_now EXCEPT TABLE views_before) y;
SELECT has_function_privilege('regress_upg_oncall', 'ntask_repair_assign(bigint, text, text, text)',
							  'EXECUTE') AS oncall_may_assign;
SELECT count(*) AS oncall_in_init_privs
FROM pg_init_privs i, aclexplode(i.initprivs) x
WHERE x.grantee = 'regress_upg_oncall'::regrole;
REVOKE ALL ON FUNCTION ntask_repair_assign(bigint, text, text, text) FROM regress_upg_oncall;
DROP ROLE regress_upg_oncall;
SELECT item AS only_after_update_from_1_0 FROM pg_temp.ntask_shape()
EXCEPT SELECT item FROM fresh_shape
ORDER BY 1;
SELECT item AS only_in_fresh_not_from_1_0 FROM fresh_shape
EXCEPT SELECT item FROM pg_temp.ntask_shape()
ORDER BY 1;
-- the work in flight goes on: the holder's token reports, the ready task is
-- claimed with a token above every 1.0.0 token (3: l1 had 1 and 2), the
-- ledger keeps both attempts of l1
SELECT result FROM ntask_transition(:v1l, tok(:v1l, 1), 'succeeded');
SELECT result FROM ntask_transition(:v1l, tok(:v1l, 2), 'succeeded');
SELECT task_key, token FROM ntask_claim('v1', 'W1');
SELECT token, worker, result FROM ntask.attempt_all WHERE task_id = :v1l ORDER BY token;
-- issue 48: on the upgraded database, a task finished as 1.0.0 finished
-- it (its attempt in the ledger: ntask.attempt_on_row off) and one finished
-- by 1.1 (its attempt on its row) give the same attempt_all row
SELECT task_id AS u1 FROM ntask_enqueue('v1', 'v1-u1') \gset
SELECT task_id AS u2 FROM ntask_enqueue('v1', 'v1-u2') \gset
SELECT count(*) AS claimed FROM ntask_claim('v1', 'W7', max_tasks => 5) WHERE task_id IN (:u1, :u2);
SET ntask.attempt_on_row = off;
SELECT result FROM ntask_transition(:u1, tok(:u1, 1), 'succeeded', outcome => 'sent');
RESET ntask.attempt_on_row;
SELECT result FROM ntask_transition(:u2, tok(:u2, 1), 'succeeded', outcome => 'sent');
SELECT t.task_key, (SELECT count(*) FROM ntask.attempt a WHERE a.task_id = t.task_id) AS ledger_rows,
	   t.attempt_worker
FROM ntask.task t WHERE t.task_id IN (:u1, :u2) ORDER BY 1;
SELECT count(*) AS attempts, count(DISTINCT row(a.attempt, a.worker, a.claimed_at = t.claimed_at,
			 a.invoked_at, a.ended_at = t.finished_at, a.result, a.requested, a.error_class,
			 a.error_stage, a.outcome_known, a.outcome, a.retry_at, a.detail, a.shard,
			 a.progress)) AS distinct_attempts
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.task_id IN (:u1, :u2);
