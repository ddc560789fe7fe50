-- errors: every hostile input gets a clear error and a fitting SQLSTATE
-- task ids start at 7000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 7000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 7000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('e0');
-- queue_set
SELECT * FROM ntask_queue_set(NULL);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad name');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set(repeat('q', 64));
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', max_attempts => 0);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', max_attempts => -1);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', max_attempts => 1001);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', lease => '0 seconds');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', lease => '-5 seconds');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', total_deadline => '-1 day');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', total_deadline => '11 years');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', backoff_base => '0');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', backoff_max => '-1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', backoff_base => '10 minutes', backoff_max => '1 minute');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', target => '[1, 2]');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', retention => '0');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('e', guard => 'no_such_function(text, jsonb)');
\echo :SQLSTATE
-- nothing was created by the failed calls
SELECT count(*) FROM ntask.queue WHERE queue = 'e';
SELECT queue, max_attempts FROM ntask_queue_set('e', max_attempts => 2);
-- enqueue
SELECT * FROM ntask_enqueue(NULL, 'k');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', NULL);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', '');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', repeat('k', 513));
\echo :SQLSTATE
SELECT created FROM ntask_enqueue('e', repeat('k', 512));
SELECT * FROM ntask_enqueue('e', 'k', NULL);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', 'k', priority => NULL);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', 'k', partition_key => '');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', 'k', partition_key => repeat('p', 513));
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('nope', 'k');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', 'k', '{bad json');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', 'k', run_at => 'infinity');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', 'k', run_at => '-infinity');
\echo :SQLSTATE
-- claim
SELECT * FROM ntask_claim(NULL, 'W1');
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', NULL);
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', '');
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', repeat('w', 201));
\echo :SQLSTATE
SELECT * FROM ntask_claim('nope', 'W1');
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', 'W1', 0);
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', 'W1', -1);
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', 'W1', 1001);
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', 'W1', 2147483647);
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', 'W1', NULL);
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', 'W1', 1, '0 seconds');
\echo :SQLSTATE
SELECT * FROM ntask_claim('e', 'W1', 1, '-1 minute');
\echo :SQLSTATE
SELECT task_id AS k, token FROM ntask_claim('e', 'W1') \gset
-- heartbeat and invoked
SELECT ntask_heartbeat(NULL, 1);
\echo :SQLSTATE
SELECT ntask_heartbeat(:k, NULL);
\echo :SQLSTATE
SELECT ntask_heartbeat(:k, tok(:k, 1), '0 seconds');
\echo :SQLSTATE
SELECT ntask_heartbeat(-1, 1);
\echo :SQLSTATE
SELECT ntask_heartbeat(:k, tok(:k, 2));
\echo :SQLSTATE
SELECT ntask_heartbeat(:k, 0);
\echo :SQLSTATE
SELECT ntask_invoked(NULL, 1);
\echo :SQLSTATE
SELECT ntask_invoked(9223372036854775807, tok(9223372036854775807, 1));
\echo :SQLSTATE
SELECT ntask_invoked(:k, 99);
\echo :SQLSTATE
-- transition
SELECT * FROM ntask_transition(NULL, 1, 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, NULL, 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), NULL);
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), '');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'done');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'SUCCEEDED');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'ready');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'leased');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'retry_wait', 'flaky');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'retry_wait', 'permanent');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'succeeded', 'transient');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'canceled', 'unknown');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'retry_wait', outcome => 'provider_accepted');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'succeeded', retry_at => now());
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'retry_wait', retry_at => 'infinity');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'succeeded', outcome => '');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'succeeded', outcome => repeat('o', 201));
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 1), 'retry_wait', error_stage => repeat('s', 201));
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, tok(:k, 2), 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, 0, 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:k, -5, 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition(0, tok(0, 1), 'succeeded');
\echo :SQLSTATE
-- none of the failed calls changed the task
SELECT state, attempts, token, lease_owner FROM ntask.task WHERE task_id = :k;
SELECT result, state FROM ntask_transition(:k, tok(:k, 1), 'succeeded');
-- admin
SELECT ntask_cancel(NULL, 'a', 'r');
\echo :SQLSTATE
SELECT ntask_cancel(:k, NULL, 'r');
\echo :SQLSTATE
SELECT ntask_cancel(:k, 'a', NULL);
\echo :SQLSTATE
SELECT ntask_cancel(:k, '', 'r');
\echo :SQLSTATE
SELECT ntask_cancel(:k, 'a', '');
\echo :SQLSTATE
SELECT ntask_cancel(:k, 'a', repeat('r', 2001));
\echo :SQLSTATE
SELECT ntask_cancel(424242, 'a', 'r');
\echo :SQLSTATE
SELECT ntask_replay(424242, 'a', 'r');
\echo :SQLSTATE
SELECT ntask_replay(:k, 'a', 'r');
\echo :SQLSTATE
SELECT ntask_replay(:k, NULL, 'r');
\echo :SQLSTATE
SELECT ntask_repair_assign(:k, 'o', 'n');
\echo :SQLSTATE
SELECT ntask_repair_assign(:k, NULL, 'n');
\echo :SQLSTATE
SELECT ntask_repair_assign(424242, 'o', 'n');
\echo :SQLSTATE
-- wrong types never reach the C code
SELECT * FROM ntask_claim('e', 'W1', 'many');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('e', 'k', priority => 'high');
\echo :SQLSTATE
-- direct writes that would break the state machine are refused by constraints
\set VERBOSITY terse
UPDATE ntask.task SET state = 'leased' WHERE task_id = :k;
\echo :SQLSTATE
UPDATE ntask.task SET state = 'finished' WHERE task_id = :k;
\echo :SQLSTATE
-- (the task is finished by now: a due time or a lease owner would be a lie)
UPDATE ntask.task SET due_at = now() WHERE task_id = :k;
\echo :SQLSTATE
UPDATE ntask.task SET lease_owner = 'me' WHERE task_id = :k;
\echo :SQLSTATE
-- the invariant itself, case by case (state, due_at, lease_owner)
SELECT s, d IS NOT NULL AS due, o, ntask.task_row_valid(s, d, o) AS valid
FROM unnest(ARRAY['ready', 'leased', 'leased', 'retry_wait', 'succeeded', 'succeeded', 'skipped', 'bogus', NULL],
			ARRAY['2030-01-01', '2030-01-01', '2030-01-01', NULL, NULL, '2030-01-01', NULL, '2030-01-01', '2030-01-01']::timestamptz[],
			ARRAY[NULL, 'w', NULL, NULL, NULL, NULL, 'w', NULL, NULL]) AS u(s, d, o);
-- 1.1's form, the table's one CHECK: also on_parent_failed (NULL, wait or
-- cancel) and the attempt kept on the row (a succeeded, canceled or
-- skipped task only)
SELECT s, p, a, ntask.task_row_valid(s, NULL, NULL, p, a) AS valid
FROM unnest(ARRAY['succeeded', 'succeeded', 'succeeded', 'canceled', 'skipped', 'repair_required', 'succeeded', 'waiting'],
			ARRAY[NULL, 'wait', 'cancel', NULL, NULL, NULL, 'bogus', 'cancel'],
			ARRAY[NULL, NULL, 'w', 'w', 'w', 'w', NULL, 'w']) AS u(s, p, a);
SELECT pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = 'ntask.task'::regclass AND contype = 'c';
UPDATE ntask.task SET on_parent_failed = 'bogus' WHERE task_id = :k;
\echo :SQLSTATE
UPDATE ntask.task SET attempt_worker = 'me', state = 'repair_required' WHERE task_id = :k;
\echo :SQLSTATE
\set VERBOSITY default
-- a queue that still has tasks cannot be deleted or renamed
DELETE FROM ntask.queue WHERE queue = 'e';
\echo :SQLSTATE
UPDATE ntask.queue SET queue = 'e2' WHERE queue = 'e';
\echo :SQLSTATE
DELETE FROM ntask.queue WHERE queue = 'e0';
-- an error inside one of ntask's own statements is reported without the
-- statement's text (no "SQL statement ..." context line, no QUERY line):
-- here its re-analysis after a column it reads was renamed
SELECT task_id FROM ntask_claim('e', 'W1');
BEGIN;
ALTER TABLE ntask.queue RENAME COLUMN lease TO lease_renamed;
SELECT task_id FROM ntask_claim('e', 'W1');
ROLLBACK;
