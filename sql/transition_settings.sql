-- transition_settings: issue 48, the settings ntask pins around each of
-- its statements (search_path, enable_seqscan, jit: NtaskExecPlan) are the
-- caller's again after every transition call, also after an error inside
-- the call that a savepoint caught, and after a caller's SET LOCAL; and the
-- C code a call runs between its statements runs under the caller's
-- search_path: the guard error that the claim half of
-- ntask_transition_and_claim records in the audit names the guard as the
-- caller's search_path shows it.  (A search_path pinned once for the whole
-- call, measured in docs/performance.md "The transition and the call's
-- set-up", recorded public.settings_null_guard(text,jsonb) here.)
SELECT setval('ntask.task_task_id_seq', 48600, false) AS first_task_id;
SELECT setval('ntask.token_seq', 48600, false) AS first_token;
SET search_path = public, pg_catalog;
SET enable_seqscan = on;
SET jit = on;
CREATE FUNCTION public.settings_null_guard(k text, p jsonb) RETURNS text
LANGUAGE sql AS $$ SELECT CASE WHEN k = 's2' THEN NULL ELSE 'proceed' END $$;
SELECT queue FROM ntask_queue_set('settings_q', guard => 'public.settings_null_guard(text, jsonb)');
SELECT task_id, created FROM ntask_enqueue('settings_q', 's1');
SELECT task_id, created FROM ntask_enqueue('settings_q', 's2');
SELECT task_id, created FROM ntask_enqueue('settings_q', 's3');
SELECT task_id AS id, token AS tok FROM ntask_claim('settings_q', 'W1') \gset
-- the claim half meets s2 first: its guard answers NULL (to repair)
SELECT task_key, finish_result, finish_state
FROM ntask_transition_and_claim(:id, :tok, 'succeeded', 'settings_q', 'W1');
SELECT current_setting('search_path') AS search_path,
       current_setting('enable_seqscan') AS enable_seqscan, current_setting('jit') AS jit;
SELECT t.task_key, a.reason FROM ntask.audit a JOIN ntask.task t USING (task_id)
WHERE a.action = 'guard_error' AND t.queue = 'settings_q' ORDER BY a.audit_id;

-- an error inside the call (a token never issued: NT003), caught by a
-- savepoint, then the call again; and a caller's SET LOCAL kept
SELECT task_id AS id, token AS tok FROM ntask.task
WHERE queue = 'settings_q' AND state = 'leased' \gset
BEGIN;
SET LOCAL search_path = pg_catalog, public;
SET LOCAL enable_seqscan = off;
SAVEPOINT s;
SELECT * FROM ntask_transition(:id, :tok + 1000, 'succeeded');
ROLLBACK TO SAVEPOINT s;
SELECT current_setting('search_path') AS search_path,
       current_setting('enable_seqscan') AS enable_seqscan, current_setting('jit') AS jit;
SELECT result, state FROM ntask_transition(:id, :tok, 'succeeded');
SELECT current_setting('search_path') AS search_path,
       current_setting('enable_seqscan') AS enable_seqscan, current_setting('jit') AS jit;
COMMIT;
SELECT current_setting('search_path') AS search_path,
       current_setting('enable_seqscan') AS enable_seqscan, current_setting('jit') AS jit;

-- a batch, and a transition's locked path (a duplicate: two statements)
SELECT task_id, created FROM ntask_enqueue('settings_q', 's4');
SELECT task_id, created FROM ntask_enqueue('settings_q', 's5');
SELECT array_agg(task_id ORDER BY task_id) AS ids, array_agg(token ORDER BY task_id) AS toks
FROM ntask_claim('settings_q', 'W1', max_tasks => 2) \gset
SELECT task_id, result, state FROM ntask_transition_many(:'ids', :'toks', 'succeeded') ORDER BY task_id;
SELECT task_id, result, state FROM ntask_transition_many(:'ids', :'toks', 'succeeded') ORDER BY task_id;
SELECT current_setting('search_path') AS search_path,
       current_setting('enable_seqscan') AS enable_seqscan, current_setting('jit') AS jit;
SELECT result, state FROM ntask_transition(:id, :tok, 'succeeded');
SELECT current_setting('search_path') AS search_path,
       current_setting('enable_seqscan') AS enable_seqscan, current_setting('jit') AS jit;
RESET search_path;
RESET enable_seqscan;
RESET jit;
SELECT ntask_queue_clear_guard('settings_q') IS NOT NULL AS cleared;
DROP FUNCTION public.settings_null_guard(text, jsonb);
