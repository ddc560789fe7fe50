
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/040_client_go.pl: the Go worker library (clients/go, issue 50) against
# a real server and pgbouncer, in CI with Debian's Go and Debian's pgx v4
# (GOPATH mode; scripts/deps.sh installs golang-go and
# golang-github-jackc-pgx-v4-dev).
#
# Starts a throwaway cluster with ntask (TCP on 127.0.0.1, trust) and
# pgbouncer in transaction pooling mode in front of it (t/NtaskBouncer.pm,
# 2 server connections), then runs the library's own runner,
# clients/go/test.sh (go vet, then go test -json of the unit tests and the
# integration tests, which get the server by NTASK_TEST_DSN, pgbouncer by
# NTASK_TEST_BOUNCER_DSN, and the data directory and log for pg_ctl
# restart), and turns each Go test into a TAP subtest: a failed or skipped
# Go test fails here (in CI nothing may skip). The Go tests
# (clients/go/*_test.go): the drift test (each SQL function the library
# calls, with its argument names, is in pg_proc), the producer (in the
# caller's transaction, typed duplicate answers, database/sql), the W1/W2
# takeover (the stale report refused and surfaced), handler errors before
# and after invoked, the task methods, the claim-stop race (nothing
# stranded), pgbouncer in transaction mode (simple protocol and
# statement_cache_mode=describe), a report retried with its token after
# its connection died, a server restart mid-wait, and SIGTERM (and a second one),
# SIGKILL and SIGSTOP of a worker process (cmd/ntask-testworker).

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use JSON::PP;
use NtaskBouncer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::Bin/..";
my $go = '';
for my $d (split /:/, $ENV{PATH}, -1)
{
	$go = "$d/go" if !$go && -x "$d/go";
}
ok($go, 'go is installed (scripts/deps.sh: golang-go)')
  or BAIL_OUT('no go');
ok(-f '/usr/share/gocode/src/github.com/jackc/pgx/v4/pgxpool/pool.go',
	"Debian's pgx v4 is installed (golang-github-jackc-pgx-v4-dev)");

my $node = PostgreSQL::Test::Cluster->new('go');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
listen_addresses = '127.0.0.1'
max_connections = 60
});
$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ntask');
my $bouncer = NtaskBouncer::start($node, postgres => 2);
my $user = getpwuid($<);

my $tmp = PostgreSQL::Test::Utils::tempdir('go');
local $ENV{NTASK_TEST_DSN} = 'host=127.0.0.1 port=' . $node->port . " dbname=postgres user=$user";
local $ENV{NTASK_TEST_BOUNCER_DSN} = "host=127.0.0.1 port=$bouncer->{port} dbname=postgres user=$user";
local $ENV{NTASK_TEST_PGDATA} = $node->data_dir;
local $ENV{NTASK_TEST_PGLOG} = $node->logfile;
local $ENV{NTASK_GO_GOPATH} = "$tmp/gopath";
local $ENV{TMPDIR} = $tmp;
local $ENV{HOME} = $ENV{HOME} && -w $ENV{HOME} ? $ENV{HOME} : $tmp;

my ($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'sh', "$root/clients/go/test.sh", '-json' ],
	'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(280));
my $logdir = $PostgreSQL::Test::Utils::log_path;
{
	open my $fh, '>', "$logdir/040_go_test.json" or die;
	print $fh $out;
	close $fh;
}

# go test -json: one event per line; the top-level tests' results
my (%result, %output, @order);
for my $line (split /\n/, $out)
{
	next unless $line =~ /^\{/;
	my $ev = eval { decode_json($line) } or next;
	my $t = $ev->{Test} // next;
	next if $t =~ m{/};
	push @order, $t unless exists $output{$t};
	$output{$t} .= $ev->{Output} // '';
	$result{$t} = $ev->{Action} if ($ev->{Action} // '') =~ /^(pass|fail|skip)$/;
}
ok($ok, 'clients/go/test.sh: go vet and go test passed')
  or diag("stderr:\n$err\nstdout (tail):\n" . substr($out, -4000));
my @unit = grep { /^TestUnit/ } @order;
my @integ = grep { /^TestIntegration/ } @order;
cmp_ok(scalar(@unit), '>=', 8, scalar(@unit) . ' unit tests ran');
cmp_ok(scalar(@integ), '>=', 15, scalar(@integ) . ' integration tests ran');
for my $t (@order)
{
	is($result{$t} // 'no result', 'pass', "go: $t")
	  or diag($output{$t});
}

NtaskBouncer::stop($bouncer);
$node->stop;
done_testing();
