-- receipt: the three-state commit receipt, and ntask_fence
-- task ids start at 9000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 9000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 9000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('rep', max_attempts => 3);
-- the business side: a result table written under ntask_receipt
CREATE TABLE report (task_id bigint PRIMARY KEY, token bigint, body jsonb);
SELECT task_id AS r1 FROM ntask_enqueue('rep', 'report:2026-11-29') \gset
SELECT token FROM ntask_claim('rep', 'W1');
-- the pattern: write the business row only when the receipt is applied
BEGIN;
SELECT ntask_receipt(:r1, tok(:r1, 1), '{"rows": 42, "total": 1.50}') AS receipt \gset
\echo :receipt
INSERT INTO report SELECT :r1, 1, '{"rows": 42, "total": 1.50}' WHERE :'receipt' = 'applied';
COMMIT;
-- the commit response was lost: the same token and content again is a duplicate
-- (key order, whitespace and numeric scale do not matter)
SELECT ntask_receipt(:r1, tok(:r1, 1), '{ "total":1.5,"rows":42 }');
-- the same token with other content is a conflict; the first receipt stays
SELECT ntask_receipt(:r1, tok(:r1, 1), '{"rows": 43, "total": 1.50}');
SELECT task_id = :r1 AS same_task, token, digest_version,
       payload_digest = ntask_digest('{"rows": 42, "total": 1.5}') AS first_digest
FROM ntask.receipt;
SELECT * FROM report;
-- the receipt does not end the attempt; the transition does
SELECT result, state FROM ntask_transition(:r1, tok(:r1, 1), 'succeeded', outcome => 'report_committed');
SELECT ntask_receipt(:r1, tok(:r1, 1), '{"rows": 42, "total": 1.5}');

-- a rolled-back business transaction leaves no receipt
SELECT task_id AS r2 FROM ntask_enqueue('rep', 'report:2026-11-30') \gset
SELECT token FROM ntask_claim('rep', 'W1');
BEGIN;
SELECT ntask_receipt(:r2, tok(:r2, 1), '{"rows": 7}');
INSERT INTO report VALUES (:r2, 1, '{"rows": 7}');
ROLLBACK;
SELECT count(*) FROM ntask.receipt WHERE task_id = :r2;
SELECT count(*) FROM report WHERE task_id = :r2;

-- stale: W1 (token 1) lost the task to W2 (token 2) and committed nothing
SELECT queue FROM ntask_queue_set('rep2', max_attempts => 3);
SELECT task_id AS r3 FROM ntask_enqueue('rep2', 'report:2026-12-01') \gset
SELECT token FROM ntask_claim('rep2', 'W1', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT token, prior_outcome FROM ntask_claim('rep2', 'W2', lease => '1 millisecond');
SELECT ntask_receipt(:r3, tok(:r3, 1), '{"rows": 1}');
-- W2 commits a receipt, then stalls; W3 takes over and learns it was committed
SELECT ntask_receipt(:r3, tok(:r3, 2), '{"rows": 1}');
SELECT pg_sleep(0.01);
SELECT token, prior_outcome FROM ntask_claim('rep2', 'W3');
-- W1's receipt stays stale; W2's retry of its own receipt is still a duplicate
SELECT ntask_receipt(:r3, tok(:r3, 1), '{"rows": 1}');
SELECT ntask_receipt(:r3, tok(:r3, 2), '{"rows": 1}');
-- one business commit per task: W3 holds the task now, but W2's receipt
-- is the task's; W3's receipt is a duplicate (same content: do not write
-- again) or a conflict (other content), and writes no receipt of its own
SELECT ntask_receipt(:r3, tok(:r3, 3), '{"rows": 1}');
SELECT ntask_receipt(:r3, tok(:r3, 3), '{"rows": 2}');
SELECT token FROM ntask.receipt WHERE task_id = :r3 ORDER BY token;
-- a canceled task's token is stale for receipts too
SELECT task_id AS r4 FROM ntask_enqueue('rep2', 'report:2026-12-02') \gset
SELECT token FROM ntask_claim('rep2', 'W1');
SELECT ntask_cancel(:r4, 'ops', 'report withdrawn');
SELECT ntask_receipt(:r4, tok(:r4, 1), '{"rows": 1}');

-- a stored digest of an unknown version fails closed
UPDATE ntask.receipt SET digest_version = 9 WHERE task_id = :r1;
SELECT ntask_receipt(:r1, tok(:r1, 1), '{"rows": 42, "total": 1.5}');
\echo :SQLSTATE
UPDATE ntask.receipt SET digest_version = 1 WHERE task_id = :r1;

-- hostile input
SELECT ntask_receipt(NULL, 1, '{}');
\echo :SQLSTATE
SELECT ntask_receipt(:r1, NULL, '{}');
\echo :SQLSTATE
SELECT ntask_receipt(:r1, tok(:r1, 1), NULL);
\echo :SQLSTATE
SELECT ntask_receipt(424242, tok(424242, 1), '{}');
\echo :SQLSTATE
SELECT ntask_receipt(:r1, tok(:r1, 5), '{}');
\echo :SQLSTATE
SELECT ntask_receipt(:r1, 0, '{}');
\echo :SQLSTATE

-- a committed receipt is the known outcome: an invoked attempt whose
-- receipt committed is closed with outcome_known, by a lease expiry as by
-- an "unknown" transition, and does not count as an unknown outcome
SELECT task_id AS r5 FROM ntask_enqueue('rep', 'report:receipt-known') \gset
SELECT task_id AS r6 FROM ntask_enqueue('rep', 'report:receipt-known-2') \gset
SELECT count(*) FROM ntask_claim('rep', 'W1', 2, lease => '1 millisecond');
SELECT ntask_invoked(:r5, tok(:r5, 1)), ntask_invoked(:r6, tok(:r6, 1));
SELECT ntask_receipt(:r5, tok(:r5, 1), '{"sent": 5}'), ntask_receipt(:r6, tok(:r6, 1), '{"sent": 6}');
SELECT result FROM ntask_transition(:r6, tok(:r6, 1), 'retry_wait', 'unknown');
SELECT pg_sleep(0.01);
SELECT expired >= 1 AS released_some FROM ntask_housekeeping();
SELECT t.task_key, a.result, a.outcome_known, t.unknown_attempts
FROM ntask.attempt a JOIN ntask.task t USING (task_id)
WHERE a.task_id IN (:r5, :r6) ORDER BY t.task_key;
SELECT task_key, prior_outcome FROM ntask_claim('rep', 'W2', 2) ORDER BY task_key;

-- ntask_fence: a rollout table written under a monotonic fence
CREATE TABLE rollout (doc text, host text, version bigint, content jsonb, PRIMARY KEY (doc, host));
CREATE FUNCTION publish(doc text, host text, version bigint, content jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	r text := ntask_fence('config:' || doc || ':' || host, version, content);
BEGIN
	IF r = 'applied' THEN
		INSERT INTO rollout VALUES (doc, host, version, content)
		ON CONFLICT ON CONSTRAINT rollout_pkey
		DO UPDATE SET version = EXCLUDED.version, content = EXCLUDED.content;
	END IF;
	RETURN r;
END $$;
SELECT publish('doc-7', 'host-3', 1, '{"max_conn": 100}');
SELECT publish('doc-7', 'host-3', 3, '{"max_conn": 200}');
-- a late version 2 is stale; the watermark and the content stay at 3
SELECT publish('doc-7', 'host-3', 2, '{"max_conn": 150}');
-- the same version and content again: duplicate; other content: conflict
SELECT publish('doc-7', 'host-3', 3, '{ "max_conn" : 200 }');
SELECT publish('doc-7', 'host-3', 3, '{"max_conn": 250}');
SELECT * FROM rollout;
SELECT fence_key, token, payload_digest = ntask_digest('{"max_conn": 200}') AS v3_digest FROM ntask.fence;
SELECT fence_key, token FROM ntask.fence_receipt ORDER BY token;
-- fences are independent per key
SELECT publish('doc-7', 'host-4', 1, '{"max_conn": 100}');
-- a rolled-back publish leaves the fence where it was
BEGIN;
SELECT publish('doc-7', 'host-3', 4, '{"max_conn": 300}');
ROLLBACK;
SELECT fence_key, token FROM ntask.fence ORDER BY fence_key;
-- hostile input
SELECT ntask_fence(NULL, 1, '{}');
\echo :SQLSTATE
SELECT ntask_fence('', 1, '{}');
\echo :SQLSTATE
SELECT ntask_fence(repeat('f', 513), 1, '{}');
\echo :SQLSTATE
SELECT ntask_fence('f', NULL, '{}');
\echo :SQLSTATE
SELECT ntask_fence('f', 0, '{}');
\echo :SQLSTATE
SELECT ntask_fence('f', -1, '{}');
\echo :SQLSTATE
SELECT ntask_fence('f', 1, NULL);
\echo :SQLSTATE
UPDATE ntask.fence SET digest_version = 9 WHERE fence_key = 'config:doc-7:host-3';
SELECT ntask_fence('config:doc-7:host-3', 3, '{"max_conn": 200}');
\echo :SQLSTATE
-- an older token that did apply once is a duplicate, not stale (lost response, late retry)
UPDATE ntask.fence SET digest_version = 1 WHERE fence_key = 'config:doc-7:host-3';
SELECT ntask_fence('config:doc-7:host-3', 1, '{"max_conn": 100}');
SELECT ntask_fence('config:doc-7:host-3', 1, '{"max_conn": 101}');
SELECT ntask_fence('config:doc-7:host-3', 2, '{"max_conn": 150}');
