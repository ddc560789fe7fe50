-- progress from the holder (issue 35.3): ntask_heartbeat(..., progress),
-- fenced by the token, cleared by the claim, kept with the attempt
SELECT setval('ntask.task_task_id_seq', 35300, false) AS first_task_id;
SELECT setval('ntask.token_seq', 35300, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('pg', max_attempts => 3, lease => '1 hour');
SELECT task_id AS p1 FROM ntask_enqueue('pg', 'p1') \gset
SELECT token FROM ntask_claim('pg', 'W1');
-- a heartbeat without progress stores none
SELECT ntask_heartbeat(:p1, tok(:p1, 1)) IS NOT NULL AS extended;
SELECT progress, progress_at FROM ntask.task WHERE task_id = :p1;
-- with progress: stored, with its time
SELECT ntask_heartbeat(:p1, tok(:p1, 1), progress => '{"done": 10, "of": 100}') IS NOT NULL AS extended;
SELECT progress, progress_at = updated_at AS stamped FROM ntask.task WHERE task_id = :p1;
SELECT task_key, attempt, worker, progress, progress_age >= '0' AS has_age FROM ntask.task_progress WHERE task_id = :p1;
-- a later heartbeat without progress keeps the last progress
SELECT ntask_heartbeat(:p1, tok(:p1, 1), '30 min') IS NOT NULL AS extended;
SELECT progress FROM ntask.task WHERE task_id = :p1;
SELECT ntask_heartbeat(:p1, tok(:p1, 1), progress => '{"done": 20, "of": 100}') IS NOT NULL AS extended;
SELECT event, detail ~ 'progress .* ago' AS shows_age, detail ~ '"done": 20' AS shows_progress
FROM ntask_explain(:p1) WHERE event IN ('now', 'progress');

-- hostile input
\set VERBOSITY terse
-- too big: 54000 (ntask.max_result_bytes), nothing stored
SET ntask.max_result_bytes = 100;
SELECT ntask_heartbeat(:p1, tok(:p1, 1), progress => jsonb_build_object('blob', repeat('x', 200)));
\echo :SQLSTATE
RESET ntask.max_result_bytes;
SELECT progress FROM ntask.task WHERE task_id = :p1;
-- a token never issued: NT003; an unknown task: P0002
SELECT ntask_heartbeat(:p1, tok(:p1, 7), progress => '{"x": 1}');
\echo :SQLSTATE
SELECT ntask_heartbeat(999999, tok(999999, 1), progress => '{"x": 1}');
\echo :SQLSTATE
SELECT ntask_heartbeat(:p1, tok(:p1, 1), '-1 min', progress => '{"x": 1}');
\echo :SQLSTATE
\set VERBOSITY default

-- the attempt ends (its lease expires and the next claim takes over): its
-- last progress is kept in the ledger, the new attempt starts without any
UPDATE ntask.task SET lease_until = now() - interval '1 s', due_at = now() - interval '1 s' WHERE task_id = :p1;
SELECT token FROM ntask_claim('pg', 'W2');
SELECT token, result, progress FROM ntask.attempt WHERE task_id = :p1 ORDER BY token;
SELECT progress, progress_at FROM ntask.task WHERE task_id = :p1;
SELECT count(*) AS shown FROM ntask.task_progress WHERE task_id = :p1;
-- the holder reports; the stale token's heartbeat with progress writes
-- nothing (and extends nothing)
SELECT ntask_heartbeat(:p1, tok(:p1, 2), progress => '{"phase": "upload"}') IS NOT NULL AS extended;
SELECT lease_until AS lease_before FROM ntask.task WHERE task_id = :p1 \gset
SELECT ntask_heartbeat(:p1, tok(:p1, 1), '5 hours', progress => '{"stale": true}') IS NULL AS lease_lost;
SELECT progress, lease_until = :'lease_before' AS lease_kept FROM ntask.task WHERE task_id = :p1;
-- the holder finishes: the progress goes with the attempt
SELECT result FROM ntask_transition(:p1, tok(:p1, 2), 'succeeded');
SELECT token, result, progress FROM ntask.attempt_all WHERE task_id = :p1 ORDER BY token;
SELECT detail ~ 'last progress \{"phase": "upload"\}' AS ended_shows_progress
FROM ntask_explain(:p1) WHERE event = 'ended' AND token = tok(:p1, 2);

-- release, cancel and the many transition keep it too
SELECT task_id AS p2 FROM ntask_enqueue('pg', 'p2') \gset
SELECT task_id AS p3 FROM ntask_enqueue('pg', 'p3') \gset
SELECT task_id AS p4 FROM ntask_enqueue('pg', 'p4') \gset
SELECT count(*) FROM ntask_claim('pg', 'W1', max_tasks => 3);
SELECT count(*) FROM ntask_heartbeat(:p2, tok(:p2, 1), progress => '"p2 half"') h
UNION ALL SELECT count(*) FROM ntask_heartbeat(:p3, tok(:p3, 1), progress => '"p3 half"') h
UNION ALL SELECT count(*) FROM ntask_heartbeat(:p4, tok(:p4, 1), progress => '"p4 half"') h;
SELECT ntask_release(:p2, tok(:p2, 1));
SELECT ntask_cancel(:p3, 'ops', 'not needed');
SELECT result FROM ntask_transition_many(ARRAY[:p4]::bigint[], ARRAY[tok(:p4, 1)], 'succeeded');
SELECT t.task_key, a.result, a.progress FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.task_id IN (:p2, :p3, :p4) ORDER BY 1;
