#!/bin/sh
# scripts/test.sh: the one command that runs every ntask test on a fresh
# Debian 12 machine (as root or with sudo): installs missing packages,
# builds with warnings as errors, installs, then runs pg_regress, the
# isolation specs and the TAP tests as the postgres user, each on its own
# throwaway cluster under this tree.  Prints one summary line at the end.
set -u
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

sh scripts/deps.sh || exit 1
make -s clean >/dev/null 2>&1
make -s PG_CFLAGS="-Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers" || exit 1
$SUDO make -s install >/dev/null || exit 1
# the test clusters run as postgres and write into this tree; give it back
# to its owner afterwards (git refuses a tree owned by someone else)
owner=$(stat -c %u:%g .)
$SUDO chown -R postgres .

$SUDO runuser -u postgres -- make installcheck 2>&1 | tee test.log
rc=$?
# make's status, not tee's
grep -q "^make: \*\*\*" test.log && rc=1

if [ $rc -ne 0 ]; then
	for f in regression.diffs output_iso/regression.diffs; do
		[ -f "$f" ] && { echo "=== $f"; cat "$f"; }
	done
	for f in tmp_check/log/regress_log_*; do
		[ -f "$f" ] && { echo "=== $f (tail)"; tail -n 40 "$f"; }
	done
fi

$SUDO chown -R "$owner" .

# one summary line of counts over the three suites
regress_ok=$(grep -cE '^(ok|test) .*( ok|\.\.\. ok)' test.log || true)
passed=$(grep -E '^ *ok [0-9]+ ' test.log | wc -l)
failed=$(grep -E '^ *not ok [0-9]+ ' test.log | wc -l)
sql_ok=$(grep -E '^(test|ok) +[a-z_0-9]+ +\.\.\. ok|^     [a-z_0-9]+ +\.\.\. ok|^(test |permutation )?[a-z_0-9]+ +\.\.\. ok' test.log | wc -l)
sql_fail=$(grep -E '\.\.\. FAILED' test.log | wc -l)
echo "ntask: $((passed + sql_ok)) passed, $((failed + sql_fail)) failed"
exit $rc
