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

-- issue 51: ntask_repair_assign audits the actor it is given (the
-- console's operator), the database user when actor is NULL or left out
SELECT queue FROM ntask_queue_set('rc51', max_attempts => 1);
SELECT task_id AS a1 FROM ntask_enqueue('rc51', 'assign-me') \gset
SELECT token AS a1tok FROM ntask_claim('rc51', 'W1') \gset
SELECT result, state FROM ntask_transition(:a1, :a1tok, 'repair_required', 'permanent');
SELECT ntask_repair_assign(:a1, 'alice', 'ask the provider', actor => 'carol');
SELECT ntask_repair_assign(:a1, 'bob', 'replay tomorrow', NULL);
SELECT ntask_repair_assign(:a1, 'dave', 'replay now');
SELECT ntask_repair_assign(:a1, 'erin', 'x', actor => '');
\echo :SQLSTATE
SELECT ntask_repair_assign(:a1, 'erin', 'x', actor => repeat('a', 201));
\echo :SQLSTATE
SELECT owner, next_action FROM ntask.repair_queue WHERE task_id = :a1;
SELECT CASE WHEN actor = current_user::text THEN '(current_user)' ELSE actor END AS actor,
	   a.reason, db_user = current_user AS by_me
FROM ntask.audit a WHERE a.queue = 'rc51' AND action = 'repair_assign' ORDER BY audit_id;
-- ntask_explain names the actor, and the database user beside it
SELECT event, actor LIKE 'carol (%)' AS carol_and_me, detail FROM ntask_explain(:a1) WHERE event = 'repair_assign' AND actor LIKE 'carol%';
