-- wait: the waiting claim in one session (two-session behaviour is in the
-- isolation specs claim_wait_*; interruptions in TAP 012); task ids start
-- at 22000 here
SELECT setval('ntask.task_task_id_seq', 22000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 22000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('wq', max_attempts => 3);

-- work is due: a waiting claim returns it at once
SELECT task_id FROM ntask_enqueue('wq', 'w:1');
SELECT task_id, token FROM ntask_claim('wq', 'W1', wait => '10 seconds');
-- nothing due: it waits the whole wait and returns no row
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM ntask_claim('wq', 'W1', wait => '300 milliseconds');
SELECT clock_timestamp() - :'t0'::timestamptz >= interval '300 milliseconds' AS waited;
-- its slot is gone afterwards
SELECT count(*) FROM ntask.waiters;
-- work that comes due during the wait (a future run_at) is claimed when
-- it comes due, without a commit to wake it
SELECT task_id FROM ntask_enqueue('wq', 'w:2', run_at => clock_timestamp() + interval '300 milliseconds');
SELECT task_id, token FROM ntask_claim('wq', 'W1', wait => '10 seconds');
-- the lease counts from the look that took the task, not the statement start
SELECT task_id FROM ntask_enqueue('wq', 'w:3', run_at => clock_timestamp() + interval '400 milliseconds');
SELECT clock_timestamp() AS t1 \gset
SELECT lease_until - :'t1'::timestamptz > interval '30 seconds' + interval '350 milliseconds' AS lease_from_look
FROM ntask_claim('wq', 'W1', lease => '30 seconds', wait => '10 seconds');
-- ntask.max_wait cuts a longer wait
SET ntask.max_wait = '200ms';
SELECT clock_timestamp() AS t2 \gset
SELECT count(*) FROM ntask_claim('wq', 'W1', wait => '1 hour');
SELECT clock_timestamp() - :'t2'::timestamptz < interval '5 seconds' AS cut;
RESET ntask.max_wait;
-- a zero wait is a plain claim
SELECT count(*) FROM ntask_claim('wq', 'W1', wait => '0');

-- a wait holds no lock: after a waiting claim that found nothing, this
-- transaction holds no lock on ntask's tables
BEGIN;
SELECT count(*) FROM ntask_claim('wq', 'W1', wait => '100 milliseconds');
SELECT count(*) AS ntask_locks FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'ntask'::regnamespace;
COMMIT;
-- a claim that found tasks keeps their locks (they are leased in this transaction)
SELECT task_id FROM ntask_enqueue('wq', 'w:4');
BEGIN;
SELECT task_id FROM ntask_claim('wq', 'W1', wait => '1 second');
SELECT count(*) > 0 AS holds_task_lock FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND c.relname = 'task';
COMMIT;

-- refused where it cannot work
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM ntask_claim('wq', 'W1', wait => '1 second');
ROLLBACK;
BEGIN;
SELECT task_id FROM ntask_enqueue('wq', 'w:5');
SELECT * FROM ntask_claim('wq', 'W1', wait => '1 second');
ROLLBACK;
SELECT * FROM ntask_claim('wq', 'W1', wait => '-1 second');
SELECT * FROM ntask_claim('no_such_queue', 'W1', wait => '1 second');
-- statement_timeout ends the wait at once, and frees the slot
SET statement_timeout = '200ms';
SELECT * FROM ntask_claim('wq', 'W1', wait => '10 seconds');
RESET statement_timeout;
SELECT count(*) FROM ntask.waiters;
-- a waiting claim without the queue's worker right is refused before it waits
CREATE ROLE regress_w_worker IN ROLE ntask_worker;
CREATE ROLE regress_w_team;
SELECT ntask_queue_set_roles('wq', NULL, 'regress_w_team');
SET ROLE regress_w_worker;
SELECT * FROM ntask_claim('wq', 'W9', wait => '10 seconds');
-- ntask.waiters is for admins
SELECT * FROM ntask.waiters;
RESET ROLE;
SELECT ntask_queue_set_roles('wq', NULL, NULL);
DROP ROLE regress_w_worker, regress_w_team;

-- notify => true: NOTIFY ntask_<queue> at commit (notify_at_commit spec);
-- the channel name limits the queue name
SELECT queue, notify FROM ntask_queue_set('wq', notify => true);
SELECT queue, notify FROM ntask_queue_set('wq', max_attempts => 4);
SELECT queue, notify FROM ntask_queue_set('wq', notify => false);
SELECT queue FROM ntask_queue_set(repeat('q', 58), notify => true);
SELECT queue, notify FROM ntask_queue_set(repeat('q', 57), notify => true);

-- issue 29.1: a limit that holds the due task back makes a waiting claim
-- wait for the limit, not return at once: rate 1/1 second, the token spent
-- on wl:1, wl:2 is due; the waiting claim takes wl:2 when the next token
-- is there (about a second later), with no transaction id before that
SELECT queue FROM ntask_queue_set('wl', rate_limit => '1/1 second');
SELECT count(*) FROM ntask_enqueue_many('wl', ARRAY['wl:1', 'wl:2'], array_fill('{}'::jsonb, ARRAY[2]));
SELECT task_key FROM ntask_claim('wl', 'W1');
SELECT clock_timestamp() AS t5 \gset
SELECT task_key FROM ntask_claim('wl', 'W1', wait => '10 seconds');
SELECT clock_timestamp() - :'t5'::timestamptz BETWEEN interval '500 milliseconds' AND interval '5 seconds'
	AS at_next_token;
-- the same with max_inflight => 1: the wait runs out with nothing held, and
-- a second waiting claim in the same transaction is not refused (no xid)
SELECT queue FROM ntask_queue_set('wl', rate_limit => 'none', max_inflight => 1);
SELECT count(*) FROM ntask_enqueue('wl', 'wl:3');
BEGIN;
SELECT count(*) AS claimed, clock_timestamp() - now() >= interval '300 milliseconds' AS waited
FROM ntask_claim('wl', 'W1', wait => '300 milliseconds');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
SELECT count(*) AS claimed FROM ntask_claim('wl', 'W1', wait => '100 milliseconds');
COMMIT;
-- a cap set after this session's waiting claim read the queue and found no
-- limit (it remembers that for the next one) is found by the look: the
-- task held back is not kept locked, and the claim waits
SELECT count(*) FROM ntask_claim('wq', 'W1', wait => '10 milliseconds');
SELECT queue FROM ntask_queue_set('wq', max_inflight => 1);
SELECT count(*) > 0 AS in_flight FROM ntask.task
WHERE queue = 'wq' AND state = 'leased' AND lease_until > now();
SELECT count(*) FROM ntask_enqueue('wq', 'w:6');
BEGIN;
SELECT count(*) AS claimed, clock_timestamp() - now() >= interval '300 milliseconds' AS waited
FROM ntask_claim('wq', 'W1', wait => '300 milliseconds');
SELECT count(*) AS ntask_locks FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'ntask'::regnamespace;
COMMIT;
SELECT state FROM ntask.task WHERE task_key = 'w:6';
SELECT queue FROM ntask_queue_set('wq', max_inflight => 0);
