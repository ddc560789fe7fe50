
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/039_citus_coord_delegate.pl: the plain API through the coordinator,
# delegated (issue 49, docs/scaling.md "The plain API through the
# coordinator, delegated").  Opt-in with NTASK_CITUS=1 like t/023.
#
# A coordinator and two worker nodes, four shard values.  The observable:
# the coordinator logs "ntask: delegated path for shard N" (src/coord.c)
# and Citus "pushing down the function call" for a plain call it runs as
# one delegated call of the call's _on form, "ntask: not delegated (shard
# N): <why>" for one it keeps routed; the worker node of the shard logs
# "ntask: direct path for shard N" for the delegated call (log_min_messages
# = debug1 on every node).
#
# Part 1: the same calls (enqueue, a duplicate, a different payload, a
# batch, an unknown queue, claim, heartbeat, invoked twice, transition:
# applied, duplicate, conflict, a token never issued, an unknown task,
# release twice, transition_many twice, transition_and_claim, a NULL
# argument) on the coordinator with ntask.citus_delegate on, off, and on
# a plain install: the same answers (an error as its SQLSTATE and
# message), the same rows (tasks and ledger); on, every call but the
# argument error is delegated and runs on the direct path of its node;
# off, none is.
#
# Part 2: what stays routed, each saying why: a transaction block, not
# the whole statement, REPEATABLE READ, a waiting claim, a queue with a
# guard or a cap, a batch over several shard values, an enqueue with
# depends_on, a caller without EXECUTE on the _on form (who still gets
# the plain call's answer, routed).  The _on form on the worker node does
# not delegate again; a search_path with an impostor _on form is not
# followed; ntask.traceparent reaches the delegated enqueue.
#
# Part 3: a delegated call commits on the worker node by itself: a client
# that lost the answer and calls again gets duplicate (enqueue: created
# false; transition, release, invoked: duplicate), and a lost claim's
# token is fenced once its lease ran out (the takeover's token is higher,
# the old one's transition is stale).  A claim of one task walks the shard
# values, one delegated call per value, until one gives a task; a claim of
# more stays routed (it takes from several values in one answer); a
# transition_and_claim whose finished task's value has nothing due walks
# on the same way.
#
# Part 4: one session (its forms' lookups cached in its backend) sees its
# _on form renamed away and back, and EXECUTE on it revoked and granted
# again, at its next call; a column of the coordinator's placement of
# ntask.queue renamed and another of its name added, at its next claim.

use strict;
use warnings;

use DBI;
use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(paths wait_for));

my $c = NtaskCitus::setup('coorddel');
my $q = $c->{q};
my $co = $c->{coord};
my @workers = @{ $c->{workers} };
for my $n ($co, @workers)
{
	$n->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
}

my $plain = PostgreSQL::Test::Cluster->new('coorddel_plain');
$plain->init;
$plain->append_conf('postgresql.conf', "shared_preload_libraries = 'ntask'\nntask.worker = off\n");
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION ntask');

# the log lines of a node since offset
sub since
{
	my ($node, $off) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $off);
}

sub offsets
{
	return map { -s $_->logfile } ($co, @workers);
}

# [coordinator's ntask lines, Citus pushdowns, workers' direct lines] since @off
sub path_lines
{
	my @off = @_;
	my $cl = since($co, $off[0]);
	my @mine = $cl =~ /ntask: (delegated path for shard -?\d+|not delegated \(shard -?\d+\): [^\n]*)/g;
	my $push = () = $cl =~ /pushing down the function call/g;
	my (@direct, @routed);
	for my $i (0 .. $#workers)
	{
		my $wl = since($workers[$i], $off[ $i + 1 ]);
		push @direct, $wl =~ /ntask: (direct path for shard \d+)/g;
		push @routed, $wl =~ /ntask: (routed path for shard \d+: [^\n]*)/g;
	}
	return (\@mine, $push, \@direct, \@routed);
}

# a DBI connection to a node as user (the superuser by default)
sub dbh
{
	my ($node, $user) = @_;
	return DBI->connect('dbi:Pg:dbname=postgres;host=' . $node->host . ';port=' . $node->port,
		$user // '', '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 })
	  // die 'connect: ' . DBI->errstr;
}

# run sql on d: its rows as "a|b;c|d", or "SQLSTATE message"
sub answer
{
	my ($d, $sql) = @_;
	my $rows = $d->selectall_arrayref($sql);
	return join(';', map { join('|', map { $_ // '' } @$_) } @$rows) if $rows;
	my ($m) = $d->errstr =~ /ERROR:\s+([^\n]*)/;
	# task ids and tokens differ between the systems
	return $d->state . ' ' . (($m // $d->errstr) =~ s/\d+/N/gr);
}

# ---------------------------------------------------------------------
# Part 1: the same calls delegated, routed and on a plain install
# ---------------------------------------------------------------------
# one queue per system ("q_on", "q_off", "q_plain"), and at each claim one
# due task in it, so that every system claims the same task
for my $sys ('on', 'off', 'plain')
{
	($sys eq 'plain' ? $plain : $co)->safe_psql('postgres',
		"SELECT count(*) FROM ntask_queue_set('q_$sys', lease => '10 minutes')");
}

# the script: its answers by label
sub script
{
	my ($d, $sys) = @_;
	my (@out, @labels);
	my $qn = "q_$sys";
	my $run = sub {
		my ($label, $sql) = @_;
		my $a = answer($d, $sql) =~ s/\bq_$sys\b/q_S/gr;
		push @labels, $label;
		push @out, $a;
		return $a;
	};
	my $claim = sub {
		my ($label) = @_;
		my $rows = $d->selectall_arrayref(qq{SELECT task_id, token, task_key, attempt, prior_outcome FROM ntask_claim('$qn', 'w1')});
		die "claim: " . ($d->errstr // 'no row') unless $rows && @$rows == 1;
		push @labels, $label;
		push @out, "$rows->[0][2] attempt $rows->[0][3] " . ($rows->[0][4] // '');
		return @{ $rows->[0] }[ 0, 1 ];
	};
	my $later = q{run_at => now() + interval '1 hour'};
	$run->('enqueue', qq{SELECT created, state FROM ntask_enqueue('$qn', 'a', '{"n": 1}')});
	$run->('enqueue duplicate', qq{SELECT created, state FROM ntask_enqueue('$qn', 'a', '{"n": 1}')});
	$run->('enqueue other payload', qq{SELECT created FROM ntask_enqueue('$qn', 'a', '{"n": 2}')});
	$run->('enqueue_many', qq{SELECT created, state FROM ntask_enqueue_many('$qn', ARRAY['b', 'c', 'b'],
		ARRAY['{}', '{}', '{}']::jsonb[], partition_keys => ARRAY['p', 'p', 'p'], $later)});
	$run->('enqueue_many other payload', qq{SELECT created FROM ntask_enqueue_many('$qn', ARRAY['b'],
		ARRAY['{"x": 1}']::jsonb[], partition_keys => ARRAY['p'])});
	$run->('enqueue unknown queue', q{SELECT created FROM ntask_enqueue('nosuch', 'a', '{}')});
	my ($t1, $k1) = $claim->('claim');
	$run->('heartbeat', "SELECT ntask_heartbeat($t1, $k1) IS NOT NULL");
	$run->('heartbeat bad lease', "SELECT ntask_heartbeat($t1, $k1, '-1 s')");
	$run->('invoked', "SELECT ntask_invoked($t1, $k1)");
	$run->('invoked again', "SELECT ntask_invoked($t1, $k1)");
	$run->('transition', "SELECT result, state FROM ntask_transition($t1, $k1, 'succeeded')");
	$run->('transition again', "SELECT result, state FROM ntask_transition($t1, $k1, 'succeeded')");
	$run->('transition conflict', "SELECT result, state FROM ntask_transition($t1, $k1, 'canceled')");
	$run->('transition token never issued', "SELECT result FROM ntask_transition($t1, $k1 + 1000, 'succeeded')");
	$run->('transition unknown task', 'SELECT result FROM ntask_transition(' . ($t1 + 1_000_000) . ", 1, 'succeeded')");
	$run->('heartbeat of a finished task', "SELECT ntask_heartbeat($t1, $k1) IS NULL");
	$run->('enqueue d', qq{SELECT created, state FROM ntask_enqueue('$qn', 'd', '{}')});
	my ($t2, $k2) = $claim->('claim d');
	$run->('release', "SELECT ntask_release($t2, $k2, '1 hour')");
	$run->('release again', "SELECT ntask_release($t2, $k2, '1 hour')");
	$run->('enqueue e', qq{SELECT created, state FROM ntask_enqueue('$qn', 'e', '{}')});
	my ($t3, $k3) = $claim->('claim e');
	$run->('transition_many', "SELECT result, state FROM ntask_transition_many(ARRAY[$t3], ARRAY[$k3], 'retry_wait', error_class => 'transient', retry_at => now() + interval '1 hour')");
	$run->('transition_many again', "SELECT result, state FROM ntask_transition_many(ARRAY[$t3], ARRAY[$k3], 'retry_wait', error_class => 'transient', retry_at => now() + interval '1 hour')");
	$run->('enqueue f', qq{SELECT created, state FROM ntask_enqueue('$qn', 'f', '{}', partition_key => 'f')});
	my ($t4, $k4) = $claim->('claim f');
	$run->('enqueue g', qq{SELECT created, state FROM ntask_enqueue('$qn', 'g', '{}', partition_key => 'f')});
	$run->('transition_and_claim', "SELECT finish_result, finish_state, task_key, attempt FROM ntask_transition_and_claim($t4, $k4, 'succeeded', '$qn', 'w1')");
	$run->('transition_and_claim, nothing due', "SELECT finish_result, finish_state, task_key FROM ntask_transition_and_claim($t4, $k4, 'succeeded', '$qn', 'w1')");
	$run->('NULL argument', 'SELECT ntask_heartbeat(NULL, 1)');
	return (\@labels, \@out);
}

# the rows the calls left, by key: the task and its attempts (one
# statement per task: Citus joins no view of ntask.attempt to ntask.task)
sub rows_of
{
	my ($node, $sys) = @_;
	my @out;
	for my $r (split /\n/, $node->safe_psql('postgres', qq{
		SELECT t.task_id, t.task_key, t.state, t.attempts, coalesce(t.lease_owner, ''), t.payload
		FROM ntask.task t WHERE t.queue = 'q_$sys' ORDER BY t.task_key}))
	{
		my ($id, @rest) = split /\|/, $r, -1;
		push @out, join('|', @rest, $node->safe_psql('postgres', qq{
			SELECT string_agg(coalesce(a.result, '-') || ':' || (a.invoked_at IS NOT NULL), ',' ORDER BY a.attempt)
			FROM ntask.attempt_all a WHERE a.task_id = $id}));
	}
	return join("\n", @out);
}

my %res;
for my $sys ('on', 'off', 'plain')
{
	my $node = $sys eq 'plain' ? $plain : $co;
	my $d = dbh($node);
	# (before issue 49 item 8 the setting does not exist: the calls run routed)
	$d->do("SET ntask.citus_delegate = $sys") if $sys ne 'plain';
	my @off = offsets();
	my ($labels, $out) = script($d, $sys);
	my ($mine, $push, $direct, $routed) = path_lines(@off);
	$res{$sys} = { labels => $labels, out => $out, rows => rows_of($node, $sys),
		mine => $mine, push => $push, direct => $direct, routed => $routed };
	$d->disconnect;
}
for my $i (0 .. $#{ $res{on}{labels} })
{
	my $l = $res{on}{labels}[$i];
	is($res{on}{out}[$i], $res{plain}{out}[$i], "1. $l: delegated as on a plain install ($res{on}{out}[$i])");
	is($res{off}{out}[$i], $res{plain}{out}[$i], "1. $l: routed as on a plain install");
}
is($res{on}{rows}, $res{plain}{rows}, '1. delegated: the rows (tasks and ledger) as on a plain install');
is($res{off}{rows}, $res{plain}{rows}, '1. routed: the rows as on a plain install');
note("rows:\n$res{plain}{rows}");

# on: every call delegated (the 4 claims walk until a shard value gives a
# task: at least one call each), none kept routed (the unknown queue's
# enqueue is delegated and refused there; the refused arguments never
# reach the hook), every delegated call pushed down by Citus and run on
# its node's direct path
my @deleg = grep { /^delegated/ } @{ $res{on}{mine} };
my @kept = grep { /^not delegated/ } @{ $res{on}{mine} };
cmp_ok(scalar(@deleg), '>=', 29, '1. on: every call delegated (' . scalar(@deleg) . ' delegated calls)');
is_deeply(\@kept, [], '1. on: none kept routed');
is($res{on}{push}, scalar(@deleg), '1. on: Citus pushed each delegated call down');
cmp_ok(scalar(@{ $res{on}{direct} }), '>=', scalar(@deleg), '1. on: the worker nodes ran them on the direct path');
is_deeply($res{on}{routed}, [], '1. on: none routed on a worker node');
is(scalar(grep { /^delegated/ } @{ $res{off}{mine} }), 0, '1. off: no call delegated');
is($res{off}{push}, 0, '1. off: nothing pushed down');
ok((grep { /ntask\.citus_delegate is off/ } @{ $res{off}{mine} }), '1. off: the reason is the setting');

# ---------------------------------------------------------------------
# Part 2: what stays routed, and why
# ---------------------------------------------------------------------
# a statement on the coordinator: [answer, coordinator's ntask lines, pushdowns, direct lines]
sub on_coord
{
	my ($sql, $user, @pre) = @_;
	my $d = dbh($co, $user);
	$d->do($_) or die $d->errstr for @pre;
	my @off = offsets();
	my $a = answer($d, $sql);
	$d->disconnect;
	my ($mine, $push, $direct) = path_lines(@off);
	return ($a, join("\n", @$mine), $push, $direct);
}

$q->(q{SELECT count(*) FROM ntask_queue_set('dq', lease => '10 minutes')});
my $enq = sub {
	my ($queue, $key) = @_;
	return $q->("SELECT task_id FROM ntask_enqueue('$queue', '$key', '{}')");
};
$enq->('dq', "r$_") for 1 .. 6;
my $claim1 = sub {
	my ($queue) = @_;
	return split /\|/, $q->("SET ntask.citus_delegate = off; SELECT task_id, token FROM ntask_claim('$queue', 'w2')");
};

my ($id, $tok) = $claim1->('dq');
my ($a, $lines, $push) = on_coord("BEGIN; SELECT ntask_heartbeat($id, $tok) IS NOT NULL; COMMIT;");
like($lines, qr/not delegated \(shard \d+\): in a transaction block/, '2. a transaction block: routed');
is($push, 0, '2. a transaction block: nothing pushed down');
($a, $lines) = on_coord("SELECT ntask_heartbeat($id, $tok) IS NOT NULL, random() >= 0");
like($lines, qr/not delegated \(shard \d+\): not the whole statement/, '2. not the whole statement: routed');
($a, $lines) = on_coord("SELECT ntask_heartbeat($id, $tok) IS NOT NULL", undef,
	"SET default_transaction_isolation = 'repeatable read'");
like($lines, qr/not delegated \(shard \d+\): not READ COMMITTED/, '2. REPEATABLE READ: routed');
($a, $lines) = on_coord(q{SELECT count(*) FROM ntask_claim('dq', 'w2', wait => '10 ms')});
like($lines, qr/not delegated \(shard -1\): a waiting claim/, '2. a waiting claim: routed');
is($a, '1', '2. and it claims');

$q->(q{SELECT count(*) FROM ntask_queue_set('cq', lease => '10 minutes', max_inflight => 5)});
$enq->('cq', 'c1');
($a, $lines) = on_coord(q{SELECT count(*) FROM ntask_claim('cq', 'w2')});
like($lines, qr/not delegated \(shard -1\): the queue is unknown, or has a guard, flow control/, '2. a capped queue: its claim routed');
is($a, '1', '2. and it claims');
# a queue that gets a guard: its next claim routed (the coordinator reads
# the queue's row from its own placement of the reference table)
$q->(q{SELECT count(*) FROM ntask_queue_set('gq', lease => '10 minutes')});
$enq->('gq', "g$_") for 1 .. 2;
($a, $lines) = on_coord(q{SELECT count(*) FROM ntask_claim('gq', 'w2')});
like($lines, qr/delegated path for shard/, '2. a plain queue: its claim delegated');
$q->(q{CREATE FUNCTION public.gq_guard(task_key text, payload jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
	SELECT count(*) FROM ntask_queue_set('gq', guard => 'public.gq_guard(text, jsonb)')});
($a, $lines) = on_coord(q{SELECT count(*) FROM ntask_claim('gq', 'w2')});
like($lines, qr/not delegated \(shard -1\): the queue is unknown, or has a guard/, '2. the same queue with a guard: routed');
is($a, '1', '2. and it claims');
($a, $lines) = on_coord(q{SELECT count(*) FROM ntask_claim('nosuch', 'w2')});
like($a, qr/^42704 /, '2. an unknown queue: routed, 42704 as on a plain install');

# a batch over two shard values, depends_on
my @two = split /\n/, $q->(q{SELECT DISTINCT ON (ntask_shard('dq', 'm' || i)) 'm' || i FROM generate_series(1, 50) i
	ORDER BY ntask_shard('dq', 'm' || i), i LIMIT 2});
($a, $lines) = on_coord(qq{SELECT count(*) FROM ntask_enqueue_many('dq', ARRAY['$two[0]', '$two[1]'], ARRAY['{}', '{}']::jsonb[])});
like($lines, qr/not delegated \(shard \d+\): keys of several shards/, '2. enqueue_many of two shard values: routed');
is($a, '2', '2. and it enqueues');
($a, $lines) = on_coord(q{SELECT state FROM ntask_enqueue('dq', 'child', '{}', partition_key => 'r1', depends_on => ARRAY['r1'])});
like($lines, qr/not delegated \(shard \d+\): the enqueue has parents/, '2. depends_on: routed');
is($a, 'waiting', '2. and the child waits');

# a caller with EXECUTE on ntask_heartbeat but not on its _on form
$q->(q{CREATE ROLE hb LOGIN; GRANT EXECUTE ON FUNCTION ntask_heartbeat(bigint, bigint, interval, jsonb) TO hb;
	GRANT USAGE ON SCHEMA ntask TO hb});
wait_for('the role on the workers', sub {
	!grep { $_->safe_psql('postgres', q{SELECT count(*) FROM pg_roles WHERE rolname = 'hb'}) ne '1' } @workers });
my ($hb_a, $hb_lines, $hb_push) = on_coord("SELECT ntask_heartbeat($id, $tok) IS NOT NULL", 'hb');
like($hb_lines, qr/not delegated \(shard \d+\): no EXECUTE on its shard-addressed form/,
	'2. a caller without EXECUTE on the _on form: routed');
is($hb_push, 0, '2. nothing pushed down for it');
$q->('ALTER ROLE hb SET ntask.citus_delegate = off');
my ($hb_off, $hb_off_lines) = on_coord("SELECT ntask_heartbeat($id, $tok) IS NOT NULL", 'hb');
$q->('ALTER ROLE hb RESET ntask.citus_delegate');
like($hb_off_lines, qr/ntask\.citus_delegate is off/, '2. (the same caller with the setting off)');
is($hb_a, $hb_off, "2. and its answer is the routed one ($hb_a)");

# search_path: an impostor _on form earlier in the path is not called
$q->(q{CREATE SCHEMA evil; CREATE FUNCTION evil.ntask_heartbeat_on(s smallint, t bigint, k bigint, l interval, p jsonb)
	RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$; GRANT USAGE ON SCHEMA evil TO PUBLIC});
($a, $lines, $push) = on_coord("SELECT ntask_heartbeat($id, $tok) > '2001-01-01'", undef,
	'SET search_path = evil, public');
is($a, '1', '2. a search_path with an impostor _on form: the extension\'s form is called');
like($lines, qr/delegated path for shard/, '2. and the call is delegated');

# the _on form on the worker node does not delegate again
my @off = offsets();
on_coord("SELECT ntask_invoked($id, $tok)");
my $wlog = join('', map { since($workers[$_], $off[ $_ + 1 ]) } 0 .. $#workers);
unlike($wlog, qr/ntask: (delegated path|not delegated)/, '2. the _on form on the worker node does not delegate again');
like($wlog, qr/ntask: direct path for shard/, '2. it runs on the direct path there');

# ntask.traceparent reaches the delegated enqueue
my $tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
($a, $lines) = on_coord(q{SELECT created FROM ntask_enqueue('dq', 'traced', '{}')}, undef,
	"SET ntask.traceparent = '$tp'");
like($lines, qr/delegated path for shard/, '2. an enqueue with ntask.traceparent set: delegated');
is($q->(q{SELECT traceparent FROM ntask.task WHERE task_key = 'traced'}), $tp, '2. and the task carries the setting\'s traceparent');

# ---------------------------------------------------------------------
# Part 3: a delegated call commits on its own: idempotent or fenced
# ---------------------------------------------------------------------
$q->(q{SELECT count(*) FROM ntask_queue_set('fq', lease => '1 second')});
$enq->('fq', 'f1');
# a claim whose answer is lost (the client never reads it): its lease and token stand
my $lost = $q->(q{SELECT token FROM ntask_claim('fq', 'lost')});
my $fid = $q->(q{SELECT task_id FROM ntask.task WHERE queue = 'fq'});
is($q->("SELECT state || ' ' || lease_owner FROM ntask.task WHERE task_id = $fid"), 'leased lost',
	'3. a delegated claim committed on the worker node');
sleep(2);
my ($tid2, $tok2) = split /\|/, $q->(q{SELECT task_id, token FROM ntask_claim('fq', 'next')});
is($tid2, $fid, '3. its lease ran out: the task is taken over');
cmp_ok($tok2, '>', $lost, '3. with a higher token');
is($q->("SELECT result FROM ntask_transition($fid, $lost, 'succeeded')"), 'stale', '3. the lost claim\'s token is fenced: stale');
is($q->("SELECT result FROM ntask_transition($fid, $tok2, 'succeeded')"), 'applied', '3. the takeover applies');
is($q->("SELECT result FROM ntask_transition($fid, $tok2, 'succeeded')"), 'duplicate', '3. and a retry of it after a lost answer is duplicate');
is($q->(q{SELECT created FROM ntask_enqueue('fq', 'f1', '{}')}), 'f', '3. an enqueue retried: created false');

# claims: one of one task walks the shard values, one delegated call per
# value, until one gives a task (the routed claim's answer); one of more
# stays routed and takes from several values
$q->(q{SELECT count(*) FROM ntask_queue_set('wq', lease => '10 minutes')});
my @keys = split /\n/, $q->(q{SELECT DISTINCT ON (ntask_shard('wq', 'w' || i)) 'w' || i FROM generate_series(1, 50) i
	ORDER BY ntask_shard('wq', 'w' || i), i});
is(scalar(@keys), 4, '3. one key in each of the four shard values');
$enq->('wq', $_) for @keys;
my ($got, $mine);
($got, $mine) = on_coord(q{SELECT count(*) || ' ' || count(DISTINCT task_id >> 48) FROM ntask_claim('wq', 'w3', 4)});
is($got, '4 4', '3. a claim of 4: the four tasks of the four shard values');
like($mine, qr/not delegated \(shard -1\): a claim of more than one task/, '3. routed: a claim of more than one task');
$enq->('wq', 'one');
($got, $mine) = on_coord(q{SELECT count(*) FROM ntask_claim('wq', 'w3')});
is($got, '1', '3. a claim of 1 with one task due in one shard value: gets it');
my $n = () = $mine =~ /delegated path for shard/g;
ok($n >= 1 && $n <= 4, "3. after $n delegated calls (one per value visited)");
($got, $mine) = on_coord(q{SELECT count(*) FROM ntask_claim('wq', 'w3')});
is($got, '0', '3. an empty queue: no task');
$n = () = $mine =~ /delegated path for shard/g;
is($n, 4, '3. after one delegated call per shard value');

# ntask_transition_and_claim whose finished task's shard value has nothing
# due: its claim walks on, as the routed one's (one delegated call each)
$q->(q{SELECT count(*) FROM ntask_queue_set('tq', lease => '10 minutes')});
my @tk = split /\n/, $q->(q{SELECT DISTINCT ON (ntask_shard('tq', 't' || i)) 't' || i FROM generate_series(1, 50) i
	ORDER BY ntask_shard('tq', 't' || i), i LIMIT 2});
$enq->('tq', $tk[0]);
my ($ta, $tt) = split /\|/, $q->(q{SELECT task_id, token FROM ntask_claim('tq', 'w4')});
$enq->('tq', $tk[1]);
($got, $mine) = on_coord("SELECT finish_result, finish_state, task_key, attempt FROM ntask_transition_and_claim($ta, $tt, 'succeeded', 'tq', 'w4')");
is($got, "applied|succeeded|$tk[1]|1", '3. transition_and_claim: finished, and the task of the other shard value claimed');
$n = () = $mine =~ /delegated path for shard/g;
cmp_ok($n, '>=', 2, "3. its claim walked on ($n delegated calls)");
is($q->("SELECT state || ' ' || lease_owner FROM ntask.task WHERE queue = 'tq' AND task_key = '$tk[1]'"), 'leased w4',
	'3. the claimed task is leased to the worker');
($got) = on_coord("SELECT finish_result, (task_key IS NULL)::text FROM ntask_transition_and_claim($ta, $tt, 'succeeded', 'tq', 'w4')");
is($got, 'duplicate|true', '3. again: duplicate, and nothing left to claim (one row, the claim columns NULL)');

# ---------------------------------------------------------------------
# Part 4: one session sees a change of the _on form at its next call
# (src/coord.c caches each form's lookup per backend, dropped by pg_proc's
# and pg_namespace's invalidations; the EXECUTE check is made per call)
# ---------------------------------------------------------------------
my $hbsig = 'ntask_heartbeat_on(smallint, bigint, bigint, interval, jsonb)';
my $one = sub {
	my ($d, $sql) = @_;
	my @off = offsets();
	my $a = answer($d, $sql);
	my ($mine) = path_lines(@off);
	return ($a, join("\n", @$mine));
};
my $s4 = dbh($co);
($a, $lines) = $one->($s4, "SELECT ntask_heartbeat($id, $tok) IS NOT NULL");
like($lines, qr/delegated path for shard/, '4. a session\'s heartbeat: delegated');
$q->("SET citus.enable_ddl_propagation = off; ALTER FUNCTION $hbsig RENAME TO ntask_heartbeat_on_gone");
($a, $lines) = $one->($s4, "SELECT ntask_heartbeat($id, $tok) IS NOT NULL");
is($a, '1', '4. its _on form renamed away: the next call of the same session answers');
like($lines, qr/not delegated \(shard \d+\): no shard-addressed form/, '4. routed: no shard-addressed form');
$q->('SET citus.enable_ddl_propagation = off; ALTER FUNCTION ntask_heartbeat_on_gone(smallint, bigint, bigint, interval, jsonb) '
	  . 'RENAME TO ntask_heartbeat_on');
($a, $lines) = $one->($s4, "SELECT ntask_heartbeat($id, $tok) IS NOT NULL");
is($a, '1', '4. renamed back: it answers');
like($lines, qr/delegated path for shard/, '4. delegated again');
$s4->disconnect;
# EXECUTE granted, then revoked, then granted again, seen by one session
$q->("GRANT EXECUTE ON FUNCTION $hbsig TO hb");
wait_for('the grant on the workers', sub {
	!grep { $_->safe_psql('postgres', "SELECT has_function_privilege('hb', '$hbsig', 'EXECUTE')") ne 't' } @workers });
my $s5 = dbh($co, 'hb');
($a, $lines) = $one->($s5, "SELECT ntask_heartbeat($id, $tok) IS NOT NULL");
is($a, '1', '4. a caller granted EXECUTE on the _on form: it answers');
like($lines, qr/delegated path for shard/, '4. delegated');
$q->("REVOKE EXECUTE ON FUNCTION $hbsig FROM hb");
($a, $lines) = $one->($s5, "SELECT ntask_heartbeat($id, $tok) IS NOT NULL");
is($a, '1', '4. EXECUTE revoked: the same session\'s next call answers');
like($lines, qr/not delegated \(shard \d+\): no EXECUTE on its shard-addressed form/, '4. routed: no EXECUTE');
$q->("GRANT EXECUTE ON FUNCTION $hbsig TO hb");
($a, $lines) = $one->($s5, "SELECT ntask_heartbeat($id, $tok) IS NOT NULL");
like($lines, qr/delegated path for shard/, '4. granted again: delegated again');
$s5->disconnect;
$q->("REVOKE EXECUTE ON FUNCTION $hbsig FROM hb");

# a claim's read of its queue's row names its columns: a column of the
# coordinator's placement of ntask.queue renamed and another of its name
# added is seen by the same session (as the statement it replaces would)
my $qrel = $q->(q{SELECT shard_name('ntask.queue'::regclass, shardid) FROM pg_dist_shard
	WHERE logicalrelid = 'ntask.queue'::regclass});
my $s6 = dbh($co);
($a, $lines) = $one->($s6, q{SELECT count(*) FROM ntask_claim('gq', 'w2')});
like($lines, qr/not delegated \(shard -1\): the queue is unknown, or has a guard/, '4. a queue with a guard: its claim routed');
$q->("SET citus.enable_ddl_propagation = off; SET citus.enable_manual_changes_to_shards = on; ALTER TABLE $qrel RENAME COLUMN guard TO guard_was;
	ALTER TABLE $qrel ADD COLUMN guard text");
($a, $lines) = $one->($s6, q{SELECT count(*) FROM ntask_claim('gq', 'w2')});
like($lines, qr/delegated path for shard/, '4. its placement\'s guard column renamed, a NULL one added: the same session reads the new one');
$q->("SET citus.enable_ddl_propagation = off; SET citus.enable_manual_changes_to_shards = on; ALTER TABLE $qrel DROP COLUMN guard;
	ALTER TABLE $qrel RENAME COLUMN guard_was TO guard");
($a, $lines) = $one->($s6, q{SELECT count(*) FROM ntask_claim('gq', 'w2')});
like($lines, qr/not delegated \(shard -1\): the queue is unknown, or has a guard/, '4. and back: routed again');
$s6->disconnect;

$plain->stop;
NtaskCitus::stop($c);
done_testing();
