
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/046_console_citus.pl: the operator console (console/, issue 51) against
# a Citus coordinator (a coordinator and two workers, t/NtaskCitus.pm, ntask
# distributed).  Over HTTP, without the browser (t/045 drives that): a
# task's story is read; a replay of a task in repair and a pause and resume
# go through; what the distributed install refuses (bulk actions, 0A000)
# is shown as the function's SQLSTATE and message, not as a failure of
# the page.  The overview's counts, the queue page and the repair page
# read ntask.task, ntask.attempt and ntask's summary views in a shape
# Citus runs (issue 51), with the same numbers as psql.
# Runs with NTASK_CITUS=1 only, like t/023 and t/024.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

require NtaskCitus;
NtaskCitus::require_citus();
my $root = "$FindBin::Bin/..";
my $NODE = '/usr/bin/node';
$NODE = 'node' unless -x $NODE;
plan skip_all => 'console/node_modules is missing (scripts/deps.sh: npm ci in console)'
  unless -d "$root/console/node_modules/pg";

my $c = NtaskCitus::setup('console', conf => "ntask.http_allowed_hosts = '127.0.0.1'\n");
my $co = $c->{coord};
my $q = $c->{q};
# a query that may be refused: its answer, or its error
my $try = sub {
	my ($ret, $out, $err) = $co->psql('postgres', $_[0]);
	return $ret == 0 ? $out : "refused: $err";
};
$q->(q{SELECT count(*) FROM ntask_queue_set('mail', max_attempts => 3)});
$q->(q{SELECT count(*) FROM generate_series(1, 20) i,
	   ntask_enqueue('mail', 'm-' || i, jsonb_build_object('n', i))});
# one task to repair, one leased
my ($rid, $rtok) = split /\|/, $q->(q{SELECT task_id, token FROM ntask_claim('mail', 'W1')});
is($q->(qq{SELECT result FROM ntask_transition($rid, $rtok, 'repair_required', 'permanent', '{"http": 400}')}),
	'applied', 'a task of the distributed install is in repair');
$q->(q{SELECT count(*) FROM ntask_claim('mail', 'W1')});
# an http queue whose circuit breaker is open, with two tasks held back
$q->(q{SELECT count(*) FROM ntask_queue_set('hook', target => '{"type": "http", "url": "http://127.0.0.1:9/"}',
	   breaker_failures => 2)});
$q->(q{SELECT count(*) FROM generate_series(1, 2) i, ntask_enqueue('hook', 'h-' || i, '{}')});
$q->(q{INSERT INTO ntask.breaker (queue, state, failures, opened_at, open_until)
	   VALUES ('hook', 'open', 2, now(), now() + interval '1 hour')});

# the console, as the superuser (ntask_admin's rights and more)
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $log = $co->basedir . '/console.log';
my $pw = 'carol-' . int(rand(1e9));
my $h;
{
	local $ENV{NTASK_CONSOLE_USER} = 'carol';
	local $ENV{NTASK_CONSOLE_PASSWORD} = $pw;
	my $user = getpwuid($<);
	$h = IPC::Run::start(
		[ $NODE, "$root/console/bin/ntask-console.js",
		  '--dsn', "postgresql://$user\@127.0.0.1:" . $co->port . '/postgres',
		  '--listen', "127.0.0.1:$port" ],
		'<', \undef, '>', $log, '2>&1');
}
END { eval { $h->kill_kill(grace => 2) if $h && $h->pumpable; }; }
my $until = time + 60;
sleep 0.1 while time < $until && slurp_file($log) !~ /listening on/;
like(slurp_file($log), qr/read-write/, 'the console starts read-write against the coordinator');

require HTTP::Tiny;
my $ua = HTTP::Tiny->new(max_redirect => 0, timeout => 60);
my $url = "http://127.0.0.1:$port";
my $res = $ua->post_form("$url/login", { name => 'carol', password => $pw, next => '/' });
my ($cookie) = ($res->{headers}{'set-cookie'} // '') =~ /^([^;]+)/;
ok($res->{status} == 303 && $cookie, 'logged in');
my $get = sub {
	my ($path) = @_;
	return $ua->get("$url$path", { headers => { Cookie => $cookie } });
};
sub csrf_of { my ($html) = @_; return ($html =~ /name="csrf" value="([^"]+)"/)[0]; }

# ntask's own summary views answer on the coordinator, filtered by queue
# too (a filter pushed into a subquery correlated to the reference table
# ntask.queue was refused with 0A000 before issue 51)
is($try->(q{SELECT ready || '/' || leased || '/' || repair_required || '/' || unknown_attempts || '/' || succeeded
			|| '/' || coalesce(dropped_roles::text, 'none') FROM ntask.queue_stats WHERE queue = 'mail'}), '18/1/1/0/0/none',
	'ntask.queue_stats answers on the coordinator, filtered by queue');
is($try->(q{SELECT string_agg(queue || ':' || ready || ':' || coalesce(dropped_roles::text, 'none'), ',' ORDER BY queue)
			FROM ntask.queue_stats}), 'hook:2:none,mail:18:none',
	'ntask.queue_stats answers unfiltered');
is($try->(q{SELECT task_id || ' ' || reason || ' ' || known_outcomes || '/' || unknown_outcomes
			FROM ntask.repair_queue WHERE queue = 'mail'}), "$rid permanent_error 1/0",
	'ntask.repair_queue answers, the attempt joined on its shard');
is($try->(q{SELECT enqueued_total || '/' || claims_total || '/' || keys_paused FROM ntask.queue_metrics WHERE queue = 'mail'}),
	'20/2/0', 'ntask.queue_metrics answers, filtered by queue');
is($try->(q{SELECT queue || ' ' || state || ' ' || held FROM ntask.breaker_stats}), 'hook open 2',
	'ntask.breaker_stats counts the tasks an open breaker holds back');
# every view of ntask answers on the coordinator, filtered by queue where
# it has one
{
	my @bad;
	for my $v (split /\n/, $q->(q{SELECT c.oid::regclass || ' ' || EXISTS (SELECT FROM pg_attribute a
			WHERE a.attrelid = c.oid AND a.attname = 'queue') FROM pg_class c
			WHERE c.relnamespace = 'ntask'::regnamespace AND c.relkind = 'v' ORDER BY 1}))
	{
		my ($view, $has_queue) = split / /, $v;
		for my $w ('', $has_queue eq 't' ? " WHERE queue = 'mail'" : ())
		{
			my $r = $try->("SELECT count(*) FROM (SELECT * FROM $view$w) x");
			push @bad, "$view$w: $r" if $r =~ /^refused/;
		}
	}
	is(join("\n", @bad), '', 'every view of ntask answers on the coordinator');
}
# what the console reads for a role without the tables (ntask_monitor)
is($try->(q{PREPARE p(text) AS SELECT string_agg(s.queue || ':' || s.ready || ':' || coalesce(b.state, '-'), ',' ORDER BY s.queue)
			FROM ntask.queue_stats s LEFT JOIN ntask.breaker_stats b USING (queue) WHERE ($1::text IS NULL OR s.queue = $1);
			EXECUTE p(NULL); EXECUTE p('hook')}), "hook:2:open,mail:18:-\nhook:2:open",
	'ntask.queue_stats joined with ntask.breaker_stats, with a parameter');

$res = $get->('/');
is($res->{status}, 200, 'the overview answers');
unlike($res->{content}, qr/class="error"/, 'the overview shows no error')
  or diag(($res->{content} =~ /(<p class="error">.*?<\/p>)/s)[0]);
# the queue's row: ready, leased, waiting, awaiting, retry, repair
like($res->{content},
	qr{<tr data-queue="mail">.*?<td class="num">18</td><td class="num">1</td><td class="num">0</td>\s*<td class="num">0</td><td class="num">0</td>\s*<td class="num"><a class="bad"[^>]*>1</a></td>}s,
	'the overview counts the distributed tasks: 18 ready, 1 leased, 1 in repair');
like($res->{content}, qr{<tr data-queue="mail">.*?100\.0 %}s,
	'the last hour from the ledger: the one attempt that ended failed');
like($res->{content}, qr{<tr data-queue="hook">.*?class="badge b-open"}s, 'the overview shows the open breaker');
$res = $get->('/d/0/queue/mail');
is($res->{status}, 200, 'the queue page answers');
like($res->{content}, qr{<dt>ready</dt><dd>18 }, 'the queue page counts its ready tasks');
is(scalar(() = $res->{content} =~ /<tr data-task="/g), 20, 'the queue page lists its 20 distributed tasks');
$res = $get->('/d/0/queue/mail?state=repair_required');
like($res->{content}, qr/data-task="$rid"/, 'the queue page filters by state');
$res = $get->('/d/0/repair');
is($res->{status}, 200, 'the repair page answers');
like($res->{content}, qr/<tr data-task="$rid">.*?permanent_error/s, 'the repair page shows the task in repair');

# assign an owner: audited with the operator as actor
{
	my $csrf0 = csrf_of($get->("/d/0/task/$rid")->{content});
	$res = $ua->post_form("$url/d/0/task/$rid/assign",
		{ owner => 'oncall-mail', next_action => 'ask the provider', csrf => $csrf0 },
		{ headers => { Cookie => $cookie } });
	like($res->{content} // '', qr/assigned to oncall-mail/, "task $rid assigned ($res->{status})");
	is($q->(q{SELECT actor FROM ntask.audit WHERE action = 'repair_assign'}), 'carol',
		'the assignment is audited with the operator as actor');
	like($get->('/d/0/repair')->{content}, qr{<h2>Owner oncall-mail \(1\)</h2>}, 'the repair page groups it under its owner');
}
$res = $get->("/d/0/task/$rid");
is($res->{status}, 200, "the task page of task $rid answers");
like($res->{content}, qr/repair_required/, 'the task page tells its story');
for my $p ('/d/0/schedules', '/d/0/sagas')
{
	is($get->($p)->{status}, 200, "$p answers");
}

# actions: replay the task in repair, pause and resume the queue
my $csrf = csrf_of($get->("/d/0/task/$rid")->{content});
$res = $ua->post_form("$url/d/0/task/$rid/replay", { reason => 'fixed', csrf => $csrf },
	{ headers => { Cookie => $cookie } });
ok($res->{status} == 303 || $res->{status} == 200, "replay of task $rid accepted ($res->{status})")
  or diag(substr($res->{content} // '', 0, 500));
is($q->("SELECT state FROM ntask.task WHERE task_id = $rid"), 'ready', 'the replayed task is ready');
is($q->(q{SELECT actor FROM ntask.audit WHERE action = 'replay' ORDER BY at DESC LIMIT 1}), 'carol',
	'the replay is audited with the operator as actor');
$res = $ua->post_form("$url/d/0/queue/mail/pause", { reason => 'incident', csrf => $csrf },
	{ headers => { Cookie => $cookie } });
ok($res->{status} == 303 || $res->{status} == 200, "pause accepted ($res->{status})");
is($q->(q{SELECT count(*) FROM ntask_claim('mail', 'W2')}), '0', 'a paused queue hands out nothing');
$res = $ua->post_form("$url/d/0/queue/mail/resume", { reason => 'over', csrf => $csrf },
	{ headers => { Cookie => $cookie } });
ok($res->{status} == 303 || $res->{status} == 200, "resume accepted ($res->{status})");
is($q->(q{SELECT count(*) FROM ntask_claim('mail', 'W2')}), '1', 'resumed: a claim gets a task');
# a bulk action, which the distributed install refuses: its SQLSTATE shown
$res = $ua->post_form("$url/d/0/queue/mail/bulk",
	{ action => 'cancel', reason => 'x', state => 'ready', csrf => $csrf },
	{ headers => { Cookie => $cookie } });
like($res->{content} // '', qr/0A000|not supported|refused/i,
	"a refused bulk action shows its SQLSTATE ($res->{status})");
unlike($res->{content} // '', qr/at .*\.js:\d+/, 'no stack trace');

$h->signal('TERM');
$h->finish;
unlike(slurp_file($log), qr/\Q$pw\E/, 'the log holds no password');
NtaskCitus::stop($c);
done_testing();
