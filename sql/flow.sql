-- flow control (issue 13): in-flight caps, per-key order, rate limits, and
-- the per-key statistics.  Task ids start at 31000 here.
SELECT setval('ntask.task_task_id_seq', 31000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 31000, false) AS first_token \gset
CREATE FUNCTION tk(k text) RETURNS bigint LANGUAGE sql STABLE AS
	$$ SELECT task_id FROM ntask.task WHERE task_key = k $$;
CREATE FUNCTION fin(k text) RETURNS text LANGUAGE sql AS
	$$ SELECT result FROM ntask_transition(tk(k),
		(SELECT token FROM ntask.task WHERE task_key = k), 'succeeded') $$;

-- hostile values: 22023, and the queue keeps its policy
SELECT queue FROM ntask_queue_set('fl');
SELECT * FROM ntask_queue_set('fl', max_inflight => -1);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', max_inflight => 1000001);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', partition_max_inflight => -5);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', breaker_failures => -1);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', breaker_failures => 1001);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', breaker_cooldown => '0 seconds');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', retry_share => 1.5);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', retry_share => -0.1);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', retry_share => 'NaN');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '50');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '/1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '0/1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '-3/1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '5x/1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '99999999999/1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '5/0 seconds');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '5/-1 second');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '5/1 month');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '5/2 days');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', rate_limit => '5/soon');
\echo :SQLSTATE
-- per-key options need the per-key walk of a fair queue
SELECT * FROM ntask_queue_set('fl', ordered => true);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', partition_max_inflight => 2);
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('fl', partition_rate_limit => '5/1 second');
\echo :SQLSTATE
SELECT max_inflight, partition_max_inflight, ordered, rate_n, rate_per, retry_share,
	   breaker_failures, breaker_cooldown
FROM ntask.queue WHERE queue = 'fl';
-- set, keep with NULL, and turn off with 0 / 'none'
SELECT max_inflight, rate_n, rate_per, breaker_failures, breaker_cooldown
FROM ntask_queue_set('fl', max_inflight => 2, rate_limit => '1000/1 minute',
					 breaker_failures => 5, breaker_cooldown => '10 seconds');
SELECT max_inflight, rate_n, rate_per, breaker_failures FROM ntask_queue_set('fl', lease => '1 minute');
SELECT max_inflight, rate_n, rate_per, breaker_failures
FROM ntask_queue_set('fl', max_inflight => 0, rate_limit => 'none', breaker_failures => 0);
-- a fair queue cannot go back to none while a per-key option is on
SELECT fairness, ordered FROM ntask_queue_set('fl', fairness => 'partition', ordered => true);
SELECT * FROM ntask_queue_set('fl', fairness => 'none');
\echo :SQLSTATE
SELECT fairness, ordered FROM ntask_queue_set('fl', fairness => 'none', ordered => false);

-- max_inflight: at most n leased at once; a held task spends nothing
SELECT queue FROM ntask_queue_set('cap', max_inflight => 2, lease => '1 minute');
SELECT count(*) FROM ntask_enqueue_many('cap', ARRAY['f-c1','f-c2','f-c3','f-c4'],
	array_fill('{}'::jsonb, ARRAY[4]));
SELECT task_key FROM ntask_claim('cap', 'w', 4);
SELECT task_key FROM ntask_claim('cap', 'w', 4);
SELECT task_key, state, attempts FROM ntask.task WHERE queue = 'cap' ORDER BY task_id;
SELECT substring(detail FROM 'held back: [^;]*') FROM ntask_explain(tk('f-c3')) WHERE event = 'now';
SELECT fin('f-c1');
SELECT task_key FROM ntask_claim('cap', 'w', 4);
-- an expired lease is not in flight: its task can be taken over (and is)
UPDATE ntask.task SET lease_until = now() - interval '1 day',
	due_at = now() - interval '1 day' WHERE task_key = 'f-c2';
SELECT task_key, token FROM ntask_claim('cap', 'w', 4);

-- partition_max_inflight: per key; other keys go on
SELECT queue FROM ntask_queue_set('pcap', fairness => 'partition', partition_max_inflight => 1);
SELECT count(*) FROM ntask_enqueue_many('pcap', ARRAY['f-a1','f-a2','f-b1','f-b2'],
	array_fill('{}'::jsonb, ARRAY[4]), partition_keys => ARRAY['a','a','b','b']);
SELECT task_key FROM ntask_claim('pcap', 'w', 4);
SELECT task_key FROM ntask_claim('pcap', 'w', 4);
SELECT substring(detail FROM 'held back: [^;]*') FROM ntask_explain(tk('f-a2')) WHERE event = 'now';
SELECT fin('f-b1');
SELECT task_key FROM ntask_claim('pcap', 'w', 4);

-- ordered: E9 before E10, one in flight per key, keyless tasks are one key
SELECT queue FROM ntask_queue_set('dev', fairness => 'partition', ordered => true,
								  max_attempts => 2, backoff_base => '1 hour',
								  backoff_max => '1 hour');
SELECT count(*) FROM ntask_enqueue_many('dev', ARRAY['f-E9','f-E10','f-E11','f-X1','f-N1','f-N2'],
	array_fill('{}'::jsonb, ARRAY[6]),
	partition_keys => ARRAY['d-b1','d-b1','d-b1','d-x', NULL, NULL]);
SELECT task_key, partition_key, ordered FROM ntask.task WHERE queue = 'dev' ORDER BY task_id;
SELECT task_key FROM ntask_claim('dev', 'w', 10);
SELECT task_key FROM ntask_claim('dev', 'w', 10);
SELECT fin('f-E9'), fin('f-N1');
SELECT task_key FROM ntask_claim('dev', 'w', 10);
-- a head waiting for its retry blocks its key (and only its key)
SELECT state FROM ntask_transition(tk('f-E10'), tok(tk('f-E10'), 1), 'retry_wait', error_class => 'transient');
SELECT fin('f-X1'), fin('f-N2');
SELECT count(*) FROM ntask_enqueue('dev', 'f-X2', '{}', partition_key => 'd-x');
SELECT task_key FROM ntask_claim('dev', 'w', 10);
-- its retry comes due: E10 goes again, E11 still waits
UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_key = 'f-E10';
SELECT task_key, attempt FROM ntask_claim('dev', 'w', 10);
-- the retry fails for good: a head in repair blocks its key ...
SELECT state FROM ntask_transition(tk('f-E10'), tok(tk('f-E10'), 2), 'retry_wait', error_class => 'transient');
SELECT task_key FROM ntask_claim('dev', 'w', 10);
SELECT partition_key, ready, leased, repair_required, unknown_attempts
FROM ntask.partition_stats WHERE queue = 'dev' ORDER BY 1;
-- ... until it is replayed (it goes first again) ...
SELECT ntask_replay(tk('f-E10'), 'ops', 'provider fixed');
SELECT task_key FROM ntask_claim('dev', 'w', 10);
SELECT fin('f-E10');
SELECT task_key FROM ntask_claim('dev', 'w', 10);
-- ... or later tasks are let pass a head in repair
SELECT count(*) FROM ntask_enqueue_many('dev', ARRAY['f-E12','f-E13'],
	array_fill('{}'::jsonb, ARRAY[2]), partition_keys => ARRAY['d-b1','d-b1']);
SELECT state FROM ntask_transition(tk('f-E11'), tok(tk('f-E11'), 1), 'repair_required', error_class => 'permanent');
SELECT task_key FROM ntask_claim('dev', 'w', 10);
-- on-call sees why E12 waits
SELECT substring(detail FROM 'held back: [^;]*') FROM ntask_explain(tk('f-E12')) WHERE event = 'now';
SELECT ordered_skip_repair FROM ntask_queue_set('dev', ordered_skip_repair => true);
SELECT task_key FROM ntask_claim('dev', 'w', 10);
SELECT fin('f-E12');
SELECT task_key FROM ntask_claim('dev', 'w', 10);

-- turning ordered on marks the queue's unfinished tasks
SELECT queue FROM ntask_queue_set('late', fairness => 'partition');
SELECT count(*) FROM ntask_enqueue_many('late', ARRAY['f-L1','f-L2'],
	array_fill('{}'::jsonb, ARRAY[2]), partition_keys => ARRAY['k','k']);
SELECT ordered FROM ntask_queue_set('late', ordered => true);
SELECT task_key, ordered FROM ntask.task WHERE queue = 'late' ORDER BY task_id;
SELECT task_key FROM ntask_claim('late', 'w', 10);

-- rate_limit: a bucket of n tokens, n per interval; held tasks stay ready
SELECT rate_n, rate_per FROM ntask_queue_set('rate', rate_limit => '3/1 hour');
SELECT count(*) FROM ntask_enqueue_many('rate', ARRAY['f-r1','f-r2','f-r3','f-r4','f-r5'],
	array_fill('{}'::jsonb, ARRAY[5]));
SELECT task_key FROM ntask_claim('rate', 'w', 5);
SELECT task_key FROM ntask_claim('rate', 'w', 5);
SELECT state, count(*), sum(attempts) FROM ntask.task WHERE queue = 'rate' GROUP BY 1 ORDER BY 1;
-- on-call sees when the next token comes (within the hour's refill of 20 min)
SELECT regexp_replace(substring(detail FROM 'the queue has a rate limit[^;]*'), '\d+ min \d+ s', 'N min N s')
FROM ntask_explain(tk('f-r4')) WHERE event = 'now';
-- partition_rate_limit: per key
SELECT partition_rate_n FROM ntask_queue_set('prate', fairness => 'partition',
	partition_rate_limit => '1/1 hour');
SELECT count(*) FROM ntask_enqueue_many('prate', ARRAY['f-p1','f-p2','f-q1','f-q2'],
	array_fill('{}'::jsonb, ARRAY[4]), partition_keys => ARRAY['p','p','q','q']);
SELECT task_key FROM ntask_claim('prate', 'w', 4);
SELECT task_key FROM ntask_claim('prate', 'w', 4);

-- retry_share: while first attempts are due, retries get at most that
-- share of the hand-outs; with none due, retries take everything
SELECT retry_share FROM ntask_queue_set('rs', retry_share => 0.25, max_attempts => 5);
SELECT count(*) FROM ntask_enqueue_many('rs', array(SELECT 'f-R' || i FROM generate_series(1, 3) i),
	array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM ntask_claim('rs', 'w', 3);
SELECT count(*) FROM ntask.task t, ntask_transition(t.task_id, t.token, 'retry_wait',
	error_class => 'transient') r WHERE t.queue = 'rs';
-- the retries are due first (an hour ago), then six first attempts
UPDATE ntask.task SET run_at = now() - interval '1 hour', due_at = now() - interval '1 hour'
WHERE queue = 'rs';
SELECT count(*) FROM ntask_enqueue_many('rs', array(SELECT 'f-F' || i FROM generate_series(1, 6) i),
	array_fill('{}'::jsonb, ARRAY[6]));
-- one task per claim: counting the three first attempts above, retries
-- stay at a quarter of the queue's hand-outs (3 of 12)
SELECT string_agg(k, ' ' ORDER BY n) AS hand_outs FROM (
	SELECT n, (SELECT task_key FROM ntask_claim('rs', 'w' || n)) AS k
	FROM generate_series(1, 9) n) s;
SELECT state, count(*), sum(attempts) FROM ntask.task WHERE queue = 'rs' GROUP BY 1 ORDER BY 1;
-- 1 turns it off; it does not go with ordered
SELECT retry_share FROM ntask_queue_set('rs', retry_share => 1);
SELECT * FROM ntask_queue_set('fl', fairness => 'partition', ordered => true, retry_share => 0.5);
\echo :SQLSTATE

-- partition_stats reads only unfinished tasks and those in repair
SELECT queue, partition_key, ready, scheduled, retry_wait, leased, repair_required,
	   oldest_due_age_s >= 0 AS has_due
FROM ntask.partition_stats WHERE queue IN ('pcap', 'rate', 'prate') ORDER BY 1, 2;
SET ROLE ntask_monitor;
SELECT count(*) > 0 AS monitor_reads FROM ntask.partition_stats;
RESET ROLE;

DROP FUNCTION fin(text);
DROP FUNCTION tk(text);
