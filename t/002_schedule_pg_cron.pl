
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/002_schedule_pg_cron.pl: a schedule fired for real by pg_cron.
#
# pg_cron (Debian's 1.4 on 15, 1.6.7 on 18; minute granularity, GMT) runs ntask_fire every
# minute for a '* * * * *' schedule.  The test waits (polling, never a
# fixed sleep) until a slot is enqueued, stops the server across at least
# one slot, starts it again, and checks that the next firing catches the
# missed slot(s) up exactly once: one task per slot, no slot twice.
#
# Needs pg_cron (postgresql-15-cron on 15; scripts/pg18.sh builds 1.6.7
# into 18); skipped when pg_cron is not installed.

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

# issue 30.4: DROP EXTENSION ntask takes its pg_cron jobs with it (else
# they fail every minute) and warns about the unfinished tasks it drops;
# a pg_cron job of someone else stays
$node->safe_psql('postgres', q{
	SELECT cron_job FROM ntask_schedule('tock', '0 3 * * *', 'minutely');
	SELECT cron_job FROM ntask_schedule('tock-berlin', '0 3 * * *', 'minutely', timezone => 'Europe/Berlin');
	SELECT cron.schedule('not-ntask', '0 4 * * *', 'SELECT 1');
	SELECT count(*) FROM ntask_enqueue_many('minutely',
		ARRAY(SELECT 'open-' || i FROM generate_series(1, 15) i),
		ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 15)));
});
my $open = $node->safe_psql('postgres',
	q{SELECT count(*) FROM ntask.task WHERE state IN ('ready', 'leased', 'retry_wait')});
my $max_id = $node->safe_psql('postgres', q{SELECT max(task_id) FROM ntask.task});
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE jobname LIKE 'ntask:%'}),
	'2', 'two ntask jobs before the drop');

# a DROP that fails (a dependent view, no CASCADE) keeps the jobs
$node->safe_psql('postgres', q{CREATE VIEW open_tasks AS SELECT task_id FROM ntask.task});
my ($rc, $out, $err) = $node->psql('postgres', 'DROP EXTENSION ntask');
isnt($rc, 0, 'DROP EXTENSION without CASCADE fails on the dependent view');
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE jobname LIKE 'ntask:%'}),
	'2', 'a failed drop keeps the jobs');

($rc, $out, $err) = $node->psql('postgres', 'DROP EXTENSION ntask CASCADE');
is($rc, 0, 'DROP EXTENSION ntask CASCADE');
like($err, qr/WARNING:  ntask: DROP EXTENSION ntask drops $open unfinished task\(s\)/,
	"the drop warns about the $open unfinished tasks");
like($err, qr/highest task id was $max_id/, 'and names the highest task id');
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE jobname LIKE 'ntask:%'}),
	'0', 'DROP EXTENSION ntask removed its pg_cron jobs');
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE jobname = 'not-ntask'}),
	'1', 'another pg_cron job stays');

# dropping another extension does not touch ntask's jobs
$node->safe_psql('postgres', q{
	CREATE EXTENSION ntask;
	SELECT queue FROM ntask_queue_set('minutely');
	SELECT cron_job FROM ntask_schedule('tock', '0 3 * * *', 'minutely');
	CREATE EXTENSION IF NOT EXISTS pg_trgm;
	DROP EXTENSION pg_trgm;
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE jobname = 'ntask:tock'}),
	'1', 'DROP EXTENSION of another extension keeps ntask jobs');
# task ids start at 1 again after a re-create (documented; the WARNING's
# hint says how to move the sequence past the old ids)
is($node->safe_psql('postgres',
		q{SELECT task_id FROM ntask_enqueue('minutely', 'after-recreate')}),
	'1', 'a re-created extension numbers tasks from 1');

$node->stop;
done_testing();
