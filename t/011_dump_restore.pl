
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/011_dump_restore.pl: pg_dump of a database using ntask, restored with
# pg_restore into a fresh cluster, keeps every task, attempt, receipt,
# fence, schedule slot, checkpoint, signal and audit row, and the restored database goes on
# where the old one stopped (issue 16, "Dump and restore").
#
# The source database has a guarded queue and tasks in every state: one
# succeeded with a commit receipt, one in retry_wait whose attempt was
# invoked and is unknown, one in repair_required with an owner, one leased
# (1 ms lease, so expired by the time it is restored), one ready that the
# guard will skip, one ready, one canceled; a fence at token 5 and a
# schedule with one fired slot.  `pg_dump -Fc` of it is restored into a new
# cluster (the roles are created there first: pg_dump does not carry
# roles).  Checked on the restored side:
#   - tasks, the attempt ledger, receipts, fences, schedule slots, audit and
#     queue policies are the same rows;
#   - the sequences continue: a new task gets an id above every old one;
#   - tokens continue above the old ones (the token sequence,
#     ntask.token_seq, is dumped with its value): a claim hands out tokens
#     above every token issued before the dump; the expired lease is taken
#     over with the task's second token and the old token is stale; the
#     unknown attempt is reported as prior_outcome 'unknown', the committed
#     one 'committed';
#   - the guard still runs (the edited task is skipped); the fence refuses
#     an older token and applies a newer one; firing the old slot again
#     makes no second task;
#   - ALTER EXTENSION ntask UPDATE is a no-op.
#
# Tokens come from one sequence per node: the test keeps the tokens the
# claims returned, and names a task's n-th token on the restored side
# tok(task_id, n), read from the attempt ledger (t/NtaskTok.pm).

use strict;
use warnings;

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

my $src = PostgreSQL::Test::Cluster->new('src');
$src->init;
$src->append_conf('postgresql.conf', $conf);
$src->start;

sub sql
{
	my ($node, $sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# what the restore must carry over unchanged
sub snapshot
{
	my ($node) = @_;
	my %s;
	$s{tasks} = sql($node, q{
		SELECT string_agg(concat_ws(':', task_id, queue, task_key, state, token, attempts,
									max_attempts, unknown_attempts, payload, payload_digest,
									run_at, due_at, deadline, lease_owner, lease_until,
									reason, repair_owner, repair_next_action, outcome,
									created_at, finished_at, result, saga_id, claimed_at, invoked_at),
						  ',' ORDER BY task_id)
		FROM ntask.task});
	$s{ledger} = sql($node, q{
		SELECT string_agg(concat_ws('/', task_id, token, attempt, worker, claimed_at,
									invoked_at, ended_at, result, requested, error_class,
									outcome_known, outcome, retry_at, detail),
						  ',' ORDER BY task_id, token)
		FROM ntask.attempt_all});
	$s{receipts} = sql($node, q{
		SELECT string_agg(concat_ws('/', task_id, token, payload_digest, digest_version),
						  ',' ORDER BY task_id, token)
		FROM ntask.receipt});
	$s{fences} = sql($node, q{
		SELECT string_agg(to_jsonb(f)::text, ',' ORDER BY f.fence_key) FROM ntask.fence f});
	$s{fence_receipts} = sql($node, q{
		SELECT count(*) || ':' || coalesce(max(token), 0) FROM ntask.fence_receipt});
	$s{slots} = sql($node, q{
		SELECT string_agg(concat_ws('/', schedule, slot, task_id, outcome), ','
						  ORDER BY schedule, slot)
		FROM ntask.schedule_slot});
	$s{schedules} = sql($node, q{
		SELECT string_agg(concat_ws('/', name, cron, queue, overlap, catchup), ',' ORDER BY name)
		FROM ntask.schedule});
	$s{audit} = sql($node, q{
		SELECT string_agg(concat_ws('/', audit_id, at, actor, action, task_id, queue, reason),
						  ',' ORDER BY audit_id)
		FROM ntask.audit});
	$s{queues} = sql($node, q{
		SELECT string_agg(to_jsonb(q)::text, ',' ORDER BY q.queue) FROM ntask.queue q});
	$s{sagas} = sql($node, q{
		SELECT string_agg(concat_ws('/', saga_id, saga_key, state, current_step, failed_step,
									steps_digest, started_at),
						  ',' ORDER BY saga_id)
		FROM ntask.saga});
	$s{checkpoints} = sql($node, q{
		SELECT string_agg(concat_ws('/', task_id, step, value, value_digest, token, written_at),
						  ',' ORDER BY task_id, step)
		FROM ntask.checkpoint});
	$s{signals} = sql($node, q{
		SELECT string_agg(concat_ws('/', queue, signal_key, payload, payload_digest, sent_at,
									sent_by, task_id), ',' ORDER BY queue, signal_key)
		FROM ntask.signal});
	$s{saga_steps} = sql($node, q{
		SELECT string_agg(concat_ws('/', saga_id, step_no, kind, name, task_id, state),
						  ',' ORDER BY saga_id, step_no, kind)
		FROM ntask.saga_step});
	$s{msg} = sql($node, q{SELECT string_agg(id || '=' || version, ',' ORDER BY id) FROM public.msg});
	return \%s;
}

# ---------------------------------------------------------------------
# The source database: every state
# ---------------------------------------------------------------------

sql($src, q{CREATE ROLE ntask_dr_worker});
sql($src, q{CREATE EXTENSION ntask});
sql($src, q{
	CREATE TABLE public.msg (id text PRIMARY KEY, version int NOT NULL);
	INSERT INTO public.msg SELECT 'm' || g, 1 FROM generate_series(1, 8) g;
	CREATE FUNCTION public.dr_guard(task_key text, payload jsonb) RETURNS text
	LANGUAGE sql STABLE AS $$
	  SELECT CASE WHEN (SELECT version FROM public.msg WHERE id = payload->>'msg')
					   <> (payload->>'v')::int
				  THEN 'skip: edited' ELSE 'proceed' END
	$$;});
sql($src, q{
	SELECT count(*) FROM ntask_queue_set('dq', max_attempts => 5, lease => '1 hour',
										 guard => 'dr_guard(text, jsonb)');
	SELECT count(*) FROM ntask_queue_set('rq');
	SELECT ntask_queue_set_roles('rq', NULL, 'ntask_dr_worker');});

# one task per state, enqueued in this order (ids 1..7)
sql($src, q{
	SELECT count(*) FROM ntask_enqueue_many('dq',
		ARRAY['t-done', 't-unknown', 't-repair', 't-leased', 't-edited', 't-ready', 't-canceled'],
		ARRAY(SELECT jsonb_build_object('msg', 'm' || g, 'v', 1) FROM generate_series(1, 7) g))});
sub tid { my ($node, $key) = @_; return sql($node, "SELECT task_id FROM ntask.task WHERE task_key = '$key'"); }

# claim the first four (ids order), each with its first token (kept in %tok1)
my %tok1 = map { split /\|/ } split /\n/,
  sql($src, q{SELECT task_key, token FROM ntask_claim('dq', 'W1', 4)});
is(join(',', sort keys %tok1), 't-done,t-leased,t-repair,t-unknown', 'W1 claims four tasks');
my ($done, $unknown, $repair, $leased) = map { tid($src, $_) } qw(t-done t-unknown t-repair t-leased);
is(sql($src, qq{SELECT ntask_receipt($done, $tok1{'t-done'}, '{"sent": 1}')}), 'applied', 't-done: receipt committed');
is(sql($src, qq{SELECT result FROM ntask_transition($done, $tok1{'t-done'}, 'succeeded', outcome => 'sent',
	result => '{"provider_id": "p-1"}')}),
	'applied', 't-done succeeded');
is(sql($src, qq{SELECT ntask_invoked($unknown, $tok1{'t-unknown'})}), 'applied', 't-unknown invoked');
is(sql($src, qq{SELECT state FROM ntask_transition($unknown, $tok1{'t-unknown'}, 'retry_wait', 'unknown', retry_at => now())}),
	'retry_wait', 't-unknown in retry_wait, outcome unknown, due now');
is(sql($src, qq{SELECT state FROM ntask_transition($repair, $tok1{'t-repair'}, 'repair_required', 'permanent', '{"http": 400}')}),
	'repair_required', 't-repair needs a human');
sql($src, qq{SELECT ntask_repair_assign($repair, 'oncall', 'fix the device token')});
# t-leased: its lease ends at once (the new cluster will take it over)
is(sql($src, qq{SELECT ntask_heartbeat($leased, $tok1{'t-leased'}, '1 millisecond') IS NOT NULL}), 't',
	't-leased: lease shortened to 1 ms');
is(sql($src, q{SELECT ntask_cancel(task_id, 'ops', 'withdrawn') FROM ntask.task WHERE task_key = 't-canceled'}),
	'applied', 't-canceled canceled');
sql($src, q{UPDATE public.msg SET version = 2 WHERE id = 'm5'});	# t-edited's message
is(sql($src, q{SELECT ntask_fence('cfg:h1', 5, '{"v": 5}')}), 'applied', 'fence cfg:h1 at token 5');
sql($src, q{SELECT count(*) FROM ntask_queue_set('sq'); SELECT count(*) FROM ntask_schedule('s', '*/5 * * * *', 'sq')});
# (a new schedule's first firing is its next slot: fire the latest past
# slot by name, as an operator would)
my $slot = sql($src, q{SELECT fired_slot FROM ntask_fire('s', ntask_cron_prev('*/5 * * * *', now())) WHERE outcome = 'enqueued'});
ok($slot ne '', "schedule s fired slot $slot");

# a saga whose first step is done and whose second is enqueued
sql($src, q{
	SELECT count(*) FROM ntask_queue_set('gq');
	SELECT count(*) FROM ntask_saga_start('o-1', '[
		{"name": "a", "queue": "gq", "compensate": {"queue": "gq"}},
		{"name": "b", "queue": "gq"}]');
	SELECT count(*) FROM ntask_claim('gq', 'W') c, ntask_transition(c.task_id, c.token, 'succeeded') r;});
is(sql($src, q{SELECT state || ':' || current_step FROM ntask.saga}), 'running:2',
	'saga o-1 is at its second step');

# a workflow task (issue 36): a checkpoint, then awaiting signal w:1; a
# signal w:0 that nobody awaits yet
sql($src, q{
	SELECT count(*) FROM ntask_queue_set('wq');
	SELECT count(*) FROM ntask_enqueue('wq', 'w');});
my ($wtask, $wtoken) = split /\|/, sql($src, q{SELECT task_id, token FROM ntask_claim('wq', 'W')});
is(sql($src, qq{SELECT ntask_checkpoint($wtask, $wtoken, 'fetch', '{"rows": 3}')}), 'applied', 'w: checkpoint');
is(sql($src, qq{SELECT ntask_await($wtask, $wtoken, 'w:1')}), 'applied', 'w: awaits w:1');
is(sql($src, q{SELECT ntask_signal('wq', 'w:0', '{"early": 1}')}), 'applied', 'signal w:0 sent');

my $before = snapshot($src);
my $maxid = sql($src, q{SELECT max(task_id) FROM ntask.task});
# every token a claim issued before the dump (tasks, ledger, receipts,
# checkpoints)
my $max_token_before = sql($src, q{
	SELECT greatest((SELECT max(token) FROM ntask.task),
					(SELECT max(token) FROM ntask.attempt_all),
					(SELECT max(token) FROM ntask.receipt),
					(SELECT max(token) FROM ntask.checkpoint))});

# ---------------------------------------------------------------------
# pg_dump, then pg_restore into a fresh cluster
# ---------------------------------------------------------------------

my $dump = PostgreSQL::Test::Utils::tempdir . '/ntask.dump';
command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-h', $src->host, '-p', $src->port, 'postgres' ],
	'pg_dump -Fc of the database');

my $dst = PostgreSQL::Test::Cluster->new('dst');
$dst->init;
$dst->append_conf('postgresql.conf', $conf);
$dst->start;
sql($dst, q{CREATE ROLE ntask_dr_worker});
command_ok([ 'pg_restore', '--exit-on-error', '-d', 'postgres', '-h', $dst->host, '-p', $dst->port, $dump ],
	'pg_restore into a fresh cluster exits 0');

my $after = snapshot($dst);
for my $k (sort keys %$before)
{
	ok(length($before->{$k} // '') > 0, "source: $k is not empty");
	is($after->{$k}, $before->{$k}, "restored: $k unchanged");
}
note "tasks before the dump: $before->{tasks}";
is(sql($dst, q{SELECT extversion FROM pg_extension WHERE extname = 'ntask'}), '1.1.0',
	'restored: extension 1.1.0');
NtaskTok::create($dst, 'postgres');    # after the snapshot: not in the dump

# ---------------------------------------------------------------------
# The restored database goes on where the old one stopped
# ---------------------------------------------------------------------

ok(sql($dst, q{SELECT task_id FROM ntask_enqueue('dq', 't-new', jsonb_build_object('msg', 'm8', 'v', 1))}) > $maxid,
	'a new task gets an id above every restored one');
# the claim: the expired lease is taken over with its second token; the
# unknown retry comes with prior_outcome unknown; the edited task is
# skipped by the guard; the ready ones get their first token; every token
# is above every token issued before the dump
is( sql($dst, qq{
		CREATE TEMP TABLE c AS SELECT * FROM ntask_claim('dq', 'W2', 10);
		SELECT string_agg(task_key || ':' ||
						  CASE token WHEN tok(task_id, 1) THEN '1st'
									 WHEN tok(task_id, 2) THEN '2nd' ELSE token::text END
						  || ':' || coalesce(prior_outcome, '-') || ':' ||
						  (token > $max_token_before),
						  ',' ORDER BY task_key)
		FROM c}),
	't-leased:2nd:-:true,t-new:1st:-:true,t-ready:1st:-:true,t-unknown:2nd:unknown:true',
	"restored: takeover with the task's next token (never invoked: known), the unknown retry reported, the guard still runs, tokens above every one before the dump ($max_token_before)");
is(sql($dst, q{SELECT state || ':' || coalesce(reason, '-') FROM ntask.task WHERE task_key = 't-edited'}),
	'skipped:edited', 'restored: the guard skipped the edited task');
is(sql($dst, qq{SELECT result FROM ntask_transition($leased, $tok1{'t-leased'}, 'succeeded')}), 'stale',
	'restored: the token from before the restore is stale');
is(sql($dst, qq{SELECT result FROM ntask_transition($leased, tok($leased, 2), 'succeeded')}), 'applied',
	'restored: the new token applies');
is(sql($dst, qq{SELECT ntask_receipt($done, $tok1{'t-done'}, '{"sent": 1}')}), 'duplicate',
	'restored: the committed receipt is still there (duplicate)');
is(sql($dst, q{SELECT ntask_fence('cfg:h1', 4, '{"v": 4}')}), 'stale', 'restored: the fence refuses token 4');
is(sql($dst, q{SELECT ntask_fence('cfg:h1', 6, '{"v": 6}')}), 'applied', 'restored: the fence applies token 6');
is(sql($dst, qq{SELECT string_agg(outcome, ',') FROM ntask_fire('s', '$slot')}), 'duplicate',
	'restored: firing the old slot again makes no second task');
is(sql($dst, qq{SELECT count(*) FROM ntask.task WHERE queue = 'sq'}),
	1, 'restored: one task for the slot');
is(sql($dst, q{SELECT created || ':' || result FROM ntask_enqueue('dq', 't-done', jsonb_build_object('msg', 'm1', 'v', 1))}),
	'false:{"provider_id": "p-1"}', 'restored: a retried request gets the stored result');
is(sql($dst, q{SELECT r.result FROM ntask_claim('gq', 'W') c, ntask_transition(c.task_id, c.token, 'succeeded') r}),
	'applied', 'restored: the saga\'s second step succeeds');
is(sql($dst, q{SELECT ntask_signal('wq', 'w:0', '{"early": 1}')}), 'duplicate',
	'restored: signal w:0 is still there (duplicate)');
is(sql($dst, q{SELECT ntask_signal('wq', 'w:1', '{"paid": 1}')}), 'applied',
	'restored: the awaiting task gets its signal');
is(sql($dst, q{SELECT context::text FROM ntask_claim('wq', 'W2')}),
	'{"signal": {"key": "w:1", "payload": {"paid": 1}}, "checkpoints": {"fetch": {"rows": 3}}}',
	'restored: the claim carries the checkpoint and the signal');
is(sql($dst, q{SELECT state FROM ntask.saga WHERE saga_key = 'o-1'}), 'succeeded',
	'restored: the saga trigger moves the restored saga to succeeded');
sql($dst, q{ALTER EXTENSION ntask UPDATE});
is(sql($dst, q{SELECT extversion FROM pg_extension WHERE extname = 'ntask'}), '1.1.0',
	'ALTER EXTENSION ntask UPDATE on the restored database is a no-op');

# Issue 32: a database whose ntask was installed as 0.3 and updated to
# 1.1.0 (the one upgrade path; ntask.queue keeps 0.3's dropped guard
# column) dumps and restores into a fresh 1.1.0.  0.3 is installed from
# test/frozen only while scripts/test.sh runs: without it, skipped.
if (-f $src->config_data('--sharedir') . '/extension/ntask--0.3.sql')
{
	sql($src, q{CREATE DATABASE upd});
	$src->safe_psql('upd', q{
		SET client_min_messages = error;
		CREATE EXTENSION ntask VERSION '0.3';
		ALTER EXTENSION ntask UPDATE;
		SELECT count(*) FROM ntask_queue_set('u', max_attempts => 4);
		SELECT count(*) FROM ntask_enqueue('u', 'k1', '{"n": 1}');
	});
	my $updump = PostgreSQL::Test::Utils::tempdir . '/upd.dump';
	command_ok([ 'pg_dump', '-Fc', '-f', $updump, '-h', $src->host, '-p', $src->port, 'upd' ],
		'pg_dump -Fc of a database updated from 0.3');
	sql($dst, q{CREATE DATABASE upd});
	command_ok([ 'pg_restore', '--exit-on-error', '-d', 'upd', '-h', $dst->host, '-p', $dst->port, $updump ],
		'pg_restore of the database updated from 0.3 exits 0');
	is($dst->safe_psql('upd', q{
			SELECT e.extversion || ':' || q.max_attempts || ':' || t.task_key || ':' || t.state
			FROM pg_extension e, ntask.queue q JOIN ntask.task t ON t.queue = q.queue
			WHERE e.extname = 'ntask'}),
		'1.1.0:4:k1:ready', 'restored from the updated database: 1.1.0, its queue and its task');
	NtaskTok::create($dst, 'upd');
	is($dst->safe_psql('upd', q{
			CREATE TEMP TABLE c AS SELECT * FROM ntask_claim('u', 'W');
			SELECT task_key || ':' || attempt || ':' || (token = tok(task_id, 1)) FROM c}),
		'k1:1:true', 'restored from the updated database: its task is claimed, with its first token');
}
else
{
	note('test/frozen/ntask--0.3.sql is not installed (scripts/test.sh installs it): no updated database');
}

$src->stop;
$dst->stop;
done_testing();
