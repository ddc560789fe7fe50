-- upgrade: ALTER EXTENSION ntask UPDATE from 0.1 and from 0.2 keeps the
-- data and ends with exactly the objects of a fresh installation: the same
-- member objects, and the same columns, indexes and constraints
CREATE FUNCTION pg_temp.ntask_members() RETURNS TABLE (object text) LANGUAGE sql AS $$
  SELECT pg_describe_object(classid, objid, 0)
  FROM pg_depend
  WHERE refclassid = 'pg_extension'::regclass
    AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
    AND deptype = 'e'
$$;
CREATE TEMP TABLE fresh AS SELECT * FROM pg_temp.ntask_members();
CREATE FUNCTION pg_temp.ntask_shape() RETURNS TABLE (item text) LANGUAGE sql AS $$
  SELECT format('column %s.%s %s%s%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
                CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''))
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  WHERE n.nspname = 'ntask' AND c.relkind IN ('r', 'v')
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'ntask'
  UNION ALL
  SELECT format('constraint %s %s', co.conrelid::regclass, pg_get_constraintdef(co.oid))
  FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace
  WHERE n.nspname = 'ntask'
  UNION ALL
  SELECT format('function %s %s %s', p.oid::regprocedure, p.prosecdef, p.proconfig)
  FROM pg_proc p JOIN pg_depend dp ON dp.objid = p.oid AND dp.classid = 'pg_proc'::regclass
  WHERE dp.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask') AND dp.deptype = 'e'
  UNION ALL
  SELECT format('grant %s %s', p.oid::regprocedure, p.proacl)
  FROM pg_proc p JOIN pg_depend dp ON dp.objid = p.oid AND dp.classid = 'pg_proc'::regclass
  WHERE dp.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask') AND dp.deptype = 'e'
$$;
CREATE TEMP TABLE fresh_shape AS SELECT * FROM pg_temp.ntask_shape();
-- (quietly: what earlier tests left behind is not this file's business;
-- the drop's own warning is tested in TAP 002_schedule_pg_cron)
SET client_min_messages = error;
DROP EXTENSION ntask;
RESET client_min_messages;
CREATE EXTENSION ntask VERSION '0.1';
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
SELECT setval('ntask.task_task_id_seq', 15000, false) AS first_task_id;
-- the 0.2 library refuses to work on the 0.1 objects, with a clear hint
SELECT queue FROM ntask_queue_set('up');
\echo :SQLSTATE
-- work in flight across the upgrade (written as the 0.1 library would have)
INSERT INTO ntask.queue (queue) VALUES ('up');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline)
VALUES ('up', 'u1', '{"m": 9}', ntask_digest('{"m": 9}'), 1, now(), now(), 3,
		now() + interval '1 day');
ALTER EXTENSION ntask UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
SELECT task_id AS u, attempt, token FROM ntask_claim('up', 'W1') \gset
SELECT :u AS task_id, :attempt AS attempt, :token AS token;
SELECT result, state FROM ntask_transition(:u, 1, 'succeeded');
SELECT created, state FROM ntask_enqueue('up', 'u1', '{"m": 9}');
-- the same objects as a fresh 0.2 installation, in both directions
SELECT object AS only_after_upgrade FROM pg_temp.ntask_members()
EXCEPT SELECT object FROM fresh;
SELECT object AS only_in_fresh FROM fresh
EXCEPT SELECT object FROM pg_temp.ntask_members();
SELECT count(*) AS housekeeping_indexes FROM pg_indexes
WHERE schemaname = 'ntask' AND indexname IN ('task_lease_idx', 'task_finished_idx');
SELECT item AS shape_only_after_upgrade FROM pg_temp.ntask_shape()
EXCEPT SELECT item FROM fresh_shape;
SELECT item AS shape_only_in_fresh FROM fresh_shape
EXCEPT SELECT item FROM pg_temp.ntask_shape();

-- from 0.2: a guarded queue (its guard a regprocedure then) keeps its guard,
-- now stored as schema-qualified text, and the guard still decides
DROP EXTENSION ntask;
CREATE EXTENSION ntask VERSION '0.2';
SELECT setval('ntask.task_task_id_seq', 15100, false) AS first_task_id;
CREATE FUNCTION upg_guard(task_key text, payload jsonb) RETURNS text
LANGUAGE sql AS $$ SELECT CASE WHEN payload ? 'stale' THEN 'skip: stale' ELSE 'proceed' END $$;
INSERT INTO ntask.queue (queue, guard) VALUES ('ug', 'upg_guard(text,jsonb)');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline)
SELECT 'ug', k, p, ntask_digest(p), 1, now(), now(), 3, now() + interval '1 day'
FROM (VALUES ('g1', '{}'::jsonb), ('g2', '{"stale": 1}'::jsonb)) v(k, p);
-- a running attempt across the upgrade, as the 0.2 library wrote it: an
-- open ntask.attempt row (0.3 keeps it on the task row, write-once ledger)
INSERT INTO ntask.queue (queue) VALUES ('ul');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version,
						run_at, due_at, max_attempts, deadline, state, token,
						attempts, lease_owner, lease_until)
VALUES ('ul', 'l1', '{}', ntask_digest('{}'), 1, now(), now() + interval '1 hour', 3,
		now() + interval '1 day', 'leased', 1, 1, 'W0', now() + interval '1 hour');
INSERT INTO ntask.attempt (task_id, token, attempt, worker, claimed_at, invoked_at)
SELECT task_id, 1, 1, 'W0', '2026-01-01 00:00:00+00', '2026-01-01 00:00:01+00'
FROM ntask.task WHERE task_key = 'l1';
SELECT task_id AS l1 FROM ntask.task WHERE task_key = 'l1' \gset
ALTER EXTENSION ntask UPDATE;
-- the open attempt moved onto its task row; the holder finishes it
SELECT claimed_at = '2026-01-01 00:00:00+00' AS claimed_kept,
	   invoked_at = '2026-01-01 00:00:01+00' AS invoked_kept
FROM ntask.task WHERE task_id = :l1;
SELECT count(*) AS open_ledger_rows FROM ntask.attempt WHERE ended_at IS NULL;
SELECT worker, token, ended_at IS NULL AS running FROM ntask.attempt_all WHERE task_id = :l1;
SELECT result FROM ntask_transition(:l1, 1, 'succeeded');
SELECT worker, token, result, claimed_at = '2026-01-01 00:00:00+00' AS claimed_kept,
	   invoked_at = '2026-01-01 00:00:01+00' AS invoked_kept, outcome_known
FROM ntask.attempt WHERE task_id = :l1;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
SELECT queue, guard, pg_typeof(guard) FROM ntask.queue WHERE queue = 'ug';
-- 1.0: the guard's owner is recorded from the function it resolves to
SELECT guard_owner = current_user AS guard_owner_backfilled FROM ntask.queue WHERE queue = 'ug';
SELECT task_key, token FROM ntask_claim('ug', 'W1', max_tasks => 10);
SELECT task_key, state, reason FROM ntask.task WHERE queue = 'ug' ORDER BY task_key;
SELECT object AS only_after_upgrade_from_02 FROM pg_temp.ntask_members()
EXCEPT SELECT object FROM fresh;
SELECT object AS only_in_fresh_02 FROM fresh
EXCEPT SELECT object FROM pg_temp.ntask_members();
SELECT item AS shape_only_after_upgrade_from_02 FROM pg_temp.ntask_shape()
EXCEPT SELECT item FROM fresh_shape;
SELECT item AS shape_only_in_fresh_02 FROM fresh_shape
EXCEPT SELECT item FROM pg_temp.ntask_shape();
-- the guard is a dependency now: it cannot be dropped while a queue uses it
DROP FUNCTION upg_guard(text, jsonb);
\echo :SQLSTATE
SELECT ntask_queue_clear_guard('ug');
DROP FUNCTION upg_guard(text, jsonb);

-- issue 29.10: what users built on ntask survives the update from 0.2: a
-- view over an ntask view, a function calling an ntask function, grants on
-- an ntask function (whose arguments change, so it is dropped and created
-- again) and on an ntask view
DROP EXTENSION ntask;
CREATE EXTENSION ntask VERSION '0.2';
CREATE ROLE regress_upg_app;
GRANT EXECUTE ON FUNCTION ntask_claim(text, text, integer, interval) TO regress_upg_app;
GRANT SELECT ON ntask.queue_stats TO regress_upg_app;
CREATE VIEW upg_backlog AS SELECT queue, ready, repair_count FROM ntask.queue_stats;
CREATE VIEW upg_workers AS SELECT pid, state FROM ntask.worker_stats;
CREATE FUNCTION upg_submit(k text) RETURNS bigint LANGUAGE sql
AS $$ SELECT task_id FROM ntask_enqueue('uv', k) $$;
ALTER EXTENSION ntask UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
SELECT queue FROM ntask_queue_set('uv');
SELECT upg_submit('via-user-function') IS NOT NULL AS enqueued_by_user_function;
SELECT queue, ready, repair_count FROM upg_backlog WHERE queue = 'uv';
SELECT count(*) >= 0 AS user_view_over_worker_stats FROM upg_workers;
SELECT has_function_privilege('regress_upg_app',
	'ntask_claim(text, text, integer, interval, interval, boolean)', 'EXECUTE') AS app_may_claim,
	   has_table_privilege('regress_upg_app', 'ntask.queue_stats', 'SELECT') AS app_may_read_stats;
-- the carried grant is the user's, not the extension's: pg_dump dumps it
SELECT count(*) AS carried_grant_in_init_privs
FROM pg_init_privs i, aclexplode(i.initprivs) x
WHERE i.objoid = 'ntask_claim(text, text, integer, interval, interval, boolean)'::regprocedure
  AND x.grantee = 'regress_upg_app'::regrole;
-- a user object the update cannot keep (a BEGIN ATOMIC function bound to a
-- function the update must drop) is named, and nothing is changed
DROP VIEW upg_backlog, upg_workers;
DROP FUNCTION upg_submit(text);
DROP EXTENSION ntask;
CREATE EXTENSION ntask VERSION '0.2';
CREATE FUNCTION upg_atomic() RETURNS SETOF bigint LANGUAGE sql
BEGIN ATOMIC SELECT task_id FROM ntask_claim('uv', 'W'); END;
\set SHOW_CONTEXT never
ALTER EXTENSION ntask UPDATE;
\set SHOW_CONTEXT errors
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
DROP FUNCTION upg_atomic();
ALTER EXTENSION ntask UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
DROP ROLE regress_upg_app;
