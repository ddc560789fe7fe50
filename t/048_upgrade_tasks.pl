
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/048_upgrade_tasks.pl: the update from 1.0.0 as a user runs it, with
# work in flight (issue 48, "Done when").
#
# The 1.0.0 release (the parent of 5da1bfd, the commit that opened 1.1.0)
# is built from git history (`git archive` into a temp dir, PGXS against
# the PostgreSQL under test) and installed, with its control file and
# install script, into a throwaway copy of that PostgreSQL under this
# test's temp dir: its bin/ copied (PostgreSQL finds its share and lib
# directories relative to its own binary), everything else symlinked but
# the ntask files.  A cluster of that copy makes the data with the real
# 1.0.0 library and SQL.  Then the server is stopped, the current build
# (the one `make install` put into the PostgreSQL under test: ntask.so,
# the control file and the scripts) is copied over the 1.0.0 files, the
# server started and `ALTER EXTENSION ntask UPDATE` run.
#
# The 1.0.0 data: queues plain, one (a budget of one attempt), fair
# (partition keys), ord (ordered per key), cap (max_inflight 1), short (a
# lease of one second), guarded (a guard) and web (an http target, data
# only: no worker runs); tasks in every state 1.0.0 has (ready, ready but
# scheduled an hour ahead, leased mid-lease with known tokens, one with
# progress and a checkpoint, one invoked, leases that ran out, one with a
# receipt; retry_wait; succeeded with a receipt and a result; canceled,
# one while leased; skipped by the guard; repair_required with an unknown
# outcome, assigned, and one permanent; awaiting a signal; waiting for a
# parent), a signal sent before anyone awaits it, a fence.
#
# Checked, layout aside (another change moves the task row's columns; the
# test reads ntask's tables and views as JSON, by key):
#   - every row of ntask.task, ntask.attempt_all, receipt, checkpoint,
#     signal, audit, queue, task_dep and fence is there after the update
#     with every value it had; only columns the update adds are new;
#   - ntask_explain of every task reads the same (durations in words
#     aside, which move with the clock);
#   - a "play" of calls with the OLD tokens (heartbeats, a stale token and
#     a canceled holder's refused, a token never issued refused, duplicate
#     and conflicting transitions and receipts, checkpoints, finishing
#     the leased tasks, a signal, a replay) and then new claims that drain
#     every queue (attempt, prior_outcome, payload and context of each
#     hand-out) gives the same answers, and leaves the same states and the
#     same ledger, on 1.0.0 (run before the stop in a transaction rolled
#     back, after a restart, as the updated server starts fresh) and after
#     the update (committed);
#   - grants: before the update every ntask function and procedure is
#     granted to a role (EXECUTE) and every ntask view (SELECT), and
#     ntask_repair_assign's default grant revoked from ntask_admin; after
#     it every function that is still there (by signature, else every new
#     signature of its name) keeps the grant (has_function_privilege and
#     the ACL item), each function the update script drops or (re)creates
#     (grepped from ntask--1.0.0--1.1.0.sql) is named in a test of its
#     own, the views keep theirs, the revoke holds, and no user grant is
#     recorded as the extension's own (pg_init_privs: pg_dump dumps it).
#
# Skipped, saying why, when the tree is not a git checkout with 1.0.0 in
# its history (a shallow clone).  35 s on an idle 2-core machine, about
# a minute under load: most of it the 1.0.0 build (make -j2), then four
# server starts.

use strict;
use warnings;

use Cwd;
use File::Basename;
use File::Compare;
use File::Copy;
use File::Path qw(make_path);
use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = Cwd::abs_path("$FindBin::Bin/..");
# 1.0.0: the parent of 5da1bfd ("1.1.0: one schema for the wave")
my $release = 'fe78487f81ffcc7d65d50266a17cb6d5cb2e46ea';
my $git = "git -c safe.directory='*' -C '$root'";

if (system("$git cat-file -e '$release^{commit}' >/dev/null 2>&1") != 0)
{
	plan skip_all => "1.0.0 ($release) is not in this checkout's git history "
	  . '(not a git checkout, or a shallow clone: git fetch --unshallow)';
}
like(`$git show '$release:ntask.control'`, qr/^default_version = '1\.0\.0'$/m,
	"$release is the 1.0.0 release");

# the PostgreSQL under test (prove runs with its bindir first in PATH)
sub pg_config
{
	my ($opt) = @_;
	my $v = `pg_config --$opt`;
	die "pg_config --$opt failed" if $?;
	chomp $v;
	return $v;
}
my %dir = (
	bin => pg_config('bindir'),
	lib => pg_config('pkglibdir'),
	share => pg_config('sharedir'));
die "no ntask.so in $dir{lib}: make install first" unless -f "$dir{lib}/ntask.so";

my $tmp = PostgreSQL::Test::Utils::tempdir;

# ---------------------------------------------------------------------
# Build 1.0.0 from history
# ---------------------------------------------------------------------

my $src = "$tmp/ntask-1.0.0";
make_path($src);
my $out = `$git archive '$release' | tar -x -C '$src' 2>&1`;
die "git archive $release: $out" if $?;
is(compare("$src/ntask--1.0.0.sql", "$root/test/frozen/ntask--1.0.0.sql"), 0,
	"1.0.0's install script is test/frozen/ntask--1.0.0.sql");
# (MAKEFLAGS: the variables of the make that runs prove are not 1.0.0's)
$out = `cd '$src' && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s -j2 PG_CONFIG='$dir{bin}/pg_config' ntask.so 2>&1`;
ok(!$? && -f "$src/ntask.so", 'the 1.0.0 library builds from git history') or BAIL_OUT("make: $out");

# ---------------------------------------------------------------------
# A throwaway copy of the PostgreSQL under test
# ---------------------------------------------------------------------

# the longest common directory of bindir, pkglibdir and sharedir: the copy
# keeps their places below it (Debian: lib/postgresql/15/bin and
# share/postgresql/15 under /usr)
my @split = map { [ split m{/}, $_ ] } values %dir;
my @prefix;
for (my $i = 0;; $i++)
{
	my $c = $split[0][$i];
	last if !defined $c || grep { !defined $_->[$i] || $_->[$i] ne $c } @split;
	push @prefix, $c;
}
my $prefix = join('/', @prefix);
my $inst = "$tmp/inst";
my %copy = map { $_ => $inst . substr($dir{$_}, length $prefix) } keys %dir;

make_path($copy{bin}, $copy{lib}, "$copy{share}/extension");
system('cp', '-a', "$dir{bin}/.", $copy{bin}) == 0 or die "cp $dir{bin}: $?";
# link every entry of a directory into the copy but those matching $skip
sub link_all
{
	my ($from, $to, $skip) = @_;
	opendir(my $dh, $from) or die "$from: $!";
	for my $e (readdir $dh)
	{
		next if $e eq '.' || $e eq '..' || $e =~ $skip;
		symlink("$from/$e", "$to/$e") or die "symlink $from/$e: $!";
	}
	closedir $dh;
	return;
}
link_all($dir{lib}, $copy{lib}, qr/^ntask\.so$/);
link_all($dir{share}, $copy{share}, qr/^extension$/);
link_all("$dir{share}/extension", "$copy{share}/extension", qr/^ntask[-.]/);

# install(file, dir): a copy of file in dir, replacing it whole (a new
# inode: never rewrite a library in place)
sub install
{
	my ($file, $dir) = @_;
	my $name = basename($file);
	copy($file, "$dir/.$name.new") or die "copy $file: $!";
	chmod(0755, "$dir/.$name.new") if $name =~ /\.so$/;
	rename("$dir/.$name.new", "$dir/$name") or die "rename $dir/$name: $!";
	return;
}
install("$src/ntask.so", $copy{lib});
install("$src/$_", "$copy{share}/extension") for qw(ntask.control ntask--1.0.0.sql);

my $node = PostgreSQL::Test::Cluster->new('upg', install_path => dirname($copy{bin}));
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.worker = off
ntask.backoff_jitter = off
ntask.http_allowed_hosts = 'push.example'
jit = off
});
$node->start;

sub sql
{
	my ($q) = @_;
	return $node->safe_psql('postgres', $q);
}

sql(q{CREATE EXTENSION ntask});
is(sql(q{SELECT extversion FROM pg_extension WHERE extname = 'ntask'}), '1.0.0',
	'the copy runs ntask 1.0.0');

# ---------------------------------------------------------------------
# 1.0.0's data: every state, leases mid-lease, receipts, the ledger
# ---------------------------------------------------------------------

# public.tk: the tokens the holders know, by name (each claim takes the
# only due task of its queue at that moment)
sql(q{
CREATE TABLE public.tk (name text PRIMARY KEY, task_id bigint NOT NULL, token bigint NOT NULL);
CREATE FUNCTION public.guard_skip(task_key text, payload jsonb) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT CASE WHEN payload ? 'skip' THEN 'skip: marked' ELSE 'proceed' END $$;
SELECT count(*) FROM ntask_queue_set('plain', max_attempts => 3, lease => '1 hour');
SELECT count(*) FROM ntask_queue_set('one', max_attempts => 1, lease => '1 hour');
SELECT count(*) FROM ntask_queue_set('fair', fairness => 'partition', lease => '1 hour');
SELECT count(*) FROM ntask_queue_set('ord', fairness => 'partition', ordered => true, lease => '1 hour');
SELECT count(*) FROM ntask_queue_set('cap', max_inflight => 1, lease => '1 hour');
SELECT count(*) FROM ntask_queue_set('short', lease => '1 second');
SELECT count(*) FROM ntask_queue_set('guarded', guard => 'public.guard_skip(text,jsonb)', lease => '1 hour');
SELECT count(*) FROM ntask_queue_set('web', target => '{"type": "http", "url": "https://push.example/hook"}');

-- plain: a holder mid-lease with progress and a checkpoint
SELECT count(*) FROM ntask_enqueue('plain', 'lease_a', '{"n": 1}');
INSERT INTO tk SELECT 'lease_a', task_id, token FROM ntask_claim('plain', 'W1');
SELECT ntask_heartbeat(id, tok, progress => '{"done": 1}') IS NOT NULL FROM (SELECT task_id id, token tok FROM tk WHERE name = 'lease_a') x;
SELECT ntask_checkpoint(task_id, token, 's1', '{"v": 1}') FROM tk WHERE name = 'lease_a';
-- one that is invoked (calling out)
SELECT count(*) FROM ntask_enqueue('plain', 'lease_inv', '{"n": 2}');
INSERT INTO tk SELECT 'lease_inv', task_id, token FROM ntask_claim('plain', 'W2');
SELECT ntask_invoked(task_id, token) FROM tk WHERE name = 'lease_inv';
-- released and claimed again: its first token is stale
SELECT count(*) FROM ntask_enqueue('plain', 'stale', '{"n": 3}');
INSERT INTO tk SELECT 'stale_old', task_id, token FROM ntask_claim('plain', 'W3');
SELECT ntask_release(task_id, token) FROM tk WHERE name = 'stale_old';
INSERT INTO tk SELECT 'stale_new', task_id, token FROM ntask_claim('plain', 'W4');
-- canceled while leased: its holder's token is stale
SELECT count(*) FROM ntask_enqueue('plain', 'lease_canceled', '{"n": 4}');
INSERT INTO tk SELECT 'lc_old', task_id, token FROM ntask_claim('plain', 'W5');
SELECT ntask_cancel(task_id, 'ops', 'withdrawn while running') FROM tk WHERE name = 'lc_old';
-- succeeded, with a receipt and a result
SELECT count(*) FROM ntask_enqueue('plain', 'done', '{"n": 6}');
INSERT INTO tk SELECT 'done', task_id, token FROM ntask_claim('plain', 'W7');
SELECT ntask_receipt(task_id, token, '{"x": "done"}') FROM tk WHERE name = 'done';
SELECT result, state FROM tk, ntask_transition(tk.task_id, tk.token, 'succeeded',
	result => '{"r": "done"}') WHERE tk.name = 'done';
-- awaiting a signal
SELECT count(*) FROM ntask_enqueue('plain', 'awaiting', '{"n": 7}');
INSERT INTO tk SELECT 'await_old', task_id, token FROM ntask_claim('plain', 'W8');
SELECT ntask_await(task_id, token, 'sig1') FROM tk WHERE name = 'await_old';
-- retry_wait, due now (the last claim of plain: it is due at once)
SELECT count(*) FROM ntask_enqueue('plain', 'retry', '{"n": 5}');
INSERT INTO tk SELECT 'retry_old', task_id, token FROM ntask_claim('plain', 'W6');
SELECT result, state FROM tk, ntask_transition(tk.task_id, tk.token, 'retry_wait',
	error_class => 'transient', retry_at => now()) WHERE tk.name = 'retry_old';
-- canceled while ready; scheduled an hour ahead; a signal nobody awaits yet
SELECT ntask_cancel(task_id, 'ops', 'not needed') FROM ntask_enqueue('plain', 'canceled', '{"n": 8}');
SELECT count(*) FROM ntask_enqueue('plain', 'sched', '{"n": 9}', run_at => now() + interval '1 hour');
SELECT ntask_signal('plain', 'sig_early', '{"e": 1}');
-- a parent and its waiting child; ready ones, one of higher priority
SELECT count(*) FROM ntask_enqueue('plain', 'parent', '{"n": 10}');
SELECT state FROM ntask_enqueue('plain', 'child', '{"n": 11}', depends_on => ARRAY['parent']);
SELECT count(*) FROM ntask_enqueue('plain', 'r1', '{"n": 12}');
SELECT count(*) FROM ntask_enqueue('plain', 'r2', '{"n": 13}');
SELECT count(*) FROM ntask_enqueue('plain', 'r3', '{"n": 14}', priority => 5);

-- one: repair_required with an unknown outcome, assigned; and a permanent one
SELECT count(*) FROM ntask_enqueue('one', 'rep_unk', '{"n": 20}');
INSERT INTO tk SELECT 'rep_unk', task_id, token FROM ntask_claim('one', 'W9');
SELECT ntask_invoked(task_id, token) FROM tk WHERE name = 'rep_unk';
SELECT result, state FROM tk, ntask_transition(tk.task_id, tk.token, 'retry_wait',
	error_class => 'unknown') WHERE tk.name = 'rep_unk';
SELECT ntask_repair_assign(task_id, 'oncall', 'ask the far side') FROM tk WHERE name = 'rep_unk';
SELECT count(*) FROM ntask_enqueue('one', 'rep_perm', '{"n": 21}');
INSERT INTO tk SELECT 'rep_perm', task_id, token FROM ntask_claim('one', 'W10');
SELECT result, state FROM tk, ntask_transition(tk.task_id, tk.token, 'repair_required',
	detail => '{"why": "bad input"}') WHERE tk.name = 'rep_perm';

-- fair: four tasks over two keys, one leased
SELECT count(*) FROM ntask_enqueue('fair', 'f1', '{"n": 30}', partition_key => 'a');
INSERT INTO tk SELECT 'fair_l', task_id, token FROM ntask_claim('fair', 'W11');
SELECT count(*) FROM ntask_enqueue('fair', 'f2', '{"n": 31}', partition_key => 'b');
SELECT count(*) FROM ntask_enqueue('fair', 'f3', '{"n": 32}', partition_key => 'a');
SELECT count(*) FROM ntask_enqueue('fair', 'f4', '{"n": 33}', partition_key => 'b');
SELECT count(*) FROM ntask_enqueue('fair', 'f5', '{"n": 34}');

-- ord: key k1's head leased, the next of k1 behind it, k2's ready
SELECT count(*) FROM ntask_enqueue('ord', 'o1', '{"n": 40}', partition_key => 'k1');
INSERT INTO tk SELECT 'ord_l', task_id, token FROM ntask_claim('ord', 'W12');
SELECT count(*) FROM ntask_enqueue('ord', 'o2', '{"n": 41}', partition_key => 'k1');
SELECT count(*) FROM ntask_enqueue('ord', 'o3', '{"n": 42}', partition_key => 'k2');

-- cap: one leased holds the queue's only slot
SELECT count(*) FROM ntask_enqueue('cap', 'c1', '{"n": 50}');
INSERT INTO tk SELECT 'c1', task_id, token FROM ntask_claim('cap', 'W13');
SELECT count(*) FROM ntask_enqueue('cap', 'c2', '{"n": 51}');
SELECT count(*) FROM ntask_enqueue('cap', 'c3', '{"n": 52}');

-- short: leases that run out, invoked, one after a committed receipt
SELECT count(*) FROM ntask_enqueue('short', 's_rcpt', '{"n": 60}');
INSERT INTO tk SELECT 's_rcpt', task_id, token FROM ntask_claim('short', 'W14');
SELECT ntask_invoked(task_id, token) FROM tk WHERE name = 's_rcpt';
SELECT ntask_receipt(task_id, token, '{"x": "short"}') FROM tk WHERE name = 's_rcpt';
SELECT count(*) FROM ntask_enqueue('short', 's_unk', '{"n": 61}');
INSERT INTO tk SELECT 's_unk', task_id, token FROM ntask_claim('short', 'W15');
SELECT ntask_invoked(task_id, token) FROM tk WHERE name = 's_unk';

-- guarded: the guard skips one, the claim hands out the other
SELECT count(*) FROM ntask_enqueue('guarded', 'g_skip', '{"skip": 1}');
SELECT count(*) FROM ntask_enqueue('guarded', 'g_ok', '{"n": 70}');
INSERT INTO tk SELECT 'g_ok', task_id, token FROM ntask_claim('guarded', 'W16');

-- web: an http queue's task, waiting for a worker
SELECT count(*) FROM ntask_enqueue('web', 'w1', '{"n": 80}');

SELECT ntask_fence('cfg/host1', 5, '{"v": 5}');
});

is(sql(q{SELECT string_agg(DISTINCT state, ',' ORDER BY state) FROM ntask.task}),
	'awaiting,canceled,leased,ready,repair_required,retry_wait,skipped,succeeded,waiting',
	'1.0.0 holds a task in every state of its state machine');
is(sql(q{SELECT string_agg(name || '=' || t.task_key, ',' ORDER BY name) FROM tk JOIN ntask.task t USING (task_id)}),
	'await_old=awaiting,c1=c1,done=done,fair_l=f1,g_ok=g_ok,lc_old=lease_canceled,lease_a=lease_a,'
	  . 'lease_inv=lease_inv,ord_l=o1,rep_perm=rep_perm,rep_unk=rep_unk,retry_old=retry,s_rcpt=s_rcpt,'
	  . 's_unk=s_unk,stale_new=stale,stale_old=stale',
	'the claims took the tasks meant');
ok($node->poll_query_until('postgres',
		q{SELECT bool_and(lease_until < now()) FROM ntask.task WHERE queue = 'short' AND state = 'leased'}),
	'the short leases ran out');

# grants, as a user makes them: every ntask routine to upg_app, every view,
# and a revoke of a default grant
sql(q{
CREATE ROLE upg_app;
DO $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
			 WHERE e.extname = 'ntask' AND d.deptype = 'e'
			   AND d.classid IN ('pg_proc'::regclass, 'pg_class'::regclass) LOOP
		IF r.classid = 'pg_proc'::regclass THEN
			EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO upg_app', r.objid::regprocedure);
		ELSIF (SELECT relkind FROM pg_class WHERE oid = r.objid) = 'v' THEN
			EXECUTE format('GRANT SELECT ON %s TO upg_app', r.objid::regclass);
		END IF;
	END LOOP;
END $$;
REVOKE EXECUTE ON FUNCTION ntask_repair_assign(bigint, text, text) FROM ntask_admin;
});

# ---------------------------------------------------------------------
# What is compared before and after
# ---------------------------------------------------------------------

# every row of the tables (and ntask.attempt_all) as JSON, by key
my $rows = q{
	SELECT 'task' AS rel, x.task_id::text AS id, to_jsonb(x) AS j FROM ntask.task x
	UNION ALL SELECT 'attempt_all', x.task_id || '/' || x.token, to_jsonb(x) FROM ntask.attempt_all x
	UNION ALL SELECT 'receipt', x.task_id || '/' || x.token, to_jsonb(x) FROM ntask.receipt x
	UNION ALL SELECT 'checkpoint', x.task_id || '/' || x.step, to_jsonb(x) FROM ntask.checkpoint x
	UNION ALL SELECT 'signal', x.queue || '/' || x.signal_key, to_jsonb(x) FROM ntask.signal x
	UNION ALL SELECT 'audit', x.audit_id::text, to_jsonb(x) FROM ntask.audit x
	UNION ALL SELECT 'queue', x.queue, to_jsonb(x) FROM ntask.queue x
	UNION ALL SELECT 'task_dep', x.task_id || '/' || x.parent_id, to_jsonb(x) FROM ntask.task_dep x
	UNION ALL SELECT 'fence', x.fence_key, to_jsonb(x) FROM ntask.fence x
	UNION ALL SELECT 'fence_receipt', x.fence_key || '/' || x.token, to_jsonb(x) FROM ntask.fence_receipt x};

# ntask_explain of every task, durations in words made one word (they move
# with the clock: "in 59 min 58 s")
sub explain_all
{
	my $e = sql(q{
		SELECT t.task_key || ' | ' || e.at || ' | ' || e.event || ' | ' || coalesce(e.token::text, '-')
			   || ' | ' || coalesce(e.actor, '-') || ' | ' || coalesce(e.detail, '-')
		FROM ntask.task t, ntask_explain(t.task_id, true) WITH ORDINALITY e
		ORDER BY t.task_id, e.ordinality});
	$e =~ s/\b\d+(?:\.\d+)? (?:days?|h|min|s|ms)\b(?: \d+(?:\.\d+)? (?:days?|h|min|s|ms)\b)*/<age>/g;
	$e =~ s/^([^|]+\| )[^|]+( \| now \|)/$1<now>$2/mg;
	return $e;
}

# the grants on ntask's routines: signature => "name grant has_privilege"
sub grants
{
	my %g;
	for my $l (split /\n/, sql(q{
		SELECT p.oid::regprocedure || '|' || p.proname || '|'
			   || EXISTS (SELECT FROM aclexplode(p.proacl) x
						  WHERE x.grantee = 'upg_app'::regrole AND x.privilege_type = 'EXECUTE')
			   || '|' || has_function_privilege('upg_app', p.oid, 'EXECUTE')
		FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		JOIN pg_extension e ON e.oid = d.refobjid AND d.deptype = 'e' AND e.extname = 'ntask'}))
	{
		my ($sig, $name, $acl, $has) = split /\|/, $l;
		$g{$sig} = { name => $name, acl => $acl, has => $has };
	}
	return \%g;
}
my $view_grants = q{
	SELECT string_agg(c.oid::regclass || '=' || has_table_privilege('upg_app', c.oid, 'SELECT'), ','
					  ORDER BY c.oid::regclass::text)
	FROM pg_class c JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
	JOIN pg_extension e ON e.oid = d.refobjid AND d.deptype = 'e' AND e.extname = 'ntask'
	WHERE c.relkind = 'v'};

# The play: the old holders and new claims, every answer one line.  Before
# the update it runs in a transaction that is rolled back; after it, for
# real.  Tokens and times are printed only as "set" / "null".
my $play = q{
BEGIN;
CREATE FUNCTION pg_temp.id(n text) RETURNS bigint LANGUAGE sql AS $$ SELECT task_id FROM public.tk WHERE name = n $$;
CREATE FUNCTION pg_temp.tk(n text) RETURNS bigint LANGUAGE sql AS $$ SELECT token FROM public.tk WHERE name = n $$;
-- the answer of a statement, or its SQLSTATE
CREATE FUNCTION pg_temp.try(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r text;
BEGIN
	EXECUTE q INTO r;
	RETURN coalesce(r, 'null');
EXCEPTION WHEN OTHERS THEN
	RETURN 'error ' || SQLSTATE;
END $$;
-- claim one task at a time until none is handed out, finishing each
CREATE FUNCTION pg_temp.drain(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	c record;
	f record;
	n integer := 0;
BEGIN
	LOOP
		n := n + 1;
		EXIT WHEN n > 50;
		SELECT * INTO c FROM ntask_claim(q, 'drainer') LIMIT 1;
		EXIT WHEN NOT FOUND;
		SELECT * INTO f FROM ntask_transition(c.task_id, c.token, 'succeeded',
											  result => jsonb_build_object('by', c.task_key));
		RETURN NEXT format('drain %s: %s attempt %s prior %s payload %s context %s lease %s -> %s %s',
						   q, c.task_key, c.attempt, coalesce(c.prior_outcome, '-'), c.payload,
						   coalesce(c.context::text, '-'), CASE WHEN c.lease_until IS NULL THEN 'null' ELSE 'set' END,
						   f.result, f.state);
	END LOOP;
END $$;
CREATE TEMP TABLE answers (n serial, line text);
INSERT INTO answers (line) SELECT 'hb ' || name || ': ' || pg_temp.try(format(
		'SELECT ntask_heartbeat(%s, %s, ''1 hour'') IS NOT NULL', task_id, token))
	FROM public.tk WHERE name NOT LIKE 's\_%' ORDER BY name;
INSERT INTO answers (line) VALUES
	('hb lease_a, a token never issued: ' || pg_temp.try(format('SELECT ntask_heartbeat(%s, %s) IS NOT NULL', pg_temp.id('lease_a'), pg_temp.tk('lease_a') + 1000))),
	('stale_old transition: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'')', pg_temp.id('stale_old'), pg_temp.tk('stale_old')))),
	('lc_old transition: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'')', pg_temp.id('lc_old'), pg_temp.tk('lc_old')))),
	('lc_old checkpoint: ' || pg_temp.try(format('SELECT ntask_checkpoint(%s, %s, ''s9'', ''{}'')', pg_temp.id('lc_old'), pg_temp.tk('lc_old')))),
	('retry_old again: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''retry_wait'', retry_at => now())', pg_temp.id('retry_old'), pg_temp.tk('retry_old')))),
	('retry_old other: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'')', pg_temp.id('retry_old'), pg_temp.tk('retry_old')))),
	('done again: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'', result => ''{"r": "done"}'')', pg_temp.id('done'), pg_temp.tk('done')))),
	('done other result: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'', result => ''{"r": "other"}'')', pg_temp.id('done'), pg_temp.tk('done')))),
	('done receipt same: ' || pg_temp.try(format('SELECT ntask_receipt(%s, %s, ''{"x": "done"}'')', pg_temp.id('done'), pg_temp.tk('done')))),
	('done receipt other: ' || pg_temp.try(format('SELECT ntask_receipt(%s, %s, ''{"x": "other"}'')', pg_temp.id('done'), pg_temp.tk('done')))),
	('done result: ' || pg_temp.try($$SELECT state || ' ' || outcome || ' ' || result FROM ntask_result('plain', 'done')$$)),
	('s_rcpt receipt same: ' || pg_temp.try(format('SELECT ntask_receipt(%s, %s, ''{"x": "short"}'')', pg_temp.id('s_rcpt'), pg_temp.tk('s_rcpt')))),
	('s_rcpt receipt other: ' || pg_temp.try(format('SELECT ntask_receipt(%s, %s, ''{"x": "other"}'')', pg_temp.id('s_rcpt'), pg_temp.tk('s_rcpt')))),
	('s_unk receipt: ' || pg_temp.try(format('SELECT ntask_receipt(%s, %s, ''{"x": "unk"}'')', pg_temp.id('s_unk'), pg_temp.tk('s_unk')))),
	('await_old heartbeat: ' || pg_temp.try(format('SELECT ntask_heartbeat(%s, %s) IS NOT NULL', pg_temp.id('await_old'), pg_temp.tk('await_old'))));
INSERT INTO answers (line) VALUES
	('lease_a progress: ' || pg_temp.try(format('SELECT ntask_heartbeat(%s, %s, progress => ''{"done": 2}'') IS NOT NULL', pg_temp.id('lease_a'), pg_temp.tk('lease_a')))),
	('lease_a checkpoint s1 again: ' || pg_temp.try(format('SELECT ntask_checkpoint(%s, %s, ''s1'', ''{"v": 1}'')', pg_temp.id('lease_a'), pg_temp.tk('lease_a')))),
	('lease_a checkpoint s2: ' || pg_temp.try(format('SELECT ntask_checkpoint(%s, %s, ''s2'', ''{"v": 2}'')', pg_temp.id('lease_a'), pg_temp.tk('lease_a')))),
	('lease_a receipt: ' || pg_temp.try(format('SELECT ntask_receipt(%s, %s, ''{"x": "a"}'')', pg_temp.id('lease_a'), pg_temp.tk('lease_a')))),
	('lease_a invoked: ' || pg_temp.try(format('SELECT ntask_invoked(%s, %s)', pg_temp.id('lease_a'), pg_temp.tk('lease_a')))),
	('lease_a succeeded: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'', result => ''{"r": "a"}'')', pg_temp.id('lease_a'), pg_temp.tk('lease_a')))),
	('lease_a heartbeat after: ' || pg_temp.try(format('SELECT ntask_heartbeat(%s, %s) IS NOT NULL', pg_temp.id('lease_a'), pg_temp.tk('lease_a')))),
	('lease_inv invoked again: ' || pg_temp.try(format('SELECT ntask_invoked(%s, %s)', pg_temp.id('lease_inv'), pg_temp.tk('lease_inv')))),
	('lease_inv retry: ' || pg_temp.try(format('SELECT result || '' '' || state || '' '' || (run_at IS NOT NULL) FROM ntask_transition(%s, %s, ''retry_wait'', error_class => ''unknown'', retry_at => now())', pg_temp.id('lease_inv'), pg_temp.tk('lease_inv')))),
	('stale_new release: ' || pg_temp.try(format('SELECT ntask_release(%s, %s)', pg_temp.id('stale_new'), pg_temp.tk('stale_new')))),
	('cap claim while c1 holds: ' || pg_temp.try($$SELECT count(*) FROM ntask_claim('cap', 'W0')$$)),
	('c1 succeeded: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'')', pg_temp.id('c1'), pg_temp.tk('c1')))),
	('fair_l succeeded: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''succeeded'')', pg_temp.id('fair_l'), pg_temp.tk('fair_l')))),
	('ord_l retry: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''retry_wait'', retry_at => now())', pg_temp.id('ord_l'), pg_temp.tk('ord_l')))),
	('g_ok skipped: ' || pg_temp.try(format('SELECT result || '' '' || state FROM ntask_transition(%s, %s, ''skipped'', detail => ''{"reason": "done elsewhere"}'')', pg_temp.id('g_ok'), pg_temp.tk('g_ok')))),
	('signal sig1: ' || pg_temp.try($$SELECT ntask_signal('plain', 'sig1', '{"go": 1}')$$)),
	('signal sig_early again: ' || pg_temp.try($$SELECT ntask_signal('plain', 'sig_early', '{"e": 1}')$$)),
	('replay rep_perm: ' || pg_temp.try(format('SELECT x::text FROM ntask_replay(%s, ''ops'', ''input fixed'') x', pg_temp.id('rep_perm')))),
	('cancel r2: ' || pg_temp.try(format('SELECT x::text FROM ntask_cancel(%s, ''ops'', ''late'') x', (SELECT task_id FROM ntask.task WHERE task_key = 'r2'))));
INSERT INTO answers (line)
	SELECT pg_temp.drain(q) FROM unnest(ARRAY['plain', 'one', 'fair', 'ord', 'cap', 'short', 'guarded']) q;
INSERT INTO answers (line)
	SELECT 'task ' || t.queue || '/' || t.task_key || ': ' || t.state || ' attempts ' || t.attempts || '/' || t.max_attempts
		   || ' unknown ' || t.unknown_attempts || ' outcome ' || coalesce(t.outcome, '-')
		   || ' reason ' || coalesce(t.reason, '-') || ' result ' || coalesce(t.result::text, '-')
		   || ' due ' || CASE WHEN t.due_at IS NULL THEN 'null' ELSE 'set' END
	FROM ntask.task t ORDER BY t.task_id;
INSERT INTO answers (line)
	SELECT 'attempt ' || t.task_key || ' #' || a.attempt || ': ' || a.worker || ' ' || coalesce(a.result, '-')
		   || ' requested ' || coalesce(a.requested, '-') || ' class ' || coalesce(a.error_class, '-')
		   || ' known ' || coalesce(a.outcome_known::text, '-') || ' outcome ' || coalesce(a.outcome, '-')
		   || ' progress ' || coalesce(a.progress::text, '-')
		   || ' invoked ' || CASE WHEN a.invoked_at IS NULL THEN 'null' ELSE 'set' END
		   || ' ended ' || CASE WHEN a.ended_at IS NULL THEN 'null' ELSE 'set' END
	FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) ORDER BY t.task_id, a.attempt, a.token;
INSERT INTO answers (line)
	SELECT 'receipt ' || t.task_key || ' #' || a.attempt || ' ' || encode(r.payload_digest, 'hex')
	FROM ntask.receipt r JOIN ntask.task t USING (task_id)
	JOIN ntask.attempt_all a ON a.task_id = r.task_id AND a.token = r.token ORDER BY t.task_id, a.attempt;
INSERT INTO answers (line)
	SELECT 'checkpoint ' || t.task_key || ' ' || c.step || ' ' || c.value FROM ntask.checkpoint c
	JOIN ntask.task t USING (task_id) ORDER BY t.task_id, c.step;
SELECT line FROM answers ORDER BY n;
};

# ---------------------------------------------------------------------
# On 1.0.0: restarted (as the updated server will start), the play rolled
# back, the snapshot
# ---------------------------------------------------------------------

$node->restart;
my $before_play = sql("$play\nROLLBACK;");
note("the play on 1.0.0:\n$before_play");
sql("CREATE TABLE public.snap AS $rows");
my $snap_count = sql(q{SELECT count(*) FROM public.snap});
my $explain_before = explain_all();
my $grants_before = grants();
my $views_before = sql($view_grants);
is(join(',', sort grep { $grants_before->{$_}{acl} ne 'true' } keys %$grants_before), '',
	'1.0.0: upg_app holds EXECUTE on every ntask routine');
cmp_ok(scalar(keys %$grants_before), '>', 50, '(' . scalar(keys %$grants_before) . ' routines)');
like($before_play, qr/^drain plain: child attempt 1 prior - payload \{"n": 11\} context .*"parents"/m,
	'the play on 1.0.0 gets as far as the child of a parent it finished');

# ---------------------------------------------------------------------
# The update: stop, the current build over 1.0.0's files, start, UPDATE
# ---------------------------------------------------------------------

$node->stop;
install("$dir{lib}/ntask.so", $copy{lib});
opendir(my $dh, "$dir{share}/extension") or die $!;
install("$dir{share}/extension/$_", "$copy{share}/extension") for grep { /^ntask[-.]/ } readdir $dh;
closedir $dh;
$node->start;
sql(q{ALTER EXTENSION ntask UPDATE});
my ($default) = slurp_file("$dir{share}/extension/ntask.control") =~ /^default_version = '([^']+)'/m;
is(sql(q{SELECT extversion FROM pg_extension WHERE extname = 'ntask'}), $default,
	"ALTER EXTENSION ntask UPDATE: 1.0.0 to $default");

# every row, every value (new columns aside)
is(sql(qq{
	WITH now AS ($rows)
	SELECT string_agg(s.rel || ' ' || s.id || ' ' || k.key || ': ' || k.value || ' became '
					  || coalesce(n.j -> k.key, 'null'), E'\n' ORDER BY s.rel, s.id, k.key)
	FROM public.snap s LEFT JOIN now n ON n.rel = s.rel AND n.id = s.id
	CROSS JOIN LATERAL jsonb_each(s.j) k
	WHERE n.j IS NULL OR n.j -> k.key IS DISTINCT FROM k.value}), '',
	"every row 1.0.0 had ($snap_count) keeps every value");
is(sql(qq{WITH now AS ($rows) SELECT string_agg(rel || ' ' || id, ', ') FROM
		  (SELECT rel, id FROM now EXCEPT SELECT rel, id FROM public.snap) x}), '',
	'and no row appeared');
note('columns the update added: ' . sql(qq{
	WITH now AS ($rows)
	SELECT coalesce(string_agg(DISTINCT n.rel || '.' || k, ', '), 'none') FROM now n
	JOIN public.snap s ON s.rel = n.rel AND s.id = n.id, jsonb_object_keys(n.j) k
	WHERE NOT s.j ? k}));

# what 1.1.0 words differently on purpose, 1.0.0's text => 1.1.0's
my @reworded = (
	# issue 45.1: a canceled or skipped parent sends a waiting child to repair
	[ 'if one fails: wait until it is replayed and succeeds',
	  'if one fails: wait (a parent in repair_required can be replayed; a canceled or skipped parent sends this task to repair_required)' ],
);
$explain_before =~ s/\Q$_->[0]\E/$_->[1]/g for @reworded;
is(explain_all(), $explain_before, 'ntask_explain of every task reads as on 1.0.0 (but for 1.1.0\'s new words)');

# grants: every routine still there by signature, else each new one of its name
my $grants_after = grants();
my %old_names = map { $grants_before->{$_}{name} => 1 } keys %$grants_before;
my %new_sigs_of;
push @{ $new_sigs_of{ $grants_after->{$_}{name} } }, $_
  for grep { !$grants_before->{$_} } keys %$grants_after;
my @lost;
for my $sig (sort keys %$grants_before)
{
	my @now = $grants_after->{$sig} ? ($sig) : @{ $new_sigs_of{ $grants_before->{$sig}{name} } // [] };
	push @lost, "$sig (dropped, nothing of its name)" unless @now;
	for my $s (@now)
	{
		my $g = $grants_after->{$s};
		push @lost, "$s (acl $g->{acl}, has_function_privilege $g->{has})"
		  unless $g->{acl} eq 'true' && $g->{has} eq 'true';
	}
}
is(join("\n", @lost), '', 'every grant on an ntask routine survives the update');

# each routine the update script drops or creates, one test each
my $script = slurp_file("$dir{share}/extension/ntask--1.0.0--$default.sql");
my %touched;
$touched{$2}{$1} = 1
  while $script =~ /\b(DROP FUNCTION|CREATE OR REPLACE FUNCTION|CREATE FUNCTION|DROP PROCEDURE|CREATE OR REPLACE PROCEDURE|CREATE PROCEDURE)\s+(?:IF EXISTS\s+)?(?:\@extschema\@\.|ntask\.)?(\w+)\s*\(/g;
# and GRANTs and REVOKEs on them (run by an extension script, a GRANT
# rewrites the function's initial privileges), and the functions named as
# a literal (the upgrade_* helpers' argument, a DO block's)
$touched{$2}{$1} = 1
  while $script =~ /\b(GRANT|REVOKE)\s[^;]*?\bON FUNCTION\s+(?:\@extschema\@\.|ntask\.)?(\w+)\s*\(/g;
$touched{$1}{'naming it in a string'} = 1 while $script =~ /'(?:\@extschema\@\.|ntask\.)(\w+)\(/g;
my @touched_old = sort grep { $old_names{$_} } keys %touched;
cmp_ok(scalar(@touched_old), '>=', 1, 'the update script drops, creates, grants on or names routines: '
	  . join(', ', @touched_old));
for my $name (@touched_old)
{
	my @sigs = grep { $grants_after->{$_}{name} eq $name } keys %$grants_after;
	ok(@sigs && !grep({ $grants_after->{$_}{acl} ne 'true' || $grants_after->{$_}{has} ne 'true' } @sigs),
		"the grant on $name survives the update's " . join(', ', sort keys %{ $touched{$name} }))
	  or diag(join(', ', map { "$_ acl $grants_after->{$_}{acl}" } @sigs) || 'no such routine after the update');
}
is(sql($view_grants), $views_before, 'the grants on every ntask view survive the update');
my %views_touched;
$views_touched{$2} = $1
  while $script =~ /\b(CREATE OR REPLACE VIEW|CREATE VIEW|DROP VIEW|ALTER VIEW|(?:GRANT|REVOKE)\s[^;]*?\bON(?: TABLE)?)\s+(?:IF EXISTS\s+)?ntask\.(\w+)/g;
for my $v (sort keys %views_touched)
{
	next unless $views_before =~ /(?:^|,)ntask\.\Q$v\E=true/;
	like(sql($view_grants), qr/(?:^|,)ntask\.\Q$v\E=true(?:,|$)/,
		"the grant on view ntask.$v survives the update's $views_touched{$v}");
}
is(sql(q{SELECT string_agg(p.oid::regprocedure::text || ' ' || has_function_privilege('ntask_admin', p.oid, 'EXECUTE'), ',')
		 FROM pg_proc p WHERE p.proname = 'ntask_repair_assign'}),
	'ntask_repair_assign(bigint,text,text,text) false',
	"the revoke of ntask_admin's EXECUTE on ntask_repair_assign survives its re-creation");
is(sql(q{SELECT string_agg(pg_describe_object(i.classoid, i.objoid, i.objsubid), ', ')
		 FROM pg_init_privs i, aclexplode(i.initprivs) x WHERE x.grantee = 'upg_app'::regrole}),
	'', "no user grant is recorded among the extension's initial privileges (pg_dump dumps them)");

# and pg_dump dumps every user grant (it leaves out what pg_init_privs
# records as the extension's own): a restore would carry them
my $dump = `'$dir{bin}/pg_dump' -s -h '${\$node->host}' -p ${\$node->port} postgres`;
die "pg_dump failed" if $?;
my %dumped;
$dumped{$1} = 1 while $dump =~ /^GRANT ALL ON (?:FUNCTION|PROCEDURE) \w+\.(\w+)\(.*\) TO upg_app;$/mg;
$dumped{$1} = 1 while $dump =~ /^GRANT SELECT ON TABLE ntask\.(\w+) TO upg_app;$/mg;
my %want = map { $grants_after->{$_}{name} => 1 } grep { $grants_after->{$_}{acl} eq 'true' } keys %$grants_after;
$want{$_} = 1 for map { /^ntask\.(\w+)=true$/ ? $1 : () } split /,/, $views_before;
is(join(', ', sort grep { !$dumped{$_} } keys %want), '',
	'pg_dump after the update dumps every grant to upg_app (' . scalar(keys %want) . ' routines and views)');

# the same play, for real: the same answers
my $after_play = sql("$play\nCOMMIT;");
is($after_play, $before_play,
	'old tokens, receipts, the ledger and new claims answer as on 1.0.0, and drain every queue');
is(sql(q{SELECT string_agg(task_key || ':' || state, ',' ORDER BY task_id) FROM ntask.task
		 WHERE state NOT IN ('succeeded', 'canceled', 'skipped', 'repair_required')}),
	'sched:ready,w1:ready', 'drained: what is left is the task scheduled an hour ahead and the http one');

# the user takes the grants back and drops the role, as on 1.0.0 (17 and
# later refuse DROP ROLE while the extension's initial privileges name it)
sql(q{
DO $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
			 WHERE e.extname = 'ntask' AND d.deptype = 'e'
			   AND d.classid IN ('pg_proc'::regclass, 'pg_class'::regclass) LOOP
		IF r.classid = 'pg_proc'::regclass THEN
			EXECUTE format('REVOKE EXECUTE ON ROUTINE %s FROM upg_app', r.objid::regprocedure);
		ELSIF (SELECT relkind FROM pg_class WHERE oid = r.objid) = 'v' THEN
			EXECUTE format('REVOKE SELECT ON %s FROM upg_app', r.objid::regclass);
		END IF;
	END LOOP;
END $$;});
my ($rc, $o, $e) = $node->psql('postgres', 'DROP ROLE upg_app');
is($rc . ($e ? ": $e" : ''), '0', 'with its grants revoked, the role drops');

$node->stop;
done_testing();
