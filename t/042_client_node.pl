# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/042_client_node.pl: the TypeScript / Node worker library (clients/node,
# issue 50, docs/clients/node.md) against a real server.
#
# Builds the library with its own tsc (clients/node/node_modules, from
# `npm ci` in scripts/deps.sh), starts a throwaway cluster with ntask in
# shared_preload_libraries and pgbouncer in transaction pooling mode in
# front of it (t/NtaskBouncer.pm), and runs the library's node:test suites:
#   dist/test/unit.test.js         no server (a fake pool)
#   dist/test/integration.test.js  the server: the drift test (every SQL
#       function and argument name the library sends is in pg_proc), the
#       producer, W1/W2 takeover, a handler error before / after invoked,
#       SIGTERM / SIGKILL / SIGSTOP of a worker process
#       (dist/test/proc.js), the claim-stop race, pgbouncer, and a server
#       restart (pg_ctl restart) during a waiting claim.
# Each node test becomes one TAP test here; a skipped or missing one fails.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use NtaskBouncer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $dir = "$FindBin::Bin/../clients/node";
# at least this many tests in each suite: a suite that shrinks fails
my %MIN = ('unit.test.js' => 20, 'integration.test.js' => 13);

ok(-d "$dir/node_modules/pg" && -f "$dir/node_modules/typescript/bin/tsc",
	'pg and typescript are installed (scripts/deps.sh: npm ci in clients/node)')
  or BAIL_OUT('npm ci in clients/node first');
my ($out, $err) = ('', '');
ok(IPC::Run::run([ 'node', "$dir/node_modules/typescript/bin/tsc", '-p', $dir ], '>', \$out, '2>', \$err),
	'tsc builds clients/node') or diag("$out$err");

my $node = PostgreSQL::Test::Cluster->new('client_node');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
listen_addresses = '127.0.0.1'
});
$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ntask');
my $bouncer = NtaskBouncer::start($node, postgres => 2);
my $user = getpwuid($<);

sub run_suite
{
	my ($file, %env) = @_;
	my ($o, $e) = ('', '');
	local %ENV = (%ENV, %env);
	IPC::Run::run([ 'node', '--test', '--test-reporter=tap', '--test-concurrency=1',
		"$dir/dist/test/$file" ], '>', \$o, '2>', \$e);
	my $rc = $? >> 8;
	my $n = 0;
	# the tests' results in node's TAP reporter: at column 0 (Node 20), or
	# indented once under the file's own result (older runners); the file's
	# result itself is not a test (a file that fails to load fails the
	# status and the count)
	while ($o =~ /^(?: {4})?(not )?ok \d+ - (.*?)(?: # (SKIP|TODO)\b(.*))?$/mg)
	{
		my ($not, $name, $directive, $why) = ($1, $2, $3, $4);
		next if $name =~ m{/\Q$file\E$};
		$n++;
		ok(!$not && !$directive, "node $file: $name" . ($directive ? " ($directive$why)" : ''));
	}
	cmp_ok($n, '>=', $MIN{$file}, "node $file: $n tests ran");
	is($rc, 0, "node $file: status 0") or diag("$o\n$e");
	return;
}

run_suite('unit.test.js');
run_suite('integration.test.js',
	NTASK_DSN => "postgresql://$user\@127.0.0.1:" . $node->port . '/postgres',
	NTASK_BOUNCER_DSN => "postgresql://$user\@127.0.0.1:$bouncer->{port}/postgres",
	NTASK_PG_CTL => 'pg_ctl',
	NTASK_PGDATA => $node->data_dir,
	NTASK_PG_LOG => $node->logfile);

NtaskBouncer::stop($bouncer);
$node->stop;
done_testing();
