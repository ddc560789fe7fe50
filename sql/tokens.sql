-- issue 46.1: a token names one attempt of one task.  Tokens come from one
-- sequence per node, so a worker that reports on the wrong task id with its
-- own token is refused (NT003), and the real holder's report applies.
SELECT setval('ntask.task_task_id_seq', 47000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 47000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('tok', max_attempts => 5);
SELECT count(*) FROM ntask_enqueue_many('tok', ARRAY['a', 'b'],
	ARRAY['{}', '{}']::jsonb[]);
SELECT task_id AS ta, token AS tka FROM ntask_claim('tok', 'WA') \gset
SELECT task_id AS tb, token AS tkb FROM ntask_claim('tok', 'WB') \gset
SELECT :tka <> :tkb AS tokens_differ, :tb = :ta + 1 AS next_task;
\set VERBOSITY sqlstate
-- WA's token on WB's task: every call that takes a token refuses it
SELECT ntask_transition(:tb, :tka, 'succeeded');
\echo :SQLSTATE
SELECT ntask_heartbeat(:tb, :tka);
\echo :SQLSTATE
SELECT ntask_invoked(:tb, :tka);
\echo :SQLSTATE
SELECT ntask_release(:tb, :tka);
\echo :SQLSTATE
SELECT ntask_receipt(:tb, :tka, '{"x": 1}');
\echo :SQLSTATE
SELECT ntask_checkpoint(:tb, :tka, 'step', '1');
\echo :SQLSTATE
SELECT ntask_context(:tb, :tka);
\echo :SQLSTATE
SELECT ntask_await(:tb, :tka, 'sig');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:tb], ARRAY[:tka], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_and_claim(:tb, :tka, 'succeeded', 'tok', 'WA');
\echo :SQLSTATE
-- and WB's token on WA's task
SELECT ntask_transition(:ta, :tkb, 'succeeded');
\echo :SQLSTATE
\set VERBOSITY default
-- the real holders report and are applied
SELECT ntask_transition(:tb, :tkb, 'succeeded') AS wb;
SELECT (ntask_transition(:ta, :tka, 'retry_wait', 'transient',
	retry_at => now() - interval '1 second')).result AS wa;
-- a task's tokens still only grow, and its old token gets the answer it got
-- before (conflict: the task is leased again), not NT003: the ledger names it
SELECT task_id = :ta AS same_task, token AS tka2 FROM ntask_claim('tok', 'WA') \gset
SELECT :'same_task'::boolean AS same_task, :tka2 > :tka AS grew;
SELECT (ntask_transition(:ta, :tka, 'succeeded')).result AS old_token;
SELECT ntask_heartbeat(:ta, :tka) IS NULL AS old_heartbeat_null;
SELECT count(*) AS ended, bool_and(token = :tka) AS its_first FROM ntask.attempt WHERE task_id = :ta;
-- a token between two of the task's own (here WB's), never issued to it,
-- a token above its latest and a token below 1 are NT003
\set VERBOSITY sqlstate
SELECT ntask_transition(:ta, :tkb, 'succeeded') WHERE :tkb > :tka AND :tkb < :tka2;
\echo :SQLSTATE
SELECT ntask_transition(:ta, :tka2 + 1, 'succeeded');
\echo :SQLSTATE
SELECT ntask_transition(:ta, 0, 'succeeded');
\echo :SQLSTATE
\set VERBOSITY default
SELECT ntask_transition(:ta, :tka2, 'succeeded') AS wa2;
-- one claim of many tasks hands out distinct tokens
SELECT count(*) FROM ntask_enqueue_many('tok', ARRAY['c', 'd', 'e', 'f', 'g'],
	ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[]);
SELECT count(*) AS claimed, count(DISTINCT token) AS distinct_tokens
FROM ntask_claim('tok', 'WC', max_tasks => 10);
-- the tokens of every task ever leased here are distinct
SELECT count(*) = count(DISTINCT a.token) AS unique_in_ledger
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'tok';
-- a task whose token is above the sequence (a restore of the table without
-- its sequence, say) still gets a higher token at its next claim, and the
-- sequence moves past it, so the next task's token is unique too
SELECT count(*) AS enqueued FROM ntask_enqueue('tok', 'h', '{}');
UPDATE ntask.task SET token = token + 1000000 WHERE queue = 'tok' AND task_key = 'h'
RETURNING token AS high \gset
SELECT token > :high AS above_its_own FROM ntask_claim('tok', 'WD');
SELECT count(*) AS enqueued FROM ntask_enqueue('tok', 'i', '{}');
SELECT token > :high + 1 AS next_above_too FROM ntask_claim('tok', 'WD');
-- nobody but the extension's statements draws or moves tokens: a worker
-- role (and any role) may not call token_next or token_floor, draw from the
-- sequence or set it
CREATE ROLE regress_tok_worker IN ROLE ntask_worker;
SET ROLE regress_tok_worker;
\set VERBOSITY sqlstate
SELECT ntask.token_next(1, 1);
\echo :SQLSTATE
SELECT ntask.token_floor(1::smallint);
\echo :SQLSTATE
SELECT nextval('ntask.token_seq');
\echo :SQLSTATE
SELECT setval('ntask.token_seq', 1);
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
SELECT has_function_privilege('public', 'ntask.token_next(bigint, bigint)', 'EXECUTE') AS public_may_draw,
	   has_sequence_privilege('ntask_worker', 'ntask.token_seq', 'USAGE') AS worker_may_draw;
DROP ROLE regress_tok_worker;
