
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/030_reference.pl: docs/reference.md matches the catalog (issue 32).
#
# A node with ntask preloaded (so every ntask.* setting is defined) and the
# extension created; then docs/reference.md is compared with:
#   - pg_proc of the extension's members: every public function has an
#     entry ("### name" under "## Functions") whose "Signature:" names the
#     same input arguments in the same order, whose "Returns:" names the
#     same result columns (or the same type), whose "Right:" names every
#     role that may execute it ("superuser" when none may), and whose
#     "SQLSTATEs:" codes are all in docs/errors.md; every internal function
#     of schema ntask is listed under "## Internal functions"; and no entry
#     names a function that does not exist;
#   - pg_attribute of every view of schema ntask: "### ntask.view" under
#     "## Views" with one table row per column, in the view's order;
#   - pg_class: every table of schema ntask is listed under "## Tables";
#   - pg_settings WHERE name LIKE 'ntask.%': "### ntask.setting" under
#     "## Settings" with the same context, default (boot_val) and unit.
# Then it shows that the comparison fails: a function added to the
# extension without an entry, an entry whose function is gone, a view
# column, a setting and an internal function without an entry, and a
# documented argument list that differs from the catalog, are each
# reported.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::Bin/..";
# a file of the tree, whole (PostgreSQL::Test::Utils' slurp_file)
sub slurp { return slurp_file("$root/$_[0]"); }

my $node = PostgreSQL::Test::Cluster->new('reference');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ntask'\nntask.worker = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ntask');

my $ext = q{(SELECT oid FROM pg_extension WHERE extname = 'ntask')};

# the catalog, read once per check (the failure checks change it)
sub catalog
{
	my %c;
	# functions: name, schema, input argument names, result, roles
	my $rows = $node->safe_psql('postgres', qq{
		SELECT n.nspname, p.proname,
			   coalesce((SELECT string_agg(coalesce(a.name, '?'), ',' ORDER BY a.ord)
						 FROM unnest(p.proargnames, coalesce(p.proargmodes, array_fill('i'::"char", array[p.pronargs::integer])))
							  WITH ORDINALITY a(name, mode, ord)
						 WHERE a.mode IN ('i', 'b', 'v')), ''),
			   coalesce((SELECT string_agg(a.name, ',' ORDER BY a.ord)
						 FROM unnest(p.proargnames, p.proargmodes) WITH ORDINALITY a(name, mode, ord)
						 WHERE a.mode IN ('o', 'b', 't')), ''),
			   pg_get_function_result(p.oid),
			   coalesce((SELECT string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, ',')
						 FROM aclexplode(p.proacl) a WHERE a.grantee <> p.proowner), '')
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		 AND d.deptype = 'e' AND d.refobjid = $ext
		ORDER BY 1, 2, 3});
	for my $r (split /\n/, $rows)
	{
		my ($nsp, $name, $args, $outs, $result, $roles) = split /\|/, $r, -1;
		if ($nsp eq 'ntask')
		{
			$c{internal}{"ntask.$name"} = 1;
			next;
		}
		push @{ $c{func}{$name} }, { args => $args, outs => $outs, result => $result, roles => $roles };
	}
	$rows = $node->safe_psql('postgres', q{
		SELECT c.relname, c.relkind, coalesce(string_agg(a.attname, ',' ORDER BY a.attnum), '')
		FROM pg_class c
		LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE c.relnamespace = 'ntask'::regnamespace AND c.relkind IN ('r', 'v', 'p')
		GROUP BY c.relname, c.relkind ORDER BY 1});
	for my $r (split /\n/, $rows)
	{
		my ($name, $kind, $cols) = split /\|/, $r, -1;
		if ($kind eq 'v') { $c{view}{"ntask.$name"} = $cols }
		else { $c{table}{"ntask.$name"} = 1 }
	}
	$rows = $node->safe_psql('postgres', q{
		SELECT name, context, coalesce(boot_val, ''), coalesce(unit, '')
		FROM pg_settings WHERE name LIKE 'ntask.%' ORDER BY 1});
	for my $r (split /\n/, $rows)
	{
		my ($name, $context, $boot, $unit) = split /\|/, $r, -1;
		$c{setting}{$name} = { context => $context, boot => $boot, unit => $unit };
	}
	return \%c;
}

# docs/reference.md, parsed: the entries of each "## " section
sub parse_doc
{
	my ($text) = @_;
	my (%d, $section, $entry);
	for my $line (split /\n/, $text)
	{
		if ($line =~ /^## (.+?)\s*$/)
		{
			$section = $1;
			$entry = undef;
			next;
		}
		next unless defined $section;
		if ($line =~ /^### `?([\w.]+)`?\s*$/)
		{
			$entry = $1;
			$d{$section}{$entry} //= { lines => [] };
			next;
		}
		if ($section eq 'Internal functions' && $line =~ /^[-*] `(ntask\.\w+)`/)
		{
			$d{$section}{$1} = { lines => [] };
			next;
		}
		if ($section eq 'Tables' && $line =~ /^[-*] `(ntask\.\w+)`/)
		{
			$d{$section}{$1} = { lines => [] };
			next;
		}
		push @{ $d{$section}{$entry}{lines} }, $line if defined $entry;
	}
	return \%d;
}

# the top-level comma-separated items of "(...)" after a name
sub items
{
	my ($s) = @_;
	my ($depth, $quoted, $cur, @out) = (0, 0, '');
	for my $ch (split //, $s)
	{
		if ($ch eq "'") { $quoted = !$quoted }
		elsif ($quoted) { }
		elsif ($ch eq '(' || $ch eq '[') { $depth++ }
		elsif ($ch eq ')' || $ch eq ']') { $depth-- }
		if ($ch eq ',' && $depth == 0 && !$quoted) { push @out, $cur; $cur = ''; next }
		$cur .= $ch;
	}
	push @out, $cur if $cur =~ /\S/;
	return map { s/^\s+//r } @out;
}

my $errors = slurp('docs/errors.md');
my %known_state = map { $_ => 1 } $errors =~ /^\| `([0-9A-Z]{5})` \|/mg;

# every difference between the catalog and the document
sub problems
{
	my ($c, $text) = @_;
	my $d = parse_doc($text);
	my @p;

	my $fn = $d->{Functions} // {};
	for my $name (sort keys %{ $c->{func} })
	{
		my $e = $fn->{$name};
		if (!$e)
		{
			push @p, "function $name has no entry";
			next;
		}
		my $body = join "\n", @{ $e->{lines} };
		my @sig = $body =~ /^Signature: `\Q$name\E\((.*)\)`\s*$/mg;
		my @ret = $body =~ /^Returns: `(.*)`\s*$/mg;
		my ($right) = $body =~ /^Right: (.*)$/m;
		my ($states) = $body =~ /^SQLSTATEs: (.*)$/m;
		for my $i (0 .. $#{ $c->{func}{$name} })
		{
			my $f = $c->{func}{$name}[$i];
			my $s = $sig[$i];
			if (!defined $s)
			{
				push @p, "function $name: no Signature line for its overload " . ($i + 1);
				next;
			}
			# input arguments (a mode word IN, INOUT or VARIADIC is skipped),
			# and result columns: OUT items here or TABLE(...) in Returns
			my (@in, @out);
			for my $item (items($s))
			{
				if ($item =~ /^OUT\s+(\w+)/) { push @out, $1; next }
				my $inout = $item =~ /^INOUT\s/;
				$item =~ s/^(?:IN|INOUT|VARIADIC)\s+//;
				push @in, (split /\s+/, $item)[0];
				push @out, $in[-1] if $inout;
			}
			my $doc_args = join ',', @in;
			push @p, "function $name: documented arguments ($doc_args) are not the catalog's ($f->{args})"
			  if $doc_args ne $f->{args};
			my $r = $ret[$i] // '';
			if ($f->{outs} ne '')
			{
				if (!@out && $r =~ /TABLE\((.*)\)/)
				{
					@out = map { (split /\s+/, $_)[0] } items($1);
				}
				my $doc_cols = join ',', @out;
				push @p, "function $name: documented result columns ($doc_cols) are not the catalog's ($f->{outs})"
				  if $doc_cols ne $f->{outs};
			}
			push @p, "function $name: documented result ($r) is not the catalog's ($f->{result})"
			  if $r ne $f->{result};
			if (!defined $right)
			{
				push @p, "function $name: no Right line";
			}
			else
			{
				my @roles = $f->{roles} eq '' ? ('superuser') : split /,/, $f->{roles};
				for my $role (@roles)
				{
					push @p, "function $name: Right line does not name $role"
					  unless $right =~ /\b\Q$role\E\b/;
				}
			}
		}
		push @p, "function $name: " . scalar(@sig) . ' Signature lines for '
		  . scalar(@{ $c->{func}{$name} }) . ' overloads'
		  if @sig > @{ $c->{func}{$name} };
		if (!defined $states)
		{
			push @p, "function $name: no SQLSTATEs line";
		}
		else
		{
			for my $code ($states =~ /`([0-9A-Z]{5})`/g)
			{
				push @p, "function $name: SQLSTATE $code is not in docs/errors.md"
				  unless $known_state{$code};
			}
		}
	}
	push @p, map { "entry $_ names no function of the extension" }
	  grep { !$c->{func}{$_} } sort keys %$fn;

	my $int = $d->{'Internal functions'} // {};
	push @p, map { "internal function $_ is not listed" } grep { !$int->{$_} } sort keys %{ $c->{internal} };
	push @p, map { "internal entry $_ names no function" } grep { !$c->{internal}{$_} } sort keys %$int;

	my $views = $d->{Views} // {};
	for my $v (sort keys %{ $c->{view} })
	{
		my $e = $views->{$v};
		if (!$e)
		{
			push @p, "view $v has no entry";
			next;
		}
		my $cols = join ',', map { /^\| `(\w+)` \|/ ? $1 : () } @{ $e->{lines} };
		push @p, "view $v: documented columns ($cols) are not the catalog's ($c->{view}{$v})"
		  if $cols ne $c->{view}{$v};
	}
	push @p, map { "view entry $_ names no view" } grep { !$c->{view}{$_} } sort keys %$views;

	my $tables = $d->{Tables} // {};
	push @p, map { "table $_ is not listed" } grep { !$tables->{$_} } sort keys %{ $c->{table} };
	push @p, map { "table entry $_ names no table" } grep { !$c->{table}{$_} } sort keys %$tables;

	my $set = $d->{Settings} // {};
	for my $s (sort keys %{ $c->{setting} })
	{
		my $e = $set->{$s};
		if (!$e)
		{
			push @p, "setting $s has no entry";
			next;
		}
		my $body = join "\n", @{ $e->{lines} };
		my $g = $c->{setting}{$s};
		my ($context) = $body =~ /Context: `([^`]*)`/;
		my ($boot) = $body =~ /Default: (?:`([^`]*)`|\(empty\))/ ? ($1 // '') : (undef);
		my ($unit) = $body =~ /Unit: `([^`]*)`/;
		push @p, "setting $s: context " . ($context // 'none') . ", the catalog's is $g->{context}"
		  if ($context // '') ne $g->{context};
		push @p, "setting $s: default " . ($boot // 'none') . ", the catalog's is '$g->{boot}'"
		  if !defined $boot || $boot ne $g->{boot};
		push @p, "setting $s: unit " . ($unit // 'none') . ", the catalog's is '$g->{unit}'"
		  if ($unit // '') ne $g->{unit};
	}
	push @p, map { "setting entry $_ names no setting" } grep { !$c->{setting}{$_} } sort keys %$set;
	return @p;
}

my $doc = slurp('docs/reference.md');
my $cat = catalog();
ok(scalar(keys %{ $cat->{func} }) > 30 && scalar(keys %{ $cat->{setting} }) > 15
	  && scalar(keys %{ $cat->{view} }) > 5,
	'the catalog read has the extension\'s functions, views and settings');
my @p = problems($cat, $doc);
is(join("\n", @p), '', 'docs/reference.md has an entry for every function, view column, table and setting, and nothing else');

# ---------------------------------------------------------------------
# The comparison fails when the two drift apart
# ---------------------------------------------------------------------

# a function added to the extension without an entry
$node->safe_psql('postgres', q{
	CREATE FUNCTION ntask_reference_probe(x integer) RETURNS integer LANGUAGE sql AS 'SELECT x';
	ALTER EXTENSION ntask ADD FUNCTION ntask_reference_probe(integer);
	CREATE FUNCTION ntask.reference_probe_internal() RETURNS void LANGUAGE sql AS '';
	ALTER EXTENSION ntask ADD FUNCTION ntask.reference_probe_internal();
	CREATE VIEW ntask.reference_probe_view AS SELECT 1 AS one;
	ALTER EXTENSION ntask ADD VIEW ntask.reference_probe_view;
});
@p = problems(catalog(), $doc);
ok((grep { $_ eq 'function ntask_reference_probe has no entry' } @p),
	'detected: a function added to the extension without an entry');
ok((grep { $_ eq 'internal function ntask.reference_probe_internal is not listed' } @p),
	'detected: an internal function without an entry');
ok((grep { $_ eq 'view ntask.reference_probe_view has no entry' } @p),
	'detected: a view without an entry');
is(scalar(@p), 3, 'nothing else is reported') or diag(join "\n", @p);

# with an entry it passes, and an argument the entry does not name fails
my $probe_entry = "\n## Functions\n\n### ntask_reference_probe\n\n"
  . "Signature: `ntask_reference_probe(x integer)`\nReturns: `integer`\n"
  . "Right: superuser\nSQLSTATEs: `22023`\n";
@p = grep { !/reference_probe_(?:internal|view)/ } problems(catalog(), $doc . $probe_entry);
is(join("\n", @p), '', 'an entry with the right signature, result and right passes');
my $bad_entry = $probe_entry =~ s/\(x integer\)/(y integer, z text)/r =~ s/`22023`/`XX999`/r;
@p = grep { !/reference_probe_(?:internal|view)/ } problems(catalog(), $doc . $bad_entry);
is(join("\n", @p),
	"function ntask_reference_probe: documented arguments (y,z) are not the catalog's (x)\n"
	  . "function ntask_reference_probe: SQLSTATE XX999 is not in docs/errors.md",
	'detected: an argument list that differs from the catalog, an SQLSTATE errors.md does not list');

# an entry whose function is gone
$node->safe_psql('postgres', q{
	ALTER EXTENSION ntask DROP FUNCTION ntask_reference_probe(integer);
	DROP FUNCTION ntask_reference_probe(integer);
	ALTER EXTENSION ntask DROP FUNCTION ntask.reference_probe_internal();
	DROP FUNCTION ntask.reference_probe_internal();
	ALTER EXTENSION ntask DROP VIEW ntask.reference_probe_view;
	DROP VIEW ntask.reference_probe_view;
});
@p = problems(catalog(), $doc . $probe_entry);
is(join("\n", @p), 'entry ntask_reference_probe names no function of the extension',
	'detected: an entry whose function is not in the extension');

# a view column, a setting, a table and a right without an entry
(my $less = $doc) =~ s/^\| `oldest_ready_age` \|.*\n//m;
$less =~ s/^### ntask\.naptime\n//m;
$less =~ s/^[-*] `ntask\.audit`.*\n//m;
@p = problems(catalog(), $less);
ok((grep { /^view ntask\.queue_stats: documented columns/ } @p), 'detected: a view column without an entry');
ok((grep { $_ eq 'setting ntask.naptime has no entry' } @p), 'detected: a setting without an entry');
ok((grep { $_ eq 'table ntask.audit is not listed' } @p), 'detected: a table without an entry');
(my $wrong = $doc) =~ s/^(### ntask\.naptime\n(?:.*\n)*?.*?)Context: `sighup`/$1Context: `user`/m;
@p = problems(catalog(), $wrong);
is(join("\n", @p), "setting ntask.naptime: context user, the catalog's is sighup",
	'detected: a setting whose documented context differs from the catalog');

is(join("\n", problems(catalog(), $doc)), '', 'after the probes are gone the document matches again');

$node->stop;
done_testing();
