-- takeover_order: a claim takes an expired lease over at its place in the
-- queue's order (priority DESC, due time, task id), where an expired lease
-- is due at its lease_until, in every kind of queue, with no housekeeping
-- worker (it serves another database: ntask.database), so only the claim
-- takes leases over here.  Issue 48, lever (b), moved the leased rows out
-- of task_due_idx into task_lease_idx; this pins the order that had
-- before.  Task ids start at 48000 here.
SELECT setval('ntask.task_task_id_seq', 48000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 48000, false) AS first_token \gset

-- lease(queue, key, at): claim the task (it must be the queue's next due
-- one) for an hour, and note at; expire() then moves every noted lease's
-- end to its at, in the past: expired leases
CREATE TEMP TABLE expiry (queue text, task_key text, at timestamptz);
CREATE FUNCTION pg_temp.lease(q text, k text, at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	got text;
BEGIN
	SELECT c.task_key INTO got FROM ntask_claim(q, 'W-old', lease => '1 hour') c;
	IF got IS DISTINCT FROM k THEN
		RAISE EXCEPTION 'claimed % instead of %', got, k;
	END IF;
	INSERT INTO expiry VALUES (q, k, at);
	RETURN k;
END $$;
CREATE FUNCTION pg_temp.expire() RETURNS bigint
LANGUAGE sql AS $$
	WITH u AS (
		UPDATE ntask.task t SET lease_until = e.at, due_at = e.at
		FROM expiry e
		WHERE t.queue = e.queue AND t.task_key = e.task_key AND t.state = 'leased'
		RETURNING 1), d AS (DELETE FROM expiry)
	SELECT count(*) FROM u
$$;
-- the n-th claim in a row, one task: its key and attempt (2: a takeover)
CREATE FUNCTION pg_temp.next(q text, n integer) RETURNS TABLE (task_key text, attempt integer)
LANGUAGE sql AS $$
	SELECT c.task_key, c.attempt FROM ntask_claim(q, 'W-new') c
$$;

-- a plain queue: priority 5, 0 and -1, ready tasks and expired leases
-- interleaved by due time, a tie of due time broken by task id, a lease
-- not expired and a task not due (neither is handed out)
SELECT queue FROM ntask_queue_set('tko', max_attempts => 5);
-- the tasks to lease first: enqueued due before everything else
SELECT count(*) FROM (
	SELECT ntask_enqueue('tko', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second', priority => p)
	FROM (VALUES ('L5', 5, 1), ('L1', 0, 2), ('L2', 0, 3), ('Ltie', 0, 4), ('L3', 0, 5), ('L6', -1, 6))
		 AS v(k, p, n)) e;
SELECT pg_temp.lease('tko', 'L5', '2000-01-01 00:00:02');
SELECT pg_temp.lease('tko', 'L1', '2000-01-01 00:00:30');
SELECT pg_temp.lease('tko', 'L2', '2000-01-01 00:00:50');
-- Ltie has a lower id than Rtie, due at the same time
SELECT pg_temp.lease('tko', 'Ltie', '2000-01-01 00:01:00');
-- L3's lease runs for an hour
SELECT pg_temp.lease('tko', 'L3', '2999-01-01');
SELECT pg_temp.lease('tko', 'L6', '2000-01-01 00:00:50');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tko', k, run_at => at, priority => p)
	FROM (VALUES ('R5', 5, '2000-01-01 00:00:01'::timestamptz),
				 ('R5b', 5, '2000-01-01 00:00:03'),
				 ('R1', 0, '2000-01-01 00:00:20'),
				 ('R2', 0, '2000-01-01 00:00:40'),
				 ('Rtie', 0, '2000-01-01 00:01:00'),
				 ('R3', 0, '2000-01-01 00:01:10'),
				 ('R4', 0, '2999-01-01'),
				 ('R6', -1, '2000-01-01 00:01:00')) AS v(k, p, at)) e;
SELECT task_key, state, priority, due_at, lease_until IS NOT NULL AS leased
FROM ntask.task WHERE queue = 'tko' ORDER BY priority DESC, due_at, task_id;
-- one claim at a time: R5, L5, R5b; R1, L1, R2, L2, Ltie, Rtie, R3; L6, R6
SELECT n, x.* FROM generate_series(1, 13) n, LATERAL pg_temp.next('tko', n) x;
-- nothing else is due: L3's lease runs, R4 is later
SELECT count(*) FROM ntask_claim('tko', 'W-new', max_tasks => 10);
-- each takeover closed the old attempt as expired, and holds a new one
SELECT t.task_key, a.worker, a.result, a.ended_at IS NOT NULL AS ended
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.queue = 'tko' AND t.task_key LIKE 'L%'
ORDER BY t.task_key, a.token;

-- a batch takes the first n in that order (its rows come by task id)
SELECT queue FROM ntask_queue_set('tkb', max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkb', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second')
	FROM (VALUES ('L1', 1), ('L2', 2)) AS v(k, n)) e;
SELECT pg_temp.lease('tkb', 'L1', '2000-01-01 00:00:10');
SELECT pg_temp.lease('tkb', 'L2', '2000-01-01 00:00:40');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkb', k, run_at => at)
	FROM (VALUES ('R1', '2000-01-01 00:00:20'::timestamptz),
				 ('R2', '2000-01-01 00:00:30'),
				 ('R3', '2000-01-01 00:00:50')) AS v(k, at)) e;
SELECT task_key, attempt FROM ntask_claim('tkb', 'W-new', max_tasks => 3);
SELECT task_key, attempt FROM ntask_claim('tkb', 'W-new', max_tasks => 3);

-- a fair queue: each key in turn, within a key the same order; a key
-- whose only task is an expired lease gets its turn
SELECT queue FROM ntask_queue_set('tkf', fairness => 'partition', max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkf', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second',
						 partition_key => pk)
	FROM (VALUES ('a-L', 'a', 1), ('b-L', 'b', 2)) AS v(k, pk, n)) e;
SELECT pg_temp.lease('tkf', 'a-L', '2000-01-01 00:00:10');
SELECT pg_temp.lease('tkf', 'b-L', '2000-01-01 00:00:10');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkf', k, run_at => at, partition_key => pk)
	FROM (VALUES ('a-R1', 'a', '2000-01-01 00:00:05'::timestamptz),
				 ('a-R2', 'a', '2000-01-01 00:00:20'),
				 ('c-R', 'c', '2000-01-01 00:00:01')) AS v(k, pk, at)) e;
SELECT n, x.* FROM generate_series(1, 6) n, LATERAL pg_temp.next('tkf', n) x;

-- a fair queue's task without a key (stored before the queue turned fair:
-- made so here by hand) is found by the keyless pick, in the same order
SELECT queue FROM ntask_queue_set('tkk', max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkk', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second')
	FROM (VALUES ('L', 1)) AS v(k, n)) e;
SELECT pg_temp.lease('tkk', 'L', '2000-01-01 00:00:10');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkk', k, run_at => at)
	FROM (VALUES ('R1', '2000-01-01 00:00:05'::timestamptz),
				 ('R2', '2000-01-01 00:00:20')) AS v(k, at)) e;
SELECT queue, fairness FROM ntask_queue_set('tkk', fairness => 'partition');
UPDATE ntask.task SET partition_key = NULL WHERE queue = 'tkk';
SELECT n, x.* FROM generate_series(1, 4) n, LATERAL pg_temp.next('tkk', n) x;

-- an ordered queue: the key's head is the expired lease; it is taken
-- over before the ready task behind it, which then waits for it
SELECT queue FROM ntask_queue_set('tkord', fairness => 'partition', ordered => true,
	max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkord', k, run_at => '1999-01-01'::timestamptz, partition_key => 'k')
	FROM (VALUES ('head'), ('next')) AS v(k)) e;
SELECT pg_temp.lease('tkord', 'head', '2000-01-01 00:00:10');
SELECT pg_temp.expire();
UPDATE ntask.task SET due_at = '1998-01-01', run_at = '1998-01-01'
WHERE queue = 'tkord' AND task_key = 'next';
SELECT n, x.* FROM generate_series(1, 2) n, LATERAL pg_temp.next('tkord', n) x;

-- priority aging: an expired lease ages from its lease_until
SELECT queue FROM ntask_queue_set('tka', max_attempts => 5, priority_aging => '3650 days');
SELECT count(*) FROM (
	SELECT ntask_enqueue('tka', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second')
	FROM (VALUES ('L', 1)) AS v(k, n)) e;
SELECT pg_temp.lease('tka', 'L', '2000-01-01 00:00:10');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tka', k, run_at => at)
	FROM (VALUES ('R1', '2000-01-01 00:00:05'::timestamptz),
				 ('R2', '2000-01-01 00:00:20')) AS v(k, at)) e;
SELECT n, x.* FROM generate_series(1, 4) n, LATERAL pg_temp.next('tka', n) x;

-- paused keys: the pick that passes them by keeps the order too
SELECT queue FROM ntask_queue_set('tkp', max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkp', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second',
						 partition_key => pk)
	FROM (VALUES ('L', 'free', 1), ('Lp', 'held', 2)) AS v(k, pk, n)) e;
SELECT pg_temp.lease('tkp', 'L', '2000-01-01 00:00:10');
SELECT pg_temp.lease('tkp', 'Lp', '2000-01-01 00:00:01');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tkp', k, run_at => at, partition_key => 'free')
	FROM (VALUES ('R1', '2000-01-01 00:00:05'::timestamptz),
				 ('R2', '2000-01-01 00:00:20')) AS v(k, at)) e;
INSERT INTO ntask.key_pause (queue, partition_key, until, reason, set_by)
VALUES ('tkp', 'held', now() + interval '1 hour', 'test', 'test');
UPDATE ntask.queue SET keys_paused_until = now() + interval '1 hour' WHERE queue = 'tkp';
SELECT n, x.* FROM generate_series(1, 4) n, LATERAL pg_temp.next('tkp', n) x;

-- The claim asks task_lease_idx in C whether its queue has an expired
-- lease (claim.c, claim_lease_expired: a loose scan, one descent per
-- priority, each entry up to now checked against the heap or the
-- visibility map) before it chooses its statement.  (1) An entry of the
-- index whose row moved on (a finished task's, until vacuum) in front of
-- a live expired lease of the same priority: the live one is still taken
-- over at its place.
SELECT queue FROM ntask_queue_set('tpd', max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tpd', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second')
	FROM (VALUES ('D', 1), ('L', 2)) AS v(k, n)) e;
SELECT pg_temp.lease('tpd', 'D', '2000-01-01 00:00:05');
SELECT pg_temp.lease('tpd', 'L', '2000-01-01 00:00:30');
SELECT pg_temp.expire();
-- D's worker finishes it late (no one took it over): its expired entry
-- stays in the index, dead
SELECT r.result, r.state FROM ntask.task t,
	LATERAL ntask_transition(t.task_id, t.token, 'succeeded') r
WHERE t.queue = 'tpd' AND t.task_key = 'D';
SELECT count(*) FROM (
	SELECT ntask_enqueue('tpd', k, run_at => at)
	FROM (VALUES ('R1', '2000-01-01 00:00:10'::timestamptz),
				 ('R2', '2000-01-01 00:00:40')) AS v(k, at)) e;
-- R1, L, R2
SELECT n, x.* FROM generate_series(1, 3) n, LATERAL pg_temp.next('tpd', n) x;
-- (2) Live leases not expired at more priorities above the expired one
-- than the probe descends into (it then answers "maybe" and the claim
-- runs the statement that decides per priority): still R1, L, R2, and the
-- ready task of the top priority first.
SELECT queue FROM ntask_queue_set('tpm', max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tpm', 'H' || p, run_at => '1999-01-01', priority => p)
	FROM generate_series(11, 22) p) e;
SELECT count(*) FROM ntask_claim('tpm', 'W-old', max_tasks => 12, lease => '1 hour');
SELECT count(*) FROM ntask_enqueue('tpm', 'L', run_at => '1999-01-01', priority => 1);
SELECT pg_temp.lease('tpm', 'L', '2000-01-01 00:00:30');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tpm', k, run_at => at, priority => p)
	FROM (VALUES ('Rtop', 30, '2000-01-01 00:00:50'::timestamptz),
				 ('R1', 1, '2000-01-01 00:00:10'),
				 ('R2', 1, '2000-01-01 00:00:40')) AS v(k, p, at)) e;
SELECT n, x.* FROM generate_series(1, 4) n, LATERAL pg_temp.next('tpm', n) x;
-- (3) An expired lease on a page the visibility map says all-visible (a
-- worker died, then vacuum ran): trusted without the heap, taken over
SELECT queue FROM ntask_queue_set('tpv', max_attempts => 5);
SELECT count(*) FROM (
	SELECT ntask_enqueue('tpv', k, run_at => '1999-01-01'::timestamptz + n * interval '1 second')
	FROM (VALUES ('L', 1)) AS v(k, n)) e;
SELECT pg_temp.lease('tpv', 'L', '2000-01-01 00:00:10');
SELECT pg_temp.expire();
SELECT count(*) FROM (
	SELECT ntask_enqueue('tpv', k, run_at => at)
	FROM (VALUES ('R1', '2000-01-01 00:00:20'::timestamptz),
				 ('R2', '2000-01-01 00:00:40')) AS v(k, at)) e;
VACUUM ntask.task;
-- L, R1, R2
SELECT n, x.* FROM generate_series(1, 3) n, LATERAL pg_temp.next('tpv', n) x;

-- a waiting claim wakes when a lease runs out and takes it over (the
-- next-due look reads the leases too), well before its wait ends
SELECT queue FROM ntask_queue_set('tkw', max_attempts => 5);
SELECT count(*) FROM ntask_enqueue('tkw', 'w');
SELECT task_key, attempt FROM ntask_claim('tkw', 'W-old', lease => '500 milliseconds');
SELECT clock_timestamp() AS t0 \gset
SELECT task_key, attempt FROM ntask_claim('tkw', 'W-new', wait => '20 seconds');
SELECT clock_timestamp() - :'t0'::timestamptz < interval '15 seconds' AS woke_at_expiry;
