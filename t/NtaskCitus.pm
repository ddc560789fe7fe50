
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/NtaskCitus.pm: a Citus cluster (a coordinator and N workers) on loopback
# for a TAP test, each node a PostgreSQL::Test::Cluster with
# shared_preload_libraries = 'citus,ntask' (citus must come first).
#
#   use lib $FindBin::Bin;
#   require NtaskCitus;
#   NtaskCitus::require_citus();     # skip unless NTASK_CITUS=1 on 14-16; build
#   my $c = NtaskCitus::setup('name', moves => 1, orphans => 1);
#   $c->{coord}, @{ $c->{workers} }, $c->{q}->($sql)       # the nodes
#   NtaskCitus::stop($c);
#
# setup() is start() plus CREATE EXTENSION ntask and ntask_distribute(4),
# what t/024..t/028 share; t/023 tests those steps and calls start().
# moves => 1 adds what force_logical moves need (wal_level = logical, the
# slots and senders), orphans => 1 citus.defer_shard_delete_interval = -1
# (a move's old tables stay until citus_cleanup_orphaned_resources).
# connect_to, wait_for, placement, paths, drop_orphans, lock_waiters and
# race_move are the helpers the move tests share (exported on request).
#
# Citus is built from the vendored tarball (../shared/vendor, or
# NTASK_CITUS_TARBALL) in a build directory under /tmp and installed into
# the PostgreSQL that pg_config names (the one the test runs against): it
# is never part of the repository.  Nodes listen on 127.0.0.1 only, on
# free ports picked by PostgreSQL::Test::Cluster; the coordinator is told
# its own host (citus_set_coordinator_host) so that it can hold shards of
# reference tables, and every worker is added with citus_add_node.

package NtaskCitus;

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter qw(import);
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More ();
use POSIX ();
use Time::HiRes ();

our @EXPORT_OK = qw(connect_to wait_for placement key_in paths drop_orphans lock_waiters race_move);

our $VERSION_WANTED = '12.1.6';

sub pg_config
{
	return $ENV{PG_CONFIG} || 'pg_config';
}

sub pkglibdir
{
	my $pc = pg_config();
	my $d = `$pc --pkglibdir`;
	chomp $d;
	return $d;
}

# true when citus.so is installed in the PostgreSQL under test
sub installed
{
	return -f pkglibdir() . '/citus.so';
}

sub tarball
{
	return $ENV{NTASK_CITUS_TARBALL} if $ENV{NTASK_CITUS_TARBALL};
	my $here = dirname(abs_path(__FILE__));
	for my $c ("$here/../../shared/vendor/citus-$VERSION_WANTED.tar.gz",
		"/work/shared/vendor/citus-$VERSION_WANTED.tar.gz")
	{
		return $c if -f $c;
	}
	return undef;
}

# Build and install Citus unless it is installed; returns an error text on
# failure, '' on success.  The build log is kept in the build directory.
sub ensure_built
{
	return '' if installed();
	my $tb = tarball();
	return "no Citus tarball (set NTASK_CITUS_TARBALL)" unless $tb;
	my $dir = "/tmp/ntask-citus-build-$<";
	my $pc = pg_config();
	my $src = "$dir/citus-$VERSION_WANTED";
	my $cmd = "mkdir -p $dir && cd $dir && rm -rf $src && tar xzf '$tb'"
	  . " && cd $src && ./configure PG_CONFIG='$pc' > $dir/configure.log 2>&1"
	  . " && make -j2 > $dir/make.log 2>&1 && make install > $dir/install.log 2>&1";
	my $rc = system('sh', '-c', $cmd);
	return "Citus build failed (logs in $dir; it needs liblz4-dev, libzstd-dev, libkrb5-dev)"
	  if $rc != 0 || !installed();
	return '';
}

sub _node
{
	my ($name, $extra, $streaming) = @_;
	my $n = PostgreSQL::Test::Cluster->new($name);
	$n->init(allows_streaming => $streaming ? 1 : 0);
	$n->append_conf('postgresql.conf', qq{
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'citus,ntask'
max_connections = 100
max_prepared_transactions = 100
citus.shard_count = 4
ntask.backoff_jitter = off
log_min_messages = warning
$extra
});
	# the nodes talk to each other over TCP on loopback
	$n->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION citus');
	return $n;
}

# start(name, workers => N, conf => 'extra postgresql.conf lines',
#       coord_conf => 'extra lines for the coordinator only',
#       streaming => 1: the workers can have standbys)
sub start
{
	my ($name, %o) = @_;
	my $nw = $o{workers} // 2;
	my $conf = $o{conf} // "ntask.worker = off\n";
	my $coord = _node("${name}_coord", $conf . ($o{coord_conf} // ''));
	my @w = map { _node("${name}_w$_", $conf, $o{streaming}) } 1 .. $nw;
	$coord->safe_psql('postgres',
		"SELECT citus_set_coordinator_host('127.0.0.1', " . $coord->port . ")");
	for my $w (@w)
	{
		$coord->safe_psql('postgres',
			"SELECT citus_add_node('127.0.0.1', " . $w->port . ")");
	}
	return { coord => $coord, workers => \@w, name => $name };
}

sub stop
{
	my ($c) = @_;
	$_->stop('fast') for (@{ $c->{workers} }, $c->{coord});
}

# Skip the test unless NTASK_CITUS=1 and the server is one Citus 12.1
# supports (14-16: on 18 there is no Citus to build, Citus 13 would be
# needed and is not vendored); then build Citus if it is not installed.
sub require_citus
{
	if (!$ENV{NTASK_CITUS})
	{
		Test::More::plan(skip_all =>
			  "Citus test skipped (set NTASK_CITUS=1; builds Citus $VERSION_WANTED from ../shared/vendor)");
	}
	my $pc = pg_config();
	my ($pg_major) = `$pc --version` =~ /PostgreSQL (\d+)/;
	if ($pg_major > 16)
	{
		Test::More::plan(skip_all => "Citus $VERSION_WANTED supports PostgreSQL 14-16, not $pg_major");
	}
	my $err = ensure_built();
	Test::More::BAIL_OUT($err) if $err;
	require DBI;
	require DBD::Pg;
	return;
}

# what force_logical moves need, and a move's orphans kept
our $MOVES_CONF = "wal_level = logical\nmax_replication_slots = 16\nmax_wal_senders = 16\n";
our $ORPHANS_CONF = "citus.defer_shard_delete_interval = -1\n";

# setup(name, workers => 2, moves => 0|1, orphans => 0|1, conf => extra
# lines for every node, shard_count => 4): start(), then ntask created on
# the coordinator (Citus propagates it) and distributed
sub setup
{
	my ($name, %o) = @_;
	my $conf = "ntask.worker = off\n"
	  . ($o{moves} ? $MOVES_CONF : '')
	  . ($o{orphans} ? $ORPHANS_CONF : '')
	  . ($o{conf} // '');
	my $c = start($name, workers => $o{workers} // 2, conf => $conf,
		coord_conf => $o{coord_conf}, streaming => $o{streaming});
	my $co = $c->{coord};
	$c->{q} = sub { return $co->safe_psql('postgres', $_[0]); };
	$c->{q}->('CREATE EXTENSION ntask');
	$c->{q}->('SELECT count(*) FROM ntask_distribute(' . ($o{shard_count} // 4) . ')');
	return $c;
}

# a DBI connection to a node (AutoCommit unless autocommit => 0)
sub connect_to
{
	my ($node, %o) = @_;
	return DBI->connect('dbi:Pg:dbname=postgres;host=' . $node->host . ';port=' . $node->port,
		'', '', { AutoCommit => $o{autocommit} // 1, RaiseError => 1, PrintError => 0 });
}

# poll until $cond->() is true; dies after $secs (180)
sub wait_for
{
	my ($what, $cond, $secs) = @_;
	my $end = Time::HiRes::time() + ($secs // 180);
	while (Time::HiRes::time() < $end)
	{
		return 1 if $cond->();
		Time::HiRes::sleep(0.05);
	}
	die "timed out waiting for $what";
}

# placement($c, shard value): the Citus shard id of its ntask.task shard,
# the worker node that holds it, and another worker node
sub placement
{
	my ($c, $shard) = @_;
	my $q = $c->{q};
	my $id = $q->("SELECT get_shard_id_for_distribution_column('ntask.task', ${shard}::smallint)");
	my $port = $q->("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $id");
	my ($src) = grep { $_->port == $port } @{ $c->{workers} };
	my ($dst) = grep { $_->port != $port } @{ $c->{workers} };
	return ($id, $src, $dst);
}

# key_on($c, queue, prefix, port): a key (prefix || i) of the queue whose
# tasks live on the worker node listening on port
sub key_on
{
	my ($c, $queue, $prefix, $port) = @_;
	my $k = $c->{q}->(qq{SELECT k FROM generate_series(1, 200) i, LATERAL (SELECT '$prefix' || i AS k) x
		WHERE (SELECT p.nodeport FROM pg_dist_shard_placement p
			WHERE p.shardid = get_shard_id_for_distribution_column('ntask.task', ntask_shard('$queue', k)::smallint))
		  = $port ORDER BY i LIMIT 1});
	die "no key of $queue on $port" if $k eq '';
	return $k;
}

# key_in($c, queue, shard value, prefix): a key (prefix || n, n counting
# up across calls) of the queue in that shard value (ntask_shard)
my $key_in_n = 0;
sub key_in
{
	my ($c, $queue, $sh, $p) = @_;
	while (1)
	{
		$key_in_n++;
		return "$p$key_in_n" if $c->{q}->("SELECT ntask_shard('$queue', '$p$key_in_n')") == $sh;
	}
}

# paths($node, $offset): the direct path's DEBUG1 decisions in $node's log
# since $offset ("direct path for shard N", "routed path for shard N: why";
# src/shard.c, NtaskDirectBegin), with log_min_messages = debug1 there
sub paths
{
	my ($node, $off) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $off);
	return $log =~ /ntask: (direct path for shard \d+|routed path for shard \d+: [^\n]*|direct path (?:skips|stops in) shard \d+: [^\n]*)/g;
}

# lock_waiters($node, $like): backends of $node waiting for a lock whose
# query is like $like
sub lock_waiters
{
	my ($node, $like) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE '$like' AND pid <> pg_backend_pid()});
}

# race_move($c, %o): a call on the shard's node racing a move of its shard
# (t/028, t/032; docs/scaling.md "The move interlock").  $o{src} and
# $o{dst} the nodes, $o{shardid} the task shard, $o{mode} the transfer
# mode, $o{call} the call's SQL and $o{like} a LIKE pattern of it (to see
# it wait), $o{tag} for the messages.  $o{kind}:
#   call_first  the call takes the group's metadata lock, then waits for a
#               lock held by another session: the row $o{row} (FOR UPDATE),
#               or without it the shard relation (LOCK TABLE ... IN
#               EXCLUSIVE MODE: a claim's pick skips locked rows); the move
#               starts then, and must wait for the call;
#   move_first  Citus' test hook stops the move after its copy; the call
#               comes then: under block_writes it waits for the move, under
#               force_logical it returns during the catch-up.
# Returns the call's rows (arrayref of arrayrefs), its error ('' if none),
# whether the move waited for the call (call_first), and the offset of
# src's log before the call (for paths).
sub race_move
{
	my ($c, %o) = @_;
	my ($co, $src, $tag, $like) = ($c->{coord}, $o{src}, $o{tag}, $o{like});
	my $move_sql = "SELECT citus_move_shard_placement($o{shardid}, '127.0.0.1', " . $src->port
	  . ", '127.0.0.1', " . $o{dst}->port . ", shard_transfer_mode => '$o{mode}')";
	my $off = -s $src->logfile;
	my $mover = connect_to($co);
	my $caller = connect_to($src);
	my ($sth, $blocker, $hold);
	my $move_waited = 0;
	if ($o{kind} eq 'call_first')
	{
		$blocker = connect_to($src);
		if (defined $o{row})
		{
			$blocker->begin_work;
			$blocker->do("SELECT 1 FROM ntask.task_$o{shardid} WHERE task_id = $o{row} FOR UPDATE");
		}
		else
		{
			$blocker->do('SET citus.enable_manual_changes_to_shards = on');
			$blocker->begin_work;
			$blocker->do("LOCK TABLE ntask.task_$o{shardid} IN EXCLUSIVE MODE");
		}
		$sth = $caller->prepare($o{call}, { pg_async => DBD::Pg::PG_ASYNC() });
		$sth->execute;
		wait_for("$tag: the call waits for the lock", sub { lock_waiters($src, $like) > 0 });
		$mover->do($move_sql, { pg_async => DBD::Pg::PG_ASYNC() });
		# the move waits for the call: block_writes for its metadata lock
		# at the move's start; force_logical for its transaction (the
		# replication slot's snapshot), or its lock in the final phase
		wait_for("$tag: the move waits", sub {
			$mover->pg_ready || lock_waiters($co, '%citus_move_shard_placement%') > 0
			  || $src->safe_psql('postgres', qq{SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query NOT LIKE '$like'
				  AND pid <> pg_backend_pid()}) > 0;
		});
		$move_waited = $mover->pg_ready ? 0 : 1;
		$blocker->commit;
	}
	else
	{
		$hold = connect_to($co);
		$hold->do('SELECT pg_advisory_lock(44000, 55152)');
		$mover->do('SET citus.running_under_citus_test_suite = on');
		$mover->do($move_sql, { pg_async => DBD::Pg::PG_ASYNC() });
		wait_for("$tag: the move held after its copy", sub {
			$co->safe_psql('postgres', q{SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND classid = 44000 AND objid = 55152
				  AND objsubid = 2 AND NOT granted}) > 0;
		});
		$sth = $caller->prepare($o{call}, { pg_async => DBD::Pg::PG_ASYNC() });
		$sth->execute;
		if ($o{mode} eq 'block_writes')
		{
			# writes are blocked since the move's start: the call waits
			wait_for("$tag: the call waits for the move", sub { lock_waiters($src, $like) > 0 });
		}
		else
		{
			# catch-up: the call runs (directly) while the move waits
			wait_for("$tag: the call returns during the catch-up", sub { $caller->pg_ready });
		}
		$hold->do('SELECT pg_advisory_unlock(44000, 55152)');
	}
	my ($rows, $err) = ([], '');
	eval {
		$sth->pg_result;
		$rows = $sth->fetchall_arrayref;
		1;
	} or $err = $caller->errstr // "$@";
	$sth->finish;
	$mover->pg_result;
	$_->disconnect for ($mover, $caller, $blocker // (), $hold // ());
	return ($rows, $err, $move_waited, $off);
}

# loadavg(): the load averages over 1, 5 and 15 minutes ('?' if unknown);
# node_cpu($node): CPU seconds of a node, its postmaster (own and reaped
# children) and its live children, from /proc (bench/citus_direct.pl,
# bench/citus_batch.pl)
sub loadavg
{
	open my $f, '<', '/proc/loadavg' or return '?';
	my $l = <$f>;
	return join(' ', (split ' ', $l)[0 .. 2]);
}

sub node_cpu
{
	my ($node) = @_;
	my $pm = $node->{_pid};
	my $tck = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
	my $t = 0;
	for my $f (glob '/proc/[0-9]*/stat')
	{
		open my $h, '<', $f or next;
		my $s = <$h>;
		close $h;
		next unless $s;
		$s =~ s/^.*\) //;
		my @v = split ' ', $s;
		# after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
		my ($pid) = $f =~ m{/proc/(\d+)/};
		if ($pid == $pm)
		{
			$t += $v[11] + $v[12] + $v[13] + $v[14];
		}
		elsif ($v[1] == $pm)
		{
			$t += $v[11] + $v[12];
		}
	}
	return $t / $tck;
}

# bench_systems($name, queues => [...], plain_conf => ...): the two
# systems the bench/citus_*.pl benches compare: a plain node (ntask
# preloaded, its worker off) and a Citus cluster of a coordinator and one
# worker node (start), ntask distributed over 4 shards (every shard value
# on the worker node); each with the queues named (queue => lease, undef
# for the default lease).  Returns ($plain, $c).
sub bench_systems
{
	my ($name, %o) = @_;
	my $queues = join('', map {
		"SELECT count(*) FROM ntask_queue_set('$_->[0]'"
		  . (defined $_->[1] ? ", lease => '$_->[1]'" : '') . ");\n"
	} @{ $o{queues} // [ [ 'b', undef ] ] });
	my $plain = PostgreSQL::Test::Cluster->new('plain');
	$plain->init;
	$plain->append_conf('postgresql.conf', "listen_addresses = '127.0.0.1'\n"
		  . "shared_preload_libraries = 'ntask'\nntask.worker = off\n"
		  . ($o{plain_conf} // '') . "log_min_messages = warning\n");
	$plain->start;
	$plain->safe_psql('postgres', "CREATE EXTENSION ntask;\n$queues");
	my $c = start($name, workers => 1);
	$c->{coord}->safe_psql('postgres', "CREATE EXTENSION ntask;\n"
		  . "SELECT count(*) FROM ntask_distribute(4);\n$queues");
	return ($plain, $c);
}

# drop the orphans of earlier moves (a move refuses to run while one of its
# shard group is left on its target)
sub drop_orphans
{
	my ($c) = @_;
	my $co = $c->{coord};
	wait_for('the orphans dropped', sub {
		$co->psql('postgres', 'CALL citus_cleanup_orphaned_resources()');
		$co->safe_psql('postgres', 'SELECT count(*) FROM pg_dist_cleanup') == 0;
	}, 120);
	return;
}

# debug_paths($c): log_min_messages = debug1 on every worker node, so
# that paths() sees each direct call's decision
sub debug_paths
{
	my ($c) = @_;
	for my $n (@{ $c->{workers} })
	{
		$n->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
	}
}

# plain_node($name): a plain PostgreSQL with ntask, to compare answers with
sub plain_node
{
	my ($name) = @_;
	my $plain = PostgreSQL::Test::Cluster->new($name);
	$plain->init;
	$plain->append_conf('postgresql.conf', "shared_preload_libraries = 'ntask'\nntask.worker = off\n");
	$plain->start;
	$plain->safe_psql('postgres', 'CREATE EXTENSION ntask');
	return $plain;
}

# node_of($c, shard value): the worker node that holds it now
sub node_of
{
	my ($c, $s) = @_;
	my (undef, $n) = placement($c, $s);
	return $n;
}

# local_shards($c, $node): the shard values of ntask.shard_map held by
# $node and those held elsewhere, as two array refs
sub local_shards
{
	my ($c, $node) = @_;
	my @shards = split /\n/, $c->{q}->('SELECT shard FROM ntask.shard_map ORDER BY shard');
	return ([ grep { node_of($c, $_)->port == $node->port } @shards ],
		[ grep { node_of($c, $_)->port != $node->port } @shards ]);
}

# set_direct($c, 'on' | 'off'): ntask.citus_direct on every worker node,
# waited for until each reads it
sub set_direct
{
	my ($c, $setting) = @_;
	for my $n (@{ $c->{workers} })
	{
		$n->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = $setting; SELECT pg_reload_conf()");
		wait_for('the setting', sub { $n->safe_psql('postgres', 'SHOW ntask.citus_direct') eq $setting });
	}
}

1;
