-- trace context (issue 35.6): ntask_enqueue(..., traceparent) or the
-- setting ntask.traceparent, stored with the task, handed on by the claim
-- in its context column with a span id per attempt
SELECT setval('ntask.task_task_id_seq', 35600, false) AS first_task_id;
SELECT setval('ntask.token_seq', 35600, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('tr', lease => '1 hour');
SELECT task_id AS t1 FROM ntask_enqueue('tr', 't1', traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') \gset
SELECT traceparent FROM ntask.task WHERE task_id = :t1;
-- a task without one: context NULL
SELECT task_id AS t0 FROM ntask_enqueue('tr', 't0') \gset
SELECT task_key, context FROM ntask_claim('tr', 'W1', max_tasks => 2) ORDER BY task_id;
-- the claim's traceparent: the same trace id and flags, a span id of this attempt
UPDATE ntask.task SET lease_until = now() - interval '1 s', due_at = now() - interval '1 s' WHERE task_id = :t1;
SELECT context->>'traceparent' AS second FROM ntask_claim('tr', 'W2') \gset
SELECT :'second' ~ '^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$' AS same_trace,
	   split_part(:'second', '-', 3) <> '00f067aa0ba902b7' AS own_span,
	   split_part(:'second', '-', 3) <> '0000000000000000' AS span_not_zero;
-- ntask_transition_and_claim has the column too, last
SELECT task_id AS t2 FROM ntask_enqueue('tr', 't2', traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00') \gset
SELECT finish_result, task_key, context->>'traceparent' ~ '^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-00$' AS traced
FROM ntask_transition_and_claim(:t1, tok(:t1, 2), 'succeeded', 'tr', 'W2');
SELECT finish_result, task_key, context FROM ntask_transition_and_claim(:t2, tok(:t2, 1), 'succeeded', 'tr', 'W2');
-- a trace context written into the table by hand is checked again: a
-- malformed one hands nothing on
SELECT task_id AS t3 FROM ntask_enqueue('tr', 't3') \gset
UPDATE ntask.task SET traceparent = '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01' WHERE task_id = :t3;
SELECT task_key, context FROM ntask_claim('tr', 'W3');
-- ntask_explain shows it
SELECT detail ~ 'traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' AS shown
FROM ntask_explain(:t1) WHERE event = 'enqueued';

-- the setting: the session's enqueues get it, an argument wins, '' is none
SET ntask.traceparent = '00-11111111111111111111111111111111-2222222222222222-01';
SELECT task_id AS s1 FROM ntask_enqueue('tr', 's1') \gset
SELECT task_id AS s2 FROM ntask_enqueue('tr', 's2', traceparent => '00-33333333333333333333333333333333-4444444444444444-00') \gset
SELECT task_id AS s3 FROM ntask_enqueue('tr', 's3', traceparent => '') \gset
SELECT count(*) FROM ntask_enqueue_many('tr', '{m1,m2}', '{"{}","{}"}');
SELECT count(*) FROM ntask_enqueue_many('tr', '{m3}', '{"{}"}', traceparent => '00-55555555555555555555555555555555-6666666666666666-01');
RESET ntask.traceparent;
SELECT task_key, traceparent FROM ntask.task WHERE queue = 'tr' AND task_key IN ('s1', 's2', 's3', 'm1', 'm2', 'm3') ORDER BY 1;
-- a duplicate enqueue is not a conflict, whatever its trace context
SELECT created FROM ntask_enqueue('tr', 's1', traceparent => '00-77777777777777777777777777777777-8888888888888888-01');

-- malformed trace contexts: 22023 by argument, refused by the setting;
-- the detail says what is wrong
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01');
SET ntask.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01';
\set VERBOSITY terse
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => 'nonsense');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00-00000000000000000000000000000000-00f067aa0ba902b7-01');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('tr', 'bad', traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' || repeat('x', 5000));
\echo :SQLSTATE
SELECT * FROM ntask_enqueue_many('tr', '{bad}', '{"{}"}', traceparent => 'nonsense');
\echo :SQLSTATE
SET ntask.traceparent = 'nonsense';
\echo :SQLSTATE
SET ntask.traceparent = '00-00000000000000000000000000000000-00f067aa0ba902b7-01';
\echo :SQLSTATE
SET ntask.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ';
\echo :SQLSTATE
SELECT set_config('ntask.traceparent', 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', false);
\echo :SQLSTATE
\set VERBOSITY default
SHOW ntask.traceparent;
SELECT count(*) AS nothing_stored FROM ntask.task WHERE queue = 'tr' AND task_key = 'bad';
