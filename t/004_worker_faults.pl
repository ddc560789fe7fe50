
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/004_worker_faults.pl: the background worker under faults, against the
# loopback provider t/provider.py (idempotent by Idempotency-Key: a re-send
# of a key that already had its effect is answered 200 and counted as a
# duplicate, not as a second effect).
#
#   1. SIGKILL of the worker with transfers in flight (reconcile_url set):
#      the postmaster restarts, leases are rescued, every task succeeds, none
#      is lost, nothing is re-sent (the unknown attempts are reconciled).
#   2. Immediate shutdown with transfers in flight (no reconcile_url): after
#      the restart every task ends succeeded or repair_required; a key is
#      re-sent at most once per unknown attempt.
#   3. SIGTERM while calls hang (provider hangs 60 s, timeout_ms 60 s): the
#      worker is gone within seconds, records nothing for the dropped
#      transfers, comes back; the leases are rescued as unknown.
#   4. A streaming standby (synchronous) runs no worker; promoted mid-run,
#      it starts one that finishes the remaining tasks; tokens stay
#      monotonic per task across the failover and no attempt number is
#      sent twice.
# Throughout: nothing reaches the provider without a committed
# ntask_invoked (requests per key <= invoked attempts), and per task the
# attempt tokens strictly increase.
#
# No fixed sleeps: poll_query_until, or polling the provider / a pid with a
# wall-clock bound.

use strict;
use warnings;

use FindBin;
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use lib $FindBin::Bin;
use NtaskProvider;

my $json = JSON::PP->new->canonical;

# ---------------------------------------------------------------------
# The provider
# ---------------------------------------------------------------------

my $pport = NtaskProvider::start('004');

# number of /send requests the provider saw for keys with this prefix
sub psends
{
	my ($prefix) = @_;
	my $n = 0;
	$n += $_->{requests} for values %{ pkeys($prefix) };
	return $n;
}

# ---------------------------------------------------------------------
# The node (also the primary of case 4)
# ---------------------------------------------------------------------

my $ntask_conf = "restart_after_crash = on\n" . $worker_conf;
my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', $ntask_conf);
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ntask');

sub worker_pid
{
	my ($n) = @_;
	return $n->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'ntask worker'});
}

# queue(node, name, max_attempts, target overrides)
sub queue
{
	my ($n, $q, $max_attempts, %t) = @_;
	my $target = $json->encode({
		type => 'http', url => "http://127.0.0.1:$pport/send", timeout_ms => 1500, %t });
	$n->safe_psql('postgres', qq{SELECT queue FROM ntask_queue_set('$q', max_attempts => $max_attempts,
		lease => '1 s', backoff_base => '100 ms', backoff_max => '1 s',
		target => \$t\$$target\$t\$::jsonb)});
}

sub enqueue
{
	my ($n, $q, $prefix, $count) = @_;
	return $n->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE e.created)
		FROM generate_series(1, $count) i,
			 ntask_enqueue('$q', '$prefix' || lpad(i::text, 2, '0'), jsonb_build_object('i', i)) e});
}

sub all_final
{
	my ($n, $q) = @_;
	return $n->poll_query_until('postgres', qq{
		SELECT count(*) FROM ntask.task
		WHERE queue = '$q' AND state NOT IN ('succeeded', 'repair_required', 'canceled', 'skipped')},
		'0');
}

# the invariants every case checks on queue q / key prefix p
sub check_invariants
{
	my ($n, $q, $p, $what, %opt) = @_;
	my $keys = pkeys($p);
	my %db = map { my @f = split /\|/; ($f[0] => [ @f[ 1 .. $#f ] ]) }
	  split /\n/, $n->safe_psql('postgres', qq{
		SELECT t.task_key, t.state, t.unknown_attempts,
			   count(a.*) FILTER (WHERE a.invoked_at IS NOT NULL),
			   coalesce(string_agg(a.attempt::text, ',' ORDER BY a.attempt)
						FILTER (WHERE a.invoked_at IS NOT NULL), '')
		FROM ntask.task t LEFT JOIN ntask.attempt_all a USING (task_id)
		WHERE t.queue = '$q' GROUP BY t.task_key, t.state, t.unknown_attempts});

	my (@sent_uninvoked, @bad_attempt_no, @lost, @too_many_resends, @repeated_attempt_no);
	for my $key (sort keys %db)
	{
		my ($state, $unknown, $invoked, $invoked_list) = @{ $db{$key} };
		my %inv = map { $_ => 1 } split /,/, $invoked_list;
		my $k = $keys->{$key} // { requests => 0, effects => 0, duplicates => 0, attempts => [] };
		push @sent_uninvoked, "$key: $k->{requests} requests > $invoked invoked"
		  if $k->{requests} > $invoked;
		my @notinv = grep { !$inv{ $_ // '' } } @{ $k->{attempts} };
		push @bad_attempt_no, "$key: NTask-Attempt @notinv never invoked" if @notinv;
		push @lost, "$key: $state without a provider effect"
		  if $state eq 'succeeded' && $k->{effects} != 1;
		push @too_many_resends, "$key: $k->{duplicates} re-sends > $unknown unknown attempts"
		  if $k->{duplicates} > $unknown;
		my %seen;
		my @rep = grep { $seen{$_}++ } @{ $k->{attempts} };
		push @repeated_attempt_no, "$key: NTask-Attempt @rep sent twice" if @rep;
	}
	my @unknown_keys = grep { !exists $db{$_} } keys %$keys;
	is_deeply(\@unknown_keys, [], "$what: the provider saw only keys of this queue's tasks");
	is_deeply(\@sent_uninvoked, [], "$what: per key, requests <= attempts invoked first");
	is_deeply(\@bad_attempt_no, [], "$what: every NTask-Attempt sent belongs to an invoked attempt");
	is_deeply(\@lost, [], "$what: every succeeded task has exactly one effect at the provider");
	is_deeply(\@too_many_resends, [], "$what: a key is re-sent only after an unknown outcome");
	is_deeply(\@repeated_attempt_no, [], "$what: no attempt number sent twice for one key")
	  if $opt{unique_attempts};
	is( $n->safe_psql('postgres', qq{
			SELECT count(*) FROM ntask.task t
			WHERE t.queue = '$q' AND (
				t.token <> (SELECT max(a.token) FROM ntask.attempt_all a WHERE a.task_id = t.task_id)
				OR t.attempts <> (SELECT count(*) FROM ntask.attempt_all a WHERE a.task_id = t.task_id)
				OR EXISTS (SELECT 1 FROM ntask.attempt_all a1 JOIN ntask.attempt_all a2
						   ON a2.task_id = a1.task_id AND a2.attempt > a1.attempt
						   WHERE a1.task_id = t.task_id AND a2.token <= a1.token)
				OR EXISTS (SELECT 1 FROM ntask.attempt_all a
						   WHERE a.task_id = t.task_id AND a.ended_at IS NULL))}),
		'0',
		"$what: per task, attempt tokens strictly increase, task.token is the latest, no attempt left open");
	return;
}

# =====================================================================
# 1. SIGKILL with transfers in flight
# =====================================================================

queue($node, 'kq', 5, reconcile_url => "http://127.0.0.1:$pport/status", max_inflight => 4);
prov('POST', '/_admin/rules', { rules => { 'kill-' => [ { status => 200, delay_ms => 800 } ] } });
is(enqueue($node, 'kq', 'kill-', 20), '20', 'kill: 20 tasks enqueued');

ok(wait_for('5 kill- requests at the provider', 60, sub { psends('kill-') >= 5 }),
	'kill: the worker is sending (second wave in flight)');
my $pid1 = worker_pid($node);
ok(kill('KILL', $pid1), "kill: SIGKILL to the worker (pid $pid1)");

ok( $node->poll_query_until('postgres',
		qq{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask worker' AND pid <> $pid1},
		'1'),
	'kill: the postmaster restarted and a new worker runs')
  or die 'the server did not come back after the worker was killed';
ok($node->log_contains(qr/\(PID $pid1\) was terminated by signal 9/),
	'kill: the server log shows the worker killed by signal 9');
ok(all_final($node, 'kq'), 'kill: every task reached a final state');
is($node->safe_psql('postgres',
		q{SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM ntask.task WHERE queue = 'kq'}),
	'20|20', 'kill: 20 tasks, all succeeded (none lost)');
cmp_ok( $node->safe_psql('postgres', q{
		SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
		WHERE t.queue = 'kq' AND a.result = 'lease_expired' AND a.invoked_at IS NOT NULL
		  AND NOT a.outcome_known}),
	'>=', 1, 'kill: the crash hit invoked transfers (their leases expired, outcome unknown)');
cmp_ok( $node->safe_psql('postgres',
		q{SELECT count(*) FROM ntask.task WHERE queue = 'kq' AND outcome = 'provider_reconciled'}),
	'>=', 1, 'kill: a transfer that reached the provider before the crash was reconciled');
{
	my $k = pkeys('kill-');
	is(scalar(grep { $_->{duplicates} > 0 } values %$k), 0,
		'kill: nothing was re-sent (reconcile before resend)');
	is(scalar(grep { $_->{effects} != 1 } values %$k), 0, 'kill: one effect per key');
}
check_invariants($node, 'kq', 'kill-', 'kill');

# =====================================================================
# 2. Immediate shutdown with transfers in flight
# =====================================================================

queue($node, 'iq', 5, timeout_ms => 2500, max_inflight => 5);
prov('POST', '/_admin/rules', { rules => { 'imm-' => [ { status => 200, delay_ms => 1000 } ] } });
is(enqueue($node, 'iq', 'imm-', 15), '15', 'immediate: 15 tasks enqueued');
ok(wait_for('3 imm- requests at the provider', 60, sub { psends('imm-') >= 3 }),
	'immediate: transfers in flight');
$node->stop('immediate');
$node->start;

ok(all_final($node, 'iq'), 'immediate: after the restart every task reached a final state');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM ntask.task WHERE queue = 'iq' AND state IN ('succeeded', 'repair_required')}),
	'15', 'immediate: every task succeeded or repair_required');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM ntask.task WHERE queue = 'iq' AND state = 'succeeded'}),
	'15', 'immediate: ... in fact all succeeded (budget 5)');
cmp_ok( $node->safe_psql('postgres', q{
		SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
		WHERE t.queue = 'iq' AND a.result = 'lease_expired' AND NOT a.outcome_known}),
	'>=', 1, 'immediate: in-flight attempts were rescued as unknown');
check_invariants($node, 'iq', 'imm-', 'immediate');

# =====================================================================
# 3. SIGTERM while calls hang
# =====================================================================

queue($node, 'tq', 3, timeout_ms => 60000);
prov('POST', '/_admin/rules', { rules => { 'term-' => [ { mode => 'hang', hang_ms => 60000 } ] } });
is(enqueue($node, 'tq', 'term-', 3), '3', 'sigterm: 3 tasks enqueued');
ok(wait_for('3 hanging term- requests', 30, sub { psends('term-') >= 3 }),
	'sigterm: three calls hang at the provider');
my $pid3 = worker_pid($node);
my $t0 = time;
ok(kill('TERM', $pid3), "sigterm: SIGTERM to the worker (pid $pid3)");
ok(wait_for("worker $pid3 to exit", 15, sub { !kill(0, $pid3) }),
	'sigterm: the worker process is gone');
my $gone = time - $t0;
cmp_ok($gone, '<', 15, sprintf('sigterm: ... %.2f s after SIGTERM, well before the 60 s hang', $gone));
ok( wait_for('the provider to see the hanging connections closed', 10,
		sub { 3 == grep { $_->{reqs}[0]{end} && $_->{reqs}[0]{end} eq 'client_closed' } values %{ pkeys('term-') } }),
	'sigterm: the hanging connections were closed by the client');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM ntask.task t JOIN ntask.attempt_all a USING (task_id, token)
		WHERE t.queue = 'tq' AND t.state = 'leased' AND a.ended_at IS NULL
		  AND a.invoked_at IS NOT NULL}),
	'3', 'sigterm: nothing recorded for the dropped transfers (leased, attempts open and invoked)');
ok( $node->poll_query_until('postgres',
		qq{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask worker' AND pid <> $pid3},
		'1'),
	'sigterm: the worker came back');
# their leases (timeout_ms + connect + 1 s = 62 s) would outlive this test:
# shorten them with the token the old worker held, as that worker could have
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM ntask.task t, ntask_heartbeat(t.task_id, t.token, '100 ms') h
		WHERE t.queue = 'tq' AND h IS NOT NULL}),
	'3', 'sigterm: the dropped leases still belong to their tokens (heartbeat to 100 ms)');
ok(all_final($node, 'tq'), 'sigterm: rescued and finished');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(DISTINCT concat_ws('|', t.state, a.result, a.outcome_known), ',')
		FROM ntask.task t JOIN ntask.attempt_all a ON a.task_id = t.task_id AND a.attempt = 1
		WHERE t.queue = 'tq'}),
	'succeeded|lease_expired|f', 'sigterm: attempt 1 rescued as unknown, then succeeded');
check_invariants($node, 'tq', 'term-', 'sigterm');

# =====================================================================
# 4. Streaming standby, promoted mid-run
# =====================================================================

$node->backup('b1');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'b1', has_streaming => 1);
$standby->start;
# synchronous: a claim the primary committed (and so may have acted on) is
# on the standby, so after the failover no token is issued twice
$node->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = '*'});
$node->reload;
ok( $node->poll_query_until('postgres',
		q{SELECT string_agg(sync_state, ',') FROM pg_stat_replication}, 'sync'),
	'failover: the standby streams synchronously');

queue($node, 'fq', 5, reconcile_url => "http://127.0.0.1:$pport/status", max_inflight => 2);
prov('POST', '/_admin/rules', { rules => { 'fo-' => [ { status => 200, delay_ms => 400 } ] } });
is(enqueue($node, 'fq', 'fo-', 30), '30', 'failover: 30 tasks enqueued on the primary');

ok( $standby->poll_query_until('postgres',
		q{SELECT count(*) >= 6 FROM ntask.task WHERE queue = 'fq' AND state = 'succeeded'}),
	'failover: the standby replays the primary worker\'s progress');
is( $standby->safe_psql('postgres',
		q{SELECT pg_is_in_recovery(), count(*) FILTER (WHERE backend_type = 'ntask worker'),
				 count(*) FILTER (WHERE backend_type = 'startup')
		  FROM pg_stat_activity}),
	't|0|1', 'failover: no ntask worker on the standby');
$node->stop('immediate');

# the standby's view of every task before the promotion
my %before = map { split /\|/ } split /\n/, $standby->safe_psql('postgres',
	q{SELECT task_key || '|' || token || ':' || state FROM ntask.task WHERE queue = 'fq'});
my $unfinished = grep { !/:(succeeded|repair_required)$/ } values %before;
cmp_ok($unfinished, '>', 0, "failover: the primary died mid-run ($unfinished of 30 unfinished)");
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask worker'}),
	'0', 'failover: still no worker on the standby');

$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'failover: standby promoted');
ok( $standby->poll_query_until('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask worker'}, '1'),
	'failover: a worker starts on the promoted standby');
ok(all_final($standby, 'fq'), 'failover: the new primary finished the remaining tasks');
is( $standby->safe_psql('postgres',
		q{SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM ntask.task WHERE queue = 'fq'}),
	'30|30', 'failover: all 30 succeeded');

my %after = map { split /\|/ } split /\n/, $standby->safe_psql('postgres',
	q{SELECT task_key || '|' || token || ':' || state FROM ntask.task WHERE queue = 'fq'});
my (@went_back, @not_advanced);
for my $key (sort keys %before)
{
	my ($tb, $sb) = split /:/, $before{$key};
	my ($ta) = split /:/, $after{$key};
	push @went_back, "$key: $tb -> $ta" if $ta < $tb;
	push @not_advanced, "$key: $tb -> $ta ($sb)"
	  if $sb !~ /^(succeeded|repair_required)$/ && $ta <= $tb;
}
is_deeply(\@went_back, [], 'failover: no task token went backwards');
is_deeply(\@not_advanced, [], 'failover: every task unfinished at the failover got a new, higher token');
check_invariants($standby, 'fq', 'fo-', 'failover', unique_attempts => 1);
is(scalar(grep { $_->{duplicates} > 0 } values %{ pkeys('fo-') }), 0,
	'failover: nothing was re-sent (reconcile before resend)');

$standby->stop;
done_testing();
