#!/bin/sh
# scripts/demo.sh: the one command that runs the N9 demo on a fresh Debian 12
# machine (as root or with sudo): installs missing packages, builds and
# installs ntask, starts a throwaway cluster (port 55440, socket in a temp
# dir, no TCP) as the postgres user, runs demo/n9.sql, prints its output,
# then stops the cluster and removes the temp dir, also on failure.
set -eu
cd "$(dirname "$0")/.."

PORT=55440
. scripts/lib.sh

sh scripts/deps.sh
make -s
$SUDO make -s install >/dev/null

BINDIR=$(pg_config --bindir)
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
echo
echo "ntask demo: done"
