
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

# t/NtaskTok.pm: name a task's n-th token in a TAP test.
#
# Tokens come from one sequence per node (docs/design.md "Tokens: one
# sequence, an attempt's name"), so a task's first token is whatever the
# sequence gave, not 1.  Tests name a task's n-th token (its n-th lease) by
# its place in the attempt ledger, as the regress suite does with tok()
# (the end of sql/setup.sql):
#
#   use lib $FindBin::Bin;
#   use NtaskTok;
#   NtaskTok::create($node, 'postgres');   # public.tok(task, n) in SQL
#   my $t2 = NtaskTok::tok($node, 'postgres', $task_id, 2);   # from Perl
#
# For an n the task has not reached, tok() is a token above the task's
# latest that was never issued for it (as in sql/setup.sql).  tok() in
# Perl needs no function in the database (for tests that dump, restore or
# upgrade it and compare catalogs).

package NtaskTok;

use strict;
use warnings;

# the value of tok(task, n): task and n are SQL expressions
sub tok_expr
{
	my ($task, $n) = @_;
	return qq{COALESCE(
		(SELECT a.token FROM ntask.attempt_all a WHERE a.task_id = ($task)
		 ORDER BY a.token OFFSET ($n) - 1 LIMIT 1),
		(SELECT COALESCE(max(a.token), 0) FROM ntask.attempt_all a WHERE a.task_id = ($task))
		+ ($n) - (SELECT count(*) FROM ntask.attempt_all a WHERE a.task_id = ($task)))};
}

# create(node, db): public.tok(task bigint, n integer), as in sql/setup.sql
sub create
{
	my ($node, $db) = @_;
	my $body = tok_expr('task', 'n');
	$node->safe_psql($db, qq{
		CREATE FUNCTION public.tok(task bigint, n integer) RETURNS bigint
		LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS \$\$
			SELECT $body
		\$\$;
		GRANT EXECUTE ON FUNCTION public.tok(bigint, integer) TO PUBLIC;});
	return;
}

# tok(node, db, task_id, n): the task's n-th token, read from the ledger
sub tok
{
	my ($node, $db, $task_id, $n) = @_;
	die "tok: task id '$task_id' is not a number" unless $task_id =~ /^\d+$/;
	die "tok: n '$n' is not a positive number" unless $n =~ /^[1-9]\d*$/;
	return $node->safe_psql($db, 'SELECT ' . tok_expr($task_id, $n));
}

1;
