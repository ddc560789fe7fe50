
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/018_patroni.pl: ntask under Patroni (opt-in: NTASK_PATRONI=1; needs the
# Debian packages etcd-server and patroni).
#
# One etcd member and three PostgreSQL 15 nodes under Patroni on loopback
# ports (synchronous_mode, primary_start_timeout 0: a crashed leader is
# failed over at once, not restarted in place), ntask and pg_cron
# preloaded.  Clients (the chaos suite's external worker, test/chaos/
# worker.pl, with receipts; this driver) connect with libpq multi-host
# target_session_attrs=read-write.  Under a steady load (enqueues into an
# SQL queue worked by 4 external workers and an http queue dispatched by
# the background worker to t/provider.py, and a pg_cron schedule every
# minute):
#
#   1. SIGKILL of the leader's postmaster
#   2. patronictl switchover to a standby
#
# then the invariants of the chaos suite: every committed enqueue
# survives, tokens grow per task across the failovers (ledger and worker
# logs), exactly one business row per task, each http key had one effect
# at the provider, the background worker runs only on the leader (sampled
# on every node throughout), one task per pg_cron slot and a slot fired on
# the final leader; and the time from the kill (the switchover) to the
# first successful claim on the new leader.  One summary line.

use strict;
use warnings;

use DBI;
use FindBin;
use File::Path qw(make_path);
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

if (!$ENV{NTASK_PATRONI})
{
	plan skip_all => 'Patroni failover test skipped (set NTASK_PATRONI=1; needs etcd-server and patroni)';
}
for my $bin (qw(etcd patroni patronictl))
{
	plan skip_all => "$bin not installed (apt-get install etcd-server patroni)"
	  unless grep { -x "$_/$bin" } split /:/, $ENV{PATH};
}

use lib $FindBin::Bin;
use NtaskProvider;

my $json = JSON::PP->new->canonical;
my $pport = NtaskProvider::start('018');
my $bindir = `pg_config --bindir`;
chomp $bindir;
my $base = "$PostgreSQL::Test::Utils::tmp_check/patroni";
make_path($base);
my $rundir = "$base/run";
make_path($rundir);
my @pids;    # etcd and patroni processes, stopped in END

sub spawn
{
	my ($log, @cmd) = @_;
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		open STDOUT, '>>', $log or die;
		open STDERR, '>&', \*STDOUT or die;
		exec @cmd or die "exec $cmd[0]: $!";
	}
	push @pids, $pid;
	return $pid;
}

END
{
	# patroni stops its PostgreSQL on TERM; etcd last
	kill 'TERM', @pids[ 1 .. $#pids ] if @pids > 1;
	my $until = time + 30;
	sleep 0.2 while time < $until && grep { kill 0, $_ } @pids[ 1 .. $#pids ];
	kill 'KILL', grep { kill 0, $_ } @pids[ 1 .. $#pids ];
	kill 'TERM', $pids[0] if @pids;
	waitpid($_, 0) for @pids;
}

# ---------------------------------------------------------------------
# etcd and three Patroni nodes
# ---------------------------------------------------------------------

my $ec = PostgreSQL::Test::Cluster::get_free_port();
my $ep = PostgreSQL::Test::Cluster::get_free_port();
spawn("$base/etcd.log", 'etcd', '--name', 'e1', '--data-dir', "$base/etcd",
	'--listen-client-urls', "http://127.0.0.1:$ec",
	'--advertise-client-urls', "http://127.0.0.1:$ec",
	'--listen-peer-urls', "http://127.0.0.1:$ep",
	'--initial-advertise-peer-urls', "http://127.0.0.1:$ep",
	'--initial-cluster', "e1=http://127.0.0.1:$ep");

my (%pgport, %rest);
for my $n (qw(n1 n2 n3))
{
	$pgport{$n} = PostgreSQL::Test::Cluster::get_free_port();
	$rest{$n} = PostgreSQL::Test::Cluster::get_free_port();
	open my $fh, '>', "$base/$n.yml" or die;
	print $fh <<"EOY";
scope: ntask
name: $n
restapi:
  listen: 127.0.0.1:$rest{$n}
  connect_address: 127.0.0.1:$rest{$n}
etcd3:
  hosts: 127.0.0.1:$ec
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    primary_start_timeout: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        max_worker_processes: 20
        max_connections: 60
        shared_preload_libraries: 'pg_cron,ntask'
        cron.database_name: postgres
        cron.use_background_workers: 'on'
        ntask.naptime: 100ms
        ntask.http_allowed_hosts: 127.0.0.1
        ntask.http_connect_timeout_ms: 500
        ntask.backoff_jitter: 'off'
  initdb:
  - encoding: UTF8
  - data-checksums
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$pgport{$n}
  connect_address: 127.0.0.1:$pgport{$n}
  data_dir: $base/$n
  bin_dir: $bindir
  pgpass: $base/$n.pgpass
  authentication:
    replication:
      username: postgres
    superuser:
      username: postgres
  parameters:
    unix_socket_directories: '$base'
EOY
	close $fh;
}
sleep 1;
spawn("$base/$_.log", 'patroni', "$base/$_.yml") for qw(n1 n2 n3);

# patronictl list as [{Member, Role, State, ...}]
sub members
{
	my $out = `patronictl -c $base/n1.yml list -f json 2>/dev/null`;
	my $m = eval { $json->decode($out) } || [];
	return @$m;
}

sub wait_cluster
{
	my ($what, $seconds, $not) = @_;
	my $leader;
	my $ok = wait_for($what, $seconds, sub {
		my @m = members();
		my ($l) = grep { $_->{Role} eq 'Leader' && $_->{State} eq 'running' } @m;
		my @s = grep { $_->{Role} eq 'Sync Standby' && $_->{State} =~ /running|streaming/ } @m;
		return 0 unless $l && @s && (!$not || $l->{Member} ne $not);
		$leader = $l->{Member};
		return 1;
	});
	return $ok ? $leader : undef;
}

my $leader = wait_cluster('a leader and a sync standby', 120);
ok($leader, "patroni: leader $leader with a synchronous standby") or BAIL_OUT('no patroni cluster');

my $ports = join(',', map { $pgport{$_} } qw(n1 n2 n3));
my $multi = "dbname=postgres;host=127.0.0.1,127.0.0.1,127.0.0.1;port=$ports;"
  . "target_session_attrs=read-write;connect_timeout=2";

# ---------------------------------------------------------------------
# The driver's connection (multi-host, reconnects)
# ---------------------------------------------------------------------

my $dbh;

sub db
{
	return $dbh if $dbh;
	my $until = time + 120;
	while (1)
	{
		$dbh = eval {
			DBI->connect("dbi:Pg:$multi", 'postgres', '',
				{ RaiseError => 1, PrintError => 0, AutoCommit => 1 });
		};
		return $dbh if $dbh;
		die "no read-write node for 120 s: $DBI::errstr\n" if time > $until;
		sleep 0.1;
	}
}

sub drop_db
{
	eval { $dbh->{InactiveDestroy} = 1; $dbh->disconnect } if $dbh;
	undef $dbh;
}

# one statement, retried across connection loss (up to 120 s); SQL errors die
sub q1
{
	my ($sql, @bind) = @_;
	my $until = time + 120;
	while (1)
	{
		my $r = eval {
			my $sth = db()->prepare($sql);
			$sth->execute(@bind);
			$sth->{NUM_OF_FIELDS} ? $sth->fetchall_arrayref : [];
		};
		return $r if $r;
		my $err = $@;
		die $err if $dbh && $dbh->ping && $err !~ /read-only|recovery/;
		drop_db();
		die "gave up: $err" if time > $until;
		sleep 0.1;
	}
}

# a direct connection to one node (no retry): count of ntask workers, in recovery?
sub node_view
{
	my ($n) = @_;
	my $h = eval {
		DBI->connect("dbi:Pg:dbname=postgres;host=127.0.0.1;port=$pgport{$n};connect_timeout=1",
			'postgres', '', { RaiseError => 1, PrintError => 0, AutoCommit => 1 });
	};
	return undef unless $h;
	my $r = eval {
		$h->selectrow_arrayref(q{SELECT pg_is_in_recovery(),
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask worker')});
	};
	$h->disconnect;
	return $r;
}

# sample every node: a worker on a node in recovery, or on two primaries
my ($samples, $bad_samples, @bad) = (0, 0);

sub sample_workers
{
	my @primaries_with_worker;
	my $bad = 0;
	for my $n (qw(n1 n2 n3))
	{
		my $v = node_view($n) or next;
		$bad = 1, push @bad, "$n in recovery runs $v->[1] ntask worker(s)"
		  if $v->[0] && $v->[1] > 0;
		push @primaries_with_worker, $n if !$v->[0] && $v->[1] > 0;
	}
	$bad = 1, push @bad, "workers on " . join(',', @primaries_with_worker)
	  if @primaries_with_worker > 1;
	$samples++;
	$bad_samples += $bad;
}

# ---------------------------------------------------------------------
# Schema, queues, schedule
# ---------------------------------------------------------------------

my $target = $json->encode({ type => 'http', url => "http://127.0.0.1:$pport/send",
	timeout_ms => 800 });
q1($_) for (
	q{CREATE EXTENSION pg_cron},
	q{CREATE EXTENSION ntask},
	q{CREATE TABLE business (
		row_id bigserial PRIMARY KEY, task_id bigint NOT NULL, token bigint NOT NULL,
		worker text NOT NULL, payload jsonb NOT NULL,
		committed_at timestamptz NOT NULL DEFAULT clock_timestamp())},
	q{SELECT count(*) FROM ntask_queue_set('sq', max_attempts => 20, lease => '2 s',
		backoff_base => '50 ms', backoff_max => '1 s')},
	qq{SELECT count(*) FROM ntask_queue_set('hq', max_attempts => 20, lease => '2 s',
		backoff_base => '50 ms', backoff_max => '1 s', target => '$target')},
	q{SELECT count(*) FROM ntask_queue_set('pq', lease => '1 hour')},
	q{SELECT count(*) FROM ntask_queue_set('cq', lease => '1 minute')},
	q{SELECT count(*) FROM ntask_schedule('tick', '* * * * *', 'cq', overlap => 'allow')},
	q{SELECT count(*) FROM generate_series(1, 100) i, ntask_enqueue('pq', 'p-' || i)});

open my $cfh, '>', "$rundir/conn" or die;
print $cfh "$multi\n";
close $cfh;

my $nworkers = 4;
my @wpids;
for my $slot (1 .. $nworkers)
{
	my $pid = fork // die;
	if ($pid == 0)
	{
		exec $^X, "$FindBin::Bin/../test/chaos/worker.pl", $rundir, $slot, 1, 'sq',
		  $slot, 0
		  or die;
	}
	push @wpids, $pid;
}

# ---------------------------------------------------------------------
# Load: batches into sq and hq; each committed key is remembered
# ---------------------------------------------------------------------

my %committed;
my $seq = 0;

sub enqueue_round
{
	my ($q, $n) = @_;
	my @keys = map { "$q-" . ++$seq } 1 .. $n;
	my $ok = eval {
		db()->selectall_arrayref(q{SELECT count(*) FROM unnest(?::text[]) k,
			ntask_enqueue(?, k, jsonb_build_object('k', k))}, undef,
			'{' . join(',', @keys) . '}', $q);
	};
	if ($ok) { $committed{$_} = 1 for @keys; }
	else { drop_db(); }
	return $ok ? 1 : 0;
}

sub load_for
{
	my ($seconds) = @_;
	my $until = time + $seconds;
	while (time < $until)
	{
		enqueue_round('sq', 5);
		enqueue_round('hq', 2);
		sample_workers();
		sleep 0.1;
	}
}

# time from $t0 to the first claim that succeeds on a node other than $old
sub first_claim_after
{
	my ($t0, $old) = @_;
	my $until = $t0 + 120;
	while (time < $until)
	{
		my $r = eval {
			db()->selectrow_arrayref(q{SELECT inet_server_port(),
				(SELECT count(*) FROM ntask_claim('pq', 'driver'))});
		};
		if ($r && $r->[1] == 1 && $r->[0] != $pgport{$old})
		{
			return time - $t0;
		}
		drop_db() unless $r;
		sleep 0.05;
	}
	return undef;
}

load_for(5);

# ---------------------------------------------------------------------
# 1. SIGKILL of the leader's postmaster
# ---------------------------------------------------------------------

my $pmpid = `head -1 $base/$leader/postmaster.pid`;
chomp $pmpid;
my $t_kill = time;
kill 'KILL', $pmpid;
note "SIGKILL to the postmaster of $leader ($pmpid)";
my $kill_s = first_claim_after($t_kill, $leader);
ok(defined $kill_s, 'after the SIGKILL a claim succeeded on another node');
my $leader2 = wait_cluster('a new leader and sync standby', 120, $leader);
ok($leader2, "the new leader is $leader2") or BAIL_OUT('no failover');
load_for(5);

# ---------------------------------------------------------------------
# 2. patronictl switchover
# ---------------------------------------------------------------------

my ($cand) = map { $_->{Member} } grep { $_->{Role} eq 'Sync Standby' } members();
my $t_sw = time;
my $out = `patronictl -c $base/n1.yml switchover --leader $leader2 --candidate $cand --force 2>&1`;
note "switchover: $out";
my $sw_s = first_claim_after($t_sw, $leader2);
ok(defined $sw_s, "after the switchover to $cand a claim succeeded on it");
my $leader3 = wait_cluster('the switchover leader', 120, $leader2);
is($leader3, $cand, "patroni: $cand leads after the switchover");
load_for(5);

# ---------------------------------------------------------------------
# Drain, then the invariants
# ---------------------------------------------------------------------

ok( wait_for('every sq and hq task succeeded', 180, sub {
		my $r = eval { q1(q{SELECT count(*) FROM ntask.task WHERE queue IN ('sq', 'hq')
			AND state <> 'succeeded'}) };
		sample_workers();
		$r && $r->[0][0] == 0;
	}), 'every sq and hq task succeeded');

# a pg_cron slot fired by the final leader (minutely: wait up to 75 s)
my $t_final = q1(q{SELECT now()})->[0][0];
ok( wait_for('a pg_cron slot on the final leader', 75, sub {
		sample_workers();
		q1(qq{SELECT count(*) FROM ntask.schedule_slot WHERE schedule = 'tick'
			AND fired_at > '$t_final'})->[0][0] > 0;
	}), 'pg_cron on the final leader fired the schedule');

open my $sfh, '>', "$rundir/stop" or die;
close $sfh;
waitpid($_, 0) for @wpids;

my %tasks = map { $_->[0] => 1 } @{ q1(q{SELECT task_key FROM ntask.task WHERE queue IN ('sq', 'hq')}) };
my $lost = grep { !$tasks{$_} } keys %committed;
is($lost, 0, 'every committed enqueue survived both failovers (' . scalar(keys %committed) . ' keys)');

my $dup = q1(q{SELECT count(*) FROM (SELECT task_id FROM business GROUP BY task_id HAVING count(*) > 1) d})->[0][0];
my $missing = q1(q{SELECT count(*) FROM ntask.task t WHERE t.queue = 'sq'
	AND NOT EXISTS (SELECT 1 FROM business b WHERE b.task_id = t.task_id)})->[0][0];
is($dup, 0, 'no task has two business rows');
is($missing, 0, 'every sq task has its business row');

my $nonmono = q1(q{SELECT count(*) FROM (SELECT token <= lag(token) OVER w AS back
	FROM ntask.attempt_all WINDOW w AS (PARTITION BY task_id ORDER BY attempt)) x WHERE back})->[0][0];
is($nonmono, 0, 'ledger: tokens grow with the attempt number of every task');

# worker logs: per task, the claimed tokens in time order only grow
my (%last_tok, $log_back, $stale, $claims);
for my $slot (1 .. $nworkers)
{
	open my $lf, '<', "$rundir/$slot.log" or next;
	while (<$lf>)
	{
		my ($t, $name, $ev, $tid, $tok, $info) = split / /, $_, 6;
		next unless defined $tok;
		if ($ev eq 'claim')
		{
			$claims++;
			$log_back++ if defined $last_tok{$tid} && $tok <= $last_tok{$tid};
			$last_tok{$tid} = $tok;
		}
		$stale++ if $ev eq 'receipt' && $info =~ /^stale/;
	}
}
$log_back //= 0;
$stale //= 0;
is($log_back, 0, "worker logs: no claim got a token below an earlier one ($claims claims)");

my $keys = pkeys('hq-');
my $multi_effect = grep { $keys->{$_}{effects} != 1 } keys %$keys;
my $nhq = grep { /^hq-/ } keys %committed;
is(scalar(keys %$keys), $nhq, 'the provider saw every hq key');
is($multi_effect, 0, 'each hq key had exactly one effect at the provider');

my $slot_dup = q1(q{SELECT count(*) FROM (SELECT slot FROM ntask.schedule_slot
	WHERE schedule = 'tick' AND task_id IS NOT NULL GROUP BY slot HAVING count(*) > 1) d})->[0][0];
my $task_dup = q1(q{SELECT count(*) - count(DISTINCT task_key) FROM ntask.task WHERE queue = 'cq'})->[0][0];
is($slot_dup + $task_dup, 0, 'one task per pg_cron slot');

sample_workers();
is($bad_samples, 0, "the background worker ran only on the leader ($samples samples of all nodes)")
  or diag join("\n", @bad);
my $v = node_view($leader3);
is($v && $v->[1], 1, 'the final leader runs one ntask worker');

diag sprintf('ntask patroni: tasks=%d (sq+hq) faults=2 (SIGKILL leader, switchover) lost=%d '
	. 'duplicated=%d stale_rejected=%d token_regressions=%d kill_to_first_claim=%.2fs '
	. 'switchover_to_first_claim=%.2fs worker_samples=%d bad=%d',
	scalar(keys %committed), $lost, $dup, $stale, $log_back + $nonmono, $kill_s // -1,
	$sw_s // -1, $samples, $bad_samples);

done_testing();
