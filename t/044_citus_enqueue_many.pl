
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/044_citus_enqueue_many.pl: ntask_enqueue_many whose keys fall on
# several shard values of a worker node, on the direct path (issue 49;
# docs/scaling.md "`ntask_enqueue_many` over several shard values"),
# opt-in with NTASK_CITUS=1 like t/023.
#
# A coordinator and two workers (8 shard values, 4 on each worker node),
# log_min_messages = debug1 on the workers: each call logs its path
# (src/shard.c, direct_begin: one "direct path for shard N" line per
# shard value of the call, or one "routed path for shard N: why").
#
# Part 1: the same calls with ntask.citus_direct on and off on a worker
# node, and on a plain install: keys of 2 and 3 of the node's shard
# values (new, existing, repeated in the call), partition keys, run_at
# and priority; every error with its element in the first and in the
# last group (NT001 of an existing key, NT001 of a key repeated in the
# call, 22001, 54000; two existing keys with other payloads: the first
# in input order is named), no right (42501), an unknown queue (42704);
# a key of the other node's shard, a transaction block (routed).  The
# same answers (in input order, ids compared by key), errors and rows on
# all three; with the setting on, every batch of local shards takes the
# direct path, each shard value named.
#
# Part 2: the groups' bound and depends_on (routed, saying why); a
# waiting claim on the worker node woken by a batch of two shard values.
#
# Part 3: a move of one of the batch's shards racing the call, both
# transfer modes (NtaskCitus::race_move): block_writes with the move
# stopped after its copy: the call waits, then runs routed, nothing
# written into the orphan; force_logical during the catch-up: direct,
# carried over; a call holding the groups' locks makes the move wait.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(connect_to wait_for paths race_move));

my $c = NtaskCitus::setup('enqmany', moves => 1, orphans => 1, shard_count => 8);
my $co = $c->{coord};
my @workers = @{ $c->{workers} };
my $q = $c->{q};
NtaskCitus::debug_paths($c);

my $plain = NtaskCitus::plain_node('enqmany_plain');

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

sub key_in { return NtaskCitus::key_in($c, @_); }

sub set_direct { return NtaskCitus::set_direct($c, @_); }

# the roles of the 42501 case, on the cluster (propagated) and the plain node
for my $sql (q{CREATE ROLE ep_a; CREATE ROLE ep_b LOGIN; GRANT ntask_producer TO ep_b})
{
	$co->safe_psql('postgres', $sql);
	$plain->safe_psql('postgres', $sql);
}
for my $n (@workers)
{
	wait_for('the roles on ' . $n->name, sub { $n->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname = 'ep_b'}) == 1 });
}

my $d = sub { my @s = sort { $a <=> $b } @_; return join(',', map { "direct path for shard $_" } @s) };

# ---------------------------------------------------------------------
# Part 1: the same batches on the direct path, routed and on a plain install
# ---------------------------------------------------------------------

# the keys of part 1: label => shard value (0 on the plain install); the
# labels sort by group: a in L0, b in L1, c in L2, r on the other node
my %label_shard = (
	a1 => $L0, a2 => $L0, a3 => $L0, a4 => $L0, a5 => $L0, a6 => $L0, a7 => $L0, a8 => $L0,
	b1 => $L1, b2 => $L1, b3 => $L1, b4 => $L1, b5 => $L1, b6 => $L1, b7 => $L1, b8 => $L1,
	c1 => $L2, c2 => $L2, c3 => $L2, c4 => $L2,
	r1 => $R0);

# one system's calls: 'on', 'off' (the cluster's worker node $w with
# ntask.citus_direct so) or 'plain'.  Returns the answers (ids as the
# labels of their keys, errors as SQLSTATE and message with the keys as
# labels), the rows, and the path lines of each call
sub scenario
{
	my ($sys) = @_;
	my $queue = "e_$sys";
	my $rq = "er_$sys";
	my ($node, $cq) = $sys eq 'plain'
	  ? ($plain, sub { $plain->safe_psql('postgres', $_[0]) })
	  : ($w, $q);
	set_direct($sys) if $sys ne 'plain';
	$cq->("SELECT count(*) FROM ntask_queue_set('$queue', lease => '10 minutes')");
	$cq->("SELECT count(*) FROM ntask_queue_set('$rq', lease => '10 minutes')");
	$cq->("SELECT ntask_queue_set_roles('$rq', 'ep_a', NULL)");
	my (%key, %label);
	%label = ($queue => 'Q', $rq => 'RQ');
	my $key = sub {
		my ($l, $qn) = @_;
		my $tag = ($qn // $queue) . "/$l";
		return $key{$tag} //= do {
			# a key over 512 bytes is refused before its shard matters
			my $k = $l =~ /^long/ ? ('x' x 520) . $l
			  : $sys eq 'plain' ? $l : key_in($qn // $queue, $label_shard{$l}, "k$l");
			$label{$k} = $l;
			$k;
		};
	};
	my (@out, @paths);
	my $dbh = DBI->connect('dbi:Pg:dbname=postgres;host=' . $node->host . ';port=' . $node->port,
		'', '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 });
	my $dbr = DBI->connect('dbi:Pg:dbname=postgres;host=' . $node->host . ';port=' . $node->port,
		'ep_b', '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 });
	# ntask_enqueue_many of the labels ("l" or "l=payload" or "l@pk")
	my $many = sub {
		my ($what, $items, %o) = @_;
		my $qn = $o{queue} // $queue;
		my (@k, @p, @pk);
		for my $it (@$items)
		{
			my ($l, $pl) = split /=/, $it, 2;
			my $pkl;
			($l, $pkl) = split /@/, $l, 2;
			push @k, $key->($l, $qn);
			push @p, $pl // '{}';
			push @pk, defined $pkl ? "'" . $key->($pkl, $qn) . "'" : 'NULL';
		}
		my $sql = "SELECT task_id, created, state, outcome, result FROM ntask_enqueue_many('$qn', ARRAY["
		  . join(',', map { "'$_'" } @k) . '], ARRAY[' . join(',', map { "'$_'" } @p) . ']::jsonb[]'
		  . ($o{pk} ? ', partition_keys => ARRAY[' . join(',', @pk) . ']' : '')
		  . ($o{extra} // '') . ')';
		my $off = $sys eq 'plain' ? 0 : -s $w->logfile;
		my $h = $o{as} ? $dbr : $dbh;
		$h->do($o{set}) if $o{set};
		my $rows;
		if ($o{block})
		{
			$h->begin_work;
			$rows = $h->selectall_arrayref($sql);
			$rows ? $h->commit : $h->rollback;
		}
		else
		{
			$rows = $h->selectall_arrayref($sql);
		}
		my $a;
		if ($rows)
		{
			$a = join(';', map { join('|', "id=$_->[0]", map { $_ // '-' } @$_[1 .. 4]) } @$rows);
		}
		else
		{
			my ($m) = $h->errstr =~ /ERROR:\s+([^\n]*)/;
			$m //= $h->errstr;
			$m =~ s{"([^"]+)"}{'"' . ($label{$1} // $1) . '"'}ge;
			$a = $h->state . ' ' . $m;
		}
		$h->do('RESET ALL') if $o{set};
		push @out, "$what: $a";
		push @paths, "$what: " . join(',', paths($w, $off)) if $sys ne 'plain';
	};

	$many->('two shards', [qw(b1 a1 b2 a2)]);
	$many->('three shards, repeated', [qw(c1 a1 b3 c1 b1 a3)]);
	$many->('partition keys', [qw(a4@b8 b4@a8 c2@a8)], pk => 1,
		extra => q{, run_at => now() + interval '1 hour', priority => 3});
	$many->('another payload, first group', ['b5', 'a1={"x": 1}', 'c3']);
	$many->('another payload, last group', ['a5', 'b5', 'c1={"x": 1}']);
	$many->('two other payloads, the later first', ['c1={"x": 1}', 'a1={"x": 1}', 'b6']);
	$many->('two other payloads, the earlier first', ['a1={"x": 1}', 'c1={"x": 1}', 'b6']);
	$many->('repeated with another payload, first group', ['b6', 'a6', 'a6={"x": 1}']);
	$many->('repeated with another payload, last group', ['c4', 'a6', 'c4={"x": 1}', 'b6']);
	$many->('too long, first group', [qw(longa7 b6)]);
	$many->('too long, last group', [qw(a6 longc4)]);
	my $big = '{"big": "' . ('y' x 200) . '"}';
	$many->('too large, first group', ["a6=$big", 'c4'], set => 'SET ntask.max_payload_bytes = 100');
	$many->('too large, last group', ['a6', "c4=$big"], set => 'SET ntask.max_payload_bytes = 100');
	$many->('no right', [qw(a6 b6 a1)], queue => $rq, as => 1);
	$many->('existing keys, with the right', [qw(a1 b1)], queue => $rq);
	$many->('no right, existing keys', [qw(b1 a1)], queue => $rq, as => 1);
	$many->('an unknown queue', [qw(a6 b6)], queue => 'nosuch');
	$many->('in a block', [qw(b7 a7)], block => 1);
	$many->('a shard of the other node', [qw(a8 r1)]);
	$many->('again', [qw(b1 a1 b2 a2 c1 a8 r1 b7)]);
	$dbh->disconnect;
	$dbr->disconnect;

	# the ids as the labels of their keys
	my %idl;
	for my $r (split /\n/, $cq->("SELECT task_id || ' ' || task_key FROM ntask.task WHERE queue IN ('$queue', '$rq', 'nosuch')"))
	{
		my ($i, $k) = split / /, $r, 2;
		$idl{$i} = $label{$k} // "?$k";
	}
	s{id=(\d+)}{$idl{$1} // "?$1"}ge for @out;
	my @keys = sort keys %label;
	my $lab = "CASE task_key " . join(' ', map { "WHEN '$_' THEN '$label{$_}'" } @keys) . ' END';
	push @out, $cq->(qq{SELECT string_agg(concat_ws('|', $lab, queue = '$queue', state, payload, priority, run_at > now() + interval '30 minutes',
			CASE partition_key } . join(' ', map { "WHEN '$_' THEN '$label{$_}'" } @keys) . qq{ END, attempts), ';' ORDER BY $lab, queue)
		FROM ntask.task WHERE queue IN ('$queue', '$rq', 'nosuch')});
	return (join("\n", @out), \@paths);
}

my ($off_out, $off_paths) = scenario('off');
my ($on_out, $on_paths) = scenario('on');
my ($plain_out) = scenario('plain');
is($on_out, $off_out, 'the direct path gives the answers, errors and rows of the routed path');
is($on_out, $plain_out, 'and of a plain install');
note("answers:\n$on_out");
like($on_out, qr/^two shards: b1\|1\|ready\|-\|-;a1\|1\|ready\|-\|-;b2\|1\|ready\|-\|-;a2\|1\|ready\|-\|-\nthree shards, repeated: c1\|1\|ready\|-\|-;a1\|0\|ready\|-\|-;b3\|1\|ready\|-\|-;c1\|0\|ready\|-\|-;b1\|0\|ready\|-\|-;a3\|1\|ready\|-\|-\n/,
	'the answers are those of the calls, in input order, a repeated key one task');
like($on_out, qr/\nanother payload, first group: NT001 [^\n]*"a1"[^\n]*\nanother payload, last group: NT001 [^\n]*"c1"[^\n]*\ntwo other payloads, the later first: NT001 [^\n]*"c1"[^\n]*\ntwo other payloads, the earlier first: NT001 [^\n]*"a1"/,
	'NT001 names the first element, in input order, whose key exists with another payload');
like($on_out, qr/\nrepeated with another payload, first group: NT001 [^\n]*"a6"[^\n]*\nrepeated with another payload, last group: NT001 [^\n]*"c4"[^\n]*\ntoo long, first group: 22001 [^\n]*\[1\][^\n]*\ntoo long, last group: 22001 [^\n]*\[2\][^\n]*\ntoo large, first group: 54000 [^\n]*\[1\][^\n]*\ntoo large, last group: 54000 [^\n]*\[2\][^\n]*\nno right: 42501 [^\n]*\nexisting keys, with the right: a1\|1\|ready[^\n]*\nno right, existing keys: 42501 [^\n]*\nan unknown queue: 42704 /,
	'the other errors are those of the calls');
is(join("\n", @$on_paths), join("\n",
	'two shards: ' . $d->($L0, $L1),
	'three shards, repeated: ' . $d->($L0, $L1, $L2),
	'partition keys: ' . $d->($L0, $L1),
	'another payload, first group: ' . $d->($L0, $L1, $L2),
	'another payload, last group: ' . $d->($L0, $L1, $L2),
	'two other payloads, the later first: ' . $d->($L0, $L1, $L2),
	'two other payloads, the earlier first: ' . $d->($L0, $L1, $L2),
	'repeated with another payload, first group: ',
	'repeated with another payload, last group: ',
	'too long, first group: ',
	'too long, last group: ',
	'too large, first group: ',
	'too large, last group: ',
	'no right: ' . $d->($L0, $L1),
	'existing keys, with the right: ' . $d->($L0, $L1),
	'no right, existing keys: ' . $d->($L0, $L1),
	'an unknown queue: ' . $d->($L0, $L1),
	'in a block: routed path for shard ' . ($L0 < $L1 ? $L0 : $L1) . ': in a transaction block',
	"a shard of the other node: routed path for shard $R0: the shard's placement is not on this node",
	'again: ' . "routed path for shard $R0: the shard's placement is not on this node"),
	'with ntask.citus_direct on, the batches of local shards take the direct path, each shard value named')
  or diag(join("\n", @$on_paths));
is(scalar(grep { /direct path/ } @$off_paths), 0, 'with it off, none direct');

# ---------------------------------------------------------------------
# Part 2: the bound, depends_on, a waiting claim woken
# ---------------------------------------------------------------------
set_direct('on');
{
	$q->("SELECT count(*) FROM ntask_queue_set('eb', lease => '10 minutes')");
	my @k = map { key_in('eb', $_, 'eb') } ($L0, $L1, $L2);
	my $s = connect_to($w);
	$s->do('SET ntask.citus_direct_groups = 2');
	my $off = -s $w->logfile;
	my $r = $s->selectall_arrayref("SELECT created FROM ntask_enqueue_many('eb', ARRAY['" . join("','", @k) . "'], ARRAY['{}', '{}', '{}']::jsonb[])");
	is(join(',', map { $_->[0] } @$r), '1,1,1', 'a batch of 3 shard values with ntask.citus_direct_groups = 2 enqueues');
	is(join(',', paths($w, $off)), 'routed path for shard ' . (sort { $a <=> $b } $L0, $L1, $L2)[0]
		  . ': more shard values than ntask.citus_direct_groups', 'routed, saying why');
	$s->disconnect;

	# depends_on: routed from its start (a parent in each child's shard)
	my $pk = key_in('eb', $L0, 'ebp');
	$q->("SELECT count(*) FROM ntask_enqueue('eb', 'parent', '{}', partition_key => '$pk')");
	my $pk1 = key_in('eb', $L1, 'ebq');
	$off = -s $w->logfile;
	my ($rc, $out, $err) = $w->psql('postgres', "SELECT count(*) FROM ntask_enqueue_many('eb', ARRAY['ch1', 'ch2'], ARRAY['{}', '{}']::jsonb[], partition_keys => ARRAY['$pk', '$pk1'], depends_on => ARRAY['parent'])");
	is(join(',', paths($w, $off)), 'routed path for shard ' . ($L0 < $L1 ? $L0 : $L1) . ': the enqueue has parents (depends_on)',
		'a batch with depends_on runs routed, saying why');

	# a waiting claim on the worker node, woken by a batch of two of its
	# shard values on the direct path
	$q->("SELECT count(*) FROM ntask_queue_set('ew', lease => '10 minutes')");
	my $cl = connect_to($w);
	my $t0 = time;
	my $sth = $cl->prepare(q{SELECT count(*) FROM ntask_claim('ew', 'w', 10, wait => '60 seconds')}, { pg_async => DBD::Pg::PG_ASYNC() });
	$sth->execute;
	wait_for('the claim waits', sub {
		$w->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%ntask_claim(''ew''%' AND state = 'active' AND pid <> pg_backend_pid()}) == 1
		  && time - $t0 > 2 });
	$off = -s $w->logfile;
	my @ek = map { key_in('ew', $_, 'ew') } ($L0, $L1);
	$w->safe_psql('postgres', "SELECT count(*) FROM ntask_enqueue_many('ew', ARRAY['" . join("','", @ek) . "'], ARRAY['{}', '{}']::jsonb[])");
	my @ep = paths($w, $off);
	is(scalar(grep { /^routed/ } @ep), 0, 'the batch ran directly') or diag(join("\n", @ep));
	my $t1 = time;
	wait_for('the claim returns', sub { $cl->pg_ready }, 60);
	$sth->pg_result;
	my ($n) = $sth->fetchrow_array;
	$sth->finish;
	cmp_ok($n, '>=', 1, 'the waiting claim got the batch\'s tasks');
	cmp_ok(time - $t1, '<', 30, 'before its wait ended');
	$cl->disconnect;
}

# ---------------------------------------------------------------------
# Part 3: a move of one of the batch's shards racing the call
# ---------------------------------------------------------------------
$q->("SELECT count(*) FROM ntask_queue_set('mv', lease => '10 minutes')");

my $S = $L0;	# the shard value that moves, back and forth
for my $mode ('block_writes', 'force_logical')
{
	for my $kind ('call_first', 'move_first')
	{
		my $tag = "$mode/$kind";
		NtaskCitus::drop_orphans($c);
		my ($shardid, $src, $dst) = NtaskCitus::placement($c, $S);
		my ($P) = grep { $_ != $S && node_of($_)->port == $src->port } @shards;
		my $ka = key_in('mv', $S, 'mva');
		my $kb = key_in('mv', $P, 'mvb');
		my $call = "SELECT string_agg(created || '/' || state, ',') FROM ntask_enqueue_many('mv', ARRAY['$kb', '$ka'], ARRAY['{\"m\": 1}', '{\"m\": 2}']::jsonb[])";
		my ($rows, $err, $move_waited, $off) = race_move($c, src => $src, dst => $dst,
			shardid => $shardid, mode => $mode, kind => $kind, tag => $tag,
			call => $call, like => '%ntask\_enqueue\_many(%');
		is($err, '', "$tag: the call succeeded");
		is($rows->[0][0], 'true/ready,true/ready', "$tag: both tasks created");
		is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid"), $dst->port, "$tag: the shard moved");
		ok($move_waited, "$tag: the move waited for the call") if $kind eq 'call_first';
		my @p = paths($src, $off);
		my $expect = ($kind eq 'move_first' && $mode eq 'block_writes')
		  ? "routed path for shard $S: the shard's placement is not on this node"
		  : $d->($S, $P);
		is(join(',', @p), $expect, "$tag: the call's path");
		is($q->("SELECT string_agg(task_key || ' ' || payload::text, ',' ORDER BY task_key) FROM ntask.task WHERE queue = 'mv' AND task_key IN ('$ka', '$kb')"),
			"$ka {\"m\": 2},$kb {\"m\": 1}", "$tag: both tasks there, the moved one on its new placement");
		if ($kind eq 'move_first' && $mode eq 'block_writes')
		{
			is($src->safe_psql('postgres', "SELECT count(*) FROM ntask.task_$shardid WHERE task_key = '$ka'"),
				'0', "$tag: nothing was written into the orphan");
		}
		# the node that holds it now runs a batch of it and one of its own directly
		my (undef, $now) = NtaskCitus::placement($c, $S);
		my ($Q) = grep { $_ != $S && node_of($_)->port == $now->port } @shards;
		my @nk = (key_in('mv', $S, 'mvc'), key_in('mv', $Q, 'mvd'));
		my $o = -s $now->logfile;
		is($now->safe_psql('postgres', "SELECT string_agg(created::text, ',') FROM ntask_enqueue_many('mv', ARRAY['" . join("','", @nk) . "'], ARRAY['{}', '{}']::jsonb[])"),
			'true,true', "$tag: a batch on the shard's new node");
		is(join(',', paths($now, $o)), $d->($S, $Q), "$tag: directly");
	}
}

$plain->stop;
NtaskCitus::stop($c);
done_testing();
