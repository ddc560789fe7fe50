-- guard: a per-queue check before hand-out (and before replay)
-- task ids start at 6000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 6000, false) AS first_task_id;
CREATE TABLE msg (id text PRIMARY KEY, version int NOT NULL);
CREATE TABLE member (conv text, user_id text, PRIMARY KEY (conv, user_id));
INSERT INTO msg VALUES ('m-9', 1), ('m-10', 1), ('m-11', 1);
INSERT INTO member VALUES ('c-a', 'u-b');
CREATE FUNCTION notify_guard(task_key text, payload jsonb) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM member WHERE conv = payload->>'conv' AND user_id = payload->>'to')
      THEN 'cancel: recipient is no longer a member'
    WHEN (SELECT version FROM msg WHERE id = payload->>'msg') <> (payload->>'v')::int
      THEN 'skip: message edited to v' || (SELECT version FROM msg WHERE id = payload->>'msg')
    ELSE 'proceed'
  END
$$;
SELECT queue, guard FROM ntask_queue_set('g', max_attempts => 3, guard => 'notify_guard(text, jsonb)');
SELECT task_id AS g9 FROM ntask_enqueue('g', 'notify:u-b:m-9:v1', '{"msg": "m-9", "v": 1, "conv": "c-a", "to": "u-b"}') \gset
SELECT task_id AS g10 FROM ntask_enqueue('g', 'notify:u-b:m-10:v1', '{"msg": "m-10", "v": 1, "conv": "c-a", "to": "u-b"}') \gset
SELECT task_id AS g11 FROM ntask_enqueue('g', 'notify:u-c:m-11:v1', '{"msg": "m-11", "v": 1, "conv": "c-a", "to": "u-c"}') \gset
-- m-10 was edited to v2 before the worker got to it
UPDATE msg SET version = 2 WHERE id = 'm-10';
SELECT task_key, attempt, token FROM ntask_claim('g', 'W1', max_tasks => 10);
SELECT task_key, state, reason, attempts, token FROM ntask.task WHERE queue = 'g' ORDER BY task_id;
-- guarded claims keep looking past skipped tasks to fill max_tasks
SELECT task_id AS g12 FROM ntask_enqueue('g', 'notify:u-b:m-10:v1-b', '{"msg": "m-10", "v": 1, "conv": "c-a", "to": "u-b"}') \gset
SELECT task_id AS g13 FROM ntask_enqueue('g', 'notify:u-b:m-11:v1', '{"msg": "m-11", "v": 1, "conv": "c-a", "to": "u-b"}') \gset
SELECT task_key FROM ntask_claim('g', 'W1', max_tasks => 1);
SELECT state FROM ntask.task WHERE task_id = :g12;
-- the guard runs again on replay
SELECT result FROM ntask_transition(:g9, 1, 'repair_required');
DELETE FROM member WHERE user_id = 'u-b';
SELECT ntask_replay(:g9, 'alice', 'provider fixed');
SELECT state, reason FROM ntask.task WHERE task_id = :g9;
SELECT action, reason, from_state, to_state FROM ntask.audit WHERE task_id = :g9;
-- a guard must have the right signature
CREATE FUNCTION bad_guard(bigint) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
SELECT queue FROM ntask_queue_set('g', guard => 'bad_guard(bigint)');
\echo :SQLSTATE
-- a guard that answers nonsense stops the claim with a clear error
CREATE FUNCTION silly_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'maybe' $$;
CREATE FUNCTION null_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT NULL::text $$;
SELECT queue FROM ntask_queue_set('g2', guard => 'silly_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g2', 'x');
SELECT * FROM ntask_claim('g2', 'W1');
\echo :SQLSTATE
SELECT queue FROM ntask_queue_set('g2', guard => 'null_guard(text, jsonb)');
SELECT * FROM ntask_claim('g2', 'W1');
\echo :SQLSTATE
-- the failed claims changed nothing
SELECT state, attempts, token FROM ntask.task WHERE queue = 'g2';
-- remove the guard: the task is handed out
SELECT ntask_queue_clear_guard('g2');
SELECT guard FROM ntask.queue WHERE queue = 'g2';
SELECT task_key, token FROM ntask_claim('g2', 'W1');
SELECT ntask_queue_clear_guard('nope');
\echo :SQLSTATE
