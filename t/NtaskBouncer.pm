
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/NtaskBouncer.pm: start pgbouncer (Debian package) in transaction
# pooling mode in front of a PostgreSQL::Test::Cluster node, for a TAP test.
#
#   use lib $FindBin::Bin;
#   use NtaskBouncer;
#   my $b = NtaskBouncer::start($node, postgres => 2, shared1 => 1);
#   # databases (name => pool_size), all pointing at the node's postgres db;
#   # name => [pool_size, dbname] points at the node's database dbname
#   ... connect to 127.0.0.1:$b->{port} as $b->{user}, no password ...
#   NtaskBouncer::stop($b);
#
# Loopback only (listen_addr 127.0.0.1, a free port, no unix socket),
# auth_type trust for the OS user running the test (in a userlist),
# admin console user the same, ignore_startup_parameters =
# extra_float_digits (pgJDBC sends it).  Config, log and pid file live in a
# temp dir of the test.  start() returns once the port accepts connections.

package NtaskBouncer;

use strict;
use warnings;

use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time sleep);

our $PGBOUNCER = '/usr/sbin/pgbouncer';

sub start
{
	my ($node, %dbs) = @_;
	die "pgbouncer is not installed ($PGBOUNCER; scripts/deps.sh installs it)\n"
	  unless -x $PGBOUNCER;
	my $dir = PostgreSQL::Test::Utils::tempdir('pgbouncer');
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = getpwuid($<);
	my ($host, $pgport) = ($node->host, $node->port);
	open my $ul, '>', "$dir/userlist.txt" or die;
	print $ul qq{"$user" ""\n};
	close $ul;
	my $dblines = join('', map {
		my ($size, $target) = ref $dbs{$_} ? @{ $dbs{$_} } : ($dbs{$_}, 'postgres');
		"$_ = host=$host port=$pgport dbname=$target pool_size=$size\n" } sort keys %dbs);
	open my $cf, '>', "$dir/pgbouncer.ini" or die;
	print $cf <<"INI";
[databases]
$dblines
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = $user
pool_mode = transaction
default_pool_size = 2
max_client_conn = 100
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
	close $cf;
	my $b = { port => $port, user => $user, dir => $dir, out => '', err => '' };
	$b->{h} = IPC::Run::start([ $PGBOUNCER, "$dir/pgbouncer.ini" ],
		'>', \$b->{out}, '2>', \$b->{err});
	my $until = time + 30;
	while (time < $until)
	{
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
			Proto => 'tcp', Timeout => 1);
		if ($s)
		{
			close $s;
			return $b;
		}
		sleep 0.05;
	}
	die "pgbouncer did not listen on 127.0.0.1:$port within 30 s: $b->{err}\n";
}

sub stop
{
	my ($b) = @_;
	$b->{h}->signal('TERM');
	$b->{h}->finish;
}

1;
