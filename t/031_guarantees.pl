
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/031_guarantees.pl: every promise in docs/guarantees.md names the tests
# that keep it, and those tests exist and are run.  No server needed.
#
# A promise is a top-level bullet ("* **...**") above "## Limits".  Each
# must hold "Kept by:" followed by a list of test names, each "kind
# `name`" or a bare "`name`" of the kind before it:
#   regress `x`  sql/x.sql and expected/x.out, and x in the Makefile's REGRESS
#   spec `x`     specs/x.spec and expected/x.out, and x in ISOLATION
#   TAP `x`      t/x.pl (prove runs every t/*.pl)
#   fuzz `x`     fuzz/x.c (fuzz/ci.sh builds and runs every harness)
# Then the same check is run on doctored copies of the page, to show that
# it fails: a promise without "Kept by:", one naming a missing file, one
# naming a regress file that the Makefile does not run, and an unknown kind.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::Bin/..";

my $makefile = slurp_file("$root/Makefile");
# a Makefile variable's words (continuation lines joined)
sub make_list
{
	my ($var) = @_;
	(my $m = $makefile) =~ s/\\\n/ /g;
	$m =~ /^\Q$var\E\s*=\s*(.*)$/m or die "no $var in the Makefile";
	return { map { $_ => 1 } split ' ', $1 };
}
my $regress = make_list('REGRESS');
my $isolation = make_list('ISOLATION');

# the problems of one page's promises, as a list of strings
sub problems
{
	my ($page) = @_;
	my @out;
	my ($top) = split /^## Limits/m, $page;
	my @bullets = $top =~ /^(\* \*\*.*?)(?=^\* \*\*|^\S|\z)/msg;
	push @out, 'no promise found' unless @bullets;
	for my $b (@bullets)
	{
		my ($title) = $b =~ /^\* \*\*(.*?)\*\*/;
		$title //= substr($b, 0, 40);
		if ($b !~ /Kept by:(.*)\z/s)
		{
			push @out, "\"$title\" names no test (no \"Kept by:\")";
			next;
		}
		my $list = $1;
		$list =~ s/\([^)]*\)//gs;    # parenthesised remarks
		my ($kind, $n) = (undef, 0);
		while ($list =~ /(?:(\w+)\s+)?`([^`]+)`/g)
		{
			my ($k, $name) = ($1, $2);
			$kind = $k if defined $k;
			if (!defined $kind)
			{
				push @out, "\"$title\": `$name` has no kind";
				next;
			}
			$n++;
			my @missing;
			if ($kind eq 'regress')
			{
				push @missing, "sql/$name.sql" unless -f "$root/sql/$name.sql";
				push @missing, "expected/$name.out" unless -f "$root/expected/$name.out";
				push @missing, "REGRESS in the Makefile" unless $regress->{$name};
			}
			elsif ($kind eq 'spec')
			{
				push @missing, "specs/$name.spec" unless -f "$root/specs/$name.spec";
				push @missing, "expected/$name.out" unless -f "$root/expected/$name.out";
				push @missing, "ISOLATION in the Makefile" unless $isolation->{$name};
			}
			elsif ($kind eq 'TAP')
			{
				push @missing, "t/$name.pl" unless -f "$root/t/$name.pl";
			}
			elsif ($kind eq 'fuzz')
			{
				push @missing, "fuzz/$name.c" unless -f "$root/fuzz/$name.c";
			}
			else
			{
				push @out, "\"$title\": unknown kind \"$kind\" of `$name`";
				next;
			}
			push @out, "\"$title\": $kind `$name`: no " . join(', no ', @missing)
			  if @missing;
		}
		push @out, "\"$title\": \"Kept by:\" names no test" unless $n;
	}
	return @out;
}

my $page = slurp_file("$root/docs/guarantees.md");
my @bullets = split /^\* \*\*/m, (split /^## Limits/m, $page)[0];
cmp_ok(scalar(@bullets) - 1, '>=', 20, 'docs/guarantees.md has its promises');
my @p = problems($page);
is(join("\n", @p), '', 'every promise names tests that exist and run');

# the check fails where it must
my $first = "* **Idempotent enqueue.**";
ok(index($page, $first) >= 0, 'the first promise is where the doctoring expects it');
(my $no_test = $page) =~ s/(\Q$first\E.*?)\n  Kept by:[^\n]*\n/$1\n/s;
like(join("\n", problems($no_test)), qr/"Idempotent enqueue\." names no test/,
	'a promise without "Kept by:" is reported');
(my $gone = $page) =~ s/spec `enqueue_same_key`/spec `enqueue_same_key_gone`/;
like(join("\n", problems($gone)), qr/spec `enqueue_same_key_gone`: no specs\/enqueue_same_key_gone\.spec/,
	'a test file that does not exist is reported');
(my $tap = $page) =~ s/TAP `001_restart`/TAP `001_no_such`/;
like(join("\n", problems($tap)), qr/TAP `001_no_such`: no t\/001_no_such\.pl/,
	'a TAP file that does not exist is reported');
delete $regress->{enqueue};
like(join("\n", problems($page)), qr/regress `enqueue`: no REGRESS in the Makefile/,
	'a regress file that is not run is reported');
$regress->{enqueue} = 1;
(my $kind = $page) =~ s/regress `enqueue`, spec/bench `enqueue`, spec/;
like(join("\n", problems($kind)), qr/unknown kind "bench"/, 'an unknown kind is reported');

done_testing();
