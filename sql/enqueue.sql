-- enqueue: idempotent on (queue, task_key), digest-checked payloads
-- task ids start at 1000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 1000, false) AS first_task_id;
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
