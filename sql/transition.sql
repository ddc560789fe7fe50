-- transition: applied / duplicate / conflict / stale, per BRIEF
-- task ids start at 3000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 3000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 3000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('tr', max_attempts => 5, backoff_base => '10 seconds',
                                  backoff_max => '1 minute', total_deadline => '1 day');
SELECT task_id AS t1 FROM ntask_enqueue('tr', 't1') \gset
SELECT token FROM ntask_claim('tr', 'W1');
-- succeeded with an outcome label naming the boundary reached
SELECT * FROM ntask_transition(:t1, tok(:t1, 1), 'succeeded', outcome => 'provider_accepted')
  \gset r_
\echo :r_result :r_state
-- the same call again (lost response): duplicate, task unchanged
SELECT result, state FROM ntask_transition(:t1, tok(:t1, 1), 'succeeded', outcome => 'provider_accepted');
-- the same token asking for something else: conflict
SELECT result, state FROM ntask_transition(:t1, tok(:t1, 1), 'retry_wait');
-- a different outcome label is a different transition too
SELECT result, state FROM ntask_transition(:t1, tok(:t1, 1), 'succeeded', outcome => 'device_received');
SELECT result, state FROM ntask_transition(:t1, tok(:t1, 1), 'succeeded');
SELECT state, outcome, finished_at IS NOT NULL AS finished, due_at, lease_owner FROM ntask.task WHERE task_id = :t1;
SELECT token, result, requested, outcome, outcome_known FROM ntask.attempt_all WHERE task_id = :t1;
-- succeeded without a label says completed
SELECT task_id AS t2 FROM ntask_enqueue('tr', 't2') \gset
SELECT token FROM ntask_claim('tr', 'W1');
SELECT result, state FROM ntask_transition(:t2, tok(:t2, 1), 'succeeded');
SELECT outcome FROM ntask.task WHERE task_id = :t2;
SELECT result FROM ntask_transition(:t2, tok(:t2, 1), 'succeeded', outcome => 'completed');

-- transient failure: retry_wait with exponential backoff (jitter off in tests)
SELECT task_id AS t3 FROM ntask_enqueue('tr', 't3') \gset
SELECT token FROM ntask_claim('tr', 'W1');
SELECT result, state, run_at - now() AS backoff
FROM ntask_transition(:t3, tok(:t3, 1), 'retry_wait', 'transient', '{"http": 503}', error_stage => 'provider_call');
-- not due yet: nobody can claim it
SELECT count(*) FROM ntask_claim('tr', 'W2');
-- make it due, claim attempt 2, fail again: the delay doubles
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :t3;
SELECT attempt, token FROM ntask_claim('tr', 'W2');
SELECT result, state, run_at - now() AS backoff FROM ntask_transition(:t3, tok(:t3, 2), 'retry_wait');
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :t3;
SELECT attempt, token FROM ntask_claim('tr', 'W2');
SELECT result, state, run_at - now() AS backoff FROM ntask_transition(:t3, tok(:t3, 3), 'retry_wait');
-- capped by backoff_max (10s * 2^3 = 80s > 1 minute)
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :t3;
SELECT attempt, token FROM ntask_claim('tr', 'W2');
SELECT result, state, run_at - now() AS backoff FROM ntask_transition(:t3, tok(:t3, 4), 'retry_wait');
-- the fifth attempt succeeds
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :t3;
SELECT attempt, token FROM ntask_claim('tr', 'W2');
SELECT result, state FROM ntask_transition(:t3, tok(:t3, 5), 'succeeded');
SELECT token, result, requested, error_class, error_stage, detail FROM ntask.attempt_all WHERE task_id = :t3 ORDER BY token;
-- an explicit retry_at wins over the backoff
SELECT task_id AS t4 FROM ntask_enqueue('tr', 't4') \gset
SELECT token FROM ntask_claim('tr', 'W1');
SELECT result, state, run_at - now() AS wait
FROM ntask_transition(:t4, tok(:t4, 1), 'retry_wait', retry_at => now() + interval '42 seconds');
-- a retry_at in the past means "now"
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :t4;
SELECT token FROM ntask_claim('tr', 'W1');
SELECT result, state, run_at = now() AS due_now
FROM ntask_transition(:t4, tok(:t4, 2), 'retry_wait', retry_at => now() - interval '1 hour');
SELECT ntask_cancel(:t4, 'test', 'out of the way');

-- permanent error: straight to repair_required
SELECT task_id AS t5 FROM ntask_enqueue('tr', 't5') \gset
SELECT token FROM ntask_claim('tr', 'W1');
SELECT result, state, run_at IS NOT NULL AS has_run_at
FROM ntask_transition(:t5, tok(:t5, 1), 'repair_required', 'permanent', '{"http": 400}', error_stage => 'provider_call');
SELECT state, reason, last_error_class, last_error_stage, due_at FROM ntask.task WHERE task_id = :t5;

-- unknown outcome: retried under the same key, flagged for the next attempt
SELECT task_id AS t6 FROM ntask_enqueue('tr', 't6') \gset
SELECT token FROM ntask_claim('tr', 'W1');
SELECT ntask_invoked(:t6, tok(:t6, 1));
SELECT result, state FROM ntask_transition(:t6, tok(:t6, 1), 'retry_wait', 'unknown', error_stage => 'response_lost');
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :t6;
SELECT task_key, attempt, token, prior_outcome FROM ntask_claim('tr', 'W2');
SELECT token, result, error_class, outcome_known FROM ntask.attempt_all WHERE task_id = :t6 ORDER BY token;
-- the duplicate check compares the effective class too
SELECT result FROM ntask_transition(:t6, tok(:t6, 1), 'retry_wait', 'unknown');
SELECT result FROM ntask_transition(:t6, tok(:t6, 1), 'retry_wait', 'transient');
-- token 1 already made a different transition: conflict, even after the task moved on
SELECT result, state FROM ntask_transition(:t6, tok(:t6, 1), 'succeeded');

-- worker-decided cancel and skip, with a reason in detail
SELECT result, state FROM ntask_transition(:t6, tok(:t6, 2), 'skipped', detail => '{"reason": "device offline"}');
SELECT state, reason FROM ntask.task WHERE task_id = :t6;
SELECT task_id AS t7 FROM ntask_enqueue('tr', 't7') \gset
SELECT token FROM ntask_claim('tr', 'W1');
SELECT result, state FROM ntask_transition(:t7, tok(:t7, 1), 'canceled');
SELECT state, reason FROM ntask.task WHERE task_id = :t7;
-- a transition in the caller's transaction rolls back with it
SELECT task_id AS t8 FROM ntask_enqueue('tr', 't8') \gset
SELECT token FROM ntask_claim('tr', 'W1');
BEGIN;
SELECT result FROM ntask_transition(:t8, tok(:t8, 1), 'succeeded');
ROLLBACK;
SELECT state, token FROM ntask.task WHERE task_id = :t8;
SELECT result FROM ntask_transition(:t8, tok(:t8, 1), 'succeeded');
