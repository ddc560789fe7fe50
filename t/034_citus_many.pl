
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/034_citus_many.pl: ntask_transition_many over several local shards on
# the direct path (issue 49; docs/scaling.md "Batches over several shards
# on the direct path"), opt-in with NTASK_CITUS=1 like t/023.
#
# A coordinator and two workers (8 shard values, 4 on each worker node),
# log_min_messages = debug1 on the workers: each call logs its path
# (src/shard.c, NtaskDirectBegin: one "direct path for shard N" line per
# shard value of the call, or one "routed path for shard N: why").
#
# Part 1: the same calls with ntask.citus_direct on and off on a worker
# node, and on a plain install: batches over 2 and 3 of the node's shard
# values (applied, duplicate, conflict, retry_wait, results, stale
# tokens, an unknown id, a token never issued, a task id twice, a NULL
# element), one in a transaction block, one with a task of the other
# node's shard.  The same answers (in input order), errors and rows
# (tasks and ledger) on all three; with the setting on, every batch of
# local shards takes the direct path, each shard value named.
#
# Part 2: a worker node's ntask_claim of 50 that walks two shard values,
# then its ntask_transition_many: both direct; a backend that keeps
# fewer groups (ntask.citus_direct_groups) than the batch's shard values
# runs it routed.  Parents in two shard values ended by one batch on the
# direct path release (or cancel) their children in each shard.  A
# caller without the queue's worker_role is refused on the direct path
# (42501 for the batch's first task), nothing written.
#
# Part 3: a move of one of the batch's shards racing the call, both
# transfer modes (NtaskCitus::race_move): the call holds the groups'
# metadata locks and the move waits for it (its writes reach the new
# placement); block_writes with the move stopped after its copy: the call
# waits for the move, then runs routed, nothing written into the orphan;
# force_logical during the catch-up: direct, carried over.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(connect_to wait_for paths race_move));

my $c = NtaskCitus::setup('many', moves => 1, orphans => 1, shard_count => 8);
my $co = $c->{coord};
my @workers = @{ $c->{workers} };
my $q = $c->{q};
NtaskCitus::debug_paths($c);

my $plain = NtaskCitus::plain_node('many_plain');

# the worker node that holds shard value $s now
sub node_of { return NtaskCitus::node_of($c, @_); }

my @shards = split /\n/, $q->(q{SELECT shard FROM ntask.shard_map ORDER BY shard});
my $w = $workers[0];
my ($lref, $rref) = NtaskCitus::local_shards($c, $w);
my @local = @$lref;
my @remote = @$rref;
cmp_ok(scalar(@local), '>=', 3, 'the worker node holds at least 3 shard values');
cmp_ok(scalar(@remote), '>=', 1, 'the other one at least 1');
my ($L0, $L1, $L2) = @local;
my $R0 = $remote[0];

# a key of $queue in shard value $s (ntask_shard), with prefix $p
sub key_in { return NtaskCitus::key_in($c, @_); }

sub set_direct { return NtaskCitus::set_direct($c, @_); }

# ---------------------------------------------------------------------
# Part 1: the same batches on the direct path, routed and on a plain install
# ---------------------------------------------------------------------

# the tasks of part 1: label => shard value (0 on the plain install)
my %label_shard = (
	a1 => $L0, a2 => $L0, a3 => $L0, a4 => $L0, a5 => $L0, a6 => $L0,
	b1 => $L1, b2 => $L1, b3 => $L1, b4 => $L1, b5 => $L1,
	c1 => $L2, c2 => $L2, r1 => $R0);
my @labels = sort keys %label_shard;

# one system's calls: 'on', 'off' (the cluster's worker node $w with
# ntask.citus_direct so) or 'plain'.  Returns the answers (ids as labels,
# errors as SQLSTATE and message with numbers as N), the rows, and the
# path lines of each call
sub scenario
{
	my ($sys) = @_;
	my $queue = "m_$sys";
	my ($node, $cq) = $sys eq 'plain'
	  ? ($plain, sub { $plain->safe_psql('postgres', $_[0]) })
	  : ($w, $q);
	set_direct($sys) if $sys ne 'plain';
	$cq->("SELECT count(*) FROM ntask_queue_set('$queue', lease => '10 minutes', max_attempts => 5)");
	my (%id, %label);
	for my $l (@labels)
	{
		my $k = $sys eq 'plain' ? "k$l" : key_in($queue, $label_shard{$l}, "k$l");
		$id{$l} = $cq->("SELECT task_id FROM ntask_enqueue('$queue', '$k', '{}')");
		$label{ $id{$l} } = $l;
	}
	my %tok;
	# claim every task (through the coordinator, or the plain node)
	my $claim_all = sub {
		my @want = @_;
		wait_for('the claims', sub {
			my @sql = $sys eq 'plain' ? ("SELECT task_id || ':' || token FROM ntask_claim('$queue', 'w', 50)")
			  : map { "SELECT task_id || ':' || token FROM ntask_claim_on(${_}::smallint, '$queue', 'w', 50)" }
			  sort { $a <=> $b } keys %{ { map { $label_shard{$_} => 1 } @want } };
			for my $sql (@sql)
			{
				for my $r (split /\n/, $cq->($sql))
				{
					my ($i, $t) = split /:/, $r;
					$tok{ $label{$i} } = $t if $label{$i};
				}
			}
			return !grep { !defined $tok{$_} } @want;
		}, 60);
	};
	$claim_all->(@labels);
	my (@out, @paths);
	my $dbh = DBI->connect('dbi:Pg:dbname=postgres;host=' . $node->host . ';port=' . $node->port,
		'', '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 });
	# ntask_transition_many of the labels (with their tokens, or "l:tok")
	my $many = sub {
		my ($what, $items, $to, $extra, %o) = @_;
		my (@i, @t);
		for my $it (@$items)
		{
			my ($l, $tk) = split /:/, $it;
			push @i, $l eq 'NULL' ? 'NULL' : $l eq 'unknown' ? ($sys eq 'plain' ? 987654321 : ($L0 << 48) + 987654321) : $id{$l};
			push @t, $tk // $tok{$l} // 1;
		}
		my $sql = "SELECT task_id, result, state, run_at IS NOT NULL FROM ntask_transition_many(ARRAY["
		  . join(',', @i) . ']::bigint[], ARRAY[' . join(',', @t) . "]::bigint[], '$to'" . ($extra // '') . ')';
		my $off = $sys eq 'plain' ? 0 : -s $w->logfile;
		my $rows;
		if ($o{block})
		{
			$dbh->begin_work;
			$rows = $dbh->selectall_arrayref($sql);
			$rows ? $dbh->commit : $dbh->rollback;
		}
		else
		{
			$rows = $dbh->selectall_arrayref($sql);
		}
		my $a;
		if ($rows)
		{
			$a = join(';', map { join('|', $label{ $_->[0] } // "?$_->[0]", @$_[1 .. 3]) } @$rows);
		}
		else
		{
			my ($m) = $dbh->errstr =~ /ERROR:\s+([^\n]*)/;
			$a = $dbh->state . ' ' . (($m // $dbh->errstr) =~ s/\d+/N/gr);
		}
		push @out, "$what: $a";
		push @paths, "$what: " . join(',', paths($w, $off)) if $sys ne 'plain';
	};

	$many->('three shards', [qw(b1 a1 c1 a2)], 'succeeded');
	$many->('again', [qw(b1 a1 c1 a2)], 'succeeded');
	$many->('conflict', [qw(a1 b1)], 'canceled');
	my %old = (a3 => $tok{a3}, b2 => $tok{b2});
	$many->('retry_wait', [qw(b2 a3)], 'retry_wait', ", error_class => 'transient', retry_at => now()");
	delete @tok{qw(a3 b2)};
	$claim_all->(qw(a3 b2));
	$many->('stale and new', ["a3:$old{a3}", 'b2'], 'succeeded');
	$many->('results', [qw(a4 b3)], 'succeeded', q{, results => ARRAY['{"x": 1}', NULL]::jsonb[]});
	$many->('an unknown id', [qw(b4 a5 unknown)], 'succeeded');
	$many->('a token never issued', ['b4', 'a5:' . ($tok{a5} + 256000)], 'succeeded');
	$many->('a task twice', [qw(a5 b4 a5)], 'succeeded');
	$many->('a NULL id', [qw(a5 NULL)], 'succeeded');
	$many->('in a block', [qw(b4 c2)], 'succeeded', '', block => 1);
	$many->('a shard of the other node', [qw(a5 r1)], 'repair_required', ", error_class => 'permanent'");
	$many->('two shards, canceled', [qw(b5 a6)], 'canceled');
	$dbh->disconnect;

	my $ids = join(', ', map { $id{$_} } @labels);
	my $lab = 'CASE task_id ' . join(' ', map { "WHEN $id{$_} THEN '$_'" } @labels) . ' END';
	push @out, $cq->("SELECT string_agg(concat_ws('|', $lab, state, attempts, result, outcome, reason, unknown_attempts, last_error_class), ';' ORDER BY $lab) FROM ntask.task WHERE task_id IN ($ids)");
	push @out, $cq->("SELECT string_agg(concat_ws('|', $lab, attempt, result, requested, error_class, outcome_known, outcome, worker), ';' ORDER BY $lab, attempt) FROM ntask.attempt_all WHERE task_id IN ($ids)");
	return (join("\n", @out), \@paths);
}

my ($off_out, $off_paths) = scenario('off');
my ($on_out, $on_paths) = scenario('on');
my ($plain_out) = scenario('plain');
is($on_out, $off_out, 'the direct path gives the answers, errors and rows of the routed path');
is($on_out, $plain_out, 'and of a plain install');
note("answers:\n$on_out");
like($on_out, qr/^three shards: b1\|applied\|succeeded\|0;a1\|applied\|succeeded\|0;c1\|applied\|succeeded\|0;a2\|applied\|succeeded\|0\nagain: b1\|duplicate/,
	'the answers are those of the calls, in input order');
like($on_out, qr/\nan unknown id: P0002 [^\n]*\na token never issued: NT003 [^\n]*\na task twice: 22023 [^\n]*\na NULL id: 22004 /,
	'the errors are those of the calls');
my $d = sub { my @s = sort { $a <=> $b } @_; return join(',', map { "direct path for shard $_" } @s) };
is(join("\n", @$on_paths), join("\n",
	'three shards: ' . $d->($L0, $L1, $L2),
	'again: ' . $d->($L0, $L1, $L2),
	'conflict: ' . $d->($L0, $L1),
	'retry_wait: ' . $d->($L0, $L1),
	'stale and new: ' . $d->($L0, $L1),
	'results: ' . $d->($L0, $L1),
	'an unknown id: ' . $d->($L0, $L1),
	'a token never issued: ' . $d->($L0, $L1),
	'a task twice: ',
	'a NULL id: ',
	'in a block: routed path for shard ' . ($L1 < $L2 ? $L1 : $L2) . ': in a transaction block',
	"a shard of the other node: routed path for shard $R0: the shard's placement is not on this node",
	'two shards, canceled: ' . $d->($L0, $L1)),
	'with ntask.citus_direct on, the batches of local shards take the direct path, each shard value named')
  or diag(join("\n", @$on_paths));
is(scalar(grep { /direct path/ } @$off_paths), 0, 'with it off, none direct');

# ---------------------------------------------------------------------
# Part 2: a worker node's claim of 50 over two shard values, then its
# batch; the groups' bound; parents in two shard values
# ---------------------------------------------------------------------
set_direct('on');
{
	$q->("SELECT count(*) FROM ntask_queue_set('cw', lease => '10 minutes')");
	my @e;
	for my $s ($L0, $L1)
	{
		push @e, $q->("SELECT task_id FROM ntask_enqueue('cw', '" . key_in('cw', $s, 'cw') . "', '{}')") for 1 .. 5;
	}
	my $off = -s $w->logfile;
	# the walk may take them in more than one call
	my %ct;
	wait_for('the worker node claims the ten', sub {
		for my $r (split /\n/, $w->safe_psql('postgres', q{SELECT task_id || ':' || token FROM ntask_claim('cw', 'w', 50)}))
		{
			my ($i, $t) = split /:/, $r;
			$ct{$i} = $t;
		}
		return keys(%ct) >= 10;
	}, 60);
	my $ids = join(',', sort { $a <=> $b } keys %ct);
	my $toks = join(',', map { $ct{$_} } sort { $a <=> $b } keys %ct);
	is($ids, join(',', sort { $a <=> $b } @e), "a worker node's claim of 50 takes the 10 tasks of two shard values");
	my @cp = paths($w, $off);
	is(scalar(grep { /^routed/ } @cp), 0, 'the claim runs directly') or diag(join("\n", @cp));
	$off = -s $w->logfile;
	is($w->safe_psql('postgres', "SELECT string_agg(result, ',') FROM ntask_transition_many(ARRAY[$ids]::bigint[], ARRAY[$toks]::bigint[], 'succeeded')"),
		join(',', ('applied') x 10), 'its ntask_transition_many applies them');
	is(join(',', paths($w, $off)), $d->($L0, $L1), 'directly, in both shard values');
	is($q->("SELECT string_agg(DISTINCT state, ',') || ',' || count(*) FROM ntask.task WHERE queue = 'cw'"), 'succeeded,10',
		'the ten tasks succeeded');

	# fewer groups kept than the batch's shard values: routed
	my @t;
	for my $s ($L0, $L1, $L2)
	{
		push @t, $q->("SELECT task_id FROM ntask_enqueue('cw', '" . key_in('cw', $s, 'cg') . "', '{}')");
	}
	my %tk;
	wait_for('the claims', sub {
		for my $s ($L0, $L1, $L2)
		{
			for my $r (split /\n/, $q->("SELECT task_id || ':' || token FROM ntask_claim_on(${s}::smallint, 'cw', 'w', 50)"))
			{
				my ($i, $tt) = split /:/, $r;
				$tk{$i} = $tt;
			}
		}
		return !grep { !$tk{$_} } @t;
	}, 60);
	my $s = connect_to($w);
	$s->do('SET ntask.citus_direct_groups = 2');
	$off = -s $w->logfile;
	my $r = $s->selectall_arrayref('SELECT result FROM ntask_transition_many(ARRAY[' . join(',', @t) . ']::bigint[], ARRAY['
		  . join(',', map { $tk{$_} } @t) . "]::bigint[], 'succeeded')");
	is(join(',', map { $_->[0] } @$r), 'applied,applied,applied', 'a batch of 3 shard values with ntask.citus_direct_groups = 2 applies');
	is(join(',', paths($w, $off)), 'routed path for shard ' . (sort { $a <=> $b } $L0, $L1, $L2)[0]
		  . ': more shard values than ntask.citus_direct_groups', 'routed, saying why');
	is($s->selectrow_array(q{SELECT count(*) <= 2 FROM pg_backend_memory_contexts WHERE name = 'ntask direct group'}), 1,
		'the backend keeps at most 2 groups');
	$s->disconnect;
}

# parents in two shard values ended by one batch on the direct path: the
# dependency trigger of each shard releases or cancels its children there
{
	$q->(q{SELECT count(*) FROM ntask_queue_set('dp', lease => '10 minutes', on_parent_failed => 'cancel')});
	my (%pk, @p);
	for my $s ($L0, $L1)
	{
		my $pk = key_in('dp', $s, 'pk');
		$pk{$s} = $pk;
		for my $n (1, 2)
		{
			$q->("SELECT count(*) FROM ntask_enqueue('dp', 'p${n}_$s', '{}', partition_key => '$pk')");
			$q->("SELECT count(*) FROM ntask_enqueue('dp', 'c${n}_$s', '{}', partition_key => '$pk', depends_on => ARRAY['p${n}_$s'])");
		}
	}
	my %tk;
	wait_for('the parents claimed', sub {
		for my $s ($L0, $L1)
		{
			for my $r (split /\n/, $q->("SELECT task_id || ':' || token FROM ntask_claim_on(${s}::smallint, 'dp', 'w', 50)"))
			{
				my ($i, $tt) = split /:/, $r;
				$tk{ $q->("SELECT task_key FROM ntask.task WHERE task_id = $i") } = $tt;
			}
		}
		return 4 == grep { $tk{$_} } map { ("p1_$_", "p2_$_") } ($L0, $L1);
	}, 60);
	my $id = sub { return $q->("SELECT task_id FROM ntask.task WHERE queue = 'dp' AND task_key = '$_[0]'") };
	my $state = sub {
		return $q->(qq{SELECT state || coalesce('/' || reason, '') || '/' || coalesce(parents_left::text, '-')
			FROM ntask.task WHERE queue = 'dp' AND task_key = '$_[0]'});
	};
	for my $case (['p1', 'succeeded', 'ready/0'], ['p2', 'canceled', 'canceled/parent_failed/1'])
	{
		my ($p, $to, $child) = @$case;
		my @k = ("${p}_$L1", "${p}_$L0");
		my $off = -s $w->logfile;
		my ($rc, $out, $err) = $w->psql('postgres',
			'SELECT string_agg(result, \',\') FROM ntask_transition_many(ARRAY[' . join(',', map { $id->($_) } @k)
			  . '], ARRAY[' . join(',', map { $tk{$_} } @k) . "], '$to')");
		is($rc == 0 ? $out : "error: $err", 'applied,applied', "parents of two shard values to $to in one batch");
		is(join(',', paths($w, $off)), $d->($L0, $L1), "directly ($to)");
		my $c = $p =~ s/p/c/r;
		is(join(' ', map { $state->("${c}_$_") } ($L0, $L1)), "$child $child", "the children of both shards: $child");
	}
}

# a caller with ntask_worker but not the queue's worker_role: the batch over
# two shard values on the direct path is refused for its first task (42501,
# the hint naming worker_role), both groups entered, nothing written; the
# holder's own batch then applies
{
	$co->safe_psql('postgres', q{
		CREATE ROLE wr; CREATE ROLE nobody LOGIN; GRANT ntask_worker TO nobody;
		SELECT count(*) FROM ntask_queue_set('rq', lease => '10 minutes');
		SELECT ntask_queue_set_roles('rq', NULL, 'wr')});
	my @e;
	for my $s ($L0, $L1)
	{
		push @e, $q->("SELECT task_id FROM ntask_enqueue('rq', '" . key_in('rq', $s, 'rq') . "', '{}')") for 1 .. 2;
	}
	my %ct;
	wait_for('the four claimed', sub {
		for my $r (split /\n/, $w->safe_psql('postgres', q{SELECT task_id || ':' || token FROM ntask_claim('rq', 'w', 50)}))
		{
			my ($i, $t) = split /:/, $r;
			$ct{$i} = $t;
		}
		return keys(%ct) >= 4;
	}, 60);
	my @ids = sort { $a <=> $b } keys %ct;
	my $call = 'SELECT string_agg(result, \',\') FROM ntask_transition_many(ARRAY[' . join(',', @ids) . ']::bigint[], ARRAY['
	  . join(',', map { $ct{$_} } @ids) . "]::bigint[], 'succeeded')";
	my $off = -s $w->logfile;
	my ($rc, $out, $err) = $w->psql('postgres', $call, extra_params => [ '-U', 'nobody', '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/42501: ntask: permission denied for task $ids[0]\b/, 'without the worker_role: 42501 for the first task');
	like($err, qr/HINT:.*worker_role/, 'the hint names worker_role');
	is(join(',', paths($w, $off)), $d->($L0, $L1), 'refused on the direct path, in both shard values');
	is($q->(q{SELECT string_agg(DISTINCT state, ',') || ',' || count(*) || ',' || count(*) FILTER (WHERE lease_owner = 'w')
		FROM ntask.task WHERE queue = 'rq'}), 'leased,4,4', 'the four tasks stay leased to their holder');
	is($q->('SELECT count(*) FROM ntask.attempt_all WHERE task_id = ANY (ARRAY[' . join(',', @ids) . ']::bigint[]) AND ended_at IS NOT NULL'),
		'0', 'no attempt ended');
	is($w->safe_psql('postgres', $call), 'applied,applied,applied,applied', "the holder's batch then applies");
}

# ---------------------------------------------------------------------
# Part 3: a move of one of the batch's shards racing the call
# ---------------------------------------------------------------------
$q->("SELECT count(*) FROM ntask_queue_set('mv', lease => '10 minutes')");

# n claimed tasks of queue mv in shard value $s: "id:token"
sub claimed
{
	my ($s, $n) = @_;
	my @ids = map { $q->("SELECT task_id FROM ntask_enqueue('mv', '" . key_in('mv', $s, 'mv') . "', '{}')") } 1 .. $n;
	my %tk;
	wait_for('the claims', sub {
		for my $r (split /\n/, $q->("SELECT task_id || ':' || token FROM ntask_claim_on(${s}::smallint, 'mv', 'w', 50)"))
		{
			my ($i, $t) = split /:/, $r;
			$tk{$i} = $t;
		}
		return !grep { !$tk{$_} } @ids;
	}, 60);
	return map { "$_:$tk{$_}" } @ids;
}

my $S = $L0;	# the shard value that moves, back and forth
for my $mode ('block_writes', 'force_logical')
{
	for my $kind ('call_first', 'move_first')
	{
		my $tag = "$mode/$kind";
		NtaskCitus::drop_orphans($c);
		my ($shardid, $src, $dst) = NtaskCitus::placement($c, $S);
		# a partner shard value on the same node, and one with a lower value
		# if there is one, so that the moving shard is not always first
		my ($P) = grep { $_ != $S && node_of($_)->port == $src->port } @shards;
		my ($ta) = claimed($S, 1);
		my ($tb) = claimed($P, 1);
		my ($ia, $ka) = split /:/, $ta;
		my ($ib, $kb) = split /:/, $tb;
		my $call = "SELECT string_agg(result || '/' || state, ',') FROM ntask_transition_many(ARRAY[$ib, $ia], ARRAY[$kb, $ka], 'succeeded', results => ARRAY['{\"m\": 1}', '{\"m\": 2}']::jsonb[])";
		my ($rows, $err, $move_waited, $off) = race_move($c, src => $src, dst => $dst,
			shardid => $shardid, mode => $mode, kind => $kind, tag => $tag,
			call => $call, like => '%ntask\_transition\_many(%', row => $kind eq 'call_first' ? $ia : undef);
		is($err, '', "$tag: the call succeeded");
		is($rows->[0][0], 'applied/succeeded,applied/succeeded', "$tag: both tasks applied");
		is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port, "$tag: the shard moved");
		ok($move_waited, "$tag: the move waited for the call") if $kind eq 'call_first';
		my @p = paths($src, $off);
		my $expect = ($kind eq 'move_first' && $mode eq 'block_writes')
		  ? "routed path for shard $S: the shard's placement is not on this node"
		  : $d->($S, $P);
		is(join(',', @p), $expect, "$tag: the call's path");
		is($q->("SELECT string_agg(state || ' ' || result::text, ',' ORDER BY task_id) FROM ntask.task WHERE task_id IN ($ia, $ib)"),
			$ia < $ib ? 'succeeded {"m": 2},succeeded {"m": 1}' : 'succeeded {"m": 1},succeeded {"m": 2}',
			"$tag: both finished, the moved one on its new placement");
		is($q->("SELECT count(*) FROM ntask.attempt_all WHERE task_id IN ($ia, $ib)"), '2', "$tag: one ledger row each");
		if ($kind eq 'move_first' && $mode eq 'block_writes')
		{
			is($src->safe_psql('postgres', "SELECT state || ',' || token FROM ntask.task_$shardid WHERE task_id = $ia"),
				"leased,$ka", "$tag: nothing was written into the orphan");
			my $aid = $src->safe_psql('postgres', "SELECT get_shard_id_for_distribution_column('ntask.attempt', ${S}::smallint)");
			is($src->safe_psql('postgres', "SELECT count(*) FROM ntask.attempt_$aid WHERE task_id = $ia"), '0',
				"$tag: nor into the orphan's ledger");
		}
		# the node that holds it now runs a batch of its shards directly
		my (undef, $now) = NtaskCitus::placement($c, $S);
		my ($Q) = grep { $_ != $S && node_of($_)->port == $now->port } @shards;
		my ($tc) = claimed($S, 1);
		my ($td) = claimed($Q, 1);
		my ($ic, $kc) = split /:/, $tc;
		my ($id, $kd) = split /:/, $td;
		my $o = -s $now->logfile;
		is($now->safe_psql('postgres', "SELECT string_agg(result, ',') FROM ntask_transition_many(ARRAY[$ic, $id], ARRAY[$kc, $kd], 'succeeded')"),
			'applied,applied', "$tag: a batch on the shard's new node");
		is(join(',', paths($now, $o)), $d->($S, $Q), "$tag: directly");
	}
}

$plain->stop;
NtaskCitus::stop($c);
done_testing();
