#!/usr/bin/perl
# bench/citus_interlock.pl: the Citus 12.1.6 behaviour the direct shard
# path's move interlock relies on (docs/scaling.md "The direct shard
# path", "The move interlock"), checked on the engine without ntask's
# direct path: a coordinator and two workers on loopback, a task shard on
# w1; D (a direct call) holds lock_shard_metadata(5, ...) on w1 for 4 s;
# a block_writes move of the shard to w2 starts and waits for it; A (a
# later direct call on w1) asks for the same ShareLock during the move,
# gets it only after the move committed, and its next statement reads the
# placement on w2's group; the orphan stays on w1.  Timed with sleeps, so
# a check to run by hand (about 40 s), not a CI test.  As postgres, from
# the repository (as bench/citus_direct.pl):
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; mkdir -p /tmp/ci/tmp_check/log; \
#   PATH=$(pg_config --bindir):$PATH PG_REGRESS=$L/regress/pg_regress \
#   TESTDIR=/tmp/ci prove -v -I $L/perl bench/citus_interlock.pl
use strict; use warnings;
use FindBin;
use lib "$FindBin::Bin/../t";
use PostgreSQL::Test::Cluster; use PostgreSQL::Test::Utils; use Test::More; use NtaskCitus;
use Time::HiRes qw(time sleep);
my $c = NtaskCitus::start('il', workers => 2, conf => "ntask.worker = off\ncitus.defer_shard_delete_interval = -1\n");
my $co = $c->{coord}; my ($w1, $w2) = @{ $c->{workers} };
$co->safe_psql('postgres', q{CREATE EXTENSION ntask; SELECT count(*) FROM ntask_distribute(4); SELECT count(*) FROM ntask_queue_set('b');});
# a shard of task on w1
my ($sid, $s) = split /\|/, $co->safe_psql('postgres', qq{
  SELECT p.shardid, m.shard FROM ntask.shard_map m
  JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', m.shard)
  WHERE p.groupid = (SELECT groupid FROM pg_dist_node WHERE nodeport = @{[$w1->port]}) ORDER BY 1 LIMIT 1});
diag("task shard $sid (shard value $s) on w1; groups: w1 " . $w1->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group') . ", w2 " . $w2->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group'));
my $t0 = time;
sub bg { my ($node, $sql, $out) = @_;
  my $cmd = "psql -X -At -h " . $node->host . " -p " . $node->port . " -d postgres -c \"$sql\" > $out 2>&1 &";
  system($cmd); }
my $d = PostgreSQL::Test::Utils::tempdir;
# D: a direct call's ShareLock, held 4 s
bg($w1, "BEGIN; SELECT lock_shard_metadata(5, ARRAY[$sid]::bigint[]); SELECT pg_sleep(4); SELECT 'D commits at ' || extract(epoch from clock_timestamp()); COMMIT;", "$d/D");
sleep 1;
# the move (block_writes): its ExclusiveLock on w1 waits for D
bg($co, "SELECT 'move starts ' || extract(epoch from clock_timestamp()); SELECT citus_move_shard_placement($sid, '127.0.0.1', @{[$w1->port]}, '127.0.0.1', @{[$w2->port]}, shard_transfer_mode => 'block_writes'); SELECT 'move done ' || extract(epoch from clock_timestamp());", "$d/M");
sleep 1.5;
# A: a later direct call on w1: lock, then (next statement) the check
bg($w1, "BEGIN; SELECT 'A asks ' || extract(epoch from clock_timestamp()); SELECT lock_shard_metadata(5, ARRAY[$sid]::bigint[]); SELECT 'A locked ' || extract(epoch from clock_timestamp()); SELECT 'A reads placement group ' || coalesce((SELECT groupid::text FROM pg_dist_placement WHERE shardid = $sid), 'none') || ', local group ' || (SELECT groupid FROM pg_dist_local_group); COMMIT;", "$d/A");
# wait for A and the move to end (bounded)
for (1 .. 600)
{
	my $done = 0;
	for my $f ("$d/A", "$d/M")
	{
		open my $h, '<', $f or next;
		local $/;
		my $x = <$h> // '';
		$done++ if $x =~ /COMMIT|move done|ERROR/;
	}
	last if $done == 2;
	sleep 0.2;
}
my %o;
for my $f (qw(D M A)) { open my $h, '<', "$d/$f"; local $/; $o{$f} = <$h>; diag("$f:\n$o{$f}"); }
my ($dc) = $o{D} =~ /D commits at ([\d.]+)/;
my ($ms) = $o{M} =~ /move starts ([\d.]+)/;
my ($md) = $o{M} =~ /move done ([\d.]+)/;
my ($aa) = $o{A} =~ /A asks ([\d.]+)/;
my ($al) = $o{A} =~ /A locked ([\d.]+)/;
my ($ag, $lg) = $o{A} =~ /A reads placement group (\d+), local group (\d+)/;
ok(defined $dc && defined $md && defined $al && defined $ag, 'every session ran (else the sleeps were too short for this load)');
ok($ms < $dc && $md > $dc, 'the move started while D held its ShareLock and ended after D committed');
ok($aa < $md && $al >= $md, 'A asked for the lock during the move and got it after the move committed');
ok($ag != $lg, 'the statement after the lock sees the new placement: the check fails, the call would run routed');
is($w1->safe_psql('postgres', "SELECT to_regclass('ntask.task_$sid') IS NOT NULL"), 't',
	'the orphan task shard stays on w1, a valid table, until deferred cleanup');
diag("w1 pg_dist_placement of $sid: " . $w1->safe_psql('postgres', "SELECT groupid FROM pg_dist_placement WHERE shardid = $sid"));
NtaskCitus::stop($c);
done_testing();
