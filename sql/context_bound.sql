-- context_bound: the claim's context has a size bound (issue 45.2): a
-- task's checkpoints within ntask.max_context_bytes (54000 past it), its
-- parents' results within the same (the rest named in parents_omitted, to
-- be read with ntask_result), a claim's context within
-- ntask.max_claim_context_bytes (later tasks "deferred": true, read whole
-- by ntask_context)
-- (ids from a fixed start: the errors name tasks)
SELECT setval('ntask.task_task_id_seq', 910000, false);
SELECT setval('ntask.token_seq', 910000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('cb');
SET ntask.max_context_bytes = '4kB';
SELECT task_id AS t FROM ntask_enqueue('cb', 't1', '{}') \gset
SELECT token FROM ntask_claim('cb', 'W1');
SELECT ntask_checkpoint(:t, tok(:t, 1), 's1', to_jsonb(repeat('a', 1500)));
SELECT ntask_checkpoint(:t, tok(:t, 1), 's2', to_jsonb(repeat('b', 1500)));
-- the third would bring the task's checkpoints past 4 kB
SELECT ntask_checkpoint(:t, tok(:t, 1), 's3', to_jsonb(repeat('c', 1500)));
\echo :SQLSTATE
-- a repeat of a step already written is still answered
SELECT ntask_checkpoint(:t, tok(:t, 1), 's2', to_jsonb(repeat('b', 1500)));
SELECT ntask_checkpoint(:t, tok(:t, 1), 's3', '"small"');
-- one value alone larger than the bound
SELECT task_id AS t2 FROM ntask_enqueue('cb', 't2', '{}') \gset
SELECT token FROM ntask_claim('cb', 'W1');
SELECT ntask_checkpoint(:t2, tok(:t2, 1), 'big', to_jsonb(repeat('x', 5000)));
\echo :SQLSTATE
SELECT ntask_release(:t, tok(:t, 1));
SELECT ntask_release(:t2, tok(:t2, 1));
SELECT task_key, jsonb_object_keys(context) FROM ntask_claim('cb', 'W1', 10) ORDER BY 1, 2;

-- parents: their results in the context while they fit in 4 kB; the rest
-- named in parents_omitted, and ntask_result reads them
SELECT queue FROM ntask_queue_set('cbp');
SELECT count(*) FROM ntask_enqueue_many('cbp', ARRAY['p1', 'p2', 'p3', 'p4', 'p5'],
	ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[]);
SELECT created FROM ntask_enqueue('cbp', 'child', '{}', depends_on => ARRAY['p1', 'p2', 'p3', 'p4', 'p5']);
SELECT count(*) FROM ntask_claim('cbp', 'W1', 5) c,
	ntask_transition(c.task_id, c.token, 'succeeded',
					 result => jsonb_build_object('rows', repeat(c.task_key, 700)));
SELECT task_key, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(context->'parents') k) AS parents,
	   context->'parents_omitted' AS omitted
FROM ntask_claim('cbp', 'W1');
SELECT length(result->>'rows') FROM ntask_result('cbp', 'p5');
RESET ntask.max_context_bytes;

-- the claim's budget: 64 kB in all; each task carries 30 kB of checkpoints
SET ntask.max_claim_context_bytes = '64kB';
SELECT queue FROM ntask_queue_set('cbc');
SELECT count(*) FROM ntask_enqueue_many('cbc', ARRAY(SELECT 'k' || i FROM generate_series(1, 5) i),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)));
SELECT count(*) FROM ntask_claim('cbc', 'W1', 5) c,
	ntask_checkpoint(c.task_id, c.token, 'fetch', to_jsonb(repeat('z', 30000)));
SELECT count(*) FROM ntask_claim('cbc', 'W1', 5) c;	-- none: all leased
SELECT count(ntask_release(task_id, tok(task_id, 1))) FROM ntask.task WHERE queue = 'cbc';
CREATE TEMP TABLE cbc_claim AS
SELECT task_id, token, task_key, context FROM ntask_claim('cbc', 'W1', 5);
SELECT count(*) FILTER (WHERE context ? 'checkpoints') AS whole,
	   count(*) FILTER (WHERE context = '{"deferred": true}') AS deferred
FROM cbc_claim;
-- a deferred task's worker reads its whole context
SELECT length(ntask_context(task_id, token)->'checkpoints'->>'fetch')
FROM cbc_claim WHERE context ? 'deferred' ORDER BY task_key LIMIT 1;
-- the same for a task already whole, and NULL once the token lost it
SELECT ntask_context(task_id, token) = context AS same FROM cbc_claim
WHERE context ? 'checkpoints' ORDER BY task_key LIMIT 1;
SELECT task_id AS lost FROM cbc_claim ORDER BY task_key LIMIT 1 \gset
SELECT ntask_release(:lost, tok(:lost, 2));
SELECT ntask_context(:lost, tok(:lost, 2)) IS NULL AS lost_is_null;
-- (the task and token vary with the claim's order of equal due times)
\set VERBOSITY sqlstate
SELECT ntask_context(:lost, tok(:lost, 9));
\echo :SQLSTATE
\set VERBOSITY default
SELECT ntask_context(-1, 1);
\echo :SQLSTATE
SELECT ntask_context(NULL, 1);
\echo :SQLSTATE
-- rights: a role without ntask_worker may not call it (42501, EXECUTE);
-- one with ntask_worker but not the queue's worker_role gets 42501 too,
-- and learns nothing of the task
SELECT task_id AS held, token AS held_token FROM cbc_claim ORDER BY task_key OFFSET 1 LIMIT 1 \gset
CREATE ROLE regress_cb_none;
CREATE ROLE regress_cb_worker;
GRANT ntask_worker TO regress_cb_worker;
CREATE ROLE regress_cb_private;
SELECT ntask_queue_set_roles('cbc', producer_role => NULL, worker_role => 'regress_cb_private');
SET ROLE regress_cb_none;
SELECT ntask_context(:held, :held_token);
\echo :SQLSTATE
RESET ROLE;
SET ROLE regress_cb_worker;
SELECT ntask_context(:held, :held_token);
\echo :SQLSTATE
RESET ROLE;
GRANT regress_cb_private TO regress_cb_worker;
SET ROLE regress_cb_worker;
SELECT ntask_context(:held, :held_token) ? 'checkpoints' AS with_the_right;
RESET ROLE;
SELECT ntask_queue_set_roles('cbc', producer_role => NULL, worker_role => NULL);
DROP ROLE regress_cb_none, regress_cb_worker, regress_cb_private;
RESET ntask.max_claim_context_bytes;
SHOW ntask.max_context_bytes;
SHOW ntask.max_claim_context_bytes;
