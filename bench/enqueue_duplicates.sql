-- bench/enqueue_duplicates.sql (issue 46.10): what the enqueue's INSERT
-- costs for a new key and for a duplicate, in shared buffer hits and time
-- per call (pg_stat_statements, track = all), 3000 calls each against a
-- queue of 20000 tasks.  Run it on a private cluster with
--   shared_preload_libraries = 'ntask,pg_stat_statements'
--   pg_stat_statements.track = all
-- once per build (swap ntask.so and restart between runs, as
-- bench/before_after does) and compare the INSERT rows; it drops and
-- re-creates the extension.  Numbers: docs/performance.md "Duplicate
-- enqueues".
DROP EXTENSION IF EXISTS ntask CASCADE;
CREATE EXTENSION ntask;
SELECT count(*) FROM ntask_queue_set('m');
SELECT count(*) FROM ntask_enqueue_many('m', (SELECT array_agg('w' || i) FROM generate_series(1, 10000) i), (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 10000)));
SELECT count(*) FROM ntask_enqueue_many('m', (SELECT array_agg('w' || i) FROM generate_series(10001, 20000) i), (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 10000)));
VACUUM ANALYZE ntask.task;
DO $$ BEGIN FOR i IN 1..500 LOOP PERFORM ntask_enqueue('m', 'x' || i, '{}'); END LOOP; END $$;
SELECT pg_stat_statements_reset();
DO $$ BEGIN FOR i IN 1..3000 LOOP PERFORM ntask_enqueue('m', 'n' || i, '{}'); END LOOP; END $$;
SELECT 'new' AS k, calls, round(shared_blks_hit::numeric / calls, 2) AS hits_per_call, round((total_exec_time / calls)::numeric * 1000, 1) AS us_per_call, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 40) AS q
FROM pg_stat_statements WHERE calls >= 3000 ORDER BY q;
SELECT pg_stat_statements_reset();
DO $$ BEGIN FOR i IN 1..3000 LOOP PERFORM ntask_enqueue('m', 'w' || i, '{}'); END LOOP; END $$;
SELECT 'dup' AS k, calls, round(shared_blks_hit::numeric / calls, 2) AS hits_per_call, round((total_exec_time / calls)::numeric * 1000, 1) AS us_per_call, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 40) AS q
FROM pg_stat_statements WHERE calls >= 3000 ORDER BY q;
SELECT max(task_id) FROM ntask.task;
