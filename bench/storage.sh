#!/usr/bin/env bash
# shellcheck disable=SC2034  # ENQ_* and DRAIN_* are read as ${!name}
# bench/storage.sh: what a task writes (issue 48), ntask against a plain-SQL
# queue with a token, exactly, per task, in one run.
#
# One command: starts a throwaway cluster (mktemp -d, its own port, unix
# socket only, full_page_writes = off, autovacuum off, ntask preloaded with
# its background worker off), runs each workload from ONE session, one
# transaction per statement as a worker would, and prints per task:
#
#   WAL per enqueue                     (pg_current_wal_insert_lsn around N enqueues)
#   WAL per drain                       (claim 1, commit, finish, commit; N times)
#   WAL per drain by ntask_transition_and_claim (one commit per task; against
#                                        the plain queue's two-commit drain)
#   table + index bytes per ready task  (main forks of the tables, their
#                                        indexes and TOAST, after N enqueues)
#   bytes per finished task kept        (the same after the drain and a VACUUM)
#   backend CPU per task                (utime + stime of the session's
#                                        backend, /proc/self/stat read by
#                                        the backend itself, around the loop)
#
# and the WAL of each drain split by relation and record type
# (pg_walinspect's pg_get_wal_records_info over the drain's LSN range,
# block references mapped to relation names with pg_filenode_relation).
# The cluster is stopped and removed on exit.  See docs/performance.md
# "What a task writes (issue 48)".
#
# Three baselines.  "plain" is the issue's plain queue with a token (pq.job,
# bench/storage.sql: id, payload, state, run_at, token, lease_until, a
# partial ready index), enqueued by a plain INSERT, claimed by
#   UPDATE pq.job SET state = 'leased', token = nextval('pq.token_seq'), ...
#   WHERE id = (SELECT id ... ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
# and finished by UPDATE ... SET state = 'succeeded' WHERE id = $1 AND
# token = $2.  "plain+key" is bench/run's baseline (bench/plain_queue.sh's
# bq.job): the same with a queue column and an idempotency key, unique
# (queue, task_key), enqueued with ON CONFLICT (queue, task_key) DO NOTHING
# as ntask's idempotent enqueue is.  Keys have 19 characters, as bench/run's,
# and arrive in a scattered order, as business keys do.  "pgmq" is pgmq's SQL
# (no C code; installed from a git repository at a tag, as bench/harness
# does), enqueued by pgmq.send, drained by pgmq.read(queue, 30, 1) and
# pgmq.delete: it keeps no finished task, no key and no ledger.
#
# Knobs (environment):
#   STORAGE_TASKS=5000    tasks per workload (1000-10000 is plenty: bytes are exact)
#   STORAGE_WARM=100      of those, the first ones run before the measurement
#   STORAGE_REPEAT=3      rounds of the workloads (bytes: the first; CPU: the least)
#   STORAGE_PORT=55470
#   STORAGE_BREAKDOWN=1   0: no pg_walinspect breakdown
#   STORAGE_LAYOUTS=1     0: no simulated layouts (bench/storage_layout.sql: the
#                         levers "no ledger row for a first success" and "a body
#                         table written once", written by plain SQL)
#   STORAGE_SQL='...'     SQL run after CREATE EXTENSION (to try a lever without
#                         building it: STORAGE_SQL='ALTER TABLE ntask.task SET (fillfactor = 70)')
#   STORAGE_KEEP=1        leave the cluster directory behind
#   STORAGE_PGMQ=/work/.mirror/pgmq+pgmq/repo   pgmq's git repository (a bare
#                         one will do); none there: no pgmq column
#   STORAGE_PGMQ_REV=v1.5.1
#   PG_CONFIG             the installation to run (default: pg_config in PATH)
#
# Run as root (the server runs as user postgres) or as a user that may run
# initdb.  Needs ntask installed (make install) and pg_walinspect (contrib
# of PostgreSQL 15).  About a minute with 5000 tasks.
set -euo pipefail

TASKS=${STORAGE_TASKS:-5000}
WARM=${STORAGE_WARM:-100}
PORT=${STORAGE_PORT:-55470}
BREAKDOWN=${STORAGE_BREAKDOWN:-1}
LAYOUTS=${STORAGE_LAYOUTS:-1}
REPEAT=${STORAGE_REPEAT:-3}
PG_CONFIG=${PG_CONFIG:-pg_config}
PGMQ_GIT=${STORAGE_PGMQ:-/work/.mirror/pgmq+pgmq/repo}
PGMQ_REV=${STORAGE_PGMQ_REV:-v1.5.1}

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
. "$HERE/plain_queue.sh"
PGBIN=$("$PG_CONFIG" --bindir)
SHAREDIR=$("$PG_CONFIG" --sharedir)
PKGLIBDIR=$("$PG_CONFIG" --pkglibdir)
[ -f "$SHAREDIR/extension/ntask.control" ] && [ -f "$PKGLIBDIR/ntask.so" ] ||
	{ echo "bench/storage.sh: ntask is not installed in $PKGLIBDIR; run 'make install' first" >&2; exit 1; }
[ -f "$SHAREDIR/extension/pg_walinspect.control" ] ||
	{ echo "bench/storage.sh: no pg_walinspect in $SHAREDIR/extension (postgresql-15 contrib)" >&2; exit 1; }
if [ -n "$(find "$ROOT/src" -name '*.[ch]' -newer "$PKGLIBDIR/ntask.so" 2>/dev/null)" ]; then
	echo "bench/storage.sh: warning: src/ is newer than the installed ntask.so (rerun make install)" >&2
fi

# pgmq's SQL into the installation's extension directory, as its own
# `make install` puts it there (bench/harness/run.sh does the same)
SYSTEMS="plain plainkey ntask"
if git --git-dir="$PGMQ_GIT/.git" rev-parse -q --verify "$PGMQ_REV^{commit}" >/dev/null 2>&1 ||
   git --git-dir="$PGMQ_GIT" rev-parse -q --verify "$PGMQ_REV^{commit}" >/dev/null 2>&1; then
	GD=$PGMQ_GIT; [ -d "$PGMQ_GIT/.git" ] && GD=$PGMQ_GIT/.git
	PGMQ_V=$(git --git-dir="$GD" show "$PGMQ_REV:pgmq-extension/pgmq.control" |
		sed -n "s/^default_version *= *'\(.*\)'.*/\1/p")
	git --git-dir="$GD" show "$PGMQ_REV:pgmq-extension/pgmq.control" >"$SHAREDIR/extension/pgmq.control"
	git --git-dir="$GD" show "$PGMQ_REV:pgmq-extension/sql/pgmq.sql" >"$SHAREDIR/extension/pgmq--$PGMQ_V.sql"
	SYSTEMS="$SYSTEMS pgmq"
else
	echo "bench/storage.sh: no pgmq $PGMQ_REV in $PGMQ_GIT (STORAGE_PGMQ): no pgmq column" >&2
fi

if [ "$(id -u)" -eq 0 ]; then
	as_pg() { runuser -u postgres -- "$@"; }
else
	as_pg() { "$@"; }
fi

DIR=$(mktemp -d /tmp/ntask-storage.XXXXXX)
DATA=$DIR/data
cleanup() {
	rc=$?
	trap - EXIT INT TERM
	if [ -f "$DATA/postmaster.pid" ]; then
		as_pg "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	if [ -n "${STORAGE_KEEP:-}" ]; then
		echo "bench/storage.sh: cluster left in $DIR" >&2
	else
		rm -rf "$DIR"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
log() { echo "$*" >&2; }

# ---------------------------------------------------------------- cluster
log "bench/storage.sh: cluster in $DIR (port $PORT), $TASKS tasks per workload"
as_pg "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --no-locale >"$DIR/initdb.log" 2>&1 ||
	{ cat "$DIR/initdb.log" >&2; exit 1; }
cat >>"$DATA/postgresql.conf" <<EOF
# bench/storage.sh: bytes, not speed.  No full-page images, no autovacuum,
# no checkpoint inside a measurement, no ntask background worker (each
# would add WAL that is not the workload's).
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
full_page_writes = off
autovacuum = off
fsync = off
checkpoint_timeout = 1h
max_wal_size = 4GB
shared_buffers = 256MB
shared_preload_libraries = 'ntask'
ntask.worker = off
EOF
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w start >/dev/null ||
	{ cat "$DIR/server.log" >&2; exit 1; }

CONN=(-h "$DIR" -p "$PORT" -U postgres)
"$PGBIN/createdb" "${CONN[@]}" bench
psql() { "$PGBIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 "${CONN[@]}" -d bench "$@"; }
sql() { psql -c "$1"; }

{
	echo "CREATE EXTENSION ntask;"
	echo "CREATE EXTENSION pg_walinspect;"
	echo "SELECT count(*) FROM ntask_queue_set('bench') \\g /dev/null"
	plain_queue_sql
	cat "$HERE/storage.sql"
	case " $SYSTEMS " in *" pgmq "*)
		echo "CREATE EXTENSION pgmq;"
		echo "SELECT pgmq.create('bench');" ;;
	esac
	echo "${STORAGE_SQL:-}"
} | psql

# the backend's CPU must be readable by the backend itself
sql "INSERT INTO storage.conf VALUES ($(getconf CLK_TCK), $TASKS)" >/dev/null
sql "SELECT storage.cpu_ticks()" >/dev/null ||
	{ echo "bench/storage.sh: cannot read /proc/self/stat from the backend" >&2; exit 1; }

# ---------------------------------------------------------------- workloads
# Each workload is one psql session: WARM statements first (the session's
# plans and caches, as a long-lived worker has them), then mark the start
# (an LSN and the backend's CPU, read by SELECTs that write no WAL), run the
# other N - WARM statements in autocommit, mark the end, record both in
# storage.run.  Sizes are divided by N (every task in the table).
S=$DIR/scripts
mkdir -p "$S"

# loop NAME SYSTEM WORKLOAD SETUP BODY: SETUP once, BODY N times (with a
# 19-character key for @K@: 'k1-', 9 scattered digits, 7 counting ones)
loop() {
	local name=$1 sys=$2 wl=$3 setup=$4 body=$5 f
	f=$S/$name.sql
	{
		echo "$setup"
		awk -v n="$TASKS" -v w="$WARM" -v id0="${ID0:-0}" -v body="$body" 'BEGIN {
			for (i = 1; i <= n; i++) {
				if (i == w + 1)
					print "SELECT pg_current_wal_insert_lsn() AS lsn0, storage.cpu_ticks() AS cpu0 \\gset"
				b = body
				gsub(/@K@/, sprintf("%09d%07d", (i * 611953) % 999999937, i), b)
				gsub(/@I@/, sprintf("%.0f", id0 + i), b)
				print b
			} }'
		echo "SELECT pg_current_wal_insert_lsn() AS lsn1, storage.cpu_ticks() AS cpu1 \\gset"
		echo "INSERT INTO storage.run VALUES ('$sys', '$wl', $REP, $((TASKS - WARM)), :'lsn0', :'lsn1', :cpu1 - :cpu0);"
	} >"$f"
	psql -f "$f" >/dev/null
	if [ "$BREAKDOWN" != 0 ] && [ "$REP" = 1 ] && [ "${wl#enqueue_}" = "$wl" ]; then
		sql "SELECT storage.breakdown('$sys', '$wl')" >/dev/null
	fi
}
mark() { [ "$REP" != 1 ] || sql "SELECT storage.size_mark('$1', '$2')" >/dev/null; }
reset() { sql "SELECT storage.reset('$1')" >/dev/null; }
vacuum() { echo "SELECT format('VACUUM %s', t) FROM unnest(storage.tables('$1')) t \\gexec" | psql >/dev/null; }

# the statements of each system, prepared once per session (read as
# ${!name} below)

ENQ_plain="PREPARE enq(text) AS INSERT INTO pq.job (payload) VALUES ('{\"n\":1}');"
ENQ_plainkey="PREPARE enq(text) AS INSERT INTO bq.job (queue, task_key, payload, state, run_at) VALUES ('bench', \$1, '{\"n\":1}', 'ready', now()) ON CONFLICT (queue, task_key) DO NOTHING RETURNING id;"
ENQ_ntask="PREPARE enq(text) AS SELECT task_id FROM ntask_enqueue('bench', \$1, '{\"n\":1}');"
plain_claim() {
	echo "PREPARE claim AS WITH c AS (UPDATE $1.job SET state = 'leased', token = nextval('$1.token_seq'), lease_until = now() + interval '30 seconds' WHERE id = (SELECT id FROM $1.job WHERE $2 state = 'ready' AND run_at <= now() ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, token) SELECT coalesce(max(id), 0) AS id, coalesce(max(token), 0) AS token FROM c;
PREPARE fin(bigint, bigint) AS UPDATE $1.job SET state = 'succeeded' WHERE id = \$1 AND token = \$2;"
}
DRAIN_plain=$(plain_claim pq "")
DRAIN_plainkey=$(plain_claim bq "queue = 'bench' AND")
DRAIN_ntask="PREPARE claim AS SELECT coalesce(max(task_id), 0) AS id, coalesce(max(token), 0) AS token FROM ntask_claim('bench', 'w1');
PREPARE fin(bigint, bigint) AS SELECT state FROM ntask_transition(\$1, \$2, 'succeeded');"
ENQ_pgmq="PREPARE enq(text) AS SELECT * FROM pgmq.send('bench', '{\"n\":1}');"
DRAIN_pgmq="PREPARE claim AS SELECT coalesce(max(msg_id), 0) AS id, coalesce(max(read_ct), 0) AS token FROM pgmq.read('bench', 30, 1);
PREPARE fin(bigint, bigint) AS SELECT pgmq.delete('bench', \$1);"
DRAIN_BODY="EXECUTE claim \\gset
EXECUTE fin(:id, :token);"
TC_ntask="PREPARE claim AS SELECT coalesce(max(task_id), 0) AS id, coalesce(max(token), 0) AS token FROM ntask_claim('bench', 'w1');
PREPARE tc(bigint, bigint) AS SELECT coalesce(max(task_id), 0) AS id, coalesce(max(token), 0) AS token FROM ntask_transition_and_claim(\$1, \$2, 'succeeded', 'bench', 'w1');
EXECUTE claim \\gset"

# REPEAT rounds, interleaved (plain, plain+key, ntask, ...; plain, ...):
# bytes are the first round's (every round writes the same, give or take a
# page split), CPU the least of the rounds (the machine is shared)
for REP in $(seq 1 "$REPEAT"); do
log " round $REP of $REPEAT"
for sys in $SYSTEMS; do
	log "  $sys"
	reset $sys
	mark $sys empty
	sql "CHECKPOINT" >/dev/null
	enq=ENQ_$sys drain=DRAIN_$sys
	enq=${!enq} drain=${!drain}
	loop ${sys}_enq $sys enqueue "$enq" "EXECUTE enq('k1-@K@');"
	mark $sys ready
	loop ${sys}_drain $sys drain "$drain" "$DRAIN_BODY"
	sql "SELECT storage.check_done('$sys', $TASKS)" >/dev/null
	vacuum $sys
	mark $sys kept
done

# ntask's one-commit drain: finish the task held and take the next (the
# first claim is in the setup; the last call finds the queue empty and
# finishes the last task)
log "  ntask, ntask_transition_and_claim"
reset ntask
loop ntask_enq2 ntask enqueue_2 "$ENQ_ntask" "EXECUTE enq('k1-@K@');"
sql "CHECKPOINT" >/dev/null
loop ntask_tc ntask drain_tc "$TC_ntask" "EXECUTE tc(:id, :token) \\gset"
sql "SELECT storage.check_done('ntask', $TASKS)" >/dev/null

# the drain of a worker that marks the external call (claim, commit,
# ntask_invoked, commit, finish, commit): what ntask_invoked adds
log "  ntask, claim + ntask_invoked + transition"
reset ntask
loop ntask_enq3 ntask enqueue_3 "$ENQ_ntask" "EXECUTE enq('k1-@K@');"
sql "CHECKPOINT" >/dev/null
loop ntask_inv ntask drain_invoked "$DRAIN_ntask
PREPARE inv(bigint, bigint) AS SELECT ntask_invoked(\$1, \$2);" "EXECUTE claim \\gset
EXECUTE inv(:id, :token);
EXECUTE fin(:id, :token);"
sql "SELECT storage.check_done('ntask', $TASKS)" >/dev/null
done
REP=1

# ---------------------------------------------------------------- layouts
# Levers (c) and (d) simulated in SQL (bench/storage_layout.sql): each
# layout enqueues copies of the same N ready tasks of ntask.task, then is
# drained as above
if [ "$LAYOUTS" != 0 ]; then
	psql -f "$HERE/storage_layout.sql" >/dev/null
	reset ntask
	loop ntask_src ntask enqueue_src "$ENQ_ntask" "EXECUTE enq('k1-@K@');"
	ID0=$(sql "SELECT min(task_id) - 1 FROM ntask.task")
	for sys in $(sql "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'sim\\_%' ORDER BY oid"); do
		log "  layout $sys"
		reset $sys
		mark $sys empty
		sql "CHECKPOINT" >/dev/null
		setup=$(sql "SELECT storage.layout_sql('$sys')")
		loop ${sys}_enq $sys enqueue "$setup" "EXECUTE enq(@I@);"
		mark $sys ready
		loop ${sys}_drain $sys drain "$setup" "$DRAIN_BODY"
		sql "SELECT storage.check_done('$sys', $TASKS)" >/dev/null
		vacuum $sys
		mark $sys kept
	done
fi

# ---------------------------------------------------------------- report
{
	echo "# bench/storage.sh $(date -u '+%F %T') UTC: $TASKS tasks per workload ($WARM unmeasured first), one session, $REPEAT rounds"
	echo "# ntask $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src ntask--*.sql 2>/dev/null || echo '+dirty'), $(sql 'SELECT version()' | cut -d, -f1)"
	echo "# $(sql "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('full_page_writes','wal_level','autovacuum','shared_buffers','fsync')")"
	[ -n "${STORAGE_SQL:-}" ] && echo "# STORAGE_SQL: $STORAGE_SQL"
	echo "# ntask.task reloptions: $(sql "SELECT coalesce(array_to_string(reloptions, ' '), 'none') FROM pg_class WHERE oid = 'ntask.task'::regclass")"
	echo
	psql -P tuples_only=off -P format=aligned -P footer=off -c "SELECT * FROM storage.report()"
	echo
	echo "Bytes by relation (main forks), per task: after the enqueues (ready) and after the drain and VACUUM (kept)"
	psql -P tuples_only=off -P format=aligned -P footer=off -c "SELECT * FROM storage.size_report()"
	if [ "$LAYOUTS" != 0 ]; then
		echo
		echo "Layouts: ntask's writes simulated in SQL (bench/storage_layout.sql), per task"
		psql -P tuples_only=off -P format=aligned -P footer=off -c "SELECT * FROM storage.layout_report()"
	fi
	if [ "$BREAKDOWN" != 0 ]; then
		echo
		echo "WAL by relation and record type (pg_walinspect), per task; '-': no block (commits...)"
		psql -P tuples_only=off -P format=aligned -P footer=off -c "SELECT * FROM storage.breakdown_report()"
	fi
}
