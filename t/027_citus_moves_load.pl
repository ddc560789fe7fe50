
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/027_citus_moves_load.pl: shard moves under load (issue 49, "Moves under
# load"), against the direct shard path; with NTASK_CITUS=1 like t/023; the
# long run (2000 tasks, 8 moves) with NTASK_CITUS_LONG=1 as well, a short
# one (300 tasks, 4 moves) otherwise (docs/scaling.md "Citus in CI").
#
# A coordinator and two workers on loopback (t/NtaskCitus.pm, wal_level =
# logical for force_logical moves; citus.defer_shard_delete_interval = -1,
# so that a move's orphan stays until the next move drops it; the worker
# nodes log every path decision of the direct path at DEBUG1, with the
# epoch and the pid in each line).  Before the load, a column is added and
# dropped before a kept one on ntask.task and ntask.attempt, so that a
# move's new placement numbers its columns otherwise than the old one
# (Citus #5038).  Forked DBD::Pg clients, all to 127.0.0.1:
#   producers  key i goes to producer i % 4: PC ntask_enqueue on the
#              coordinator, PW ntask_enqueue on worker node 2, PO
#              ntask_enqueue_on(ntask_shard(...)) on the coordinator
#              (delegated), each enqueueing every fifth of its keys twice;
#              PM ntask_enqueue_many on worker node 1 of groups of 1 to 4
#              of its keys of one shard value (ntask_shard), every third
#              call with the group's first key again at its end (a
#              duplicate inside the call), every fourth with a key of that
#              shard value an earlier call enqueued (a duplicate across
#              calls); all of them as the whole statement, outside
#              transaction blocks, so that the worker nodes' and the
#              delegated enqueues take the enqueue's direct path;
#   workers    WC the plain API on the coordinator, WT the coordinator's
#              ntask_transition_and_claim loop, W1 the plain API on worker
#              node 1 (its claim walks that node's shards), W2 on worker
#              node 2 with ntask_claim_on of each shard value in turn (its
#              own and the other node's), WR on worker node 1 with its
#              heartbeats and transitions under REPEATABLE READ (outside
#              transaction blocks), WO the shard-addressed forms on the
#              coordinator (delegated; the receipt routed in its business
#              transaction).  The claims on the worker nodes and the
#              delegated ones are made outside transaction blocks, so that
#              they take the claim's direct path once it has one;
#   a housekeeper calling ntask_housekeeping() every half second.
# The queue's guard pauses every claim up to 40 ms between its pick and
# its lease, the window of issue 49's two holders; a queue with a guard is
# claimed routed, so the guard is cleared before the second half of the
# moves, whose claims on the worker nodes then take the direct path.
# Each worker, by the task's number i: heartbeats (i % 3 = 0), releases
# its first attempt (i % 37 = 0), fails its first attempt (i % 10 = 0,
# retry_wait), fails every attempt (i % 97 = 0: repair_required when the
# budget of 6 is spent), stalls on its first attempt until the task is
# taken over (i % 200 = 0) and then writes on (stale), and otherwise
# writes its business row (a table co-located with ntask.task) with
# ntask_receipt in one transaction, then succeeds.  Each client logs every
# call it made and what it got (the (task, token) of every claim it
# received), with the call's start and end, and its backends' pids.
#
# First, alone: a claim held on a shard's metadata lock while the task is
# released takes only what was due at its own start (the defect this test
# found under load: its ledger row said it was claimed before the
# released attempt ended).
#
# Then, under the load, the test moves task shards between the workers
# (citus_move_shard_placement, block_writes and force_logical in turn):
# one there and back (its relation on the first node is then a new one, a
# new OID), the others there, and last citus_rebalance_start (the move
# before left the nodes 3 to 1), releasing a slice of new tasks to the
# producers while each move runs.  The probes: a task per shard value
# held by the test, heartbeated by one backend per worker node: before a
# move on the shard's node (direct), during it another shard value's
# (direct) and the moving one's on its source until the move returns
# (each direct, or, once it met the final phase, waiting and then routed
# to the new placement), after it on the node it left (routed: "the
# shard's placement is not on this node") and on its new node (direct);
# each heartbeat's lease is what the coordinator reads right after it.
# Then the invariants, exactly:
#   every key enqueued is one task, a duplicate enqueue returned its id;
#   the ledger (ntask.attempt_all) has one row per claim a worker received
#   (the same (task, token) set: none lost, none unknown), no token handed
#   out twice, tokens strictly increasing with the attempt number (1..n),
#   each attempt ended before the next was claimed (never two live leases);
#   every applied transition or release is its attempt's ledger result,
#   every ledger result a client's applied call; every succeeded task
#   succeeded once, by its last token; the receipts committed are exactly
#   ntask.receipt and the business rows, one per succeeded task; every
#   task ends succeeded (or repair_required for i % 97 = 0), nothing is
#   left leased or due; no row of a move's orphan (the old placement, left
#   by the deferred drop) was written after its move committed (its rows'
#   xmin all visible in a snapshot taken when the move returned, and its
#   content unchanged); every move ran while clients' calls ran; the path
#   decisions: W1's and W2's calls on their nodes took the direct path,
#   none refused for its shape, WR's ran routed for REPEATABLE READ, and
#   clients' direct calls ran while shards moved; the producers' path
#   decisions: each enqueue of PW and each ntask_enqueue_many of PM logged
#   exactly one decision on its node, in order, for its key's shard value
#   (its backend's pid), PO's delegated enqueues theirs in Citus' backends
#   on the worker nodes (told by the coordinator backend's global pid in
#   their application_name); each direct, or routed because the shard's
#   placement is not on this node, none refused for its shape (nor PM's
#   for keys of several shards); each of PW, PO and PM took the direct
#   path while a move ran, and enqueues of the moving shard value ran
#   directly during its move; after DROP COLUMN every task's and ledger
#   row's columns are in place.
#
# Part 3, alone, after the load: a REPEATABLE READ transaction that took
# its snapshot before a move heartbeats after it (routed, to the new
# placement), REPEATABLE READ calls outside a block on the old and the new
# node (routed); and a worker node down during a move: a force_logical
# move held after its copy (Citus' test hook, as t/028), a direct call on
# the source during its catch-up, the target stopped (immediate), the move
# fails, the source goes on directly (a heartbeat, a task enqueued,
# claimed and finished there), the target comes back, the move done again
# carries it all, the orphans unwritten.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);
use POSIX ();
use List::Util ();
use File::Path ();

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(connect_to wait_for drop_orphans));

my $long = ($ENV{NTASK_CITUS_LONG} // '') eq '1';

my $t0 = time;
my $N = $long ? 2000 : 300;			# tasks
my $MOVES = $long ? 8 : 4;			# moves, the last one a rebalance
my $LEASE = 4;						# seconds
# the log lines carry the epoch (%n), the pid and the application_name (a
# Citus backend's is "citus_internal gpid=<the global pid of the backend
# it works for>"): the path decisions are matched to the moves' times and
# to the clients' backends, the delegated calls' to the coordinator's
my $c = NtaskCitus::setup('mvload', moves => 1, orphans => 1,
	conf => "log_line_prefix = '%n [%p] {%a} '\n", coord_conf => "citus.local_hostname = '127.0.0.1'\n");
my $co = $c->{coord};
my ($w1, $w2) = @{ $c->{workers} };
my %node_of_port = map { $_->port => $_ } ($w1, $w2);
for my $w ($w1, $w2)
{
	$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
}

my $q = $c->{q};

# DROP COLUMN, then the moves (Citus #5038): a column added and dropped
# before a kept one, on ntask.task and ntask.attempt.  The old placements
# keep the dropped column's slot, a move's new placement is made from the
# table's definition without it: the kept column's attribute number
# differs between the shard relations of one table (checked at the first
# move), and every ntask statement must write by name.
$q->('ALTER TABLE ntask.task ADD COLUMN t027_gone int, ADD COLUMN t027_note text;
	ALTER TABLE ntask.task DROP COLUMN t027_gone;
	ALTER TABLE ntask.attempt ADD COLUMN t027_gone int, ADD COLUMN t027_note text;
	ALTER TABLE ntask.attempt DROP COLUMN t027_gone');
# The queue's guard runs in a claim between its pick and its lease (the
# window of issue 49's two holders): a pause of up to 40 ms there widens
# it, so that moves commit inside it at times.  Created on every node (the
# guard runs where the claim runs).
for my $n ($co, $w1, $w2)
{
	$n->safe_psql('postgres', q{
		SET citus.enable_ddl_propagation = off;
		CREATE FUNCTION public.pace(k text, p jsonb) RETURNS text
		LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_sleep(random() * 0.04);
			RETURN 'proceed';
		END $$;});
}
$q->(qq{
	SELECT count(*) FROM ntask_queue_set('ml', lease => '$LEASE seconds', max_attempts => 6,
		backoff_base => '50 milliseconds', backoff_max => '200 milliseconds',
		guard => 'public.pace(text,jsonb)');
	SELECT count(*) FROM ntask_queue_set('probe', lease => '1 hour');
	CREATE TABLE biz (task_id bigint, shard smallint, token bigint, worker text,
		PRIMARY KEY (task_id, shard, token));
	SELECT create_distributed_table('biz', 'shard', colocate_with => 'ntask.task');});
my @shard_values = split /\n/, $q->('SELECT shard FROM ntask.shard_map ORDER BY 1');
is(scalar(@shard_values), 4, 'four task shards');

# the clients' logs stay with the test's logs (tmp_check/log)
my $tmp = "$PostgreSQL::Test::Utils::log_path/027_clients";
File::Path::rmtree($tmp);
File::Path::mkpath($tmp);
my $deadline = time + ($long ? 600 : 300);	# every client's last call

# the path decisions of the direct path (DEBUG1, src/shard.c:
# NtaskDirectBegin) in $node's log from byte $off: { at => epoch, pid, app
# (its application_name), shard, what => 'direct' or 'routed: why' }
sub decisions
{
	my ($node, $off) = @_;
	my $log = slurp_file($node->logfile, $off);
	my @d;
	while ($log =~ /^(\d+\.\d+) \[(\d+)\] \{([^}\n]*)\} DEBUG:  ntask: (?:direct path for shard (\d+)|routed path for shard (\d+): ([^\n]*))$/mg)
	{
		push @d, { at => $1, pid => $2, app => $3, shard => $4 // $5, what => defined $4 ? 'direct' : "routed: $6" };
	}
	return @d;
}

sub dsn
{
	my ($n) = @_;
	return 'dbi:Pg:dbname=postgres;host=' . $n->host . ';port=' . $n->port;
}

# the producers' pace: the keys up to $base, and the next ones up to $cap
# spread over $secs from $start (0: all at once), so that tasks arrive
# while each move runs
sub set_allow
{
	my ($cap, $base, $start, $secs) = @_;
	open my $fh, '>', "$tmp/allow.new" or die;
	print $fh join(' ', $cap, $base // $cap, $start // 0, $secs // 0), "\n";
	close $fh;
	rename "$tmp/allow.new", "$tmp/allow" or die;
}

sub read_allow
{
	open my $fh, '<', "$tmp/allow" or return 0;
	my ($cap, $base, $start, $secs) = split ' ', (<$fh> // '0 0 0 0');
	close $fh;
	return $cap if !$secs;
	my $n = $base + int(($cap - $base) * (time - $start) / $secs);
	return $n < $cap ? $n : $cap;
}

set_allow(0);

# a client's log: "start end what ..." per call, flushed at once
sub open_log
{
	my ($name) = @_;
	open my $fh, '>>', "$tmp/$name.log" or die;
	$fh->autoflush(1);
	return sub {
		my ($ts, @what) = @_;
		printf $fh "%.6f %.6f %s\n", $ts, time, join(' ', @what);
	};
}

sub fork_client
{
	my ($body) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	return $pid if $pid;
	srand($$ ^ int(time * 1000));
	eval { $body->(); };
	if ($@)
	{
		# the client died: the test's checks will say so
		print STDERR "client $$ died: $@";
		POSIX::_exit(1);
	}
	# _exit: the test's END blocks (which stop the nodes) are the parent's
	POSIX::_exit(0);
}

# poll until $cond->() is true; false after $secs
sub wait_until
{
	my ($cond, $secs) = @_;
	my $end = time + $secs;
	while (time < $end)
	{
		return 1 if $cond->();
		sleep 0.2;
	}
	return 0;
}

# The claim's time, alone first (found by the load below).  A claim
# through the coordinator waits for the shard's metadata lock (held here
# by the test, as a move's final phase holds it) while the task's holder
# releases it on the shard's node; then the claim goes on.  The ledger
# must not show the claim's attempt starting before the released one
# ended: a claim takes only what was due at its own statement
# timestamp, the time its lease and its ledger row count from.  The claim
# is the routed one (ntask.citus_delegate off): the lock is taken here on
# the coordinator only, where a routed claim takes it; a delegated claim
# takes it on the shard's node, where a move's final phase holds it too
# (LockShardListMetadataOnWorkers), and waits there (t/028's move races on
# the direct path, t/043's for a waiting claim).
{
	$q->("SELECT count(*) FROM ntask_queue_set('tm', lease => '1 minute')");
	my $tid = $q->("SELECT task_id FROM ntask_enqueue('tm', 'k', '{}')");
	my $shard = $tid >> 48;
	my $shardid = $q->("SELECT get_shard_id_for_distribution_column('ntask.task', ${shard}::smallint)");
	my $src = $node_of_port{ $q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shardid") };
	my $tok = $q->("SELECT token FROM ntask_claim('tm', 'H', 1)");
	my $x = DBI->connect(dsn($co), '', '', { AutoCommit => 0, RaiseError => 1, PrintError => 0 });
	$x->do("SELECT lock_shard_metadata(7, ARRAY[$shardid]::bigint[])");
	my $a = DBI->connect(dsn($co), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	$a->do('SET ntask.citus_delegate = off');
	my $sth = $a->prepare("SELECT task_id || ':' || token FROM ntask_claim('tm', 'A', 1)",
		{ pg_async => DBD::Pg::PG_ASYNC() });
	$sth->execute;
	ok(wait_until(sub {
		$q->(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE '%ntask_claim(''tm'', ''A''%'}) > 0 }, 60),
		'the claim waits for the shard\'s metadata lock');
	is($src->safe_psql('postgres', "SELECT ntask_release($tid, $tok)"), 'applied',
		'meanwhile the holder releases the task on the shard\'s node');
	$x->commit;
	$sth->pg_result;
	my @got = map { $_->[0] } @{ $sth->fetchall_arrayref };
	note('the waiting claim got [' . join(',', @got) . ']');
	$_->disconnect for ($x, $a);
	is($q->(qq{
		SELECT coalesce(string_agg(b.attempt || ' claimed at ' || b.claimed_at || ', '
			|| a.attempt || ' ended at ' || a.ended_at, '; '), '')
		FROM ntask.attempt_all a JOIN ntask.attempt_all b
		  ON b.task_id = a.task_id AND b.shard = a.shard AND b.attempt = a.attempt + 1
		WHERE a.task_id = $tid AND a.shard = $shard AND b.claimed_at < a.ended_at}), '',
		'the claim\'s attempt starts no earlier than the released one ended');
	$q->("SELECT count(*) FROM ntask_claim('tm', 'B', 1)") if !@got;
	is($q->("SELECT string_agg(attempt || ' ' || coalesce(result, 'running'), ',' ORDER BY token)
		FROM ntask.attempt_all WHERE task_id = $tid"), '1 released,2 running',
		'the released task is claimed once more');
}

# the worker nodes' logs from here: the path decisions under the load
my %log_off = map { ($_->port => -s $_->logfile) } ($w1, $w2);

# a client's backend: its pid (I) and its global pid (G: Citus' backends
# that run its delegated calls on the worker nodes carry it in their
# application_name)
sub log_backend
{
	my ($log, $dbh, $node) = @_;
	$log->(time, 'I', scalar $dbh->selectrow_array('SELECT pg_backend_pid()'), $node->port);
	$log->(time, 'G', scalar $dbh->selectrow_array('SELECT citus_backend_gpid()'));
}

# producers: key i goes to producer i % 4 (PM's, 3, below); PC, PW and PO
# enqueue every fifth of their keys twice
my %producer = (0 => [ 'PC', $co, 'plain' ], 1 => [ 'PW', $w2, 'plain' ], 2 => [ 'PO', $co, 'on' ]);
my $twice = sub { my ($i) = @_; return $i % 4 != 3 && int($i / 4) % 5 == 0 };
my @kids;
for my $p (0 .. 2)
{
	my ($name, $node, $style) = @{ $producer{$p} };
	push @kids, fork_client(sub {
		my $log = open_log($name);
		my $dbh;
		my $i = $p == 0 ? 4 : $p;
		while ($i <= $N && time < $deadline)
		{
			if (read_allow() < $i)
			{
				sleep 0.05;
				next;
			}
			my $ts = time;
			my $ok = eval {
				if (!$dbh)
				{
					$dbh = DBI->connect(dsn($node), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
					log_backend($log, $dbh, $node);
				}
				my $sql = $style eq 'on'
				  ? "SELECT task_id, created FROM ntask_enqueue_on(ntask_shard('ml', ?::text), 'ml', ?, ?::jsonb)"
				  : "SELECT task_id, created FROM ntask_enqueue('ml', ?, ?::jsonb)";
				my @args = $style eq 'on' ? ("k$i", "k$i", "{\"i\": $i}") : ("k$i", "{\"i\": $i}");
				for my $again (0 .. ($twice->($i) ? 1 : 0))
				{
					my ($id, $created) = $dbh->selectrow_array($sql, undef, @args);
					$log->($ts, $again ? 'D' : 'P', "k$i", $id, $created ? 1 : 0);
					$ts = time;
				}
				1;
			};
			if (!$ok)
			{
				my $e = $@ =~ s/\s+/ /gr;
				$log->($ts, 'E', 'enqueue', "k$i", $e);
				eval { $dbh->disconnect if $dbh };
				$dbh = undef;
				sleep 0.2;
				next;				# the enqueue is retried (idempotent)
			}
			$i += 4;
		}
	});
}

# PM: ntask_enqueue_many on worker node 1, of its keys (i % 4 = 3) released
# so far, in groups of 1 to 4 keys of one shard value; every third call
# repeats the group's first key at its end, every fourth adds a key of that
# shard value an earlier call enqueued.  Logged: M (the call: its shard
# value, its keys), then P for a key's first row, D for a duplicate's
# (with "in" or "across")
push @kids, fork_client(sub {
	my $log = open_log('PM');
	my ($dbh, %shard_of, @pending, %done);
	my ($next, $calls) = (3, 0);
	while ((@pending || $next <= $N) && time < $deadline)
	{
		my $ts = time;
		my $ok = eval {
			if (!$dbh)
			{
				$dbh = DBI->connect(dsn($w1), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
				log_backend($log, $dbh, $w1);
			}
			%shard_of = map { @$_ } @{ $dbh->selectall_arrayref(
				"SELECT i, ntask_shard('ml', 'k' || i) FROM generate_series(3, $N, 4) i") } unless %shard_of;
			my $allow = read_allow();
			while ($next <= $N && $next <= $allow)
			{
				push @pending, $next;
				$next += 4;
			}
			if (!@pending)
			{
				sleep 0.05;
				return 1;
			}
			my $sv = $shard_of{ $pending[0] };
			my @grp = grep { $shard_of{$_} == $sv } @pending;
			@grp = @grp[ 0 .. List::Util::min($#grp, int(rand(4))) ];
			my @keys = @grp;
			$calls++;
			push @keys, $grp[0] if $calls % 3 == 0;
			if ($calls % 4 == 0)
			{
				my @old = sort { $a <=> $b } grep { $shard_of{$_} == $sv } keys %done;
				push @keys, $old[ int(rand(@old)) ] if @old;
			}
			my $rows = $dbh->selectall_arrayref("SELECT task_id, created FROM ntask_enqueue_many('ml', ?::text[], ?::jsonb[])",
				undef, '{' . join(',', map { "k$_" } @keys) . '}',
				'{' . join(',', map { '"{\\"i\\": ' . $_ . '}"' } @keys) . '}');
			die 'ntask_enqueue_many: ' . scalar(@$rows) . ' rows for ' . scalar(@keys) . " keys\n" unless @$rows == @keys;
			$log->($ts, 'M', $sv, map { "k$_" } @keys);
			my %seen;
			for my $j (0 .. $#keys)
			{
				my $i = $keys[$j];
				my ($id, $created) = @{ $rows->[$j] };
				my $kind = $seen{$i}++ ? 'in' : $done{$i} ? 'across' : '';
				$log->($ts, $kind ? 'D' : 'P', "k$i", $id, $created ? 1 : 0, $kind || ());
			}
			$done{$_} = 1 for @grp;
			my %g = map { $_ => 1 } @grp;
			@pending = grep { !$g{$_} } @pending;
			1;
		};
		if (!$ok)
		{
			my $e = $@ =~ s/\s+/ /gr;
			$log->($ts, 'E', 'enqueue_many', $e);
			eval { $dbh->disconnect if $dbh };
			$dbh = undef;
			sleep 0.2;			# the group is enqueued again (idempotent)
		}
	}
});

# workers
my @workers = ([ 'WC', $co, 'plain' ], [ 'WT', $co, 'tc' ], [ 'W1', $w1, 'plain' ],
	[ 'W2', $w2, 'plain_on' ], [ 'WR', $w1, 'rr' ], [ 'WO', $co, 'on' ]);
for my $wk (@workers)
{
	my ($name, $node, $style) = @$wk;
	push @kids, fork_client(sub {
		my $log = open_log($name);
		my $dbh;
		my $rr;					# WR: its REPEATABLE READ connection
		# the backends' pids (I: the client's connection, J: WR's second),
		# to tell their path decisions in the node's log
		my $connect = sub {
			return if $dbh;
			$dbh = DBI->connect(dsn($node), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
			log_backend($log, $dbh, $node);
			if ($style eq 'rr')
			{
				$rr = DBI->connect(dsn($node), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
				$rr->do("SET default_transaction_isolation = 'repeatable read'");
				$log->(time, 'J', scalar $rr->selectrow_array('SELECT pg_backend_pid()'), $node->port);
			}
		};
		# WR's heartbeats and transitions under REPEATABLE READ, each its
		# own statement: a serialization failure (the row changed since
		# the statement's snapshot: a takeover) is an answer there, logged
		# as X; the task's lease then runs out
		my $rrsel = sub {
			my ($sql, @args) = @_;
			my $r = eval { $rr->selectall_arrayref($sql, undef, @args) };
			return $r if $r;
			die $@ unless $@ =~ /could not serialize/;
			$log->(time, 'X', $sql =~ /(ntask_\w+)/, $args[0], $args[1]);
			return undef;
		};
		my $pending;			# WT: the finish its next call makes
		my $next_shard = int(rand(4));
		my $empty = 0;
		my $sel = sub {
			my ($sql, @args) = @_;
			return $dbh->selectall_arrayref($sql, undef, @args);
		};
		my $claim = sub {
			my $ts = time;
			my $rows;
			if ($style eq 'on' || $style eq 'plain_on')
			{
				my $sv = $shard_values[ $next_shard++ % 4 ];
				$rows = $sel->("SELECT task_id, token, attempt, (payload->>'i')::int FROM ntask_claim_on(?::smallint, 'ml', ?, 1)",
					$sv, $name);
			}
			else
			{
				$rows = $sel->("SELECT task_id, token, attempt, (payload->>'i')::int FROM ntask_claim('ml', ?, 1)", $name);
			}
			$log->($ts, 'C', @{ $rows->[0] }) if @$rows;
			$log->($ts, 'N') unless @$rows;
			return @$rows ? $rows->[0] : undef;
		};
		# finish: a transition (WT: the next call's), logged with its result
		my $finish = sub {
			my ($id, $tok, $st) = @_;
			if ($style eq 'tc')
			{
				$pending = [ $id, $tok, $st ];
				return;
			}
			my $ts = time;
			my $r = $style eq 'on'
			  ? $sel->("SELECT result, state FROM ntask_transition_on(ntask_shard(?::bigint), ?, ?, ?)", $id, $id, $tok, $st)
			  : $style eq 'rr'
			  ? $rrsel->("SELECT result, state FROM ntask_transition(?, ?, ?)", $id, $tok, $st)
			  : $sel->("SELECT result, state FROM ntask_transition(?, ?, ?)", $id, $tok, $st);
			$log->($ts, 'T', $id, $tok, $st, $r->[0][0], $r->[0][1] // '-') if $r;
		};
		my $work = sub {
			my ($id, $tok, $att, $i) = @{ $_[0] };
			my $fn = $style eq 'on' ? '_on' : '';
			my $sh = $style eq 'on' ? 'ntask_shard(?::bigint), ' : '';
			my @sa = $style eq 'on' ? ($id) : ();
			if ($i % 200 == 0 && $att == 1)
			{
				# stall until the task is taken over (its lease runs out;
				# housekeeping or a claim takes it), then write on: stale
				my $ts = time;
				my $end = time + 120;
				while (time < $end)
				{
					my ($t) = $dbh->selectrow_array(
						'SELECT token FROM ntask.task WHERE task_id = ? AND shard = (?::bigint >> 48)::smallint',
						undef, $id, $id);
					last if $t != $tok;
					sleep 0.2;
				}
				$log->($ts, 'S', $id, $tok);
			}
			if ($i % 3 == 0)
			{
				my $ts = time;
				if ($style eq 'rr')
				{
					my $r = $rrsel->("SELECT ntask_heartbeat(?, ?)", $id, $tok);
					$log->($ts, 'H', $id, $tok, defined $r->[0][0] ? 'applied' : 'null') if $r;
				}
				else
				{
					my ($r) = $dbh->selectrow_array("SELECT ntask_heartbeat$fn($sh?, ?)", undef, @sa, $id, $tok);
					$log->($ts, 'H', $id, $tok, defined $r ? 'applied' : 'null');
				}
			}
			if ($i % 37 == 0 && $att == 1)
			{
				my $ts = time;
				my ($r) = $dbh->selectrow_array("SELECT ntask_release$fn($sh?, ?)", undef, @sa, $id, $tok);
				$log->($ts, 'L', $id, $tok, $r);
				return;
			}
			if ($i % 97 == 0 || ($i % 10 == 0 && $att == 1))
			{
				$finish->($id, $tok, 'retry_wait');
				return;
			}
			# the business transaction
			my $ts = time;
			$dbh->begin_work;
			my ($r) = $dbh->selectrow_array("SELECT ntask_receipt$fn($sh?, ?, ?::jsonb)", undef, @sa, $id, $tok,
				"{\"i\": $i}");
			if ($r eq 'applied')
			{
				$dbh->do('INSERT INTO biz VALUES (?, (?::bigint >> 48)::smallint, ?, ?)', undef, $id, $id, $tok, $name);
			}
			if ($r eq 'stale')
			{
				$dbh->rollback;
			}
			else
			{
				$dbh->commit;
			}
			$log->($ts, 'R', $id, $tok, $r);
			$finish->($id, $tok, 'succeeded');
		};
		while (time < $deadline)
		{
			last if -e "$tmp/stop" && !$pending;
			my $ts = time;
			my $ok = eval {
				$connect->();
				my $t;
				if ($pending)
				{
					my ($id, $tok, $st) = @$pending;
					$pending = undef;
					my $rows = $sel->(q{SELECT finish_result, finish_state, task_id, token, attempt, (payload->>'i')::int
						FROM ntask_transition_and_claim(?, ?, ?, 'ml', ?, 1)}, $id, $tok, $st, $name);
					$log->($ts, 'T', $id, $tok, $st, $rows->[0][0], $rows->[0][1] // '-');
					if (defined $rows->[0][2])
					{
						$t = [ @{ $rows->[0] }[ 2 .. 5 ] ];
						$log->($ts, 'C', @$t);
					}
				}
				else
				{
					$t = $claim->();
				}
				if ($t)
				{
					$empty = 0;
					$work->($t);
				}
				elsif ($style ne 'on' || ++$empty >= 4)
				{
					$empty = 0;
					sleep 0.1;
				}
				1;
			};
			if (!$ok)
			{
				my $e = $@ =~ s/\s+/ /gr;
				$log->($ts, 'E', $e);
				eval { $dbh->rollback if $dbh && !$dbh->{AutoCommit} };
				eval { $dbh->disconnect if $dbh };
				eval { $rr->disconnect if $rr };
				($dbh, $rr) = (undef, undef);
				sleep 0.2;
			}
		}
	});
}

# the housekeeper
push @kids, fork_client(sub {
	my $log = open_log('HK');
	my $dbh;
	while (time < $deadline && !-e "$tmp/stop")
	{
		my $ts = time;
		my $ok = eval {
			$dbh ||= DBI->connect(dsn($co), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
			my @r = $dbh->selectrow_array('SELECT sum(expired), sum(repaired) FROM ntask_housekeeping()');
			$log->($ts, 'K', map { $_ // 0 } @r);
			1;
		};
		if (!$ok)
		{
			my $e = $@ =~ s/\s+/ /gr;
			$log->($ts, 'E', $e);
			eval { $dbh->disconnect if $dbh };
			$dbh = undef;
		}
		sleep 0.5;
	}
});

# the parent's own connections during the load, one per node (a psql per
# query is a process start each, seconds in all on a loaded machine)
my %dbh_of = map { ($_->port => DBI->connect(dsn($_), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 })) }
  ($co, $w1, $w2);
my $dq = sub {
	my ($n, $sql) = @_;
	my $rows = $dbh_of{ $n->port }->selectall_arrayref($sql);
	return join("\n", map { join('|', map { $_ // '' } @$_) } @$rows);
};
my $unfinished = sub {
	return $dq->($co, "SELECT count(*) FROM ntask.task WHERE queue = 'ml'
		AND state NOT IN ('succeeded', 'repair_required', 'canceled')");
};

# the orphans of the moves: each with a snapshot of its node taken when its
# move returned, and its content then
my @orphans;
my $orphan_bad = 0;
my $check_orphans = sub {
	my ($when) = @_;
	for my $o (grep { !$_->{checked} } @orphans)
	{
		my $n = $o->{node};
		my $late = $dq->($n, "SELECT count(*) FROM $o->{name} x
			WHERE NOT pg_visible_in_snapshot(x.xmin::text::xid8, '$o->{snap}'::pg_snapshot)");
		my $sum = $dq->($n, "SELECT count(*) || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '')
			FROM $o->{name} x");
		if ($late ne '0' || $sum ne $o->{sum})
		{
			$orphan_bad++;
			diag("orphan $o->{name} on " . $n->name . " written after its move ($o->{move}), $when: "
				  . "$late rows newer than the move, content $o->{sum} then, $sum now");
		}
		$o->{checked} = 1;
	}
};

note(sprintf('cluster and clients up at %.0f s', time - $t0));

# the probes: one task of queue probe per shard value, held by the test (an
# hour's lease), and a backend on each worker node that heartbeats it;
# each heartbeat's path decision (its backend's DEBUG1 line) and whether it
# is what the coordinator reads then
my %probe_task;
for my $sv (@shard_values)
{
	my $k = $dq->($co, "SELECT 'p' || i FROM generate_series(1, 1000) i WHERE ntask_shard('probe', 'p' || i) = $sv LIMIT 1");
	my $id = $dq->($co, "SELECT task_id FROM ntask_enqueue('probe', '$k', '{}')");
	my $tok;
	wait_until(sub {
		$tok = $dq->($co, "SELECT token FROM ntask_claim_on(${sv}::smallint, 'probe', 'probe', 1)");
		return $tok ne '';
	}, 60) or die "the probe of shard value $sv not claimed";
	$probe_task{$sv} = [ $id, $tok ];
}
my %probe_dbh = map { ($_->port => connect_to($_)) } ($w1, $w2);
my %probe_pid = map { ($_ => scalar $probe_dbh{$_}->selectrow_array('SELECT pg_backend_pid()')) } keys %probe_dbh;
my $probe = sub {
	my ($node, $sv) = @_;
	my ($id, $tok) = @{ $probe_task{$sv} };
	my $off = -s $node->logfile;
	my $ts = time;
	my ($lease) = $probe_dbh{ $node->port }->selectrow_array("SELECT ntask_heartbeat($id, $tok)");
	my $te = time;
	my @d = map { $_->{what} } grep { $_->{pid} == $probe_pid{ $node->port } } decisions($node, $off);
	my $seen = defined $lease ? $dq->($co, "SELECT CASE WHEN lease_until = '$lease'::timestamptz THEN 't' ELSE 'f' END
		FROM ntask.task WHERE task_id = $id AND shard = $sv") : 'null';
	return { what => join(',', @d), seen => $seen, secs => $te - $ts, lease => $lease };
};
my $oid_of = sub {
	my ($n, $name) = @_;
	return $dq->($n, "SELECT to_regclass('$name')::oid");
};

my $mover = DBI->connect(dsn($co), '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
$mover->do("SET statement_timeout = '300s'");
my @moves;
my $shardids = $q->(q{SELECT string_agg(shardid::text, ' ' ORDER BY shardminvalue::int)
	FROM pg_dist_shard WHERE logicalrelid = 'ntask.task'::regclass});
my @shardids = split ' ', $shardids;
my %sv_of = map { split /\|/ } split /\n/, $q->(q{SELECT get_shard_id_for_distribution_column('ntask.task', shard)
	|| '|' || shard FROM ntask.shard_map});
my $placements = sub {
	return map { split /\|/ } split /\n/, $dq->($co, "SELECT shardid || '|' || nodeport FROM pg_dist_shard_placement
		WHERE shardid IN (" . join(',', @shardids) . ')');
};
my $unguarded;				# when the guard was cleared (half the moves)
my %oids_seen;				# shard relation name => its OIDs on a node (there and back)
my ($back_again, $attnum_checked) = (0, 0);
my (@probes_during, @probe_bad);
for my $m (0 .. $MOVES - 1)
{
	# the last move is citus_rebalance_start's: the move before left 3
	# shard groups on one node and 1 on the other
	my $rebalance = $m == $MOVES - 1;
	my $shardid = $shardids[ int($m / 2) % 4 ];
	my $mode = $rebalance ? 'block_writes' : ($m + int($m / 2)) % 2 ? 'force_logical' : 'block_writes';
	# the orphans of the move before: unchanged, then dropped (a move
	# refuses to run while one is left on its target)
	$check_orphans->("before move $m");
	ok(wait_until(sub {
		eval { $dbh_of{ $co->port }->do('CALL citus_cleanup_orphaned_resources()') };
		$dq->($co, 'SELECT count(*) FROM pg_dist_cleanup') == 0;
	}, 120), "move $m: the orphans before dropped");
	# the second half of the moves without the guard: the queue's claims
	# then take the direct path (a queue with a guard is claimed routed)
	if ($m == int($MOVES / 2))
	{
		$q->("SELECT ntask_queue_clear_guard('ml')");
		$unguarded = time;
	}
	my %before = $placements->();
	my $src_port = $before{$shardid};
	my ($dst) = grep { $_->port != $src_port } ($w1, $w2);
	my $sv = $sv_of{$shardid};
	my ($other_sv) = grep { $_ != $sv } @shard_values;
	my $other_node = $node_of_port{ $before{ (grep { $sv_of{$_} == $other_sv } @shardids)[0] } };
	# before: the shard's node runs the probe directly
	if (!$rebalance)
	{
		my $p = $probe->($node_of_port{$src_port}, $sv);
		push @probe_bad, "move $m, before, on the source: $p->{what}, seen $p->{seen}"
		  unless $p->{what} eq 'direct' && $p->{seen} eq 't';
	}
	# the move, and new tasks for the producers while it runs (a tenth of
	# them at once, so that it starts with work in flight)
	my ($base, $cap) = (int($N * $m / $MOVES), int($N * ($m + 1) / $MOVES));
	set_allow($cap, $base + int(($cap - $base) / 10), time, $mode eq 'block_writes' ? 2 : 5);
	my $ts = time;
	my $ok = eval {
		# the rebalance's job runs once its start committed
		$mover->do("SELECT citus_rebalance_start(shard_transfer_mode => '$mode')") if $rebalance;
		my $sql = $rebalance ? 'SELECT citus_rebalance_wait()'
		  : "SELECT citus_move_shard_placement($shardid, '127.0.0.1', $src_port, '127.0.0.1', "
		  . $dst->port . ", shard_transfer_mode => '$mode')";
		$mover->do($sql, { pg_async => DBD::Pg::PG_ASYNC() });
		# meanwhile the probes: another shard value's on its node (direct,
		# the move holds nothing of it), then the moving one's on its
		# source until the move returns (direct before the final phase;
		# one that meets the final phase waits, then runs routed on the new
		# placement); a rebalance's: every shard value's on its node
		if (!$rebalance)
		{
			my $p = $probe->($other_node, $other_sv);
			push @probe_bad, "move $m, during, another shard value's: $p->{what}, seen $p->{seen}"
			  unless $p->{what} eq 'direct' && $p->{seen} eq 't';
		}
		my $i = 0;
		until ($mover->pg_ready)		# the statement_timeout bounds it
		{
			my $psv = $rebalance ? $shard_values[ $i++ % 4 ] : $sv;
			my $pn = $node_of_port{ $before{ (grep { $sv_of{$_} == $psv } @shardids)[0] } };
			my $p = $probe->($pn, $psv);
			$p->{m} = $m;
			$p->{sv} = $psv;
			push @probes_during, $p;
			sleep 0.1;
		}
		$mover->pg_result;
		1;
	};
	my $te = time;
	set_allow($cap);
	ok($ok, "move $m: " . ($rebalance ? "citus_rebalance_start ($mode)"
		  : "shard $shardid from " . $node_of_port{$src_port}->name . ' to ' . $dst->name . " ($mode)"))
	  or diag($@);
	my %after = $placements->();
	my @moved = grep { $before{$_} != $after{$_} } @shardids;
	# its window, its mode, and the shard values it moved with the port
	# of each one's source and target
	push @moves, [ $ts, $te, $mode, { map { ($sv_of{$_} => [ $before{$_}, $after{$_} ]) } @moved } ];
	note(sprintf('move %d: %s, %s, %.1f s (at %.0f s, %d tasks unfinished)', $m, $rebalance ? "rebalance (@moved)" : $shardid,
		$mode, $te - $ts, $ts - $t0, $unfinished->()));
	if ($rebalance)
	{
		cmp_ok(scalar(@moved), '>=', 1, "move $m: the rebalance moved shard groups (@moved)");
	}
	else
	{
		is(join(',', @moved), $shardid, "move $m: the placement is on " . $dst->name);
	}
	for my $mid (@moved)
	{
		my $msv = $sv_of{$mid};
		my ($from, $to) = ($node_of_port{ $before{$mid} }, $node_of_port{ $after{$mid} });
		# its orphans on the source: a snapshot and their content now,
		# before any call after the move
		my $snap = $dq->($from, 'SELECT pg_current_snapshot()');
		my @names = split /\n/, $dq->($co, 'SELECT object_name FROM pg_dist_cleanup WHERE object_type = 1
			AND node_group_id = (SELECT groupid FROM pg_dist_node WHERE nodeport = ' . $from->port . ') ORDER BY 1');
		cmp_ok(scalar(@names), '>=', 6, "move $m: its orphans (the shard group's old tables) are left");
		for my $name (grep { my $n = $_; !grep { $_->{name} eq $n && $_->{move} == $m } @orphans } @names)
		{
			push @orphans, { name => $name, node => $from, snap => $snap, move => $m,
				sum => $dq->($from, "SELECT count(*) || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '')
					FROM $name x") };
		}
		# there and back: the shard relation on the target is a new one
		my $rel = "ntask.task_$mid";
		my $oid = $oid_of->($to, $rel);
		if (my $old = $oids_seen{ $to->port . $rel })
		{
			isnt($oid, $old, "move $m: $rel back on " . $to->name . ' is a new relation (OID)');
			$back_again++;
		}
		$oids_seen{ $from->port . $rel } = $oid_of->($from, $rel);
		# DROP COLUMN: the kept column's number differs between the new
		# placement and the orphan
		if (!$attnum_checked++)
		{
			my $att = "SELECT attnum FROM pg_attribute WHERE attrelid = '$rel'::regclass AND attname = 't027_note'";
			is($dq->($to, $att) . ' ' . $dq->($from, $att), ($dq->($from, $att) - 1) . ' ' . $dq->($from, $att),
				"move $m: after DROP COLUMN the moved shard relation numbers its columns otherwise (Citus #5038)");
		}
		# after: the source routes (the placement is not there), the
		# target runs the probe directly; both reach the new placement
		my $p = $probe->($from, $msv);
		push @probe_bad, "move $m, after, on the source: $p->{what}, seen $p->{seen}"
		  unless $p->{what} eq "routed: the shard's placement is not on this node" && $p->{seen} eq 't';
		$p = $probe->($to, $msv);
		push @probe_bad, "move $m, after, on the target: $p->{what}, seen $p->{seen}"
		  unless $p->{what} eq 'direct' && $p->{seen} eq 't';
	}
}
is(scalar(@probe_bad), 0, 'the probes: direct on the shard\'s node, routed (and applied there) from the node it left')
  or diag(join("\n", @probe_bad));
cmp_ok($back_again, '>=', 1, "a shard moved there and back ($back_again)");
{
	my @bad = grep { !($_->{what} eq 'direct' || $_->{what} eq "routed: the shard's placement is not on this node")
		  || $_->{seen} ne 't' } @probes_during;
	is(scalar(@bad), 0, 'the probes during the moves (' . scalar(@probes_during) . '): each direct, or routed to '
		  . 'the new placement, and each what the coordinator read then')
	  or diag(join("\n", map { "move $_->{m}, shard value $_->{sv}: $_->{what}, seen $_->{seen}" } @bad));
	my @fell = grep { $_->{what} =~ /^routed/ } @probes_during;
	my @waited = grep { $_->{secs} > 0.3 } @probes_during;
	note(sprintf('probes during the moves: %d, %d direct, %d routed after the placement moved, %d waited over 0.3 s '
		  . '(the longest %.1f s)', scalar(@probes_during), scalar(@probes_during) - scalar(@fell), scalar(@fell),
		scalar(@waited), List::Util::max(0, map { $_->{secs} } @probes_during)));
	# every probe here was sent before its move returned: one that ran
	# routed met the final phase (a block_writes move holds it from its
	# start), waited, and ran on the new placement (its lease is what the
	# coordinator read then, checked above)
	cmp_ok(scalar(@fell), '>=', 1,
		'a probe sent during a move met its final phase: it waited, then ran routed on the new placement');
}
set_allow($N);
is(read_allow(), $N, 'every key released to the producers');

# the load ends: every task final (housekeeping releases what expired)
ok(wait_until(sub {
	$dq->($co, "SELECT count(*) FROM ntask.task WHERE queue = 'ml'") == $N && $unfinished->() == 0
}, $long ? 480 : 240), 'every task reaches a final state after the load') or diag($q->(q{
	SELECT state, count(*) FROM ntask.task WHERE queue = 'ml' GROUP BY 1}));
note(sprintf('drained at %.0f s', time - $t0));
open my $sf, '>', "$tmp/stop" or die;
close $sf;
for my $k (@kids)
{
	waitpid($k, 0);
	is($? >> 8, 0, "client $k exited cleanly");
}
$check_orphans->('after the load');
is($orphan_bad, 0, 'no orphan written after its move committed (' . scalar(@orphans) . ' orphaned tables)');
$mover->disconnect;
$_->disconnect for values %probe_dbh;
$_->disconnect for values %dbh_of;
my $load_s = time - $t0;

# the clients' logs
my (%claims, @dup_claims, %trans, %rel, %rcpt, %enq, @errors, $calls, %hb, @stale, %pid_who, @serial);
my @calls;
# the producers' enqueue calls per connection (its backend's pid), in
# order: the key of each of PW's and PO's, the shard value of each of PM's;
# the connections a call failed on; the global pids of the clients'
# coordinator backends (G)
my (%enq_calls, %pid_failed, %gpid_who);
for my $f (glob("$tmp/*.log"))
{
	my ($who) = $f =~ m{/(\w+)\.log$};
	my $pid;
	open my $fh, '<', $f or die;
	while (my $l = <$fh>)
	{
		chomp $l;
		my ($ts, $te, $what, @f) = split / /, $l;
		if ($what eq 'I' || $what eq 'J')
		{
			$pid_who{"$f[1]:$f[0]"} = $what eq 'J' ? "$who-rr" : $who;
			$pid = "$f[1]:$f[0]" if $what eq 'I';
			next;
		}
		if ($what eq 'G')
		{
			$gpid_who{ $f[0] } = $who;
			next;
		}
		if ($what eq 'M')
		{
			push @{ $enq_calls{$who}{$pid} }, $f[0];
		}
		elsif (($what eq 'P' || $what eq 'D') && $who ne 'PM')
		{
			push @{ $enq_calls{$who}{$pid} }, $f[0];
		}
		$pid_failed{$pid} = 1 if $what eq 'E' && defined $pid;
		if ($what eq 'X')
		{
			push @serial, "$who: @f";
			next;
		}
		push @calls, [ $ts, $te ] unless $what eq 'N' || $what eq 'K';
		if ($what eq 'C')
		{
			my $k = "$f[0]:$f[1]";
			push @dup_claims, "$k ($who and $claims{$k}{who})" if $claims{$k};
			$claims{$k} = { who => $who, attempt => $f[2], i => $f[3] };
		}
		elsif ($what eq 'T')
		{
			my $k = "$f[0]:$f[1]";
			push @stale, $k if $f[3] eq 'stale';
			$trans{$k} = [ @f[ 2 .. 4 ] ] if $f[3] eq 'applied';
		}
		elsif ($what eq 'L')
		{
			push @stale, "$f[0]:$f[1]" if $f[2] eq 'stale';
			$rel{"$f[0]:$f[1]"} = 1 if $f[2] eq 'applied';
		}
		elsif ($what eq 'R')
		{
			push @stale, "$f[0]:$f[1]" if $f[2] eq 'stale';
			$rcpt{"$f[0]:$f[1]"} = 1 if $f[2] eq 'applied';
		}
		elsif ($what eq 'H')
		{
			$hb{ $f[2] }++;
		}
		elsif ($what eq 'P' || $what eq 'D')
		{
			push @{ $enq{ $f[0] } }, [ $what, $f[1], $f[2], $f[3] // '' ];
		}
		elsif ($what eq 'E')
		{
			push @errors, "$who: @f";
		}
	}
}
note(sprintf('%d calls; %d claims, %d applied transitions, %d releases, %d receipts, %d heartbeats (%d null), '
	  . '%d stale writes refused, %d failed calls', scalar(@calls), scalar(keys %claims), scalar(keys %trans),
	scalar(keys %rel), scalar(keys %rcpt), ($hb{applied} // 0) + ($hb{null} // 0), $hb{null} // 0,
	scalar(@stale), scalar(@errors)));
is(scalar(@errors), 0, 'no call failed during the moves') or diag(join("\n", @errors[ 0 .. ($#errors < 9 ? $#errors : 9) ]));

# every move ran while clients' calls ran
for my $m (0 .. $#moves)
{
	my ($ms, $me, $mode) = @{ $moves[$m] };
	my $n = grep { $_->[0] < $me && $_->[1] > $ms } @calls;
	cmp_ok($n, '>=', 1, "move $m ($mode): $n client calls ran during it");
}

# 1. every key enqueued is one task; duplicates returned its id
my %task_of = map { split /\|/ } split /\n/,
  $q->("SELECT task_key || '|' || task_id FROM ntask.task WHERE queue = 'ml'");
is(scalar(keys %task_of), $N, "$N tasks, one per key");
my @enq_bad;
for my $i (1 .. $N)
{
	my $e = $enq{"k$i"} // [];
	my @firsts = grep { $_->[0] eq 'P' } @$e;
	push @enq_bad, "k$i: not enqueued" unless @firsts == 1;
	push @enq_bad, "k$i: enqueued as a second task" if grep { ($_->[1] // '') ne ($task_of{"k$i"} // 'none') } @$e;
	push @enq_bad, "k$i: a duplicate enqueue created a task" if grep { $_->[0] eq 'D' && $_->[2] } @$e;
	push @enq_bad, "k$i: no duplicate enqueue" if $twice->($i) && !grep { $_->[0] eq 'D' } @$e;
}
is(scalar(@enq_bad), 0, 'every enqueue made or found its key\'s one task') or diag(join("\n", @enq_bad[0 .. 9]));
# PM's duplicates: a key repeated inside a call (its second row names the
# task of the first, not created), a key of an earlier call
for my $kind ('in', 'across')
{
	my $n = grep { $_->[0] eq 'D' && $_->[3] eq $kind } map { @$_ } values %enq;
	cmp_ok($n, '>=', 1, 'PM: ntask_enqueue_many answered duplicates ' . ($kind eq 'in' ? 'inside a call' : 'across calls')
		  . " ($n), each with its key's task, not created");
}
note(sprintf('PM: %d calls of ntask_enqueue_many, %d keys', scalar(map { @$_ } values %{ $enq_calls{PM} // {} }),
	scalar(grep { $_ % 4 == 3 } 1 .. $N)));

# 2. the ledger against the claims the workers received
my %ledger;
for (split /\n/, $q->(q{
	SELECT a.task_id || '|' || a.token || '|' || a.attempt || '|' || coalesce(a.result, '-')
	FROM ntask.attempt_all a JOIN ntask.task t ON t.task_id = a.task_id AND t.shard = a.shard
	WHERE t.queue = 'ml'}))
{
	my ($id, $tok, $att, $res) = split /\|/;
	$ledger{"$id:$tok"} = { attempt => $att, result => $res };
}
is(scalar(@dup_claims), 0, 'no (task, token) handed to two claims') or diag(join("\n", @dup_claims[0 .. 9]));
my @lost = grep { !$ledger{$_} } sort keys %claims;
is(scalar(@lost), 0, 'every claim a worker received is in the ledger (' . scalar(keys %claims) . ' claims)')
  or diag(join("\n", @lost[0 .. 9]));
my @unknown = grep { !$claims{$_} } sort keys %ledger;
is(scalar(@unknown), 0, 'every attempt in the ledger was received by a worker (' . scalar(keys %ledger) . ' attempts)')
  or diag(join("\n", @unknown[0 .. 9]));
my @att_bad = grep { $ledger{$_} && $claims{$_}{attempt} != $ledger{$_}{attempt} } keys %claims;
is(scalar(@att_bad), 0, 'each claim\'s attempt number is its ledger row\'s');
is($q->(q{
	SELECT count(*) FROM (
		SELECT array_agg(a.token ORDER BY a.attempt) AS by_attempt,
			array_agg(a.token ORDER BY a.token) AS by_token,
			count(DISTINCT a.token) AS d, count(*) AS n,
			array_agg(a.attempt ORDER BY a.attempt) AS att
		FROM ntask.attempt_all a JOIN ntask.task k ON k.task_id = a.task_id AND k.shard = a.shard
		WHERE k.queue = 'ml' GROUP BY a.shard, a.task_id) x
	WHERE by_attempt <> by_token OR d <> n
	   OR att <> (SELECT array_agg(g::integer ORDER BY g) FROM generate_series(1, n) g)}), '0',
	'tokens strictly increasing per task, attempts 1..n');
my $overlaps = $q->(q{
	SELECT coalesce(string_agg(task_id || ' token ' || token || ' claimed ' || claimed_at
		|| ' before ' || coalesce(prev_end::text, 'the open end') || ' of token ' || prev_token, E'\n'), '')
	FROM (
		SELECT a.task_id, a.token, a.claimed_at,
			lag(a.ended_at) OVER w AS prev_end, lag(a.token) OVER w AS prev_token
		FROM ntask.attempt_all a JOIN ntask.task k ON k.task_id = a.task_id AND k.shard = a.shard
		WHERE k.queue = 'ml'
		WINDOW w AS (PARTITION BY a.task_id ORDER BY a.token)) x
	WHERE prev_token IS NOT NULL AND (prev_end IS NULL OR claimed_at < prev_end)});
is($overlaps, '', 'never two live leases: each attempt ended before the next one was claimed');

# 3. transitions and releases: each applied one is its attempt's ledger
# result, each ledger result an applied call
my @res_bad;
for my $k (sort keys %trans)
{
	my ($to, $r, $st) = @{ $trans{$k} };
	my $l = $ledger{$k};
	push @res_bad, "$k: applied $to ($st), ledger " . ($l ? $l->{result} : 'none')
	  unless $l && $l->{result} eq $st;
}
for my $k (sort keys %rel)
{
	push @res_bad, "$k: released, ledger " . ($ledger{$k} ? $ledger{$k}{result} : 'none')
	  unless $ledger{$k} && $ledger{$k}{result} eq 'released';
}
for my $k (sort keys %ledger)
{
	my $res = $ledger{$k}{result};
	next if $res eq '-' || $res eq 'lease_expired';
	push @res_bad, "$k: ledger $res, no applied call"
	  unless $rel{$k} && $res eq 'released' || $trans{$k} && $trans{$k}[2] eq $res;
}
is(scalar(@res_bad), 0, 'every applied transition and release is its attempt\'s ledger result, and back')
  or diag(join("\n", @res_bad[0 .. ($#res_bad < 9 ? $#res_bad : 9)]));

# 4. final states; every succeeded task succeeded once, by its last token
my %final = map { my ($id, $st, $tok, $i) = split /\|/; ($id => [ $st, $tok, $i ]) } split /\n/, $q->(q{
	SELECT task_id || '|' || state || '|' || token || '|' || (payload->>'i')
	FROM ntask.task WHERE queue = 'ml'});
my (@state_bad, @succ_bad);
my %succ_by;
for my $k (keys %trans)
{
	push @{ $succ_by{ (split /:/, $k)[0] } }, (split /:/, $k)[1] if $trans{$k}[0] eq 'succeeded';
}
for my $id (keys %final)
{
	my ($st, $tok, $i) = @{ $final{$id} };
	my $want = $i % 97 == 0 ? 'repair_required' : 'succeeded';
	push @state_bad, "task $id (i $i): $st, not $want" if $st ne $want;
	if ($st eq 'succeeded')
	{
		my $by = $succ_by{$id} // [];
		push @succ_bad, "task $id: succeeded by tokens [@$by], its token $tok"
		  unless @$by == 1 && $by->[0] == $tok;
	}
}
is(scalar(@state_bad), 0, 'every task final: succeeded, or repair_required for the ones that always fail')
  or diag(join("\n", @state_bad[0 .. ($#state_bad < 9 ? $#state_bad : 9)]));
is(scalar(@succ_bad), 0, 'every succeeded task succeeded exactly once, by its holder\'s (its last) token')
  or diag(join("\n", @succ_bad[0 .. ($#succ_bad < 9 ? $#succ_bad : 9)]));
is($q->(q{SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t ON t.task_id = a.task_id AND t.shard = a.shard
	WHERE t.queue = 'ml' AND a.result = 'succeeded' AND a.token <> t.token}), '0',
	'ledger: only a task\'s last token succeeded');

# 5. receipts and business rows
my %rdb = map { $_ => 1 } split /\n/, $q->('SELECT task_id || \':\' || token FROM ntask.receipt');
my %bdb;
my @biz_dup;
for (split /\n/, $q->('SELECT task_id || \':\' || token FROM biz'))
{
	my ($id) = split /:/;
	push @biz_dup, $id if grep { /^$id:/ } keys %bdb;
	$bdb{$_} = 1;
}
is(join(',', sort keys %rdb), join(',', sort keys %rcpt),
	'the receipts committed are exactly ntask.receipt (' . scalar(keys %rcpt) . ')');
is(join(',', sort keys %bdb), join(',', sort keys %rcpt), 'one business row per committed receipt');
is(scalar(@biz_dup), 0, 'no task has two business rows');
is(scalar(grep { $final{$_}[0] eq 'succeeded' } keys %final), scalar(keys %bdb),
	'every succeeded task has its business row');

# 6. the direct path under the load (the DEBUG1 decision of every call of
# the transition family on the worker nodes, by backend: the clients' own,
# the probes', and the others: Citus' backends running delegated calls)
my (%dec, @dec_all);
for my $n ($w1, $w2)
{
	for my $d (decisions($n, $log_off{ $n->port }))
	{
		# a Citus backend's call: delegated by the client whose
		# coordinator (or worker node) backend has that global pid ("-d")
		my ($gpid) = $d->{app} =~ /^citus_internal gpid=(\d+)$/;
		my $who = $pid_who{ $n->port . ':' . $d->{pid} }
		  // ($d->{pid} == $probe_pid{ $n->port } ? 'probe'
			: defined $gpid && $gpid_who{$gpid} ? "$gpid_who{$gpid}-d" : 'delegated');
		$d->{who} = $who;
		$d->{port} = $n->port;
		push @dec_all, $d;
		# 'direct' once (it is its own what), 'routed' besides each reason
		$dec{$who}{routed}++ if $d->{what} =~ /^routed/;
		$dec{$who}{ $d->{what} }++;
	}
}
for my $who (sort keys %dec)
{
	note("path decisions of $who: " . join(', ', map { "$dec{$who}{$_} $_" } grep { $_ ne 'routed' }
		sort keys %{ $dec{$who} }));
}
for my $who ('W1', 'W2')
{
	cmp_ok($dec{$who}{direct} // 0, '>=', 1, "$who: its calls on its worker node took the direct path ("
		  . ($dec{$who}{direct} // 0) . ')');
}
is(scalar(grep { $_->{who} =~ /^W[12]$/ && $_->{what} =~ /not the whole statement|not READ COMMITTED/ } @dec_all), 0,
	'W1, W2: none of their prepared one-call statements was refused for its shape');
cmp_ok($dec{'WR-rr'}{"routed: not READ COMMITTED"} // 0, '>=', 1,
	'WR: its REPEATABLE READ calls ran routed (' . ($dec{'WR-rr'}{routed} // 0) . ')');
is($dec{'WR-rr'}{direct} // 0, 0, 'WR: none of them direct');
note('WR: ' . scalar(@serial) . ' REPEATABLE READ calls failed to serialize (a takeover first)');
my $in_moves = 0;
for my $d (grep { $_->{what} eq 'direct' && $_->{who} ne 'probe' } @dec_all)
{
	$in_moves++ if grep { $d->{at} >= $_->[0] && $d->{at} <= $_->[1] } @moves;
}
cmp_ok($in_moves, '>=', 1, "clients' calls ran on the direct path while shards moved ($in_moves)");
# the claims: routed while the queue had its guard, direct after (a
# second of slack for a call that read the queue row before)
my @guarded = grep { $_->{who} =~ /^W[12]$/ && $_->{what} =~ /guard or flow control/ } @dec_all;
cmp_ok(scalar(grep { $_->{at} < $unguarded } @guarded), '>=', 1,
	'W1, W2: their claims ran routed while the queue had its guard (' . scalar(@guarded) . ')');
is(scalar(grep { $_->{at} > $unguarded + 1 } @guarded), 0, 'W1, W2: none after the guard was cleared');
my $late = 0;
for my $d (grep { $_->{what} eq 'direct' && $_->{who} =~ /^W[12]$/ && $_->{at} > $unguarded + 1 } @dec_all)
{
	$late++ if grep { $d->{at} >= $_->[0] && $d->{at} <= $_->[1] } @moves;
}
cmp_ok($late, '>=', 1, "W1, W2: their calls ran directly during the moves after it ($late)");
note('clients\' calls routed from the node a shard had left: '
	  . scalar(grep { $_->{who} ne 'probe' && $_->{what} =~ /not on this node/ } @dec_all));

# the producers' enqueues: PW's (ntask_enqueue on worker node 2) and PM's
# (ntask_enqueue_many on worker node 1) each logged one decision on its
# node, in the order of the calls, for the call's shard value (a connection
# a call failed on may have one more, the failed call's); PO's delegated
# ones (ntask_enqueue_on from the coordinator) theirs in Citus' backends
# on the worker nodes, at most one per call.  Each direct, or routed for
# the one reason a whole statement outside a block has: the shard's
# placement is not on this node
my $moving_direct = 0;
my %shard_of_key = map { split /\|/ } split /\n/,
  $q->("SELECT 'k' || i || '|' || ntask_shard('ml', 'k' || i) FROM generate_series(1, $N) i");
for my $who ('PW', 'PM', 'PO')
{
	my $dwho = $who eq 'PO' ? 'PO-d' : $who;
	my @mine = grep { $_->{who} eq $dwho } @dec_all;
	my @odd = grep { $_->{what} ne 'direct' && $_->{what} ne "routed: the shard's placement is not on this node" } @mine;
	is(scalar(@odd), 0, "$who: each enqueue direct, or routed from a node without the placement; none refused "
		  . 'for its shape' . ($who eq 'PM' ? ' nor for keys of several shards' : ''))
	  or diag(join("\n", map { "$_->{at} $_->{what}" } @odd[ 0 .. List::Util::min($#odd, 9) ]));
	my $ncalls = 0;
	if ($who eq 'PO')
	{
		$ncalls += @$_ for values %{ $enq_calls{PO} };
		cmp_ok(scalar(@mine), '<=', $ncalls, "PO: at most one decision per delegated enqueue ("
			  . scalar(@mine) . " for $ncalls calls)");
	}
	else
	{
		my @bad;
		for my $pid (sort keys %{ $enq_calls{$who} })
		{
			my @want = map { /^k/ ? $shard_of_key{$_} : $_ } @{ $enq_calls{$who}{$pid} };
			$ncalls += @want;
			my ($port, $p) = split /:/, $pid;
			my @got = map { $_->{shard} } grep { $_->{pid} == $p } @mine;
			pop @got if $pid_failed{$pid} && @got == @want + 1;
			push @bad, "$pid: calls of shard values [@want], decisions [@got]" unless "@got" eq "@want";
		}
		is(scalar(@bad), 0, "$who: one decision per call, in order, for its shard value ($ncalls calls)")
		  or diag(join("\n", @bad));
	}
	my @direct = grep { $_->{what} eq 'direct' } @mine;
	my @during = grep { my $d = $_; grep { $d->{at} >= $_->[0] && $d->{at} <= $_->[1] } @moves } @direct;
	# the direct enqueues of a shard value while it moved, by the node
	# they ran on: its source (before the move blocked its writes) or its
	# target (after the move committed, before it returned to the test)
	my (@moving, %on, %late);
	for my $d (@direct)
	{
		for my $m (grep { $d->{at} >= $_->[0] && $d->{at} <= $_->[1] && $_->[3]{ $d->{shard} } } @moves)
		{
			my $end = $m->[3]{ $d->{shard} }[0] == $d->{port} ? 'source' : 'target';
			$on{"$end, $m->[2]"}++;
			# how far into the move (its share of the move's time)
			my $f = ($d->{at} - $m->[0]) / ($m->[1] - $m->[0]);
			$late{"$end, $m->[2]"} = $f if $f > ($late{"$end, $m->[2]"} // 0);
			push @moving, $d if $end eq 'source';
		}
	}
	cmp_ok(scalar(@direct), '>=', 1, "$who: its enqueues took the direct path (" . scalar(@direct) . ' of ' . scalar(@mine) . ')');
	cmp_ok(scalar(@during), '>=', 1, "$who: direct enqueues while a move ran (" . scalar(@during) . ')');
	note("$who: direct enqueues of the moving shard value during its move: "
		  . (join(', ', map { sprintf('%d on its %s (the last at %.0f%% of the move\'s time)', $on{$_}, $_, 100 * $late{$_}) }
			  sort keys %on) || 'none'));
	$moving_direct += @moving;
}
# a force_logical move blocks its group's writes only in its final phase:
# enqueues of the moving shard value ran directly on its source while it
# moved (the checks above: each key one task, none lost by the move, the
# orphan unwritten after it)
cmp_ok($moving_direct, '>=', 1, "producers' enqueues of the moving shard value ran directly on its source during its move ($moving_direct)");

# 7. DROP COLUMN: nothing written into the kept column, every task's key and
# payload in place, every ledger row's worker a client
is($q->(q{SELECT count(*) FROM ntask.task WHERE t027_note IS NOT NULL
	OR (queue = 'ml' AND task_key <> 'k' || (payload->>'i'))}), '0',
	'after DROP COLUMN and the moves: the task rows\' columns in place');
is($q->(q{SELECT count(*) FROM ntask.attempt WHERE t027_note IS NOT NULL}), '0', 'and the ledger\'s');
is($q->(q{SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t ON t.task_id = a.task_id AND t.shard = a.shard
	WHERE t.queue = 'ml' AND a.worker NOT IN ('WC', 'WT', 'W1', 'W2', 'WR', 'WO')}), '0',
	'every ledger row names the client that claimed it');

# what the run exercised
my $takeovers = grep { $ledger{$_}{result} eq 'lease_expired' } keys %ledger;
cmp_ok($takeovers, '>=', 1, "leases ran out and were taken over ($takeovers)");
cmp_ok(scalar(@stale), '>=', 1, 'stale writes were refused (' . scalar(@stale) . ')');
cmp_ok(scalar(grep { $ledger{$_}{result} eq 'retry_wait' } keys %ledger), '>=', 1, 'attempts failed and were retried');
cmp_ok(scalar(keys %rel), '>=', 1, 'attempts were released');
my %by_worker;
$by_worker{ $claims{$_}{who} }++ for keys %claims;
for my $wk (@workers)
{
	cmp_ok($by_worker{ $wk->[0] } // 0, '>=', 1, "worker $wk->[0] claimed tasks (" . ($by_worker{ $wk->[0] } // 0) . ')');
}

# ---------------------------------------------------------------------
# Part 3, alone: REPEATABLE READ across a move, and a worker node down
# during a move
# ---------------------------------------------------------------------
my $p3_t0 = time;
$q->("SELECT count(*) FROM ntask_queue_set('p3', lease => '1 hour')");
my $p3key = 0;
# a task of queue p3 in shard value $sv, claimed (through the coordinator)
my $held = sub {
	my ($sv) = @_;
	my $k;
	do { $k = 'q' . ++$p3key } until $q->("SELECT ntask_shard('p3', '$k')") == $sv;
	my $id = $q->("SELECT task_id FROM ntask_enqueue('p3', '$k', '{}')");
	my $tok;
	wait_for("the claim of $k", sub {
		$tok = $q->("SELECT token FROM ntask_claim_on(${sv}::smallint, 'p3', 'p3', 1)");
		return $tok ne '';
	}, 60);
	return ($id, $tok);
};
# the decisions of backend $pid on $node from $off
my $said = sub {
	my ($node, $off, $pid) = @_;
	return join(',', map { $_->{what} } grep { $_->{pid} == $pid } decisions($node, $off));
};
my $sv_on = sub {
	my ($node) = @_;
	for my $sv (@shard_values)
	{
		my (undef, $n) = NtaskCitus::placement($c, $sv);
		return $sv if $n->port == $node->port;
	}
	die 'no shard value on ' . $node->name;
};
my $orphan_of = sub {
	my ($sid, $node) = @_;
	my $snap = $node->safe_psql('postgres', 'SELECT pg_current_snapshot()');
	my $sum = $node->safe_psql('postgres', "SELECT count(*) || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '')
		FROM ntask.task_$sid x");
	return sub {
		return $node->safe_psql('postgres', "SELECT count(*) FILTER (WHERE NOT pg_visible_in_snapshot(x.xmin::text::xid8,
			'$snap'::pg_snapshot)) || ' ' || CASE WHEN count(*) || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') = '$sum'
			THEN 't' ELSE 'f' END
			FROM ntask.task_$sid x");
	};
};

# REPEATABLE READ across a move: a transaction on the source takes its
# snapshot, the shard moves (block_writes), then the transaction
# heartbeats (in a block: routed, to the new placement) and commits
{
	drop_orphans($c);
	my $sv = $sv_on->($w1);
	my ($sid, $src, $dst) = NtaskCitus::placement($c, $sv);
	my ($id, $tok) = $held->($sv);
	my $r = connect_to($src, autocommit => 0);
	$r->do('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
	my ($rpid) = $r->selectrow_array('SELECT pg_backend_pid()');
	is(scalar $r->selectrow_array("SELECT token FROM ntask.task WHERE task_id = $id AND shard = $sv"), $tok,
		'RR: the transaction reads the task (its snapshot)');
	my $mv = connect_to($co);
	$mv->do("SELECT citus_move_shard_placement($sid, '127.0.0.1', " . $src->port . ", '127.0.0.1', " . $dst->port
		  . ", shard_transfer_mode => 'block_writes')", { pg_async => DBD::Pg::PG_ASYNC() });
	# the move does not wait for a reader (if it did, the heartbeat below
	# would come first: the outcome must be the same)
	my $moved_first = wait_until(sub { $mv->pg_ready }, 30);
	my $orphan = $moved_first ? $orphan_of->($sid, $src) : undef;
	my $off = -s $src->logfile;
	my ($lease) = $r->selectrow_array("SELECT ntask_heartbeat($id, $tok, lease => '7 hours')");
	$r->commit;
	$mv->pg_result;
	note('RR: the move ' . ($moved_first ? 'committed before' : 'waited for') . ' the transaction\'s heartbeat');
	is($said->($src, $off, $rpid), 'routed: in a transaction block', 'RR: the heartbeat in the block ran routed');
	is($q->("SELECT lease_until = '$lease'::timestamptz AND lease_until > now() + interval '6 hours'
		FROM ntask.task WHERE task_id = $id AND shard = $sv"), 't', 'RR: the new placement has its lease');
	is((NtaskCitus::placement($c, $sv))[1]->port, $dst->port, 'RR: the shard moved');
	# REPEATABLE READ outside a block, on the node the shard left and on its new node
	my $rr1 = connect_to($src);
	my $rr2 = connect_to($dst);
	$_->do("SET default_transaction_isolation = 'repeatable read'") for ($rr1, $rr2);
	my ($p1) = $rr1->selectrow_array('SELECT pg_backend_pid()');
	my ($p2) = $rr2->selectrow_array('SELECT pg_backend_pid()');
	my ($o1, $o2) = (-s $src->logfile, -s $dst->logfile);
	ok(defined $rr1->selectrow_array("SELECT ntask_heartbeat($id, $tok)"), 'RR: a heartbeat on the node the shard left');
	is(scalar $rr2->selectrow_array("SELECT result FROM ntask_transition($id, $tok, 'succeeded')"), 'applied',
		'RR: the transition on its new node');
	is($said->($src, $o1, $p1) . ' / ' . $said->($dst, $o2, $p2),
		'routed: not READ COMMITTED / routed: not READ COMMITTED', 'RR: both routed, saying why');
	$_->disconnect for ($r, $mv, $rr1, $rr2);
	is($q->("SELECT string_agg(attempt || ':' || result, ',') FROM ntask.attempt_all WHERE task_id = $id AND shard = $sv"),
		'1:succeeded', 'RR: one attempt, succeeded, on the new placement');
	is($orphan->(), '0 t', 'RR: the orphan was not written after the move') if $orphan;
}

# A worker node down during a move: a force_logical move from w1 to w2 is
# held after its copy (Citus' test hook, as t/028), a direct call on w1
# runs during its catch-up, w2 stops (immediate), the move is let go and
# fails; w1 goes on directly (a heartbeat, a task enqueued, claimed and
# finished there); w2 comes back, the failed move's leftovers are
# cleaned up, and the move, done again, carries everything
{
	drop_orphans($c);
	my $sv = $sv_on->($w1);
	my ($sid) = NtaskCitus::placement($c, $sv);
	my ($id, $tok) = $held->($sv);
	my $d1 = connect_to($w1);
	my ($d1pid) = $d1->selectrow_array('SELECT pg_backend_pid()');
	my $hold = connect_to($co);
	$hold->do('SELECT pg_advisory_lock(44000, 55152)');
	my $mv = connect_to($co);
	$mv->do('SET citus.running_under_citus_test_suite = on');
	$mv->do("SELECT citus_move_shard_placement($sid, '127.0.0.1', " . $w1->port . ", '127.0.0.1', " . $w2->port
		  . ", shard_transfer_mode => 'force_logical')", { pg_async => DBD::Pg::PG_ASYNC() });
	wait_for('down: the move held after its copy', sub {
		$co->safe_psql('postgres', q{SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND classid = 44000 AND objid = 55152 AND objsubid = 2 AND NOT granted}) > 0 || $mv->pg_ready;
	});
	my $off = -s $w1->logfile;
	my ($l1) = $d1->selectrow_array("SELECT ntask_heartbeat($id, $tok, lease => '5 hours')");
	is($said->($w1, $off, $d1pid), 'direct', 'down: a heartbeat on w1 during the catch-up runs directly');
	$w2->stop('immediate');
	$hold->do('SELECT pg_advisory_unlock(44000, 55152)');
	wait_for('down: the move ends', sub { $mv->pg_ready }, 300);
	my $moved = eval { $mv->pg_result; 1 };
	ok(!$moved, 'down: the move fails with its target down') and note('the move: ' . ($@ =~ s/\s+/ /gr));
	$_->disconnect for ($mv, $hold);
	is($q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $sid"), $w1->port,
		'down: the shard stays on w1');
	$off = -s $w1->logfile;
	my ($l2) = $d1->selectrow_array("SELECT ntask_heartbeat($id, $tok, lease => '6 hours')");
	ok(defined $l2 && $l2 gt $l1, 'down: a heartbeat on w1 after the failed move applies');
	my @said = ($said->($w1, $off, $d1pid));
	my ($k, $nid, $ntok, $res);
	my $ok = eval {
		do { $k = 'q' . ++$p3key } until $q->("SELECT ntask_shard('p3', '$k')") == $sv;
		($nid) = $d1->selectrow_array("SELECT task_id FROM ntask_enqueue('p3', '$k', '{}')");
		($ntok) = $d1->selectrow_array("SELECT token FROM ntask_claim_on(${sv}::smallint, 'p3', 'p3w1', 10)
			WHERE task_id = $nid");
		$off = -s $w1->logfile;
		($res) = $d1->selectrow_array("SELECT result FROM ntask_transition($nid, $ntok, 'succeeded')");
		push @said, $said->($w1, $off, $d1pid);
		1;
	};
	ok($ok && ($res // '') eq 'applied', 'down: on w1 a task is enqueued, claimed and finished with w2 down')
	  or diag($@);
	is(join(',', @said), 'direct,direct', 'down: the heartbeat and the transition on w1 ran directly');
	is($d1->selectrow_array("SELECT state || ' ' || lease_until FROM ntask.task_$sid WHERE task_id = $id"),
		"leased $l2", 'down: in w1\'s shard relation');
	$w2->start;
	drop_orphans($c);
	$q->("SELECT citus_move_shard_placement($sid, '127.0.0.1', " . $w1->port . ", '127.0.0.1', " . $w2->port
		  . ", shard_transfer_mode => 'block_writes')");
	my $orphan = $orphan_of->($sid, $w1);
	$off = -s $w1->logfile;
	is(scalar $d1->selectrow_array("SELECT result FROM ntask_transition($id, $tok, 'succeeded')"), 'applied',
		'down: w2 back, the move done again: the transition on w1 applies');
	is($said->($w1, $off, $d1pid), "routed: the shard's placement is not on this node", 'down: routed, to w2');
	$d1->disconnect;
	is($q->("SELECT string_agg(t.task_key || ' ' || t.state || ' ' || a.attempt || ':' || a.result, ',' ORDER BY t.task_key)
		FROM ntask.task t JOIN ntask.attempt_all a ON a.task_id = t.task_id AND a.shard = t.shard
		WHERE t.task_id IN ($id, $nid) AND t.shard = $sv"),
		join(',', sort map { "$_ succeeded 1:succeeded" } ($q->("SELECT task_key FROM ntask.task WHERE task_id = $id AND shard = $sv"), $k)),
		'down: both tasks succeeded, one attempt each, on w2');
	is($orphan->(), '0 t', 'down: the orphan on w1 was not written after the move');
}
note(sprintf('part 3: %.0f s', time - $p3_t0));

NtaskCitus::stop($c);
note(sprintf('t/027: %d tasks, %d moves; load %.0f s, whole test %.0f s', $N, $MOVES, $load_s, time - $t0));
done_testing();
