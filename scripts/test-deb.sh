#!/bin/sh
# scripts/test-deb.sh: build the Debian package and try it on a server that
# has never seen the source build (README "Installing from a package").
# Run by scripts/test.sh when NTASK_TEST_DEB=1 (it takes about a minute);
# as root or with sudo, on Debian 12 with postgresql-server-dev-all,
# debhelper and dpkg-dev (scripts/deps.sh installs them then).
#
#   1. git archive of HEAD into a temp dir, dpkg-buildpackage -us -uc -b
#      there: postgresql-15-ntask_<version>_amd64.deb must appear;
#   2. the package is NOT installed with dpkg (that would overwrite whatever
#      ntask build is in the system's PostgreSQL): a private copy of the
#      system's PostgreSQL 15 (/usr/lib/postgresql/15, /usr/share/postgresql/15)
#      is made without any ntask file, and the .deb is unpacked into it with
#      dpkg-deb -x; PostgreSQL finds its lib and share directories relative
#      to its binaries, so that copy runs with the package's files only;
#   3. initdb, start it with ntask preloaded (unix socket in the temp dir, no
#      TCP), CREATE EXTENSION ntask and one task round (queue, enqueue,
#      claim, invoked, receipt, transition, explain); the background worker
#      runs; then stop and remove everything.
# Ends with one line: "ntask deb: ok <file>" or "ntask deb: FAILED ...".
set -eu
cd "$(dirname "$0")/.."
. scripts/lib.sh

fail()
{
	echo "ntask deb: FAILED $*"
	exit 1
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ntask-deb.XXXXXX")
DATA="$TMP/data"
cleanup()
{
	rc=$?
	trap - EXIT INT TERM
	if [ -f "$DATA/postmaster.pid" ]; then
		$AS_PG "$TMP/root/usr/lib/postgresql/15/bin/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	$SUDO rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. build
mkdir "$TMP/src"
git -c safe.directory="$(pwd)" archive --format=tar HEAD | tar -x -C "$TMP/src"
(cd "$TMP/src" && dpkg-buildpackage -us -uc -b) >"$TMP/build.log" 2>&1 || {
	tail -n 40 "$TMP/build.log"
	fail "dpkg-buildpackage (log above)"
}
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
deb="$TMP/postgresql-15-ntask_${version}_amd64.deb"
[ -f "$deb" ] || fail "no $(basename "$deb"); built: $(ls "$TMP"/*.deb 2>/dev/null)"
echo "ntask deb: built $(basename "$deb") ($(stat -c %s "$deb") bytes)"
list=$(dpkg-deb -c "$deb" | awk '{print $6}')
echo "$list" | grep -E 'ntask(\.so|\.control|--.*\.sql)$' | sed 's/^/  /'
for f in usr/lib/postgresql/15/lib/ntask.so usr/share/postgresql/15/extension/ntask.control \
	usr/share/postgresql/15/extension/ntask--1.1.0.sql usr/share/postgresql/15/extension/ntask--0.3--1.0.0.sql \
	usr/share/postgresql/15/extension/ntask--1.0.0--1.1.0.sql; do
	echo "$list" | grep -qx "\./$f" || fail "$f is not in the package"
done
# one install script and the upgrade path 0.3 -> 1.0.0 -> 1.1.0, nothing for 0.1-0.3
extra=$(echo "$list" | grep -E '/ntask--.*\.sql$' | grep -vxE '\./usr/share/postgresql/15/extension/ntask--(1\.1\.0|0\.3--1\.0\.0|1\.0\.0--1\.1\.0)\.sql')
[ -z "$extra" ] || fail "scripts of versions nobody installed are in the package: $extra"
dpkg-deb -f "$deb" Depends | grep -q postgresql-15 || fail "the package does not depend on postgresql-15"

# 2. a PostgreSQL 15 without any ntask file, then the package's files
mkdir -p "$TMP/root/usr/lib/postgresql" "$TMP/root/usr/share/postgresql"
cp -a /usr/lib/postgresql/15 "$TMP/root/usr/lib/postgresql/"
cp -a /usr/share/postgresql/15 "$TMP/root/usr/share/postgresql/"
rm -f "$TMP/root/usr/lib/postgresql/15/lib/ntask.so" \
	"$TMP/root/usr/share/postgresql/15/extension/"ntask* \
	"$TMP/root/usr/lib/postgresql/15/lib/bitcode/ntask.index.bc"
rm -rf "$TMP/root/usr/lib/postgresql/15/lib/bitcode/ntask"
dpkg-deb -x "$deb" "$TMP/root"
BIN="$TMP/root/usr/lib/postgresql/15/bin"
[ "$("$BIN/pg_config" --pkglibdir)" = "$TMP/root/usr/lib/postgresql/15/lib" ] ||
	fail "the private copy's pg_config does not point into it"

# 3. a server, the extension, one round
$SUDO chown -R postgres: "$TMP"
$AS_PG "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C >"$TMP/initdb.log" 2>&1 ||
	fail "initdb: $(tail -n 5 "$TMP/initdb.log")"
$AS_PG sh -c "cat >> '$DATA/postgresql.conf'" <<CONF
shared_preload_libraries = 'ntask'
ntask.database = 'postgres'
listen_addresses = ''
unix_socket_directories = '$TMP'
port = 5432
CONF
$AS_PG "$BIN/pg_ctl" -D "$DATA" -l "$TMP/server.log" -w -t 60 start >/dev/null ||
	fail "the server did not start: $(tail -n 5 "$TMP/server.log")"
out=$($AS_PG "$BIN/psql" -X -q -At -h "$TMP" -U postgres -d postgres -v ON_ERROR_STOP=1 <<'SQL' 2>&1
CREATE EXTENSION ntask;
SELECT 'version ' || extversion FROM pg_extension WHERE extname = 'ntask';
SELECT 'library ' || setting FROM pg_settings WHERE name = 'shared_preload_libraries';
SELECT count(*) FROM ntask_queue_set('pkg', lease => '1 minute');
SELECT 'enqueued ' || created FROM ntask_enqueue('pkg', 'pkg:1', '{"hello": "deb"}');
SELECT task_id AS t, token AS k FROM ntask_claim('pkg', 'W1') \gset
SELECT 'invoked ' || ntask_invoked(:t, :k);
BEGIN;
SELECT 'receipt ' || ntask_receipt(:t, :k, '{"rows": 1}');
COMMIT;
SELECT 'transition ' || result || ' ' || state FROM ntask_transition(:t, :k, 'succeeded', outcome => 'from_the_package');
SELECT 'explain ' || detail FROM ntask_explain(:t) WHERE event = 'now';
DO $$ BEGIN
	FOR i IN 1..100 LOOP
		EXIT WHEN (SELECT state = 'running' FROM ntask.worker_stats);
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT 'worker ' || state FROM ntask.worker_stats;
SQL
) || fail "psql: $out"
echo "$out" | sed 's/^/  /'
expect="version 1.1.0
library ntask
1
enqueued true
invoked applied
receipt applied
transition applied succeeded"
[ "$(echo "$out" | head -n 7)" = "$expect" ] || fail "unexpected answers"
echo "$out" | grep -q '^explain succeeded (from_the_package)' || fail "ntask_explain"
echo "$out" | grep -q '^worker running$' || fail "the background worker does not run"
$AS_PG "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
echo "ntask deb: ok $(basename "$deb") (built, unpacked into a PostgreSQL copy without the source build, CREATE EXTENSION and one task round)"
