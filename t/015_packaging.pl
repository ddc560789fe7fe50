
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/015_packaging.pl: the packaging metadata agrees with the extension
# (issue 15, README "Installing from a package").  No server needed.
#   - META.json (PGXN) parses, has the fields PGXN requires, and its
#     version is the control file's default_version;
#   - debian/changelog's version is that version too; debian/control is
#     debian/control.in for every version in debian/pgversions (what
#     pg_buildext updatecontrol writes); debian/rules builds with pg_buildext
#     (dh --with pgxs_loop);
#   - one install script, ntask--<default_version>.sql, which META.json
#     provides; the upgrade scripts are one path to default_version, each
#     from a version whose frozen install script the upgrade tests use
#     (test/frozen/); the Makefile installs exactly these scripts.
# The package build itself is scripts/test-deb.sh (NTASK_TEST_DEB=1).

use strict;
use warnings;

use FindBin;
use File::Temp;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::Bin/..";
# a file of the tree, whole (PostgreSQL::Test::Utils' slurp_file)
sub slurp { return slurp_file("$root/$_[0]"); }

my ($default) = slurp('ntask.control') =~ /^default_version\s*=\s*'([^']+)'/m;
ok(defined $default, "ntask.control: default_version $default");

my $meta = eval { JSON::PP->new->decode(slurp('META.json')) };
ok($meta, 'META.json parses');
my @missing = grep { !defined $meta->{$_} } qw(name abstract version maintainer license provides meta-spec);
is(join(',', @missing), '', 'META.json has name, abstract, version, maintainer, license, provides, meta-spec');
is($meta->{name}, 'ntask', 'META.json names ntask');
like($meta->{version}, qr/^\d+\.\d+\.\d+$/, 'META.json version is semantic (x.y.z)');
is($meta->{version}, $default, 'META.json version is default_version');
is($meta->{license}, 'postgresql', 'META.json: the PostgreSQL licence');
like(slurp('LICENSE'), qr/Copyright \(c\) \d{4}, The ntask authors/, 'LICENSE: the PostgreSQL licence, The ntask authors');
like(slurp('debian/copyright'), qr/^License: PostgreSQL$/m, 'debian/copyright: the PostgreSQL licence');
is($meta->{provides}{ntask}{version}, $meta->{version}, 'META.json provides ntask at that version');
ok(-f "$root/$meta->{provides}{ntask}{file}", "META.json provides.ntask.file $meta->{provides}{ntask}{file} exists");

my ($deb_version) = slurp('debian/changelog') =~ /^ntask \(([^)]+)\)/;
is($deb_version, $default, "debian/changelog: version $deb_version");
my @pgv = split /\s+/, slurp('debian/pgversions');
is(join(',', @pgv), '15', 'debian/pgversions: 15');
my $in = slurp('debian/control.in');
my ($src, $pkg) = split /\n(?=Package: )/, $in, 2;
my $want = $src . join('', map { my $p = $pkg; $p =~ s/PGVERSION/$_/g; "\n$p" } @pgv);
is(slurp('debian/control'), $want, 'debian/control is debian/control.in for each version (pg_buildext updatecontrol)');
like(slurp('debian/rules'), qr/dh \$\@ --with pgxs_loop/, 'debian/rules builds with pg_buildext (pgxs_loop)');
ok(-x "$root/debian/rules", 'debian/rules is executable');

# one install script, at default_version; upgrade scripts only to it, each
# from a version the upgrade tests can install (test/frozen)
my @scripts = map { s{.*/}{}r } glob("$root/ntask--*.sql");
my @base = grep { /^ntask--[^-]+\.sql$/ } @scripts;
is(join(' ', @base), "ntask--$default.sql", "one install script, ntask--$default.sql");
is($meta->{provides}{ntask}{file}, "ntask--$default.sql", 'META.json provides the install script');
# the upgrade scripts form one path: each starts from a version whose
# frozen install script the upgrade tests use, and following the path from
# any of them reaches default_version
my @steps = grep { /^ntask--.+--.+\.sql$/ } @scripts;
ok(@steps >= 1, 'an upgrade script: ' . join(' ', @steps));
my %next;
for my $s (@steps)
{
	my ($from, $to) = $s =~ /^ntask--(.+)--(.+)\.sql$/;
	ok(!exists $next{$from}, "$s: the only upgrade script from $from");
	$next{$from} = $to;
	ok(-f "$root/test/frozen/ntask--$from.sql", "$s starts from test/frozen/ntask--$from.sql");
}
for my $from (sort keys %next)
{
	my ($v, $n) = ($from, 0);
	$v = $next{$v} while exists $next{$v} && ++$n < 10;
	is($v, $default, "the path from $from reaches $default");
}
my ($data) = slurp('Makefile') =~ /^DATA\s*=\s*(.*)$/m;
is(join(' ', sort split ' ', $data), join(' ', sort @scripts), 'the Makefile installs exactly these scripts');

# META.json against the PGXN Meta Spec 1.0.0 (https://pgxn.org/spec/):
# its required keys, their forms, and the values the spec allows
{
	my @pgxn_licenses = qw(agpl_3 apache_1_1 apache_2_0 artistic_1 artistic_2 bsd
	  freebsd gfdl_1_2 gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1 lgpl_3_0 mit mozilla_1_0
	  mozilla_1_1 openssl perl_5 postgresql qpl_1_0 ssleay sun zlib open_source
	  restricted unrestricted unknown);
	my %lic = map { $_ => 1 } @pgxn_licenses;
	my @bad;
	push @bad, 'name' unless $meta->{name} =~ /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
	push @bad, 'abstract' unless length($meta->{abstract} // '') > 0;
	push @bad, 'maintainer' unless length(ref $meta->{maintainer} ? join('', @{ $meta->{maintainer} }) : $meta->{maintainer} // '') > 0;
	push @bad, 'license' unless $lic{ ref $meta->{license} ? '' : $meta->{license} // '' };
	push @bad, 'meta-spec' unless ($meta->{'meta-spec'}{version} // '') eq '1.0.0';
	push @bad, 'release_status' unless ($meta->{release_status} // 'stable') =~ /^(stable|testing|unstable)$/;
	for my $ext (keys %{ $meta->{provides} })
	{
		my $p = $meta->{provides}{$ext};
		push @bad, "provides.$ext" unless defined $p->{file} && ($p->{version} // '') =~ /^\d+\.\d+\.\d+$/;
	}
	for my $phase (keys %{ $meta->{prereqs} // {} })
	{
		push @bad, "prereqs.$phase" unless $phase =~ /^(configure|build|test|runtime|develop)$/;
		for my $rel (keys %{ $meta->{prereqs}{$phase} })
		{
			push @bad, "prereqs.$phase.$rel" unless $rel =~ /^(requires|recommends|suggests|conflicts)$/;
		}
	}
	is(join(',', @bad), '', 'META.json follows the PGXN Meta Spec 1.0.0');
}

# make dist: a PGXN-ready zip of HEAD, everything under ntask-<version>/
SKIP:
{
	skip 'not a git checkout', 2 unless -d "$root/.git" || -f "$root/.git";
	my $tmp = File::Temp::tempdir(CLEANUP => 1);
	my $out = `make -s -C '$root' dist CURDIR='$tmp' 2>&1`;
	my $zip = "$tmp/ntask-$default.zip";
	ok(-f $zip, "make dist writes ntask-$default.zip") or diag($out);
	my $list = `python3 -m zipfile -l '$zip' 2>&1`;
	like($list, qr{^ntask-\Q$default\E/META\.json\s}m, 'the archive has META.json at the top of ntask-<version>/');
}

done_testing();
