-- ntask_bulk / ntask_bulk_all (issue 35.2): cancel, replay and reschedule
-- by filter, with a dry run, in bounded chunks, audited per call and per task
SELECT setval('ntask.task_task_id_seq', 35200, false) AS first_task_id;
SELECT setval('ntask.token_seq', 35200, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('bk', max_attempts => 1);
-- ten tasks: b00..b09; b00..b03 end in repair (permanent, two of them
-- after a transient error class), b04 leased, the rest ready
SELECT count(*) FROM ntask_enqueue_many('bk', ARRAY(SELECT 'b0' || i FROM generate_series(0, 9) i),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(0, 9)),
	partition_keys => ARRAY(SELECT CASE WHEN i < 5 THEN 'red' ELSE 'blue' END FROM generate_series(0, 9) i));
SELECT count(*) FROM (
	SELECT ntask_transition(c.task_id, c.token, 'repair_required',
		CASE WHEN c.task_key IN ('b00', 'b01') THEN 'transient' ELSE 'permanent' END)
	FROM ntask_claim('bk', 'W1', max_tasks => 4) c) x;
SELECT task_id AS leased, token AS leased_token FROM ntask_claim('bk', 'W1') \gset

-- hostile input: every refusal names its SQLSTATE
\set VERBOSITY terse
SELECT * FROM ntask_bulk('bk', 'delete', 'ops', 'x');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('nosuchqueue', 'cancel', 'ops', 'x');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '[]');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '"state"');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"stat": "ready"}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"state": 1}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"state": ["ready", 2]}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"state": []}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"state": "done"}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"state": "succeeded"}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'replay', 'ops', 'x', '{"state": "ready"}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"reason": {"a": 1}}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"key_prefix": ""}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"partition_key": null}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"older_than": 3600}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"older_than": "soon"}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', '{"newer_than": "-1 hour"}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', max_tasks => 0);
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', max_tasks => 10001);
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', run_at => now());
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'reschedule', 'ops', 'x', run_at => 'infinity');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', NULL);
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', NULL, 'x');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('bk', 'cancel', 'ops', 'x', dry_run => NULL);
\echo :SQLSTATE
-- a procedure that commits refuses a transaction block, clearly
BEGIN;
CALL ntask_bulk_all('bk', 'cancel', 'ops', 'x');
\echo :SQLSTATE
ROLLBACK;
\set VERBOSITY default
-- nothing was changed or audited by a refused call
SELECT count(*) AS audit_rows FROM ntask.audit WHERE queue = 'bk' AND action LIKE 'bulk%';

-- dry run: counts, changes nothing, one audit row with the filter
SELECT matched, changed, remaining, audit_id IS NOT NULL AS audited
FROM ntask_bulk('bk', 'cancel', 'ops', 'how many?', dry_run => true);
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'replay', 'ops', 'how many?', '{"error_class": "transient"}', dry_run => true);
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'cancel', 'ops', 'how many?', '{"partition_key": "blue", "key_prefix": "b0"}', dry_run => true);
SELECT matched FROM ntask_bulk('bk', 'cancel', 'ops', 'how many?', '{"older_than": "1 hour"}', dry_run => true);
SELECT matched FROM ntask_bulk('bk', 'cancel', 'ops', 'how many?', '{"newer_than": "1 hour", "state": ["leased"]}', dry_run => true);
SELECT state, count(*) FROM ntask.task WHERE queue = 'bk' GROUP BY state ORDER BY state;
SELECT action, reason, detail FROM ntask.audit WHERE queue = 'bk' AND action LIKE 'bulk%' ORDER BY audit_id LIMIT 2;

-- replay by error class: the guard and fresh-budget rules of ntask_replay
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'replay', 'ops', 'provider fixed', '{"error_class": "transient", "state": "repair_required"}');
SELECT task_key, state, attempts, max_attempts FROM ntask.task WHERE queue = 'bk' AND task_key IN ('b00', 'b01') ORDER BY 1;

-- reschedule the ready blue ones to later, in chunks of 2
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'reschedule', 'ops', 'provider maintenance', '{"partition_key": "blue"}',
				run_at => '2030-01-01 00:00:00+00', max_tasks => 2);
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'reschedule', 'ops', 'provider maintenance', '{"partition_key": "blue"}',
				run_at => '2030-01-01 00:00:00+00', max_tasks => 2);
-- already at that time: matched no more
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'reschedule', 'ops', 'provider maintenance', '{"partition_key": "blue"}',
				run_at => '2030-01-01 00:00:00+00', max_tasks => 2);
SELECT task_key, run_at = '2030-01-01 00:00:00+00' AS moved, due_at = run_at AS due_moved
FROM ntask.task WHERE queue = 'bk' AND partition_key = 'blue' ORDER BY task_key;

-- cancel a chunk: the lowest task ids first; the leased one's token is stale
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'cancel', 'ops', 'withdrawn', '{"partition_key": "red"}', max_tasks => 3);
SELECT task_key, state FROM ntask.task WHERE queue = 'bk' AND partition_key = 'red' ORDER BY task_key;
SELECT matched, changed, remaining
FROM ntask_bulk('bk', 'cancel', 'ops', 'withdrawn', '{"partition_key": "red"}', max_tasks => 3);
SELECT result, state FROM ntask_transition(:leased, :leased_token, 'succeeded');
SELECT result FROM ntask.attempt WHERE task_id = :leased;
-- the per-task audit rows are ntask_cancel's / ntask_replay's
SELECT a.action, t.task_key, a.from_state, a.to_state, a.reason
FROM ntask.audit a JOIN ntask.task t USING (task_id)
WHERE a.queue = 'bk' ORDER BY a.audit_id;
-- one row per call, with the filter and the counts
SELECT action, detail->'filter' AS filter, detail->'dry_run' AS dry_run,
	   detail->'matched' AS matched, detail->'changed' AS changed, detail->'remaining' AS remaining
FROM ntask.audit WHERE queue = 'bk' AND action LIKE 'bulk%' ORDER BY audit_id;

-- ntask_bulk_all: chunk after chunk, a commit between
SELECT count(*) FROM ntask_enqueue_many('bk', ARRAY(SELECT 'c' || i FROM generate_series(1, 7) i),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 7)));
CALL ntask_bulk_all('bk', 'cancel', 'ops', 'all of c', '{"key_prefix": "c"}', max_tasks => 3);
SELECT state, count(*) FROM ntask.task WHERE queue = 'bk' AND task_key LIKE 'c%' GROUP BY 1;
SELECT count(*) AS chunk_audit_rows FROM ntask.audit WHERE queue = 'bk' AND action = 'bulk_cancel' AND reason = 'all of c';
-- nothing left: one chunk that changes nothing
CALL ntask_bulk_all('bk', 'cancel', 'ops', 'all of c', '{"key_prefix": "c"}', max_tasks => 3);
-- a reschedule without run_at moves every chunk to the CALL's start
SELECT count(*) FROM ntask_enqueue_many('bk', ARRAY(SELECT 'd' || i FROM generate_series(1, 5) i),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)), run_at => '2031-01-01');
CALL ntask_bulk_all('bk', 'reschedule', 'ops', 'run the d ones now', '{"key_prefix": "d"}', max_tasks => 2);
SELECT count(DISTINCT run_at) AS one_time, bool_and(run_at < '2031-01-01') AS all_moved
FROM ntask.task WHERE queue = 'bk' AND task_key LIKE 'd%';

-- rights: ntask_cancel's (ntask_admin), not a producer's or a worker's
SELECT has_function_privilege('ntask_admin', 'ntask_bulk(text, text, text, text, jsonb, boolean, timestamptz, integer)', 'EXECUTE') AS admin,
	   has_function_privilege('ntask_worker', 'ntask_bulk(text, text, text, text, jsonb, boolean, timestamptz, integer)', 'EXECUTE') AS worker,
	   has_function_privilege('ntask_producer', 'ntask_bulk(text, text, text, text, jsonb, boolean, timestamptz, integer)', 'EXECUTE') AS producer,
	   has_function_privilege('ntask_admin', 'ntask_bulk_all(text, text, text, text, jsonb, timestamptz, integer, bigint, bigint, integer)', 'EXECUTE') AS admin_all,
	   has_function_privilege('ntask_producer', 'ntask_bulk_all(text, text, text, text, jsonb, timestamptz, integer, bigint, bigint, integer)', 'EXECUTE') AS producer_all;

-- replay keeps ntask_replay's guard: a guard that says skip finishes the task
CREATE FUNCTION bulk_guard(task_key text, payload jsonb) RETURNS text
LANGUAGE sql AS $$ SELECT CASE WHEN payload ? 'stale' THEN 'skip: stale' ELSE 'proceed' END $$;
SELECT queue FROM ntask_queue_set('bkg', max_attempts => 1);
SELECT count(*) FROM ntask_enqueue_many('bkg', '{g1,g2}', ARRAY['{}', '{"stale": 1}']::jsonb[]);
SELECT count(*) FROM (SELECT ntask_transition(c.task_id, c.token, 'repair_required')
					  FROM ntask_claim('bkg', 'W1', max_tasks => 2) c) x;
SELECT queue FROM ntask_queue_set('bkg', guard => 'bulk_guard(text, jsonb)');
SELECT matched, changed, remaining FROM ntask_bulk('bkg', 'replay', 'ops', 'fixed');
SELECT task_key, state, reason, max_attempts FROM ntask.task WHERE queue = 'bkg' ORDER BY task_key;
SELECT action, from_state, to_state FROM ntask.audit WHERE queue = 'bkg' AND task_id IS NOT NULL ORDER BY audit_id;
