-- result: a succeeded task's stored result, the replay of a retried
-- request (seed 002) and ntask_result
SELECT setval('ntask.token_seq', 60000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('exports', max_attempts => 3);

-- a result is stored with succeeded and returned to a duplicate enqueue
SELECT created, state, outcome, result
FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-12"}');
SELECT task_id AS e1 FROM ntask_claim('exports', 'W1') \gset
SELECT * FROM ntask_transition(:e1, tok(:e1, 1), 'succeeded', outcome => 'exported',
                               result => '{"url": "s3://exports/u-1/2026-12.csv", "rows": 42}');
SELECT task_id = :e1 AS same_task, created, state, outcome, result
FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"month": "2026-12", "user": "u-1"}');
SELECT state, outcome, result, finished_at IS NOT NULL AS finished
FROM ntask_result('exports', 'export:u-1:2026-12');
-- a task still running: its state, no result yet; an unknown key: no row
SELECT task_id AS e2 FROM ntask_enqueue('exports', 'export:u-2:2026-12', '{"user": "u-2"}') \gset
SELECT * FROM ntask_result('exports', 'export:u-2:2026-12');
SELECT count(*) FROM ntask_result('exports', 'export:nobody');
-- changed parameters: a conflict, nothing revealed, nothing written
SELECT * FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-11"}');

-- the same succeeded again (a lost response): duplicate; another result: conflict
SELECT * FROM ntask_transition(:e1, tok(:e1, 1), 'succeeded', outcome => 'exported',
                               result => '{"rows": 42, "url": "s3://exports/u-1/2026-12.csv"}');
SELECT * FROM ntask_transition(:e1, tok(:e1, 1), 'succeeded', outcome => 'exported',
                               result => '{"url": "s3://exports/u-1/other.csv", "rows": 42}');
SELECT * FROM ntask_transition(:e1, tok(:e1, 1), 'succeeded', outcome => 'exported');
SELECT result FROM ntask.task WHERE task_id = :e1;

-- a result only with succeeded; a NULL result stores nothing
SELECT token FROM ntask_claim('exports', 'W1');
SELECT * FROM ntask_transition(:e2, tok(:e2, 1), 'retry_wait', result => '{"partial": true}');
SELECT * FROM ntask_transition(:e2, tok(:e2, 1), 'repair_required', result => '{}');
SELECT * FROM ntask_transition(:e2, tok(:e2, 1), 'succeeded', result => NULL);
SELECT state, outcome, result FROM ntask_result('exports', 'export:u-2:2026-12');

-- the size cap: ntask.max_result_bytes (54000 when larger)
SELECT task_id AS e3 FROM ntask_enqueue('exports', 'export:u-3:2026-12', '{"user": "u-3"}') \gset
SELECT token FROM ntask_claim('exports', 'W1');
SET ntask.max_result_bytes = 100;
SELECT * FROM ntask_transition(:e3, tok(:e3, 1), 'succeeded',
                               result => jsonb_build_object('blob', repeat('x', 200)));
SELECT state FROM ntask.task WHERE task_id = :e3;
SELECT * FROM ntask_transition(:e3, tok(:e3, 1), 'succeeded', result => '{"ok": true}');
RESET ntask.max_result_bytes;

-- the batch and combined calls store results too
SELECT min(task_id) AS b1, min(task_id) + 1 AS b2, min(task_id) + 2 AS b3
FROM ntask_enqueue_many('exports', ARRAY['b:1', 'b:2', 'b:3'],
                        ARRAY['{}', '{}', '{}']::jsonb[]) \gset
SELECT count(*) FROM ntask_claim('exports', 'W1', 3);
SELECT result, state FROM ntask_transition_many(ARRAY[:b2, :b1, :b3], ARRAY[tok(:b2, 1), tok(:b1, 1), tok(:b3, 1)], 'succeeded',
                                    results => ARRAY['{"n": 4}', NULL, '{"n": 5}']::jsonb[]);
SELECT task_key, result FROM ntask.task WHERE task_id BETWEEN :b1 AND :b3 ORDER BY task_id;
SELECT created, result FROM ntask_enqueue_many('exports', ARRAY['b:2', 'b:3'],
                                                        ARRAY['{}', '{}']::jsonb[]);
-- a stale element of a batch is classified one by one, with its own result
SELECT result, state FROM ntask_transition_many(ARRAY[:b3], ARRAY[tok(:b3, 1)], 'succeeded',
                                    results => ARRAY['{"n": 5}']::jsonb[]);
SELECT result, state FROM ntask_transition_many(ARRAY[:b3], ARRAY[tok(:b3, 1)], 'succeeded',
                                    results => ARRAY['{"n": 6}']::jsonb[]);
SELECT result, state FROM ntask_transition_many(ARRAY[:b3], ARRAY[tok(:b3, 1)], 'succeeded',
                                    results => ARRAY['{"n": 5}', '{}']::jsonb[]);
SELECT result, state FROM ntask_transition_many(ARRAY[:b3], ARRAY[tok(:b3, 1)], 'canceled',
                                    results => ARRAY['{"n": 5}']::jsonb[]);
SET ntask.max_result_bytes = 20;
SELECT result, state FROM ntask_transition_many(ARRAY[:b3], ARRAY[tok(:b3, 1)], 'succeeded',
                                    results => ARRAY[jsonb_build_object('x', repeat('y', 40))]);
RESET ntask.max_result_bytes;
SELECT count(*) FROM ntask_enqueue_many('exports', ARRAY['c:1', 'c:2'], ARRAY['{}', '{}']::jsonb[]);
SELECT task_id AS c1 FROM ntask_claim('exports', 'W1') \gset
SELECT task_key, token, finish_result, finish_state
FROM ntask_transition_and_claim(:c1, tok(:c1, 1), 'succeeded', 'exports', 'W1', result => '{"c": 1}');
SELECT state, result FROM ntask_result('exports', 'c:1');

-- seed 002: rights are checked before anything is revealed
CREATE ROLE regress_r_app IN ROLE ntask_producer;
CREATE ROLE regress_r_other IN ROLE ntask_producer;
CREATE ROLE regress_r_exporters;
GRANT regress_r_exporters TO regress_r_app;
SELECT ntask_queue_set_roles('exports', 'regress_r_exporters', NULL);
-- the app may replay: it gets the first run's answer
SET ROLE regress_r_app;
SELECT created, state, outcome, result
FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-12"}');
SELECT state, outcome, result FROM ntask_result('exports', 'export:u-1:2026-12');
-- same rights, different parameters: conflict
SELECT * FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-01"}');
RESET ROLE;
-- another resource: a producer without the queue's right gets the same
-- 42501 for a key that exists and for one that does not
SET ROLE regress_r_other;
SELECT * FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-12"}');
SELECT * FROM ntask_enqueue('exports', 'export:never', '{}');
SELECT * FROM ntask_result('exports', 'export:u-1:2026-12');
SELECT * FROM ntask_result('exports', 'export:never');
RESET ROLE;
-- the key and the payload digest are idempotency checks, not an access
-- boundary: any role with the queue's producer right that knows a key reads
-- its result (README "Results"); a different payload gets NT001, no result
CREATE ROLE regress_r_peer IN ROLE ntask_producer, regress_r_exporters;
SET ROLE regress_r_peer;
SELECT state, outcome, result FROM ntask_result('exports', 'export:u-1:2026-12');
SELECT * FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"guess": true}');
RESET ROLE;
DROP ROLE regress_r_peer;
-- revoked right: the app that succeeded once is refused now
REVOKE regress_r_exporters FROM regress_r_app;
SET ROLE regress_r_app;
SELECT * FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{"user": "u-1", "month": "2026-12"}');
SELECT * FROM ntask_result('exports', 'export:u-1:2026-12');
RESET ROLE;
-- nothing new was written by any refused call
SELECT count(*) AS tasks FROM ntask.task WHERE queue = 'exports';
SELECT count(*) AS exported FROM ntask.task WHERE task_key = 'export:never';
-- a role without ntask_producer cannot call it at all
CREATE ROLE regress_r_nobody;
SET ROLE regress_r_nobody;
SELECT * FROM ntask_result('exports', 'export:u-1:2026-12');
RESET ROLE;
-- bad input
SELECT * FROM ntask_result(NULL, 'k');
SELECT * FROM ntask_result('exports', '');
SELECT * FROM ntask_result('no_such_queue', 'k');

SELECT ntask_queue_set_roles('exports', NULL, NULL);
DROP ROLE regress_r_app, regress_r_other, regress_r_exporters, regress_r_nobody;
