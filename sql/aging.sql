-- priority aging (issue 35.4): priority_aging => interval raises a waiting
-- task's effective priority by one per interval waited (now - due_at), up to
-- priority_aging_max (NULL: the highest priority among the queue's due
-- tasks); ties by due time, then task id
-- task ids start at 35400 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 35400, false) AS first_task_id;
SELECT setval('ntask.token_seq', 35400, false) AS first_token \gset
SELECT queue, priority_aging, priority_aging_max FROM ntask_queue_set('age', lease => '1 minute');

-- hostile values: 22023, and the queue keeps its settings
SELECT * FROM ntask_queue_set('age', priority_aging => '-1 minute');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('age', priority_aging => '1 day -86401 seconds');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('age', priority_aging => '-1 month 31 days');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('age', priority_aging => '1 month');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('age', priority_aging => '3651 days');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('age', priority_aging => '2147483647 days');
\echo :SQLSTATE
-- a cap without aging
SELECT * FROM ntask_queue_set('age', priority_aging_max => 5);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('age', priority_aging => '0', priority_aging_max => 5);
\echo :SQLSTATE
-- not on a fair queue (priority orders within a key there), either way round
SELECT * FROM ntask_queue_set('age-fair', fairness => 'partition', priority_aging => '1 minute');
\echo :SQLSTATE
SELECT queue FROM ntask.queue WHERE queue = 'age-fair';
SELECT queue, fairness FROM ntask_queue_set('age-fair', fairness => 'partition');
SELECT * FROM ntask_queue_set('age-fair', priority_aging => '1 minute');
\echo :SQLSTATE
SELECT queue, fairness FROM ntask_queue_set('age-keys', priority_aging => '1 minute');
SELECT * FROM ntask_queue_set('age-keys', fairness => 'partition');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('age-keys', fairness => 'partition', ordered => true);
\echo :SQLSTATE
-- the table refuses a step that is not positive too
\set VERBOSITY terse
UPDATE ntask.queue SET priority_aging = '0' WHERE queue = 'age';
\echo :SQLSTATE
\set VERBOSITY default
SELECT priority_aging, priority_aging_max FROM ntask.queue WHERE queue = 'age';

-- on, with the default cap; NULL keeps; 0 turns it off (and clears the cap)
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => '1 minute');
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging_max => 7);
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => NULL, lease => '1 minute');
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => '0');
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging_max => -3, priority_aging => '10 minutes');
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => '0 seconds');

-- the order: run_at in the past, so each task's wait is known
--   low:  priority 0, waited 10.5 minutes
--   mid:  priority 3, waited 2.5 minutes
--   hi1:  priority 5, waited 1.5 minutes
--   hi2:  priority 5, waited 30 seconds
--   fut:  priority 9, due in an hour (not due)
CREATE FUNCTION age_fill() RETURNS void LANGUAGE sql AS $$
  SELECT ntask_enqueue('age', 'low', '{}', run_at => now() - interval '630 seconds', priority => 0);
  SELECT ntask_enqueue('age', 'mid', '{}', run_at => now() - interval '150 seconds', priority => 3);
  SELECT ntask_enqueue('age', 'hi1', '{}', run_at => now() - interval '90 seconds', priority => 5);
  SELECT ntask_enqueue('age', 'hi2', '{}', run_at => now() - interval '30 seconds', priority => 5);
  SELECT ntask_enqueue('age', 'fut', '{}', run_at => now() + interval '1 hour', priority => 9);
$$;
CREATE FUNCTION age_order(n integer DEFAULT 1) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  r text := '';
  k text;
BEGIN
  LOOP
    SELECT string_agg(task_key, ',' ORDER BY task_id) INTO k FROM ntask_claim('age', 'w', max_tasks => n);
    EXIT WHEN k IS NULL;
    r := r || CASE WHEN r = '' THEN '' ELSE ' | ' END || k;
  END LOOP;
  DELETE FROM ntask.task WHERE queue = 'age';
  RETURN r;
END $$;

-- aging off: priority, then due time
SELECT age_fill();
SELECT age_order();
-- one minute a step, the default cap (5, the highest due priority):
-- low 0+10 -> 5, mid 3+2 = 5, hi1 5+1 -> 5, hi2 5: all tie at 5, oldest first
SELECT priority_aging FROM ntask_queue_set('age', priority_aging => '1 minute');
SELECT age_fill();
SELECT age_order();
-- the same in claims of two and of ten (the merge of the levels' heads)
SELECT age_fill();
SELECT age_order(2);
SELECT age_fill();
SELECT age_order(10);
-- a cap of 4 (aging never lowers a priority): low 4, mid 4, hi1 5, hi2 5
SELECT priority_aging_max FROM ntask_queue_set('age', priority_aging_max => 4);
SELECT age_fill();
SELECT age_order();
SELECT age_fill();
SELECT age_order(3);
-- a cap above the top: low 0+10 = 10, hi1 5+1 = 6, mid 3+2 = 5, hi2 5 (mid is older)
SELECT priority_aging_max FROM ntask_queue_set('age', priority_aging_max => 100);
SELECT age_fill();
SELECT age_order();
-- two minutes a step, the default cap: low 0+5 = 5, mid 3+1 = 4, hi1 5, hi2 5
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => '0', lease => '1 minute');
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => '2 minutes');
SELECT age_fill();
SELECT age_order();
-- an hour a step: nothing has aged yet, so priority order
SELECT priority_aging FROM ntask_queue_set('age', priority_aging => '1 hour');
SELECT age_fill();
SELECT age_order();
-- negative priorities: the default cap is the highest due priority (-1 here)
SELECT priority_aging FROM ntask_queue_set('age', priority_aging => '1 minute');
SELECT created FROM ntask_enqueue('age', 'neg5', '{}', run_at => now() - interval '630 seconds', priority => -5);
SELECT created FROM ntask_enqueue('age', 'neg1', '{}', run_at => now() - interval '30 seconds', priority => -1);
SELECT created FROM ntask_enqueue('age', 'neg3', '{}', run_at => now() - interval '60.5 seconds', priority => -3);
SELECT age_order();

-- a queue-wide cap still applies
SELECT priority_aging FROM ntask_queue_set('age', max_inflight => 2);
SELECT age_fill();
SELECT string_agg(task_key, ',' ORDER BY task_id) FROM ntask_claim('age', 'w', max_tasks => 5);
SELECT age_order();
SELECT max_inflight FROM ntask_queue_set('age', max_inflight => 0);

-- transition_and_claim takes the next task in the aged order too
SELECT age_fill();
SELECT t.task_key, c.task_key AS next
FROM ntask_claim('age', 'w') t,
     ntask_transition_and_claim(t.task_id, t.token, 'succeeded', 'age', 'w') c;
SELECT age_order();

-- extreme steps and caps: a microsecond a step reaches any cap at once
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => '1 microsecond', priority_aging_max => 2147483647);
SELECT age_fill();
SELECT age_order();
SELECT priority_aging_max FROM ntask_queue_set('age', priority_aging_max => -2147483648);
SELECT age_fill();
SELECT age_order(2);
SELECT priority_aging, priority_aging_max FROM ntask_queue_set('age', priority_aging => '3650 days', priority_aging_max => NULL);

-- a waiting claim on an aging queue: nothing due, then a task comes due
SELECT priority_aging FROM ntask_queue_set('age', priority_aging => '1 minute');
SELECT created FROM ntask_enqueue('age', 'soon', '{}', run_at => clock_timestamp() + interval '300 milliseconds');
SELECT task_key FROM ntask_claim('age', 'w', wait => '5 seconds');
SELECT age_order();

-- aging turned off after this session claimed with it: priority order
-- again, and so for a queue that then turns fair
SELECT priority_aging FROM ntask_queue_set('age', priority_aging => '0');
SELECT age_fill();
SELECT age_order();
SELECT priority_aging FROM ntask_queue_set('age', priority_aging => '1 minute');
SELECT age_fill();
SELECT age_order();
SELECT priority_aging, fairness FROM ntask_queue_set('age', priority_aging => '0', fairness => 'partition');
SELECT age_fill();
SELECT age_order();
SELECT priority_aging, fairness FROM ntask_queue_set('age', fairness => 'none', priority_aging => '1 minute');
-- and an idle aging queue, a caller without the right and a queue that is gone
SELECT count(*) FROM ntask_claim('age', 'w');
CREATE ROLE age_worker;
GRANT ntask_worker TO age_worker;
SELECT count(*) FROM ntask_queue_set_roles('age', NULL, 'pg_monitor');
SET ROLE age_worker;
SELECT count(*) FROM ntask_claim('age', 'w');
\echo :SQLSTATE
RESET ROLE;
SELECT count(*) FROM ntask_queue_set_roles('age', NULL, NULL);
DROP ROLE age_worker;
SELECT count(*) FROM ntask_claim('age-gone', 'w');
\echo :SQLSTATE

DROP FUNCTION age_fill();
DROP FUNCTION age_order(integer);

-- a paused aging queue hands out nothing, also on the claim's cached aging
-- path (the backend has claimed from it above), and its paused keys are
-- passed by (issue 35.1, 35.5 with 35.4)
SELECT count(*) FROM generate_series(1, 4) i,
	ntask_enqueue('age', 'pa-' || i, '{}', partition_key => 'k' || i % 2);
SELECT ntask_queue_pause('age', 'alice', 'test');
SELECT count(*) FROM ntask_claim('age', 'w', 4);
SELECT ntask_queue_resume('age', 'alice', 'test');
INSERT INTO ntask.key_pause (queue, partition_key, until, reason, set_by)
VALUES ('age', 'k1', now() + interval '1 hour', 'test', 'test');
UPDATE ntask.queue SET keys_paused_until = now() + interval '1 hour' WHERE queue = 'age';
SELECT t.task_key, t.partition_key FROM ntask_claim('age', 'w', 4) c JOIN ntask.task t USING (task_id)
ORDER BY 1;
SELECT ntask_queue_resume('age', 'alice', 'test');
SELECT count(*) FROM ntask_claim('age', 'w', 4);
