-- distribute: ntask_distribute (issue 18) on a plain install.  The Citus
-- layout itself is tested by t/023_citus.pl (NTASK_CITUS=1).
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

-- the workflow calls, the bulk actions and dependencies are refused on a
-- distributed install (0A000; docs/scaling.md "What is left").  Simulated
-- in a fresh backend by a shard value its transaction sees (rolled back:
-- the backend keeps the shard count it read, so it reconnects after)
SELECT count(*) FROM ntask_queue_set('dist_w');
SELECT task_id AS dw FROM ntask_enqueue('dist_w', 'w1', '{}') \gset
\c
BEGIN;
INSERT INTO ntask.shard_map VALUES (1);
SELECT ntask_checkpoint(:dw, 1, 'a', '{}');
\echo :SQLSTATE
ROLLBACK;
SELECT ntask_await(:dw, 1, 'k');
\echo :SQLSTATE
SELECT ntask_signal('dist_w', 'k');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('dist_w', 'cancel', 'regress', 'test', dry_run => true);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dist_w', 'w2', '{}', depends_on => ARRAY['w1']);
\echo :SQLSTATE
\c
SELECT ntask_cancel(:dw, 'regress', 'test done');
