
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/038_citus_nested_delegation.pl: what Citus 12.1 does with a call of an
# ntask `_on` form made from inside a function on the coordinator, the
# premise of the design in docs/scaling.md "The plain API through the
# coordinator, delegated" (issue 49; built since: t/039).  Opt-in with
# NTASK_CITUS=1 like t/023.
#
# A coordinator and one worker node, a queue with ready tasks in one shard
# value.  A PL/pgSQL function on the coordinator claims with
# `SELECT ... FROM ntask_claim_on(s, ...)`:
#   1. with citus.function_opens_transaction_block on (Citus' default)
#      the nested call is not delegated: it runs on the coordinator, its
#      statements routed (the coordinator's log: "routed path", no
#      "pushing down the function call");
#   2. with it off, Citus delegates it (planner/function_call_delegation.c:
#      TryToDelegateFunctionCall, IsMultiStatementTransaction false): the
#      coordinator logs "pushing down the function call" and the worker
#      node runs the claim on the direct path;
#   3. a delegated nested call is not part of the coordinator's
#      transaction (a READ_TASK outside a transaction block: the worker
#      commits it on its own): when the calling function raises after it,
#      the claim stays committed, its lease and its attempt on the worker's
#      shard.  A design that delegates the plain API must live with this
#      (a claim that fails after its delegated call returned holds its
#      task until the lease ends), as a client's own delegated call
#      already does.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(paths));

my $c = NtaskCitus::setup('nested', workers => 1);
my $q = $c->{q};
my $co = $c->{coord};
my ($w) = @{ $c->{workers} };
$w->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()');

$q->("SELECT count(*) FROM ntask_queue_set('nq', lease => '10 minutes')");
my $shard = $q->('SELECT min(shard) FROM ntask.shard_map');
my $n = 0;
for my $k (1 .. 400)
{
	next unless $q->("SELECT ntask_shard('nq', 'k$k')") == $shard;
	$q->("SELECT task_id FROM ntask_enqueue('nq', 'k$k', '{}')");
	last if ++$n == 6;
}
is($n, 6, 'six ready tasks in one shard value');

$q->(q{CREATE FUNCTION public.nested_claim(s smallint, fail boolean) RETURNS bigint
	LANGUAGE plpgsql AS $$
	DECLARE r bigint;
	BEGIN
		SELECT task_id INTO r FROM ntask_claim_on(s, 'nq', 'nested');
		IF fail THEN
			RAISE EXCEPTION 'the caller fails after its claim (task %)', r;
		END IF;
		RETURN r;
	END $$});

# a nested claim with the setting as given: [task id, the coordinator's
# stderr (its DEBUG1 lines), the worker's paths, the error]
sub nested
{
	my ($setting, $fail) = @_;
	my $off = -s $w->logfile;
	my ($ret, $out, $err) = $co->psql('postgres',
		"SET citus.function_opens_transaction_block = $setting; SET client_min_messages = debug1; "
		  . "SELECT public.nested_claim(${shard}::smallint, $fail)");
	return ($out, $err, [ paths($w, $off) ]);
}

my ($id, $err, $wp) = nested('on', 'false');
like($id, qr/^\d+$/, '1. setting on: the nested claim gets a task');
unlike($err, qr/pushing down the function call/, '1. setting on: Citus does not delegate the nested call');
like($err, qr/ntask: routed path for shard $shard/, '1. setting on: the call runs on the coordinator, routed');

($id, $err, $wp) = nested('off', 'false');
like($id, qr/^\d+$/, '2. setting off: the nested claim gets a task');
like($err, qr/pushing down the function call/, '2. setting off: Citus delegates the nested call');
is(join(',', @$wp), "direct path for shard $shard", '2. setting off: the worker node runs it on the direct path');
is($q->("SELECT state || ' ' || lease_owner FROM ntask.task WHERE task_id = $id"), 'leased nested',
	'2. the delegated claim leased the task');

my $leased_before = $q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'nq' AND state = 'leased'});
($id, $err, $wp) = nested('off', 'true');
like($err, qr/the caller fails after its claim \(task (\d+)\)/, '3. the calling function raises after the nested claim');
my ($lost) = $err =~ /\(task (\d+)\)/;
is($q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'nq' AND state = 'leased'}), $leased_before + 1,
	'3. the delegated claim stays committed although the caller failed');
is($q->("SELECT state || ' ' || lease_owner FROM ntask.task WHERE task_id = $lost"), 'leased nested',
	'3. its task is leased to the caller, until the lease ends');
is($q->("SELECT count(*) FROM ntask.attempt_all WHERE task_id = $lost"), '1',
	'3. and its attempt is in the ledger');

# inside a transaction block the setting does not matter: Citus keeps the
# nested call in the block's transaction (not delegated), and a failure
# rolls the claim back
my $off = -s $w->logfile;
my ($ret, $out, $err2) = $co->psql('postgres',
	"BEGIN; SET LOCAL citus.function_opens_transaction_block = off; SET LOCAL client_min_messages = debug1; "
	  . "SELECT public.nested_claim(${shard}::smallint, true); COMMIT;");
unlike($err2, qr/pushing down the function call/, '4. in a transaction block the nested call is not delegated');
is($q->(q{SELECT count(*) FROM ntask.task WHERE queue = 'nq' AND state = 'leased'}), $leased_before + 1,
	'4. and the failed block leases nothing');

NtaskCitus::stop($c);
done_testing();
