-- saga: multi-step work with compensation (issue 14); task ids start at
-- 23000 here, saga ids at 1 (no other file starts a saga)
SELECT setval('ntask.task_task_id_seq', 23000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 23000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('stock', max_attempts => 2, backoff_base => '1 ms', backoff_max => '1 ms');
SELECT queue FROM ntask_queue_set('payment', max_attempts => 2, backoff_base => '1 ms', backoff_max => '1 ms');
SELECT queue FROM ntask_queue_set('shipping', max_attempts => 2, backoff_base => '1 ms', backoff_max => '1 ms');
-- a worker that does one attempt of the next task of a queue and reports
CREATE FUNCTION work(q text, to_state text, cls text DEFAULT NULL, invoked boolean DEFAULT false)
RETURNS TABLE (task_key text, result text, state text) LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
	SELECT * INTO c FROM ntask_claim(q, 'W');
	IF c.task_id IS NULL THEN RETURN; END IF;
	IF invoked THEN PERFORM ntask_invoked(c.task_id, c.token); END IF;
	RETURN QUERY SELECT c.task_key, r.result, r.state
	FROM ntask_transition(c.task_id, c.token, to_state, cls) r;
END $$;
CREATE VIEW steps AS
SELECT saga_key, saga_state, step_no, name, kind, task_state, attempts, unknown_attempts
FROM ntask.saga_status ORDER BY saga_key, step_no, kind DESC;
\set order '[{"name": "reserve", "queue": "stock", "payload": {"sku": "A1", "n": 2}, "compensate": {"queue": "stock", "payload": {"release": "A1", "n": 2}}}, {"name": "charge", "queue": "payment", "payload": {"eur": 30}, "compensate": {"queue": "payment", "payload": {"refund": 30}}}, {"name": "ship", "queue": "shipping", "payload": {"to": "u-1"}}]'

-- the happy path: each step is enqueued when the one before succeeds
SELECT created, state FROM ntask_saga_start('order-1', :'order');
SELECT task_key, state FROM ntask.task WHERE saga_id IS NOT NULL ORDER BY task_id;
SELECT * FROM work('stock', 'succeeded');
SELECT * FROM work('payment', 'succeeded');
SELECT * FROM work('shipping', 'succeeded');
SELECT * FROM steps WHERE saga_key = 'order-1';
SELECT state, current_step, finished_at IS NOT NULL AS finished FROM ntask.saga WHERE saga_key = 'order-1';

-- a duplicate start is the same saga; another definition under the key is NT001
SELECT created, state FROM ntask_saga_start('order-1', :'order');
SELECT * FROM ntask_saga_start('order-1', '[{"name": "reserve", "queue": "stock"}]');

-- step 2 fails permanently: step 1 is compensated, the saga is compensated
SELECT created, state FROM ntask_saga_start('order-2', :'order');
SELECT * FROM work('stock', 'succeeded');
SELECT * FROM work('payment', 'repair_required', 'permanent');
SELECT state, current_step, failed_step, reason FROM ntask.saga WHERE saga_key = 'order-2';
SELECT * FROM work('stock', 'succeeded');
SELECT * FROM steps WHERE saga_key = 'order-2';
SELECT state, reason FROM ntask.saga WHERE saga_key = 'order-2';
-- issue 30.3: nothing is left to do, so nothing is red: the failed step is
-- canceled (saga_compensated) in the transaction that compensated the saga
SELECT task_key, state, reason FROM ntask.task WHERE task_key LIKE 'order-2:%' ORDER BY task_id;
SELECT count(*) AS order_2_in_repair FROM ntask.repair_queue WHERE task_key LIKE 'order-2:%';
SELECT actor, action, reason, from_state, to_state FROM ntask.audit
WHERE task_id = (SELECT task_id FROM ntask.task WHERE task_key = 'order-2:charge');

-- step 2 times out after sending (unknown), then its budget is spent:
-- it may have charged, so its refund runs first, then step 1's release
SELECT created, state FROM ntask_saga_start('order-3', :'order');
SELECT * FROM work('stock', 'succeeded');
SELECT * FROM work('payment', 'retry_wait', 'unknown', true);
SELECT pg_sleep(0.01);
SELECT * FROM work('payment', 'retry_wait', 'transient', true);
SELECT state, current_step, failed_step FROM ntask.saga WHERE saga_key = 'order-3';
SELECT * FROM work('payment', 'succeeded');
SELECT * FROM work('stock', 'succeeded');
SELECT * FROM steps WHERE saga_key = 'order-3';
SELECT state FROM ntask.saga WHERE saga_key = 'order-3';

-- a compensation that fails: manual_review; resume replays it; compensated
SELECT created, state FROM ntask_saga_start('order-4', :'order');
SELECT * FROM work('stock', 'succeeded');
SELECT * FROM work('payment', 'repair_required', 'permanent');
SELECT * FROM work('stock', 'repair_required', 'permanent');
SELECT state, current_step, reason FROM ntask.saga WHERE saga_key = 'order-4';
SELECT task_key, reason FROM ntask.repair_queue WHERE task_key LIKE 'order-4:%';
-- the failed compensation is not replayed behind the saga's back
SELECT ntask_replay(t.task_id, 'alice', 'retry') FROM ntask.task t WHERE t.task_key = 'order-4:reserve:compensate';
-- nor is the failed forward step (its hint says what to do instead)
SELECT ntask_replay(t.task_id, 'alice', 'retry') FROM ntask.task t WHERE t.task_key = 'order-4:charge';
SELECT ntask_saga_resume(saga_id, 'alice', 'stock service fixed') FROM ntask.saga WHERE saga_key = 'order-4';
SELECT * FROM work('stock', 'succeeded');
SELECT state FROM ntask.saga WHERE saga_key = 'order-4';
SELECT task_key, state, reason FROM ntask.task WHERE task_key LIKE 'order-4:%' ORDER BY task_id;
SELECT ntask_saga_resume(saga_id, 'alice', 'again') FROM ntask.saga WHERE saga_key = 'order-4';

-- cancel: the running step's token goes stale, the done steps are compensated
SELECT created, state FROM ntask_saga_start('order-5', :'order');
SELECT * FROM work('stock', 'succeeded');
SELECT task_id AS o5_task, token AS o5_token FROM ntask_claim('payment', 'W-slow') \gset
SELECT ntask_saga_cancel(saga_id, 'bob', 'customer withdrew') FROM ntask.saga WHERE saga_key = 'order-5';
SELECT result, state FROM ntask_transition(:o5_task, :o5_token, 'succeeded');
SELECT * FROM work('stock', 'succeeded');
SELECT * FROM steps WHERE saga_key = 'order-5';
SELECT ntask_saga_cancel(saga_id, 'bob', 'again') FROM ntask.saga WHERE saga_key = 'order-5';
SELECT ntask_saga_cancel(saga_id, 'bob', 'too late') FROM ntask.saga WHERE saga_key = 'order-1';
SELECT ntask_saga_cancel(999999, 'bob', 'nothing');
-- a step without compensate is irreversible: nothing is run for it
SELECT created, state FROM ntask_saga_start('order-6', '[{"name": "mail", "queue": "shipping"}, {"name": "charge", "queue": "payment"}]');
SELECT * FROM work('shipping', 'succeeded');
SELECT * FROM work('payment', 'canceled');
SELECT state, reason FROM ntask.saga WHERE saga_key = 'order-6';
SELECT actor, action, reason FROM ntask.audit WHERE action LIKE 'saga%' ORDER BY at, action;

-- hostile definitions
SELECT * FROM ntask_saga_start('x', NULL);
SELECT * FROM ntask_saga_start(NULL, '[]');
SELECT * FROM ntask_saga_start('x', '{}');
SELECT * FROM ntask_saga_start('x', '[]');
SELECT * FROM ntask_saga_start('x', '"s"');
SELECT * FROM ntask_saga_start('x', '[1]');
SELECT * FROM ntask_saga_start('x', '[{"queue": "stock"}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a"}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a b", "queue": "stock"}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a", "queue": "stock"}, {"name": "a", "queue": "stock"}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a", "queue": "stock", "retries": 3}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a", "queue": "stock", "compensate": "undo"}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a", "queue": "stock", "compensate": {"payload": {}}}]');
SELECT * FROM ntask_saga_start('x', '[{"name": 7, "queue": "stock"}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a", "queue": "nowhere"}]');
SELECT * FROM ntask_saga_start('x', '[{"name": "a", "queue": "stock", "compensate": {"queue": "nowhere"}}]');
SELECT * FROM ntask_saga_start(repeat('k', 301), '[{"name": "a", "queue": "stock"}]');
SELECT * FROM ntask_saga_start('x', (SELECT jsonb_agg(jsonb_build_object('name', 's' || i, 'queue', 'stock')) FROM generate_series(1, 101) i));
SELECT count(*) AS no_saga_x FROM ntask.saga WHERE saga_key = 'x';
-- rights: a producer needs the right on every queue of the definition
CREATE ROLE regress_s_app IN ROLE ntask_producer;
CREATE ROLE regress_s_pay;
SELECT ntask_queue_set_roles('payment', 'regress_s_pay', NULL);
SET ROLE regress_s_app;
SELECT * FROM ntask_saga_start('order-7', :'order');
SELECT * FROM ntask_saga_cancel(1, 'me', 'no');
RESET ROLE;
SELECT count(*) AS no_order_7 FROM ntask.saga WHERE saga_key = 'order-7';
SELECT ntask_queue_set_roles('payment', NULL, NULL);
DROP ROLE regress_s_app, regress_s_pay;
-- issue 29.8: a saga key is scoped by the queues of its definition.  A
-- producer without the producer right on a stored definition's queues gets
-- the answer of a free key (it learns nothing, squats nothing); one with
-- the rights on all of them gets what it always got
CREATE ROLE regress_s_a IN ROLE ntask_producer;
CREATE ROLE regress_s_b IN ROLE ntask_producer;
SELECT queue FROM ntask_queue_set('saga_a');
SELECT queue FROM ntask_queue_set('saga_b');
SELECT ntask_queue_set_roles('saga_a', 'regress_s_a', NULL);
SELECT ntask_queue_set_roles('saga_b', 'regress_s_b', NULL);
SET ROLE regress_s_a;
SELECT created, state FROM ntask_saga_start('shared-key', '[{"name": "s1", "queue": "saga_a"}]');
SET ROLE regress_s_b;
SELECT created, state FROM ntask_saga_start('shared-key', '[{"name": "s1", "queue": "saga_b"}]');
SELECT created, state FROM ntask_saga_start('shared-key', '[{"name": "s1", "queue": "saga_b"}]');
SELECT created, state FROM ntask_saga_start('shared-key', '[{"name": "s1", "queue": "saga_b", "payload": {"v": 2}}]');
RESET ROLE;
SELECT created, state FROM ntask_saga_start('shared-key', '[{"name": "s1", "queue": "saga_a"}]');
SELECT created, state FROM ntask_saga_start('shared-key', '[{"name": "s1", "queue": "stock"}]');
SELECT saga_key, scope, started_by FROM ntask.saga WHERE saga_key = 'shared-key' ORDER BY saga_id;
SELECT queue, task_key FROM ntask.task WHERE task_key LIKE 'shared-key:%' ORDER BY task_id;
SELECT ntask_queue_set_roles('saga_a', NULL, NULL);
SELECT ntask_queue_set_roles('saga_b', NULL, NULL);
DROP ROLE regress_s_a, regress_s_b;
DROP VIEW steps;
DROP FUNCTION work(text, text, text, boolean);
