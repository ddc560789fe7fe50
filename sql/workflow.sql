-- workflow: durable checkpoints (ntask_checkpoint) and waiting for a
-- signal (ntask_await, ntask_signal), issue 36.2 and 36.3; the claim's
-- context column carries both
-- task ids start at 36000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 36000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 36000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('wf', max_attempts => 2, lease => '1 minute');
SELECT task_id AS c1 FROM ntask_enqueue('wf', 'c1', '{"n": 1}') \gset

-- a plain task: context NULL
SELECT task_key, token, context FROM ntask_claim('wf', 'W1');

-- checkpoints: applied, then the same value again (canonical digest:
-- key order and number form do not matter), then another value
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'fetch', '{"rows": 10, "at": 1.0}');
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'fetch', '{"at": 1, "rows": 10.00}');
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'fetch', '{"rows": 11}');
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'aggregate', '[1, 2, 3]');
-- in the same transaction as the business write; rolled back with it
BEGIN;
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'half', '"x"');
ROLLBACK;
SELECT checkpoints FROM ntask.task WHERE task_id = :c1;
SELECT step, value, token FROM ntask.checkpoint WHERE task_id = :c1 ORDER BY step;

-- the lease runs out; a takeover resumes after the steps done
UPDATE ntask.task SET lease_until = now() - interval '1 second',
	due_at = now() - interval '1 second' WHERE task_id = :c1;
SELECT task_key, token, context FROM ntask_claim('wf', 'W2');
-- the old token: stale, writes nothing; its own step again: duplicate
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'send', '{}');
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'fetch', '{"rows": 10, "at": 1}');
SELECT ntask_checkpoint(:c1, tok(:c1, 1), 'aggregate', '[9]');
-- the new token: a step the old one wrote is compared, a new one applies
SELECT ntask_checkpoint(:c1, tok(:c1, 2), 'fetch', '{"rows": 10, "at": 1}');
SELECT ntask_checkpoint(:c1, tok(:c1, 2), 'fetch', '{"rows": 12}');
SELECT ntask_checkpoint(:c1, tok(:c1, 2), 'send', '{"id": "m-1"}');
SELECT step, token FROM ntask.checkpoint WHERE task_id = :c1 ORDER BY step;
-- after its transition the token holds nothing: stale
SELECT result FROM ntask_transition(:c1, tok(:c1, 2), 'succeeded');
SELECT ntask_checkpoint(:c1, tok(:c1, 2), 'late', '1');

-- hostile input
SELECT ntask_checkpoint(NULL, 2, 'x', '1');
SELECT ntask_checkpoint(:c1, NULL, 'x', '1');
SELECT ntask_checkpoint(:c1, tok(:c1, 2), NULL, '1');
SELECT ntask_checkpoint(:c1, tok(:c1, 2), '', '1');
SELECT ntask_checkpoint(:c1, tok(:c1, 2), repeat('s', 201), '1');
SELECT ntask_checkpoint(:c1, tok(:c1, 2), 'x', NULL);
SELECT ntask_checkpoint(:c1, tok(:c1, 2), 'x', to_jsonb(repeat('v', 2 * 1024 * 1024)));
SELECT ntask_checkpoint(:c1, tok(:c1, 3), 'x', '1');
SELECT ntask_checkpoint(:c1, 0, 'x', '1');
SELECT ntask_checkpoint(99999999, tok(99999999, 1), 'x', '1');
-- at most 1000 per task
SELECT task_id AS c2 FROM ntask_enqueue('wf', 'c2') \gset
SELECT token FROM ntask_claim('wf', 'W1');
SELECT count(*) FILTER (WHERE r = 'applied') AS applied
FROM generate_series(1, 1000) i, ntask_checkpoint(:c2, tok(:c2, 1), 's' || i, to_jsonb(i)) r;
SELECT ntask_checkpoint(:c2, tok(:c2, 1), 's1001', '1');
SELECT ntask_checkpoint(:c2, tok(:c2, 1), 's7', '7');
SELECT jsonb_typeof(context->'checkpoints') AS kind,
	   (SELECT count(*) FROM jsonb_object_keys(context->'checkpoints')) AS steps
FROM ntask_transition_and_claim(:c2, tok(:c2, 1), 'retry_wait', 'wf', 'W1', retry_at => now());
SELECT ntask_cancel(:c2, 'test', 'done with it');

-- await and signal -------------------------------------------------------
SELECT task_id AS a1 FROM ntask_enqueue('wf', 'a1', '{"order": 1}') \gset
SELECT token, context FROM ntask_claim('wf', 'W1');
SELECT ntask_await(:a1, tok(:a1, 1), 'paid:1', '1 hour');
SELECT state, attempts, max_attempts, signal_key, await_on_timeout,
	   due_at > now() + interval '59 minutes' AS due_at_timeout, lease_owner
FROM ntask.task WHERE task_id = :a1;
SELECT token, attempt, result, requested, outcome_known, detail
FROM ntask.attempt_all WHERE task_id = :a1;
-- await twice: the same key duplicate, another key conflict; a transition
-- or a receipt of that token: conflict, stale
SELECT ntask_await(:a1, tok(:a1, 1), 'paid:1', '1 hour');
SELECT ntask_await(:a1, tok(:a1, 1), 'paid:2');
SELECT result FROM ntask_transition(:a1, tok(:a1, 1), 'succeeded');
SELECT ntask_receipt(:a1, tok(:a1, 1), '{}');
SELECT ntask_checkpoint(:a1, tok(:a1, 1), 'x', '1');
-- an awaiting task is not claimed
SELECT count(*) AS claimed FROM ntask_claim('wf', 'W1');
-- the signal: applied, due now; again: duplicate (same payload), conflict
SELECT ntask_signal('wf', 'paid:1', '{"amount": 5, "cur": "EUR"}');
SELECT ntask_signal('wf', 'paid:1', '{"cur": "EUR", "amount": 5.0}');
SELECT ntask_signal('wf', 'paid:1', '{"amount": 6}');
SELECT state, await_on_timeout, due_at <= now() AS due FROM ntask.task WHERE task_id = :a1;
SELECT action, task_id = :a1 AS this_task, reason, from_state, to_state
FROM ntask.audit WHERE action = 'signal';
-- the next claim carries the payload; the budget was not spent
SELECT token, attempt, context FROM ntask_claim('wf', 'W2');
SELECT attempts, max_attempts FROM ntask.task WHERE task_id = :a1;
SELECT result FROM ntask_transition(:a1, tok(:a1, 2), 'succeeded');

-- a signal before its await is kept: the await makes the task due at once
SELECT ntask_signal('wf', 'shipped:7', '{"carrier": "x"}');
SELECT task_id AS a2 FROM ntask_enqueue('wf', 'a2') \gset
SELECT token FROM ntask_claim('wf', 'W1');
SELECT ntask_await(:a2, tok(:a2, 1), 'shipped:7');
SELECT state, due_at <= now() AS due FROM ntask.task WHERE task_id = :a2;
SELECT token, context FROM ntask_claim('wf', 'W1');
-- checkpoints and the signal together
SELECT ntask_checkpoint(:a2, tok(:a2, 2), 'label', '"L1"');
SELECT result FROM ntask_transition(:a2, tok(:a2, 2), 'retry_wait', retry_at => now());
SELECT token, context FROM ntask_claim('wf', 'W1');
SELECT result FROM ntask_transition(:a2, tok(:a2, 3), 'succeeded');

-- the timeout: 'ready' leases it with timed_out, 'repair' diverts it
SELECT task_id AS a3 FROM ntask_enqueue('wf', 'a3') \gset
SELECT task_id AS a4 FROM ntask_enqueue('wf', 'a4') \gset
SELECT count(*) FROM ntask_claim('wf', 'W1', 2);
SELECT ntask_await(:a3, tok(:a3, 1), 'never:3', '1 second');
SELECT ntask_await(:a4, tok(:a4, 1), 'never:4', '1 second', 'repair');
UPDATE ntask.task SET due_at = now() - interval '1 second' WHERE task_id IN (:a3, :a4);
SELECT task_key, token, context FROM ntask_claim('wf', 'W1', 5);
SELECT task_key, state, reason, attempts, max_attempts, await_on_timeout
FROM ntask.task WHERE task_id IN (:a3, :a4) ORDER BY task_id;
-- a signal after the timeout sent the task to repair is kept; it wakes
-- nothing, and says so: stale
SELECT ntask_signal('wf', 'never:4', '{}');
SELECT state FROM ntask.task WHERE task_id = :a4;
-- awaiting without a timeout: due_at NULL, canceled like any unfinished task
SELECT task_id AS a5 FROM ntask_enqueue('wf', 'a5') \gset
SELECT token FROM ntask_claim('wf', 'W1') WHERE task_id = :a5;
SELECT ntask_await(:a5, tok(:a5, 1), 'k5');
SELECT state, due_at FROM ntask.task WHERE task_id = :a5;
SELECT ntask_cancel(:a5, 'test', 'no longer needed');
-- the signal for the canceled task: stale (kept; nothing woke)
SELECT ntask_signal('wf', 'k5');
SELECT state FROM ntask.task WHERE task_id = :a5;

-- hostile input
SELECT task_id AS a6 FROM ntask_enqueue('wf', 'a6') \gset
SELECT token FROM ntask_claim('wf', 'W1') WHERE task_id = :a6;
SELECT ntask_await(:a6, tok(:a6, 1), NULL);
SELECT ntask_await(:a6, tok(:a6, 1), '');
SELECT ntask_await(:a6, tok(:a6, 1), repeat('k', 513));
SELECT ntask_await(:a6, tok(:a6, 1), 'k', '-1 second');
SELECT ntask_await(:a6, tok(:a6, 1), 'k', '0');
SELECT ntask_await(:a6, tok(:a6, 1), 'k', '20 years');
SELECT ntask_await(:a6, tok(:a6, 1), 'k', NULL, 'later');
SELECT ntask_await(:a6, tok(:a6, 1), 'k', NULL, NULL);
SELECT ntask_await(:a6, tok(:a6, 2), 'k');
SELECT ntask_await(:a6, 0, 'k');
SELECT ntask_await(99999999, tok(99999999, 1), 'k');
SELECT ntask_signal(NULL, 'k');
SELECT ntask_signal('wf', NULL);
SELECT ntask_signal('wf', '');
SELECT ntask_signal('wf', 'k', NULL);
SELECT ntask_signal('wf', 'k', to_jsonb(repeat('v', 2 * 1024 * 1024)));
SELECT state FROM ntask.task WHERE task_id = :a6;

-- rights: signal_role (audited); NULL: the producer right
CREATE ROLE wf_sender;
CREATE ROLE wf_other;
GRANT ntask_producer TO wf_sender, wf_other;
SELECT ntask_queue_set_signal_role('wf', 'wf_sender');
SELECT signal_role FROM ntask.queue WHERE queue = 'wf';
SELECT action, reason FROM ntask.audit WHERE action = 'queue_set_signal_role';
SELECT ntask_queue_set_signal_role('nosuchqueue', 'wf_sender');
SET ROLE wf_other;
-- the same error for a key that exists, one that does not, and a queue that does not
SELECT ntask_signal('wf', 'paid:1', '{"amount": 5, "cur": "EUR"}');
SELECT ntask_signal('wf', 'no-such-key');
SELECT ntask_signal('nosuchqueue', 'k');
RESET ROLE;
SET ROLE wf_sender;
SELECT ntask_signal('wf', 'paid:1', '{"amount": 5, "cur": "EUR"}');
SELECT ntask_signal('wf', 'sender:1');
RESET ROLE;
-- without a signal_role the queue's producer_role decides
SELECT ntask_queue_set_signal_role('wf', NULL);
SELECT ntask_queue_set_roles('wf', 'wf_sender', NULL);
SET ROLE wf_other;
SELECT ntask_signal('wf', 'no-such-key');
RESET ROLE;
SET ROLE wf_sender;
SELECT ntask_signal('wf', 'sender:2');
RESET ROLE;
SELECT ntask_queue_set_roles('wf', NULL, NULL);
SELECT queue, signal_key, sent_by FROM ntask.signal WHERE signal_key LIKE 'sender:%' ORDER BY 2;
DROP ROLE wf_sender;
DROP ROLE wf_other;

-- retention: a pruned task's checkpoints and the signals it awaited go with
-- it; a signal no task awaited goes after the queue's retention; the
-- unfinished task (a6) keeps its rows
SELECT ntask_checkpoint(:a6, tok(:a6, 1), 'kept', '1');
SELECT ntask_await(:a6, tok(:a6, 1), 'kept:6');
SELECT count(*) AS checkpoints, (SELECT count(*) FROM ntask.signal) AS signals FROM ntask.checkpoint;
SELECT queue FROM ntask_queue_set('wf', retention => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT pruned FROM ntask_housekeeping();
SELECT task_id = :a6 AS a6, step FROM ntask.checkpoint;
SELECT signal_key, task_id = :a6 AS a6 FROM ntask.signal;

-- ntask_explain tells the signal awaited and since when, the checkpoints
-- done, and has them in the record; queue_stats counts awaiting tasks
SELECT regexp_replace(detail, 'since .* \(.*\), no timeout', 'since ..., no timeout')
FROM ntask_explain(:a6) WHERE event = 'now';
SELECT event, token, detail FROM ntask_explain(:a6) WHERE event IN ('checkpoint', 'ended') ORDER BY at;
SELECT ntask_signal('wf', 'kept:6', '{"ok": 1}');
SELECT event, actor, detail FROM ntask_explain(:a6) WHERE event = 'signal';
SELECT awaiting, oldest_awaiting_age IS NULL AS none_awaiting FROM ntask.queue_stats WHERE queue = 'wf';
SELECT task_id AS a7 FROM ntask_enqueue('wf', 'a7') \gset
SELECT task_key, token, context FROM ntask_claim('wf', 'W1', 5) ORDER BY task_key;
SELECT ntask_await(:a7, tok(:a7, 1), 'k7', '1 hour', 'repair');
SELECT awaiting, oldest_awaiting_age >= '0' AS has_age FROM ntask.queue_stats WHERE queue = 'wf';
SELECT regexp_replace(detail, 'since .* \(.*\), times out at .* \(in .*\), then', 'since ..., times out at ..., then')
FROM ntask_explain(:a7) WHERE event = 'now';

-- an awaiting task past its deadline: the deadline does not run while it
-- awaits (issue 45.4), so housekeeping's sweep passes it by; its timeout
-- then sends it to repair_required (await_timeout: its await's deadline
-- was moved past the timeout); a replay makes it ready, and the claim
-- hands it out (its await's 'repair' no longer applies) with the
-- timed-out signal
UPDATE ntask.task SET deadline = now() - interval '1 second' WHERE task_id = :a7;
SELECT expired, repaired FROM ntask_housekeeping();
SELECT state, reason FROM ntask.task WHERE task_id = :a7;
UPDATE ntask.task SET due_at = now() - interval '1 second',
	deadline = now() + interval '1 hour' WHERE task_id = :a7;
SELECT count(*) FROM ntask_claim('wf', 'W1', 5) WHERE task_id = :a7;
SELECT state, reason FROM ntask.task WHERE task_id = :a7;
SELECT ntask_replay(:a7, 'test', 'try again');
SELECT task_key, token, context FROM ntask_claim('wf', 'W1', 5) WHERE task_id = :a7;
SELECT state, reason FROM ntask.task WHERE task_id = :a7;

-- an ordered queue: an awaiting head (no timeout) keeps its key blocked,
-- like any unfinished head; other keys go on
SELECT queue FROM ntask_queue_set('wfo', fairness => 'partition', ordered => true);
SELECT task_id AS o1 FROM ntask_enqueue('wfo', 'o1', partition_key => 'k') \gset
SELECT task_id AS o2 FROM ntask_enqueue('wfo', 'o2', partition_key => 'k') \gset
SELECT task_id AS o3 FROM ntask_enqueue('wfo', 'o3', partition_key => 'j') \gset
SELECT task_key, token FROM ntask_claim('wfo', 'W1', 5) ORDER BY 1;
SELECT ntask_await(:o1, tok(:o1, 1), 'o1:go');
SELECT task_key FROM ntask_claim('wfo', 'W1', 5) ORDER BY 1;
SELECT regexp_replace(detail, '^.*(; held back: [^;]*).*$', '\1') AS held
FROM ntask_explain(:o2) WHERE event = 'now';
SELECT ntask_signal('wfo', 'o1:go');
SELECT task_key, token, context FROM ntask_claim('wfo', 'W1', 5) ORDER BY 1;
