
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/049_citus_direct_memory.pl: the direct path's statements per shard value
# (a "group": src/shard.c) against their bound, ntask.citus_direct_groups
# (issue 49, "the plans' memory against the bound"; docs/reference.md),
# opt-in with NTASK_CITUS=1 like t/023.
#
# A coordinator and two workers, 16 shard values (8 on each worker node).
# One session on a worker node runs a drain per shard value of that node
# (enqueue, ntask_claim_on, heartbeat, transition: every statement a group
# keeps) and reads, after each, its own pg_backend_memory_contexts: the
# saved plans whose text names a shard relation (ntask.<table>_<shard id>)
# and their bytes.
#
#   - bound 16: each shard value adds its group's plans; the figure per
#     group is printed (the number docs/reference.md gives);
#   - bound 2: going round the 8 shard values twice keeps at most 2 groups'
#     plans, the bytes stay within 2 groups' worth, and the plans name only
#     the shards of the last two values (the least recently used is freed);
#   - the answers of both sessions are the same drains (every task
#     succeeded once, on the direct path: the path lines say so).

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require NtaskCitus;
NtaskCitus::require_citus();
NtaskCitus->import(qw(connect_to paths));

my $c = NtaskCitus::setup('dmem', shard_count => 16, conf => "log_min_messages = debug1\n");
my $q = $c->{q};
my $w = $c->{workers}[0];

sub key_in { return NtaskCitus::key_in($c, @_); }

$q->("SELECT count(*) FROM ntask_queue_set('mq', lease => '10 minutes')");
my @local = grep {
	my (undef, $n) = NtaskCitus::placement($c, $_);
	$n->port == $w->port
} split /\n/, $q->('SELECT shard FROM ntask.shard_map ORDER BY shard');
is(scalar(@local), 8, 'the worker node holds 8 of the 16 shard values');

# the saved plans of this session that name a shard relation, and their
# bytes (a plan source, its query tree and its plan each carry the text)
my $plans_sql = q{SELECT count(*) FILTER (WHERE name = 'CachedPlanSource'),
	coalesce(sum(total_bytes), 0),
	coalesce(string_agg(DISTINCT substring(ident FROM 'ntask\.task_(\d+)'), ',' ORDER BY substring(ident FROM 'ntask\.task_(\d+)')), '')
	FROM pg_backend_memory_contexts
	WHERE name IN ('CachedPlanSource', 'CachedPlanQuery', 'CachedPlan')
	  AND ident ~ 'ntask\.[a-z_]+_[0-9]{6,}'};

# one drain of one task of shard value $s by $dbh, on the direct path
sub drain_one
{
	my ($dbh, $s, $p) = @_;
	my $k = key_in('mq', $s, $p);
	my ($id) = $dbh->selectrow_array("SELECT task_id FROM ntask_enqueue('mq', '$k', '{}')");
	my ($cid, $tok) = $dbh->selectrow_array(
		"SELECT task_id, token FROM ntask_claim_on(${s}::smallint, 'mq', 'w', 1)");
	die "claimed $cid, enqueued $id" unless defined $cid && $cid == $id;
	$dbh->selectrow_array("SELECT ntask_heartbeat($id, $tok)");
	my ($r) = $dbh->selectrow_array("SELECT result FROM ntask_transition($id, $tok, 'succeeded')");
	return $r;
}

# the shard ids of the ntask.task shard of each local shard value
my %task_shard = map {
	my ($id) = NtaskCitus::placement($c, $_);
	($_ => $id)
} @local;

# ---------------------------------------------------------------------
# Bound 16: every shard value's group kept
# ---------------------------------------------------------------------
my $off = -s $w->logfile;
my $dbh = connect_to($w);
my $pid = $dbh->{pg_pid};
$dbh->do('SET ntask.citus_direct_groups = 16');
my @results;
my ($n0, $b0) = $dbh->selectrow_array($plans_sql);
is($n0, 0, 'a new session keeps no plan of a shard relation');
my @bytes;
for my $s (@local)
{
	push @results, drain_one($dbh, $s, 'a');
	my ($n, $b) = $dbh->selectrow_array($plans_sql);
	push @bytes, [ $n, $b ];
}
my ($n1, $b1) = @{ $bytes[0] };
cmp_ok($n1, '>', 0, "one group's plans after one drain: $n1 statements, $b1 bytes");
my ($n8, $b8, $shards8) = $dbh->selectrow_array($plans_sql);
is($n8, 8 * $n1, '8 shard values: 8 groups of the same statements');
my $per_group = int(($b8 - $b1) / 7);
diag("direct path, plans per group (ntask.citus_direct_groups): $n1 statements, "
	  . "first group $b1 bytes, each further one $per_group bytes; 8 groups $b8 bytes");
cmp_ok($b8, '>=', 6 * $b1, 'the bytes grow with the groups kept');
is($shards8, join(',', sort map { $task_shard{$_} } @local), 'the plans name the 8 shard values\' task shards');
$dbh->disconnect;

# ---------------------------------------------------------------------
# Bound 2: round the 8 shard values twice, at most 2 groups kept
# ---------------------------------------------------------------------
$dbh = connect_to($w);
$dbh->do('SET ntask.citus_direct_groups = 2');
my $max_n = 0;
my $max_b = 0;
for my $round (1, 2)
{
	for my $s (@local)
	{
		push @results, drain_one($dbh, $s, "b$round");
		my ($n, $b) = $dbh->selectrow_array($plans_sql);
		$max_n = $n if $n > $max_n;
		$max_b = $b if $b > $max_b;
	}
}
is($max_n, 2 * $n1, 'bound 2: never more than 2 groups\' statements');
cmp_ok($max_b, '<=', 2 * $b1 + $b1 / 2, "bound 2: at most $max_b bytes (2 groups: about " . (2 * $b1) . ')');
my (undef, undef, $shards2) = $dbh->selectrow_array($plans_sql);
is($shards2, join(',', sort map { $task_shard{$_} } @local[6, 7]),
	'bound 2: the plans left are the last two shard values\'');
$dbh->disconnect;

# ---------------------------------------------------------------------
# The drains themselves
# ---------------------------------------------------------------------
is(join(',', @results), join(',', ('applied') x 24), 'every drain applied');
is($q->("SELECT count(*) FILTER (WHERE state = 'succeeded' AND attempts = 1) || '/' || count(*) FROM ntask.task WHERE queue = 'mq'"),
	'24/24', 'the 24 tasks succeeded, once each');
my @p = paths($w, $off);
is(scalar(grep { /^routed/ } @p), 0, 'no call ran routed') or diag(join("\n", grep { /^routed/ } @p));
cmp_ok(scalar(grep { /^direct path for shard/ } @p), '>=', 24 * 4, 'every call ran on the direct path');

NtaskCitus::stop($c);
done_testing();
