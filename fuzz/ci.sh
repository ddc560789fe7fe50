#!/bin/sh
# fuzz/ci.sh: the CI hook.  Runs every fuzz harness for 20 seconds under
# ASan and UBSan (fuzz/run.sh 20) when clang with libFuzzer is available;
# otherwise prints a skip line and succeeds.  Exit status is run.sh's.
here=$(cd "$(dirname "$0")" && pwd)
if command -v clang >/dev/null 2>&1; then
	cc=clang
elif command -v clang-14 >/dev/null 2>&1; then
	cc=clang-14
else
	echo "fuzz: skipped (clang not installed)"
	exit 0
fi
# libFuzzer ships with clang's runtime; check it links before relying on it
probe=$(mktemp -d) || exit 1
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
	'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
	'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void) d; (void) n; return 0; }' \
	>"$probe/p.c"
if ! $cc -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
	rm -rf "$probe"
	echo "fuzz: skipped ($cc cannot link -fsanitize=fuzzer)"
	exit 0
fi
rm -rf "$probe"
CC=$cc exec sh "$here/run.sh" 20
