# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/029_flow_slots.pl: flow control's shared-memory tables when more
# buckets, retry shares or fair cursors are in use than they have slots
# (issue 29.4 and 29.5).  The node gets small tables on purpose
# (ntask.rate_limit_slots, ntask.fair_cursor_slots); the counts below also
# exceed the fixed sizes ntask had before (1024 buckets, 64 shares, 64
# cursors), where the same checks failed.
#
#   1. partition_rate_limit => '1/1 hour', 1100 keys x 2 tasks, claimed
#      until nothing more goes: no key gets a second task within the hour
#      (before: a key whose bucket was forgotten got a fresh, full one,
#      about 2000 tasks went), and the server log says the table is full.
#   2. partition_rate_limit => '1/1 second' on 100 keys: a bucket that has
#      refilled is full and may give its slot to another key, so after a
#      second more keys than slots have been served, never two tasks of a
#      key in one claim.
#   3. retry_share => 0.5 on 80 queues (64 counters), one task per claim,
#      claims going round the queues: retries go in every queue that has
#      counters, and never more than the share (before: each claim found
#      its queue's counters forgotten, and no retry ever went while first
#      attempts were due).
#   4. 70 fair queues with keys a, b, c, one task per claim, claims going
#      round the queues three times: each queue serves a, b and c, not a
#      three times (before: each claim found its queue's cursor forgotten
#      and started again at the first key).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('flow_slots');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.worker = off
ntask.backoff_jitter = off
ntask.rate_limit_slots = 64
ntask.fair_cursor_slots = 8
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ntask');

# --- 2. buckets that refilled give their slots to other keys (first, so
# part 1 finds them full and evictable)
$node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('fast', fairness => 'partition',
		partition_rate_limit => '1/1 second', lease => '1 hour');
	SELECT count(*) FROM ntask_enqueue_many('fast',
		array(SELECT 'fast-' || k || '-' || i FROM generate_series(1, 100) k, generate_series(1, 3) i),
		array(SELECT '{}'::jsonb FROM generate_series(1, 300)),
		partition_keys => array(SELECT 'k' || k FROM generate_series(1, 100) k, generate_series(1, 3) i));
	CREATE TABLE fast_claims (round int, task_key text, partition_key text);
});
for my $round (1 .. 3)
{
	$node->safe_psql('postgres', qq{
		INSERT INTO fast_claims SELECT $round, c.task_key, t.partition_key
		FROM ntask_claim('fast', 'w', max_tasks => 300) c JOIN ntask.task t USING (task_id);
	});
	sleep 1.2 if $round < 3;
}
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT 1 FROM fast_claims GROUP BY round, partition_key
						  HAVING count(*) > 1) s}),
	'0', 'rate 1/1 s: no key gets two tasks in one claim');
cmp_ok($node->safe_psql('postgres',
	'SELECT count(DISTINCT partition_key) FROM fast_claims'),
	'>', 64, 'rate 1/1 s: refilled buckets gave their slots to more keys than slots');
sleep 1.2;    # every 'fast' bucket is full again

# --- 1. more keys than slots: the limit holds
$node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('rl', fairness => 'partition',
		partition_rate_limit => '1/1 hour', lease => '1 hour');
	SELECT count(*) FROM ntask_enqueue_many('rl',
		array(SELECT 'rl-' || k || '-' || i FROM generate_series(1, 1100) k, generate_series(1, 2) i),
		array(SELECT '{}'::jsonb FROM generate_series(1, 2200)),
		partition_keys => array(SELECT 'k' || k FROM generate_series(1, 1100) k, generate_series(1, 2) i));
	CREATE TABLE rl_claims (task_key text, partition_key text);
});
for my $round (1 .. 6)
{
	$node->safe_psql('postgres', q{
		INSERT INTO rl_claims SELECT c.task_key, t.partition_key
		FROM ntask_claim('rl', 'w', max_tasks => 1000) c JOIN ntask.task t USING (task_id);
	});
}
my $handed = $node->safe_psql('postgres', 'SELECT count(*) FROM rl_claims');
cmp_ok($handed, '<=', 1100, "rate 1/1 hour over 1100 keys: at most one task per key ($handed went)");
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT 1 FROM rl_claims GROUP BY partition_key HAVING count(*) > 1) s}),
	'0', 'rate 1/1 hour: no key got a second task');
cmp_ok($handed, '>', 0, 'rate 1/1 hour: tasks went while slots were free');
ok($node->log_contains(qr/ntask: the rate-limit table is full/),
	'the server log says the rate-limit table is full');

# --- 3. retry shares of more queues than slots
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 80) q,
		ntask_queue_set('rs' || q, retry_share => 0.5, max_attempts => 5, lease => '1 hour');
	SELECT count(*) FROM generate_series(1, 80) q,
		ntask_enqueue_many('rs' || q, array(SELECT 'rs' || q || '-R' || i FROM generate_series(1, 4) i),
			array_fill('{}'::jsonb, ARRAY[4]));
	SELECT count(*) FROM generate_series(1, 80) q, ntask_claim('rs' || q, 'w', 4);
	SELECT count(*) FROM ntask.task t, ntask_transition(t.task_id, t.token, 'retry_wait',
		error_class => 'transient') r WHERE t.queue LIKE 'rs%';
	UPDATE ntask.task SET run_at = now() - interval '1 hour', due_at = now() - interval '1 hour'
	WHERE queue LIKE 'rs%';
	SELECT count(*) FROM generate_series(1, 80) q,
		ntask_enqueue_many('rs' || q, array(SELECT 'rs' || q || '-F' || i FROM generate_series(1, 4) i),
			array_fill('{}'::jsonb, ARRAY[4]));
});
# four rounds of one claim of one task per queue, the queues in turn
my $rs = $node->safe_psql('postgres', q{
	CREATE TEMP TABLE rs_claims (round int, q int, retry bool);
	DO $$
	BEGIN
		FOR r IN 1 .. 4 LOOP
			FOR q IN 1 .. 80 LOOP
				INSERT INTO rs_claims SELECT r, q, c.attempt > 1
				FROM ntask_claim('rs' || q, 'w', lease => '1 hour') c;
			END LOOP;
		END LOOP;
	END $$;
	SELECT count(*) FILTER (WHERE n_retry >= 1) || ' ' || count(*) FILTER (WHERE n_retry > 4)
	FROM (SELECT q, count(*) FILTER (WHERE retry) AS n_retry FROM rs_claims GROUP BY q) s;
});
my ($with_retry, $over) = split / /, $rs;
# counting the four first attempts of the first claim, half of eight
is($over, '0', 'retry share 0.5: no queue hands out more than half retries');
# 64 counters (ntask.rate_limit_slots) for 80 queues: the 64 queues that
# have one share as they should; the others keep retries back while first
# attempts are due (never the other way round)
cmp_ok($with_retry, '>=', 64,
	"retry share 0.5 over 80 queues: every queue with a counter hands out retries ($with_retry did)");
ok($node->log_contains(qr/ntask: the retry-share table is full/),
	'the server log says the retry-share table is full');

# --- 4. more fair queues than cursor slots
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 70) q,
		ntask_queue_set('fq' || q, fairness => 'partition', lease => '1 hour');
	SELECT count(*) FROM generate_series(1, 70) q,
		ntask_enqueue_many('fq' || q,
			array(SELECT 'fq' || q || '-' || k || i FROM unnest(ARRAY['a','b','c']) k, generate_series(1, 3) i),
			array_fill('{}'::jsonb, ARRAY[9]),
			partition_keys => array(SELECT k FROM unnest(ARRAY['a','b','c']) k, generate_series(1, 3) i));
});
my $fq = $node->safe_psql('postgres', q{
	CREATE TEMP TABLE fq_claims (round int, q int, k text);
	DO $$
	BEGIN
		FOR r IN 1 .. 3 LOOP
			FOR q IN 1 .. 70 LOOP
				INSERT INTO fq_claims SELECT r, q, t.partition_key
				FROM ntask_claim('fq' || q, 'w') c JOIN ntask.task t USING (task_id);
			END LOOP;
		END LOOP;
	END $$;
	SELECT count(*) FILTER (WHERE keys = 3) || ' ' || count(*)
	FROM (SELECT q, count(DISTINCT k) AS keys FROM fq_claims GROUP BY q) s;
});
is($fq, '70 70', '70 fair queues: each of three claims per queue serves another key');

# the same from a new session per round (no session remembers a cursor)
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 70) q,
		ntask_enqueue_many('fq' || q,
			array(SELECT 'fq' || q || '-' || k || i || 'n' FROM unnest(ARRAY['a','b','c']) k, generate_series(1, 3) i),
			array_fill('{}'::jsonb, ARRAY[9]),
			partition_keys => array(SELECT k FROM unnest(ARRAY['a','b','c']) k, generate_series(1, 3) i));
	CREATE TABLE fq_new (round int, q int, k text);
});
for my $round (1 .. 3)
{
	$node->safe_psql('postgres', qq{
		DO \$\$
		BEGIN
			FOR q IN 1 .. 70 LOOP
				INSERT INTO fq_new SELECT $round, q, t.partition_key
				FROM ntask_claim('fq' || q, 'w') c JOIN ntask.task t USING (task_id);
			END LOOP;
		END \$\$;
	});
}
my $fnew = $node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT q FROM fq_new GROUP BY q HAVING count(DISTINCT k) = 1) s});
cmp_ok($fnew, '<', 35, "70 fair queues, a session per round: most queues do not serve one key three times ($fnew did)");

$node->stop;
done_testing();
