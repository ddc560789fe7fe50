#!/bin/sh
# scripts/check_layers.sh: the floors of src/ (docs/design.md "Floors").
# Fails (rc 1, one line per problem) on a src file the list does not name
# or names twice, a listed file that is missing, a .c file of floors 2-5
# whose first #include is not postgres.h, a floor-1 file that includes
# PostgreSQL or ntask headers, an #include of a header of a higher floor,
# and an extern declaration in a .c file.  Prints one line when all hold.
set -u
cd "$(dirname "$0")/.." || exit 1
doc=docs/design.md

# "floor N: files" and "header N: files" lines of the Floors section
list=$(awk '/^## Floors/ {on = 1; next} on && /^## / {exit}
	on && /^(floor|header) [1-5]: / {print}' "$doc")
[ -n "$list" ] || { echo "check_layers: no Floors list in $doc"; exit 1; }

echo "$list" | awk -v srcdir=src '
	{
		sub(":", "", $2)
		for (i = 3; i <= NF; i++) {
			if ($i in floor) { print "check_layers: " $i " listed twice"; bad = 1 }
			floor[$i] = $2
		}
	}
	END {
		# every file of src/ is listed, every listed file exists
		cmd = "ls " srcdir
		while ((cmd | getline f) > 0)
			if (f ~ /\.[ch]$/ && !(f in floor)) {
				print "check_layers: src/" f " has no floor"; bad = 1
			}
		close(cmd)
		for (f in floor) {
			path = srcdir "/" f
			if ((getline line < path) < 0) {
				print "check_layers: src/" f " is listed but missing"; bad = 1
				continue
			}
			close(path)
			first = ""
			while ((getline line < path) > 0) {
				if (line ~ /^[ \t]*#[ \t]*include[ \t]/) {
					inc = line
					sub(/^[ \t]*#[ \t]*include[ \t]*/, "", inc)
					q = substr(inc, 1, 1)
					name = substr(inc, 2)
					sub(/[>"].*$/, "", name)
					if (first == "") first = name
					if (floor[f] == 1 && q == "\"" && !(name in floor)) {
						print "check_layers: src/" f " (floor 1) includes " name; bad = 1
					} else if (q == "\"" && (name in floor) && floor[name] > floor[f]) {
						print "check_layers: src/" f " (floor " floor[f] ") includes " name " (floor " floor[name] ")"; bad = 1
					}
					if (floor[f] == 1 && name == "postgres.h") {
						print "check_layers: src/" f " (floor 1) includes postgres.h"; bad = 1
					}
				}
				if (f ~ /\.c$/ && line ~ /^extern[ \t]/) {
					print "check_layers: src/" f " declares an extern: put it in its floor header"; bad = 1
				}
			}
			close(path)
			if (f ~ /\.c$/ && floor[f] > 1 && first != "postgres.h") {
				print "check_layers: src/" f " does not include postgres.h first"; bad = 1
			}
		}
		exit bad
	}' || exit 1
echo "check_layers: src/ keeps its floors"
