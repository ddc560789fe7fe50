#!/usr/bin/perl
# bench/citus_lock.pl: what the claim's shard lock (issue 49,
# docs/scaling.md "Shard moves") costs on Citus: the lock statement a
# claim runs before each shard's pick, against SELECT 1 and against a
# delegated claim's probe of an empty shard, in the same rounds (pgbench
# -M prepared, one client, 2000 each, 3 rounds).  A coordinator and one
# worker on loopback (t/NtaskCitus.pm).  Run from the repository as the
# postgres user, with Citus and ntask installed:
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; PATH=$(pg_config --bindir):$PATH \
#   PG_REGRESS=$L/regress/pg_regress TESTDIR=$(mktemp -d) \
#   prove -v -I $L/perl bench/citus_lock.pl
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use NtaskCitus;

my $c = NtaskCitus::start('lockcost', workers => 1);
my $co = $c->{coord};
$co->safe_psql('postgres', q{CREATE EXTENSION ntask;
	SELECT count(*) FROM ntask_distribute(4);
	SELECT count(*) FROM ntask_queue_set('none');});
my $dir = PostgreSQL::Test::Utils::tempdir;
my %sql = (
	one => 'SELECT 1;',
	# the statement of NtaskLockShards (src/spi_util.c) for one shard
	lock => "SELECT pg_catalog.lock_shard_metadata(5, ARRAY(SELECT DISTINCT "
	  . "pg_catalog.get_shard_id_for_distribution_column('ntask.task'::regclass, s.v) "
	  . "FROM pg_catalog.unnest('{1}'::int2[]) s(v) ORDER BY 1));",
	probe => "SELECT count(*) FROM ntask_claim_on(1::smallint, 'none', 'w', 1);");
for my $s (keys %sql)
{
	open my $f, '>', "$dir/$s.sql" or die;
	print $f "$sql{$s}\n";
	close $f;
}
for my $round (1 .. 3)
{
	for my $s ('one', 'lock', 'probe')
	{
		my $res = `pgbench -n -M prepared -c 1 -t 2000 -f $dir/$s.sql -h @{[$co->host]} -p @{[$co->port]} postgres 2>&1`;
		my ($lat) = $res =~ /latency average = ([\d.]+) ms/;
		diag("round $round $s: " . ($lat // '?') . ' ms');
	}
}
NtaskCitus::stop($c);
ok(1, 'measured');
done_testing();
