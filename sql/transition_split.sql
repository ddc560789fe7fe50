-- transition_split: issue 48, the transition's statement split.  The
-- holder's own final answer that stays on the task row (attempt_row) runs
-- a plain UPDATE; every answer that needs a ledger row runs the statement
-- with the ledger CTE.  Pinned here: a batch of ntask_transition_many whose
-- elements need a ledger row and do not, in one call; a lease taken before
-- 1.0.0's claimed_at (claimed_at NULL: it keeps its ledger row) through
-- ntask_transition, ntask_transition_many and ntask_transition_and_claim;
-- a retry_wait; a lease that expired and was taken over; and each with
-- the lever (ntask.attempt_on_row) on and off: the same answers and the
-- same attempt_all.
SELECT setval('ntask.task_task_id_seq', 48500, false) AS first_task_id;
SELECT setval('ntask.token_seq', 48500, false) AS first_token;
CREATE TEMP TABLE answers (q text, step text, answer text, n serial);
CREATE FUNCTION pg_temp.legacy(id bigint) RETURNS void LANGUAGE sql AS
$$ UPDATE ntask.task SET claimed_at = NULL WHERE task_id = id $$;

-- the same steps for each queue (written out twice: psql has no loop)
\set q 'split_on'
SHOW ntask.attempt_on_row;
SELECT queue FROM ntask_queue_set(:'q', max_attempts => 3, lease => '1 minute') \gset
-- a batch of four: two on the row, one lease without claimed_at, one
-- taken over after its lease expired (the old token is stale)
SELECT task_id AS b1 FROM ntask_enqueue(:'q', 'b1', '{"n": 1}') \gset
SELECT task_id AS b2 FROM ntask_enqueue(:'q', 'b2', '{"n": 2}') \gset
SELECT task_id AS b3 FROM ntask_enqueue(:'q', 'b3', '{"n": 3}') \gset
SELECT task_id AS b4 FROM ntask_enqueue(:'q', 'b4', '{"n": 4}') \gset
SELECT count(*) FROM ntask_claim(:'q', 'W1', max_tasks => 4);
SELECT ntask_heartbeat(:b1, tok(:b1, 1), progress => '"p1"') IS NOT NULL AS beat;
SELECT ntask_heartbeat(:b3, tok(:b3, 1), progress => '"p3"') IS NOT NULL AS beat;
SELECT pg_temp.legacy(:b3);
UPDATE ntask.task SET lease_until = now() - interval '1 s', due_at = now() - interval '1 s'
WHERE task_id = :b4;
SELECT task_key FROM ntask_claim(:'q', 'W2');
INSERT INTO answers SELECT :'q', 'batch', string_agg(task_id - :b1 || ':' || result || ':' || state, ','
	ORDER BY ord)
FROM ntask_transition_many(ARRAY[:b4, :b3, :b2, :b1]::bigint[],
	ARRAY[tok(:b4, 1), tok(:b3, 1), tok(:b2, 1), tok(:b1, 1)], 'succeeded',
	detail => '{"d": 1}', outcome => 'made', results => ARRAY['{"r": 4}', '{"r": 3}', NULL, '{"r": 1}']::jsonb[])
	WITH ORDINALITY AS x(task_id, result, state, run_at, ord);
INSERT INTO answers SELECT :'q', 'batch again', string_agg(task_id - :b1 || ':' || result, ',' ORDER BY task_id)
FROM ntask_transition_many(ARRAY[:b1, :b2, :b3, :b4]::bigint[],
	ARRAY[tok(:b1, 1), tok(:b2, 1), tok(:b3, 1), tok(:b4, 1)], 'succeeded',
	detail => '{"d": 1}', outcome => 'made', results => ARRAY['{"r": 1}', NULL, '{"r": 3}', '{"r": 4}']::jsonb[]);
-- the task taken over: its new holder finishes it on the row
INSERT INTO answers SELECT :'q', 'takeover', result || ':' || state
FROM ntask_transition(:b4, tok(:b4, 2), 'canceled', detail => '{"reason": "moot"}');
-- one call, a lease without claimed_at: succeeded, then the duplicate
SELECT task_id AS s1 FROM ntask_enqueue(:'q', 's1') \gset
SELECT token AS tk FROM ntask_claim(:'q', 'W1') \gset
SELECT ntask_invoked(:s1, :tk) IS NOT NULL AS invoked;
SELECT pg_temp.legacy(:s1);
INSERT INTO answers SELECT :'q', 'legacy', result || ':' || state || ':' || coalesce(run_at::text, '-')
FROM ntask_transition(:s1, :tk, 'succeeded', result => '{"r": "s1"}');
INSERT INTO answers SELECT :'q', 'legacy again', result
FROM ntask_transition(:s1, :tk, 'succeeded', result => '{"r": "s1"}');
INSERT INTO answers SELECT :'q', 'legacy other', result FROM ntask_transition(:s1, :tk, 'skipped');
-- a retry_wait, then a skipped on the row
SELECT task_id AS r1 FROM ntask_enqueue(:'q', 'r1') \gset
SELECT token AS tk FROM ntask_claim(:'q', 'W1') \gset
INSERT INTO answers SELECT :'q', 'retry', result || ':' || state || ':' || (run_at IS NOT NULL)
FROM ntask_transition(:r1, :tk, 'retry_wait', retry_at => now(), detail => '{"e": 1}');
SELECT token AS tk FROM ntask_claim(:'q', 'W2') \gset
INSERT INTO answers SELECT :'q', 'retry skipped', result || ':' || state
FROM ntask_transition(:r1, :tk, 'skipped');
-- the one-call loop: a lease without claimed_at finished, the next claimed
SELECT task_id AS c1 FROM ntask_enqueue(:'q', 'c1') \gset
SELECT task_id AS c2 FROM ntask_enqueue(:'q', 'c2') \gset
SELECT token AS tk FROM ntask_claim(:'q', 'W3') \gset
SELECT pg_temp.legacy(:c1);
INSERT INTO answers SELECT :'q', 'tac', finish_result || ':' || finish_state || ':' || task_key
FROM ntask_transition_and_claim(:c1, :tk, 'succeeded', :'q', 'W3');
INSERT INTO answers SELECT :'q', 'tac next', finish_result || ':' || finish_state || ':' || coalesce(task_key, '-')
FROM ntask_transition_and_claim(:c2, tok(:c2, 1), 'succeeded', :'q', 'W3');

\set q 'split_off'
SET ntask.attempt_on_row = off;
SHOW ntask.attempt_on_row;
SELECT queue FROM ntask_queue_set(:'q', max_attempts => 3, lease => '1 minute') \gset
SELECT task_id AS b1 FROM ntask_enqueue(:'q', 'b1', '{"n": 1}') \gset
SELECT task_id AS b2 FROM ntask_enqueue(:'q', 'b2', '{"n": 2}') \gset
SELECT task_id AS b3 FROM ntask_enqueue(:'q', 'b3', '{"n": 3}') \gset
SELECT task_id AS b4 FROM ntask_enqueue(:'q', 'b4', '{"n": 4}') \gset
SELECT count(*) FROM ntask_claim(:'q', 'W1', max_tasks => 4);
SELECT ntask_heartbeat(:b1, tok(:b1, 1), progress => '"p1"') IS NOT NULL AS beat;
SELECT ntask_heartbeat(:b3, tok(:b3, 1), progress => '"p3"') IS NOT NULL AS beat;
SELECT pg_temp.legacy(:b3);
UPDATE ntask.task SET lease_until = now() - interval '1 s', due_at = now() - interval '1 s'
WHERE task_id = :b4;
SELECT task_key FROM ntask_claim(:'q', 'W2');
INSERT INTO answers SELECT :'q', 'batch', string_agg(task_id - :b1 || ':' || result || ':' || state, ','
	ORDER BY ord)
FROM ntask_transition_many(ARRAY[:b4, :b3, :b2, :b1]::bigint[],
	ARRAY[tok(:b4, 1), tok(:b3, 1), tok(:b2, 1), tok(:b1, 1)], 'succeeded',
	detail => '{"d": 1}', outcome => 'made', results => ARRAY['{"r": 4}', '{"r": 3}', NULL, '{"r": 1}']::jsonb[])
	WITH ORDINALITY AS x(task_id, result, state, run_at, ord);
INSERT INTO answers SELECT :'q', 'batch again', string_agg(task_id - :b1 || ':' || result, ',' ORDER BY task_id)
FROM ntask_transition_many(ARRAY[:b1, :b2, :b3, :b4]::bigint[],
	ARRAY[tok(:b1, 1), tok(:b2, 1), tok(:b3, 1), tok(:b4, 1)], 'succeeded',
	detail => '{"d": 1}', outcome => 'made', results => ARRAY['{"r": 1}', NULL, '{"r": 3}', '{"r": 4}']::jsonb[]);
INSERT INTO answers SELECT :'q', 'takeover', result || ':' || state
FROM ntask_transition(:b4, tok(:b4, 2), 'canceled', detail => '{"reason": "moot"}');
SELECT task_id AS s1 FROM ntask_enqueue(:'q', 's1') \gset
SELECT token AS tk FROM ntask_claim(:'q', 'W1') \gset
SELECT ntask_invoked(:s1, :tk) IS NOT NULL AS invoked;
SELECT pg_temp.legacy(:s1);
INSERT INTO answers SELECT :'q', 'legacy', result || ':' || state || ':' || coalesce(run_at::text, '-')
FROM ntask_transition(:s1, :tk, 'succeeded', result => '{"r": "s1"}');
INSERT INTO answers SELECT :'q', 'legacy again', result
FROM ntask_transition(:s1, :tk, 'succeeded', result => '{"r": "s1"}');
INSERT INTO answers SELECT :'q', 'legacy other', result FROM ntask_transition(:s1, :tk, 'skipped');
SELECT task_id AS r1 FROM ntask_enqueue(:'q', 'r1') \gset
SELECT token AS tk FROM ntask_claim(:'q', 'W1') \gset
INSERT INTO answers SELECT :'q', 'retry', result || ':' || state || ':' || (run_at IS NOT NULL)
FROM ntask_transition(:r1, :tk, 'retry_wait', retry_at => now(), detail => '{"e": 1}');
SELECT token AS tk FROM ntask_claim(:'q', 'W2') \gset
INSERT INTO answers SELECT :'q', 'retry skipped', result || ':' || state
FROM ntask_transition(:r1, :tk, 'skipped');
SELECT task_id AS c1 FROM ntask_enqueue(:'q', 'c1') \gset
SELECT task_id AS c2 FROM ntask_enqueue(:'q', 'c2') \gset
SELECT token AS tk FROM ntask_claim(:'q', 'W3') \gset
SELECT pg_temp.legacy(:c1);
INSERT INTO answers SELECT :'q', 'tac', finish_result || ':' || finish_state || ':' || task_key
FROM ntask_transition_and_claim(:c1, :tk, 'succeeded', :'q', 'W3');
INSERT INTO answers SELECT :'q', 'tac next', finish_result || ':' || finish_state || ':' || coalesce(task_key, '-')
FROM ntask_transition_and_claim(:c2, tok(:c2, 1), 'succeeded', :'q', 'W3');
RESET ntask.attempt_on_row;

-- the answers, side by side: the same
SELECT a.step, a.answer AS lever_on, b.answer AS lever_off
FROM answers a JOIN answers b ON b.q = 'split_off' AND b.step = a.step
WHERE a.q = 'split_on' ORDER BY a.n;

-- the task rows and attempt_all (times as facts, tokens by their place)
SELECT t.task_key, t.state, t.outcome, t.result, t.reason, t.attempts, t.unknown_attempts,
	   t.lease_owner, t.lease_until IS NULL AS no_lease, t.due_at IS NULL AS not_due,
	   t.finished_at IS NOT NULL AS finished, t.attempt_worker, t.attempt_detail,
	   t.progress
FROM ntask.task t WHERE t.queue = 'split_on' ORDER BY t.task_key;
CREATE TEMP VIEW ledger AS
SELECT t.queue, t.task_key,
	   rank() OVER (PARTITION BY a.task_id ORDER BY a.token) AS nth,
	   a.token = t.token AS latest, a.attempt, a.worker,
	   a.claimed_at IS NOT NULL AS claimed, a.invoked_at IS NOT NULL AS invoked,
	   a.ended_at = t.finished_at AS ended_with_task,
	   a.result, a.requested, a.error_class, a.error_stage, a.outcome_known, a.outcome,
	   a.retry_at IS NOT NULL AS retry_at, a.detail, a.progress,
	   a.task_id IN (SELECT x.task_id FROM ntask.attempt x WHERE x.token = a.token) AS in_ledger
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.queue IN ('split_on', 'split_off');
SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended_with_task, result,
	   requested, error_class, error_stage, outcome_known, outcome, retry_at, detail, progress,
	   in_ledger
FROM ledger WHERE queue = 'split_on' ORDER BY task_key, nth;
-- with the lever off, every attempt is in the ledger; otherwise the same
SELECT 'only with the lever on' AS side, count(*) FROM (
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended_with_task, result,
		   requested, error_class, error_stage, outcome_known, outcome, retry_at, detail, progress
	FROM ledger WHERE queue = 'split_on'
	EXCEPT ALL
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended_with_task, result,
		   requested, error_class, error_stage, outcome_known, outcome, retry_at, detail, progress
	FROM ledger WHERE queue = 'split_off') x
UNION ALL
SELECT 'only with the lever off', count(*) FROM (
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended_with_task, result,
		   requested, error_class, error_stage, outcome_known, outcome, retry_at, detail, progress
	FROM ledger WHERE queue = 'split_off'
	EXCEPT ALL
	SELECT task_key, nth, latest, attempt, worker, claimed, invoked, ended_with_task, result,
		   requested, error_class, error_stage, outcome_known, outcome, retry_at, detail, progress
	FROM ledger WHERE queue = 'split_on') y;
-- a lease without claimed_at: its ledger row's claimed_at is the row's
-- updated_at before the transition (the statement with the ledger CTE)
SELECT t.task_key, a.claimed_at IS NOT NULL AND a.claimed_at <= t.finished_at AS claimed_before_end
FROM ntask.attempt a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'split_on' AND t.claimed_at IS NULL ORDER BY 1;
