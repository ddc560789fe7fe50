
# Copyright (c) ntask contributors

# t/022_citus.pl: ntask on a Citus cluster (issue 18), opt-in with
# NTASK_CITUS=1 (it builds Citus from the vendored tarball when the
# PostgreSQL under test has none; see t/NtaskCitus.pm).
#
# A coordinator and two workers on loopback.  What it shows:
#   1. CREATE EXTENSION ntask on the coordinator reaches the workers, and
#      the 0.2-era layout cannot be distributed (the issue's findings: the
#      triggers, a primary key without the distribution column);
#   2. ntask_distribute refuses on a worker, with tasks in the tables, and
#      a second time; on an empty install it makes the layout: task,
#      attempt and receipt hash-distributed by shard and co-located, their
#      shards on both workers, the policy tables reference tables;
#   3. the routing rule of the design holds in the real planner: a
#      statement by task_id with shard = task_id >> 48 is one task on one
#      node (a router query), without it every shard is visited;
#   4. a worker node stopped with pg_ctl -m immediate takes its shards
#      away until it is restarted, and loses no committed row;
#   5. what the C API does on the layout today (docs/scaling.md "Scaling
#      out with Citus", "What blocks the API"): Citus refuses the generic
#      plans ntask prepares.  This part pins the documented limit, so that
#      the day it changes the docs are changed with it.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

if (!$ENV{NTASK_CITUS})
{
	plan skip_all => 'Citus test skipped (set NTASK_CITUS=1; builds Citus 12.1.6 from ../shared/vendor)';
}

require NtaskCitus;
my $err = NtaskCitus::ensure_built();
BAIL_OUT($err) if $err;

my $c = NtaskCitus::start('citus', workers => 2);
my $co = $c->{coord};
my ($w1, $w2) = @{ $c->{workers} };

is($co->safe_psql('postgres',
	'SELECT count(*) FROM citus_get_active_worker_nodes()'), '2', 'two workers joined');

# 1. the extension everywhere; the old layout refused
$co->safe_psql('postgres', 'CREATE EXTENSION ntask');
for my $w ($w1, $w2)
{
	is($w->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'ntask'"),
		'0.3', 'CREATE EXTENSION ntask propagated to ' . $w->name);
}
my ($rc, $out, $stderr) = $co->psql('postgres',
	"BEGIN; SELECT create_reference_table('ntask.queue'); ROLLBACK;");
like($stderr, qr/cannot distribute relation "queue" because it has triggers/,
	'finding: a table with triggers is refused');
($rc, $out, $stderr) = $co->psql('postgres', q{
	BEGIN;
	DROP TRIGGER task_count_pruned ON ntask.task;
	DROP TRIGGER saga_step_changed ON ntask.task;
	SELECT create_distributed_table('ntask.task', 'shard');
	ROLLBACK;});
like($stderr, qr/cannot create constraint on "task"/,
	'finding: the primary key (task_id) without the distribution column is refused');

# 2. ntask_distribute's refusals, then the layout
($rc, $out, $stderr) = $w1->psql('postgres', 'SELECT * FROM ntask_distribute()');
like($stderr, qr/runs on the Citus coordinator only/, 'refused on a worker');

$co->safe_psql('postgres', q{
	SELECT count(*) FROM ntask_queue_set('orders', lease => '2 seconds', max_attempts => 3);
	SELECT count(*) FROM ntask_enqueue('orders', 'early', '{}');});
($rc, $out, $stderr) = $co->psql('postgres',
	'\set VERBOSITY verbose' . "\n" . 'SELECT * FROM ntask_distribute()');
like($stderr, qr/55000: ntask: ntask_distribute needs an empty ntask, and ntask.task holds rows/,
	'refused with a task in the table (object_not_in_prerequisite_state)');
is($co->safe_psql('postgres',
	"SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'ntask.%'"),
	'0', 'the refusal changed nothing');
$co->safe_psql('postgres', q{
	DELETE FROM ntask.attempt; DELETE FROM ntask.task;});

($rc, $out, $stderr) = $co->psql('postgres', 'SELECT * FROM ntask_distribute(0)');
like($stderr, qr/shard_count must be between 1 and 32767/, 'shard_count checked');

my $layout = $co->safe_psql('postgres',
	"SELECT string_agg(relation || ' ' || layout || ' ' || shards, E'\\n' ORDER BY relation::text)
	 FROM ntask_distribute(8)");
is($layout, join("\n",
	'ntask.attempt hash by shard 8',
	'ntask.audit hash by audit_id 8',
	'ntask.breaker reference 1',
	'ntask.fence hash by fence_key 8',
	'ntask.fence_grant reference 1',
	'ntask.fence_receipt hash by fence_key 8',
	'ntask.queue reference 1',
	'ntask.queue_pruned reference 1',
	'ntask.receipt hash by shard 8',
	'ntask.schedule reference 1',
	'ntask.schedule_slot reference 1',
	'ntask.task hash by shard 8'), 'the layout');
is($co->safe_psql('postgres', q{
	SELECT count(DISTINCT colocationid) FROM pg_dist_partition
	WHERE logicalrelid IN ('ntask.task'::regclass, 'ntask.attempt', 'ntask.receipt')}),
	'1', 'task, attempt and receipt are co-located');
is($co->safe_psql('postgres', q{
	SELECT count(DISTINCT p.nodeport) FROM pg_dist_shard s
	JOIN pg_dist_shard_placement p USING (shardid)
	WHERE s.logicalrelid = 'ntask.task'::regclass}),
	'2', 'the task shards are on both workers');
is($co->safe_psql('postgres', q{SELECT queue FROM ntask.queue}), 'orders',
	'the queue policy moved into the reference table');
for my $w ($co, $w1, $w2)
{
	is($w->safe_psql('postgres', q{
		SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conname = 'task_pkey' AND conrelid = 'ntask.task'::regclass}),
		'PRIMARY KEY (task_id, shard)', 'widened key on ' . $w->name);
}
($rc, $out, $stderr) = $co->psql('postgres', 'SELECT * FROM ntask_distribute()');
like($stderr, qr/already distributed/, 'a second call is refused');

# 3. routing by shard = task_id >> 48, in the real planner.  Rows are put
# in by plain SQL (the C API cannot run here yet, part 5): one per shard
# value 0..7, task ids carrying the shard in their high bits.
$co->safe_psql('postgres', q{
	INSERT INTO ntask.task (task_id, shard, queue, task_key, payload, payload_digest,
		digest_version, run_at, due_at, max_attempts, deadline)
	OVERRIDING SYSTEM VALUE
	SELECT (s::bigint << 48) + 1, s, 'orders', 'k' || s, '{}', '\x00', 1,
		now(), now(), 3, now() + interval '1 day'
	FROM generate_series(0, 7) s;
	INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker)
	SELECT task_id, shard, 1, 1, 'W1' FROM ntask.task;});
my $tid = (5 << 48) + 1;
($rc, $out, $stderr) = $co->psql('postgres', qq{
	UPDATE ntask.task t SET lease_until = now() + q.lease
	FROM ntask.queue q
	WHERE t.task_id = $tid AND t.shard = 5 AND q.queue = t.queue});
like($stderr, qr/STABLE functions used in UPDATE queries cannot be called with column references/,
	'finding: now() + q.lease in an UPDATE of a distributed table is refused');
my $plan = $co->safe_psql('postgres', qq{
	PREPARE heartbeat(bigint, bigint) AS
	UPDATE ntask.task t SET lease_until = now() + interval '30 seconds', token = t.token + 1
	FROM ntask.queue q
	WHERE t.task_id = \$1 AND t.shard = (\$1 >> 48)::smallint AND t.token = \$2
	  AND q.queue = t.queue
	RETURNING t.token, q.lease;
	EXPLAIN (COSTS OFF) EXECUTE heartbeat($tid, 0);});
like($plan, qr/Task Count: 1\b/, 'by task_id with the shard predicate: one task');
$plan = $co->safe_psql('postgres', qq{
	EXPLAIN (COSTS OFF) UPDATE ntask.task t SET token = t.token + 1
	WHERE t.task_id = $tid});
like($plan, qr/Task Count: 8\b/, 'by task_id alone: every shard');
$plan = $co->safe_psql('postgres', qq{
	EXPLAIN (COSTS OFF)
	WITH l AS (UPDATE ntask.task t SET token = t.token + 1
	           WHERE t.task_id = $tid AND t.shard = 5 RETURNING t.task_id, t.shard, t.token)
	INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker)
	SELECT task_id, shard, token, 2, 'W2' FROM l});
like($plan, qr/Task Count: 1\b/,
	'claim lease + attempt insert of one task in one co-located shard: one task');
$plan = $co->safe_psql('postgres', q{
	EXPLAIN (COSTS OFF)
	SELECT t.task_id FROM ntask.task t
	WHERE t.shard = 3 AND t.queue = 'orders' AND t.due_at <= now()
	ORDER BY t.due_at, t.task_id LIMIT 10 FOR UPDATE SKIP LOCKED});
like($plan, qr/Task Count: 1\b/, 'a claim pick within one shard: one task');
($rc, $out, $stderr) = $co->psql('postgres', q{
	SELECT t.task_id FROM ntask.task t
	WHERE t.queue = 'orders' ORDER BY t.due_at LIMIT 10 FOR UPDATE SKIP LOCKED});
like($stderr, qr/could not run distributed query with FOR UPDATE/,
	'finding: a claim pick over every shard is refused');

# 4. a worker stopped hard: its shards are away, nothing committed is lost
my $node_of_5 = $co->safe_psql('postgres', q{
	SELECT p.nodeport FROM pg_dist_shard_placement p
	WHERE p.shardid = get_shard_id_for_distribution_column('ntask.task', 5::smallint)});
my ($down) = grep { $_->port == $node_of_5 } ($w1, $w2);
is($co->safe_psql('postgres', qq{
	UPDATE ntask.task SET token = token + 1 WHERE task_id = $tid AND shard = 5
	RETURNING token}), '1', 'a routed write commits on its node');
$down->stop('immediate');
($rc, $out, $stderr) = $co->psql('postgres', qq{
	UPDATE ntask.task SET token = token + 1 WHERE task_id = $tid AND shard = 5});
isnt($rc, 0, 'a write to a shard on the stopped worker fails');
$down->start;
my $tok;
for (1 .. 60)
{
	($rc, $tok) = $co->psql('postgres', qq{
		SELECT token FROM ntask.task WHERE task_id = $tid AND shard = 5});
	last if $rc == 0 && $tok ne '';
	sleep 1;
}
is($tok, '1', 'after the restart the committed token is there (1), the failed write is not');
is($co->safe_psql('postgres', 'SELECT count(*) FROM ntask.task'), '8',
	'every row is there after the restart');

# 5. the worker's side of the API across shards.  ntask_enqueue and
# ntask_claim are not routed yet (part 6), so the claims are made here by
# the routed SQL the claim will run (docs/scaling.md "Routing each
# statement"): lease the task, token + 1, one attempt row.  Everything
# after the claim is ntask's own C code: heartbeat, invoked, receipt,
# transition, release, cancel, replay, each one router statement on the
# node of the task's shard.  Tasks in shards 1, 2, 5 and 6 (both workers).
$co->safe_psql('postgres',
	"SELECT count(*) FROM ntask_queue_set('story', lease => '30 seconds', max_attempts => 2)");
my $claim_sql = sub {
	my ($id, $worker) = @_;
	return qq{
		WITH l AS (
			UPDATE ntask.task t SET state = 'leased', token = t.token + 1,
				attempts = t.attempts + 1, lease_owner = '$worker',
				lease_until = now() + interval '30 seconds',
				due_at = now() + interval '30 seconds'
			WHERE t.task_id = $id AND t.shard = ($id >> 48)::smallint
			RETURNING t.task_id, t.shard, t.token, t.attempts)
		INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker)
		SELECT task_id, shard, token, attempts, '$worker' FROM l
		RETURNING token};
};
my $expire_sql = sub {
	my ($id) = @_;
	return qq{
		UPDATE ntask.attempt a SET ended_at = now(), result = 'lease_expired',
			outcome_known = a.invoked_at IS NULL
		WHERE a.task_id = $id AND a.shard = ($id >> 48)::smallint AND a.ended_at IS NULL};
};
my @story = map { ($_ << 48) + 100 + $_ } (1, 2, 5, 6);
for my $id (@story)
{
	my $s = $id >> 48;
	$co->safe_psql('postgres', qq{
		INSERT INTO ntask.task (task_id, shard, queue, task_key, payload, payload_digest,
			digest_version, run_at, due_at, max_attempts, deadline)
		OVERRIDING SYSTEM VALUE
		VALUES ($id, $s, 'story', 'story-$s', '{}', '\\x00', 1, now(), now(), 2,
			now() + interval '1 day')});
}
is($co->safe_psql('postgres', q{
	SELECT count(DISTINCT p.nodeport) FROM ntask.task t
	JOIN pg_dist_shard_placement p
	  ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
	WHERE t.queue = 'story'}), '2', 'the story tasks are on both workers');

my ($t1, $t2, $t5, $t6) = @story;
my $q = sub { $co->safe_psql('postgres', $_[0]) };
for my $id (@story)
{
	is($q->($claim_sql->($id, 'W1')), '1', "W1 claims $id: token 1");
	is($q->("SELECT ntask_heartbeat($id, 1) IS NOT NULL"), 't', "W1 heartbeats $id");
	is($q->("SELECT ntask_invoked($id, 1)"), 'applied', "W1 invoked $id");
}
# one router statement on one node: the remote commands of a heartbeat
($rc, $out, $stderr) = $co->psql('postgres', qq{
	SET citus.log_remote_commands = on; SET client_min_messages = log;
	SELECT ntask_heartbeat($t5, 1);});
my %ports = map { $_ => 1 } ($stderr =~ /on server \S+:(\d+)/g);
is(scalar(keys %ports), 1, 'a heartbeat talks to one node');
unlike($stderr, qr/PREPARE TRANSACTION/, 'and needs no two-phase commit');

# W1 commits the business write of t1 under its receipt and finishes it
is($q->("SELECT ntask_receipt($t1, 1, '{\"order\": 1}')"), 'applied', 't1: receipt applied');
is($q->("SELECT ntask_receipt($t1, 1, '{\"order\": 1}')"), 'duplicate', 't1: the same receipt again: duplicate');
is($q->("SELECT ntask_receipt($t1, 1, '{\"order\": 2}')"), 'conflict', 't1: another payload: conflict');
is($q->("SELECT result || ' ' || state FROM ntask_transition($t1, 1, 'succeeded')"),
	'applied succeeded', 't1: W1 succeeds');
is($q->("SELECT result FROM ntask_transition($t1, 1, 'succeeded')"), 'duplicate',
	't1: the same transition again: duplicate');

# W1 stalls on t2; its lease is taken over by W2 (token 2): every write of
# W1 is rejected, W2's are applied
$q->($expire_sql->($t2));
is($q->($claim_sql->($t2, 'W2')), '2', 't2: W2 takes over with token 2');
is($q->("SELECT coalesce(ntask_heartbeat($t2, 1)::text, 'null')"), 'null', 't2: W1 heartbeat rejected');
is($q->("SELECT ntask_invoked($t2, 1)"), 'stale', 't2: W1 invoked: stale');
is($q->("SELECT ntask_receipt($t2, 1, '{}')"), 'stale', 't2: W1 receipt: stale');
is($q->("SELECT result FROM ntask_transition($t2, 1, 'succeeded')"), 'stale', 't2: W1 transition: stale');
is($q->("SELECT ntask_receipt($t2, 2, '{}')"), 'applied', 't2: W2 receipt applied');
is($q->("SELECT result FROM ntask_transition($t2, 2, 'succeeded')"), 'applied', 't2: W2 succeeds');

# budgets: t5 fails twice (max_attempts 2): retry_wait, then repair_required
is($q->("SELECT result || ' ' || state FROM ntask_transition($t5, 1, 'retry_wait', error_class => 'transient')"),
	'applied retry_wait', 't5: first failure: retry_wait');
is($q->($claim_sql->($t5, 'W1')), '2', 't5: claimed again, token 2');
is($q->("SELECT result || ' ' || state FROM ntask_transition($t5, 2, 'retry_wait', error_class => 'transient')"),
	'applied repair_required', 't5: second failure: the budget is spent, repair_required');
is($q->("SELECT reason FROM ntask.task WHERE task_id = $t5 AND shard = 5"), 'budget_exhausted',
	't5: reason budget_exhausted');
is($q->("SELECT ntask_replay($t5, 'ops', 'fixed')"), 'ready', 't5: replayed by an operator');
is($q->($claim_sql->($t5, 'W1')), '3', 't5: token 3 after the replay');
is($q->("SELECT ntask_release($t5, 3)"), 'applied', 't5: released');
is($q->("SELECT ntask_cancel($t5, 'ops', 'done')"), 'applied', 't5: canceled');

# t6: released unclaimed work goes back to ready; the invoked attempt counts
is($q->("SELECT ntask_release($t6, 1)"), 'applied', 't6: released after invoked');
is($q->("SELECT state || ' ' || unknown_attempts FROM ntask.task WHERE task_id = $t6 AND shard = 6"),
	'ready 1', 't6: ready, its invoked attempt has an unknown outcome');

# tokens per task, on each task's own shard: 1..n, no gaps, no repeats
is($q->(q{
	SELECT string_agg(task_id || ':' || tokens, ' ' ORDER BY task_id) FROM (
		SELECT a.task_id, string_agg(a.token::text, ',' ORDER BY a.token) AS tokens
		FROM ntask.attempt a JOIN ntask.task t ON t.task_id = a.task_id AND t.shard = a.shard
		WHERE t.queue = 'story' GROUP BY a.task_id) x}),
	"$t1:1 $t2:1,2 $t5:1,2,3 $t6:1", 'attempt tokens are 1..n per task');
is($q->("SELECT count(*) FROM ntask.receipt WHERE task_id IN ($t1, $t2)"), '2',
	'one receipt per business write');

# 6. what is not routed yet: Citus refuses these functions' statements
my @limits = (
	[ "SELECT * FROM ntask_enqueue('orders', 'api-1', '{}')",
	  qr/42P10: there is no unique or exclusion constraint matching the ON CONFLICT/, 'enqueue' ],
	[ "SELECT * FROM ntask_enqueue_many('orders', ARRAY['m1'], ARRAY['{}']::jsonb[])",
	  qr/42P10/, 'enqueue_many' ],
	[ "SELECT * FROM ntask_claim('orders', 'W2')",
	  qr/0A000: .*(distribution column|distributed query|FOR UPDATE)/, 'claim' ],
	[ "SELECT * FROM ntask_fence('f1', 1, '{}')",
	  qr/functions used in the DO UPDATE SET clause of INSERTs on distributed tables must be marked IMMUTABLE/, 'fence' ],
	[ "SELECT * FROM ntask_housekeeping()",
	  qr/could not run distributed query with FOR UPDATE/, 'housekeeping' ]);
for my $l (@limits)
{
	my ($sql, $re, $what) = @$l;
	($rc, $out, $stderr) = $co->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	like($stderr, $re, "not routed yet (documented): ntask_$what refused by Citus");
}
is($q->(q{SELECT count(*) > 0 FROM ntask_explain(} . $t2 . q{)}), 't', 'ntask_explain runs');
is($q->(q{SELECT succeeded FROM ntask.queue_stats WHERE queue = 'story'}), '2',
	'ntask.queue_stats runs (2 succeeded)');

NtaskCitus::stop($c);
done_testing();
