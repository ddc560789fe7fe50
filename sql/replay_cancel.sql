-- replay and cancel: audited administrative actions
-- task ids start at 5000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 5000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 5000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('rc', max_attempts => 2);
SELECT task_id AS r1 FROM ntask_enqueue('rc', 'broken') \gset
SELECT token FROM ntask_claim('rc', 'W1');
SELECT result, state FROM ntask_transition(:r1, tok(:r1, 1), 'repair_required', 'permanent', error_stage => 'validate');
-- assign an owner and a next action
SELECT ntask_repair_assign(:r1, 'alice', 'fix the device token, then replay');
SELECT task_key, reason, attempts, owner, next_action FROM ntask.repair_queue WHERE task_id = :r1;
-- replay: ready again with a fresh budget; the ledger keeps counting
SELECT ntask_replay(:r1, 'alice', 'device token fixed');
SELECT state, attempts, max_attempts, reason, repair_owner, due_at IS NOT NULL AS due FROM ntask.task WHERE task_id = :r1;
SELECT attempt, token FROM ntask_claim('rc', 'W2');
SELECT result, state FROM ntask_transition(:r1, tok(:r1, 2), 'succeeded');
-- replay only applies to repair_required tasks
SELECT ntask_replay(:r1, 'alice', 'again');
\echo :SQLSTATE
SELECT ntask_repair_assign(:r1, 'alice', 'nothing');
\echo :SQLSTATE

-- cancel a ready task; cancel again is a duplicate
SELECT task_id AS c1 FROM ntask_enqueue('rc', 'to-cancel') \gset
SELECT ntask_cancel(:c1, 'bob', 'message withdrawn');
SELECT ntask_cancel(:c1, 'bob', 'message withdrawn');
SELECT state, reason, due_at FROM ntask.task WHERE task_id = :c1;
-- a canceled task is never handed out
SELECT count(*) FROM ntask_claim('rc', 'W1');
-- cancel a leased task: the worker's token becomes stale
SELECT task_id AS c2 FROM ntask_enqueue('rc', 'leased-cancel') \gset
SELECT token FROM ntask_claim('rc', 'W1');
SELECT ntask_invoked(:c2, tok(:c2, 1));
SELECT ntask_cancel(:c2, 'bob', 'recipient left the group');
SELECT result, state FROM ntask_transition(:c2, tok(:c2, 1), 'succeeded');
SELECT ntask_heartbeat(:c2, tok(:c2, 1)) IS NULL AS lease_lost;
SELECT ntask_invoked(:c2, tok(:c2, 1));
SELECT token, result, outcome_known FROM ntask.attempt WHERE task_id = :c2;
SELECT state, unknown_attempts, lease_owner FROM ntask.task WHERE task_id = :c2;
-- succeeded tasks cannot be canceled
SELECT ntask_cancel(:r1, 'bob', 'too late');
\echo :SQLSTATE
-- a repair_required task can be canceled
SELECT task_id AS c3 FROM ntask_enqueue('rc', 'repair-then-cancel') \gset
SELECT token FROM ntask_claim('rc', 'W1');
SELECT result FROM ntask_transition(:c3, tok(:c3, 1), 'repair_required');
SELECT ntask_cancel(:c3, 'carol', 'obsolete');
-- an action rolled back leaves no audit row
BEGIN;
SELECT task_id AS c4 FROM ntask_enqueue('rc', 'rollback-cancel') \gset
SELECT ntask_cancel(:c4, 'mallory', 'never happened');
ROLLBACK;
-- the audit trail: who, what, why, from and to
SELECT actor, action, t.task_key, a.reason, from_state, to_state, db_user = current_user AS by_me
FROM ntask.audit a LEFT JOIN ntask.task t USING (task_id)
WHERE a.queue = 'rc' AND action <> 'queue_set' ORDER BY audit_id;
