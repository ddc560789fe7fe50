
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/024_citus_move.pl: one task, two holders, across a shard move (issue
# 49, "A defect to fix first"), opt-in with NTASK_CITUS=1 like t/023.
#
# A coordinator and two workers on loopback (wal_level = logical, for
# force_logical moves).  A distributed claim picks a task (a routed read
# with FOR UPDATE SKIP LOCKED) and leases it with a second routed
# statement.  Claimer A is stopped between the two by the queue's guard,
# which waits for an advisory lock the test holds on A's node; meanwhile
# citus_move_shard_placement moves the task's shard to the other worker
# and claimer B claims the task.  Then A is let go.  Whatever the order
# the engine allows, afterwards at most one claimer holds the task, the
# ledger (ntask.attempt_all, also once the holder finished: its last
# attempt stays on the task row, issue 48) has every attempt, numbered 1..n in token order.
#
# Both transfer modes: block_writes (the move starts while A waits in its
# guard) and force_logical (the move starts before A's pick and is held,
# with Citus' own test hook citus.running_under_citus_test_suite, after
# its copy and catch-up, right before its final phase, until A waits in
# its guard).  A claims four ways: ntask_claim through the coordinator,
# ntask_claim on the worker node that holds the shard (it walks that
# node's shards), ntask_claim_on from the coordinator outside a
# transaction block (delegated to the shard's node), and ntask_claim_on
# in a transaction block on the coordinator (each statement routed).  B
# claims with ntask_claim_on from the coordinator (delegated).
#
# Before the fix both A and B got the task (A with token 2 over B's 1), and
# B's attempt was missing from the ledger.
#
# Then the lease's own check, without a move (the claim's shard lock makes
# the move wait, so the scenarios above never reach it): a guard does, in
# A's transaction between its pick and its lease, what B did.
# T024_SKIP_MOVES=1 runs that part only.

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
NtaskCitus->import(qw(connect_to wait_for));

my $t0 = time;
my $c = NtaskCitus::setup('move', moves => 1);
my $co = $c->{coord};
my @workers = @{ $c->{workers} };
my $q = $c->{q};

# The guard: the first claim on a node (the one that gets the try lock
# 4243, held to its commit) waits for the shared lock 4242, which the test
# holds exclusively on A's node; every later claim there, and any claim
# on a node where the test holds nothing, goes on.  Created on every node
# (the guard runs where the claim runs).
for my $n ($co, @workers)
{
	$n->safe_psql('postgres', q{
		SET citus.enable_ddl_propagation = off;
		CREATE FUNCTION public.move_gate(k text, p jsonb) RETURNS text
		LANGUAGE plpgsql AS $$
		BEGIN
			IF pg_try_advisory_xact_lock(4243) THEN
				PERFORM pg_advisory_xact_lock_shared(4242);
			END IF;
			RETURN 'proceed';
		END $$;});
}

# a backend on any node waiting for a lock, its query matching $like
sub lock_waiter
{
	my ($like) = @_;
	for my $n ($co, @workers)
	{
		return 1 if $n->safe_psql('postgres', qq{
			SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '$like'
			  AND pid <> pg_backend_pid()}) > 0;
	}
	return 0;
}

my $scenario = 0;

sub run_scenario
{
	my ($mode, $path) = @_;
	$scenario++;
	my $tag = "$mode/$path";
	# the orphan of the last move goes first (a move refuses to run while
	# one is left on its target); the last scenario's backends may still
	# be exiting and hold it a moment
	# (ntask's sql_drop trigger failed that cleanup on the worker nodes)
	ok(eval {
		wait_for("$tag: the last move's orphans dropped", sub {
			$co->psql('postgres', 'CALL citus_cleanup_orphaned_resources()');
			$q->('SELECT count(*) FROM pg_dist_cleanup') == 0;
		}, 60);
	}, "$tag: the orphans of the moves before are dropped");
	my $queue = "mv$scenario";
	$q->("SELECT count(*) FROM ntask_queue_set('$queue', lease => '10 minutes',
		guard => 'public.move_gate(text,jsonb)')");
	my $tid = $q->("SELECT task_id FROM ntask_enqueue('$queue', 'k', '{}')");
	my $shard = $tid >> 48;
	my $shardid = $q->("SELECT get_shard_id_for_distribution_column('ntask.task', ${shard}::smallint)");
	my $src_port = $q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid");
	my ($src) = grep { $_->port == $src_port } @workers;
	my ($dst) = grep { $_->port != $src_port } @workers;
	my $a_node = ($path eq 'worker' || $path eq 'on') ? $src : $co;

	my $move_sql = "SELECT citus_move_shard_placement($shardid, '127.0.0.1', " . $src->port
	  . ", '127.0.0.1', " . $dst->port . ", shard_transfer_mode => '$mode')";

	# the gate on A's node
	my $gate = connect_to($a_node);
	$gate->do('SELECT pg_advisory_lock(4242)');

	my $mover = connect_to($co);
	my $hold;
	if ($mode eq 'force_logical')
	{
		# the move runs up to its final phase and waits there (Citus'
		# ConflictWithIsolationTestingAfterCopy) while the test holds
		# this lock on the coordinator
		$hold = connect_to($co);
		$hold->do('SELECT pg_advisory_lock(44000, 55152)');
		$mover->do('SET citus.running_under_citus_test_suite = on');
		$mover->do($move_sql, { pg_async => DBD::Pg::PG_ASYNC() });
		wait_for("$tag: the move held before its final phase", sub {
			$co->safe_psql('postgres', q{SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND classid = 44000 AND objid = 55152
				  AND objsubid = 2 AND NOT granted}) > 0;
		});
	}

	# A: picks the task and stops in its guard
	my $a_dbh = connect_to($path eq 'worker' ? $src : $co, autocommit => $path ne 'on_block');
	my $a_sql = $path eq 'coord' || $path eq 'worker'
	  ? "SELECT task_id || ':' || token FROM ntask_claim('$queue', 'A', 1)"
	  : "SELECT task_id || ':' || token FROM ntask_claim_on(${shard}::smallint, '$queue', 'A', 1)";
	my $a_sth = $a_dbh->prepare($a_sql, { pg_async => DBD::Pg::PG_ASYNC() });
	$a_sth->execute;
	my $a_started = time;
	wait_for("$tag: A waits in its guard", sub {
		$a_node->safe_psql('postgres', q{SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted}) > 0;
	});

	# the move: started now (block_writes), or let go to its final phase
	# (force_logical); it completes, or waits for A
	if ($mode eq 'force_logical')
	{
		$hold->do('SELECT pg_advisory_unlock(44000, 55152)');
	}
	else
	{
		$mover->do($move_sql, { pg_async => DBD::Pg::PG_ASYNC() });
	}
	wait_for("$tag: the move completes or waits", sub {
		$mover->pg_ready
		  || lock_waiter('%lock_shard_metadata%')
		  || lock_waiter('%citus_move_shard_placement%');
	});
	my $moved_first = $mover->pg_ready ? 1 : 0;

	# B claims the task (delegated to the shard's node): it gets it, or
	# waits for the move
	my $b_dbh = connect_to($co);
	my $b_sth = $b_dbh->prepare("SELECT task_id || ':' || token FROM ntask_claim_on(${shard}::smallint, '$queue', 'B', 1)",
		{ pg_async => DBD::Pg::PG_ASYNC() });
	$b_sth->execute;
	wait_for("$tag: B returns or waits", sub {
		$b_dbh->pg_ready || lock_waiter("%ntask_claim_on%''B''%");
	});

	# let A go on, and collect everything
	$gate->do('SELECT pg_advisory_unlock(4242)');
	$a_sth->pg_result;
	my @a_got = map { $_->[0] } @{ $a_sth->fetchall_arrayref };
	$a_dbh->commit if $path eq 'on_block';
	$b_sth->pg_result;
	my @b_got = map { $_->[0] } @{ $b_sth->fetchall_arrayref };
	$mover->pg_result;
	note(sprintf('%s: move %s first; A got [%s], B got [%s]; %.1f s',
		$tag, $moved_first ? 'committed' : 'waited', join(',', @a_got), join(',', @b_got),
		time - $a_started));
	$_->disconnect for ($gate, $mover, $a_dbh, $b_dbh, $hold ? $hold : ());

	is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port,
		"$tag: the shard moved");
	my @holders = (@a_got, @b_got);
	cmp_ok(scalar(@holders), '<=', 1, "$tag: at most one claimer got the task (A: @a_got; B: @b_got)");
	# tokens come from one sequence: a task's attempts, in token order, are
	# numbered 1..n, one per lease (none lost)
	my $n = $q->("SELECT attempts FROM ntask.task WHERE task_id = $tid");
	is($q->("SELECT string_agg(attempt::text, ',' ORDER BY token) FROM ntask.attempt_all WHERE task_id = $tid"),
		$n > 0 ? join(',', 1 .. $n) : '', "$tag: every attempt in ntask.attempt_all, attempts 1..$n in token order");
	is($q->("SELECT count(*) FROM ntask.task WHERE task_id = $tid AND state = 'leased'"),
		scalar(@holders) ? '1' : '0', "$tag: the task is leased once if handed out");
	# the holder with the task's token finishes it; any other is stale
	my $applied = 0;
	for my $h (@holders)
	{
		my ($id, $tok) = split /:/, $h;
		my $r = $q->("SELECT result FROM ntask_transition($id, $tok, 'succeeded')");
		$applied++ if $r eq 'applied';
	}
	is($applied, scalar(@holders) ? 1 : 0, "$tag: the holder's transition applies");
	is($q->("SELECT string_agg(attempt::text, ',' ORDER BY token) FROM ntask.attempt_all WHERE task_id = $tid"),
		$n > 0 ? join(',', 1 .. $n) : '', "$tag: every attempt in ntask.attempt_all, attempts 1..$n in token order");
	return;
}

for my $mode ($ENV{T024_SKIP_MOVES} ? () : ('block_writes', 'force_logical'))
{
	for my $path ('coord', 'worker', 'on', 'on_block')
	{
		run_scenario($mode, $path);
	}
}

# The lease's own check, without a move: the guard does between A's pick
# and its lease what claimer B did on the shard's new placement above
# (closes an expired attempt, leases the task with the next token), in
# A's own transaction, since A holds the row lock.  A's claim of 2 must
# then lease nothing for that task, close no attempt of B's, and go on:
# it returns the other task.  A fresh task and a takeover (a lease run
# out).  Before the check the lease took the task from B (its attempt
# lost) and the takeover closed B's running attempt as expired.
for my $n ($co, @workers)
{
	$n->safe_psql('postgres', q{
		SET citus.enable_ddl_propagation = off;
		CREATE FUNCTION public.steal_gate(k text, p jsonb) RETURNS text
		LANGUAGE plpgsql AS $$
		DECLARE
			r record;
			s smallint;
		BEGIN
			IF p ? 'steal' THEN
				s := ntask_shard(p->>'q', k);
				SELECT * INTO r FROM ntask.task t
				WHERE t.shard = s AND t.queue = p->>'q' AND t.task_key = k;
				IF r.state = 'leased' THEN
					INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker,
						claimed_at, ended_at, result, outcome_known)
					VALUES (r.task_id, r.shard, r.token, r.attempts, r.lease_owner,
						r.claimed_at, now(), 'lease_expired', true);
				END IF;
				UPDATE ntask.task t SET state = 'leased', token = r.token + 1,
					attempts = r.attempts + 1, lease_owner = 'B', claimed_at = now(),
					invoked_at = NULL, lease_until = now() + interval '10 minutes',
					due_at = now() + interval '10 minutes'
				WHERE t.task_id = r.task_id AND t.shard = r.shard;
			END IF;
			RETURN 'proceed';
		END $$;});
}
for my $case ('fresh', 'takeover')
{
	my $queue = "steal_$case";
	$q->("SELECT count(*) FROM ntask_queue_set('$queue', lease => '10 minutes')");
	# two keys of one shard: the stolen one, and one A gets
	my ($k1, $k2) = split /\|/, $q->(qq{
		SELECT string_agg(k, '|') FROM (SELECT 'k' || i AS k FROM generate_series(1, 1000) i
			WHERE ntask_shard('$queue', 'k' || i) = ntask_shard('$queue', 'k1') ORDER BY i LIMIT 2) x});
	my $shard = $q->("SELECT ntask_shard('$queue', '$k1')");
	my $t1 = $q->("SELECT task_id FROM ntask_enqueue('$queue', '$k1', '{\"steal\": true, \"q\": \"$queue\"}')");
	if ($case eq 'takeover')
	{
		# t1 leased by X, its lease run out
		$q->("SELECT count(*) FROM ntask_claim_on(${shard}::smallint, '$queue', 'X', 1, lease => '1 second')");
		wait_for('the lease runs out', sub {
			$q->("SELECT count(*) FROM ntask.task WHERE task_id = $t1 AND lease_until < now()") == 1;
		}, 30);
	}
	my $t2 = $q->("SELECT task_id FROM ntask_enqueue('$queue', '$k2', '{}')");
	$q->("SELECT count(*) FROM ntask_queue_set('$queue', guard => 'public.steal_gate(text,jsonb)')");
	# in a transaction block: the claim runs on the coordinator, each
	# statement routed
	my $got = $q->("BEGIN; SELECT string_agg(task_id || ':' || token, ',' ORDER BY task_id)
		FROM ntask_claim_on(${shard}::smallint, '$queue', 'A', 2); COMMIT;");
	my $want_tok = $case eq 'takeover' ? 2 : 1;
	like($got, qr/^$t2:\d+$/, "stale pick ($case): the lease leases nothing for the task taken meanwhile, and the claim goes on");
	is($q->("SELECT lease_owner || ' ' || attempts FROM ntask.task WHERE task_id = $t1"), "B $want_tok",
		"stale pick ($case): the task stays with the claim that took it (attempt $want_tok)");
	is($q->("SELECT coalesce(string_agg(attempt::text, ',' ORDER BY token), '') FROM ntask.attempt WHERE task_id = $t1"),
		$case eq 'takeover' ? '1' : '',
		"stale pick ($case): no attempt of the new holder closed");
	is($q->("SELECT string_agg(attempt::text, ',' ORDER BY token) FROM ntask.attempt_all WHERE task_id = $t1"),
		join(',', 1 .. $want_tok), "stale pick ($case): every attempt in ntask.attempt_all, attempts 1..$want_tok in token order");
}

# The other two-statement paths across a move.  Their first routed
# statement is a write with the token in its WHERE (Citus takes the shard's
# metadata lock for it) or they take the lock themselves (the receipt;
# housekeeping's sweep of a shard): a business transaction holding a
# receipt makes a block_writes move wait for its commit; after the move the
# heartbeat, the transition, the release and housekeeping's takeover of an
# expired lease run on the new placement, each attempt in the ledger once.
{
	my $queue = 'after';
	$q->("SELECT count(*) FROM ntask_queue_set('$queue', lease => '10 minutes')");
	my @keys = split /\|/, $q->(qq{
		SELECT string_agg(k, '|') FROM (SELECT 'a' || i AS k FROM generate_series(1, 1000) i
			WHERE ntask_shard('$queue', 'a' || i) = ntask_shard('$queue', 'a1') ORDER BY i LIMIT 3) x});
	my $shard = $q->("SELECT ntask_shard('$queue', 'a1')");
	my %id;
	for my $k (@keys)
	{
		$id{$k} = $q->("SELECT task_id FROM ntask_enqueue('$queue', '$k', '{}')");
	}
	# three leases: two of 10 minutes, one of 1 second (by key order: the
	# claim takes them in task id order)
	my @got = split /\n/, $q->("SELECT task_id || ':' || token FROM ntask_claim_on(${shard}::smallint, '$queue', 'H', 2)");
	is(scalar(@got), 2, 'after a move: two leases of 10 minutes');
	my @exp = split /\n/, $q->("SELECT task_id || ':' || token FROM ntask_claim_on(${shard}::smallint, '$queue', 'H', 1, lease => '1 second')");
	my %held = map { (split /:/)[0] => 1 } @got, @exp;
	is(scalar(keys %held), 3, 'after a move: three tasks leased, a first attempt each');
	my %tok = map { split /:/ } @got, @exp;
	my ($t_hb, $t_rel) = map { (split /:/)[0] } @got;
	my ($t_exp) = map { (split /:/)[0] } @exp;

	my $shardid = $q->("SELECT get_shard_id_for_distribution_column('ntask.task', ${shard}::smallint)");
	my $src_port = $q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid");
	my ($dst) = grep { $_->port != $src_port } @workers;
	wait_for('the last orphans dropped', sub {
		$co->psql('postgres', 'CALL citus_cleanup_orphaned_resources()');
		$q->('SELECT count(*) FROM pg_dist_cleanup') == 0;
	});

	# a business transaction with the receipt, open while the move starts
	my $biz = connect_to($co, autocommit => 0);
	my ($r) = $biz->selectrow_array("SELECT ntask_receipt($t_hb, $tok{$t_hb}, '{\"done\": 1}')");
	is($r, 'applied', 'after a move: the receipt in its business transaction');
	my $mover = connect_to($co);
	$mover->do("SELECT citus_move_shard_placement($shardid, '127.0.0.1', $src_port, '127.0.0.1', "
		  . $dst->port . ", shard_transfer_mode => 'block_writes')", { pg_async => DBD::Pg::PG_ASYNC() });
	wait_for('the move waits or completes', sub {
		$mover->pg_ready
		  || lock_waiter('%lock_shard_metadata%')
		  || lock_waiter('%citus_move_shard_placement%');
	});
	ok(!$mover->pg_ready, 'after a move: the move waits for the business transaction holding a receipt');
	$biz->commit;
	$biz->disconnect;
	$mover->pg_result;
	$mover->disconnect;
	is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port,
		'after a move: the shard moved');

	wait_for('the short lease runs out', sub {
		$q->("SELECT count(*) FROM ntask.task WHERE task_id = $t_exp AND lease_until < now()") == 1;
	}, 30);
	isnt($q->("SELECT ntask_heartbeat($t_hb, $tok{$t_hb})"), '', 'after a move: the heartbeat applies');
	is($q->("SELECT ntask_receipt($t_hb, $tok{$t_hb}, '{\"done\": 1}')"), 'duplicate',
		'after a move: the receipt is on the new placement');
	is($q->("SELECT result FROM ntask_transition($t_hb, $tok{$t_hb}, 'succeeded')"), 'applied',
		'after a move: the transition applies');
	is($q->("SELECT ntask_release($t_rel, $tok{$t_rel})"), 'applied', 'after a move: the release applies');
	$q->('SELECT * FROM ntask_housekeeping()');
	is($q->("SELECT state || ' ' || attempts FROM ntask.task WHERE task_id = $t_exp"), 'retry_wait 1',
		'after a move: housekeeping released the expired lease');
	for my $t ($t_hb, $t_rel, $t_exp)
	{
		is($q->("SELECT string_agg(attempt || ' ' || result, ',') FROM ntask.attempt_all WHERE task_id = $t"),
			'1 ' . ($t == $t_hb ? 'succeeded' : $t == $t_rel ? 'released' : 'lease_expired'),
			"after a move: task $t has its one attempt in the ledger");
	}
}

NtaskCitus::stop($c);
note(sprintf('t/024 took %.0f s', time - $t0));
done_testing();
