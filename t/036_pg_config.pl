
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/036_pg_config.pl: which PostgreSQL scripts/test.sh and scripts/demo.sh
# build and test against (issue 46, Docs; README "The two commands",
# docs/operations.md "Tests").  No server needed: scripts/lib.sh's
# ntask_pg_config and ntask_pg_default with fake pg_config scripts.
#   - PG_CONFIG of version V is V's pg_config, and alone (no NTASK_PG) it
#     picks V as the only version;
#   - PG_CONFIG of another version is not used for V: an installed
#     /usr/lib/postgresql/V is (when there is one);
#   - without PG_CONFIG the default versions stay "15 18".
# The vendored fallback (scripts/pg18.sh) needs root and the tarballs; it
# is what CI's NTASK_PG=18 runs use.

use strict;
use warnings;

use FindBin;
use File::Temp;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::Bin/..";
my $dir = File::Temp->newdir();

# a pg_config that only knows its version
sub fake
{
	my ($v) = @_;
	my $f = "$dir/pg_config$v";
	open my $fh, '>', $f or die "$f: $!";
	print $fh "#!/bin/sh\n[ \"\$1\" = --version ] && echo 'PostgreSQL $v.6'\n";
	close $fh;
	chmod 0755, $f;
	return $f;
}
my ($f15, $f18) = (fake(15), fake(18));

# run a function of scripts/lib.sh in a shell at the tree's root
sub lib
{
	my ($env, $call) = @_;
	my $cmd = "cd '$root' && env -u PG_CONFIG $env sh -c '. scripts/lib.sh; $call'";
	my $out = `$cmd 2>/dev/null`;
	chomp $out;
	return $out;
}

is(lib("PG_CONFIG=$f18", 'ntask_pg_config 18'), $f18, 'PG_CONFIG of 18 is used for 18');
is(lib("PG_CONFIG=$f18", 'ntask_pg_default "15 18"'), '18', 'PG_CONFIG of 18 alone: only 18 runs');
is(lib("PG_CONFIG=$f15", 'ntask_pg_config 15'), $f15, 'PG_CONFIG of 15 is used for 15');
is(lib("PG_CONFIG=$f15", 'ntask_pg_default 15'), '15', 'PG_CONFIG of 15 alone: only 15 runs');
is(lib('', 'ntask_pg_default "15 18"'), '15 18', 'without PG_CONFIG: 15 and 18');
SKIP:
{
	skip 'no /usr/lib/postgresql/15', 2 unless -x '/usr/lib/postgresql/15/bin/pg_config';
	is(lib("PG_CONFIG=$f18", 'ntask_pg_config 15'), '/usr/lib/postgresql/15/bin/pg_config',
		'PG_CONFIG of 18 is not used for 15: the installed 15 is');
	is(lib('', 'ntask_pg_config 15'), '/usr/lib/postgresql/15/bin/pg_config', 'the installed 15');
}
SKIP:
{
	skip 'no installed PostgreSQL 18', 1 unless -x '/usr/lib/postgresql/18/bin/pg_config';
	is(lib("PG_CONFIG=$f15", 'ntask_pg_config 18'), '/usr/lib/postgresql/18/bin/pg_config',
		'an installed 18 comes before the vendored build');
}

done_testing();
