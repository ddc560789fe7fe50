-- stats: ntask.queue_stats and ntask.repair_queue
-- task ids start at 8000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 8000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 8000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('st', max_attempts => 2);
SELECT count(*) FROM (SELECT ntask_enqueue('st', 'st-' || i) FROM generate_series(1, 6) i) s;
SELECT task_id AS s1 FROM ntask.task WHERE task_key = 'st-1' \gset
SELECT task_id AS s2 FROM ntask.task WHERE task_key = 'st-2' \gset
SELECT task_id AS s3 FROM ntask.task WHERE task_key = 'st-3' \gset
SELECT task_id AS s4 FROM ntask.task WHERE task_key = 'st-4' \gset
SELECT count(*) FROM ntask_claim('st', 'W1', max_tasks => 4);
SELECT result FROM ntask_transition(:s1, tok(:s1, 1), 'succeeded');
SELECT result FROM ntask_transition(:s2, tok(:s2, 1), 'retry_wait', retry_at => now() + interval '1 hour');
SELECT ntask_invoked(:s3, tok(:s3, 1));
SELECT result FROM ntask_transition(:s3, tok(:s3, 1), 'repair_required', 'unknown', error_stage => 'provider_call');
SELECT ntask_cancel(:s4, 'ops', 'not needed');
SELECT queue, ready, leased, retry_wait, succeeded, repair_required, canceled, skipped,
       oldest_ready_age IS NOT NULL AS has_ready_age, oldest_unfinished_age IS NOT NULL AS has_unfinished_age,
       unknown_attempts, repair_count
FROM ntask.queue_stats WHERE queue = 'st';
-- a queue with no tasks still shows, with zeros
SELECT queue FROM ntask_queue_set('empty');
SELECT ready, succeeded, oldest_ready_age, unknown_attempts FROM ntask.queue_stats WHERE queue = 'empty';
-- the repair queue is redacted: no payload column
SELECT task_key, reason, attempts, first_attempt_at IS NOT NULL AS has_first,
       last_attempt_at >= first_attempt_at AS ordered, last_error_class, last_error_stage,
       known_outcomes, unknown_outcomes, owner, next_action
FROM ntask.repair_queue WHERE queue = 'st';
SELECT count(*) AS payload_columns FROM information_schema.columns
WHERE table_schema = 'ntask' AND table_name = 'repair_queue' AND column_name LIKE '%payload%';
-- unknown_attempts counts the unknown outcomes of unfinished tasks only: a
-- task that succeeded after an unknown attempt is no longer a question
SELECT queue FROM ntask_queue_set('st2', backoff_base => '1 millisecond', backoff_max => '1 millisecond');
SELECT task_id AS u1 FROM ntask_enqueue('st2', 'u1') \gset
SELECT count(*) FROM ntask_claim('st2', 'W1');
SELECT ntask_invoked(:u1, tok(:u1, 1));
SELECT result FROM ntask_transition(:u1, tok(:u1, 1), 'retry_wait', 'unknown');
SELECT unknown_attempts FROM ntask.queue_stats WHERE queue = 'st2';
SELECT pg_sleep(0.01);
SELECT count(*) FROM ntask_claim('st2', 'W1');
SELECT result FROM ntask_transition(:u1, tok(:u1, 2), 'succeeded');
SELECT unknown_attempts AS after_success FROM ntask.queue_stats WHERE queue = 'st2';
SELECT unknown_attempts AS task_keeps_its_count FROM ntask.task WHERE task_id = :u1;
-- the worker's view is per database and names this one; test/ntask.conf
-- sets ntask.database = 'postgres', so no worker serves this database
-- and the view says why
SELECT database, state, last_error FROM ntask.worker_stats;
