-- budget: max attempts including the first, and a total deadline
-- task ids start at 4000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 4000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 4000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('b', max_attempts => 3, backoff_base => '1 second', total_deadline => '1 day');
-- three attempts, each failing transiently: the third retry request is refused
SELECT task_id AS n9 FROM ntask_enqueue('b', 'notify:u-b:d-b1:m-9:v1') \gset
SELECT attempt, token FROM ntask_claim('b', 'W1');
SELECT result, state FROM ntask_transition(:n9, tok(:n9, 1), 'retry_wait');
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :n9;
SELECT attempt, token FROM ntask_claim('b', 'W2');
SELECT result, state FROM ntask_transition(:n9, tok(:n9, 2), 'retry_wait');
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :n9;
SELECT attempt, token FROM ntask_claim('b', 'W3');
SELECT result, state, run_at IS NOT NULL AS has_run_at FROM ntask_transition(:n9, tok(:n9, 3), 'retry_wait');
SELECT state, attempts, max_attempts, reason, due_at FROM ntask.task WHERE task_id = :n9;
-- the worker gets duplicate on a retried call; the ledger records what it asked for and what happened
SELECT result, state FROM ntask_transition(:n9, tok(:n9, 3), 'retry_wait');
SELECT token, requested, result FROM ntask.attempt WHERE task_id = :n9 ORDER BY token;

-- workers that crash after claiming still spend the budget
SELECT task_id AS c1 FROM ntask_enqueue('b', 'crashy') \gset
SELECT attempt, token FROM ntask_claim('b', 'W1', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT attempt, token FROM ntask_claim('b', 'W2', lease => '1 millisecond');
SELECT ntask_invoked(:c1, tok(:c1, 2));
SELECT pg_sleep(0.01);
SELECT attempt, token FROM ntask_claim('b', 'W3', lease => '1 millisecond');
SELECT pg_sleep(0.01);
-- the fourth claim hands nothing out: the task goes to repair instead
SELECT count(*) FROM ntask_claim('b', 'W4');
SELECT state, attempts, token, reason, unknown_attempts FROM ntask.task WHERE task_id = :c1;
SELECT token, worker, result, invoked_at IS NOT NULL AS invoked, outcome_known
FROM ntask.attempt WHERE task_id = :c1 ORDER BY token;

-- a spent task does not starve the queue: the claim moves on to the next one
SELECT task_id AS s1 FROM ntask_enqueue('b', 'spent-1') \gset
SELECT task_id AS s2 FROM ntask_enqueue('b', 'fresh-2') \gset
UPDATE ntask.task SET attempts = max_attempts WHERE task_id = :s1;
SELECT task_key, attempt FROM ntask_claim('b', 'W1');
SELECT state, reason FROM ntask.task WHERE task_id = :s1;

-- deadline: a retry that would start after the deadline goes to repair
SELECT queue FROM ntask_queue_set('d', max_attempts => 10, backoff_base => '2 hours',
                                  backoff_max => '3 hours', total_deadline => '1 hour');
SELECT task_id AS d1 FROM ntask_enqueue('d', 'slow') \gset
SELECT deadline - created_at AS window FROM ntask.task WHERE task_id = :d1;
SELECT token FROM ntask_claim('d', 'W1');
SELECT result, state FROM ntask_transition(:d1, tok(:d1, 1), 'retry_wait');
SELECT reason FROM ntask.task WHERE task_id = :d1;
-- an explicit retry_at past the deadline too
SELECT task_id AS d2 FROM ntask_enqueue('d', 'slow-2') \gset
SELECT token FROM ntask_claim('d', 'W1');
SELECT result, state FROM ntask_transition(:d2, tok(:d2, 1), 'retry_wait', retry_at => now() + interval '2 hours');
-- a retry inside the deadline is fine
SELECT task_id AS d3 FROM ntask_enqueue('d', 'slow-3') \gset
SELECT token FROM ntask_claim('d', 'W1');
SELECT result, state FROM ntask_transition(:d3, tok(:d3, 1), 'retry_wait', retry_at => now() + interval '10 minutes');
-- a due task whose deadline passed is not handed out
UPDATE ntask.task SET deadline = now() - interval '1 second', run_at = now(), due_at = now() WHERE task_id = :d3;
SELECT count(*) FROM ntask_claim('d', 'W2');
SELECT state, reason, attempts FROM ntask.task WHERE task_id = :d3;
-- a future run_at moves the deadline with it
SELECT task_id AS d4 FROM ntask_enqueue('d', 'tomorrow', run_at => now() + interval '1 day') \gset
SELECT deadline - run_at AS window FROM ntask.task WHERE task_id = :d4;
-- a policy change does not rewrite the budget of existing tasks
SELECT max_attempts FROM ntask_queue_set('d', max_attempts => 2);
SELECT max_attempts FROM ntask.task WHERE task_id = :d4;
-- the worker's detail cannot hide why ntask sent a task to repair
SELECT queue FROM ntask_queue_set('one', max_attempts => 1);
SELECT task_id AS o1 FROM ntask_enqueue('one', 'once') \gset
SELECT token FROM ntask_claim('one', 'W1');
SELECT result, state FROM ntask_transition(:o1, tok(:o1, 1), 'retry_wait', detail => '{"reason": "http 503"}');
SELECT t.reason, a.detail FROM ntask.task t JOIN ntask.attempt a USING (task_id) WHERE task_id = :o1;
SELECT reason FROM ntask.repair_queue WHERE task_id = :o1;
