
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/010_first_hour.pl: what a new user meets first (issue 20).
#
#   1. Without shared_preload_libraries: CREATE EXTENSION warns that no
#      background worker runs, and then every SQL function works in the
#      same session (0.2: the first C call defined PGC_POSTMASTER GUCs after
#      start-up and the session died with FATAL); ntask.worker_stats says
#      "not preloaded"; the log has no FATAL.
#   2. With the worker: an unclaimed task past its deadline is sent to
#      repair_required (deadline_exceeded) within a few ticks (0.2 swept
#      deadlines once a minute), and ntask.worker_stats names the database.
#
# No fixed sleeps: poll_query_until with its default bound.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# ---------------------------------------------------------------------
# 1. No preload
# ---------------------------------------------------------------------

my $plain = PostgreSQL::Test::Cluster->new('no_preload');
$plain->init;
$plain->append_conf('postgresql.conf', "ntask.backoff_jitter = off\n");
$plain->start;

my ($rc, $out, $err) = $plain->psql('postgres', q{
	CREATE EXTENSION ntask;
	SELECT count(*) FROM ntask_queue_set('q', lease => '1 minute');
	SELECT created FROM ntask_enqueue('q', 'k1', '{"a": 1}');
	SELECT task_key || ':' || attempt FROM ntask_claim('q', 'W1');
	SELECT r.result FROM ntask.task t, ntask_transition(t.task_id, t.token, 'succeeded') r
	WHERE t.task_key = 'k1';
	SELECT expired || '/' || repaired || '/' || pruned FROM ntask_housekeeping();
	SELECT state FROM ntask.worker_stats;
	SHOW ntask.database;
	SELECT 'still connected';
}, on_error_stop => 1);
is($rc, 0, 'no preload: CREATE EXTENSION and the SQL API in one session exit 0');
like($err, qr/WARNING:  ntask: the library is not in shared_preload_libraries, so no background worker runs/,
	'no preload: CREATE EXTENSION warns that no background worker runs');
is($out, "1\nt\nk1:1\napplied\n0/0/0\nnot preloaded\n\nstill connected",
	'no preload: enqueue, claim, transition, housekeeping, worker_stats and SHOW work in the same session');
unlike($err, qr/FATAL/, 'no preload: no FATAL reached the client');
ok(!$plain->log_contains(qr/FATAL/), 'no preload: no FATAL in the server log');

# issue 30.8: an http target and a rate limit need the preload; ntask_queue_set
# stores them, with the warning CREATE EXTENSION gives, and none for the rest
($rc, $out, $err) = $plain->psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('q', max_attempts => 4);
	SELECT count(*) FROM ntask_queue_set('q', target => '{"type": "external"}');
}, on_error_stop => 1);
is($rc . '|' . $err, '0|', 'no preload: a queue without an http target or a rate limit: no warning');
$plain->append_conf('postgresql.conf', "ntask.http_allowed_hosts = 'push.example'\n");
$plain->restart;
($rc, $out, $err) = $plain->psql('postgres', q{
	SELECT target->>'url' FROM ntask_queue_set('h', target => '{"type": "http", "url": "https://push.example/x"}');
}, on_error_stop => 1);
is($rc . '|' . $out, '0|https://push.example/x', 'no preload: the http target is stored');
like($err, qr/WARNING:  ntask: the library is not in shared_preload_libraries, so no background worker dispatches the http target/,
	'no preload: ntask_queue_set warns that no background worker dispatches the http target');
for my $arg (q{rate_limit => '5/1 second'}, q{partition_rate_limit => '1/1 second', fairness => 'partition'},
	q{retry_share => 0.5})
{
	($rc, $out, $err) = $plain->psql('postgres',
		qq{SELECT count(*) FROM ntask_queue_set('r', $arg)}, on_error_stop => 1);
	is($rc . '|' . $out, '0|1', "no preload: $arg is stored");
	like($err, qr/WARNING:  ntask: the library is not in shared_preload_libraries, so the rate limit or retry share cannot be enforced/,
		"no preload: ntask_queue_set($arg) warns");
}
($rc, $out, $err) = $plain->psql('postgres',
	q{SELECT count(*) FROM ntask_queue_set('r', rate_limit => 'none', partition_rate_limit => 'none', retry_share => 1)},
	on_error_stop => 1);
is($rc . '|' . $err, '0|', 'no preload: turning them off does not warn');
$plain->stop;

# ---------------------------------------------------------------------
# 2. Deadlines are enforced within a few ticks
# ---------------------------------------------------------------------

my $node = PostgreSQL::Test::Cluster->new('deadlines');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
ntask.naptime = '200ms'
});
$node->start;
$node->safe_psql('postgres', q{CREATE EXTENSION ntask});
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'running' FROM ntask.worker_stats}),
	'deadlines: the worker runs');
is($node->safe_psql('postgres', q{SELECT database FROM ntask.worker_stats}),
	'postgres', 'worker_stats names the database the worker serves');

# tasks of a queue no worker claims (no http target), with a deadline 2 s
# from now: only housekeeping's deadline sweep can move them
$node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('dq', total_deadline => '2 seconds');
	SELECT count(*) FROM ntask_enqueue('dq', 'late-1', '{}');
	SELECT count(*) FROM ntask_enqueue('dq', 'late-2', '{}');
});
my $deadline = $node->safe_psql('postgres',
	q{SELECT max(deadline) FROM ntask.task WHERE queue = 'dq'});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM ntask.task
		  WHERE queue = 'dq' AND state = 'repair_required' AND reason = 'deadline_exceeded'}),
	'deadlines: both tasks went to repair_required (deadline_exceeded) without a claim');
my $late = $node->safe_psql('postgres', qq{
	SELECT extract(epoch FROM max(finished_at) - '$deadline'::timestamptz)::numeric(6,1)
	FROM ntask.task WHERE queue = 'dq'});
cmp_ok($late, '<', 30,
	"deadlines: enforced $late s after the deadline (ntask.naptime 200 ms; 0.2 swept once a minute)");
note "deadline enforced $late s late";
$node->stop;

done_testing();
