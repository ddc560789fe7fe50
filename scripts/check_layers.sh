#!/bin/sh
# scripts/check_layers.sh: the floors of src/ and the levels within each
# (docs/design.md "Floors"), read from src/floors.txt.  Fails (rc 1, one
# line per problem) on a src file the list does not name or names twice, a
# listed file that is missing, a .c file of floors 2-5 whose first
# #include is not postgres.h, a floor-1 file that includes PostgreSQL or
# ntask headers of other floors, an #include of a header of a higher
# level, a call of a function defined in a file of a higher level (within
# a floor too), an #include of a header none of whose names the file uses,
# and an extern declaration in a .c file.  Prints one line when all hold.
# scripts/layers.awk does the reading; scripts/header_use.sh prints the
# names each .c file sees and uses.
#
# Then it proves that it fails when it should: on a small tree of its own
# (two levels of one floor, each a .c file and a header) that passes, it
# breaks one rule at a time and fails unless the check names the break.
set -u
cd "$(dirname "$0")/.." || exit 1
top=$(pwd)
awk -v mode=check -v floors="${NTASK_FLOORS:-src/floors.txt}" \
	-f scripts/layers.awk || exit 1

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# the tree: 2a a.c a.h, 2b b.c b.h (b.c calls a.c), and c.h unused at 2a
tree()
{
	rm -rf "$tmp/src"
	mkdir "$tmp/src"
	printf '2a a.c a.h c.h\n2b b.c b.h\n' >"$tmp/src/floors.txt"
	printf '#define A_H\nextern void AFun(void);\n' >"$tmp/src/a.h"
	printf '#define B_H\n#define B_MAX 2\nextern void BFun(void);\n' >"$tmp/src/b.h"
	printf '#define C_H\nextern int	c_count;\n' >"$tmp/src/c.h"
	printf '#include "postgres.h"\n\n#include "a.h"\n\nvoid\nAFun(void)\n{\n}\n' >"$tmp/src/a.c"
	printf '#include "postgres.h"\n\n#include "a.h"\n#include "b.h"\n\nvoid\nBFun(void)\n{\n\tAFun();\n}\n' >"$tmp/src/b.c"
}
# case WHAT EXPECTED COMMAND: the tree broken by COMMAND must fail with EXPECTED
case_fails()
{
	tree
	(cd "$tmp/src" && eval "$3")
	out=$(cd "$tmp" && awk -v mode=check -f "$top/scripts/layers.awk" 2>&1)
	case $out in
		*"$2"*) ;;
		*) echo "check_layers: self-test: $1 went unnoticed (want \"$2\", got: $out)"; exit 1 ;;
	esac
}
tree
out=$(cd "$tmp" && awk -v mode=check -f "$top/scripts/layers.awk" 2>&1) ||
	{ echo "check_layers: self-test: the sound tree fails: $out"; exit 1; }
case_fails "an include of a higher level" "src/a.c (2a) includes b.h (2b)" \
	'sed "s/^#include \"a.h\"$/&\n#include \"b.h\"/; s/^{$/{\n\tBFun();/" a.c >x && mv x a.c'
case_fails "a call of a higher level" "src/a.c (2a) uses BFun of b.c (2b)" \
	'sed "s/^{$/{\n\tBFun();/" a.c >x && mv x a.c'
case_fails "a macro of a higher level" "src/a.c (2a) uses B_MAX of b.h (2b)" \
	'sed "s/^{$/{\n\treturn B_MAX;/" a.c >x && mv x a.c'
case_fails "an include no name of which is used" "src/b.c includes c.h and uses none of its names" \
	'sed "s/^#include \"b.h\"$/&\n#include \"c.h\"/" b.c >x && mv x b.c'
case_fails "a file without a level" "src/d.c has no level" \
	'cp a.c d.c'
case_fails "a .c file without postgres.h first" "src/b.c does not include postgres.h first" \
	'sed "/postgres.h/d" b.c >x && mv x b.c'
case_fails "an extern in a .c file" "src/b.c:11 declares an extern" \
	'echo "extern int c_count;" >>b.c'
case_fails "a level that is none" "\"2A\" is not a level" \
	'echo "2A e.c" >>floors.txt'
echo "check_layers: src/ keeps its floors and levels"
