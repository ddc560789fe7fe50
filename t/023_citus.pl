
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/023_citus.pl: ntask on a Citus cluster (issue 18), with NTASK_CITUS=1
# (scripts/test.sh sets it on PostgreSQL 15 unless NTASK_CITUS=0; it
# builds Citus from the vendored tarball when the PostgreSQL under test has
# none; see t/NtaskCitus.pm).  The long parts (about half the time: the
# mini chaos run of part 6, part 8's background worker, pg_cron firing,
# dispatch, key pauses and a node down, part 9's waiting claims) run only
# with NTASK_CITUS_LONG=1 as well (docs/scaling.md "Citus in CI").
#
# A coordinator and two workers on loopback.  What it shows:
#   1. CREATE EXTENSION ntask on the coordinator reaches the workers, and
#      the 0.2-era layout cannot be distributed (the issue's findings: the
#      triggers, a primary key without the distribution column);
#   2. ntask_distribute refuses on a worker, with tasks in the tables, and
#      a second time; on an empty install it makes the layout: task,
#      attempt and receipt hash-distributed by shard and co-located, their
#      shards on both workers, the policy tables reference tables;
#   3. the routing rule in the real planner: a statement by task_id with
#      shard = task_id >> 48 is one task on one node, without it every
#      shard is visited;
#   4. a worker node stopped with pg_ctl -m immediate takes its shards
#      away until it is restarted, and loses no committed row;
#   5. the core story through the API across shards: idempotent enqueue,
#      claims over every shard, receipts, a W1/W2 takeover with every W1
#      write rejected, budgets, replay, release, cancel, a schedule slot
#      (ntask_fire), tokens strictly increasing per task;
#   6. a mini chaos run: three external workers (DBD::Pg) drain 200 tasks
#      with their business rows co-located with the receipts, stalls past
#      the lease, a worker node stopped with -m immediate while they run:
#      0 lost, 0 duplicated, every stale write rejected, tokens monotonic;
#   7. caps and rate limits shared out by node (docs/scaling.md), and
#      what runs per shard: a fair queue
#      serves every key once before a hot key's second turn, an ordered
#      queue keeps per-key order across a W1/W2 takeover, a per-key cap;
#   8. housekeeping and the background worker: ntask_housekeeping() and the
#      coordinator's worker sweep every shard (expired leases, spent
#      budgets, deadlines, retention, history), the worker dispatches an
#      http queue over the shards to a loopback sink (each key once, the
#      ledger right), pg_cron fires a schedule on the coordinator, the
#      worker nodes' workers idle, nothing fails every tick; with a
#      worker node down the other node's shards are still swept (an
#      expired lease there released, its attempt closed) and a release of
#      a task there applies;
#   9. fences and waiting claims on the distributed install: ntask_fence
#      delegated to the node of its fence (Citus' "pushing down the function
#      call"), from the coordinator and from a worker node, on both worker
#      nodes' fences: applied, stale, duplicate, conflict, a late retry, in a
#      transaction block, a fence grant for a role; a waiting claim on the
#      coordinator woken by an enqueue through the coordinator (the wake
#      latency measured), by a batch over both nodes, by a task coming due,
#      and returning nothing when its wait ends;
#  10. one hop (issue 34): each node's id range, the shard-addressed forms
#      delegated to the shard's node (and not in a transaction block), the
#      worker's loop through them, a client on a worker node (its claims
#      take its own shards); pause and resume, trace context, progress and
#      ntask_result on the distributed install;
#  11. the token floor from the row's node: a worker node's standby
#      promoted (timeline 2) in its place; tokens above 2^48 from a
#      delegated claim and from one run on the coordinator;
#  12. (run before 11) a shard moved to w1: a backend there that read the
#      placements before claims from it and shares out a cap by them.
# Part 6 runs its three clients on the coordinator, on a worker node and
# through the shard-addressed forms; part 7 also shares out a queue-wide
# cap and a rate limit by node.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util ();
use Time::HiRes qw(sleep time);
use POSIX ();

# skipped unless NTASK_CITUS=1, and on 18 (t/NtaskCitus.pm)
require NtaskCitus;
NtaskCitus::require_citus();

# the long parts (the file header), NTASK_CITUS_LONG=1
my $long = ($ENV{NTASK_CITUS_LONG} // '') eq '1';

my $c = NtaskCitus::start('citus', workers => 2, streaming => 1);
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
		'1.1.0', 'CREATE EXTENSION ntask propagated to ' . $w->name);
}
my ($rc, $out, $stderr) = $co->psql('postgres',
	"BEGIN; SELECT create_reference_table('ntask.queue'); ROLLBACK;");
like($stderr, qr/cannot distribute relation "queue" because it has triggers/,
	'finding: a table with triggers is refused');
($rc, $out, $stderr) = $co->psql('postgres', q{
	BEGIN;
	DROP TRIGGER task_count_pruned ON ntask.task;
	DROP TRIGGER saga_step_changed ON ntask.task;
	DROP TRIGGER task_deps_changed ON ntask.task;
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
	'ntask.checkpoint hash by shard 8',
	'ntask.fence hash by fence_key 8',
	'ntask.fence_grant reference 1',
	'ntask.fence_receipt hash by fence_key 8',
	'ntask.key_pause reference 1',
	'ntask.queue reference 1',
	'ntask.queue_pruned reference 1',
	'ntask.receipt hash by shard 8',
	'ntask.schedule reference 1',
	'ntask.schedule_slot reference 1',
	'ntask.shard_map reference 1',
	'ntask.signal hash by shard 8',
	'ntask.task hash by shard 8',
	'ntask.task_dep hash by shard 8'), 'the layout');
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

# 5. the core story through the API, across shards: every call below is
# ntask's own C code, each of its statements one router query on the node
# of the task's shard (enqueue and claim included).
my $q = sub { $co->safe_psql('postgres', $_[0]) };
$q->("SELECT count(*) FROM ntask_queue_set('story', lease => '10 seconds', max_attempts => 3)");
my @ids;
for my $i (1 .. 8)
{
	my ($id, $created) = split /\|/, $q->("SELECT task_id || '|' || created::int FROM ntask_enqueue('story', 's$i', '{\"n\": $i}')");
	is($created, '1', "enqueue s$i");
	push @ids, $id;
}
is($q->("SELECT count(*) FROM ntask.task WHERE queue = 'story' AND shard <> (task_id >> 48)"), '0',
	'every task id carries its shard');
is($q->(q{
	SELECT count(DISTINCT p.nodeport) FROM ntask.task t
	JOIN pg_dist_shard_placement p
	  ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
	WHERE t.queue = 'story'}), '2', 'the tasks are on both workers');
is($q->("SELECT task_id || '|' || created::int FROM ntask_enqueue('story', 's3', '{\"n\": 3}')"),
	"$ids[2]|0", 'idempotent: the same key and payload again is the first task');
($rc, $out, $stderr) = $co->psql('postgres', "\\set VERBOSITY verbose\nSELECT * FROM ntask_enqueue('story', 's3', '{\"n\": 99}')");
like($stderr, qr/NT001/, 'the same key with another payload: NT001');
is($q->(q{SELECT string_agg(created::text, ',') FROM ntask_enqueue_many('story', ARRAY['m1', 's1', 'm2', 'm1'],
	ARRAY['{}', '{"n": 1}', '{}', '{}']::jsonb[])}), 'true,false,true,false',
	'enqueue_many: new, existing, new, repeated in the call');

# W1 claims everything due (12 tasks over the shards, one shard per round)
my %tok;
my $claimed = $q->("SELECT string_agg(task_id || ':' || token, ' ') FROM ntask_claim('story', 'W1', 20)");
%tok = map { split /:/ } split / /, $claimed;
is(scalar(keys %tok), 10, 'W1 claimed the 10 tasks across the shards');
# tokens are not 1, 2, 3 per task (issue 46.1 draws them from a sequence
# per node): each claim's token is the task's, its first attempt's
is($q->("SELECT count(*) FROM ntask.task t JOIN (VALUES "
	. join(', ', map { "($_, $tok{$_})" } sort keys %tok)
	. ") c(id, tok) ON t.task_id = c.id AND t.shard = (c.id >> 48)::smallint AND t.token = c.tok AND t.attempts = 1"),
	'10', 'each with the token of its first attempt');
is($q->("SELECT count(*) FROM ntask_claim('story', 'W1', 5)"), '0', 'nothing left to claim');

my ($a1, $a2, $a3) = @ids;
is($q->("SELECT ntask_heartbeat($a1, $tok{$a1}) IS NOT NULL"), 't', 'W1 heartbeats a1');
is($q->("SELECT ntask_invoked($a1, $tok{$a1})"), 'applied', 'W1 invoked a1');
is($q->("SELECT ntask_receipt($a1, $tok{$a1}, '{\"order\": 1}')"), 'applied', 'a1: receipt applied');
is($q->("SELECT ntask_receipt($a1, $tok{$a1}, '{\"order\": 1}')"), 'duplicate', 'a1: the same receipt again: duplicate');
is($q->("SELECT ntask_receipt($a1, $tok{$a1}, '{\"order\": 2}')"), 'conflict', 'a1: another payload: conflict');
is($q->("SELECT result || ' ' || state FROM ntask_transition($a1, $tok{$a1}, 'succeeded')"),
	'applied succeeded', 'a1: W1 succeeds');
is($q->("SELECT result FROM ntask_transition($a1, $tok{$a1}, 'succeeded')"), 'duplicate',
	'a1: the same transition again: duplicate');

# W1 invokes a2 and stalls; the lease runs out and W2 takes every expired
# task over (token 2), a2 with prior_outcome unknown.  W2's leases are
# long: under load the calls below took over 3 s, and W2's other tasks
# ran out of a 2 s lease before transition_and_claim (nothing else due)
is($q->("SELECT ntask_invoked($a2, $tok{$a2})"), 'applied', 'W1 invoked a2');
is($q->("SELECT ntask_heartbeat($a3, $tok{$a3}) IS NOT NULL"), 't', 'W1 heartbeats a3');
sleep 11;
my %w2 = map { my @f = split /:/; ($f[0] => [ $f[1], $f[2] ]) }
  split / /, $q->("SELECT string_agg(task_id || ':' || token || ':' || coalesce(prior_outcome, '-'), ' ') FROM ntask_claim('story', 'W2', 20, lease => '60 seconds')");
is(scalar(keys %w2), 9, 'W2 took over the 9 expired leases');
is(($w2{$a2}[0] > $tok{$a2} ? 'higher' : $w2{$a2}[0]) . ' ' . $w2{$a2}[1], 'higher unknown',
	'a2: a higher token, prior_outcome unknown (it was invoked)');
is(($w2{$a3}[0] > $tok{$a3} ? 'higher' : $w2{$a3}[0]) . ' ' . $w2{$a3}[1], 'higher -',
	'a3: a higher token, never invoked: known');
is($q->("SELECT coalesce(ntask_heartbeat($a2, $tok{$a2})::text, 'null')"), 'null', 'a2: W1 heartbeat rejected');
is($q->("SELECT ntask_invoked($a2, $tok{$a2})"), 'stale', 'a2: W1 invoked: stale');
is($q->("SELECT ntask_receipt($a2, $tok{$a2}, '{}')"), 'stale', 'a2: W1 receipt: stale');
is($q->("SELECT result FROM ntask_transition($a2, $tok{$a2}, 'succeeded')"), 'stale', 'a2: W1 transition: stale');
is($q->("SELECT ntask_receipt($a2, $w2{$a2}[0], '{}')"), 'applied', 'a2: W2 receipt applied');
is($q->("SELECT result FROM ntask_transition($a2, $w2{$a2}[0], 'succeeded')"), 'applied', 'a2: W2 succeeds');
# one call finishes a3 and claims the next task, on another shard maybe
is($q->("SELECT finish_result || ' ' || (token IS NULL)::int FROM ntask_transition_and_claim($a3, $w2{$a3}[0], 'succeeded', 'story', 'W2')"),
	'applied 1', 'a3: transition_and_claim finishes it (nothing else is due)');

# budgets (max_attempts 2): retry_wait, then repair_required; replay, cancel
$q->("SELECT count(*) FROM ntask_queue_set('budget', lease => '30 seconds', max_attempts => 2)");
my $b1 = $q->("SELECT task_id FROM ntask_enqueue('budget', 'b1', '{}')");
my @bt = ($q->("SELECT token FROM ntask_claim('budget', 'W1')"));
cmp_ok($bt[0], '>=', 1, "b1: claimed (token $bt[0])");
is($q->("SELECT result || ' ' || state FROM ntask_transition($b1, $bt[0], 'retry_wait', error_class => 'transient', retry_at => now())"),
	'applied retry_wait', 'b1: first failure: retry_wait');
push @bt, $q->("SELECT token FROM ntask_claim('budget', 'W1')");
cmp_ok($bt[1], '>', $bt[0], "b1: claimed again, a higher token ($bt[1])");
is($q->("SELECT result || ' ' || state FROM ntask_transition($b1, $bt[1], 'retry_wait', error_class => 'transient')"),
	'applied repair_required', 'b1: second failure spends the budget: repair_required');
is($q->("SELECT reason FROM ntask.task WHERE task_id = $b1 AND shard = ($b1 >> 48)"), 'budget_exhausted',
	'b1: budget_exhausted');
is($q->("SELECT ntask_replay($b1, 'ops', 'fixed')"), 'ready', 'b1: replayed');
push @bt, $q->("SELECT token FROM ntask_claim('budget', 'W1')");
cmp_ok($bt[2], '>', $bt[1], "b1: a higher token after the replay ($bt[2])");
is($q->("SELECT ntask_release($b1, $bt[2])"), 'applied', 'b1: released');
is($q->("SELECT ntask_cancel($b1, 'ops', 'done')"), 'applied', 'b1: canceled');

# a schedule slot: ntask_fire of a past slot makes one task per slot (its
# key the slot's key, so its shard is the key's), capped at the next slot;
# firing again is a duplicate, a rerun is a second task (pg_cron fires it
# in part 8)
$q->("SELECT count(*) FROM ntask_queue_set('sched', lease => '30 seconds')");
is($q->("SELECT name FROM ntask_schedule('daily', '0 0 * * *', 'sched')"), 'daily',
	'schedule: created (a reference table row; pg_cron is not in this database yet)');
my ($sid, $sslot, $sout) = split /\|/,
  $q->("SELECT task_id || '|' || fired_slot || '|' || outcome
	  FROM ntask_fire('daily', ntask_cron_prev('0 0 * * *', now()))");
is($sout, 'enqueued', 'schedule: the slot fired: enqueued');
is($q->(qq{SELECT task_key = 'daily:' || to_char(fired_slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
	  AND deadline = ntask_cron_next('0 0 * * *', fired_slot)
	FROM ntask.task t, (SELECT '$sslot'::timestamptz AS fired_slot) f
	WHERE t.task_id = $sid AND t.shard = ($sid >> 48)}), 't',
	'schedule: the slot key, and the deadline capped at the next slot');
is($q->("SELECT outcome || ' ' || task_id FROM ntask_fire('daily')"), "duplicate $sid",
	'schedule: fired again: duplicate (no new slot), the same task');
is($q->("SELECT outcome || ' ' || task_id FROM ntask_fire('daily', '$sslot')"), "duplicate $sid",
	'schedule: the slot fired by hand: duplicate, the same task');
my $stok = '';
for (1 .. 20)
{
	$stok = $q->("SELECT task_id || ':' || token FROM ntask_claim('sched', 'W1')");
	last if $stok ne '';
}
my ($stid, $sttok) = split /:/, $stok;
is($stid, $sid, 'schedule: the slot\'s task claimed from its shard');
is($q->("SELECT result FROM ntask_transition($sid, $sttok, 'succeeded')"), 'applied',
	'schedule: the slot\'s task succeeded');
my ($rid, $rout) = split /\|/,
  $q->("SELECT task_id || '|' || outcome FROM ntask_fire('daily', '$sslot', rerun => 'fix-1')");
is($rout, 'rerun', 'schedule: a rerun of the slot');
isnt($rid, $sid, 'schedule: the rerun is a second task');
is($q->("SELECT string_agg(outcome, ',' ORDER BY id) FROM ntask.schedule_slot WHERE schedule = 'daily'"),
	'enqueued,duplicate,rerun', 'schedule: the slot history (no new slot records nothing)');

# tokens per task on each task's own shard: strictly increasing in claim
# order (attempts 1..n), no repeats (issue 46.1 draws them from a sequence
# per node, so not 1..n: TOKENS_INCREASING, used again in part 6)
my $tokens_increasing = q{
	SELECT count(*) FROM (
		SELECT array_agg(a.token ORDER BY a.attempt) AS by_attempt,
			array_agg(a.token ORDER BY a.token) AS by_token,
			count(DISTINCT a.token) AS d, count(*) AS n,
			array_agg(a.attempt ORDER BY a.attempt) AS att
		FROM ntask.attempt_all a JOIN ntask.task k ON k.task_id = a.task_id AND k.shard = a.shard
		WHERE %s GROUP BY a.shard, a.task_id) x
	WHERE by_attempt <> by_token OR d <> n
	   OR att <> (SELECT array_agg(g::integer ORDER BY g) FROM generate_series(1, n) g)};
is($q->(sprintf($tokens_increasing, 'true')), '0',
	'attempt tokens are strictly increasing per task (attempts 1..n)');
is($q->("SELECT count(*) FROM ntask.attempt a JOIN ntask.task t ON t.task_id = a.task_id AND t.shard = a.shard"),
	$q->("SELECT count(*) FROM ntask.attempt"), 'every attempt row is on its task\'s shard');

if ($long)
{
	# 6. mini chaos: external workers (DBD::Pg, each its own connection to the
	# coordinator) drain 200 tasks, each writing its business row and receipt
	# in one transaction, while one worker node is stopped with -m immediate
	# and restarted.  Invariants as in the chaos suite: 0 lost, 0 duplicated
	# effects, every stale write rejected, tokens monotonic per task.
	$q->(q{
		SELECT count(*) FROM ntask_queue_set('chaos', lease => '2 seconds', max_attempts => 20,
			backoff_base => '100 milliseconds', backoff_max => '500 milliseconds');
		CREATE TABLE effects (task_id bigint, shard smallint, token bigint, worker text,
			PRIMARY KEY (task_id, shard, token));
		SELECT create_distributed_table('effects', 'shard', colocate_with => 'ntask.task');
		SELECT count(*) FROM ntask_enqueue_many('chaos',
			(SELECT array_agg('c' || i) FROM generate_series(1, 200) i),
			(SELECT array_agg(jsonb_build_object('i', i)) FROM generate_series(1, 200) i));});
	my $dsn = 'dbi:Pg:dbname=postgres;host=' . $co->host . ';port=' . $co->port;
	# X1 calls the API on the coordinator, X2 on a worker node (w1, which stays
	# up: its plain ntask_claim walks the shards w1 holds), X3 the shard-
	# addressed forms on the coordinator (Citus delegates each call made
	# outside a transaction block to the shard's node; the receipt, in the
	# business transaction, runs routed)
	my %dsn_of = (1 => $dsn, 2 => 'dbi:Pg:dbname=postgres;host=' . $w1->host . ';port=' . $w1->port, 3 => $dsn);
	my @shard_values = split /\n/, $q->('SELECT shard FROM ntask.shard_map ORDER BY 1');
	# X1's first task, on which it stalls past its lease, is of a shard of w1
	# (the node that stays up), so that its late writes reach a node and are
	# rejected as stale: X2, on w1, takes it over meanwhile
	my $w1_first = $q->(q{SELECT min(t.shard) FROM ntask.task t
		JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
		WHERE p.nodeport = } . $w1->port . q{ AND t.queue = 'chaos'});
	my $deadline = time + 90;
	my $tmp = PostgreSQL::Test::Utils::tempdir('chaos');
	my @kids;
	for my $w (1 .. 3)
	{
		my $pid = fork();
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			# a stall sequence of its own: the parent's rand() (free port
			# picking) seeded the generator before the fork, so without this
			# every worker stalled on the same claims, and at times all of them
			# slept through the whole outage below and no call failed
			srand($$ ^ time);
			require DBI;
			my $dbh;
			my ($stalled, $stale, $errors) = (0, 0, 0);
			my ($next_shard, $empty) = (0, 0);
			my $report = sub {
				open my $fh, '>', "$tmp/X$w" or die;
				print $fh "$stale $errors $stalled\n";
				close $fh;
			};
			while (time < $deadline)
			{
				eval {
					$dbh ||= DBI->connect($dsn_of{$w}, '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
					my $rows;
					if ($w == 3)
					{
						# one shard per claim, round the shard values
						my $sv = $shard_values[ $next_shard++ % @shard_values ];
						$rows = $dbh->selectall_arrayref(
							"SELECT task_id, token, prior_outcome FROM ntask_claim_on(?::smallint, 'chaos', 'X3', 1)",
							undef, $sv);
						$empty = @$rows ? 0 : $empty + 1;
						return if !@$rows && $empty < @shard_values;
					}
					elsif ($w == 1 && $stalled == 0)
					{
						$rows = $dbh->selectall_arrayref(
							"SELECT task_id, token, prior_outcome FROM ntask_claim_on(?::smallint, 'chaos', 'X1', 1)",
							undef, $w1_first);
					}
					else
					{
						$rows = $dbh->selectall_arrayref(
							"SELECT task_id, token, prior_outcome FROM ntask_claim('chaos', 'X$w', 1)");
					}
					if (!@$rows)
					{
						my $left = $dbh->selectrow_array(
							"SELECT count(*) FROM ntask.task WHERE queue = 'chaos' AND state <> 'succeeded'");
						if ($left == 0) { $report->(); POSIX::_exit(0); }
						select(undef, undef, undef, 0.2);
						return;
					}
					my ($id, $tok, $prior) = @{ $rows->[0] };
					# a worker stalls past its lease (a takeover): X1 on its first
					# task for longer than the others need to drain the rest (its
					# expired lease is due after every older ready task of its
					# shard), anyone on 5% of them for 3.5 s (taken over if
					# someone gets to it in time)
					$stalled++;
					if ($w == 1 && $stalled == 1) { select(undef, undef, undef, 9); }
					elsif (rand() < 0.05) { select(undef, undef, undef, 3.5); }
					$dbh->begin_work;
					my $r = $w == 3 ?
					  $dbh->selectrow_array("SELECT ntask_receipt_on(ntask_shard(?::bigint), ?, ?, '{}')", undef, $id, $id, $tok) :
					  $dbh->selectrow_array("SELECT ntask_receipt(?, ?, '{}')", undef, $id, $tok);
					if ($r eq 'applied')
					{
						$dbh->do("INSERT INTO effects VALUES (?, (?::bigint >> 48)::smallint, ?, ?)",
							undef, $id, $id, $tok, "X$w");
						$dbh->commit;
					}
					else
					{
						$dbh->rollback;
					}
					$stale++ if $r eq 'stale';
					my $t = $w == 3 ?
					  $dbh->selectrow_array("SELECT result FROM ntask_transition_on(ntask_shard(?::bigint), ?, ?, 'succeeded')",
						undef, $id, $id, $tok) :
					  $dbh->selectrow_array("SELECT result FROM ntask_transition(?, ?, 'succeeded')", undef, $id, $tok);
					$stale++ if $t eq 'stale';
				};
				if ($@)
				{
					# the node of the shard is down, or the connection broke
					$errors++;
					eval { $dbh->rollback if $dbh && !$dbh->{AutoCommit} };
					eval { $dbh->disconnect if $dbh };
					$dbh = undef;
					select(undef, undef, undef, 0.3);
				}
			}
			# _exit: the test's END blocks (which stop the nodes) belong to the parent
			$report->();
			POSIX::_exit(0);
		}
		push @kids, $pid;
	}
	# stop the node while the drain is under way: after the first 50 tasks
	for (1 .. 300)
	{
		last if $q->("SELECT count(*) FROM ntask.task WHERE queue = 'chaos' AND state = 'succeeded'") >= 50;
		select(undef, undef, undef, 0.1);
	}
	my $victim = $w2;
	$victim->stop('immediate');
	note('worker node ' . $victim->name . ' stopped with -m immediate');
	sleep 5;						# longer than a worker's 3.5 s stall
	$victim->start;
	note('worker node restarted');
	waitpid($_, 0) for @kids;
	is($q->("SELECT count(*) FROM ntask.task WHERE queue = 'chaos' AND state = 'succeeded'"), '200',
		'chaos: 0 lost (all 200 succeeded)');
	is($q->(q{SELECT count(*) FROM (SELECT task_id FROM effects GROUP BY task_id HAVING count(*) > 1) d}), '0',
		'chaos: 0 duplicated effects');
	is($q->("SELECT count(DISTINCT task_id) FROM effects"), '200', 'chaos: one effect per task');
	is($q->(q{
		SELECT count(*) FROM effects e JOIN ntask.receipt r
		  ON r.task_id = e.task_id AND r.shard = e.shard AND r.token = e.token}), '200',
		'chaos: every effect committed with its receipt');
	is($q->(sprintf($tokens_increasing, "k.queue = 'chaos'")), '0',
		'chaos: tokens strictly increasing per task (attempts 1..n)');
	is($q->(q{
		SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task k ON k.task_id = a.task_id AND k.shard = a.shard
		WHERE k.queue = 'chaos' AND a.result = 'succeeded' AND a.token <> k.token}), '0',
		'chaos: only the latest token of a task made it succeed (every stale write rejected)');
	my $takeovers = $q->(q{SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task k
		ON k.task_id = a.task_id AND k.shard = a.shard WHERE k.queue = 'chaos' AND a.attempt > 1});
	my ($stale, $errors) = (0, 0);
	for my $w (1 .. 3)
	{
		open my $fh, '<', "$tmp/X$w" or die "worker X$w left no report";
		my ($s1, $e1, $st1) = split ' ', <$fh>;
		$stale += $s1;
		$errors += $e1;
		note("chaos: X$w: $s1 stale, $e1 failed calls, $st1 claims");
		cmp_ok($st1, '>=', 1, "chaos: X$w (" . ('the coordinator', 'a worker node', 'shard-addressed calls')[$w - 1]
			. ') claimed tasks');
	}
	note("chaos: $takeovers takeovers, $stale stale writes rejected, $errors calls failed while the node was down");
	cmp_ok($takeovers, '>=', 1, 'chaos: leases were taken over');
	cmp_ok($stale, '>=', 1, 'chaos: stale writes happened, and were rejected');
	cmp_ok($errors, '>=', 1, 'chaos: the stopped node made calls fail');
}
else
{
	note('skipped without NTASK_CITUS_LONG=1: the mini chaos run');
}

# 7. what runs per shard, and what is refused (queue-wide caps)
my $nodes_of_q = sub {
	$q->(qq{SELECT count(DISTINCT p.nodeport) FROM ntask.task t
		JOIN pg_dist_shard_placement p
		  ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
		WHERE t.queue = '$_[0]'});
};

# fair, ordered and per-key-capped queues: a key lives in one shard, so
# each holds per shard (docs/scaling.md "Fairness, limits, ordering and
# sagas across shards").  Fairness: a hot key with 6 tasks and 5 keys with
# one each; six claims of one (one session: one shard cursor) serve every
# key once before the hot key gets a second turn.
my $keyof = q{JOIN ntask.task t ON t.task_id = c.task_id AND t.shard = (c.task_id >> 48)::smallint};
$q->(q{SELECT count(*) FROM ntask_queue_set('fair', fairness => 'partition');
	SELECT count(*) FROM generate_series(1, 6) i, ntask_enqueue('fair', 'hot' || i, '{}', partition_key => 'hot');
	SELECT count(*) FROM generate_series(1, 5) i, ntask_enqueue('fair', 'k' || i, '{}', partition_key => 'k' || i)});
is($nodes_of_q->('fair'), '2', 'fair: the keys are on both workers');
my @turns = split /\n/, $q->(join('', map {
	"SELECT t.partition_key FROM ntask_claim('fair', 'W1', 1) c $keyof;\n" } 1 .. 6));
is(join(',', sort @turns), 'hot,k1,k2,k3,k4,k5',
	'fair: six claims serve each of the six keys once (the hot key waits its turn): ' . join(',', @turns));
is($q->(qq{SELECT count(*) FROM ntask_claim('fair', 'W1', 20) c $keyof WHERE t.partition_key = 'hot'}), '5',
	'fair: then the hot key\'s other five');

# per-key order across a takeover: an ordered queue hands out only the
# head of each key; W1's heads expire and W2 takes the same heads over
# (token 2), never a later task of the key; W1's writes are stale
$q->(q{SELECT count(*) FROM ntask_queue_set('ord', fairness => 'partition', ordered => true,
		lease => '6 seconds', max_attempts => 5);
	SELECT count(*) FROM generate_series(1, 3) i, ntask_enqueue('ord', 'a' || i, '{}', partition_key => 'A');
	SELECT count(*) FROM generate_series(1, 3) i, ntask_enqueue('ord', 'b' || i, '{}', partition_key => 'B')});
# twelve claims in one psql call: under load four calls took longer than
# the 3 s lease, and W1 took its own expired heads over
# the keys handed out; %otok: each key's tokens in claim order
my %otok;
my $claim_keys = sub {
	my ($w) = @_;
	my @got = split /\n/, $q->(join('', map {
		"SELECT t.task_key || ':' || c.token FROM ntask_claim('ord', '$w', 10) c $keyof;\n" } 1 .. 12));
	push @{ $otok{ (split /:/)[0] } }, (split /:/)[1] for @got;
	return join(',', sort map { (split /:/)[0] } @got);
};
is($claim_keys->('W1'), 'a1,b1', 'ordered: W1 gets only the head of each key');
my %oid = map { split /\|/ } split /\n/,
  $q->(q{SELECT task_key || '|' || task_id FROM ntask.task WHERE queue = 'ord'});
sleep 6.5;
is($claim_keys->('W2'), 'a1,b1', 'ordered: after the lease runs out W2 takes the same heads over');
ok($otok{a1}[1] > $otok{a1}[0] && $otok{b1}[1] > $otok{b1}[0], 'ordered: with higher tokens');
is($q->("SELECT result FROM ntask_transition($oid{a1}, $otok{a1}[0], 'succeeded')"), 'stale',
	'ordered: W1\'s late transition of a1 is stale');
is($q->("SELECT result FROM ntask_transition($oid{a1}, $otok{a1}[1], 'succeeded')"), 'applied',
	'ordered: W2 finishes a1');
is($q->("SELECT result FROM ntask_transition($oid{b1}, $otok{b1}[1], 'succeeded')"), 'applied', 'ordered: and b1');
is($claim_keys->('W2'), 'a2,b2', 'ordered: the next heads are a2 and b2');
is($q->("SELECT string_agg(result, ',') FROM (SELECT (ntask_transition(id, tok, 'succeeded')).result
	FROM unnest(ARRAY[$oid{a2}, $oid{b2}]::bigint[], ARRAY[$otok{a2}[0], $otok{b2}[0]]::bigint[]) u(id, tok)) x"),
	'applied,applied', 'ordered: both finished');
is($claim_keys->('W2'), 'a3,b3', 'ordered: then a3 and b3, the last of each key');
is($q->(q{SELECT string_agg(task_key, ',' ORDER BY s) FROM (
	SELECT t.task_key, min(a.claimed_at) AS s FROM ntask.attempt_all a
	JOIN ntask.task t ON t.task_id = a.task_id AND t.shard = a.shard
	WHERE t.queue = 'ord' AND t.partition_key = 'A' GROUP BY t.task_key) x}), 'a1,a2,a3',
	'ordered: key A\'s tasks were first handed out in their order, across the takeover');

# a per-key cap holds within the key's shard; a queue-wide cap is shared
# out by node (docs/scaling.md "Caps across nodes")
$q->(q{SELECT count(*) FROM ntask_queue_set('capk', fairness => 'partition', partition_max_inflight => 2);
	SELECT count(*) FROM generate_series(1, 5) i, ntask_enqueue('capk', 'p' || i, '{}', partition_key => 'P')});
$q->(join('', map { "SELECT count(*) FROM ntask_claim('capk', 'W1', 5);\n" } 1 .. 4));
is($q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'capk' AND state = 'leased'}), '2',
	'per-key cap: at most 2 of the key in flight after four claims of 5');
# max_inflight 4 over 8 shards, 4 on each worker node: each node holds
# ceil(4 * 4 / 8) = 2 leases of the queue, 4 in all; with 5, ceil(2.5) = 3
# each, 6 in all: the bound is cap + nodes - 1
my $node_leases = sub {
	$q->(qq{SELECT string_agg(n::text, ',' ORDER BY n) FROM (
		SELECT count(*) AS n FROM ntask.task t
		JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
		WHERE t.queue = '$_[0]' AND t.state = 'leased' GROUP BY p.groupid) x});
};
$q->(q{SELECT count(*) FROM ntask_queue_set('capped', max_inflight => 4, lease => '60 seconds');
	SELECT count(*) FROM generate_series(1, 40) i, ntask_enqueue('capped', 'c' || i, '{}')});
is($q->(q{SELECT count(DISTINCT p.groupid) FROM ntask.task t
	JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
	WHERE t.queue = 'capped' AND t.state = 'ready'}), '2', 'cap: the 40 tasks are on both worker nodes');
$q->(join('', map { "SELECT count(*) FROM ntask_claim('capped', 'W1', 10);\n" } 1 .. 6));
is($node_leases->('capped'), '2,2', 'cap 4: 2 leases on each node after six claims of 10 on the coordinator');
$w1->safe_psql('postgres', join('', map { "SELECT count(*) FROM ntask_claim('capped', 'W2', 10);\n" } 1 .. 3));
$w2->safe_psql('postgres', join('', map { "SELECT count(*) FROM ntask.shard_map s, LATERAL ntask_claim_on(s.shard, 'capped', 'W3', 10);\n" } 1 .. 2));
is($node_leases->('capped'), '2,2', 'cap 4: still 2 on each after claims on the worker nodes and shard-addressed ones');
$q->(q{SELECT count(*) FROM ntask_queue_set('capped', max_inflight => 5)});
$q->(join('', map { "SELECT count(*) FROM ntask_claim('capped', 'W1', 10);\n" } 1 .. 6));
is($node_leases->('capped'), '3,3', 'cap 5: 3 on each node, 6 in all (cap + nodes - 1)');
my ($cid, $ctok) = split /\|/, $q->(q{SELECT task_id || '|' || token FROM ntask.task WHERE queue = 'capped' AND state = 'leased' LIMIT 1});
$q->("SELECT result FROM ntask_transition($cid, $ctok, 'succeeded')");
is($q->(q{SELECT count(*) FROM ntask_claim('capped', 'W1', 10)}), '1', 'cap 5: a lease ended frees one place on its node');
# a rate limit is shared out by node too (docs/scaling.md "Rate limits
# across nodes"): each node's bucket runs at its share, so the claims must
# run on the node of the shard: refused on the coordinator, which holds no
# shard; on w1 (4 of the 8 shards) 4 per second is 2 per second, with a
# bucket of 4: in 3 s at most 2 x 3 + 4 = 10 (16 at the queue's whole rate)
$q->(q{SELECT count(*) FROM ntask_queue_set('ratel', rate_limit => '4/1 second', lease => '60 seconds');
	SELECT count(*) FROM generate_series(1, 60) i, ntask_enqueue('ratel', 'r' || i, '{}')});
($rc, $out, $stderr) = $co->psql('postgres', "\\set VERBOSITY verbose\nSELECT * FROM ntask_claim('ratel', 'W1')");
like($stderr, qr/0A000: ntask: queue "ratel" has a rate limit or a retry share, and on a distributed install its claims must run on the node that holds the shard/,
	'rate limit: a claim on the coordinator is refused (0A000)');
my $t0 = time;
my $rated = List::Util::sum(grep { /\d/ } split /\n/, $w1->safe_psql('postgres', join('',
	map { "SELECT count(*) FROM ntask_claim('ratel', 'R', 20); SELECT pg_sleep(0.25);\n" } 1 .. 12)));
my $took = time - $t0;
note("rate limit: $rated claimed on " . $w1->name . " in about $took s");
cmp_ok($rated, '>=', 4, 'rate limit: a worker node hands out its burst and its share');
cmp_ok($rated, '<=', 2 * ($took + 1) + 4, 'rate limit: at most its share (2/s) plus one bucket on that node');
# the retries' share, a ratio, holds on each node for its own claims: the
# same rule (on the node of the shard)
$q->(q{SELECT count(*) FROM ntask_queue_set('share', retry_share => 0.5, lease => '60 seconds');
	SELECT count(*) FROM generate_series(1, 16) i, ntask_enqueue('share', 's' || i, '{}')});
($rc, $out, $stderr) = $co->psql('postgres', "SELECT * FROM ntask_claim('share', 'S')");
like($stderr, qr/has a rate limit or a retry share, and on a distributed install its claims must run on the node that holds the shard/,
	'retry share: a claim on the coordinator is refused');
is($w1->safe_psql('postgres', "SELECT count(*) FROM ntask_claim('share', 'S', 16)"),
	$q->("SELECT count(*) FROM ntask.task t JOIN pg_dist_shard_placement p
		ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
		WHERE t.queue = 'share' AND p.nodeport = " . $w1->port),
	'retry share: on a worker node the first attempts of its shards all go');
is($q->(q{SELECT count(*) > 0 FROM ntask_explain(} . $a2 . q{)}), 't', 'ntask_explain runs');
is($q->(q{SELECT succeeded FROM ntask.queue_stats WHERE queue = 'ord'}), '4',
	'ntask.queue_stats runs');

# 8. housekeeping on a distributed install: every sweep once per shard
# value, each statement routed to the shard's node.  First as the SQL
# function, in the caller's transaction: expired leases of a spent budget
# go to repair_required, on both workers' shards.
my $claim_all = sub {
	my ($queue, $n) = @_;
	my @got;
	for (1 .. 20)
	{
		push @got, split /\n/,
		  $q->("SELECT task_id FROM ntask_claim('$queue', 'gone', $n)");
		last if @got >= $n;
	}
	return @got;
};
my $nodes_of = sub {
	$q->(qq{SELECT count(DISTINCT p.nodeport) FROM ntask.task t
		JOIN pg_dist_shard_placement p
		  ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
		WHERE t.queue = '$_[0]'});
};
$q->(q{SELECT count(*) FROM ntask_queue_set('hk', lease => '1 second', max_attempts => 1);
	SELECT count(*) FROM generate_series(1, 8) i, ntask_enqueue('hk', 'hk' || i, '{}')});
is($nodes_of->('hk'), '2', 'housekeeping: the hk tasks are on both workers');
is(scalar($claim_all->('hk', 8)), 8, 'housekeeping: 8 tasks claimed, their budget spent by the claim');
sleep 1.5;
my $hk_at = $q->('SELECT now()');
my ($expired, $repaired) = split /\|/,
  $q->(q{SELECT expired || '|' || repaired FROM ntask_housekeeping()});
cmp_ok($expired, '>=', 8, "ntask_housekeeping() runs on a distributed install ($expired expired leases released)");
is($q->(q{SELECT count(*) FROM ntask.task t JOIN ntask.attempt_all a ON a.task_id = t.task_id AND a.shard = t.shard
	WHERE t.queue = 'hk' AND t.state = 'repair_required' AND t.reason = 'budget_exhausted'
	  AND t.lease_until IS NULL AND a.result = 'lease_expired'}), '8',
	'housekeeping: the 8 expired leases of a spent budget are repair_required, their attempts lease_expired');
is($q->(qq{SELECT count(*) FROM ntask.task WHERE state = 'leased' AND lease_until < '$hk_at'}), '0',
	'housekeeping: no lease that had expired before it ran is left on any shard');

if ($long)
{
	# Then the background worker: on the coordinator it sweeps every shard and
	# dispatches http queues; on the worker nodes it idles (their ntask.task
	# is distributed through Citus' metadata sync, but their group is not 0).
	# Set up with the workers off: a deadline nobody meets, finished tasks past
	# a 1 s retention, an http queue.
	require NtaskProvider;
	my $pport = NtaskProvider::start('023');
	$q->(q{SELECT count(*) FROM ntask_queue_set('dl', total_deadline => '1 second');
		SELECT count(*) FROM generate_series(1, 8) i, ntask_enqueue('dl', 'dl' || i, '{}');
		SELECT count(*) FROM ntask_queue_set('ret', retention => '1 second');
		SELECT count(*) FROM generate_series(1, 8) i, ntask_enqueue('ret', 'ret' || i, '{}');});
	is($nodes_of->('dl'), '2', 'deadline: the dl tasks are on both workers');
	is($nodes_of->('ret'), '2', 'retention: the ret tasks are on both workers');
	my @ret = $claim_all->('ret', 8);
	is(scalar(@ret), 8, 'retention: 8 tasks claimed');
	is(join(',', map { $q->("SELECT result FROM ntask_transition($_, 1, 'succeeded')") } @ret),
		join(',', ('applied') x 8), 'retention: all 8 succeeded');
	my $ret_ids = join(',', @ret);
	$q->(qq{SELECT count(*) FROM ntask_queue_set('push', lease => '5 seconds')});

	# history past its retention: the audit of part 5 (replay, cancel) and the
	# slots of 'daily', one of which (the rerun) has an unfinished task
	cmp_ok($q->(q{SELECT count(*) FROM ntask.audit}), '>=', 1, 'history: the audit has rows');
	$q->(q{UPDATE ntask.audit SET at = now() - interval '400 days';
		UPDATE ntask.schedule_slot SET fired_at = now() - interval '400 days' WHERE schedule = 'daily'});

	my $wconf = "ntask.worker = on\nntask.naptime = '200ms'\n"
	  . "ntask.http_allowed_hosts = '127.0.0.1'\nntask.http_connect_timeout_ms = 1000\n";
	# pg_cron on the coordinator (where ntask_fire runs), when it is installed
	my $sharedir = `$ENV{PG_CONFIG} --sharedir` if $ENV{PG_CONFIG};
	$sharedir = `pg_config --sharedir` unless $sharedir;
	chomp $sharedir;
	my $have_cron = -f "$sharedir/extension/pg_cron.control";
	$co->append_conf('postgresql.conf',
		"shared_preload_libraries = 'citus,ntask,pg_cron'\ncron.database_name = 'postgres'\n")
	  if $have_cron;
	my %log_from;
	for my $n ($w1, $w2, $co)
	{
		$n->append_conf('postgresql.conf', $wconf);
		$log_from{ $n->name } = -s $n->logfile;
		$n->restart;
	}
	my $state_of = sub {
		my ($n, $want) = @_;
		my $st = '';
		for (1 .. 100)
		{
			$st = $n->safe_psql('postgres', 'SELECT state FROM ntask.worker_stats');
			last if $st eq $want;
			sleep 0.1;
		}
		return $st;
	};
	is($state_of->($co, 'running'), 'running', 'the coordinator\'s worker runs on a distributed install');
	for my $w ($w1, $w2)
	{
		is($state_of->($w, 'idle: citus worker node'), 'idle: citus worker node',
			'the worker of worker node ' . $w->name . ' idles');
	}

	# a schedule fired by pg_cron on the coordinator (pg_cron is created there
	# only: Citus would propagate CREATE EXTENSION to the workers, which do not
	# preload it); checked at the end of this part, after the next minute
	if ($have_cron)
	{
		$q->(q{SET citus.enable_ddl_propagation = off; CREATE EXTENSION pg_cron;
			SELECT count(*) FROM ntask_queue_set('cronq');
			SELECT count(*) FROM ntask_schedule('minutely', '* * * * *', 'cronq')});
	}

	my $poll = sub {
		my ($sql, $want, $secs) = @_;
		my $got = '';
		for (1 .. $secs * 10)
		{
			$got = $q->($sql);
			last if $got eq $want;
			sleep 0.1;
		}
		return $got;
	};
	is($poll->(q{SELECT count(*) FROM ntask.task WHERE queue = 'dl'
		AND state = 'repair_required' AND reason = 'deadline_exceeded' AND finished_at IS NOT NULL}, '8', 20),
		'8', 'deadline: the worker sent the 8 unclaimed tasks past their deadline to repair_required on both workers');
	is($poll->(qq{SELECT count(*) FROM ntask.task WHERE task_id IN ($ret_ids)}, '0', 20), '0',
		'retention: the worker pruned the 8 finished tasks on both workers\' shards');
	is($q->(qq{SELECT count(*) FROM ntask.attempt_all WHERE task_id IN ($ret_ids)}), '0',
		'retention: and their attempts');
	is($q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'chaos'}), '200',
		'retention: tasks within their retention stay');
	is($poll->(q{SELECT count(*) FROM ntask.audit WHERE at < now() - interval '300 days'}, '0', 20), '0',
		'history: the worker pruned the audit past ntask.audit_retention');
	is($poll->(q{SELECT string_agg(outcome, ',') FROM ntask.schedule_slot WHERE schedule = 'daily'}, 'rerun', 20),
		'rerun', 'history: and the schedule slots past ntask.history_retention but the one whose task is unfinished');

	# HTTP dispatch by the coordinator's worker: claimed shard by shard, each
	# result recorded by task id on its shard
	my $np = 16;
	# the target once ntask.http_allowed_hosts names its host (ntask_queue_set
	# refuses it before, issue 30.7)
	$q->(qq{SELECT count(*) FROM ntask_queue_set('push',
		target => '{"type": "http", "url": "http://127.0.0.1:$pport/send", "timeout_ms": 2000}')});
	$q->(qq{SELECT count(*) FROM generate_series(1, $np) i,
		ntask_enqueue('push', 'cz-' || i, jsonb_build_object('i', i))});
	is($nodes_of->('push'), '2', 'dispatch: the push tasks are on both workers');
	is($poll->(q{SELECT count(*) FROM ntask.task WHERE queue = 'push' AND state = 'succeeded'}, "$np", 30),
		"$np", "dispatch: all $np http tasks sent and succeeded");
	my $keys = NtaskProvider::pkeys('cz-');
	is(scalar(grep { $keys->{$_}{requests} == 1 && $keys->{$_}{effects} == 1 } keys %$keys), $np,
		"dispatch: the sink saw each of the $np keys exactly once");
	is($q->(q{SELECT count(*) || '/' || count(*) FILTER (WHERE a.token = t.token AND a.attempt = 1
			AND a.result = 'succeeded' AND a.invoked_at IS NOT NULL AND a.ended_at IS NOT NULL
			AND a.worker = 'ntask worker')
		FROM ntask.attempt_all a JOIN ntask.task t ON t.task_id = a.task_id AND t.shard = a.shard
		WHERE t.queue = 'push'}), "$np/$np",
		'dispatch: the ledger has one attempt per task, the task\'s token, invoked, succeeded, by the worker');
	is($q->(q{SELECT (dispatched >= 16 AND accepted >= 16)::text || ' ' || coalesce(last_error, '-')
		FROM ntask.worker_stats}), 'true -', 'dispatch: worker_stats counts them, no error');

	# lease rescue by the worker: an external worker claims and goes away; the
	# worker releases the expired leases on both workers' shards (retry_wait,
	# the attempt closed as lease_expired), as on one node
	$q->(q{SELECT count(*) FROM ntask_queue_set('resc', lease => '1 second', max_attempts => 3);
		SELECT count(*) FROM generate_series(1, 8) i, ntask_enqueue('resc', 'resc' || i, '{}')});
	is($nodes_of->('resc'), '2', 'lease rescue: the resc tasks are on both workers');
	is(scalar($claim_all->('resc', 8)), 8, 'lease rescue: an external worker claims 8 tasks and goes away');
	is($poll->(q{SELECT count(*) FROM ntask.task t JOIN ntask.attempt_all a ON a.task_id = t.task_id AND a.shard = t.shard
		WHERE t.queue = 'resc' AND t.state = 'retry_wait' AND t.lease_until IS NULL
		  AND a.result = 'lease_expired' AND a.ended_at IS NOT NULL}, '8', 20), '8',
		'lease rescue: the worker released the 8 expired leases (retry_wait, attempts lease_expired)');

	SKIP:
	{
		skip 'pg_cron is not installed', 2 unless $have_cron;
		is($q->(q{SELECT cron_job FROM ntask.schedule WHERE name = 'minutely'}), 'ntask:minutely',
			'schedule: ntask_schedule registered its pg_cron job on the coordinator');
		is($poll->(q{SELECT count(*) FROM ntask.schedule_slot s JOIN ntask.task t
			  ON t.task_id = s.task_id AND t.shard = (s.task_id >> 48)
			WHERE s.schedule = 'minutely' AND s.outcome = 'enqueued' AND t.queue = 'cronq'
			  AND t.task_key = ntask.slot_key('minutely', s.slot) LIMIT 1}, '1', 75), '1',
			'schedule: pg_cron fired the schedule on the coordinator: its slot\'s task is in its shard');
	}

	# a provider's rate limit holds one key (on_rate_limited => 'pause_key',
	# issue 35.5) on the distributed install: the coordinator's worker writes
	# the pause (ntask.key_pause and the queue row are reference tables; the
	# task's key is read by a routed statement first), and every claim passes
	# the key by in each shard, the worker's own, a worker node's and a
	# delegated one's
	NtaskProvider::prov('POST', '/_admin/rules',
		{ rules => { 'rkz-a1' => [ { status => 429, retry_after => 20 }, { status => 200 } ] } });
	$q->(qq{SELECT count(*) FROM ntask_queue_set('rkq', max_attempts => 10,
		backoff_base => '50 ms', backoff_max => '100 ms', lease => '5 s', on_rate_limited => 'pause_key',
		target => '{"type": "http", "url": "http://127.0.0.1:$pport/send", "timeout_ms": 1500}')});
	$q->(q{SELECT count(*) FROM ntask_enqueue('rkq', 'rkz-a1', '{}', partition_key => 'A')});
	is($poll->(q{SELECT count(*) FROM ntask.key_pause k JOIN ntask.queue q USING (queue)
		WHERE k.queue = 'rkq' AND k.partition_key = 'A' AND k.until > now() + interval '3 s'
		  AND q.keys_paused_until = k.until AND k.shard = ntask_shard('rkq', 'A')}, '1', 20), '1',
		'key pause: a 429 with Retry-After 20 s pauses key A of the http queue (the key\'s row, its shard, the queue row)');
	my $rk_until = $q->(q{SELECT extract(epoch FROM until) FROM ntask.key_pause
		WHERE queue = 'rkq' AND partition_key = 'A'});
	$q->(q{SELECT count(*) FROM ntask_enqueue('rkq', 'rkz-a2', '{}', partition_key => 'A');
		SELECT count(*) FROM ntask_enqueue('rkq', 'rkz-b1', '{}', partition_key => 'B')});
	is($poll->(q{SELECT state FROM ntask.task WHERE task_key = 'rkz-b1'}, 'succeeded', 20), 'succeeded',
		'key pause: the task of key B goes out meanwhile');
	my $rk_claimed = join(',', map { $_->safe_psql('postgres',
		q{SELECT count(*) FROM ntask_claim('rkq', 'ext', 10)}) } ($co, $w1, $w2));
	$rk_claimed .= ',' . $q->(q{SELECT count(*) FROM ntask_claim_on(ntask_shard('rkq', 'A'), 'rkq', 'ext', 10)});
	ok(time < $rk_until, 'key pause: the checks below ran before the pause ended')
	  or diag('the checks came too late to tell');
	is($rk_claimed, '0,0,0,0',
		'key pause: a claim on the coordinator, on each worker node and delegated to the key\'s shard hands out nothing');
	is($q->(q{SELECT state FROM ntask.task WHERE task_key = 'rkz-a2'}), 'ready',
		'key pause: the other task of key A waits');
	is(scalar(grep { $_->{requests} } values %{ NtaskProvider::pkeys('rkz-a2') }), 0,
		'key pause: the provider saw nothing of it');

	# about ten ticks more: nothing fails every tick, anywhere
	sleep 2;
	for my $n ($co, $w1, $w2)
	{
		my $log = substr(PostgreSQL::Test::Utils::slurp_file($n->logfile), $log_from{ $n->name });
		# the restarts above: Citus' maintenance daemon of a node restarted
		# before the coordinator loses its connection to it when the coordinator
		# restarts (Citus' own ERROR, not ntask's; seen once in CI)
		$log =~ s/^[^\n]*ERROR:  terminating connection due to administrator command\n[^\n]*CONTEXT:  while executing command on [^\n]*\n\s*Citus maintenance daemon[^\n]*\n//mg;
		unlike($log, qr/ntask worker: .* failed|ERROR:/,
			'no step of the worker failed and nothing logged an ERROR on ' . $n->name);
	}
	for my $w ($w1, $w2)
	{
		my $log = substr(PostgreSQL::Test::Utils::slurp_file($w->logfile), $log_from{ $w->name });
		my @said = ($log =~ /this node is a worker node; the coordinator's ntask worker serves the cluster/g);
		is(scalar @said, 1, 'worker node ' . $w->name . ' says once that it idles');
	}
	is($co->safe_psql('postgres', q{SELECT expired_leases >= 8 AND repaired >= 8 AND pruned >= 8
		FROM ntask.worker_stats}), 't', 'worker_stats counts the sweeps (leases, repairs, pruned rows)');

	# a worker node down: the coordinator's worker sweeps each shard in its
	# own transaction, so the shards of the node still up are swept on time
	# while the down node's steps fail (logged) until it is back
	$q->(q{SELECT count(*) FROM ntask_queue_set('dl2', total_deadline => '1 second');
		SELECT count(*) FROM generate_series(1, 8) i, ntask_enqueue('dl2', 'dl2-' || i, '{}')});
	is($nodes_of->('dl2'), '2', 'node down: the dl2 tasks are on both workers');
	my $up_shards = $q->(q{SELECT string_agg(s.shard::text, ',') FROM ntask.shard_map s
		JOIN pg_dist_shard_placement p
		  ON p.shardid = get_shard_id_for_distribution_column('ntask.task', s.shard)
		WHERE p.nodeport = } . $w1->port);
	my $on_up = $q->(qq{SELECT count(*) FROM ntask.task WHERE queue = 'dl2' AND shard IN ($up_shards)});
	cmp_ok($on_up, '>=', 1, "node down: $on_up of the 8 tasks are on " . $w1->name);
	# and the calls on the node still up go on: an expired lease released by
	# housekeeping, a release, each writing its ledger row in routed statements
	# (before, an INSERT ... SELECT or a CTE was sent to every node: failed
	# while one was down, whatever the shard, and so did the whole sweep of a
	# shard with an expired lease)
	my $up1 = (split /,/, $up_shards)[0];
	$q->(qq{SELECT count(*) FROM ntask_queue_set('nd', lease => '30 seconds');
		SELECT count(*) FROM ntask_queue_set('ndx', lease => '3 seconds', max_attempts => 5);
		SELECT count(*) FROM (SELECT 'n' || i AS k FROM generate_series(1, 1000) i
			WHERE ntask_shard('nd', 'n' || i) = $up1 LIMIT 1) x, ntask_enqueue('nd', x.k, '{}');
		SELECT count(*) FROM (SELECT 'x' || i AS k FROM generate_series(1, 1000) i
			WHERE ntask_shard('ndx', 'x' || i) = $up1 LIMIT 1) x, ntask_enqueue('ndx', x.k, '{}')});
	my ($nd_id, $nd_tok) = split / /, $q->(qq{SELECT task_id || ' ' || token FROM ntask_claim_on(${up1}::smallint, 'nd', 'N', 1)});
	my $ndx = $q->(qq{SELECT task_id FROM ntask_claim_on(${up1}::smallint, 'ndx', 'X', 1)});
	$log_from{ $co->name } = -s $co->logfile;
	$w2->stop('immediate');
	is($poll->(qq{SELECT count(*) FROM ntask.task WHERE queue = 'dl2' AND shard IN ($up_shards)
		AND state = 'repair_required' AND reason = 'deadline_exceeded'}, $on_up, 20), $on_up,
		'node down: the deadlines on the node still up are enforced while ' . $w2->name . ' is down');
	is($poll->(qq{SELECT t.state || ' ' || a.result FROM ntask.task t JOIN ntask.attempt a USING (task_id, shard)
		WHERE t.task_id = $ndx AND t.shard = $up1}, 'retry_wait lease_expired', 20), 'retry_wait lease_expired',
		'node down: an expired lease on the node still up is released by housekeeping, its attempt closed');
	my ($nd_rc, $nd_out, $nd_err) = $co->psql('postgres', "SELECT ntask_release($nd_id, $nd_tok)");
	is($nd_out, 'applied', 'node down: a release of a task on the node still up') or diag($nd_err);
	is($q->(qq{SELECT string_agg(result, ',') FROM ntask.attempt WHERE task_id = $nd_id AND shard = $up1}), 'released',
		'node down: and its ledger row');
	$w2->start;
	is($poll->(q{SELECT count(*) FROM ntask.task WHERE queue = 'dl2'
		AND state = 'repair_required' AND reason = 'deadline_exceeded'}, '8', 30), '8',
		'node down: once it is back, the rest too');
	my $downlog = substr(PostgreSQL::Test::Utils::slurp_file($co->logfile), $log_from{ $co->name });
	like($downlog, qr/ntask worker: ntask housekeeping of a shard failed/,
		'node down: the down node\'s shard steps failed, logged');
}
else
{
	note('skipped without NTASK_CITUS_LONG=1: the background worker, pg_cron, dispatch, key pauses, a node down');
}

# 9. fences and waiting claims on the distributed install.  Fences: the
# statement timestamp of the upsert is a parameter (Citus refuses a
# non-immutable function in DO UPDATE SET), and ntask_fence is a
# distributed function co-located with ntask.fence by fence_key, so a
# call is delegated to the node of its fence: one hop, from the
# coordinator and from a worker node.
is($q->(q{SELECT d.distribution_argument_index || ' ' ||
		(d.colocationid = p.colocationid)::text
	FROM pg_dist_object d, pg_dist_partition p
	WHERE d.objid = 'ntask_fence(text,bigint,jsonb)'::regprocedure
	  AND p.logicalrelid = 'ntask.fence'::regclass}), '0 true',
	'fence: ntask_fence is distributed by fence_key, co-located with ntask.fence');
my $fence_node = sub {
	$q->(qq{SELECT p.nodeport FROM pg_dist_shard_placement p
		WHERE p.shardid = get_shard_id_for_distribution_column('ntask.fence', '$_[0]'::text)});
};
# one fence key on each worker node
my %fkey;
for my $i (1 .. 40)
{
	my $k = "cfg:doc-$i:host";
	$fkey{ $fence_node->($k) } //= $k;
	last if keys %fkey == 2;
}
is(join(',', sort keys %fkey), join(',', sort($w1->port, $w2->port)),
	'fence: a key on each worker node');
my $fence = sub {
	my ($node, $key, $token, $payload, %o) = @_;
	my ($frc, $fout, $ferr) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSET client_min_messages = debug1;\n"
		  . "SELECT ntask_fence('$key', $token, '$payload')",
		extra_params => $o{user} ? [ '-U', $o{user} ] : []);
	return ($fout, $ferr);
};
for my $port (sort keys %fkey)
{
	my $k = $fkey{$port};
	my ($r, $e) = $fence->($co, $k, 2, '{"v": 2}');
	is($r, 'applied', "fence on node $port from the coordinator: token 2 applied");
	like($e, qr/pushing down the function call/, "fence on node $port: the call is delegated");
	unlike($e, qr/ERROR/, "fence on node $port: no error");
	is(($fence->($co, $k, 1, '{"v": 1}'))[0], 'stale', "fence on node $port: a lower token is stale");
	is(($fence->($co, $k, 2, '{"v": 2}'))[0], 'duplicate',
		"fence on node $port: the same token and payload: duplicate");
	is(($fence->($co, $k, 2, '{"v": 9}'))[0], 'conflict',
		"fence on node $port: the same token, another payload: conflict");
	is(($fence->($co, $k, 3, '{"v": 3}'))[0], 'applied', "fence on node $port: token 3 applied");
	is(($fence->($co, $k, 2, '{"v": 2}'))[0], 'duplicate',
		"fence on node $port: a late retry of token 2 (it applied once): duplicate");
	# from a client connected to a worker node: the other node's fence is
	# delegated there, the node's own runs where the client is
	($r, $e) = $fence->($w1, $k, 4, '{"v": 4}');
	is($r, 'applied', "fence on node $port from worker node " . $w1->name . ': token 4 applied');
	like($e, $port == $w1->port ? qr/not pushing down function to the same node/
		  : qr/pushing down the function call/,
		"fence on node $port from worker node " . $w1->name . ': '
		  . ($port == $w1->port ? 'run where the client is' : 'delegated to its node'));
	is(($fence->($w2, $k, 3, '{"v": 3}'))[0], 'duplicate',
		"fence on node $port from worker node " . $w2->name . ': token 3 again: duplicate');
	is(($fence->($w2, $k, 1, '{"v": 1}'))[0], 'stale',
		"fence on node $port from worker node " . $w2->name . ': token 1: stale');
	# in a transaction block with the business write (the documented use):
	# Citus does not delegate there, each statement is routed by the key
	is($q->(qq{BEGIN; SELECT ntask_fence('$k', 5, '{"v": 5}'); SELECT ntask_fence('$k', 1, '{}'); COMMIT;}),
		"applied\nstale", "fence on node $port: in a transaction block, applied then stale");
	is($q->(qq{SELECT token || ' ' || (SELECT string_agg(r.token::text, ',' ORDER BY r.token)
		FROM ntask.fence_receipt r WHERE r.fence_key = f.fence_key)
		FROM ntask.fence f WHERE f.fence_key = '$k'}), '5 2,3,4,5',
		"fence on node $port: the watermark 5, a receipt per applied token");
}
# a fence grant: a key under the prefix only for members of its role, from
# any node (roles are propagated by Citus); granting again updates the row
# (the upsert Citus refused with statement_timestamp())
$q->(q{CREATE ROLE fence_a LOGIN; CREATE ROLE fence_b LOGIN; CREATE ROLE fence_grp;
	GRANT ntask_worker TO fence_a, fence_b; GRANT fence_grp TO fence_a;
	SELECT ntask_fence_grant('cfg:', 'ntask_worker');});
is($q->(q{SELECT count(*) FROM (SELECT ntask_fence_grant('cfg:', 'fence_grp')) x}), '1',
	'fence grant: granted again to another role (the upsert runs)');
is($q->(q{SELECT role FROM ntask.fence_grant WHERE prefix = 'cfg:'}), 'fence_grp',
	'fence grant: the reference table holds the new role');
for my $port (sort keys %fkey)
{
	my $k = $fkey{$port};
	for my $n ($co, $w1)
	{
		my ($r, $e) = $fence->($n, $k, 6, '{"v": 6}', user => 'fence_b');
		like($e, qr/42501: ntask: permission denied for fence/,
			"fence grant: fence_b (not in the role) refused 42501 on node $port from " . $n->name);
	}
	is(($fence->($w2, $k, 6, '{"v": 6}', user => 'fence_a'))[0], 'applied',
		"fence grant: fence_a (a member) applies on node $port from " . $w2->name);
	is(($fence->($co, $k, 6, '{"v": 6}', user => 'fence_a'))[0], 'duplicate',
		"fence grant: fence_a again from the coordinator: duplicate");
}
$q->(q{SELECT ntask_fence_grant('cfg:', NULL)});
is($q->(q{SELECT count(*) FROM ntask.fence_grant}), '0', 'fence grant: removed');

if ($long)
{
	# Waiting claims: a claim with wait on the coordinator sleeps until a
	# commit of a task of its queue wakes it (a commit on the node that ran the
	# enqueue: the coordinator here); its look walks the shards, and its next
	# due lookup asks each shard value (Citus refuses the priority walk's
	# recursive CTE over every shard).
	$q->(q{SELECT count(*) FROM ntask_queue_set('wq', lease => '30 seconds')});
	my $epoch = q{extract(epoch from clock_timestamp())};
	my $waiter = sub {
		my ($max, $wait) = @_;
		my $bs = $co->background_psql('postgres', on_error_stop => 0);
		$bs->query_until(qr/start/, qq{\\echo start
	SELECT 'got:' || count(*) || ':' || coalesce(string_agg(task_key, ','), '') || ':' || $epoch
	FROM ntask_claim('wq', 'WW', $max, wait => '$wait');
	\\echo done
	});
		return $bs;
	};
	my $waiter_end = sub {
		my ($bs) = @_;
		pump_until($bs->{run}, $bs->{timeout}, \$bs->{stdout}, qr/done/);
		my ($o, $e) = ($bs->{stdout}, $bs->{stderr});
		$bs->quit;
		my ($n, $keys, $at) = $o =~ /got:(\d+):([^:]*):([\d.]+)/;
		return ($n, $keys, $at, $e);
	};
	my @lat;
	my %wnodes;
	for my $i (1 .. 4)
	{
		my $bs = $waiter->(1, '5 seconds');
		$co->poll_query_until('postgres', q{SELECT count(*) = 1 FROM ntask.waiters WHERE queue = 'wq'})
		  or diag('the waiter did not register');
		sleep 0.5;
		my ($e0, $id, $e1) = split /\|/, $q->(qq{SELECT $epoch; SELECT task_id FROM ntask_enqueue('wq', 'wk$i', '{}'); SELECT $epoch}) =~ s/\n/|/gr;
		my ($n, $keys, $at, $err) = $waiter_end->($bs);
		is("$n $keys", "1 wk$i", "waiting claim $i: woken by the enqueue, claimed wk$i")
		  or diag($err);
		push @lat, $at - $e1;
		cmp_ok($at - $e0, '<', 2, sprintf('waiting claim %d: returned %.0f ms after the enqueue committed (wait 5 s)',
			$i, 1000 * ($at - $e1)));
		$wnodes{ $q->(qq{SELECT p.nodeport FROM pg_dist_shard_placement p
			WHERE p.shardid = get_shard_id_for_distribution_column('ntask.task', ($id >> 48)::smallint)}) } = 1;
	}
	is(scalar(keys %wnodes), 2, 'waiting claims: the woken tasks were on both worker nodes');
	@lat = sort { $a <=> $b } @lat;
	note(sprintf('waiting claim: wake latency (enqueue commit seen by its client to the claim\'s return) '
		. '%s ms, median %.0f ms', join(' ', map { sprintf('%.0f', 1000 * $_) } @lat),
		1000 * ($lat[1] + $lat[2]) / 2));
	# a batch over both nodes (a two-phase commit): the waiter of 8 is woken
	# after the worker nodes committed.  Citus sends COMMIT PREPARED in its
	# commit callback, after ntask's: a wake there found nothing and the
	# waiter slept to the end of its wait.  Each commit on the worker nodes is
	# made 100 ms slower (commit_delay, which needs fsync) to show it.
	my $slow_commits = sub {
		my ($on) = @_;
		for my $w ($w1, $w2)
		{
			$w->safe_psql('postgres', $on
				? "ALTER SYSTEM SET fsync = on;\nALTER SYSTEM SET commit_delay = 100000;\n"
				  . "ALTER SYSTEM SET commit_siblings = 0;\nSELECT pg_reload_conf();"
				: "ALTER SYSTEM RESET fsync;\nALTER SYSTEM RESET commit_delay;\n"
				  . "ALTER SYSTEM RESET commit_siblings;\nSELECT pg_reload_conf();");
		}
	};
	$slow_commits->(1);
	{
		my $bs = $waiter->(8, '5 seconds');
		$co->poll_query_until('postgres', q{SELECT count(*) = 1 FROM ntask.waiters WHERE queue = 'wq'})
		  or diag('the waiter did not register');
		sleep 0.5;
		my ($e0, $nb, $e1) = split /\|/, $q->(qq{SELECT $epoch;
			SELECT count(*) FROM ntask_enqueue_many('wq', (SELECT array_agg('wb' || i) FROM generate_series(1, 8) i),
				(SELECT array_agg('{}'::jsonb) FROM generate_series(1, 8) i)); SELECT $epoch}) =~ s/\n/|/gr;
		is($nodes_of->('wq'), '2', 'waiting claim: the batch\'s tasks are on both worker nodes');
		my ($n, $keys, $at, $err) = $waiter_end->($bs);
		cmp_ok($n, '>=', 1, "waiting claim of 8: woken by enqueue_many over both nodes ($n claimed)")
		  or diag($err);
		cmp_ok($at - $e0, '<', 2, sprintf('waiting claim of 8: returned %.0f ms after the batch committed',
			1000 * ($at - $e1)));
		$slow_commits->(0);
		$q->(q{SELECT count(*) FROM ntask_claim('wq', 'WW', 8)}) for 1 .. 8;
	}
	is($q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'wq' AND state = 'ready'}), '0',
		'waiting claim: nothing of wq is left to claim');
	# nothing comes: the claim returns no row when its wait ends
	{
		my $t0 = time;
		my $got = $q->(q{SELECT count(*) FROM ntask_claim('wq', 'WW', 1, wait => '2 seconds')});
		my $took = time - $t0;
		is($got, '0', 'waiting claim: nothing enqueued, no task');
		ok($took >= 1.9 && $took < 4, sprintf('waiting claim: it returned when its 2 s wait ended (%.2f s)', $took));
	}
	# a task that comes due later (run_at in 1 s): found by the next due lookup
	# on its shard, claimed when due without a commit to wake the waiter
	{
		$q->(q{SELECT count(*) FROM ntask_enqueue('wq', 'later', '{}', run_at => clock_timestamp() + interval '1 second')});
		my $t0 = time;
		my $got = $q->(q{SELECT string_agg(task_key, ',') FROM ntask_claim('wq', 'WW', 1, wait => '5 seconds')});
		my $took = time - $t0;
		is($got, 'later', 'waiting claim: a task due in 1 s is claimed when due');
		ok($took < 3, sprintf('waiting claim: after %.2f s of a 5 s wait', $took));
	}
	is($q->(q{SELECT count(*) FROM ntask.waiters}), '0', 'waiting claim: no waiter slot is left');
}
else
{
	note('skipped without NTASK_CITUS_LONG=1: waiting claims');
}

# 10. one hop (issue 34; docs/scaling.md "One hop: delegated calls"):
# ids drawn on any node, the shard-addressed forms delegated to the
# shard's node, a client on a worker node
my %group;
for my $n ($co, $w1, $w2)
{
	$group{ $n->name } = $n->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group');
	is($n->safe_psql('postgres', q{SELECT seqmin || ' ' || seqmax FROM pg_sequence
		WHERE seqrelid = 'ntask.task_task_id_seq'::regclass}),
		(($group{ $n->name } << 40) + 1) . ' ' . ((($group{ $n->name } + 1) << 40) - 1),
		'ids: ' . $n->name . ' (group ' . $group{ $n->name } . ') draws task ids from its own range');
}
is($q->(q{SELECT count(*) FROM pg_dist_object o
	WHERE o.classid = 'pg_proc'::regclass AND o.distribution_argument_index = 0
	  AND o.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'ntask.task'::regclass)
	  AND o.objid::regprocedure::text LIKE 'ntask\_%\_on(%'}), '10',
	'the ten shard-addressed forms are distributed functions, by shard, co-located with ntask.task');
$q->(q{SELECT count(*) FROM ntask_queue_set('hop', lease => '30 seconds', max_attempts => 3)});
# the real planner delegates a call outside a transaction block, and not inside one
($rc, $out, $stderr) = $co->psql('postgres', q{SET client_min_messages = debug1;
	SELECT created FROM ntask_enqueue_on(ntask_shard('hop', 'k1'), 'hop', 'k1', '{}')});
like($stderr, qr/pushing down the function call/, 'one hop: an enqueue_on is delegated to the shard\'s node');
is($out, 't', 'one hop: and enqueued');
($rc, $out, $stderr) = $co->psql('postgres', q{SET client_min_messages = debug1; BEGIN;
	SELECT created FROM ntask_enqueue_on(ntask_shard('hop', 'k1'), 'hop', 'k1', '{}'); COMMIT;});
unlike($stderr, qr/pushing down the function call/, 'one hop: in a transaction block it runs where it is called');
is($out, 'f', 'one hop: routed, the same answer (a duplicate)');
# 20 keys through the forms, from the coordinator and from both worker nodes
for my $i (1 .. 20)
{
	my $n = ($co, $w1, $w2)[ $i % 3 ];
	$n->safe_psql('postgres',
		"SELECT created FROM ntask_enqueue_on(ntask_shard('hop', 'h$i'), 'hop', 'h$i', '{\"i\": $i}')");
}
is($q->(q{SELECT count(*) || ' ' || count(DISTINCT task_id) || ' ' || count(DISTINCT shard)
	FROM ntask.task WHERE queue = 'hop' AND task_key LIKE 'h%'}),
	'20 20 ' . $q->(q{SELECT count(DISTINCT ntask_shard('hop', 'h' || i)) FROM generate_series(1, 20) i}),
	'one hop: 20 tasks, 20 ids, over the shards their keys hash to');
# a delegated enqueue draws its id on the shard's node: the id's group bits
# name the node that holds the task
is($q->(q{SELECT count(*) FROM ntask.task t
	JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', t.shard)
	WHERE t.queue = 'hop' AND t.task_key LIKE 'h%'
	  AND ((t.task_id & ((1::bigint << 48) - 1)) >> 40) <> p.groupid}), '0',
	'one hop: each id was drawn on the node of its shard (the call ran there)');
# the worker's loop through the forms: claim from a shard, heartbeat,
# invoked, transition_and_claim from the same shard, release, a batch
my $hop_shard = $q->(q{SELECT ntask_shard('hop', 'h1')});
# three more tasks of that shard (keys picked by their shard)
$q->(qq{SELECT count(*) FROM (SELECT 'x' || i AS k FROM generate_series(1, 500) i
	WHERE ntask_shard('hop', 'x' || i) = $hop_shard LIMIT 3) x, ntask_enqueue('hop', x.k, '{}')});
my $n_in_shard = $q->(qq{SELECT count(*) FROM ntask.task WHERE queue = 'hop' AND shard = $hop_shard AND state = 'ready'});
my ($hid, $htok) = split /\|/, $q->(qq{SELECT task_id || '|' || token FROM ntask_claim_on(${hop_shard}::smallint, 'hop', 'W', 1)});
is($q->("SELECT ntask_shard(${hid}::bigint) = $hop_shard"), 't', 'claim_on: the task is of the shard named');
is($q->("SELECT ntask_heartbeat_on(ntask_shard(${hid}::bigint), $hid, $htok) > now()"), 't', 'heartbeat_on');
is($q->("SELECT ntask_invoked_on(ntask_shard(${hid}::bigint), $hid, $htok)"), 'applied', 'invoked_on');
my $next = $q->(qq{SELECT count(*) || ' ' || bool_and(ntask_shard(task_id) = $hop_shard) || ' ' || min(finish_result)
	FROM ntask_transition_and_claim_on(${hop_shard}::smallint, $hid, $htok, 'succeeded', 'hop', 'W', 5)});
is($next, List::Util::min(5, $n_in_shard - 1) . ' true applied',
	'transition_and_claim_on: finished, and the next tasks from the same shard only');
my $left = $q->(qq{SELECT string_agg(task_id::text, ',' ORDER BY task_id) FROM ntask.task WHERE queue = 'hop' AND state = 'leased'});
if ($left)
{
	is($q->(qq{SELECT string_agg(result, ',') FROM ntask_transition_many_on(${hop_shard}::smallint, ARRAY[$left]::bigint[],
		(SELECT array_agg(token ORDER BY task_id) FROM ntask.task WHERE task_id = ANY(ARRAY[$left]::bigint[])), 'succeeded')}),
		join(',', ('applied') x scalar(my @l = split /,/, $left)), 'transition_many_on: the batch of one shard');
}
($rc, $out, $stderr) = $co->psql('postgres', "SELECT * FROM ntask_transition_on(($hop_shard + 1)::smallint, $hid, $htok, 'succeeded')");
like($stderr, qr/is in shard $hop_shard|is not a shard of this install/, 'transition_on: the wrong shard is refused');
# a client connected to a worker node: its plain claim walks the shards
# that node holds; the forms reach the other node's shards in one hop
$q->(q{SELECT count(*) FROM ntask_queue_set('local', lease => '30 seconds');
	SELECT count(*) FROM generate_series(1, 24) i, ntask_enqueue('local', 'l' || i, '{}')});
my $w1_shards = $q->(q{SELECT string_agg(s.shard::text, ',' ORDER BY s.shard) FROM ntask.shard_map s
	JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', s.shard)
	WHERE p.nodeport = } . $w1->port);
my $on_w1 = $q->("SELECT count(*) FROM ntask.task WHERE queue = 'local' AND shard IN ($w1_shards)");
cmp_ok($on_w1, '>=', 1, "worker client: $on_w1 of 24 tasks are on " . $w1->name);
my @w1_got = map { split /\n/ } map { $w1->safe_psql('postgres', "SELECT task_id FROM ntask_claim('local', 'W1', 50)") } 1 .. 6;
my %w1_sh = map { (($_ >> 48) => 1) } @w1_got;
is(join(",", sort keys %w1_sh) . ' ' . scalar(@w1_got),
	$q->("SELECT string_agg(DISTINCT shard::text, ',' ORDER BY shard::text) || ' ' || count(*)
	FROM ntask.task WHERE queue = 'local' AND shard IN ($w1_shards)"),
	'worker client: a plain claim on ' . $w1->name . ' takes every task of its own shards, and none of the other node\'s');
my $w2_shard = $q->(qq{SELECT min(shard) FROM ntask.task WHERE queue = 'local' AND shard NOT IN ($w1_shards)});
($rc, $out, $stderr) = $w1->psql('postgres', qq{SET client_min_messages = debug1;
	SELECT count(*) FROM ntask_claim_on(${w2_shard}::smallint, 'local', 'W1', 50)});
like($stderr, qr/pushing down the function call/, 'worker client: claim_on of the other node\'s shard is delegated there');
is($out, $q->("SELECT count(*) FROM ntask.task WHERE queue = 'local' AND shard = $w2_shard AND state = 'leased'"),
	'worker client: and leased that shard\'s tasks');

# the rest of the 1.0 API on the distributed install: pause and resume,
# trace context, progress, a result
$q->(q{SELECT count(*) FROM ntask_queue_set('rest', lease => '30 seconds');
	SELECT count(*) FROM ntask_enqueue('rest', 'r1', '{}',
		traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')});
is($q->(q{SELECT ntask_queue_pause('rest', 'ops', 'maintenance')}), 't', 'pause: applied');
is($q->(q{SELECT count(*) FROM ntask_claim('rest', 'R', 5)}), '0', 'pause: the claim hands out nothing');
is($q->(q{SELECT count(*) FROM ntask_claim_on(ntask_shard('rest', 'r1'), 'rest', 'R', 5)}), '0',
	'pause: nor a shard-addressed claim');
is($q->(q{SELECT ntask_queue_resume('rest', 'ops', 'done')}), 't', 'resume: applied');
my ($rtid, $rtok, $rctx) = split /\|/, $q->(q{SELECT task_id || '|' || token || '|'
	|| (context->>'traceparent' LIKE '00-0af7651916cd43dd8448eb211c80319c-%') FROM ntask_claim('rest', 'R', 5)});
is($rctx, 'true', 'trace context: the claim carries the enqueue\'s trace id');
is($q->(qq{SELECT ntask_heartbeat($rtid, $rtok, progress => '{"done": 3}') IS NOT NULL}), 't',
	'progress: a heartbeat with progress');
is($q->(qq{SELECT progress->>'done' FROM ntask.task_progress WHERE task_id = $rtid}), '3',
	'progress: ntask.task_progress shows it');
$q->(qq{SELECT result FROM ntask_transition($rtid, $rtok, 'succeeded', result => '{"ok": true}')});
is($q->(q{SELECT state || ' ' || (result->>'ok') FROM ntask_result('rest', 'r1')}), 'succeeded true',
	'ntask_result reads the task on its shard');

# 12. a shard moved (citus_move_shard_placement, as the rebalancer moves
# them): a backend on w1 that read its placements before the move claims
# from the shard that came to w1, and shares out a cap by the new count
# (5 of 8 shards: 3 of cap 4), without reconnecting.  Before, a backend
# kept the placements it read first (failed first: nothing claimed, 2).
# Part 11 takes its shard from $w1_shards, read before the move.
{
	require DBI;
	my $dbh = DBI->connect('dbi:Pg:dbname=postgres;host=' . $w1->host . ';port=' . $w1->port, '', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	my $mv_claim = sub {
		my ($queue) = @_;
		return $dbh->selectcol_arrayref("SELECT task_id || ':' || token FROM ntask_claim('$queue', 'M', 10)");
	};
	my $w1_count = $q->(q{SELECT count(*) FROM ntask.shard_map s
		JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', s.shard)
		WHERE p.nodeport = } . $w1->port);
	$q->(q{SELECT count(*) FROM ntask_queue_set('mv', lease => '30 seconds');
		SELECT count(*) FROM ntask_queue_set('mvcap', lease => '30 seconds', max_inflight => 4);
		SELECT count(*) FROM generate_series(1, 40) i, ntask_enqueue('mvcap', 'c' || i, '{}')});
	# the backend reads its placements: its own shards, and the cap's shares
	my $before = $mv_claim->('mvcap');
	is(scalar(@$before) . ' ' . $w1_count, '2 4', 'shard moved: before, w1 holds 4 of 8 shards and 2 of cap 4');
	for my $t (@$before)
	{
		my ($id, $tok) = split /:/, $t;
		$dbh->selectrow_array("SELECT ntask_transition($id, $tok, 'succeeded')");
	}
	my $mv_shard = $q->(q{SELECT min(s.shard) FROM ntask.shard_map s
		JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('ntask.task', s.shard)
		WHERE p.nodeport = } . $w2->port);
	$q->("SELECT citus_move_shard_placement(get_shard_id_for_distribution_column('ntask.task', ${mv_shard}::smallint),
		'127.0.0.1', " . $w2->port . ", '127.0.0.1', " . $w1->port . ", shard_transfer_mode => 'block_writes')");
	is($q->(qq{SELECT p.nodeport FROM pg_dist_shard_placement p
		WHERE p.shardid = get_shard_id_for_distribution_column('ntask.task', ${mv_shard}::smallint)}), $w1->port,
		"shard moved: shard $mv_shard is on " . $w1->name);
	# a task of the moved shard only
	$q->(qq{SELECT count(*) FROM (SELECT 'm' || i AS k FROM generate_series(1, 1000) i
		WHERE ntask_shard('mv', 'm' || i) = $mv_shard LIMIT 1) x, ntask_enqueue('mv', x.k, '{}')});
	my $got = $mv_claim->('mv');
	is(join(',', map { (split /:/)[0] >> 48 } @$got), $mv_shard,
		'shard moved: the same backend on ' . $w1->name . ' claims the task of the shard that came to it');
	is(scalar(@{ $mv_claim->('mvcap') }), 3, 'shard moved: and holds 3 of cap 4 (5 of 8 shards)');
	$dbh->disconnect;
}

# 11. the token floor comes from the node that holds the row (docs/scaling.md
# "Task ids and tokens"): a standby of w1, promoted (WAL timeline 2),
# takes w1's place; a claim of a task of w1's shards issues a token above
# every token timeline 1 can have issued (> 2^48), whether it runs on that
# node (delegated) or on the coordinator, whose timeline is still 1
$q->(q{SELECT count(*) FROM ntask_queue_set('tl', lease => '30 seconds');
	SELECT count(*) FROM generate_series(1, 32) i, ntask_enqueue('tl', 't' || i, '{}')});
my $tl_shard = $q->(qq{SELECT min(shard) FROM ntask.task WHERE queue = 'tl' AND shard IN ($w1_shards)});
$w1->backup('tl');
my $sb = PostgreSQL::Test::Cluster->new('citus_w1_standby');
$sb->init_from_backup($w1, 'tl', has_streaming => 1);
# Citus' self-signed key, copied by the backup with the group's read bit
chmod 0600, $sb->data_dir . '/server.key';
$sb->start;
$w1->wait_for_catchup($sb);
$w1->stop('immediate');
$sb->promote;
$sb->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'the standby did not leave recovery';
$q->("SELECT citus_update_node(nodeid, '127.0.0.1', " . $sb->port . ") FROM pg_dist_node WHERE nodeport = " . $w1->port);
is($sb->safe_psql('postgres', 'SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)'), '00000002',
	'token floor: the promoted standby writes timeline 2');
my $tl_tok = $q->("SELECT token FROM ntask_claim_on(${tl_shard}::smallint, 'tl', 'T', 1)");
cmp_ok($tl_tok, '>', 2**48, "token floor: a delegated claim on the promoted node: token $tl_tok > 2^48");
$tl_tok = $q->("BEGIN; SELECT token FROM ntask_claim_on(${tl_shard}::smallint, 'tl', 'T', 1); COMMIT;");
cmp_ok($tl_tok, '>', 2**48,
	"token floor: a claim run on the coordinator (timeline 1), routed to the promoted node: token $tl_tok > 2^48");

NtaskCitus::stop($c);
done_testing();
