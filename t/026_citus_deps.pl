
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/026_citus_deps.pl: dependencies on a distributed install (issue 49,
# "The rest of the API"; docs/scaling.md "Dependencies on a distributed
# install").  Runs with NTASK_CITUS=1, like t/023 to t/025.
#
# A coordinator and two workers on loopback, ntask distributed over 4
# shards.  A child may depend on parents of its own shard (the shard of its
# queue and partition key, ntask_shard(queue, key)); ntask.task_dep is
# hash-distributed by shard, co-located with ntask.task, and a parent's
# end releases or decides its children on the shard's node.  What it shows,
# on a workflow on each worker node:
#   1. the layout: task_dep co-located, the two triggers on every shard;
#   2. fan-in: two parents (one of another queue, its key chosen by
#      ntask_shard), a child waiting for both, released by the last
#      success, claimed with its parents' results in context.parents;
#      enqueued through the coordinator, on a worker node and delegated
#      (ntask_enqueue_on);
#   3. a failed parent: a canceled parent cancels its cancel-policy child
#      and that one's child in turn, and sends its wait-policy child to
#      repair_required; a parent that fails permanently (repair_required)
#      cancels a cancel-policy child and keeps a wait-policy one waiting;
#   4. the producer's open transaction holds no parent lock: the parent
#      succeeds meanwhile, and the commit settles the child (ready);
#   5. a waiting child is never claimed, and cancels like any task; a
#      parent whose budget is spent (housekeeping's sweep, the claim's
#      budget check) cancels its child;
#   6. a parent of another shard is refused with 0A000, saying why and
#      naming ntask_shard, and nothing is written;
#   7. ntask_explain of a waiting child; retention prunes a child's
#      dependency rows with it;
#   8. a child of a notify queue made ready in a transaction prepared on
#      both worker nodes (no NOTIFY on a shard);
#   9. a parent ended by a call on the direct shard path (docs/scaling.md
#      "Dependencies on the direct path"): a worker node's own transition
#      (succeeded, canceled with a chain of cancel children, a permanent
#      error), delegated transitions (succeeded, canceled), and a claim
#      whose budget check ends the parent at a takeover (delegated by the
#      coordinator, and a worker node's own), each on the direct path, the
#      release and the cascade run there.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require NtaskCitus;
NtaskCitus::require_citus();

my $c = NtaskCitus::setup('deps');
my $co = $c->{coord};
my ($w1, $w2) = @{ $c->{workers} };
my $q = $c->{q};

# 1. the layout
is($q->(q{SELECT count(*) FROM pg_dist_partition p, pg_dist_partition t
	WHERE p.logicalrelid = 'ntask.task_dep'::regclass AND t.logicalrelid = 'ntask.task'::regclass
	  AND p.partmethod = 'h' AND p.colocationid = t.colocationid
	  AND column_to_column_name(p.logicalrelid, p.partkey) = 'shard'}), '1',
	'layout: ntask.task_dep is hash-distributed by shard, co-located with ntask.task');
for my $w ($w1, $w2)
{
	is($w->safe_psql('postgres', q{SET citus.override_table_visibility = off;
		SELECT count(*) FILTER (WHERE g.tgname LIKE 'task\_deps\_changed%') || '/' ||
			   count(*) FILTER (WHERE g.tgname LIKE 'task\_dep\_settle%')
		FROM pg_trigger g JOIN pg_class r ON r.oid = g.tgrelid
		JOIN pg_namespace n ON n.oid = r.relnamespace
		WHERE n.nspname = 'ntask' AND r.relname ~ '^task(_dep)?_[0-9]+$'}), '2/2',
		'layout: the two dependency triggers are on the shards of ' . $w->name);
}

$q->(q{SELECT count(*) FROM ntask_queue_set('dp', lease => '1 minute');
	SELECT count(*) FROM ntask_queue_set('dq', lease => '1 minute');
	SELECT count(*) FROM ntask_queue_set('dc', lease => '1 minute', on_parent_failed => 'cancel');
	SELECT count(*) FROM ntask_queue_set('dh', lease => '1 second', max_attempts => 1, on_parent_failed => 'cancel');
	SELECT count(*) FROM ntask_queue_set('dk', lease => '1 second', max_attempts => 1, on_parent_failed => 'cancel')});

# a partition key of queue $queue whose tasks live on worker node $port
my $key_on = sub { return NtaskCitus::key_on($c, @_); };
# a key of queue $queue in shard value $s (what a producer asks ntask_shard)
my $key_in = sub {
	my ($queue, $prefix, $s) = @_;
	return $q->(qq{SELECT k FROM generate_series(1, 500) i, LATERAL (SELECT '$prefix' || i AS k) x
		WHERE ntask_shard('$queue', k) = $s ORDER BY i LIMIT 1});
};
my $state = sub {
	my ($queue, $key) = @_;
	return $q->(qq{SELECT state || coalesce('/' || reason, '') || '/' || coalesce(parents_left::text, '-')
		FROM ntask.task WHERE queue = '$queue' AND task_key = '$key'});
};
# claim task $queue:$key (a claim of its shard, which releases the others it
# takes) and end it with $to
my $finish = sub {
	my ($queue, $key, $to, $extra) = @_;
	my ($id, $s) = split /\|/, $q->(qq{SELECT task_id || '|' || shard FROM ntask.task
		WHERE queue = '$queue' AND task_key = '$key'});
	my $tok;
	for my $row (split /\n/, $q->(qq{SELECT task_id || '|' || token FROM ntask_claim_on(${s}::smallint, '$queue', 'W', 50)}))
	{
		my ($cid, $ctok) = split /\|/, $row;
		if ($cid == $id) { $tok = $ctok; }
		else { $q->("SELECT ntask_release($cid, $ctok)"); }
	}
	die "could not claim $queue:$key" unless $tok;
	return $q->(qq{SELECT result || '/' || state FROM ntask_transition($id, $tok, '$to'$extra)});
};

my @pruned_ids;		# the canceled children of part 3, pruned in part 7
for my $w ($w1, $w2)
{
	my $on = $w->name;
	my $pk = $key_on->('dp', "wf_${on}_", $w->port);
	my $s = $q->(qq{SELECT ntask_shard('dp', '$pk')});
	my $dq_key = $key_in->('dq', "other_${on}_", $s);

	# 2. fan-in: parents of two queues, a child waiting for both
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dp', 'a_$on', '{}', partition_key => '$pk')});
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dq', 'b_$on', '{}', partition_key => '$dq_key')});
	is($q->(qq{SELECT created || '/' || state FROM ntask_enqueue('dp', 'c_$on', '{}', partition_key => '$pk',
		depends_on => ARRAY['a_$on', 'dq:b_$on'])}), 'true/waiting',
		"fan-in: the child of two parents of its shard waits ($on)");
	is($state->('dp', "c_$on"), 'waiting/2', "fan-in: two parents left ($on)");
	is($q->(qq{SELECT count(*) || '/' || bool_and(d.shard = $s) FROM ntask.task_dep d
		JOIN ntask.task t ON t.task_id = d.task_id AND t.shard = d.shard
		WHERE t.queue = 'dp' AND t.task_key = 'c_$on'}), '2/true',
		"fan-in: its dependency rows are in its shard ($on)");
	is($q->(qq{SELECT bool_and(has_children) FROM ntask.task
		WHERE (queue, task_key) IN (('dp', 'a_$on'), ('dq', 'b_$on'))}), 't',
		"fan-in: the commit marked both parents ($on)");
	is($finish->('dp', "a_$on", 'succeeded', q{, result => '{"a": 1}'}), 'applied/succeeded',
		"fan-in: the first parent succeeds ($on)");
	is($state->('dp', "c_$on"), 'waiting/1', "fan-in: one parent left ($on)");
	is($finish->('dq', "b_$on", 'succeeded', q{, result => '{"b": 2}'}), 'applied/succeeded',
		"fan-in: the second parent succeeds ($on)");
	is($state->('dp', "c_$on"), 'ready/0', "fan-in: the last success made the child ready ($on)");
	is($q->(qq{SELECT task_key || ' ' || (context->'parents')::text
		FROM ntask_claim_on(${s}::smallint, 'dp', 'W', 1)}),
		qq{c_$on {"dp:a_$on": {"a": 1}, "dq:b_$on": {"b": 2}}},
		"fan-in: the child's claim carries its parents' results ($on)");

	# enqueued on a worker node, and delegated to the shard's node
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dp', 'e_$on', '{}', partition_key => '$pk')});
	is($w1->safe_psql('postgres', qq{SELECT state FROM ntask_enqueue('dp', 'f_$on', '{}',
		partition_key => '$pk', depends_on => ARRAY['e_$on'])}), 'waiting',
		"worker node: a child enqueued on " . $w1->name . " waits ($on)");
	is($q->(qq{SELECT state FROM ntask_enqueue_on(ntask_shard('dp', '$pk'), 'dp', 'g_$on', '{}',
		partition_key => '$pk', depends_on => ARRAY['e_$on'])}), 'waiting',
		"delegated: a child enqueued by ntask_enqueue_on waits ($on)");
	is($finish->('dp', "e_$on", 'succeeded'), 'applied/succeeded', "worker node: the parent succeeds ($on)");
	is($state->('dp', "f_$on") . ' ' . $state->('dp', "g_$on"), 'ready/0 ready/0',
		"worker node, delegated: both children ready ($on)");

	# 3. a canceled parent: cancel child, its child, and a wait child
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dp', 'x_$on', '{}', partition_key => '$pk');
		SELECT count(*) FROM ntask_enqueue('dp', 'xc_$on', '{}', partition_key => '$pk',
			depends_on => ARRAY['x_$on'], on_parent_failed => 'cancel');
		SELECT count(*) FROM ntask_enqueue('dp', 'xcc_$on', '{}', partition_key => '$pk',
			depends_on => ARRAY['xc_$on'], on_parent_failed => 'cancel');
		SELECT count(*) FROM ntask_enqueue('dp', 'xw_$on', '{}', partition_key => '$pk',
			depends_on => ARRAY['x_$on'], on_parent_failed => 'wait')});
	my $x = $q->(qq{SELECT task_id FROM ntask.task WHERE queue = 'dp' AND task_key = 'x_$on'});
	push @pruned_ids, split /\n/, $q->(qq{SELECT task_id FROM ntask.task
		WHERE queue = 'dp' AND task_key IN ('xc_$on', 'xcc_$on')});
	is($q->(qq{SELECT ntask_cancel($x, 'test', 'no longer needed')}), 'applied', "failed parent: the parent is canceled ($on)");
	is(join(' ', map { $state->('dp', $_) } ("xc_$on", "xcc_$on", "xw_$on")),
		'canceled/parent_failed/1 canceled/parent_failed/1 repair_required/parent_canceled/1',
		"failed parent: the cascade cancels the child and grandchild, sends the wait child to repair ($on)");

	# a parent that fails permanently: repair_required
	my $dc_key = $key_in->('dc', "dc_${on}_", $s);
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dp', 'y_$on', '{}', partition_key => '$pk');
		SELECT count(*) FROM ntask_enqueue('dc', 'yc_$on', '{}', partition_key => '$dc_key',
			depends_on => ARRAY['dp:y_$on']);
		SELECT count(*) FROM ntask_enqueue('dp', 'yw_$on', '{}', partition_key => '$pk',
			depends_on => ARRAY['y_$on'])});
	is($finish->('dp', "y_$on", 'repair_required', q{, error_class => 'permanent'}), 'applied/repair_required',
		"failed parent: a permanent error sends the parent to repair ($on)");
	is($state->('dc', "yc_$on") . ' ' . $state->('dp', "yw_$on"),
		'canceled/parent_failed/1 waiting/1',
		"failed parent: the queue's cancel policy cancels, a wait child keeps waiting ($on)");

	# 4. the producer's open transaction locks no parent; its commit settles
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dp', 'o_$on', '{}', partition_key => '$pk')});
	my $prod = $co->background_psql('postgres');
	$prod->query_safe(qq{BEGIN; SELECT state FROM ntask_enqueue('dp', 'oc_$on', '{}',
		partition_key => '$pk', depends_on => ARRAY['o_$on'])});
	is($finish->('dp', "o_$on", 'succeeded'), 'applied/succeeded',
		"settle: the parent succeeds while the producer's transaction is open ($on)");
	$prod->query_safe('COMMIT');
	$prod->quit;
	is($state->('dp', "oc_$on"), 'ready/0', "settle: the producer's commit made the child ready ($on)");

	# 5. a waiting child is not claimed, and cancels
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dp', 'z_$on', '{}', partition_key => '$pk');
		SELECT count(*) FROM ntask_enqueue('dp', 'zc_$on', '{}', partition_key => '$pk',
			depends_on => ARRAY['z_$on'])});
	is($q->(qq{SELECT count(*) FILTER (WHERE task_key = 'z_$on') || '/' || count(*) FILTER (WHERE task_key = 'zc_$on')
		FROM ntask_claim_on(${s}::smallint, 'dp', 'W', 50)}),
		'1/0', "waiting: a claim of the shard takes the parent, not the waiting child ($on)");
	my $zc = $q->(qq{SELECT task_id FROM ntask.task WHERE queue = 'dp' AND task_key = 'zc_$on'});
	is($q->(qq{SELECT ntask_cancel($zc, 'test', 'not needed')}) . ' ' . $state->('dp', "zc_$on"),
		'applied canceled/not needed/1', "waiting: the waiting child is canceled ($on)");

	# a parent's budget spent: by housekeeping's sweep of an expired lease,
	# and by the claim's budget check at a takeover
	my $hk = $key_on->('dh', "h_${on}_", $w->port);
	my $kk = $key_on->('dk', "k_${on}_", $w->port);
	$q->(qq{SELECT count(*) FROM ntask_enqueue('dh', 'h_$on', '{}', partition_key => '$hk');
		SELECT count(*) FROM ntask_enqueue('dh', 'hc_$on', '{}', partition_key => '$hk', depends_on => ARRAY['h_$on']);
		SELECT count(*) FROM ntask_enqueue('dk', 'k_$on', '{}', partition_key => '$kk');
		SELECT count(*) FROM ntask_enqueue('dk', 'kc_$on', '{}', partition_key => '$kk', depends_on => ARRAY['k_$on'])});
	$q->(qq{SELECT count(*) FROM ntask_claim_on(ntask_shard('dh', '$hk'), 'dh', 'W', 1);
		SELECT count(*) FROM ntask_claim_on(ntask_shard('dk', '$kk'), 'dk', 'W', 1)});
	$q->(q{SELECT pg_sleep(1.2)});
	$q->(qq{SELECT count(*) FROM ntask_claim_on(ntask_shard('dk', '$kk'), 'dk', 'W2', 1)});
	is($state->('dk', "k_$on") . ' ' . $state->('dk', "kc_$on"),
		'repair_required/budget_exhausted/- canceled/parent_failed/1',
		"budget: the claim's budget check ends the parent, its child is canceled ($on)");
	my $hs = '';
	for my $try (1 .. 20)
	{
		$q->('SELECT count(*) FROM ntask_housekeeping()');
		$hs = $state->('dh', "h_$on") . ' ' . $state->('dh', "hc_$on");
		last if $hs =~ /^repair_required/;
		select(undef, undef, undef, 0.5);
	}
	is($hs, 'repair_required/budget_exhausted/- canceled/parent_failed/1',
		"budget: housekeeping's sweep ends the parent, its child is canceled ($on)");
}

# 7. ntask_explain of a waiting child; retention prunes a child's
# dependency rows with it, on its shard
my $yw = $q->(q{SELECT task_id FROM ntask.task WHERE queue = 'dp' AND task_key = 'yw_deps_w1'});
like($q->(qq{SELECT detail FROM ntask_explain($yw) WHERE event = 'now'}),
	qr/waiting for 1 of 1 parents: dp:y_deps_w1 \(repair_required\)/, 'explain: a waiting child names its parent');
is($q->('SELECT count(*) FROM ntask.task_dep WHERE task_id IN (' . join(',', @pruned_ids) . ')'), '4',
	'retention: the canceled children have their dependency rows');
$q->(q{SELECT count(*) FROM ntask_queue_set('dp', retention => '1 second')});
my $pruned = 0;
for my $try (1 .. 60)
{
	$q->('SELECT count(*) FROM ntask_housekeeping()');
	$pruned = $q->(q{SELECT count(*) = 0 FROM ntask.task WHERE queue = 'dp' AND task_key IN ('xc_deps_w1', 'xc_deps_w2')});
	last if $pruned eq 't';
	select(undef, undef, undef, 0.5);
}
is($pruned, 't', 'retention: the canceled children are pruned');
is($q->(q{SELECT count(*) FROM ntask.task_dep d LEFT JOIN ntask.task t ON t.task_id = d.task_id AND t.shard = d.shard
	WHERE t.task_id IS NULL}), '0', 'retention: no dependency row outlives its child');
is($q->('SELECT count(*) FROM ntask.task_dep WHERE task_id IN (' . join(',', @pruned_ids) . ')'), '0',
	'retention: the pruned children\'s dependency rows are gone');

# 8. a notify queue: the child made ready on the shard sends no NOTIFY
# there, so a parent's end in a transaction that writes on both worker
# nodes (prepared on each) commits
$q->(q{SELECT count(*) FROM ntask_queue_set('dn', lease => '1 minute', notify => true)});
my $nk = $key_on->('dn', 'n_', $w1->port);
my $other = $key_on->('dn', 'o_', $w2->port);
$q->(qq{SELECT count(*) FROM ntask_enqueue('dn', 'np', '{}', partition_key => '$nk');
	SELECT count(*) FROM ntask_enqueue('dn', 'nc', '{}', partition_key => '$nk', depends_on => ARRAY['np'])});
my ($np, $ns) = split /\|/, $q->(q{SELECT task_id || '|' || shard FROM ntask.task WHERE queue = 'dn' AND task_key = 'np'});
my $ntok = $q->(qq{SELECT token FROM ntask_claim_on(${ns}::smallint, 'dn', 'W', 1)});
is($q->(qq{BEGIN;
	SELECT count(*) FROM ntask_enqueue('dn', 'elsewhere', '{}', partition_key => '$other');
	SELECT result FROM ntask_transition($np, $ntok, 'succeeded');
	COMMIT;}), "1\napplied", 'notify: the parent succeeds in a transaction over both nodes');
is($state->('dn', 'nc'), 'ready/0', 'notify: its child is ready');

# 6. a parent of another shard is refused, nothing written
my $s1 = $q->(q{SELECT min(shard) FROM ntask.shard_map});
my $pa = $key_in->('dp', 'pa', $s1);
my $pb = $q->(qq{SELECT k FROM generate_series(1, 500) i, LATERAL (SELECT 'pb' || i AS k) x
	WHERE ntask_shard('dp', k) <> $s1 ORDER BY i LIMIT 1});
$q->(qq{SELECT count(*) FROM ntask_enqueue('dp', 'ra', '{}', partition_key => '$pa')});
my ($ret, $out, $stderr) = $co->psql('postgres', qq{\\set VERBOSITY verbose
	SELECT * FROM ntask_enqueue('dp', 'rb', '{}', partition_key => '$pb', depends_on => ARRAY['ra'])});
like($stderr, qr/ERROR:  0A000: ntask: on a distributed install a task can depend only on tasks of its own shard/,
	'refused: a parent of another shard (0A000)');
like($stderr, qr/parent dp:ra is in shard $s1/, 'refused: the message names the parent and its shard');
like($stderr, qr/HINT:  .*ntask_shard\(queue, key\)/, 'refused: the hint names ntask_shard');
is($q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'dp' AND task_key = 'rb'}), '0',
	'refused: nothing written');
($ret, $out, $stderr) = $co->psql('postgres',
	q{SELECT * FROM ntask_enqueue('dp', 'rc', '{}', depends_on => ARRAY['nope'])});
like($stderr, qr/parent dp:nope does not exist/, 'refused: a parent that does not exist is 22023, as on one node');

# 9. a parent ended on the direct shard path: the release and the cascade
# run there, on the shard's relations (each call's path from the worker
# node's log, log_min_messages = debug1 there)
$q->(q{SELECT count(*) FROM ntask_queue_set('ds', lease => '1 minute');
	SELECT count(*) FROM ntask_queue_set('dx', lease => '1 minute', on_parent_failed => 'cancel');
	SELECT count(*) FROM ntask_queue_set('dy', lease => '1 minute', on_parent_failed => 'cancel');
	SELECT count(*) FROM ntask_queue_set('db', lease => '1 second', max_attempts => 1, on_parent_failed => 'cancel');
	SELECT count(*) FROM ntask_queue_set('dw', lease => '1 second', max_attempts => 1, on_parent_failed => 'cancel');
	SELECT count(*) FROM ntask_queue_set('dt', lease => '1 minute', on_parent_failed => 'cancel')});
for my $w ($w1, $w2)
{
	my $on = $w->name;
	$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');
	my %k = map { $_ => $key_on->($_, "d9_${on}_", $w->port) } qw(ds dx dy db dw dt);
	my $enq = sub {
		my ($queue, $key, $extra) = @_;
		$q->(qq{SELECT count(*) FROM ntask_enqueue('$queue', '$key', '{}', partition_key => '$k{$queue}'$extra)});
	};
	$enq->('ds', "p_$on", '');
	$enq->('ds', "c_$on", qq{, depends_on => ARRAY['p_$on']});
	$enq->('dx', "p_$on", '');
	$enq->('dx', "c_$on", qq{, depends_on => ARRAY['p_$on']});
	$enq->('dx', "cc_$on", qq{, depends_on => ARRAY['c_$on']});
	$enq->('dx', "w_$on", qq{, depends_on => ARRAY['p_$on'], on_parent_failed => 'wait'});
	$enq->('dy', "p_$on", '');
	$enq->('dy', "c_$on", qq{, depends_on => ARRAY['p_$on']});
	$enq->('db', "p_$on", '');
	$enq->('db', "c_$on", qq{, depends_on => ARRAY['p_$on']});
	$enq->('dw', "p_$on", '');
	$enq->('dw', "c_$on", qq{, depends_on => ARRAY['p_$on']});
	$enq->('dt', "p_$on", '');
	$enq->('dt', "c_$on", qq{, depends_on => ARRAY['p_$on']});
	$enq->('dt', "q_$on", '');
	$enq->('dt', "qc_$on", qq{, depends_on => ARRAY['q_$on']});
	my $s = $q->(qq{SELECT ntask_shard('db', '$k{db}')});	# delegated to it

	# the worker node's own calls, each the whole statement
	my $off = -s $w->logfile;
	my $run = sub {
		my ($sql) = @_;
		my ($rc, $out, $err) = $w->psql('postgres', $sql);
		return $rc == 0 ? $out : "error: $err";
	};
	my %tok;
	for my $queue (qw(ds dx dy db dw))
	{
		my ($id, $tk) = split /\|/, $run->(qq{SELECT task_id, token FROM ntask_claim('$queue', 'W', 1)});
		$tok{$queue} = [$id, $tk];
	}
	is($run->(qq{SELECT result, state FROM ntask_transition($tok{ds}[0], $tok{ds}[1], 'succeeded')}),
		'applied|succeeded', "direct: a worker node's transition of a parent to succeeded ($on)");
	is($state->('ds', "c_$on"), 'ready/0', "direct: the parent's success made its child ready ($on)");
	is($run->(qq{SELECT result, state FROM ntask_transition($tok{dx}[0], $tok{dx}[1], 'canceled')}),
		'applied|canceled', "direct: a worker node's transition of a parent to canceled ($on)");
	is(join(' ', map { $state->('dx', $_) } ("c_$on", "cc_$on", "w_$on")),
		'canceled/parent_failed/1 canceled/parent_failed/1 repair_required/parent_canceled/1',
		"direct: the cascade cancels the child and grandchild, sends the wait child to repair ($on)");
	is($run->(qq{SELECT result, state FROM ntask_transition($tok{dy}[0], $tok{dy}[1], 'repair_required', error_class => 'permanent')}),
		'applied|repair_required', "direct: a worker node's transition of a parent with a permanent error ($on)");
	is($state->('dy', "c_$on"), 'canceled/parent_failed/1', "direct: its cancel child is canceled ($on)");

	# delegated transitions (ntask_transition_on from the coordinator)
	my $ts = $q->(qq{SELECT ntask_shard('dt', '$k{dt}')});
	my %dt;
	for my $row (split /\n/, $q->(qq{SELECT task_id || ':' || token FROM ntask_claim_on(${ts}::smallint, 'dt', 'W', 2)}))
	{
		my ($id, $tk) = split /:/, $row;
		$dt{$q->("SELECT task_key FROM ntask.task WHERE task_id = $id")} = [$id, $tk];
	}
	my $del = sub {
		my ($key, $to) = @_;
		my ($rc, $out, $err) = $co->psql('postgres',
			qq{SELECT result, state FROM ntask_transition_on(${ts}::smallint, $dt{$key}[0], $dt{$key}[1], '$to')});
		return $rc == 0 ? $out : "error: $err";
	};
	is($del->("p_$on", 'succeeded'), 'applied|succeeded', "direct: a delegated transition of a parent to succeeded ($on)");
	is($del->("q_$on", 'canceled'), 'applied|canceled', "direct: a delegated transition of a parent to canceled ($on)");
	is($state->('dt', "c_$on") . ' ' . $state->('dt', "qc_$on"), 'ready/0 canceled/parent_failed/1',
		"direct: the delegated transitions made one child ready and canceled the other ($on)");

	# the budget check at a takeover: delegated, and the worker node's own
	$q->(q{SELECT pg_sleep(1.2)});
	my ($rc, $out, $err) = $co->psql('postgres', qq{SELECT task_id FROM ntask_claim_on(${s}::smallint, 'db', 'W2', 1)});
	is($rc == 0 ? $out : "error: $err", '',
		"direct: a delegated claim ends the parent whose budget is spent, claiming nothing ($on)");
	is($state->('db', "p_$on") . ' ' . $state->('db', "c_$on"),
		'repair_required/budget_exhausted/- canceled/parent_failed/1',
		"direct: the delegated claim's budget check ended the parent, its child is canceled ($on)");
	is($run->(q{SELECT task_id FROM ntask_claim('dw', 'W2', 1)}), '',
		"direct: a worker node's claim ends the parent whose budget is spent ($on)");
	is($state->('dw', "p_$on") . ' ' . $state->('dw', "c_$on"),
		'repair_required/budget_exhausted/- canceled/parent_failed/1',
		"direct: the worker node's claim ended the parent, its child is canceled ($on)");

	my @p = NtaskCitus::paths($w, $off);
	is(scalar(grep { /^routed/ } @p), 0, "direct: no call ran routed ($on)") or diag(join("\n", @p));
	ok(scalar(grep { /^direct path for shard \d+$/ } @p) >= 10,
		"direct: the transitions and the claims took the direct path ($on)") or diag(join("\n", @p));
	$w->safe_psql('postgres', 'ALTER SYSTEM RESET log_min_messages; SELECT pg_reload_conf()');
}

NtaskCitus::stop($c);
done_testing();
