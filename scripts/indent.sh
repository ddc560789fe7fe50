#!/bin/sh
# scripts/indent.sh (`make indent`): format src/ as PostgreSQL formats its
# own code.  With --diff it changes nothing and prints the diff instead;
# with --check it prints the files that would change and fails if any.
#
# With pgindent in PATH (src/tools/pgindent of a PostgreSQL source tree,
# which also needs pg_bsd_indent) it runs pgindent with typedefs.list.
# Otherwise it runs pg_bsd_indent (Debian: pg-bsd-indent, the 2.1.1 that
# PostgreSQL 15's pgindent uses) with pgindent's settings and
# typedefs.list; pgindent's own pre- and post-processing (e.g. of
# comments after #else/#endif) is then not done, so a few lines may
# differ from what pgindent would make.
#
# typedefs.list comes from scripts/typedefs.sh: regenerate it after
# adding a typedef.
set -eu
cd "$(dirname "$0")/.."
mode=${1:-write}
files=$(ls src/*.c src/*.h)
# pgindent's settings (src/tools/pgindent/pgindent, $indent_opts)
OPTS="-bad -bap -bbb -bc -bl -cli1 -cp33 -cdb -nce -d0 -di12 -nfc1 -i4 -l79 -lp -lpl -nip -npro -sac -tpg -ts4"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if command -v pgindent >/dev/null 2>&1; then
	case $mode in
	--diff) exec pgindent --typedefs=typedefs.list --diff $files ;;
	--check) exec pgindent --typedefs=typedefs.list --check $files ;;
	*) exec pgindent --typedefs=typedefs.list $files ;;
	esac
fi
command -v pg_bsd_indent >/dev/null 2>&1 || {
	echo "indent.sh: neither pgindent nor pg_bsd_indent is installed (apt-get install pg-bsd-indent)" >&2
	exit 1
}
rc=0
for f in $files; do
	mkdir -p "$tmp/$(dirname "$f")"
	# shellcheck disable=SC2086
	pg_bsd_indent $OPTS -U"$PWD/typedefs.list" "$f" "$tmp/$f" || { echo "pg_bsd_indent failed on $f" >&2; exit 3; }
	if ! cmp -s "$f" "$tmp/$f"; then
		case $mode in
		--diff) diff -u "$f" "$tmp/$f" | sed "s#$tmp/##" || true ;;
		--check) echo "$f"; rc=2 ;;
		*) cp "$tmp/$f" "$f" ;;
		esac
	fi
done
exit $rc
