-- schedule: one task per slot, overlap policies, retries bounded by the next slot, catch-up
-- (pg_cron is not loaded in this test instance: ntask_schedule stores the
-- schedule and says how to register it; t/002_schedule_pg_cron.pl fires for real)
-- terse: the NOTICE's hint names the test database, which differs between runners
\set VERBOSITY terse
SELECT setval('ntask.task_task_id_seq', 10000, false) AS first_task_id;
SELECT setval('ntask.token_seq', 10000, false) AS first_token \gset
SELECT queue FROM ntask_queue_set('stmt', max_attempts => 5, total_deadline => '7 days');
SELECT name, cron, queue, overlap, catchup, timezone, cron_job, last_slot
FROM ntask_schedule('statement:t1', '0 2 * * *', 'stmt', '{"tenant": "t1"}');
-- a firing of a given slot: the key names the slot
SELECT fired_slot, outcome FROM ntask_fire('statement:t1', '2026-11-28 02:00+00');
SELECT task_key, payload, deadline FROM ntask.task WHERE queue = 'stmt';
-- retries never cross into the next slot: the deadline is capped at the next slot
SELECT deadline = '2026-11-29 02:00+00' AS capped_at_next_slot FROM ntask.task WHERE queue = 'stmt';
-- the same slot again (double firing, manual re-run): a duplicate, still one task
SELECT fired_slot, outcome, reason FROM ntask_fire('statement:t1', '2026-11-28 02:00+00');
SELECT count(*) FROM ntask.task WHERE queue = 'stmt';
-- a schedule may let retries run past the next slot (the queue's total_deadline rules)
SELECT name, bound_to_next_slot FROM ntask_schedule('weekly', '0 3 * * mon', 'stmt', bound_to_next_slot => false);
SELECT fired_slot, outcome FROM ntask_fire('weekly', '2026-11-23 03:00+00');
SELECT deadline - created_at AS window FROM ntask.task WHERE task_key = 'weekly:2026-11-23T03:00:00Z';
-- a deliberate second run needs an explicit suffix and is recorded as such
SELECT fired_slot, outcome FROM ntask_fire('statement:t1', '2026-11-28 02:00+00', rerun => 'fix-1');
SELECT fired_slot, outcome FROM ntask_fire('statement:t1', '2026-11-28 02:00+00', rerun => 'fix-1');
SELECT task_key FROM ntask.task WHERE queue = 'stmt' ORDER BY task_id;
-- a time that is not a slot of the schedule
SELECT * FROM ntask_fire('statement:t1', '2026-11-28 02:30+00');
\echo :SQLSTATE

-- overlap skip: the previous slot's task is unfinished
SELECT queue FROM ntask_queue_set('ov');
SELECT name FROM ntask_schedule('skipper', '*/10 * * * *', 'ov', overlap => 'skip');
SELECT outcome FROM ntask_fire('skipper', '2026-11-28 10:00+00');
SELECT outcome, reason FROM ntask_fire('skipper', '2026-11-28 10:10+00');
-- finish the 10:00 task, then the next slot runs
SELECT result FROM ntask_claim('ov', 'W1') c, ntask_transition(c.task_id, c.token, 'succeeded') t;
SELECT outcome FROM ntask_fire('skipper', '2026-11-28 10:20+00');
-- allow: concurrent slots both enqueue
SELECT name FROM ntask_schedule('allower', '*/10 * * * *', 'ov', overlap => 'allow');
SELECT outcome FROM ntask_fire('allower', '2026-11-28 10:00+00');
SELECT outcome FROM ntask_fire('allower', '2026-11-28 10:10+00');
-- buffer_one: one slot may wait behind a running one, no more
SELECT name FROM ntask_schedule('buffer', '*/10 * * * *', 'ov', overlap => 'buffer_one');
SELECT outcome FROM ntask_fire('buffer', '2026-11-28 10:00+00');
SELECT outcome, reason FROM ntask_fire('buffer', '2026-11-28 10:10+00');
UPDATE ntask.task SET state = 'leased', lease_owner = 'W9', due_at = now() + interval '1 hour'
WHERE task_key = 'buffer:2026-11-28T10:00:00Z';
SELECT outcome FROM ntask_fire('buffer', '2026-11-28 10:20+00');
SELECT outcome, reason FROM ntask_fire('buffer', '2026-11-28 10:30+00');

-- catch-up after downtime: the last fired slot was 5 minutes ago; the
-- window (2 minutes) is measured from now, so the slot 2 minutes before the
-- current one (older than 2 minutes by the time it fires) is missed
SELECT queue FROM ntask_queue_set('cu');
SELECT name FROM ntask_schedule('minutely', '* * * * *', 'cu', overlap => 'allow', catchup => '2 minutes');
BEGIN;
UPDATE ntask.schedule SET last_slot = ntask_cron_prev('* * * * *', now()) - interval '5 minutes'
WHERE name = 'minutely';
SELECT ntask_cron_prev('* * * * *', now()) - f.fired_slot AS before_current, f.outcome, f.task_id IS NOT NULL AS has_task
FROM ntask_fire('minutely') f;
COMMIT;
-- firing again in the same minute does nothing new, and says so in one
-- duplicate row (nothing is recorded)
BEGIN;
UPDATE ntask.schedule SET last_slot = ntask_cron_prev('* * * * *', now()) WHERE name = 'minutely';
SELECT f.fired_slot = ntask_cron_prev('* * * * *', now()) AS current_slot, f.outcome, f.reason
FROM ntask_fire('minutely') f;
COMMIT;
SELECT outcome, count(*) FROM ntask.schedule_slot WHERE schedule = 'minutely' GROUP BY outcome ORDER BY outcome;
SELECT count(*) AS tasks, count(DISTINCT task_key) AS keys FROM ntask.task WHERE queue = 'cu';

-- catch-up with overlap skip: the caught-up slot gets a deadline it can
-- meet (one period from now, not the next slot, which has passed), and it
-- does not make the current slot "overlap": both are enqueued
SELECT queue FROM ntask_queue_set('cu2');
SELECT name FROM ntask_schedule('skipcu', '* * * * *', 'cu2', overlap => 'skip', catchup => '10 minutes');
BEGIN;
UPDATE ntask.schedule SET last_slot = ntask_cron_prev('* * * * *', now()) - interval '2 minutes'
WHERE name = 'skipcu';
SELECT ntask_cron_prev('* * * * *', now()) - f.fired_slot AS before_current, f.outcome
FROM ntask_fire('skipcu') f;
SELECT ntask_cron_prev('* * * * *', now()) - ss.slot AS before_current, ss.outcome,
	   t.state, t.deadline > now() AS deadline_ahead,
	   t.deadline <= now() + interval '1 minute' AS within_one_period
FROM ntask.schedule_slot ss JOIN ntask.task t USING (task_id)
WHERE ss.schedule = 'skipcu' ORDER BY ss.slot;
COMMIT;

-- time zones: a schedule at 02:30 Berlin time
SELECT name, timezone FROM ntask_schedule('berlin', '30 2 * * *', 'cu', timezone => 'Europe/Berlin');
SELECT fired_slot, outcome FROM ntask_fire('berlin', '2026-11-28 01:30+00');
SELECT task_key FROM ntask.task WHERE task_key LIKE 'berlin:%';

-- issue 30.2: a new schedule's first firing is its next slot.  A non-UTC
-- schedule is fired every minute: created at 04:35 Berlin time, its first
-- firing must not enqueue today's 02:00 (the same schedule in UTC waits)
BEGIN;
SELECT name FROM ntask_schedule('nightly-report', '0 2 * * *', 'cu', timezone => 'Europe/Berlin',
								catchup => '5 minutes');
SELECT f.fired_slot = ntask_cron_prev('0 2 * * *', now(), 'Europe/Berlin') AS latest_slot,
	   f.outcome, f.task_id IS NULL AS no_task, f.reason
FROM ntask_fire('nightly-report') f;
SELECT count(*) AS tasks FROM ntask.task WHERE task_key LIKE 'nightly-report:%';
COMMIT;
-- a schedule that never fired under an older version (last_slot NULL):
-- slots before it was created do not fire either
BEGIN;
UPDATE ntask.schedule SET last_slot = NULL, created_at = now()
WHERE name = 'nightly-report';
SELECT f.outcome, f.task_id IS NULL AS no_task FROM ntask_fire('nightly-report') f;
COMMIT;
-- replacing a schedule with another cron expression: its first firing is
-- the next slot of the new expression, no catch-up of the new expression's
-- past slots
BEGIN;
SELECT name FROM ntask_schedule('nightly-report', '* * * * *', 'cu', timezone => 'Europe/Berlin',
								catchup => '1 hour');
SELECT f.outcome, f.task_id IS NULL AS no_task FROM ntask_fire('nightly-report') f;
COMMIT;
SELECT count(*) AS slots_recorded FROM ntask.schedule_slot WHERE schedule = 'nightly-report';

-- catchup bounds the latest slot too: after an outage longer than catchup
-- nothing late is enqueued, and missed rows say so.  An hourly schedule
-- whose slot was 30 minutes ago, last fired two hours before that:
SELECT format('%s * * * *', extract(minute FROM now() - interval '30 minutes')::int) AS late_cron \gset
BEGIN;
SELECT name FROM ntask_schedule('late', :'late_cron', 'cu', overlap => 'allow', catchup => '5 minutes');
UPDATE ntask.schedule SET last_slot = ntask_cron_prev(:'late_cron', now()) - interval '2 hours'
WHERE name = 'late';
SELECT ntask_cron_prev(:'late_cron', now()) - f.fired_slot AS before_current, f.outcome,
	   f.task_id IS NULL AS no_task, f.reason
FROM ntask_fire('late') f;
SELECT last_slot = ntask_cron_prev(:'late_cron', now()) AS last_slot_advanced
FROM ntask.schedule WHERE name = 'late';
-- firing again: nothing new
SELECT f.outcome, f.task_id IS NULL AS no_task FROM ntask_fire('late') f;
COMMIT;
-- within catchup (an hour) the same late slot is enqueued, and the slot
-- before it, 90 minutes old, is missed (the window is measured from now)
BEGIN;
SELECT name FROM ntask_schedule('late', :'late_cron', 'cu', overlap => 'allow', catchup => '1 hour');
UPDATE ntask.schedule SET last_slot = ntask_cron_prev(:'late_cron', now()) - interval '2 hours'
WHERE name = 'late';
SELECT ntask_cron_prev(:'late_cron', now()) - f.fired_slot AS before_current, f.outcome,
	   f.task_id IS NULL AS no_task
FROM ntask_fire('late') f;
COMMIT;
SELECT count(*) AS late_tasks FROM ntask.task WHERE task_key LIKE 'late:%';

-- a DST gap that skips a slot leaves a missed row: 02:30 Berlin time does
-- not exist on 2026-03-29 (the clocks go from 02:00 to 03:00 at 01:00 UTC).
-- ntask.fire_due(name, at) is ntask_fire(name) as of a given time.
SET TIME ZONE 'UTC';
SELECT * FROM ntask.cron_gaps('30 2 * * *', '2026-03-27 00:00+00', '2026-04-27 00:00+00', 'Europe/Berlin');
SELECT count(*) AS minutes_in_gap, min(local_time), max(local_time), min(slot) = max(slot) AS one_instant
FROM ntask.cron_gaps('* * * * *', '2026-03-29 00:00+00', '2026-03-29 02:00+00', 'Europe/Berlin');
SELECT count(*) AS utc_has_no_gap FROM ntask.cron_gaps('* * * * *', '2026-03-29 00:00+00', '2026-03-29 02:00+00', 'UTC');
SELECT count(*) AS autumn_has_no_gap FROM ntask.cron_gaps('30 2 * * *', '2026-10-24 00:00+00', '2026-10-27 00:00+00', 'Europe/Berlin');
-- a gap before "after" or after "upto" is not listed
SELECT count(*) AS outside FROM ntask.cron_gaps('30 2 * * *', '2026-03-29 01:00+00', '2026-03-30 00:00+00', 'Europe/Berlin');
SELECT count(*) AS outside FROM ntask.cron_gaps('30 2 * * *', '2026-03-28 00:00+00', '2026-03-29 00:59+00', 'Europe/Berlin');
SELECT name FROM ntask_schedule('dst', '30 2 * * *', 'cu', timezone => 'Europe/Berlin', catchup => '2 hours');
UPDATE ntask.schedule SET last_slot = '2026-03-28 01:30+00' WHERE name = 'dst';
-- at 03:05 Berlin time on the 29th: the skipped 02:30 is recorded as missed
SELECT * FROM ntask.fire_due('dst', '2026-03-29 01:05+00');
SELECT last_slot FROM ntask.schedule WHERE name = 'dst';
-- later that day: nothing new, and the gap is not recorded twice
SELECT fired_slot, outcome, reason FROM ntask.fire_due('dst', '2026-03-29 12:00+00');
-- the next day's 02:30 (00:30 UTC) fires as usual, nothing caught up
SELECT fired_slot, outcome FROM ntask.fire_due('dst', '2026-03-30 00:30:10+00');
SELECT slot, outcome, task_id IS NOT NULL AS has_task FROM ntask.schedule_slot WHERE schedule = 'dst' ORDER BY id;
RESET TIME ZONE;

-- the history
SELECT schedule, slot, outcome, task_id IS NOT NULL AS has_task
FROM ntask.schedule_slot WHERE schedule IN ('statement:t1', 'skipper', 'buffer') ORDER BY id;

-- unschedule keeps the history and the tasks
SELECT ntask_unschedule('allower');
SELECT count(*) FROM ntask.schedule_slot WHERE schedule = 'allower';

-- hostile input
SELECT * FROM ntask_schedule(NULL, '* * * * *', 'ov');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('x', NULL, 'ov');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('bad name', '* * * * *', 'ov');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('x', '* * * *', 'ov');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('x', '61 * * * *', 'ov');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('x', '* * * * *', 'nope');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('x', '* * * * *', 'ov', overlap => 'queue');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('x', '* * * * *', 'ov', catchup => '-1 hour');
\echo :SQLSTATE
SELECT * FROM ntask_schedule('x', '* * * * *', 'ov', timezone => 'Mars/Olympus');
\echo :SQLSTATE
SELECT * FROM ntask_fire(NULL);
\echo :SQLSTATE
SELECT * FROM ntask_fire('nope');
\echo :SQLSTATE
SELECT * FROM ntask_fire('skipper', rerun => 'x');
\echo :SQLSTATE
SELECT * FROM ntask_fire('skipper', '2026-11-28 10:00+00', rerun => '');
\echo :SQLSTATE
SELECT ntask_unschedule('nope');
\echo :SQLSTATE
SELECT count(*) FROM ntask.schedule WHERE name = 'x';
\set VERBOSITY default
