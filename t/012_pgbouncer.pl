
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/012_pgbouncer.pl: the whole worker API through pgbouncer in
# transaction pooling mode (issue 15, README "Connection poolers").
#
# A cluster with ntask, and a pgbouncer (Debian package, temp config, a
# free loopback port, auth_type trust with a userlist) with pool_mode =
# transaction and 2 server connections for 6 clients.  600 tasks are
# enqueued through pgbouncer (ntask_enqueue_many) and drained through it by
# 6 worker processes (Perl DBI), 3 speaking the simple query protocol
# (pg_server_prepare = 0) and 3 the extended protocol with server-side
# parse and bind of unnamed statements (pg_server_prepare = 1,
# pg_switch_prepared = 0; pgbouncer 1.18 cannot carry named prepared
# statements across server connections, README "Connection poolers").
# Each worker runs the full loop: claim up to 5 (own transaction),
# invoked, heartbeat, the business write under ntask_receipt in one
# transaction, then ntask_transition (or ntask_transition_many for a
# batch); every 7th task fails transiently on its first attempt; every
# 11th is handed back with ntask_release after it was invoked, so its next
# claim reports prior_outcome 'unknown' and the worker reconciles (looks
# for its business row) before doing the work.
#
# Checked: every task succeeded exactly once (one business row, one
# receipt, its token the task's last); the ledger has exactly the expected
# attempts (600 succeeded, the transient ones retry_wait, the handed-back
# ones released with their outcome unknown); no call answered stale,
# conflict or an error; the workers' transactions ran on at most 2 server
# backends (so statements of one worker did move between server
# connections); both protocols did work.  And the caveat: a session-level
# SET of an ntask GUC made by one client is seen by another client that
# shares the server connection, a SET LOCAL is not.  Last, a waiting claim
# (wait => ...) through pgbouncer is woken by an enqueue through it.

use strict;
use warnings;

use DBI;
use FindBin;
use lib $FindBin::Bin;
use NtaskBouncer;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $PGBOUNCER = $NtaskBouncer::PGBOUNCER;
my $NTASKS = 600;
my $POOL = 2;
my @WORKERS = (
	[ 'simple-1', { pg_server_prepare => 0 } ],
	[ 'simple-2', { pg_server_prepare => 0 } ],
	[ 'simple-3', { pg_server_prepare => 0 } ],
	[ 'extended-1', { pg_server_prepare => 1, pg_switch_prepared => 0 } ],
	[ 'extended-2', { pg_server_prepare => 1, pg_switch_prepared => 0 } ],
	[ 'extended-3', { pg_server_prepare => 1, pg_switch_prepared => 0 } ],
);
ok(-x $PGBOUNCER, "pgbouncer is installed ($PGBOUNCER; scripts/deps.sh installs it)")
  or BAIL_OUT('no pgbouncer');

my $node = PostgreSQL::Test::Cluster->new('pgb');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
max_connections = 40
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ntask;
	SELECT count(*) FROM ntask_queue_set('pb', max_attempts => 3, lease => '1 minute',
										 backoff_base => '1 millisecond', backoff_max => '1 millisecond');
	CREATE TABLE business (task_id bigint NOT NULL, token bigint NOT NULL, worker text NOT NULL,
						   backend_pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
});

# pgbouncer (t/NtaskBouncer.pm): loopback only, a free port, no unix
# socket, trust for the users in its userlist, transaction pooling
my $bouncer = NtaskBouncer::start($node, postgres => $POOL, shared1 => 1);
my ($bport, $user) = ($bouncer->{port}, $bouncer->{user});
my $dir = PostgreSQL::Test::Utils::tempdir('workers');	# the workers' summaries

sub bconnect
{
	my ($db, %attrs) = @_;
	return DBI->connect("dbi:Pg:dbname=$db;host=127.0.0.1;port=$bport", $user, '',
		{ RaiseError => 1, PrintError => 0, AutoCommit => 1,
		  pg_server_prepare => 0, %attrs });
}

my $dbh;
my $until = time + 30;
while (!$dbh && time < $until)
{
	$dbh = eval { bconnect('postgres') };
	sleep 0.1 unless $dbh;
}
ok($dbh, "connected through pgbouncer on 127.0.0.1:$bport")
  or BAIL_OUT("pgbouncer did not come up: $bouncer->{err}");

# pgbouncer's console says what mode it pools in
my $admin = bconnect('pgbouncer');
my $cfg = $admin->selectall_arrayref('SHOW CONFIG');
my %cfg = map { $_->[0] => $_->[1] } @$cfg;
is($cfg{pool_mode}, 'transaction', 'pgbouncer pools in transaction mode');

# enqueue through pgbouncer, in batches of 100
my $t0 = time;
for my $b (0 .. $NTASKS / 100 - 1)
{
	$dbh->do(q{SELECT count(*) FROM ntask_enqueue_many('pb',
				 ARRAY(SELECT format('pb:%s', lpad(i::text, 4, '0')) FROM generate_series(?::int, ?::int) i),
				 ARRAY(SELECT jsonb_build_object('n', i) FROM generate_series(?::int, ?::int) i))},
		undef, $b * 100 + 1, $b * 100 + 100, $b * 100 + 1, $b * 100 + 100);
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM ntask.task WHERE queue = 'pb'}),
	$NTASKS, "$NTASKS tasks enqueued through pgbouncer (ntask_enqueue_many)");

# ---------------------------------------------------------------------
# the worker: a child process with its own connection through pgbouncer
# ---------------------------------------------------------------------
sub worker
{
	my ($name, $attrs) = @_;
	my $db = bconnect('postgres', %$attrs);
	my %n = (tasks => 0, transient => 0, released => 0, prior_unknown => 0, reconciled => 0);
	my $many = $name =~ /-[13]$/;	# these finish a claim's batch in one call
	my $idle = 0;
	my $bad = sub { die "worker $name: $_[0]\n" };
	while (1)
	{
		my $rows = $db->selectall_arrayref(
			q{SELECT task_id, token, task_key, attempt, prior_outcome
			  FROM ntask_claim('pb', ?, 5) ORDER BY task_id}, undef, $name);
		if (!@$rows)
		{
			my ($left) = $db->selectrow_array(
				q{SELECT count(*) FROM ntask.task WHERE queue = 'pb' AND state <> 'succeeded'});
			last if $left == 0;
			$bad->('idle for 60 s with tasks left') if ++$idle > 1200;
			sleep 0.05;
			next;
		}
		$idle = 0;
		my @done;
		for my $r (@$rows)
		{
			my ($tid, $tok, $key, $attempt, $prior) = @$r;
			my ($num) = $key =~ /(\d+)$/;

			if (defined $prior && $prior eq 'unknown')
			{
				$n{prior_unknown}++;
				# the provider here is the business table: ask it first
				my ($have) = $db->selectrow_array(
					q{SELECT count(*) FROM business WHERE task_id = ?}, undef, $tid);
				if ($have)
				{
					$n{reconciled}++;
					push @done, [ $tid, $tok ];
					next;
				}
			}
			my ($inv) = $db->selectrow_array(q{SELECT ntask_invoked(?, ?)}, undef, $tid, $tok);
			$bad->("invoked $tid/$tok: $inv") unless $inv eq 'applied';
			my ($hb) = $db->selectrow_array(q{SELECT ntask_heartbeat(?, ?)}, undef, $tid, $tok);
			$bad->("heartbeat $tid/$tok lost the lease") unless defined $hb;

			if ($attempt == 1 && $num % 11 == 0)
			{
				# stop before the work: hand it back (it was invoked, so
				# the next claim is told the outcome is unknown)
				my ($rel) = $db->selectrow_array(q{SELECT ntask_release(?, ?)}, undef, $tid, $tok);
				$bad->("release $tid/$tok: $rel") unless $rel eq 'applied';
				$n{released}++;
				next;
			}
			if ($attempt == 1 && $num % 7 == 0)
			{
				my ($res, $st) = $db->selectrow_array(
					q{SELECT result, state FROM ntask_transition(?, ?, 'retry_wait', 'transient',
						'{"http_status": 503}')}, undef, $tid, $tok);
				$bad->("retry $tid/$tok: $res $st") unless $res eq 'applied' && $st eq 'retry_wait';
				$n{transient}++;
				next;
			}

			# the business write and its receipt: one transaction
			$db->begin_work;
			my ($rc) = $db->selectrow_array(q{SELECT ntask_receipt(?, ?, ?::jsonb)},
				undef, $tid, $tok, '{"task": ' . $tid . '}');
			$bad->("receipt $tid/$tok: $rc") unless $rc eq 'applied';
			$db->do(q{INSERT INTO business (task_id, token, worker, backend_pid)
					  VALUES (?, ?, ?, pg_backend_pid())}, undef, $tid, $tok, $name);
			$db->commit;
			push @done, [ $tid, $tok ];
		}
		next unless @done;
		if ($many)
		{
			my $res = $db->selectall_arrayref(
				q{SELECT task_id, result FROM ntask_transition_many(?::bigint[], ?::bigint[],
					'succeeded', outcome => 'business_committed')}, undef,
				'{' . join(',', map { $_->[0] } @done) . '}',
				'{' . join(',', map { $_->[1] } @done) . '}');
			$bad->('transition_many: ' . join(' ', map { "@$_" } @$res))
			  if grep { $_->[1] ne 'applied' } @$res;
		}
		else
		{
			for my $d (@done)
			{
				my ($res) = $db->selectrow_array(
					q{SELECT result FROM ntask_transition(?, ?, 'succeeded',
						outcome => 'business_committed')}, undef, @$d);
				$bad->("transition @$d: $res") unless $res eq 'applied';
			}
		}
		$n{tasks} += @done;
	}
	$db->disconnect;
	return join(' ', map { "$_=$n{$_}" } sort keys %n);
}

my %kids;
for my $w (@WORKERS)
{
	my ($name, $attrs) = @$w;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		my $summary = eval { worker($name, $attrs) };
		my $ok = defined $summary;
		open my $fh, '>', "$dir/$name.out";
		print $fh ($ok ? $summary : "FAILED $@"), "\n";
		close $fh;
		POSIX::_exit($ok ? 0 : 1);
	}
	$kids{$pid} = $name;
}
my %exit;
for my $pid (keys %kids)
{
	waitpid($pid, 0);
	$exit{ $kids{$pid} } = $? >> 8;
}
my $secs = time - $t0;
my %said;
for my $w (@WORKERS)
{
	my $name = $w->[0];
	open my $fh, '<', "$dir/$name.out";
	$said{$name} = <$fh> // '';
	chomp $said{$name};
}
is(join(',', map { "$_->[0]:" . ($exit{ $_->[0] } // 'none') } @WORKERS),
	join(',', map { "$_->[0]:0" } @WORKERS),
	'all 6 workers exited 0 (no stale, conflict, lost lease or error)')
  or diag(join("\n", map { "$_: $said{$_}" } sort keys %said));

# ---------------------------------------------------------------------
# what the database says
# ---------------------------------------------------------------------
sub q1 { return $node->safe_psql('postgres', $_[0]); }

my $n7 = grep { $_ % 7 == 0 && $_ % 11 != 0 } 1 .. $NTASKS;
my $n11 = grep { $_ % 11 == 0 } 1 .. $NTASKS;
is(q1(q{SELECT state || ':' || count(*) FROM ntask.task WHERE queue = 'pb' GROUP BY state}),
	"succeeded:$NTASKS", "all $NTASKS tasks succeeded");
is(q1(q{SELECT count(*) || '/' || count(DISTINCT task_id) FROM business}),
	"$NTASKS/$NTASKS", 'exactly one business row per task');
is(q1(q{SELECT count(*) FROM business b JOIN ntask.task t USING (task_id)
		 JOIN ntask.receipt r ON r.task_id = b.task_id AND r.token = b.token
		 WHERE t.token = b.token}),
	$NTASKS, 'each business row has its receipt, under the task\'s last token');
is(q1(q{SELECT string_agg(result || ':' || n, ' ' ORDER BY result) FROM (
		 SELECT a.result, count(*) AS n FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
		 WHERE t.queue = 'pb' GROUP BY a.result) s}),
	"released:$n11 retry_wait:$n7 succeeded:$NTASKS",
	"the ledger: $NTASKS succeeded, $n7 transient retries, $n11 handed back");
is(q1(q{SELECT count(*) FROM ntask.attempt_all WHERE result = 'released' AND NOT outcome_known}),
	$n11, 'the handed-back attempts were invoked: their outcome is unknown in the ledger');
is(q1(q{SELECT count(*) FROM ntask.task WHERE queue = 'pb' AND unknown_attempts = 1}),
	$n11, '... and their tasks carry one unknown attempt each');
my %sum;
for my $line (values %said)
{
	$sum{$1} += $2 while $line =~ /(\w+)=(\d+)/g;
}
is("$sum{released}/$sum{prior_unknown}/$sum{transient}/$sum{tasks}", "$n11/$n11/$n7/$NTASKS",
	'the workers: every handed-back task came back with prior_outcome unknown and was checked before the work');
my $backends = q1(q{SELECT count(DISTINCT backend_pid) FROM business});
cmp_ok($backends, '<=', $POOL,
	"6 workers' business transactions ran on $backends server backend(s) (pool_size $POOL)");
my $per_worker = q1(q{SELECT count(*) FROM (SELECT worker FROM business GROUP BY worker
						HAVING count(DISTINCT backend_pid) > 1) s});
cmp_ok($per_worker, '>=', 1,
	"statements of one client moved between server connections ($per_worker workers used both)");
is(q1(q{SELECT string_agg(DISTINCT split_part(worker, '-', 1), ',') FROM business}),
	'extended,simple', 'both protocols did work');

# ---------------------------------------------------------------------
# the caveat: session state belongs to the server connection
# ---------------------------------------------------------------------
my $c1 = bconnect('shared1');
my $c2 = bconnect('shared1');
$c1->begin_work;
$c1->do('SET LOCAL ntask.backoff_jitter = off');
my ($in_tx) = $c1->selectrow_array('SHOW ntask.backoff_jitter');
$c1->commit;
my ($after_local) = $c2->selectrow_array('SHOW ntask.backoff_jitter');
is("$in_tx/$after_local", 'off/on',
	'SET LOCAL of an ntask GUC holds in its transaction and does not reach the next client');
$c1->do('SET ntask.backoff_jitter = off');
my ($leaked) = $c2->selectrow_array('SHOW ntask.backoff_jitter');
is($leaked, 'off',
	'a session-level SET by one client is seen by another client of the same server connection');
$c1->do('RESET ntask.backoff_jitter');

# ---------------------------------------------------------------------
# a waiting claim through pgbouncer: it holds one server connection while
# it waits, and an enqueue through the other one wakes it at its commit
# ---------------------------------------------------------------------
$node->safe_psql('postgres', q{SELECT count(*) FROM ntask_queue_set('pbw')});
my $wpid = fork() // die "fork: $!";
if ($wpid == 0)
{
	my $w = bconnect('postgres');
	my $t0 = time;
	my ($k) = $w->selectrow_array(
		q{SELECT task_key FROM ntask_claim('pbw', 'W-wait', wait => '60 seconds')});
	# _exit: the parent's DBI handles, inherited, must not be closed here
	POSIX::_exit(defined $k && $k eq 'wake-me' && time - $t0 < 30 ? 0 : 1);
}
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM ntask.waiters WHERE queue = 'pbw'}),
	'a waiting claim through pgbouncer is asleep');
$c1->do(q{SELECT created FROM ntask_enqueue('pbw', 'wake-me')});
waitpid($wpid, 0);
is($? >> 8, 0, 'an enqueue through pgbouncer woke it, and it claimed the task well before its wait ran out');
$_->disconnect for $c1, $c2, $admin, $dbh;

diag(sprintf('012_pgbouncer: %d tasks through pgbouncer (transaction pooling, %d server connections) '
	  . 'by %d workers in %.1f s; %d transient retries, %d handed back after invoked and reconciled on prior_outcome unknown; '
	  . '%d business rows on %d server backends',
	  $NTASKS, $POOL, scalar(@WORKERS), $secs, $n7, $n11, $NTASKS, $backends));
note "$_: $said{$_}" for sort keys %said;

NtaskBouncer::stop($bouncer);
$node->stop;
done_testing();
