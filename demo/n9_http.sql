-- demo/n9_http.sql: the provider path of the N9 story, run by scripts/demo.sh
-- after demo/n9.sql.  The background worker dispatches queue 'push_http' to a
-- loopback fault-injecting provider (t/provider.py) on :provider_port.
-- The provider accepts N9's first request and never answers (the response
-- is lost); it deduplicates by Idempotency-Key.
\set QUIET 1
\pset footer off
\echo
\echo '=== 10. The provider path: the background worker pushes N9 over HTTP (queue push_http)'
SELECT queue FROM ntask_queue_set('push_http', max_attempts => 3, backoff_base => '200 ms',
	target => jsonb_build_object('type', 'http',
		'url', 'http://127.0.0.1:' || :'provider_port' || '/send',
		'timeout_ms', 1000));
\echo '--- enqueue in the business transaction; the worker is woken when it commits'
BEGIN;
SELECT task_id AS n9h, created FROM ntask_enqueue('push_http', 'notify:u-b:d-b1:m-9:v1',
	'{"to": "u-b", "device": "d-b1", "message": "m-9", "version": 1}') \gset
COMMIT;
\echo '--- waiting for the worker (attempt 1: accepted, then the response is lost)'
DO $$
BEGIN
	FOR i IN 1..150 LOOP
		EXIT WHEN EXISTS (SELECT 1 FROM ntask.task
						  WHERE queue = 'push_http' AND state IN ('succeeded', 'repair_required'));
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
\echo '--- the ledger: attempt 1 timed out after the request left (unknown, not "not sent"),'
\echo '--- attempt 2 went out under the same Idempotency-Key and was accepted'
SELECT token, attempt, worker, invoked_at IS NOT NULL AS invoked, result,
	   error_class, error_stage, outcome_known, outcome, detail->>'http_status' AS http
FROM ntask.attempt_all WHERE task_id = :n9h ORDER BY token;
SELECT task_key, state, outcome, attempts, unknown_attempts FROM ntask.task WHERE task_id = :n9h;
SELECT dispatched, accepted, transient, permanent, unknown FROM ntask.worker_stats;

\echo
\echo '=== On call: "where is N9 and why is it (not) done?" ntask_explain, one record per task'
\echo '--- N9 in the SQL worker path (queue push)'
SELECT to_char(e.at, 'HH24:MI:SS.MS') AS at, e.event, e.token, e.actor, e.detail
FROM ntask.task t, ntask_explain(t.task_id) e
WHERE t.queue = 'push' AND t.task_key = 'notify:u-b:d-b1:m-9:v1';
\echo '--- N9 in the HTTP path (queue push_http)'
SELECT to_char(at, 'HH24:MI:SS.MS') AS at, event, token, actor, detail
FROM ntask_explain(:n9h);
