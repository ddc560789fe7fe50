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
#   conn             "host port" of the current primary (rewritten on failover)
#   stop             exists: exit when idle
#   SLOT.hold        exists: after the next claim, stop before the receipt,
#                    announce "held TASK TOKEN" and wait until it is removed
#   SLOT.status      the worker's phase: "idle", "claimed T K", "held T K",
#                    "business T K", "transition T K"
#   SLOT.log         one line per event: "<epoch> <name> <event> <task> <token> <info>"
#
# SIGTERM is a graceful stop: a task claimed but not yet worked is handed
# back with ntask_release (it is due again at once and, never invoked, does
# not spend its attempt), one being worked is finished, then the worker
# exits 0.
#
# Connection errors (server crash, immediate restart, failover) are
# retried with the same task and token: the receipt makes the business
# step idempotent ('duplicate' after a commit whose response was lost) and
# ntask_transition answers 'duplicate' for a repeated transition.

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
		my ($host, $port) = split / /, $conn;
		if (defined $port)
		{
			$dbh = eval {
				DBI->connect("dbi:Pg:dbname=postgres;host=$host;port=$port",
					'', '',
					{ RaiseError => 1, PrintError => 0, AutoCommit => 1,
					  pg_server_prepare => 0 });
			};
			if ($dbh)
			{
				$dbh->do("SET application_name = 'chaos $name'");
				event('connected', undef, undef, $port);
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
event('start', undef, undef, $$);

my $stopping = 0;
$SIG{TERM} = sub { $stopping = 1; };

my $idle_since;
while (1)
{
	last if $stopping;
	phase('idle');
	my ($tid, $tok, $payload, $prior) = retrying('claim', undef, undef, sub {
		my $row = $dbh->selectrow_arrayref(
			q{SELECT task_id, token, payload::text, prior_outcome
			  FROM ntask_claim(?, ?, 1, '2 seconds')}, undef, $queue, $name);
		return $row ? @$row : ();
	});
	if (!defined $tid)
	{
		last if -e "$dir/stop";
		exit 3 if getppid() != $ppid;
		sleep 0.03;
		next;
	}
	event('claim', $tid, $tok, $prior // 'none');
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

	# asked to stop before the work began: hand the task back
	if ($stopping)
	{
		phase("handing back $tid $tok");
		my ($r) = retrying('release', $tid, $tok, sub {
			return $dbh->selectrow_array(q{SELECT ntask_release(?, ?)}, undef, $tid, $tok);
		});
		event('handed_back', $tid, $tok, $r);
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

	phase("transition $tid $tok");
	my ($res, $st) = retrying('transition', $tid, $tok, sub {
		my $row = $dbh->selectrow_arrayref(
			q{SELECT result, state FROM ntask_transition(?, ?, 'succeeded',
				outcome => 'business_committed')}, undef, $tid, $tok);
		return @$row;
	});
	event('transition', $tid, $tok, "succeeded:$res:$st");
}

phase('exited');
event('exit', undef, undef, $stopping ? 'sigterm' : 'stop');
disconnect();
exit 0;
