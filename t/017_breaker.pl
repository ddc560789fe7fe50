
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/017_breaker.pl: the circuit breaker of http queues (issue 13) against
# the loopback provider t/provider.py, which counts every request it sees.
#
#   1. A target answering 503: after breaker_failures failures in a row the
#      breaker opens (logged once, audited, counted); while it is open no
#      request reaches the provider, no attempt is made, no budget is spent,
#      even when new tasks are enqueued (which wakes the worker).
#   2. After the cooldown exactly one probe goes out; it fails: the breaker
#      opens again for another cooldown, and again nothing is sent.
#   3. The provider recovers: the next probe closes the breaker and every
#      task succeeds; each attempt of each task is one request the provider
#      saw (no attempt without a request, none spent while open).
#   4. The server restarts while the breaker is open: the new worker sends
#      nothing until open_until (every request after the restart arrives
#      at or after it), then probes and closes.  An external worker's
#      ntask_claim is not held back by the breaker.
#   5. Connect errors (a port nobody listens on) count as failures too;
#      breaker_failures => 0 turns the breaker off and the queue is sent again.
#   6. Any answer but 408/425/429/5xx (here a 404 and a 200) resets the
#      count: four failures, never three in a row, never open.
#   7. With 4 in flight: what was running when it opened finishes and is
#      recorded; nothing new starts.
#
# The queue has max_inflight 1, so failures come one at a time and the
# count at which the breaker opens is exact.  No fixed sleeps decide a
# result: poll_query_until, or polling with a wall-clock bound; the "nothing
# is sent while open" checks look at a window of at least a second.

use strict;
use warnings;

use FindBin;
use IO::Socket::INET;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use lib $FindBin::Bin;
use NtaskProvider;

my $json = JSON::PP->new->canonical;
my $pport = NtaskProvider::start('017');

my $node = PostgreSQL::Test::Cluster->new('breaker');
$node->init;
$node->append_conf('postgresql.conf', $worker_conf);
$node->start;

sub sql
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

sql(q{CREATE EXTENSION ntask});
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'running' FROM ntask.worker_stats}),
	'the worker runs');

# requests the provider saw for keys starting with prefix
sub psends
{
	my ($prefix) = @_;
	my $n = 0;
	$n += $_->{requests} for values %{ pkeys($prefix) };
	return $n;
}

# arrival times of the provider's requests for keys starting with prefix
sub parrivals
{
	my ($prefix) = @_;
	my @t;
	for my $k (values %{ pkeys($prefix) })
	{
		push @t, map { $_->{t} } grep { $_->{kind} eq 'send' } @{ $k->{reqs} };
	}
	return sort { $a <=> $b } @t;
}

sub rule
{
	my ($prefix, $action) = @_;
	prov('POST', '/_admin/rules', { rules => { $prefix => $action } });
}

sub queue
{
	my ($q, $url, $failures, $cooldown, $inflight) = @_;
	my $target = $json->encode({ type => 'http', url => $url,
		timeout_ms => 1500, max_inflight => $inflight // 1 });
	sql(qq{SELECT queue FROM ntask_queue_set('$q', max_attempts => 100,
		backoff_base => '50 ms', backoff_max => '100 ms', lease => '5 s',
		breaker_failures => $failures, breaker_cooldown => '$cooldown',
		target => \$t\$$target\$t\$::jsonb)});
}

sub enqueue
{
	my ($q, $prefix, $from, $to) = @_;
	sql(qq{SELECT count(*) FROM generate_series($from, $to) i,
		ntask_enqueue('$q', '$prefix' || lpad(i::text, 2, '0'), jsonb_build_object('i', i))});
}

sub attempts
{
	my ($q) = @_;
	return sql(qq{SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
		WHERE t.queue = '$q'});
}

sub brk
{
	my ($q, $cols) = @_;
	return sql(qq{SELECT $cols FROM ntask.breaker_stats WHERE queue = '$q'});
}

sub wstat
{
	my ($col) = @_;
	return sql(qq{SELECT $col FROM ntask.worker_stats});
}

# nothing reaches the provider for prefix during secs seconds, or until
# 0.2 s before the open_until of queue q's breaker if that comes first
sub quiet_for
{
	my ($prefix, $secs, $what, $q) = @_;
	if (defined $q)
	{
		my $left = sql(qq{SELECT extract(epoch FROM open_until - clock_timestamp())
			FROM ntask.breaker_stats WHERE queue = '$q'}) - 0.2;
		$secs = $left if $left < $secs;
		$secs = sprintf('%.1f', $secs);
	}
	my $before = psends($prefix);
	my $end = time + $secs;
	my $seen = 0;
	while (time < $end)
	{
		$seen = psends($prefix) - $before;
		last if $seen;
		usleep(100_000);
	}
	is($seen, 0, "$what: no request for ${secs} s");
}

my $url = "http://127.0.0.1:$pport/send";

# ---------------------------------------------------------------------
# 1. open after 3 failures in a row
# ---------------------------------------------------------------------

rule('b-', { status => 503 });
queue('brk', $url, 3, '8 s');
is(brk('brk', 'state, failures, failure_threshold, held'), 'closed|0|3|0',
	'breaker_stats lists the queue closed before any failure');
my $log_off = -s $node->logfile;
enqueue('brk', 'b-', 1, 5);

ok($node->poll_query_until('postgres',
		q{SELECT state = 'open' FROM ntask.breaker_stats WHERE queue = 'brk'}),
	'case 1: the breaker opens');
is(psends('b-'), 3, 'case 1: after exactly 3 requests (breaker_failures 3)');
is(attempts('brk'), '3', 'case 1: ... and 3 attempts');
is(brk('brk', q{failures, open_until - opened_at = '8 s'}), '3|t',
	'case 1: breaker_stats: 3 failures, open for the cooldown');
ok($node->poll_query_until('postgres',
		q{SELECT held = 5 FROM ntask.breaker_stats WHERE queue = 'brk'}),
	'case 1: breaker_stats.held: the 5 tasks, due and not sent');
is(sql(q{SELECT string_agg(from_state || '>' || to_state, ',' ORDER BY audit_id)
		FROM ntask.audit WHERE action = 'breaker' AND queue = 'brk'}),
	'closed>open', 'case 1: the change is audited once');
is(wstat('breaker_opened'), '1', 'case 1: worker_stats.breaker_opened 1');

my $sum0 = sql(q{SELECT sum(attempts) FROM ntask.task WHERE queue = 'brk'});
enqueue('brk', 'b-', 6, 7);	# wakes the worker at commit
quiet_for('b-', 1.5, 'case 1: while open (and woken by an enqueue)', 'brk');
is(attempts('brk'), '3', 'case 1: no attempt was made while open');
is(sql(q{SELECT sum(attempts), count(*) FILTER (WHERE state = 'leased')
		FROM ntask.task WHERE queue = 'brk'}), "$sum0|0",
	'case 1: no budget spent, nothing leased while open');
ok(wstat('breaker_skips') > 0, 'case 1: worker_stats.breaker_skips counts the claims not made');

# ---------------------------------------------------------------------
# 2. the probe fails: open again
# ---------------------------------------------------------------------

# Under load the checks of case 1 can outlast the cooldown, so the first
# probe may already have failed when case 2 starts, and another may fail
# while it checks: count the failed probes (half_open -> open) and check
# that each was exactly one request, one attempt and one reopening.
ok($node->poll_query_until('postgres',
		q{SELECT count(*) >= 1 FROM ntask.audit WHERE action = 'breaker' AND queue = 'brk'
		  AND from_state = 'half_open' AND to_state = 'open'}),
	'case 2: after the cooldown the probe fails and the breaker opens again');
my ($probes, $sends, $att, $ws, $fails);
for my $try (1 .. 20)
{
	# a consistent read: no probe between the first and the last query
	$probes = sql(q{SELECT count(*) FROM ntask.audit WHERE action = 'breaker' AND queue = 'brk'
				   AND from_state = 'half_open' AND to_state = 'open'});
	$sends = psends('b-');
	$att = attempts('brk');
	$ws = wstat(q{format('%s|%s', breaker_probes, breaker_opened)});
	$fails = brk('brk', 'failures');
	last if $probes eq sql(q{SELECT count(*) FROM ntask.audit WHERE action = 'breaker' AND queue = 'brk'
							AND from_state = 'half_open' AND to_state = 'open'})
	  && brk('brk', 'state') eq 'open';
}
note("case 2: $probes failed probe(s) by the time it checked");
is($sends, 3 + $probes, 'case 2: exactly one probe request per half-open');
is($att, 3 + $probes, 'case 2: ... one attempt each');
is($ws, $probes . '|' . (1 + $probes), 'case 2: breaker_probes counts them, breaker_opened one more');
is($fails, 3 + $probes, 'case 2: each failed probe adds to the count');
quiet_for('b-', 1.0, 'case 2: open again', 'brk');

# ---------------------------------------------------------------------
# 3. the provider recovers: the probe closes the breaker
# ---------------------------------------------------------------------

rule('b-', { status => 200 });
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 7 FROM ntask.task WHERE queue = 'brk' AND state = 'succeeded'}),
	'case 3: after the probe every task succeeds');
is(brk('brk', 'state, failures, open_until IS NULL, held'), 'closed|0|t|0',
	'case 3: the breaker is closed, failures reset');
is(wstat(q{format('%s|%s', breaker_probes, breaker_closed)}), ($probes + 1) . '|1', 'case 3: one more probe, closed once');
is(sql(q{SELECT string_agg(from_state || '>' || to_state, ',' ORDER BY audit_id)
		FROM ntask.audit WHERE action = 'breaker' AND queue = 'brk'}),
	join(',', 'closed>open', ('open>half_open', 'half_open>open') x $probes,
		'open>half_open', 'half_open>closed'),
	'case 3: every change audited once, in order');
{
	my $keys = pkeys('b-');
	my %db = map { split /\|/ } split /\n/,
	  sql(q{SELECT task_key, attempts FROM ntask.task WHERE queue = 'brk'});
	my @bad = grep { ($keys->{$_}{requests} // 0) != $db{$_} } sort keys %db;
	is_deeply(\@bad, [], 'case 3: every task made exactly as many attempts as the provider saw requests');
	is(psends('b-'), 3 + $probes + 7, 'case 3: the failed requests, then one per task');
}
{
	my $log = slurp_file($node->logfile, $log_off);
	my @lines = $log =~ /(circuit breaker of queue "brk" \w+ -> \w+)/g;
	is_deeply(\@lines, [
		'circuit breaker of queue "brk" closed -> open',
		('circuit breaker of queue "brk" open -> half_open',
		 'circuit breaker of queue "brk" half_open -> open') x $probes,
		'circuit breaker of queue "brk" open -> half_open',
		'circuit breaker of queue "brk" half_open -> closed' ],
		'case 3: one LOG line per change of state, none per task');
}

# ---------------------------------------------------------------------
# 4. the server restarts while the breaker is open
# ---------------------------------------------------------------------

rule('r-', { status => 503 });
queue('brk2', $url, 2, '6 s');
enqueue('brk2', 'r-', 1, 4);
ok($node->poll_query_until('postgres',
		q{SELECT state = 'open' FROM ntask.breaker_stats WHERE queue = 'brk2'}),
	'case 4: the breaker of brk2 opens');
is(psends('r-'), 2, 'case 4: after 2 requests');
my ($until_epoch, $until) = split /\|/,
  brk('brk2', 'extract(epoch FROM open_until), open_until');
# an external worker is not held back by the breaker (claimed before the
# restart, so that a restart slower than the cooldown cannot let the
# worker send that task too)
my ($xid, $xtok) = split /\|/,
  sql(q{SELECT task_id, token FROM ntask_claim('brk2', 'external', 1, '60 s')});
ok($xid, 'case 4: ntask_claim by SQL hands out a task of a queue whose breaker is open');
rule('r-', { status => 200 });	# a request now would succeed: none may come
my $restarted = time;
$node->restart;
ok($node->poll_query_until('postgres',
		q{SELECT state = 'running' FROM ntask.worker_stats}),
	'case 4: a new worker runs after the restart');
is(brk('brk2', 'state'), 'open', 'case 4: the breaker is still open (stored)');
SKIP:
{
	skip 'the restart took longer than the cooldown', 1 if time >= $until_epoch - 0.5;
	quiet_for('r-', 1.0, 'case 4: after the restart, before open_until', 'brk2');
}
is(sql(qq{SELECT result FROM ntask_transition($xid, $xtok, 'succeeded')}), 'applied',
	'case 4: ... and the external worker records it');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 4 FROM ntask.task WHERE queue = 'brk2' AND state = 'succeeded'}),
	'case 4: after open_until the probe closes the breaker and the tasks succeed');
my @after = grep { $_ >= $restarted } parrivals('r-');
is(scalar(@after), 3, 'case 4: 3 requests after the restart (one task went to the external worker)');
ok($after[0] >= $until_epoch - 0.05,
	"case 4: the first request after the restart came at open_until or later ($after[0] vs $until_epoch)");
is(brk('brk2', 'state'), 'closed', 'case 4: closed');

# ---------------------------------------------------------------------
# 5. connect errors count
# ---------------------------------------------------------------------

my $closed_port;
{
	my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
		Proto => 'tcp', Listen => 1) or die "no socket: $!";
	$closed_port = $s->sockport;
	close $s;
}
queue('brk3', "http://127.0.0.1:$closed_port/send", 2, '1 hour');
enqueue('brk3', 'c-', 1, 3);
ok($node->poll_query_until('postgres',
		q{SELECT state = 'open' FROM ntask.breaker_stats WHERE queue = 'brk3'}),
	'case 5: connection refused twice opens the breaker');
is(sql(q{SELECT count(*), count(*) FILTER (WHERE a.error_stage = 'connect')
		FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'brk3'}),
	'2|2', 'case 5: two attempts, both connect errors');

# turning the breaker off forgets it and sends again
sql(q{SELECT queue FROM ntask_queue_set('brk3', breaker_failures => 0)});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM ntask.breaker WHERE queue = 'brk3'}),
	'case 5: breaker_failures => 0: the worker forgets the breaker');
is(sql(q{SELECT count(*) FROM ntask.breaker_stats WHERE queue = 'brk3'}), '0',
	'case 5: ... and breaker_stats no longer lists the queue');
ok($node->poll_query_until('postgres', qq{SELECT count(*) > 2 FROM ntask.attempt_all a
		JOIN ntask.task t USING (task_id) WHERE t.queue = 'brk3'}),
	'case 5: ... and dispatches the queue again');

# ---------------------------------------------------------------------
# 6. a sign of life resets the count: 503, 503, 404 (the target is up, the
#    task goes to repair), then 503, 503, 200: four failures, never three
#    in a row, so the breaker (breaker_failures 3) never opens
# ---------------------------------------------------------------------

prov('POST', '/_admin/rules', { rules => {
	's-01' => [ { status => 503 }, { status => 503 }, { status => 404 } ],
	's-02' => [ { status => 503 }, { status => 503 }, { status => 200 } ] } });
queue('brk4', $url, 3, '1 hour');
my $opened_before = wstat('breaker_opened');
enqueue('brk4', 's-', 1, 1);
ok($node->poll_query_until('postgres',
		q{SELECT state = 'repair_required' FROM ntask.task WHERE task_key = 's-01'}),
	'case 6: the first task ends in repair after 503, 503, 404');
enqueue('brk4', 's-', 2, 2);
ok($node->poll_query_until('postgres',
		q{SELECT state = 'succeeded' FROM ntask.task WHERE task_key = 's-02'}),
	'case 6: the second succeeds after 503, 503, 200');
is(psends('s-'), 6, 'case 6: six requests, four of them failures');
is(brk('brk4', 'state'), 'closed', 'case 6: the breaker never opened');
is(wstat('breaker_opened'), $opened_before, 'case 6: breaker_opened unchanged');
ok($node->poll_query_until('postgres',
		q{SELECT failures = 0 FROM ntask.breaker WHERE queue = 'brk4'}),
	'case 6: the stored count is back to 0 (it was written while counting)');

# ---------------------------------------------------------------------
# 7. several in flight: the transfers already running when it opens finish,
#    nothing new starts (at most breaker_failures + max_inflight - 1
#    requests reach a failing target)
# ---------------------------------------------------------------------

rule('m-', { status => 503, delay_ms => 100 });
queue('brk5', $url, 3, '1 hour', 4);
enqueue('brk5', 'm-', 1, 12);
ok($node->poll_query_until('postgres',
		q{SELECT state = 'open' FROM ntask.breaker_stats WHERE queue = 'brk5'}),
	'case 7: 4 in flight: the breaker opens');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM ntask.task
		WHERE queue = 'brk5' AND state = 'leased'}),
	'case 7: the transfers in flight when it opened are recorded');
my $n7 = psends('m-');
ok($n7 >= 3 && $n7 <= 3 + 4 - 1, "case 7: $n7 requests reached the target (3..6)");
is(attempts('brk5'), $n7, 'case 7: one attempt per request');
quiet_for('m-', 1.0, 'case 7: open');

$node->stop;
done_testing();
