-- pause and resume a queue (issue 35.1) and the key and queue pauses of a
-- provider's rate limit (issue 35.5), the SQL side.  The worker's side (a
-- 429 with Retry-After pausing its key or queue) is TAP t/035_pause.pl;
-- pause against concurrent claims is isolation spec pause_vs_claim.
-- task ids start at 35000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 35000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 35000, false) AS first_token \gset
SELECT queue, paused_at, paused_by, pause_reason, paused_until, on_rate_limited, keys_paused_until
FROM ntask_queue_set('pq', lease => '1 minute');
SELECT e.task_id FROM generate_series(1, 3) i, ntask_enqueue('pq', 'p' || i, '{}') e ORDER BY 1;

-- hostile input: NULL 22004, empty 22023, too long 22001, unknown queue 42704
SELECT ntask_queue_pause(NULL, 'ops', 'incident');
\echo :SQLSTATE
SELECT ntask_queue_pause('pq', NULL, 'incident');
\echo :SQLSTATE
SELECT ntask_queue_pause('pq', 'ops', NULL);
\echo :SQLSTATE
SELECT ntask_queue_pause('pq', '', 'incident');
\echo :SQLSTATE
SELECT ntask_queue_pause('pq', 'ops', '');
\echo :SQLSTATE
SELECT ntask_queue_pause('pq', repeat('x', 201), 'incident');
\echo :SQLSTATE
SELECT ntask_queue_pause('no_such_queue', 'ops', 'incident');
\echo :SQLSTATE
SELECT ntask_queue_resume('no_such_queue', 'ops', 'incident');
\echo :SQLSTATE
SELECT ntask_queue_resume('pq', NULL, 'over');
\echo :SQLSTATE
SELECT ntask_queue_pause('bad name!', 'ops', 'incident');
\echo :SQLSTATE
-- nothing of that was paused or audited
SELECT paused_at IS NULL AS not_paused FROM ntask.queue WHERE queue = 'pq';
SELECT count(*) FROM ntask.audit WHERE action IN ('queue_pause', 'queue_resume');

-- resuming a queue that is not paused: false, nothing changes, no audit row
SELECT ntask_queue_resume('pq', 'ops', 'nothing to resume');
SELECT count(*) FROM ntask.audit WHERE action = 'queue_resume';

-- a lease taken before the pause runs on
SELECT task_id, token FROM ntask_claim('pq', 'w1', 1);

-- pause: true; a second pause: false, keeps the first one's actor and reason
SELECT ntask_queue_pause('pq', 'alice', 'provider outage');
SELECT ntask_queue_pause('pq', 'bob', 'me too');
SELECT paused_at IS NOT NULL AS paused, paused_by, pause_reason FROM ntask.queue WHERE queue = 'pq';
SELECT actor, action, queue, reason FROM ntask.audit
WHERE action IN ('queue_pause', 'queue_resume') ORDER BY audit_id;

-- while paused: no claim hands anything out
SELECT count(*) FROM ntask_claim('pq', 'w2', 10);
SELECT count(*) FROM ntask_claim('pq', 'w2', 10, invoked => true);
-- the lease out runs on: its transition applies, the claim after it finds nothing
SELECT finish_result, finish_state, task_id
FROM ntask_transition_and_claim(35000, tok(35000, 1), 'succeeded', 'pq', 'w1', 5);
-- enqueues go on
SELECT created, state FROM ntask_enqueue('pq', 'p4', '{}');
-- shown by queue_stats, queue_metrics and ntask_explain
SELECT queue, ready, leased, succeeded, paused, paused_by, pause_reason, paused_until, keys_paused,
	   paused_at IS NOT NULL AS has_since
FROM ntask.queue_stats WHERE queue = 'pq';
SELECT queue, paused, keys_paused FROM ntask.queue_metrics WHERE queue = 'pq';
SELECT regexp_replace(substring(detail from 'held back: [^;]*'),
	'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d', '<ts>', 'g') AS held
FROM ntask_explain(35001) WHERE event = 'now';
-- a fair queue's pick is held back too
SELECT queue FROM ntask_queue_set('pqf', fairness => 'partition');
SELECT count(*) FROM generate_series(1, 4) i, ntask_enqueue('pqf', 'f' || i, '{}', partition_key => 'k' || (i % 2));
SELECT ntask_queue_pause('pqf', 'alice', 'fair too');
SELECT count(*) FROM ntask_claim('pqf', 'w2', 10);
-- ordered as well
SELECT queue FROM ntask_queue_set('pqo', fairness => 'partition', ordered => true);
SELECT count(*) FROM generate_series(1, 2) i, ntask_enqueue('pqo', 'o' || i, '{}', partition_key => 'k');
SELECT ntask_queue_pause('pqo', 'alice', 'ordered too');
SELECT count(*) FROM ntask_claim('pqo', 'w2', 10);

-- resume: true, audited; claims hand out again
SELECT ntask_queue_resume('pq', 'alice', 'provider back');
SELECT ntask_queue_resume('pq', 'alice', 'again');
SELECT paused_at, paused_by, pause_reason, paused_until FROM ntask.queue WHERE queue = 'pq';
SELECT actor, action, queue, reason FROM ntask.audit
WHERE action IN ('queue_pause', 'queue_resume') ORDER BY audit_id;
SELECT count(*) FROM ntask_claim('pq', 'w2', 10);
SELECT ntask_queue_resume('pqf', 'alice', 'go');
SELECT count(*) FROM ntask_claim('pqf', 'w2', 10);
SELECT ntask_queue_resume('pqo', 'alice', 'go');
SELECT count(*) FROM ntask_claim('pqo', 'w2', 10);

-- on_rate_limited (issue 35.5): 'retry' by default; bad values 22023
SELECT on_rate_limited FROM ntask_queue_set('rl', lease => '1 minute');
SELECT * FROM ntask_queue_set('rl', on_rate_limited => 'pause');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('rl', on_rate_limited => '');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('rl', on_rate_limited => 'PAUSE_KEY');
\echo :SQLSTATE
SELECT on_rate_limited FROM ntask_queue_set('rl', on_rate_limited => 'pause_key');
-- NULL keeps it
SELECT on_rate_limited FROM ntask_queue_set('rl', max_attempts => 5);
SELECT on_rate_limited FROM ntask_queue_set('rl', on_rate_limited => 'pause_queue');
SELECT on_rate_limited FROM ntask_queue_set('rl', on_rate_limited => 'retry');
-- the table refuses what the function would
\set VERBOSITY terse
UPDATE ntask.queue SET on_rate_limited = 'sometimes' WHERE queue = 'rl';
\echo :SQLSTATE
\set VERBOSITY default

-- a key pause, as the worker writes it: the claim passes the key by
-- (plain queue), and hands out the other keys' tasks
SELECT count(*) FROM generate_series(1, 6) i, ntask_enqueue('rl', 'r' || i, '{}', partition_key => 'k' || (i % 2));
SELECT count(*) FROM ntask_enqueue('rl', 'r-nokey', '{}');
INSERT INTO ntask.key_pause (queue, partition_key, until, reason, set_by)
VALUES ('rl', 'k1', now() + interval '1 hour', 'HTTP 429, Retry-After 3600 s', 'ntask worker');
UPDATE ntask.queue SET keys_paused_until = now() + interval '1 hour' WHERE queue = 'rl';
SELECT t.task_key, t.partition_key FROM ntask_claim('rl', 'w3', 10) c
JOIN ntask.task t USING (task_id) ORDER BY 1;
SELECT count(*) FROM ntask_claim('rl', 'w3', 10);
SELECT queue, paused, keys_paused FROM ntask.queue_stats WHERE queue = 'rl';
SELECT queue, paused, keys_paused FROM ntask.queue_metrics WHERE queue = 'rl';
SELECT regexp_replace(substring(detail from 'held back: [^;]*'),
	'until \S+ \S+ \(in [^)]*\)', 'until <ts> (in <age>)') AS held
FROM ntask_explain((SELECT task_id FROM ntask.task WHERE queue = 'rl' AND task_key = 'r1')) WHERE event = 'now';
-- an expired key pause holds nothing
UPDATE ntask.key_pause SET until = now() - interval '1 second' WHERE queue = 'rl';
UPDATE ntask.queue SET keys_paused_until = now() - interval '1 second' WHERE queue = 'rl';
SELECT t.task_key FROM ntask_claim('rl', 'w3', 10) c JOIN ntask.task t USING (task_id) ORDER BY 1;
SELECT queue, keys_paused FROM ntask.queue_stats WHERE queue = 'rl';
-- housekeeping deletes ended key pauses and keeps live ones (its counts
-- depend on what earlier files left behind: only its row is shown)
SELECT count(*) FROM ntask.key_pause;
INSERT INTO ntask.key_pause (queue, partition_key, until, reason, set_by)
VALUES ('rl', 'k0', now() + interval '1 hour', 'HTTP 429', 'ntask worker');
SELECT count(*) AS rounds FROM ntask_housekeeping();
SELECT queue, partition_key FROM ntask.key_pause ORDER BY 1, 2;
DELETE FROM ntask.key_pause WHERE queue = 'rl' AND partition_key = 'k0';

-- a fair queue's key pause: the key walk passes it by
SELECT queue FROM ntask_queue_set('rlf', fairness => 'partition', on_rate_limited => 'pause_key');
SELECT count(*) FROM generate_series(1, 6) i, ntask_enqueue('rlf', 'f' || i, '{}', partition_key => 'k' || (i % 3));
INSERT INTO ntask.key_pause (queue, partition_key, until, reason, set_by)
VALUES ('rlf', 'k2', now() + interval '1 hour', 'HTTP 429', 'ntask worker');
UPDATE ntask.queue SET keys_paused_until = now() + interval '1 hour' WHERE queue = 'rlf';
SELECT t.task_key, t.partition_key FROM ntask_claim('rlf', 'w3', 10) c
JOIN ntask.task t USING (task_id) ORDER BY 1;
-- resume ends key pauses too
SELECT ntask_queue_resume('rlf', 'ops', 'provider reset its limits');
SELECT count(*) FROM ntask.key_pause WHERE queue = 'rlf';
SELECT keys_paused_until FROM ntask.queue WHERE queue = 'rlf';
SELECT t.task_key FROM ntask_claim('rlf', 'w3', 10) c JOIN ntask.task t USING (task_id) ORDER BY 1;

-- a queue pause with an end (on_rate_limited pause_queue): nothing until then
SELECT count(*) FROM generate_series(1, 2) i, ntask_enqueue('rl', 'q' || i, '{}');
UPDATE ntask.queue SET paused_until = now() + interval '1 hour' WHERE queue = 'rl';
SELECT count(*) FROM ntask_claim('rl', 'w3', 10);
SELECT queue, paused, paused_at, paused_until IS NOT NULL AS has_until FROM ntask.queue_stats WHERE queue = 'rl';
SELECT regexp_replace(substring(detail from 'held back: [^;]*'),
	'until \S+ \S+ \(in [^)]*\)', 'until <ts> (in <age>)') AS held
FROM ntask_explain((SELECT task_id FROM ntask.task WHERE task_key = 'q1')) WHERE event = 'now';
-- ended: claims go on (and queue_stats no longer shows it)
UPDATE ntask.queue SET paused_until = now() - interval '1 second' WHERE queue = 'rl';
SELECT queue, paused, paused_until FROM ntask.queue_stats WHERE queue = 'rl';
SELECT t.task_key FROM ntask_claim('rl', 'w3', 10) c JOIN ntask.task t USING (task_id) ORDER BY 1;

-- only admins may pause: a worker or a producer may not
SET ROLE ntask_worker;
SELECT ntask_queue_pause('pq', 'mallory', 'no');
\echo :SQLSTATE
RESET ROLE;
