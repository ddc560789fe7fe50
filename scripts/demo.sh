#!/bin/sh
# scripts/demo.sh: the one command that runs the N9 demo on a fresh Debian 12
# machine (as root or with sudo): installs missing packages, builds and
# installs ntask, starts a throwaway cluster (port 55440, socket in a temp
# dir, no TCP) as the postgres user, runs demo/*.sql and the Python push
# service (examples/python), prints their output,
# then stops the cluster and removes the temp dir, also on failure.
# NTASK_PG=18 runs it on PostgreSQL 18 (an installed one, else scripts/pg18.sh
# builds it once); PG_CONFIG=<pg_config> runs it on that server.
set -eu
cd "$(dirname "$0")/.."

PORT=55440
. scripts/lib.sh

# NTASK_PG=18: against PostgreSQL 18: $PG_CONFIG if it is 18, an installed
# one (/usr/lib/postgresql/18), else built by scripts/pg18.sh (cached).
# PG_CONFIG alone picks its version.
NTASK_PG=${NTASK_PG:-$(ntask_pg_default 15)}
export NTASK_PG
sh scripts/deps.sh
case $NTASK_PG in
	15 | 18) PGC=$(ntask_pg_config "$NTASK_PG") ;;
	*) echo "ntask demo: NTASK_PG=$NTASK_PG: 15 or 18" >&2; exit 2 ;;
esac
[ -n "$PGC" ] || { echo "ntask demo: no PostgreSQL $NTASK_PG: install it or set PG_CONFIG (README.md)" >&2; exit 1; }
# objects of another version's build must not be linked into this one
make -s PG_CONFIG="$PGC" clean >/dev/null 2>&1
make -s PG_CONFIG="$PGC"
$SUDO make -s PG_CONFIG="$PGC" install >/dev/null

BINDIR=$("$PGC" --bindir)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ntask-demo.XXXXXX")
PGDATA_DIR="$TMP/data"

cleanup()
{
	rc=$?
	trap - EXIT INT TERM
	if $SUDO test -f "$PGDATA_DIR/postmaster.pid"; then
		$AS_PG "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w stop >/dev/null 2>&1 ||
			$AS_PG "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m immediate -w stop >/dev/null 2>&1 ||
			true
	fi
	[ -z "${PROVIDER_PID:-}" ] || kill "$PROVIDER_PID" 2>/dev/null || true
	[ -z "${PUSH_PROVIDER_PID:-}" ] || kill "$PUSH_PROVIDER_PID" 2>/dev/null || true
	for w in W1 W2; do
		[ ! -s "$TMP/$w.pid" ] || $SUDO kill -KILL "$($SUDO cat "$TMP/$w.pid")" 2>/dev/null || true
	done
	$SUDO rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# mktemp -d made it 0700; only postgres (and root) may enter it
$SUDO chown postgres: "$TMP"

echo "ntask demo: throwaway cluster in $TMP (port $PORT, unix socket only)"
out=$($AS_PG "$BINDIR/initdb" -D "$PGDATA_DIR" -U postgres -A trust -E UTF8 \
	--locale=C 2>&1) || {
	echo "$out" >&2
	exit 1
}
$AS_PG sh -c "cat >> '$PGDATA_DIR/postgresql.conf'" <<CONF

# ntask demo
shared_preload_libraries = 'ntask'
ntask.naptime = '200ms'
ntask.http_allowed_hosts = '127.0.0.1'
ntask.http_connect_timeout_ms = 1000
port = $PORT
listen_addresses = ''
unix_socket_directories = '$TMP'
CONF

$AS_PG "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$TMP/server.log" -w -t 60 start >/dev/null || {
	echo "ntask demo: the server did not start; its log:" >&2
	$SUDO cat "$TMP/server.log" >&2
	exit 1
}

# the script goes in on stdin, so the repo need not be readable by postgres
rc=0
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres \
	-v ON_ERROR_STOP=1 -f - <demo/n9.sql 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "ntask demo: FAILED (psql exit $rc); server log tail:" >&2
	$SUDO tail -n 30 "$TMP/server.log" >&2
	exit "$rc"
fi

# the provider path: a loopback fault-injecting provider (t/provider.py);
# N9's first request is accepted and never answered
python3 t/provider.py --lifetime 120 0 >"$TMP/provider.port" 2>"$TMP/provider.log" &
PROVIDER_PID=$!
i=0
while [ ! -s "$TMP/provider.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
PROVIDER_PORT=$(head -n 1 "$TMP/provider.port")
provider()
{
	python3 -c 'import sys, urllib.request as u
r = u.Request("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]),
              data=sys.argv[3].encode() if len(sys.argv) > 3 else None,
              headers={"Content-Type": "application/json"})
print(u.urlopen(r, timeout=5).read().decode())' "$PROVIDER_PORT" "$@"
}
provider /_admin/rules '{"rules": {"notify:u-b:d-b1:m-9": [{"mode": "hang", "hang_ms": 5000}, {"status": 200}]}}' >/dev/null
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres \
	-v ON_ERROR_STOP=1 -v provider_port="$PROVIDER_PORT" -f - <demo/n9_http.sql 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "ntask demo: FAILED (psql exit $rc); server log tail:" >&2
	$SUDO tail -n 30 "$TMP/server.log" >&2
	exit "$rc"
fi
echo "--- what the provider saw for N9: two requests, one effect (the second was deduplicated)"
provider '/_admin/stats?key=notify:u-b:d-b1:m-9:v1' | python3 -c 'import json, sys
k = json.load(sys.stdin)["keys"]["notify:u-b:d-b1:m-9:v1"]
print("requests=%d effects=%d duplicates=%d NTask-Attempt headers=%s" % (k["requests"], k["effects"], k["duplicates"], k["attempts"]))'
echo
# part 3: a waiting worker and seed 002's replay (demo/worker_wait.sql);
# the producer enqueues one second after the worker starts waiting
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
CREATE ROLE demo_app IN ROLE ntask_producer;
CREATE ROLE demo_exporters;
GRANT demo_exporters TO demo_app;
SELECT queue FROM ntask_queue_set('exports', max_attempts => 3);
SELECT ntask_queue_set_roles('exports', 'demo_exporters', NULL);
SQL
( sleep 1; $AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres -c \
	"SET ROLE demo_app; SELECT created FROM ntask_enqueue('exports', 'export:u-1:2026-12', '{\"user\": \"u-1\", \"month\": \"2026-12\"}')" >/dev/null ) &
PRODUCER_PID=$!
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres \
	-v ON_ERROR_STOP=1 -f - <demo/worker_wait.sql 2>&1 || rc=$?
wait "$PRODUCER_PID" || true
if [ "$rc" -ne 0 ]; then
	echo "ntask demo: FAILED (psql exit $rc) in demo/worker_wait.sql" >&2
	exit "$rc"
fi
# part 4: an order saga that is compensated (demo/saga.sql)
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres \
	-v ON_ERROR_STOP=1 -f - <demo/saga.sql 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "ntask demo: FAILED (psql exit $rc) in demo/saga.sql" >&2
	exit "$rc"
fi
# part 5: fairness and per-device order (demo/flow.sql)
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres \
	-v ON_ERROR_STOP=1 -f - <demo/flow.sql 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "ntask demo: FAILED (psql exit $rc) in demo/flow.sql" >&2
	exit "$rc"
fi
# part 6: seed 001's nightly report as a workflow (demo/workflow.sql): fan-out,
# fan-in, a checkpoint, a worker killed mid-aggregate, a send that awaits a signal
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres \
	-v ON_ERROR_STOP=1 -f - <demo/workflow.sql 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "ntask demo: FAILED (psql exit $rc) in demo/workflow.sql" >&2
	exit "$rc"
fi
# part 7: the N9 push service on the Python worker library
# (examples/python/push_service.py, examples/README.md) in a database of its
# own, with the fake provider (examples/fake_provider.py): 10 messages, one
# per test device; worker W1 is killed (SIGKILL) while the provider holds
# m-1's send, W2 takes m-1 over when W1's 5-second lease runs out, asks the
# provider by the idempotency key and does not send it again
echo
echo "=== 7. The push service on the Python library (examples/python): a worker killed mid-send"
PY=python3
$PY -c 'import psycopg' 2>/dev/null || PY=/usr/bin/python3
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
	-c 'CREATE DATABASE push_demo' >/dev/null
{ echo 'CREATE EXTENSION ntask;'; cat examples/push.sql; } |
	$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d push_demo -v ON_ERROR_STOP=1 >/dev/null
python3 examples/fake_provider.py --port 0 >"$TMP/push_provider.out" 2>&1 &
PUSH_PROVIDER_PID=$!
i=0
while ! grep -q 'listening' "$TMP/push_provider.out" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
PUSH_PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/push_provider.out")
PUSH_ENV="DATABASE_URL=postgresql://postgres@/push_demo?host=$TMP&port=$PORT PUSH_PROVIDER_URL=http://127.0.0.1:$PUSH_PORT PYTHONPATH=clients/python"
push_sql()
{
	$AS_PG "$BINDIR/psql" -X -q -At -h "$TMP" -p "$PORT" -U postgres -d push_demo -c "$1"
}
# push_worker NAME: start a worker in the background; its pid in $TMP/NAME.pid
push_worker()
{
	$SUDO env $PUSH_ENV sh -c 'echo $$ >"$1"; exec "$2" examples/python/push_service.py work --name "$3"' \
		sh "$TMP/$1.pid" "$PY" "$1" >"$TMP/$1.log" 2>&1 &
	i=0
	while [ ! -s "$TMP/$1.pid" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}
# push_wait WHAT SECONDS SQL: poll until SQL answers t
push_wait()
{
	i=0
	while [ "$(push_sql "$3")" != t ]; do
		i=$((i + 1))
		if [ $i -gt $(($2 * 5)) ]; then
			echo "ntask demo: FAILED: no $1 within $2 s" >&2
			exit 1
		fi
		sleep 0.2
	done
}
$SUDO env $PUSH_ENV "$PY" examples/python/push_service.py produce --count 10
push_worker W1
# W1 sent m-1 (device d-slow-1: the provider took it and answers after 3 s)
i=0
until python3 -c 'import json, sys, urllib.request as u
k = json.load(u.urlopen("http://127.0.0.1:%s/stats" % sys.argv[1], timeout=5))["keys"]
sys.exit(0 if k.get("notify:u-1:d-slow-1:m-1:v1", {}).get("sends") else 1)' "$PUSH_PORT"; do
	i=$((i + 1))
	if [ $i -gt 300 ]; then
		echo "ntask demo: FAILED: W1 did not send m-1 within 30 s" >&2
		exit 1
	fi
	sleep 0.1
done
$SUDO kill -KILL "$(cat "$TMP/W1.pid")"
rm -f "$TMP/W1.pid"
echo "--- W1 (killed with SIGKILL while the provider held m-1's send):"
sleep 0.2
cat "$TMP/W1.log"
push_worker W2
push_wait "end of the 10 tasks" 90 "SELECT count(*) = 0 FROM ntask.task WHERE state NOT IN ('succeeded', 'repair_required')"
$SUDO kill -TERM "$(cat "$TMP/W2.pid")"
i=0
while $SUDO kill -0 "$(cat "$TMP/W2.pid")" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
rm -f "$TMP/W2.pid"
echo "--- W2 (takes m-1 over once W1's lease ran out; SIGTERM at the end: a graceful stop):"
cat "$TMP/W2.log"
echo "--- each task: its attempts in the ledger, and how its delivery was recorded"
$AS_PG "$BINDIR/psql" -X -q -h "$TMP" -p "$PORT" -U postgres -d push_demo -P footer=off -c "
SELECT t.task_key, t.state, coalesce(d.via, '-') AS delivery,
	   (SELECT string_agg(a.worker || ':' || a.result || coalesce('/' || a.error_class, ''), ', ' ORDER BY a.token)
		FROM ntask.attempt_all a WHERE a.task_id = t.task_id AND a.result <> 'released') AS attempts
FROM ntask.task t LEFT JOIN push_delivery d USING (task_key) ORDER BY t.task_id"
echo "--- what the provider saw for m-1: one send (by W1), one lookup (W2's reconcile), one effect"
python3 -c 'import json, sys, urllib.request as u
k = json.load(u.urlopen("http://127.0.0.1:%s/stats" % sys.argv[1], timeout=5))["keys"]["notify:u-1:d-slow-1:m-1:v1"]
print("sends=%d lookups=%d effects=%d duplicates=%d" % (k["sends"], k["lookups"], k["effects"], k["duplicates"]))' "$PUSH_PORT"
kill "$PUSH_PROVIDER_PID" 2>/dev/null || true
PUSH_PROVIDER_PID=
echo
echo "ntask demo: done"
# the operator console against this cluster (NTASK_DEMO_CONSOLE=1,
# docs/console.md): prints its URL and a one-time password and serves until
# Ctrl-C, which stops it and the cluster
if [ "${NTASK_DEMO_CONSOLE:-0}" = 1 ]; then
	CPORT=${NTASK_CONSOLE_PORT:-8080}
	CPW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
	echo "ntask demo: the console: http://127.0.0.1:$CPORT/ (user demo, password $CPW); Ctrl-C stops it"
	$SUDO env NTASK_CONSOLE_USER=demo NTASK_CONSOLE_PASSWORD="$CPW" node console/bin/ntask-console.js \
		--dsn "postgresql://postgres@/postgres?host=$TMP&port=$PORT" --listen "127.0.0.1:$CPORT" || true
fi
