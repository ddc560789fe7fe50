
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/022_flow_concurrency.pl: flow control (issue 13) under real
# concurrency: eight pgbench clients claiming and finishing at once, and
# the ledger (ntask.attempt) checked afterwards.  The isolation specs show
# each race step by step; this shows the invariants hold when nobody
# orders the steps.
#
#   1. ordered => true, 12 keys x 15 tasks, leases of 200 ms and one client
#      in four stalling 300 ms before it finishes (so leases run out, heads
#      are taken over and the stalled finishes are stale): per key, every
#      task succeeds, tasks go in task id order, and no attempt of a task
#      starts before the attempt that finished the task before it ended.
#   2. partition_max_inflight => 2 and max_inflight => 5 (long leases, no
#      takeovers): at no instant of the ledger are more than 2 attempts of
#      one key, or 5 of the queue, open.
#   3. rate_limit => '40/1 second' for about 2 s: at most 40 (the full
#      bucket) + 40 per second elapsed were handed out, and at least the 40
#      of the bucket.
#
# Every bound is a count, not a speed: none depends on how fast the machine is.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('flow_concurrency');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.worker = off
max_connections = 40
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ntask;
	-- what each client saw right after its claim committed: a lease is in
	-- flight from its claim's commit (at or before seen_at) until it is
	-- finished (at or after its attempt's ended_at) or runs out
	-- (lease_until), so [seen_at, least(lease_until, ended_at)] lies inside
	-- the real lease: two such intervals that overlap are two leases that
	-- really were in flight at once (the checks cannot fail spuriously).
	CREATE TABLE obs (task_id bigint, token bigint, seen_at timestamptz, lease_until timestamptz);
	CREATE VIEW lease AS
		SELECT t.queue, t.partition_key AS k, o.task_id, o.token, o.seen_at AS s,
			   least(o.lease_until, coalesce(a.ended_at, 'infinity')) AS e
		FROM obs o JOIN ntask.task t USING (task_id)
		JOIN ntask.attempt_all a ON a.task_id = o.task_id AND a.token = o.token;
});

my $dir = PostgreSQL::Test::Utils::tempdir;

sub pgbench
{
	my ($name, $script, @args) = @_;
	my $file = "$dir/$name.sql";
	open my $fh, '>', $file or die "cannot write $file: $!";
	print $fh $script;
	close $fh;
	$node->command_ok(
		[ 'pgbench', '-n', '-c', '8', '-j', '2', '-f', $file, @args, 'postgres' ],
		"$name: pgbench runs");
}

# --- 1. ordered, with takeovers and stale finishes
$node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('ord', fairness => 'partition', ordered => true,
		max_attempts => 50, total_deadline => '1 hour');
	SELECT count(*) FROM ntask_enqueue_many('ord',
		array(SELECT 'o-' || k || '-' || i FROM generate_series(1, 15) i, generate_series(1, 12) k
			  ORDER BY i, k),
		array(SELECT '{}'::jsonb FROM generate_series(1, 180)),
		partition_keys => array(SELECT 'k' || k FROM generate_series(1, 15) i, generate_series(1, 12) k
								ORDER BY i, k));
});
pgbench('ordered', q{
SELECT coalesce(max(task_id), 0) AS tid, coalesce(max(token), 0) AS tok,
	   coalesce(extract(epoch FROM max(lease_until)), 0) AS lu
FROM ntask_claim('ord', 'w' || :client_id, lease => '200 milliseconds') \gset
\if :tid > 0
INSERT INTO obs VALUES (:tid, :tok, clock_timestamp(), to_timestamp(:lu));
\set stall random(1, 4)
\if :stall = 1
\sleep 300 ms
\endif
SELECT result FROM ntask_transition(:tid, :tok, 'succeeded');
\else
\sleep 5 ms
\endif
}, '-t', '400');
# whatever pgbench did not finish (a stalled client's lease ran out at the
# end): drain it one claim at a time
$node->safe_psql('postgres', q{
	DO $$ DECLARE r record; n int := 0; BEGIN
		LOOP
			PERFORM pg_sleep(0.05);
			SELECT * INTO r FROM ntask_claim('ord', 'drain', lease => '1 minute');
			IF r.task_id IS NULL THEN
				EXIT WHEN NOT EXISTS (SELECT 1 FROM ntask.task WHERE queue = 'ord'
									  AND state <> 'succeeded');
				n := n + 1;
				EXIT WHEN n > 200;
				CONTINUE;
			END IF;
			INSERT INTO obs VALUES (r.task_id, r.token, clock_timestamp(), r.lease_until);
			PERFORM ntask_transition(r.task_id, r.token, 'succeeded');
		END LOOP;
	END $$;
});
is($node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE state = 'succeeded') || '/' || count(*) FROM ntask.task WHERE queue = 'ord'"),
	'180/180', 'ordered: every task succeeded');
my $takeovers = $node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
	WHERE t.queue = 'ord' AND a.result = 'lease_expired'});
cmp_ok($takeovers, '>', 0, "ordered: leases ran out and were taken over ($takeovers)");
# the finish of each task (its succeeded attempt's ended_at: the real
# finish is at or after it) and the first sight of the next task of its key
# (the real hand-out is at or before it)
is($node->safe_psql('postgres', q{
	WITH fin AS (
		SELECT t.partition_key AS k, t.task_id,
			   (SELECT a.ended_at FROM ntask.attempt_all a WHERE a.task_id = t.task_id
				AND a.result = 'succeeded') AS done,
			   (SELECT min(o.seen_at) FROM obs o WHERE o.task_id = t.task_id) AS first
		FROM ntask.task t WHERE t.queue = 'ord'),
	seq AS (
		SELECT k, task_id, first, lag(done) OVER (PARTITION BY k ORDER BY task_id) AS prev_done
		FROM fin)
	SELECT count(*) FROM seq WHERE prev_done IS NOT NULL AND first < prev_done}),
	'0', 'ordered: no task of a key was handed out before the one before it was finished');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (
		SELECT task_id, lag(task_id) OVER (PARTITION BY k ORDER BY s, task_id) AS prev
		FROM lease WHERE queue = 'ord') x WHERE prev > task_id}),
	'0', 'ordered: hand-outs of each key in task id order');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM lease x JOIN lease y ON y.queue = x.queue AND y.k = x.k
		AND (y.task_id, y.token) <> (x.task_id, x.token)
	WHERE x.queue = 'ord' AND y.s >= x.s AND y.s < x.e}),
	'0', 'ordered: never two leases of one key in flight at once');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM lease WHERE queue = 'ord'"),
	'>=', 180, 'ordered: every hand-out was seen');

# --- 2. caps
$node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('cap', fairness => 'partition',
		partition_max_inflight => 2, max_inflight => 5, lease => '1 minute');
	SELECT count(*) FROM ntask_enqueue_many('cap',
		array(SELECT 'c-' || i FROM generate_series(1, 400) i),
		array(SELECT '{}'::jsonb FROM generate_series(1, 400)),
		partition_keys => array(SELECT 'p' || (i % 4) FROM generate_series(1, 400) i));
});
pgbench('caps', q{
SELECT coalesce(max(task_id), 0) AS tid, coalesce(max(token), 0) AS tok,
	   coalesce(extract(epoch FROM max(lease_until)), 0) AS lu
FROM ntask_claim('cap', 'w' || :client_id) \gset
\if :tid > 0
INSERT INTO obs VALUES (:tid, :tok, clock_timestamp(), to_timestamp(:lu));
\sleep 2 ms
SELECT result FROM ntask_transition(:tid, :tok, 'succeeded');
\endif
}, '-t', '300');
my $caps = $node->safe_psql('postgres', q{
	WITH a AS (SELECT k, s, e FROM lease WHERE queue = 'cap')
	SELECT (SELECT max(n) FROM (SELECT (SELECT count(*) FROM a y WHERE y.k = x.k
				AND y.s <= x.s AND x.s < y.e) AS n FROM a x) q)
		|| ' ' || (SELECT max(n) FROM (SELECT (SELECT count(*) FROM a y
				WHERE y.s <= x.s AND x.s < y.e) AS n FROM a x) q)
		|| ' ' || (SELECT count(*) FROM a)});
my ($per_key, $per_queue, $attempts) = split / /, $caps;
cmp_ok($attempts, '>', 100, "caps: work was done ($attempts hand-outs)");
cmp_ok($per_key, '<=', 2, "caps: at most 2 open per key at any instant (max $per_key)");
cmp_ok($per_queue, '<=', 5, "caps: at most 5 open in the queue at any instant (max $per_queue)");

# --- 3. rate limit
$node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('rate', rate_limit => '40/1 second', lease => '1 minute');
	SELECT count(*) FROM ntask_enqueue_many('rate',
		array(SELECT 'r-' || i FROM generate_series(1, 1000) i),
		array(SELECT '{}'::jsonb FROM generate_series(1, 1000)));
});
my $t0 = time;
pgbench('rate', q{
SELECT count(*) FROM ntask_claim('rate', 'w' || :client_id);
\sleep 2 ms
}, '-T', '2');
my $elapsed = time - $t0;
my $got = $node->safe_psql('postgres',
	"SELECT count(*) FROM ntask.task WHERE queue = 'rate' AND state = 'leased'");
my $bound = int(40 + 40 * $elapsed) + 1;
cmp_ok($got, '<=', $bound,
	sprintf('rate: %d handed out in %.1f s, at most the bucket plus the refill (%d)', $got, $elapsed, $bound));
cmp_ok($got, '>=', 40, 'rate: at least the full bucket went out');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM ntask.task WHERE queue = 'rate' AND state = 'ready' AND attempts > 0"),
	'0', 'rate: the tasks held back spent no attempt');

$node->stop;
done_testing();
