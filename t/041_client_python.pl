
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/041_client_python.pl: the Python worker library (clients/python,
# issue 50) against a real server, one TAP subtest per Python test.
#
# A cluster with ntask in shared_preload_libraries, listening on
# 127.0.0.1, and pgbouncer in transaction pooling mode (t/NtaskBouncer.pm)
# with two databases on it: "postgres" (2 server connections) and "single"
# (1 server connection: the control that psycopg's own prepared statements
# break behind it).  clients/python/tests/run.py runs the unit tests (no
# server) and the integration tests (clients/python/tests/test_integration.py:
# takeover W1/W2, handler exceptions before and after invoked, SIGTERM,
# SIGKILL, SIGSTOP, the claim-stop race, a server restart mid-wait through
# pg_ctl, pgbouncer, the drift test against pg_proc) with the DSNs, pg_ctl
# and the data directory in its environment, and prints one RESULT line per
# test; each becomes a subtest here.  A skipped integration test fails:
# this file provides everything they need.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use NtaskBouncer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::Bin/..";
my $PY = '/usr/bin/python3';

ok(system($PY, '-c', 'import psycopg') == 0, 'python3-psycopg is installed (scripts/deps.sh)')
  or BAIL_OUT('no psycopg');

my $node = PostgreSQL::Test::Cluster->new('client_python');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
listen_addresses = '127.0.0.1'
});
$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ntask');
my $user = getpwuid($<);
my $bouncer = NtaskBouncer::start($node, postgres => 2, single => 1);

my ($out, $err) = ('', '');
local $ENV{NTASK_TEST_DSN} = 'host=127.0.0.1 port=' . $node->port . " dbname=postgres user=$user";
local $ENV{NTASK_TEST_BOUNCER_DSN} = "host=127.0.0.1 port=$bouncer->{port} dbname=postgres user=$user";
local $ENV{NTASK_TEST_BOUNCER1_DSN} = "host=127.0.0.1 port=$bouncer->{port} dbname=single user=$user";
local $ENV{NTASK_TEST_PGCTL} = $node->config_data('--bindir') . '/pg_ctl';
local $ENV{NTASK_TEST_PGDATA} = $node->data_dir;
local $ENV{NTASK_TEST_PGLOG} = $node->logfile;
my $h = IPC::Run::start([ $PY, "$root/clients/python/tests/run.py" ],
	'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(300));
$h->finish;
my $rc = $h->full_result >> 8;

my %n;
for my $line (split /\n/, $out)
{
	next unless $line =~ /^RESULT (ok|not ok|skip) (\S+)(?: # (.*))?$/;
	my ($what, $name, $reason) = ($1, $2, $3);
	$n{ (split /\./, $name)[0] }++;
	if ($what eq 'ok') { pass($name); }
	elsif ($what eq 'skip') { fail("$name skipped: $reason"); }
	else { fail($name); }
}
# each module's tests all reported (a crash of the runner loses lines)
for my $m ('test_unit', 'test_integration')
{
	open my $fh, '<', "$root/clients/python/tests/$m.py" or die "$m.py: $!";
	my $defined = grep { /^\s+def test_/ } <$fh>;
	close $fh;
	is($n{$m} // 0, $defined, "all $defined tests of $m.py reported");
}
is($rc, 0, 'clients/python/tests/run.py exited 0') or diag($err);

NtaskBouncer::stop($bouncer);
$node->stop;
done_testing();
