-- upgrade: ALTER EXTENSION ntask UPDATE from 0.1 keeps the data and ends
-- with exactly the objects of a fresh installation
CREATE TEMP TABLE fresh AS
SELECT pg_describe_object(classid, objid, 0) AS object
FROM pg_depend
WHERE refclassid = 'pg_extension'::regclass
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
  AND deptype = 'e';
DROP EXTENSION ntask;
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
SELECT pg_describe_object(classid, objid, 0) AS only_after_upgrade
FROM pg_depend
WHERE refclassid = 'pg_extension'::regclass
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
  AND deptype = 'e'
EXCEPT SELECT object FROM fresh;
SELECT object AS only_in_fresh FROM fresh
EXCEPT
SELECT pg_describe_object(classid, objid, 0)
FROM pg_depend
WHERE refclassid = 'pg_extension'::regclass
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
  AND deptype = 'e';
SELECT count(*) AS housekeeping_indexes FROM pg_indexes
WHERE schemaname = 'ntask' AND indexname IN ('task_lease_idx', 'task_finished_idx');
