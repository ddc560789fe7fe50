
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/035_pause.pl: pauses against the background worker's HTTP dispatch
# (issue 35.1 and 35.5), with the loopback provider t/provider.py, which
# records every request and when it arrived.
#
#   1. on_rate_limited => 'pause_key': a 429 with Retry-After to one task
#      holds every task of its partition key until then (ntask.key_pause,
#      shown by ntask_explain, queue_stats and queue_metrics), and not the
#      tasks of other keys, which go out at once; after it, the key's tasks
#      go out (none before the pause's end).
#   2. on_rate_limited => 'pause_queue': a 503 with Retry-After holds the
#      whole queue (every key, and tasks without one) until then.
#   3. The default, 'retry': a 429 with Retry-After retries only that task;
#      another task of the same key goes out at once.
#   4. ntask_queue_pause: the worker sends nothing of the queue, even when
#      woken by an enqueue; ntask_queue_resume: it sends at once.
#
# No fixed sleeps decide a result: poll_query_until, wait_for, or a quiet
# window of at least a second checked by polling the provider.

use strict;
use warnings;

use FindBin;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use lib $FindBin::Bin;
use NtaskProvider;

my $json = JSON::PP->new->canonical;
my $pport = NtaskProvider::start('035');

my $node = PostgreSQL::Test::Cluster->new('pause');
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

my $url = "http://127.0.0.1:$pport/send";

sub rule
{
	my ($prefix, $action) = @_;
	prov('POST', '/_admin/rules', { rules => { $prefix => $action } });
}

# requests the provider saw for keys starting with prefix
sub psends
{
	my ($prefix) = @_;
	my $n = 0;
	$n += $_->{requests} for values %{ pkeys($prefix) };
	return $n;
}

# the earliest arrival (epoch seconds) of a request for keys starting with prefix
sub pfirst
{
	my ($prefix) = @_;
	my @t;
	for my $k (values %{ pkeys($prefix) })
	{
		push @t, map { $_->{t} } grep { $_->{kind} eq 'send' } @{ $k->{reqs} };
	}
	@t = sort { $a <=> $b } @t;
	return $t[0];
}

sub queue
{
	my ($q, $on) = @_;
	my $target = $json->encode({ type => 'http', url => $url,
		timeout_ms => 1500, max_inflight => 1 });
	sql(qq{SELECT queue FROM ntask_queue_set('$q', max_attempts => 10,
		backoff_base => '50 ms', backoff_max => '100 ms', lease => '5 s',
		on_rate_limited => '$on', target => \$t\$$target\$t\$::jsonb)});
}

sub enqueue
{
	my ($q, $key, $pk) = @_;
	my $p = defined $pk ? "'$pk'" : 'NULL';
	sql(qq{SELECT task_id FROM ntask_enqueue('$q', '$key', '{}', partition_key => $p)});
}

sub state_of
{
	my ($key) = @_;
	return sql(qq{SELECT state FROM ntask.task WHERE task_key = '$key'});
}

# nothing reaches the provider for prefix during secs seconds
sub quiet_for
{
	my ($prefix, $secs, $what) = @_;
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

# ---------------------------------------------------------------------
# 1. pause_key: a 429 with Retry-After holds the key, not the others
# ---------------------------------------------------------------------

rule('ka-1', [ { status => 429, retry_after => 10 }, { status => 200 } ]);
queue('rk', 'pause_key');
enqueue('rk', 'ka-1', 'A');
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM ntask.key_pause
		  WHERE queue = 'rk' AND partition_key = 'A' AND until > now()}),
	'case 1: a 429 with Retry-After pauses the key');
my $until = sql(q{SELECT extract(epoch FROM until) FROM ntask.key_pause
	WHERE queue = 'rk' AND partition_key = 'A'});
is(sql(q{SELECT until - set_at BETWEEN '9 s' AND '11 s', reason LIKE 'HTTP 429 with Retry-After 10 s%',
		 keys_paused_until = until
		 FROM ntask.key_pause k JOIN ntask.queue q USING (queue) WHERE k.queue = 'rk'}),
	't|t|t', 'case 1: until the Retry-After, with the reason; the queue row says so');
is(state_of('ka-1'), 'retry_wait', 'case 1: the task itself waits for its retry');

enqueue('rk', 'ka-2', 'A');
enqueue('rk', 'ka-3', 'A');
enqueue('rk', 'kb-1', 'B');
enqueue('rk', 'kb-2', 'B');
like(sql(q{SELECT detail FROM ntask_explain((SELECT task_id FROM ntask.task WHERE task_key = 'ka-2'))
		WHERE event = 'now'}),
	qr/held back: its key A is paused until .*HTTP 429 with Retry-After 10 s/,
	'case 1: ntask_explain says the key is paused, until when and why');
is(sql(q{SELECT s.paused, s.keys_paused, m.keys_paused FROM ntask.queue_stats s
		JOIN ntask.queue_metrics m USING (queue) WHERE queue = 'rk'}),
	'f|1|1', 'case 1: queue_stats and queue_metrics count the paused key');
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM ntask.task
		  WHERE task_key LIKE 'kb-%' AND state = 'succeeded'}),
	'case 1: the tasks of another key go out meanwhile');
ok(time < $until, 'case 1: ... before the pause ends')
  or diag('the check came too late to tell');
is(psends('ka-2') + psends('ka-3'), 0, 'case 1: no task of the paused key was sent');

ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 3 FROM ntask.task
		  WHERE task_key LIKE 'ka-%' AND state = 'succeeded'}),
	'case 1: after the pause the key\'s tasks go out');
my $first = pfirst('ka-2');
my $f3 = pfirst('ka-3');
$first = $f3 if $f3 < $first;
ok($first >= $until - 0.05,
	"case 1: none before the pause's end (first at $first, until $until)");
is(psends('kb-'), 2, 'case 1: the other key was sent once per task');

# ---------------------------------------------------------------------
# 2. pause_queue: a 503 with Retry-After holds the whole queue
# ---------------------------------------------------------------------

rule('qa-1', [ { status => 503, retry_after => 8 }, { status => 200 } ]);
queue('rq', 'pause_queue');
enqueue('rq', 'qa-1', 'A');
ok( $node->poll_query_until('postgres',
		q{SELECT paused_until > now() FROM ntask.queue WHERE queue = 'rq'}),
	'case 2: a 503 with Retry-After pauses the queue');
my $quntil = sql(q{SELECT extract(epoch FROM paused_until) FROM ntask.queue WHERE queue = 'rq'});
is(sql(q{SELECT paused_at IS NULL, count(k.*) FROM ntask.queue q
		LEFT JOIN ntask.key_pause k USING (queue) WHERE q.queue = 'rq' GROUP BY 1}),
	't|0', 'case 2: no operator pause, no key pause');
enqueue('rq', 'qb-1', 'B');
enqueue('rq', 'qc-1', undef);
my $left = $quntil - time - 0.3;
quiet_for('q', $left > 1.5 ? 1.5 : sprintf('%.1f', $left),
	'case 2: other keys and keyless tasks are held too');
is(sql(q{SELECT paused, paused_until IS NOT NULL FROM ntask.queue_stats WHERE queue = 'rq'}),
	't|t', 'case 2: queue_stats shows the pause and its end');
like(sql(q{SELECT detail FROM ntask_explain((SELECT task_id FROM ntask.task WHERE task_key = 'qb-1'))
		WHERE event = 'now'}),
	qr/held back: the queue is paused until .*rate limit/,
	'case 2: ntask_explain says the queue is paused until when');
ok(time < $quntil, 'case 2: ... checked before the pause ends')
  or diag('the checks came too late to tell');
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 3 FROM ntask.task WHERE queue = 'rq' AND state = 'succeeded'}),
	'case 2: after the pause every task goes out');
$first = pfirst('qb-1');
$f3 = pfirst('qc-1');
$first = $f3 if $f3 < $first;
ok($first >= $quntil - 0.05,
	"case 2: none before the pause's end (first at $first, until $quntil)");

# ---------------------------------------------------------------------
# 3. the default, retry: only the task waits
# ---------------------------------------------------------------------

rule('ra-1', [ { status => 429, retry_after => 30 }, { status => 200 } ]);
queue('rr', 'retry');
enqueue('rr', 'ra-1', 'A');
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'retry_wait' FROM ntask.task WHERE task_key = 'ra-1'}),
	'case 3: the 429 sends the task to retry_wait');
enqueue('rr', 'ra-2', 'A');
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'succeeded' FROM ntask.task WHERE task_key = 'ra-2'}),
	'case 3: another task of the key goes out at once');
is(sql(q{SELECT count(*) FROM ntask.key_pause WHERE queue = 'rr'}) .
	sql(q{SELECT keys_paused_until IS NULL AND paused_until IS NULL FROM ntask.queue WHERE queue = 'rr'}),
	'0t', 'case 3: nothing paused');

# ---------------------------------------------------------------------
# 4. ntask_queue_pause holds the worker's dispatch; resume lets it go
# ---------------------------------------------------------------------

is(sql(q{SELECT ntask_queue_pause('rr', 'oncall', 'provider incident')}), 't',
	'case 4: paused');
enqueue('rr', 'rp-1', 'C');	# wakes the worker at commit
enqueue('rr', 'rp-2', undef);
quiet_for('rp-', 1.5, 'case 4: while paused (and woken by enqueues)');
is(sql(q{SELECT count(*) FROM ntask.task WHERE task_key LIKE 'rp-%' AND state = 'ready' AND attempts = 0}),
	'2', 'case 4: nothing leased, no budget spent');
like(sql(q{SELECT detail FROM ntask_explain((SELECT task_id FROM ntask.task WHERE task_key = 'rp-1'))
		WHERE event = 'now'}),
	qr/held back: the queue is paused by oncall since .*: provider incident/,
	'case 4: ntask_explain says who paused it, since when and why');
my $t0 = time;
is(sql(q{SELECT ntask_queue_resume('rr', 'oncall', 'provider back')}), 't', 'case 4: resumed');
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM ntask.task WHERE task_key LIKE 'rp-%' AND state = 'succeeded'}),
	'case 4: after the resume the tasks go out');
ok(time - $t0 < 5, 'case 4: ... at once, not at a later tick');
is(sql(q{SELECT string_agg(action || ':' || actor || ':' || reason, ',' ORDER BY audit_id)
		FROM ntask.audit WHERE queue = 'rr' AND action LIKE 'queue_%e'}),
	'queue_pause:oncall:provider incident,queue_resume:oncall:provider back',
	'case 4: both audited');

$node->stop;
done_testing();
