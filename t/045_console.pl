
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/045_console.pl: the operator console (console/, docs/console.md; issue
# 51) in a real headless browser.  A throwaway cluster with ntask, a task
# that ends in repair_required with an unknown outcome, two consoles: one
# as a member of ntask_admin (operator alice, from the environment), one as
# a role with ntask_monitor and pg_read_all_data only (operator bob, from a
# --users file of scrypt hashes).  console/test/browser.js drives Debian's
# chromium through playwright-core and prints a line per check: the
# overview, the task in repair and its story, a replay after a dry run, a
# worker (psql) drains it and it shows succeeded; a pause stops claims;
# keyset paging agrees with the database's own order; the read-only
# console shows no action and refuses forged POSTs, the admin console
# refuses POSTs without the right CSRF token.  Afterwards, from the
# database: the audit rows name alice as the actor, the forged requests
# changed nothing; and the consoles' logs hold no password, token or
# session id.  Screenshots: into a temporary directory, or into
# $NTASK_CONSOLE_SHOTS (NTASK_CONSOLE_SHOTS=$PWD/docs/console refreshes the
# ones docs/console.md shows).

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $root = "$FindBin::Bin/..";
my $CHROMIUM = '/usr/bin/chromium';
my $NODE = 'node';

ok(-x $CHROMIUM, "Debian's chromium is installed (scripts/deps.sh)");
ok(-d "$root/console/node_modules/pg" && -d "$root/console/node_modules/playwright-core",
	'console/node_modules has pg and playwright-core (scripts/deps.sh: npm ci in console)');

my $node = PostgreSQL::Test::Cluster->new('console');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
listen_addresses = '127.0.0.1'
# the consoles' pools (4 connections per database each), the browser's
# psql, the background worker
max_connections = 60
});
$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
$node->start;
my $port = $node->port;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{
CREATE EXTENSION ntask;
CREATE ROLE console_admin LOGIN IN ROLE ntask_admin;
CREATE ROLE console_ro LOGIN IN ROLE ntask_monitor, pg_read_all_data;
CREATE ROLE console_mon LOGIN IN ROLE ntask_monitor;
SELECT count(*) FROM ntask_queue_set('mail', max_attempts => 1);
SELECT count(*) FROM ntask_queue_set('push');
SELECT count(*) FROM ntask_queue_set('many');
SELECT count(*) FROM ntask_queue_set('orders');
SELECT count(*) FROM ntask_queue_set('sms');
SELECT task_id FROM ntask_enqueue('sms', 's1', '{}');
SELECT r.state FROM ntask_claim('sms', 'w1', 1) c, LATERAL ntask_transition(c.task_id, c.token, 'repair_required', 'permanent', '{"http": 400}') r;
SELECT task_id FROM ntask_enqueue('mail', 'welcome:42', '{"to": "a@example.com"}');
SELECT task_id FROM ntask_enqueue('mail', 'welcome:<b>43</b>', '{}', run_at => now() + interval '1 day');
SELECT task_id FROM ntask_enqueue('push', 'p1', '{}');
SELECT task_id FROM ntask_enqueue('push', 'p2', '{"step": 2}', depends_on => ARRAY['push:p1']);
SELECT count(*) FROM generate_series(1, 130) i, ntask_enqueue('many', 'k' || i, '{}', priority => i % 3);
SELECT count(*) FROM ntask_claim('many', 'w', 60) c, LATERAL ntask_transition(c.task_id, c.token, 'succeeded') r;
SELECT count(*) FROM ntask_saga_start('order:1', '[{"name": "reserve", "queue": "orders", "compensate": {"queue": "orders"}}, {"name": "charge", "queue": "orders"}]');
SELECT count(*) FROM ntask_schedule('nightly', '0 2 * * *', 'orders');
});
# welcome:42: one attempt, its outcome unknown, the budget (1) spent
my $t = sql(q{SELECT c.task_id FROM ntask_claim('mail', 'w1', 1) c,
	LATERAL ntask_transition(c.task_id, c.token, 'retry_wait', 'unknown', '{"http": 504}') r});
is(sql("SELECT state || ' ' || reason || ' ' || unknown_attempts FROM ntask.task WHERE task_id = $t"),
	'repair_required budget_exhausted 1', 'the task welcome:42 is in repair with an unknown outcome');

# the consoles
my $logdir = $PostgreSQL::Test::Utils::log_path;
my $users = "$logdir/045_users";
my $ro_pw = 'bob-' . int(rand(1e9));
my $hash;
IPC::Run::run([ $NODE, "$root/console/bin/ntask-console.js", '--hash-password' ], '<', \$ro_pw, '>', \$hash)
  or die "--hash-password failed";
chomp $hash;
like($hash, qr/^scrypt\$/, '--hash-password prints a scrypt line');
open my $fh, '>', $users or die;
print $fh "# operators of the read-only console\nbob:$hash\n";
close $fh;

my $admin_pw = 'alice-' . int(rand(1e9));
my (%h, %url, %logf);
# a console still running when the script dies is stopped with it
END { for my $c (values %h) { eval { $c->kill_kill(grace => 2) if $c->pumpable; }; } }
sub start_console
{
	my ($name, $role, @extra) = @_;
	my $cport = PostgreSQL::Test::Cluster::get_free_port();
	$logf{$name} = "$logdir/045_console_$name.log";
	$h{$name} = IPC::Run::start(
		[ $NODE, "$root/console/bin/ntask-console.js",
		  '--dsn', "postgresql://$role\@127.0.0.1:$port/postgres",
		  '--listen', "127.0.0.1:$cport", @extra ],
		'<', \undef, '>', $logf{$name}, '2>&1');
	$url{$name} = "http://127.0.0.1:$cport";
	my $until = time + 60;
	while (time < $until)
	{
		last if slurp_file($logf{$name}) =~ /listening on/;
		sleep 0.1;
	}
	like(slurp_file($logf{$name}), qr/listening on http:\/\/127\.0\.0\.1:$cport\//, "console $name listens on loopback");
}
{
	local $ENV{NTASK_CONSOLE_USER} = 'alice';
	local $ENV{NTASK_CONSOLE_PASSWORD} = $admin_pw;
	start_console('admin', 'console_admin');
}
start_console('ro', 'console_ro', '--users', $users);
like(slurp_file($logf{admin}), qr/role console_admin, read-write/, 'the admin console is read-write');
like(slurp_file($logf{ro}), qr/role console_ro, read-only/, 'the monitor console is read-only');

# the browser
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[ $NODE, "$root/console/test/browser.js" ],
	'<', \undef, '>', \$out, '2>', \$err,
	init => sub {
		$ENV{CONSOLE_URL} = $url{admin};
		$ENV{RO_URL} = $url{ro};
		$ENV{ADMIN_USER} = 'alice';
		$ENV{ADMIN_PASSWORD} = $admin_pw;
		$ENV{RO_USER} = 'bob';
		$ENV{RO_PASSWORD} = $ro_pw;
		$ENV{PSQL} = $node->installed_command('psql');
		$ENV{PGDSN} = "postgresql://console_admin\@127.0.0.1:$port/postgres";
		$ENV{SHOTS} = $ENV{NTASK_CONSOLE_SHOTS} // PostgreSQL::Test::Utils::tempdir("shots");
		$ENV{CHROMIUM} = $CHROMIUM;
	});
my $n = 0;
for my $line (split /\n/, $out)
{
	if ($line =~ /^(not )?ok - (.*?)(?: # (.*))?$/)
	{
		$n++;
		ok(!$1, "browser: $2") or diag($3 // '');
	}
}
ok($n >= 30, "the browser script made its checks ($n)") or diag($err);
ok($ok, 'the browser script exited 0') or diag($err);

# what the database recorded
is(sql("SELECT state FROM ntask.task WHERE task_id = $t"), 'succeeded', 'the replayed task succeeded');
is(sql(q{SELECT string_agg(action || ':' || actor, ',' ORDER BY audit_id) FROM ntask.audit
	WHERE action IN ('bulk_replay_dry_run', 'bulk_replay', 'replay', 'queue_pause', 'queue_resume')}),
	'bulk_replay_dry_run:alice,replay:alice,bulk_replay:alice,queue_pause:alice,queue_resume:alice',
	'the audit: the dry run, the replay, the pause and the resume, each by alice');
is(sql(q{SELECT count(*) FROM ntask.audit WHERE reason = 'forged'}), '0', 'no forged request reached a function');
is(sql(q{SELECT count(*) FROM ntask.audit WHERE actor = 'bob'}), '0', 'the read-only operator did nothing');

# Without the browser, over HTTP: a console behind a reverse proxy that
# authenticates (--proxy-user-header), and a console on a standby.
require HTTP::Tiny;
my $ua = HTTP::Tiny->new(max_redirect => 0, timeout => 60);
sub csrf_of { my ($html) = @_; return ($html =~ /name="csrf" value="([^"]+)"/)[0]; }
sub cookie_of { my ($res) = @_; return (($res->{headers}{'set-cookie'} // '') =~ /^([^;]+)/)[0]; }

# failed logins: five wrong passwords for bob from here hold bob's logins
# from here for a minute, even with the right password; alice is not held
{
	my @st = map { $ua->post_form("$url{ro}/login", { name => 'bob', password => "wrong$_" })->{status} } 1 .. 5;
	is("@st", '401 401 401 401 401', 'five wrong passwords: 401 each');
	is($ua->post_form("$url{ro}/login", { name => 'bob', password => $ro_pw })->{status}, 429,
		'then the right one is held (429)');
	is($ua->post_form("$url{admin}/login", { name => 'alice', password => $admin_pw })->{status}, 303,
		'another operator logs in');
}

# assign a repair owner: the audit row names the operator as actor and
# the console's database role as db_user
{
	my $s1 = sql(q{SELECT task_id FROM ntask.task WHERE queue = 'sms' AND task_key = 's1'});
	my $res = $ua->post_form("$url{admin}/login", { name => 'alice', password => $admin_pw, next => '/' });
	my $cookie = cookie_of($res);
	$res = $ua->get("$url{admin}/d/0/task/$s1", { headers => { Cookie => $cookie } });
	like($res->{content}, qr/id="assign-form"/, 'a task in repair has the assign form');
	$res = $ua->post_form("$url{admin}/d/0/task/$s1/assign",
		{ owner => 'oncall-sms', next_action => 'ask the carrier', csrf => csrf_of($res->{content}) },
		{ headers => { Cookie => $cookie } });
	like($res->{content}, qr/id="notice"[^>]*>assigned to oncall-sms/, 'assigned');
	is(sql("SELECT repair_owner || ': ' || repair_next_action FROM ntask.task WHERE task_id = $s1"),
		'oncall-sms: ask the carrier', 'the owner and the next action are on the task');
	is(sql("SELECT actor || ' as ' || db_user FROM ntask.audit WHERE action = 'repair_assign' AND task_id = $s1"),
		'alice as console_admin', "the audit row of the assignment names the operator and the console's role");
	$res = $ua->get("$url{admin}/d/0/repair", { headers => { Cookie => $cookie } });
	like($res->{content}, qr/<h2>Owner oncall-sms \(1\)<\/h2>/, 'the repair queue groups it under its owner');
}

# a task that moved on: a replay of the succeeded task shows the
# function's SQLSTATE (NT002) and message, no stack trace
{
	my $res = $ua->post_form("$url{admin}/login", { name => 'alice', password => $admin_pw, next => "/d/0/task/$t" });
	my $cookie = cookie_of($res);
	$res = $ua->get("$url{admin}/d/0/task/$t", { headers => { Cookie => $cookie } });
	$res = $ua->post_form("$url{admin}/d/0/task/$t/replay", { reason => 'again', csrf => csrf_of($res->{content}) },
		{ headers => { Cookie => $cookie } });
	is($res->{status}, 400, 'a replay of a task that moved on: 400');
	like($res->{content}, qr/<code class="sqlstate">NT002<\/code>/, 'with the SQLSTATE of ntask_replay (NT002)');
	unlike($res->{content}, qr/\.js:\d+|at async|node:internal/, 'and no stack trace');
}

# a second database in the same console (the proxy's), and a third that
# nothing answers for
my $refused_port = PostgreSQL::Test::Cluster::get_free_port();
$node->safe_psql('postgres', 'CREATE DATABASE app2');
$node->safe_psql('app2', q{CREATE EXTENSION ntask; SELECT count(*) FROM ntask_queue_set('other');});
$node->safe_psql('postgres', 'GRANT CONNECT ON DATABASE app2 TO console_admin');
start_console('proxy', 'console_admin', '--proxy-user-header', 'X-Remote-User',
	'--dsn', "postgresql://console_admin\@127.0.0.1:$port/app2",
	'--dsn', "postgresql://console_admin\@127.0.0.1:$refused_port/postgres");
{
	my $res = $ua->get("$url{proxy}/");
	is($res->{status}, 401, 'proxy mode: a request without the header is refused');
	$res = $ua->get("$url{proxy}/login");
	is($res->{status}, 401, 'proxy mode: there is no login form to bypass the proxy');
	$res = $ua->get("$url{proxy}/d/0/queue/push", { headers => { 'X-Remote-User' => 'carol' } });
	is($res->{status}, 200, 'proxy mode: the header is the login');
	like($res->{content}, qr/<span class="who">carol/, 'proxy mode: the page names the operator');
	my ($cookie, $csrf) = (cookie_of($res), csrf_of($res->{content}));
	my %hd = ('X-Remote-User' => 'carol', Cookie => $cookie);
	$res = $ua->post_form("$url{proxy}/d/0/queue/push/pause", { reason => 'forged' }, { headers => \%hd });
	is($res->{status}, 403, 'proxy mode: a POST without the CSRF token is refused');
	$res = $ua->post_form("$url{proxy}/d/0/queue/push/pause", { reason => 'maintenance', csrf => $csrf },
		{ headers => { %hd, 'X-Remote-User' => 'mallory' } });
	is($res->{status}, 403, "proxy mode: another operator's header does not ride carol's session and token");
	$res = $ua->post_form("$url{proxy}/d/0/queue/push/pause", { reason => 'maintenance', csrf => $csrf }, { headers => \%hd });
	is($res->{status}, 303, 'proxy mode: the pause with the token is done');
	is(sql(q{SELECT paused_by || ': ' || pause_reason FROM ntask.queue_stats WHERE queue = 'push'}), 'carol: maintenance',
		"proxy mode: the proxy's login name is the actor");
	$res = $ua->post_form("$url{proxy}/d/0/queue/push/resume", { reason => 'done', csrf => $csrf }, { headers => \%hd });
	is($res->{status}, 303, 'proxy mode: resumed');
	$res = $ua->get("$url{proxy}/", { headers => \%hd });
	like($res->{content}, qr/data-queue="push".*<h2><a href="\/d\/1\/">app2<\/a>.*data-queue="other"/s,
		'two databases: the overview shows both, each with its queues');
	$res = $ua->post_form("$url{proxy}/d/1/queue/other/pause", { reason => 'only app2', csrf => $csrf }, { headers => \%hd });
	is($res->{status}, 303, 'two databases: a pause in the second');
	is($node->safe_psql('app2', q{SELECT paused_by FROM ntask.queue_stats WHERE queue = 'other'}), 'carol',
		'two databases: it paused the queue of the second database');
	is(sql(q{SELECT count(*) FROM ntask.audit WHERE reason = 'only app2'}), '0', 'and wrote nothing in the first');
	$res = $ua->get("$url{proxy}/", { headers => \%hd });
	like($res->{content}, qr/:$refused_port\/postgres<\/h2><p class="error"><code class="sqlstate">ECONNREFUSED<\/code>/,
		'an unreachable database: its part of the overview shows the error, the others show');
	is($ua->get("$url{proxy}/d/2/repair", { headers => \%hd })->{status}, 503, 'an unreachable database: 503 on its pages');
	$h{proxy}->signal('TERM');
	$h{proxy}->finish;
}

# a role with ntask_monitor alone: the overview from ntask.queue_stats,
# the last hour not readable (its SQLSTATE shown)
{
	local $ENV{NTASK_CONSOLE_USER} = 'alice';
	local $ENV{NTASK_CONSOLE_PASSWORD} = $admin_pw;
	start_console('mon', 'console_mon');
	my $res = $ua->post_form("$url{mon}/login", { name => 'alice', password => $admin_pw, next => '/' });
	$res = $ua->get("$url{mon}/", { headers => { Cookie => cookie_of($res) } });
	like($res->{content}, qr/data-queue="mail".*data-queue="push"/s, 'ntask_monitor alone: the overview lists the queues');
	like($res->{content}, qr/Last hour: not readable by role console_mon \(<code>42501<\/code>/,
		'ntask_monitor alone: the last hour is not readable, with the SQLSTATE');
	like($res->{content}, qr/id="readonly"/, 'ntask_monitor alone: read-only');
	$h{mon}->signal('TERM');
	$h{mon}->finish;
}

# a standby: the admin role, but read-only
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('console_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
{
	local $ENV{NTASK_CONSOLE_USER} = 'alice';
	local $ENV{NTASK_CONSOLE_PASSWORD} = $admin_pw;
	my $sport = $standby->port;
	my $cport = PostgreSQL::Test::Cluster::get_free_port();
	$logf{standby} = "$logdir/045_console_standby.log";
	$h{standby} = IPC::Run::start(
		[ $NODE, "$root/console/bin/ntask-console.js", '--dsn', "postgresql://console_admin\@127.0.0.1:$sport/postgres",
		  '--listen', "127.0.0.1:$cport" ], '<', \undef, '>', $logf{standby}, '2>&1');
	$url{standby} = "http://127.0.0.1:$cport";
	my $until = time + 60;
	sleep 0.1 while time < $until && slurp_file($logf{standby}) !~ /listening on/;
}
like(slurp_file($logf{standby}), qr/role console_admin, read-only/, 'standby: the console starts read-only');
{
	my $res = $ua->post_form("$url{standby}/login", { name => 'alice', password => $admin_pw, next => '/' });
	my $cookie = cookie_of($res);
	$res = $ua->get("$url{standby}/d/0/queue/mail", { headers => { Cookie => $cookie } });
	like($res->{content}, qr/Read-only: the server is a standby/, 'standby: the page says why it is read-only');
	unlike($res->{content}, qr/class="action"/, 'standby: no action form');
	$res = $ua->post_form("$url{standby}/d/0/queue/mail/pause", { reason => 'x', csrf => csrf_of($res->{content}) },
		{ headers => { Cookie => $cookie } });
	is($res->{status}, 403, 'standby: a pause with the right token is refused');
	like($res->{content}, qr/standby/, 'standby: the refusal says why');
	$h{standby}->signal('TERM');
	$h{standby}->finish;
}
$standby->stop;

# The speed over a big queue (NTASK_CONSOLE_BIG=1; about a minute more): 1M
# succeeded tasks with their ledger and 100k ready ones in queue "big"
# (console/test/big.sql).  Every statement of the admin console is
# EXPLAINed by auto_explain into the server's log: none may read ntask.task
# or ntask.attempt by a sequential scan.  The times (median of 5) are
# printed next to the same pages of the small queue "many" in the same
# run: ratios, no timed assertion.
if (($ENV{NTASK_CONSOLE_BIG} // '') eq '1')
{
	sql(q{ALTER ROLE console_admin SET session_preload_libraries = 'auto_explain'});
	sql(q{ALTER ROLE console_admin SET auto_explain.log_min_duration = 0});
	# a console of its own, so that its connections load auto_explain
	{
		local $ENV{NTASK_CONSOLE_USER} = 'alice';
		local $ENV{NTASK_CONSOLE_PASSWORD} = $admin_pw;
		start_console('big', 'console_admin');
	}
	require HTTP::Tiny;
	my $http = HTTP::Tiny->new(max_redirect => 0, timeout => 120);
	my $r = $http->post_form("$url{big}/login", { name => 'alice', password => $admin_pw, next => '/' });
	my ($cookie) = ($r->{headers}{'set-cookie'} // '') =~ /^([^;]+)/;
	ok($r->{status} == 303 && $cookie, 'logged in for the timing');
	my $get = sub {
		my ($path) = @_;
		my $t0 = time;
		my $res = $http->get("$url{big}$path", { headers => { Cookie => $cookie } });
		my $dt = time - $t0;
		die "GET $path: $res->{status} " . substr($res->{content} // '', 0, 300) unless $res->{status} == 200;
		return ($dt, $res->{content});
	};
	my $median = sub {
		my ($path) = @_;
		my @t = sort { $a <=> $b } map { ($get->($path))[0] } 1 .. 5;
		return $t[2];
	};
	# the 20th page of a listing, by its next links (keyset: as cheap as the first)
	my $deep = sub {
		my ($path) = @_;
		for (1 .. 19)
		{
			my (undef, $html) = $get->($path);
			($path) = $html =~ /id="next-page" href="([^"]+)"/ or die "no next page after $path";
			$path =~ s/&amp;/&/g;
		}
		return $path;
	};
	# the baseline: this run's small install (queue "many": 130 tasks),
	# before the big queue exists
	my $small_task = sql(q{SELECT min(task_id) FROM ntask.task WHERE queue = 'many' AND state = 'succeeded'});
	my @pages = (
		[ 'overview', '/' ],
		[ 'queue, all states', '/d/0/queue/many', '/d/0/queue/big' ],
		[ 'queue, ready', '/d/0/queue/many?state=ready', '/d/0/queue/big?state=ready' ],
		[ 'queue, succeeded', '/d/0/queue/many?state=succeeded', '/d/0/queue/big?state=succeeded' ],
		[ 'queue, key prefix', '/d/0/queue/many?key_prefix=k12', '/d/0/queue/big?key_prefix=todo%3A99' ],
		[ 'queue, ready, page 20', undef, sub { $deep->('/d/0/queue/big?state=ready') } ],
		[ 'queue, all, page 20', undef, sub { $deep->('/d/0/queue/big') } ],
		[ 'task', "/d/0/task/$small_task", sub { '/d/0/task/' . sql(q{SELECT task_id FROM ntask.task WHERE task_key = 'done:500000'}) } ],
		[ 'repair queue', '/d/0/repair' ],
	);
	my %small;
	$small{$_->[0]} = $median->($_->[1]) for grep { defined $_->[1] } @pages;
	$node->safe_psql('postgres', slurp_file("$root/console/test/big.sql"), timeout => 900);
	# from here on the tables are big (and analyzed): the plans that count
	my $log_offset = -s $node->logfile;
	my $report = sprintf("%-24s %10s %10s %7s\n", 'page', 'small ms', 'big ms', 'ratio');
	for my $p (@pages)
	{
		my ($name, $small, $big) = @$p;
		$big //= $small;
		$big = $big->() if ref $big;
		my $tb = $median->($big);
		my $ts = $small{$name};
		$report .= sprintf("%-24s %10s %10.1f %7s\n", $name,
			defined $ts ? sprintf('%.1f', 1000 * $ts) : '-', 1000 * $tb,
			defined $ts ? sprintf('%.1f', $tb / $ts) : '-');
	}
	diag("the console, 130 tasks (small) and 1M finished + 100k ready (big), median of 5:\n$report");
	open my $rf, '>', "$logdir/045_console_big.txt" or die;
	print $rf $report;
	close $rf;
	my $slog = substr(slurp_file($node->logfile), $log_offset);
	my $plans = () = $slog =~ /duration: [\d.]+ ms\s+plan:/g;
	ok($plans > 20, "auto_explain logged the console's plans ($plans)");
	my @seq = $slog =~ /(Seq Scan on (?:task|attempt)\b[^\n]*)/g;
	is(scalar(@seq), 0, 'no plan of the console reads ntask.task or ntask.attempt by a sequential scan')
	  or diag(join("\n", @seq[0 .. ($#seq < 5 ? $#seq : 5)]));
	$h{big}->signal('TERM');
	$h{big}->finish;
}

for my $c ('admin', 'ro')
{
	$h{$c}->signal('TERM');
	$h{$c}->finish;
	my $log = slurp_file($logf{$c});
	unlike($log, qr/\Q$admin_pw\E|\Q$ro_pw\E/, "console $c: no password in its log");
	unlike($log, qr/csrf=|ntask_console=|scrypt\$/i, "console $c: no CSRF token, session cookie or hash in its log");
	like($log, qr/POST \/d\/0\/queue\/\w+\/pause 403/, "console $c: the refused POSTs are logged (path and status only)");
}

$node->stop;
done_testing();
