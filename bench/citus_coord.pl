#!/usr/bin/perl
# bench/citus_coord.pl: the coordinator's CPU per call of the plain API
# through the coordinator, delegated (issue 49, docs/scaling.md "The plain
# API through the coordinator, delegated").  A coordinator and one worker
# node (four shard values, all on the worker), one client on the
# coordinator, pgbench -M prepared, in the same rounds:
#
#   r   the plain API, ntask.citus_delegate = off: every statement of the
#       call planned and routed on the coordinator (before issue 49 item 8)
#   p   the plain API, delegated (the default): the call's _on form run by
#       SPI and delegated by Citus, the worker running it directly
#   o   the _on forms called by the client, delegated by Citus: the shard
#       named by the client (a round over the four values for a claim)
#
# Calls: tr (ntask_transition of a leased task to succeeded), hb
# (ntask_heartbeat of one leased task), enq (ntask_enqueue of a fresh key,
# no partition key), dr (the drain: claim 1 + transition, per task; the
# tasks spread over the four shard values).  BENCH_CALLS chooses.  For
# each: pgbench's latency, and the CPU per call of every process of the
# coordinator and of the worker node (NtaskCitus::node_cpu), with the load
# average.  Run from the repository as the postgres user, Citus and ntask
# installed in the PostgreSQL of pg_config:
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; mkdir -p /tmp/cc/tmp_check/log; \
#   BENCH_TASKS=1000 BENCH_ROUNDS=2 PATH=$(pg_config --bindir):$PATH \
#   PG_REGRESS=$L/regress/pg_regress TESTDIR=/tmp/cc prove -v -I $L/perl \
#   bench/citus_coord.pl
#
# BENCH_PERF='p o' (systems) adds a round, not counted, with a perf record
# -g of the client's coordinator backend, into BENCH_PERF_DIR (/tmp),
# <system>.<call>.data (perf must be allowed to profile the user's own
# processes: kernel.perf_event_paranoid <= 2).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use NtaskCitus;

my $N = $ENV{BENCH_TASKS} // 1000;
my $ROUNDS = $ENV{BENCH_ROUNDS} // 2;
my @calls = split ' ', ($ENV{BENCH_CALLS} // 'tr hb enq dr');

my ($plain, $c) = NtaskCitus::bench_systems('coord', queues => [ [ 'b', '1 hour' ], [ 'e', undef ] ]);
$plain->stop;
my $co = $c->{coord};
my $w = $c->{workers}[0];
my @S = split /\n/, $co->safe_psql('postgres', 'SELECT shard FROM ntask.shard_map ORDER BY 1');
die "bench: want 4 shard values" unless @S == 4;
my $dir = PostgreSQL::Test::Utils::tempdir;
my $seq = 0;

sub mean { my $s = 0; $s += $_ for @_; return @_ ? $s / @_ : 0; }

# N ready tasks of queue b, spread over the shard values (no partition key)
sub load
{
	$seq++;
	for my $from (map { $_ * 500 } 0 .. int(($N - 1) / 500))
	{
		my $to = $from + 499 < $N - 1 ? $from + 499 : $N - 1;
		$co->safe_psql('postgres', "SELECT count(*) FROM ntask_enqueue_many('b',
			ARRAY(SELECT 'r$seq-' || i FROM generate_series($from, $to) i),
			ARRAY(SELECT '{}'::jsonb FROM generate_series($from, $to)))");
	}
	return;
}

# N leased tasks in bench_lease(i, id, tok, s) on the coordinator
sub lease_all
{
	load();
	my @rows;
	while (@rows < $N)
	{
		my $got = $co->safe_psql('postgres', "SET ntask.citus_delegate = off;
			SELECT task_id || ',' || token || ',' || (task_id >> 48) FROM ntask_claim('b', 'w', 500)");
		last if $got eq '';
		push @rows, split /\n/, $got;
	}
	die "bench: leased " . scalar(@rows) . " of $N" unless @rows >= $N;
	my $i = 0;
	$co->safe_psql('postgres', "SET citus.enable_ddl_propagation = off;
		DROP TABLE IF EXISTS bench_lease; DROP SEQUENCE IF EXISTS bench_seq;
		CREATE TABLE bench_lease (i int PRIMARY KEY, id bigint, tok bigint, s smallint);
		CREATE SEQUENCE bench_seq;
		INSERT INTO bench_lease VALUES " . join(', ', map { $i++; "($i, $_)" } @rows));
	return;
}

my $pick = "SELECT id, tok, s FROM bench_lease WHERE i = (SELECT nextval('bench_seq')) \\gset\n";
my $ss = 'ARRAY[' . join(',', @S) . ']::smallint[]';
my %cs = (
	tr => $pick . "SELECT result FROM ntask_transition(:id, :tok, 'succeeded') \\gset\n",
	tr_on => $pick . "SELECT result FROM ntask_transition_on(:s::smallint, :id, :tok, 'succeeded') \\gset\n",
	hb => "SELECT ntask_heartbeat(:id, :tok, lease => '1 hour') \\gset\n",
	hb_on => "SELECT ntask_heartbeat_on(:s::smallint, :id, :tok, lease => '1 hour') \\gset\n",
	enq => "\\set k random(1, 1000000000000)\n"
	  . "SELECT task_id FROM ntask_enqueue('e', :k, '{}');\n",
	enq_on => "\\set k random(1, 1000000000000)\n"
	  . "SELECT task_id FROM ntask_enqueue_on(ntask_shard('e', :k::text), 'e', :k, '{}');\n",
	dr => "SELECT task_id AS id, token AS tok FROM ntask_claim('b', 'w', 1) \\gset\n"
	  . "SELECT result FROM ntask_transition(:id, :tok, 'succeeded') \\gset\n",
	# the client's own round over the shard values; a value with nothing
	# left is tried again at the next value
	dr_on => "\\set j (:j + 1) % 4\n"
	  . "SELECT coalesce(max(task_id), 0) AS id, max(token) AS tok, max(task_id >> 48) AS s "
	  . "FROM ntask_claim_on(($ss)[:j + 1], 'b', 'w', 1) \\gset\n"
	  . "\\if :id > 0\n"
	  . "SELECT result FROM ntask_transition_on(:s::smallint, :id, :tok, 'succeeded') \\gset\n"
	  . "\\endif\n");
for my $k (keys %cs)
{
	open my $f, '>', "$dir/$k.sql" or die;
	print $f $cs{$k};
	close $f;
}

my @sys = (
	[ 'r', 'coordinator, plain API, routed (ntask.citus_delegate = off)', '', '-c ntask.citus_delegate=off' ],
	[ 'p', 'coordinator, plain API, delegated (ntask.citus_delegate = on)', '', '' ],
	[ 'o', 'coordinator, _on forms, delegated by Citus', '_on', '' ]);
my %res;
for my $round (1 .. $ROUNDS + ($ENV{BENCH_PERF} ? 1 : 0))
{
	my $perf = $round > $ROUNDS;
	for my $s (@sys)
	{
		my ($k, $what, $sfx, $opts) = @$s;
		next if $perf && $ENV{BENCH_PERF} !~ /\b$k\b/;
		for my $call (@calls)
		{
			my $D = '';
			my $t = $N;
			if ($call eq 'tr' || $call eq 'hb')
			{
				lease_all();
			}
			elsif ($call eq 'dr')
			{
				# what the earlier rounds left, then N tasks
				load();
				$D = '-D j=0';
				# the _on round may find a value empty; run until N drained
			}
			if ($call eq 'hb')
			{
				my ($id, $tok, $sv) = split /\|/, $co->safe_psql('postgres', 'SELECT id, tok, s FROM bench_lease WHERE i = 1');
				$D = "-D id=$id -D tok=$tok -D s=$sv";
			}
			my $before = $call eq 'dr' ? $co->safe_psql('postgres',
				q{SELECT count(*) FROM ntask.task WHERE queue = 'b' AND state = 'succeeded'}) : 0;
			sleep(0.5);
			my %cpu0 = map { $_ => NtaskCitus::node_cpu($_) } ($co, $w);
			my $la = NtaskCitus::loadavg();
			my $cmd = "PGOPTIONS='$opts' pgbench -n -M prepared -c 1 -t $t $D -f $dir/$call$sfx.sql -h @{[$co->host]} -p @{[$co->port]} postgres 2>&1";
			my $out;
			if ($perf)
			{
				# perf record of the client's coordinator backend (it exits
				# with the backend), into BENCH_PERF_DIR/<system>.<call>.data
				open my $pb, '-|', "PGAPPNAME=ccperf $cmd" or die;
				my $pid = '';
				for (1 .. 200)
				{
					$pid = $co->safe_psql('postgres',
						q{SELECT pid FROM pg_stat_activity WHERE application_name = 'ccperf' LIMIT 1});
					last if $pid ne '';
					sleep(0.01);
				}
				my $pdir = $ENV{BENCH_PERF_DIR} // '/tmp';
				system("perf record -q -F 2000 -g -p $pid -o $pdir/$k.$call.data >$pdir/$k.$call.log 2>&1 &")
				  if $pid ne '';
				local $/;
				$out = <$pb>;
				close $pb;
			}
			else
			{
				$out = `$cmd`;
			}
			sleep(0.5);
			my %cpu1 = map { $_ => NtaskCitus::node_cpu($_) } ($co, $w);
			next if $perf;
			my ($lat) = $out =~ /latency average = ([\d.]+) ms/;
			my ($done) = $out =~ /number of transactions actually processed: (\d+)/;
			diag("round $round $k $call: pgbench says:\n$out") unless defined $lat && ($done // 0) == $t;
			# per call; a drain per task drained
			my $per = $t;
			if ($call eq 'dr')
			{
				$per = $co->safe_psql('postgres',
					q{SELECT count(*) FROM ntask.task WHERE queue = 'b' AND state = 'succeeded'}) - $before;
				$per = 1 if $per < 1;
			}
			my $cco = ($cpu1{$co} - $cpu0{$co}) / $per * 1000;
			my $cw = ($cpu1{$w} - $cpu0{$w}) / $per * 1000;
			my $l = ($lat // 0) * $t / $per;
			push @{ $res{$call}{$k}{lat} }, $l;
			push @{ $res{$call}{$k}{co} }, $cco;
			push @{ $res{$call}{$k}{w} }, $cw;
			diag(sprintf("round %d %s %-3s: %.3f ms per %s, CPU coordinator %.3f ms, worker %.3f ms, load %s  [%s]",
				$round, $k, $call, $l, $call eq 'dr' ? "task ($per drained)" : 'call', $cco, $cw, $la, $what));
		}
	}
}
for my $call (@calls)
{
	diag(sprintf("summary %s, means of %d rounds of %d calls, one client:", $call, $ROUNDS, $N));
	my $rco = mean(@{ $res{$call}{r}{co} });
	for my $s (@sys)
	{
		my $k = $s->[0];
		my $cco = mean(@{ $res{$call}{$k}{co} });
		diag(sprintf("  %s %.3f ms, CPU coordinator %.3f ms (%.2fx r), worker %.3f ms  [%s]",
			$k, mean(@{ $res{$call}{$k}{lat} }), $cco, $rco > 0 ? $cco / $rco : 0,
			mean(@{ $res{$call}{$k}{w} }), $s->[1]));
	}
}
ok(1, 'bench ran');
NtaskCitus::stop($c);
done_testing();
