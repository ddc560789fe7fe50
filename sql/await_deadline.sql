-- await_deadline: one rule for awaits and the deadline (issue 45.4).  A
-- task awaiting a signal is outside its deadline, with or without a
-- timeout: housekeeping's sweep passes it by; when it wakes (the signal,
-- or its timeout) it has at least the queue's total_deadline left.  A
-- signal that comes after the task that awaited it ended says so: stale.
SELECT setval('ntask.token_seq', 62000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('ad', total_deadline => '1 hour');
SELECT task_id AS a1 FROM ntask_enqueue('ad', 'with-timeout', '{}') \gset
SELECT task_id AS a2 FROM ntask_enqueue('ad', 'no-timeout', '{}') \gset
SELECT task_id AS a3 FROM ntask_enqueue('ad', 'canceled', '{}') \gset
SELECT count(*) FROM ntask_claim('ad', 'W1', 3);
-- a timeout of a day under a one-hour total_deadline: the deadline moves
-- to the timeout's end plus total_deadline
SELECT ntask_await(:a1, tok(:a1, 1), 'sig-1', timeout => '1 day');
SELECT deadline >= due_at + interval '1 hour' AS deadline_after_timeout
FROM ntask.task WHERE task_id = :a1;
SELECT ntask_await(:a2, tok(:a2, 1), 'sig-2');
SELECT ntask_await(:a3, tok(:a3, 1), 'sig-3');
-- the deadlines pass (as if the await had lasted; the one with a timeout
-- gets there only after its timeout): nothing is swept
UPDATE ntask.task SET deadline = now() - interval '1 second' WHERE task_id IN (:a2, :a3);
UPDATE ntask.task SET deadline = now() - interval '1 second',
	due_at = now() + interval '1 hour', run_at = now() + interval '1 hour' WHERE task_id = :a1;
DO $$ BEGIN PERFORM ntask_housekeeping(); END $$;
SELECT task_key, state FROM ntask.task WHERE queue = 'ad' ORDER BY task_id;
-- the signal wakes the task with a fresh total_deadline: it is claimed,
-- not sent to repair
SELECT ntask_signal('ad', 'sig-2', '{"paid": true}');
SELECT state, deadline > now() + interval '59 minutes' AS fresh_deadline
FROM ntask.task WHERE task_id = :a2;
SELECT task_key, context FROM ntask_claim('ad', 'W2');
-- the timeout wakes the other: claimed with signal.timed_out (its due
-- time moved into the past, its deadline at its await's timeout plus
-- total_deadline)
UPDATE ntask.task SET due_at = now() - interval '1 second', run_at = now() - interval '1 second',
	deadline = now() + interval '1 hour' WHERE task_id = :a1;
SELECT task_key, context FROM ntask_claim('ad', 'W2');
-- a signal for a task that awaited it and was canceled meanwhile: stale
SELECT ntask_cancel(:a3, 'ops', 'order withdrawn');
SELECT ntask_signal('ad', 'sig-3', '{"paid": true}');
SELECT ntask_signal('ad', 'sig-3', '{"paid": true}');
-- a signal nobody has awaited yet is kept for a later await: applied
SELECT ntask_signal('ad', 'sig-later', '{}');
