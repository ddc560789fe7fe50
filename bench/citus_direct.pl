#!/usr/bin/perl
# bench/citus_direct.pl: the speed ceiling of issue 49's direct shard path
# (docs/scaling.md "The direct shard path").  Per task (one
# claim of 1 and one transition to succeeded, one client, pgbench -M
# prepared), in the same rounds:
#
#   a   a plain PostgreSQL node (no Citus): ntask_claim + ntask_transition
#   b   the worker node of a coordinator + 1 worker cluster, the client on
#       the worker: ntask_claim_on + ntask_transition_on of a local shard
#       (today's delegated call as it runs on the shard's node: Citus does
#       not push a call to its own node, each statement goes through Citus'
#       planner and local execution)
#   b1  the same calls made on the coordinator: delegated by Citus to the
#       worker (one hop), for reference
#   c   the same statements hand-written against the shard relations
#       (ntask.task_<shardid>, attempt_, receipt_, the local placement of
#       ntask.queue) in two PL/pgSQL functions on the worker, with the
#       interlock the design takes (lock_shard_metadata ShareLock, then a
#       catalog read of the placement): what the direct path costs at best,
#       each statement planned by PostgreSQL alone and cached
#
# BENCH_PARTS=calls measures per call, on a plain node (a), on the worker
# node through the _on forms with ntask.citus_direct off (r, routed) and
# on (d, direct), and from the coordinator, delegated (r1, d1): the
# transition (tr), the heartbeat (hb), the claim of 1 (cl), the drain
# (dr: claim 1 + transition to succeeded, per task), the drain of a
# worker library (wdr: the same with the claim's wait => '30 seconds', its
# first look claiming, as a worker's claim does while work is due),
# ntask_transition_and_claim of 1 (tac, per task), the enqueue of a fresh
# key (enq: ntask_enqueue, ntask_enqueue_on on the Citus systems, into
# queue e, partition key 'p') and the release of a leased task (rel:
# ntask_release, ntask_release_on, with a delay of a day so that the
# released tasks are not claimed again by the later calls); BENCH_CALLS
# (default "tr hb cl dr tac") and BENCH_CALL_SYSTEMS choose which.
#
# BENCH_PERF=<prefix> profiles the client's backend during system
# BENCH_PERF_SYSTEM's (default d) calls: perf record -g, <prefix>.<call>.data.
#
# (BENCH_SYSTEMS="a b" runs only those; a is always needed) and the CPU
# of each node per task (every process of the node: the
# postmaster's own and reaped children's time from /proc/<pid>/stat, plus
# its live children's), with the load average.  Run from the repository
# as the postgres user, Citus and ntask installed in the PostgreSQL of
# pg_config (t/NtaskCitus.pm):
#
#   L=$(pg_config --pkglibdir)/pgxs/src/test; mkdir -p /tmp/cd/tmp_check/log; \
#   BENCH_TASKS=2000 BENCH_ROUNDS=2 PATH=$(pg_config --bindir):$PATH \
#   PG_REGRESS=$L/regress/pg_regress TESTDIR=/tmp/cd prove -v -I $L/perl \
#   bench/citus_direct.pl
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use NtaskCitus;

my $N = $ENV{BENCH_TASKS} // 2000;
my $ROUNDS = $ENV{BENCH_ROUNDS} // 2;

# the load average and a node's CPU seconds: NtaskCitus::loadavg, node_cpu
sub loadavg { return NtaskCitus::loadavg(); }
sub node_cpu { return NtaskCitus::node_cpu(@_); }

my ($plain, $c) = NtaskCitus::bench_systems('direct', queues => [ [ 'b', undef ], [ 'e', undef ] ],
	plain_conf => "ntask.backoff_jitter = off\n");
my $co = $c->{coord};
my $w = $c->{workers}[0];
my $S = $co->safe_psql('postgres', q{SELECT ntask_shard('b', 'p')});
# the enqueue's shard (queue e, partition key 'p')
my $SE = $co->safe_psql('postgres', q{SELECT ntask_shard('e', 'p')});
my %sid;
for my $t (qw(task attempt receipt))
{
	$sid{$t} = $w->safe_psql('postgres',
		"SELECT get_shard_id_for_distribution_column('ntask.$t', ${S}::smallint)");
}
$sid{queue} = $w->safe_psql('postgres',
	q{SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'ntask.queue'::regclass});
diag("shard value $S: task_$sid{task}, attempt_$sid{attempt}, receipt_$sid{receipt}, queue_$sid{queue}");

# which defaults the shard relations keep (docs: the direct path supplies
# every id)
diag("defaults of ntask.task / its shard on the worker:\n" . $w->safe_psql('postgres', qq{
	SELECT a.attname || ': ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-') || ' / '
	  || coalesce((SELECT pg_get_expr(d2.adbin, d2.adrelid) FROM pg_attrdef d2
	     JOIN pg_attribute a2 ON a2.attrelid = d2.adrelid AND a2.attnum = d2.adnum
	     WHERE d2.adrelid = 'ntask.task_$sid{task}'::regclass AND a2.attname = a.attname), '-')
	  || CASE WHEN a.attidentity <> '' THEN ' (identity; on the shard: '
	     || coalesce((SELECT nullif(a3.attidentity::text, '') FROM pg_attribute a3
	        WHERE a3.attrelid = 'ntask.task_$sid{task}'::regclass AND a3.attname = a.attname),
	        'none') || ')' ELSE '' END
	FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE a.attrelid = 'ntask.task'::regclass AND a.attnum > 0 AND NOT a.attisdropped
	  AND (d.adbin IS NOT NULL OR a.attidentity <> '')
	ORDER BY a.attnum}));

# (c): the claim's and the transition's statements on the shard relations
my $T = "ntask.task_$sid{task}";
my $A = "ntask.attempt_$sid{attempt}";
my $R = "ntask.receipt_$sid{receipt}";
my $Q = "ntask.queue_$sid{queue}";
my $interlock = qq{
	PERFORM pg_catalog.lock_shard_metadata(5, ARRAY[$sid{task}]::bigint[]);
	PERFORM 1 FROM pg_catalog.pg_dist_placement p
	  WHERE p.shardid = $sid{task}
	    AND p.groupid = (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l);
	IF NOT FOUND THEN RAISE EXCEPTION 'bench: the shard is not on this node'; END IF;};
my $spent = q{((t.attempts >= t.max_attempts) OR (v_now >= t.deadline)
	  OR ((t.await_on_timeout IS NOT NULL) AND (t.state = 'awaiting') AND (t.await_on_timeout = 'repair')))};
$w->safe_psql('postgres', qq{
SET citus.enable_ddl_propagation = off;  -- a function of this node only
CREATE FUNCTION bench_direct_claim(v_queue text, v_worker text, OUT id bigint, OUT tok bigint)
LANGUAGE plpgsql AS \$f\$
#variable_conflict use_column
DECLARE
	v_now timestamptz := statement_timestamp();
	v_id bigint; v_tok bigint; v_lease interval; v_until timestamptz;
BEGIN
	$interlock
	-- the pick (claim_pick_shard_plan), on the shard relations
	WITH RECURSIVE nz(p) AS ((SELECT t.priority FROM $T t WHERE t.queue = v_queue
	      AND t.due_at IS NOT NULL AND t.priority <> 0 AND t.shard = $S
	      ORDER BY t.priority DESC LIMIT 1)
	  UNION ALL SELECT (SELECT t.priority FROM $T t WHERE t.queue = v_queue
	      AND t.due_at IS NOT NULL AND t.priority <> 0 AND t.shard = $S AND t.priority < nz.p
	      ORDER BY t.priority DESC LIMIT 1) FROM nz WHERE nz.p IS NOT NULL)
	SELECT x.task_id, x.token, q.lease INTO v_id, v_tok, v_lease
	FROM $Q q, (SELECT nz.p FROM nz WHERE nz.p > 0 UNION ALL SELECT 0
	            UNION ALL SELECT nz.p FROM nz WHERE nz.p < 0) pr,
	  LATERAL (SELECT t.task_id, t.token FROM $T t
	    WHERE t.queue = v_queue AND t.shard = $S AND t.priority = pr.p
	      AND t.due_at <= v_now
	    ORDER BY t.due_at, t.task_id LIMIT 1 FOR UPDATE OF t SKIP LOCKED) x
	WHERE q.queue = v_queue AND pr.p IS NOT NULL AND q.fairness = 'none'
	  AND q.priority_aging IS NULL AND q.paused_at IS NULL
	  AND (q.paused_until IS NULL OR q.paused_until <= v_now)
	  AND (q.keys_paused_until IS NULL OR q.keys_paused_until <= v_now)
	  AND (q.worker_role IS NULL OR pg_has_role(q.worker_role::oid, 'USAGE'))
	  AND (q.max_inflight IS NULL OR ntask.claim_cap_lock(q.queue))
	LIMIT 1;
	IF v_id IS NULL THEN RETURN; END IF;
	v_until := v_now + v_lease;
	-- the lease (claim_lease_plan, with the distributed lease's token and
	-- state check), the receipt test in its RETURNING as on a plain install
	WITH upd AS (
	  UPDATE $T t SET
	    state = CASE WHEN $spent THEN 'repair_required' ELSE 'leased' END,
	    reason = CASE WHEN NOT $spent THEN t.reason WHEN t.attempts >= t.max_attempts
	      THEN 'budget_exhausted' ELSE 'deadline_exceeded' END,
	    token = CASE WHEN $spent THEN t.token ELSE ntask.token_next(t.token, 1) END,
	    attempts = t.attempts + CASE WHEN $spent THEN 0 ELSE 1 END,
	    lease_owner = CASE WHEN $spent THEN NULL ELSE v_worker END,
	    lease_until = CASE WHEN $spent THEN NULL ELSE v_until END,
	    due_at = CASE WHEN $spent THEN NULL ELSE v_until END,
	    finished_at = CASE WHEN $spent THEN v_now END,
	    unknown_attempts = t.unknown_attempts,
	    last_error_class = t.last_error_class, last_error_stage = t.last_error_stage,
	    claimed_at = CASE WHEN $spent THEN t.claimed_at ELSE v_now END,
	    invoked_at = CASE WHEN $spent THEN t.invoked_at END,
	    progress = NULL, progress_at = NULL, await_on_timeout = NULL, updated_at = v_now
	  WHERE t.task_id = v_id AND t.shard = $S AND t.token = v_tok
	    AND t.due_at IS NOT NULL AND t.state <> 'leased'
	  RETURNING t.task_id, t.token,
	    EXISTS (SELECT 1 FROM $R r WHERE r.task_id = t.task_id AND r.shard = t.shard) AS committed)
	SELECT u.task_id, u.token INTO id, tok FROM upd u;
END \$f\$;

CREATE FUNCTION bench_direct_transition(v_id bigint, v_tok bigint) RETURNS text
LANGUAGE plpgsql AS \$f\$
#variable_conflict use_column
DECLARE
	v_now timestamptz := statement_timestamp();
	v_state text;
BEGIN
	$interlock
	-- tr_apply_plan (the plain install's one statement: the task's update
	-- and its ledger row in one CTE), on the shard relations
	WITH upd AS (
	  UPDATE $T t SET state = 'succeeded', run_at = t.run_at, due_at = NULL,
	    lease_owner = NULL, lease_until = NULL,
	    last_error_class = t.last_error_class, last_error_stage = t.last_error_stage,
	    outcome = 'completed', result = NULL, reason = NULL,
	    unknown_attempts = t.unknown_attempts + CASE WHEN true THEN 0
	      WHEN EXISTS (SELECT 1 FROM $R r WHERE r.task_id = v_id AND r.shard = $S
	                   AND r.token = v_tok) THEN 0 ELSE 1 END,
	    finished_at = v_now, updated_at = v_now
	  FROM $T o
	  WHERE t.task_id = v_id AND t.shard = $S AND t.token = v_tok AND t.state = 'leased'
	    AND o.task_id = v_id AND o.shard = $S
	    AND EXISTS (SELECT 1 FROM $Q q WHERE q.queue = t.queue
	                AND (q.worker_role IS NULL OR pg_has_role(q.worker_role::oid, 'USAGE')))
	  RETURNING t.task_id, t.state, t.shard, t.token, t.attempts,
	    coalesce(o.claimed_at, o.updated_at) AS claimed_at, t.invoked_at,
	    o.lease_owner AS worker, o.progress),
	att AS (
	  INSERT INTO $A (task_id, shard, token, attempt, worker, claimed_at, invoked_at,
	    ended_at, result, requested, error_class, error_stage, outcome_known, outcome,
	    retry_at, detail, progress)
	  SELECT u.task_id, u.shard, u.token, u.attempts, u.worker, u.claimed_at,
	    u.invoked_at, v_now, 'succeeded', 'succeeded', NULL, NULL, true, 'completed',
	    NULL, NULL, u.progress FROM upd u)
	SELECT upd.state INTO v_state FROM upd;
	RETURN v_state;
END \$f\$;
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my %script = (
	a => qq{SELECT task_id AS id, token AS tok FROM ntask_claim('b', 'w', 1) \\gset
SELECT result FROM ntask_transition(:id, :tok, 'succeeded') \\gset
},
	b => qq{SELECT task_id AS id, token AS tok FROM ntask_claim_on(${S}::smallint, 'b', 'w', 1) \\gset
SELECT result FROM ntask_transition_on(${S}::smallint, :id, :tok, 'succeeded') \\gset
},
	c => qq{SELECT id, tok FROM bench_direct_claim('b', 'w') \\gset
SELECT bench_direct_transition(:id, :tok) AS state \\gset
});
$script{b1} = $script{b};
for my $s (keys %script)
{
	open my $f, '>', "$dir/$s.sql" or die;
	print $f $script{$s};
	close $f;
}

my $seq = 0;

# N ready tasks of shard S (partition key 'p')
sub load
{
	my ($node, $on) = @_;
	$seq++;
	my $keys = "ARRAY(SELECT 'r$seq-' || i FROM generate_series(1, $N) i)";
	my $pl = "ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $N))";
	my $pk = "ARRAY(SELECT 'p' FROM generate_series(1, $N))";
	my $call = $on
	  ? "ntask_enqueue_many_on(${S}::smallint, 'b', $keys, $pl, partition_keys => $pk)"
	  : "ntask_enqueue_many('b', $keys, $pl, partition_keys => $pk)";
	$node->safe_psql('postgres', "SELECT count(*) FROM $call");
}

sub mean { my $s = 0; $s += $_ for @_; return $s / @_; }

# BENCH_PERF=<prefix>: a profile (perf record -g) of the client's backend
# during each call of system BENCH_PERF_SYSTEM (default d), written to
# <prefix>.<call>.data; its CPU figures then include perf's own cost
my $PERF = $ENV{BENCH_PERF};
my $PERF_SYSTEM = $ENV{BENCH_PERF_SYSTEM} // 'd';

# perf_run(pgbench command, node, file): pgbench's output, its backend on
# node profiled until it exits (found by the application_name it shares
# with psql: the test's PGAPPNAME)
sub perf_run
{
	my ($cmd, $node, $file) = @_;
	open my $pb, '-|', $cmd or die "bench: $cmd: $!";
	my $pid = '';
	for (1 .. 1000)
	{
		$pid = $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
			  AND application_name = current_setting('application_name')");
		last if $pid =~ /^\d+$/;
		sleep(0.01);
	}
	system("perf record -q -g -p $pid -o $file >/dev/null 2>&1 &") if $pid =~ /^\d+$/;
	local $/;
	my $out = <$pb>;
	close $pb;
	return $out;
}

# BENCH_PARTS: "calls" (per call on a, r, d, r1, d1 below: the transition
# family, the claim, the drain), "drain" (the claim + transition per task
# of a, b, b1, c above); default both
my %parts = map { $_ => 1 } split ' ', ($ENV{BENCH_PARTS} // 'calls drain');

# the worker node's ntask.citus_direct (delegated calls run with it)
sub set_direct
{
	my ($v) = @_;
	$w->safe_psql('postgres', "ALTER SYSTEM SET ntask.citus_direct = $v; SELECT pg_reload_conf()");
	for (1 .. 600)
	{
		return if $w->safe_psql('postgres', 'SHOW ntask.citus_direct') eq $v;
		sleep(0.05);
	}
	die "bench: ntask.citus_direct did not become $v";
}

# N leased tasks of shard S on the node that holds them, listed in
# bench_lease(i, id, tok) on the client's node (a local table there)
sub lease_all
{
	my ($owner, $client) = @_;
	my $on = $owner != $plain;
	load($owner, $on);
	my $claim = $on
	  ? "ntask_claim_on(${S}::smallint, 'b', 'w', 500, lease => '1 hour')"
	  : "ntask_claim('b', 'w', 500, lease => '1 hour')";
	my @rows;
	while (@rows < $N)
	{
		my $got = $owner->safe_psql('postgres', "SELECT task_id || ',' || token FROM $claim");
		last if $got eq '';
		push @rows, split /\n/, $got;
	}
	die "bench: leased " . scalar(@rows) . " of $N" unless @rows == $N;
	my $i = 0;
	$client->safe_psql('postgres', "SET citus.enable_ddl_propagation = off;
		DROP TABLE IF EXISTS bench_lease; DROP SEQUENCE IF EXISTS bench_seq;
		CREATE TABLE bench_lease (i int PRIMARY KEY, id bigint, tok bigint);
		CREATE SEQUENCE bench_seq;
		INSERT INTO bench_lease VALUES " . join(', ', map { $i++; "($i, $_)" } @rows));
	return;
}

if ($parts{calls})
{
	# per call: the transition (each of a fresh leased task) and the
	# heartbeat (of one leased task, N times), one client, -M prepared;
	# the transition's script reads its task from bench_lease first (the
	# same statement on every system)
	my $pick = "SELECT id, tok FROM bench_lease WHERE i = (SELECT nextval('bench_seq')) \\gset\n";
	my %cs = (
		tr => $pick . "SELECT result FROM ntask_transition(:id, :tok, 'succeeded') \\gset\n",
		tr_on => $pick . "SELECT result FROM ntask_transition_on(${S}::smallint, :id, :tok, 'succeeded') \\gset\n",
		hb => "SELECT ntask_heartbeat(:id, :tok, lease => '1 hour') \\gset\n",
		hb_on => "SELECT ntask_heartbeat_on(${S}::smallint, :id, :tok, lease => '1 hour') \\gset\n",
		# the claim of 1 (the call alone in its statement: what takes the
		# direct path), and the drain: claim 1 + transition to succeeded
		cl => "SELECT task_id FROM ntask_claim('b', 'w', 1);\n",
		cl_on => "SELECT task_id FROM ntask_claim_on(${S}::smallint, 'b', 'w', 1);\n",
		dr => "SELECT task_id AS id, token AS tok FROM ntask_claim('b', 'w', 1) \\gset\n"
		  . "SELECT result FROM ntask_transition(:id, :tok, 'succeeded') \\gset\n",
		dr_on => "SELECT task_id AS id, token AS tok FROM ntask_claim_on(${S}::smallint, 'b', 'w', 1) \\gset\n"
		  . "SELECT result FROM ntask_transition_on(${S}::smallint, :id, :tok, 'succeeded') \\gset\n",
		# the drain of a worker library: its claim waits (work due at once:
		# the wait's first look claims, no sleep), then the transition
		wdr => "SELECT task_id AS id, token AS tok FROM ntask_claim('b', 'w', 1, wait => '30 seconds') \\gset\n"
		  . "SELECT result FROM ntask_transition(:id, :tok, 'succeeded') \\gset\n",
		wdr_on => "SELECT task_id AS id, token AS tok FROM ntask_claim_on(${S}::smallint, 'b', 'w', 1, wait => '30 seconds') \\gset\n"
		  . "SELECT result FROM ntask_transition_on(${S}::smallint, :id, :tok, 'succeeded') \\gset\n",
		# the worker's loop in one call: finish the task held, claim the next
		tac => "SELECT task_id AS id, token AS tok FROM ntask_transition_and_claim(:id, :tok, 'succeeded', 'b', 'w', 1) \\gset\n",
		tac_on => "SELECT task_id AS id, token AS tok FROM ntask_transition_and_claim_on(${S}::smallint, :id, :tok, 'succeeded', 'b', 'w', 1) \\gset\n",
		# the enqueue of a fresh key (random of 10^12: 5000 keys collide
		# with a chance of about 10^-5), the call alone in its statement
		enq => "\\set k random(1, 1000000000000)\n"
		  . "SELECT task_id FROM ntask_enqueue('e', :k, '{}', partition_key => 'p');\n",
		enq_on => "\\set k random(1, 1000000000000)\n"
		  . "SELECT task_id FROM ntask_enqueue_on(${SE}::smallint, 'e', :k, '{}', partition_key => 'p');\n",
		# the release of a fresh leased task
		rel => $pick . "SELECT ntask_release(:id, :tok, delay => '1 day') AS r \\gset\n",
		rel_on => $pick . "SELECT ntask_release_on(${S}::smallint, :id, :tok, delay => '1 day') AS r \\gset\n");
	for my $k (keys %cs)
	{
		open my $f, '>', "$dir/$k.sql" or die;
		print $f $cs{$k};
		close $f;
	}
	# system: key, what, the client's node, the rows' node, direct setting
	my @csys = (
		[ 'a', 'plain PostgreSQL', $plain, $plain, undef, '' ],
		[ 'r', 'Citus worker node, _on forms, routed (ntask.citus_direct = off)', $w, $w, 'off', '_on' ],
		[ 'd', 'Citus worker node, _on forms, direct', $w, $w, 'on', '_on' ],
		[ 'r1', 'Citus coordinator, _on forms delegated, routed on the worker', $co, $w, 'off', '_on' ],
		[ 'd1', 'Citus coordinator, _on forms delegated, direct on the worker', $co, $w, 'on', '_on' ]);
	my %want = map { $_ => 1 } split ' ', ($ENV{BENCH_CALL_SYSTEMS} // 'a r d r1 d1');
	@csys = grep { $want{ $_->[0] } } @csys;
	# BENCH_CALLS: which calls (tr transition, hb heartbeat, cl claim,
	# dr drain), default all
	my @calls = split ' ', ($ENV{BENCH_CALLS} // 'tr hb cl dr tac');
	my %cname = (tr => 'ntask_transition', hb => 'ntask_heartbeat', cl => 'ntask_claim of 1',
		dr => 'drain: claim 1 + transition (per task)',
		wdr => 'drain: waiting claim of 1 + transition (per task)',
		tac => 'ntask_transition_and_claim of 1 (per task)',
		enq => 'ntask_enqueue of a fresh key', rel => 'ntask_release of a leased task');
	my %cres;
	for my $round (1 .. $ROUNDS)
	{
		for my $s (@csys)
		{
			my ($k, $what, $client, $owner, $direct, $sfx) = @$s;
			set_direct($direct) if defined $direct;
			for my $call (@calls)
			{
				my $D = '';
				my $t = $N;
				if ($call eq 'cl' || $call eq 'dr' || $call eq 'wdr' || $call eq 'tac')
				{
					load($owner, $owner != $plain);
				}
				elsif ($call eq 'enq')
				{
					# nothing to prepare: each call makes its task
				}
				else
				{
					lease_all($owner, $client);
				}
				if ($call eq 'tac')
				{
					# the first task held; N - 1 calls each finish one, claim one
					my ($id, $tok) = split /\|/, $owner->safe_psql('postgres', $owner == $plain
						? "SELECT task_id, token FROM ntask_claim('b', 'w', 1)"
						: "SELECT task_id, token FROM ntask_claim_on(${S}::smallint, 'b', 'w', 1)");
					$D = "-D id=$id -D tok=$tok";
					$t = $N - 1;
				}
				if ($call eq 'hb')
				{
					my ($id, $tok) = split /\|/, $client->safe_psql('postgres', 'SELECT id, tok FROM bench_lease WHERE i = 1');
					$D = "-D id=$id -D tok=$tok";
				}
				sleep(0.5);
				my %cpu0 = map { $_ => node_cpu($_) } ($plain, $co, $w);
				my $la0 = loadavg();
				my $pgbench = "pgbench -n -M prepared -c 1 -t $t $D -f $dir/$call$sfx.sql -h @{[$client->host]} -p @{[$client->port]} postgres 2>&1";
				my $out = ($PERF && $k eq $PERF_SYSTEM) ? perf_run($pgbench, $client, "$PERF.$call.data") : `$pgbench`;
				sleep(0.5);
				my %cpu1 = map { $_ => node_cpu($_) } ($plain, $co, $w);
				my ($lat) = $out =~ /latency average = ([\d.]+) ms/;
				my ($done) = $out =~ /number of transactions actually processed: (\d+)/;
				diag("round $round $k $call: pgbench says:\n$out") unless defined $lat && ($done // 0) == $t;
				my $own = $owner == $plain ? $plain : $w;
				my $cpu = ($cpu1{$own} - $cpu0{$own}) / $t * 1000;
				my $cpuco = $owner == $plain ? 0 : ($cpu1{$co} - $cpu0{$co}) / $t * 1000;
				push @{ $cres{$call}{$k}{lat} }, $lat // 'nan';
				push @{ $cres{$call}{$k}{cpu} }, $cpu;
				push @{ $cres{$call}{$k}{cpuco} }, $cpuco;
				diag(sprintf("round %d %-3s %s: %.3f ms per call, node CPU %.3f ms (coordinator %.3f), load %s  [%s]",
					$round, $k, $call, $lat // -1, $cpu, $cpuco, $la0, $what));
			}
		}
	}
	set_direct('on');
	# every transition succeeded with its ledger row
	diag("worker: " . $w->safe_psql('postgres',
		"SELECT state || ' ' || count(*) FROM $T GROUP BY state ORDER BY 1"));
	diag("worker: ledger rows " . $w->safe_psql('postgres', "SELECT count(*) FROM $A")
	  . ", tasks with attempts " . $w->safe_psql('postgres', "SELECT count(*) FROM $T WHERE attempts > 0"));
	diag("tasks of queue e (enq): plain " . $plain->safe_psql('postgres', "SELECT count(*) FROM ntask.task WHERE queue = 'e'")
	  . ", Citus " . $co->safe_psql('postgres', "SELECT count(*) FROM ntask.task WHERE queue = 'e'"))
	  if grep { $_ eq 'enq' } @calls;
	for my $call (@calls)
	{
		diag(sprintf("summary %s, means of %d rounds of %d calls, one client:",
			$cname{$call}, $ROUNDS, $N));
		my $al = mean(@{ $cres{$call}{a}{lat} });
		my $ac = mean(@{ $cres{$call}{a}{cpu} });
		for my $s (@csys)
		{
			my $k = $s->[0];
			my $l = mean(@{ $cres{$call}{$k}{lat} });
			my $cp = mean(@{ $cres{$call}{$k}{cpu} });
			diag(sprintf("  %-3s %.3f ms (%.2fx a), CPU of the rows' node %.3f ms (%.2fx a), coordinator %.3f ms  [%s]",
				$k, $l, $l / $al, $cp, $cp / $ac, mean(@{ $cres{$call}{$k}{cpuco} }), $s->[1]));
		}
	}
}

my @sys = (
	[ 'a', 'plain PostgreSQL, ntask_claim + ntask_transition', $plain, $plain ],
	[ 'b', 'Citus worker node, ntask_claim_on + ntask_transition_on (local shard)', $w, $w ],
	[ 'b1', 'Citus coordinator, the same calls delegated to the worker', $co, $w ],
	[ 'c', 'Citus worker node, the statements on the shard relations (PL/pgSQL)', $w, $w ]);
# BENCH_SYSTEMS: which of them, in this order, each round (default all)
my %want = map { $_ => 1 } split ' ', ($ENV{BENCH_SYSTEMS} // 'a b b1 c');
@sys = grep { $want{ $_->[0] } } @sys;
@sys = () unless $parts{drain};
die "bench/citus_direct.pl: BENCH_SYSTEMS must name a" unless $want{a};
my %res;
for my $round (1 .. $ROUNDS)
{
	for my $s (@sys)
	{
		my ($k, $what, $client, $owner) = @$s;
		load($owner, $owner != $plain);
		if ($owner == $plain)
		{
			$plain->safe_psql('postgres', 'VACUUM ANALYZE ntask.task, ntask.attempt');
		}
		else
		{
			$co->safe_psql('postgres', 'VACUUM ANALYZE ntask.task, ntask.attempt');
		}
		sleep(0.5);
		my $la0 = loadavg();
		my %cpu0 = map { $_ => node_cpu($_) } ($plain, $co, $w);
		my $t0 = time;
		my $out = `pgbench -n -M prepared -c 1 -t $N -f $dir/$k.sql -h @{[$client->host]} -p @{[$client->port]} postgres 2>&1`;
		my $el = time - $t0;
		sleep(0.5);    # the pgbench backend is reaped
		my %cpu1 = map { $_ => node_cpu($_) } ($plain, $co, $w);
		my ($lat) = $out =~ /latency average = ([\d.]+) ms/;
		my ($failed) = $out =~ /number of failed transactions: (\d+)/;
		my ($done) = $out =~ /number of transactions actually processed: (\d+)/;
		diag("round $round $k: pgbench says:\n$out") unless defined $lat && ($done // 0) == $N;
		my $own = $owner == $plain ? $plain : $w;
		my $cpu_node = ($cpu1{$own} - $cpu0{$own}) / $N * 1000;
		my $cpu_co = $owner == $plain ? 0 : ($cpu1{$co} - $cpu0{$co}) / $N * 1000;
		push @{ $res{$k}{lat} }, $lat // 'nan';
		push @{ $res{$k}{cpu} }, $cpu_node;
		push @{ $res{$k}{cpuco} }, $cpu_co;
		diag(sprintf("round %d %-3s %s: %.3f ms per task, node CPU %.3f ms per task (coordinator %.3f), %d tasks in %.1f s, load %s",
			$round, $k, $what, $lat // -1, $cpu_node, $cpu_co, $done // 0, $el, $la0));
	}
}
if ($parts{drain})
{
# the shard really drained by c: every task succeeded with its ledger row
diag("worker: " . $w->safe_psql('postgres',
	"SELECT state || ' ' || count(*) FROM $T GROUP BY state ORDER BY 1"));
diag("worker: ledger rows " . $w->safe_psql('postgres', "SELECT count(*) FROM $A"));

my $a_lat = mean(@{ $res{a}{lat} });
my $a_cpu = mean(@{ $res{a}{cpu} });
diag(sprintf("summary, means of %d rounds of %d tasks, one client (per task: claim 1 + transition):", $ROUNDS, $N));
for my $s (@sys)
{
	my $k = $s->[0];
	my $l = mean(@{ $res{$k}{lat} });
	my $cp = mean(@{ $res{$k}{cpu} });
	diag(sprintf("  %-3s %.3f ms (%.2fx a), CPU of the shard's node %.3f ms (%.2fx a), coordinator %.3f ms  [%s]",
		$k, $l, $l / $a_lat, $cp, $cp / $a_cpu, mean(@{ $res{$k}{cpuco} }), $s->[1]));
}
}
NtaskCitus::stop($c);
$plain->stop('fast');
ok(1, 'measured');
done_testing();
