#!/bin/sh
# scripts/test.sh: the one command that runs every ntask test on a fresh
# Debian 12 machine (as root or with sudo): installs missing packages,
# then for each PostgreSQL version in NTASK_PG (default "15 18"; "15" or
# "18" for one) builds with warnings as errors, installs, and runs
# pg_regress, the isolation specs and the TAP tests as the postgres user,
# each on its own throwaway cluster under this tree.  Each version's
# pg_config: $PG_CONFIG when it is of that version (PG_CONFIG alone, without
# NTASK_PG, runs only its version), else an installed server's
# (/usr/lib/postgresql/<v>: Debian's 15, the PGDG packages' 18), else, for
# 18, a build from ../shared/vendor by scripts/pg18.sh into
# /var/cache/ntask (about 6 minutes the first time, reused afterwards).  The fuzz harnesses (pure C, no PostgreSQL headers)
# run once.  Every suite runs even if an earlier one failed.  Prints one
# line per version, "ntask pg15: N passed, M failed", and ends with the
# total that CI reads: "ntask: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
. scripts/lib.sh

# PG_CONFIG=<an installed server's pg_config> alone: that version only
NTASK_PG=${NTASK_PG:-$(ntask_pg_default "15 18")}
export NTASK_PG
for v in $NTASK_PG; do
	case $v in
		15 | 18) ;;
		*) echo "ntask: NTASK_PG=\"$NTASK_PG\": only 15 and 18 are tested" >&2; exit 2 ;;
	esac
done

sh scripts/deps.sh || exit 1

# the floors of src/ (docs/design.md "Floors"): one test, before the builds
layers_ok=0
layers_failed=0
echo "=== layers"
if sh scripts/check_layers.sh; then layers_ok=1; else layers_failed=1; fi

# the test clusters run as postgres and write into this tree; give it back
# to its owner afterwards (git refuses a tree owned by someone else).
# ntask 0.3 and 1.0.0, the starts of the one upgrade path the tests prove
# (regress upgrade, TAP 007 and 011), are installed into each version's
# extension directory only while its suites run (frozen_files)
owner=$(stat -c %u:%g .)
frozen_files=""
trap '$SUDO rm -f $frozen_files; $SUDO chown -R "$owner" .' EXIT

rc=0
passed=0
failed=0
: >test.log
suite()
{
	name=$1
	shift
	echo "=== pg$v $name"
	$AS_PG make PG_CONFIG="$pgc" "$@" >"test-pg$v-$name.log" 2>&1
	s=$?
	cat "test-pg$v-$name.log"
	cat "test-pg$v-$name.log" >>"test-pg$v.log"
	[ $s -eq 0 ] || vrc=1
}

# version(): build, install and test against PostgreSQL $v ($pgc its
# pg_config); adds its counts to passed / failed
version()
{
	vrc=0
	: >"test-pg$v.log"
	$SUDO chown -R "$owner" .
	make -s PG_CONFIG="$pgc" clean >/dev/null 2>&1
	if ! make -s PG_CONFIG="$pgc" PG_CFLAGS="-Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers" ||
		! $SUDO make -s PG_CONFIG="$pgc" install >/dev/null; then
		vline="ntask pg$v: build failed"
		echo "$vline"
		failed=$((failed + 1))
		rc=1
		return
	fi
	for fv in 0.3 1.0.0; do
		frozen="$("$pgc" --sharedir)/extension/ntask--$fv.sql"
		$SUDO cp "test/frozen/ntask--$fv.sql" "$frozen" && frozen_files="$frozen_files $frozen"
	done
	$SUDO chown -R postgres .
	suite regress installcheck ISOLATION= TAP_TESTS=
	suite isolation installcheck REGRESS= TAP_TESTS=
	# NTASK_CHAOS_LONG=1 and NTASK_PATRONI=1 reach the TAP files through the
	# environment (t/006_chaos.pl's long mode; t/018_patroni.pl, 1.5-2 min,
	# etcd and three Patroni nodes: docs/ha.md; without it, one skip line)
	# the Citus TAP tests (t/023-028, t/046) run on 15 unless NTASK_CITUS=0:
	# they need Citus installed, which only root can do (scripts/citus.sh
	# builds it from ../shared/vendor once, about 2 minutes; Citus 12.1
	# supports 15, not 18: there the tests say so in a skip).  t/023's and t/027's long
	# parts only with NTASK_CITUS_LONG=1 (docs/scaling.md "Citus in CI").
	citus=0
	if [ "${NTASK_CITUS:-1}" = 1 ] && [ "$v" = 15 ]; then
		citus=1
		$SUDO env PG_CONFIG="$pgc" sh scripts/citus.sh || vrc=1
	fi
	suite tap installcheck REGRESS= ISOLATION= NTASK_CITUS=$citus
	cat "test-pg$v.log" >>test.log

	if [ $vrc -ne 0 ]; then
		for f in regression.diffs output_iso/regression.diffs; do
			[ -f "$f" ] && { echo "=== pg$v $f"; cat "$f"; }
		done
		for f in tmp_check/log/regress_log_*; do
			[ -f "$f" ] && { echo "=== pg$v $f (tail)"; tail -n 40 "$f"; }
		done
		rc=1
	fi

	# counts: pg_regress / isolation tests (15 prints "test x ... ok" or
	# "... FAILED", 16+ "ok 3 - x" or "not ok 3 - x"), TAP subtests
	sql_ok=$(cat "test-pg$v-regress.log" "test-pg$v-isolation.log" |
		grep -cE '\.\.\. ok|^ok [0-9]+ ')
	sql_failed=$(cat "test-pg$v-regress.log" "test-pg$v-isolation.log" |
		grep -cE '\.\.\. FAILED|^not ok [0-9]+ ')
	tap_total=$(sed -n 's/.*Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "test-pg$v-tap.log" | head -n 1)
	tap_failed=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "test-pg$v-tap.log" | awk '{s+=$1} END {print s+0}')
	tap_total=${tap_total:-0}
	if grep -q '^Result: FAIL' "test-pg$v-tap.log" && [ "$tap_failed" -eq 0 ]; then
		tap_failed=1			# a test script died before counting
	fi
	vpassed=$((sql_ok + tap_total - tap_failed))
	vfailed=$((sql_failed + tap_failed))
	[ $vrc -eq 0 ] || [ $vfailed -gt 0 ] || vfailed=1
	vline="ntask pg$v: $vpassed passed, $vfailed failed"
	echo "$vline"
	passed=$((passed + vpassed))
	failed=$((failed + vfailed))
}

summary=""
for v in $NTASK_PG; do
	# $PG_CONFIG of that version, an installed server, or (18) the vendored build
	pgc=$(ntask_pg_config "$v")
	if [ -n "$pgc" ] && [ -x "$pgc" ]; then
		echo "=== pg$v: $("$pgc" --version), $pgc"
		version
	else
		vline="ntask pg$v: no PostgreSQL $v (pg_config \"$pgc\")"
		echo "$vline"
		failed=$((failed + 1))
		rc=1
	fi
	summary="$summary
$vline"
done
$SUDO chown -R "$owner" .

# the C parsers under libFuzzer with ASan and UBSan, 20 s each (as root:
# it only builds and runs test binaries under fuzz/build)
echo "=== fuzz"
sh fuzz/ci.sh >test-fuzz.log 2>&1 || rc=1
cat test-fuzz.log
cat test-fuzz.log >>test.log
fuzz_ok=$(sed -n 's/^fuzz: \([0-9]*\) harnesses, [0-9]* execs, 0 crashes$/\1/p' test-fuzz.log)
fuzz_failed=$(sed -n 's/^fuzz: [0-9]* harnesses, [0-9]* execs, \([1-9][0-9]*\) crashes$/\1/p' test-fuzz.log)

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

passed=$((passed + ${fuzz_ok:-0} + deb_ok + layers_ok))
failed=$((failed + ${fuzz_failed:-0} + deb_failed + layers_failed))
[ $rc -eq 0 ] || [ $failed -gt 0 ] || failed=1
echo "$summary" | sed '/^$/d'
echo "ntask: $passed passed, $failed failed"
exit $rc
