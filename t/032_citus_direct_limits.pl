
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/032_citus_direct_limits.pl: claims of a queue with a rate limit or a
# retry share on the direct shard path (issue 49; docs/scaling.md
# "Batches and flow control on the direct path"), opt-in with
# NTASK_CITUS=1 like t/028.
#
# A rate limit's bucket and a retry share's counts live in the shared
# memory of the node that runs the claim (src/limit.c), which on the
# direct path is the node that holds the shard, as on the routed path
# (claim_dist_policy refuses a limited claim elsewhere): the claim needs
# nothing from another node or a reference-table write, so it runs
# directly (claim_direct_fits).  The observable is t/028's: the DEBUG1
# path line of each call in the worker nodes' logs.
#
# Part 1: the same calls on both paths (ntask.citus_direct off, then on,
# each with queues of its own so that the buckets start full): a rate of
# 3 per hour (the node's share: 3 per 2 hours, 2 of the 4 shard values
# being on it) hands out 3 and then nothing, through ntask_claim_on, the
# worker node's walk, a claim delegated from the coordinator (the worker
# node's bucket) and ntask_transition_and_claim; a retry share of 0.5
# alternates first attempts and retries while first attempts are due,
# then the retries go.  Same answers and rows; with the setting on every
# call direct.
#
# Part 2: the limit honoured on the direct path over time: a rate of 4
# per second (2 per second on the node) gives in a window of T seconds at
# most 2 (T + 1) + 4; a retry share of 0.25 over a backlog of retries and
# first attempts gives, at every point, at most its share of the
# hand-outs to retries.
#
# Part 3: move races, both transfer modes (as t/028 Part 2), a claim of 2
# of a queue whose bucket holds 1: (a) the claim holds its group's
# metadata lock, the move waits, one task leased and on the new
# placement; (b) block_writes, the move stopped after its copy: the claim
# waits for it, finds the placement gone and runs routed, where the rule
# of the routed claim holds (0A000: a limited claim must run on the node
# of the shard), nothing written; (c) force_logical: the claim runs
# directly during the catch-up, its lease carried over.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(connect_to wait_for paths race_move));

my $c = NtaskCitus::setup('limits', moves => 1, orphans => 1);
my $co = $c->{coord};
my @workers = @{ $c->{workers} };
for my $w (@workers)
{
	$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
}
my $q = $c->{q};

my $shard = $q->("SELECT min(shard) FROM ntask.shard_map");
my (undef, $w) = NtaskCitus::placement($c, $shard);

# n tasks of $queue in shard $sh, enqueued through the coordinator in one
# statement (keys k<i> of that shard, never used before); their ids in
# enqueue order
my $kn = 0;
sub enq
{
	my ($queue, $sh, $n) = @_;
	my @ids = split /\n/, $q->(qq{WITH ks AS MATERIALIZED (
		SELECT 'k' || i AS k, i FROM generate_series(@{[$kn + 1]}, @{[$kn + 100 * $n + 100]}) i
		WHERE ntask_shard('$queue', 'k' || i) = $sh ORDER BY i LIMIT $n)
		SELECT e.task_id FROM ks, LATERAL ntask_enqueue('$queue', ks.k, '{}') e ORDER BY ks.i});
	$kn += 100 * $n + 100;
	die "enq: " . scalar(@ids) . " of $n" unless @ids == $n;
	return @ids;
}

# the path lines of one statement, shard numbers dropped, repeats merged
sub path_summary
{
	my @p = map { s/shard \d+/shard/r } @_;
	my @u;
	for (@p) { push @u, $_ unless @u && $u[-1] eq $_ }
	return join(',', @u);
}

sub set_direct
{
	my ($setting) = @_;
	$w->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = $setting; SELECT pg_reload_conf()");
	wait_for('the setting', sub { $w->safe_psql('postgres', 'SHOW ntask.citus_direct') eq $setting });
}

# ---------------------------------------------------------------------
# Part 1: the same calls on both paths
# ---------------------------------------------------------------------

sub scenario
{
	my ($setting) = @_;
	set_direct($setting);
	my ($rl, $rs) = ("rl_$setting", "rs_$setting");
	$q->("SELECT count(*) FROM ntask_queue_set('$rl', lease => '10 minutes', rate_limit => '3/1 hour')");
	$q->("SELECT count(*) FROM ntask_queue_set('$rs', lease => '10 minutes')");
	my (@out, @paths);
	my %name;
	# task ids (a line's or a row's first field) by name
	my $names = sub { my $t = shift; $t =~ s/(^|;)(\d+)(?=\||;|$)/$1 . ($name{$2} \/\/ $2)/mge; return $t; };
	# one statement on $w (psql, or the DBI session $s), its answer and path
	my $s = connect_to($w);
	my $run = sub {
		my ($sql, $dbi, $node) = @_;
		my $off = -s $w->logfile;
		my $got;
		if ($dbi)
		{
			$got = join("\n", map { join('|', map { $_ // '' } @$_) } @{ $s->selectall_arrayref($sql) });
		}
		else
		{
			my ($rc, $stdout, $stderr) = ($node // $w)->psql('postgres', $sql);
			$got = $rc == 0 ? $stdout : (($stderr =~ /(ERROR: .*)/)[0] // $stderr);
		}
		push @out, $names->(join("\n", sort split /\n/, $got));
		push @paths, path_summary(paths($w, $off));
		return $got;
	};

	# the rate: 6 due tasks, a bucket of 3
	my @r = enq($rl, $shard, 6);
	$name{ $r[$_] } = 'r' . ($_ + 1) for 0 .. $#r;
	my ($i1, $t1) = split /\|/, $run->("SELECT task_id, token FROM ntask_claim_on(${shard}::smallint, '$rl', 'w1', 1)", 1);
	$out[-1] =~ s/\|\d+$/|tok/;
	# the loop of a worker: finish the task held, claim the next (the
	# backend's latest claim found the queue fit for the direct path)
	my ($i2, $t2) = split /\|/, $run->("SELECT task_id, token, finish_result FROM ntask_transition_and_claim($i1, $t1, 'succeeded', '$rl', 'w1', 1)", 1);
	$out[-1] =~ s/^(\w+)\|\d+\|/$1|tok|/;
	$run->("SELECT task_id FROM ntask_claim_on(${shard}::smallint, '$rl', 'w2', 2)");
	# the bucket is empty: the walk of the worker's shards, the _on form
	$run->("SELECT task_id FROM ntask_claim('$rl', 'w3', 2)");
	$run->("SELECT task_id FROM ntask_claim_on(${shard}::smallint, '$rl', 'w3', 2)");
	# delegated from the coordinator: the worker node's bucket, empty
	$run->("SELECT task_id FROM ntask_claim_on(${shard}::smallint, '$rl', 'w4', 2)", 0, $co);
	# finishes, claims nothing
	$run->("SELECT coalesce(task_id::text, 'none'), finish_result FROM ntask_transition_and_claim($i2, $t2, 'succeeded', '$rl', 'w1', 1)", 1);
	$s->disconnect;

	# the retries' share: three retries, due before three first attempts
	my @rt = enq($rs, $shard, 3);
	$name{ $rt[$_] } = 'R' . ($_ + 1) for 0 .. $#rt;
	my %tok = map { split /\|/ } split /\n/,
	  $w->safe_psql('postgres', "SELECT task_id, token FROM ntask_claim_on(${shard}::smallint, '$rs', 'w', 3)");
	for my $id (@rt)
	{
		$w->safe_psql('postgres', "SELECT result FROM ntask_transition($id, $tok{$id}, 'retry_wait', error_class => 'transient', retry_at => now())");
	}
	$q->("SELECT count(*) FROM ntask_queue_set('$rs', retry_share => 0.5)");
	my @f = enq($rs, $shard, 3);
	$name{ $f[$_] } = 'F' . ($_ + 1) for 0 .. $#f;
	for (1 .. 7)
	{
		$run->("SELECT task_id, attempt FROM ntask_claim_on(${shard}::smallint, '$rs', 'w', 1)");
	}

	my $ids = join(', ', @r, @rt, @f);
	push @out, $names->($q->("SELECT string_agg(concat_ws('|', task_id, state, attempts, lease_owner), ';' ORDER BY task_id) FROM ntask.task WHERE task_id IN ($ids)"));
	push @out, $names->($q->("SELECT string_agg(concat_ws('|', task_id, attempt, result, worker), ';' ORDER BY task_id, token) FROM ntask.attempt_all WHERE task_id IN ($ids)"));
	return (join("\n", @out), \@paths);
}

{
	my ($routed, $rp) = scenario('off');
	my ($direct, $dp) = scenario('on');
	is($direct, $routed, 'rate and share: the direct and the routed path give the same answers and rows');
	note("answers:\n$direct");
	like($direct, qr/^r1\|tok\nr2\|tok\|applied\nr3\n\n\n\nnone\|applied\n/,
		'rate 3 per hour: 1, then 1 with a transition, then 1, then none (the walk, the _on form, delegated, the loop)');
	like($direct, qr/\nnone\|applied\nF1\|1\nR1\|2\nF2\|1\nR2\|2\nF3\|1\nR3\|2\n\n/,
		'retry share 0.5: first attempts and retries alternate while first attempts are due');
	my @want = ('direct path for shard') x 14;
	is(join("\n", @$dp), join("\n", @want), 'with ntask.citus_direct on every claim took the direct path')
	  or diag(join("\n", @$dp));
	is(join("\n", @$rp), join("\n", map { 'routed path for shard: ntask.citus_direct is off' } @want),
		'with it off every claim ran routed');
}

# ---------------------------------------------------------------------
# Part 2: the limits honoured on the direct path
# ---------------------------------------------------------------------

set_direct('on');
{
	# 4 per second on a queue of 4 shard values: the node of 2 of them
	# runs its bucket at 2 per second, 4 at most at once (docs/scaling.md
	# "Rate limits across nodes")
	$q->(q{SELECT count(*) FROM ntask_queue_set('rt', rate_limit => '4/1 second', lease => '60 seconds')});
	my @local = split /\n/, $q->(qq{SELECT m.shard FROM ntask.shard_map m
		WHERE (SELECT nodeport FROM pg_dist_shard_placement
		       WHERE shardid = get_shard_id_for_distribution_column('ntask.task', m.shard)) = @{[$w->port]}
		ORDER BY 1});
	is(scalar(@local), 2, 'the worker node holds 2 of the 4 shard values');
	enq('rt', $_, 30) for @local;
	my $s = connect_to($w);
	my $off = -s $w->logfile;
	my $t0 = time;
	my @got;
	for (1 .. 12)
	{
		push @got, map { $_->[0] } @{ $s->selectall_arrayref("SELECT task_id FROM ntask_claim('rt', 'R', 20)") };
		sleep(0.25);
	}
	my $took = time - $t0;
	$s->disconnect;
	my @p = paths($w, $off);
	note(scalar(@got) . " claimed in $took s");
	cmp_ok(scalar(@got), '>=', 4, 'rate 2/s on the node: the burst at least');
	cmp_ok(scalar(@got), '<=', 2 * ($took + 1) + 4, 'rate 2/s on the node: at most 2 per second and one burst');
	is(scalar(grep { /^routed/ } @p), 0, 'the rate-limited walks ran directly') or diag(join("\n", @p));
	cmp_ok(scalar(grep { /^direct path for shard/ } @p), '>=', 12, 'each claim entered its shards directly');
	is($q->("SELECT count(*) FROM ntask.task WHERE queue = 'rt' AND state = 'leased'"), scalar(@got),
		'each task handed out is leased once');
}

{
	# a retry share of 0.25: 8 retries due before 16 first attempts,
	# claimed 3 at a time; at every claim retries have had at most a
	# quarter of the hand-outs (plus the one that may round up)
	$q->(q{SELECT count(*) FROM ntask_queue_set('rsh', lease => '10 minutes')});
	my @rt = enq('rsh', $shard, 8);
	my %tok = map { split /\|/ } split /\n/,
	  $w->safe_psql('postgres', "SELECT task_id, token FROM ntask_claim_on(${shard}::smallint, 'rsh', 'w', 8)");
	is(scalar(keys %tok), 8, 'share: 8 first attempts claimed');
	$w->safe_psql('postgres', "SELECT result FROM ntask_transition($_, $tok{$_}, 'retry_wait', error_class => 'transient', retry_at => now())") for @rt;
	$q->(q{SELECT count(*) FROM ntask_queue_set('rsh', retry_share => 0.25)});
	enq('rsh', $shard, 16);
	my $s = connect_to($w);
	my $off = -s $w->logfile;
	my ($fresh, $retry, $bad, @seq) = (0, 0, 0);
	for (1 .. 12)
	{
		my $rows = $s->selectall_arrayref("SELECT attempt FROM ntask_claim_on(${shard}::smallint, 'rsh', 'w', 3)");
		last unless @$rows;
		for (@$rows) { $_->[0] > 1 ? $retry++ : $fresh++ }
		push @seq, join('', map { $_->[0] > 1 ? 'R' : 'F' } @$rows);
		# while first attempts are due
		$bad++ if $fresh < 16 && $retry > 0.25 * ($fresh + $retry) + 1;
	}
	$s->disconnect;
	note("share 0.25, claims of 3: @seq");
	is($fresh, 16, 'share: every first attempt went');
	is($retry, 8, 'share: the retries went once no first attempt was due');
	is($bad, 0, 'share: while first attempts were due, retries had at most a quarter');
	like(join('', @seq), qr/^[F]{3}/, 'share: the first claim gave first attempts only');
	my @p = paths($w, $off);
	is(scalar(grep { /^routed/ } @p), 0, 'share: every claim ran directly') or diag(join("\n", @p));
}

# ---------------------------------------------------------------------
# Part 3: move races
# ---------------------------------------------------------------------

my $race = 0;
sub move_race
{
	my ($mode, $kind) = @_;
	my $tag = "$mode/$kind";
	NtaskCitus::drop_orphans($c);
	$race++;
	my $dm = "dm$race";
	$q->("SELECT count(*) FROM ntask_queue_set('$dm', lease => '10 minutes', rate_limit => '1/1 hour')");
	my @ids = enq($dm, $shard, 2);
	my ($shardid, $src, $dst) = NtaskCitus::placement($c, $shard);
	my $call_sql = "SELECT task_id, token FROM ntask_claim_on(${shard}::smallint, '$dm', 'mv', 2)";
	# the claim takes its metadata lock, then waits for the shard relation
	# (its pick skips locked rows)
	my ($rows, $err, $move_waited, $off) = race_move($c, src => $src, dst => $dst,
		shardid => $shardid, mode => $mode, kind => $kind, tag => $tag,
		call => $call_sql, like => '%ntask\_claim\_on(%');
	my @p = paths($src, $off);

	is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port, "$tag: the shard moved");
	ok($move_waited, "$tag: the move waited for the claim") if $kind eq 'call_first';
	my $ids = join(', ', @ids);
	if ($kind eq 'move_first' && $mode eq 'block_writes')
	{
		is($p[-1], "routed path for shard $shard: the shard's placement is not on this node", "$tag: the claim's path")
		  or diag(join("\n", @p));
		like($err, qr/has a rate limit or a retry share, and on a distributed install its claims must run on the node that holds the shard/,
			"$tag: routed, the claim is refused as any limited claim off the shard's node");
		is($q->("SELECT string_agg(state || ',' || token, ';') FROM ntask.task WHERE task_id IN ($ids)"), 'ready,0;ready,0',
			"$tag: nothing written on the new placement");
		is($src->safe_psql('postgres', "SELECT string_agg(state || ',' || token, ';') FROM ntask.task_$shardid WHERE task_id IN ($ids)"),
			'ready,0;ready,0', "$tag: nor into the orphan");
		# the shard's new node hands out its bucket's one token directly
		my $o2 = -s $dst->logfile;
		is(scalar(split /\n/, $dst->safe_psql('postgres', "SELECT task_id FROM ntask_claim_on(${shard}::smallint, '$dm', 'mv', 2)")), 1,
			"$tag: the new node claims one (its bucket of 1)");
		is(join(',', paths($dst, $o2)), "direct path for shard $shard", "$tag: directly");
	}
	else
	{
		is($p[-1], "direct path for shard $shard", "$tag: the claim's path") or diag(join("\n", @p));
		is($err, '', "$tag: no error");
		is(scalar(@$rows), 1, "$tag: one task handed out (a bucket of 1)");
		my ($cid, $ctok) = @{ $rows->[0] // [ 0, 0 ] };
		is($q->("SELECT state || ',' || token || ',' || lease_owner FROM ntask.task WHERE task_id = $cid"),
			"leased,$ctok,mv", "$tag: the new placement has the lease and its token");
		is($q->("SELECT count(*) FROM ntask.task WHERE task_id IN ($ids) AND state = 'ready'"), '1',
			"$tag: the other task is still due there");
		is($q->("SELECT result FROM ntask_transition($cid, $ctok, 'succeeded')"), 'applied', "$tag: the holder then finishes");
	}
	return;
}

for my $mode ('block_writes', 'force_logical')
{
	move_race($mode, 'call_first');
	move_race($mode, 'move_first');
}

NtaskCitus::stop($c);
done_testing();
