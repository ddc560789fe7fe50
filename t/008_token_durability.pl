
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/008_token_durability.pl: a fencing token is never handed out twice,
# not across a crash with asynchronous commit and not across a failover to
# an asynchronous standby that missed the claim (issue 11 item 8).
#
# A. Crash with synchronous_commit = off (server and session).  The WAL
#    writer is slowed down (wal_writer_delay = 10s, wal_writer_flush_after
#    large, no autovacuum, no checkpoints), so an acknowledged
#    asynchronous commit is still only in the WAL buffers when the server
#    is stopped with `stop('immediate')`.  In every round all tasks of a
#    queue are claimed in one call (token recorded per task), the server
#    crashes right after the claim was acknowledged and restarts.  After
#    the restart each task must still carry the token the claim returned,
#    and the next claim (once the 1 s leases expired) must hand out a
#    strictly greater token for EVERY task: the worker of round r and the
#    worker of round r + 1 never hold the same token.  At the end the
#    ledger must have exactly one ntask.attempt row per token handed out
#    (no token issued twice, none missing, none extra).  Claim must force
#    a flushed commit whatever synchronous_commit says.
#
# B. Failover to an asynchronous standby that never received a claim.  A
#    standby is created from a backup but not started; the primary then
#    claims every task (tokens t1: each task's second token for tasks
#    claimed once before the backup, its first for the others) and is
#    lost (immediate stop).  The standby
#    starts without ever reaching the primary and is promoted (timeline 2),
#    so it has the tasks in their pre-claim state.  The claim there must
#    issue for every task a token > t1, indeed above every token t1 of any
#    task, and by the design tokens on timeline T > 1 are
#    >= ((T-1) << 48) + 1 (the timeline's floor).
#    The old holder's token t1 must never be 'applied' on the new primary:
#    before the new claim it may raise NT003 (never issued), after it the
#    result is 'stale' (these calls run in a rolled-back transaction, so
#    a wrong 'applied' changes nothing).  A second claim on timeline 2
#    must still increase, and then n1's tokens are stale too.
#
# No fixed sleeps: lease expiry and promotion are awaited with
# poll_query_until.  One summary line is printed with note().
#
# Tokens come from one sequence per node: a task's n-th token is named
# tok(task_id, n), read from the attempt ledger (t/NtaskTok.pm).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use NtaskTok;

my $TASKS  = 50;         # tasks in part A
my $ROUNDS = 8;          # crashes in part A
my $FTASKS = 20;         # tasks in part B (half claimed before the backup)
my $TL2_MIN = (1 << 48) + 1;    # lowest token the design allows on timeline 2

# claim_all(node, queue, worker): claim every due task of queue in one call
# with synchronous_commit = off in the session; returns { task_id => token }
sub claim_all
{
	my ($node, $queue, $worker) = @_;
	my $out = $node->safe_psql(
		'postgres', qq{
SET synchronous_commit = off;
SELECT c.task_id, c.token, current_setting('synchronous_commit')
FROM ntask_claim('$queue', '$worker', max_tasks => 1000) c
ORDER BY c.task_id;});
	my %tok;
	for my $line (split /\n/, $out)
	{
		my ($id, $token, $sc) = split /\|/, $line;
		die "claim ran with synchronous_commit = $sc" unless $sc eq 'off';
		$tok{$id} = $token;
	}
	return \%tok;
}

# tokens(node, queue): { task_id => token } as stored in ntask.task
sub tokens
{
	my ($node, $queue) = @_;
	my %tok = map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres',
		"SELECT task_id, token FROM ntask.task WHERE queue = '$queue'");
	return \%tok;
}

# wait_all_due(node, queue, n): wait until all n tasks of queue are due
# (ready, or leased with an expired lease), i.e. a claim takes them all
sub wait_all_due
{
	my ($node, $queue, $n) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = $n FROM ntask.task
		WHERE queue = '$queue' AND due_at <= now()});
}

# not_greater(old, new): "id:old->new" for every task of old whose token in
# new is missing or not strictly greater
sub not_greater
{
	my ($old, $new) = @_;
	return map { "$_:$old->{$_}->" . ($new->{$_} // 'none') }
	  grep { !defined $new->{$_} || $new->{$_} <= $old->{$_} }
	  sort { $a <=> $b } keys %$old;
}

# differing(a, b): "id:a/b" for every task whose tokens differ
sub differing
{
	my ($x, $y) = @_;
	my %ids = map { $_ => 1 } keys %$x, keys %$y;
	return map { "$_:" . ($x->{$_} // 'none') . '/' . ($y->{$_} // 'none') }
	  grep { ($x->{$_} // -1) != ($y->{$_} // -1) }
	  sort { $a <=> $b } keys %ids;
}

# first few list elements, for diagnostics
sub sample
{
	my @l = @_;
	return join(', ', @l[ 0 .. ($#l < 4 ? $#l : 4) ]) . (@l > 5 ? ', ...' : '');
}

# transition_with(node, tokens): ntask_transition(id, token, 'succeeded')
# for every task, each under its own savepoint (ON_ERROR_ROLLBACK), all in
# one transaction that is rolled back, so nothing changes whatever the
# answers; returns (number of results by result, number of NT003 errors,
# number of other errors)
sub transition_with
{
	my ($node, $tok) = @_;
	my $sql = "\\set VERBOSITY verbose\n\\set ON_ERROR_ROLLBACK on\nBEGIN;\n";
	$sql .= "SELECT result FROM ntask_transition($_, $tok->{$_}, 'succeeded');\n"
	  for sort { $a <=> $b } keys %$tok;
	$sql .= "ROLLBACK;\n";
	my ($ret, $stdout, $stderr) =
	  $node->psql('postgres', $sql, on_error_stop => 0);
	my %res;
	$res{$_}++ for split /\n/, $stdout;
	my @codes = $stderr =~ /ERROR:\s+(\w+)/g;
	my $nt003 = grep { $_ eq 'NT003' } @codes;
	my $other = grep { $_ ne 'NT003' } @codes;
	return (\%res, $nt003, $other);
}

# ---------------------------------------------------------------------
# A. Crash with synchronous_commit = off
# ---------------------------------------------------------------------

my $node = PostgreSQL::Test::Cluster->new('async_crash');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ntask'
ntask.worker = off
ntask.backoff_jitter = off
synchronous_commit = off
wal_writer_delay = '10s'
wal_writer_flush_after = '1GB'
checkpoint_timeout = '1h'
max_wal_size = '4GB'
autovacuum = off
});
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION ntask');
$node->safe_psql('postgres',
	q{SELECT ntask_queue_set('dq', max_attempts => 1000, lease => '1 second')});
is( $node->safe_psql(
		'postgres', qq{
		SELECT count(*) FILTER (WHERE created)
		FROM generate_series(1, $TASKS) i,
			 ntask_enqueue('dq', 'd-' || lpad(i::text, 3, '0'), jsonb_build_object('n', i))}),
	$TASKS,
	"enqueued $TASKS tasks into dq");
is($node->safe_psql('postgres', 'SHOW synchronous_commit'),
	'off', 'synchronous_commit is off on the server');

my @issued;                     # every (task_id, token) a claim returned
my $last = claim_all($node, 'dq', 'w0');
is(scalar keys %$last, $TASKS, "round 0: the claim hands out all $TASKS tasks");
push @issued, map { "$_:$last->{$_}" } keys %$last;

my ($lost_rounds, $reissued) = (0, 0);
for my $round (1 .. $ROUNDS)
{
	# crash right after the claim was acknowledged
	$node->stop('immediate');
	$node->start;

	my @lost = differing($last, tokens($node, 'dq'));
	$lost_rounds++ if @lost;
	is(scalar @lost, 0,
		"round $round: after the crash every task keeps the token the acknowledged claim returned"
	) or diag('task:claimed/stored ' . sample(@lost));

	ok(wait_all_due($node, 'dq', $TASKS), "round $round: leases expired");
	my $new = claim_all($node, 'dq', "w$round");
	is(scalar keys %$new, $TASKS,
		"round $round: the claim after the restart hands out all $TASKS tasks");

	my @bad = not_greater($last, $new);
	$reissued += @bad;
	is(scalar @bad, 0,
		"round $round: every task gets a token strictly greater than the one w"
		  . ($round - 1)
		  . " was handed (never the same token twice)"
	) or diag('task:old->new ' . sample(@bad));

	push @issued, map { "$_:$new->{$_}" } keys %$new;
	$last = $new;
}

# the ledger: exactly one attempt row per token handed out
my %ledger = map { $_ => 1 } split /\n/,
  $node->safe_psql('postgres',
	q{SELECT a.task_id || ':' || a.token FROM ntask.attempt_all a
	  JOIN ntask.task t USING (task_id) WHERE t.queue = 'dq'});
my %seen;
my @dup = grep { $seen{$_}++ == 1 } @issued;
my @missing = grep { !$ledger{$_} } sort keys %seen;
my @extra = grep { !$seen{$_} } sort keys %ledger;
is( sprintf('duplicate=%d missing=%d extra=%d rows=%d',
		scalar @dup, scalar @missing, scalar @extra, scalar keys %ledger),
	sprintf('duplicate=0 missing=0 extra=0 rows=%d', scalar @issued),
	'ledger: one ntask.attempt row per (task_id, token) handed out, each handed out once'
) or diag('duplicated ' . sample(@dup) . '; missing ' . sample(@missing));

$node->stop;

# ---------------------------------------------------------------------
# B. Failover to an asynchronous standby that missed the claim
# ---------------------------------------------------------------------

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ntask'
ntask.worker = off
ntask.backoff_jitter = off
});
$primary->start;

$primary->safe_psql('postgres', 'CREATE EXTENSION ntask');
NtaskTok::create($primary, 'postgres');
$primary->safe_psql('postgres',
	q{SELECT ntask_queue_set('fq', max_attempts => 1000, lease => '1 second')});
is( $primary->safe_psql(
		'postgres', qq{
		SELECT count(*) FILTER (WHERE created)
		FROM generate_series(1, $FTASKS) i,
			 ntask_enqueue('fq', 'f-' || lpad(i::text, 3, '0'), jsonb_build_object('n', i))}),
	$FTASKS,
	"enqueued $FTASKS tasks into fq on the primary");

# the first half is claimed once before the backup (their first tokens,
# on both nodes)
my $half = $FTASKS / 2;
is( $primary->safe_psql(
		'postgres', qq{
		CREATE TEMP TABLE c AS SELECT * FROM ntask_claim('fq', 'p0', max_tasks => $half);
		SELECT count(*), count(*) FILTER (WHERE token = tok(task_id, 1)),
			   count(DISTINCT token), max(task_key)
		FROM c}),
	"$half|$half|$half|f-" . sprintf('%03d', $half),
	"primary: p0 claims f-001..f-$half with their first tokens (before the backup)");

$primary->backup('before_claim');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'before_claim', has_streaming => 1);
# not started: it will never receive what the primary does from now on

ok(wait_all_due($primary, 'fq', $FTASKS), 'primary: the p0 leases expired');
my $t1 = claim_all($primary, 'fq', 'p1');
is(scalar keys %$t1, $FTASKS, "primary: p1 claims all $FTASKS tasks (tokens t1)");
is( $primary->safe_psql(
		'postgres',
		q{SELECT string_agg(CASE v.token WHEN tok(v.task_id, 1) THEN '1st'
										 WHEN tok(v.task_id, 2) THEN '2nd'
										 ELSE 'other' END, ',' ORDER BY v.task_id)
		  FROM (VALUES }
		  . join(', ', map { "($_, $t1->{$_})" } sort { $a <=> $b } keys %$t1)
		  . q{) v(task_id, token)}),
	join(',', ('2nd') x $half, ('1st') x ($FTASKS - $half)),
	'primary (timeline 1): t1 is the second token of the tasks taken over, the first of the others');

# the primary is lost; the standby comes up without it and is promoted
$primary->stop('immediate');
$standby->start;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'standby is in recovery');
$standby->promote;
ok( $standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'standby promoted');
my $tli = $standby->safe_psql('postgres',
	q{SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int});
is($tli, '2', 'the promoted node writes WAL on timeline 2');

# precondition: the promoted node never saw p1's claim
is( $standby->safe_psql(
		'postgres', q{
		SELECT string_agg(DISTINCT s, ',' ORDER BY s)
		FROM (SELECT state || '/' || CASE token WHEN 0 THEN '0'
											   WHEN tok(task_id, 1) THEN '1st'
											   ELSE token::text END AS s
			  FROM ntask.task WHERE queue = 'fq') t}),
	'leased/1st,ready/0',
	'promoted node missed the claim: tasks still leased by p0 (their first token) or ready');

# before any new claim, t1 is unknown here: NT003 or a non-applied result
my ($res, $nt003, $other) = transition_with($standby, $t1);
ok( !$res->{applied} && $other == 0,
	'before the new claim, the old holder\'s token t1 is never applied (NT003 or not applied)'
) or diag(explain({ results => $res, nt003 => $nt003, other => $other }));
my $pre_nt003 = $nt003;

ok(wait_all_due($standby, 'fq', $FTASKS), 'promoted node: the p0 leases expired');
my $t2 = claim_all($standby, 'fq', 'n1');
is(scalar keys %$t2, $FTASKS, "promoted node: n1 claims all $FTASKS tasks");

my @bad = not_greater($t1, $t2);
is(scalar @bad, 0,
	'promoted node: every task gets a token strictly greater than t1 (never the same token twice)'
) or diag('task:t1->new ' . sample(@bad));
my $t1_max = (sort { $a <=> $b } values %$t1)[-1];
my @not_above = map { "$_:$t2->{$_}" } grep { $t2->{$_} <= $t1_max }
  sort { $a <=> $b } keys %$t2;
is(scalar @not_above, 0,
	"promoted node: every token issued on timeline 2 is above every token t1 of timeline 1 (max $t1_max)"
) or diag('task:token ' . sample(@not_above));
my @low = map { "$_:$t2->{$_}" } grep { $t2->{$_} < $TL2_MIN }
  sort { $a <=> $b } keys %$t2;
is(scalar @low, 0,
	"promoted node: every token issued on timeline 2 is >= (1 << 48) + 1 = $TL2_MIN"
) or diag('task:token ' . sample(@low));

# the old holder's token t1 is stale now (checked in a rolled-back
# transaction, so a wrong 'applied' changes nothing)
($res, $nt003, $other) = transition_with($standby, $t1);
my $t1_applied = $res->{applied} // 0;
is( join(',', map { "$_=$res->{$_}" } sort keys %$res) . " nt003=$nt003 other=$other",
	"stale=$FTASKS nt003=0 other=0",
	'after the new claim, ntask_transition with t1 is stale for every task (never applied)');

# a second claim on timeline 2 still increases, and n1's tokens are stale
ok(wait_all_due($standby, 'fq', $FTASKS), 'promoted node: the n1 leases expired');
my $t3 = claim_all($standby, 'fq', 'n2');
is(scalar keys %$t3, $FTASKS, "promoted node: n2 claims all $FTASKS tasks");
my @bad2 = not_greater($t2, $t3);
is(scalar @bad2, 0,
	'promoted node: the next claim on timeline 2 still gives strictly greater tokens'
) or diag('task:old->new ' . sample(@bad2));
($res, $nt003, $other) = transition_with($standby, $t2);
is( join(',', map { "$_=$res->{$_}" } sort keys %$res) . " nt003=$nt003 other=$other",
	"stale=$FTASKS nt003=0 other=0",
	'ntask_transition with the taken-over tokens of n1 is stale for every task');

$standby->stop;

note(sprintf(
		'summary: A: %d crashes x %d tasks with synchronous_commit=off, %d rounds lost an acknowledged claim, %d tokens handed out twice; '
		  . 'B: timeline %s, %d tasks, t1 %d..%d, new tokens %d..%d (min allowed %d), %d not greater than t1, '
		  . 't1 before the new claim: %d NT003, after it: %d applied',
		$ROUNDS, $TASKS, $lost_rounds, $reissued,
		$tli, $FTASKS,
		(sort { $a <=> $b } values %$t1)[ 0, -1 ],
		(sort { $a <=> $b } values %$t2)[ 0, -1 ],
		$TL2_MIN, scalar @bad, $pre_nt003, $t1_applied));

done_testing();
