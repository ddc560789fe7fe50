-- fairness => 'partition' (issue 13): claims rotate across partition keys
-- task ids start at 30000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 30000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 30000, false) AS first_token \gset
SELECT queue, fairness FROM ntask_queue_set('fair', lease => '1 minute');

-- hostile values: 22023, and the queue keeps its fairness
SELECT * FROM ntask_queue_set('fair', fairness => 'round-robin');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fair', fairness => '');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fair', fairness => 'PARTITION');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fair', fairness => 'partition ');
\echo :SQLSTATE
SELECT fairness FROM ntask.queue WHERE queue = 'fair';
-- NULL keeps it
SELECT fairness FROM ntask_queue_set('fair', fairness => NULL);

-- off (the default): one order over the whole queue, keys ignored
SELECT count(*) FROM (
  SELECT ntask_enqueue('fair', 'hot-' || i, '{}', partition_key => 'c-g')
  FROM generate_series(1, 6) i) s;
SELECT created FROM ntask_enqueue('fair', 'n9', '{}', partition_key => 'c-a');
SELECT created FROM ntask_enqueue('fair', 'keyless', '{}');
SELECT array_agg(task_key ORDER BY task_id) FROM ntask_claim('fair', 'fw', max_tasks => 3);
-- back to ready
SELECT count(*) FROM ntask.task t, ntask_release(t.task_id, t.token) r
WHERE t.queue = 'fair' AND t.state = 'leased';

-- turning fairness on: unfinished keyless tasks join the keyless partition ''
SELECT fairness FROM ntask_queue_set('fair', fairness => 'partition');
SELECT task_key, partition_key FROM ntask.task WHERE task_key = 'keyless';
-- a keyless task enqueued now is stored with '' (an empty key is refused from callers)
SELECT created FROM ntask_enqueue('fair', 'keyless-2', '{}');
SELECT partition_key FROM ntask.task WHERE task_key = 'keyless-2';
SELECT created FROM ntask_enqueue('fair', 'empty', '{}', partition_key => '');
\echo :SQLSTATE

-- one claim at a time: round robin over the keys with due work in key
-- order (C collation), each key one turn before any gets a second; a fresh
-- cursor starts after '' (so the keyless partition '' is last in the first
-- round).  Within a key: priority, due time, id.
SELECT created FROM ntask_enqueue('fair', 'n9-urgent', '{}', partition_key => 'c-a', priority => 5);
SELECT string_agg(k, ' ' ORDER BY n) AS handed_out FROM (
  SELECT n, (SELECT c.task_key FROM ntask_claim('fair', 'fw' || n, lease => '1 hour') c) AS k
  FROM generate_series(1, 11) n) s;
-- nothing left
SELECT count(*) FROM ntask_claim('fair', 'fw');

-- priority does not win across keys: the last turn went to c-g, so the
-- round goes on after c-g (wrapping to b), and c-g's priority-100 task
-- waits for b's turn
SELECT created FROM ntask_enqueue('fair', 'b-low', '{}', partition_key => 'b');
SELECT created FROM ntask_enqueue('fair', 'c-g-high', '{}', partition_key => 'c-g', priority => 100);
SELECT string_agg(k, ' ' ORDER BY n) AS handed_out FROM (
  SELECT n, (SELECT c.task_key FROM ntask_claim('fair', 'fw' || n, lease => '1 hour') c) AS k
  FROM generate_series(1, 2) n) s;
-- a key added before the cursor waits for the round to come around; one
-- after it is next
SELECT created FROM ntask_enqueue('fair', 'a-1', '{}', partition_key => 'a');
SELECT created FROM ntask_enqueue('fair', 'd-1', '{}', partition_key => 'd');
SELECT created FROM ntask_enqueue('fair', 'c-g-next', '{}', partition_key => 'c-g');
SELECT string_agg(k, ' ' ORDER BY n) AS handed_out FROM (
  SELECT n, (SELECT c.task_key FROM ntask_claim('fair', 'fw' || n, lease => '1 hour') c) AS k
  FROM generate_series(1, 3) n) s;

-- a batch claim: one task per key around the round, then the rest split
-- over the keys that had work (at most ceil(rest / keys) each)
SELECT count(*) FROM (
  SELECT ntask_enqueue('fair', 'batch-' || k || '-' || i, '{}', partition_key => 'k' || k)
  FROM generate_series(1, 3) k, generate_series(1, 4) i) s;
SELECT partition_key, count(*) FROM ntask_claim('fair', 'fw', max_tasks => 6) c
JOIN ntask.task t USING (task_id) GROUP BY 1 ORDER BY 1;
SELECT partition_key, count(*) FROM ntask_claim('fair', 'fw', max_tasks => 5) c
JOIN ntask.task t USING (task_id) GROUP BY 1 ORDER BY 1;
-- a batch bigger than what is due takes all of it (k3 has one left, solo three)
SELECT count(*) FROM (SELECT ntask_enqueue('fair', 'solo-' || i, '{}', partition_key => 'solo')
  FROM generate_series(1, 3) i) s;
SELECT count(*) AS one_key_batch FROM ntask_claim('fair', 'fw', max_tasks => 10);

-- a batch of more than 32 goes by the cursor alone (no turn locks): still
-- one per key around the round
SELECT count(*) FROM (SELECT ntask_enqueue('fair', 'wide-' || i, '{}', partition_key => 'w' || lpad(i::text, 2, '0'))
  FROM generate_series(1, 40) i) s;
BEGIN;
SELECT count(*) AS tasks, count(DISTINCT t.partition_key) AS keys
FROM ntask_claim('fair', 'fw', max_tasks => 40) c JOIN ntask.task t USING (task_id);
SELECT count(*) AS turn_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;
-- a small claim holds one turn lock per key it served, until it commits
SELECT count(*) FROM (SELECT ntask_enqueue('fair', 'small-' || i, '{}', partition_key => 's' || i)
  FROM generate_series(1, 3) i) s;
BEGIN;
SELECT count(*) AS tasks FROM ntask_claim('fair', 'fw', max_tasks => 2);
SELECT count(*) AS turn_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;
SELECT count(*) AS turn_locks_after_commit FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT count(*) AS left FROM ntask_claim('fair', 'fw', max_tasks => 2);

-- an expired lease is due again in its key's turn (takeover), not before
SELECT created FROM ntask_enqueue('fair', 'exp', '{}', partition_key => 'exp');
SELECT task_key, token FROM ntask_claim('fair', 'fw1', lease => '1 hour');
UPDATE ntask.task SET due_at = now() - interval '1 second', lease_until = now() - interval '1 second'
WHERE task_key = 'exp';
SELECT task_key, token, prior_outcome FROM ntask_claim('fair', 'fw2', lease => '1 hour');

-- a task enqueued without a key that kept NULL (read the queue before it
-- turned fair) is still claimed when no partition has due work
SELECT created FROM ntask_enqueue('fair', 'straggler', '{}');
UPDATE ntask.task SET partition_key = NULL WHERE task_key = 'straggler';
SELECT task_key FROM ntask_claim('fair', 'fw');

-- the right and the queue are still checked when nothing is due
SELECT * FROM ntask_claim('no-such-queue', 'W');
\echo :SQLSTATE
SELECT count(*) FROM ntask_claim('fair', 'fw');

-- switching back to none: plain order again ('' stays, and is only a key)
SELECT fairness FROM ntask_queue_set('fair', fairness => 'none');
SELECT created FROM ntask_enqueue('fair', 'z-first', '{}', partition_key => 'z', priority => 1);
SELECT created FROM ntask_enqueue('fair', 'plain-2', '{}');
SELECT partition_key IS NULL AS null_key FROM ntask.task WHERE task_key = 'plain-2';
SELECT task_key FROM ntask_claim('fair', 'fw', max_tasks => 2) ORDER BY task_id;

-- audited like every policy change
SELECT count(*) >= 4 AS audited FROM ntask.audit WHERE action = 'queue_set' AND queue = 'fair';
