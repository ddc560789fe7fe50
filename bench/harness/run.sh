#!/bin/sh
# Run hardbyte/postgresql-job-queue-benchmarking (the "external harness" of
# issue 33) without docker, on a throwaway cluster, for ntask, pgmq and pg-boss.
#
#   PG_CONFIG=/path/to/pg_config sh bench/harness/run.sh
#
# What it does (nothing third-party is stored in this repository):
#  1. extracts the harness at HARNESS_REV from HARNESS_GIT (a local git dir,
#     e.g. a bare mirror, or a URL to clone) into a temp dir, applies
#     bench/harness/harness.patch (env overrides: BENCH_NATIVE=1 runs the
#     adapters on the host, BENCH_PG_CTL drives our cluster instead of docker
#     compose, BENCH_PG_PORT; no pydantic 2 needed) and adds our adapter
#     bench/harness/ntask-bench (registered as system "ntask");
#  2. builds and installs ntask into PG_CONFIG's tree, and pgmq's SQL
#     (pgmq-extension/sql/pgmq.sql at PGMQ_REV from PGMQ_GIT; no C code) as
#     the pgmq extension script there, the way pgmq's own `make install` does;
#  3. pg-boss: `npm ci` of the harness's pgboss-bench (npm registry); skipped
#     with a message if npm is missing or fails;
#  4. initdb of a throwaway cluster as user postgres: port PORT (55470) on
#     127.0.0.1 only, its unix socket in the temp dir, the harness's
#     postgres.conf, shared_preload_libraries = 'ntask';
#  5. runs three harness invocations, each over all SYSTEMS one after the
#     other on the same cluster (bench.py --fast: a fresh database per system):
#       steady   fixed RATE jobs/s: warmup (STEADY_WARM), clean (steady), idle-in-tx (a
#                transaction holds the xmin horizon), recovery
#       sat      depth-target (keeps DEPTH ready): saturation throughput,
#                twice, the second time in reverse system order
#       chaos    fixed RATE: baseline, postgres-restart (down half the phase),
#                recovery
#       kill     fixed RATE: baseline, SIGKILL of the adapter (kill-worker),
#                its restart (start-worker), recovery
#     and prints the table (bench/harness/table.py) with the load (uptime).
# Needs: python3 with psycopg 3 (Debian: python3-psycopg) and matplotlib
# (python3-matplotlib) for the harness's plots; node + npm for pg-boss; git.
# Bounded: each invocation runs under `timeout`; the cluster and the temp dir
# are removed at the end (KEEP=1 keeps the temp dir with the results).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
HARNESS_GIT=${HARNESS_GIT:-/work/.mirror/hardbyte+postgresql-job-queue-benchmarking/repo}
HARNESS_REV=${HARNESS_REV:-93677cab92dad89ee9eccb0d6e113893de43cbe6}
PGMQ_GIT=${PGMQ_GIT:-/work/.mirror/pgmq+pgmq/repo}
PGMQ_REV=${PGMQ_REV:-v1.5.1}
SYSTEMS=${SYSTEMS:-ntask,pgmq,pgboss}
PORT=${PORT:-55470}
WORKERS=${WORKERS:-8}
RATE=${RATE:-200}
DEPTH=${DEPTH:-2000}
WARM=${WARM:-10s}
STEADY_WARM=${STEADY_WARM:-30s}  # >= the adapters' 30 s latency window: the
                                 # start-up claims stay out of the steady p50/p99
STEADY=${STEADY:-30s}
HELD=${HELD:-30s}
RECOV=${RECOV:-30s}
SAT=${SAT:-30s}
DOWN=${DOWN:-20s}
SAMPLE=${SAMPLE:-2}
SCENARIOS=${SCENARIOS:-steady sat chaos kill}
PY=${PYTHON:-/usr/bin/python3}
export PATH="/usr/bin:/bin:$PATH"     # the adapters run `python3` / `node`

BIN=$($PG_CONFIG --bindir)
SHARE=$($PG_CONFIG --sharedir)
$PY -c 'import psycopg, matplotlib' || { echo "run.sh: needs python3-psycopg and python3-matplotlib" >&2; exit 1; }

W=$(mktemp -d /tmp/ntask-harness.XXXXXX)
chmod 755 "$W"
cleanup() {
	[ -d "$W" ] || return 0
	[ -f "$W/pgctl" ] && "$W/pgctl" stop >/dev/null 2>&1 || true
	if [ "${KEEP:-0}" = 1 ]; then echo "kept $W"; else rm -rf "$W"; fi
	W=/nonexistent
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM

# 1. the harness
if [ -d "$HARNESS_GIT" ]; then G=$HARNESS_GIT; else
	git clone -q --bare "$HARNESS_GIT" "$W/harness.git"; G=$W/harness.git; fi
mkdir "$W/h"
# results/ holds the upstream's own result files (large, not needed)
git --git-dir="$G" archive "$HARNESS_REV" $(git --git-dir="$G" ls-tree --name-only "$HARNESS_REV" | grep -v '^results$') 2>"$W/archive.err" | tar -x -C "$W/h"
# a partial mirror lacks some results/ blobs; git archive names them although
# results/ is not asked for: any other message is shown
grep -v "for 'results/" "$W/archive.err" >&2 || true
(cd "$W/h" && patch -s -p1 < "$HERE/harness.patch")
cp -r "$HERE/ntask-bench" "$W/h/ntask-bench"

# 2. ntask and pgmq into PG_CONFIG's tree
make -s -C "$TOP" PG_CONFIG="$PG_CONFIG" -j2 >/dev/null
make -s -C "$TOP" PG_CONFIG="$PG_CONFIG" install >/dev/null
case ",$SYSTEMS," in *,pgmq,*)
	if [ -d "$PGMQ_GIT" ]; then M=$PGMQ_GIT; else
		git clone -q --bare "$PGMQ_GIT" "$W/pgmq.git"; M=$W/pgmq.git; fi
	mkdir "$W/pgmq"
	git --git-dir="$M" archive "$PGMQ_REV" pgmq-extension/pgmq.control pgmq-extension/sql/pgmq.sql | tar -x -C "$W/pgmq"
	V=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" "$W/pgmq/pgmq-extension/pgmq.control")
	cp "$W/pgmq/pgmq-extension/pgmq.control" "$SHARE/extension/pgmq.control"
	cp "$W/pgmq/pgmq-extension/sql/pgmq.sql" "$SHARE/extension/pgmq--$V.sql"
	echo "pgmq $V ($PGMQ_REV) SQL installed into $SHARE/extension" ;;
esac

# 3. pg-boss from the npm registry
case ",$SYSTEMS," in *,pgboss,*)
	if (cd "$W/h/pgboss-bench" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >/dev/null 2>&1); then
		echo "pg-boss $(cd "$W/h/pgboss-bench" && node -p 'require("pg-boss/package.json").version' 2>/dev/null) installed (npm ci)"
	else
		echo "run.sh: npm ci of pg-boss failed: running without pgboss" >&2
		SYSTEMS=$(echo ",$SYSTEMS," | sed 's/,pgboss,/,/; s/^,//; s/,$//')
	fi ;;
esac

# 4. the throwaway cluster (as postgres when run as root)
RUN=""
if [ "$(id -u)" = 0 ]; then chown -R postgres "$W"; RUN="runuser -u postgres --"; fi
$RUN "$BIN/initdb" -D "$W/data" -U postgres --auth=trust >/dev/null
cat >> "$W/data/postgresql.conf" <<EOF
include '$W/h/postgres.conf'
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$W'
max_connections = 200
shared_preload_libraries = 'ntask'
EOF
cat > "$W/pgctl" <<EOF
#!/bin/sh
# start|stop|down for the harness's BENCH_PG_CTL. down (the end of a harness
# invocation) leaves the cluster running for the next one: run.sh stops it at
# its end. (A cluster started just before the harness drops the databases can
# have an ntask worker still starting in one: DROP DATABASE then failed once,
# "being accessed by other users".)
case "\$1" in
start) $RUN "$BIN/pg_ctl" -D "$W/data" status >/dev/null 2>&1 ||
	$RUN "$BIN/pg_ctl" -D "$W/data" -l "$W/postgres.log" -w -t 120 start >/dev/null ;;
stop) $RUN "$BIN/pg_ctl" -D "$W/data" status >/dev/null 2>&1 &&
	$RUN "$BIN/pg_ctl" -D "$W/data" -m fast -w -t 120 stop >/dev/null || true ;;
esac
EOF
chmod 755 "$W/pgctl"
"$W/pgctl" start
"$BIN/psql" -X -q -h "$W" -p "$PORT" -U postgres -d postgres \
	-c "CREATE ROLE bench LOGIN SUPERUSER PASSWORD 'bench'"

# 5. the scenarios
export BENCH_NATIVE=1 BENCH_PG_CTL="$W/pgctl" BENCH_PG_PORT="$PORT" BENCH_PG_HOST=127.0.0.1
# Every adapter paces its own producer on wall-clock time (pgmq-bench and
# pgboss-bench only do that; ntask-bench does both): one pacing path for all.
# (With the harness's stdin tokens, the tokens sent while an adapter starts
# pile up into a first backlog that stays in the 30 s latency window.)
export PRODUCER_PACING=${PRODUCER_PACING:-adapter}
reverse() { echo "$1" | tr ',' '\n' | sed '1!G;h;$!d' | paste -sd, -; }
bench() {   # label, timeout seconds, systems, args...
	label=$1 limit=$2 sys=$3; shift 3
	echo "== $label ($sys) $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
	before=$(ls "$W/h/results" 2>/dev/null || true)
	(cd "$W/h" && timeout -k 30 "$limit" $PY bench.py run --fast --skip-build \
		--systems "$sys" --worker-count "$WORKERS" --sample-every "$SAMPLE" \
		--producer-rate "$RATE" "$@" >"$W/$label.log" 2>&1) ||
		echo "run.sh: $label failed or timed out (rc $?): tail of $W/$label.log:" >&2
	tail -n 3 "$W/$label.log" | grep -v '^\[harness\] results' >&2 || true
	d=$(ls "$W/h/results" | grep -vxF "$before" | head -1 || true)
	[ -n "$d" ] && echo "$label $W/h/results/$d $(cut -d' ' -f1-3 /proc/loadavg)" >> "$W/runs"
	return 0
}
n=$(echo "$SYSTEMS" | tr ',' '\n' | wc -l)
for s in $SCENARIOS; do
	case $s in
	steady) bench steady $((n * 260 + 60)) "$SYSTEMS" \
		--phase "warmup=warmup:$STEADY_WARM" --phase "clean_1=clean:$STEADY" \
		--phase "idle_1=idle-in-tx:$HELD" --phase "recovery_1=recovery:$RECOV" ;;
	sat)
		bench sat_a $((n * 150 + 60)) "$SYSTEMS" --producer-mode depth-target \
			--target-depth "$DEPTH" --phase "warmup=warmup:$WARM" --phase "clean_1=clean:$SAT"
		bench sat_b $((n * 150 + 60)) "$(reverse "$SYSTEMS")" --producer-mode depth-target \
			--target-depth "$DEPTH" --phase "warmup=warmup:$WARM" --phase "clean_1=clean:$SAT" ;;
	chaos) bench chaos $((n * 240 + 60)) "$(reverse "$SYSTEMS")" \
		--phase "warmup=warmup:$WARM" --phase "baseline=clean:$STEADY" \
		--phase "restart=postgres-restart:$DOWN" --phase "recovery=clean:$RECOV" ;;
	kill) bench kill $((n * 240 + 60)) "$SYSTEMS" \
		--phase "warmup=warmup:$WARM" --phase "baseline=clean:$STEADY" \
		--phase "kill=kill-worker(instance=0):$DOWN" \
		--phase "restart=start-worker(instance=0):$DOWN" --phase "recovery=clean:$RECOV" ;;
	esac
done
echo "== done $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -f "$W/runs" ] && $PY "$HERE/table.py" "$W/runs"
