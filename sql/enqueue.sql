-- enqueue: idempotent on (queue, task_key), digest-checked payloads
-- task ids start at 1000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 1000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 1000, false) AS first_token \gset
SELECT queue, max_attempts, total_deadline, lease, backoff_base, backoff_max, guard, target, retention
FROM ntask_queue_set('push', max_attempts => 3, lease => '5 seconds');
-- a new task
SELECT * FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v1', '{"msg": "m-9", "v": 1}');
-- the same key and payload again: the existing task, created = false
SELECT * FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v1', '{"msg": "m-9", "v": 1}');
-- key order, whitespace and numeric scale do not change the digest
SELECT * FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v1', '{ "v" : 1.00,"msg":"m-9" }');
-- a different payload under the same key is an error, never an overwrite
SELECT * FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v1', '{"msg": "m-9", "v": 2}');
\echo :SQLSTATE
SELECT payload FROM ntask.task WHERE task_key = 'notify:u-b:d-b1:m-9:v1';
-- a new business version is a new key
SELECT * FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-9:v2', '{"msg": "m-9", "v": 2}');
-- keys are per queue
SELECT queue FROM ntask_queue_set('email');
SELECT created, state FROM ntask_enqueue('email', 'notify:u-b:d-b1:m-9:v1', '{"x": 1}');
-- default payload, run_at in the future, partition_key, priority
SELECT created, state FROM ntask_enqueue('push', 'later', run_at => now() + interval '1 hour',
                                         partition_key => 'u-b', priority => 5);
SELECT task_key, payload, partition_key, priority, run_at > now() AS in_future,
       attempts, max_attempts, token, digest_version, length(payload_digest) AS digest_len,
       deadline - run_at AS budget_window
FROM ntask.task WHERE queue = 'push' ORDER BY task_id;
-- the digest function itself
SELECT ntask_digest('{"a": 1, "b": [1, 2.0]}') = ntask_digest('{"b":[1,2],"a":1.000}') AS same;
SELECT ntask_digest('{"a": 1}') = ntask_digest('{"a": "1"}') AS string_is_not_number;
SELECT ntask_digest('[1, 2]') = ntask_digest('[2, 1]') AS array_order_matters;
SELECT encode(ntask_digest('{}'), 'hex');
SELECT encode(ntask_digest('"x"'), 'hex') = encode(sha256('"x"'), 'hex') AS scalar_is_canonical_text;
SELECT encode(ntask_digest('{"b": [true, null], "a": "é\n"}'), 'hex')
     = encode(sha256(convert_to('{"a":"é\n","b":[true,null]}', 'UTF8')), 'hex') AS canonical_v1;
-- unknown digest versions fail closed
SELECT ntask_digest('{}', 2);
\echo :SQLSTATE
-- an enqueue rolled back leaves nothing behind
BEGIN;
SELECT created FROM ntask_enqueue('push', 'rolled-back');
ROLLBACK;
SELECT count(*) FROM ntask.task WHERE task_key = 'rolled-back';
-- enqueue in the same transaction as the business write (outbox)
CREATE TABLE message (id text PRIMARY KEY, body text);
BEGIN;
INSERT INTO message VALUES ('m-10', 'hello');
SELECT created FROM ntask_enqueue('push', 'notify:u-b:d-b1:m-10:v1', '{"msg": "m-10"}');
COMMIT;
SELECT m.id, t.state FROM message m JOIN ntask.task t ON t.payload->>'msg' = m.id;

-- issue 30.6: payloads are at most ntask.max_payload_bytes (1 MB by
-- default), checked on the stored (detoasted) jsonb, 54000 beyond it
SHOW ntask.max_payload_bytes;
SELECT created FROM ntask_enqueue('push', 'big-1', jsonb_build_object('blob', repeat('x', 2 * 1024 * 1024)));
\echo :SQLSTATE
SELECT count(*) FROM ntask_enqueue_many('push', ARRAY['big-2', 'big-3'],
	ARRAY['{}'::jsonb, jsonb_build_object('blob', repeat('x', 2 * 1024 * 1024))]);
\echo :SQLSTATE
SELECT count(*) FROM ntask.task WHERE task_key LIKE 'big-%';
-- just under the limit is fine; a smaller limit applies at once
SELECT created FROM ntask_enqueue('push', 'big-ok', jsonb_build_object('blob', repeat('x', 1000 * 1000)));
SET ntask.max_payload_bytes = '1kB';
SELECT created FROM ntask_enqueue('push', 'big-4', jsonb_build_object('blob', repeat('x', 2000)));
\echo :SQLSTATE
-- a duplicate of a stored payload that is now over the limit is refused too
SELECT created FROM ntask_enqueue('push', 'big-ok', jsonb_build_object('blob', repeat('x', 1000 * 1000)));
\echo :SQLSTATE
SELECT * FROM ntask_saga_start('big-saga', ('[{"name": "a", "queue": "push", "payload": {"blob": "' || repeat('x', 2000) || '"}}]')::jsonb);
\echo :SQLSTATE
SELECT * FROM ntask_saga_start('big-saga', ('[{"name": "a", "queue": "push", "compensate": {"queue": "push", "payload": {"blob": "' || repeat('x', 2000) || '"}}}]')::jsonb);
\echo :SQLSTATE
\set VERBOSITY terse
SELECT name FROM ntask_schedule('big-schedule', '0 2 * * *', 'push', jsonb_build_object('blob', repeat('x', 2000)));
\echo :SQLSTATE
\set VERBOSITY default
RESET ntask.max_payload_bytes;
-- any JSON value is a payload: objects, arrays, scalars, JSON null
-- (SQL NULL is refused, 22004)
SELECT v.k, e.created
FROM (VALUES ('json-array', '[1, 2]'::jsonb), ('json-string', '"x"'), ('json-number', '42'),
			 ('json-null', 'null')) v(k, p),
	 LATERAL ntask_enqueue('push', v.k, v.p) e ORDER BY v.k;
SELECT task_key, jsonb_typeof(payload) FROM ntask.task WHERE task_key LIKE 'json-%' ORDER BY 1;
SELECT created FROM ntask_enqueue('push', 'sql-null', NULL);
\echo :SQLSTATE

-- issue 30.9: notify => true sends NOTIFY ntask_<queue> with the queue name
-- as is: for a mixed-case name LISTEN needs the channel quoted (unquoted,
-- PostgreSQL folds it to lower case and hears nothing)
SELECT queue, notify FROM ntask_queue_set('Orders', notify => true);
LISTEN ntask_Orders;
LISTEN "ntask_Orders";
SELECT pg_listening_channels() AS channel ORDER BY 1;
UNLISTEN *;

-- the key probe (a duplicate uses up no task id, issue 46.10) looks up each
-- key in task_queue_task_key_key, whatever the queue held when the session
-- planned the insert: a generic plan made on an empty queue read every key
-- of the queue at each enqueue (docs/performance.md "The 1.1 pickup
-- regression"). A new session plans on an empty queue, then the queue grows.
\c
SELECT queue FROM ntask_queue_set('probe');
SELECT count(*) FROM generate_series(1, 8) g,
	LATERAL ntask_enqueue_many('probe', ARRAY['p' || g || 'a', 'p' || g || 'b'], ARRAY['{}', '{}']::jsonb[]) e;
SELECT count(*) FROM ntask_enqueue_many('probe', ARRAY(SELECT 'bulk' || i FROM generate_series(1, 3000) i),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 3000)));
SELECT count(*) FROM ntask_enqueue('probe', 'single-1');
SELECT pg_stat_force_next_flush();
SELECT idx_tup_read AS probe_before FROM pg_stat_user_indexes
WHERE indexrelname = 'task_queue_task_key_key' \gset
SELECT count(*) FROM ntask_enqueue_many('probe', ARRAY['late-a', 'late-b'], ARRAY['{}', '{}']::jsonb[]);
SELECT count(*) FROM ntask_enqueue('probe', 'late-c');
SELECT pg_stat_force_next_flush();
SELECT idx_tup_read - :probe_before < 100 AS probes_only FROM pg_stat_user_indexes
WHERE indexrelname = 'task_queue_task_key_key';
-- the later files number their tasks from fixed ids: take these out
DELETE FROM ntask.task WHERE queue = 'probe';
