-- guard: a per-queue check before hand-out (and before replay)
-- task ids start at 6000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 6000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 6000, false) AS first_token \gset
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
SELECT result FROM ntask_transition(:g9, tok(:g9, 1), 'repair_required');
DELETE FROM member WHERE user_id = 'u-b';
SELECT ntask_replay(:g9, 'alice', 'provider fixed');
SELECT state, reason FROM ntask.task WHERE task_id = :g9;
SELECT action, reason, from_state, to_state FROM ntask.audit WHERE task_id = :g9;
-- a guard must have the right signature
CREATE FUNCTION bad_guard(bigint) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
SELECT queue FROM ntask_queue_set('g', guard => 'bad_guard(bigint)');
\echo :SQLSTATE
-- a guard that fails (nonsense, NULL, an error, a lost EXECUTE right) does
-- not stop its queue: that task goes to repair_required with reason
-- guard_error, the error text in the audit log, and the claim goes on
CREATE FUNCTION silly_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'maybe' $$;
CREATE FUNCTION null_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT NULL::text $$;
CREATE FUNCTION boom_guard(k text, p jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  IF p ? 'boom' THEN RAISE EXCEPTION 'boom on %', k; END IF;
  RETURN 'proceed';
END $$;
SELECT queue FROM ntask_queue_set('g2', guard => 'silly_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g2', 'x');
SELECT * FROM ntask_claim('g2', 'W1');
\echo :SQLSTATE
SELECT queue FROM ntask_queue_set('g2', guard => 'null_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g2', 'y');
SELECT * FROM ntask_claim('g2', 'W1');
\echo :SQLSTATE
SELECT task_key, state, reason, attempts, token, last_error_class, last_error_stage
FROM ntask.task WHERE queue = 'g2' ORDER BY task_key;
SELECT t.task_key, a.actor, a.action, a.reason, a.from_state, a.to_state
FROM ntask.audit a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'g2' ORDER BY a.audit_id;
SELECT task_key, reason, last_error_stage FROM ntask.repair_queue WHERE queue = 'g2' ORDER BY 1;
-- one task whose guard raises does not keep the next one from being handed out
SELECT queue FROM ntask_queue_set('g2', guard => 'boom_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g2', 'z-boom', '{"boom": 1}', priority => 5);
SELECT created FROM ntask_enqueue('g2', 'z-fine', '{}');
SELECT task_key, token FROM ntask_claim('g2', 'W1', max_tasks => 5);
SELECT task_key, state, reason FROM ntask.task WHERE queue = 'g2' AND task_key LIKE 'z-%' ORDER BY 1;
SELECT a.reason FROM ntask.audit a JOIN ntask.task t USING (task_id)
WHERE t.task_key = 'z-boom' AND a.action = 'guard_error';
-- the guard is stored by name, schema-qualified, and is a dependency: it
-- cannot be dropped while a queue uses it (a rename or move is not
-- refused: the guard then does not resolve, see below)
SELECT guard FROM ntask.queue WHERE queue = 'g2';
DROP FUNCTION boom_guard(text, jsonb);
\echo :SQLSTATE
CREATE SCHEMA guards;
ALTER FUNCTION boom_guard(text, jsonb) SET SCHEMA guards;
ALTER FUNCTION guards.boom_guard(text, jsonb) RENAME TO boom_guard2;
ALTER FUNCTION guards.boom_guard2(text, jsonb) RENAME TO boom_guard;
ALTER FUNCTION guards.boom_guard(text, jsonb) SET SCHEMA public;
DROP SCHEMA guards;
-- remove the guard: replayed, the tasks are handed out
SELECT ntask_queue_clear_guard('g2');
SELECT guard FROM ntask.queue WHERE queue = 'g2';
SELECT ntask_replay(task_id, 'alice', 'guard fixed') FROM ntask.task
WHERE queue = 'g2' AND state = 'repair_required' ORDER BY task_id;
SELECT task_key, token FROM ntask_claim('g2', 'W1', max_tasks => 5) ORDER BY task_key;
SELECT ntask_queue_clear_guard('nope');
\echo :SQLSTATE
DROP FUNCTION boom_guard(text, jsonb);

-- a guard runs as its owner, never as the claimer, in a restricted security
-- context and with search_path pinned to pg_catalog, its schema, pg_temp
CREATE ROLE regress_guard_admin;
GRANT ntask_admin TO regress_guard_admin;
CREATE ROLE regress_guard_worker;
GRANT ntask_worker TO regress_guard_worker;
CREATE SCHEMA regress_gs AUTHORIZATION regress_guard_admin;
CREATE TABLE public.guard_seen (who name, sp text, k text);
GRANT INSERT ON public.guard_seen TO regress_guard_admin;
SET ROLE regress_guard_admin;
CREATE FUNCTION regress_gs.whoami(k text, p jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.guard_seen VALUES (current_user, current_setting('search_path'), k);
  IF p ? 'escalate' THEN EXECUTE 'ALTER ROLE regress_guard_admin SUPERUSER'; END IF;
  IF p ? 'setrole' THEN EXECUTE 'SET ROLE NONE'; END IF;
  RETURN 'proceed';
END $$;
SELECT queue, guard FROM ntask_queue_set('g3', guard => 'regress_gs.whoami(text, jsonb)');
RESET ROLE;
SELECT created FROM ntask_enqueue('g3', 'w-1');
SELECT created FROM ntask_enqueue('g3', 'w-esc', '{"escalate": true}');
SELECT created FROM ntask_enqueue('g3', 'w-role', '{"setrole": true}');
SET ROLE regress_guard_worker;
SET search_path = public, pg_catalog;
SELECT task_key, token FROM ntask_claim('g3', 'W1', max_tasks => 5);
RESET ROLE;
RESET search_path;
SELECT who, sp, k FROM public.guard_seen ORDER BY k;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_guard_admin';
-- the server's message for the escalation changed in 16 (15: "must be
-- superuser to alter superuser roles or change superuser attribute"): the
-- output shows 16+'s wording on every version
SELECT t.task_key, t.state, t.reason,
       replace(a.reason, 'must be superuser to alter superuser roles or change superuser attribute',
               'permission denied to alter role') AS error
FROM ntask.task t JOIN ntask.audit a USING (task_id)
WHERE t.queue = 'g3' AND a.action = 'guard_error' ORDER BY 1;
-- whoever sets a guard must have its owner's privileges (it runs as them)
CREATE FUNCTION su_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
SET ROLE regress_guard_admin;
SELECT queue FROM ntask_queue_set('g3', guard => 'su_guard(text, jsonb)');
\echo :SQLSTATE
RESET ROLE;
-- a guard whose owner lost EXECUTE on it is a guard_error, not a bypass
REVOKE EXECUTE ON FUNCTION regress_gs.whoami(text, jsonb) FROM PUBLIC, regress_guard_admin;
SELECT created FROM ntask_enqueue('g3', 'w-noexec');
SELECT task_key FROM ntask_claim('g3', 'W1');
SELECT t.state, a.reason FROM ntask.task t JOIN ntask.audit a USING (task_id)
WHERE t.task_key = 'w-noexec' AND a.action = 'guard_error';
SELECT ntask_queue_clear_guard('g3');
DROP FUNCTION su_guard(text, jsonb);
DROP SCHEMA regress_gs CASCADE;
DROP TABLE public.guard_seen;
DROP ROLE regress_guard_admin, regress_guard_worker;

-- a guard is called with the default collation: text comparisons work
CREATE FUNCTION coll_guard(k text, p jsonb) RETURNS text LANGUAGE sql AS $$
  SELECT CASE WHEN lower(k) > 'm' THEN 'skip: late in the alphabet' ELSE 'proceed' END $$;
SELECT queue FROM ntask_queue_set('g4', guard => 'coll_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g4', 'a-first');
SELECT created FROM ntask_enqueue('g4', 'z-last');
SELECT task_key FROM ntask_claim('g4', 'W1', max_tasks => 5);
SELECT task_key, state, reason FROM ntask.task WHERE queue = 'g4' ORDER BY 1;
SELECT ntask_queue_clear_guard('g4');
DROP FUNCTION coll_guard(text, jsonb);

-- issue 29.3: a guard in a temporary schema is refused (after its session
-- ends, whoever next gets that pg_temp_N could define a function of that
-- name); so is a function that belongs to an extension
CREATE FUNCTION pg_temp.tmp_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
SELECT queue FROM ntask_queue_set('g5', guard => 'pg_temp.tmp_guard(text, jsonb)');
\echo :SQLSTATE
CREATE EXTENSION pg_trgm;
CREATE FUNCTION ext_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
ALTER EXTENSION pg_trgm ADD FUNCTION ext_guard(text, jsonb);
SELECT queue FROM ntask_queue_set('g5', guard => 'ext_guard(text, jsonb)');
\echo :SQLSTATE
ALTER EXTENSION pg_trgm DROP FUNCTION ext_guard(text, jsonb);
-- a guard that joins an extension later is refused at use, and
-- DROP EXTENSION that would drop it is refused
SELECT queue, guard, guard_owner = current_user AS owner_recorded
FROM ntask_queue_set('g5', guard => 'ext_guard(text, jsonb)');
ALTER EXTENSION pg_trgm ADD FUNCTION ext_guard(text, jsonb);
SELECT created FROM ntask_enqueue('g5', 'e-1');
SELECT task_key FROM ntask_claim('g5', 'W1');
SELECT t.state, t.reason, a.reason AS error FROM ntask.task t JOIN ntask.audit a USING (task_id)
WHERE t.queue = 'g5' AND a.action = 'guard_error';
DROP EXTENSION pg_trgm;
\echo :SQLSTATE
ALTER EXTENSION pg_trgm DROP FUNCTION ext_guard(text, jsonb);
-- a guard whose body depends on an extension: DROP EXTENSION ... CASCADE
-- would drop it, and is refused; one that owns nothing of a guard is not
CREATE FUNCTION trgm_guard(k text, p jsonb) RETURNS text LANGUAGE sql
BEGIN ATOMIC
  SELECT CASE WHEN public.similarity(k, 'spam') > 0.5 THEN 'skip: spam' ELSE 'proceed' END;
END;
SELECT queue FROM ntask_queue_set('g5', guard => 'trgm_guard(text, jsonb)');
DROP EXTENSION pg_trgm CASCADE;
\echo :SQLSTATE
SELECT queue, guard FROM ntask_queue_set('g5', guard => 'ext_guard(text, jsonb)');
DROP EXTENSION pg_trgm CASCADE;
SELECT to_regprocedure('trgm_guard(text,jsonb)') AS trgm_guard_left;

-- issue 29.3: the guard's owner is recorded; a function of the guard's name
-- with another owner (defined after the guard was dropped behind ntask's
-- back) is refused at use: the task goes to repair, audited
CREATE ROLE regress_guard_owner;
GRANT ntask_admin TO regress_guard_owner;
CREATE ROLE regress_guard_other;
CREATE SCHEMA regress_gs2;
GRANT USAGE, CREATE ON SCHEMA regress_gs2 TO regress_guard_owner, regress_guard_other;
CREATE TABLE public.guard_hijacked (k text);
GRANT INSERT ON public.guard_hijacked TO regress_guard_other;
SET ROLE regress_guard_owner;
CREATE FUNCTION regress_gs2.own_guard(k text, p jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
SELECT queue, guard FROM ntask_queue_set('g6', guard => 'regress_gs2.own_guard(text, jsonb)');
RESET ROLE;
SELECT guard_owner FROM ntask.queue WHERE queue = 'g6';
-- event triggers off: the drop is not seen
SET session_replication_role = replica;
DROP FUNCTION regress_gs2.own_guard(text, jsonb);
RESET session_replication_role;
-- a guard that no longer resolves blocks no unrelated DDL: a function of
-- the same name in another schema, a rename of another function
CREATE FUNCTION public.own_guard(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$;
ALTER FUNCTION public.own_guard(text, jsonb) RENAME TO own_guard2;
DROP FUNCTION public.own_guard2(text, jsonb);
CREATE TABLE public.guard_unrelated (a int);
DROP TABLE public.guard_unrelated;
-- another role defines a function of the guard's name
SET ROLE regress_guard_other;
CREATE FUNCTION regress_gs2.own_guard(k text, p jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.guard_hijacked VALUES (k);
  RETURN 'cancel: hijacked';
END $$;
RESET ROLE;
SELECT created FROM ntask_enqueue('g6', 'h-1', '{"secret": 1}');
SELECT task_key FROM ntask_claim('g6', 'W1');
SELECT count(*) AS hijacked FROM public.guard_hijacked;
SELECT t.state, t.reason, a.actor, a.reason AS error
FROM ntask.task t JOIN ntask.audit a USING (task_id)
WHERE t.queue = 'g6' AND a.action = 'guard_error';
-- at replay the refusal goes to the operator
SELECT ntask_replay(task_id, 'alice', 'try again') FROM ntask.task WHERE queue = 'g6';
\echo :SQLSTATE
-- renaming or moving a guard is not refused: the guard then does not
-- resolve, and its tasks go to repair (it fails closed)
SELECT ntask_queue_clear_guard('g6');
SELECT guard, guard_owner FROM ntask.queue WHERE queue = 'g6';
DROP FUNCTION regress_gs2.own_guard(text, jsonb);
SET ROLE regress_guard_owner;
CREATE FUNCTION regress_gs2.own_guard(k text, p jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
SELECT queue FROM ntask_queue_set('g6', guard => 'regress_gs2.own_guard(text, jsonb)');
ALTER FUNCTION regress_gs2.own_guard(text, jsonb) RENAME TO own_guard_old;
RESET ROLE;
SELECT created FROM ntask_enqueue('g6', 'h-2');
SELECT task_key FROM ntask_claim('g6', 'W1');
SELECT t.state, a.reason AS error FROM ntask.task t JOIN ntask.audit a USING (task_id)
WHERE t.task_key = 'h-2' AND a.action = 'guard_error';
-- dropping a guard in use is refused, also by DROP SCHEMA ... CASCADE and
-- DROP OWNED
ALTER FUNCTION regress_gs2.own_guard_old(text, jsonb) RENAME TO own_guard;
DROP FUNCTION regress_gs2.own_guard(text, jsonb);
\echo :SQLSTATE
DROP SCHEMA regress_gs2 CASCADE;
\echo :SQLSTATE
DROP OWNED BY regress_guard_owner;
\echo :SQLSTATE
SELECT ntask_queue_clear_guard('g6');
DROP SCHEMA regress_gs2 CASCADE;
DROP TABLE public.guard_hijacked;
DROP ROLE regress_guard_owner, regress_guard_other;

-- issue 29.6: a cancel or statement timeout during a guard aborts the
-- claim (57014) and sends no task to repair
CREATE FUNCTION slow_guard(k text, p jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_sleep(30);
  RETURN 'proceed';
END $$;
SELECT queue FROM ntask_queue_set('g7', guard => 'slow_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g7', 's-1');
SET statement_timeout = '1s';
SELECT task_key FROM ntask_claim('g7', 'W1');
\echo :SQLSTATE
RESET statement_timeout;
SELECT task_key, state, reason, attempts FROM ntask.task WHERE queue = 'g7';
SELECT count(*) AS guard_errors FROM ntask.audit a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'g7' AND a.action = 'guard_error';
-- a guard that runs into a lock timeout (or a deadlock) leaves its task
-- due; the claim hands out the others
CREATE FUNCTION busy_guard(k text, p jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  IF p ? 'busy' THEN
    RAISE EXCEPTION 'could not obtain lock on row' USING ERRCODE = 'lock_not_available';
  END IF;
  IF p ? 'deadlock' THEN
    RAISE EXCEPTION 'deadlock detected' USING ERRCODE = 'deadlock_detected';
  END IF;
  RETURN 'proceed';
END $$;
SELECT queue FROM ntask_queue_set('g7', guard => 'busy_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g7', 'b-busy', '{"busy": 1}', priority => 5);
SELECT created FROM ntask_enqueue('g7', 'b-dead', '{"deadlock": 1}', priority => 5);
SELECT created FROM ntask_enqueue('g7', 'b-fine');
SELECT task_key FROM ntask_claim('g7', 'W1', max_tasks => 5) ORDER BY 1;
SELECT task_key, state, reason, attempts FROM ntask.task WHERE queue = 'g7' ORDER BY 1;
SELECT count(*) AS guard_errors FROM ntask.audit a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'g7' AND a.action = 'guard_error';
-- a guard's SET (session or local) does not outlive its call
CREATE FUNCTION set_guard(k text, p jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('work_mem', '1234kB', false);
  SET application_name = 'set by a guard';
  RETURN 'proceed';
END $$;
SELECT queue FROM ntask_queue_set('g7', guard => 'set_guard(text, jsonb)');
SELECT created FROM ntask_enqueue('g7', 'c-1');
SET work_mem = '4MB';
SET application_name = 'guard regress';
SELECT task_key FROM ntask_claim('g7', 'W1', max_tasks => 5) ORDER BY 1;
SHOW work_mem;
SHOW application_name;
RESET work_mem;
RESET application_name;
SELECT ntask_queue_clear_guard('g7');
DROP FUNCTION slow_guard(text, jsonb);
DROP FUNCTION busy_guard(text, jsonb);
DROP FUNCTION set_guard(text, jsonb);
