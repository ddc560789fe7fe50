
# Copyright (c) ntask contributors

# t/002_schedule_pg_cron.pl: a schedule fired for real by pg_cron.
#
# pg_cron (Debian's 1.4, minute granularity, GMT) runs ntask_fire every
# minute for a '* * * * *' schedule.  The test waits (polling, never a
# fixed sleep) until a slot is enqueued, stops the server across at least
# one slot, starts it again, and checks that the next firing catches the
# missed slot(s) up exactly once: one task per slot, no slot twice.
#
# Needs postgresql-15-cron; skipped when pg_cron is not installed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => 'pg_cron is not installed'
  unless -f "$sharedir/extension/pg_cron.control";

my $node = PostgreSQL::Test::Cluster->new('cron');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,ntask'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 20
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_cron;
	CREATE EXTENSION ntask;
	SELECT queue FROM ntask_queue_set('minutely', max_attempts => 3);
});

my $job = $node->safe_psql('postgres', q{
	SELECT cron_job FROM ntask_schedule('tick', '* * * * *', 'minutely',
										overlap => 'allow', catchup => '10 minutes');
});
is($job, 'ntask:tick', 'ntask_schedule registered a pg_cron job');
is($node->safe_psql('postgres',
		q{SELECT schedule || '|' || command FROM cron.job WHERE jobname = 'ntask:tick'}),
	q{* * * * *|SELECT * FROM public.ntask_fire('tick')},
	'the pg_cron job calls ntask_fire with the schedule name');

# pg_cron fires at the next minute boundary
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM ntask.schedule_slot WHERE schedule = 'tick' AND outcome = 'enqueued'}),
	'pg_cron fired the schedule and a slot was enqueued');

my $first = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM last_slot)::bigint FROM ntask.schedule WHERE name = 'tick'});
my $key = $node->safe_psql('postgres',
	q{SELECT task_key FROM ntask.task WHERE queue = 'minutely' ORDER BY task_id LIMIT 1});
like($key, qr/^tick:\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$/, "the task key names the slot ($key)");

# stop across at least one whole slot: wait (by the clock) until the next
# slot has passed, then start again (pg_cron skips runs missed while down)
$node->stop('fast');
my $deadline = time() + 200;
sleep(0.5) while time() < $first + 70 && time() < $deadline;
ok(time() >= $first + 70, 'the server was down across a slot');
$node->start;

ok( $node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM ntask.schedule_slot WHERE schedule = 'tick' AND outcome = 'caught_up'}),
	'after the restart the missed slot was caught up');

# the first missed slot is caught up exactly once, and no slot has two tasks
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM ntask.schedule_slot
		WHERE schedule = 'tick' AND outcome = 'caught_up'
		  AND slot = to_timestamp($first) + interval '1 minute'}),
	'1', 'the missed slot was caught up exactly once');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM (
			SELECT slot FROM ntask.schedule_slot
			WHERE schedule = 'tick' AND outcome IN ('enqueued', 'caught_up')
			GROUP BY slot HAVING count(*) > 1) d}),
	'0', 'no slot was enqueued twice');
is( $node->safe_psql('postgres', q{
		SELECT count(*) = count(DISTINCT task_key) FROM ntask.task WHERE queue = 'minutely'}),
	't', 'one task per slot key');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM ntask.task t
		WHERE t.queue = 'minutely'
		  AND NOT EXISTS (SELECT 1 FROM ntask.schedule_slot s WHERE s.task_id = t.task_id)}),
	'0', 'every task is in the slot history');

# unschedule removes the pg_cron job too
$node->safe_psql('postgres', q{SELECT ntask_unschedule('tick')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE jobname = 'ntask:tick'}),
	'0', 'ntask_unschedule removed the pg_cron job');

$node->stop;
done_testing();
