#!/bin/sh
# scripts/pg18.sh: build PostgreSQL 18.6 and pg_cron 1.6.7 from the vendored
# tarballs into a cache outside the tree, and print the pg_config path of
# that install on the last line of stdout.  Debian 12 does not package
# PostgreSQL 18; scripts/test.sh runs this for NTASK_PG=18.
#
# The cache directory is /var/cache/ntask/pg-18.6-<key> (NTASK_PG_CACHE
# overrides /var/cache/ntask), <key> being a short hash of the two tarballs'
# sha256 and of this script (its comments left out): a changed tarball or build recipe builds a new
# directory, and an existing one is reused only when its stamp file (written
# last, after every install step succeeded) carries the same key.  A half
# built directory (no stamp) is removed and built again.  Nothing is
# installed into /usr and the system's PostgreSQL 15 is never touched.
#
# About 6 minutes on 2 cores (make -j2 -s: the server, pg_trgm from contrib,
# src/test/isolation, src/test/perl, pg_cron); a cached run takes a second.
# Needs root for /var/cache (or NTASK_PG_CACHE writable), bison, flex,
# zlib1g-dev, libssl-dev and perl's IPC::Run (scripts/deps.sh installs them
# when NTASK_PG includes 18).  The tarballs are looked for in
# ../shared/vendor (NTASK_VENDOR overrides).
set -eu
cd "$(dirname "$0")/.."

PG_TB=postgresql-18_18.6.orig.tar.bz2
PG_SHA=555610c24d53e4316da5b7d3fc25c279d96856d5e0e23ee308c328c5fa881d9f
CRON_TB=pg_cron-1.6.7.tar.gz
CRON_SHA=6684ba135a8de3663af5eddbae354a080b37d2f28f2c1801eeab3bbbb4c39f6a

vendor=${NTASK_VENDOR:-../shared/vendor}
[ -d "$vendor" ] || { echo "pg18.sh: no vendor directory $vendor (set NTASK_VENDOR), and no installed PostgreSQL 18: install postgresql-18 and postgresql-server-dev-18 (PGDG apt repository) or set PG_CONFIG to an 18 pg_config (README.md)" >&2; exit 1; }
vendor=$(cd "$vendor" && pwd)
for f in "$PG_TB" "$CRON_TB"; do
	[ -f "$vendor/$f" ] || { echo "pg18.sh: $vendor/$f is missing" >&2; exit 1; }
done

# comments do not count: editing them must not cost a rebuild
recipe=$(grep -v '^[[:space:]]*#' scripts/pg18.sh | sha256sum | cut -c1-64)
key=$(printf '%s %s %s\n' "$PG_SHA" "$CRON_SHA" "$recipe" |
	sha256sum | cut -c1-12)
cache=${NTASK_PG_CACHE:-/var/cache/ntask}
prefix=$cache/pg-18.6-$key
stamp=$prefix/.ntask-stamp

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] && [ -x "$prefix/bin/pg_config" ]; then
	echo "$prefix/bin/pg_config"
	exit 0
fi

# the tarballs must be the ones vendor/README.md names
check()
{
	got=$(sha256sum <"$vendor/$1" | cut -c1-64)
	[ "$got" = "$2" ] || { echo "pg18.sh: $1 has sha256 $got, expected $2" >&2; exit 1; }
}
check "$PG_TB" "$PG_SHA"
check "$CRON_TB" "$CRON_SHA"
for t in bison flex; do
	command -v $t >/dev/null 2>&1 || { echo "pg18.sh: $t is needed (apt-get install bison flex)" >&2; exit 1; }
done

echo "pg18.sh: building PostgreSQL 18.6 and pg_cron 1.6.7 into $prefix (about 6 minutes)" >&2
start=$(date +%s)
rm -rf "$prefix"
mkdir -p "$prefix"
work=$(mktemp -d "${TMPDIR:-/tmp}/ntask-pg18.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$work/build.log
step()
{
	"$@" >>"$log" 2>&1 || { echo "pg18.sh: failed: $*" >&2; tail -n 40 "$log" >&2; exit 1; }
}

cd "$work"
tar xjf "$vendor/$PG_TB"
cd postgresql-18.6
# --enable-tap-tests: PGXS's prove_installcheck and the PostgreSQL::Test
# modules; --with-openssl: the libpq the TAP helpers and the tests' psql use
# speaks TLS like Debian's; ICU and readline are not needed by any test
step ./configure --prefix="$prefix" --enable-tap-tests --with-openssl \
	--without-icu --without-readline
step make -j2 -s
step make -s install
# pg_isolation_regress and isolationtester for PGXS's installcheck, the
# TAP modules for t/*.pl, pg_regress comes with the server install
step make -s -C src/test/isolation install
step make -s -C src/test/perl install
# contrib modules the tests use (t/002's pg_trgm, regress guard)
step make -s -C contrib/pg_trgm install

cd "$work"
tar xzf "$vendor/$CRON_TB"
cd pg_cron-1.6.7
step make -s PG_CONFIG="$prefix/bin/pg_config"
step make -s PG_CONFIG="$prefix/bin/pg_config" install

echo "$key" >"$stamp"
echo "pg18.sh: built in $(($(date +%s) - start)) s" >&2
echo "$prefix/bin/pg_config"
