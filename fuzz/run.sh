#!/bin/sh
# fuzz/run.sh [seconds]: build the libFuzzer harnesses under ASan and UBSan
# (clang) into fuzz/build/ and run each for the given number of seconds
# (default 60), starting from the committed seeds in fuzz/corpus/<name>/
# plus what earlier runs kept in fuzz/build/corpus/<name>/.  Prints the
# executions per harness and a last line
#     fuzz: N harnesses, E execs, C crashes
# Exit status: 0 when nothing crashed, 1 on a crash (the input is kept in
# fuzz/build/artifacts/<name>/ and the log in fuzz/build/<name>.log), 2
# when the build fails.  CC overrides the compiler (default: clang, else
# clang-14).
set -u
secs=${1:-60}
case $secs in
	'' | *[!0-9]*) echo "usage: fuzz/run.sh [seconds]" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
src=$here/../src
build=$here/build
if [ -z "${CC:-}" ]; then
	if command -v clang >/dev/null 2>&1; then CC=clang; else CC=clang-14; fi
fi
CFLAGS="-g -O1 -std=c11 -Wall -Wextra -Werror -fno-omit-frame-pointer \
-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# name  parser source  max input length
harnesses="cron:cron_parse.c:512
http_header:http_parse.c:1024
allowlist:http_parse.c:1024"

mkdir -p "$build" || exit 2
for line in $harnesses; do
	name=${line%%:*}
	rest=${line#*:}
	parser=${rest%%:*}
	$CC $CFLAGS -I"$src" -I"$here" "$here/fuzz_$name.c" "$src/$parser" \
		-o "$build/fuzz_$name" || { echo "fuzz: build of fuzz_$name failed"; exit 2; }
done

n=0
total=0
crashes=0
for line in $harnesses; do
	name=${line%%:*}
	maxlen=${line##*:}
	log=$build/$name.log
	mkdir -p "$build/corpus/$name" "$build/artifacts/$name"
	"$build/fuzz_$name" -max_total_time="$secs" -timeout=10 -max_len="$maxlen" \
		-dict="$here/dict/$name.dict" -print_final_stats=1 \
		-artifact_prefix="$build/artifacts/$name/" \
		"$build/corpus/$name" "$here/corpus/$name" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	if [ -z "$execs" ]; then
		# no final stats (it crashed): the last progress line "#N ..."
		execs=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
	fi
	execs=${execs:-0}
	cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' "$log" | tail -n 1)
	units=$(ls "$build/corpus/$name" | wc -l)
	n=$((n + 1))
	total=$((total + execs))
	if [ $rc -ne 0 ]; then
		crashes=$((crashes + 1))
		echo "fuzz_$name: CRASH (exit $rc) after $execs execs; log $log"
		grep -E 'ERROR:|runtime error|property failed|Test unit written|deadly signal|SUMMARY' "$log" | head -n 8 | sed 's/^/    /'
	else
		echo "fuzz_$name: $execs execs in ${secs}s, cov ${cov:-?}, corpus $units"
	fi
done
echo "fuzz: $n harnesses, $total execs, $crashes crashes"
[ $crashes -eq 0 ]
