
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/001_restart.pl: an immediate shutdown (crash) loses nothing that was
# committed and keeps nothing that was not.
#
# 200 tasks are driven into every state (succeeded, retry_wait,
# repair_required for a permanent error and for a spent budget, canceled,
# leased with and without an invocation, ready).  After `stop('immediate')`
# and a restart the states, the fencing tokens, the attempt ledger and the
# audit log must be exactly as they were; a lease holder from before the
# crash can still finish; an expired lease is taken over with a new token
# above every token issued before (never a reused token); a committed enqueue survives and an enqueue left
# uncommitted in an open session does not.  A second crash checks that the
# token and the three-attempt budget stay durable across restarts.
#
# No fixed sleeps: leases are shortened with ntask_heartbeat and the test
# waits for their expiry with poll_query_until.
#
# Tokens come from one sequence per node: a task's n-th token is named
# tok(task_id, n), read from the attempt ledger (t/NtaskTok.pm), never a
# literal.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use NtaskTok;

my $node = PostgreSQL::Test::Cluster->new('restart');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ntask'
ntask.backoff_jitter = off
ntask.worker = off
});
$node->start;

# sql(text): run sql on the node (dies on error), return psql -XAt output
sub sql
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# id(key): task_id of a task key in queue rq
sub id
{
	my ($key) = @_;
	return sql("SELECT task_id FROM ntask.task WHERE queue = 'rq' AND task_key = '$key'");
}

# claim(worker, n): claim up to n tasks of rq as worker, then describe the
# claimed rows with the select list cols (from table c, the claim's rows;
# a separate statement, so that tok() sees the ledger rows of the claim;
# tail: e.g. a GROUP BY)
sub claim
{
	my ($worker, $n, $cols, $tail) = @_;
	$tail //= '';
	return sql(qq{
		CREATE TEMP TABLE c AS SELECT * FROM ntask_claim('rq', '$worker', $n);
		SELECT $cols FROM c $tail});
}

# select list for claim(): the claimed rows' tokens are each task's n-th
# token and above every other token of the ledger (any task's), distinct
sub fresh_tokens
{
	my ($n) = @_;
	return qq{count(*) FILTER (WHERE c.token = tok(c.task_id, $n)
					AND c.token > (SELECT COALESCE(max(a.token), 0) FROM ntask.attempt_all a
								   WHERE a.token NOT IN (SELECT token FROM c))),
			  count(DISTINCT c.token)};
}

# transition every task whose key is in [lo, hi] with its current token;
# returns "count|distinct result/state pairs"
sub transition_range
{
	my ($lo, $hi, $args) = @_;
	return sql(qq{
		SELECT count(*), string_agg(DISTINCT r.result || '/' || r.state, ',')
		FROM ntask.task t, ntask_transition(t.task_id, t.token, $args) r
		WHERE t.queue = 'rq' AND t.task_key BETWEEN '$lo' AND '$hi'});
}

# everything a crash must not change
sub snapshot
{
	my %s;

	$s{states} = sql(q{
		SELECT string_agg(state || '=' || n, ',' ORDER BY state)
		FROM (SELECT state, count(*) AS n FROM ntask.task GROUP BY state) s});
	$s{queue_stats} = sql(q{
		SELECT queue, ready, leased, retry_wait, succeeded, repair_required,
			   canceled, skipped, unknown_attempts, repair_count
		FROM ntask.queue_stats ORDER BY queue});
	$s{tokens} = sql(q{
		SELECT string_agg(task_key || ':' || state || ':' || token || ':' ||
						  attempts || ':' || unknown_attempts || ':' ||
						  coalesce(reason, '-'), ',' ORDER BY task_id)
		FROM ntask.task});
	$s{ledger_count} = sql('SELECT count(*) FROM ntask.attempt_all');
	$s{open_attempts} =
	  sql('SELECT count(*) FROM ntask.attempt_all WHERE ended_at IS NULL');
	$s{ledger} = sql(q{
		SELECT md5(string_agg(concat_ws('/', task_id, token, attempt, worker,
									   claimed_at, invoked_at, ended_at, result,
									   requested, error_class, outcome_known,
									   outcome, retry_at),
							  ',' ORDER BY task_id, token))
		FROM ntask.attempt_all});
	$s{audit} = sql(q{
		SELECT count(*) || ':' || md5(string_agg(concat_ws('/', audit_id, actor,
														   action, task_id, reason),
												 ',' ORDER BY audit_id))
		FROM ntask.audit});
	return \%s;
}

# ---------------------------------------------------------------------
# Build a queue with tasks in every state
# ---------------------------------------------------------------------

sql(q{CREATE EXTENSION ntask});
NtaskTok::create($node, 'postgres');
sql(q{SELECT ntask_queue_set('rq', max_attempts => 3, lease => '1 hour')});

is( sql(q{
		SELECT count(*) FILTER (WHERE created)
		FROM generate_series(1, 100) i,
			 ntask_enqueue('rq', 'k-' || lpad(i::text, 3, '0'),
						   jsonb_build_object('n', i))}),
	'100',
	'enqueued k-001..k-100');

# W1 claims all of them: each task's first token, attempt 1
is(claim('w1', 100, 'count(*), ' . fresh_tokens(1) . ', min(attempt), max(attempt)'),
	'100|100|100|1|1', 'w1 claims 100 tasks with their first tokens, distinct');

is(transition_range('k-001', 'k-040', q{'succeeded', outcome => 'provider_accepted'}),
	'40|applied/succeeded', 'k-001..k-040 succeeded');
is(transition_range('k-041', 'k-060', q{'retry_wait', retry_at => now()}),
	'20|applied/retry_wait', 'k-041..k-060 retry_wait, due now');
is(transition_range('k-061', 'k-070', q{'repair_required'}),
	'10|applied/repair_required', 'k-061..k-070 repair_required (permanent)');
is( sql(q{
		SELECT count(*) FILTER (WHERE ntask_cancel(task_id, 'ops', 'restart test') = 'applied')
		FROM ntask.task WHERE task_key BETWEEN 'k-071' AND 'k-080'}),
	'10',
	'k-071..k-080 canceled while leased');
is( sql(q{
		SELECT string_agg(DISTINCT ntask_invoked(task_id, token), ',')
		FROM ntask.task WHERE task_key BETWEEN 'k-081' AND 'k-090'}),
	'applied',
	'k-081..k-090 invoked (k-081..k-100 stay leased with their first token)');

# second attempt for k-041..k-060: each task's second token, above its
# first (and above every token issued before)
is( claim('w2', 100, 'count(*), ' . fresh_tokens(2) . q{,
			  count(*) FILTER (WHERE c.token > tok(c.task_id, 1)),
			  min(attempt), max(attempt), count(prior_outcome),
			  min(task_key), max(task_key)}),
	'20|20|20|20|2|2|0|k-041|k-060',
	'w2 claims the 20 due retries with their second tokens');
is(transition_range('k-041', 'k-050', q{'retry_wait', retry_at => now()}),
	'10|applied/retry_wait', 'k-041..k-050 retry again');
is(transition_range('k-051', 'k-055', q{'retry_wait', retry_at => now() + '1 hour'}),
	'5|applied/retry_wait', 'k-051..k-055 retry_wait in an hour (second token)');
is(sql(q{SELECT ntask_invoked(}. id('k-056') . q{, tok(} . id('k-056') . q{, 2))}),
	'applied', 'k-056 invoked (k-056..k-060 stay leased with their second token)');

# third and last attempt for k-041..k-050, then the budget is spent
is( claim('w3', 100, 'count(*), ' . fresh_tokens(3) . q{,
			  count(*) FILTER (WHERE c.token > tok(c.task_id, 2)),
			  min(attempt), max(attempt)}),
	'10|10|10|10|3|3', 'w3 claims k-041..k-050 with their third tokens');
is(transition_range('k-041', 'k-050', q{'retry_wait', 'transient'}),
	'10|applied/repair_required',
	'k-041..k-050: a transient failure on the third attempt goes to repair');

# the rest stays ready; then one explicitly committed enqueue
is( sql(q{
		SELECT count(*) FILTER (WHERE created)
		FROM generate_series(101, 200) i,
			 ntask_enqueue('rq', 'k-' || lpad(i::text, 3, '0'),
						   jsonb_build_object('n', i))}),
	'100',
	'enqueued k-101..k-200 (ready)');
is( sql(q{
		BEGIN;
		SELECT created FROM ntask_enqueue('rq', 'k-committed', '{"n": 0}');
		COMMIT;}),
	't',
	'committed enqueue of k-committed');

my $before = snapshot();
is($before->{states},
	'canceled=10,leased=25,ready=101,repair_required=20,retry_wait=5,succeeded=40',
	'tasks per state before the crash');
is($before->{ledger_count}, '130', 'attempt ledger rows before the crash');
is($before->{open_attempts}, '25', 'open attempts before the crash');
is( sql(q{
		SELECT string_agg(reason || '=' || n, ',' ORDER BY reason)
		FROM (SELECT reason, count(*) AS n FROM ntask.task
			  WHERE state = 'repair_required' GROUP BY reason) s}),
	'budget_exhausted=10,permanent_error=10',
	'repair reasons before the crash');
is( sql(q{
		SELECT string_agg(place || '=' || n, ',' ORDER BY place)
		FROM (SELECT CASE token WHEN tok(task_id, 1) THEN '1st'
								WHEN tok(task_id, 2) THEN '2nd' END AS place,
					 count(*) AS n
			  FROM ntask.task WHERE state = 'leased' GROUP BY 1) s}),
	'1st=20,2nd=5',
	'leased tokens before the crash: 20 first tokens, 5 second tokens');

# ---------------------------------------------------------------------
# An open transaction across the crash: its enqueue and its transition
# must vanish
# ---------------------------------------------------------------------

my $have_bg = $node->can('background_psql') ? 1 : 0;
my $bg;
SKIP:
{
	skip 'background_psql not available in this PostgreSQL::Test::Cluster', 2
	  unless $have_bg;

	$bg = $node->background_psql('postgres', on_error_stop => 1);
	$bg->query_safe('BEGIN');
	is( $bg->query_safe(
			q{SELECT created FROM ntask_enqueue('rq', 'k-uncommitted', '{"n": -1}')}),
		't',
		'uncommitted enqueue of k-uncommitted (session left open)');
	is( $bg->query_safe(
			q{SELECT result FROM ntask_transition(} . id('k-057') . q{, tok(}
			  . id('k-057') . q{, 2), 'succeeded')}),
		'applied',
		'uncommitted transition of k-057 to succeeded (session left open)');
}

is_deeply(snapshot(), $before, 'the open transaction is invisible before the crash');

# ---------------------------------------------------------------------
# Crash and restart
# ---------------------------------------------------------------------

$node->stop('immediate');
$bg->quit if $have_bg;    # its server is gone; psql just exits
$node->start;

my $after = snapshot();
for my $k (sort keys %$before)
{
	is($after->{$k}, $before->{$k}, "after the crash: $k unchanged");
}

is(sql(q{SELECT state, token FROM ntask.task WHERE task_key = 'k-committed'}),
	'ready|0', 'committed enqueue survived the crash');
SKIP:
{
	skip 'background_psql not available in this PostgreSQL::Test::Cluster', 4
	  unless $have_bg;

	is(sql(q{SELECT count(*) FROM ntask.task WHERE task_key = 'k-uncommitted'}),
		'0', 'uncommitted enqueue did not survive the crash');
	is( sql(q{
			SELECT t.state, t.token = tok(t.task_id, 2), a.ended_at IS NULL,
				   a.requested IS NULL
			FROM ntask.task t JOIN ntask.attempt_all a USING (task_id, token)
			WHERE t.task_key = 'k-057'}),
		'leased|t|t|t',
		'uncommitted transition did not survive: k-057 still leased by its second token, attempt open');
	is( sql(q{SELECT created, state FROM ntask_enqueue('rq', 'k-uncommitted', '{"n": -1}')}),
		't|ready',
		'the lost key is free again: enqueue creates it');
	is( sql(q{SELECT result, state FROM ntask_transition(} . id('k-057') . q{, tok(}
			  . id('k-057') . q{, 2), 'succeeded')}),
		'applied|succeeded',
		'the pre-crash lease holder of k-057 can still finish with its second token');
}

# ---------------------------------------------------------------------
# Claims after the restart: ready tasks first, unexpired leases untouched
# ---------------------------------------------------------------------

# their tokens are above every token issued before the crash (the token
# sequence is durable)
my $ready_now = sql(q{SELECT count(*) FROM ntask.task WHERE state = 'ready'});
is( claim('w9', 1000, 'count(*), ' . fresh_tokens(1) . q{,
			  count(*) FILTER (WHERE task_key BETWEEN 'k-001' AND 'k-100')}),
	"$ready_now|$ready_now|$ready_now|0",
	'after the restart a claim hands out only the ready tasks, with first tokens above every earlier token');

# k-056 (second token, invoked) loses its lease: shorten it, wait for expiry
is( sql(q{SELECT ntask_heartbeat(} . id('k-056') . q{, tok(} . id('k-056')
		  . q{, 2), '200 milliseconds') IS NOT NULL}),
	't', 'pre-crash second token of k-056 still holds its lease (heartbeat)');
ok( $node->poll_query_until('postgres',
		q{SELECT lease_until < now() FROM ntask.task WHERE task_key = 'k-056'}),
	'lease of k-056 expired');
is( claim('w10', 1000, 'task_key, attempt, ' . fresh_tokens(3) . ', prior_outcome',
		  'GROUP BY task_key, attempt, prior_outcome'),
	'k-056|3|1|1|unknown',
	'takeover after the restart: a third token above every earlier one, attempt 3, prior outcome unknown');
my $k056 = id('k-056');
is( sql(qq{
		SELECT result, outcome_known, invoked_at IS NOT NULL
		FROM ntask.attempt_all WHERE task_id = $k056 AND token = tok($k056, 2)}),
	'lease_expired|f|t',
	'ledger: the taken-over attempt was invoked and its outcome is unknown');
is(sql(qq{SELECT result FROM ntask_transition($k056, tok($k056, 2), 'succeeded')}),
	'stale', 'the old second token of k-056 is stale after the takeover');
is(sql(qq{SELECT ntask_invoked($k056, tok($k056, 2))}),
	'stale', 'ntask_invoked with the old second token is stale too');

# ---------------------------------------------------------------------
# Second crash: token and budget stay durable
# ---------------------------------------------------------------------

my $before2 = snapshot();
$node->stop('immediate');
$node->start;
is_deeply(snapshot(), $before2, 'second crash: nothing changed');

is( sql(q{SELECT state, token = tok(task_id, 3), attempts
		   FROM ntask.task WHERE task_key = 'k-056'}),
	'leased|t|3', 'k-056 still leased by its third token after the second crash');
is( sql(q{
		SELECT count(*) FROM ntask.task t,
			 ntask_heartbeat(t.task_id, t.token, '200 milliseconds') h
		WHERE t.task_key IN ('k-056', 'k-081') AND h IS NOT NULL}),
	'2',
	'shorten the leases of k-056 (third token) and k-081 (first token)');
ok( $node->poll_query_until('postgres',
		q{SELECT bool_and(lease_until < now()) FROM ntask.task
		  WHERE task_key IN ('k-056', 'k-081')}),
	'leases of k-056 and k-081 expired');
is( claim('w11', 1000, 'task_key, attempt, ' . fresh_tokens(2) . ', prior_outcome',
		  'GROUP BY task_key, attempt, prior_outcome'),
	'k-081|2|1|1|unknown',
	'k-081 taken over with a second token above every earlier one; k-056 is not handed out a fourth time');
is( sql(q{
		SELECT state, token = tok(task_id, 3), attempts, reason,
			   (SELECT count(*) FROM ntask.attempt_all a WHERE a.task_id = t.task_id)
		FROM ntask.task t WHERE task_key = 'k-056'}),
	'repair_required|t|3|budget_exhausted|3',
	'k-056 spent its three attempts: repair_required, token not reused or bumped');
is( sql(q{
		SELECT count(*), count(*) FILTER (WHERE token = tok(task_id, 1)),
			   count(*) FILTER (WHERE token = tok(task_id, 2))
		FROM ntask.task
		WHERE state = 'leased' AND (task_key BETWEEN 'k-058' AND 'k-060'
									OR task_key BETWEEN 'k-082' AND 'k-100')}),
	'22|19|3',
	'the other pre-crash leases are untouched');
is( sql(q{
		SELECT count(*) FROM ntask.task
		WHERE state = 'leased' AND lease_owner IN ('w1', 'w2')
		  AND ((task_key BETWEEN 'k-058' AND 'k-060' AND token = tok(task_id, 2))
			OR (task_key BETWEEN 'k-082' AND 'k-100' AND token = tok(task_id, 1)))}),
	'22',
	'... with their owners and tokens');

$node->stop;
done_testing();
