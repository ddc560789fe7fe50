
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/037_trace_dispatch.pl: trace context through HTTP dispatch (issue 35.6).
# A task enqueued with a W3C traceparent (by argument or by the setting
# ntask.traceparent) reaches the provider, t/provider.py, with a
# traceparent header of the same trace id and flags and a span id of the
# attempt: each attempt its own, never zero (the claim's context column
# carries the same kind of child traceparent).  A task without one sends
# no such header (or the target's own, which a task's replaces).
#
# No fixed sleeps: the test polls the database with a wall-clock bound.

use strict;
use warnings;

use FindBin;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use lib $FindBin::Bin;
use NtaskProvider;

my $json = JSON::PP->new->canonical;
my $pport = NtaskProvider::start('035');

my $node = PostgreSQL::Test::Cluster->new('trace');
$node->init;
$node->append_conf('postgresql.conf', $worker_conf);
$node->start;

sub sql
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# the traceparent headers of each request the provider saw for key
sub tp_headers
{
	my ($key) = @_;
	my $rec = pkeys($key)->{$key} or return ();
	return map {
		[ map { $_->[1] } grep { lc($_->[0]) eq 'traceparent' } @{ $_->{headers} } ]
	} grep { $_->{kind} eq 'send' } @{ $rec->{reqs} };
}

sql(q{CREATE EXTENSION ntask});
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'running' FROM ntask.worker_stats}),
	'the worker runs');

my $trace = '4bf92f3577b34da6a3ce929d0e0e4736';
my $parent = '00f067aa0ba902b7';
my $tp = "00-$trace-$parent-01";
my $target = $json->encode({ type => 'http', url => "http://127.0.0.1:$pport/send" });
my $target_tp = '00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-00';
my $target_h = $json->encode({ type => 'http', url => "http://127.0.0.1:$pport/send",
	headers => { traceparent => $target_tp } });
sql(qq{SELECT queue FROM ntask_queue_set('tq', max_attempts => 5, backoff_base => '50 ms',
	backoff_max => '100 ms', target => \$t\$$target\$t\$::jsonb)});
sql(qq{SELECT queue FROM ntask_queue_set('th', max_attempts => 5, backoff_base => '50 ms',
	backoff_max => '100 ms', target => \$t\$$target_h\$t\$::jsonb)});
# 500 first, then 200: two attempts, two spans of one trace
prov('POST', '/_admin/rules', { rules => { 'tr-500-' => [ { status => 500 }, { status => 200 } ] } });

sql(qq{SELECT task_id FROM ntask_enqueue('tq', 'tr-ok-1', traceparent => '$tp')});
sql(qq{SELECT task_id FROM ntask_enqueue('tq', 'tr-500-1', traceparent => '$tp')});
sql(q{SELECT task_id FROM ntask_enqueue('tq', 'tr-none-1')});
# by the setting, as an application sets it per request
sql(qq{SET ntask.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00';
	SELECT task_id FROM ntask_enqueue('tq', 'tr-set-1')});
sql(qq{SELECT task_id FROM ntask_enqueue('th', 'tr-th-own', traceparent => '$tp')});
sql(q{SELECT task_id FROM ntask_enqueue('th', 'tr-th-none')});

ok( $node->poll_query_until('postgres',
		q{SELECT count(*) FILTER (WHERE state = 'succeeded') = 6 FROM ntask.task}),
	'every task is sent and succeeds');

my @ok = tp_headers('tr-ok-1');
is(scalar @ok, 1, 'tr-ok-1: one request');
is(scalar @{ $ok[0] }, 1, '... with one traceparent header');
like($ok[0][0], qr/^00-$trace-[0-9a-f]{16}-01$/, '... valid, of the enqueue\'s trace id and flags');
my ($span) = $ok[0][0] =~ /^00-[0-9a-f]{32}-([0-9a-f]{16})-/;
isnt($span, '0000000000000000', '... its span id is not zero');
isnt($span, $parent, '... and is the attempt\'s, not the enqueue\'s parent id');
is( sql(q{SELECT traceparent FROM ntask.task WHERE task_key = 'tr-ok-1'}),
	$tp, 'the task keeps the enqueue\'s traceparent');
like( sql(q{SELECT detail FROM ntask_explain((SELECT task_id FROM ntask.task WHERE task_key = 'tr-ok-1'))
		WHERE event = 'enqueued'}),
	qr/traceparent \Q$tp\E/, 'ntask_explain shows it');

my @two = tp_headers('tr-500-1');
is(scalar @two, 2, 'tr-500-1: two attempts sent');
my @spans = map { $_->[0] =~ /^00-$trace-([0-9a-f]{16})-01$/ ? $1 : 'invalid' } @two;
ok(!grep({ $_ eq 'invalid' } @spans), '... both headers valid, of the same trace');
isnt($spans[0], $spans[1], '... with a span id per attempt');

# a worker that claims in SQL gets the same kind of child traceparent in the
# claim's context column (the dispatcher sends the one of its own claim)
sql(q{SELECT queue FROM ntask_queue_set('tsql')});
sql(qq{SELECT task_id FROM ntask_enqueue('tsql', 'sql-1', traceparent => '$tp')});
my ($ctx) = sql(q{SELECT context->>'traceparent' FROM ntask_claim('tsql', 'W')});
like($ctx, qr/^00-$trace-[0-9a-f]{16}-01$/, 'the claim\'s context carries the child traceparent too');

is_deeply([ map { scalar @$_ } tp_headers('tr-none-1') ], [0], 'a task without trace context sends no traceparent');
my @set = tp_headers('tr-set-1');
like($set[0][0], qr/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-00$/,
	'a task enqueued under the setting ntask.traceparent sends its trace id');
my @own = tp_headers('tr-th-own');
is(scalar @{ $own[0] }, 1, 'a target\'s own traceparent header is replaced by the task\'s, not sent twice');
like($own[0][0], qr/^00-$trace-/, '... the task\'s');
is_deeply([ tp_headers('tr-th-none') ]->[0], [$target_tp],
	'a task without trace context sends the target\'s header as configured');

$node->stop;
done_testing();
