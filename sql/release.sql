-- release: a worker hands a leased task back (ntask_release), at once or
-- after a delay; a never-invoked attempt does not spend the budget
-- task ids start at 17000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 17000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 17000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('rel', max_attempts => 2, lease => '1 minute');
SELECT task_id AS r1 FROM ntask_enqueue('rel', 'r1', '{"n": 1}') \gset
SELECT task_id AS r2 FROM ntask_enqueue('rel', 'r2', '{"n": 2}') \gset

-- never invoked: released, not counted (max_attempts grows by one), ready at once
SELECT task_key, attempt, token FROM ntask_claim('rel', 'W1') WHERE task_id = :r1;
SELECT ntask_release(:r1, tok(:r1, 1));
SELECT state, attempts, max_attempts, token, unknown_attempts, run_at <= now() + interval '1 second' AS due_now
FROM ntask.task WHERE task_id = :r1;
SELECT token, attempt, result, requested, outcome_known, ended_at IS NOT NULL AS closed
FROM ntask.attempt_all WHERE task_id = :r1;
-- the same call again: duplicate; a transition of that token: conflict
SELECT ntask_release(:r1, tok(:r1, 1));
SELECT result, state FROM ntask_transition(:r1, tok(:r1, 1), 'succeeded');
-- a receipt of the released token is stale: it no longer holds the task
SELECT ntask_receipt(:r1, tok(:r1, 1), '{"done": true}');
-- the next claim gets token 2 and attempt 2, with the full budget left
SELECT task_key, attempt, token, prior_outcome FROM ntask_claim('rel', 'W2', 5) ORDER BY task_key;

-- invoked: counted, its outcome unknown; with a delay it is not due yet
SELECT ntask_invoked(:r2, tok(:r2, 1));
SELECT ntask_release(:r2, tok(:r2, 1), '1 hour');
SELECT state, attempts, max_attempts, unknown_attempts, last_error_class, last_error_stage,
	   run_at > now() + interval '59 minutes' AS delayed
FROM ntask.task WHERE task_id = :r2;
SELECT result, outcome_known, retry_at > now() + interval '59 minutes' AS retry_at_is_run_at
FROM ntask.attempt_all WHERE task_id = :r2 AND token = tok(:r2, 1);
SELECT count(*) AS claimable_now FROM ntask_claim('rel', 'W3') WHERE task_id = :r2;
-- a release after a transition of the same token: conflict; the old token
-- that released it: still a duplicate
SELECT result FROM ntask_transition(:r1, tok(:r1, 2), 'succeeded');
SELECT ntask_release(:r1, tok(:r1, 2));
SELECT ntask_release(:r1, tok(:r1, 1));

-- hostile input
SELECT ntask_release(:r2, 99);
\echo :SQLSTATE
SELECT ntask_release(0, tok(0, 1));
\echo :SQLSTATE
SELECT ntask_release(NULL, 1);
\echo :SQLSTATE
SELECT ntask_release(:r2, NULL);
\echo :SQLSTATE
SELECT ntask_release(:r2, tok(:r2, 1), '-1 second');
\echo :SQLSTATE
SELECT ntask_release(:r2, tok(:r2, 1), '11 years');
\echo :SQLSTATE
-- only workers may release, and only with the queue's worker_role
CREATE ROLE regress_rel_nobody;
CREATE ROLE regress_rel_other IN ROLE ntask_worker;
CREATE ROLE regress_rel_owner IN ROLE ntask_worker;
SELECT ntask_queue_set_roles('rel', NULL, 'regress_rel_owner');
SELECT task_id AS r3 FROM ntask_enqueue('rel', 'r3') \gset
SET ROLE regress_rel_owner;
SELECT token FROM ntask_claim('rel', 'W4');
RESET ROLE;
SET ROLE regress_rel_nobody;
SELECT ntask_release(:r3, tok(:r3, 1));
\echo :SQLSTATE
RESET ROLE;
SET ROLE regress_rel_other;
SELECT ntask_release(:r3, tok(:r3, 1));
\echo :SQLSTATE
RESET ROLE;
SET ROLE regress_rel_owner;
SELECT ntask_release(:r3, tok(:r3, 1));
RESET ROLE;
SELECT ntask_queue_set_roles('rel', NULL, NULL);
DROP ROLE regress_rel_nobody, regress_rel_other, regress_rel_owner;

-- leases count from the claim statement, not from the transaction's start,
-- and a claim in an old transaction says so
SELECT task_id AS r4 FROM ntask_enqueue('rel', 'r4') \gset
\set VERBOSITY terse
BEGIN;
SELECT pg_sleep(0.6);
SELECT lease_until > statement_timestamp() + interval '0.9 seconds' AS lease_from_statement
FROM ntask_claim('rel', 'W5', lease => '1 second');
SELECT claimed_at > now() + interval '0.5 seconds' AS claimed_at_is_clock
FROM ntask.attempt_all WHERE worker = 'W5';
COMMIT;
\set VERBOSITY default
-- a stale token (the task was taken over) gets stale
SELECT queue FROM ntask_queue_set('rel2');
SELECT task_id AS r5 FROM ntask_enqueue('rel2', 'r5') \gset
SELECT token FROM ntask_claim('rel2', 'W6', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT token FROM ntask_claim('rel2', 'W7');
SELECT ntask_release(:r5, tok(:r5, 1));
SELECT ntask_release(:r5, tok(:r5, 2));
SELECT queue FROM ntask_queue_set('rel3');
-- a lease that ran out but that nobody took over is still its holder's:
-- the heartbeat renews it, the receipt and the transition apply
-- (docs/reference.md ntask_heartbeat)
SELECT task_id AS r7 FROM ntask_enqueue('rel3', 'r7') \gset
SELECT token FROM ntask_claim('rel3', 'W9', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT lease_until < now() AS expired FROM ntask.task WHERE task_id = :r7;
SELECT ntask_heartbeat(:r7, tok(:r7, 1), '1 minute') > now() AS renewed;
SELECT state, lease_owner FROM ntask.task WHERE task_id = :r7;
SELECT ntask_receipt(:r7, tok(:r7, 1), '{"n": 7}');
SELECT result, state FROM ntask_transition(:r7, tok(:r7, 1), 'succeeded');
-- regress receipt reads every row of ntask.receipt
DELETE FROM ntask.receipt WHERE task_id = :r7;
