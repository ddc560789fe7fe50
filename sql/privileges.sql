-- privileges: EXECUTE only for ntask_producer / ntask_worker / ntask_admin,
-- statements run as the extension's owner, per-queue producer_role and
-- worker_role (docs/design.md "Privileges")
SELECT setval('ntask.task_task_id_seq', 16000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 16000, false) AS first_token \gset
CREATE ROLE regress_nobody;
CREATE ROLE regress_app_a IN ROLE ntask_producer;
CREATE ROLE regress_app_b IN ROLE ntask_producer;
CREATE ROLE regress_worker IN ROLE ntask_worker;
CREATE ROLE regress_ops IN ROLE ntask_admin;
CREATE ROLE regress_pa_workers;

-- nothing is executable by PUBLIC but ntask_signal, whose own check is
-- the right to signal (issue 46.4; regress first_hour3)
SELECT p.oid::regprocedure AS public_function
FROM pg_proc p
JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
WHERE has_function_privilege('regress_nobody', p.oid, 'EXECUTE');
-- who may execute what
SELECT p.proname,
	   has_function_privilege('ntask_producer', p.oid, 'EXECUTE') AS producer,
	   has_function_privilege('ntask_worker', p.oid, 'EXECUTE') AS worker,
	   has_function_privilege('ntask_admin', p.oid, 'EXECUTE') AS admin
FROM pg_proc p
JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
WHERE p.proname LIKE 'ntask\_%'
ORDER BY 1;
-- the SECURITY DEFINER functions pin their search_path
SELECT p.oid::regprocedure AS definer, p.proconfig
FROM pg_proc p
JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
WHERE p.prosecdef ORDER BY 1;
-- the cap and turn locks are ntask's alone: no role may take them (issue 29.2)
SELECT p.oid::regprocedure AS lock_function,
	   has_function_privilege('ntask_producer', p.oid, 'EXECUTE') AS producer,
	   has_function_privilege('ntask_worker', p.oid, 'EXECUTE') AS worker,
	   has_function_privilege('ntask_admin', p.oid, 'EXECUTE') AS admin
FROM pg_proc p
WHERE p.pronamespace = 'ntask'::regnamespace AND p.proname LIKE 'claim\_%\_lock'
ORDER BY 1;

SELECT queue FROM ntask_queue_set('pa');
SELECT ntask_queue_set_roles('pa', 'regress_app_a', NULL);
SELECT task_id AS t1 FROM ntask_enqueue('pa', 'secret-1', '{"pin": 1234}') \gset

-- a role without ntask's roles can do nothing and read nothing
SET ROLE regress_nobody;
SELECT * FROM ntask_enqueue('pa', 'x');
\echo :SQLSTATE
SELECT * FROM ntask_claim('pa', 'w');
\echo :SQLSTATE
SELECT ntask_replay(:t1, 'me', 'because');
\echo :SQLSTATE
SELECT payload FROM ntask.task;
\echo :SQLSTATE
SELECT * FROM ntask.repair_queue;
\echo :SQLSTATE
RESET ROLE;

-- a producer without the queue's producer_role learns nothing about its
-- tasks: the same error for an existing key (same or other payload) and a new one
SET ROLE regress_app_b;
SELECT * FROM ntask_enqueue('pa', 'secret-1', '{"pin": 1234}');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('pa', 'secret-1', '{"pin": 0}');
\echo :SQLSTATE
SELECT * FROM ntask_enqueue('pa', 'new-key');
\echo :SQLSTATE
-- the batch form answers the same
SELECT * FROM ntask_enqueue_many('pa', ARRAY['secret-1', 'new-key'], ARRAY['{"pin": 1234}', '{}']::jsonb[]);
\echo :SQLSTATE
-- a producer cannot claim or read
SELECT * FROM ntask_claim('pa', 'w');
\echo :SQLSTATE
SELECT payload FROM ntask.task;
\echo :SQLSTATE
RESET ROLE;

-- with the queue's role, the duplicate answers as usual
SET ROLE regress_app_a;
SELECT created, state FROM ntask_enqueue('pa', 'secret-1', '{"pin": 1234}');
SELECT * FROM ntask_enqueue('pa', 'secret-1', '{"pin": 0}');
\echo :SQLSTATE
SELECT created FROM ntask_enqueue('pa', 'a-2');
RESET ROLE;

-- worker_role: a worker without it cannot claim (and gets no payload)
SELECT ntask_queue_set_roles('pa', 'regress_app_a', 'regress_pa_workers');
SET ROLE regress_worker;
SELECT * FROM ntask_claim('pa', 'w1');
\echo :SQLSTATE
RESET ROLE;
GRANT regress_pa_workers TO regress_worker;
SET ROLE regress_worker;
SELECT task_key, token, payload FROM ntask_claim('pa', 'w1');
SELECT ntask_receipt(:t1, tok(:t1, 1), '{"sent": true}');
SELECT result, state FROM ntask_transition(:t1, tok(:t1, 1), 'succeeded');
-- workers do not administer
SELECT ntask_cancel(:t1, 'w1', 'no');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('pa', max_attempts => 1);
\echo :SQLSTATE
RESET ROLE;

-- an admin reads the tables and acts; records name the caller, not the owner
SET ROLE regress_ops;
SELECT task_key, state FROM ntask.task WHERE queue = 'pa' ORDER BY 1;
SELECT ntask_cancel(task_id, 'ops', 'not needed') FROM ntask.task
WHERE queue = 'pa' AND task_key = 'a-2';
SELECT count(*) AS stats_rows FROM ntask.worker_stats;
RESET ROLE;
SELECT db_user, action FROM ntask.audit WHERE queue = 'pa' ORDER BY audit_id;
SELECT r.db_user FROM ntask.receipt r WHERE r.task_id = :t1;

-- worker_role covers every call that takes a task id and a token, not only
-- claim: a worker of another queue cannot finish, heartbeat, invoke or
-- receipt a task of pa, even holding its current token, and learns nothing
-- (42501 before the token is checked)
CREATE ROLE regress_other_worker IN ROLE ntask_worker;
SELECT queue FROM ntask_queue_set('pb');
SELECT task_id AS t3 FROM ntask_enqueue('pa', 'a-3') \gset
SET ROLE regress_worker;
SELECT task_key, token FROM ntask_claim('pa', 'w1');
RESET ROLE;
SET ROLE regress_other_worker;
SELECT * FROM ntask_transition(:t3, tok(:t3, 1), 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition(:t3, 99, 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:t3], ARRAY[tok(:t3, 1)], 'succeeded');
\echo :SQLSTATE
SELECT * FROM ntask_transition_many(ARRAY[:t3], ARRAY[tok(:t3, 1)], 'retry_wait');
\echo :SQLSTATE
SELECT * FROM ntask_transition_and_claim(:t3, tok(:t3, 1), 'succeeded', 'pb', 'w2');
\echo :SQLSTATE
SELECT ntask_heartbeat(:t3, tok(:t3, 1), '10 years');
\echo :SQLSTATE
SELECT ntask_invoked(:t3, tok(:t3, 1));
\echo :SQLSTATE
SELECT ntask_receipt(:t3, tok(:t3, 1), '{"sent": true}');
\echo :SQLSTATE
RESET ROLE;
-- nothing changed: the lease holder still finishes
SELECT state, token, (lease_until < now() + interval '1 hour') AS short_lease
FROM ntask.task WHERE task_id = :t3;
SELECT count(*) AS receipts FROM ntask.receipt WHERE task_id = :t3;
SET ROLE regress_worker;
SELECT ntask_invoked(:t3, tok(:t3, 1));
SELECT ntask_heartbeat(:t3, tok(:t3, 1)) IS NOT NULL AS extended;
SELECT result, state FROM ntask_transition(:t3, tok(:t3, 1), 'succeeded');
RESET ROLE;

-- fence grants: keys under a registered prefix belong to a role; other keys
-- stay open to every worker; the longest prefix decides
SET ROLE regress_ops;
SELECT ntask_fence_grant('cfg:tenant-a:', 'regress_pa_workers');
SELECT ntask_fence_grant('cfg:tenant-a:public:', 'ntask_worker');
RESET ROLE;
SET ROLE regress_other_worker;
SELECT ntask_fence('cfg:tenant-a:host-1', 9223372036854775807, '{}');
\echo :SQLSTATE
SELECT ntask_fence('cfg:tenant-a:public:x', 1, '{}');
SELECT ntask_fence('cfg:tenant-b:host-1', 1, '{}');
RESET ROLE;
SET ROLE regress_worker;
SELECT ntask_fence('cfg:tenant-a:host-1', 1, '{}');
RESET ROLE;
SET ROLE regress_worker;
SELECT ntask_fence_grant('cfg:', 'regress_worker');
\echo :SQLSTATE
RESET ROLE;
SELECT prefix, role FROM ntask.fence_grant ORDER BY prefix;
SELECT ntask_fence_grant('cfg:tenant-a:public:', NULL);
SELECT prefix, role FROM ntask.fence_grant ORDER BY prefix;
SELECT ntask_fence_grant('', 'regress_worker');
\echo :SQLSTATE
SELECT ntask_fence_grant(NULL, 'regress_worker');
\echo :SQLSTATE
SELECT action, reason FROM ntask.audit WHERE action = 'fence_grant' ORDER BY audit_id;
SELECT ntask_fence_grant('cfg:tenant-a:', NULL);

-- issue 29 (suspicion): a schedule enqueues through the SECURITY DEFINER
-- ntask_fire, past the queue's producer_role; so ntask_schedule checks
-- the producer right of the role that sets the schedule, and records it
-- (set_by).  The fired tasks' enqueued_by is the extension's owner (README
-- "Schedules").
CREATE ROLE regress_sched_admin IN ROLE ntask_admin;
CREATE ROLE regress_sched_producers;
SELECT queue FROM ntask_queue_set('psq');
SELECT ntask_queue_set_roles('psq', 'regress_sched_producers', NULL);
SET client_min_messages = warning;
SET ROLE regress_sched_admin;
\set SHOW_CONTEXT never
SELECT name FROM ntask_schedule('psq-nightly', '0 2 * * *', 'psq');
\echo :SQLSTATE
\set SHOW_CONTEXT errors
RESET ROLE;
GRANT regress_sched_producers TO regress_sched_admin;
SET ROLE regress_sched_admin;
SELECT name, set_by FROM ntask_schedule('psq-nightly', '0 2 * * *', 'psq');
SELECT outcome FROM ntask_fire('psq-nightly', '2026-11-28 02:00+00');
RESET ROLE;
RESET client_min_messages;
SELECT task_key, enqueued_by = (SELECT nspowner::regrole::name FROM pg_namespace WHERE nspname = 'ntask') AS by_owner
FROM ntask.task WHERE queue = 'psq';
SELECT ntask_unschedule('psq-nightly');
SELECT ntask_queue_set_roles('psq', NULL, NULL);
DROP ROLE regress_sched_admin, regress_sched_producers;

DROP ROLE regress_nobody, regress_app_a, regress_app_b, regress_worker,
	regress_ops, regress_pa_workers, regress_other_worker;
