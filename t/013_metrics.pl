
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/013_metrics.pl: metrics/queries.yaml read by the real Prometheus
# postgres_exporter (Debian prometheus-postgres-exporter, 0.11), scraped
# over loopback, and metrics/grafana-dashboard.json checked against what
# it exports (issue 15, README "Metrics and dashboards").
#
# A cluster with ntask and the background worker dispatching one http
# queue to t/provider.py.  Tasks in known states:
#   queue mq (SQL workers): 3 ready and due for 100 s, 1 ready for later,
#     2 leased, 1 whose 1 ms lease the worker's housekeeping releases
#     (retry_wait), 1 retry_wait after a transient error, 1 retry_wait
#     after an unknown outcome, 1 repair_required, 2 succeeded (one after
#     an unknown first attempt), 1 canceled, 1 skipped;
#   queue mh (http): 2 tasks the provider accepts, 1 it refuses (400).
# mq is paused (ntask_queue_pause) and one key of mh (key_pause) when the
# exporter starts: the _paused and _keys_paused gauges.
# The exporter logs in as a role that is only in ntask_monitor, listens on
# a free 127.0.0.1 port, and is scraped with HTTP::Tiny.  Checked: the
# exporter reports no scrape error and loaded the queries file; every
# per-queue gauge and counter and every worker series has the value the
# states above imply (oldest ready age within the test's run time); after
# the queue's retention deletes its 4 finished tasks, the counters are
# unchanged and ntask_worker_pruned_total says 4; the dashboard parses,
# every panel has a query, and every ntask_* series it names is exported.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use NtaskProvider;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $EXPORTER = '/usr/bin/prometheus-postgres-exporter';
my $QUERIES = "$FindBin::Bin/../metrics/queries.yaml";
my $DASHBOARD = "$FindBin::Bin/../metrics/grafana-dashboard.json";
ok(-x $EXPORTER, "postgres_exporter is installed ($EXPORTER; scripts/deps.sh installs it)")
  or BAIL_OUT('no exporter');

my $pport = NtaskProvider::start('013');
my $node = PostgreSQL::Test::Cluster->new('metrics');
$node->init;
$node->append_conf('postgresql.conf', $worker_conf);
$node->start;
my $t_start = time;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{CREATE EXTENSION ntask});
ok($node->poll_query_until('postgres', q{SELECT state = 'running' FROM ntask.worker_stats}),
	'the background worker runs');

# ---------------------------------------------------------------------
# the http queue: 2 accepted, 1 refused for good
# ---------------------------------------------------------------------
prov('POST', '/_admin/rules', { rules => { 'mh:bad' => [ { status => 400 } ] } });
sql(qq{SELECT count(*) FROM ntask_queue_set('mh', max_attempts => 3, breaker_failures => 5,
	target => '{"type": "http", "url": "http://127.0.0.1:$pport/send", "timeout_ms": 2000}')});
sql(q{SELECT count(*) FROM ntask_enqueue_many('mh', ARRAY['mh:ok1', 'mh:ok2', 'mh:bad'],
	ARRAY['{}', '{}', '{}']::jsonb[])});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) FILTER (WHERE state = 'succeeded') = 2
	   AND count(*) FILTER (WHERE state = 'repair_required') = 1
	FROM ntask.task WHERE queue = 'mh'}), 'http queue: 2 accepted, 1 refused (400)');

# ---------------------------------------------------------------------
# the SQL queue: every state.  Each task is enqueued not due, then made
# due alone and claimed, so every claim takes the task meant.
# ---------------------------------------------------------------------
sql(q{SELECT count(*) FROM ntask_queue_set('mq', max_attempts => 3, lease => '1 hour',
	backoff_base => '1 hour', backoff_max => '1 hour')});
my %id;
for my $k (qw(r1 r2 r3 r4 l1 l2 x1 w1 u1 p1 s1 s2 c1 k1))
{
	$id{$k} = sql(qq{SELECT task_id FROM ntask_enqueue('mq', '$k', '{}',
		run_at => now() + interval '1 day')});
}
# claim(key, lease): make the task due and claim it; returns its token
sub claim
{
	my ($k, $lease) = @_;
	sql(qq{UPDATE ntask.task SET run_at = now(), due_at = now() WHERE task_id = $id{$k}});
	my $r = sql(qq{SELECT task_id || ' ' || token FROM ntask_claim('mq', 'W1', lease => '$lease')});
	my ($tid, $tok) = split / /, $r;
	die "claim $k: got '$r'" unless defined $tid && $tid == $id{$k};
	return $tok;
}
sub finish
{
	my ($k, $tok, $rest) = @_;
	my $r = sql(qq{SELECT result FROM ntask_transition($id{$k}, $tok, $rest)});
	die "transition $k: $r" unless $r eq 'applied';
}
claim($_, '1 hour') for qw(l1 l2);
my $tok = claim('w1', '1 hour');
finish('w1', $tok, q{'retry_wait', 'transient', '{"http_status": 503}'});
$tok = claim('u1', '1 hour');
sql(qq{SELECT ntask_invoked($id{u1}, $tok)});
finish('u1', $tok, q{'retry_wait', 'unknown', error_stage => 'response_lost'});
$tok = claim('p1', '1 hour');
finish('p1', $tok, q{'repair_required', 'permanent', '{"http_status": 400}'});
$tok = claim('s1', '1 hour');
finish('s1', $tok, q{'succeeded', outcome => 'business_committed'});
$tok = claim('s2', '1 hour');
sql(qq{SELECT ntask_invoked($id{s2}, $tok)});
finish('s2', $tok, q{'retry_wait', 'unknown', retry_at => now() + interval '1 day'});
$tok = claim('s2', '1 hour');
finish('s2', $tok, q{'succeeded'});
sql(qq{SELECT ntask_cancel($id{c1}, 'ops', 'not needed')});
$tok = claim('k1', '1 hour');
finish('k1', $tok, q{'skipped', detail => '{"reason": "obsolete"}'});
# x1's lease runs out; the worker's housekeeping releases it (retry_wait)
claim('x1', '1 millisecond');
ok($node->poll_query_until('postgres', qq{
	SELECT state = 'retry_wait' FROM ntask.task WHERE task_id = $id{x1}}),
	'the worker released the expired lease');
# the three ready tasks have been due for 100 s; r4 stays due tomorrow
sql(qq{UPDATE ntask.task SET run_at = now() - interval '100 seconds', due_at = now() - interval '100 seconds'
	   WHERE task_id IN ($id{r1}, $id{r2}, $id{r3})});

# mq paused by an operator, a key of mh by a provider's rate limit (as
# the worker writes it: t/035_pause.pl)
sql(q{SELECT ntask_queue_pause('mq', 'oncall', 'metrics test')});
sql(q{INSERT INTO ntask.key_pause (queue, partition_key, until, reason, set_by)
	  VALUES ('mh', 'k', now() + interval '1 hour', 'HTTP 429', 'ntask worker');
	  UPDATE ntask.queue SET keys_paused_until = now() + interval '1 hour' WHERE queue = 'mh'});

# ---------------------------------------------------------------------
# the exporter, as a role that can only read the statistics views
# ---------------------------------------------------------------------
sql(q{CREATE ROLE exporter LOGIN IN ROLE ntask_monitor});
my $eport = PostgreSQL::Test::Cluster::get_free_port();
my $dsn = sprintf('host=%s port=%d user=exporter dbname=postgres sslmode=disable',
	$node->host, $node->port);
my ($eout, $eerr) = ('', '');
my $exporter = IPC::Run::start(
	[ $EXPORTER, "--web.listen-address=127.0.0.1:$eport",
	  "--extend.query-path=$QUERIES", '--log.level=warn' ],
	'>', \$eout, '2>', \$eerr,
	init => sub { $ENV{DATA_SOURCE_NAME} = $dsn; });
my $http = HTTP::Tiny->new(timeout => 10, proxy => undef, http_proxy => undef);

# scrape: { 'name{label="v",...}' => value } and the set of series names
sub scrape
{
	my $r = $http->get("http://127.0.0.1:$eport/metrics");
	return undef unless $r->{success};
	my (%v, %names);
	for my $line (split /\n/, $r->{content})
	{
		next if $line =~ /^#/ || $line !~ /\S/;
		my ($name, $labels, $value) = $line =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/
		  or next;
		$names{$name} = 1;
		my %l = ($labels // '') =~ /(\w+)="([^"]*)"/g;
		my $key = $name . (exists $l{queue} ? "{queue=\"$l{queue}\"}" : '');
		$v{$key} = $value;
	}
	return (\%v, \%names);
}

my ($m, $names);
my $until = time + 60;
while (time < $until)
{
	($m, $names) = scrape();
	last if $m && defined $m->{'ntask_queue_ready{queue="mq"}'};
	sleep 0.2;
}
ok($m && defined $m->{'ntask_queue_ready{queue="mq"}'},
	"the exporter on 127.0.0.1:$eport serves the ntask series")
  or BAIL_OUT("no ntask series from the exporter: $eerr");
is($m->{pg_exporter_last_scrape_error}, '0', 'the exporter reports no scrape error');
is($m->{pg_up}, '1', 'the exporter is connected (pg_up 1)');
unlike($eerr, qr/error/i, 'the exporter logged no error') or diag($eerr);

my %want_mq = (
	ready => 4, leased => 2, retry_wait => 3, repair_required => 1,
	leases_expired => 0, unknown_attempts => 1, waiting => 0,
	enqueued_total => 14, claims_total => 10, succeeded_total => 2,
	canceled_total => 1, skipped_total => 1, unknown_outcomes_total => 2,
	paused => 1, keys_paused => 0,
);
my %want_mh = (
	ready => 0, leased => 0, retry_wait => 0, repair_required => 1, waiting => 0,
	enqueued_total => 3, claims_total => 3, succeeded_total => 2,
	unknown_outcomes_total => 0, paused => 0, keys_paused => 1,
);
sub check_queue
{
	my ($m, $q, $want, $when) = @_;
	my @got = map { "$_=" . ($m->{"ntask_queue_$_\{queue=\"$q\"}"} // 'missing') } sort keys %$want;
	my @exp = map { "$_=$want->{$_}" } sort keys %$want;
	is(join(' ', @got), join(' ', @exp), "queue $q $when: " . join(' ', @exp));
}
check_queue($m, 'mq', \%want_mq, 'gauges and counters');
check_queue($m, 'mh', \%want_mh, 'gauges and counters');
my $age = $m->{'ntask_queue_oldest_ready_age_seconds{queue="mq"}'} // -1;
my $bound = 100 + (time - $t_start) + 5;
ok($age >= 100 && $age <= $bound,
	"ntask_queue_oldest_ready_age_seconds{queue=\"mq\"} = $age (due 100 s ago, at most $bound)");
is($m->{'ntask_queue_oldest_ready_age_seconds{queue="mh"}'}, '0',
	'a queue with nothing due has oldest ready age 0');
is(join(' ', map { "$_=" . ($m->{"ntask_worker_$_"} // 'missing') }
		qw(running in_flight dispatched_total accepted_total permanent_total transient_total
		   unknown_total reconciled_total expired_leases_total)),
	'running=1 in_flight=0 dispatched_total=3 accepted_total=2 permanent_total=1 transient_total=0 '
	  . 'unknown_total=0 reconciled_total=0 expired_leases_total=1',
	'worker: running, 3 dispatched (2 accepted, 1 permanent), 1 expired lease released');
is(join(' ', map { "$_=" . ($m->{"ntask_$_"} // 'missing') }
		qw(worker_breaker_opened_total worker_breaker_closed_total worker_breaker_probes_total
		   worker_breaker_skips_total), map { "breaker_$_\{queue=\"mh\"}" } qw(open failures held)),
	'worker_breaker_opened_total=0 worker_breaker_closed_total=0 worker_breaker_probes_total=0 '
	  . 'worker_breaker_skips_total=0 breaker_open{queue="mh"}=0 breaker_failures{queue="mh"}=0 '
	  . 'breaker_held{queue="mh"}=0',
	'breaker: the counters, and mh\'s breaker closed (a 400 is a sign of life, not a failure)');
my $tick = $m->{ntask_worker_last_tick_age_seconds} // -1;
ok($tick >= 0 && $tick < 10, "the worker's last loop was $tick s ago");
# the age is taken when the row is read, not when the scrape's transaction
# began: the worker (naptime 100ms) loops during the sleep, after now()
{
	my $yaml = PostgreSQL::Test::Utils::slurp_file($QUERIES);
	my ($wq) = $yaml =~ /^ntask_worker:\n  master: true\n  query: \|\n(.*?)^  metrics:/ms;
	ok(defined $wq, 'queries.yaml has the worker query');
	my $age = sql("BEGIN; SELECT FROM pg_sleep(0.5); "
		  . "SELECT last_tick_age_seconds >= 0 AND last_tick_age_seconds < 10 FROM ($wq) w; COMMIT");
	is($age, 't', 'last_tick_age_seconds read in a transaction older than the last loop: not negative');
}

# ---------------------------------------------------------------------
# retention deletes the finished tasks: the counters do not go down
# ---------------------------------------------------------------------
sql(q{SELECT count(*) FROM ntask_queue_set('mq', retention => '1 millisecond')});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM ntask.task WHERE queue = 'mq' AND state IN ('succeeded', 'canceled', 'skipped')}),
	'the worker pruned the 4 finished tasks of mq');
($m, $names) = scrape();
check_queue($m, 'mq', \%want_mq, 'after retention deleted 4 tasks, unchanged');
is($m->{ntask_worker_pruned_total}, '4', 'ntask_worker_pruned_total 4');

# ---------------------------------------------------------------------
# the dashboard names only exported series
# ---------------------------------------------------------------------
open my $fh, '<', $DASHBOARD or die "$DASHBOARD: $!";
my $dash = eval { JSON::PP->new->decode(do { local $/; <$fh> }) };
ok($dash && ref $dash->{panels} eq 'ARRAY' && @{ $dash->{panels} },
	'metrics/grafana-dashboard.json parses and has panels');
my (@exprs, @empty);
for my $p (@{ $dash->{panels} })
{
	my @t = map { $_->{expr} // () } @{ $p->{targets} // [] };
	push @empty, $p->{title} unless @t;
	push @exprs, @t;
}
push @exprs, $_->{definition} // () for @{ $dash->{templating}{list} // [] };
is(join(', ', @empty), '', 'every panel has a query');
my %used = map { $_ => 1 } map { /\b(ntask_[a-z_]+)\b/g } @exprs;
my @unknown = grep { !$names->{$_} } sort keys %used;
is(join(', ', @unknown), '', 'every series the dashboard names is exported ('
	  . scalar(keys %used) . ' series)');
my @unused = grep { !$used{$_} } grep { /^ntask_/ } sort keys %$names;
note 'exported, not on the dashboard: ' . join(', ', @unused);

my $nseries = grep { /^ntask_/ } keys %$m;
diag(sprintf('013_metrics: postgres_exporter on 127.0.0.1:%d served %d ntask series '
	  . '(%d names); 2 queues and the worker checked, counters unchanged across retention; '
	  . 'the dashboard uses %d of them', $eport, $nseries, scalar(grep { /^ntask_/ } keys %$names),
	  scalar(keys %used)));

$exporter->signal('TERM');
$exporter->finish;
$node->stop;
done_testing();
