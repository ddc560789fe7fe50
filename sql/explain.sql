-- explain: ntask_explain(task_id), one time-ordered record of a task for
-- on-call, whose first line says in words what the task is waiting for
-- task ids start at 25000 here, so this file's output does not depend on the others
SELECT setval('ntask.task_task_id_seq', 25000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 25000, false) AS first_token \gset
CREATE ROLE regress_ex_ops IN ROLE ntask_admin;
CREATE ROLE regress_ex_app IN ROLE ntask_producer;
CREATE ROLE regress_ex_jobs IN ROLE ntask_worker;
-- times and durations change with every run: print them as <ts> and <dur>
CREATE FUNCTION pg_temp.ex(id bigint, pay boolean DEFAULT false)
RETURNS TABLE (event text, token bigint, actor text, detail text) LANGUAGE sql AS $$
  SELECT e.event, e.token, e.actor,
         regexp_replace(regexp_replace(e.detail,
           '\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d(:\d\d)?', '<ts>', 'g'),
           '\m\d+(\.\d)? (s|min|h|days)( \d+ (s|min|h))?\M', '<dur>', 'g')
  FROM ntask_explain(id, pay) e
$$;
-- the record is in time order, and its first line is "now"
CREATE FUNCTION pg_temp.ordered(id bigint) RETURNS boolean LANGUAGE sql AS $$
  SELECT bool_and(ok) FROM (
    SELECT coalesce(at >= lag(at) OVER (ORDER BY n), true) AS ok
    FROM (SELECT e.at, row_number() OVER () AS n FROM ntask_explain(id) e OFFSET 1) s) o
$$;
CREATE FUNCTION notify_v1_only(task_key text, payload jsonb) RETURNS text LANGUAGE sql AS $$
  SELECT CASE WHEN payload ? 'v2' THEN 'skip: message edited to v2' ELSE 'proceed' END
$$;
SELECT queue FROM ntask_queue_set('ex', max_attempts => 3, lease => '1 minute',
                                  guard => 'notify_v1_only(text, jsonb)');
SELECT queue FROM ntask_queue_set('exh', max_attempts => 3, target => '{"type": "external"}');

-- ready: due now, enqueued by a producer; the guard and the deadline are named
SET ROLE regress_ex_app;
SELECT task_id AS ready1 FROM ntask_enqueue('ex', 'notify:u-b:d-b1:m-9:v1', '{"to": "u-b", "msg": "secret text"}') \gset
RESET ROLE;
SELECT * FROM pg_temp.ex(:ready1);
-- the payload is not shown unless asked for; asked for, it is
SELECT count(*) AS payload_text_shown FROM ntask_explain(:ready1) WHERE detail LIKE '%secret text%';
SELECT event, detail FROM pg_temp.ex(:ready1, true) WHERE event = 'payload';
-- the enqueue line carries the payload digest and its version
SELECT detail LIKE '%payload digest ' || encode(ntask_digest('{"to": "u-b", "msg": "secret text"}'), 'hex') || ' (digest v1)%' AS digest_shown
FROM ntask_explain(:ready1) WHERE event = 'enqueued';

-- ready, not due yet
SELECT task_id AS later FROM ntask_enqueue('ex', 'later', '{}', run_at => now() + interval '2 hours') \gset
SELECT detail FROM pg_temp.ex(:later) WHERE event = 'now';

-- leased, not heartbeating yet (claimed, never heartbeated), not invoked
SELECT task_id AS l1, token AS l1tok FROM ntask_claim('ex', 'W1') \gset
SELECT :l1 = :ready1 AS claimed_the_oldest;
SELECT * FROM pg_temp.ex(:l1);
-- leased, heartbeating, invoked
SELECT pg_sleep(0.01);
SELECT ntask_heartbeat(:l1, :l1tok) IS NOT NULL AS heartbeat;
SELECT ntask_invoked(:l1, :l1tok);
SELECT * FROM pg_temp.ex(:l1);
-- the words name the real lease end
SELECT e.detail LIKE '%until ' || to_char(t.lease_until, 'YYYY-MM-DD HH24:MI:SSOF') || '%' AS names_lease_until
FROM ntask_explain(:l1) e, ntask.task t WHERE t.task_id = :l1 AND e.event = 'now';

-- retry_wait after a transient 503: until when, which attempt, the last error
SELECT result, state FROM ntask_transition(:l1, :l1tok, 'retry_wait', 'transient', '{"http_status": 503}',
                                           retry_at => now() + interval '10 minutes');
SELECT * FROM pg_temp.ex(:l1);
SELECT e.detail LIKE 'retry_wait until ' || to_char(t.run_at, 'YYYY-MM-DD HH24:MI:SSOF') || '%' AS names_run_at
FROM ntask_explain(:l1) e, ntask.task t WHERE t.task_id = :l1 AND e.event = 'now';

-- leased with an expired lease: not heartbeating, will be taken over
SELECT created FROM ntask_enqueue('exh', 'expiring', '{}');
SELECT task_id AS l2, token AS l2tok FROM ntask_claim('exh', 'W2', lease => '1 millisecond') \gset
SELECT pg_sleep(0.01);
SELECT detail FROM pg_temp.ex(:l2) WHERE event = 'now';

-- taken over by W3 after W2 was invoked, then an unknown outcome: the next
-- attempt must reconcile
SELECT ntask_invoked(:l2, :l2tok);
SELECT pg_sleep(0.01);
SELECT attempt, token, prior_outcome FROM ntask_claim('exh', 'W3', lease => '1 minute');
SELECT result FROM ntask_transition(:l2, tok(:l2, 2), 'retry_wait', 'unknown', error_stage => 'response_lost',
                                    retry_at => now() - interval '1 second');
SELECT * FROM pg_temp.ex(:l2);

-- repair_required: the budget is spent; an owner is assigned
SELECT attempt, token, prior_outcome FROM ntask_claim('exh', 'W4');
SELECT result, state FROM ntask_transition(:l2, tok(:l2, 3), 'retry_wait', 'transient', '{"http_status": 429}');
SELECT * FROM pg_temp.ex(:l2);
SELECT ntask_repair_assign(:l2, 'oncall-push', 'ask the provider by task key, then replay');
SELECT detail FROM pg_temp.ex(:l2) WHERE event = 'now';
-- a replay is in the record with its actor and reason
SELECT ntask_replay(:l2, 'alice', 'provider confirmed nothing was sent (OPS-17)');
SELECT event, actor, detail FROM pg_temp.ex(:l2) WHERE event IN ('now', 'replay', 'repair_assign');

-- succeeded, with the business write's receipt
SELECT task_id AS s1, token AS s1tok FROM ntask_claim('exh', 'W5') \gset
SELECT ntask_invoked(:s1, :s1tok);
BEGIN;
SET LOCAL ROLE regress_ex_jobs;
SELECT ntask_receipt(:s1, :s1tok, '{"rows": 1}');
COMMIT;
SELECT result FROM ntask_transition(:s1, :s1tok, 'succeeded', outcome => 'provider_accepted');
SELECT * FROM pg_temp.ex(:s1);
SELECT pg_temp.ordered(:s1) AS in_time_order;

-- canceled by an operator
SELECT ntask_cancel(:later, 'bob', 'message withdrawn');
SELECT event, actor, detail FROM pg_temp.ex(:later) WHERE event IN ('now', 'cancel', 'finished');

-- skipped by the guard at claim (the message was edited to v2)
SELECT task_id AS g1 FROM ntask_enqueue('ex', 'notify:u-b:d-b1:m-9:v1-stale', '{"v2": true}') \gset
SELECT count(*) FROM ntask_claim('ex', 'W6');
SELECT event, actor, detail FROM pg_temp.ex(:g1) WHERE event IN ('now', 'finished');

-- issue 30.5: on http queues the words say what the worker will really do.
-- An unknown prior outcome without a reconcile_url: the worker sends again
-- (it does not reconcile); with one: it asks the reconcile_url first.
SELECT queue FROM ntask_queue_set('exw', max_attempts => 3, lease => '1 minute',
	target => '{"type": "http", "url": "https://push.example/v1/send"}');
SELECT queue FROM ntask_queue_set('exr', max_attempts => 3, lease => '1 minute',
	target => '{"type": "http", "url": "https://push.example/v1/send", "method": "PUT",
	            "reconcile_url": "https://push.example/v1/status"}');
CREATE FUNCTION pg_temp.unknown_once(q text, k text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	c record;
BEGIN
	PERFORM ntask_enqueue(q, k, '{}');
	SELECT * INTO c FROM ntask_claim(q, 'W7');
	PERFORM ntask_invoked(c.task_id, c.token);
	PERFORM ntask_transition(c.task_id, c.token, 'retry_wait', 'unknown', error_stage => 'response',
	                         retry_at => now() - interval '1 second');
	RETURN c.task_id;
END $$;
SELECT pg_temp.unknown_once('exw', 'w1') AS w1 \gset
SELECT pg_temp.unknown_once('exr', 'r1') AS r1 \gset
SELECT detail FROM pg_temp.ex(:w1) WHERE event = 'now';
SELECT detail FROM pg_temp.ex(:r1) WHERE event = 'now';
-- a due task of a queue whose circuit breaker is open (as the worker
-- writes it) is held by the breaker, not waiting for a claim; half open,
-- it waits for the probe
SELECT breaker_failures FROM ntask_queue_set('exw', breaker_failures => 3, breaker_cooldown => '10 minutes');
SELECT task_id AS w2 FROM ntask_enqueue('exw', 'w2', '{}') \gset
INSERT INTO ntask.breaker (queue, state, failures, opened_at, open_until, changed_at)
VALUES ('exw', 'open', 3, now() - interval '1 minute', now() + interval '9 minutes', now() - interval '1 minute');
SELECT detail FROM pg_temp.ex(:w2) WHERE event = 'now';
SELECT e.detail LIKE '%open until ' || to_char(b.open_until, 'YYYY-MM-DD HH24:MI:SSOF') || '%' AS names_open_until
FROM ntask_explain(:w2) e, ntask.breaker b WHERE b.queue = 'exw' AND e.event = 'now';
UPDATE ntask.breaker SET state = 'half_open', changed_at = now() WHERE queue = 'exw';
SELECT detail FROM pg_temp.ex(:w2) WHERE event = 'now';
-- an open breaker whose cooldown has passed: the next tick probes
UPDATE ntask.breaker SET state = 'open', open_until = now() - interval '1 second' WHERE queue = 'exw';
SELECT detail FROM pg_temp.ex(:w2) WHERE event = 'now';
-- a closed breaker adds nothing
UPDATE ntask.breaker SET state = 'closed', failures = 1 WHERE queue = 'exw';
SELECT detail FROM pg_temp.ex(:w2) WHERE event = 'now';

-- only ntask_admin may explain; bad arguments
SET ROLE regress_ex_jobs;
SELECT count(*) FROM ntask_explain(:s1);
\echo :SQLSTATE
SET ROLE regress_ex_app;
SELECT count(*) FROM ntask_explain(:s1);
\echo :SQLSTATE
SET ROLE regress_ex_ops;
SELECT count(*) > 5 AS admin_may FROM ntask_explain(:s1);
SELECT count(*) FROM ntask_explain(NULL);
\echo :SQLSTATE
SELECT count(*) FROM ntask_explain(:s1, NULL);
\echo :SQLSTATE
SELECT count(*) FROM ntask_explain(-1);
\echo :SQLSTATE
RESET ROLE;
DROP FUNCTION notify_v1_only(text, jsonb);
\echo :SQLSTATE
SELECT ntask_queue_clear_guard('ex');
DROP FUNCTION notify_v1_only(text, jsonb);
DROP ROLE regress_ex_ops;
DROP ROLE regress_ex_app;
DROP ROLE regress_ex_jobs;

-- durations in words are cut, not rounded, in every unit (a 1-day await
-- timeout read "in 23 h 0 min" a moment after it was set)
SELECT ntask.explain_age(interval '23 hours 59 minutes 59.9 seconds') AS almost_a_day,
       ntask.explain_age(interval '1 hour 59 minutes 59.6 seconds') AS almost_two_hours,
       ntask.explain_age(interval '3 days 23 hours 59 minutes 59.9 seconds') AS almost_four_days;
