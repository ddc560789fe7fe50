
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/025_citus_api.pl: the rest of the API on a distributed install (issue
# 49, "The rest of the API"): what can live with its task runs there,
# each statement routed to the task's shard.  Runs with NTASK_CITUS=1
# (scripts/test.sh sets it on PostgreSQL 15), like t/023 and t/024.
#
# A coordinator and two workers on loopback, ntask distributed over 4
# shards.  What it shows:
#   1. checkpoints (ntask_checkpoint, issue 36.2): ntask.checkpoint is
#      hash-distributed by shard, co-located with ntask.task; on tasks of
#      both worker nodes a checkpoint is applied in the business
#      transaction (its row on the task's shard), duplicate, conflict;
#      ntask_context hands them to the holder; after a takeover the next
#      claim (delegated to the shard's node, and a plain claim on a worker
#      node) carries them in context.checkpoints, the old token's new step
#      is stale and its retry of a step it wrote a duplicate; a checkpoint
#      called on a worker node; ntask_explain lists them; housekeeping's
#      retention prunes them with their task.
#   2. signals (ntask_await, ntask_signal, issue 36.3): ntask.signal is
#      hash-distributed by shard, a signal's row in the shard of its queue
#      and key; a task awaits a key of its own shard (its partition key),
#      on both worker nodes: await then signal (from a worker node), signal
#      then await (ready at once), duplicate and conflict, a timeout; the
#      next claim carries context.signal (payload or timed_out); a key of
#      another shard is refused with 0A000 and the reason; the wake is
#      audited; housekeeping prunes a signal no task awaited, and the
#      awaited ones with their tasks.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

require NtaskCitus;
NtaskCitus::require_citus();

my $c = NtaskCitus::setup('api');
my $co = $c->{coord};
my ($w1, $w2) = @{ $c->{workers} };
my $q = $c->{q};

# a key of queue $queue whose tasks live on worker node $port
my $key_on = sub { return NtaskCitus::key_on($c, @_); };

# 1. checkpoints
is($q->(q{SELECT count(*) FROM pg_dist_partition p, pg_dist_partition t
	WHERE p.logicalrelid = 'ntask.checkpoint'::regclass AND t.logicalrelid = 'ntask.task'::regclass
	  AND p.partmethod = 'h' AND p.colocationid = t.colocationid
	  AND column_to_column_name(p.logicalrelid, p.partkey) = 'shard'}), '1',
	'checkpoint: ntask.checkpoint is hash-distributed by shard, co-located with ntask.task');
$q->(q{SELECT count(*) FROM ntask_queue_set('ck', lease => '2 seconds', max_attempts => 5, retention => '1 second');
	CREATE TABLE effects (task_id bigint, shard smallint, step text, PRIMARY KEY (task_id, shard, step));
	SELECT create_distributed_table('effects', 'shard', colocate_with => 'ntask.task');});
my %id;
for my $w ($w1, $w2)
{
	my $k = $key_on->('ck', 'ck', $w->port);
	$id{ $w->name } = $q->("SELECT task_id FROM ntask_enqueue('ck', '$k', '{}')");
}
# tokens are read from the claims (issue 46.1 draws them from a sequence
# per node: only their order per task is promised)
my %tok1 = map { split /\|/ } split /\n/,
  $q->(q{SELECT task_id || '|' || token FROM ntask_claim('ck', 'W1', 10)});
is(join(',', sort keys %tok1), join(',', sort values %id), 'checkpoint: W1 claims the task on each worker node');
my %tok2;
for my $w ($w1, $w2)
{
	my $id = $id{ $w->name };
	my $t1 = $tok1{$id};
	my $on = 'the task on ' . $w->name;
	# in the business transaction, with the business row on the task's shard
	is($q->(qq{BEGIN;
		SELECT ntask_checkpoint($id, $t1, 'fetch', '{"rows": 10}');
		INSERT INTO effects VALUES ($id, ntask_shard(${id}::bigint), 'fetch');
		COMMIT;}), 'applied', "checkpoint: applied in the business transaction ($on)");
	is($q->(qq{SELECT ntask_checkpoint($id, $t1, 'fetch', '{"rows": 10}')}), 'duplicate',
		"checkpoint: the same step and value again: duplicate ($on)");
	is($q->(qq{SELECT ntask_checkpoint($id, $t1, 'fetch', '{"rows": 11}')}), 'conflict',
		"checkpoint: another value: conflict ($on)");
	# called on a worker node (the other one for w1's task): routed there
	is($w1->safe_psql('postgres', qq{SELECT ntask_checkpoint($id, $t1, 'load', '{"ok": true}')}), 'applied',
		"checkpoint: a second step, called on worker node " . $w1->name . " ($on)");
	is($q->(qq{SELECT string_agg(c.step || ':' || (c.token = $t1) || ':' || (c.shard = ntask_shard(${id}::bigint)), ',' ORDER BY c.step)
		FROM ntask.checkpoint c WHERE c.task_id = $id}), 'fetch:true:true,load:true:true',
		"checkpoint: two rows on the task's shard ($on)");
	is($q->(qq{SELECT checkpoints FROM ntask.task WHERE task_id = $id AND shard = ntask_shard(${id}::bigint)}), '2',
		"checkpoint: the task counts them ($on)");
	is($q->(qq{SELECT ntask_context($id, $t1)->'checkpoints'}), '{"load": {"ok": true}, "fetch": {"rows": 10}}',
		"checkpoint: ntask_context hands them to the holder ($on)");
}
# the rows are in the checkpoint shard of the task's shard value, on the
# worker node that holds the task
for my $w ($w1, $w2)
{
	my $id = $id{ $w->name };
	my $sid = $q->(qq{SELECT get_shard_id_for_distribution_column('ntask.checkpoint', ntask_shard(${id}::bigint))});
	is($w->safe_psql('postgres', qq{SELECT count(*) FROM ntask.checkpoint_$sid WHERE task_id = $id}), '2',
		'checkpoint: its rows are in the co-located shard on ' . $w->name . ', with the task');
}
# the lease runs out; W2 takes each task over: on w1's by a plain claim on
# w1, on w2's by a claim delegated to the shard's node
sleep 2.5;
my ($cid1, $ctok1, $ctx1) = split /\|/, $w1->safe_psql('postgres', q{SELECT task_id || '|' || token || '|'
	|| (context->'checkpoints')::text FROM ntask_claim('ck', 'W2', 10)});
$tok2{$cid1} = $ctok1;
cmp_ok($ctok1, '>', $tok1{$cid1}, 'checkpoint: the takeover\'s token is above the first');
is("$cid1|$ctx1", "$id{$w1->name}|" . '{"load": {"ok": true}, "fetch": {"rows": 10}}',
	'checkpoint: a plain claim on ' . $w1->name . ' takes its task over with the checkpoints in its context');
my $id2 = $id{ $w2->name };
my ($cid2, $ctok2, $ctx2) = split /\|/, $q->(qq{SELECT task_id || '|' || token || '|'
	|| (context->'checkpoints')::text FROM ntask_claim_on(ntask_shard(${id2}::bigint), 'ck', 'W2', 10)});
$tok2{$cid2} = $ctok2;
is("$cid2|$ctx2", "$id2|" . '{"load": {"ok": true}, "fetch": {"rows": 10}}',
	'checkpoint: a delegated claim (ntask_claim_on) takes the other over with its checkpoints');
for my $w ($w1, $w2)
{
	my $id = $id{ $w->name };
	my ($t1, $t2) = ($tok1{$id}, $tok2{$id});
	my $on = 'the task on ' . $w->name;
	is($q->(qq{SELECT ntask_checkpoint($id, $t1, 'ship', '{}')}), 'stale',
		"checkpoint: the old token's new step: stale ($on)");
	is($q->(qq{SELECT ntask_checkpoint($id, $t1, 'fetch', '{"rows": 10}')}), 'duplicate',
		"checkpoint: the old token's retry of a step it wrote: duplicate ($on)");
	is($q->(qq{SELECT ntask_checkpoint($id, $t2, 'ship', '{"n": 1}')}), 'applied',
		"checkpoint: the new holder's step: applied ($on)");
	like($q->(qq{SELECT detail FROM ntask_explain($id) WHERE event = 'now'}),
		qr/3 checkpoint\(s\) done: fetch, load, ship/, "checkpoint: ntask_explain lists them ($on)");
	is($q->(qq{SELECT result FROM ntask_transition($id, $t2, 'succeeded')}), 'applied',
		"checkpoint: the task succeeds ($on)");
}
# retention (1 s): housekeeping prunes the tasks with their checkpoints
sleep 1.2;
$q->('SELECT * FROM ntask_housekeeping()');
my $ids = join(',', values %id);
is($q->(qq{SELECT (SELECT count(*) FROM ntask.task WHERE task_id IN ($ids)) || ' '
	|| (SELECT count(*) FROM ntask.checkpoint WHERE task_id IN ($ids))}), '0 0',
	'checkpoint: housekeeping\'s retention prunes the tasks and their checkpoints on both nodes');

# 2. signals: a task awaits a key of its own shard, its partition key
is($q->(q{SELECT count(*) FROM pg_dist_partition p, pg_dist_partition t
	WHERE p.logicalrelid = 'ntask.signal'::regclass AND t.logicalrelid = 'ntask.task'::regclass
	  AND p.partmethod = 'h' AND p.colocationid = t.colocationid
	  AND column_to_column_name(p.logicalrelid, p.partkey) = 'shard'}), '1',
	'signal: ntask.signal is hash-distributed by shard, co-located with ntask.task');
$q->(q{SELECT count(*) FROM ntask_queue_set('sg', lease => '30 seconds', max_attempts => 5,
	retention => '1 second', total_deadline => '1 hour')});
# per worker node: a task awaiting first (a), one signaled first (b), one
# that times out (t), each keyed by its signal key
my (%sid, %skey);
for my $w ($w1, $w2)
{
	for my $role ('a', 'b', 't')
	{
		my $k = $key_on->('sg', "sig-$role-", $w->port);
		$skey{ $w->name }{$role} = $k;
		$sid{ $w->name }{$role} = $q->("SELECT task_id FROM ntask_enqueue('sg', 'task-$k', '{}', partition_key => '$k')");
	}
}
my %stok = map { split /\|/ } split /\n/,
  $q->(q{SELECT task_id || '|' || token FROM ntask_claim('sg', 'W1', 10)});
is(scalar(keys %stok), 6, 'signal: W1 claims the six tasks');
for my $w ($w1, $w2)
{
	my $on = 'on ' . $w->name;
	my ($ka, $kb, $kt) = @{ $skey{ $w->name } }{qw(a b t)};
	my ($ia, $ib, $it) = @{ $sid{ $w->name } }{qw(a b t)};
	# a key of another shard: refused, with the reason
	my $other = $skey{ $w->name eq $w1->name ? $w2->name : $w1->name }{a};
	my ($rc, $out, $stderr) = $co->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT ntask_await($ia, $stok{$ia}, '$other')");
	like($stderr, qr/0A000: ntask: on a distributed install task $ia can await only a signal key of its own shard/,
		"signal: an await of a key of another shard is refused with 0A000 ($on)");
	# await, then the signal (sent from a worker node)
	is($q->("SELECT ntask_await($ia, $stok{$ia}, '$ka', interval '1 hour')"), 'applied',
		"signal: a awaits its key ($on)");
	is($q->("SELECT ntask_await($ia, $stok{$ia}, '$ka', interval '1 hour')"), 'duplicate',
		"signal: the same await again: duplicate ($on)");
	is($q->("SELECT state || ' ' || signal_key FROM ntask.task WHERE task_id = $ia AND shard = ntask_shard(${ia}::bigint)"),
		"awaiting $ka", "signal: a is awaiting ($on)");
	is($q->("SELECT result || ' ' || (detail->>'signal_key') FROM ntask.attempt
		WHERE task_id = $ia AND shard = ntask_shard(${ia}::bigint) AND token = $stok{$ia}"),
		"awaiting $ka", "signal: its attempt ended as awaiting, in the ledger ($on)");
	my $sigshard = $q->("SELECT get_shard_id_for_distribution_column('ntask.signal', ntask_shard('sg', '$ka'))");
	is($w->safe_psql('postgres', "SELECT task_id || ' ' || (sent_at IS NULL) FROM ntask.signal_$sigshard
		WHERE queue = 'sg' AND signal_key = '$ka'"), "$ia true",
		"signal: the awaited key's row is in the co-located shard on " . $w->name);
	is($w2->safe_psql('postgres', "SELECT ntask_signal('sg', '$ka', '{\"go\": \"$ka\"}')"), 'applied',
		"signal: sent from worker node " . $w2->name . " ($on)");
	is($q->("SELECT ntask_signal('sg', '$ka', '{\"go\": \"$ka\"}')"), 'duplicate',
		"signal: the same payload again: duplicate ($on)");
	is($w1->safe_psql('postgres', "SELECT ntask_signal('sg', '$ka', '{\"go\": 0}')"), 'conflict',
		"signal: another payload: conflict ($on)");
	is($q->("SELECT state || ' ' || (due_at <= now()) FROM ntask.task WHERE task_id = $ia AND shard = ntask_shard(${ia}::bigint)"),
		'ready true', "signal: a is ready and due ($on)");
	is($q->("SELECT count(*) FROM ntask.audit WHERE action = 'signal' AND task_id = $ia"), '1',
		"signal: the wake is audited ($on)");
	# the signal first, then the await: ready at once
	is($q->("SELECT ntask_signal('sg', '$kb', '{\"early\": true}')"), 'applied',
		"signal: b's key sent before its await ($on)");
	is($q->("SELECT ntask_await($ib, $stok{$ib}, '$kb')"), 'applied', "signal: b awaits it ($on)");
	is($q->("SELECT state FROM ntask.task WHERE task_id = $ib AND shard = ntask_shard(${ib}::bigint)"), 'ready',
		"signal: b is ready at once ($on)");
	# a timeout: ready again when it ends
	is($q->("SELECT ntask_await($it, $stok{$it}, '$kt', interval '1 second')"), 'applied',
		"signal: t awaits with a 1 s timeout ($on)");
}
sleep 1.2;
# the next claims: a delegated claim per key's shard, and a plain claim on
# each worker node, carry the signal (or that the await timed out)
my %ctx;
for my $w ($w1, $w2)
{
	for my $r (split /\n/, $w->safe_psql('postgres', q{SELECT task_id || '|' || token || '|' || (context->'signal')::text
		FROM ntask_claim('sg', 'W2', 10)}))
	{
		my ($id, $tok, $sg) = split /\|/, $r;
		$ctx{$id} = $sg;
		$stok{$id} = $tok;
	}
}
for my $w ($w1, $w2)
{
	my $on = 'on ' . $w->name;
	my ($ka, $kb, $kt) = @{ $skey{ $w->name } }{qw(a b t)};
	my ($ia, $ib, $it) = @{ $sid{ $w->name } }{qw(a b t)};
	is($ctx{$ia}, qq({"key": "$ka", "payload": {"go": "$ka"}}), "signal: a's claim carries the signal's payload ($on)");
	is($ctx{$ib}, qq({"key": "$kb", "payload": {"early": true}}), "signal: b's claim carries the early signal ($on)");
	is($ctx{$it}, qq({"key": "$kt", "timed_out": true}), "signal: t's claim says its await timed out ($on)");
	for my $id ($ia, $ib, $it)
	{
		$q->("SELECT result FROM ntask_transition($id, $stok{$id}, 'succeeded')");
	}
}
# a signal no task awaits, and the finished tasks' own: pruned after the
# queue's retention (1 s), on their shards
is($q->(q{SELECT ntask_signal('sg', 'nobody', '{}')}), 'applied', 'signal: a signal nobody awaits is kept');
sleep 1.2;
$q->('SELECT * FROM ntask_housekeeping()');
is($q->(q{SELECT count(*) FROM ntask.signal WHERE queue = 'sg'}) . ' '
	. $q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'sg'}), '0 0',
	'signal: housekeeping prunes the finished tasks with their signals, and the one nobody awaited');

NtaskCitus::stop($c);
done_testing();
