#!/bin/sh
# scripts/valgrind.sh: run the pg_regress suite and the isolation specs once
# against a postmaster running under valgrind memcheck, then report what
# valgrind found.  A manual check (10-30 minutes), not part of CI.  Run as
# root on Debian 12; the server runs as the postgres user.  See
# docs/valgrind.md.
#
#   sh scripts/valgrind.sh                    # everything
#   VG_ISOLATION= sh scripts/valgrind.sh      # pg_regress only
#   VG_REGRESS="setup claim" VG_ISOLATION= sh scripts/valgrind.sh   # a subset
#   VG_REV=HEAD sh scripts/valgrind.sh        # the last commit, not the work tree
#   VG_DISPATCH=0 sh scripts/valgrind.sh      # no HTTP dispatch phase
#   VG_SUPP=/dev/null VG_ERROR_EXITCODE=0 sh scripts/valgrind.sh
#                          # no suppressions, and errors do not crash backends
#
# Steps: copy this tree to $VG_DIR/src (default /tmp/vg, owned by postgres),
# build it there with -O0 -g and install it; initdb a throwaway cluster in
# $VG_DIR/data (port $VG_PORT, default 55490, unix socket in $VG_DIR, no
# TCP) with test/ntask.conf included; start the postmaster under valgrind
# (one log per process in $VG_DIR/logs/%p.log); run pg_regress and
# pg_isolation_regress with the Makefile's REGRESS and ISOLATION lists;
# let the background worker send a few HTTP requests to t/provider.py on
# 127.0.0.1; stop the server; scan the logs.  Ends with one line:
#   valgrind: N processes, E errors (in ntask: K)
# and exits non-zero if valgrind reported any error or a suite failed.
# $VG_DIR is left in place for reading the logs; the next run removes it.
set -u
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ "$(id -u)" -eq 0 ] || { echo "valgrind.sh: run as root" >&2; exit 2; }

VG=${VG_DIR:-/tmp/vg}
PORT=${VG_PORT:-55490}
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
BIN=/usr/lib/postgresql/15/bin
SRC=$(pwd)

sh scripts/deps.sh || exit 1
command -v valgrind >/dev/null 2>&1 || {
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq && apt-get install -y -qq valgrind >/dev/null
} || exit 1
PGXS_DIR=$(dirname "$($PG_CONFIG --pgxs)")/..	# .../lib/pgxs/src

# a stale server from an earlier run on the same directory
if [ -f "$VG/data/postmaster.pid" ]; then
	$AS_PG "$BIN/pg_ctl" -D "$VG/data" -m immediate -w -t 60 stop >/dev/null 2>&1
fi
rm -rf "$VG"
mkdir -p "$VG/src" "$VG/logs"

# 1. a private copy of the tree (others may edit it meanwhile), built -O0 -g
# (VG_REV=HEAD, or any commit: that commit instead of the work tree)
if [ -n "${VG_REV:-}" ]; then
	git archive "$VG_REV" | tar -C "$VG/src" -xf - || exit 1
else
	tar -C "$SRC" --exclude=./.git --exclude='*.o' --exclude='*.so' \
		--exclude='*.bc' --exclude=./results --exclude='./tmp_check*' \
		--exclude=./output_iso --exclude=./log --exclude=./bench/results \
		--exclude='./test*.log' -cf - . | tar -C "$VG/src" -xf - || exit 1
fi
# the suppressions always come from the work tree (new ones apply at once);
# VG_SUPP=/dev/null shows everything, suppressed or not
cp "${VG_SUPP:-$SRC/test/valgrind.supp}" "$VG/valgrind.supp" || exit 1
chown -R postgres: "$VG"
echo "valgrind.sh: building ntask -O0 -g in $VG/src"
$AS_PG timeout 600 make -s -C "$VG/src" PG_CONFIG=$PG_CONFIG clean >/dev/null 2>&1
$AS_PG timeout 600 make -s -C "$VG/src" PG_CONFIG=$PG_CONFIG PG_CFLAGS='-O0 -g' \
	>"$VG/build.log" 2>&1 || { cat "$VG/build.log"; exit 1; }
timeout 600 make -s -C "$VG/src" PG_CONFIG=$PG_CONFIG install >>"$VG/build.log" 2>&1 ||
	{ cat "$VG/build.log"; exit 1; }
# regress upgrade starts from ntask 0.3, kept with the tests (issue 32);
# removed again in step 6
frozen="$($PG_CONFIG --sharedir)/extension/ntask--0.3.sql $($PG_CONFIG --sharedir)/extension/ntask--1.0.0.sql"
cp "$VG/src/test/frozen/ntask--0.3.sql" "$VG/src/test/frozen/ntask--1.0.0.sql" "$($PG_CONFIG --sharedir)/extension/" || exit 1

# the test lists, exactly as the Makefile has them
printf 'vg-print-%%:\n\t@echo $($*)\n' >"$VG/print.mk"
REGRESS=$($AS_PG make -s --no-print-directory -C "$VG/src" PG_CONFIG=$PG_CONFIG \
	-f Makefile -f "$VG/print.mk" vg-print-REGRESS)
ISOLATION=$($AS_PG make -s --no-print-directory -C "$VG/src" PG_CONFIG=$PG_CONFIG \
	-f Makefile -f "$VG/print.mk" vg-print-ISOLATION)
REGRESS=${VG_REGRESS-$REGRESS}
ISOLATION=${VG_ISOLATION-$ISOLATION}

# 2. a throwaway cluster (normal binaries)
$AS_PG "$BIN/initdb" -D "$VG/data" -U postgres -A trust -E UTF8 --locale=C \
	--no-sync >"$VG/initdb.log" 2>&1 || { cat "$VG/initdb.log"; exit 1; }
$AS_PG sh -c "cat >> '$VG/data/postgresql.conf'" <<CONF

# scripts/valgrind.sh
include '$VG/src/test/ntask.conf'
port = $PORT
listen_addresses = ''
unix_socket_directories = '$VG'
huge_pages = off
fsync = off
log_line_prefix = '%m [%p] '
CONF

# 3. the postmaster under valgrind.  Every backend is a fork of it and so is
# traced too, each with its own log (%p).  --error-exitcode makes a backend
# that hit an error exit non-zero, which the postmaster treats as a crash:
# the suite running at that moment fails visibly.
pm_pid=""
stop_server()
{
	if [ -f "$VG/data/postmaster.pid" ]; then
		$AS_PG "$BIN/pg_ctl" -D "$VG/data" -m "$1" -w -t 600 stop >/dev/null 2>&1 ||
			$AS_PG "$BIN/pg_ctl" -D "$VG/data" -m immediate -w -t 120 stop >/dev/null 2>&1
	fi
	if [ -n "$pm_pid" ]; then
		wait "$pm_pid" 2>/dev/null
		pm_pid=""
	fi
}
trap 'stop_server immediate; rm -f $frozen' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "valgrind.sh: starting the postmaster under valgrind (port $PORT)"
$AS_PG timeout 7200 valgrind \
	--trace-children=yes \
	--leak-check=no \
	--track-origins=yes \
	--read-inline-info=yes \
	--read-var-info=yes \
	--error-exitcode="${VG_ERROR_EXITCODE:-128}" \
	--num-callers=50 \
	--fullpath-after="$VG/src/" \
	--error-markers=VALGRINDERROR-BEGIN,VALGRINDERROR-END \
	--gen-suppressions=all \
	--show-error-list=yes \
	--suppressions="$VG/valgrind.supp" \
	--log-file="$VG/logs/%p.log" \
	"$BIN/postgres" -D "$VG/data" >"$VG/postmaster.log" 2>&1 &
pm_pid=$!
i=0
until $AS_PG "$BIN/pg_isready" -q -h "$VG" -p "$PORT" -d postgres; do
	i=$((i + 1))
	if [ $i -gt 300 ] || ! kill -0 "$pm_pid" 2>/dev/null; then
		echo "valgrind.sh: the server did not start; its log:" >&2
		cat "$VG/postmaster.log" >&2
		exit 1
	fi
	sleep 1
done

# the postmaster preloaded $libdir/ntask.so and every backend uses that copy
# (dfmgr finds it by name), so it must be the one just built here; a make
# install elsewhere in between would have replaced it
cmp -s "$VG/src/ntask.so" "$($PG_CONFIG --pkglibdir)/ntask.so" || {
	echo "valgrind.sh: the installed ntask.so is not the one built in $VG/src" \
		"(another make install ran meanwhile); run again" >&2
	exit 1
}

# 4. the suites; each creates its own database
start=$(date +%s)
rc=0
if [ -n "$REGRESS" ]; then
	echo "valgrind.sh: pg_regress:" $REGRESS
	$AS_PG timeout 3600 "$PGXS_DIR/test/regress/pg_regress" \
		--host="$VG" --port="$PORT" --user=postgres --bindir="$BIN" \
		--inputdir="$VG/src" --outputdir="$VG/out-regress" \
		--dbname=contrib_regression $REGRESS || rc=1
fi
if [ -n "$ISOLATION" ]; then
	echo "valgrind.sh: pg_isolation_regress:" $ISOLATION
	$AS_PG env PGISOLATIONTIMEOUT=900 timeout 3600 "$PGXS_DIR/test/isolation/pg_isolation_regress" \
		--host="$VG" --port="$PORT" --user=postgres --bindir="$BIN" \
		--inputdir="$VG/src" --outputdir="$VG/out-iso" \
		--dbname=isolation_regression $ISOLATION || rc=1
fi
echo "valgrind.sh: suites took $(($(date +%s) - start)) s"

# 5. the worker's HTTP dispatch (dispatch.c, worker.c, http_parse.c): the
# suites above never send a request, so the background worker (database
# postgres) sends a few to t/provider.py on 127.0.0.1, one key prefix per
# provider behaviour, and the phase waits until every task has settled.
# Needs python3; VG_DISPATCH=0 skips it.
PSQL="timeout 120 $BIN/psql -X -q -A -t -v ON_ERROR_STOP=1 -h $VG -p $PORT -d postgres"
dispatch_phase()
{
	if ! command -v python3 >/dev/null 2>&1 || [ ! -f "$VG/src/t/provider.py" ]; then
		echo "valgrind.sh: no python3 or no t/provider.py: dispatch skipped"
		return 0
	fi
	$AS_PG python3 "$VG/src/t/provider.py" --log "$VG/provider.log" --lifetime 900 0 \
		>"$VG/provider.port" 2>/dev/null &
	prov_pid=$!
	i=0
	until [ -s "$VG/provider.port" ]; do
		i=$((i + 1))
		[ $i -le 50 ] || { echo "valgrind.sh: t/provider.py did not start" >&2; return 1; }
		sleep 0.2
	done
	pport=$(head -n 1 "$VG/provider.port")
	python3 - "$pport" <<'PY' || return 1
import json, sys, urllib.request
rules = {"rules": {
	"r500-": [{"status": 500}, {"status": 200}],
	"ra-": [{"status": 429, "retry_after": 1}, {"status": 200}],
	"bad-": {"status": 400},
	"big-": {"status": 200, "body": "x" * 200000},
	"drop-": {"mode": "drop"},
	"lost-": {"mode": "drop", "effect": False},
	"hang-": {"mode": "hang", "hang_ms": 5000},
}}
req = urllib.request.Request("http://127.0.0.1:%s/_admin/rules" % sys.argv[1],
	data=json.dumps(rules).encode(), headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
PY
	$AS_PG $PSQL <<SQL >/dev/null || return 1
SET client_min_messages = error;
ALTER SYSTEM SET ntask.http_allowed_hosts = '127.0.0.1';
ALTER SYSTEM SET ntask.naptime = '200ms';
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);	-- the reload reaches this session before ntask_queue_set checks a host
CREATE EXTENSION ntask;
SELECT queue FROM ntask_queue_set('vg', max_attempts => 3, backoff_base => '100 ms',
	backoff_max => '1 s', lease => '20 s', target => '{"type": "http",
	"url": "http://127.0.0.1:$pport/send", "timeout_ms": 2000,
	"headers": {"Authorization": "Bearer vg"},
	"reconcile_url": "http://127.0.0.1:$pport/status"}');
SELECT queue FROM ntask_queue_set('vg_put', max_attempts => 2, backoff_base => '100 ms',
	target => '{"type": "http", "url": "http://127.0.0.1:$pport/put", "method": "PUT",
	"headers": {"Content-Type": "application/json; charset=utf-8"}}');
SELECT queue FROM ntask_queue_set('vg_refused', max_attempts => 2, backoff_base => '100 ms',
	target => '{"type": "http", "url": "http://127.0.0.1:1/send", "timeout_ms": 1000}');
-- a host not allowed is refused by ntask_queue_set: store it as a target
-- set before the list changed would be
SELECT queue FROM ntask_queue_set('vg_deny', max_attempts => 2);
UPDATE ntask.queue SET target = '{"type": "http", "url": "http://localhost:$pport/send"}'
WHERE queue = 'vg_deny';
SELECT count(*) FROM (
	SELECT ntask_enqueue('vg', k, jsonb_build_object('k', k, 'n', n))
	FROM unnest(ARRAY['ok-1', 'ok-2', 'ok-3', 'r500-1', 'ra-1', 'bad-1', 'big-1',
	                  'drop-1', 'lost-1', 'hang-1']) WITH ORDINALITY AS u(k, n)
	UNION ALL SELECT ntask_enqueue('vg_put', 'put-1', '{"p": 1}')
	UNION ALL SELECT ntask_enqueue('vg_refused', 'refused-1')
	UNION ALL SELECT ntask_enqueue('vg_deny', 'deny-1')) e;
SQL
	t0=$(date +%s)
	while :; do
		open=$($AS_PG $PSQL -c "SELECT count(*) FROM ntask.task
			WHERE state IN ('ready', 'leased', 'retry_wait')") || return 1
		[ "$open" = 0 ] && break
		[ $(($(date +%s) - t0)) -le 300 ] ||
			{ echo "valgrind.sh: dispatch: $open task(s) still open after 300 s" >&2; return 1; }
		sleep 1
	done
	echo "valgrind.sh: dispatch settled after $(($(date +%s) - t0)) s; each task and its last attempt:"
	$AS_PG timeout 120 $BIN/psql -X -h "$VG" -p "$PORT" -d postgres -c "SELECT t.task_key, t.state,
		t.attempts, a.error_class, a.error_stage, a.outcome FROM ntask.task t
		LEFT JOIN LATERAL (SELECT * FROM ntask.attempt_all a WHERE a.task_id = t.task_id
			ORDER BY a.attempt DESC LIMIT 1) a ON true ORDER BY t.task_id"
}

prov_pid=""
if [ "${VG_DISPATCH:-1}" != 0 ]; then
	start=$(date +%s)
	dispatch_phase || rc=1
	[ -n "$prov_pid" ] && kill "$prov_pid" 2>/dev/null
	echo "valgrind.sh: dispatch took $(($(date +%s) - start)) s"
fi

# 6. stop (fast: every process exits normally and writes its summary)
stop_server fast
trap - EXIT
rm -f $frozen

# 7. the logs.  An error report is "in ntask" when one of its frames is in
# our code: a line of one of our source files (--fullpath-after shows them
# as src/FILE.c:LINE; the server has no line info) or ntask.so itself.
nproc=$(ls "$VG/logs" | wc -l)
errors=$(cat "$VG"/logs/*.log | sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' |
	awk '{s += $1} END {print s + 0}')
nosummary=$(grep -L 'ERROR SUMMARY' "$VG"/logs/*.log | wc -l)
awk -v pat="[(]src/[A-Za-z0-9_]+[.][ch]:[0-9]+[)]|/ntask[.]so[)]" '
	/VALGRINDERROR-BEGIN/ { inblk = 1; blk = ""; next }
	/VALGRINDERROR-END/ {
		inblk = 0
		if (blk ~ pat) { n++; printf "--- %s\n%s", FILENAME, blk }
		next
	}
	inblk { blk = blk $0 "\n" }
	END { print n + 0 > "/dev/stderr" }
' "$VG"/logs/*.log >"$VG/ntask-errors.txt" 2>"$VG/ntask-count"
nt=$(cat "$VG/ntask-count")
if [ "$errors" -gt 0 ]; then
	echo "valgrind.sh: logs with errors:"
	grep -l 'ERROR SUMMARY: [1-9]' "$VG"/logs/*.log | sed 's/^/  /'
	[ "$nt" -gt 0 ] && { echo "valgrind.sh: errors in ntask ($VG/ntask-errors.txt):"; head -n 80 "$VG/ntask-errors.txt"; }
fi
# which suppressions were used, and how often (--show-error-list)
sed -n 's/.*used_suppression: *\([0-9]*\) \([^ ]*\) .*/\2 \1/p' "$VG"/logs/*.log |
	awk '{n[$1] += $2} END {for (k in n) printf "  %-40s %d\n", k, n[k]}' |
	sort >"$VG/suppressed.txt"
if [ -s "$VG/suppressed.txt" ]; then
	echo "valgrind.sh: suppressed (test/valgrind.supp), name and count:"
	cat "$VG/suppressed.txt"
fi
[ "$nosummary" -gt 0 ] && echo "valgrind.sh: $nosummary process(es) ended without an error summary"
[ $rc -eq 0 ] || {
	echo "valgrind.sh: a suite or the dispatch phase failed; diffs:"
	for f in "$VG/out-regress/regression.diffs" "$VG/out-iso/regression.diffs"; do
		[ -s "$f" ] && head -n 100 "$f"
	done
}
echo "valgrind: $nproc processes, $errors errors (in ntask: $nt)"
[ "$errors" -eq 0 ] && [ $rc -eq 0 ]
