-- metrics: ntask.queue_metrics (metrics/queries.yaml reads it): expired
-- leases, and per-queue counters that retention does not lower; the
-- ntask_monitor role reads the statistics views and nothing else
-- task ids start at 26000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 26000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 26000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('mt', max_attempts => 3, retention => '1 millisecond',
                                  backoff_base => '1 hour', backoff_max => '1 hour');
SELECT count(*) FROM ntask_enqueue_many('mt', ARRAY['a', 'b', 'c', 'd', 'e'],
                                        ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[]);
-- a: succeeded after an unknown first attempt; b: canceled; c: skipped;
-- d: its lease expires; e: ready
SELECT task_id AS a FROM ntask.task WHERE queue = 'mt' AND task_key = 'a' \gset
SELECT task_id AS b FROM ntask.task WHERE queue = 'mt' AND task_key = 'b' \gset
SELECT task_id AS c FROM ntask.task WHERE queue = 'mt' AND task_key = 'c' \gset
SELECT task_id AS d FROM ntask.task WHERE queue = 'mt' AND task_key = 'd' \gset
UPDATE ntask.task SET run_at = now() + interval '1 day', due_at = now() + interval '1 day'
WHERE queue = 'mt' AND task_key <> 'a';
SELECT token FROM ntask_claim('mt', 'W1');
SELECT ntask_invoked(:a, tok(:a, 1));
SELECT result FROM ntask_transition(:a, tok(:a, 1), 'retry_wait', 'unknown', retry_at => now() - interval '1 second');
SELECT token FROM ntask_claim('mt', 'W1');
SELECT result FROM ntask_transition(:a, tok(:a, 2), 'succeeded');
SELECT ntask_cancel(:b, 'ops', 'not needed');
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :c;
SELECT token FROM ntask_claim('mt', 'W1');
SELECT result FROM ntask_transition(:c, tok(:c, 1), 'skipped', detail => '{"reason": "obsolete"}');
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :d;
SELECT token FROM ntask_claim('mt', 'W1', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT leases_expired, enqueued_total, claims_total, unknown_outcomes_total,
       succeeded_total, canceled_total, skipped_total
FROM ntask.queue_metrics WHERE queue = 'mt';
-- housekeeping releases the expired lease and deletes the three finished
-- tasks (retention 1 ms): the counters stay where they were
SELECT expired, pruned FROM ntask_housekeeping();
SELECT count(*) AS tasks_left FROM ntask.task WHERE queue = 'mt';
SELECT leases_expired, enqueued_total, claims_total, unknown_outcomes_total,
       succeeded_total, canceled_total, skipped_total
FROM ntask.queue_metrics WHERE queue = 'mt';
SELECT queue, tasks, attempts, unknown_attempts, succeeded, canceled, skipped FROM ntask.queue_pruned WHERE queue = 'mt';
-- a second prune adds to the first: d (released to retry_wait) is claimed
-- again and succeeds
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = :d;
SELECT token FROM ntask_claim('mt', 'W2');
SELECT result FROM ntask_transition(:d, tok(:d, 2), 'succeeded');
SELECT pg_sleep(0.01);
SELECT pruned FROM ntask_housekeeping();
SELECT enqueued_total, claims_total, succeeded_total FROM ntask.queue_metrics WHERE queue = 'mt';
SELECT tasks, attempts, succeeded FROM ntask.queue_pruned WHERE queue = 'mt';
-- a queue without tasks: zeros
SELECT queue FROM ntask_queue_set('mt_empty');
SELECT * FROM ntask.queue_metrics WHERE queue = 'mt_empty';

-- ntask_monitor reads the statistics views, not the tasks
CREATE ROLE regress_mon LOGIN IN ROLE ntask_monitor;
SET ROLE regress_mon;
SELECT count(*) > 0 AS sees_queue_stats FROM ntask.queue_stats;
SELECT count(*) > 0 AS sees_queue_metrics FROM ntask.queue_metrics;
SELECT count(*) AS sees_worker_stats FROM ntask.worker_stats;
SELECT count(*) FROM ntask.task;
\echo :SQLSTATE
SELECT count(*) FROM ntask.queue_pruned;
\echo :SQLSTATE
SELECT count(*) FROM ntask_explain(:a);
\echo :SQLSTATE
SELECT * FROM ntask_claim('mt', 'M');
\echo :SQLSTATE
RESET ROLE;
DROP ROLE regress_mon;
