#!/usr/bin/perl
# Copyright (c) ntask contributors
#
# test/chaos/worker.pl: one external SQL worker for t/006_chaos.pl.
#
#   perl test/chaos/worker.pl RUNDIR SLOT INCARNATION QUEUE SEED TRANSIENT_PCT
#
# Loop: claim one task (own transaction, lease 2 s); then ONE business
# transaction: ntask_receipt(task, token, payload) and, only if it says
# 'applied', INSERT INTO business; commit; then ntask_transition
# 'succeeded' (or now and then 'retry_wait' for a simulated transient
# error).  A claim that reports prior_outcome 'committed' is not worked
# again: an earlier token already committed the business row.
#
# Files in RUNDIR (the chaos driver owns them except the last two):
#   conn             "host port" of the current primary (rewritten on failover),
#                    or a libpq keyword list with ";" between keywords
#   stop             exists: exit when idle
#   SLOT.hold        exists: after the next claim, stop before the receipt,
#                    announce "held TASK TOKEN" and wait until it is removed
#   SLOT.status      the worker's phase: "idle", "claimed T K", "held T K",
#                    "business T K", "transition T K"
#   SLOT.log         one line per event: "<epoch> <name> <event> <task> <token> <info>"
#                    (after a claim of a task with parents: a "parents" event,
#                    the keys its context.parents names, "queue:key,...")
#
# SIGTERM is a graceful stop: a task claimed but not yet worked is handed
# back with ntask_release (it is due again at once and, never invoked, does
# not spend its attempt), one being worked is finished, then the worker
# exits 0.
#
# Three styles of the same loop, chosen from the seed so that every run
# has workers of each (logged in the "start" event):
#   plain  ntask_claim of 1, ntask_transition per task
#   tc     the finish of a task and the claim of the next in one call,
#          ntask_transition_and_claim (a finish that is still pending when
#          the worker stops is sent with ntask_transition)
#   many   ntask_claim of up to 3, one business transaction per task, and
#          the succeeded ones finished together by ntask_transition_many
# A retry_wait is always sent at once with ntask_transition.
#
# Connection errors (server crash, immediate restart, failover) are
# retried with the same task and token: the receipt makes the business
# step idempotent ('duplicate' after a commit whose response was lost) and
# ntask_transition answers 'duplicate' for a repeated transition.  A
# repeated ntask_transition_and_claim is a duplicate finish and a new
# claim; a claim whose answer was lost is never worked and its lease runs
# out (never invoked, so its attempt's outcome is known).

use strict;
use warnings;
use DBI;
use IO::Handle;
use Time::HiRes qw(time sleep);

my ($dir, $slot, $inc, $queue, $seed, $transient_pct) = @ARGV;
die "usage: worker.pl RUNDIR SLOT INCARNATION QUEUE SEED TRANSIENT_PCT\n"
  unless defined $transient_pct;
my $name = "$slot.$inc";
my $ppid = getppid();	# the chaos driver: exit when it is gone
srand($seed);

open my $log, '>>', "$dir/$slot.log" or die "$dir/$slot.log: $!";
$log->autoflush(1);
open my $status, '+>', "$dir/$slot.status" or die "$dir/$slot.status: $!";
$status->autoflush(1);

sub event
{
	my ($ev, $tid, $tok, $info) = @_;
	syswrite $log,
	  sprintf("%.3f %s %s %s %s %s\n",
		time, $name, $ev, $tid // '-', $tok // '-', $info // '-');
}

sub phase
{
	my ($p) = @_;
	seek $status, 0, 0;
	truncate $status, 0;
	syswrite $status, "$p\n";
}

my $dbh;

sub disconnect
{
	if ($dbh)
	{
		eval { $dbh->{InactiveDestroy} = 1; $dbh->disconnect; };
		undef $dbh;
	}
}

# connect to whatever "conn" names now; retries for up to 120 s
sub connect_db
{
	my $until = time + 120;
	while (1)
	{
		my $conn = '';
		if (open my $fh, '<', "$dir/conn")
		{
			$conn = <$fh> // '';
			close $fh;
		}
		chomp $conn;
		# "host port", or a libpq keyword list (t/018_patroni: several
		# hosts with target_session_attrs=read-write)
		my ($host, $port) = $conn =~ /=/ ? (undef, $conn) : split / /, $conn;
		if (defined $port)
		{
			my $dsn = defined $host ? "dbname=postgres;host=$host;port=$port" : $conn;
			$dbh = eval {
				DBI->connect("dbi:Pg:$dsn",
					'', '',
					{ RaiseError => 1, PrintError => 0, AutoCommit => 1,
					  pg_server_prepare => 0 });
			};
			if ($dbh)
			{
				$dbh->do("SET application_name = 'chaos $name'");
				event('connected', undef, undef, defined $host ? $port
					  : $dbh->selectrow_array('SELECT inet_server_port()'));
				return;
			}
		}
		die "worker $name: no database for 120 s\n" if time > $until;
		exit 3 if getppid() != $ppid;
		sleep 0.1;
	}
}

# run $code until it does not die with a connection-level error; other
# errors (a bug, a broken assumption) end the worker with the message
sub retrying
{
	my ($what, $tid, $tok, $code) = @_;
	for my $try (1 .. 600)
	{
		connect_db() unless $dbh;
		my @r = eval { $code->() };
		return @r unless $@;
		my $err = $@;
		$err =~ s/\s+/ /g;
		my $state = $dbh ? ($dbh->state // '') : '';
		eval { $dbh->rollback if $dbh && !$dbh->{AutoCommit} };
		# 08xxx connection, 57Pxx shutdown/crash, 40001/40P01 retryable,
		# or a dead handle
		my $retry = (!$dbh || !$dbh->ping || $state =~ /^(08|57P|40001|40P01|25006|S8|S1)/
			  || $err =~ /terminat|connection|server closed|no connection|shut|recovery|read-only/i);
		event('error', $tid, $tok, "$what: [$state] " . substr($err, 0, 200));
		die "worker $name: $what: $err\n" unless $retry;
		disconnect();
		sleep 0.1;
	}
	die "worker $name: $what: gave up\n";
}

connect_db();
my $style = (qw(plain tc many))[$seed % 3];
event('start', undef, undef, "$$ $style");

my $stopping = 0;
$SIG{TERM} = sub { $stopping = 1; };

my @pending;	# [tid, tok]: worked, 'succeeded' not yet sent (tc, many)
my @claimed;	# [tid, tok, payload, prior, parents]: claimed, not yet worked

# the rows of a claim: ([tid, tok, payload, prior, parents], ...)
sub claim_rows
{
	my ($n) = @_;
	return retrying('claim', undef, undef, sub {
		my $rows = $dbh->selectall_arrayref(
			q{SELECT task_id, token, payload::text, prior_outcome,
					 (SELECT string_agg(k, ',' ORDER BY k)
					  FROM jsonb_object_keys(context->'parents') k)
			  FROM ntask_claim(?, ?, ?, '2 seconds') ORDER BY task_id},
			undef, $queue, $name, $n);
		return @$rows;
	});
}

# send the pending finishes with ntask_transition_many
sub finish_many
{
	return unless @pending;
	my @ids = map { $_->[0] } @pending;
	my @toks = map { $_->[1] } @pending;
	phase('transition ' . join(',', @ids));
	my @rows = retrying('transition', $ids[0], $toks[0], sub {
		my $rows = $dbh->selectall_arrayref(
			q{SELECT task_id, result, state FROM ntask_transition_many(?::bigint[], ?::bigint[],
				'succeeded', outcome => 'business_committed')},
			undef, '{' . join(',', @ids) . '}', '{' . join(',', @toks) . '}');
		return @$rows;
	});
	die "worker $name: transition_many answered " . scalar(@rows) . " rows for " . scalar(@ids) . "\n"
	  unless @rows == @ids;
	for my $i (0 .. $#rows)
	{
		die "worker $name: transition_many rows out of order\n" unless $rows[$i][0] == $ids[$i];
		event('transition', $ids[$i], $toks[$i], "succeeded:$rows[$i][1]:$rows[$i][2]");
	}
	@pending = ();
}

# send the one pending finish alone (plain, or tc when stopping)
sub finish_one
{
	my ($tid, $tok) = @{ shift @pending };
	phase("transition $tid $tok");
	my ($res, $st) = retrying('transition', $tid, $tok, sub {
		my $row = $dbh->selectrow_arrayref(
			q{SELECT result, state FROM ntask_transition(?, ?, 'succeeded',
				outcome => 'business_committed')}, undef, $tid, $tok);
		return @$row;
	});
	event('transition', $tid, $tok, "succeeded:$res:$st");
}

# the next task to work: from this worker's claimed list, or claimed now
# (tc: finishing the pending task in the same call)
sub next_task
{
	return @{ shift @claimed } if @claimed;
	if ($style eq 'tc' && @pending)
	{
		my ($ftid, $ftok) = @{ shift @pending };
		phase("transition $ftid $ftok");
		my @rows = retrying('transition', $ftid, $ftok, sub {
			my $rows = $dbh->selectall_arrayref(
				q{SELECT task_id, token, payload::text, prior_outcome,
						 (SELECT string_agg(k, ',' ORDER BY k)
						  FROM jsonb_object_keys(context->'parents') k),
						 finish_result, finish_state
				  FROM ntask_transition_and_claim(?, ?, 'succeeded', ?, ?,
					outcome => 'business_committed', lease => '2 seconds')},
				undef, $ftid, $ftok, $queue, $name);
			return @$rows;
		});
		die "worker $name: transition_and_claim answered no row\n" unless @rows;
		event('transition', $ftid, $ftok, "succeeded:$rows[0][5]:$rows[0][6]");
		@claimed = map { [ @$_[0 .. 4] ] } grep { defined $_->[0] } @rows;
		return @claimed ? @{ shift @claimed } : ();
	}
	finish_many() if $style eq 'many';
	@claimed = claim_rows($style eq 'many' ? 3 : 1);
	return @claimed ? @{ shift @claimed } : ();
}

my $idle_since;
while (1)
{
	last if $stopping;
	phase('idle');
	my ($tid, $tok, $payload, $prior, $parents) = next_task();
	if (!defined $tid)
	{
		last if -e "$dir/stop";
		exit 3 if getppid() != $ppid;
		# an idle poll of 20-40 ms, not a fixed 30: pollers with one fixed
		# period lock into step, and the one just behind another then
		# loses every race for a trickled task (worker_term once waited
		# 20 s for a claim of w3 while the three others took 40 tasks)
		sleep 0.02 + rand(0.02);
		next;
	}
	event('claim', $tid, $tok, $prior // 'none');
	# a task enqueued with depends_on: the parents its claim's context
	# names ("queue:key,..."; t/006 checks them against the DAG)
	event('parents', $tid, $tok, $parents) if defined $parents;
	phase("claimed $tid $tok");

	# the chaos driver asked for a stop between claim and receipt
	my $held = 0;
	if (-e "$dir/$slot.hold")
	{
		$held = 1;
		phase("held $tid $tok");
		event('held', $tid, $tok);
		my $until = time + 120;
		sleep 0.01 while -e "$dir/$slot.hold" && time < $until && !$stopping;
		event('released', $tid, $tok) unless $stopping;
	}

	# asked to stop before the work began: hand the task back (and the
	# others this worker claimed and has not worked)
	if ($stopping)
	{
		for my $t ([ $tid, $tok ], @claimed)
		{
			my ($htid, $htok) = @$t;
			phase("handing back $htid $htok");
			my ($r) = retrying('release', $htid, $htok, sub {
				return $dbh->selectrow_array(q{SELECT ntask_release(?, ?)}, undef, $htid, $htok);
			});
			event('handed_back', $htid, $htok, $r);
		}
		@claimed = ();
		last;
	}

	if (defined $prior && $prior eq 'committed')
	{
		# an earlier token committed the business row: do not write again
		event('skip_committed', $tid, $tok);
	}
	elsif (!$held && rand(100) < $transient_pct)
	{
		phase("transition $tid $tok");
		my ($res, $st) = retrying('retry', $tid, $tok, sub {
			my $row = $dbh->selectrow_arrayref(
				q{SELECT result, state FROM ntask_transition(?, ?, 'retry_wait',
					'transient', '{"simulated": "transient"}')}, undef, $tid, $tok);
			return @$row;
		});
		event('transition', $tid, $tok, "retry_wait:$res:$st");
		next;
	}
	else
	{
		phase("business $tid $tok");
		my ($receipt) = retrying('business', $tid, $tok, sub {
			$dbh->begin_work;
			my ($r) = $dbh->selectrow_array(
				q{SELECT ntask_receipt(?, ?, ?::jsonb)}, undef, $tid, $tok, $payload);
			if ($r eq 'applied')
			{
				$dbh->do(q{INSERT INTO business (task_id, token, worker, payload)
						   VALUES (?, ?, ?, ?::jsonb)}, undef, $tid, $tok, $name,
					$payload);
				sleep rand(0.01);	# the business work: a crash may land here
				$dbh->commit;
			}
			else
			{
				$dbh->rollback;
			}
			return $r;
		});
		event('receipt', $tid, $tok, $receipt);
		# stale: the task moved on without us; conflict: would be a bug,
		# reported by the driver from this log
		next if $receipt eq 'stale' || $receipt eq 'conflict';
	}

	push @pending, [ $tid, $tok ];
	finish_one() if $style eq 'plain';
}

# what is still pending goes out before the worker exits
if ($style eq 'many')
{
	finish_many();
}
else
{
	finish_one() while @pending;
}

phase('exited');
event('exit', undef, undef, $stopping ? 'sigterm' : 'stop');
disconnect();
exit 0;
