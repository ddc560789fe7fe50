#!/usr/bin/perl
# bench/citus_wake.pl: what a waiting claim's wake-up costs on a worker
# node's direct path (issue 49, docs/scaling.md "The waiting claim on the
# direct path"), against the same claim when work is due at its first
# look.  One claiming client, one producer, in the same rounds:
#
#   a   a plain PostgreSQL node (no Citus)
#   r   the worker node of a coordinator + 1 worker cluster (four shard
#       values, all on the worker), ntask.citus_direct = off: routed
#   d   the same worker node, ntask.citus_direct = on: the direct path,
#       each look entering the node's shard groups through the interlock
#
# Per system and round, BENCH_WAKES times each:
#   due   a task is enqueued, then ntask_claim('b', 'w', 1, wait => '10
#         seconds') claims it at its first look (nothing sleeps)
#   wake  the claim starts on an empty queue (its first look finds
#         nothing, it sleeps), the producer enqueues one task 30 ms
#         later, and the claim wakes, looks again and claims it
# The CPU of the claiming backend per claim (/proc/<pid>/schedstat, read
# around the call) and its latency (wake: less the 30 ms), after 5 claims
# not measured (the backend's plans prepared).  Each claimed
# task is then finished (not measured).  Run from the repository as the
# postgres user, Citus and ntask installed in the PostgreSQL of pg_config:
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; mkdir -p /tmp/cw/tmp_check/log; \
#   BENCH_WAKES=100 BENCH_ROUNDS=2 PATH=$(pg_config --bindir):$PATH \
#   PG_REGRESS=$L/regress/pg_regress TESTDIR=/tmp/cw prove -v -I $L/perl \
#   bench/citus_wake.pl
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t";
use DBI;
use DBD::Pg qw(:async);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use NtaskCitus;

my $N = $ENV{BENCH_WAKES} // 100;
my $ROUNDS = $ENV{BENCH_ROUNDS} // 2;
my $GAP = 0.03;

my ($plain, $c) = NtaskCitus::bench_systems('wake', queues => [ [ 'b', '1 hour' ] ]);
my $w = $c->{workers}[0];

sub conn
{
	my ($node, @set) = @_;
	my $d = DBI->connect('dbi:Pg:dbname=postgres;host=' . $node->host . ';port=' . $node->port,
		'', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	$d->do($_) for @set;
	return $d;
}

sub cpu_ns
{
	my ($pid) = @_;
	open my $f, '<', "/proc/$pid/schedstat" or die "schedstat of $pid: $!";
	my ($ns) = split ' ', scalar <$f>;
	return $ns;
}

sub mean { my $s = 0; $s += $_ for @_; return @_ ? $s / @_ : 0; }

my @sys = (
	[ 'a', 'plain node', $plain, [] ],
	[ 'r', 'worker node, routed (ntask.citus_direct = off)', $w, ['SET ntask.citus_direct = off'] ],
	[ 'd', 'worker node, direct', $w, [] ]);
my $seq = 0;
my %res;
my $claim = q{SELECT task_id, token FROM ntask_claim('b', 'w', 1, wait => '10 seconds')};
for my $round (1 .. $ROUNDS)
{
	for my $s (@sys)
	{
		my ($k, $what, $node, $set) = @$s;
		my $cl = conn($node, @$set);
		my $pr = conn($node, @$set);
		my $pid = $cl->selectrow_array('SELECT pg_backend_pid()');
		my $la = NtaskCitus::loadavg();
		# warm up: the backend's plans prepared, not measured
		for my $i (1 .. 5)
		{
			$seq++;
			$pr->do(qq{SELECT count(*) FROM ntask_enqueue('b', 'warm$seq', '{}')});
			my ($id, $tok) = $cl->selectrow_array($claim);
			$cl->do("SELECT result FROM ntask_transition($id, $tok, 'succeeded')");
		}
		for my $mode ('due', 'wake')
		{
			my (@cpu, @lat);
			for my $i (1 .. $N)
			{
				$seq++;
				my $key = "k$seq";
				$pr->do(qq{SELECT count(*) FROM ntask_enqueue('b', '$key', '{}')}) if $mode eq 'due';
				my $c0 = cpu_ns($pid);
				my $t0 = time;
				my $sth = $cl->prepare($claim, { pg_async => PG_ASYNC });
				$sth->execute;
				if ($mode eq 'wake')
				{
					sleep($GAP);
					$pr->do(qq{SELECT count(*) FROM ntask_enqueue('b', '$key', '{}')});
				}
				$cl->pg_result;
				my $row = $sth->fetchrow_arrayref;
				my $t1 = time;
				my $c1 = cpu_ns($pid);
				die "bench: $k $mode: no task claimed" unless $row && $row->[0];
				push @cpu, ($c1 - $c0) / 1e6;
				push @lat, ($t1 - $t0 - ($mode eq 'wake' ? $GAP : 0)) * 1000;
				$sth->finish;
				$cl->do("SELECT result FROM ntask_transition($row->[0], $row->[1], 'succeeded')");
			}
			push @{ $res{$k}{$mode}{cpu} }, mean(@cpu);
			push @{ $res{$k}{$mode}{lat} }, mean(@lat);
			diag(sprintf("round %d %s %-4s: CPU %.3f ms per claim, latency %.3f ms, load %s  [%s]",
				$round, $k, $mode, mean(@cpu), mean(@lat), $la, $what));
		}
		$cl->disconnect;
		$pr->disconnect;
	}
}
diag(sprintf("summary, means of %d rounds of %d claims each, the claiming backend's CPU per claim:", $ROUNDS, $N));
for my $s (@sys)
{
	my $k = $s->[0];
	my ($due, $wake) = map { mean(@{ $res{$k}{$_}{cpu} }) } ('due', 'wake');
	diag(sprintf("  %s due %.3f ms, wake %.3f ms (+%.3f ms, %.2fx due); latency due %.3f, wake %.3f (after the 30 ms)  [%s]",
		$k, $due, $wake, $wake - $due, $due > 0 ? $wake / $due : 0,
		mean(@{ $res{$k}{due}{lat} }), mean(@{ $res{$k}{wake}{lat} }), $s->[1]));
}
ok(1, 'bench ran');
$plain->stop;
NtaskCitus::stop($c);
done_testing();
