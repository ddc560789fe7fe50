-- distribute: ntask_distribute (issue 18) on a plain install.  The Citus
-- layout itself is tested by t/023_citus.pl (NTASK_CITUS=1).
SELECT setval('ntask.token_seq', 63000, false) AS first_token \gset
\set VERBOSITY default
-- without Citus it refuses, and changes nothing
SELECT * FROM ntask_distribute();
SELECT * FROM ntask_distribute(8);
-- the distribution column exists and is 0 on every row of a plain install
SELECT count(*) FROM ntask_queue_set('dist_q');
SELECT created FROM ntask_enqueue('dist_q', 'd1', '{}');
SELECT t.shard, t.task_id >> 48 AS high_bits FROM ntask.task t WHERE t.queue = 'dist_q';
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = 'ntask.task'::regclass AND contype IN ('p', 'u') ORDER BY 1;
SELECT ntask_cancel((SELECT task_id FROM ntask.task WHERE queue = 'dist_q'), 'regress', 'test done');

-- the bulk actions, dependencies, sagas and an await across shards are refused on a
-- distributed install (0A000; docs/scaling.md "What is left").  Simulated
-- in a fresh backend by a shard value its transaction sees (rolled back:
-- the backend keeps the shard count it read, so it reconnects after)
SELECT count(*) FROM ntask_queue_set('dist_w');
SELECT task_id AS dw FROM ntask_enqueue('dist_w', 'w1', '{}') \gset
\c
BEGIN;
INSERT INTO ntask.shard_map VALUES (1);
SELECT * FROM ntask_bulk('dist_w', 'cancel', 'regress', 'test', dry_run => true);
\echo :SQLSTATE
ROLLBACK;
-- an await of a key of another shard than the task's (the simulated
-- install's one shard value is 1, the task's shard 0; the message, which
-- names the task, is checked in t/025_citus_api.pl)
\set VERBOSITY sqlstate
SELECT ntask_await(:dw, tok(:dw, 1), 'k');
\set VERBOSITY default
SELECT * FROM ntask_enqueue('dist_w', 'w2', '{}', depends_on => ARRAY['w1']);
\echo :SQLSTATE
SELECT * FROM ntask_saga_start('dist-saga', '[{"name": "a", "queue": "dist_w"}]');
\echo :SQLSTATE
-- a parent of the task's own shard runs (issue 49; both in the simulated
-- shard 1): the distributed enqueue's routed statements, the dependency
-- rows in the shard, the release by the parent's success; a parent that
-- exists nowhere is 22023 as on one node (the Citus layout: TAP
-- 026_citus_deps)
BEGIN;
SELECT ntask_shard(task_id) AS shard FROM ntask_enqueue('dist_w', 'dp1', '{}');
SELECT state, ntask_shard(task_id) AS shard
FROM ntask_enqueue('dist_w', 'dc1', '{}', depends_on => ARRAY['dist_w:dp1']);
SELECT d.shard, p.task_key AS parent FROM ntask.task_dep d JOIN ntask.task p ON p.task_id = d.parent_id
WHERE d.task_id = (SELECT task_id FROM ntask.task WHERE task_key = 'dc1');
-- the settle a commit would run, now (it marks the parent)
SET CONSTRAINTS ntask.task_dep_settle IMMEDIATE;
SELECT has_children FROM ntask.task WHERE task_key = 'dp1';
SELECT task_id AS dp1, token AS dp1_tok FROM ntask_claim_on(1::smallint, 'dist_w', 'w', 1) \gset
SELECT result FROM ntask_transition(:dp1, :dp1_tok, 'succeeded');
SELECT state, parents_left FROM ntask.task WHERE task_key = 'dc1';
SAVEPOINT s;
SELECT * FROM ntask_enqueue('dist_w', 'dc2', '{}', depends_on => ARRAY['nope']);
ROLLBACK TO SAVEPOINT s;
-- the producer right on the parent's queue holds on the distributed path
-- too: a producer without it gets 42501 for a parent that exists and for
-- one that does not (nothing is revealed)
CREATE ROLE regress_dist_prod IN ROLE ntask_producer;
CREATE ROLE regress_dist_owner;
SELECT count(*) FROM ntask_queue_set('dist_priv');
SELECT count(*) FROM ntask_queue_set_roles('dist_priv', producer_role => 'regress_dist_owner', worker_role => NULL);
SELECT ntask_shard(task_id) AS shard FROM ntask_enqueue('dist_priv', 'pp1', '{}');
SAVEPOINT s2;
SET ROLE regress_dist_prod;
SELECT * FROM ntask_enqueue('dist_w', 'dc3', '{}', depends_on => ARRAY['dist_priv:pp1']);
ROLLBACK TO SAVEPOINT s2;
SET ROLE regress_dist_prod;
SELECT * FROM ntask_enqueue('dist_w', 'dc3', '{}', depends_on => ARRAY['dist_priv:nope']);
ROLLBACK TO SAVEPOINT s2;
SELECT count(*) AS dc3 FROM ntask.task WHERE task_key = 'dc3';
ROLLBACK;
\c
SELECT ntask_cancel(:dw, 'regress', 'test done');

-- shard-addressed calls (issue 34; docs/scaling.md "One hop: delegated
-- calls").  On a plain install there is one shard, 0, and they do what
-- ntask_<f> does.
SELECT ntask_shard('dist_q', 'on1') AS key_shard, ntask_shard(12345::bigint) AS id_shard,
	   ntask_shard((7::bigint << 48) | 5) AS high_bits;
SELECT created, state FROM ntask_enqueue_on(ntask_shard('dist_q', 'on1'), 'dist_q', 'on1', '{}');
SELECT created FROM ntask_enqueue_on(0::smallint, 'dist_q', 'on1', '{"again": 1}');
SELECT task_id AS on1, token AS on1_tok FROM ntask_claim_on(0::smallint, 'dist_q', 'w1') \gset
SELECT ntask_heartbeat_on(ntask_shard(:on1), :on1, :on1_tok) > now() AS extended;
SELECT ntask_invoked_on(ntask_shard(:on1), :on1, :on1_tok);
SELECT result, state FROM ntask_transition_on(ntask_shard(:on1), :on1, :on1_tok, 'succeeded');
-- refused: a shard this install does not have, a task of another shard,
-- a NULL shard
\set VERBOSITY terse
SELECT * FROM ntask_enqueue_on(3::smallint, 'dist_q', 'on2', '{}');
SELECT * FROM ntask_transition_on(0::smallint, (1::bigint << 48) | 5, 1, 'succeeded');
SELECT * FROM ntask_transition_many_on(0::smallint, ARRAY[:on1, (2::bigint << 48) | 9], ARRAY[tok(:on1, 1), 1]::bigint[], 'succeeded');
SELECT * FROM ntask_claim_on(NULL, 'dist_q', 'w1');
\set VERBOSITY default
-- on a distributed install (simulated in a fresh backend: two shard
-- values its transaction sees, rolled back) the key must hash to the
-- shard named, and a claim looks in that shard only
\c
BEGIN;
INSERT INTO ntask.shard_map VALUES (1), (2);
SELECT ntask_shard('dist_q', 'on3') AS s3, 3 - ntask_shard('dist_q', 'on3') AS other \gset
SELECT :s3 IN (1, 2) AS a_shard_value;
SAVEPOINT s;
\set VERBOSITY terse
SELECT * FROM ntask_enqueue_on(:other::smallint, 'dist_q', 'on3', '{}');
\set VERBOSITY default
ROLLBACK TO s;
SELECT created FROM ntask_enqueue_on(:s3::smallint, 'dist_q', 'on3', '{}');
SELECT count(*) AS other_shard FROM ntask_claim_on(:other::smallint, 'dist_q', 'w1');
SELECT task_key, ntask_shard(task_id) = :s3 AS in_its_shard FROM ntask_claim_on(:s3::smallint, 'dist_q', 'w1');
ROLLBACK;
\c
-- the release, a cancel of a leased task and a takeover of an expired
-- lease write the ledger in routed statements on a distributed install
-- (simulated as above), as on one node (claims shard-addressed: a plain
-- claim would read Citus' placements)
\c
BEGIN;
INSERT INTO ntask.shard_map VALUES (1), (2);
SELECT count(*) FROM ntask_queue_set('dist_r', lease => '30 seconds');
SELECT count(*) FROM unnest(ARRAY['r1', 'r2', 'r3', 'r4']) k, ntask_enqueue('dist_r', k, '{}');
SELECT count(*) FROM ntask.shard_map s, LATERAL ntask_claim_on(s.shard, 'dist_r', 'w1', 10);
SELECT ntask_invoked(task_id, token) FROM ntask.task WHERE queue = 'dist_r' AND task_key IN ('r1', 'r3');
SELECT task_key, ntask_release(task_id, token) FROM ntask.task WHERE queue = 'dist_r' AND task_key IN ('r1', 'r4') ORDER BY 1;
SELECT ntask_cancel(task_id, 'regress', 'test') FROM ntask.task WHERE queue = 'dist_r' AND task_key = 'r2';
UPDATE ntask.task SET lease_until = now() - interval '1 second', due_at = now() - interval '1 second'
WHERE queue = 'dist_r' AND task_key = 'r3';
SELECT task_key, token, prior_outcome FROM ntask_claim_on(ntask_shard('dist_r', 'r3'), 'dist_r', 'w2', 10)
ORDER BY 1;
SELECT t.task_key, a.attempt, a.token, a.worker, a.result, a.requested, a.outcome_known,
	a.retry_at IS NOT NULL AS retry_at, a.ended_at IS NOT NULL AS ended
FROM ntask.attempt a JOIN ntask.task t USING (task_id) WHERE t.queue = 'dist_r' ORDER BY 1, 2;
SELECT task_key, state, attempts, max_attempts, unknown_attempts, last_error_class, last_error_stage
FROM ntask.task WHERE queue = 'dist_r' ORDER BY 1;
ROLLBACK;
-- an enqueue on a distributed install reads the queue's policy, then
-- inserts by INSERT ... VALUES: the same row as the plain install's
-- INSERT ... SELECT (a fair queue's '' key, an ordered queue's flag, the
-- budget, the deadline from run_at), the same duplicate and conflict
\c
SELECT count(*) FROM ntask_queue_set('dist_ef', fairness => 'partition', total_deadline => '1 hour', max_attempts => 7);
SELECT count(*) FROM ntask_queue_set('dist_eo', fairness => 'partition', ordered => true, notify => true);
SELECT created FROM ntask_enqueue('dist_ef', 'a', '{}', run_at => now() + interval '1 minute');
SELECT created FROM ntask_enqueue('dist_eo', 'a', '{}', priority => 3, partition_key => 'p');
\c
BEGIN;
INSERT INTO ntask.shard_map VALUES (1), (2);
SELECT created FROM ntask_enqueue('dist_ef', 'b', '{}', run_at => now() + interval '1 minute');
SELECT created FROM ntask_enqueue('dist_eo', 'b', '{}', priority => 3, partition_key => 'p');
SELECT created, state FROM ntask_enqueue('dist_eo', 'b', '{}', priority => 3, partition_key => 'p');
\set VERBOSITY terse
SAVEPOINT s;
SELECT * FROM ntask_enqueue('dist_eo', 'b', '{"other": 1}', partition_key => 'p');
ROLLBACK TO s;
SELECT * FROM ntask_enqueue('dist_none', 'b', '{}');
ROLLBACK TO s;
\set VERBOSITY default
SELECT queue, task_key, partition_key, ordered, priority, max_attempts, state,
	deadline - run_at AS window, run_at = due_at AS due, shard,
	ntask_shard(queue, coalesce(nullif(partition_key, ''), task_key)) AS key_shard,
	task_id >> 48 = shard AS id_ok
FROM ntask.task WHERE queue IN ('dist_ef', 'dist_eo') ORDER BY 1, 2;
ROLLBACK;
\c
