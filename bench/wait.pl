#!/usr/bin/perl
# bench/wait.pl: the driver of bench/wait (see there).  Arguments: the
# modes to run in order (wait, poll).
use strict;
use warnings;
use DBI;
use POSIX qw(:sys_wait_h floor);
use Time::HiRes qw(time sleep);
use File::Temp qw(tempdir);

my $dsn = $ENV{BENCH_DSN} or die "BENCH_DSN not set\n";
my $nworkers = $ENV{BENCH_WAIT_WORKERS} // 50;
my $idle = $ENV{BENCH_WAIT_IDLE} // 10;
my $ntasks = $ENV{BENCH_WAIT_TASKS} // 200;
my $gap = ($ENV{BENCH_WAIT_GAP_MS} // 50) / 1000;
my $tmp = tempdir(CLEANUP => 1);
my $tick = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;

sub connect_db
{
	my ($app) = @_;
	my $dbh = DBI->connect($dsn, 'postgres', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0, pg_server_prepare => 1,
		  AutoInactiveDestroy => 1 });
	$dbh->do("SET application_name = '$app'");
	return $dbh;
}

# one worker: claims until it finds the stop file; logs "call <t>" for each
# statement it sends and "got <latency>" for each task
sub worker
{
	my ($mode, $n, $run) = @_;
	my $dbh = connect_db("bench_w$n");
	my $claim = $mode eq 'wait'
	  ? $dbh->prepare(q{SELECT task_id, token, (payload->>'t')::float8
		FROM ntask_claim('wq', ?, 1, wait => '30 seconds')})
	  : $dbh->prepare(q{SELECT task_id, token, (payload->>'t')::float8
		FROM ntask_claim('wq', ?, 1)});
	my $done = $dbh->prepare(q{SELECT result FROM ntask_transition(?, ?, 'succeeded')});
	open my $log, '>', "$tmp/$run.$n" or die $!;
	my $stop = "$tmp/$run.stop";
	while (!-e $stop)
	{
		printf $log "call %.6f\n", time;
		$log->flush;
		# the run's end cancels a waiting claim: not an error
		last if !eval { $claim->execute("w$n"); 1 } && -e $stop;
		my $rows = $claim->fetchall_arrayref;
		if (@$rows)
		{
			my ($id, $token, $t) = @{ $rows->[0] };
			printf $log "got %.6f\n", time - $t;
			$done->execute($id, $token);
			$done->fetchall_arrayref;
		}
		elsif ($mode eq 'poll')
		{
			sleep 0.1;
		}
	}
	close $log;
	exit 0;
}

sub backend_cpu
{
	my ($pids) = @_;
	my $sum = 0;
	for my $pid (@$pids)
	{
		open my $f, '<', "/proc/$pid/stat" or next;
		my $s = <$f>;
		close $f;
		$s =~ s/^.*\) //;
		my @f = split / /, $s;
		$sum += $f[11] + $f[12];	# utime, stime (fields 14, 15)
	}
	return $sum / $tick;
}

sub pct
{
	my ($p, @v) = @_;
	return 0 unless @v;
	@v = sort { $a <=> $b } @v;
	my $i = floor($p / 100 * (@v - 1) + 0.5);
	return $v[$i];
}

my $admin = connect_db('bench_admin');
my %summary;
my $run = 0;
for my $mode (@ARGV)
{
	$run++;
	$admin->do(q{DELETE FROM ntask.attempt});
	$admin->do(q{DELETE FROM ntask.task});
	my @kids;
	for my $n (1 .. $nworkers)
	{
		my $pid = fork // die "fork: $!";
		if ($pid == 0) { worker($mode, $n, $run); }
		push @kids, $pid;
	}
	# every worker connected (and, for wait, asleep in its claim)
	my $deadline = time + 60;
	while (time < $deadline)
	{
		my ($c) = $admin->selectrow_array(q{SELECT count(*) FROM pg_stat_activity
			WHERE application_name LIKE 'bench_w%'});
		last if $c == $nworkers;
		sleep 0.1;
	}
	sleep 1;
	my $pids = $admin->selectcol_arrayref(q{SELECT pid FROM pg_stat_activity
		WHERE application_name LIKE 'bench_w%'});

	# idle phase
	my $cpu0 = backend_cpu($pids);
	my $i0 = time;
	sleep $idle;
	my $i1 = time;
	my $cpu1 = backend_cpu($pids);

	# load phase
	my $prod = connect_db('bench_producer');
	$prod->{AutoCommit} = 0;
	my $enq = $prod->prepare(q{SELECT task_id FROM ntask_enqueue('wq', ?, ?)});
	for my $k (1 .. $ntasks)
	{
		$enq->execute("r$run:$k", sprintf('{"t": %.6f}', time));
		$enq->fetchall_arrayref;
		$prod->commit;
		sleep $gap;
	}
	$deadline = time + 60;
	while (time < $deadline)
	{
		my ($left) = $admin->selectrow_array(q{SELECT count(*) FROM ntask.task
			WHERE state <> 'succeeded'});
		last if $left == 0;
		sleep 0.1;
	}
	$prod->disconnect;
	open my $stop, '>', "$tmp/$run.stop" or die $!;
	close $stop;
	# wake the waiting claims so that they see the stop file
	$admin->do(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
		WHERE application_name LIKE 'bench_w%'}) if $mode eq 'wait';
	waitpid($_, 0) for @kids;

	my ($calls, @lat) = (0);
	for my $n (1 .. $nworkers)
	{
		open my $f, '<', "$tmp/$run.$n" or next;
		while (<$f>)
		{
			$calls++ if /^call (\S+)/ && $1 >= $i0 && $1 < $i1;
			push @lat, $1 * 1000 if /^got (\S+)/;
		}
		close $f;
	}
	my $rate = $calls / ($i1 - $i0);
	my $cpu = 100 * ($cpu1 - $cpu0) / ($i1 - $i0);
	my @r = ($rate, $cpu, pct(50, @lat), pct(99, @lat), pct(100, @lat), scalar @lat);
	printf "run %d %-4s idle: %7.1f statements/s, backends %5.1f%% CPU; load: %d tasks, latency p50 %6.2f ms, p99 %6.2f ms, max %6.2f ms\n",
	  $run, $mode, $r[0], $r[1], $r[5], $r[2], $r[3], $r[4];
	push @{ $summary{$mode} }, \@r;
}

print "\nsummary (mean over runs), $nworkers workers, idle ${idle} s, $ntasks tasks ${\ ($gap * 1000)} ms apart\n";
for my $mode (grep { $summary{$_} } qw(wait poll))
{
	my @runs = @{ $summary{$mode} };
	my @m = map { my $i = $_; my $s = 0; $s += $_->[$i] for @runs; $s / @runs } 0 .. 4;
	printf "%-4s idle %7.1f statements/s, %5.1f%% CPU; latency p50 %6.2f ms, p99 %6.2f ms, max %6.2f ms\n", $mode, @m;
}
