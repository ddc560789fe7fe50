
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/007_pg_upgrade.pl: a cluster using ntask passes `pg_upgrade --check`,
# upgrades, and keeps every task, token and guard (issue 11, item 2).
#
# pg_upgrade refuses clusters whose tables hold reg* columns other than
# regclass, regrole and regtype, because it does not preserve the OIDs they
# store (a regprocedure would point at nothing, or at another function,
# after the upgrade).  ntask 0.2 kept a queue's guard in such a column
# (ntask.queue.guard regprocedure); from 0.3 the guard is stored as text,
# the schema-qualified signature, and resolved when it is used.
#
# An old cluster gets a guarded queue 'g' with tasks in several states: one
# succeeded (its first token), one in retry_wait due now (its first
# token), one ready task
# whose message was edited after the enqueue (the guard will skip it) and
# one ready task that should proceed (never claimed, token 0).  A fresh
# cluster is initialised next to it, the old one is stopped, and
# `pg_upgrade --check` and then `pg_upgrade` must both exit 0.  On the new
# cluster the tasks, the attempt ledger, the audit log and the queue
# policies (including a worker_role, a regrole, which pg_upgrade accepts)
# must be exactly as before; the guard still names notify_guard and a
# claim applies it: the edited task ends 'skipped', the retry is handed out
# its second token, the never-claimed task its first, both above every
# token issued before the upgrade (the token sequence, ntask.token_seq,
# carries over), the old first token can no longer move the task
# (duplicate of its own report, else conflict) and the new tokens
# transition.  ALTER EXTENSION ntask UPDATE is a no-op.
#
# Tokens come from one sequence per node: a task's n-th token is named
# tok(task_id, n), read from the attempt ledger (t/NtaskTok.pm).
#
# When --check fails, the test prints pg_upgrade's report files (which
# columns it refused) and stops there.
#
# No fixed sleeps: nothing here waits on a timer.

use strict;
use warnings;

use Cwd;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use NtaskTok;

my $conf = qq{
shared_preload_libraries = 'ntask'
ntask.worker = off
ntask.backoff_jitter = off
};

my $old = PostgreSQL::Test::Cluster->new('old');
$old->init;
$old->append_conf('postgresql.conf', $conf);
$old->start;

# sql(node, text): run sql in database postgres (dies on error), return
# the psql -XAt output
sub sql
{
	my ($node, $sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# everything pg_upgrade must carry over unchanged
sub snapshot
{
	my ($node) = @_;
	my %s;

	$s{tasks} = sql($node, q{
		SELECT string_agg(concat_ws(':', task_id, queue, task_key, state, token,
									attempts, unknown_attempts, payload,
									coalesce(reason, '-')),
						  ',' ORDER BY task_id)
		FROM ntask.task});
	$s{ledger} = sql($node, q{
		SELECT count(*) || ':' ||
			   md5(string_agg(concat_ws('/', task_id, token, attempt, worker,
										claimed_at, invoked_at, ended_at, result,
										requested, error_class, outcome_known,
										outcome, retry_at),
							  ',' ORDER BY task_id, token))
		FROM ntask.attempt_all});
	$s{audit} = sql($node, q{
		SELECT count(*) || ':' ||
			   coalesce(md5(string_agg(concat_ws('/', audit_id, actor, action,
												 task_id, reason),
									   ',' ORDER BY audit_id)), '-')
		FROM ntask.audit});
	$s{queues} = sql($node, q{
		SELECT string_agg(to_jsonb(q)::text, ',' ORDER BY q.queue) FROM ntask.queue q});
	$s{msg} = sql($node,
		q{SELECT string_agg(id || '=' || version, ',' ORDER BY id) FROM public.msg});
	$s{extversion} =
	  sql($node, q{SELECT extversion FROM pg_extension WHERE extname = 'ntask'});
	return \%s;
}

# ---------------------------------------------------------------------
# The old cluster: a guarded queue with tasks in several states
# ---------------------------------------------------------------------

sql($old, q{CREATE EXTENSION ntask});
NtaskTok::create($old, 'postgres');
sql($old, q{
	CREATE TABLE public.msg (id text PRIMARY KEY, version int NOT NULL);
	INSERT INTO public.msg VALUES ('m-done', 1), ('m-retry', 1),
								  ('m-edited', 1), ('m-fresh', 1);
	CREATE FUNCTION public.notify_guard(task_key text, payload jsonb) RETURNS text
	LANGUAGE sql STABLE AS $$
	  SELECT CASE
		WHEN (SELECT version FROM public.msg WHERE id = payload->>'msg')
			 <> (payload->>'v')::int
		  THEN 'skip: edited'
		ELSE 'proceed'
	  END
	$$;});

like(sql($old, q{SELECT guard FROM ntask_queue_set('g', guard => 'notify_guard(text, jsonb)')}),
	qr/^(public\.)?notify_guard\(text, ?jsonb\)$/,
	'old cluster: queue g guarded by notify_guard');

# enqueue(node, key, msg): enqueue key with payload {msg, v: 1}; returns
# "created|state"
sub enqueue
{
	my ($node, $key, $msg) = @_;
	return sql($node, qq{
		SELECT created, state
		FROM ntask_enqueue('g', '$key', jsonb_build_object('msg', '$msg', 'v', 1))});
}

# a queue restricted to a role: ntask.queue.worker_role is a regrole, one
# of the reg* types pg_upgrade accepts (it keeps role OIDs)
sql($old, q{
	CREATE ROLE ntask_upg_worker;
	SELECT ntask_queue_set('r');
	SELECT ntask_queue_set_roles('r', NULL, 'ntask_upg_worker');});

is(enqueue($old, 't-done', 'm-done'), 't|ready', 'enqueued t-done');
is(enqueue($old, 't-retry', 'm-retry'), 't|ready', 'enqueued t-retry');
is( sql($old, q{
		CREATE TEMP TABLE c AS SELECT * FROM ntask_claim('g', 'W1', max_tasks => 10);
		SELECT string_agg(task_key || ':' || attempt || ':' || (token = tok(task_id, 1)),
						  ',' ORDER BY task_key)
		FROM c}),
	't-done:1:true,t-retry:1:true',
	'W1 claims t-done and t-retry with their first tokens (the guard says proceed)');
is( sql($old, q{
		SELECT r.result || '/' || r.state
		FROM ntask.task t, ntask_transition(t.task_id, t.token, 'succeeded') r
		WHERE t.task_key = 't-done'}),
	'applied/succeeded',
	't-done succeeded with its first token');
is( sql($old, q{
		SELECT r.result || '/' || r.state
		FROM ntask.task t,
			 ntask_transition(t.task_id, t.token, 'retry_wait', retry_at => now()) r
		WHERE t.task_key = 't-retry'}),
	'applied/retry_wait',
	't-retry in retry_wait with its first token, due now');

is(enqueue($old, 't-edited', 'm-edited'), 't|ready', 'enqueued t-edited');
is(enqueue($old, 't-fresh', 'm-fresh'), 't|ready', 'enqueued t-fresh');
sql($old, q{UPDATE public.msg SET version = 2 WHERE id = 'm-edited'});

# a task's token by its place: 0 (never claimed), 1st, 2nd
my $place = q{CASE token WHEN 0 THEN '0' WHEN tok(task_id, 1) THEN '1st'
					WHEN tok(task_id, 2) THEN '2nd' ELSE token::text END};
is( sql($old, qq{
		SELECT string_agg(task_key || ':' || state || ':' || $place || ':' || attempts,
						  ',' ORDER BY task_key)
		FROM ntask.task WHERE queue = 'g'}),
	't-done:succeeded:1st:1,t-edited:ready:0:0,t-fresh:ready:0:0,t-retry:retry_wait:1st:1',
	'old cluster: task states, tokens and attempts before the upgrade');

# A database whose ntask was installed as 0.3 and updated to
# 1.1.0 (the one upgrade path; its ntask.queue keeps the guard column 0.3
# replaced, as a dropped column) upgrades too.  0.3 is installed from
# test/frozen only while scripts/test.sh runs: without it, this part is
# skipped.
my $frozen = -f $old->config_data('--sharedir') . '/extension/ntask--0.3.sql';
if ($frozen)
{
	sql($old, q{CREATE DATABASE upd});
	$old->safe_psql('upd', q{
		SET client_min_messages = error;
		CREATE EXTENSION ntask VERSION '0.3';
		ALTER EXTENSION ntask UPDATE;
		SELECT count(*) FROM ntask_queue_set('u');
		SELECT count(*) FROM ntask_enqueue('u', 'k1', '{"n": 1}');
	});
	NtaskTok::create($old, 'upd');
	is($old->safe_psql('upd', q{
			SELECT extversion || ':' || count(*) FILTER (WHERE a.attisdropped)
			FROM pg_extension e, pg_attribute a
			WHERE e.extname = 'ntask' AND a.attrelid = 'ntask.queue'::regclass
			GROUP BY extversion}),
		'1.1.0:1', 'database upd: ntask 0.3 updated to 1.1.0, ntask.queue with its dropped column');
}
else
{
	note('test/frozen/ntask--0.3.sql is not installed (scripts/test.sh installs it): no updated database');
}

my $before = snapshot($old);
# every token issued before the upgrade (task, ledger, receipt)
my $max_token_before = sql($old, q{
	SELECT greatest((SELECT max(token) FROM ntask.task),
					(SELECT max(token) FROM ntask.attempt_all),
					(SELECT max(token) FROM ntask.receipt))});
my $ntasks = sql($old, q{SELECT count(*) FROM ntask.task});
my $old_guard_oid =
  sql($old, q{SELECT 'public.notify_guard(text, jsonb)'::regprocedure::oid});
my $user = sql($old, q{SELECT current_user});

# ---------------------------------------------------------------------
# pg_upgrade --check, then pg_upgrade
# ---------------------------------------------------------------------

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->append_conf('postgresql.conf', $conf);
$old->stop;

my $bindir = $old->config_data('--bindir');

# pg_upgrade writes its scripts (delete_old_cluster.sh) into the current
# directory: run it in a scratch one
my $cwd = getcwd();
chdir(PostgreSQL::Test::Utils::tempdir) or die "chdir: $!";

my @upgrade = (
	'pg_upgrade', '--no-sync',
	'-b', $bindir, '-B', $bindir,
	'-d', $old->data_dir, '-D', $new->data_dir,
	'-p', $old->port, '-P', $new->port,
	'-s', $new->host, '-U', $user);

command_ok([ @upgrade, '--check' ], 'pg_upgrade --check exits 0');
# (command_ok returns nothing in PostgreSQL 15: ask Test::More)
my $check_ok = (Test::More->builder->summary)[-1];
unless ($check_ok)
{
	# name what pg_upgrade objected to: its report files stay in
	# <new data>/pg_upgrade_output.d/<timestamp>/ after a failure
	for my $f (glob($new->data_dir . '/pg_upgrade_output.d/*/*.txt'))
	{
		diag("pg_upgrade report $f:\n" . slurp_file($f));
	}
	chdir($cwd);
	done_testing();
	exit;
}

command_ok(\@upgrade, 'pg_upgrade exits 0');
chdir($cwd) or die "chdir: $!";

# ---------------------------------------------------------------------
# The new cluster: everything carried over, the guard still applies
# ---------------------------------------------------------------------

$new->start;

my $after = snapshot($new);
for my $k (sort keys %$before)
{
	is($after->{$k}, $before->{$k}, "after pg_upgrade: $k unchanged");
}

is(sql($new, q{SELECT worker_role FROM ntask.queue WHERE queue = 'r'}),
	'ntask_upg_worker', 'after pg_upgrade: queue r still restricted to ntask_upg_worker');

my $guard = sql($new, q{SELECT guard FROM ntask.queue WHERE queue = 'g'});
like($guard, qr/^(public\.)?notify_guard\(text, ?jsonb\)$/,
	'after pg_upgrade: queue g still names notify_guard');
my $new_guard_oid =
  sql($new, q{SELECT 'public.notify_guard(text, jsonb)'::regprocedure::oid});

my $extversion = $after->{extversion};
sql($new, q{ALTER EXTENSION ntask UPDATE});
is(sql($new, q{SELECT extversion FROM pg_extension WHERE extname = 'ntask'}),
	$extversion, "ALTER EXTENSION ntask UPDATE is a no-op (still $extversion)");

is( sql($new, qq{
		CREATE TEMP TABLE c AS SELECT * FROM ntask_claim('g', 'W2', max_tasks => 10);
		SELECT string_agg(task_key || ':' || attempt || ':' || $place || ':' ||
						  coalesce(prior_outcome, '-') || ':' || (token > $max_token_before),
						  ',' ORDER BY task_key)
		FROM c}),
	't-fresh:1:1st:-:true,t-retry:2:2nd:-:true',
	"claim after pg_upgrade: t-retry with its second token, t-fresh with its first, both above every token issued before ($max_token_before)");
is( sql($new, q{
		SELECT state, reason, token, attempts, lease_owner IS NULL
		FROM ntask.task WHERE task_key = 't-edited'}),
	'skipped|edited|0|0|t',
	'the guard ran: t-edited skipped (reason "edited"), never handed out');

# the pre-upgrade attempt (first token) of t-retry is closed: repeating its
# report is recognized from the carried-over ledger, anything else is a
# conflict, and neither touches the task now leased by its second token
is( sql($new, q{
		SELECT r.result || '/' || r.state
		FROM ntask.task t, ntask_transition(t.task_id, tok(t.task_id, 1), 'retry_wait') r
		WHERE t.task_key = 't-retry'}),
	'duplicate/leased',
	't-retry: the pre-upgrade report of its first token is a duplicate');
is( sql($new, q{
		SELECT r.result || '/' || r.state
		FROM ntask.task t, ntask_transition(t.task_id, tok(t.task_id, 1), 'succeeded') r
		WHERE t.task_key = 't-retry'}),
	'conflict/leased',
	't-retry: its first token cannot finish the task (conflict)');
is( sql($new, qq{
		SELECT state, $place, lease_owner FROM ntask.task WHERE task_key = 't-retry'}),
	'leased|2nd|W2',
	't-retry: still leased by W2 with its second token');
is( sql($new, q{
		SELECT string_agg(t.task_key || ':' || r.result || '/' || r.state, ','
						  ORDER BY t.task_key)
		FROM ntask.task t, ntask_transition(t.task_id, t.token, 'succeeded') r
		WHERE t.task_key IN ('t-fresh', 't-retry')}),
	't-fresh:applied/succeeded,t-retry:applied/succeeded',
	'ntask_transition applies with the new tokens');
is( sql($new, qq{
		SELECT string_agg(task_key || ':' || state || ':' || $place, ',' ORDER BY task_key)
		FROM ntask.task WHERE queue = 'g'}),
	't-done:succeeded:1st,t-edited:skipped:0,t-fresh:succeeded:1st,t-retry:succeeded:2nd',
	'final states and tokens on the new cluster');

if ($frozen)
{
	# the updated database: its queue row (dropped column skipped) and task
	is($new->safe_psql('upd', q{
			SELECT queue || ':' || max_attempts FROM ntask_queue_set('u', max_attempts => 5)}),
		'u:5', 'database upd after pg_upgrade: ntask_queue_set returns its queue row');
	is($new->safe_psql('upd', q{
			CREATE TEMP TABLE c AS SELECT * FROM ntask_claim('u', 'W');
			SELECT task_key || ':' || attempt || ':' || (token = tok(task_id, 1)) FROM c}),
		'k1:1:true', 'database upd after pg_upgrade: its task is claimed, with its first token');
}

note("pg_upgrade: check ok, upgrade ok, $ntasks tasks carried, guard resolves"
	  . " ($guard, oid $old_guard_oid -> $new_guard_oid), ntask $extversion");

$new->stop;
done_testing();
