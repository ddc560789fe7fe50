-- attempt_row: issue 48 lever (c), the last attempt on the task row
-- (docs/design.md "The last attempt on the task row").  The holder's own
-- succeeded, canceled or skipped leaves no ntask.attempt row: the task row
-- keeps the attempt (attempt_worker set) and ntask.attempt_all shows it.
-- A queue drained through every way an attempt ends, with the test-only
-- setting ntask.attempt_on_row on and off, gives the same answers, the
-- same attempt_all rows and the same ntask_explain.
SELECT setval('ntask.task_task_id_seq', 48000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 48000, false) AS first_token;
CREATE TEMP TABLE answers (q text, step text, answer text, n serial);
SHOW ntask.attempt_on_row;
\getenv abs_srcdir PG_ABS_SRCDIR
\set drain :abs_srcdir '/sql/attempt_row_drain.psql'
\set q 'row_on'
\i :drain
SET ntask.attempt_on_row = off;
\set q 'row_off'
\i :drain
RESET ntask.attempt_on_row;

-- the answers, side by side: the same
SELECT a.step, a.answer AS lever_on, b.answer AS lever_off
FROM answers a JOIN answers b ON b.q = 'row_off' AND b.step = a.step
WHERE a.q = 'row_on' ORDER BY a.n;
SELECT count(*) AS answers_differ FROM answers a JOIN answers b ON b.q = 'row_off' AND b.step = a.step
WHERE a.q = 'row_on' AND a.answer IS DISTINCT FROM b.answer;

-- attempt_all of each queue, its times as facts (the two runs differ in
-- time, not in what they hold), tokens by their place in the task
CREATE TEMP VIEW ledger AS
SELECT t.queue, t.task_key,
	   rank() OVER (PARTITION BY a.task_id ORDER BY a.token) AS nth,
	   a.token = t.token AS latest, a.attempt, a.worker,
	   a.claimed_at IS NOT NULL AS claimed, a.invoked_at IS NOT NULL AS invoked,
	   a.ended_at IS NOT NULL AS ended,
	   a.ended_at = t.finished_at AS ended_with_task,
	   a.claimed_at <= a.ended_at AS ordered,
	   a.result, a.requested, a.error_class, a.error_stage, a.outcome_known, a.outcome,
	   a.retry_at IS NOT NULL AS retry_at, a.detail, a.shard, a.progress
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.queue IN ('row_on', 'row_off');
SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended, ended_with_task, ordered,
	   result, requested, error_class, error_stage, outcome_known, outcome, retry_at, detail, progress
FROM ledger WHERE queue = 'row_on' ORDER BY task_key, nth;
SELECT 'only with the lever on' AS side, count(*) FROM (
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended, ended_with_task, ordered,
		   result, requested, error_class, error_stage, outcome_known, outcome, retry_at, detail,
		   shard, progress FROM ledger WHERE queue = 'row_on'
	EXCEPT ALL
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended, ended_with_task, ordered,
		   result, requested, error_class, error_stage, outcome_known, outcome, retry_at, detail,
		   shard, progress FROM ledger WHERE queue = 'row_off') x
UNION ALL
SELECT 'only with the lever off', count(*) FROM (
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended, ended_with_task, ordered,
		   result, requested, error_class, error_stage, outcome_known, outcome, retry_at, detail,
		   shard, progress FROM ledger WHERE queue = 'row_off'
	EXCEPT ALL
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended, ended_with_task, ordered,
		   result, requested, error_class, error_stage, outcome_known, outcome, retry_at, detail,
		   shard, progress FROM ledger WHERE queue = 'row_on') y;

-- the attempt kept on the row is exactly the one its ledger row would be:
-- the same times too (claimed, invoked, ended), by task
SELECT t.task_key, a.claimed_at = t.claimed_at AS claimed_at_is_row,
	   a.invoked_at IS NOT DISTINCT FROM t.invoked_at AS invoked_at_is_row,
	   a.ended_at = t.finished_at AS ended_at_is_row
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'row_on' AND t.attempt_worker IS NOT NULL AND a.token = t.token
ORDER BY 1;

-- ntask_explain: the same record, its times as their order (and the queue
-- named alike)
CREATE TEMP VIEW explained AS
SELECT t.queue, t.task_key, e.nth, e.event, e.token = t.token AS latest_token, e.actor,
	   regexp_replace(regexp_replace(e.detail, '\d{4}-\d\d-\d\d[ T][0-9:.+]+', 'T', 'g'),
					  'queue row_o(n|ff),', 'queue Q,') AS detail
FROM ntask.task t
CROSS JOIN LATERAL (SELECT row_number() OVER () AS nth, x.* FROM ntask_explain(t.task_id) x) e
WHERE t.queue IN ('row_on', 'row_off');
SELECT count(*) > 40 AS explained_events FROM explained WHERE queue = 'row_on';
SELECT 'only with the lever on' AS side, count(*) FROM (
	SELECT task_key, nth, event, latest_token, actor, detail FROM explained WHERE queue = 'row_on'
	EXCEPT ALL
	SELECT task_key, nth, event, latest_token, actor, detail FROM explained WHERE queue = 'row_off') x
UNION ALL
SELECT 'only with the lever off', count(*) FROM (
	SELECT task_key, nth, event, latest_token, actor, detail FROM explained WHERE queue = 'row_off'
	EXCEPT ALL
	SELECT task_key, nth, event, latest_token, actor, detail FROM explained WHERE queue = 'row_on') y;

-- what moved: the lever on writes no ledger row for the holder's final
-- answers (ok, cancel, skip, retry ok, release ok, takeover ok, replay ok,
-- many1, many2, tac1, tac2); the staged success and every other end keep
-- theirs
SELECT t.queue, count(*) FILTER (WHERE t.attempt_worker IS NOT NULL) AS on_rows,
	   (SELECT count(*) FROM ntask.attempt a JOIN ntask.task u USING (task_id)
		WHERE u.queue = t.queue) AS ledger_rows
FROM ntask.task t WHERE t.queue IN ('row_on', 'row_off') GROUP BY 1 ORDER BY 1;
SELECT task_key, state, attempt_worker, attempt_detail FROM ntask.task
WHERE queue = 'row_on' AND attempt_worker IS NOT NULL ORDER BY 1;

-- a final task keeps its attempt only while it stays final: a write that
-- would move it on is refused (whatever moves one later must move its
-- attempt into the ledger first)
\set VERBOSITY terse
UPDATE ntask.task SET state = 'ready', due_at = now(), finished_at = NULL
WHERE queue = 'row_on' AND task_key = 'ok';
\set VERBOSITY default

-- only a superuser may switch the lever
CREATE ROLE regress_row_user;
SET ROLE regress_row_user;
SET ntask.attempt_on_row = off;
RESET ROLE;
DROP ROLE regress_row_user;

-- retention deletes the task and its attempts together, on the row or not
UPDATE ntask.task SET finished_at = now() - interval '30 days'
WHERE queue IN ('row_on', 'row_off') AND state IN ('succeeded', 'canceled', 'skipped');
SELECT queue FROM ntask_queue_set('row_on', retention => '1 day') \gset
SELECT queue FROM ntask_queue_set('row_off', retention => '1 day') \gset
SELECT count(*) >= 0 AS housekept FROM ntask_housekeeping();
SELECT t.queue, count(*) AS tasks_left FROM ntask.task t
WHERE t.queue IN ('row_on', 'row_off') GROUP BY 1 ORDER BY 1;
SELECT count(*) AS attempts_left FROM ntask.attempt_all a
WHERE NOT EXISTS (SELECT 1 FROM ntask.task t WHERE t.task_id = a.task_id);
