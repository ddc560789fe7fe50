#!/usr/bin/perl
# bench/citus_many.pl: a worker node's batch over two of its shard values
# (docs/scaling.md "Batches over several shards on the direct path").  A
# variant of bench/citus_batch.pl: a coordinator and one worker node
# (ntask_distribute(4): every shard value on the worker), queue b; before
# each batch (untimed) a loader session enqueues 25 tasks in shard value
# A and 25 in B (ntask_enqueue_many_on, always direct); then the batch:
# the worker node's own ntask_claim('b', 'w', 50), whose walk takes the
# 25 of each, and ntask_transition_many of the 50 ids (two shard values).
#
#   a   a plain PostgreSQL node: the same two statements (one shard)
#   r   the worker node, the session's ntask.citus_direct off (routed)
#   d   the same with it on (the direct path, both groups entered)
#
# Per batch: the client's latency, and the CPU of the client's backend
# (/proc/<pid>/schedstat, its time on a CPU in ns: precise, not ticks),
# read before the claim, between the statements and after the
# transition: the claim's and ntask_transition_many's CPU apart.  On a
# Citus worker node every statement of a local shard runs in that backend
# (Citus' local execution), so this is the node's CPU for the batch but
# for the WAL writer's and the checkpointer's share.  Rounds interleave
# the systems (a r d, then d r a), each round BENCH_BATCHES batches per
# system after a VACUUM ANALYZE of the rows' tables.
#
# Before the rounds, with log_min_messages = debug1 on the worker, two
# batches of r and d show the paths (src/shard.c's DEBUG1 lines); the
# bench fails if d's ntask_transition_many is not direct in both shard
# values or r's not routed.
#
# Run from the repository as the postgres user, Citus and ntask installed
# in the PostgreSQL of pg_config (t/NtaskCitus.pm):
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; mkdir -p /tmp/cm/tmp_check/log; \
#   BENCH_BATCHES=60 BENCH_ROUNDS=4 PATH=$(pg_config --bindir):$PATH \
#   PG_REGRESS=$L/regress/pg_regress TESTDIR=/tmp/cm prove -v -I $L/perl \
#   bench/citus_many.pl
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

my $NB = $ENV{BENCH_BATCHES} // 60;
my $ROUNDS = $ENV{BENCH_ROUNDS} // 4;
my $H = 25;	# tasks per shard value per batch

sub mean { my $s = 0; $s += $_ for @_; return @_ ? $s / @_ : 0; }

# a backend's time on a CPU, ms
sub backend_cpu
{
	my ($pid) = @_;
	open my $f, '<', "/proc/$pid/schedstat" or die "bench: /proc/$pid/schedstat: $!";
	my ($ns) = split ' ', scalar <$f>;
	return $ns / 1e6;
}

my ($plain, $c) = NtaskCitus::bench_systems('many', queues => [ [ 'b', '1 hour' ] ]);
my $co = $c->{coord};
my $w = $c->{workers}[0];
# two shard values and a partition key of each
my ($A, $B) = split /\n/, $co->safe_psql('postgres', 'SELECT shard FROM ntask.shard_map ORDER BY shard LIMIT 2');
my %pk;
for my $s ($A, $B)
{
	$pk{$s} = $co->safe_psql('postgres', qq{SELECT k FROM generate_series(1, 500) i, LATERAL (SELECT 'p' || i AS k) x
		WHERE ntask_shard('b', k) = $s ORDER BY i LIMIT 1});
}

my $seq = 0;
my %loader;
# 25 ready tasks in each of A and B (the plain node: 50)
sub load
{
	my ($node) = @_;
	my $l = $loader{$node} //= do {
		my $d = connect_to($node);
		$d->do('SET ntask.citus_direct = on') if $node != $plain;
		$d;
	};
	for my $s ($A, $B)
	{
		$seq++;
		my $keys = "ARRAY(SELECT 'r$seq-' || i FROM generate_series(1, $H) i)";
		my $pl = "ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $H))";
		my $pks = "ARRAY(SELECT '$pk{$s}' FROM generate_series(1, $H))";
		$l->selectrow_array($node != $plain
			? "SELECT count(*) FROM ntask_enqueue_many_on(${s}::smallint, 'b', $keys, $pl, partition_keys => $pks)"
			: "SELECT count(*) FROM ntask_enqueue_many('b', $keys, $pl, partition_keys => $pks)");
	}
	return;
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
	my @st = map { $d->prepare($_) } ("SELECT task_id, token FROM ntask_claim('b', 'w', 50)",
		"SELECT result FROM ntask_transition_many(\$1::bigint[], \$2::bigint[], 'succeeded')");
	return ($d, $pid, \@st);
}

# one batch: (claimed, applied, shard values claimed, latency ms, claim
# CPU ms, transition_many CPU ms)
sub batch
{
	my ($pid, $st) = @_;
	my $c0 = backend_cpu($pid);
	my $t0 = time;
	$st->[0]->execute;
	my $rows = $st->[0]->fetchall_arrayref;
	my $c1 = backend_cpu($pid);
	$st->[1]->execute([ map { $_->[0] } @$rows ], [ map { $_->[1] } @$rows ]);
	my $res = $st->[1]->fetchall_arrayref;
	my $t1 = time;
	my $c2 = backend_cpu($pid);
	my %sh = map { (int($_->[0] / 2**48)) => 1 } @$rows;
	return (scalar(@$rows), scalar(grep { $_->[0] eq 'applied' } @$res), scalar(keys %sh),
		($t1 - $t0) * 1000, $c1 - $c0, $c2 - $c1);
}

# the paths
$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
sleep(1);
for my $s (@sys[1, 2])
{
	my ($k, undef, $node, $direct) = @$s;
	my ($d, $pid, $st) = session($node, $direct);
	for my $i (1, 2)
	{
		load($node);
		my $off = -s $w->logfile;
		my ($n, $ap, $ns) = batch($pid, $st);
		my @p = paths($w, $off);
		diag("path check $k, batch $i: claimed $n of $ns shard values, applied $ap; " . join('; ', @p));
		is("$n,$ap,$ns", '50,50,2', "path check $k, batch $i: 50 of two shard values claimed and finished");
		my @tm = @p[-($direct eq 'on' ? 2 : 1) .. -1];
		if ($direct eq 'on')
		{
			is(join(',', @tm), join(',', map { "direct path for shard $_" } sort { $a <=> $b } ($A, $B)),
				"path check $k, batch $i: ntask_transition_many direct in both shard values");
		}
		else
		{
			like(join(',', @tm), qr/^routed path for shard \d+: ntask.citus_direct is off$/,
				"path check $k, batch $i: ntask_transition_many routed");
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
		($node == $plain ? $plain : $co)->safe_psql('postgres', 'VACUUM ANALYZE ntask.task, ntask.attempt');
		my ($d, $pid, $st) = session($node, $direct);
		my (@lat, @ccl, @ctr);
		my $bad = 0;
		for (1 .. $NB)
		{
			load($node);
			my ($n, $ap, $ns, $lat, $ccl, $ctr) = batch($pid, $st);
			$bad++ unless $n == 50 && $ap == 50 && ($node == $plain || $ns == 2);
			push @lat, $lat;
			push @ccl, $ccl;
			push @ctr, $ctr;
		}
		$d->disconnect;
		diag("round $round $k: $bad batches were not 50 of two shard values, all applied") if $bad;
		push @{ $res{$k}{lat} }, mean(@lat);
		push @{ $res{$k}{ccl} }, mean(@ccl);
		push @{ $res{$k}{ctr} }, mean(@ctr);
		diag(sprintf("round %d %s: per batch %.2f ms latency; backend CPU: claim %.2f ms, transition_many %.2f ms  [%s]",
			$round, $k, mean(@lat), mean(@ccl), mean(@ctr), $what));
	}
}

diag('means of ' . $ROUNDS . " rounds of $NB batches of 50 (25 in each of two shard values), ms per batch:");
for my $s (@sys)
{
	my $k = $s->[0];
	my ($lat, $ccl, $ctr) = map { mean(@{ $res{$k}{$_} }) } qw(lat ccl ctr);
	diag(sprintf("%-2s latency %.2f (%.2fx a); CPU claim %.2f (%.2fx a), transition_many %.2f (%.2fx a, %.3fx r), both %.2f (%.2fx a)  [%s]",
		$k, $lat, $lat / mean(@{ $res{a}{lat} }), $ccl, $ccl / mean(@{ $res{a}{ccl} }),
		$ctr, $ctr / mean(@{ $res{a}{ctr} }), $ctr / mean(@{ $res{r}{ctr} }),
		$ccl + $ctr, ($ccl + $ctr) / (mean(@{ $res{a}{ccl} }) + mean(@{ $res{a}{ctr} })), $s->[1]));
}
diag('round by round, transition_many CPU d/r: '
	  . join(', ', map { sprintf('%.3f', $res{d}{ctr}[$_] / $res{r}{ctr}[$_]) } 0 .. $ROUNDS - 1)
	  . '; d/a: ' . join(', ', map { sprintf('%.2f', $res{d}{ctr}[$_] / $res{a}{ctr}[$_]) } 0 .. $ROUNDS - 1));

$_->disconnect for values %loader;
$plain->stop;
NtaskCitus::stop($c);
done_testing();
