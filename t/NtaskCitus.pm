
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/NtaskCitus.pm: a Citus cluster (a coordinator and N workers) on loopback
# for a TAP test, each node a PostgreSQL::Test::Cluster with
# shared_preload_libraries = 'citus,ntask' (citus must come first).
#
#   use lib $FindBin::Bin;
#   use NtaskCitus;
#   NtaskCitus::ensure_built() or plan skip_all => ...;   # builds Citus if absent
#   my $c = NtaskCitus::start('name', workers => 2);
#   $c->{coord}, @{ $c->{workers} }                        # the nodes
#   NtaskCitus::stop($c);
#
# Citus is built from the vendored tarball (../shared/vendor, or
# NTASK_CITUS_TARBALL) in a build directory under /tmp and installed into
# the PostgreSQL that pg_config names (the one the test runs against): it
# is never part of the repository.  Nodes listen on 127.0.0.1 only, on
# free ports picked by PostgreSQL::Test::Cluster; the coordinator is told
# its own host (citus_set_coordinator_host) so that it can hold shards of
# reference tables, and every worker is added with citus_add_node.

package NtaskCitus;

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our $VERSION_WANTED = '12.1.6';

sub pg_config
{
	return $ENV{PG_CONFIG} || 'pg_config';
}

sub pkglibdir
{
	my $pc = pg_config();
	my $d = `$pc --pkglibdir`;
	chomp $d;
	return $d;
}

# true when citus.so is installed in the PostgreSQL under test
sub installed
{
	return -f pkglibdir() . '/citus.so';
}

sub tarball
{
	return $ENV{NTASK_CITUS_TARBALL} if $ENV{NTASK_CITUS_TARBALL};
	my $here = dirname(abs_path(__FILE__));
	for my $c ("$here/../../shared/vendor/citus-$VERSION_WANTED.tar.gz",
		"/work/shared/vendor/citus-$VERSION_WANTED.tar.gz")
	{
		return $c if -f $c;
	}
	return undef;
}

# Build and install Citus unless it is installed; returns an error text on
# failure, '' on success.  The build log is kept in the build directory.
sub ensure_built
{
	return '' if installed();
	my $tb = tarball();
	return "no Citus tarball (set NTASK_CITUS_TARBALL)" unless $tb;
	my $dir = "/tmp/ntask-citus-build-$<";
	my $pc = pg_config();
	my $src = "$dir/citus-$VERSION_WANTED";
	my $cmd = "mkdir -p $dir && cd $dir && rm -rf $src && tar xzf '$tb'"
	  . " && cd $src && ./configure PG_CONFIG='$pc' > $dir/configure.log 2>&1"
	  . " && make -j2 > $dir/make.log 2>&1 && make install > $dir/install.log 2>&1";
	my $rc = system('sh', '-c', $cmd);
	return "Citus build failed (logs in $dir; it needs liblz4-dev, libzstd-dev, libkrb5-dev)"
	  if $rc != 0 || !installed();
	return '';
}

sub _node
{
	my ($name, $extra, $streaming) = @_;
	my $n = PostgreSQL::Test::Cluster->new($name);
	$n->init(allows_streaming => $streaming ? 1 : 0);
	$n->append_conf('postgresql.conf', qq{
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'citus,ntask'
max_connections = 100
max_prepared_transactions = 100
citus.shard_count = 4
ntask.backoff_jitter = off
log_min_messages = warning
$extra
});
	# the nodes talk to each other over TCP on loopback
	$n->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION citus');
	return $n;
}

# start(name, workers => N, conf => 'extra postgresql.conf lines',
#       coord_conf => 'extra lines for the coordinator only',
#       streaming => 1: the workers can have standbys)
sub start
{
	my ($name, %o) = @_;
	my $nw = $o{workers} // 2;
	my $conf = $o{conf} // "ntask.worker = off\n";
	my $coord = _node("${name}_coord", $conf . ($o{coord_conf} // ''));
	my @w = map { _node("${name}_w$_", $conf, $o{streaming}) } 1 .. $nw;
	$coord->safe_psql('postgres',
		"SELECT citus_set_coordinator_host('127.0.0.1', " . $coord->port . ")");
	for my $w (@w)
	{
		$coord->safe_psql('postgres',
			"SELECT citus_add_node('127.0.0.1', " . $w->port . ")");
	}
	return { coord => $coord, workers => \@w, name => $name };
}

sub stop
{
	my ($c) = @_;
	$_->stop('fast') for (@{ $c->{workers} }, $c->{coord});
}

1;
