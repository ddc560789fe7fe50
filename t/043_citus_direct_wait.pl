
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/043_citus_direct_wait.pl: the waiting claim on the direct shard path
# (issue 49; docs/scaling.md "The waiting claim on the direct path"),
# opt-in with NTASK_CITUS=1 like t/028.
#
# A coordinator and two workers on loopback (wal_level = logical, for
# force_logical moves; citus.defer_shard_delete_interval = -1, so a move's
# orphan stays).  A worker library claims with a wait; on a worker node
# each look of such a claim now enters its shard group through the move
# interlock in its own subtransaction, which a look that claimed nothing
# rolls back, its lock with it.  The observable is the DEBUG1 line of
# each look ("ntask: direct path for shard N"), read here by the waiting
# backend's pid in the worker node's log.
#
# Part 1: the same answers and rows with ntask.citus_direct off and on:
# a waiting claim woken by a direct enqueue on its node, by one through
# the coordinator (delegated to the node), by a routed one (in a
# transaction block), one with work due at once, the plain claim's
# walk of the node's shards, a takeover of an invoked attempt, the wait's
# end, a cancel; with it on every look of the waiting claims ran directly,
# and a queue with a cap still goes routed after its pick; a login role
# with ntask_worker (a library's) claims directly as well.
# Part 2: while a waiting claim sleeps it holds no lock of its group (no
# advisory lock in pg_locks), and a move of its shard (block_writes, then
# force_logical) completes without waiting for it; the claim, then woken
# by an enqueue on its node, gets the task from the new placement
# (routed), and nothing is written into the orphan.
# Part 3: a look racing a move, both modes, t/028's races: the move waits
# for a look that holds the lock; a look that waited for a block_writes
# move runs routed, the orphan untouched; one during a force_logical
# catch-up runs directly and its lease is carried over.

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
NtaskCitus->import(qw(connect_to wait_for race_move));

# every node logs the direct path's DEBUG1 lines (pid_paths reads the workers')
my $c = NtaskCitus::setup('dwait', moves => 1, orphans => 1, conf => "log_min_messages = debug1\n");
my $co = $c->{coord};
my $q = $c->{q};
my $shard = $q->("SELECT min(shard) FROM ntask.shard_map");

# a key of $queue in shard $sh (ntask_shard), with prefix $p
sub key_in { return NtaskCitus::key_in($c, @_); }

# the path lines of backend $pid in $node's log since $off, shard numbers
# kept (NtaskCitus::paths reads every backend's)
sub pid_paths
{
	my ($node, $off, $pid) = @_;
	my $log = slurp_file($node->logfile, $off);
	return $log =~ /\[$pid\][^\n]*ntask: (direct path for shard \d+|routed path for shard \d+: [^\n]*|direct path (?:skips|stops in) shard \d+: [^\n]*)/g;
}

# the advisory locks (Citus' shard metadata locks) a backend holds
sub advisory_locks
{
	my ($node, $pid) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM pg_locks WHERE pid = $pid AND locktype = 'advisory'");
}

# start a waiting claim on $node ($sql, whose text has $mark), wait until
# it sleeps (wait.c: WaitLatch, PG_WAIT_EXTENSION); returns (dbh, sth, pid)
sub start_waiter
{
	my ($node, $sql, $mark, $setting) = @_;
	my $dbh = connect_to($node);
	$dbh->do("SET ntask.citus_direct = $setting") if defined $setting;
	my $pid = $dbh->{pg_pid};
	my $sth = $dbh->prepare($sql, { pg_async => DBD::Pg::PG_ASYNC() });
	$sth->execute;
	wait_for('the claim sleeps', sub {
		$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid
			AND wait_event_type = 'Extension'") > 0 });
	return ($dbh, $sth, $pid);
}

# the rows of a waiting claim started by start_waiter ('ERROR: ...' on error)
sub finish_waiter
{
	my ($dbh, $sth) = @_;
	my $out;
	eval {
		$sth->pg_result;
		$out = join("\n", map { join('|', map { $_ // '' } @$_) } @{ $sth->fetchall_arrayref });
		1;
	} or $out = 'ERROR: ' . ($dbh->state // '') . ' ' . ($dbh->errstr // "$@");
	$sth->finish;
	$dbh->disconnect;
	return $out;
}

# ---------------------------------------------------------------------
# Part 1: the same answers and rows on both paths
# ---------------------------------------------------------------------
sub scenario
{
	my ($setting) = @_;
	my $wq = "wq_$setting";
	my $wc = "wc_$setting";
	$q->("SELECT count(*) FROM ntask_queue_set('$wq', lease => '10 minutes')");
	$q->("SELECT count(*) FROM ntask_queue_set('$wc', lease => '10 minutes', max_inflight => 5)");
	my (undef, $w) = NtaskCitus::placement($c, $shard);
	my $off = -s $w->logfile;
	my (@out, @paths, @ids);
	my %name;
	my $enq_here = sub {
		my ($queue, $k, $block, $node) = @_;
		my $sql = "SELECT task_id FROM ntask_enqueue('$queue', '$k', '{\"k\": \"$k\"}')";
		$node //= $w;
		my $id = $block ? (split /\n/, $node->safe_psql('postgres', "BEGIN; $sql; COMMIT;"))[0] : $node->safe_psql('postgres', $sql);
		$name{$id} = 'e' . (scalar(@ids) + 1);
		push @ids, $id;
		return $id;
	};
	my $names = sub { my ($s) = @_; $s =~ s/\b(\d{10,})\b/$name{$1} \/\/ $1/ge; return $s; };
	my $waiter = sub {
		my ($sql, $wake) = @_;
		my ($dbh, $sth, $pid) = start_waiter($w, $sql, 'wait =>', $setting);
		push @out, 'locks asleep: ' . advisory_locks($w, $pid);
		my $t0 = time;
		$wake->($pid);
		my $r = finish_waiter($dbh, $sth);
		push @out, $names->($r), 'woken early: ' . (time - $t0 < 20 ? 'yes' : 'no');
		push @paths, [ pid_paths($w, $off, $pid) ];
	};
	my $claim_cols = "task_id, attempt, prior_outcome, payload->>'k'";

	# (a) the _on form, woken by a direct enqueue on its node
	$waiter->("SELECT $claim_cols FROM ntask_claim_on(${shard}::smallint, '$wq', 'w1', 1, wait => '60 seconds')",
		sub { $enq_here->($wq, key_in($wq, $shard, 'a')) });
	# (a2) woken by an enqueue through the coordinator (delegated to this node)
	$waiter->("SELECT $claim_cols FROM ntask_claim_on(${shard}::smallint, '$wq', 'w1b', 1, wait => '60 seconds')",
		sub { $enq_here->($wq, key_in($wq, $shard, 'g'), 0, $co) });
	# (b) the plain claim (the node's walk), woken by an enqueue in a block (routed)
	$waiter->("SELECT $claim_cols FROM ntask_claim('$wq', 'w2', 1, wait => '60 seconds')",
		sub { $enq_here->($wq, key_in($wq, $shard, 'b'), 1) });
	# (c) work due at once: no sleep
	$enq_here->($wq, key_in($wq, $shard, 'c'));
	my $dbh = connect_to($w);
	$dbh->do("SET ntask.citus_direct = $setting");
	my $pid = $dbh->{pg_pid};
	my $run = sub {
		my ($sql) = @_;
		my $r = eval { join("\n", map { join('|', map { $_ // '' } @$_) } @{ $dbh->selectall_arrayref($sql) }) }
		  // 'ERROR: ' . $dbh->state;
		push @out, $names->($r);
	};
	$run->("SELECT $claim_cols FROM ntask_claim_on(${shard}::smallint, '$wq', 'w3', 1, wait => '5 seconds')");
	# (d) a takeover of an invoked attempt whose lease ran out
	my $e4 = $enq_here->($wq, key_in($wq, $shard, 'd'));
	my $tok = $w->safe_psql('postgres', "SELECT token FROM ntask_claim_on(${shard}::smallint, '$wq', 'w4', 1)");
	$w->safe_psql('postgres', "SELECT ntask_invoked($e4, $tok)");
	$q->("UPDATE ntask.task SET lease_until = now() - interval '1 minute', due_at = now() - interval '1 minute' WHERE task_id = $e4");
	$run->("SELECT $claim_cols FROM ntask_claim_on(${shard}::smallint, '$wq', 'w5', 1, wait => '5 seconds')");
	# (e) the wait runs out: no row, after the wait
	my $t0 = time;
	$run->("SELECT $claim_cols FROM ntask_claim_on(${shard}::smallint, '$wq', 'w6', 1, wait => '1 second')");
	push @out, 'waited: ' . (time - $t0 >= 0.9 ? 'yes' : 'no');
	# (f) a queue with a cap: after its pick, routed (each look)
	$enq_here->($wc, key_in($wc, $shard, 'f'));
	$run->("SELECT $claim_cols FROM ntask_claim_on(${shard}::smallint, '$wc', 'w7', 1, wait => '5 seconds')");
	push @paths, [ pid_paths($w, $off, $pid) ];
	$dbh->disconnect;
	# (g) cancel: the sleeping claim ends at once (57014), nothing held
	{
		my ($d2, $s2, $p2) = start_waiter($w, "SELECT $claim_cols FROM ntask_claim_on(${shard}::smallint, '$wq', 'w8', 1, wait => '60 seconds')", 'wait =>', $setting);
		$w->safe_psql('postgres', "SELECT pg_cancel_backend($p2)");
		my $r = finish_waiter($d2, $s2);
		push @out, ($r =~ /^ERROR: (\w+)/ ? "cancel: $1" : "cancel: $r");
	}
	my $idl = join(', ', @ids);
	push @out, $names->($q->("SELECT string_agg(concat_ws('|', task_id, state, attempts, lease_owner, unknown_attempts, invoked_at IS NOT NULL, lease_until > now()), ';' ORDER BY task_id) FROM ntask.task WHERE task_id IN ($idl)"));
	push @out, $names->($q->("SELECT string_agg(concat_ws('|', task_id, attempt, result, outcome_known, worker), ';' ORDER BY task_id, token) FROM ntask.attempt_all WHERE task_id IN ($idl)"));
	push @out, $q->("SELECT bool_and(t.token > a.token) FROM ntask.task t JOIN ntask.attempt_all a USING (task_id) WHERE t.task_id IN ($idl) AND a.token <> t.token");
	my $all = join("\n", @out);
	$all =~ s/_(on|off)\b//g;
	$all =~ s/\|([a-g])\d+$/|$1/mg;    # the keys' numbers differ by run
	return ($all, \@paths);
}

{
	my ($routed, $rp) = scenario('off');
	my ($direct, $dp) = scenario('on');
	is($direct, $routed, 'answers and rows: the direct and the routed waiting claim agree');
	note("answers:\n$direct");
	like($direct, qr/^locks asleep: 0\ne1\|1\|\|a\nwoken early: yes\nlocks asleep: 0\ne2\|1\|\|g\nwoken early: yes\nlocks asleep: 0\ne3\|1\|\|b\nwoken early: yes\ne4\|1\|\|c\ne5\|2\|unknown\|d\n\nwaited: yes\ne6\|1\|\|f\ncancel: 57014\n/,
		'answers: woken by a direct, a delegated and a routed enqueue, due at once, a takeover, the wait ran out, a capped queue, a cancel');
	my $ds = "direct path for shard $shard";
	# (a): every look direct; (b): the walk of the node's shards, direct
	for my $i (0, 1)
	{
		ok(@{ $dp->[$i] } >= 2 && !grep({ $_ ne $ds } @{ $dp->[$i] }), "paths: the _on form's waiting claim ran each look directly ($i)")
		  or diag(join("\n", @{ $dp->[$i] }));
	}
	ok(@{ $dp->[2] } >= 2 && !grep({ !/^direct path for shard \d+$/ } @{ $dp->[2] }) && grep({ $_ eq $ds } @{ $dp->[2] }),
		'paths: the plain waiting claim walked the node\'s shards directly')
	  or diag(join("\n", @{ $dp->[2] }));
	my @one = @{ $dp->[3] };
	is(join("\n", @one[ 0 .. 2 ]), join("\n", ($ds) x 3), 'paths: due at once, the takeover and the empty wait ran directly')
	  or diag(join("\n", @one));
	ok(!grep({ /coordinated transaction/ } @one), 'paths: no look found a Citus coordinated transaction open')
	  or diag(join("\n", @one));
	is($one[-1], "routed path for shard $shard: the queue has a guard or flow control", 'paths: the capped queue went routed after its pick')
	  or diag(join("\n", @one));
	ok(!grep({ !/ntask.citus_direct is off$/ } map { @$_ } @$rp), 'paths: all routed with ntask.citus_direct off')
	  or diag(join("\n", map { @$_ } @$rp));
}

# a worker library's role (ntask_worker, not the owner): its waiting claim
# takes the direct path too (the interlock's calls of Citus' functions run
# as the owner of schema ntask)
{
	$q->(q{CREATE ROLE lw LOGIN; GRANT ntask_worker TO lw});
	$q->("SELECT count(*) FROM ntask_queue_set('lq', lease => '10 minutes')");
	my (undef, $w) = NtaskCitus::placement($c, $shard);
	wait_for('the role on the worker node', sub {
		$w->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname = 'lw' AND rolcanlogin}) == 1 });
	my $off = -s $w->logfile;
	my $dbh = DBI->connect('dbi:Pg:dbname=postgres;host=' . $w->host . ';port=' . $w->port, 'lw', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	my $pid = $dbh->{pg_pid};
	my $sth = $dbh->prepare("SELECT task_id FROM ntask_claim('lq', 'lw1', 1, wait => '60 seconds')",
		{ pg_async => DBD::Pg::PG_ASYNC() });
	$sth->execute;
	wait_for('the role\'s claim sleeps', sub {
		$w->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND wait_event_type = 'Extension'") > 0 });
	my $id = $w->safe_psql('postgres', "SELECT task_id FROM ntask_enqueue('lq', '" . key_in('lq', $shard, 'l') . "', '{}')");
	is(finish_waiter($dbh, $sth), $id, 'a worker role: its waiting claim got the task');
	my @p = pid_paths($w, $off, $pid);
	ok(@p >= 2 && !grep({ !/^direct path for shard \d+$/ } @p), 'a worker role: each look ran directly')
	  or diag(join("\n", @p));
}

# ---------------------------------------------------------------------
# Part 2: a move during the sleep
# ---------------------------------------------------------------------
$q->("SELECT count(*) FROM ntask_queue_set('mq', lease => '10 minutes')");
for my $mode ('block_writes', 'force_logical')
{
	my $tag = "move ($mode)";
	my ($shardid, $src, $dst) = NtaskCitus::placement($c, $shard);
	# a task of the shard due in an hour: copied by the move, as it is
	my $later = $q->("SELECT task_id FROM ntask_enqueue('mq', '" . key_in('mq', $shard, "later$mode")
		  . "', '{}', run_at => now() + interval '1 hour')");
	my $off = -s $src->logfile;
	my ($dbh, $sth, $pid) = start_waiter($src,
		"SELECT task_id, attempt FROM ntask_claim_on(${shard}::smallint, 'mq', 'wm', 1, wait => '90 seconds')", 'wait =>');
	is(advisory_locks($src, $pid), '0', "$tag: the sleeping claim holds no metadata lock");
	my @asleep = pid_paths($src, $off, $pid);
	ok(@asleep >= 1 && !grep({ $_ ne "direct path for shard $shard" } @asleep), "$tag: its looks ran directly")
	  or diag(join("\n", @asleep));

	my $mover = connect_to($co);
	$mover->do("SET statement_timeout = '60s'");
	my $t0 = time;
	$mover->do("SELECT citus_move_shard_placement($shardid, '127.0.0.1', " . $src->port
		  . ", '127.0.0.1', " . $dst->port . ", shard_transfer_mode => '$mode')");
	my $took = time - $t0;
	$mover->disconnect;
	ok(!$dbh->pg_ready, "$tag: the move completed while the claim slept (in ${took}s)");
	is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port, "$tag: the shard is on the other node");
	my $orphan_before = $src->safe_psql('postgres', "SELECT string_agg(task_id || ':' || state || ':' || token, ',' ORDER BY task_id) FROM ntask.task_$shardid");

	# an enqueue on the node the shard left (routed there) wakes the claim
	my $id = $src->safe_psql('postgres', "SELECT task_id FROM ntask_enqueue('mq', '" . key_in('mq', $shard, "now$mode") . "', '{}')");
	my $got = finish_waiter($dbh, $sth);
	is($got, "$id|1", "$tag: the claim got the task enqueued after the move");
	my @p = pid_paths($src, $off, $pid);
	is($p[0], "direct path for shard $shard", "$tag: before the move, direct");
	is($p[-1], "routed path for shard $shard: the shard's placement is not on this node",
		"$tag: after it, routed to the new placement") or diag(join("\n", @p));
	is($q->("SELECT state || ',' || lease_owner FROM ntask.task WHERE task_id = $id"), 'leased,wm', "$tag: the lease is on the new placement");
	is($dst->safe_psql('postgres', "SELECT state FROM ntask.task_$shardid WHERE task_id = $id"), 'leased', "$tag: in the new placement's shard relation");
	is($src->safe_psql('postgres', "SELECT string_agg(task_id || ':' || state || ':' || token, ',' ORDER BY task_id) FROM ntask.task_$shardid"),
		$orphan_before, "$tag: nothing was written into the orphan");
	like($orphan_before, qr/\b$later:ready:0\b/, "$tag: the orphan has the task the move copied, as it was");
	NtaskCitus::drop_orphans($c);
}

# ---------------------------------------------------------------------
# Part 3: a look racing a move (NtaskCitus::race_move, as t/028 Part 2):
# (a) call_first, the look holds its group's lock and waits for the shard
# relation: the move waits for it; (b) move_first, block_writes: the look
# waits for the move, finds the placement gone and runs routed, the
# orphan's row as the move copied it; force_logical: the look runs
# directly during the catch-up, its lease carried over
# ---------------------------------------------------------------------
$q->("SELECT count(*) FROM ntask_queue_set('rq', lease => '10 minutes')");
for my $mode ('block_writes', 'force_logical')
{
	for my $kind ('call_first', 'move_first')
	{
		my $tag = "race ($mode, $kind)";
		NtaskCitus::drop_orphans($c);
		my $id = $q->("SELECT task_id FROM ntask_enqueue('rq', '" . key_in('rq', $shard, "r$mode$kind") . "', '{}')");
		my ($shardid, $src, $dst) = NtaskCitus::placement($c, $shard);
		my ($rows, $err, $move_waited, $off) = race_move($c, src => $src, dst => $dst,
			shardid => $shardid, mode => $mode, kind => $kind, tag => $tag, like => '%ntask\_claim\_on(%',
			call => "SELECT task_id || ',' || token || ',' || attempt FROM ntask_claim_on(${shard}::smallint, 'rq', 'wr', 1, wait => '30 seconds')");
		is($err, '', "$tag: the waiting claim ran");
		my ($cid, $ctok, $catt) = split /,/, $rows->[0][0] // ',,';
		is("$cid,$catt", "$id,1", "$tag: it got the task, its first attempt");
		is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port, "$tag: the shard moved");
		ok($move_waited, "$tag: the move waited for the look") if $kind eq 'call_first';
		my @p = NtaskCitus::paths($src, $off);
		is($p[-1], ($kind eq 'move_first' && $mode eq 'block_writes')
			? "routed path for shard $shard: the shard's placement is not on this node"
			: "direct path for shard $shard", "$tag: the look's path") or diag(join("\n", @p));
		is($q->("SELECT state || ',' || token || ',' || lease_owner FROM ntask.task WHERE task_id = $id"),
			"leased,$ctok,wr", "$tag: the new placement has the lease and its token");
		is($src->safe_psql('postgres', "SELECT state || ',' || token FROM ntask.task_$shardid WHERE task_id = $id"),
			'ready,0', "$tag: the orphan's row is as the move copied it")
		  if $kind eq 'move_first' && $mode eq 'block_writes';
	}
}

NtaskCitus::stop($c);
done_testing();
