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
-- work in flight across the upgrade
SELECT queue FROM ntask_queue_set('up');
SELECT task_id AS u FROM ntask_enqueue('up', 'u1', '{"m": 9}') \gset
SELECT attempt, token FROM ntask_claim('up', 'W1');
ALTER EXTENSION ntask UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
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
