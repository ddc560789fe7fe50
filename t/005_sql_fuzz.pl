# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/005_sql_fuzz.pl: hostile input at the SQL level.
#
# Every function of the extension (found in pg_proc through pg_depend, so
# functions added later are covered without touching this file) is called
# with hostile arguments chosen by parameter type: NULL, '', 1 MB strings,
# strings at and past every length limit, zero/negative/min/max integers,
# unknown ids, odd and infinite intervals and timestamps, invalid, deep and
# huge jsonb, guards of the wrong kind or OID 0, wrong types (untyped text
# literals, values of another type), then random mixes from a seeded PRNG.
#
# Phase 1 calls each function once per hostile value of each parameter,
# the required arguments sane and the optional ones at their defaults (so
# the value reaches the function's checks);
# phase 2 calls random functions with random arities and arguments in
# batches until enough calls were made or the time budget is spent.
#
# Each call is its own statement in a psql script (ON_ERROR_STOP off,
# statement_timeout 10 s) followed by "\echo @@ <n> :SQLSTATE".  Asserted:
#   - every call reported back (psql never lost its connection);
#   - every SQLSTATE is 00000, class NT or a standard PostgreSQL code
#     (utils/errcodes.h), and never XX000/XX001/XX002 (internal errors),
#     57014 (a call ran into statement_timeout: nothing may block) or a
#     connection/shutdown code;
#   - the server is alive at the end and its log has no "terminated by
#     signal", "server process ... was terminated", PANIC or TRAP.
# Counts (calls, calls per function, errors per SQLSTATE) are printed with
# note().  NTASK_FUZZ_SEED and NTASK_FUZZ_SECONDS override the seed
# (default 20261129) and the time budget of phase 2 (default 25 s, at
# most 12000 calls); NTASK_FUZZ_DUMP=<file> writes every call with its
# SQLSTATE to a file.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib $FindBin::Bin;
use NtaskTok;

my $seed = $ENV{NTASK_FUZZ_SEED} || 20261129;
my $budget = $ENV{NTASK_FUZZ_SECONDS} || 25;
my $max_random_calls = 12000;
my $batch_size = 250;

my $node = PostgreSQL::Test::Cluster->new('sql_fuzz');
$node->init;
# log_min_messages = log: crashes, PANIC and FATAL are logged, the
# thousands of expected ERRORs (some quoting 1 MB values) are not
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ntask'
ntask.backoff_jitter = off
log_min_messages = log
log_min_error_statement = panic
log_statement = none
});
$node->start;

# the background worker, if this build has one, must not race the calls
my ($rc, $out, $err) = $node->psql('postgres', 'SHOW ntask.worker');
if ($rc == 0)
{
	$node->append_conf('postgresql.conf', "ntask.worker = off\n");
	$node->restart;
	note "ntask.worker exists; set to off";
}
else
{
	note "no ntask.worker GUC in this build";
}

# ---------------------------------------------------------------------
# setup: known queue, tasks in several states, guards, a fence, a schedule
# ---------------------------------------------------------------------
$node->safe_psql('postgres', q{
SET client_min_messages = warning;
CREATE EXTENSION ntask;
CREATE FUNCTION fz_guard_ok(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'proceed' $$;
CREATE FUNCTION fz_guard_bad(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'maybe' $$;
CREATE FUNCTION fz_guard_null(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT NULL::text $$;
CREATE FUNCTION fz_guard_div(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT (1 / 0)::text $$;
CREATE FUNCTION fz_guard_big(text, jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'skip: ' || repeat('r', 1048576) $$;
CREATE FUNCTION fz_guard_int(text, jsonb) RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;
});
# tok(task, n): the task's n-th token (tokens come from one sequence per
# node, so a task's first token is not 1; t/NtaskTok.pm)
NtaskTok::create($node, 'postgres');
$node->safe_psql('postgres', q{
SET client_min_messages = warning;
SELECT count(*) FROM ntask_queue_set('q', max_attempts => 3, lease => '1 hour');
SELECT count(*) FROM ntask_queue_set('q2');
SELECT count(*) FROM generate_series(1, 30) g, ntask_enqueue('q', 'k' || g, jsonb_build_object('n', g));
SELECT count(*) FROM generate_series(1, 10) g, ntask_enqueue('q2', 'k' || g, '{}');
SELECT count(*) FROM ntask_claim('q', 'w', 10);
SELECT count(*) FROM ntask_claim('q2', 'w', 5);
SELECT ntask_invoked(1, tok(1, 1));
SELECT count(*) FROM ntask_transition(2, tok(2, 1), 'repair_required', 'permanent', '{"http": 400}');
SELECT count(*) FROM ntask_transition(3, tok(3, 1), 'retry_wait', 'unknown');
SELECT count(*) FROM ntask_transition(4, tok(4, 1), 'succeeded', outcome => 'ok');
SELECT ntask_cancel(5, 'a', 'r');
SELECT ntask_fence('f', 3, '{"v": 3}');
SELECT ntask_receipt(6, tok(6, 1), '{"r": 1}');
SELECT count(*) FROM ntask_schedule('s', '*/5 * * * *', 'q');
SELECT count(*) FROM ntask_schedule('s2', '0 2 * * *', 'q2', timezone => 'Europe/Berlin');
});

# ---------------------------------------------------------------------
# the functions of the extension, with their IN parameters
# ---------------------------------------------------------------------
my $fn_rows = $node->safe_psql('postgres', q{
SELECT p.oid,
	   quote_ident(n.nspname) || '.' || quote_ident(p.proname),
	   p.prokind, p.pronargs, p.pronargdefaults,
	   coalesce((SELECT string_agg(format_type(t, NULL), ';' ORDER BY i)
				 FROM unnest(p.proargtypes) WITH ORDINALITY u(t, i)), ''),
	   coalesce((SELECT string_agg(coalesce(nm, ''), ';' ORDER BY i)
				 FROM unnest(p.proargnames, p.proargmodes::text[])
					  WITH ORDINALITY u(nm, md, i)
				 WHERE coalesce(md, 'i') IN ('i', 'b', 'v')), '')
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
				AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'ntask'
JOIN pg_namespace n ON n.oid = p.pronamespace
ORDER BY p.proname, p.oid});

my @funcs;
for my $row (split /\n/, $fn_rows)
{
	my ($oid, $name, $kind, $nargs, $ndefaults, $types, $names) =
	  split /\|/, $row, -1;
	my @types = $nargs > 0 ? split(/;/, $types, -1) : ();
	my @names = split(/;/, $names, -1);
	push @funcs, {
		name => $name,
		kind => $kind,
		nargs => $nargs,
		nreq => $nargs - $ndefaults,
		types => \@types,
		names => [ map { $names[$_] // '' } 0 .. $nargs - 1 ],
	};
}
ok(scalar(@funcs) >= 15, 'found the extension\'s functions in pg_proc');
note "functions: " . join(', ', map { $_->{name} } @funcs);

# ---------------------------------------------------------------------
# hostile and sane values (SQL expressions) per type and parameter name
# ---------------------------------------------------------------------
sub lit
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

my $MB = 1048576;
my %hostile = (
	'text' => [
		'NULL::text', q{''}, q{' '}, q{E'\t'},
		"repeat('x', $MB)", "repeat('\xc3\xa9', 100)", "repeat('\xc3\xa9', 101)",
		(map { "repeat('a', $_)" } 63, 64, 200, 201, 512, 513, 2000, 2001, 8193),
		q{E'\t\n\r'}, lit(q{'";-- DROP TABLE ntask.task; }), q{'%s%n%x%p%999999999d'},
		lit('\\'), q{'q'}, q{'q2'}, q{'nope'}, q{'w'}, q{'k1'}, q{'k-new'}, q{'f'},
		q{'s'}, q{'s2'}, q{'* * * * *'}, q{'@daily'}, q{'@reboot'}, q{'@'},
		q{'0 0 30 2 *'}, q{'61 * * * *'}, q{'*/0 * * * *'}, q{'0 0 * * 1#2'},
		"repeat('* ', 100)", "repeat('1,', 99) || '1 * * * *'",
		q{'UTC'}, q{'Europe/Berlin'}, q{'Mars/Olympus_Mons'}, q{'posix/../../etc/passwd'},
		q{'+99:99'}, q{'succeeded'}, q{'retry_wait'}, q{'repair_required'},
		q{'canceled'}, q{'skipped'}, q{'leased'}, q{'ready'}, q{'transient'},
		q{'permanent'}, q{'unknown'}, q{'skip'}, q{'allow'}, q{'buffer_one'},
		q{'proceed'}, q{'cancel: x'}, q{U&'\+01F600'}, q{'NaN'}, q{'-1'},
		q{'9223372036854775808'}, q{'null'}, q{'{}'},
		q{'https://user:pw@example.com/'}, q{'bad name!'}, q{'a:b'},
		# wrong types
		'1::integer', 'true', q{'{}'::jsonb}, 'now()',
	],
	'integer' => [
		'NULL::integer', '0', '1', '-1', '2', '7', '1000', '1001',
		'2147483647', '(-2147483647 - 1)', q{'2147483648'}, q{'abc'}, q{'1.5'},
		q{''}, q{'x'::text}, '1.5::numeric', '9223372036854775807',
	],
	'bigint' => [
		'NULL::bigint', '0', '1', '-1', '2', '3', '5', '6', '10', '30', '41',
		'1000000', '9223372036854775807', '(-9223372036854775807 - 1)',
		q{'9223372036854775808'}, q{'abc'}, q{'1e3'}, q{''}, q{'x'::text},
		'(SELECT max(task_id) FROM ntask.task)',
		'(SELECT max(task_id) + 1 FROM ntask.task)',
	],
	'interval' => [
		'NULL::interval', q{'0'}, q{'-1 second'}, q{'1 microsecond'}, q{'1 second'},
		q{'30 seconds'}, q{'1 hour'}, q{'1 day'}, q{'10 years'},
		q{'10 years 1 second'}, q{'-10 years'}, q{'1 mon -31 days'},
		q{'178000000 years'}, q{'-178000000 years'}, q{'2147483647 days'},
		q{'-2147483648 days'}, q{'2562047788 hours'}, q{'infinity'},
		q{'P1Y2M3DT4H5M6S'}, q{'abc'}, q{''}, '1::integer',
	],
	'timestamp with time zone' => [
		'NULL::timestamptz', q{'infinity'}, q{'-infinity'}, q{'epoch'}, 'now()',
		q{now() + '1 hour'}, q{now() - '1 day'}, q{'2026-01-01 00:00+00'},
		q{'2026-01-01 00:05+00'}, q{'294276-12-31 23:59:59.999999+00'},
		q{'4714-11-24 00:00:00+00 BC'}, q{'294277-01-01 00:00:00+00'},
		q{'2026-02-30'}, q{'allballs'}, q{'abc'}, q{''}, '1::integer',
	],
	'jsonb' => [
		'NULL::jsonb', q{'{}'}, q{'[]'}, q{'null'}, q{'0'}, q{'"s"'}, q{'true'},
		q{'{"a": 1}'}, q{'{"n": 1}'}, q{'{"reason": "x"}'}, q{'{"http": 503}'},
		q{'[1, 2, 3]'}, q{'not json'}, q['{"a":'], q{'"\u0000"'},
		q{'{"a": 1e1000000}'}, q{''},
		"(SELECT jsonb_object_agg('k' || g, g) FROM generate_series(1, 100000) g)",
		"to_jsonb(repeat('x', $MB))",
		"jsonb_build_object('reason', repeat('r', $MB))",
		"jsonb_build_object('reason', repeat('\xc3\xa9', 3000))",
		"(repeat('[', 3000) || repeat(']', 3000))::jsonb",
		"(repeat('{\"a\":', 3000) || '1' || repeat('}', 3000))::jsonb",
		"(repeat('[', 200000) || repeat(']', 200000))::jsonb",
		q{'x'::text}, '1::integer',
	],
	'boolean' => [
		'NULL::boolean', 'true', 'false', q{'yes'}, q{'maybe'}, q{''}, '1::integer',
	],
	'regprocedure' => [
		'NULL::regprocedure', q{'fz_guard_ok(text,jsonb)'},
		q{'fz_guard_bad(text,jsonb)'}, q{'fz_guard_null(text,jsonb)'},
		q{'fz_guard_div(text,jsonb)'}, q{'fz_guard_big(text,jsonb)'},
		q{'fz_guard_int(text,jsonb)'}, q{'now()'}, q{'ntask_digest(jsonb,integer)'},
		q{'nope(text,jsonb)'}, q{'-'}, '0::oid::regprocedure',
		'4294967295::oid::regprocedure', '1::oid::regprocedure', q{'abc'}, q{''},
	],
	'smallint' => [
		'NULL::smallint', '0', '-1', '1', '32767', '(-32767 - 1)', q{'32768'}, q{'abc'},
	],
	'numeric' => [
		'NULL::numeric', '0', '-1', q{'NaN'}, q{'Infinity'}, q{'1e131071'}, q{'abc'},
	],
	'double precision' => [
		'NULL::float8', '0', '-1', q{'NaN'}, q{'Infinity'}, q{'-Infinity'}, q{'1e308'}, q{'abc'},
	],
	'bytea' => [
		'NULL::bytea', q{'\x'}, "decode(repeat('ff', $MB), 'hex')", q{'abc'},
	],
);

my %sane_by_type;

# a type this file does not know: NULL, bad input, and for a row type a
# real row (an array type gets hostile arrays)
sub hostile_for
{
	my ($type) = @_;
	return $hostile{$type} if $hostile{$type};
	my @v = ("NULL::$type", q{''}, q{'abc'});
	if ($type =~ /\[\]$/)
	{
		push @v, q{'{}'}, q{'{NULL}'}, q{'{0,-1,9223372036854775807}'},
		  "(SELECT array_agg(g) FROM generate_series(1, 100000) g)::$type",
		  "(SELECT array_agg(g) FROM generate_series(1, 10000) g)::$type",
		  "'{{1,2},{3,4}}'::$type", "'{7,7}'::$type", "'{7,NULL,8}'::$type",
		  "'[0:1]={7,8}'::$type";
	}
	my $isrow = $node->safe_psql('postgres',
		"SELECT typrelid <> 0 FROM pg_type WHERE oid = " . lit($type) . "::regtype");
	if ($isrow eq 't')
	{
		push @v, "(SELECT x FROM $type x LIMIT 1)";
		$sane_by_type{$type} = "(SELECT x FROM $type x LIMIT 1)";
	}
	$hostile{$type} = \@v;
	return \@v;
}

%sane_by_type = (
	'text' => q{'x'},
	'integer' => '1',
	'bigint' => '1',
	'smallint' => '1',
	'interval' => q{'1 minute'},
	'timestamp with time zone' => q{'2026-01-01 00:00+00'},
	'jsonb' => q{'{}'},
	'boolean' => 'true',
	'bigint[]' => 'ARRAY[7]::bigint[]',
	'text[]' => q{ARRAY['k-new']},
	'jsonb[]' => q{ARRAY['{}']::jsonb[]},
);
my %sane_by_name = (
	# tokens: the tasks' first tokens (tokens come from one sequence)
	task_ids => 'ARRAY[7, 8]::bigint[]', tokens => 'ARRAY[tok(7, 1), tok(8, 1)]::bigint[]',
	task_keys => q{ARRAY['k-new', 'k-new2']}, payloads => q{ARRAY['{}', '{"n": 2}']::jsonb[]},
	finish_task_id => '9', finish_token => 'tok(9, 1)',
	queue => q{'q'}, worker => q{'w'}, task_key => q{'k-new'},
	task_id => '7', token => 'tok(7, 1)', to_state => q{'succeeded'},
	actor => q{'a'}, reason => q{'r'}, owner => q{'o'}, next_action => q{'n'},
	fence_key => q{'f'}, version => '1', expr => q{'* * * * *'},
	cron => q{'* * * * *'}, timezone => q{'UTC'}, name => q{'s'},
	overlap => q{'skip'}, max_tasks => '1', max_attempts => '3',
);

sub sane
{
	my ($f, $i) = @_;
	my $type = $f->{types}[$i];
	my $name = $f->{names}[$i];
	# a value by parameter name where the type is one those values fit
	return $sane_by_name{$name}
	  if defined $sane_by_name{$name} && $type =~ /^(text|bigint|integer|jsonb)(\[\])?$/;
	return $sane_by_type{$type} // "NULL::$type";
}

sub call_sql
{
	my ($f, @args) = @_;
	my $call = "$f->{name}(" . join(', ', @args) . ")";
	return $f->{kind} eq 'p' ? "CALL $call;" : "SELECT * FROM $call;";
}

# seeded xorshift32, the same sequence on every platform
my $rng = ($seed & 0xFFFFFFFF) || 1;
sub rnd
{
	my ($n) = @_;
	$rng ^= ($rng << 13) & 0xFFFFFFFF;
	$rng ^= $rng >> 17;
	$rng ^= ($rng << 5) & 0xFFFFFFFF;
	return $rng % $n;
}

my @junk_pieces = ('*', '/', '-', ',', ' ', '@', '0', '7', '59', '60', 'mon',
	'jan', "'", '"', '\\', ':', '{', '}', '[', ']', 'null', '%s', "\xc3\xa9",
	'infinity', '1e9', 'q', 'skip', 'reason');
sub junk
{
	my $n = rnd(12);
	return lit(join('', map { $junk_pieces[ rnd(scalar @junk_pieces) ] } 0 .. $n));
}

# ---------------------------------------------------------------------
# running calls: one psql session per batch, one statement per call
# ---------------------------------------------------------------------
my %standard;
{
	my $inc = $node->config_data('--includedir-server');
	my $h = "$inc/utils/errcodes.h";
	open my $fh, '<', $h or die "cannot read $h: $!";
	while (<$fh>)
	{
		$standard{"$1$2$3$4$5"} = 1
		  if /MAKE_SQLSTATE\('(.)','(.)','(.)','(.)','(.)'\)/;
	}
	close $fh;
	ok(scalar(keys %standard) > 200, "read the standard SQLSTATEs from $h");
}

sub sqlstate_ok
{
	my ($s) = @_;
	return 0 if $s =~ /^XX/;       # internal_error, data_corrupted, index_corrupted
	return 0 if $s eq '57014';     # query_canceled: a call hit statement_timeout
	return 0 if $s =~ /^08/;       # connection exceptions
	return 0 if $s =~ /^57P/;      # shutdown, crash shutdown, cannot connect now
	return 1 if $s =~ /^NT[0-9A-Z]{3}$/;
	return $standard{$s} ? 1 : 0;
}

my (@calls, %by_state, %by_func, @bad);
my $start = time();

sub run_batch
{
	my ($batch) = @_;    # [ [func, sql], ... ]
	my $first = scalar @calls;
	# a waiting claim (ntask_claim wait => ...) with nothing due waits up to
	# ntask.max_wait: cut to 20 ms, so hostile waits show their errors and
	# valid ones return, without running into statement_timeout
	my $script = "SET statement_timeout = '10s';\nSET ntask.max_wait = '20ms';\n"
	  . "SET client_min_messages = warning;\n"
	  . "\\set VERBOSITY verbose\n\\o /dev/null\n";
	for my $i (0 .. $#$batch)
	{
		my $n = $first + $i;
		push @calls, $batch->[$i];
		$script .= "$batch->[$i][1]\n\\echo \@\@ $n :SQLSTATE\n";
	}
	my ($stdout, $stderr) = ('', '');
	$node->psql('postgres', $script,
		stdout => \$stdout, stderr => \$stderr, on_error_stop => 0,
		timeout => 600);
	my %seen;
	for my $line (split /\n/, $stdout)
	{
		next unless $line =~ /^\@\@ (\d+) (\S+)$/;
		my ($n, $state) = ($1, $2);
		$seen{$n} = 1;
		$by_state{$state}++;
		$by_func{ $calls[$n][0] }{$state eq '00000' ? 'ok' : 'error'}++;
		push @bad, [ $n, $state ] unless sqlstate_ok($state) || $state eq '00000';
		$calls[$n][2] = $state;
	}
	my @missing = grep { !$seen{$_} } $first .. $#calls;
	if (@missing)
	{
		my $m = $missing[0];
		diag "no result for " . scalar(@missing) . " calls, first: "
		  . substr($calls[$m][1], 0, 300);
		diag "psql stderr (tail): " . substr($stderr, -2000);
		push @bad, map { [ $_, 'missing' ] } @missing;
	}
	# the messages of bad codes, for the diagnosis
	for my $b (@bad)
	{
		next if $b->[1] eq 'missing' || defined $b->[2];
		my $code = $b->[1];
		($b->[2]) = $stderr =~ /^(ERROR:  \Q$code\E:.{0,300})/m;
		$b->[2] //= '';
	}
}

hostile_for($_) for map { @{ $_->{types} } } @funcs;

# phase 1: each hostile value of each parameter; the required ones sane,
# the optional ones at their defaults (a hostile optional one by name)
my @batch;
for my $f (@funcs)
{
	push @batch, [ $f->{name}, call_sql($f, map { sane($f, $_) } 0 .. $f->{nreq} - 1) ];
	for my $i (0 .. $f->{nargs} - 1)
	{
		for my $v (@{ hostile_for($f->{types}[$i]) })
		{
			my @args;
			if ($i < $f->{nreq} || $f->{names}[$i] eq '')
			{
				@args = map { $_ == $i ? $v : sane($f, $_) }
				  0 .. ($i < $f->{nreq} ? $f->{nreq} - 1 : $i);
			}
			else
			{
				# an optional parameter by name, the others at their defaults
				@args = ((map { sane($f, $_) } 0 .. $f->{nreq} - 1),
					qq{"$f->{names}[$i]" => $v});
			}
			push @batch, [ $f->{name}, call_sql($f, @args) ];
		}
	}
	# every parameter given, sane
	push @batch, [ $f->{name}, call_sql($f, map { sane($f, $_) } 0 .. $f->{nargs} - 1) ];
	# all NULL, all empty
	push @batch, [ $f->{name}, call_sql($f, map { "NULL::$f->{types}[$_]" } 0 .. $f->{nargs} - 1) ];
	push @batch, [ $f->{name}, call_sql($f, map { q{''} } 0 .. $f->{nargs} - 1) ] if $f->{nargs};
}
my $phase1 = scalar @batch;
while (@batch)
{
	run_batch([ splice(@batch, 0, $batch_size) ]);
}
my $phase1_secs = time() - $start;
note sprintf("phase 1: %d calls in %.1f s", $phase1, $phase1_secs);

# phase 2: random functions, arities and arguments
my $random = 0;
my $t2 = time();
while ($random < $max_random_calls && time() - $t2 < $budget)
{
	my @b;
	for (1 .. $batch_size)
	{
		my $f = $funcs[ rnd(scalar @funcs) ];
		my $n = $f->{nreq} + rnd($f->{nargs} - $f->{nreq} + 1);
		my @args;
		for my $i (0 .. $n - 1)
		{
			my $r = rnd(100);
			my $h = hostile_for($f->{types}[$i]);
			push @args,
				$r < 55 ? $h->[ rnd(scalar @$h) ]
			  : $r < 80 ? sane($f, $i)
			  : $r < 90 ? junk()
			  : do {
				# a hostile value of some other type
				my @t = sort keys %hostile;
				my $o = $hostile{ $t[ rnd(scalar @t) ] };
				$o->[ rnd(scalar @$o) ];
			  };
		}
		push @b, [ $f->{name}, call_sql($f, @args) ];
	}
	run_batch(\@b);
	$random += scalar @b;
}
note sprintf("phase 2: %d random calls in %.1f s (seed %d)",
	$random, time() - $t2, $seed);

# ---------------------------------------------------------------------
# a hazard this test found: a catch-up window without bound made one
# firing after a long gap enqueue slot after slot until cancelled; the
# window is now at most 7 days (a CHECK on ntask.schedule)
# ---------------------------------------------------------------------
{
	my ($frc, $fout, $ferr) = $node->psql('postgres', q{
SET client_min_messages = warning;
SELECT count(*) FROM ntask_queue_set('fz_cq');
SELECT count(*) FROM ntask_schedule('fz_cs', '* * * * *', 'fz_cq', catchup => '10 years');},
		on_error_stop => 0);
	like($ferr, qr/schedule_catchup_at_most_7_days/,
		'a catch-up window over 7 days is refused');
	($frc, $fout, $ferr) = $node->psql('postgres', q{
SET client_min_messages = warning;
SELECT count(*) FROM ntask_schedule('fz_cs', '* * * * *', 'fz_cq', catchup => '1 day');
SELECT count(*) FROM ntask_fire('fz_cs', date_trunc('minute', now()) - interval '1 year');
SET statement_timeout = '120s';
SELECT count(*) FILTER (WHERE outcome = 'caught_up') <= 1440,
       count(*) FILTER (WHERE outcome = 'missed') <= 1001
FROM ntask_fire('fz_cs');},
		on_error_stop => 0);
	is($frc, 0, 'a firing after a year-long gap ends (no statement timeout)')
	  or diag($ferr);
	like($fout, qr/t\|t\s*$/,
		'it enqueues at most one day of slots and lists at most 1001 missed ones');
}

# ---------------------------------------------------------------------
# verdict
# ---------------------------------------------------------------------
my $total = scalar @calls;
note sprintf("%d calls in %.1f s", $total, time() - $start);
note "per SQLSTATE: "
  . join(', ', map { "$_=$by_state{$_}" } sort keys %by_state);
for my $f (@funcs)
{
	my $c = $by_func{ $f->{name} } || {};
	note sprintf("  %-40s ok %5d  error %5d", $f->{name}, $c->{ok} // 0,
		$c->{error} // 0);
}

# NTASK_FUZZ_DUMP=file: every call with its SQLSTATE, for a closer look
if ($ENV{NTASK_FUZZ_DUMP})
{
	open my $dump, '>', $ENV{NTASK_FUZZ_DUMP} or die "$ENV{NTASK_FUZZ_DUMP}: $!";
	print $dump ($_->[2] // 'missing') . "\t" . substr($_->[1], 0, 2000) . "\n" for @calls;
	close $dump;
}

my @uncalled = grep { !$by_func{ $_->{name} } } @funcs;
is(scalar(@uncalled), 0, 'every function was called')
  or diag "never called: " . join(', ', map { $_->{name} } @uncalled);
ok($total >= 1000, "a few thousand calls ($total)");

for my $b (@bad[ 0 .. ($#bad < 19 ? $#bad : 19) ])
{
	diag "SQLSTATE $b->[1] from: " . substr($calls[ $b->[0] ][1], 0, 300)
	  . ($b->[2] ? "\n    $b->[2]" : '');
}
is(scalar(@bad), 0, 'every SQLSTATE is ntask (NT) or standard, none internal, no timeout');

is($node->safe_psql('postgres', 'SELECT 1'), '1', 'server alive after the fuzz');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal/, 'no backend terminated by a signal');
unlike($log, qr/server process .* was terminated/, 'no server process terminated');
unlike($log, qr/\bPANIC:|TRAP:/, 'no PANIC or failed assertion');

$node->stop;
done_testing();
