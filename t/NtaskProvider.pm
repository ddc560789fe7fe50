
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/NtaskProvider.pm: start t/provider.py (the loopback fault-injecting
# HTTP provider) for a TAP test and talk to its admin API.
#
#   use lib $FindBin::Bin;
#   use NtaskProvider;
#   my $pport = NtaskProvider::start('003');   # 127.0.0.1 port
#   prov('POST', '/_admin/rules', {...});      # admin call, decoded JSON
#   pkeys('prefix');                           # per-key records
#   wait_for('what', $seconds, sub { ... });   # poll every 50 ms
#
# The provider exits with the test (END sends TERM; it also exits when its
# parent dies or its stdout closes).

package NtaskProvider;

use strict;
use warnings;

use Exporter 'import';
use FindBin;
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(prov pkeys wait_for $worker_conf);

# postgresql.conf lines for a node whose worker dispatches to the provider
our $worker_conf = q{
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
ntask.naptime = '100ms'
ntask.http_allowed_hosts = '127.0.0.1'
ntask.http_connect_timeout_ms = 1000
ntask.backoff_jitter = off
};

my $json = JSON::PP->new->canonical;
my $http = HTTP::Tiny->new(timeout => 10, proxy => undef, http_proxy => undef);
my ($pid, $fh, $port);

# start(name): start the provider, logging to <log_path>/provider_<name>.log
sub start
{
	my ($name) = @_;
	my $log = "$PostgreSQL::Test::Utils::log_path/provider_$name.log";
	$pid = open($fh, '-|', '/usr/bin/python3', "$FindBin::Bin/provider.py",
		'--log', $log, '0')
	  or die "cannot start t/provider.py: $!";
	$port = <$fh>;
	die "t/provider.py did not print its port"
	  unless defined $port && $port =~ /^\d+$/;
	chomp $port;
	note "provider on 127.0.0.1:$port, log $log";
	return $port;
}

END { kill 'TERM', $pid if $pid; }

# prov(method, path, body): call the provider's admin API, decode JSON
sub prov
{
	my ($method, $path, $body) = @_;
	my $r = $http->request($method, "http://127.0.0.1:$port$path",
		defined $body
		? { content => $json->encode($body),
			headers => { 'Content-Type' => 'application/json' } }
		: {});
	die "provider $method $path: $r->{status} $r->{content}" unless $r->{success};
	return $json->decode($r->{content});
}

# pkeys(prefix): provider records of the keys starting with prefix
sub pkeys
{
	my ($prefix) = @_;
	return prov('GET', "/_admin/stats?prefix=$prefix")->{keys};
}

# wait_for(what, seconds, sub): poll sub every 50 ms until true, wall clock
sub wait_for
{
	my ($what, $seconds, $cond) = @_;
	my $end = time + $seconds;
	while (time < $end)
	{
		return 1 if $cond->();
		usleep(50_000);
	}
	diag "timed out after $seconds s waiting for: $what";
	return 0;
}

1;
