
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/003_http_dispatch.pl: the background worker's HTTP dispatch against a
# real (loopback) provider, t/provider.py, that injects faults per
# Idempotency-Key prefix.
#
# One queue per case, all enqueued at once and dispatched concurrently:
#   ok-      2xx: succeeded / provider_accepted, the request's headers and body
#   put-     method PUT and a target Content-Type: sent once, as given
#   r500-    500 then 200: unknown (stage response: the server may have acted)
#            then succeeded, same key, one effect
#   ra-      429 with Retry-After: 2: the retry waits 2 s, not the 100 ms backoff
#   bad-     400: repair_required, permanent, stage http_status
#   hang-    accept-then-hang, timeout_ms 800: unknown (outcome not known),
#            the retry carries the same key, the provider has one effect
#   drop-    accept-then-drop with a reconcile_url: the next attempt asks
#            GET /status and records provider_reconciled; nothing re-sent
#   lost-    drop *without* effect, reconcile_url: /status says 404, so the
#            next attempt is invoked and sends
#   rfail-   drop, then /status answers 503 once: transient at stage
#            reconcile, then provider_reconciled
#   b503-    always 503, max_attempts 3: budget_exhausted after 3 attempts
#   refused- a closed port: transient at stage connect, outcome known
#   deny-    a host not in ntask.http_allowed_hosts: repair_required at stage
#            config; the provider sees nothing
# then ntask.worker_stats against the ledger, and the latch: with
# ntask.naptime = 60s an enqueue is dispatched at once (within 20 s), also
# into a queue created since the worker's last tick.
#
# No fixed sleeps: the test polls the database (poll_query_until) or the
# provider's /_admin/stats with a wall-clock bound.

use strict;
use warnings;

use FindBin;
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use lib $FindBin::Bin;
use NtaskProvider;

my $json = JSON::PP->new->canonical;

# ---------------------------------------------------------------------
# The provider: 127.0.0.1 only, exits with us (parent death) or on TERM
# ---------------------------------------------------------------------

my $pport = NtaskProvider::start('003');

# header(req, name): values of a header (case-insensitive) in a recorded request
sub header
{
	my ($req, $name) = @_;
	return map { $_->[1] } grep { lc($_->[0]) eq lc($name) } @{ $req->{headers} };
}

# ---------------------------------------------------------------------
# The node
# ---------------------------------------------------------------------

my $node = PostgreSQL::Test::Cluster->new('dispatch');
$node->init;
$node->append_conf('postgresql.conf', $worker_conf . "track_functions = 'all'\n");
$node->start;

sub sql
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

ok( $node->poll_query_until('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask launcher'}, '1'),
	'the ntask launcher runs before the extension exists');
is(sql(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask worker'}),
	'0', '... and starts no worker while its role (created by CREATE EXTENSION) is missing');
sql(q{CREATE EXTENSION ntask});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ntask worker'}, '1'),
	'after CREATE EXTENSION one ntask worker runs');
is( sql(q{SELECT usename FROM pg_stat_activity WHERE backend_type = 'ntask worker'}),
	'ntask_bgworker', 'it runs as ntask_bgworker, not as a superuser');
my $worker_pid = sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'ntask worker'});
is( sql(q{SELECT application_name FROM pg_stat_activity WHERE backend_type = 'ntask worker'}),
	'ntask worker postgres', 'its application_name is ntask worker and its database');
ok( $node->poll_query_until('postgres',
		qq{SELECT pid = $worker_pid AND state <> 'waiting_for_extension' FROM ntask.worker_stats}),
	'ntask.worker_stats: the worker found the extension');
my $stats0 = sql(q{SELECT last_tick FROM ntask.worker_stats});

# ---------------------------------------------------------------------
# Targets the queue API must refuse (CR/LF, owned headers, bad URL)
# ---------------------------------------------------------------------

sql(q{
	CREATE FUNCTION try_sql(s text) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN EXECUTE s; RETURN 'ok';
	EXCEPTION WHEN others THEN RETURN SQLSTATE; END $$});

my %bad_target = (
	'a header value with CR LF' =>
	  qq{{"type":"http","url":"http://127.0.0.1:$pport/send","headers":{"X-Test":"a\\r\\nX-Evil: 1"}}},
	'a header value with LF' =>
	  qq{{"type":"http","url":"http://127.0.0.1:$pport/send","headers":{"X-Test":"a\\nb"}}},
	'a header name that is not a token' =>
	  qq{{"type":"http","url":"http://127.0.0.1:$pport/send","headers":{"X Test":"a"}}},
	'Idempotency-Key set by the target' =>
	  qq{{"type":"http","url":"http://127.0.0.1:$pport/send","headers":{"idempotency-key":"x"}}},
	'an NTask- header set by the target' =>
	  qq{{"type":"http","url":"http://127.0.0.1:$pport/send","headers":{"NTask-Attempt":"9"}}},
	'a non-http url' => q{{"type":"http","url":"ftp://127.0.0.1/x"}},
	'credentials in the url' => qq{{"type":"http","url":"http://u:p\@127.0.0.1:$pport/send"}},
	'timeout_ms 0' => qq{{"type":"http","url":"http://127.0.0.1:$pport/send","timeout_ms":0}},
	'method GET' => qq{{"type":"http","url":"http://127.0.0.1:$pport/send","method":"GET"}});
for my $what (sort keys %bad_target)
{
	is( sql(qq{SELECT try_sql(\$s\$SELECT ntask_queue_set('badq', target => \$t\$$bad_target{$what}\$t\$::jsonb)\$s\$)}),
		'22023', "ntask_queue_set refuses $what (22023)");
}

# ---------------------------------------------------------------------
# Queues and provider rules, one per case
# ---------------------------------------------------------------------

my $refused_port = PostgreSQL::Test::Cluster::get_free_port();    # nothing listens
my $send    = "http://127.0.0.1:$pport/send";
my $status  = "http://127.0.0.1:$pport/status";

# queue(name, max_attempts, target overrides)
sub queue
{
	my ($q, $max_attempts, %t) = @_;
	my $target = $json->encode({
		type => 'http', url => $send, timeout_ms => 1000,
		headers => { 'X-Test' => 'a' }, %t });
	sql(qq{SELECT queue FROM ntask_queue_set('$q', max_attempts => $max_attempts,
		lease => '2 s', backoff_base => '100 ms', backoff_max => '1 s',
		target => \$t\$$target\$t\$::jsonb)});
}

# stored_target(name, max_attempts, target overrides): a queue whose target
# names a host the allowlist does not (localhost): ntask_queue_set refuses
# it (issue 30.7), so it is written around it, as a target stored before
# the list changed is
sub stored_target
{
	my ($q, $max_attempts, %t) = @_;
	my $target = $json->encode({
		type => 'http', url => "http://localhost:$pport/send", timeout_ms => 1000,
		headers => { 'X-Test' => 'a' }, %t });
	is( sql(qq{SELECT try_sql(\$s\$SELECT ntask_queue_set('$q', target => \$t\$$target\$t\$::jsonb)\$s\$)}),
		'22023', "$q: ntask_queue_set refuses a host not in ntask.http_allowed_hosts (22023)");
	# the queue is made without a target, then given the stored one: had it
	# held an allowed target first, the worker could claim with that one,
	# read at its previous tick, when the enqueue wakes it (seen on 18)
	sql(qq{SELECT queue FROM ntask_queue_set('$q', max_attempts => $max_attempts,
		lease => '2 s', backoff_base => '100 ms', backoff_max => '1 s')});
	sql(qq{UPDATE ntask.queue SET target = \$t\$$target\$t\$::jsonb WHERE queue = '$q'});
}

# ---------------------------------------------------------------------
# A round's alike results are recorded by one ntask_transition_many call
# (dispatch.c dq_record_batch), not one ntask_transition per task.  40 tasks
# to a host that is not allowed are claimed by one claim (one enqueue
# statement, one commit) and none is sent, so all 40 results are in one
# round and alike.  This runs first: no task was recorded before, so the
# worker's function statistics (track_functions = all; the worker reports
# them before it waits) count this round only.
# ---------------------------------------------------------------------
stored_target('q_denyb', 3);
# enqueue_keys(queue, prefix, n): n tasks prefix1..prefixn in one statement
sub enqueue_keys
{
	my ($q, $prefix, $n) = @_;
	return sql(qq{SELECT count(*) FROM ntask_enqueue_many('$q',
		(SELECT array_agg('$prefix' || g) FROM generate_series(1, $n) g),
		(SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, $n) g))
		WHERE created});
}

# reached(queue, state, n): poll until n tasks of queue are in state
sub reached
{
	my ($q, $state, $n) = @_;
	return $node->poll_query_until('postgres',
		qq{SELECT count(*) FROM ntask.task WHERE queue = '$q' AND state = '$state'}, $n);
}

is(enqueue_keys('q_denyb', 'denyb-', 40), '40', 'batch record: 40 tasks enqueued in one statement');
ok(reached('q_denyb', 'repair_required', 40), 'batch record: all 40 reached repair_required');
is( sql(q{SELECT count(*) FROM ntask.attempt a JOIN ntask.task t USING (task_id)
		WHERE t.queue = 'q_denyb' AND a.attempt = 1 AND a.result = 'repair_required'
		  AND a.error_class = 'permanent' AND a.error_stage = 'config' AND a.outcome_known
		  AND a.detail->>'reason' = 'host not in ntask.http_allowed_hosts'
		  AND t.attempts = 1 AND t.last_error_stage = 'config'}),
	'40', 'batch record: each has its own ledger row with the worker\'s class, stage and detail');
ok( $node->poll_query_until('postgres', q{
		SELECT coalesce(sum(calls) FILTER (WHERE funcname = 'ntask_transition_many'), 0)
		  || '/' || coalesce(sum(calls) FILTER (WHERE funcname = 'ntask_transition'), 0)
		FROM pg_stat_user_functions}, '1/0'),
	'batch record: the worker recorded the 40 results with one ntask_transition_many call and no ntask_transition')
  or diag(sql(q{SELECT string_agg(funcname || '=' || calls, ' ') FROM pg_stat_user_functions}));
is(scalar(keys %{ pkeys('denyb-') }), 0, 'batch record: the provider saw nothing');

# A grouped statement that fails (here a trigger on the ledger refuses
# denyc-3's row while fail_flag has a row) is rolled back, and the round's
# results are recorded one by one: the other nine commit in that round, and
# denyc-3 is tried again until the trigger lets it pass.
sql(q{
	CREATE TABLE fail_flag (on_key text);
	INSERT INTO fail_flag VALUES ('denyc-3');
	CREATE FUNCTION fail_one() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF EXISTS (SELECT 1 FROM public.fail_flag f JOIN ntask.task t ON t.task_key = f.on_key
		           WHERE t.task_id = NEW.task_id) THEN
			RAISE EXCEPTION 'injected failure for %', NEW.task_id;
		END IF;
		RETURN NEW;
	END $$;
	CREATE TRIGGER fail_one BEFORE INSERT ON ntask.attempt FOR EACH ROW EXECUTE FUNCTION fail_one();
	GRANT SELECT ON fail_flag TO PUBLIC});
my $fail_pos = -s $node->logfile;
stored_target('q_denyc', 3);
is(enqueue_keys('q_denyc', 'denyc-', 10), '10', 'failed group: 10 tasks enqueued in one statement');
ok(reached('q_denyc', 'repair_required', 9), 'failed group: the other 9 are recorded');
ok( wait_for('the fallback in the log', 30, sub {
		slurp_file($node->logfile, $fail_pos) =~
		  /recording 10 results in one statement failed, recording them one by one: injected failure/;
	}),
	'failed group: the grouped statement failed and the worker fell back to one by one (logged)');
is( sql(q{SELECT string_agg(t.task_key || ':' || t.state || ':' || t.attempts, ',' ORDER BY t.task_id)
		FROM ntask.task t WHERE t.queue = 'q_denyc' AND t.task_key <> 'denyc-3'}),
	join(',', map { "denyc-$_:repair_required:1" } grep { $_ != 3 } 1 .. 10),
	'failed group: each of the other 9 in one attempt');
sql(q{DELETE FROM fail_flag});
ok(reached('q_denyc', 'repair_required', 10), 'failed group: denyc-3 is recorded once the trigger lets it pass');
sql(q{DROP TRIGGER fail_one ON ntask.attempt; DROP FUNCTION fail_one(); DROP TABLE fail_flag});

queue('q_ok',      3);
queue('q_put',     3, method => 'PUT',
	headers => { 'Content-Type' => 'application/vnd.ntask-test+json', 'X-Other' => 'b c' });
queue('q_500',     3);
queue('q_429',     3);
queue('q_400',     3);
queue('q_hang',    3, timeout_ms => 800);
queue('q_drop',    3, reconcile_url => $status);
queue('q_lost',    3, reconcile_url => $status);
queue('q_rfail',   4, reconcile_url => $status);
queue('q_budget',  3);
queue('q_refused', 2, url => "http://127.0.0.1:$refused_port/send");
stored_target('q_deny', 3);

prov('POST', '/_admin/rules', {
	rules => {
		'r500-' => [ { status => 500 }, { status => 200 } ],
		'ra-'   => [ { status => 429, retry_after => '2' }, { status => 200 } ],
		'bad-'  => [ { status => 400 } ],
		'hang-' => [ { mode => 'hang', hang_ms => 30000 } ],
		'drop-' => [ { mode => 'drop' } ],
		'lost-' => [ { mode => 'drop', effect => JSON::PP::false }, { status => 200 } ],
		'rfail-' => { seq => [ { mode => 'drop' } ],
					  reconcile => [ { status => 503 }, { status => 200 } ] },
		'b503-' => [ { status => 503 } ],
	} });

my %cases = (
	q_ok => 'ok-1', q_put => 'put-1', q_500 => 'r500-1', q_429 => 'ra-1',
	q_400 => 'bad-1', q_hang => 'hang-1', q_drop => 'drop-1', q_lost => 'lost-1',
	q_rfail => 'rfail-1', q_budget => 'b503-1', q_refused => 'refused-1',
	q_deny => 'deny-1');
my $values = join(', ',
	map { "('$_', '$cases{$_}', jsonb_build_object('msg', 'hello', 'key', '$cases{$_}', 'n', 1, 'nested', jsonb_build_object('a', jsonb_build_array(1, 2.5, 'x'))))" }
	  sort keys %cases);
is( sql(qq{
		SELECT count(*) FILTER (WHERE e.created)
		FROM (VALUES $values) v(q, k, p), ntask_enqueue(v.q, v.k, v.p) e}),
	scalar(keys %cases),
	'one task per case enqueued');

my %id = map { $cases{$_} => sql("SELECT task_id FROM ntask.task WHERE task_key = '$cases{$_}'") } keys %cases;

ok( $node->poll_query_until('postgres', q{
		SELECT count(*) FROM ntask.task
		WHERE state NOT IN ('succeeded', 'repair_required', 'canceled', 'skipped')}, '0'),
	'every task reached a final state');

# the task row: state|attempts|outcome|reason|last_error_class|last_error_stage|unknown_attempts
sub task_row
{
	my ($key) = @_;
	return sql(qq{SELECT concat_ws('|', state, attempts, coalesce(outcome, '-'), coalesce(reason, '-'),
		coalesce(last_error_class, '-'), coalesce(last_error_stage, '-'), unknown_attempts)
		FROM ntask.task WHERE task_key = '$key'});
}

# the ledger of a task: one line per attempt:
# attempt|token|result|error_class|error_stage|outcome_known|outcome|invoked|http_status
# (http_status from detail, for failed attempts only: '-' when absent;
# token is the place of the attempt's token among the task's tokens, 1 for
# the lowest: tokens come from one sequence per node, so attempt n holds
# the task's n-th token, whatever its value)
sub ledger
{
	my ($key) = @_;
	return sql(qq{SELECT string_agg(concat_ws('|', a.attempt,
			(SELECT count(*) FROM ntask.attempt_all b
			 WHERE b.task_id = a.task_id AND b.token <= a.token), a.result,
			coalesce(a.error_class, '-'), coalesce(a.error_stage, '-'), a.outcome_known,
			coalesce(a.outcome, '-'), (a.invoked_at IS NOT NULL),
			CASE WHEN a.error_class IS NULL THEN '' ELSE coalesce(a.detail->>'http_status', '-') END),
			E'\n' ORDER BY a.attempt)
		FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.task_key = '$key'});
}

# ---------------------------------------------------------------------
# 2xx
# ---------------------------------------------------------------------

is(task_row('ok-1'), 'succeeded|1|provider_accepted|-|-|-|0', 'ok-1: succeeded, provider_accepted');
is(ledger('ok-1'), '1|1|succeeded|-|-|t|provider_accepted|t|',
	'ok-1: one attempt, invoked before sending, outcome known');
is(sql(q{SELECT worker FROM ntask.attempt_all WHERE task_id = } . $id{'ok-1'}),
	'ntask worker', 'ok-1: the attempt was made by the ntask worker');
{
	my $k = pkeys('ok-')->{'ok-1'};
	is($k->{requests}, 1, 'ok-1: the provider saw one request');
	is($k->{effects},  1, 'ok-1: ... and one effect');
	my $r = $k->{reqs}[0];
	is($r->{method}, 'POST', 'ok-1: POST');
	is($r->{path},   '/send', 'ok-1: to the target url');
	is_deeply([ header($r, 'Idempotency-Key') ], ['ok-1'], 'ok-1: Idempotency-Key is the task key');
	is_deeply([ header($r, 'NTask-Attempt') ], ['1'], 'ok-1: NTask-Attempt 1');
	is_deeply([ header($r, 'NTask-Task-Id') ], [ $id{'ok-1'} ], 'ok-1: NTask-Task-Id is the task id');
	is_deeply([ header($r, 'Content-Type') ], ['application/json'], 'ok-1: Content-Type application/json, once');
	is_deeply([ header($r, 'X-Test') ], ['a'], 'ok-1: the target header X-Test');
	is(scalar(grep { $_->[0] =~ /[\r\n\0]/ || $_->[1] =~ /[\r\n\0]/ } @{ $r->{headers} }),
		0, 'ok-1: no CR, LF or NUL in any header');
	is_deeply($json->decode($r->{body}),
		$json->decode(sql(q{SELECT payload FROM ntask.task WHERE task_key = 'ok-1'})),
		'ok-1: the body is the payload as JSON');
}
{
	my $r = pkeys('put-')->{'put-1'}{reqs}[0];
	is($r->{method}, 'PUT', 'put-1: method PUT');
	is_deeply([ header($r, 'Content-Type') ], ['application/vnd.ntask-test+json'],
		"put-1: the target's Content-Type replaces the default, sent once");
	is_deeply([ header($r, 'X-Other') ], ['b c'], 'put-1: a second target header');
	is_deeply([ header($r, 'Idempotency-Key') ], ['put-1'], 'put-1: Idempotency-Key');
	is(task_row('put-1'), 'succeeded|1|provider_accepted|-|-|-|0', 'put-1: succeeded');
}

# ---------------------------------------------------------------------
# Transient statuses
# ---------------------------------------------------------------------

is(ledger('r500-1'),
	"1|1|retry_wait|unknown|response|f|-|t|500\n2|2|succeeded|-|-|t|provider_accepted|t|",
	'r500-1: 500 is unknown at stage response (outcome not known: it may have had an effect), then succeeded');
{
	my $k = pkeys('r500-')->{'r500-1'};
	is_deeply([ map { (header($_, 'Idempotency-Key'))[0] } @{ $k->{reqs} } ],
		[ 'r500-1', 'r500-1' ], 'r500-1: both attempts carry the same Idempotency-Key');
	is_deeply($k->{attempts}, [ '1', '2' ], 'r500-1: NTask-Attempt 1 then 2');
	is($k->{effects}, 1, 'r500-1: one effect');
}

is(ledger('ra-1'),
	"1|1|retry_wait|transient|http_status|t|-|t|429\n2|2|succeeded|-|-|t|provider_accepted|t|",
	'ra-1: 429 is transient, then succeeded');
is( sql(q{
		SELECT a1.detail->>'retry_after_s',
			   extract(epoch FROM a1.retry_at - a1.ended_at) BETWEEN 1.9 AND 3,
			   extract(epoch FROM a2.claimed_at - a1.ended_at) >= 1.9
		FROM ntask.attempt_all a1 JOIN ntask.attempt_all a2 ON a2.task_id = a1.task_id AND a2.attempt = 2
		WHERE a1.task_id = } . $id{'ra-1'} . q{ AND a1.attempt = 1}),
	'2|t|t',
	'ra-1: Retry-After 2 honoured: retry_at 2 s after attempt 1 ended, attempt 2 not claimed before it (backoff alone: 100 ms)');

# ---------------------------------------------------------------------
# Permanent status
# ---------------------------------------------------------------------

is(task_row('bad-1'), 'repair_required|1|-|permanent_error|permanent|http_status|0',
	'bad-1: 400 is permanent: repair_required at stage http_status');
is(ledger('bad-1'), '1|1|repair_required|permanent|http_status|t|-|t|400',
	'bad-1: one attempt, outcome known');
is(pkeys('bad-')->{'bad-1'}{requests}, 1, 'bad-1: not retried');

# ---------------------------------------------------------------------
# Unknown outcomes: hang (timeout) and drop
# ---------------------------------------------------------------------

is(ledger('hang-1'),
	"1|1|retry_wait|unknown|response|f|-|t|-\n2|2|succeeded|-|-|t|provider_accepted|t|",
	'hang-1: a timeout after sending is unknown (outcome_known false), then succeeded');
is(task_row('hang-1'), 'succeeded|2|provider_accepted|-|unknown|response|1', 'hang-1: unknown_attempts 1');
{
	my $k = pkeys('hang-')->{'hang-1'};
	is($k->{effects},    1, 'hang-1: the provider counts ONE effect');
	is($k->{requests},   2, 'hang-1: two requests (no reconcile_url: the retry re-sends)');
	is($k->{duplicates}, 1, 'hang-1: the re-send was deduplicated by its Idempotency-Key');
	is_deeply([ map { (header($_, 'Idempotency-Key'))[0] } @{ $k->{reqs} } ],
		[ 'hang-1', 'hang-1' ], 'hang-1: same Idempotency-Key on both attempts');
	is($k->{reqs}[0]{end}, 'client_closed', 'hang-1: the worker closed the hanging connection');
	cmp_ok($k->{reqs}[0]{ended} - $k->{reqs}[0]{t}, '<', 5,
		'hang-1: ... after its timeout_ms (800 ms), not after the hang (30 s)');
}

is(ledger('drop-1'),
	"1|1|retry_wait|unknown|response|f|-|t|-\n2|2|succeeded|-|-|t|provider_reconciled|f|",
	'drop-1: dropped connection is unknown; the next attempt reconciles (not invoked)');
is(task_row('drop-1'), 'succeeded|2|provider_reconciled|-|unknown|response|1',
	'drop-1: succeeded with outcome provider_reconciled');
{
	my $k = pkeys('drop-')->{'drop-1'};
	is($k->{requests},      1, 'drop-1: one request with effect');
	is($k->{effects},       1, 'drop-1: one effect');
	is($k->{duplicates},    0, 'drop-1: zero re-sends');
	is($k->{status_checks}, 1, 'drop-1: one GET /status');
	my ($st) = grep { $_->{kind} eq 'status' } @{ $k->{reqs} };
	is($st->{method}, 'GET', 'drop-1: the reconcile request is a GET');
	is_deeply([ header($st, 'Idempotency-Key') ], ['drop-1'], 'drop-1: ... with the Idempotency-Key');
}

is(ledger('lost-1'),
	"1|1|retry_wait|unknown|response|f|-|t|-\n2|2|succeeded|-|-|t|provider_accepted|t|",
	'lost-1: /status said 404, so attempt 2 was invoked and sent');
{
	my $k = pkeys('lost-')->{'lost-1'};
	is_deeply([ map { $_->{kind} } @{ $k->{reqs} } ], [ 'send', 'status', 'send' ],
		'lost-1: send, reconcile, send');
	is($k->{effects}, 1, 'lost-1: one effect');
}

is(ledger('rfail-1'),
	"1|1|retry_wait|unknown|response|f|-|t|-\n"
	  . "2|2|retry_wait|transient|reconcile|t|-|f|503\n"
	  . "3|3|succeeded|-|-|t|provider_reconciled|f|",
	'rfail-1: a reconcile answering 503 is transient at stage reconcile, then reconciled');
{
	my $k = pkeys('rfail-')->{'rfail-1'};
	is($k->{requests},      1, 'rfail-1: one send');
	is($k->{status_checks}, 2, 'rfail-1: two reconcile requests');
}

# ---------------------------------------------------------------------
# Budget, connection refused, host not allowed
# ---------------------------------------------------------------------

is(task_row('b503-1'), 'repair_required|3|-|budget_exhausted|transient|http_status|0',
	'b503-1: always 503 with max_attempts 3: repair_required, budget_exhausted');
is(sql(q{SELECT count(*), string_agg(result, ',' ORDER BY attempt) FROM ntask.attempt_all WHERE task_id = } . $id{'b503-1'}),
	'3|retry_wait,retry_wait,repair_required', 'b503-1: exactly 3 attempts');
is_deeply(pkeys('b503-')->{'b503-1'}{attempts}, [ '1', '2', '3' ], 'b503-1: the provider saw attempts 1, 2, 3');

is( sql(q{
		SELECT concat_ws('|', result, error_class, error_stage, outcome_known)
		FROM ntask.attempt_all WHERE attempt = 1 AND task_id = } . $id{'refused-1'}),
	'retry_wait|transient|connect|t',
	'refused-1: connection refused is transient at stage connect, outcome known');
is(sql(q{SELECT detail->>'curl_code' FROM ntask.attempt_all WHERE attempt = 1 AND task_id = } . $id{'refused-1'}),
	'7', 'refused-1: detail names the curl error (CURLE_COULDNT_CONNECT, docs/worker.md)');
is(task_row('refused-1'), 'repair_required|2|-|budget_exhausted|transient|connect|0',
	'refused-1: budget of 2 spent, no unknown attempts');

is( sql(q{
		SELECT concat_ws('|', t.state, t.last_error_class, t.last_error_stage, a.outcome_known, t.attempts)
		FROM ntask.task t JOIN ntask.attempt_all a USING (task_id) WHERE t.task_key = 'deny-1'}),
	'repair_required|permanent|config|t|1',
	'deny-1: host not allowed: repair_required, permanent at stage config');
is(scalar(keys %{ pkeys('deny-') }), 0, 'deny-1: the provider saw nothing');
is(prov('GET', '/_admin/stats')->{totals}{no_key}, 0, 'no request without an Idempotency-Key');

# ---------------------------------------------------------------------
# worker_stats against the ledger
# ---------------------------------------------------------------------

ok( $node->poll_query_until('postgres',
		qq{SELECT last_tick > '$stats0' FROM ntask.worker_stats}),
	'worker_stats.last_tick moves');
is( sql(q{
		SELECT w.pid = p.pid, w.in_flight
		FROM ntask.worker_stats w, pg_stat_activity p WHERE p.backend_type = 'ntask worker'}),
	't|0', 'worker_stats: pid of the worker, nothing in flight');
my $totals = prov('GET', '/_admin/stats')->{totals};
is( sql(qq{
		SELECT w.dispatched >= $totals->{requests}, w.dispatched = l.invoked,
			   w.accepted = l.accepted, w.reconciled = l.reconciled,
			   w.transient = l.transient, w.permanent = l.permanent, w.unknown = l.unknown
		FROM ntask.worker_stats w,
			 (SELECT count(*) FILTER (WHERE invoked_at IS NOT NULL) AS invoked,
					 count(*) FILTER (WHERE outcome = 'provider_accepted') AS accepted,
					 count(*) FILTER (WHERE outcome = 'provider_reconciled') AS reconciled,
					 count(*) FILTER (WHERE error_class = 'transient') AS transient,
					 count(*) FILTER (WHERE error_class = 'permanent') AS permanent,
					 count(*) FILTER (WHERE error_class = 'unknown') AS unknown
			  FROM ntask.attempt_all) l}),
	't|t|t|t|t|t|t',
	'worker_stats counters match the ledger (dispatched: every request the provider saw, one per invoked attempt)');
note 'worker_stats: ' . sql(q{SELECT row_to_json(w) FROM ntask.worker_stats w});

# ---------------------------------------------------------------------
# Wake at commit: with a 60 s naptime an enqueue is still sent at once
# ---------------------------------------------------------------------

sql(q{ALTER SYSTEM SET ntask.naptime = '60s'});
$node->reload;
ok( $node->poll_query_until('postgres',
		q{SELECT now() - last_tick > interval '2 s' FROM ntask.worker_stats}),
	'after the reload the worker naps (no tick for 2 s)');

# wake-1: a queue the worker already knows
my $t0 = time;
sql(q{SELECT state FROM ntask_enqueue('q_ok', 'wake-1', '{"wake": 1}')});
ok( wait_for('the provider to see wake-1', 20,
		sub { my $k = pkeys('wake-')->{'wake-1'}; $k && $k->{requests} >= 1 }),
	'the enqueue woke the worker: the provider saw wake-1 within 20 s (naptime 60 s)');
note sprintf('wake-1 reached the provider %.2f s after the enqueue', time - $t0);
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'succeeded' FROM ntask.task WHERE task_key = 'wake-1'}),
	'wake-1 succeeded');
is( sql(q{
		SELECT a.claimed_at - t.created_at < interval '20 s'
		FROM ntask.task t JOIN ntask.attempt_all a USING (task_id) WHERE t.task_key = 'wake-1'}),
	't', 'ledger: wake-1 claimed well within the 60 s naptime of its enqueue');

# wake-2: a queue created while the worker naps
queue('q_wake', 3);
$t0 = time;
sql(q{SELECT state FROM ntask_enqueue('q_wake', 'wake-2', '{"wake": 2}')});
ok( wait_for('the provider to see wake-2', 20,
		sub { my $k = pkeys('wake-')->{'wake-2'}; $k && $k->{requests} >= 1 }),
	'an enqueue into a queue created since the last tick is dispatched at once too');
note sprintf('wake-2: %.2f s after the enqueue', time - $t0);

# wake-3, wake-4: a batch enqueue wakes it too (the enqueue wakes the worker
# only for http queues; this is the batch form of that check)
$t0 = time;
sql(q{SELECT count(*) FROM ntask_enqueue_many('q_wake', ARRAY['wake-3', 'wake-4'],
	ARRAY['{"wake": 3}', '{"wake": 4}']::jsonb[])});
ok( wait_for('the provider to see wake-3 and wake-4', 20,
		sub { my $k = pkeys('wake-'); $k->{'wake-3'} && $k->{'wake-4'} }),
	'an ntask_enqueue_many into an http queue is dispatched at once');
note sprintf('wake-3/4: %.2f s after the enqueue', time - $t0);

# ---------------------------------------------------------------------
# One request per attempt, also when a kept-alive connection dies: after a
# successful send, the next send to the same provider is accepted and the
# connection dropped without an answer.  libcurl would resend it on a fresh
# connection by itself if the connection had been reused (found by the
# chaos suite); the attempt must be unknown and the provider must have seen
# exactly one request.
# ---------------------------------------------------------------------
sql(q{ALTER SYSTEM RESET ntask.naptime});    # retries are seen at the tick
$node->reload;
queue('q_reuse', 3);
prov('POST', '/_admin/rules', { rules => {
	'reuse-b' => [ { mode => 'drop' }, { status => 200 } ] } });
sql(q{SELECT state FROM ntask_enqueue('q_reuse', 'reuse-a', '{"n": 1}')});
ok( $node->poll_query_until('postgres',
		q{SELECT state FROM ntask.task WHERE task_key = 'reuse-a'}, 'succeeded'),
	'reuse-a: delivered first');
sql(q{SELECT state FROM ntask_enqueue('q_reuse', 'reuse-b', '{"n": 2}')});
ok( $node->poll_query_until('postgres',
		q{SELECT state FROM ntask.task WHERE task_key = 'reuse-b'}, 'succeeded'),
	'reuse-b: delivered in the end');
is( sql(q{SELECT string_agg(concat_ws('/', a.attempt, a.error_class, a.error_stage, a.outcome_known), ',' ORDER BY a.token)
		FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.task_key = 'reuse-b'}),
	'1/unknown/response/f,2/t',
	'reuse-b: the dropped attempt is unknown, the second one succeeded');
is_deeply(pkeys('reuse-b')->{'reuse-b'}{attempts}, [ '1', '2' ],
	'reuse-b: the provider saw one request per attempt (NTask-Attempt 1, then 2)');
{
	my $k = pkeys('reuse-');
	isnt($k->{'reuse-a'}{reqs}[0]{peer}, $k->{'reuse-b'}{reqs}[0]{peer},
		'reuse: without keep_alive every send has its own connection');
}

# ---------------------------------------------------------------------
# keep_alive: a target that opts in reuses connections, and a reused
# connection that dies without an answer still gives one request per
# attempt: libcurl would resend the request, but it cannot rewind the body
# (read callback, no seek callback), so the transfer fails instead and the
# attempt is unknown.
# ---------------------------------------------------------------------
{
	my ($rc, $out, $err) = $node->psql('postgres',
		q{SELECT ntask_queue_set('q_badkeep', target => '{"type": "http", "url": "http://127.0.0.1/", "keep_alive": "yes"}')});
	like($err, qr/"keep_alive" must be true or false/, 'keep_alive: a non-boolean is refused');
}
queue('q_keep', 3, keep_alive => JSON::PP::true);
prov('POST', '/_admin/rules', { rules => {
	'keep-b' => [ { mode => 'drop' }, { status => 200 } ] } });
for my $key ('keep-a1', 'keep-a2')
{
	sql(qq{SELECT state FROM ntask_enqueue('q_keep', '$key', '{"n": 1}')});
	ok( $node->poll_query_until('postgres',
			qq{SELECT state FROM ntask.task WHERE task_key = '$key'}, 'succeeded'),
		"keep_alive: $key delivered");
}
sql(q{SELECT state FROM ntask_enqueue('q_keep', 'keep-b', '{"n": 2}')});
ok( $node->poll_query_until('postgres',
		q{SELECT state FROM ntask.task WHERE task_key = 'keep-b'}, 'succeeded'),
	'keep_alive: keep-b delivered in the end');
{
	my $k = pkeys('keep-');
	is($k->{'keep-a2'}{reqs}[0]{peer}, $k->{'keep-a1'}{reqs}[0]{peer},
		'keep_alive: keep-a2 went over keep-a1\'s connection');
	is($k->{'keep-b'}{reqs}[0]{peer}, $k->{'keep-a1'}{reqs}[0]{peer},
		'keep_alive: keep-b attempt 1 went over the same kept-alive connection');
	is_deeply($k->{'keep-b'}{attempts}, [ '1', '2' ],
		'keep_alive: the provider saw one request per attempt (NTask-Attempt 1, then 2)');
}
is( sql(q{SELECT string_agg(concat_ws('/', a.attempt, a.error_class, a.error_stage, a.outcome_known), ',' ORDER BY a.token)
		FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.task_key = 'keep-b'}),
	'1/unknown/response/f,2/t',
	'keep_alive: the attempt whose connection died is unknown (not resent), the second one succeeded');
is( sql(q{SELECT detail->>'curl_code' FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
		WHERE t.task_key = 'keep-b' AND a.attempt = 1}),
	'65', 'keep_alive: ... ended by CURLE_SEND_FAIL_REWIND (65): libcurl refused to send it again');

# ---------------------------------------------------------------------
# One commit per round: the first claim of a round also records the
# round's results (dispatch.c dq_claim_xact).  A claim that fails there
# (here: q_a_denied sorts first and has a worker_role the worker lacks, so
# its every claim raises 42501) is rolled back alone; the results recorded
# before it in the same transaction still commit.  Were they rolled back
# with it, every task would be sent again when its lease expired (attempt 2,
# outcome unknown).
# ---------------------------------------------------------------------
sql(q{CREATE ROLE ntask_t_nobody NOLOGIN});
queue('a_denied', 3);
sql(q{SELECT ntask_queue_set_roles('a_denied', NULL, 'ntask_t_nobody')});
queue('q_round', 3);
my $log_pos = -s $node->logfile;
is(enqueue_keys('q_round', 'round-', 20), '20',
	'one commit per round: 20 tasks enqueued beside a queue whose claim fails');
ok(reached('q_round', 'succeeded', 20), 'one commit per round: all 20 succeeded');
is( sql(q{SELECT count(*) || '/' || sum(t.attempts) || '/' || sum(t.unknown_attempts)
		FROM ntask.task t WHERE t.queue = 'q_round'}),
	'20/20/0', 'one commit per round: one attempt each, none unknown');
{
	my $k = pkeys('round-');
	is( scalar(grep { @{ $k->{$_}{reqs} } == 1 } keys %$k), 20,
		'one commit per round: the provider saw exactly one request per task');
}
ok( wait_for('the failed claim in the log', 30, sub {
		my $log = slurp_file($node->logfile, $log_pos);
		return $log =~ /ntask worker: ntask dispatch: claim failed: .*permission denied/;
	}),
	'one commit per round: meanwhile the claim of a_denied failed with a permission error, and was logged');
unlike(slurp_file($node->logfile, $log_pos), qr/giving up recording the result/,
	'one commit per round: no result was given up');
sql(q{DELETE FROM ntask.queue WHERE queue = 'a_denied'});

# ---------------------------------------------------------------------
# issue 29.7: ntask.http_retry_after_max = 0 ignores Retry-After: the
# queue's backoff (3 s here) decides, as without the header (the attempt
# records no retry_at of its own); it is not a retry at once
# (Min(Retry-After, 0) was: retry_after_s 0, retry_at = its end).
# ---------------------------------------------------------------------
{
	my $t = sql(q{SELECT last_tick FROM ntask.worker_stats});
	sql(q{ALTER SYSTEM SET ntask.http_retry_after_max = 0});
	sql(q{SELECT pg_reload_conf()});
	ok( $node->poll_query_until('postgres',
			qq{SELECT last_tick > '$t'::timestamptz + interval '300 ms' FROM ntask.worker_stats}),
		'retry_after_max 0: the worker ticked after the reload');
	queue('q_ra0', 3);
	sql(q{SELECT count(*) FROM ntask_queue_set('q_ra0', backoff_base => '3 s', backoff_max => '3 s')});
	prov('POST', '/_admin/rules',
		{ rules => { 'ra0-' => [ { status => 429, retry_after => '1' }, { status => 200 } ] } });
	sql(q{SELECT count(*) FROM ntask_enqueue('q_ra0', 'ra0-1', '{}')});
	ok( $node->poll_query_until('postgres',
			q{SELECT state FROM ntask.task WHERE task_key = 'ra0-1'}, 'succeeded'),
		'retry_after_max 0: ra0-1 succeeded on its second attempt');
	is( sql(q{
			SELECT coalesce(a1.detail->>'retry_after_s', 'none'),
				   a1.retry_at IS NULL,
				   extract(epoch FROM a2.claimed_at - a1.ended_at) >= 2.8
			FROM ntask.attempt_all a1 JOIN ntask.attempt_all a2 ON a2.task_id = a1.task_id AND a2.attempt = 2
			JOIN ntask.task t ON t.task_id = a1.task_id
			WHERE t.task_key = 'ra0-1' AND a1.attempt = 1}),
		'none|t|t',
		'retry_after_max 0: Retry-After ignored, the 3 s backoff decides (not a retry at once, not the header\'s 1 s)');
	sql(q{ALTER SYSTEM RESET ntask.http_retry_after_max});
	sql(q{SELECT pg_reload_conf()});
}

$node->stop;
done_testing();
