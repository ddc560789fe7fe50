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
set -u
cd "$(dirname "$0")/.." || exit 1
awk -v mode=check -v floors="${NTASK_FLOORS:-src/floors.txt}" \
	-f scripts/layers.awk || exit 1
echo "check_layers: src/ keeps its floors and levels"
