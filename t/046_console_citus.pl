
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/046_console_citus.pl: the operator console (console/, issue 51) against
# a Citus coordinator (a coordinator and two workers, t/NtaskCitus.pm, ntask
# distributed).  Over HTTP, without the browser (t/045 drives that): a
# task's story is read; a replay of a task in repair and a pause and resume
# go through; what the distributed install refuses (bulk actions, 0A000)
# is shown as the function's SQLSTATE and message, not as a failure of
# the page.  The overview's counts, the queue page and the repair page do
# not work there yet: those checks are TODO (a known gap of issue 51).
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

if (!$ENV{NTASK_CITUS})
{
	plan skip_all => 'Citus test skipped (set NTASK_CITUS=1; builds Citus 12.1.6 from ../shared/vendor)';
}
my ($pg_major) = `pg_config --version` =~ /PostgreSQL (\d+)/;
if ($pg_major > 16)
{
	plan skip_all => "Citus 12.1.6 supports PostgreSQL 14-16, not $pg_major";
}
my $root = "$FindBin::Bin/..";
my $NODE = '/usr/bin/node';
$NODE = 'node' unless -x $NODE;
plan skip_all => 'console/node_modules is missing (scripts/deps.sh: npm ci in console)'
  unless -d "$root/console/node_modules/pg";

require NtaskCitus;
my $err = NtaskCitus::ensure_built();
BAIL_OUT($err) if $err;

my $c = NtaskCitus::start('console', workers => 2, conf => "ntask.worker = off\n");
my $co = $c->{coord};
my $q = sub { return $co->safe_psql('postgres', $_[0]); };
$q->('CREATE EXTENSION ntask');
$q->('SELECT count(*) FROM ntask_distribute(4)');
$q->(q{SELECT count(*) FROM ntask_queue_set('mail', max_attempts => 3)});
$q->(q{SELECT count(*) FROM generate_series(1, 20) i,
	   ntask_enqueue('mail', 'm-' || i, jsonb_build_object('n', i))});
# one task to repair, one leased
my ($rid, $rtok) = split /\|/, $q->(q{SELECT task_id, token FROM ntask_claim('mail', 'W1')});
is($q->(qq{SELECT result FROM ntask_transition($rid, $rtok, 'repair_required', 'permanent', '{"http": 400}')}),
	'applied', 'a task of the distributed install is in repair');
$q->(q{SELECT count(*) FROM ntask_claim('mail', 'W1')});

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

$res = $get->('/');
is($res->{status}, 200, 'the overview answers');
TODO:
{
	# Known gap (issue 51, left open): the overview's and the queue page's
	# counts and the repair page read ntask.task / ntask.repair_queue with
	# correlated subqueries over the reference table ntask.queue, which
	# Citus refuses (0A000); the page shows that error instead of the
	# queue.  The task page, schedules, sagas and every action work.
	local $TODO = 'the console\'s summary queries are refused by Citus (0A000)';
	like($res->{content}, qr/mail/, 'the overview shows the queue');
	$res = $get->('/d/0/queue/mail');
	is($res->{status}, 200, 'the queue page answers');
	like($res->{content}, qr/m-\d+/, 'the queue page lists its distributed tasks');
	$res = $get->('/d/0/repair');
	is($res->{status}, 200, 'the repair page answers');
	like($res->{content}, qr/permanent/, 'the repair page shows the task in repair');
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
