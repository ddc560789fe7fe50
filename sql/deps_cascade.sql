-- deps_cascade: a parent's failure reaches every descendant whatever the
-- depth or the width of its workflow (issue 45.1), one queue's trouble
-- never stops another queue's housekeeping, and what a canceled or skipped
-- parent means for a child that waits (issue 46.3)
SELECT setval('ntask.task_task_id_seq', 100000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 100000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('dcc', on_parent_failed => 'cancel', max_attempts => 1);
SELECT queue FROM ntask_queue_set('dcw');

-- a chain of 5,000 tasks, each the child of the one before (policy cancel)
SELECT task_id AS root FROM ntask_enqueue('dcc', 'c0', '{}') \gset
DO $$
BEGIN
	FOR i IN 1..5000 LOOP
		PERFORM ntask_enqueue('dcc', 'c' || i, '{}', depends_on => ARRAY['c' || (i - 1)]);
	END LOOP;
END $$;
SELECT count(*) FILTER (WHERE state = 'waiting') AS waiting FROM ntask.task WHERE queue = 'dcc';
-- the root's holder reports a permanent failure: applied, and the whole
-- chain is canceled in the same transaction
SELECT token FROM ntask_claim('dcc', 'W1');
SELECT result, state FROM ntask_transition(:root, tok(:root, 1), 'repair_required', error_class => 'permanent');
SELECT state, reason, count(*) FROM ntask.task WHERE queue = 'dcc' GROUP BY 1, 2 ORDER BY 1, 2;
SELECT count(*) AS audited FROM ntask.audit
WHERE action = 'cancel' AND reason LIKE 'parent_failed%'
  AND task_id IN (SELECT task_id FROM ntask.task WHERE queue = 'dcc');
-- the last of the chain names the parent that canceled it
SELECT a.reason FROM ntask.audit a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'dcc' AND t.task_key = 'c5000';

-- a fan-out of 5,000 children of one parent, canceled by an operator
SELECT task_id AS fan FROM ntask_enqueue('dcc', 'f0', '{}') \gset
SELECT count(*) FROM ntask_enqueue_many('dcc',
	ARRAY(SELECT 'f-' || i FROM generate_series(1, 5000) i),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5000)),
	depends_on => ARRAY['f0']);
SELECT ntask_cancel(:fan, 'ops', 'campaign stopped');
SELECT state, count(*) FROM ntask.task WHERE queue = 'dcc' AND task_key LIKE 'f-%' GROUP BY 1;

-- the claim's budget check meets a deep chain: the root's lease ran out
-- with its budget spent; the next claim sends it to repair_required, the
-- chain follows, and the claim hands out the other task
SELECT task_id AS broot FROM ntask_enqueue('dcc', 'b0', '{}') \gset
DO $$
BEGIN
	FOR i IN 1..3000 LOOP
		PERFORM ntask_enqueue('dcc', 'b' || i, '{}', depends_on => ARRAY['b' || (i - 1)]);
	END LOOP;
END $$;
SELECT task_key FROM ntask_claim('dcc', 'W1');
UPDATE ntask.task SET lease_until = now() - interval '1 second',
	due_at = now() - interval '1 second' WHERE task_id = :broot;
SELECT created FROM ntask_enqueue('dcc', 'other', '{}');
SELECT task_key, token FROM ntask_claim('dcc', 'W2', max_tasks => 2);
SELECT state, reason, count(*) FROM ntask.task
WHERE queue = 'dcc' AND task_key ~ '^b[0-9]+$' GROUP BY 1, 2 ORDER BY 1, 2;

-- housekeeping meets the same: a chain under a lease that ran out, with
-- its budget spent, next to a healthy queue's expired lease
SELECT task_id AS hroot FROM ntask_enqueue('dcc', 'h0', '{}') \gset
DO $$
BEGIN
	FOR i IN 1..3000 LOOP
		PERFORM ntask_enqueue('dcc', 'h' || i, '{}', depends_on => ARRAY['h' || (i - 1)]);
	END LOOP;
END $$;
SELECT task_key FROM ntask_claim('dcc', 'W1');
SELECT created FROM ntask_enqueue('dcw', 'healthy', '{}');
SELECT task_key FROM ntask_claim('dcw', 'W1');
UPDATE ntask.task SET lease_until = now() - interval '1 second',
	due_at = now() - interval '1 second'
WHERE queue IN ('dcc', 'dcw') AND state = 'leased';
-- (counts over every queue: earlier files' short leases may expire too)
SELECT expired >= 1 AS expired, repaired >= 1 AS repaired FROM ntask_housekeeping();
SELECT queue, state, count(*) FROM ntask.task
WHERE (queue = 'dcc' AND task_key ~ '^h[0-9]+$') OR queue = 'dcw' GROUP BY 1, 2 ORDER BY 1, 2;

-- a queue whose tasks cannot be written (here a trigger that raises on
-- them, standing in for any failure of one task) does not stop the round
-- for the other queues: their expired leases are rescued, their deadlines
-- swept, their finished tasks pruned; the failure is a WARNING naming it
SELECT queue FROM ntask_queue_set('dcbad', retention => '1 second');
SELECT queue FROM ntask_queue_set('dcgood', retention => '1 second');
CREATE FUNCTION pg_temp.dc_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'dc_boom: task % cannot be written', OLD.task_id; END $$;
CREATE TRIGGER dc_boom BEFORE UPDATE OR DELETE ON ntask.task
	FOR EACH ROW WHEN (OLD.queue = 'dcbad') EXECUTE FUNCTION pg_temp.dc_boom();
-- (ids from a fixed start, so that the WARNINGs name the same tasks in any run)
SELECT setval('ntask.task_task_id_seq', 900000, false);
SELECT created FROM ntask_enqueue('dcbad', 'x1', '{}');
SELECT created FROM ntask_enqueue('dcbad', 'x2', '{}');
SELECT created FROM ntask_enqueue('dcbad', 'x3', '{}');
SELECT created FROM ntask_enqueue('dcgood', 'g1', '{}');
SELECT created FROM ntask_enqueue('dcgood', 'g2', '{}');
SELECT created FROM ntask_enqueue('dcgood', 'g3', '{}');
SELECT task_key FROM ntask_claim('dcgood', 'W1') ORDER BY 1;
SELECT task_key FROM ntask_claim('dcgood', 'W1') ORDER BY 1;
SELECT task_id AS g2 FROM ntask.task WHERE queue = 'dcgood' AND task_key = 'g2' \gset
SELECT result FROM ntask_transition(:g2, tok(:g2, 1), 'succeeded');
-- dcbad's task: leased and expired (written before the trigger fires on it:
-- a superuser's direct update, as an old lease would be)
ALTER TABLE ntask.task DISABLE TRIGGER dc_boom;
UPDATE ntask.task SET state = 'leased', token = 1, attempts = 1, lease_owner = 'W0',
	lease_until = now() - interval '1 second', due_at = now() - interval '1 second'
WHERE queue = 'dcbad' AND task_key = 'x1';
UPDATE ntask.task SET deadline = now() - interval '1 second' WHERE queue = 'dcbad' AND task_key = 'x2';
UPDATE ntask.task SET state = 'succeeded', due_at = NULL, finished_at = now() - interval '1 hour'
WHERE queue = 'dcbad' AND task_key = 'x3';
UPDATE ntask.task SET lease_until = now() - interval '1 second' WHERE queue = 'dcgood' AND state = 'leased';
UPDATE ntask.task SET deadline = now() - interval '1 second' WHERE queue = 'dcgood' AND state = 'ready';
UPDATE ntask.task SET finished_at = now() - interval '1 hour' WHERE queue = 'dcgood' AND state = 'succeeded';
ALTER TABLE ntask.task ENABLE TRIGGER dc_boom;
-- (counts over every queue: earlier files' short leases may expire too)
SELECT expired >= 1 AS expired, repaired >= 1 AS repaired, pruned >= 1 AS pruned
FROM ntask_housekeeping();
SELECT queue, task_key, state, reason FROM ntask.task WHERE queue IN ('dcbad', 'dcgood') ORDER BY 1, 2;
DROP TRIGGER dc_boom ON ntask.task;

-- a child that waits (policy wait) for a parent that is canceled or
-- skipped: that parent can never succeed (only repair_required can be
-- replayed), so the child goes to repair_required (reason parent_canceled
-- or parent_skipped) for a human: replay runs it without that parent's
-- result, cancel ends it; its own children follow as for any parent in
-- repair_required
SELECT queue FROM ntask_queue_set('dcw2');
SELECT task_id AS w0 FROM ntask_enqueue('dcw2', 'w0', '{}') \gset
SELECT task_id AS w1 FROM ntask_enqueue('dcw2', 'w1', '{}', depends_on => ARRAY['w0']) \gset
SELECT task_id AS w2 FROM ntask_enqueue('dcw2', 'w2', '{}', depends_on => ARRAY['w1']) \gset
SELECT task_id AS w3 FROM ntask_enqueue('dcw2', 'w3', '{}', depends_on => ARRAY['w1'],
	on_parent_failed => 'cancel') \gset
SELECT detail FROM ntask_explain(:w1) WHERE event = 'now';
SELECT ntask_cancel(:w0, 'ops', 'not needed');
SELECT task_key, state, reason FROM ntask.task WHERE task_id IN (:w0, :w1, :w2, :w3) ORDER BY 1;
SELECT action, from_state, to_state, reason FROM ntask.audit WHERE task_id = :w1 ORDER BY audit_id;
SELECT detail FROM ntask_explain(:w1) WHERE event = 'now';
SELECT owner IS NULL AS unowned, reason FROM ntask.repair_queue WHERE task_id = :w1;
-- the operator replays it: it runs, its parent's result is JSON null
SELECT ntask_replay(:w1, 'ops', 'run it without w0');
SELECT task_key, context FROM ntask_claim('dcw2', 'W1');
SELECT result, state FROM ntask_transition(:w1, tok(:w1, 1), 'succeeded');
SELECT task_key, state FROM ntask.task WHERE task_id = :w2;
-- a parent in repair_required keeps its waiting children; canceling it
-- later sends them to repair_required too
SELECT task_id AS r0 FROM ntask_enqueue('dcw2', 'r0', '{}') \gset
SELECT task_id AS r1 FROM ntask_enqueue('dcw2', 'r1', '{}', depends_on => ARRAY['r0']) \gset
SELECT task_key FROM ntask_claim('dcw2', 'W1', max_tasks => 5) ORDER BY 1;
SELECT result FROM ntask_transition(:r0, tok(:r0, 1), 'repair_required', error_class => 'permanent');
SELECT state FROM ntask.task WHERE task_id = :r1;
SELECT detail FROM ntask_explain(:r1) WHERE event = 'now';
SELECT ntask_cancel(:r0, 'ops', 'give up');
SELECT state, reason FROM ntask.task WHERE task_id = :r1;
-- a skipped parent (the guard's verdict) likewise
SELECT task_id AS s0 FROM ntask_enqueue('dcw2', 's0', '{"stale": true}') \gset
SELECT task_id AS s1 FROM ntask_enqueue('dcw2', 's1', '{}', depends_on => ARRAY['s0']) \gset
CREATE FUNCTION dc_guard(task_key text, payload jsonb) RETURNS text LANGUAGE sql
AS $$ SELECT CASE WHEN payload ? 'stale' THEN 'skip: superseded' ELSE 'proceed' END $$;
SELECT queue FROM ntask_queue_set('dcw2', guard => 'dc_guard(text,jsonb)');
SELECT count(*) FROM ntask_claim('dcw2', 'W1');
SELECT task_key, state, reason FROM ntask.task WHERE task_id IN (:s0, :s1) ORDER BY 1;
SELECT ntask_queue_clear_guard('dcw2');
DROP FUNCTION dc_guard(text, jsonb);

-- a parent that does not exist, named by a long element: the error says
-- which element, without echoing it (issue 45.7)
SELECT * FROM ntask_enqueue('dcw2', 'x', '{}', depends_on => ARRAY['w0', repeat('k', 1000000)]);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dcw2', 'x', '{}', depends_on => ARRAY[repeat('q', 100) || ':k']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dcw2', 'x', '{}', depends_on => ARRAY['dcw2:no-such-key']);
\echo :SQLSTATE
