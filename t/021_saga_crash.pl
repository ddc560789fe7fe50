
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/021_saga_crash.pl: sagas across crashes (issue 14).
#
# An order saga (reserve -> charge -> ship; reserve and charge have
# compensations).  The worker writes each step's business effect under
# ntask_receipt in one transaction, then reports the transition in another,
# the way docs tell it to.  The server is crashed (immediate stop) between
# the business commit and the transition of
#   1. the forward step reserve, and
#   2. the compensation of reserve (after charge failed permanently),
# and restarted in between a compensation being enqueued and claimed.
# Afterwards: every effect happened exactly once (one business row per
# step key, none for the failed charge), the takeover after each crash saw
# prior_outcome = 'committed' and its receipt was a duplicate, and the saga
# ended compensated with the compensation run once.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use NtaskTok;

my $node = PostgreSQL::Test::Cluster->new('saga_crash');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ntask'
ntask.worker = off
ntask.backoff_jitter = off
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ntask;
	SELECT count(*) FROM ntask_queue_set('stock', max_attempts => 5, lease => '1 second');
	SELECT count(*) FROM ntask_queue_set('payment', max_attempts => 5, lease => '1 second');
	SELECT count(*) FROM ntask_queue_set('shipping', max_attempts => 5, lease => '1 second');
	CREATE TABLE effects (task_key text, token bigint, at timestamptz DEFAULT clock_timestamp());
	SELECT created FROM ntask_saga_start('order-1', '[
		{"name": "reserve", "queue": "stock", "payload": {"sku": "A1"},
		 "compensate": {"queue": "stock", "payload": {"release": "A1"}}},
		{"name": "charge", "queue": "payment", "payload": {"eur": 30},
		 "compensate": {"queue": "payment", "payload": {"refund": 30}}},
		{"name": "ship", "queue": "shipping"}]');
});

# claim the next task of a queue, waiting for an expired lease if need be;
# returns (task_id, token, task_key, prior_outcome)
sub claim
{
	my ($queue) = @_;
	for (1 .. 100)
	{
		my $row = $node->safe_psql('postgres', qq{
			SELECT task_id || '|' || token || '|' || task_key || '|' || coalesce(prior_outcome, '')
			FROM ntask_claim('$queue', 'W', wait => '1 second')});
		return split(/\|/, $row, -1) if $row ne '';
	}
	die "nothing to claim in $queue";
}

# the business transaction: the effect, under the receipt; returns the receipt
sub business
{
	my ($id, $token, $key) = @_;
	return $node->safe_psql('postgres', qq{
		BEGIN;
		SELECT ntask_receipt($id, $token, '{"effect": "$key"}') AS r \\gset
		INSERT INTO effects (task_key, token) SELECT '$key', $token WHERE :'r' = 'applied';
		COMMIT;
		\\echo :r});
}

sub transition
{
	my ($id, $token, $to, $cls) = @_;
	my $c = defined $cls ? "'$cls'" : 'NULL';
	return $node->safe_psql('postgres',
		"SELECT result FROM ntask_transition($id, $token, '$to', $c)");
}

# the takeover after a crash: the same task, with its second token (tokens
# come from one sequence per node: above the first, whatever its value)
sub second_token
{
	my ($id, $token, $first_id, $first_token) = @_;
	return 'another task' unless $id == $first_id;
	return "token $token, not above the first ($first_token)" unless $token > $first_token;
	my $second = NtaskTok::tok($node, 'postgres', $id, 2);
	return $token == $second ? 'second token' : "token $token, the second is $second";
}

sub saga_state
{
	return $node->safe_psql('postgres', q{SELECT state FROM ntask.saga WHERE saga_key = 'order-1'});
}

# 1. reserve: business commit, then the crash before the transition
my ($id, $token, $key, $prior) = claim('stock');
is($key, 'order-1:reserve', 'step 1 is claimed');
is(business($id, $token, $key), 'applied', 'reserve: the business write commits under its receipt');
my ($first_id, $first_token) = ($id, $token);
$node->stop('immediate');
$node->start;
($id, $token, $key, $prior) = claim('stock');
is("$key $prior " . second_token($id, $token, $first_id, $first_token),
	'order-1:reserve committed second token',
	'after the crash the takeover (its second token) is told the effect was committed');
is(business($id, $token, $key), 'duplicate', 'reserve again: the receipt is a duplicate, nothing written');
is(transition($id, $token, 'succeeded'), 'applied', 'reserve: the takeover reports success');
is(saga_state(), 'running', 'the saga goes on');

# 2. charge fails permanently: the compensation of reserve is enqueued
($id, $token, $key) = claim('payment');
is($key, 'order-1:charge', 'step 2 is claimed');
is(transition($id, $token, 'repair_required', 'permanent'), 'applied', 'charge fails permanently');
is(saga_state(), 'compensating', 'the saga compensates');
# a restart with the compensation enqueued and not yet claimed
$node->restart;
is($node->safe_psql('postgres', q{SELECT state FROM ntask.task WHERE task_key = 'order-1:reserve:compensate'}),
	'ready', 'after a restart the compensation is still there, ready');

# 3. the compensation: business commit, crash before the transition
($id, $token, $key) = claim('stock');
is($key, 'order-1:reserve:compensate', 'the compensation of reserve is claimed');
is(business($id, $token, $key), 'applied', 'release: the business write commits');
($first_id, $first_token) = ($id, $token);
$node->stop('immediate');
$node->start;
($id, $token, $key, $prior) = claim('stock');
is("$key $prior " . second_token($id, $token, $first_id, $first_token),
	'order-1:reserve:compensate committed second token',
	'after the crash the compensation takeover is told it was committed');
is(business($id, $token, $key), 'duplicate', 'release again: a duplicate, nothing written');
is(transition($id, $token, 'succeeded'), 'applied', 'the compensation reports success');
is(saga_state(), 'compensated', 'the saga is compensated');

is($node->safe_psql('postgres', q{
	SELECT string_agg(task_key || ':' || n, ',' ORDER BY task_key)
	FROM (SELECT task_key, count(*) AS n FROM effects GROUP BY task_key) e}),
	'order-1:reserve:1,order-1:reserve:compensate:1',
	'each effect happened once: reserve once, its release once, no charge');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM ntask.task WHERE task_key LIKE 'order-1:%compensate'}),
	'1', 'one compensation task: nothing was compensated twice');
is($node->safe_psql('postgres', q{
	SELECT string_agg(name || '/' || kind || '/' || task_state, ',' ORDER BY step_no, kind DESC)
	FROM ntask.saga_status WHERE saga_key = 'order-1'}),
	'reserve/forward/succeeded,reserve/compensate/succeeded,charge/forward/canceled',
	'saga_status: reserve done and undone, charge failed and canceled once the saga was compensated, ship never started');

$node->stop;
done_testing();
