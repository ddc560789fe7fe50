#!/bin/sh
# scripts/typedefs.sh: write typedefs.list, the type names pg_bsd_indent
# must know to format src/ as pgindent does (`make indent`,
# scripts/indent.sh).  pgindent reads it as PostgreSQL reads its own
# src/tools/pgindent/typedefs.list: one name per line, sorted.
#
# The names: every typedef of src/, and every typedef of PostgreSQL's
# server headers, libcurl's and the C library's that src/ uses (a word of
# src/ that one of those headers declares as a type).  Needs Universal
# Ctags (Debian: universal-ctags) and PG_CONFIG (default: pg_config).
# Run it after adding a typedef, and commit typedefs.list.
set -eu
cd "$(dirname "$0")/.."
PG_CONFIG=${PG_CONFIG:-pg_config}
server=$("$PG_CONFIG" --includedir-server)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# typedef names a set of files declares (ctags kind t)
typedefs() { ctags -x --languages=C,C++ --language-force=C --kinds-C=t "$@" 2>/dev/null | awk '{print $1}'; }

typedefs src/*.c src/*.h >"$tmp/own"
find "$server" -name '*.h' -print >"$tmp/headers"
for d in /usr/include/curl /usr/include/*/curl; do
	[ -d "$d" ] && find "$d" -name '*.h' -print >>"$tmp/headers"
done
for h in stddef.h stdio.h stdint.h stdarg.h stdlib.h string.h time.h \
		 sys/types.h sys/socket.h netinet/in.h netdb.h signal.h setjmp.h; do
	for d in /usr/include /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu \
			 /usr/lib/gcc/*/*/include; do
		[ -f "$d/$h" ] && echo "$d/$h" >>"$tmp/headers"
	done
done
# the C library's basic types live in bits/ headers
find /usr/include -path '*/bits/types*' -name '*.h' -print >>"$tmp/headers" 2>/dev/null || true
xargs ctags -x --language-force=C --kinds-C=t <"$tmp/headers" 2>/dev/null |
	awk '{print $1}' | sort -u >"$tmp/theirs"
cat src/*.c src/*.h | grep -o '[A-Za-z_][A-Za-z0-9_]*' | sort -u >"$tmp/words"
comm -12 "$tmp/theirs" "$tmp/words" >"$tmp/used"
sort -u "$tmp/own" "$tmp/used" | grep -v '^__anon' >typedefs.list
echo "typedefs.list: $(wc -l <typedefs.list) names"
