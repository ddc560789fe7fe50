#!/bin/sh
# scripts/test.sh: the one command that runs every ntask test on a fresh
# Debian 12 machine (as root or with sudo): installs missing packages,
# builds with warnings as errors, installs, then runs pg_regress, the
# isolation specs and the TAP tests as the postgres user, each on its own
# throwaway cluster under this tree.  Every suite runs even if an earlier
# one failed.  Ends with one summary line: "ntask: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
. scripts/lib.sh

sh scripts/deps.sh || exit 1
# the floors of src/ (docs/design.md "Floors"): one test, before the build
layers_ok=0
layers_failed=0
echo "=== layers"
if sh scripts/check_layers.sh; then layers_ok=1; else layers_failed=1; fi
make -s clean >/dev/null 2>&1
make -s PG_CFLAGS="-Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers" || exit 1
$SUDO make -s install >/dev/null || exit 1

# the test clusters run as postgres and write into this tree; give it back
# to its owner afterwards (git refuses a tree owned by someone else)
owner=$(stat -c %u:%g .)
$SUDO chown -R postgres .
trap '$SUDO chown -R "$owner" .' EXIT

# issue 32: ntask 0.3, the start of the one upgrade path the tests prove
# (regress upgrade, TAP 007 and 011), is installed only while they run
frozen="$(${PG_CONFIG:-pg_config} --sharedir)/extension/ntask--0.3.sql"
$SUDO cp test/frozen/ntask--0.3.sql "$frozen" || exit 1
trap '$SUDO rm -f "$frozen"; $SUDO chown -R "$owner" .' EXIT

rc=0
: >test.log
suite()
{
	name=$1
	shift
	echo "=== $name"
	$AS_PG make "$@" >"test-$name.log" 2>&1
	s=$?
	cat "test-$name.log"
	cat "test-$name.log" >>test.log
	[ $s -eq 0 ] || rc=1
}
suite regress installcheck ISOLATION= TAP_TESTS=
suite isolation installcheck REGRESS= TAP_TESTS=
# NTASK_CHAOS_LONG=1 and NTASK_PATRONI=1 reach the TAP files through the
# environment (t/006_chaos.pl's long mode; t/018_patroni.pl, 1.5-2 min,
# etcd and three Patroni nodes: docs/ha.md; without it, one skip line)
# NTASK_CITUS=1: t/023_citus.pl needs Citus installed, which only root can
# do (scripts/citus.sh builds it from ../shared/vendor, about 2 minutes)
if [ "${NTASK_CITUS:-0}" = 1 ]; then
	$SUDO sh scripts/citus.sh || rc=1
fi
suite tap installcheck REGRESS= ISOLATION=

# the C parsers under libFuzzer with ASan and UBSan, 20 s each (as root:
# it only builds and runs test binaries under fuzz/build)
echo "=== fuzz"
sh fuzz/ci.sh >test-fuzz.log 2>&1 || rc=1
cat test-fuzz.log
cat test-fuzz.log >>test.log

# the Debian package (about a minute, so only with NTASK_TEST_DEB=1): build
# it, unpack it into a PostgreSQL copy without the source build, one round
deb_ok=0
deb_failed=0
if [ "${NTASK_TEST_DEB:-0}" = 1 ]; then
	echo "=== deb"
	$SUDO sh scripts/test-deb.sh >test-deb.log 2>&1 || rc=1
	cat test-deb.log
	if grep -q '^ntask deb: ok' test-deb.log; then deb_ok=1; else deb_failed=1; fi
fi

if [ $rc -ne 0 ]; then
	for f in regression.diffs output_iso/regression.diffs; do
		[ -f "$f" ] && { echo "=== $f"; cat "$f"; }
	done
	for f in tmp_check/log/regress_log_*; do
		[ -f "$f" ] && { echo "=== $f (tail)"; tail -n 40 "$f"; }
	done
fi

# counts: pg_regress / isolation lines "... ok" / "... FAILED", TAP subtests
sql_ok=$(grep -cE '\.\.\. ok' test.log)
sql_failed=$(grep -cE '\.\.\. FAILED' test.log)
tap_total=$(sed -n 's/.*Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' test.log | head -n 1)
tap_failed=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' test.log | awk '{s+=$1} END {print s+0}')
tap_total=${tap_total:-0}
if grep -q '^Result: FAIL' test-tap.log && [ "$tap_failed" -eq 0 ]; then
	tap_failed=1				# a test script died before counting
fi
fuzz_ok=$(sed -n 's/^fuzz: \([0-9]*\) harnesses, [0-9]* execs, 0 crashes$/\1/p' test-fuzz.log)
fuzz_failed=$(sed -n 's/^fuzz: [0-9]* harnesses, [0-9]* execs, \([1-9][0-9]*\) crashes$/\1/p' test-fuzz.log)
passed=$((sql_ok + tap_total - tap_failed + ${fuzz_ok:-0} + deb_ok + layers_ok))
failed=$((sql_failed + tap_failed + ${fuzz_failed:-0} + deb_failed + layers_failed))
[ $rc -eq 0 ] || [ $failed -gt 0 ] || failed=1
echo "ntask: $passed passed, $failed failed"
exit $rc
