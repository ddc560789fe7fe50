#!/usr/bin/perl
# bench/citus_batch.pl: batches of 50 on Citus (issue 49's goal "batches
# of 50 likewise"; docs/scaling.md "Batches and flow control on the direct
# path").  A worker drains in batches: one statement claims 50
# (SELECT task_id, token FROM ntask_claim[_on](..., 50), the call as the
# whole statement, which is what takes the direct path), the client
# collects the 50 ids and tokens, and one statement finishes them
# (ntask_transition_many[_on](ids, tokens, 'succeeded')).  pgbench
# passes a claim's 50 rows to the next statement only through an
# aggregate around the claim (array_agg: bench/citus's batch, direct too
# since one plain aggregate keeps the call whole), this is the bare call,
# from a Perl DBI/DBD::Pg client, statements prepared on the server once
# per connection (DBD::Pg's default), like pgbench -M prepared.  The systems are bench/citus_direct.pl's (BENCH_PARTS=calls):
#
#   a   a plain PostgreSQL node: ntask_claim + ntask_transition_many
#   r   the worker node of a coordinator + 1 worker cluster, the client on
#       the worker, the _on forms of the local shard, ntask.citus_direct
#       off (routed: Citus' planner and local execution per statement)
#   d   the same with ntask.citus_direct on (the direct shard path)
#   r1  the _on forms called on the coordinator, delegated by Citus to the
#       worker (one hop), routed on the worker
#   d1  the same, direct on the worker
#
# Per task (a batch's time and CPU / 50): the latency seen by the client,
# and the CPU of every process of the node that holds the rows (its
# postmaster's own and reaped children's time from /proc/<pid>/stat plus
# its live children's, as bench/citus_direct.pl measures it) and of the
# coordinator; rounds interleave the systems (odd rounds a r d r1 d1, even
# rounds the reverse), each round a fresh load of BENCH_TASKS tasks per
# system, then VACUUM ANALYZE of the rows' tables, so the machine's noise
# and the dead rows of earlier rounds fall on every system alike.
#
# Before the rounds, with log_min_messages = debug1 on the worker, one
# batch on each Citus system shows the path each of its two statements
# took (src/shard.c's DEBUG1 line, as t/028 counts them), and the same
# for a worker's own ntask_claim (the walk of its shards) and
# ntask_transition_many without the shard argument.
#
# Run from the repository as the postgres user, Citus and ntask installed
# in the PostgreSQL of pg_config (t/NtaskCitus.pm):
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; mkdir -p /tmp/cb/tmp_check/log; \
#   BENCH_TASKS=2000 BENCH_ROUNDS=4 PATH=$(pg_config --bindir):$PATH \
#   PG_REGRESS=$L/regress/pg_regress TESTDIR=/tmp/cb prove -v -I $L/perl \
#   bench/citus_batch.pl
#
# BENCH_BATCH (50) is the batch size; BENCH_SYSTEMS (a r d r1 d1) which
# systems run (a always); BENCH_PIDS=1 prints each client's backend pid
# (for perf report --pid).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use DBI;
use DBD::Pg;
use NtaskCitus qw(connect_to paths);

my $N = $ENV{BENCH_TASKS} // 2000;
my $ROUNDS = $ENV{BENCH_ROUNDS} // 4;
my $B = $ENV{BENCH_BATCH} // 50;
die "bench/citus_batch.pl: BENCH_TASKS must be a multiple of BENCH_BATCH" if $N % $B;

# the load average and a node's CPU seconds: NtaskCitus::loadavg, node_cpu
sub loadavg { return NtaskCitus::loadavg(); }
sub node_cpu { return NtaskCitus::node_cpu(@_); }

sub mean { my $s = 0; $s += $_ for @_; return @_ ? $s / @_ : 0; }

my ($plain, $c) = NtaskCitus::bench_systems('batch', queues => [ [ 'b', '1 hour' ] ],
	plain_conf => "ntask.backoff_jitter = off\n");
my $co = $c->{coord};
my $w = $c->{workers}[0];
my $S = $co->safe_psql('postgres', q{SELECT ntask_shard('b', 'p')});
my $T = 'ntask.task_' . $w->safe_psql('postgres',
	"SELECT get_shard_id_for_distribution_column('ntask.task', ${S}::smallint)");
my $A = 'ntask.attempt_' . $w->safe_psql('postgres',
	"SELECT get_shard_id_for_distribution_column('ntask.attempt', ${S}::smallint)");

my $seq = 0;

# n ready tasks of shard S (partition key 'p') on the node that holds them,
# at most 10000 a call (ntask_enqueue_many's bound)
sub load
{
	my ($node, $n) = @_;
	while ($n > 10000)
	{
		load($node, 10000);
		$n -= 10000;
	}
	$seq++;
	my $keys = "ARRAY(SELECT 'r$seq-' || i FROM generate_series(1, $n) i)";
	my $pl = "ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $n))";
	my $pk = "ARRAY(SELECT 'p' FROM generate_series(1, $n))";
	my $call = $node != $plain
	  ? "ntask_enqueue_many_on(${S}::smallint, 'b', $keys, $pl, partition_keys => $pk)"
	  : "ntask_enqueue_many('b', $keys, $pl, partition_keys => $pk)";
	$node->safe_psql('postgres', "SELECT count(*) FROM $call");
	return;
}

# the worker node's ntask.citus_direct (delegated calls run with it)
sub set_worker
{
	my ($name, $v) = @_;
	$w->safe_psql('postgres', "ALTER SYSTEM SET $name = $v; SELECT pg_reload_conf()");
	for (1 .. 600)
	{
		return if $w->safe_psql('postgres', "SHOW $name") eq $v;
		sleep(0.05);
	}
	die "bench: $name did not become $v";
}

# the two statements of a batch, by form
my %sql = (
	plain => [ "SELECT task_id, token FROM ntask_claim('b', 'w', $B)",
		"SELECT result FROM ntask_transition_many(\$1::bigint[], \$2::bigint[], 'succeeded')" ],
	on => [ "SELECT task_id, token FROM ntask_claim_on(${S}::smallint, 'b', 'w', $B)",
		"SELECT result FROM ntask_transition_many_on(${S}::smallint, \$1::bigint[], \$2::bigint[], 'succeeded')" ],
	# a worker node's own forms: the claim walks its shards; the
	# transition of ids of one shard
	walk => [ "SELECT task_id, token FROM ntask_claim('b', 'w', $B)",
		"SELECT result FROM ntask_transition_many(\$1::bigint[], \$2::bigint[], 'succeeded')" ]);

# one batch on $dbh with its prepared statements $st: claim, then finish
# what was claimed; returns (tasks, claim seconds, transition seconds,
# tasks the transition applied)
sub batch
{
	my ($st) = @_;
	my $t0 = time;
	$st->[0]->execute;
	my $rows = $st->[0]->fetchall_arrayref;
	my $t1 = time;
	return (0, $t1 - $t0, 0, 0) unless @$rows;
	$st->[1]->execute([ map { $_->[0] } @$rows ], [ map { $_->[1] } @$rows ]);
	my $res = $st->[1]->fetchall_arrayref;
	my $t2 = time;
	my $applied = grep { $_->[0] eq 'applied' } @$res;
	return (scalar(@$rows), $t1 - $t0, $t2 - $t1, $applied);
}

sub prepare
{
	my ($dbh, $form) = @_;
	return [ map { $dbh->prepare($_) } @{ $sql{$form} } ];
}

# system: key, what, the client's node, the rows' node, direct setting, form
my @sys = (
	[ 'a', 'plain PostgreSQL', $plain, $plain, undef, 'plain' ],
	[ 'r', 'Citus worker node, _on forms, routed (ntask.citus_direct = off)', $w, $w, 'off', 'on' ],
	[ 'd', 'Citus worker node, _on forms, direct', $w, $w, 'on', 'on' ],
	[ 'r1', 'Citus coordinator, _on forms delegated, routed on the worker', $co, $w, 'off', 'on' ],
	[ 'd1', 'Citus coordinator, _on forms delegated, direct on the worker', $co, $w, 'on', 'on' ]);
my %want = map { $_ => 1 } split ' ', ($ENV{BENCH_SYSTEMS} // 'a r d r1 d1');
die "bench/citus_batch.pl: BENCH_SYSTEMS must name a" unless $want{a};
@sys = grep { $want{ $_->[0] } } @sys;

# ---------------------------------------------------------------------
# which path each statement of a batch takes (DEBUG1 lines on the worker)
# ---------------------------------------------------------------------
set_worker('log_min_messages', 'debug1');
for my $check ([ 'd', $w, 'on' ], [ 'd1', $co, 'on' ], [ 'd (walk)', $w, 'walk' ], [ 'r', $w, 'on', 'off' ])
{
	my ($k, $client, $form, $direct) = @$check;
	set_worker('ntask.citus_direct', $direct // 'on');
	load($w, 2 * $B);
	my $dbh = connect_to($client);
	my $st = prepare($dbh, $form);
	# two batches: the second runs the prepared statements again
	for my $i (1, 2)
	{
		my $off = -s $w->logfile;
		my $t0 = time;
		$st->[0]->execute;
		my $rows = $st->[0]->fetchall_arrayref;
		my @pc = paths($w, $off);
		$off = -s $w->logfile;
		$st->[1]->execute([ map { $_->[0] } @$rows ], [ map { $_->[1] } @$rows ]);
		my $res = $st->[1]->fetchall_arrayref;
		my @pt = paths($w, $off);
		my $applied = grep { $_->[0] eq 'applied' } @$res;
		diag("path check $k, batch $i: claimed " . scalar(@$rows) . ", applied $applied; claim: "
			  . join('; ', @pc) . " | transition_many: " . join('; ', @pt));
		is(scalar(@$rows) . ",$applied", "$B,$B", "path check $k, batch $i: $B claimed and finished");
		my $expect = ($direct // 'on') eq 'on' ? qr/^direct path for shard \d+$/ : qr/^routed path for shard \d+: ntask.citus_direct is off$/;
		ok(@pc && !grep({ $_ !~ $expect } @pc), "path check $k, batch $i: the claim of $B took the expected path");
		ok(@pt && !grep({ $_ !~ $expect } @pt), "path check $k, batch $i: ntask_transition_many of $B took the expected path");
	}
	$dbh->disconnect;
}
set_worker('log_min_messages', 'warning');

# ---------------------------------------------------------------------
# each node's CPU while no client works (Citus' maintenance daemon, the
# checkpointer...), ms per second: what a round's CPU holds besides the
# calls, reported per task with each system's time
# ---------------------------------------------------------------------
my %idle;
{
	sleep(1);
	my %c0 = map { $_ => node_cpu($_) } ($plain, $co, $w);
	my $t0 = time;
	sleep(10);
	my %c1 = map { $_ => node_cpu($_) } ($plain, $co, $w);
	my $el = time - $t0;
	%idle = map { $_ => ($c1{$_} - $c0{$_}) / $el * 1000 } ($plain, $co, $w);
	diag(sprintf("idle CPU, ms per second: plain %.2f, coordinator %.2f, worker %.2f",
		$idle{$plain}, $idle{$co}, $idle{$w}));
}

# ---------------------------------------------------------------------
# the rounds
# ---------------------------------------------------------------------
my %res;
for my $round (1 .. $ROUNDS)
{
	my @order = $round % 2 ? @sys : reverse @sys;
	for my $s (@order)
	{
		my ($k, $what, $client, $owner, $direct, $form) = @$s;
		set_worker('ntask.citus_direct', $direct) if defined $direct;
		load($owner, $N);
		# the rows' table as the other systems find it: the finished rows
		# of earlier rounds (twice to four times as many on the worker,
		# which holds the rows of four systems) vacuumed away
		($owner == $plain ? $plain : $co)->safe_psql('postgres', 'VACUUM ANALYZE ntask.task, ntask.attempt');
		my $dbh = connect_to($client);
		my $st = prepare($dbh, $form);
		# the client's backend (for a profiler: perf report --pid)
		diag("round $round $k: the client's backend is pid " . $dbh->selectrow_array('SELECT pg_backend_pid()'))
		  if $ENV{BENCH_PIDS};
		sleep(0.5);
		my %cpu0 = map { $_ => node_cpu($_) } ($plain, $co, $w);
		my $la0 = loadavg();
		my $t0 = time;
		my ($done, $applied, $tcl, $ttr, $nb) = (0, 0, 0, 0, 0);
		while ($done < $N)
		{
			my ($n, $a, $b, $ap) = batch($st);
			last unless $n;
			$done += $n;
			$applied += $ap;
			$tcl += $a;
			$ttr += $b;
			$nb++;
		}
		my $el = time - $t0;
		$dbh->disconnect;
		sleep(0.5);    # the client's backend is reaped
		my %cpu1 = map { $_ => node_cpu($_) } ($plain, $co, $w);
		diag("round $round $k: only $done of $N claimed, $applied applied") unless $done == $N && $applied == $N;
		my $own = $owner == $plain ? $plain : $w;
		my $cpu = ($cpu1{$own} - $cpu0{$own}) / $done * 1000;
		my $cpuco = $owner == $plain ? 0 : ($cpu1{$co} - $cpu0{$co}) / $done * 1000;
		my $lat = $el / $done * 1000;
		push @{ $res{$k}{lat} }, $lat;
		push @{ $res{$k}{cpu} }, $cpu;
		push @{ $res{$k}{cpuco} }, $cpuco;
		push @{ $res{$k}{cl} }, $tcl / $nb * 1000;
		push @{ $res{$k}{tr} }, $ttr / $nb * 1000;
		# the idle CPU of the rows' node over this system's time, per task
		push @{ $res{$k}{bg} }, $idle{$own} * $el / $done;
		diag(sprintf("round %d %-3s %.3f ms per task (claim of %d %.2f ms, transition_many %.2f ms per batch), node CPU %.3f ms per task (coordinator %.3f), load %s  [%s]",
			$round, $k, $lat, $B, $tcl / $nb * 1000, $ttr / $nb * 1000, $cpu, $cpuco, $la0, $what));
	}
}
set_worker('ntask.citus_direct', 'on');

# every task claimed succeeded, each with its attempt recorded (a ledger
# row, or kept on the task row: attempt_worker, ntask.attempt_all)
diag("worker: " . $w->safe_psql('postgres',
	"SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM $T GROUP BY state ORDER BY 1) s")
  . "; attempts: ledger rows " . $w->safe_psql('postgres', "SELECT count(*) FROM $A")
  . ", on the task row " . $w->safe_psql('postgres', "SELECT count(*) FROM $T WHERE attempt_worker IS NOT NULL"));
diag("plain: " . $plain->safe_psql('postgres',
	"SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM ntask.task GROUP BY state ORDER BY 1) s")
  . "; attempts: ledger rows " . $plain->safe_psql('postgres', "SELECT count(*) FROM ntask.attempt")
  . ", on the task row " . $plain->safe_psql('postgres', "SELECT count(*) FROM ntask.task WHERE attempt_worker IS NOT NULL"));

diag(sprintf("summary, means of %d rounds of %d tasks in batches of %d, one client; per task, ratio to a in parentheses:",
	$ROUNDS, $N, $B));
my $al = mean(@{ $res{a}{lat} });
my $ac = mean(@{ $res{a}{cpu} });
for my $s (@sys)
{
	my $k = $s->[0];
	my $l = mean(@{ $res{$k}{lat} });
	my $cp = mean(@{ $res{$k}{cpu} });
	diag(sprintf("  %-3s %.3f ms (%.2fx a), CPU of the rows' node %.3f ms (%.2fx a), coordinator %.3f ms; per batch: claim %.2f ms, transition_many %.2f ms  [%s]",
		$k, $l, $l / $al, $cp, $cp / $ac, mean(@{ $res{$k}{cpuco} }),
		mean(@{ $res{$k}{cl} }), mean(@{ $res{$k}{tr} }), $s->[1]));
	# each round's ratio of CPU to a of the same round; the idle CPU of
	# the rows' node over the system's time, per task (part of its CPU)
	diag("      CPU / a per round: " . join(' ', map { sprintf('%.2f', $res{$k}{cpu}[$_] / $res{a}{cpu}[$_]) } 0 .. $ROUNDS - 1)
	  . sprintf("; of its CPU per task, %.3f ms is the node's idle rate over its time", mean(@{ $res{$k}{bg} })));
}
NtaskCitus::stop($c);
$plain->stop('fast');
ok(1, 'measured');
done_testing();
