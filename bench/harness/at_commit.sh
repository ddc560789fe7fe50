#!/bin/sh
# bench/harness/at_commit.sh <commit>: build <commit> (git archive, with this
# tree's bench/harness) into PG_CONFIG's tree and run a short steady scenario
# of ntask alone (30 s warm-up, 20 s clean, 5 s held, 5 s after); prints the
# row of table.py.  The reproducer of the 1.1 pickup regression (bisect).
c=$1; d=${TMPDIR:-/tmp}/at-commit-$c
rm -rf $d; mkdir -p $d; git -C $(cd "$(dirname "$0")/../.." && pwd) archive $c | tar -x -C $d
rm -rf $d/bench/harness; cp -r $(cd "$(dirname "$0")/../.." && pwd)/bench/harness $d/bench/harness
cd $d && PG_CONFIG=${PG_CONFIG:-pg_config} SYSTEMS=ntask SCENARIOS=steady PORT=55485 \
  STEADY_WARM=30s STEADY=20s HELD=5s RECOV=5s sh bench/harness/run.sh > $d.out 2>&1
echo "$c $(date +%T) $(grep '^| ntask' $d.out) load $(cut -d' ' -f1 /proc/loadavg)"
