-- the circuit breaker of http queues (issue 13): the SQL side.  The worker
-- side (opening, probing, closing, restarts) is TAP t/017_breaker.pl.
-- task ids start at 32000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 32000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 32000, false) AS first_token \gset
SELECT queue, breaker_failures, breaker_cooldown
FROM ntask_queue_set('brk', lease => '1 minute',
	target => '{"type": "http", "url": "http://push.example/v1/send"}');

-- hostile values: 22023, and the queue keeps its settings
SELECT * FROM ntask_queue_set('brk', breaker_failures => -1);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('brk', breaker_failures => 1001);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('brk', breaker_cooldown => '0');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('brk', breaker_cooldown => '-1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('brk', breaker_cooldown => '11 years');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('brk', breaker_failures => 'many');
\echo :SQLSTATE
SELECT breaker_failures, breaker_cooldown FROM ntask.queue WHERE queue = 'brk';

-- no breaker: not in breaker_stats
SELECT count(*) FROM ntask.breaker_stats;
-- on: listed closed, with no failures, before the worker has seen any
SELECT breaker_failures, breaker_cooldown
FROM ntask_queue_set('brk', breaker_failures => 3, breaker_cooldown => '10 seconds');
SELECT queue, state, failures, failure_threshold, cooldown, opened_at, open_until, held
FROM ntask.breaker_stats;
-- NULL keeps both
SELECT breaker_failures, breaker_cooldown FROM ntask_queue_set('brk');
-- an external queue with a breaker setting has no breaker (only the
-- worker's http dispatch has one)
SELECT breaker_failures FROM ntask_queue_set('ext', breaker_failures => 2,
	target => '{"type": "external"}');
SELECT queue FROM ntask.breaker_stats ORDER BY queue;

-- open (as the worker writes it): held counts the due tasks not leased
SELECT count(*) FROM (SELECT ntask_enqueue('brk', 'b' || i, '{}') FROM generate_series(1, 4) i) s;
SELECT created FROM ntask_enqueue('brk', 'later', '{}', run_at => now() + interval '1 hour');
SELECT count(*) FROM ntask_claim('brk', 'w', 1);
INSERT INTO ntask.breaker (queue, state, failures, opened_at, open_until)
VALUES ('brk', 'open', 3, now(), now() + interval '10 seconds');
SELECT state, failures, open_until - opened_at AS open_for, held FROM ntask.breaker_stats;
-- a state the worker never writes is refused by the table
\set VERBOSITY terse
UPDATE ntask.breaker SET state = 'ajar';
\echo :SQLSTATE
\set VERBOSITY default
-- ntask_claim by SQL ignores the breaker: external workers are not held back
SELECT count(*) FROM ntask_claim('brk', 'w', 2);
SELECT held FROM ntask.breaker_stats;

-- who may read and write it
CREATE ROLE regress_brk_mon LOGIN IN ROLE ntask_monitor;
CREATE ROLE regress_brk_admin LOGIN IN ROLE ntask_admin;
CREATE ROLE regress_brk_nobody LOGIN;
SET ROLE regress_brk_mon;
SELECT queue, state, held FROM ntask.breaker_stats;
SELECT breaker_opened, breaker_closed, breaker_probes, breaker_skips
FROM ntask.worker_stats WHERE false;
SELECT count(*) FROM ntask.breaker;
SET ROLE regress_brk_admin;
SELECT queue, state FROM ntask.breaker;
DELETE FROM ntask.breaker;
\echo :SQLSTATE
UPDATE ntask.breaker SET state = 'closed';
\echo :SQLSTATE
SET ROLE regress_brk_nobody;
SELECT count(*) FROM ntask.breaker_stats;
\echo :SQLSTATE
RESET ROLE;
DROP ROLE regress_brk_mon, regress_brk_admin, regress_brk_nobody;

-- a queue deleted with its tasks takes its breaker row along
DELETE FROM ntask.task WHERE queue = 'brk';
DELETE FROM ntask.queue WHERE queue IN ('brk', 'ext');
SELECT count(*) FROM ntask.breaker;
