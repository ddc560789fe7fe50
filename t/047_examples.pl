
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/047_examples.pl: the example push services (examples/go, python, node:
# seed N9's push worker on the worker libraries, issue 50) run end to end
# against a real server, the fake provider (examples/fake_provider.py) and
# pgbouncer in transaction pooling mode, so they cannot rot.
#
# Each language gets a database of its own (examples/push.sql in it) and a
# provider of its own, and runs the same story:
#   - produce 40 messages with their notify tasks (one transaction each),
#     then the same 40 again: no task is created twice;
#   - worker W1 (direct) is SIGKILLed while it holds m-1, whose send the
#     provider has taken (d-slow: the answer comes after 3 s);
#   - worker W2 (through pgbouncer) gets SIGTERM while it works a task it
#     marked invoked: it finishes it, exits 0 and leaves nothing leased;
#   - worker W3 (through pgbouncer) finishes the rest, then SIGTERM.
# Checked: every task ended as its device says (the d-gone ones in repair,
# the rest succeeded, outcome provider_accepted); each succeeded task has
# exactly one succeeded attempt and one push_delivery row, written with
# its receipt; the provider took effect once per succeeded task and was
# never sent a key again after it took effect (duplicates 0), also across
# the kill; per device the ledger and the provider show the path: 429 a
# transient attempt honouring Retry-After, 500 an unknown attempt then a
# reconcile that found nothing and a second send, hang an unknown attempt
# then a reconcile that found the effect (no second send), m-1 taken over
# from the killed worker and reconciled without a second send; only the
# killed worker lost leases; no attempt is left open.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use NtaskBouncer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $root = "$FindBin::Bin/..";
my $PY = '/usr/bin/python3';
my $N = 40;
my @DEVICES = qw(d-slow-1 d-ok-1 d-429-1 d-ok-2 d-500-1 d-ok-3 d-hang-1 d-ok-4 d-ok-5 d-gone-1);
my @LANGS = split ' ', ($ENV{NTASK_EXAMPLES} // 'python node go');
my $tmp = PostgreSQL::Test::Utils::tempdir('examples');
my $logdir = $PostgreSQL::Test::Utils::log_path;
my $http = HTTP::Tiny->new(timeout => 10, proxy => undef, http_proxy => undef);
my $user = getpwuid($<);

# ---------------------------------------------------------------------
# builds
# ---------------------------------------------------------------------
my %build;
if (grep { $_ eq 'python' } @LANGS)
{
	$build{python} = system($PY, '-c', 'import psycopg') == 0;
	ok($build{python}, 'python3-psycopg is installed');
}
if (grep { $_ eq 'node' } @LANGS)
{
	my $ok = -f "$root/clients/node/node_modules/typescript/bin/tsc"
	  && -d "$root/examples/node/node_modules/pg" && -l "$root/examples/node/node_modules/\@ntask/client";
	ok($ok, 'clients/node and examples/node are installed (scripts/deps.sh: npm ci)');
	my ($o, $e) = ('', '');
	$build{node} = $ok && IPC::Run::run([ 'node', "$root/clients/node/node_modules/typescript/bin/tsc",
		'-p', "$root/clients/node" ], '>', \$o, '2>', \$e);
	ok($build{node}, 'tsc builds clients/node') or diag("$o$e");
}
if (grep { $_ eq 'go' } @LANGS)
{
	my ($o, $e) = ('', '');
	$build{go} = IPC::Run::run([ 'sh', "$root/examples/go/build.sh", "$tmp/push" ], '>', \$o, '2>', \$e);
	ok($build{go}, 'examples/go/build.sh builds the Go push service (go vet clean)') or diag("$o$e");
}

my $node = PostgreSQL::Test::Cluster->new('examples');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
listen_addresses = '127.0.0.1'
});
$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
$node->start;
my $port = $node->port;
my $schema = PostgreSQL::Test::Utils::slurp_file("$root/examples/push.sql");
for my $l (@LANGS)
{
	$node->safe_psql('postgres', "CREATE DATABASE ex_$l");
	$node->safe_psql("ex_$l", "CREATE EXTENSION ntask;\n$schema");
}
# W2 and W3 go through pgbouncer (transaction pooling): a waiting claim
# holds a server connection for its wait, so each worker needs a few
my $bouncer = NtaskBouncer::start($node, map { ("ex_$_" => [ 8, "ex_$_" ]) } @LANGS);

for my $l (@LANGS)
{
	if (!$build{$l})
	{
		fail("$l: not built, not run");
		next;
	}
	my $t0 = time;
	run_story($l);
	diag(sprintf('047_examples: %s: %.1f s', $l, time - $t0));
}

NtaskBouncer::stop($bouncer);
$node->stop;
done_testing();

# ---------------------------------------------------------------------
# one language's story
# ---------------------------------------------------------------------
sub run_story
{
	my ($l) = @_;
	my $db = "ex_$l";
	my $sql = sub { $node->safe_psql($db, $_[0]) };
	my %env = (PUSH_PROVIDER_URL => undef);
	my @cmd = $l eq 'python' ? ($PY, "$root/examples/python/push_service.py")
	  : $l eq 'node' ? ('node', "$root/examples/node/push_service.js")
	  : ("$tmp/push");
	local $ENV{PYTHONPATH} = "$root/clients/python" if $l eq 'python';
	my $dsn = sub {
		my ($p) = @_;
		return $l eq 'python' ? "host=127.0.0.1 port=$p dbname=$db user=$user"
		  : "postgresql://$user\@127.0.0.1:$p/$db";
	};

	# the fake provider
	my ($pout, $perr) = ('', '');
	my $ph = IPC::Run::start([ $PY, "$root/examples/fake_provider.py", '--port', '0' ],
		'<', \undef, '>', \$pout, '2>', \$perr);
	my $until = time + 30;
	$ph->pump_nb, sleep 0.05 while $pout !~ /:(\d+)\n/ && time < $until;
	my ($pport) = $pout =~ /:(\d+)\n/;
	ok($pport, "$l: the fake provider listens") or return;
	local $ENV{PUSH_PROVIDER_URL} = "http://127.0.0.1:$pport";
	my $stats = sub {
		my $r = $http->get("http://127.0.0.1:$pport/stats");
		die "provider /stats: $r->{status}" unless $r->{success};
		return decode_json($r->{content})->{keys};
	};

	# the producer, twice
	local $ENV{DATABASE_URL} = $dsn->($port);
	my ($o, $e) = ('', '');
	IPC::Run::run([ @cmd, 'produce', '--count', $N ], '>', \$o, '2>', \$e);
	like($o, qr/^produce: $N messages, $N tasks created, 0 already there$/m, "$l: produce: $N tasks") or diag($e);
	($o, $e) = ('', '');
	IPC::Run::run([ @cmd, 'produce', '--count', $N ], '>', \$o, '2>', \$e);
	like($o, qr/^produce: $N messages, 0 tasks created, $N already there$/m,
		"$l: produce again: no task created twice") or diag($e);
	is($sql->(q{SELECT (SELECT count(*) FROM push_message) || '/' || (SELECT count(*) FROM ntask.task WHERE queue = 'push')}),
		"$N/$N", "$l: one task per message");

	my (%h, %out);
	my $start = sub {
		my ($w, $p) = @_;
		$out{$w} = '';
		local $ENV{DATABASE_URL} = $dsn->($p);
		$h{$w} = IPC::Run::start([ @cmd, 'work', '--name', $w ], '<', \undef,
			'>', \$out{$w}, '2>&1', IPC::Run::timeout(300));
	};
	my $wait = sub {
		my ($what, $secs, $cond) = @_;
		my $end = time + $secs;
		while (time < $end)
		{
			return 1 if $cond->();
			$_->pump_nb for values %h;
			sleep 0.1;
		}
		diag("$l: timed out after $secs s waiting for $what");
		return 0;
	};
	my $stop = sub {
		my ($w, $sig) = @_;
		# a finished harness must not be pumped again: IPC::Run would start it anew
		my $hw = delete $h{$w};
		$hw->signal($sig);
		$hw->finish;
		my $r = $hw->full_result;
		open my $fh, '>', "$logdir/047_${l}_$w.log" or die;
		print $fh $out{$w};
		close $fh;
		return $r;
	};
	my $key1 = "notify:u-1:d-slow-1:m-1:v1";

	# W1: killed after the provider took m-1's send, before its answer
	$start->('W1', $port);
	ok($wait->('the provider to get m-1 from W1', 60, sub {
			my $k = $stats->()->{$key1};
			return $k && $k->{sends} >= 1
			  && $sql->(q{SELECT lease_owner FROM ntask.task WHERE task_key LIKE '%:m-1:v1'}) eq 'W1';
		}), "$l: W1 sent m-1 (a slow send)");
	my $held = $sql->(q{SELECT count(*) FROM ntask.task WHERE lease_owner = 'W1'});
	is($stop->('W1', 'KILL') & 127, 9, "$l: W1 SIGKILLed while it held $held task(s), m-1 among them");

	# W2: SIGTERM while it works a task it marked invoked
	$start->('W2', $bouncer->{port});
	ok($wait->('W2 to hold an invoked task', 60, sub {
			$sql->(q{SELECT count(*) FROM ntask.attempt_all WHERE worker = 'W2'
					 AND ended_at IS NULL AND invoked_at IS NOT NULL}) > 0 }),
		"$l: W2 (through pgbouncer) works a task");
	my $w2_open = $sql->(q{SELECT string_agg(task_id || ':' || token, ',' ORDER BY task_id) FROM ntask.attempt_all
						   WHERE worker = 'W2' AND ended_at IS NULL AND invoked_at IS NOT NULL});
	my $t_term = time;
	my $w2 = $stop->('W2', 'TERM');
	is($w2 >> 8, 0, sprintf("$l: W2 stopped on SIGTERM with status 0 (%.1f s)", time - $t_term)) or diag($out{W2});
	like($out{W2}, qr/^W2: stopped /m, "$l: W2 says it stopped");
	is($sql->(q{SELECT count(*) FROM ntask.task WHERE lease_owner = 'W2'}), 0, "$l: W2 left nothing leased");
	is($sql->(qq{SELECT count(*) FROM ntask.attempt_all WHERE worker = 'W2'
				 AND task_id || ':' || token = ANY ('{$w2_open}'::text[])
				 AND result IN ('succeeded', 'retry_wait', 'repair_required')}),
		scalar(split /,/, $w2_open), "$l: the task(s) W2 was working when told to stop were finished and reported ($w2_open)");

	# W3 finishes the rest (m-1 once W1's lease runs out)
	$start->('W3', $bouncer->{port});
	ok($wait->('every task finished', 180, sub {
			$sql->(q{SELECT count(*) FROM ntask.task WHERE queue = 'push'
					 AND state NOT IN ('succeeded', 'repair_required')}) == 0 }),
		"$l: every task finished");
	is($stop->('W3', 'TERM') >> 8, 0, "$l: W3 stopped on SIGTERM with status 0") or diag($out{W3});
	like($out{W3}, qr/^W3: stopped /m, "$l: W3 says it stopped");
	# W2 and W3 were never overtaken (no other live worker): no stale or
	# conflict answer, no lost heartbeat in their counters
	for my $w ('W2', 'W3')
	{
		my ($c) = $out{$w} =~ /^$w: stopped (\{.*\})$/m;
		my $n = $c ? decode_json($c) : {};
		my @got;
		for my $k (qw(stale conflict heartbeats_lost))
		{
			(my $camel = $k) =~ s/_(\w)/\u$1/g;    # Node's counters: heartbeatsLost
			push @got, "$k=" . ($n->{$k} // $n->{$camel} // '?');
		}
		is("@got",
			'stale=0 conflict=0 heartbeats_lost=0', "$l: $w surfaced no loss");
	}
	my $keys = $stats->();
	$_->kill_kill for values %h;    # none is left, unless a step above failed
	$ph->signal('TERM');
	$ph->finish;

	# ------------------------------------------------------------- outcomes
	my $ngone = grep { $DEVICES[ ($_ - 1) % 10 ] =~ /^d-gone-/ } 1 .. $N;
	my $nsucc = $N - $ngone;
	is($sql->(q{SELECT string_agg(state || ':' || n, ' ' ORDER BY state) FROM (
				SELECT state, count(*) n FROM ntask.task GROUP BY state) s}),
		"repair_required:$ngone succeeded:$nsucc", "$l: $nsucc succeeded, the $ngone d-gone ones in repair");
	is($sql->(q{SELECT count(*) FROM ntask.task
				WHERE (state = 'repair_required') <> (payload->>'device' LIKE 'd-gone-%')
				   OR state = 'succeeded' AND outcome IS DISTINCT FROM 'provider_accepted'}), 0,
		"$l: each task ended as its device says, succeeded ones with outcome provider_accepted");
	is($sql->(q{SELECT count(*) FROM ntask.task t WHERE state = 'succeeded'
				AND (SELECT count(*) FROM ntask.attempt_all a WHERE a.task_id = t.task_id
					 AND a.result = 'succeeded') <> 1}), 0,
		"$l: exactly one succeeded attempt per succeeded task");
	is($sql->(q{SELECT count(*) || '/' || count(DISTINCT d.task_key) || '/' || count(r.task_id)
				FROM push_delivery d JOIN ntask.task t ON t.queue = 'push' AND t.task_key = d.task_key
				LEFT JOIN ntask.receipt r ON r.task_id = t.task_id AND r.token = d.token
				WHERE t.state = 'succeeded'}),
		"$nsucc/$nsucc/$nsucc", "$l: one push_delivery row per succeeded task, each with its receipt's token");
	is($sql->(q{SELECT count(*) FROM push_delivery d JOIN ntask.task t ON t.task_key = d.task_key
				WHERE t.state <> 'succeeded'}), 0, "$l: no delivery row for a task in repair");
	is($sql->(q{SELECT count(*) FROM ntask.attempt_all WHERE ended_at IS NULL}), 0, "$l: no attempt left open");
	is($sql->(q{SELECT coalesce(string_agg(DISTINCT worker, ','), '') FROM ntask.attempt_all
				WHERE result = 'lease_expired'}), 'W1', "$l: only the killed worker lost leases");
	cmp_ok($sql->(q{SELECT count(*) FROM ntask.attempt_all WHERE worker = 'W3' AND result = 'succeeded'}), '>', 0,
		"$l: W3 (through pgbouncer) finished tasks")
	  or diag($sql->(q{SELECT worker, result, count(*), min(claimed_at), max(ended_at) FROM ntask.attempt_all GROUP BY 1, 2 ORDER BY 1, 2}));

	# the provider: one effect per succeeded task, never a send after it
	my @bad = grep { ($keys->{$_}{duplicates} // 0) != 0 } sort keys %$keys;
	is("@bad", '', "$l: the provider was never sent a key again after it took effect (duplicates 0)");
	my $effects = 0;
	$effects += $_->{effects} for values %$keys;
	is($effects, $nsucc, "$l: the provider took effect $nsucc times, once per succeeded task");

	# each task's path, by its device: the ledger (without released
	# attempts: a worker that stops hands back what it never started), the
	# delivery row and what the provider saw
	my %path;
	for my $row (split /\n/, $sql->(q{
		SELECT t.task_key, t.payload->>'device', t.state, coalesce(d.via, '-'),
			   (SELECT string_agg(a.result || coalesce('/' || a.error_class, ''), ',' ORDER BY a.token)
				FROM ntask.attempt_all a WHERE a.task_id = t.task_id AND a.result <> 'released'),
			   EXISTS (SELECT 1 FROM ntask.attempt_all a WHERE a.task_id = t.task_id AND a.worker = 'W1'
					   AND a.result = 'lease_expired')
		FROM ntask.task t LEFT JOIN push_delivery d USING (task_key) ORDER BY t.task_id}))
	{
		my ($key, $dev, $state, $via, $attempts, $killed) = split /\|/, $row;
		my $k = $keys->{$key} // {};
		my ($sends, $lookups, $eff) = map { $k->{$_} // 0 } qw(sends lookups effects);
		if ($killed eq 't')
		{
			push @{ $path{killed} }, $key;
			$path{killed_bad}++ unless $eff == ($dev =~ /^d-gone-/ ? 0 : 1);
			next;
		}
		my ($kind) = $dev =~ /^d-(\w+)-/;
		my $want = {
			slow => 'succeeded send 1 0',
			ok => 'succeeded send 1 0',
			429 => 'retry_wait/transient,succeeded send 2 0',
			500 => 'retry_wait/unknown,succeeded send 2 1',
			hang => 'retry_wait/unknown,succeeded reconcile 1 1',
			gone => 'repair_required/permanent - 1 0',
		}->{$kind};
		my $got = join(' ', $attempts, $via, $sends, $lookups ? 1 : 0);
		$path{$kind}{n}++;
		push @{ $path{$kind}{bad} }, "$key: $got" if $got ne $want;
	}
	for my $kind (qw(ok slow 429 500 hang gone))
	{
		my $what = {
			ok => 'sent once, delivered',
			slow => 'sent once, delivered',
			429 => 'a transient attempt, then sent again and delivered',
			500 => 'an unknown attempt, then a reconcile that found nothing and a second send',
			hang => 'an unknown attempt (no answer), then a reconcile that found it: no second send',
			gone => 'a permanent attempt, in repair, no delivery',
		}->{$kind};
		is(join('; ', @{ $path{$kind}{bad} // [] }), '',
			"$l: d-$kind (" . ($path{$kind}{n} // 0) . " tasks not held by W1): $what");
	}
	cmp_ok(($path{429}{n} // 0) + ($path{500}{n} // 0) + ($path{hang}{n} // 0), '>=', 6,
		"$l: most 429 / 500 / hang tasks were not held by W1 (their paths were checked)");
	is($path{killed_bad} // 0, 0, "$l: the tasks W1 held when killed (@{ $path{killed} // [] }) took effect once each");
	is($sql->(qq{SELECT string_agg(a.result || ':' || a.outcome_known::text, ',' ORDER BY a.token)
				 || ' ' || d.via FROM ntask.task t JOIN ntask.attempt_all a USING (task_id)
				 JOIN push_delivery d USING (task_key) WHERE t.task_key = '$key1' AND a.result <> 'released'
				 GROUP BY d.via}) . ' ' . $keys->{$key1}{sends},
		'lease_expired:false,succeeded:true reconcile 1',
		"$l: m-1, taken over from the killed W1 with its outcome unknown, was reconciled, not sent again");
	# the provider's clock: its second request of a 429'd key came at least
	# the Retry-After (1 s) after the first
	my @early = grep { /:d-429-/ && @{ $keys->{$_}{sent_at} } >= 2
		  && $keys->{$_}{sent_at}[1] - $keys->{$_}{sent_at}[0] < 0.95 } sort keys %$keys;
	my $n429 = grep { /:d-429-/ && @{ $keys->{$_}{sent_at} } >= 2 } keys %$keys;
	is("@early", '', "$l: the retries of the $n429 keys answered 429 waited for the Retry-After (1 s)");
	return;
}
