-- batch: ntask_enqueue_many, ntask_transition_many and
-- ntask_transition_and_claim give, per element, exactly the answers of
-- ntask_enqueue, ntask_transition and ntask_transition + ntask_claim
-- task ids start at 18000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 18000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 18000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('bt', max_attempts => 2, lease => '1 minute');
SELECT queue FROM ntask_queue_set('bt2', lease => '1 minute');

-- ---------------------------------------------------------------- enqueue_many
-- one row per element in input order; new ids follow the input; a key
-- repeated with an equal payload is one task, created only the first time
SELECT * FROM ntask_enqueue_many('bt', ARRAY['e3', 'e1', 'e3', 'e2'],
	ARRAY['{"n": 3}', '{"n": 1}', '{"n": 3}', '{"n": 2}']::jsonb[],
	partition_keys => ARRAY['p', NULL, 'p', 'q']);
SELECT task_id, task_key, payload, partition_key, priority, state FROM ntask.task
WHERE queue = 'bt' ORDER BY task_id;
-- an existing key with an equal payload: the existing task, created = false
SELECT * FROM ntask_enqueue_many('bt', ARRAY['e2', 'e4'], ARRAY['{"n": 2}', '{"n": 4}']::jsonb[]);
-- an existing key with a different payload: NT001, and nothing of the call lands
SELECT * FROM ntask_enqueue_many('bt', ARRAY['e5', 'e1'], ARRAY['{"n": 5}', '{"n": 99}']::jsonb[]);
\echo :SQLSTATE
-- a key repeated inside the call with different payloads: NT001
SELECT * FROM ntask_enqueue_many('bt', ARRAY['e6', 'e6'], ARRAY['{"n": 6}', '{"n": 7}']::jsonb[]);
\echo :SQLSTATE
SELECT count(*) AS no_e5_no_e6 FROM ntask.task WHERE task_key IN ('e5', 'e6');
-- an empty batch is no rows
SELECT * FROM ntask_enqueue_many('bt', ARRAY[]::text[], ARRAY[]::jsonb[]);
-- a row written by the batch equals the row ntask_enqueue writes
SELECT * FROM ntask_enqueue('bt2', 'single', '{"k": [1, 2]}', run_at => '2100-01-01 00:00:00+00', partition_key => 'pk', priority => 4);
SELECT * FROM ntask_enqueue_many('bt2', ARRAY['many'], ARRAY['{"k": [1, 2]}']::jsonb[], run_at => '2100-01-01 00:00:00+00', partition_keys => ARRAY['pk'], priority => 4);
SELECT count(DISTINCT (queue, payload, payload_digest, digest_version, partition_key, priority,
					   state, run_at, due_at, max_attempts, deadline, token, attempts)) AS distinct_rows,
	   count(*) AS rows
FROM ntask.task WHERE queue = 'bt2';
-- hostile input
SELECT * FROM ntask_enqueue_many(NULL, ARRAY['x'], ARRAY['{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', NULL, ARRAY['{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x'], NULL);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x', NULL], ARRAY['{}', '{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x', 'y'], ARRAY['{}', NULL]::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x', 'y'], ARRAY['{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY[['x'], ['y']], ARRAY['{}', '{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x', ''], ARRAY['{}', '{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x', repeat('k', 513)], ARRAY['{}', '{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x'], ARRAY['{}']::jsonb[], partition_keys => ARRAY['']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x'], ARRAY['{}']::jsonb[], partition_keys => ARRAY['a', 'b']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x'], ARRAY['{}']::jsonb[], priority => NULL);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', ARRAY['x'], ARRAY['{}']::jsonb[], run_at => 'infinity');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('nosuchqueue', ARRAY['x'], ARRAY['{}']::jsonb[]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('bt', array_fill('x'::text, ARRAY[10001]), array_fill('{}'::jsonb, ARRAY[10001]));
\echo :SQLSTATE
SELECT count(*) AS no_x FROM ntask.task WHERE task_key = 'x';

-- ---------------------------------------------------------------- transition_many
-- claim the four tasks of bt: e1..e4, token 1 each
SELECT task_key, token FROM ntask_claim('bt', 'W1', 10) ORDER BY task_key;
SELECT task_id AS e1 FROM ntask.task WHERE task_key = 'e1' \gset
SELECT task_id AS e2 FROM ntask.task WHERE task_key = 'e2' \gset
SELECT task_id AS e3 FROM ntask.task WHERE task_key = 'e3' \gset
SELECT task_id AS e4 FROM ntask.task WHERE task_key = 'e4' \gset
-- a never-issued token fails the whole batch (NT003): nothing is applied
SELECT * FROM ntask_transition_many(ARRAY[:e1, :e2], ARRAY[tok(:e1, 1), tok(:e2, 7)], 'succeeded');
\echo :SQLSTATE
SELECT count(*) AS still_leased FROM ntask.task WHERE queue = 'bt' AND state = 'leased';
-- an unknown task: P0002
SELECT * FROM ntask_transition_many(ARRAY[:e1, 999999], ARRAY[tok(:e1, 1), tok(999999, 1)], 'succeeded');
\echo :SQLSTATE
-- e1, e2 succeed in one call; rows come back in input order (e2 first)
SELECT task_id = :e2 AS is_e2, result, state, run_at FROM ntask_transition_many(ARRAY[:e2, :e1], ARRAY[tok(:e2, 1), tok(:e1, 1)], 'succeeded', outcome => 'sent');
-- the same batch again plus e3: duplicate, duplicate, applied; then a
-- different transition of the same tokens: conflict
SELECT task_id = :e3 AS is_e3, result, state FROM ntask_transition_many(ARRAY[:e2, :e1, :e3], ARRAY[tok(:e2, 1), tok(:e1, 1), tok(:e3, 1)], 'succeeded', outcome => 'sent');
SELECT result, state FROM ntask_transition_many(ARRAY[:e1, :e2], ARRAY[tok(:e1, 1), tok(:e2, 1)], 'canceled');
-- what ntask_transition answers for the same calls, for comparison
SELECT result, state FROM ntask_transition(:e1, tok(:e1, 1), 'succeeded', outcome => 'sent');
SELECT result, state FROM ntask_transition(:e1, tok(:e1, 1), 'canceled');
-- the ledger equals what one ntask_transition per task writes
SELECT t.task_key, t.state, t.outcome, t.reason, t.unknown_attempts, t.lease_owner, t.due_at IS NULL AS no_due, t.finished_at IS NOT NULL AS finished,
	   a.result, a.requested, a.outcome, a.outcome_known, a.ended_at IS NOT NULL AS ended
FROM ntask.task t JOIN ntask.attempt_all a USING (task_id) WHERE t.queue = 'bt' ORDER BY t.task_key, a.token;

-- retry_wait batches run each task's budget and backoff: e4 (attempt 1 of
-- 2) waits; claimed again it is on its last attempt and a retry sends it
-- to repair_required (budget_exhausted)
SELECT result, state, run_at > now() AS later FROM ntask_transition_many(ARRAY[:e4], ARRAY[tok(:e4, 1)], 'retry_wait', 'transient', '{"http": 503}');
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :e4;
SELECT * FROM ntask_enqueue_many('bt', ARRAY['e7'], ARRAY['{"n": 7}']::jsonb[]);
SELECT task_key, token, attempt FROM ntask_claim('bt', 'W1', 10) ORDER BY task_key;
SELECT task_id AS e7 FROM ntask.task WHERE task_key = 'e7' \gset
SELECT task_id = :e7 AS is_e7, result, state, run_at > now() AS later FROM ntask_transition_many(ARRAY[:e4, :e7], ARRAY[tok(:e4, 2), tok(:e7, 1)], 'retry_wait');
SELECT task_key, state, reason, last_error_class FROM ntask.task WHERE task_id IN (:e4, :e7) ORDER BY task_key;
-- an unknown-outcome repair request: the attempt's outcome is not known
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :e7;
SELECT task_key, token FROM ntask_claim('bt', 'W1', 10) ORDER BY task_key;
SELECT result, state FROM ntask_transition_many(ARRAY[:e7], ARRAY[tok(:e7, 2)], 'repair_required', 'unknown', '{"reason": "timeout"}');
SELECT state, reason, unknown_attempts, last_error_class FROM ntask.task WHERE task_id = :e7;
SELECT token, result, outcome_known FROM ntask.attempt_all WHERE task_id = :e7 ORDER BY token;

-- hostile input
SELECT * FROM ntask_transition_many(ARRAY[:e1, :e1], ARRAY[tok(:e1, 1), tok(:e1, 1)], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:e1], ARRAY[1, 1], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:e1, NULL], ARRAY[tok(:e1, 1), 1], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:e1], ARRAY[NULL]::bigint[], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(NULL, ARRAY[1], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[[:e1]], ARRAY[[1]], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:e1], ARRAY[tok(:e1, 1)], 'leased');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:e1], ARRAY[tok(:e1, 1)], 'retry_wait', 'permanent');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:e1], ARRAY[tok(:e1, 1)], 'succeeded', retry_at => now());
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:e1], ARRAY[tok(:e1, 1)], NULL);
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[]::bigint[], ARRAY[]::bigint[], 'succeeded');

-- ---------------------------------------------------------------- transition_and_claim
SELECT * FROM ntask_enqueue_many('bt2', ARRAY['c1', 'c2', 'c3'], ARRAY['{"c": 1}', '{"c": 2}', '{"c": 3}']::jsonb[]);
SELECT task_id AS c1, token AS c1tok FROM ntask_claim('bt2', 'W2') \gset
-- finish c1 and take the next one: one row, the claim plus the finish's answer
SELECT task_key, attempt, token, prior_outcome, finish_result, finish_state, finish_run_at
FROM ntask_transition_and_claim(:c1, :c1tok, 'succeeded', 'bt2', 'W2', outcome => 'sent');
SELECT task_id AS c2 FROM ntask.task WHERE task_key = 'c2' \gset
-- the same finish again (a retried round trip): duplicate, and the claim goes on
SELECT task_key, token, finish_result, finish_state
FROM ntask_transition_and_claim(:c1, :c1tok, 'succeeded', 'bt2', 'W2', outcome => 'sent');
SELECT task_id AS c3 FROM ntask.task WHERE task_key = 'c3' \gset
-- a retry_wait finish with max_tasks 2 and nothing left to claim: one row,
-- the claim's columns NULL, the answer kept
SELECT task_id, task_key, token, finish_result, finish_state, finish_run_at > now() AS later
FROM ntask_transition_and_claim(:c2, tok(:c2, 1), 'retry_wait', 'bt2', 'W2', 2, error_class => 'transient');
-- an unknown queue fails the whole call: c3 stays leased
SELECT * FROM ntask_transition_and_claim(:c3, tok(:c3, 1), 'succeeded', 'nosuchqueue', 'W2');
\echo :SQLSTATE
SELECT state FROM ntask.task WHERE task_id = :c3;
-- a never-issued token fails it too (NT003), before anything is claimed
SELECT * FROM ntask_transition_and_claim(:c3, tok(:c3, 5), 'succeeded', 'bt2', 'W2');
\echo :SQLSTATE
SELECT * FROM ntask_transition_and_claim(:c3, tok(:c3, 1), 'succeeded', 'bt2', 'W2', 0);
\echo :SQLSTATE
SELECT * FROM ntask_transition_and_claim(:c3, tok(:c3, 1), 'succeeded', 'bt2', NULL);
\echo :SQLSTATE
SELECT * FROM ntask_transition_and_claim(:c3, tok(:c3, 1), 'succeeded', 'bt2', 'W2', lease => '-1 second');
\echo :SQLSTATE
SELECT * FROM ntask_transition_and_claim(:c3, tok(:c3, 1), 'succeeded', 'bt2', 'W2', error_class => 'transient');
\echo :SQLSTATE
SELECT * FROM ntask_transition_and_claim(NULL, 1, 'succeeded', 'bt2', 'W2');
\echo :SQLSTATE
SELECT state FROM ntask.task WHERE task_id = :c3;
-- a stale finish: c3's lease runs out and W3 takes it over (token 2); W2's
-- late finish is stale, and the claim still hands W2 the next task, with
-- the stale answer on its row
SELECT * FROM ntask_enqueue_many('bt2', ARRAY['c4'], ARRAY['{"c": 4}']::jsonb[]);
UPDATE ntask.task SET lease_until = now() - interval '1 second', due_at = now() - interval '1 second'
WHERE task_id = :c3;
SELECT task_key, token, prior_outcome FROM ntask_claim('bt2', 'W3');
SELECT task_key, token, finish_result, finish_state
FROM ntask_transition_and_claim(:c3, tok(:c3, 1), 'succeeded', 'bt2', 'W2');
SELECT task_key, state, outcome, attempts, token, lease_owner FROM ntask.task
WHERE queue = 'bt2' AND task_key LIKE 'c%' ORDER BY task_key;
SELECT t.task_key, a.token, a.worker, a.result, a.requested FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'bt2' ORDER BY t.task_key, a.token;
