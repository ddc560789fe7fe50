#!/usr/bin/perl
# bench/citus_enqueue_many.pl: a worker node's ntask_enqueue_many of 50
# fresh keys over 1, 2 or 4 of its shard values (docs/scaling.md
# "`ntask_enqueue_many` over several shard values").  A variant of
# bench/citus_many.pl: a coordinator and one worker node
# (ntask_distribute(4): every shard value on the worker), queue b; each
# batch is one prepared statement, the whole statement,
#
#   SELECT task_id, created FROM ntask_enqueue_many('b', $1, $2, partition_keys => $3)
#
# with 50 fresh keys, empty payloads and the partition keys that spread
# them evenly over G shard values (G in BENCH_GROUPS, default "1 2 4";
# the plain node gets the same arrays).
#
#   a   a plain PostgreSQL node
#   r   the worker node, the session's ntask.citus_direct off (routed)
#   d   the same with it on (the direct path, one group per shard value)
#
# Per batch: the client's latency and the CPU of the client's backend
# (/proc/<pid>/schedstat, ns), which on a Citus worker node runs every
# statement of a local shard (Citus' local execution): the node's CPU for
# the batch but for the WAL writer's and the checkpointer's share.
# Rounds interleave the systems (a r d, then d r a), each round
# BENCH_BATCHES batches per system and G.
#
# Before the rounds, with log_min_messages = debug1 on the worker, one
# batch of r and of d per G shows the paths (src/shard.c's DEBUG1 lines);
# the bench fails if d's is not direct in each of its G shard values or
# r's not routed.
#
# Run from the repository as the postgres user, Citus and ntask installed
# in the PostgreSQL of pg_config (t/NtaskCitus.pm):
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; mkdir -p /tmp/cem/tmp_check/log; \
#   BENCH_BATCHES=40 BENCH_ROUNDS=2 PATH=$(pg_config --bindir):$PATH \
#   PG_REGRESS=$L/regress/pg_regress TESTDIR=/tmp/cem prove -v -I $L/perl \
#   bench/citus_enqueue_many.pl
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use DBI;
use DBD::Pg;
use NtaskCitus qw(connect_to paths);

my $NB = $ENV{BENCH_BATCHES} // 40;
my $ROUNDS = $ENV{BENCH_ROUNDS} // 2;
my @G = split ' ', ($ENV{BENCH_GROUPS} // '1 2 4');
my $N = 50;

sub mean { my $s = 0; $s += $_ for @_; return @_ ? $s / @_ : 0; }

# a backend's time on a CPU, ms
sub backend_cpu
{
	my ($pid) = @_;
	open my $f, '<', "/proc/$pid/schedstat" or die "bench: /proc/$pid/schedstat: $!";
	my ($ns) = split ' ', scalar <$f>;
	return $ns / 1e6;
}

my ($plain, $c) = NtaskCitus::bench_systems('enqmany', queues => [ [ 'b', '1 hour' ] ]);
my $co = $c->{coord};
my $w = $c->{workers}[0];
my @S = split /\n/, $co->safe_psql('postgres', 'SELECT shard FROM ntask.shard_map ORDER BY shard');
die "bench: 4 shard values expected\n" unless @S == 4;
# a partition key of each shard value
my %pk;
for my $s (@S)
{
	$pk{$s} = $co->safe_psql('postgres', qq{SELECT k FROM generate_series(1, 500) i, LATERAL (SELECT 'p' || i AS k) x
		WHERE ntask_shard('b', k) = $s ORDER BY i LIMIT 1});
}

my @sys = ([ 'a', 'plain PostgreSQL', $plain, undef ],
	[ 'r', 'Citus worker node, its own calls, routed (ntask.citus_direct = off)', $w, 'off' ],
	[ 'd', 'Citus worker node, its own calls, direct', $w, 'on' ]);

sub session
{
	my ($node, $direct) = @_;
	my $d = connect_to($node);
	$d->do("SET ntask.citus_direct = $direct") if defined $direct;
	my $pid = $d->selectrow_array('SELECT pg_backend_pid()');
	my $st = $d->prepare(q{SELECT task_id, created FROM ntask_enqueue_many('b', $1::text[], $2::jsonb[], partition_keys => $3::text[])});
	return ($d, $pid, $st);
}

my $seq = 0;
# one batch of 50 fresh keys over $g shard values: (created, shard
# values, latency ms, CPU ms)
sub batch
{
	my ($pid, $st, $g) = @_;
	$seq++;
	my @k = map { "e$seq-$_" } 1 .. $N;
	my @pks = map { $pk{ $S[ $_ % $g ] } } 0 .. $N - 1;
	my $c0 = backend_cpu($pid);
	my $t0 = time;
	$st->execute(\@k, [ ('{}') x $N ], \@pks);
	my $rows = $st->fetchall_arrayref;
	my $t1 = time;
	my $c1 = backend_cpu($pid);
	my %sh = map { (int($_->[0] / 2**48)) => 1 } @$rows;
	return (scalar(grep { $_->[1] } @$rows), scalar(keys %sh), ($t1 - $t0) * 1000, $c1 - $c0);
}

# the paths
$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
sleep(1);
for my $s (@sys[1, 2])
{
	my ($k, undef, $node, $direct) = @$s;
	my ($d, $pid, $st) = session($node, $direct);
	for my $g (@G)
	{
		my $off = -s $w->logfile;
		my ($n, $ns) = batch($pid, $st, $g);
		my @p = paths($w, $off);
		diag("path check $k, $g shard values: created $n in $ns; " . join('; ', @p));
		is("$n,$ns", "$N,$g", "path check $k, $g shard values: $N created");
		if ($direct eq 'on')
		{
			is(join(',', @p), join(',', map { "direct path for shard $_" } sort { $a <=> $b } @S[ 0 .. $g - 1 ]),
				"path check $k, $g shard values: direct in each");
		}
		else
		{
			like(join(',', @p), qr/^routed path for shard \d+: ntask.citus_direct is off$/,
				"path check $k, $g shard values: routed");
		}
	}
	$d->disconnect;
}
$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = warning; SELECT pg_reload_conf()');

my %res;
for my $round (1 .. $ROUNDS)
{
	for my $s ($round % 2 ? @sys : reverse @sys)
	{
		my ($k, $what, $node, $direct) = @$s;
		($node == $plain ? $plain : $co)->safe_psql('postgres', 'VACUUM ANALYZE ntask.task');
		my ($d, $pid, $st) = session($node, $direct);
		for my $g (@G)
		{
			my (@lat, @cpu);
			my $bad = 0;
			for (1 .. $NB)
			{
				my ($n, $ns, $lat, $cpu) = batch($pid, $st, $g);
				$bad++ unless $n == $N && ($node == $plain || $ns == $g);
				push @lat, $lat;
				push @cpu, $cpu;
			}
			diag("round $round $k G=$g: $bad batches did not create $N tasks in $g shard values") if $bad;
			push @{ $res{$k}{$g}{lat} }, mean(@lat);
			push @{ $res{$k}{$g}{cpu} }, mean(@cpu);
			diag(sprintf("round %d %s G=%d: per batch %.2f ms latency, backend CPU %.2f ms  [%s]",
				$round, $k, $g, mean(@lat), mean(@cpu), $what));
		}
		$d->disconnect;
	}
}

diag("means of $ROUNDS rounds of $NB batches of $N fresh keys over G shard values, per batch:");
for my $g (@G)
{
	for my $s (@sys)
	{
		my $k = $s->[0];
		my ($lat, $cpu) = map { mean(@{ $res{$k}{$g}{$_} }) } qw(lat cpu);
		diag(sprintf("G=%d %-2s latency %.2f ms (%.2fx a); CPU %.2f ms (%.2fx a, %.3fx r), %.1f us per task  [%s]",
			$g, $k, $lat, $lat / mean(@{ $res{a}{$g}{lat} }), $cpu, $cpu / mean(@{ $res{a}{$g}{cpu} }),
			$cpu / mean(@{ $res{r}{$g}{cpu} }), $cpu * 1000 / $N, $s->[1]));
	}
	diag("G=$g round by round, CPU d/r: "
		  . join(', ', map { sprintf('%.3f', $res{d}{$g}{cpu}[$_] / $res{r}{$g}{cpu}[$_]) } 0 .. $ROUNDS - 1)
		  . '; d/a: ' . join(', ', map { sprintf('%.2f', $res{d}{$g}{cpu}[$_] / $res{a}{$g}{cpu}[$_]) } 0 .. $ROUNDS - 1));
}

$plain->stop;
NtaskCitus::stop($c);
done_testing();
