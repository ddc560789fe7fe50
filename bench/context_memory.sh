#!/bin/sh
# bench/context_memory.sh: a claim's peak memory against the context it
# carries (issue 45.2).  300 tasks, each with 16 checkpoints of ~61 kB
# (~0.97 MB of context a task, 292 MB in all); one ntask_claim of all 300,
# with the default ntask.max_claim_context_bytes (16 MB) and then with it
# raised to 1 GB (as good as no claim budget).  Prints the backend's peak
# RSS (VmHWM) before and after each claim.  Needs ntask installed into
# the PostgreSQL of PG_CONFIG; run as a user that may run initdb.
set -eu
PG_CONFIG=${PG_CONFIG:-pg_config}
bin=$($PG_CONFIG --bindir)
dir=$(mktemp -d /tmp/ntask-ctxmem.XXXXXX)
port=${PORT:-54998}
trap '"$bin/pg_ctl" -D "$dir/d" stop -m immediate >/dev/null 2>&1; rm -rf "$dir"' EXIT
"$bin/initdb" -D "$dir/d" -A trust >/dev/null
"$bin/pg_ctl" -D "$dir/d" -o "-p $port -k $dir -c shared_preload_libraries=ntask -c ntask.worker=off" \
	-l "$dir/log" start >/dev/null
P="$bin/psql -h $dir -p $port -d postgres -X -q -t"
$P -c 'CREATE EXTENSION ntask' \
	-c "SELECT count(*) FROM ntask_queue_set('m', lease => '1 hour')" \
	-c "SELECT count(*) FROM ntask_enqueue_many('m', ARRAY(SELECT 'k'||i FROM generate_series(1,300) i), ARRAY(SELECT '{}'::jsonb FROM generate_series(1,300)))" \
	-c "SELECT count(*) FROM ntask_claim('m','W',300) c, generate_series(1,16) s, ntask_checkpoint(c.task_id, c.token, 's'||s, to_jsonb(md5(c.task_id::text||s)||repeat(md5(s::text), 1900)))" \
	-c "SELECT count(ntask_release(task_id, token)) FROM ntask.task WHERE queue='m'" >/dev/null
for budget in 16MB 1GB; do
	cat >"$dir/m.sql" <<SQL
SET ntask.max_claim_context_bytes = '$budget';
SELECT pg_backend_pid() \\g $dir/pid
\\! echo "budget $budget: before the claim \$(grep VmHWM /proc/\$(tr -d ' \\\\n' < $dir/pid)/status)"
SELECT 'tasks ' || count(*) || ', deferred ' || count(*) FILTER (WHERE context ? 'deferred') || ', context bytes handed out ' || sum(octet_length(context::text)) FROM ntask_claim('m', 'W', 300);
\\! echo "budget $budget: after the claim  \$(grep VmHWM /proc/\$(tr -d ' \\\\n' < $dir/pid)/status)"
SELECT count(ntask_release(task_id, token)) FROM ntask.task WHERE queue = 'm' \\g /dev/null
SQL
	$P -f "$dir/m.sql"
done
