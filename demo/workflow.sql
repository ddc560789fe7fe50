-- demo part 6 (scripts/demo.sh): seed 001's nightly report as a workflow.
-- One fetch per tenant (fan-out), one aggregate that waits for all of
-- them (fan-in, depends_on) and reads their results from its claim; the
-- aggregate checkpoints between its two halves, its worker dies after the
-- first half, and the worker that takes over resumes after it.  The send
-- task parks until the provider's callback (a signal), then succeeds.
-- Keys name the business action (tenant + report day), never a run id.
\set QUIET 1
\pset footer off
-- ntask_explain's times and digests, left out so the output is the same on every run
\set times '\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d(\\.\\d+)?\\+\\d\\d|[0-9.]+ (ms|s|min|h|days)\\M( [0-9.]+ (ms|s|min|h|days)\\M)*'
\echo
\echo '=== 16. The nightly report of 2026-12-01 as a workflow: fetch per tenant, aggregate, send'
SELECT queue FROM ntask_queue_set('reports', max_attempts => 3);
\echo '--- one transaction enqueues it all; the aggregate waits for the fetches, the send for the aggregate'
BEGIN;
SELECT 'report:2026-12-01:fetch:' || t AS task_key, e.created, e.state
FROM unnest(ARRAY['c-a', 'c-b', 'c-g']) t,
	 ntask_enqueue('reports', 'report:2026-12-01:fetch:' || t,
				   jsonb_build_object('tenant', t, 'day', '2026-12-01')) e;
SELECT task_id AS agg, state FROM ntask_enqueue('reports', 'report:2026-12-01:aggregate',
	'{"day": "2026-12-01"}', depends_on => ARRAY['report:2026-12-01:fetch:c-a',
		'report:2026-12-01:fetch:c-b', 'report:2026-12-01:fetch:c-g']) \gset
SELECT task_id AS send, state FROM ntask_enqueue('reports', 'report:2026-12-01:send',
	'{"day": "2026-12-01", "to": "finance@example.com"}',
	depends_on => ARRAY['report:2026-12-01:aggregate']) \gset
COMMIT;
SELECT task_key, state FROM ntask.task WHERE task_id IN (:agg, :send) ORDER BY task_id;
SELECT detail AS "ntask_explain(aggregate): now" FROM ntask_explain(:agg) WHERE event = 'now';
\echo '--- fan-out: three fetch workers each store their tenant''s numbers as the result;'
\echo '--- the last fetch''s success makes the aggregate ready in the same transaction'
SELECT t.payload->>'tenant' AS tenant, r.result, r.state
FROM ntask_claim('reports', 'W-fetch', max_tasks => 3) t,
	 ntask_transition(t.task_id, t.token, 'succeeded', outcome => 'fetched',
		result => '{"c-a": {"orders": 120, "eur": 3400}, "c-b": {"orders": 75, "eur": 1900},
					"c-g": {"orders": 5000, "eur": 61000}}'::jsonb -> (t.payload->>'tenant')) r
ORDER BY 1;
SELECT task_key, state FROM ntask.task WHERE task_id IN (:agg, :send) ORDER BY task_id;

\echo
\echo '=== 17. Fan-in: W1 claims the aggregate (a 1-second lease); its context carries the fetches'' results'
SELECT token AS w1_token, context
FROM ntask_claim('reports', 'W1', lease => '1 second') \gset
SELECT :w1_token AS token, jsonb_pretty(:'context'::jsonb) AS context;
\echo '--- half 1: W1 sums the tenants and checkpoints it (in the transaction of its business write)'
BEGIN;
-- (the business write of the day's totals would go here)
SELECT ntask_checkpoint(:agg, :w1_token, 'half1',
	(SELECT jsonb_build_object('tenants', count(*), 'orders', sum((v->>'orders')::int),
							   'eur', sum((v->>'eur')::int))
	 FROM jsonb_each(:'context'::jsonb->'parents') p(k, v))) AS checkpoint;
COMMIT;
\echo '--- ... and W1 is killed before half 2 (its lease runs out: sleeping 1.2 s)'
SELECT FROM pg_sleep(1.2) \g /dev/null
\echo '--- W2 takes over (token 2): context.checkpoints says half 1 is done, so it goes on with half 2'
SELECT token AS w2_token, context->'checkpoints' AS checkpoints
FROM ntask_claim('reports', 'W2', lease => '30 seconds') \gset
SELECT :w2_token AS token, :'checkpoints' AS checkpoints;
SELECT ntask_checkpoint(:agg, :w2_token, 'half2',
	'{"pdf": "s3://reports/2026-12-01.pdf"}') AS "W2 checkpoints half2";
SELECT r.result, r.state FROM ntask_transition(:agg, :w2_token, 'succeeded', outcome => 'aggregated',
	result => (:'checkpoints'::jsonb->'half1') || '{"pdf": "s3://reports/2026-12-01.pdf"}') r;
\echo '--- W1 wakes up late: its checkpoint and its transition are stale and write nothing'
SELECT ntask_checkpoint(:agg, :w1_token, 'half2', '{"pdf": "s3://reports/2026-12-01-w1.pdf"}') AS "W1 checkpoints half2";
SELECT r.result, r.state FROM ntask_transition(:agg, :w1_token, 'succeeded', outcome => 'aggregated') r;

\echo
\echo '=== 18. The send: it hands the report to the mail provider, then parks until the provider''s callback'
SELECT token AS s_token, context->'parents' AS parents
FROM ntask_claim('reports', 'W-send') \gset
SELECT :s_token AS token, :'parents' AS parents;
SELECT ntask_invoked(:send, :s_token) AS invoked;
\echo '--- (the request goes out with Idempotency-Key report:2026-12-01:send; the provider answers 202)'
SELECT ntask_await(:send, :s_token, 'report:2026-12-01:delivered', timeout => '1 day') AS await;
SELECT task_key, state, lease_owner FROM ntask.task WHERE task_id = :send;
SELECT regexp_replace(detail, :'times', '…', 'g') AS "ntask_explain(send): now"
FROM ntask_explain(:send) WHERE event = 'now';
\echo '--- nothing to claim while it waits: no lease, no worker held'
SELECT count(*) AS claimed FROM ntask_claim('reports', 'W-send');
\echo '--- the provider''s callback: the signal makes the send due; a repeated callback is a duplicate'
SELECT ntask_signal('reports', 'report:2026-12-01:delivered',
	'{"status": "delivered", "provider_id": "pm-5521"}') AS signal;
SELECT ntask_signal('reports', 'report:2026-12-01:delivered',
	'{"provider_id": "pm-5521", "status": "delivered"}') AS signal;
\echo '--- the next claim carries the callback''s payload; the send succeeds'
SELECT token AS s_token, context->'signal' AS signal
FROM ntask_claim('reports', 'W-send') \gset
SELECT :s_token AS token, :'signal' AS signal;
SELECT r.result, r.state FROM ntask_transition(:send, :s_token, 'succeeded',
	outcome => 'provider_delivered', result => :'signal'::jsonb->'payload') r;

\echo
\echo '=== 19. The workflow on call: ntask_explain of the aggregate and of the send'
\echo '--- (times and digests cut)'
-- rows of one time (W2's claim closing W1's expired lease itself, when the
-- background worker did not close it first) are listed older token first
SELECT k.task, e.event, e.token, e.actor,
	   regexp_replace(regexp_replace(e.detail, :'times', '…', 'g'),
					  '([0-9a-f]{8})[0-9a-f]{56}', '\1…', 'g') AS detail
FROM (VALUES (1, 'aggregate', :agg), (2, 'send', :send)) k(n, task, task_id),
	 ntask_explain(k.task_id) WITH ORDINALITY e
ORDER BY k.n, e.event <> 'now', e.at, e.token NULLS FIRST, e.ordinality;
