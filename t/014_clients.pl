
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/014_clients.pl: the raw-SQL example worker in Java (JDBC) runs for
# real against a throwaway server (issue 15, docs/guide.md "Using ntask
# from Java").  Java has no worker library: examples/java/Worker.java
# writes the fenced loop by hand.  The Python, Node and Go examples are
# services on the worker libraries, tested by t/047_examples.pl.
#
# 500 tasks in queue 'examples' (examples/schema.sql), their outcomes mixed
# by the payload's kind: ok, transient (503 on the first attempt),
# permanent (400: repair_required), unknown (the provider takes effect and
# the answer is lost on the first attempt: the next attempt must reconcile
# and not call again), slow (6 s of work under a 5 s lease: only heartbeats
# keep it).  Three workers drain them over TCP on 127.0.0.1, java-1 and
# java-3 directly, java-2 through pgbouncer in transaction pooling mode
# (t/NtaskBouncer.pm; 2 server connections).  Mid-run java-3 is SIGKILLed
# (its lease runs out and another worker takes its task over, reconciling
# or finding the receipt).  Checked afterwards:
#   - every task ended as its kind says (succeeded, or repair_required for
#     permanent), none left open;
#   - exactly one business row per succeeded task, none for the others; its
#     token is the task's receipt token;
#   - the provider was called once per task that reached it (calls = 1:
#     unknown outcomes were reconciled, never sent twice), and never for a
#     permanent or a first transient attempt;
#   - the ledger: one succeeded attempt per succeeded task; transient and
#     unknown first attempts recorded with their error class; the slow
#     tasks held by one attempt (heartbeats worked); the killed worker's
#     open attempt, if any, ended lease_expired and nothing else did;
#   - the worker behind pgbouncer finished tasks (its console counted the
#     transactions); at the end SIGTERM stops the rest (143: the JVM's
#     status after a handled SIGTERM).

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use NtaskBouncer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $root = "$FindBin::Bin/..";
my $NTASKS = 500;
my $JDBC = '/usr/share/java/postgresql.jar';

ok(-f $JDBC, "pgJDBC is installed ($JDBC)");

my $node = PostgreSQL::Test::Cluster->new('clients');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
listen_addresses = '127.0.0.1'
});
$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
$node->start;
my $port = $node->port;
my $user = getpwuid($<);

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql('CREATE EXTENSION ntask');
{
	open my $fh, '<', "$root/examples/schema.sql" or die;
	local $/;
	sql(<$fh>);
}
sub kind
{
	my ($n) = @_;
	return 'transient' if $n % 10 == 3;
	return 'unknown' if $n % 10 == 5;
	return 'permanent' if $n % 25 == 7;
	return 'slow' if $n % 100 == 9;
	return 'ok';
}
my %count;
$count{ kind($_) }++ for 1 .. $NTASKS;
sql(qq{SELECT count(*) FROM ntask_enqueue_many('examples',
	ARRAY(SELECT 'ex:' || n FROM generate_series(1, $NTASKS) n),
	ARRAY(SELECT jsonb_build_object('n', n, 'kind', CASE
		WHEN n % 10 = 3 THEN 'transient' WHEN n % 10 = 5 THEN 'unknown'
		WHEN n % 25 = 7 THEN 'permanent' WHEN n % 100 = 9 THEN 'slow' ELSE 'ok' END)
	  FROM generate_series(1, $NTASKS) n))});

# the Java worker is compiled into the test's temp dir
my $jdir = PostgreSQL::Test::Utils::tempdir('java');
ok(system('javac', '-d', $jdir, "$root/examples/java/Worker.java") == 0, 'javac Worker.java');

# java-2 goes through pgbouncer in transaction pooling mode (2 server
# connections)
my $bouncer = NtaskBouncer::start($node, postgres => 2);
my $bport = $bouncer->{port};
my $logdir = $PostgreSQL::Test::Utils::log_path;
my %cmd;
for my $i (1, 2, 3)
{
	my $p = $i == 2 ? $bport : $port;
	$cmd{"java-$i"} = [ 'java', '-cp', "$jdir:$JDBC", 'Worker',
		"jdbc:postgresql://127.0.0.1:$p/postgres?user=$user&prepareThreshold=0", "java-$i" ];
}
my (%h, %err);
my $t0 = time;
for my $w (sort keys %cmd)
{
	$err{$w} = '';
	$h{$w} = IPC::Run::start($cmd{$w}, '<', \undef, '>', "$logdir/014_$w.out", '2>', \$err{$w});
}

sub succeeded
{
	return sql(q{SELECT count(*) FROM ntask.task WHERE queue = 'examples' AND state = 'succeeded'});
}
sub wait_until
{
	my ($what, $secs, $cond) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		return 1 if $cond->();
		sleep 0.1;
		$_->pump_nb for values %h;
	}
	diag("timed out waiting for $what");
	return 0;
}

ok(wait_until('100 tasks done', 120, sub { succeeded() >= 100 }), '100 tasks done');
# SIGKILL: no chance to clean up
my $busy_k = sql(q{SELECT count(*) FROM ntask.task WHERE lease_owner = 'java-3'});
$h{'java-3'}->signal('KILL');
$h{'java-3'}->finish;
my $killed = $h{'java-3'}->full_result & 127;
is($killed, 9, "java-3 SIGKILLed mid-run (it held $busy_k task(s))");
delete $h{'java-3'};

my $terminal = $count{permanent};
ok(wait_until("all $NTASKS tasks finished", 240, sub {
		sql(q{SELECT count(*) FROM ntask.task WHERE queue = 'examples' AND due_at IS NOT NULL}) == 0 }),
	"all $NTASKS tasks finished");
my $secs = time - $t0;

# stop the rest
my %rc;
for my $w (sort keys %h)
{
	$h{$w}->signal('TERM');
}
for my $w (sort keys %h)
{
	$h{$w}->finish;
	$rc{$w} = $h{$w}->full_result >> 8;
}
is(join(' ', map { "$_=$rc{$_}" } sort keys %rc), 'java-1=143 java-2=143',
	'the other workers stop on SIGTERM (143 after the JVM\'s shutdown hook)')
  or diag(join("\n", map { "$_: $err{$_}" } sort keys %err));
like($err{$_}, qr/$_: \d+ tasks, stopped/, "$_ says it stopped") for sort keys %rc;

# ---------------------------------------------------------------------
# what happened
# ---------------------------------------------------------------------
my $nsucc = $NTASKS - $count{permanent};
is(sql(q{SELECT string_agg(state || ':' || n, ' ' ORDER BY state) FROM (
		SELECT state, count(*) n FROM ntask.task WHERE queue = 'examples' GROUP BY state) s}),
	"repair_required:$count{permanent} succeeded:$nsucc",
	"$nsucc succeeded, the $count{permanent} permanent ones in repair_required");
is(sql(q{SELECT count(*) FROM ntask.task WHERE queue = 'examples'
		 AND (state = 'repair_required') <> (payload->>'kind' = 'permanent')}), 0,
	'each task ended as its kind says');
is(sql(q{SELECT count(*) || '/' || count(DISTINCT task_id) FROM example_business}),
	"$nsucc/$nsucc", 'exactly one business row per succeeded task');
is(sql(q{SELECT count(*) FROM example_business b JOIN ntask.task t USING (task_id)
		 WHERE t.state <> 'succeeded'}), 0, 'no business row for a task in repair');
is(sql(q{SELECT count(*) FROM example_business b
		 JOIN ntask.receipt r ON r.task_id = b.task_id AND r.token = b.token}),
	$nsucc, 'every business row is its task\'s receipt');
is(sql(q{SELECT count(*) FROM ntask.receipt r JOIN ntask.task t USING (task_id)
		 WHERE t.queue = 'examples'}), $nsucc, 'one receipt per succeeded task');
is(sql(q{SELECT count(*) || ':' || coalesce(max(calls), 0) FROM example_provider}),
	"$nsucc:1", 'the provider saw each succeeded task exactly once (no unknown outcome was sent twice)');
is(sql(q{SELECT count(*) FROM example_provider p JOIN ntask.task t USING (task_id)
		 WHERE t.payload->>'kind' = 'permanent'}), 0, 'the provider never took effect for a permanent task');
is(sql(q{SELECT count(*) FROM ntask.task t
		 WHERE t.state = 'succeeded' AND (SELECT count(*) FROM ntask.attempt_all a
		   WHERE a.task_id = t.task_id AND a.result = 'succeeded') <> 1}), 0,
	'the ledger: exactly one succeeded attempt per succeeded task');
# the first attempt that was not handed back (a worker stopped with
# SIGTERM releases a task it claimed and had not invoked yet)
is(sql(q{SELECT count(*) FROM ntask.task t WHERE t.payload->>'kind' = 'transient'
		 AND EXISTS (SELECT 1 FROM (SELECT * FROM ntask.attempt_all x WHERE x.task_id = t.task_id
					   AND x.result <> 'released' ORDER BY x.attempt LIMIT 1) a
					 WHERE a.result = 'retry_wait' AND a.error_class = 'transient' AND a.outcome_known
					   OR a.result = 'lease_expired' AND a.worker = 'java-3')}),
	$count{transient}, "the ledger: the $count{transient} transient tasks failed their first attempt as transient, outcome known (or it was the killed worker's)");
is(sql(q{SELECT count(*) FROM ntask.task t WHERE t.payload->>'kind' = 'unknown'
		 AND EXISTS (SELECT 1 FROM ntask.attempt_all a WHERE a.task_id = t.task_id
					 AND NOT a.outcome_known
					 AND (a.result = 'retry_wait' AND a.error_class = 'unknown' AND a.error_stage = 'response_lost'
						  OR a.result = 'lease_expired' AND a.worker = 'java-3'))}),
	$count{unknown}, "the ledger: each of the $count{unknown} unknown tasks has an attempt recorded unknown (response_lost, or the killed worker's)");
is(sql(q{SELECT count(*) FROM example_provider p JOIN example_business b USING (task_id)
		 JOIN ntask.task t USING (task_id)
		 JOIN ntask.attempt_all a ON a.task_id = p.task_id AND a.token = p.token
		 WHERE t.payload->>'kind' = 'unknown' AND NOT a.outcome_known
		   AND p.token < b.token AND b.provider_token = p.token}),
	$count{unknown}, 'each unknown task: the attempt that called is unknown in the ledger, a later one reconciled and committed');
is(sql(q{SELECT count(*) FROM ntask.task t WHERE t.payload->>'kind' = 'slow'
		 AND (SELECT count(*) FROM ntask.attempt_all a WHERE a.task_id = t.task_id
			  AND a.result = 'lease_expired' AND a.worker <> 'java-3') = 0}),
	$count{slow}, "the $count{slow} slow tasks (6 s under a 5 s lease) were never taken over from a live worker");
is(sql(q{SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
		 WHERE t.queue = 'examples' AND a.result = 'lease_expired' AND a.worker <> 'java-3'}), 0,
	'only the killed worker lost a lease');
my $k_lost = sql(q{SELECT count(*) FROM ntask.attempt_all WHERE worker = 'java-3' AND result = 'lease_expired'});
cmp_ok($k_lost, '<=', 1, "the killed worker's open attempt ($k_lost) was taken over");
is(sql(q{SELECT count(*) FROM ntask.attempt_all WHERE ended_at IS NULL}), 0, 'no attempt left open');
cmp_ok(sql(q{SELECT count(*) FROM ntask.attempt_all WHERE result = 'succeeded' AND worker = 'java-2'}), '>', 0,
	'the worker behind pgbouncer (transaction pooling) finished tasks');
my $stats = '';
IPC::Run::run([ 'psql', '-X', '-At', '-F', ' ', '-h', '127.0.0.1', '-p', $bport, '-U', $user,
	'-d', 'pgbouncer', '-c', 'SHOW STATS' ], '>', \$stats, '2>', \my $serr);
my ($xacts) = $stats =~ /^postgres (\d+)/m;
# each task a pooled worker finished took at least two transactions through
# the pool (its claim and its transition); a fixed count (1000) failed once
# when the pooled workers happened to finish 70 tasks (849 transactions)
my $pooled = sql(q{SELECT count(*) FROM ntask.attempt_all WHERE result = 'succeeded' AND worker LIKE '%-2'});
cmp_ok($xacts // 0, '>=', 2 * $pooled,
	'pgbouncer counted ' . ($xacts // 0) . " transactions of the postgres pool, at least 2 for each of the $pooled tasks its workers finished");
NtaskBouncer::stop($bouncer);
my $per = sql(q{SELECT string_agg(worker || '=' || n, ' ' ORDER BY worker) FROM (
		SELECT worker, count(*) n FROM ntask.attempt_all WHERE result = 'succeeded' GROUP BY worker) s});

diag(sprintf('014_clients: %d tasks (%s) by Java workers in %.1f s, java-3 SIGKILLed; '
	  . '%d business rows, provider calls 1 each; succeeded per worker: %s',
	  $NTASKS, join(' ', map { "$_=$count{$_}" } sort keys %count), $secs, $nsucc, $per));

$node->stop;
done_testing();
