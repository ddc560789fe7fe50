-- demo/n9.sql: the N9 story end to end, narrated.  Run by scripts/demo.sh
-- against a throwaway cluster (the demo sleeps past two 1-second leases).
--
-- Message m-9 v1 was written; the application must push a notification to
-- user u-b on device d-b1.  That intent is task N9, key
-- notify:u-b:d-b1:m-9:v1, in queue push with a budget of three total
-- attempts.  W1 stalls past its lease, W2 takes over with a newer token,
-- W1's late report is fenced off, W3 finishes.  Two other tasks show the
-- repair path: a permanent failure (assigned, then an audited replay) and a
-- spent budget.

\set ON_ERROR_STOP 1
\set VERBOSITY default
\set SHOW_CONTEXT never
\pset footer off
\pset null '-'

CREATE EXTENSION IF NOT EXISTS ntask;

\echo
\echo '=== 1. The queue: push, three total attempts, 1-second leases'
SELECT queue, max_attempts, lease, total_deadline, backoff_base, backoff_max
FROM ntask_queue_set('push', max_attempts => 3, lease => '1 second',
					 total_deadline => '1 hour', backoff_base => '1 second',
					 backoff_max => '1 minute');

\echo
\echo '=== 2. The producer enqueues N9 in the same transaction as its message write'
BEGIN;
-- (the business write of message m-9 v1 would go here)
SELECT task_id, created, state
FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v1',
				   '{"user": "u-b", "device": "d-b1", "message": "m-9", "version": 1}');
COMMIT;
SELECT task_id AS n9 FROM ntask.task
WHERE queue = 'push' AND task_key = 'notify:u-b:d-b1:m-9:v1' \gset

\echo
\echo '--- the outbox event is delivered twice: the duplicate enqueue is absorbed (created = f)'
\echo '    (same payload, keys in another order: the digest is canonical)'
SELECT task_id, created, state
FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v1',
				   '{"version": 1, "message": "m-9", "device": "d-b1", "user": "u-b"}');

\echo
\echo '--- a different payload under the same key is an error, never a silent overwrite:'
\set ON_ERROR_STOP 0
SELECT task_id, created, state
FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v1',
				   '{"user": "u-b", "device": "d-b1", "message": "m-9", "version": 2}');
\echo 'SQLSTATE:' :SQLSTATE
\set ON_ERROR_STOP 1

\echo
\echo '=== 3. W1 claims N9: attempt 1, token 1, a 1-second lease'
SELECT task_id, task_key, attempt, token, prior_outcome,
	   lease_until - now() AS lease
FROM ntask_claim('push', 'W1');
SELECT token AS w1_token FROM ntask.attempt_all
WHERE task_id = :n9 AND worker = 'W1' \gset

\echo
\echo '--- W1 records that it is about to call the push provider, then calls it'
SELECT ntask_invoked(:n9, :w1_token) AS w1_invoked;

\echo
\echo '--- ... the response is lost; W1 stalls past its lease (sleeping 1.2 s)'
SELECT FROM pg_sleep(1.2) \g /dev/null

\echo
\echo '=== 4. W2 claims: the lease expired, N9 is taken over with token 2, attempt 2.'
\echo '    prior_outcome = unknown: W1 may have reached the provider, so W2 reconciles first'
SELECT task_id, task_key, attempt, token, prior_outcome,
	   lease_until - now() AS lease
FROM ntask_claim('push', 'W2', lease => '30 seconds');
SELECT token AS w2_token FROM ntask.attempt_all
WHERE task_id = :n9 AND worker = 'W2' \gset

\echo
\echo '--- W1 wakes up and reports success with its old token 1: stale, nothing is written'
SELECT result, state
FROM ntask_transition(:n9, :w1_token, 'succeeded', outcome => 'provider_accepted');
\echo '--- W1''s heartbeat returns NULL (the lease is no longer its), and it may not call out again'
SELECT ntask_heartbeat(:n9, :w1_token) AS w1_heartbeat,
	   ntask_invoked(:n9, :w1_token) AS w1_invoked_again;

\echo
\echo '--- W2 calls the provider (same Idempotency-Key, the task key): 503, a transient failure.'
\echo '    It asks for a retry right away (retry_at => now()).'
SELECT ntask_invoked(:n9, :w2_token) AS w2_invoked;
SELECT result, state, run_at <= now() AS due_now
FROM ntask_transition(:n9, :w2_token, 'retry_wait', 'transient',
					  detail => '{"http_status": 503}', retry_at => now(),
					  error_stage => 'provider_call');

\echo
\echo '=== 5. W3 claims attempt 3 (the last one the budget allows) and succeeds'
SELECT task_id, task_key, attempt, token, prior_outcome,
	   lease_until - now() AS lease
FROM ntask_claim('push', 'W3', lease => '30 seconds');
SELECT token AS w3_token FROM ntask.attempt_all
WHERE task_id = :n9 AND worker = 'W3' \gset
SELECT ntask_invoked(:n9, :w3_token) AS w3_invoked;
SELECT result, state
FROM ntask_transition(:n9, :w3_token, 'succeeded', outcome => 'provider_accepted');
\echo '--- W3''s report is retried after a lost response: recognised as a duplicate'
SELECT result, state
FROM ntask_transition(:n9, :w3_token, 'succeeded', outcome => 'provider_accepted');
\echo '--- "succeeded" says what is known: the provider accepted it, not that the device showed it'
SELECT task_key, state, attempts, token, outcome FROM ntask.task WHERE task_id = :n9;

\echo
\echo '=== 6. A second task fails permanently: device d-c1 is unregistered (410)'
SELECT task_id AS t2 FROM ntask_enqueue('push', 'notify:u-c:d-c1:m-9:v1',
	'{"user": "u-c", "device": "d-c1", "message": "m-9", "version": 1}') \gset
SELECT task_id, task_key, attempt, token
FROM ntask_claim('push', 'W1', lease => '30 seconds');
SELECT ntask_invoked(:t2, 1) AS invoked;
SELECT result, state
FROM ntask_transition(:t2, 1, 'repair_required', 'permanent',
					  detail => '{"http_status": 410, "provider_error": "Unregistered"}',
					  error_stage => 'provider_call');
\echo '--- it waits in the repair queue (no payload there, only a redacted summary)'
SELECT task_id, task_key, reason, attempts, last_error_class AS error_class,
	   last_error_stage AS stage, known_outcomes AS known,
	   unknown_outcomes AS unknown, owner, next_action
FROM ntask.repair_queue WHERE task_id = :t2;
\echo '--- an operator takes it (audited) ...'
SELECT ntask_repair_assign(:t2, 'oncall-push', 'wait for d-c1 to re-register, then replay') \g /dev/null
SELECT task_id, task_key, owner, next_action FROM ntask.repair_queue WHERE task_id = :t2;
\echo '--- ... and, once the device re-registered, replays it (audited; the guard is re-checked)'
SELECT ntask_replay(:t2, 'alice', 'd-c1 re-registered (ticket OPS-17)') AS replayed_to;
SELECT task_id, task_key, attempt, token, prior_outcome
FROM ntask_claim('push', 'W2', lease => '30 seconds');
SELECT ntask_invoked(:t2, 2) AS invoked;
SELECT result, state
FROM ntask_transition(:t2, 2, 'succeeded', outcome => 'provider_accepted');

\echo
\echo '=== 7. A third task spends its budget: three total attempts, then repair'
SELECT task_id AS t3 FROM ntask_enqueue('push', 'notify:u-d:d-d1:m-9:v1',
	'{"user": "u-d", "device": "d-d1", "message": "m-9", "version": 1}') \gset
\echo '--- attempt 1: the call times out after the request was sent: outcome unknown'
SELECT task_id, attempt, token FROM ntask_claim('push', 'W1', lease => '30 seconds');
SELECT ntask_invoked(:t3, 1) AS invoked;
SELECT result, state
FROM ntask_transition(:t3, 1, 'retry_wait', 'unknown', retry_at => now(),
					  error_stage => 'provider_call');
\echo '--- attempt 2: 429 Too Many Requests: transient'
SELECT task_id, attempt, token, prior_outcome
FROM ntask_claim('push', 'W2', lease => '30 seconds');
SELECT ntask_invoked(:t3, 2) AS invoked;
SELECT result, state
FROM ntask_transition(:t3, 2, 'retry_wait', 'transient', retry_at => now(),
					  detail => '{"http_status": 429}', error_stage => 'provider_call');
\echo '--- attempt 3: W3 claims with the 1-second queue lease and crashes before calling out'
SELECT task_id, attempt, token, prior_outcome FROM ntask_claim('push', 'W3');
SELECT FROM pg_sleep(1.2) \g /dev/null
\echo '--- the next claim finds the lease expired and the budget spent: nothing is handed out,'
\echo '    the task goes to repair_required (budget_exhausted); attempt 3 still counted'
SELECT count(*) AS handed_out FROM ntask_claim('push', 'W1');
SELECT task_key, state, attempts, token, reason FROM ntask.task WHERE task_id = :t3;

\echo
\echo '=== 8. Where everything stands'
\echo
\echo '--- tasks'
SELECT task_id, task_key, state, attempts, token, outcome, reason
FROM ntask.task ORDER BY task_id;

\echo '--- the attempt ledger (one row per claim; invoked = the call may have left)'
SELECT task_id, token, attempt, worker, result, requested, error_class,
	   outcome_known, invoked_at IS NOT NULL AS invoked
FROM ntask.attempt_all ORDER BY task_id, token;

\echo '--- ntask.queue_stats'
SELECT queue, ready, leased, retry_wait, succeeded, repair_required, canceled,
	   skipped, unknown_attempts, repair_count
FROM ntask.queue_stats ORDER BY queue;

\echo '--- ntask.repair_queue'
SELECT task_id, task_key, reason, attempts, last_error_class AS error_class,
	   last_error_stage AS stage, known_outcomes AS known,
	   unknown_outcomes AS unknown, owner, next_action
FROM ntask.repair_queue ORDER BY task_id;

\echo '--- ntask.audit'
SELECT actor, action, task_id, reason FROM ntask.audit ORDER BY audit_id;

\echo
\echo '=== 9. A nightly statement schedule (pg_cron fires it; here we fire it by hand)'
\echo '--- every night at 02:00 Berlin time, one statement task per tenant and night'
SELECT queue FROM ntask_queue_set('statements', max_attempts => 3);
SELECT name, cron, timezone, overlap, catchup
FROM ntask_schedule('statement:t1', '0 2 * * *', 'statements', '{"tenant": "t1"}',
					timezone => 'Europe/Berlin');
\echo '--- a new schedule fires from its next slot on: firing it now enqueues nothing'
SELECT fired_slot, outcome, reason FROM ntask_fire('statement:t1');
\echo '--- an operator runs last night''s slot by hand: its key names the slot'
SELECT ntask_cron_prev('0 2 * * *', now(), 'Europe/Berlin') AS slot \gset
SELECT fired_slot, outcome FROM ntask_fire('statement:t1', :'slot');
\echo '--- and again: still one task (duplicate)'
SELECT fired_slot, outcome FROM ntask_fire('statement:t1', :'slot');
\echo '--- a deliberate second run needs its own key suffix'
SELECT fired_slot, outcome FROM ntask_fire('statement:t1', :'slot', rerun => 'ticket-42');
SELECT task_key, state, deadline - created_at <= interval '1 day' AS retries_end_by_next_slot
FROM ntask.task WHERE queue = 'statements' ORDER BY task_id;
SELECT slot, outcome, task_id FROM ntask.schedule_slot ORDER BY id;
