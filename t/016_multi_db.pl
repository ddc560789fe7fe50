
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/016_multi_db.pl: one background worker per database (docs/worker.md
# "One worker per database").  One cluster, ntask.database unset,
# ntask.max_databases = 2, databases db1, db2, db3 and postgres:
#
#   1. before CREATE EXTENSION no worker runs; after it, db1 and db2 each
#      get one, named in pg_stat_activity, each with its own worker_stats
#   2. both dispatch their http tasks to t/provider.py, counted per database
#   3. both rescue the expired leases of their own external workers
#   4. with ntask.naptime = 60 s an enqueue wakes its own database's worker
#      (the wake-at-commit is per database)
#   5. a third database with ntask is over ntask.max_databases: one WARNING,
#      no worker, worker_stats says why
#   6. DROP EXTENSION in db1 stops its worker (not started again), and the
#      place it frees goes to db3
#   7. DROP DATABASE db2 (no FORCE) succeeds at once, its worker gone; tried
#      by a non-owner, it fails and leaves the worker alone
#   8. ntask.database = 'db3' set explicitly: only db3 gets a worker
#
# Polls with a wall-clock bound; no fixed sleeps but the two "stays so"
# checks (3 s).

use strict;
use warnings;

use FindBin;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use lib $FindBin::Bin;
use NtaskProvider;

my $json  = JSON::PP->new->canonical;
my $pport = NtaskProvider::start('016');
my $send  = "http://127.0.0.1:$pport/send";

(my $conf = $worker_conf) =~ s/^ntask\.database.*\n//m;
my $node = PostgreSQL::Test::Cluster->new('multi_db');
$node->init;
$node->append_conf('postgresql.conf', $conf . q{
ntask.max_databases = 2
});
$node->start;

sub sql { my ($db, $s) = @_; return $node->safe_psql($db, $s); }

sub workers
{
	return sql('postgres', q{SELECT coalesce(string_agg(datname || ':' || application_name
		|| ':' || usename, ',' ORDER BY datname), '')
		FROM pg_stat_activity WHERE backend_type = 'ntask worker'});
}

sub poll_workers
{
	my ($want, $what, $seconds) = @_;
	my $got;
	my $ok = wait_for($what, $seconds // 20, sub { ($got = workers()) eq $want });
	is($got, $want, $what);
	return $ok;
}

# ---------------------------------------------------------------------
# 1. identity
# ---------------------------------------------------------------------

sql('postgres', "CREATE DATABASE $_") for qw(db1 db2 db3);
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask launcher'}, '1'),
	'one ntask launcher runs');
is(workers(), '', 'no ntask worker before CREATE EXTENSION');

my $t0 = time;
sql($_, 'CREATE EXTENSION ntask') for qw(db1 db2);
poll_workers('db1:ntask worker db1:ntask_bgworker,db2:ntask worker db2:ntask_bgworker',
	'after CREATE EXTENSION in db1 and db2: one worker in each, application_name names the database, as ntask_bgworker');
note sprintf('workers of db1 and db2 appeared %.2f s after CREATE EXTENSION', time - $t0);

for my $db (qw(db1 db2))
{
	ok( $node->poll_query_until($db, q{
			SELECT w.state = 'running' AND w.database = current_database()
			   AND w.pid = (SELECT pid FROM pg_stat_activity
							WHERE backend_type = 'ntask worker' AND datname = current_database())
			FROM ntask.worker_stats w}),
		"$db: worker_stats shows the worker of $db (its pid, its database, running)");
}

# ---------------------------------------------------------------------
# 2. dispatch in both
# ---------------------------------------------------------------------

my $n = 20;
for my $db (qw(db1 db2))
{
	my $target = $json->encode({ type => 'http', url => $send, timeout_ms => 2000 });
	sql($db, qq{SELECT queue FROM ntask_queue_set('push', lease => '5 s',
		target => \$t\$$target\$t\$::jsonb)});
	sql($db, qq{SELECT count(*) FROM generate_series(1, $n) i,
		ntask_enqueue('push', '$db-' || i, jsonb_build_object('i', i))});
}
for my $db (qw(db1 db2))
{
	ok( $node->poll_query_until($db,
			q{SELECT count(*) FROM ntask.task WHERE queue = 'push' AND state = 'succeeded'}, "$n"),
		"$db: all $n http tasks dispatched and succeeded");
	my $keys = pkeys("$db-");
	is( scalar(grep { $keys->{$_}{requests} == 1 } keys %$keys), $n,
		"$db: the provider saw each of its $n keys exactly once");
	is( sql($db, q{SELECT dispatched || '/' || accepted FROM ntask.worker_stats}), "$n/$n",
		"$db: worker_stats counts its own $n requests only");
}

# ---------------------------------------------------------------------
# 3. lease rescue in both
# ---------------------------------------------------------------------

for my $db (qw(db1 db2))
{
	sql($db, q{SELECT queue FROM ntask_queue_set('ext', lease => '1 s',
		target => '{"type": "external"}')});
	sql($db, qq{SELECT count(*) FROM ntask_enqueue('ext', '$db-lease', '{}')});
	is( sql($db, q{SELECT count(*) FROM ntask_claim('ext', 'gone', lease => '1 second')}), '1',
		"$db: an external worker claims a task with a 1 s lease and goes away");
}
for my $db (qw(db1 db2))
{
	ok( $node->poll_query_until($db, q{
			SELECT t.state = 'retry_wait' AND a.result = 'lease_expired'
			FROM ntask.task t JOIN ntask.attempt_all a USING (task_id)
			WHERE t.task_key = current_database() || '-lease'}),
		"$db: its worker rescued the expired lease (attempt lease_expired, task retry_wait)");
	is(sql($db, q{SELECT expired_leases FROM ntask.worker_stats}), '1',
		"$db: worker_stats.expired_leases = 1");
}

# ---------------------------------------------------------------------
# 4. wake at commit, per database (naptime 60 s)
# ---------------------------------------------------------------------

sql('postgres', q{ALTER SYSTEM SET ntask.naptime = '60s'});
$node->reload;
for my $db (qw(db1 db2))
{
	ok( $node->poll_query_until($db,
			q{SELECT now() - last_tick > interval '2 s' FROM ntask.worker_stats}),
		"$db: after the reload its worker naps");
}
for my $db (qw(db2 db1))
{
	$t0 = time;
	sql($db, qq{SELECT count(*) FROM ntask_enqueue('push', '$db-wake', '{}')});
	ok( wait_for("the provider to see $db-wake", 20,
			sub { my $k = pkeys("$db-wake")->{"$db-wake"}; $k && $k->{requests} >= 1 }),
		"$db: an enqueue woke its own worker (sent within 20 s, naptime 60 s)");
	note sprintf('%s-wake reached the provider %.2f s after the enqueue', $db, time - $t0);
}
sql('postgres', q{ALTER SYSTEM RESET ntask.naptime});
$node->reload;

# ---------------------------------------------------------------------
# 5. over ntask.max_databases
# ---------------------------------------------------------------------

my $log_off = -s $node->logfile;
sql('db3', 'CREATE EXTENSION ntask');
ok( wait_for('the max_databases WARNING', 20,
		sub { $node->log_contains(qr/database "db3" has ntask, but ntask.max_databases \(2\)/, $log_off) }),
	'db3: a WARNING says ntask.max_databases (2) is reached');
like( sql('db3', q{SELECT state || ': ' || last_error FROM ntask.worker_stats}),
	qr/^not started: ntask.max_databases \(2\)/, 'db3: worker_stats says not started, and why');
# naptime is back to 100 ms: db3 is probed again every second; it stays
# without a worker and the WARNING is not repeated
usleep(3_000_000);
is(workers() =~ /db3/ ? 'db3 has one' : 'none', 'none', 'db3: no worker after 3 s');
my $log = slurp_file($node->logfile);
my $nwarn = () = substr($log, $log_off) =~ /has ntask, but ntask.max_databases/g;
is($nwarn, 1, 'db3: the WARNING was logged once, not at every probe');

# ---------------------------------------------------------------------
# 6. DROP EXTENSION in db1: its worker stops; db3 gets the place
# ---------------------------------------------------------------------

my ($pid1) = sql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'ntask worker' AND datname = 'db1'});
sql('db1', 'DROP EXTENSION ntask CASCADE');
ok( wait_for('the db1 worker to exit', 20,
		sub { sql('postgres', qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $pid1}) eq '0' }),
	'db1: DROP EXTENSION stopped its worker');
poll_workers('db2:ntask worker db2:ntask_bgworker,db3:ntask worker db3:ntask_bgworker',
	'db3 got the place db1 freed; db1 has no worker');
ok( $node->poll_query_until('db3', q{SELECT state = 'running' FROM ntask.worker_stats}),
	'db3: its worker runs');
usleep(3_000_000);
is(workers(), 'db2:ntask worker db2:ntask_bgworker,db3:ntask worker db3:ntask_bgworker',
	'db1: after 3 s still no worker (not started again)');

# ---------------------------------------------------------------------
# 7. DROP DATABASE db2, without FORCE, while its worker runs
# ---------------------------------------------------------------------

# a user who may not drop db2 cannot stop its worker by trying
my ($pid2) = sql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'ntask worker' AND datname = 'db2'});
sql('postgres', 'CREATE ROLE mallory LOGIN');
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE db2',
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/must be owner of database db2/, 'DROP DATABASE db2 by a non-owner fails');
usleep(1_000_000);
is( sql('postgres', qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $pid2}), '1',
	'... and the worker of db2 still runs (the hook stops it only for the owner)');

$log_off = -s $node->logfile;
$t0 = time;
($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE db2');
my $drop_s = time - $t0;
is($rc, 0, 'DROP DATABASE db2 succeeds while db2 had a worker') or diag $err;
cmp_ok($drop_s, '<', 4, 'it did not wait out the 5 s PostgreSQL gives other sessions to leave');
note sprintf('DROP DATABASE db2 took %.2f s', $drop_s);
poll_workers('db3:ntask worker db3:ntask_bgworker', 'only db3 has a worker now');
ok(!$node->log_contains(qr/being accessed by other users/, $log_off),
	'no "being accessed by other users" in the log');

# a place is free again: db1 with the extension back gets a worker at once
sql('db1', 'CREATE EXTENSION ntask');
poll_workers('db1:ntask worker db1:ntask_bgworker,db3:ntask worker db3:ntask_bgworker',
	'CREATE EXTENSION in db1 again: db1 gets a worker');

# ---------------------------------------------------------------------
# 8. ntask.database set explicitly: that database only
# ---------------------------------------------------------------------

$node->append_conf('postgresql.conf', "ntask.database = 'db3'\n");
$node->restart;
sql('postgres', 'CREATE EXTENSION ntask');
poll_workers('db3:ntask worker db3:ntask_bgworker',
	"ntask.database = 'db3': only db3 has a worker");
usleep(3_000_000);
is(workers(), 'db3:ntask worker db3:ntask_bgworker', '... also 3 s later (db1 and postgres have ntask)');
like(sql('db1', q{SELECT state || ': ' || last_error FROM ntask.worker_stats}),
	qr/^not started: ntask.database is "db3"/, 'db1: worker_stats says ntask.database names db3');

$node->stop;

note sprintf('summary: 016 multi-db: %d http tasks in each of 2 databases dispatched once, '
	. '2 leases rescued, 3rd database over ntask.max_databases warned once, '
	. 'DROP DATABASE with a running worker took %.2f s', $n, $drop_s);

done_testing();
