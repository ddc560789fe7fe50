-- deps: task dependencies (issue 36.1): fan-out, fan-in, the waiting
-- state, the failed-parent policy, the claim's context.parents, and every
-- hostile input with its SQLSTATE
SELECT setval('ntask.token_seq', 61000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('dg', max_attempts => 2, total_deadline => '1 hour');
SELECT queue FROM ntask_queue_set('dg2');
SELECT queue, on_parent_failed FROM ntask_queue_set('dgc', on_parent_failed => 'cancel');

-- fan-out / fan-in: two roots, a child of both (same queue and queue:key)
SELECT task_id AS a FROM ntask_enqueue('dg', 'a', '{"n": 1}') \gset
SELECT task_id AS b FROM ntask_enqueue('dg2', 'b', '{"n": 2}') \gset
SELECT task_id AS c, created, state FROM ntask_enqueue('dg', 'c', '{"n": 3}',
	depends_on => ARRAY['a', 'dg2:b']) \gset
SELECT :'created', :'state';
SELECT state, due_at IS NULL AS not_due, parents_left, has_parents, attempts
FROM ntask.task WHERE task_id = :c;
SELECT task_key, has_children FROM ntask.task WHERE task_id IN (:a, :b) ORDER BY 1;
SELECT count(*) AS deps FROM ntask.task_dep WHERE task_id = :c;
-- a waiting task is in no claim: only the root is handed out
SELECT task_key, context FROM ntask_claim('dg', 'W1', 10);
SELECT detail FROM ntask_explain(:c) WHERE event = 'now';
SELECT queue, ready, leased, waiting, oldest_waiting_age IS NOT NULL AS has_age
FROM ntask.queue_stats WHERE queue = 'dg';
-- an idempotent repeat of the child: the same task, still waiting
SELECT task_id = :c AS same, created, state FROM ntask_enqueue('dg', 'c', '{"n": 3}',
	depends_on => ARRAY['a', 'dg2:b']);

-- the first parent succeeds: one parent left; the second: the child is ready
SELECT result, state FROM ntask_transition(:a, tok(:a, 1), 'succeeded', result => '{"rows": 7}');
SELECT state, parents_left FROM ntask.task WHERE task_id = :c;
SELECT token FROM ntask_claim('dg2', 'W1');
SELECT result, state FROM ntask_transition(:b, tok(:b, 1), 'succeeded');
SELECT state, parents_left, due_at IS NOT NULL AS due,
	   deadline > now() + interval '59 minutes' AS deadline_from_release
FROM ntask.task WHERE task_id = :c;
-- the child's claim reads its parents' results
SELECT task_key, attempt, context FROM ntask_claim('dg', 'W1');
SELECT result FROM ntask_transition(:c, tok(:c, 1), 'succeeded');

-- a parent already succeeded counts as done: the child is ready at once
SELECT created, state FROM ntask_enqueue('dg', 'd', '{}', depends_on => ARRAY['a']);
SELECT parents_left FROM ntask.task WHERE queue = 'dg' AND task_key = 'd';

-- the batch form: every task of the call depends on the parents
SELECT queue FROM ntask_queue_set('dgm');
SELECT task_id AS p FROM ntask_enqueue('dgm', 'p', '{}') \gset
SELECT created, state FROM ntask_enqueue_many('dgm', ARRAY['m1', 'm2', 'm1'],
	ARRAY['{}', '{}', '{}']::jsonb[], depends_on => ARRAY['p']);
SELECT task_key FROM ntask_claim('dgm', 'W1', 5);
SELECT result, state FROM ntask_transition_many(ARRAY[:p]::bigint[], ARRAY[tok(:p, 1)]::bigint[], 'succeeded');
SELECT task_key, state FROM ntask.task WHERE queue = 'dgm' AND task_key IN ('m1', 'm2') ORDER BY 1;
-- transition_and_claim releases too, and the claim in the same call sees it
SELECT task_id AS q FROM ntask_enqueue('dg2', 'q', '{}') \gset
SELECT task_id AS qc FROM ntask_enqueue('dg2', 'qc', '{}', depends_on => ARRAY['q']) \gset
SELECT task_id AS qt FROM ntask_claim('dg2', 'W1') \gset
SELECT task_key, finish_result, context FROM ntask_transition_and_claim(:q, tok(:q, 1), 'succeeded', 'dg2', 'W1', 1);

-- a failed parent, policy wait (the queue's default): the child waits;
-- the parent's replay and success releases it
SELECT task_id AS f FROM ntask_enqueue('dg2', 'f', '{}') \gset
SELECT task_id AS fw FROM ntask_enqueue('dg2', 'fw', '{}', depends_on => ARRAY['f']) \gset
SELECT task_id AS fc FROM ntask_enqueue('dg2', 'fc', '{}', depends_on => ARRAY['f'],
	on_parent_failed => 'cancel') \gset
SELECT token FROM ntask_claim('dg2', 'W1');
SELECT result, state FROM ntask_transition(:f, tok(:f, 1), 'repair_required', error_class => 'permanent');
SELECT task_key, state, reason FROM ntask.task WHERE task_id IN (:fw, :fc) ORDER BY 1;
SELECT action, from_state, to_state, reason FROM ntask.audit WHERE task_id = :fc;
SELECT detail FROM ntask_explain(:fw) WHERE event = 'now';
SELECT ntask_replay(:f, 'ops', 'fixed the input');
SELECT token FROM ntask_claim('dg2', 'W1');
SELECT result, state FROM ntask_transition(:f, tok(:f, 2), 'succeeded');
SELECT task_key, state FROM ntask.task WHERE task_id IN (:fw, :fc) ORDER BY 1;

-- the queue's policy cancel, recursively; a parent already failed at enqueue
SELECT task_id AS g FROM ntask_enqueue('dgc', 'g', '{}') \gset
SELECT task_id AS g1 FROM ntask_enqueue('dgc', 'g1', '{}', depends_on => ARRAY['g']) \gset
SELECT task_id AS g2 FROM ntask_enqueue('dgc', 'g2', '{}', depends_on => ARRAY['g1']) \gset
SELECT ntask_cancel(:g, 'ops', 'not needed');
SELECT task_key, state, reason FROM ntask.task WHERE task_id IN (:g, :g1, :g2) ORDER BY 1;
SELECT created, state FROM ntask_enqueue('dgc', 'g3', '{}', depends_on => ARRAY['g']);
-- policy wait on a parent already canceled: to repair at once (it can
-- never succeed; issue 46.3)
SELECT created, state FROM ntask_enqueue('dgc', 'g4', '{}', depends_on => ARRAY['g'],
	on_parent_failed => 'wait');
SELECT state, reason FROM ntask.task WHERE queue = 'dgc' AND task_key = 'g4';
-- a waiting task can be canceled by an operator, not replayed
SELECT task_id AS gp FROM ntask_enqueue('dgc', 'gp', '{}') \gset
SELECT task_id AS g5 FROM ntask_enqueue('dgc', 'g5', '{}', depends_on => ARRAY['gp']) \gset
\set VERBOSITY sqlstate
SELECT ntask_replay(:g5, 'ops', 'no');
\set VERBOSITY default
SELECT ntask_cancel(:g5, 'ops', 'give up');
SELECT ntask_cancel(:gp, 'ops', 'give up');

-- budget: a waiting task spends none, its deadline starts when ready
SELECT task_id AS h FROM ntask_enqueue('dg', 'h', '{}') \gset
SELECT task_id AS hc FROM ntask_enqueue('dg', 'hc', '{}', depends_on => ARRAY['h']) \gset
SELECT ntask_housekeeping();
SELECT state, attempts, max_attempts FROM ntask.task WHERE task_id = :hc;

-- hostile input
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', depends_on => ARRAY['nope']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', depends_on => ARRAY['nosuchqueue:a']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dg', 'a', '{"n": 1}', depends_on => ARRAY['a']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', depends_on => ARRAY['x1']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('dg', ARRAY['x1', 'x2'], ARRAY['{}', '{}']::jsonb[], depends_on => ARRAY['dg:x2']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', depends_on => ARRAY['a', NULL]);
\echo :SQLSTATE
\set VERBOSITY sqlstate
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', depends_on => ARRAY['a', 'dg:a']);
\set VERBOSITY default
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', depends_on => ARRAY['a'], on_parent_failed => 'explode');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', on_parent_failed => 'cancel');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('dg', on_parent_failed => 'sometimes');
\echo :SQLSTATE
SET ntask.max_parents = 2;
SELECT * FROM ntask_enqueue('dg', 'x1', '{}', depends_on => ARRAY['a', 'p', 'h']);
\echo :SQLSTATE
RESET ntask.max_parents;
SELECT created, state FROM ntask_enqueue('dg', 'x0', '{}', depends_on => '{}');
SELECT * FROM ntask_enqueue('nosuchqueue', 'x1', '{}', depends_on => ARRAY['a']);
\echo :SQLSTATE
-- cross-queue without the producer right on the parent's queue: 42501,
-- whether or not the parent exists
CREATE ROLE regress_dep_producer;
GRANT ntask_producer TO regress_dep_producer;
CREATE ROLE regress_dep_private;
SELECT ntask_queue_set_roles('dg2', producer_role => 'regress_dep_private', worker_role => NULL);
SET ROLE regress_dep_producer;
SELECT * FROM ntask_enqueue('dg', 'x2', '{}', depends_on => ARRAY['dg2:b']);
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('dg', 'x2', '{}', depends_on => ARRAY['dg2:nothing-here']);
\echo :SQLSTATE
SELECT created, state FROM ntask_enqueue('dg', 'x2', '{}', depends_on => ARRAY['a']);
RESET ROLE;
SELECT ntask_queue_set_roles('dg2', producer_role => NULL, worker_role => NULL);
DROP ROLE regress_dep_producer, regress_dep_private;
-- nothing was written by the refused calls
SELECT count(*) AS refused_written FROM ntask.task WHERE task_key = 'x1';

-- retention prunes a finished child's dependency rows with it
SELECT count(*) AS c_deps_before FROM ntask.task_dep WHERE task_id = :c;
SELECT queue FROM ntask_queue_set('dg', retention => '1 microsecond');
SELECT pg_sleep(0.01);
SELECT ntask_housekeeping() IS NOT NULL AS ran;
SELECT count(*) AS c_deps_after, (SELECT count(*) FROM ntask.task WHERE task_id = :c) AS c_rows
FROM ntask.task_dep WHERE task_id = :c;
