#!/bin/sh
# scripts/citus.sh: build and install Citus 12.1.6 from the shared tarball
# into the PostgreSQL under test, unless citus.so is there already.  For
# the Citus TAP tests (t/023-025, t/046); scripts/test.sh runs it as root
# on PostgreSQL 15 before the TAP suite unless NTASK_CITUS=0 (the tests run
# as postgres, which cannot install).  About 2 minutes on 2 cores, once: a
# later run finds citus.so installed (no cache directory is needed, unlike
# scripts/pg18.sh's: the build goes into the server's own directories).
# Needs liblz4-dev, libzstd-dev, libkrb5-dev (scripts/deps.sh installs them).
set -eu
cd "$(dirname "$0")/.."
PG_CONFIG=${PG_CONFIG:-pg_config}
[ -f "$($PG_CONFIG --pkglibdir)/citus.so" ] && exit 0
tb=${NTASK_CITUS_TARBALL:-../shared/vendor/citus-12.1.6.tar.gz}
[ -f "$tb" ] || { echo "citus.sh: no Citus tarball at $tb (set NTASK_CITUS_TARBALL)" >&2; exit 1; }
tb=$(cd "$(dirname "$tb")" && pwd)/$(basename "$tb")
dir=$(mktemp -d /tmp/ntask-citus-build.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
tar xzf "$tb"
cd citus-12.1.6
./configure PG_CONFIG="$PG_CONFIG" >"$dir/configure.log" 2>&1 || { tail -20 "$dir/configure.log" >&2; exit 1; }
make -j2 >"$dir/make.log" 2>&1 || { tail -20 "$dir/make.log" >&2; exit 1; }
make install >"$dir/install.log" 2>&1 || { tail -20 "$dir/install.log" >&2; exit 1; }
echo "citus.sh: Citus 12.1.6 installed into $($PG_CONFIG --pkglibdir)"
