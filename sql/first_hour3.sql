-- issue 46 (a third first hour): least-privilege roles, explain's words,
-- receipts after a final report, wakes, a dropped worker_role, task ids
SELECT setval('ntask.task_task_id_seq', 46000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 46000, false) AS first_token \gset
CREATE ROLE regress_fh3_ops IN ROLE ntask_admin;
CREATE ROLE regress_fh3_workers;
CREATE ROLE regress_fh3_worker IN ROLE ntask_worker, regress_fh3_workers;

-- item 2: ntask_admin runs ntask_bulk and ntask_bulk_all on a queue with a
-- worker_role it does not hold, dry run included (like ntask_cancel)
SELECT queue FROM ntask_queue_set('fh3push', max_attempts => 1);
SELECT ntask_queue_set_roles('fh3push', NULL, 'regress_fh3_workers');
SELECT count(*) FROM ntask_enqueue_many('fh3push', ARRAY['p1', 'p2', 'p3', 'p4'],
	ARRAY['{}', '{}', '{}', '{}']::jsonb[]);
SET ROLE regress_fh3_worker;
SELECT count(*) FROM (
	SELECT ntask_transition(c.task_id, c.token, 'repair_required', 'permanent')
	FROM ntask_claim('fh3push', 'w1', max_tasks => 2) c) x;
RESET ROLE;
SELECT pg_has_role('regress_fh3_ops', 'regress_fh3_workers', 'USAGE') AS ops_is_a_worker;
SET ROLE regress_fh3_ops;
SELECT matched, changed, remaining FROM ntask_bulk('fh3push', 'replay', 'ops', 'incident',
	'{"state": "repair_required"}', dry_run => true);
SELECT matched, changed, remaining FROM ntask_bulk('fh3push', 'replay', 'ops', 'incident',
	'{"state": "repair_required"}');
CALL ntask_bulk_all('fh3push', 'cancel', 'ops', 'incident', '{"key_prefix": "p"}');
-- an unknown queue is still 42704
\set VERBOSITY terse
SELECT * FROM ntask_bulk('fh3nosuch', 'cancel', 'ops', 'x', dry_run => true);
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
SELECT task_key, state FROM ntask.task WHERE queue = 'fh3push' ORDER BY task_key;
-- the bulk calls' audit rows name the admin
SELECT db_user, action, reason FROM ntask.audit
WHERE queue = 'fh3push' AND action LIKE 'bulk%' ORDER BY audit_id;

-- issue 45 item 5: bulk actions know waiting and awaiting; a key_prefix
-- cancel reaches every unfinished state
SELECT queue FROM ntask_queue_set('fh3camp', max_attempts => 3);
SELECT count(*) FROM ntask_enqueue_many('fh3camp',
	ARRAY['camp:parent', 'camp:await', 'camp:ready', 'camp:retry', 'camp:repair'],
	ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[]);
SELECT state FROM ntask_enqueue('fh3camp', 'camp:child', depends_on => ARRAY['camp:parent']);
CREATE TEMP TABLE fh3c AS SELECT task_key, task_id, token FROM ntask_claim('fh3camp', 'w1', max_tasks => 5);
SELECT task_key FROM fh3c ORDER BY 1;
SELECT ntask_await(task_id, token, 'camp:paid') FROM fh3c WHERE task_key = 'camp:await';
SELECT ntask_release(task_id, token) FROM fh3c WHERE task_key = 'camp:ready';
SELECT result FROM fh3c, ntask_transition(task_id, token, 'retry_wait', 'transient', retry_at => now() + interval '1 hour')
WHERE task_key = 'camp:retry';
SELECT result FROM fh3c, ntask_transition(task_id, token, 'repair_required', 'permanent')
WHERE task_key = 'camp:repair';
SELECT task_key, state FROM ntask.task WHERE queue = 'fh3camp' ORDER BY task_key;
SET ROLE regress_fh3_ops;
-- the filter names waiting and awaiting (cancel only: neither is replayed
-- nor rescheduled)
SELECT matched, changed, remaining FROM ntask_bulk('fh3camp', 'cancel', 'ops', 'campaign withdrawn',
	'{"state": ["waiting", "awaiting"]}', dry_run => true);
\set VERBOSITY terse
SELECT * FROM ntask_bulk('fh3camp', 'replay', 'ops', 'x', '{"state": "waiting"}');
\echo :SQLSTATE
SELECT * FROM ntask_bulk('fh3camp', 'reschedule', 'ops', 'x', '{"state": "awaiting"}');
\echo :SQLSTATE
\set VERBOSITY default
-- every unfinished state: leased, waiting, awaiting, ready, retry_wait, repair_required
SELECT matched, changed, remaining FROM ntask_bulk('fh3camp', 'cancel', 'ops', 'campaign withdrawn',
	'{"key_prefix": "camp:"}', dry_run => true);
CALL ntask_bulk_all('fh3camp', 'cancel', 'ops', 'campaign withdrawn', '{"key_prefix": "camp:"}');
RESET ROLE;
SELECT task_key, state FROM ntask.task WHERE queue = 'fh3camp' ORDER BY task_key;
-- the parent's holder learns its task was canceled
SELECT result FROM fh3c, ntask_transition(task_id, token, 'succeeded') WHERE task_key = 'camp:parent';

-- item 4: a role holding only a queue's signal_role can signal it, and
-- nothing else: not another queue, not enqueue, not claim
CREATE ROLE regress_fh3_webhook;	-- no ntask role at all
CREATE ROLE regress_fh3_payments;
GRANT regress_fh3_payments TO regress_fh3_webhook;
CREATE ROLE regress_fh3_nobody;
SELECT queue FROM ntask_queue_set('fh3pay');
SELECT queue FROM ntask_queue_set('fh3open');	-- no roles at all
SELECT ntask_queue_set_signal_role('fh3pay', 'regress_fh3_payments');
SELECT state FROM ntask_enqueue('fh3pay', 'order-1');
SELECT task_id AS pay_id, token AS pay_tok FROM ntask_claim('fh3pay', 'w1') \gset
SELECT ntask_await(:pay_id, :pay_tok, 'paid:order-1');
SET ROLE regress_fh3_webhook;
SELECT ntask_signal('fh3pay', 'paid:order-1', '{"status": "paid"}');
SELECT ntask_signal('fh3pay', 'paid:order-1', '{"status": "paid"}');
\set VERBOSITY terse
SELECT ntask_signal('fh3open', 'k');
\echo :SQLSTATE
SELECT ntask_signal('fh3nosuch', 'k');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('fh3open', 'x');
\echo :SQLSTATE
SELECT * FROM ntask_claim('fh3pay', 'w');
\echo :SQLSTATE
RESET ROLE;
-- a role with nothing: the same 42501 for every queue, existing or not
SET ROLE regress_fh3_nobody;
SELECT ntask_signal('fh3pay', 'paid:order-1');
\echo :SQLSTATE
SELECT ntask_signal('fh3open', 'k');
\echo :SQLSTATE
SELECT ntask_signal('fh3nosuch', 'k');
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
SELECT task_key, state FROM ntask.task WHERE queue = 'fh3pay';
SELECT signal_key, sent_by FROM ntask.signal WHERE queue = 'fh3pay';

-- item 5: explain on a queue without a target, after an invoked attempt's
-- lease expired, names what happens: the next claim says prior_outcome
-- 'unknown', no background worker sends anything
SELECT queue, target FROM ntask_queue_set('fh3plain', max_attempts => 3,
	backoff_base => '1 millisecond', backoff_max => '1 millisecond');
SELECT task_id AS pl_id FROM ntask_enqueue('fh3plain', 'plain-1') \gset
SELECT ntask_invoked(task_id, token) FROM ntask_claim('fh3plain', 'w1', lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT count(*) > 0 AS rescued FROM ntask_housekeeping();
SELECT state, unknown_attempts FROM ntask.task WHERE task_id = :pl_id;
SELECT substring(detail FROM 'prior_outcome[^;]*') AS prior FROM ntask_explain(:pl_id) WHERE event = 'now';
SELECT pg_sleep(0.01);
SELECT prior_outcome FROM ntask_claim('fh3plain', 'w2');

-- item 6: a token that has made its own final report (any transition:
-- repair_required, retry_wait, succeeded) may no longer write a receipt:
-- stale; its own receipt, written before the report, still answers
-- duplicate / conflict (a retry after a lost commit response)
SELECT queue FROM ntask_queue_set('fh3rc', max_attempts => 3,
	backoff_base => '1 millisecond', backoff_max => '1 millisecond');
SELECT count(*) FROM ntask_enqueue_many('fh3rc', ARRAY['rc-repair', 'rc-retry', 'rc-done', 'rc-kept'],
	ARRAY['{}', '{}', '{}', '{}']::jsonb[]);
CREATE TEMP TABLE fh3r AS SELECT task_key, task_id, token FROM ntask_claim('fh3rc', 'w1', max_tasks => 4);
SELECT result FROM fh3r, ntask_transition(task_id, token, 'repair_required', 'permanent') WHERE task_key = 'rc-repair';
SELECT ntask_receipt(task_id, token, '{"row": 1}') FROM fh3r WHERE task_key = 'rc-repair';
SELECT result FROM fh3r, ntask_transition(task_id, token, 'retry_wait', 'transient') WHERE task_key = 'rc-retry';
SELECT ntask_receipt(task_id, token, '{"row": 2}') FROM fh3r WHERE task_key = 'rc-retry';
SELECT result FROM fh3r, ntask_transition(task_id, token, 'succeeded') WHERE task_key = 'rc-done';
SELECT ntask_receipt(task_id, token, '{"row": 3}') FROM fh3r WHERE task_key = 'rc-done';
-- written before the report: the retry of the same content is duplicate,
-- other content conflict
SELECT ntask_receipt(task_id, token, '{"row": 4}') FROM fh3r WHERE task_key = 'rc-kept';
SELECT result FROM fh3r, ntask_transition(task_id, token, 'retry_wait', 'transient') WHERE task_key = 'rc-kept';
SELECT ntask_receipt(task_id, token, '{"row": 4}') FROM fh3r WHERE task_key = 'rc-kept';
SELECT ntask_receipt(task_id, token, '{"row": 5}') FROM fh3r WHERE task_key = 'rc-kept';
-- no receipt was written after a report: the next attempts are not told
-- 'committed'
SELECT t.task_key, count(r.*) AS receipts FROM ntask.task t LEFT JOIN ntask.receipt r USING (task_id)
WHERE t.queue = 'fh3rc' GROUP BY 1 ORDER BY 1;
SELECT pg_sleep(0.01);
SELECT task_key, prior_outcome FROM ntask_claim('fh3rc', 'w2', max_tasks => 4) ORDER BY 1;

-- item 9: DROP ROLE of a queue's worker_role (and producer_role) leaves an
-- oid in ntask.queue; the refusals say why, and so do explain and
-- queue_stats (an extension cannot refuse DROP ROLE: see design.md)
CREATE ROLE regress_fh3_gone;
CREATE ROLE regress_fh3_w2 IN ROLE ntask_worker, ntask_producer, regress_fh3_gone;
SELECT queue FROM ntask_queue_set('fh3gone');
SELECT ntask_queue_set_roles('fh3gone', 'regress_fh3_gone', 'regress_fh3_gone');
SELECT task_id AS gone1 FROM ntask_enqueue('fh3gone', 'g1') \gset
SELECT task_id AS gone2 FROM ntask_enqueue('fh3gone', 'g2') \gset
SET ROLE regress_fh3_w2;
SELECT token AS gone1_tok FROM ntask_claim('fh3gone', 'w1') \gset
RESET ROLE;
SELECT dropped_roles FROM ntask.queue_stats WHERE queue = 'fh3gone';
DROP ROLE regress_fh3_gone;
SELECT worker_role::oid = producer_role::oid AS same_dangling_oid FROM ntask.queue WHERE queue = 'fh3gone';
SET ROLE regress_fh3_w2;
SELECT * FROM ntask_claim('fh3gone', 'w1');
SELECT * FROM ntask_enqueue('fh3gone', 'g3');
SELECT result FROM ntask_transition(:gone1, :gone1_tok, 'succeeded');
SELECT ntask_heartbeat(:gone1, :gone1_tok);
RESET ROLE;
SELECT dropped_roles FROM ntask.queue_stats WHERE queue = 'fh3gone';
SELECT substring(detail FROM 'worker_role[^;]*') AS why FROM ntask_explain(:gone2) WHERE event = 'now';
SELECT substring(detail FROM 'worker_role[^;]*') AS why FROM ntask_explain(:gone1) WHERE event = 'now';
-- naming another role (or none) repairs it
SELECT ntask_queue_set_roles('fh3gone', NULL, NULL);
SELECT dropped_roles FROM ntask.queue_stats WHERE queue = 'fh3gone';
SET ROLE regress_fh3_w2;
SELECT task_key FROM ntask_claim('fh3gone', 'w1');
RESET ROLE;
DROP ROLE regress_fh3_w2;

-- item 10: a duplicate enqueue uses up no task id (single and batch); the
-- next new task gets the next id
SELECT queue FROM ntask_queue_set('fh3ids');
SELECT task_id AS id1 FROM ntask_enqueue('fh3ids', 'd1') \gset
SELECT created FROM ntask_enqueue('fh3ids', 'd1');
SELECT created FROM ntask_enqueue('fh3ids', 'd1');
SELECT count(*) FILTER (WHERE created) AS created FROM ntask_enqueue_many('fh3ids', ARRAY['d1', 'd1'], ARRAY['{}', '{}']::jsonb[]);
SELECT task_id - :id1 AS next_id_step FROM ntask_enqueue('fh3ids', 'd2');
SELECT e.n, e.task_id - :id1 AS id_step, e.created FROM ntask_enqueue_many('fh3ids',
	ARRAY['d1', 'd3', 'd2', 'd4'], ARRAY['{}', '{}', '{}', '{}']::jsonb[])
	WITH ORDINALITY AS e(task_id, created, state, outcome, result, n) ORDER BY 1;
SELECT task_id - :id1 AS next_id_step FROM ntask_enqueue('fh3ids', 'd5');

-- the end
DROP ROLE regress_fh3_ops, regress_fh3_worker, regress_fh3_workers,
	regress_fh3_webhook, regress_fh3_payments, regress_fh3_nobody;
