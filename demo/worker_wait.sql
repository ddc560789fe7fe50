-- demo part 3 (scripts/demo.sh): an external worker that waits for work
-- instead of polling, and seed 002's idempotent request: a retried
-- request gets the first run's stored answer, only with the right.
-- scripts/demo.sh has created queue "exports" and started a producer that
-- enqueues export:u-1:2026-12 one second after this script starts.
\set QUIET 1
\pset footer off
\echo
\echo '=== 11. A worker that waits: ntask_claim(..., wait => ''10 seconds'') with nothing due yet'
\echo '--- it sleeps (no lock held, no polling) until the producer''s commit wakes it'
SELECT task_id AS ex, token AS ex_token, task_key,
	   round(extract(epoch FROM clock_timestamp() - now())::numeric, 1) AS waited_s
FROM ntask_claim('exports', 'W-export', wait => '10 seconds') \gset
SELECT :'task_key' AS claimed, :'waited_s' AS "waited (s)";
\echo '--- the worker exports, then stores where the file is with its succeeded'
SELECT result, state FROM ntask_transition(:ex, :ex_token, 'succeeded', outcome => 'exported',
	result => '{"url": "s3://exports/u-1/2026-12.csv", "rows": 42}');
\echo
\echo '=== 12. The producer''s request timed out on its side; it retries with the same key'
\echo '--- same key, same parameters: no second export, the first run''s answer'
SET ROLE demo_app;
SELECT created, state, outcome, result
FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-12"}');
SELECT state, outcome, result FROM ntask_result('exports', 'export:u-1:2026-12');
\echo '--- same key, different parameters: a conflict (NT001), nothing revealed'
DO $$ BEGIN
	PERFORM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-11"}');
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'refused: % %', SQLSTATE, SQLERRM;
END $$;
RESET ROLE;
\echo '--- the app''s right to the queue is revoked: the replay is refused (42501),'
\echo '--- the same answer as for a key that never existed, and nothing is written'
REVOKE demo_exporters FROM demo_app;
SET ROLE demo_app;
DO $$ BEGIN
	PERFORM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-12"}');
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'existing key refused: % %', SQLSTATE, SQLERRM;
END $$;
DO $$ BEGIN
	PERFORM ntask_enqueue('exports', 'export:nobody', '{}');
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'unknown key refused: % %', SQLSTATE, SQLERRM;
END $$;
RESET ROLE;
SELECT count(*) AS export_tasks FROM ntask.task WHERE queue = 'exports';
