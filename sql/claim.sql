-- claim: leases, fencing tokens, ledger, takeover of expired leases
-- task ids start at 2000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 2000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 2000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('work', max_attempts => 3, lease => '30 seconds');
SELECT count(*) FROM (
  SELECT ntask_enqueue('work', 'job-' || i, jsonb_build_object('i', i), priority => CASE WHEN i = 4 THEN 10 ELSE 0 END)
  FROM generate_series(1, 5) i) s;
SELECT created FROM ntask_enqueue('work', 'job-later', run_at => now() + interval '1 hour');
-- priority first, then due time, then task_id
SELECT task_key, payload, attempt, token, prior_outcome,
       lease_until - now() AS lease
FROM ntask_claim('work', 'W1', max_tasks => 2);
-- the default max_tasks is 1; the lease comes from the argument
SELECT task_key, attempt, token, lease_until - now() AS lease
FROM ntask_claim('work', 'W1', lease => '2 minutes');
-- batch claims stop at the due tasks: job-later is not due
SELECT task_key, attempt, token FROM ntask_claim('work', 'W2', max_tasks => 10);
SELECT count(*) FROM ntask_claim('work', 'W2', max_tasks => 10);
SELECT task_key, state, attempts, token, lease_owner FROM ntask.task WHERE queue = 'work' ORDER BY task_key;
-- one attempt per claim, open until the attempt ends: on the task row
-- (ntask.attempt_all shows it), its ntask.attempt row written when it ends
SELECT t.task_key, a.token, a.attempt, a.worker, a.invoked_at IS NOT NULL AS invoked,
       a.ended_at IS NOT NULL AS ended, a.result
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'work' ORDER BY t.task_key, a.token;
SELECT count(*) AS ledger_rows_of_open_attempts
FROM ntask.attempt a JOIN ntask.task t USING (task_id) WHERE t.queue = 'work';
SELECT count(*) AS leased, count(*) FILTER (WHERE claimed_at < lease_until AND invoked_at IS NULL) AS open_on_row
FROM ntask.task WHERE queue = 'work' AND state = 'leased';

-- heartbeat extends the lease of the current token
SELECT task_id AS j1 FROM ntask.task WHERE task_key = 'job-1' \gset
SELECT ntask_heartbeat(:j1, tok(:j1, 1), '10 minutes') - now() AS extended;
SELECT ntask_heartbeat(:j1, tok(:j1, 1)) - now() AS queue_default;
SELECT lease_until > now() + interval '29 seconds' AS extended, due_at = lease_until AS due_is_lease FROM ntask.task WHERE task_id = :j1;

-- ntask_invoked marks the attempt as (possibly) having an effect
SELECT ntask_invoked(:j1, tok(:j1, 1));
SELECT ntask_invoked(:j1, tok(:j1, 1));

-- takeover: expire W1's lease by claiming with a tiny lease
SELECT queue FROM ntask_queue_set('n9', max_attempts => 3);
SELECT task_id AS n9 FROM ntask_enqueue('n9', 'notify:u-b:d-b1:m-9:v1') \gset
SELECT task_key, attempt, token, prior_outcome FROM ntask_claim('n9', 'W1', lease => '1 millisecond');
SELECT ntask_invoked(:n9, tok(:n9, 1));
SELECT pg_sleep(0.01);
-- W2 takes over with token 2; W1 had invoked, so the outcome is unknown
SELECT task_key, attempt, token, prior_outcome FROM ntask_claim('n9', 'W2');
SELECT token, attempt, worker, result, outcome_known FROM ntask.attempt_all WHERE task_id = :n9 ORDER BY token;
SELECT state, token, attempts, unknown_attempts, last_error_class, last_error_stage FROM ntask.task WHERE task_id = :n9;
-- W1's lease is gone: heartbeat says NULL, invoked says stale
SELECT ntask_heartbeat(:n9, tok(:n9, 1)) IS NULL AS lost;
SELECT ntask_invoked(:n9, tok(:n9, 1));
-- a takeover of an attempt that never invoked keeps its outcome known
SELECT task_id AS n10 FROM ntask_enqueue('n9', 'notify:u-b:d-b1:m-10:v1') \gset
SELECT token FROM ntask_claim('n9', 'W1', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT task_key, token, prior_outcome FROM ntask_claim('n9', 'W2');
SELECT token, result, outcome_known FROM ntask.attempt_all WHERE task_id = :n10 ORDER BY token;

-- nothing to claim: zero rows, no error
SELECT count(*) FROM ntask_claim('n9', 'W3');

-- the claim uses the ready-set index (finished and leased rows are not
-- in it), and finds expired leases in the lease index, in the same order
SET enable_seqscan = off;
EXPLAIN (COSTS OFF)
SELECT t.task_id FROM ntask.task t
WHERE t.queue = 'work' AND t.due_at <= now() AND t.lease_until IS NULL
ORDER BY t.priority DESC, t.due_at, t.task_id
LIMIT 1 FOR UPDATE SKIP LOCKED;
EXPLAIN (COSTS OFF)
SELECT t.task_id FROM ntask.task t
WHERE t.queue = 'work' AND t.priority = 0 AND t.lease_until <= now()
ORDER BY t.lease_until, t.task_id
LIMIT 1;
RESET enable_seqscan;

-- priorities are walked highest first; a priority whose tasks are not yet
-- due (scheduled later, in backoff) is passed over, not scanned, and the
-- order inside a priority is by due time
SELECT queue FROM ntask_queue_set('prio');
SELECT count(*) FROM (SELECT ntask_enqueue('prio', 'later-' || i, '{}', now() + interval '1 hour', NULL, 9)
					  FROM generate_series(1, 50) i) s;
SELECT created FROM ntask_enqueue('prio', 'p0-old', '{}', now() - interval '2 minutes', NULL, 0);
SELECT created FROM ntask_enqueue('prio', 'p0-new', '{}', now() - interval '1 minute', NULL, 0);
SELECT created FROM ntask_enqueue('prio', 'p5-due', '{}', now() - interval '1 second', NULL, 5);
SELECT created FROM ntask_enqueue('prio', 'p-1', '{}', NULL, NULL, -1);
SELECT task_key FROM ntask_claim('prio', 'W1', max_tasks => 1);
SELECT task_key FROM ntask_claim('prio', 'W1', max_tasks => 1);
SELECT task_key FROM ntask_claim('prio', 'W1', max_tasks => 10) ORDER BY task_key;
SELECT count(*) AS still_scheduled FROM ntask.task WHERE queue = 'prio' AND state = 'ready';

-- the walk reads the priorities other than 0 from task_priority_idx and
-- tries 0 in its place: positive ones first, then 0, then negative ones,
-- with or without tasks at 0; tasks of priority 0 are not in that index
SELECT queue FROM ntask_queue_set('prio2');
SELECT count(*) FROM (SELECT ntask_enqueue('prio2', 'p' || p || '-' || i, '{}', now() - make_interval(secs => i), NULL, p)
					  FROM unnest(ARRAY[-3, -1, 7, 2]) p, generate_series(1, 2) i) s;
CREATE TEMP TABLE prio2_seen (n serial, task_key text);
DO $$ BEGIN
	FOR i IN 1 .. 9 LOOP
		INSERT INTO prio2_seen (task_key) SELECT task_key FROM ntask_claim('prio2', 'W1');
	END LOOP;
END $$;
SELECT string_agg(task_key, ' ' ORDER BY n) AS claim_order, count(*) FROM prio2_seen;
SELECT count(*) FROM (SELECT ntask_enqueue('prio2', 'z' || p, '{}', NULL, NULL, p)
					  FROM unnest(ARRAY[0, -5, 1]) p) s;
TRUNCATE prio2_seen;
DO $$ BEGIN
	FOR i IN 1 .. 3 LOOP
		INSERT INTO prio2_seen (task_key) SELECT task_key FROM ntask_claim('prio2', 'W1');
	END LOOP;
END $$;
SELECT string_agg(task_key, ' ' ORDER BY n) AS claim_order FROM prio2_seen;
SET enable_seqscan = off;
SET plan_cache_mode = force_generic_plan;
PREPARE walk_step(text) AS
SELECT t.priority FROM ntask.task t
WHERE t.queue = $1 AND t.due_at IS NOT NULL AND t.priority <> 0
ORDER BY t.priority DESC LIMIT 1;
EXPLAIN (COSTS OFF) EXECUTE walk_step('prio2');
DEALLOCATE walk_step;
RESET plan_cache_mode;
RESET enable_seqscan;
DROP TABLE prio2_seen;

-- invoked => true: the lease itself marks each attempt invoked, as
-- ntask_invoked in the same transaction would (a worker that calls out at
-- once saves a statement per task); a takeover then knows the outcome is
-- unknown.  NULL is refused.
SELECT queue FROM ntask_queue_set('inv', lease => '1 millisecond');
SELECT count(*) FROM (SELECT ntask_enqueue('inv', 'i' || g, '{}') FROM generate_series(1, 2) g) s;
SELECT task_key, token FROM ntask_claim('inv', 'W1', 2, invoked => true) ORDER BY task_key;
SELECT t.task_key, a.invoked_at = a.claimed_at AS invoked_at_claim, a.ended_at IS NULL AS running
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'inv' ORDER BY 1;
SELECT ntask_invoked(task_id, tok(task_id, 1)) FROM ntask.task WHERE queue = 'inv' AND task_key = 'i1';
SELECT pg_sleep(0.01);
SELECT task_key, token, prior_outcome FROM ntask_claim('inv', 'W2', 2) ORDER BY task_key;
SELECT t.task_key, a.token, a.result, a.outcome_known, a.invoked_at IS NOT NULL AS invoked
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'inv' ORDER BY 1, 2;
\set VERBOSITY terse
SELECT count(*) FROM ntask_claim('inv', 'W1', invoked => NULL);
\echo :SQLSTATE
\set VERBOSITY default

-- lever (b): a batch that meets an expired lease below a priority it
-- already took rows from: the plain pick stops at that priority and the
-- merged pick goes on from there, so the batch is H1, H2 (priority 5),
-- R0 and L (priority 0, R0 due before L's lease ran out), not R0b after
-- it nor M at priority -1; the next claim takes those two
SELECT queue FROM ntask_queue_set('tkm', max_attempts => 5);
SELECT count(*) FROM (SELECT ntask_enqueue('tkm', 'L', '{}')) e;
SELECT task_key, attempt FROM ntask_claim('tkm', 'W1');
UPDATE ntask.task SET lease_until = '2000-01-01 00:00:10', due_at = '2000-01-01 00:00:10'
WHERE queue = 'tkm' AND task_key = 'L';
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkm', k, '{}', run_at => at, priority => p)
	FROM (VALUES ('H1', 5, '2000-01-01 00:00:01'::timestamptz),
				 ('H2', 5, '2000-01-01 00:00:02'),
				 ('R0', 0, '2000-01-01 00:00:05'),
				 ('R0b', 0, '2000-01-01 00:00:20'),
				 ('M', -1, '2000-01-01 00:00:01')) AS v(k, p, at)) e;
SELECT task_key, attempt FROM ntask_claim('tkm', 'W2', 4) ORDER BY task_key;
SELECT task_key, attempt FROM ntask_claim('tkm', 'W2', 10) ORDER BY task_key;
