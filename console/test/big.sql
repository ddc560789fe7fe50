-- console/test/big.sql: a big queue for the console's speed check
-- (t/045_console.pl with NTASK_CONSOLE_BIG=1): queue "big" with 1M
-- succeeded tasks (finished over the last 10 days, one ended attempt each
-- in the ledger) and 100k ready ones, written straight into the tables by
-- a superuser (going through ntask_claim/ntask_transition a million times
-- would take the test's whole budget; the rows are what those calls leave).
SELECT count(*) FROM ntask_queue_set('big');
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version, state,
		run_at, due_at, attempts, max_attempts, deadline, token, outcome, created_at, updated_at, finished_at)
SELECT 'big', 'done:' || i, '{}', '\x00', 1, 'succeeded',
	now() - (i * interval '864 ms'), NULL, 1, 3, now() + interval '1 day', 1, 'completed',
	now() - (i * interval '864 ms'), now() - (i * interval '864 ms'), now() - (i * interval '864 ms')
FROM generate_series(1, 1000000) i;
INSERT INTO ntask.attempt (task_id, token, attempt, worker, claimed_at, ended_at, result, requested, outcome_known, outcome)
SELECT task_id, 1, 1, 'w', finished_at, finished_at, 'succeeded', 'succeeded', true, 'completed'
FROM ntask.task WHERE queue = 'big';
INSERT INTO ntask.task (queue, task_key, payload, payload_digest, digest_version, state,
		run_at, due_at, max_attempts, deadline, created_at, updated_at)
SELECT 'big', 'todo:' || i, '{}', '\x00', 1, 'ready',
	now() - (i * interval '1 s'), now() - (i * interval '1 s'), 3, now() + interval '1 day',
	now() - (i * interval '1 s'), now() - (i * interval '1 s')
FROM generate_series(1, 100000) i;
VACUUM ANALYZE ntask.task;
VACUUM ANALYZE ntask.attempt;
