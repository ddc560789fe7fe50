
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

# 5. the C API on the layout today (docs/scaling.md "What the API does on
# the layout"): a fresh connection prepares custom plans here (spi_util.c),
# so each function meets the first of its statements Citus refuses, and
# says why; the few whose statements are all multi-shard-capable run.
my $leased = (6 << 48) + 2;
$co->safe_psql('postgres', qq{
	INSERT INTO ntask.task (task_id, shard, queue, task_key, payload, payload_digest,
		digest_version, run_at, due_at, max_attempts, deadline, state, token,
		lease_owner, lease_until, attempts)
	OVERRIDING SYSTEM VALUE
	VALUES ($leased, 6, 'orders', 'leased-1', '{}', '\\x00', 1, now(),
		now() + interval '30 seconds', 3, now() + interval '1 day', 'leased', 1,
		'W1', now() + interval '30 seconds', 1);
	INSERT INTO ntask.attempt (task_id, shard, token, attempt, worker)
	VALUES ($leased, 6, 1, 1, 'W1');});
my @limits = (
	[ "SELECT * FROM ntask_enqueue('orders', 'api-1', '{}')",
	  qr/42P10: there is no unique or exclusion constraint matching the ON CONFLICT/, 'enqueue' ],
	[ "SELECT * FROM ntask_enqueue_many('orders', ARRAY['m1'], ARRAY['{}']::jsonb[])",
	  qr/42P10/, 'enqueue_many' ],
	[ "SELECT * FROM ntask_claim('orders', 'W2')",
	  qr/recursive CTEs are only supported when they contain a filter on the distribution column/, 'claim' ],
	[ "SELECT ntask_heartbeat($leased, 1)",
	  qr/STABLE functions used in UPDATE queries cannot be called with column references/, 'heartbeat' ],
	[ "SELECT ntask_invoked($leased, 1)",
	  qr/complex joins are only supported when all distributed tables are co-located/, 'invoked' ],
	[ "SELECT ntask_receipt($leased, 1, '{}')",
	  qr/could not run distributed query with FOR UPDATE/, 'receipt' ],
	[ "SELECT * FROM ntask_transition($leased, 1, 'succeeded')",
	  qr/non-IMMUTABLE functions are not allowed in CASE or COALESCE/, 'transition' ],
	[ "SELECT * FROM ntask_cancel($leased, 'ops', 'test')",
	  qr/could not run distributed query with FOR UPDATE/, 'cancel' ],
	[ "SELECT * FROM ntask_fence('f1', 1, '{}')",
	  qr/functions used in the DO UPDATE SET clause of INSERTs on distributed tables must be marked IMMUTABLE/, 'fence' ],
	[ "SELECT * FROM ntask_housekeeping()",
	  qr/could not run distributed query with FOR UPDATE/, 'housekeeping' ]);
for my $l (@limits)
{
	my ($sql, $re, $what) = @$l;
	($rc, $out, $stderr) = $co->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	like($stderr, $re, "limit (documented): ntask_$what refused by Citus");
}
is($co->safe_psql('postgres', qq{
	SELECT string_agg(task_id || ':' || result || ':' || state, ',')
	FROM ntask_transition_many(ARRAY[$leased], ARRAY[1::bigint], 'succeeded')}),
	"$leased:applied:succeeded", 'ntask_transition_many runs (multi-shard statements only)');
is($co->safe_psql('postgres', qq{SELECT state || ' ' || token FROM ntask.task WHERE task_id = $leased AND shard = 6}),
	'succeeded 1', 'and the task row on its shard is succeeded');
is($co->safe_psql('postgres', qq{SELECT count(*) > 0 FROM ntask_explain($leased)}), 't',
	'ntask_explain runs');
is($co->safe_psql('postgres', q{SELECT count(*) FROM ntask.queue_stats}), '1',
	'ntask.queue_stats runs');

NtaskCitus::stop($c);
done_testing();
