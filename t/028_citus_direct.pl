
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/028_citus_direct.pl: the direct shard path (issue 49; docs/scaling.md
# "The direct shard path"), opt-in with NTASK_CITUS=1 like t/023.
#
# A coordinator and two workers on loopback (wal_level = logical, for
# force_logical moves).  The observable: every call of the transition
# family logs its path at DEBUG1 ("ntask: direct path for shard N", or
# "ntask: routed path for shard N: <why>"), written by the code that
# chooses it (src/shard.c, NtaskDirectBegin), counted here in the worker
# nodes' logs (log_min_messages = debug1 there).
#
# Part 1: the transition family on the worker node of the shard (and
# delegated from the coordinator, ntask_<f>_on) takes the direct path; the
# same calls with ntask.citus_direct = off take the routed one, and both
# give the same answers and leave the same rows (task and ledger); a call
# in a transaction block, a statement of two calls run routed; a batch
# over two shard values of the node runs directly in both (t/034 for
# more); a backend keeps the statements of at most
# ntask.citus_direct_groups shard values (its memory contexts counted).
# A split of the shard on its node: the backend that used the old shard
# runs on the new one.  A call under one of PostgreSQL's aggregates (a
# pgbench \gset) is the whole statement, direct; under a GROUP BY, a
# HAVING, beside random() or under a user's aggregate, routed.
#
# Part 1b: the claim (docs/scaling.md "The claim on the direct path"):
# ntask_claim_on and a worker node's ntask_claim take the direct path for
# a plain queue, with the same answers and rows as routed (a batch, a
# walk, a retry with a receipt, a takeover of an invoked attempt, an
# empty claim, a delegated one, an unknown queue); a fair queue and one
# with a cap go routed after their direct pick, a claim in a block or a
# waiting one direct (t/043), each saying why.  ntask_transition_and_claim runs
# direct for a queue its backend found fit, routed in a new backend.
#
# Part 2: the move interlock.  A direct call (a claim, a transition, a
# heartbeat) racing citus_move_shard_placement, both transfer modes, with
# citus.defer_shard_delete_interval = -1 so the orphan stays: (a) the call
# holds the group's metadata lock (stopped on a row lock the test holds,
# or for the claim, whose pick skips locked rows, on the shard relation):
# the move waits for it, and its write reaches the new placement; (b)
# block_writes: the move holds its write block (stopped after its copy by
# Citus' test hook) and the call waits for it, then runs routed to the new
# placement, the orphan untouched; (c) force_logical: a direct call during
# the move's catch-up, which carries it to the new placement
# (NtaskCitus::race_move drives each race).
#
# Part 3: the enqueue and the release (docs/scaling.md "The enqueue and
# the release on the direct path"): the same answers and rows on both
# paths, the key's duplicate answered directly, a batch of one shard's
# keys direct, depends_on and keys of another node's shard routed, a notify
# queue's NOTIFY; both racing moves as in Part 2, nothing lost,
# duplicated or written into the orphan.
#
# Part 4: callers without rights on the direct path: a role that is not
# the queue's producer_role enqueues, one that is not its worker_role
# releases (on the worker node and delegated): 42501 with the message and
# hint of the routed path and of a plain install, nothing written; the
# roles' own calls apply, directly.

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

my $c = NtaskCitus::setup('direct', moves => 1, orphans => 1);
my $co = $c->{coord};
my @workers = @{ $c->{workers} };
for my $w (@workers)
{
	$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
}
my $q = $c->{q};
$q->("SELECT count(*) FROM ntask_queue_set('dq', lease => '10 minutes')");

# the shard's Citus id, its node, and the other
sub placement { return NtaskCitus::placement($c, @_); }

my $keyno = 0;

# n tasks of queue dq in shard $shard, enqueued through the coordinator
# and claimed there (routed); returns "id:token" strings
sub claimed
{
	my ($shard, $n) = @_;
	my @ids;
	while (@ids < $n)
	{
		$keyno++;
		next unless $q->("SELECT ntask_shard('dq', 'k$keyno')") == $shard;
		push @ids, $q->("SELECT task_id FROM ntask_enqueue('dq', 'k$keyno', '{}')");
	}
	my %tok;
	wait_for('the claims', sub {
		for my $r (split /\n/, $q->("SELECT task_id || ':' || token FROM ntask_claim_on(${shard}::smallint, 'dq', 'w', 50)"))
		{
			my ($i, $t) = split /:/, $r;
			$tok{$i} = $t;
		}
		return !grep { !$tok{$_} } @ids;
	}, 60);
	return map { "$_:$tok{$_}" } @ids;
}

my $shard = $q->("SELECT min(shard) FROM ntask.shard_map");
my $other = $q->("SELECT min(shard) FROM ntask.shard_map m WHERE shard > $shard
	AND (SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = get_shard_id_for_distribution_column('ntask.task', m.shard))
	  = (SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = get_shard_id_for_distribution_column('ntask.task', ${shard}::smallint))");
my (undef, $w) = placement($shard);

# ---------------------------------------------------------------------
# Part 1: the same calls on both paths
# ---------------------------------------------------------------------

# runs the transition family's calls on the worker node ($w) and from the
# coordinator, each its own statement; returns their answers and the rows
# they left, without ids, tokens and times
sub scenario
{
	my ($setting) = @_;
	my $set = '';
	# the worker node's setting: delegated calls run in Citus' connections
	$w->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = $setting; SELECT pg_reload_conf()");
	wait_for('the setting', sub { $w->safe_psql('postgres', 'SHOW ntask.citus_direct') eq $setting });
	my ($t1, $t2, $t3, $t4, $t5) = claimed($shard, 5);
	my ($i1, $k1) = split /:/, $t1;
	my ($i2, $k2) = split /:/, $t2;
	my ($i3, $k3) = split /:/, $t3;
	my ($i4, $k4) = split /:/, $t4;
	my ($i5, $k5) = split /:/, $t5;
	my @out;
	my $run = sub { push @out, $w->safe_psql('postgres', "$set $_[0]") };
	my $off = -s $w->logfile;

	$run->("SELECT ntask_heartbeat($i1, $k1) IS NOT NULL");
	$run->("SELECT ntask_heartbeat($i1, $k1, progress => '{\"p\": 1}') IS NOT NULL");
	$run->("SELECT ntask_invoked($i1, $k1)");
	$run->("SELECT ntask_invoked($i1, $k1)");
	$run->("SELECT result, state FROM ntask_transition($i1, $k1, 'succeeded', result => '{\"r\": 1}')");
	$run->("SELECT result, state FROM ntask_transition($i1, $k1, 'succeeded', result => '{\"r\": 1}')");
	$run->("SELECT result, state FROM ntask_transition($i1, $k1, 'canceled')");
	$run->("SELECT ntask_heartbeat($i1, $k1) IS NULL");
	$run->("SELECT ntask_invoked($i1, $k1)");
	$run->("SELECT result, state, run_at IS NOT NULL FROM ntask_transition($i2, $k2, 'retry_wait', error_class => 'transient')");
	$run->("SELECT task_id = $i3, result, state FROM ntask_transition_many(ARRAY[$i3, $i4], ARRAY[$k3, $k4], 'succeeded')");
	my ($rc, $stdout, $stderr) = $w->psql('postgres', "$set SELECT ntask_heartbeat($i4, $k4 + 1000)");
	push @out, ($stderr =~ /(was never issued)/)[0] // "no error: $stderr";
	# delegated from the coordinator to $w
	push @out, $co->safe_psql('postgres', "SELECT ntask_heartbeat_on(${shard}::smallint, $i5, $k5)") ne '' ? 't' : 'f';
	push @out, $co->safe_psql('postgres', "SELECT ntask_invoked_on(${shard}::smallint, $i5, $k5)");
	push @out, $co->safe_psql('postgres', "SELECT result, state FROM ntask_transition_on(${shard}::smallint, $i5, $k5, 'succeeded')");

	my $ids = "$i1, $i2, $i3, $i4, $i5";
	push @out, $q->("SELECT string_agg(concat_ws('|', state, attempts, result, outcome, reason, unknown_attempts, progress, invoked_at IS NOT NULL), ';' ORDER BY array_position(ARRAY[$ids]::bigint[], task_id)) FROM ntask.task WHERE task_id IN ($ids)");
	push @out, $q->("SELECT string_agg(concat_ws('|', attempt, result, requested, error_class, outcome_known, outcome, progress, invoked_at IS NOT NULL, worker), ';' ORDER BY array_position(ARRAY[$ids]::bigint[], task_id), token) FROM ntask.attempt_all WHERE task_id IN ($ids)");
	return (join("\n", @out), [paths($w, $off)]);
}

my ($routed, $rpaths) = scenario('off');
my ($direct, $dpaths) = scenario('on');
is($direct, $routed, 'the direct and the routed path give the same answers and rows');
note("answers:\n$direct");
like($direct, qr/^t\nt\napplied\nduplicate\napplied\|succeeded\nduplicate\|succeeded\nconflict\|succeeded\nt\nstale\napplied\|retry_wait\|t\nt\|applied\|succeeded\nf\|applied\|succeeded\nwas never issued\nt\napplied\napplied\|succeeded\n/,
	'the answers are those of the calls');
my @d = grep { /^direct path for shard $shard$/ } @$dpaths;
# 12 calls on the worker node (the refused heartbeat too), 3 delegated
is(scalar(@d), 15, 'every call with ntask.citus_direct on took the direct path, delegated ones too')
  or diag(join("\n", @$dpaths));
is(scalar(grep { /^routed/ } @$dpaths), 0, 'none routed');
is(scalar(grep { /^direct/ } @$rpaths), 0, 'with ntask.citus_direct off: none direct');
is(scalar(grep { /^routed path for shard $shard: ntask.citus_direct is off$/ } @$rpaths), 15,
	'with it off, the calls on the worker node say so');

# the calls that must run routed
{
	my ($t1, $t2) = claimed($shard, 2);
	my ($i1, $k1) = split /:/, $t1;
	my $o1;
	($o1) = claimed($other, 1) if defined $other && $other ne '';
	my $off = -s $w->logfile;
	is($w->safe_psql('postgres', "BEGIN; SELECT ntask_heartbeat($i1, $k1) IS NOT NULL; COMMIT;"), 't',
		'a heartbeat in a transaction block');
	is($w->safe_psql('postgres', "SELECT ntask_heartbeat($i1, $k1) IS NOT NULL, ntask_invoked($i1, $k1)"), 't|applied',
		'two calls in one statement');
	is($w->safe_psql('postgres', "SET default_transaction_isolation = 'repeatable read'; SELECT ntask_heartbeat($i1, $k1) IS NOT NULL"), 't',
		'a heartbeat under REPEATABLE READ');
	my @p = paths($w, $off);
	is(join("\n", @p), join("\n",
		"routed path for shard $shard: in a transaction block",
		"routed path for shard $shard: not the whole statement",
		"routed path for shard $shard: not the whole statement",
		"routed path for shard $shard: not READ COMMITTED"), 'they ran routed, each saying why');
	if (defined $o1)
	{
		my ($i2, $k2) = split /:/, $t2;
		my ($oi, $ok) = split /:/, $o1;
		$off = -s $w->logfile;
		is($w->safe_psql('postgres', "SELECT string_agg(result, ',') FROM ntask_transition_many(ARRAY[$i2, $oi], ARRAY[$k2, $ok], 'succeeded')"),
			'applied,applied', 'a batch over two shards applies');
		is(join("\n", paths($w, $off)), join("\n", map { "direct path for shard $_" } sort { $a <=> $b } ($shard, $other)),
			'and runs directly in both shard values (t/034)');

		# the bound of the groups a backend keeps: two local shard values,
		# one group kept with ntask.citus_direct_groups = 1, both with 16
		my ($ta, $tb) = (claimed($shard, 1), claimed($other, 1));
		my ($ia, $ka) = split /:/, $ta;
		my ($ib, $kb) = split /:/, $tb;
		for my $bound (1, 16)
		{
			my $s = connect_to($w);
			$s->do("SET ntask.citus_direct_groups = $bound");
			$off = -s $w->logfile;
			my @r = map { scalar $s->selectrow_array($_) }
			  ("SELECT ntask_heartbeat($ia, $ka) IS NOT NULL", "SELECT ntask_heartbeat($ib, $kb) IS NOT NULL",
				"SELECT ntask_heartbeat($ia, $ka) IS NOT NULL");
			is("@r", '1 1 1', "groups bound $bound: the heartbeats of two shard values, back and forth");
			is(join(',', paths($w, $off)), "direct path for shard $shard,direct path for shard $other,direct path for shard $shard",
				"groups bound $bound: all direct");
			is($s->selectrow_array(q{SELECT count(*) FROM pg_backend_memory_contexts WHERE name = 'ntask direct group'}),
				$bound == 1 ? 1 : 2, "groups bound $bound: the backend keeps " . ($bound == 1 ? 'one group' : 'both'));

			# a claim of 2 whose walk takes one task from each local shard
			# value: its second group takes the first one's slot at bound 1
			my $dg = "dg$bound";
			$q->("SELECT count(*) FROM ntask_queue_set('$dg', lease => '10 minutes')");
			my @gt = map { my $k = key_in($dg, $_, 'g'); $q->("SELECT task_id FROM ntask_enqueue('$dg', '$k', '{}')") } ($shard, $other);
			$off = -s $w->logfile;
			my $got = $s->selectall_arrayref("SELECT task_id FROM ntask_claim('$dg', 'w', 2)");
			is(join(',', sort map { $_->[0] } @$got), join(',', sort @gt), "groups bound $bound: a claim walks both shard values");
			is(path_summary(paths($w, $off)), 'direct path for shard', "groups bound $bound: each of them directly");
			$s->disconnect;
		}
	}
}

# a call under one plain aggregate (the shape of a pgbench script's \gset,
# bench/citus's scripts): still the whole statement, so direct; under a
# GROUP BY, a HAVING or beside a volatile function: routed
{
	$q->("SELECT count(*) FROM ntask_queue_set('dagg', lease => '10 minutes')");
	my @e;
	while (@e < 7)
	{
		$keyno++;
		next unless $q->("SELECT ntask_shard('dagg', 'a$keyno')") == $shard;
		push @e, $q->("SELECT task_id FROM ntask_enqueue('dagg', 'a$keyno', '{}')");
	}
	my $cl = "ntask_claim_on(${shard}::smallint, 'dagg', 'w'";
	my $off = -s $w->logfile;
	my ($n, $ids, $toks) = split /\|/, $w->safe_psql('postgres',
		"SELECT count(*), string_agg(task_id::text, ',' ORDER BY task_id), string_agg(token::text, ',' ORDER BY task_id) FROM $cl, 2)");
	is("$n|$ids", "2|$e[0],$e[1]", 'a claim of 2 under count() and string_agg() claims the first two');
	is(path_summary(paths($w, $off)), 'direct path for shard', 'and takes the direct path');
	$off = -s $w->logfile;
	my ($i3, $k3) = split /\|/, $w->safe_psql('postgres',
		"SELECT coalesce(max(task_id), 0), coalesce(max(token), 0) FROM $cl)");
	is($i3, $e[2], "bench/citus's claim (coalesce(max(...)) over the claim) claims the next");
	is(path_summary(paths($w, $off)), 'direct path for shard', 'directly');
	$off = -s $w->logfile;
	is($w->safe_psql('postgres', "SELECT count(*) FROM ntask_transition_many(ARRAY[$ids, $i3]::bigint[], ARRAY[$toks, $k3]::bigint[], 'succeeded')"),
		'3', 'ntask_transition_many of the three under count() applies them');
	is(join(',', paths($w, $off)), "direct path for shard $shard", 'directly');
	$off = -s $w->logfile;
	is($w->safe_psql('postgres', "SELECT count(*) FROM $cl) GROUP BY attempt"), '1', 'a claim under GROUP BY');
	is($w->safe_psql('postgres', "SELECT count(*) FROM $cl) HAVING count(*) > 0"), '1', 'a claim under HAVING');
	is($w->safe_psql('postgres', "SELECT max(task_id) + (random() * 0)::int FROM $cl)"), $e[5], 'a claim beside random()');
	# an aggregate of the user's: its support functions may write (a
	# volatile transition function), which pg_proc's entry of the
	# aggregate does not say
	$w->safe_psql('postgres', q{SET citus.enable_ddl_propagation = off;
		CREATE FUNCTION public.dagg_add(bigint, bigint) RETURNS bigint LANGUAGE sql VOLATILE
			AS 'SELECT coalesce($1, 0) + $2';
		CREATE AGGREGATE public.dagg_sum(bigint) (sfunc = public.dagg_add, stype = bigint)});
	is($w->safe_psql('postgres', "SELECT public.dagg_sum(task_id) FROM $cl)"), $e[6], "a claim under a user's aggregate");
	is(join("\n", paths($w, $off)), join("\n", ("routed path for shard $shard: not the whole statement") x 4),
		'they ran routed, each saying why');
	is($q->("SELECT string_agg(state, ',' ORDER BY task_id) FROM ntask.task WHERE queue = 'dagg'"),
		'succeeded,succeeded,succeeded,leased,leased,leased,leased', 'the rows: three finished, four held');
}

# ---------------------------------------------------------------------
# Part 1b: the claim on both paths (docs/scaling.md "The claim on the
# direct path")
# ---------------------------------------------------------------------

# a key of $queue in shard $sh (ntask_shard), with prefix $p
sub key_in { return NtaskCitus::key_in($c, @_); }

# the path lines of one statement, shard numbers dropped, repeats merged
sub path_summary
{
	my @p = map { s/shard \d+/shard/r } @_;
	my @u;
	for (@p) { push @u, $_ unless @u && $u[-1] eq $_ }
	return join(',', @u);
}

sub claim_scenario
{
	my ($setting) = @_;
	$w->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = $setting; SELECT pg_reload_conf()");
	wait_for('the setting', sub { $w->safe_psql('postgres', 'SHOW ntask.citus_direct') eq $setting });
	my ($dc, $df, $dk) = ("dc_$setting", "df_$setting", "dk_$setting");
	$q->("SELECT count(*) FROM ntask_queue_set('$dc', lease => '10 minutes')");
	$q->("SELECT count(*) FROM ntask_queue_set('$df', lease => '10 minutes', fairness => 'partition')");
	$q->("SELECT count(*) FROM ntask_queue_set('$dk', lease => '10 minutes', max_inflight => 10)");
	my %name;
	my @e;
	my $enq = sub {
		my ($queue, %o) = @_;
		my $k = key_in($queue, $shard, 'c');
		my $pk = $o{pk} ? ", partition_key => '$k'" : '';
		my $id = $q->("SELECT task_id FROM ntask_enqueue('$queue', '$k', '{\"n\": 1}' $pk)");
		push @e, $id;
		$name{$id} = 'e' . scalar(@e);
		return $id;
	};
	# task ids (a line's or a row's first field) by name
	my $names = sub { my $t = shift; $t =~ s/(^|;)(\d+)(?=\||;|$)/$1 . ($name{$2} \/\/ $2)/mge; return $t; };
	my (@out, @paths);
	my $run = sub {
		my ($node, $sql) = @_;
		my $off = -s $w->logfile;
		my ($rc, $stdout, $stderr) = $node->psql('postgres', $sql);
		# rows in task id order (the routed lease does not sort them)
		push @out, $rc == 0 ? $names->(join("\n", sort split /\n/, $stdout))
		  : (($stderr =~ /(ERROR: .*)/)[0] // $stderr);
		push @paths, path_summary(paths($w, $off));
		return $stdout;
	};
	my @ids = map { $enq->($dc) } 1 .. 4;
	my %tok;
	# two claims on the worker node: the _on form and the walk of its shards
	for my $r (split /\n/, $run->($w, "SELECT task_id, token, attempt, prior_outcome IS NULL, lease_until > now() FROM ntask_claim_on(${shard}::smallint, '$dc', 'w1', 2)"))
	{
		my ($i, $t) = split /\|/, $r;
		$tok{$i} = $t;
	}
	for my $r (split /\n/, $run->($w, "SELECT task_id, token, attempt FROM ntask_claim('$dc', 'w2', 1, invoked => true)"))
	{
		my ($i, $t) = split /\|/, $r;
		$tok{$i} = $t;
	}
	# tokens are not compared between the runs: mask them
	$out[-1] =~ s/\|\d+\|/|tok|/g;
	$out[-2] =~ s/\|\d+\|/|tok|/g;
	my ($e1, $e2) = @ids;
	# e1: a receipt, then a retry due now (prior outcome committed); e2:
	# invoked, then its lease runs out (a takeover, prior outcome unknown)
	$run->($w, "SELECT ntask_receipt($e1, $tok{$e1}, '{}')");
	$run->($w, "SELECT result, state FROM ntask_transition($e1, $tok{$e1}, 'retry_wait', error_class => 'transient', retry_at => now())");
	$run->($w, "SELECT ntask_invoked($e2, $tok{$e2})");
	$q->("UPDATE ntask.task SET lease_until = now() - interval '1 minute', due_at = now() - interval '1 minute' WHERE task_id = $e2");
	my $r3 = $run->($w, "SELECT task_id, token, attempt, prior_outcome FROM ntask_claim_on(${shard}::smallint, '$dc', 'w3', 3)");
	$out[-1] =~ s/\|\d+\|/|tok|/g;
	for my $r (sort split /\n/, $r3)
	{
		my ($i, $t) = split /\|/, $r;
		push @out, "token ascends: " . ($t > ($tok{$i} // 0) ? 'yes' : "no ($t after $tok{$i})");
		$tok{$i} = $t;
	}
	$run->($w, "SELECT task_id FROM ntask_claim_on(${shard}::smallint, '$dc', 'w4', 1)");
	my $e5 = $enq->($dc);
	$run->($co, "SELECT task_id, attempt FROM ntask_claim_on(${shard}::smallint, '$dc', 'w5', 1)");
	$run->($w, "SELECT task_id FROM ntask_claim_on(${shard}::smallint, 'no_such_queue', 'w', 1)");
	$enq->($df, pk => 1);
	$run->($w, "SELECT task_id, attempt FROM ntask_claim_on(${shard}::smallint, '$df', 'w6', 1)");
	$enq->($dk);
	$run->($w, "SELECT task_id, attempt FROM ntask_claim_on(${shard}::smallint, '$dk', 'w7', 1)");
	$enq->($dc);
	$run->($w, "BEGIN; SELECT task_id, attempt FROM ntask_claim_on(${shard}::smallint, '$dc', 'w8', 1); COMMIT;");
	$enq->($dc);
	$run->($w, "SELECT task_id, attempt FROM ntask_claim_on(${shard}::smallint, '$dc', 'w9', 1, wait => '1 second')");

	my $ids = join(', ', @e);
	push @out, $names->($q->("SELECT string_agg(concat_ws('|', task_id, state, attempts, lease_owner, unknown_attempts, invoked_at IS NOT NULL, lease_until > now()), ';' ORDER BY task_id) FROM ntask.task WHERE task_id IN ($ids)"));
	push @out, $names->($q->("SELECT string_agg(concat_ws('|', task_id, attempt, result, outcome_known, worker), ';' ORDER BY task_id, token) FROM ntask.attempt_all WHERE task_id IN ($ids)"));
	# a task's token is the ledger's latest one's successor
	push @out, $q->("SELECT bool_and(t.token > a.token) FROM ntask.task t JOIN ntask.attempt_all a USING (task_id) WHERE t.task_id IN ($ids) AND t.state = 'leased' AND a.token <> t.token");
	return (join("\n", @out), \@paths);
}

{
	my ($routed, $rp) = claim_scenario('off');
	my ($direct, $dp) = claim_scenario('on');
	is($direct, $routed, 'claims: the direct and the routed path give the same answers and rows');
	note("claim answers:\n$direct");
	like($direct, qr/^e1\|tok\|1\|t\|t\ne2\|tok\|1\|t\|t\ne3\|tok\|1\n\w+\napplied\|retry_wait\napplied\ne1\|tok\|2\|committed\ne2\|tok\|2\|unknown\ne4\|tok\|1\|\n(token ascends: yes\n){3}/,
		'claims: a batch, a walk, a retry with a receipt, a takeover of an invoked attempt');
	like($direct, qr/\n\ne5\|1\nERROR: .*no_such_queue.*\ne6\|1\ne7\|1\ne8\|1\ne9\|1\n/, 'claims: empty, delegated, unknown queue, fair, capped, in a block, waiting');
	my @want_on = (
		'direct path for shard', 'direct path for shard', '',
		'direct path for shard', 'direct path for shard', 'direct path for shard',
		'direct path for shard', 'direct path for shard', 'direct path for shard',
		"direct path for shard,routed path for shard: the queue is fair, ordered or aging",
		"direct path for shard,routed path for shard: the queue has a guard or flow control",
		'routed path for shard: in a transaction block', 'direct path for shard');
	is(join("\n", @$dp), join("\n", @want_on), 'claims: the path of each statement with ntask.citus_direct on');
	is(join("\n", @$rp), join("\n", map { $_ eq '' ? '' : 'routed path for shard: ntask.citus_direct is off' } @want_on),
		'claims: all routed with it off');
}

# ntask_transition_and_claim: on the direct path for a queue this
# backend's claims found fit for it (a plain queue without a guard or
# flow control), since its transition writes before its claim reads the
# queue; in a backend that has not claimed the queue yet, routed
{
	$w->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = on; SELECT pg_reload_conf()");
	wait_for('the setting', sub { $w->safe_psql('postgres', 'SHOW ntask.citus_direct') eq 'on' });
	$q->("SELECT count(*) FROM ntask_queue_set('dt', lease => '10 minutes')");
	my @t = map { my $k = key_in('dt', $shard, 't'); $q->("SELECT task_id FROM ntask_enqueue('dt', '$k', '{}')") } 1 .. 3;
	my $s = connect_to($w);
	my $off = -s $w->logfile;
	my ($i1, $k1) = $s->selectrow_array("SELECT task_id, token FROM ntask_claim_on(${shard}::smallint, 'dt', 'w', 1)");
	is($i1, $t[0], 'transition_and_claim: a claim of the queue first');
	my ($i2, $k2, $a2, $fr, $fs) = $s->selectrow_array("SELECT task_id, token, attempt, finish_result, finish_state FROM ntask_transition_and_claim_on(${shard}::smallint, $i1, $k1, 'succeeded', 'dt', 'w', 1)");
	is("$i2,$a2,$fr,$fs", "$t[1],1,applied,succeeded", 'transition_and_claim_on: the finish applied, the next task claimed');
	ok($k2 > $k1, 'transition_and_claim_on: a new token');
	my ($i3, $k3, $fr3) = $s->selectrow_array("SELECT task_id, token, finish_result FROM ntask_transition_and_claim($i2, $k2, 'succeeded', 'dt', 'w', 1)");
	is("$i3,$fr3", "$t[2],applied", 'transition_and_claim on the worker node (its walk): the same');
	my @p = paths($w, $off);
	is(path_summary(@p), 'direct path for shard', 'transition_and_claim: every step direct') or diag(join("\n", @p));
	ok(@p >= 5, 'transition_and_claim: each call logged its transition and its claim');
	$s->disconnect;
	$off = -s $w->logfile;
	is($w->safe_psql('postgres', "SELECT coalesce(task_id::text, 'none') || ',' || finish_result FROM ntask_transition_and_claim($i3, $k3, 'succeeded', 'dt', 'w', 1)"),
		'none,applied', 'transition_and_claim in a new backend: finished, nothing left to claim');
	is(path_summary(paths($w, $off)), "routed path for shard: the claim's queue is not known to fit the direct path,"
		. "routed path for shard: the call's transition ran routed", 'and it ran routed, saying why');
	my $ids = join(', ', @t);
	is($q->("SELECT string_agg(concat_ws('|', attempt, result, worker), ';' ORDER BY task_id) FROM ntask.attempt_all WHERE task_id IN ($ids)"),
		'1|succeeded|w;1|succeeded|w;1|succeeded|w', 'transition_and_claim: the ledger has each attempt once');
}

# a caller without the queue's worker_role: 42501 on both paths (the
# error's details are a routed read, which a direct call may make)
{
	$q->('CREATE ROLE dq_w');
	$q->('CREATE ROLE dq_x');
	$q->('GRANT ntask_worker TO dq_w, dq_x');
	$q->("SELECT count(*) FROM ntask_queue_set('dr', lease => '10 minutes')");
	$q->("SELECT ntask_queue_set_roles('dr', NULL, 'dq_w')");
	my ($id, $tok);
	for my $k (1 .. 500)
	{
		next unless $q->("SELECT ntask_shard('dr', 'r$k')") == $shard;
		$id = $q->("SELECT task_id FROM ntask_enqueue('dr', 'r$k', '{}')");
		last;
	}
	wait_for('the claim of dr', sub {
		$tok = $q->("SELECT token FROM ntask_claim_on(${shard}::smallint, 'dr', 'w', 1)");
		return $tok ne '';
	}, 60);
	for my $setting ('on', 'off')
	{
		my $off = -s $w->logfile;
		my ($rc, $out, $stderr) = $w->psql('postgres',
			"SET ntask.citus_direct = $setting; SET ROLE dq_x; SELECT ntask_heartbeat($id, $tok)");
		like($stderr, qr/permission denied for task $id/, "ntask.citus_direct $setting: 42501 for a caller without the worker_role");
		like(join("\n", paths($w, $off)), $setting eq 'on' ? qr/^direct path for shard $shard$/ : qr/^routed path/,
			"ntask.citus_direct $setting: its path");
	}
	# and its claim: refused on both paths, the ready task not leased
	my $rid;
	for my $k (501 .. 1000)
	{
		next unless $q->("SELECT ntask_shard('dr', 'r$k')") == $shard;
		$rid = $q->("SELECT task_id FROM ntask_enqueue('dr', 'r$k', '{}')");
		last;
	}
	for my $setting ('on', 'off')
	{
		my ($rc, $out, $stderr) = $w->psql('postgres',
			"SET ntask.citus_direct = $setting; SET ROLE dq_x; SELECT task_id FROM ntask_claim_on(${shard}::smallint, 'dr', 'x', 5)");
		like($stderr, qr/permission denied/, "ntask.citus_direct $setting: a claim without the worker_role is refused (42501)");
		is($q->("SELECT state || '|' || attempts FROM ntask.task WHERE task_id = $rid"), 'ready|0',
			"ntask.citus_direct $setting: and leased nothing");
	}
}

# ---------------------------------------------------------------------
# Part 2: the move interlock
# ---------------------------------------------------------------------

sub drop_orphans { return NtaskCitus::drop_orphans($c); }

# $kind: 'call_first' (the call holds the lock, the move waits) or
# 'move_first' (the move is stopped after its copy, the call comes then)
sub move_race
{
	my ($mode, $kind, $call) = @_;
	my $tag = "$mode/$kind/$call";
	drop_orphans();
	my ($id, $tok);
	if ($call eq 'claim')
	{
		# a ready task, the only one of queue dm (the claim takes it)
		my $k = key_in('dm', $shard, 'm');
		$id = $q->("SELECT task_id FROM ntask_enqueue('dm', '$k', '{}')");
		$tok = 0;	# none yet: the claim's answer says
	}
	else
	{
		my ($t1) = claimed($shard, 1);
		($id, $tok) = split /:/, $t1;
	}
	my ($shardid, $src, $dst) = placement($shard);
	my %call_sql = (
		heartbeat => "SELECT ntask_heartbeat($id, $tok, lease => '7 hours')::text",
		transition => "SELECT result || ',' || state FROM ntask_transition($id, $tok, 'succeeded', result => '{\"m\": 1}')",
		claim => "SELECT task_id || ',' || token || ',' || attempt FROM ntask_claim_on(${shard}::smallint, 'dm', 'mv', 1)");
	my %likes = (heartbeat => '%ntask\_heartbeat(%', transition => '%ntask\_transition(%',
		claim => '%ntask\_claim\_on(%');
	my $call_sql = $call_sql{$call};
	my $like = $likes{$call};
	# the call takes its metadata lock, then waits for the task row; a
	# claim's pick (SKIP LOCKED) would pass a locked row by: it waits for
	# the shard relation instead
	my ($rows, $err, $move_waited, $off) = race_move($c, src => $src, dst => $dst,
		shardid => $shardid, mode => $mode, kind => $kind, tag => $tag,
		call => $call_sql, like => $like, row => $call eq 'claim' ? undef : $id);
	die "$tag: $err" if $err ne '';
	my $answer = $rows->[0][0];
	my @p = paths($src, $off);

	is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port, "$tag: the shard moved");
	ok($move_waited, "$tag: the move waited for the call") if $kind eq 'call_first';
	my $expect_path = ($kind eq 'move_first' && $mode eq 'block_writes')
	  ? "routed path for shard $shard: the shard's placement is not on this node"
	  : "direct path for shard $shard";
	is($p[-1], $expect_path, "$tag: the call's path") or diag(join("\n", @p));
	# the write is on the new placement (read through the coordinator)
	if ($call eq 'claim')
	{
		my ($cid, $ctok, $catt) = split /,/, $answer // ',,';
		is("$cid,$catt", "$id,1", "$tag: the claim got the task, its first attempt");
		is($q->("SELECT state || ',' || token || ',' || attempts || ',' || lease_owner FROM ntask.task WHERE task_id = $id"),
			"leased,$ctok,1,mv", "$tag: the new placement has the lease and its token");
		is($q->("SELECT result FROM ntask_transition($id, $ctok, 'succeeded')"), 'applied', "$tag: the holder then finishes");
		$tok = $ctok;
		if ($kind eq 'move_first' && $mode eq 'block_writes')
		{
			is($src->safe_psql('postgres', "SELECT state || ',' || token FROM ntask.task_$shardid WHERE task_id = $id"),
				'ready,0', "$tag: the orphan's row is as the move left it");
		}
	}
	elsif ($call eq 'heartbeat')
	{
		isnt($answer, undef, "$tag: the heartbeat extended the lease");
		is($q->("SELECT lease_until = '$answer' AND lease_until > now() + interval '6 hours' FROM ntask.task WHERE task_id = $id"),
			't', "$tag: the new placement has the new lease");
		is($q->("SELECT ntask_transition($id, $tok, 'succeeded')"), '(applied,succeeded,)', "$tag: the holder then finishes");
	}
	else
	{
		is($answer, 'applied,succeeded', "$tag: the transition applied");
		is($q->("SELECT state || ',' || result::text FROM ntask.task WHERE task_id = $id"), 'succeeded,{"m": 1}',
			"$tag: the new placement has it");
	}
	is($q->("SELECT count(*) || ',' || min(token) FROM ntask.attempt_all WHERE task_id = $id"), "1,$tok",
		"$tag: its attempt (attempt_all) is on the new placement");
	# the orphan: only what was written before the move copied it
	my $orphan = $src->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$shardid WHERE task_id = $id AND state = 'succeeded'");
	if ($kind eq 'move_first' && $mode eq 'block_writes')
	{
		is($orphan, '0', "$tag: nothing was written into the orphan");
		is($src->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$shardid WHERE task_id = $id AND lease_until > now() + interval '6 hours'"),
			'0', "$tag: not the lease either");
	}
	return;
}

$q->("SELECT count(*) FROM ntask_queue_set('dm', lease => '10 minutes')");
for my $mode ('block_writes', 'force_logical')
{
	move_race($mode, 'call_first', 'claim');
	move_race($mode, 'move_first', 'claim');
	move_race($mode, 'call_first', 'transition');
	move_race($mode, 'call_first', 'heartbeat');
	move_race($mode, 'move_first', 'heartbeat');
	move_race($mode, 'move_first', 'transition');
}

# the node that now holds the shard runs it directly; the one that held it not
{
	my ($t1) = claimed($shard, 1);
	my ($id, $tok) = split /:/, $t1;
	my (undef, $now) = placement($shard);
	my ($old) = grep { $_ != $now } @workers;
	my $o1 = -s $now->logfile;
	my $o2 = -s $old->logfile;
	is($old->safe_psql('postgres', "SELECT ntask_heartbeat($id, $tok) IS NOT NULL"), 't', 'a heartbeat on the node the shard left');
	is($now->safe_psql('postgres', "SELECT result FROM ntask_transition($id, $tok, 'succeeded')"), 'applied', 'a transition on its node');
	is(join(',', paths($old, $o2)), "routed path for shard $shard: the shard's placement is not on this node", 'the old node routes');
	is(join(',', paths($now, $o1)), "direct path for shard $shard", 'the new node runs it directly');
}

# a split of the shard value's shard (both halves on its node): a backend
# that locked the old shard reads the new one after the split's
# invalidation, locks it and runs there
{
	drop_orphans();
	my ($t1) = claimed($shard, 1);
	my ($id, $tok) = split /:/, $t1;
	my ($sid, $node) = placement($shard);
	# one backend before and after the split: it knows the old shard
	my $s = connect_to($node);
	is($s->selectrow_array("SELECT ntask_heartbeat($id, $tok) IS NOT NULL"), 1, 'a heartbeat before the split');
	my $nodeid = $q->("SELECT nodeid FROM pg_dist_node WHERE nodeport = " . $node->port);
	my ($lo, $hi) = split /\|/, $q->("SELECT shardminvalue, shardmaxvalue FROM pg_dist_shard WHERE shardid = $sid");
	my $mid = int(($lo + $hi) / 2);
	$q->("SELECT citus_split_shard_by_split_points($sid, ARRAY['$mid'], ARRAY[$nodeid, $nodeid], 'block_writes')");
	my ($nsid) = placement($shard);
	isnt($nsid, $sid, 'the split gave the shard value a new shard');
	my $off = -s $node->logfile;
	is($s->selectrow_array("SELECT ntask_heartbeat($id, $tok, lease => '5 hours') IS NOT NULL"), 1, 'a heartbeat after the split');
	is($s->selectrow_array("SELECT result FROM ntask_transition($id, $tok, 'succeeded')"), 'applied', 'a transition after it');
	$s->disconnect;
	is(join(',', paths($node, $off)), "direct path for shard $shard,direct path for shard $shard",
		'the backend that knew the old shard runs them directly on the new one');
	is($q->("SELECT state FROM ntask.task WHERE task_id = $id"), 'succeeded', 'the task finished on the new shard');
	is($node->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$nsid WHERE task_id = $id AND state = 'succeeded'"),
		'1', 'in the new shard relation');
}

# ---------------------------------------------------------------------
# Part 3: the enqueue and the release on the direct path (docs/scaling.md
# "The enqueue and the release on the direct path")
# ---------------------------------------------------------------------

# runs enqueues and releases on the worker node of $shard (and delegated
# from the coordinator) with ntask.citus_direct = $setting; returns their
# answers and the rows they left, without ids, keys, tokens and times, and
# the path lines of each statement
sub enq_rel_scenario
{
	my ($setting) = @_;
	my (undef, $wn) = placement($shard);
	$wn->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = $setting; SELECT pg_reload_conf()");
	wait_for('the setting', sub { $wn->safe_psql('postgres', 'SHOW ntask.citus_direct') eq $setting });
	my $eq = "eq_$setting";
	$q->("SELECT count(*) FROM ntask_queue_set('$eq', lease => '10 minutes', max_attempts => 4)");
	my (@out, @paths);
	my $run = sub {
		my ($node, $sql) = @_;
		my $off = -s $wn->logfile;
		my ($rc, $stdout, $stderr) = $node->psql('postgres', $sql);
		# an error without the names and numbers that differ between the runs
		push @out, $rc == 0 ? $stdout : ((($stderr =~ /(ERROR: .*)/)[0] // $stderr)
		  =~ s/$eq/eq/gr =~ s/"[eo]\d+"/"key"/gr =~ s/\d+ was never issued for task \d+/was never issued/r);
		push @paths, path_summary(paths($wn, $off));
		return $stdout;
	};
	my ($k1, $k2, $k3, $k4, $k5, $kp, $kc) = map { key_in($eq, $shard, 'e') } 1 .. 7;
	my $pk = key_in($eq, $shard, 'p');
	# a key of a shard value on the other worker node
	my $wn_port = $wn->port;
	my $far = $q->(qq{SELECT min(m.shard) FROM ntask.shard_map m WHERE (SELECT nodeport FROM pg_dist_shard_placement
		WHERE shardid = get_shard_id_for_distribution_column('ntask.task', m.shard)) <> $wn_port});
	my $ko = key_in($eq, $far, 'o');
	# a fresh key, the same key and payload again, the key with another payload
	my $i1 = (split /\|/, $run->($wn, "SELECT task_id, created, state, outcome IS NULL FROM ntask_enqueue('$eq', '$k1', '{\"a\": 1}')"))[0];
	$out[-1] =~ s/^\d+\|//;
	$run->($wn, "SELECT created, state, task_id = $i1 FROM ntask_enqueue('$eq', '$k1', '{\"a\": 1}')");
	$run->($wn, "SELECT created FROM ntask_enqueue('$eq', '$k1', '{\"a\": 2}')");
	# run_at in the future, a priority, a traceparent
	$run->($wn, "SELECT created, state FROM ntask_enqueue('$eq', '$k2', '{}', run_at => now() + interval '1 hour', priority => 5, traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')");
	# a partition key (the shard is the partition key's)
	$run->($wn, "SELECT created, state FROM ntask_enqueue('$eq', 'pk_$setting', '{\"b\": 1}', partition_key => '$pk')");
	# the _on form on the worker node, and delegated from the coordinator
	$run->($wn, "SELECT created, state FROM ntask_enqueue_on(${shard}::smallint, '$eq', '$k3', '{}')");
	$run->($co, "SELECT created, state FROM ntask_enqueue_on(${shard}::smallint, '$eq', '$k4', '{}')");
	$run->($co, "SELECT created, state FROM ntask_enqueue_on(${shard}::smallint, '$eq', '$k4', '{}')");
	# an unknown queue (a key of it in the shard)
	my $kx = key_in('no_such_q', $shard, 'x');
	$run->($wn, "SELECT created FROM ntask_enqueue('no_such_q', '$kx', '{}')");
	# routed: with parents, in a block, a key of another node's shard
	$run->($wn, "SELECT created, state FROM ntask_enqueue('$eq', '$kp', '{}')");
	$run->($wn, "SELECT created, state FROM ntask_enqueue('$eq', '$kc', '{}', depends_on => ARRAY['$kp'])");
	$run->($wn, "BEGIN; SELECT created, state FROM ntask_enqueue('$eq', '$k5', '{}'); COMMIT;");
	$run->($wn, "SELECT created, state FROM ntask_enqueue('$eq', '$ko', '{}')");
	# ntask_enqueue_many: keys of one shard (one repeated), again with one
	# new key, one with another payload, keys of two shards, delegated _on
	my $em = "${eq}_m";
	$q->("SELECT count(*) FROM ntask_queue_set('$em', lease => '10 minutes')");
	my ($m1, $m2, $m3, $m4, $m5) = map { key_in($em, $shard, 'e') } 1 .. 5;
	my $mo = key_in($em, $far, 'o');
	$run->($wn, "SELECT created, state FROM ntask_enqueue_many('$em', ARRAY['$m1', '$m2', '$m1', '$m3'], ARRAY['{}', '{}', '{}', '{\"x\": 1}']::jsonb[])");
	$run->($wn, "SELECT created, state FROM ntask_enqueue_many('$em', ARRAY['$m2', '$m4'], ARRAY['{}', '{}']::jsonb[], run_at => now() + interval '1 hour', priority => 3)");
	$run->($wn, "SELECT created FROM ntask_enqueue_many('$em', ARRAY['$m2'], ARRAY['{\"y\": 2}']::jsonb[])");
	$run->($wn, "SELECT created, state FROM ntask_enqueue_many('$em', ARRAY['$m5', '$mo'], ARRAY['{}', '{}']::jsonb[])");
	$run->($co, "SELECT created, state FROM ntask_enqueue_many_on(${shard}::smallint, '$em', ARRAY['$m5', 'pm_$setting'], ARRAY['{}', '{}']::jsonb[], partition_keys => ARRAY[NULL, '$m1'])");
	push @out, $q->(qq{SELECT string_agg(concat_ws('|', state, priority, partition_key IS NOT NULL, run_at > now() + interval '30 minutes',
			payload, (task_id >> 48) = shard, ((task_id & ((1::bigint << 48) - 1)) >> 40)), ';' ORDER BY task_id)
		FROM ntask.task WHERE queue = '$em'});
	# ids: the shard in the high bits, the sequence of the node that drew it
	push @out, $q->(qq{SELECT string_agg(concat_ws('|', (task_id >> 48) = shard,
			((task_id & ((1::bigint << 48) - 1)) >> 40)), ';' ORDER BY task_id)
		FROM ntask.task WHERE queue = '$eq' AND task_key IN ('$k1', '$k3', '$k4')});

	# the release: claim five of them (routed, through the coordinator)
	my %tok;
	wait_for('the claims', sub {
		for my $r (split /\n/, $q->("SELECT task_id || ':' || token FROM ntask_claim_on(${shard}::smallint, '$eq', 'w', 10)"))
		{
			my ($i, $t) = split /:/, $r;
			$tok{$i} = $t;
		}
		return scalar(keys %tok) >= 5;
	}, 60);
	my @r = sort { $a <=> $b } keys %tok;
	my ($r1, $r2, $r3, $r4, $r5) = @r;
	$run->($wn, "SELECT ntask_release($r1, $tok{$r1})");
	$run->($wn, "SELECT ntask_release($r1, $tok{$r1})");
	$run->($wn, "SELECT ntask_release($r2, $tok{$r2}, delay => '1 hour')");
	$run->($wn, "SELECT ntask_invoked($r3, $tok{$r3})");
	$run->($wn, "SELECT ntask_release($r3, $tok{$r3})");
	$run->($wn, "SELECT result FROM ntask_transition($r4, $tok{$r4}, 'succeeded', result => '{\"r\": 4}')");
	$run->($wn, "SELECT ntask_release($r4, $tok{$r4})");
	$run->($wn, "SELECT ntask_release($r4, $tok{$r4} + 1000)");
	$run->($wn, "SELECT ntask_release_on(${shard}::smallint, $r5, $tok{$r5})");
	$run->($co, "SELECT ntask_release_on(${shard}::smallint, $r5, $tok{$r5})");
	# a duplicate of the finished task returns its outcome and result
	my ($k_r4, $p_r4) = split /\|/, $q->("SELECT task_key || '|' || payload FROM ntask.task WHERE task_id = $r4");
	$run->($wn, "SELECT created, state, outcome, result FROM ntask_enqueue('$eq', '$k_r4', '$p_r4')");

	push @out, $q->(qq{SELECT string_agg(concat_ws('|', state, attempts, max_attempts, unknown_attempts, priority,
			partition_key IS NOT NULL, run_at > now() + interval '30 minutes', deadline IS NULL, payload, outcome,
			result, digest_version, ordered, traceparent, last_error_class, last_error_stage, enqueued_by),
			';' ORDER BY task_id) FROM ntask.task WHERE queue = '$eq'});
	push @out, $q->(qq{SELECT string_agg(concat_ws('|', a.attempt, a.result, a.requested, a.outcome_known,
			a.invoked_at IS NOT NULL, a.retry_at > now() + interval '30 minutes', a.worker), ';' ORDER BY a.task_id, a.token)
		FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = '$eq'});
	push @out, $q->("SELECT count(*) FROM ntask.task_dep d JOIN ntask.task t ON t.task_id = d.task_id AND t.shard = d.shard WHERE t.queue = '$eq'");
	return (join("\n", @out), \@paths);
}

{
	my ($routed, $rp) = enq_rel_scenario('off');
	my ($direct, $dp) = enq_rel_scenario('on');
	is($direct, $routed, 'enqueue and release: the direct and the routed path give the same answers and rows');
	note("enqueue and release answers:\n$direct");
	like($direct, qr/^t\|ready\|t\nf\|ready\|t\nERROR: .*with a different payload\nt\|\w+\nt\|ready\nt\|ready\nt\|ready\nf\|ready\nERROR: .*no_such_q.*\nt\|ready\nt\|waiting\nt\|ready\nt\|ready\nt\|ready\nt\|ready\nf\|ready\nt\|ready\nf\|ready\nt\|ready\nERROR: .*with a different payload\nt\|ready\nt\|ready\nf\|ready\nt\|ready\n/,
		'enqueue: fresh, duplicate, another payload, run_at, partition key, _on, delegated twice, unknown queue, parents, in a block; enqueue_many');
	like($direct, qr/\napplied\nduplicate\napplied\napplied\napplied\napplied\nconflict\nERROR: .*was never issued.*\napplied\nduplicate\nf\|succeeded\|\w+\|\{"r": 4\}\n/,
		'release: applied, duplicate, delayed, invoked, after a transition, a token never issued, _on, delegated; a duplicate enqueue of the finished task');
	my (undef, $wn) = placement($shard);
	my $g = $wn->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group');
	like($direct, qr/\nt\|$g;t\|$g;t\|$g\n/, "enqueue: each id has its shard in the high bits and the worker node's range (group $g)");
	my @want_on = (
		('direct path for shard') x 8,	# fresh .. the delegated duplicate
		'direct path for shard',	# the unknown queue: direct, then 42704
		'direct path for shard',	# the parent
		'routed path for shard: the enqueue has parents (depends_on)',
		'routed path for shard: in a transaction block',
		"routed path for shard: the shard's placement is not on this node",
		('direct path for shard') x 3,	# enqueue_many of one shard's keys
		"routed path for shard: the shard's placement is not on this node",	# keys of two shards, one the other node's (t/044)
		'direct path for shard',	# enqueue_many_on, delegated
		('direct path for shard') x 10,	# the releases (and an invoked, a transition)
		'direct path for shard');	# the duplicate of the finished task
	# the delegated calls' lines: Citus' backend on the worker node logs them
	is(join("\n", @$dp), join("\n", @want_on), 'enqueue and release: the path of each statement with ntask.citus_direct on')
	  or diag(join("\n", @$dp));
	is(join("\n", @$rp), join("\n", map { 'routed path for shard: ntask.citus_direct is off' } @want_on),
		'enqueue and release: all routed with it off') or diag(join("\n", @$rp));
}

# a waiting claim on the worker node is woken by a direct enqueue there
# (the wake-up is this node's shared memory, at the enqueue's commit)
{
	$q->("SELECT count(*) FROM ntask_queue_set('ew', lease => '10 minutes')");
	my $k = key_in('ew', $shard, 'w');
	my (undef, $wn) = placement($shard);
	my $waiter = connect_to($wn);
	my $t0 = time;
	my $sth = $waiter->prepare("SELECT task_id FROM ntask_claim_on(${shard}::smallint, 'ew', 'w', 1, wait => '60 seconds')",
		{ pg_async => DBD::Pg::PG_ASYNC() });
	$sth->execute;
	# in its wait (wait.c: WaitLatch, PG_WAIT_EXTENSION), its pick empty
	wait_for('the claim waits', sub {
		$wn->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%wait => ''60 seconds''%'
			AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()}) > 0 });
	my $off = -s $wn->logfile;
	my $id = $wn->safe_psql('postgres', "SELECT task_id FROM ntask_enqueue('ew', '$k', '{}')");
	$sth->pg_result;
	# (the waiting claim logs its own path at each look, t/043: not counted)
	my $wpid = $waiter->{pg_pid};
	my @ep = slurp_file($wn->logfile, $off) =~ /^(?![^\n]*\[$wpid\])[^\n]*ntask: (direct path for shard \d+|routed path for shard \d+: [^\n]*)$/mg;
	is(join(',', @ep), "direct path for shard $shard", 'wake-up: the enqueue ran directly');
	my ($got) = $sth->fetchrow_array;
	$sth->finish;
	$waiter->disconnect;
	is($got, $id, 'wake-up: the waiting claim on that node got the task');
	ok(time - $t0 < 45, 'wake-up: before its wait ended');

	# a queue with notify: a listener on that node gets NOTIFY ntask_<queue>
	# at the commit of a direct enqueue
	$q->("SELECT count(*) FROM ntask_queue_set('en', notify => true)");
	my $kn2 = key_in('en', $shard, 'w');
	my $listener = connect_to($wn);
	$listener->do('LISTEN ntask_en');
	$off = -s $wn->logfile;
	$wn->safe_psql('postgres', "SELECT task_id FROM ntask_enqueue('en', '$kn2', '{}')");
	is(join(',', paths($wn, $off)), "direct path for shard $shard", 'notify: the enqueue ran directly');
	my $note;
	wait_for('the notification', sub {
		$listener->do('SELECT 1');
		$note = $listener->pg_notifies;
		return defined $note;
	}, 60);
	is($note->[0], 'ntask_en', 'notify: the listener on that node got NOTIFY ntask_en');
	$listener->disconnect;
}

# the enqueue and the release racing a move (both transfer modes), as
# move_race does for the transition: (a) the call holds the group's
# metadata lock, stopped on the shard relation (a session holds LOCK
# TABLE ... IN EXCLUSIVE MODE: the insert or the update waits for it): the
# move waits for the call, its write reaches the new placement; (b)
# block_writes, the move stopped after its copy: the call waits for it and
# runs routed, nothing written into the orphan; (c) force_logical during
# the catch-up: the direct write is carried over.  Every time: one task of
# the key, no loss, no duplicate.
my $enq_races = 0;
sub enq_move_race
{
	my ($mode, $kind, $call) = @_;
	my $tag = "$mode/$kind/$call";
	drop_orphans();
	my ($shardid, $src, $dst) = placement($shard);
	my ($key, $id, $tok) = (key_in('dm', $shard, 'n'));
	if ($call eq 'release')
	{
		# a queue of its own: the claim takes this task
		my $rq = 'rl' . ++$enq_races;
		$q->("SELECT count(*) FROM ntask_queue_set('$rq', lease => '10 minutes')");
		$key = key_in($rq, $shard, 'n');
		$id = $q->("SELECT task_id FROM ntask_enqueue('$rq', '$key', '{}')");
		wait_for("$tag: the claim", sub {
			$tok = $q->("SELECT token FROM ntask_claim_on(${shard}::smallint, '$rq', 'rl', 1)");
			return $tok ne '';
		}, 60);
	}
	my $call_sql = $call eq 'enqueue'
	  ? "SELECT task_id || ',' || created || ',' || state FROM ntask_enqueue('dm', '$key', '{\"mv\": 1}')"
	  : "SELECT ntask_release($id, $tok)";
	my $like = $call eq 'enqueue' ? '%ntask\_enqueue(%' : '%ntask\_release(%';
	# the call takes its metadata lock, then waits for the shard relation
	# (a session holds LOCK TABLE ... IN EXCLUSIVE MODE)
	my ($rows, $err, $move_waited, $off) = race_move($c, src => $src, dst => $dst,
		shardid => $shardid, mode => $mode, kind => $kind, tag => $tag,
		call => $call_sql, like => $like);
	die "$tag: $err" if $err ne '';
	my $answer = $rows->[0][0];
	my @p = paths($src, $off);

	is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port, "$tag: the shard moved");
	ok($move_waited, "$tag: the move waited for the call") if $kind eq 'call_first';
	my $routed = $kind eq 'move_first' && $mode eq 'block_writes';
	is($p[-1], $routed ? "routed path for shard $shard: the shard's placement is not on this node" : "direct path for shard $shard",
		"$tag: the call's path") or diag(join("\n", @p));
	if ($call eq 'enqueue')
	{
		my ($nid, $created, $state) = split /,/, $answer // ',,';
		is("$created,$state", 'true,ready', "$tag: the enqueue created the task");
		# one task of the key on the new placement, the one the call answered
		is($q->("SELECT count(*) || ',' || min(task_id) || ',' || min(payload::text) FROM ntask.task WHERE queue = 'dm' AND task_key = '$key'"),
			"1,$nid," . '{"mv": 1}', "$tag: the new placement has it, once");
		is($dst->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$shardid WHERE task_key = '$key'"), '1',
			"$tag: in the shard relation on the new node");
		# and a duplicate enqueue finds it (nothing lost)
		is($q->("SELECT created::text || ',' || task_id FROM ntask_enqueue('dm', '$key', '{\"mv\": 1}')"), "false,$nid",
			"$tag: a duplicate enqueue finds it");
		is($src->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$shardid WHERE task_key = '$key'"), '0',
			"$tag: nothing was written into the orphan") if $routed;
		$id = $nid;
	}
	else
	{
		is($answer, 'applied', "$tag: the release applied");
		is($q->("SELECT state || ',' || attempts || ',' || (lease_owner IS NULL) FROM ntask.task WHERE task_id = $id"),
			'ready,1,true', "$tag: the new placement has the task ready again");
		is($q->("SELECT count(*) || ',' || min(result) || ',' || min(token) FROM ntask.attempt_all WHERE task_id = $id"),
			"1,released,$tok", "$tag: its ledger row once, on the new placement");
		is($src->safe_psql('postgres', "SELECT state || ',' || token FROM ntask.task_$shardid WHERE task_id = $id"),
			"leased,$tok", "$tag: the orphan's row is as the move left it") if $routed;
	}
	# the node the shard left routes an enqueue, the orphan unchanged
	my $k2 = key_in('dm', $shard, 'n');
	$off = -s $src->logfile;
	my $before = $src->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$shardid");
	is($src->safe_psql('postgres', "SELECT created FROM ntask_enqueue('dm', '$k2', '{}')"), 't', "$tag: an enqueue on the node the shard left");
	is(join(',', paths($src, $off)), "routed path for shard $shard: the shard's placement is not on this node", "$tag: it runs routed");
	is($src->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$shardid"), $before, "$tag: the orphan is unchanged");
	is($q->("SELECT count(*) FROM ntask.task WHERE queue = 'dm' AND task_key = '$k2'"), '1', "$tag: the task is on the new placement");
	return;
}

for my $mode ('block_writes', 'force_logical')
{
	enq_move_race($mode, 'call_first', 'enqueue');
	enq_move_race($mode, 'move_first', 'enqueue');
	enq_move_race($mode, 'call_first', 'release');
	enq_move_race($mode, 'move_first', 'release');
}

# ---------------------------------------------------------------------
# Part 4: a producer without rights on the direct path (docs/scaling.md
# "The enqueue and the release on the direct path")
# ---------------------------------------------------------------------
# A role with ntask_producer but not the queue's producer_role enqueues
# (ntask_enqueue, ntask_enqueue_many, ntask_enqueue_on on the worker node
# of the shard, and delegated from the coordinator: ntask_enqueue_on,
# ntask_enqueue_many_on), a new key and an existing one; a role with
# ntask_worker but not the queue's worker_role releases a leased task
# (ntask_release, its _on form there and delegated, a token never
# issued).  With ntask.citus_direct on, off, and on a plain install: the
# same SQLSTATE, message and hint every time, nothing written; the
# producer_role's and the worker_role's own calls succeed, directly.  The
# roles log in (a delegated call runs on the worker node as its caller).
{
	$q->(q{CREATE ROLE pr_a LOGIN; CREATE ROLE pr_b LOGIN; CREATE ROLE pw_a LOGIN; CREATE ROLE pw_b LOGIN;
		GRANT ntask_producer TO pr_a, pr_b; GRANT ntask_worker TO pw_a, pw_b});
	for my $n (@workers)
	{
		wait_for('the roles on ' . $n->name, sub {
			$n->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname IN ('pr_a', 'pr_b', 'pw_a', 'pw_b')
				AND rolcanlogin}) == 4 });
	}
	my $plain = PostgreSQL::Test::Cluster->new('rights_plain');
	$plain->init;
	$plain->append_conf('postgresql.conf', "shared_preload_libraries = 'ntask'\nntask.worker = off\n");
	$plain->start;
	$plain->safe_psql('postgres', q{CREATE EXTENSION ntask;
		CREATE ROLE pr_a LOGIN; CREATE ROLE pr_b LOGIN; CREATE ROLE pw_a LOGIN; CREATE ROLE pw_b LOGIN;
		GRANT ntask_producer TO pr_a, pr_b; GRANT ntask_worker TO pw_a, pw_b});
	my (undef, $wn) = placement($shard);
	# a key of the shard that exists
	my $ex = key_in('pq', $shard, 'ex');
	for my $n ($co, $plain)
	{
		$n->safe_psql('postgres', qq{SELECT count(*) FROM ntask_queue_set('pq', lease => '10 minutes');
			SELECT ntask_queue_set_roles('pq', 'pr_a', NULL);
			SELECT task_id FROM ntask_enqueue('pq', '$ex', '{"e": 1}')});
	}

	# the calls of one system ('on', 'off': the cluster with
	# ntask.citus_direct so on the worker nodes; 'plain'): their answers
	# (an error as its SQLSTATE, message and hint, a task id as N), the
	# rows they left, and the path lines of each statement
	my $rights_run = sub {
		my ($sys) = @_;
		my ($node, $cn, $sv) = $sys eq 'plain' ? ($plain, $plain, 0) : ($wn, $co, $shard);
		my $cq = $sys eq 'plain' ? sub { $plain->safe_psql('postgres', $_[0]) } : $q;
		if ($sys ne 'plain')
		{
			for my $n (@workers)
			{
				$n->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = $sys; SELECT pg_reload_conf()");
				wait_for('the setting', sub { $n->safe_psql('postgres', 'SHOW ntask.citus_direct') eq $sys });
			}
		}
		my %dbh;
		my $as = sub {
			my ($n, $user) = @_;
			return $dbh{ $n->name . $user } //= DBI->connect('dbi:Pg:dbname=postgres;host=' . $n->host . ';port=' . $n->port,
				$user, '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 }) // die "connect as $user: " . DBI->errstr;
		};
		my (@out, @paths);
		my $run = sub {
			my ($n, $user, $sql) = @_;
			my $off = $sys eq 'plain' ? 0 : -s $wn->logfile;
			my $d = $as->($n, $user);
			my $rows = $d->selectall_arrayref($sql);
			my $a;
			if ($rows)
			{
				$a = join(';', map { join('|', map { $_ // '' } @$_) } @$rows);
			}
			else
			{
				my $e = $d->errstr;
				my ($m) = $e =~ /ERROR:\s+([^\n]*)/;
				my ($h) = $e =~ /HINT:\s+([^\n]*)/;
				$a = $d->state . ' ' . ($m // $e) . ($h ? " HINT: $h" : '');
			}
			push @out, $a =~ s/task \d+/task N/gr;
			push @paths, path_summary(paths($wn, $off)) if $sys ne 'plain';
			return $rows;
		};
		my $key = sub { key_in('pq', $shard, "r${sys}_") };
		my @refused = map { $key->() } 1 .. 8;
		my @taken = map { $key->() } 1 .. 6;
		my ($k1, $k2, $k3, $k4, $k5, $k6, $k7, $k8) = @refused;
		my ($t1, $t2, $t3, $t4, $t5, $t6) = @taken;
		# without the producer_role: a new key, an existing one (the same
		# error: it learns nothing), a batch of new keys (one repeated), a
		# batch with the existing key, _on there, delegated _on and _many_on
		$run->($node, 'pr_b', "SELECT created FROM ntask_enqueue('pq', '$k1', '{}')");
		$run->($node, 'pr_b', qq{SELECT created FROM ntask_enqueue('pq', '$ex', '{"e": 1}')});
		$run->($node, 'pr_b', "SELECT created FROM ntask_enqueue_many('pq', ARRAY['$k2', '$k3', '$k2'], ARRAY['{}', '{}', '{}']::jsonb[])");
		$run->($node, 'pr_b', "SELECT created FROM ntask_enqueue_many('pq', ARRAY['$ex', '$k4'], ARRAY['{\"e\": 1}', '{}']::jsonb[])");
		$run->($node, 'pr_b', "SELECT created FROM ntask_enqueue_on(${sv}::smallint, 'pq', '$k5', '{}')");
		$run->($cn, 'pr_b', "SELECT created FROM ntask_enqueue_on(${sv}::smallint, 'pq', '$k6', '{}')");
		$run->($cn, 'pr_b', "SELECT created FROM ntask_enqueue_many_on(${sv}::smallint, 'pq', ARRAY['$k7', '$k8'], ARRAY['{}', '{}']::jsonb[])");
		# the producer_role's own calls
		$run->($node, 'pr_a', "SELECT created, state FROM ntask_enqueue('pq', '$t1', '{}')");
		$run->($node, 'pr_a', "SELECT created, state FROM ntask_enqueue_many('pq', ARRAY['$t2', '$t3', '$t2'], ARRAY['{}', '{}', '{}']::jsonb[])");
		$run->($node, 'pr_a', "SELECT created, state FROM ntask_enqueue_on(${sv}::smallint, 'pq', '$t4', '{}')");
		$run->($cn, 'pr_a', "SELECT created, state FROM ntask_enqueue_on(${sv}::smallint, 'pq', '$t5', '{}')");
		$run->($cn, 'pr_a', "SELECT created, state FROM ntask_enqueue_many_on(${sv}::smallint, 'pq', ARRAY['$t6', '$ex'], ARRAY['{}', '{\"e\": 1}']::jsonb[])");
		$run->($node, 'pr_a', qq{SELECT created, state FROM ntask_enqueue('pq', '$ex', '{"e": 1}')});
		# nothing of the refused calls written, the existing key unchanged
		push @out, $cq->("SELECT count(*) FROM ntask.task WHERE queue = 'pq' AND task_key IN ("
			  . join(', ', map { "'$_'" } @refused) . ')');
		push @out, $cq->("SELECT count(*) || '|' || min(state) || '|' || min(payload::text) || '|' || string_agg(DISTINCT enqueued_by::text, ',')
			FROM ntask.task WHERE queue = 'pq' AND task_key IN (" . join(', ', map { "'$_'" } @taken) . ')');
		push @out, $cq->(qq{SELECT count(*) || '|' || min(payload::text) FROM ntask.task WHERE queue = 'pq' AND task_key = '$ex'});

		# the release: a queue with a worker_role, two tasks leased
		my $rq = "pr_$sys";
		$cq->("SELECT count(*) FROM ntask_queue_set('$rq', lease => '10 minutes'); SELECT ntask_queue_set_roles('$rq', NULL, 'pw_a')");
		my @ids = map { $cq->("SELECT task_id FROM ntask_enqueue('$rq', '" . key_in($rq, $shard, 'l') . "', '{}')") } 1 .. 2;
		my %tok;
		wait_for("$sys: the claims of $rq", sub {
			for my $r (split /\n/, $cq->($sys eq 'plain' ? "SELECT task_id || ':' || token FROM ntask_claim('$rq', 'w', 10)"
				: "SELECT task_id || ':' || token FROM ntask_claim_on(${shard}::smallint, '$rq', 'w', 10)"))
			{
				my ($i, $t) = split /:/, $r;
				$tok{$i} = $t;
			}
			return !grep { !$tok{$_} } @ids;
		}, 60);
		my ($i1, $i2) = @ids;
		# without the worker_role: the release, _on there, delegated, a token never issued
		$run->($node, 'pw_b', "SELECT ntask_release($i1, $tok{$i1})");
		$run->($node, 'pw_b', "SELECT ntask_release_on(${sv}::smallint, $i1, $tok{$i1})");
		$run->($cn, 'pw_b', "SELECT ntask_release_on(${sv}::smallint, $i1, $tok{$i1})");
		$run->($node, 'pw_b', "SELECT ntask_release($i1, $tok{$i1} + 1000)");
		push @out, $cq->("SELECT state || '|' || (lease_owner IS NOT NULL) || '|' || token FROM ntask.task WHERE task_id = $i1")
		  =~ s/\|$tok{$i1}$/|its token/r;
		push @out, $cq->("SELECT count(*) || '|' || count(*) FILTER (WHERE ended_at IS NULL AND result IS NULL)
			FROM ntask.attempt_all WHERE task_id = $i1");
		# the worker_role's own releases, on the worker node and delegated
		$run->($node, 'pw_a', "SELECT ntask_release($i1, $tok{$i1})");
		$run->($cn, 'pw_a', "SELECT ntask_release_on(${sv}::smallint, $i2, $tok{$i2})");
		push @out, $cq->("SELECT string_agg(t.state || '|' || a.attempt || '|' || a.result, ';' ORDER BY t.task_id)
			FROM ntask.task t JOIN ntask.attempt_all a ON a.task_id = t.task_id AND a.shard = t.shard
			WHERE t.task_id IN ($i1, $i2)");
		$_->disconnect for values %dbh;
		return (join("\n", @out), \@paths);
	};

	my ($pl) = $rights_run->('plain');
	my ($off, $offp) = $rights_run->('off');
	my ($on, $onp) = $rights_run->('on');
	note("rights, the answers (direct):\n$on");
	is($on, $pl, 'rights: the direct path gives the answers and rows of a plain install');
	is($off, $pl, 'rights: the routed path gives the answers and rows of a plain install');
	my $deny_enq = qq{42501 ntask: permission denied to enqueue into queue "pq" HINT: The queue's producer_role must be granted to the role (ntask_queue_set_roles).};
	my $deny_task = q{42501 ntask: permission denied for task N HINT: The task's queue restricts its workers to its worker_role (ntask_queue_set_roles).};
	# (DBD::Pg gives a boolean as 1 or 0)
	is($on, join("\n", ($deny_enq) x 7, '1|ready', '1|ready;1|ready;0|ready', '1|ready', '1|ready', '1|ready;0|ready', '0|ready',
			'0', '6|ready|{}|pr_a', '1|{"e": 1}', ($deny_task) x 4, 'leased|true|its token', '1|1', 'applied', 'applied',
			'ready|1|released;ready|1|released'),
		'rights: without the producer_role every enqueue is refused (42501), the same for an existing key, nothing '
		  . 'written; without the worker_role every release (42501), the task still leased; the roles\' own calls apply');
	my @want = ('direct path for shard') x 19;
	is(join("\n", @$onp), join("\n", @want), 'rights: with ntask.citus_direct on every call took the direct path, '
		  . 'the refused ones too (delegated ones in Citus\' backend on the worker node)') or diag(join("\n", @$onp));
	is(join("\n", @$offp), join("\n", map { 'routed path for shard: ntask.citus_direct is off' } @want),
		'rights: with it off all routed') or diag(join("\n", @$offp));
	$plain->stop('fast');
}

NtaskCitus::stop($c);
done_testing();
