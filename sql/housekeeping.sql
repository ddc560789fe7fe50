-- housekeeping: expired leases, deadlines and retention (ntask_housekeeping,
-- which the background worker runs every ntask.naptime)
-- a fresh extension, so the counts below are this file's alone
-- (quietly: what earlier tests left behind is not this file's business;
-- the drop's own warning is tested in TAP 002_schedule_pg_cron)
SET client_min_messages = error;
DROP EXTENSION ntask;
RESET client_min_messages;
CREATE EXTENSION ntask;
SELECT setval('ntask.task_task_id_seq', 13000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 13000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('hk', max_attempts => 2, backoff_base => '1 second');

-- a lease that expires before the attempt was invoked: the outcome is known
-- (nothing was sent); the task is due again at once
SELECT task_id AS a FROM ntask_enqueue('hk', 'a') \gset
SELECT token FROM ntask_claim('hk', 'W1', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT * FROM ntask_housekeeping();
SELECT state, attempts, last_error_class, last_error_stage, unknown_attempts,
	   due_at <= now() AS due_now, lease_owner
FROM ntask.task WHERE task_id = :a;
SELECT token, result, outcome_known FROM ntask.attempt WHERE task_id = :a ORDER BY token;
-- the old holder is stale now
SELECT result, state FROM ntask_transition(:a, tok(:a, 1), 'succeeded');
-- the second (last) attempt is invoked, then its lease expires: the budget is
-- spent, so repair_required, and the outcome is unknown
SELECT token FROM ntask_claim('hk', 'W2', lease => '1 millisecond');
SELECT ntask_invoked(:a, tok(:a, 2));
SELECT pg_sleep(0.01);
SELECT * FROM ntask_housekeeping();
SELECT state, reason, attempts, unknown_attempts, last_error_class, due_at
FROM ntask.task WHERE task_id = :a;
SELECT token, result, outcome_known FROM ntask.attempt WHERE task_id = :a ORDER BY token;
SELECT task_key, attempts, known_outcomes, unknown_outcomes FROM ntask.repair_queue;

-- with budget left, an invoked attempt that expired makes the next claim reconcile
SELECT task_id AS b FROM ntask_enqueue('hk', 'b') \gset
SELECT token FROM ntask_claim('hk', 'W1', lease => '1 millisecond');
SELECT ntask_invoked(:b, tok(:b, 1));
SELECT pg_sleep(0.01);
SELECT expired, repaired FROM ntask_housekeeping();
SELECT task_key, attempt, token, prior_outcome FROM ntask_claim('hk', 'W2');

-- a live lease is left alone
SELECT task_id AS c FROM ntask_enqueue('hk', 'c') \gset
SELECT token FROM ntask_claim('hk', 'W1', lease => '1 hour');
SELECT * FROM ntask_housekeeping();
SELECT state, lease_owner FROM ntask.task WHERE task_id = :c;

-- a task nobody claims still meets its deadline
SELECT queue FROM ntask_queue_set('late', total_deadline => '1 millisecond');
SELECT task_id AS d FROM ntask_enqueue('late', 'd') \gset
SELECT pg_sleep(0.01);
SELECT * FROM ntask_housekeeping(deadlines => false);
SELECT state FROM ntask.task WHERE task_id = :d;
SELECT * FROM ntask_housekeeping();
SELECT state, reason, due_at, finished_at IS NOT NULL AS finished FROM ntask.task WHERE task_id = :d;

-- retention: finished tasks older than their queue's retention are deleted
-- with their attempts and receipts; repair_required tasks and the audit stay
SELECT queue FROM ntask_queue_set('ret', retention => '1 millisecond');
SELECT task_id AS r1 FROM ntask_enqueue('ret', 'r1', '{"v": 1}') \gset
SELECT task_id AS r2 FROM ntask_enqueue('ret', 'r2') \gset
SELECT task_id AS r3 FROM ntask_enqueue('ret', 'r3') \gset
SELECT count(*) FROM ntask_claim('ret', 'W1', 3);
SELECT ntask_receipt(:r1, tok(:r1, 1), '{"done": true}');
SELECT result FROM ntask_transition(:r1, tok(:r1, 1), 'succeeded');
SELECT result FROM ntask_transition(:r2, tok(:r2, 1), 'repair_required');
SELECT ntask_cancel(:r3, 'ops', 'not needed');
SELECT pg_sleep(0.01);
SELECT * FROM ntask_housekeeping();
SELECT task_key, state FROM ntask.task WHERE queue = 'ret' ORDER BY task_key;
SELECT count(*) AS attempts_left FROM ntask.attempt WHERE task_id IN (:r1, :r3);
SELECT count(*) AS receipts_left FROM ntask.receipt WHERE task_id = :r1;
SELECT action, task_id = :r3 AS is_r3 FROM ntask.audit WHERE action = 'cancel';
-- the idempotency window is the retention: after pruning the key is new again
SELECT created, state FROM ntask_enqueue('ret', 'r1', '{"v": 1}');

-- max_rows bounds each step
SELECT queue FROM ntask_queue_set('many', retention => '1 millisecond');
SELECT count(*) FROM (SELECT ntask_enqueue('many', 'm' || i) FROM generate_series(1, 5) i) s;
SELECT count(*) FROM ntask_claim('many', 'W1', 5, lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT * FROM ntask_housekeeping(max_rows => 2);
SELECT * FROM ntask_housekeeping(max_rows => 2);
SELECT count(*) FILTER (WHERE state = 'retry_wait') AS released FROM ntask.task WHERE queue = 'many';

-- bad arguments
SELECT * FROM ntask_housekeeping(0);
\echo :SQLSTATE
SELECT * FROM ntask_housekeeping(100001);
\echo :SQLSTATE
SELECT * FROM ntask_housekeeping(NULL);
\echo :SQLSTATE
SELECT * FROM ntask_housekeeping(10, NULL);
\echo :SQLSTATE

-- the worker's view has one row whatever the worker is doing
SELECT count(*) AS rows FROM ntask.worker_stats;

-- history: audit rows, schedule slots and fence receipts older than their
-- retention are pruned; a fence's current watermark receipt and a slot
-- whose task is unfinished stay; 0 keeps everything
SELECT ntask_fence('hk:f1', 1, '{"v": 1}'), ntask_fence('hk:f1', 2, '{"v": 2}');
UPDATE ntask.fence_receipt SET applied_at = now() - interval '40 days' WHERE fence_key = 'hk:f1';
INSERT INTO ntask.audit (actor, action, reason, at)
VALUES ('hk', 'test_old', 'old', now() - interval '100 days'),
	   ('hk', 'test_new', 'new', now() - interval '1 day');
SELECT queue FROM ntask_queue_set('hkq');
SELECT task_id AS hk_open FROM ntask_enqueue('hkq', 'open-slot') \gset
INSERT INTO ntask.schedule_slot (schedule, slot, fired_at, task_id, outcome)
VALUES ('hk', now() - interval '40 days', now() - interval '40 days', :hk_open, 'enqueued'),
	   ('hk', now() - interval '39 days', now() - interval '39 days', NULL, 'missed'),
	   ('hk', now() - interval '1 day', now() - interval '1 day', NULL, 'missed');
SET ntask.audit_retention = 0;
SET ntask.history_retention = 0;
SELECT pruned FROM ntask_housekeeping();
SELECT count(*) AS old_audit_kept FROM ntask.audit WHERE action = 'test_old';
RESET ntask.audit_retention;
RESET ntask.history_retention;
SHOW ntask.audit_retention;
SHOW ntask.history_retention;
SELECT pruned FROM ntask_housekeeping();
SELECT action FROM ntask.audit WHERE action LIKE 'test_%' ORDER BY action;
SELECT token FROM ntask.fence_receipt WHERE fence_key = 'hk:f1' ORDER BY token;
SELECT outcome, task_id IS NOT NULL AS has_task FROM ntask.schedule_slot
WHERE schedule = 'hk' ORDER BY slot;
-- only a superuser may change them for a session
CREATE ROLE regress_hk_admin IN ROLE ntask_admin;
SET ROLE regress_hk_admin;
SET ntask.audit_retention = 0;
\echo :SQLSTATE
RESET ROLE;
DROP ROLE regress_hk_admin;
