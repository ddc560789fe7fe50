
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/033_citus_interlock.pl: how the direct path takes its move interlock's
# lock (issue 49; docs/scaling.md "The move interlock"): Citus'
# pg_catalog.lock_shard_metadata(integer, bigint[]) called through the
# function manager, its OID looked up once per backend and again after an
# invalidation of pg_proc.  Opt-in with NTASK_CITUS=1 like t/023.
#
# A coordinator and one worker node; heartbeats on the worker node, each
# logging its path at DEBUG1 (src/shard.c).  (1) A direct heartbeat holds
# an advisory ShareLock while it runs (stopped on a row lock).  (2) The
# function renamed away: a backend that took the path before fails with
# 42883 (a stale OID would still call the renamed function), so does a
# new one.  (3) A replacement of the same name and types (a new OID),
# steered by a setting: taking the lock through the original, the call is
# direct; raising XX000 (what Citus raises for a shard id a split
# removed), the call runs routed, saying why, and succeeds; raising
# another SQLSTATE, the call fails with it.  (4) The original back: direct.
# (5) get_current_transaction_id() replaced by one with its fields in
# another order: transaction_number (read by name) 0, direct; 7, routed
# ("a Citus coordinated transaction is open").

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(connect_to wait_for paths));

my $c = NtaskCitus::setup('interlock', workers => 1);
my $q = $c->{q};
my ($w) = @{ $c->{workers} };
$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
$q->("SELECT count(*) FROM ntask_queue_set('iq', lease => '10 minutes')");
my $shard = $q->('SELECT min(shard) FROM ntask.shard_map');
my $shardid = $q->("SELECT get_shard_id_for_distribution_column('ntask.task', ${shard}::smallint)");

# a leased task of queue iq in $shard: [id, token]
my $keyno = 0;
sub leased
{
	my $id;
	while (!defined $id)
	{
		$keyno++;
		next unless $q->("SELECT ntask_shard('iq', 'k$keyno')") == $shard;
		$id = $q->("SELECT task_id FROM ntask_enqueue('iq', 'k$keyno', '{}')");
	}
	my $tok;
	wait_for('the claim', sub {
		$tok = $q->("SELECT token FROM ntask_claim_on(${shard}::smallint, 'iq', 'w', 1)");
		return $tok ne '';
	}, 60);
	return ($id, $tok);
}

# the task the heartbeats extend (leased before the function is renamed:
# a claim runs the interlock too)
my ($hid, $htok) = leased();

# a heartbeat in session $s: [its path, its error or undef, its SQLSTATE,
# its answer]
sub heartbeat
{
	my ($s) = @_;
	my ($id, $tok) = ($hid, $htok);
	my $off = -s $w->logfile;
	my $err;
	my $res = eval { $s->selectrow_array("SELECT ntask_heartbeat($id, $tok, lease => '1 hour') IS NOT NULL") };
	$err = $@ unless defined $res;
	my $state = $s->state;
	my @p;
	wait_for('the path in the log', sub { @p = paths($w, $off); return @p > 0 || defined $err; }, 60);
	return (join(',', @p), $err, $state, $res);
}

my $s = connect_to($w);

# (1) the direct path, and the lock it holds while it runs
my ($path, $err, $state, $res) = heartbeat($s);
is($path, "direct path for shard $shard", 'a heartbeat on the worker node takes the direct path');
is($res, 1, 'and extends the lease');
{
	my ($id, $tok) = leased();
	my $blocker = connect_to($w);
	$blocker->begin_work;
	$blocker->do("SET LOCAL citus.enable_manual_changes_to_shards = on");
	$blocker->do("SELECT 1 FROM ntask.task_$shardid WHERE task_id = $id FOR UPDATE");
	my $caller = connect_to($w);
	my $pid = $caller->{pg_pid};
	my $off = -s $w->logfile;
	my $sth = $caller->prepare("SELECT ntask_heartbeat($id, $tok, lease => '1 hour') IS NOT NULL",
		{ pg_async => DBD::Pg::PG_ASYNC() });
	$sth->execute;
	wait_for('the call waits for the row', sub {
		$w->safe_psql('postgres', "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid") eq 'Lock';
	});
	is($w->safe_psql('postgres', "SELECT string_agg(mode || ',' || granted, ';') FROM pg_locks
		WHERE pid = $pid AND locktype = 'advisory'"), 'ShareLock,true',
		'the waiting direct call holds one advisory lock, a ShareLock (Citus\' shard metadata lock)');
	$blocker->commit;
	$sth->pg_result;
	is(($sth->fetchrow_array)[0], 1, 'then it extends the lease');
	$sth->finish;
	is(join(',', paths($w, $off)), "direct path for shard $shard", 'on the direct path');
	$_->disconnect for ($blocker, $caller);
}

# (2) the function renamed away: the backend that used it, and a new one
$w->safe_psql('postgres', 'SET citus.enable_ddl_propagation = off;
	ALTER FUNCTION pg_catalog.lock_shard_metadata(integer, bigint[]) RENAME TO t033_lock_shard_metadata');
($path, $err, $state) = heartbeat($s);
like($err, qr/function pg_catalog\.lock_shard_metadata\(integer, bigint\[\]\) does not exist/,
	'renamed: the backend that used the function does not call it by its old OID');
is($state, '42883', 'SQLSTATE 42883');
like($err, qr/HINT:  Install the citus extension/, 'with a hint');
{
	my $s2 = connect_to($w);
	(undef, $err, $state) = heartbeat($s2);
	is($state, '42883', 'and a new backend fails the same way');
	$s2->disconnect;
}

# (3) a replacement, a new OID: takes the lock through the original, or
# raises what t033.mode says
$w->safe_psql('postgres', q{SET citus.enable_ddl_propagation = off;
	CREATE FUNCTION pg_catalog.lock_shard_metadata(lock_mode integer, shard_id bigint[])
	RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		CASE pg_catalog.current_setting('t033.mode', true)
		WHEN 'internal' THEN
			RAISE EXCEPTION 't033: no such shard' USING ERRCODE = 'XX000';
		WHEN 'other' THEN
			RAISE EXCEPTION 't033: refused' USING ERRCODE = '22023';
		ELSE
			PERFORM pg_catalog.t033_lock_shard_metadata(lock_mode, shard_id);
		END CASE;
	END $$});
($path, $err, $state, $res) = heartbeat($s);
is("$path," . ($err // ''), "direct path for shard $shard,", 'a replacement that takes the lock: direct again');
is($res, 1, 'and the lease extended');
$s->do("SET t033.mode = 'internal'");
($path, $err, $state, $res) = heartbeat($s);
is("$path," . ($err // ''), "routed path for shard $shard: the shard's id is gone (a split),",
	'the lock raising XX000 (a split): routed, saying why');
is($res, 1, 'and the routed call extends the lease');
$s->do("SET t033.mode = 'other'");
($path, $err, $state) = heartbeat($s);
like($err, qr/t033: refused/, 'the lock raising another error: the call fails with it');
is($state, '22023', 'its SQLSTATE');
$s->do('RESET t033.mode');

# (4) the original back
$w->safe_psql('postgres', 'SET citus.enable_ddl_propagation = off;
	DROP FUNCTION pg_catalog.lock_shard_metadata(integer, bigint[]);
	ALTER FUNCTION pg_catalog.t033_lock_shard_metadata(integer, bigint[]) RENAME TO lock_shard_metadata');
($path, $err, $state, $res) = heartbeat($s);
is("$path," . ($err // ''), "direct path for shard $shard,", 'the original back: direct');
is($res, 1, 'and the lease extended');

# (5) the transaction number, read by its field's name: a replacement of
# get_current_transaction_id() with its fields in another order, whose
# transaction_number is t033.xact when that is set (a Citus coordinated
# transaction open: the call runs routed)
$w->safe_psql('postgres', q{SET citus.enable_ddl_propagation = off;
	ALTER FUNCTION pg_catalog.get_current_transaction_id() RENAME TO t033_get_current_transaction_id;
	CREATE FUNCTION pg_catalog.get_current_transaction_id(OUT transaction_stamp timestamptz,
		OUT transaction_number bigint, OUT database_id oid, OUT process_id integer,
		OUT initiator_node_identifier integer)
	RETURNS record LANGUAGE plpgsql AS $$
	BEGIN
		SELECT t.s, coalesce(nullif(pg_catalog.current_setting('t033.xact', true), '')::bigint, t.n),
			t.d, t.p, t.i
		  INTO transaction_stamp, transaction_number, database_id, process_id, initiator_node_identifier
		  FROM pg_catalog.t033_get_current_transaction_id() t(d, p, i, n, s);
	END $$});
($path, $err, $state, $res) = heartbeat($s);
is("$path," . ($err // ''), "direct path for shard $shard,", 'transaction number 0 in another field order: direct');
$s->do("SET t033.xact = '7'");
($path, $err, $state, $res) = heartbeat($s);
is("$path," . ($err // ''), "routed path for shard $shard: a Citus coordinated transaction is open,",
	'transaction number 7: routed, saying why');
is($res, 1, 'and the routed call extends the lease');
$s->do('RESET t033.xact');
$w->safe_psql('postgres', 'SET citus.enable_ddl_propagation = off;
	DROP FUNCTION pg_catalog.get_current_transaction_id();
	ALTER FUNCTION pg_catalog.t033_get_current_transaction_id() RENAME TO get_current_transaction_id');
($path, $err, $state, $res) = heartbeat($s);
is("$path," . ($err // ''), "direct path for shard $shard,", 'the original back: direct');

$s->disconnect;
NtaskCitus::stop($c);
done_testing();
