-- demo part 5 (scripts/demo.sh): seeds 000 §6 and 001 §5.  Tenant c-g
-- floods the notification queue; c-a's N9 still goes out next, and each
-- device gets its notifications in order, one at a time.
\set QUIET 1
\pset footer off
\echo
\echo '=== 14. c-g floods the queue: N9 for c-a still goes out next'
SELECT queue FROM ntask_queue_set('notify_fair', fairness => 'partition',
	partition_max_inflight => 2);
SELECT count(*) AS c_g_tasks FROM ntask_enqueue_many('notify_fair',
	array(SELECT 'cg-' || i FROM generate_series(1, 5000) i),
	array(SELECT '{}'::jsonb FROM generate_series(1, 5000) i),
	partition_keys => array_fill('c-g'::text, ARRAY[5000]));
SELECT created FROM ntask_enqueue('notify_fair', 'notify:u-b:d-b1:m-9:v1',
	'{"msg": "m-9"}', partition_key => 'c-a');
\echo '--- four workers claim once each: c-g gets at most two at a time, N9 is among the first'
SELECT w, (SELECT task_key FROM ntask_claim('notify_fair', 'W' || w)) AS task_key
FROM generate_series(1, 4) w;
SELECT partition_key, ready, leased FROM ntask.partition_stats
WHERE queue = 'notify_fair' ORDER BY 1;
\echo
\echo '=== 15. Per-device order: E9 before E10, never both in flight'
SELECT queue FROM ntask_queue_set('device_push', fairness => 'partition', ordered => true);
SELECT count(*) FROM ntask_enqueue_many('device_push', ARRAY['E9', 'E10'],
	ARRAY['{"n": 9}', '{"n": 10}']::jsonb[], partition_keys => ARRAY['d-b1', 'd-b1']);
\echo '--- two workers ask: only E9 goes'
SELECT w, (SELECT task_key FROM ntask_claim('device_push', 'W' || w)) AS task_key
FROM generate_series(1, 2) w;
\echo '--- E9 succeeds: now E10 goes'
SELECT r.result FROM ntask.task t, ntask_transition(t.task_id, t.token, 'succeeded') r
WHERE t.queue = 'device_push' AND t.task_key = 'E9';
SELECT task_key FROM ntask_claim('device_push', 'W1');
