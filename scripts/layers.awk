# scripts/layers.awk: reads the .c and .h files of src/ for
# scripts/check_layers.sh (mode=check) and scripts/header_use.sh
# (mode=table).  Plain awk, no ctags, no compiler: it runs before the
# build.  Run from the top of the tree: awk -v mode=check -f scripts/layers.awk
#
# What it reads of a file, after removing comments and string and
# character literals:
#   a header's names: its #define's (not the include guard), its extern
#     functions and variables, its typedef names and enum constants, and a
#     function defined in it at the start of a line (compat.h's inline ones);
#   a .c file's words: every identifier in its code; a name of a header is
#     "used" by a .c file when it is one of its words;
#   a .c file's functions: a name at the start of a line followed by "("
#     (the PostgreSQL style puts a definition's name there);
#   the #include lines of both, as written.
#
# mode=table prints, for each .c file, the names its #include's make
# visible (following the includes of src/'s headers) and the ones it uses;
# mode=needs the src/ headers whose names it uses (what it should include);
# mode=names each header's names and their kinds.
#
# mode=check reads the levels from floors (src/floors.txt) and fails
# (exit 1, one line per problem) on:
#   a .c or .h file of src/ that floors does not list, lists twice, or that
#     is listed and missing;
#   a .c file of floors 2-5 whose first #include is not postgres.h; a
#     floor-1 file that includes postgres.h or a header not of floor 1;
#   an #include of a src/ header of a higher level than the includer's;
#   a .c file that uses a function defined in a .c file of a higher level
#     (a name of ntask's headers whose definition is in that file: within
#     a floor too, where one header serves several levels);
#   a .c file that includes a src/ header and uses none of its names
#     (compat.h excepted: on 16 and later it brings varatt.h along);
#   an extern declaration in a .c file (a way around the headers).
# Levels are "1", "2a", "2b", ... "5c": the digit is the floor, the letter
# the level within it; "2b" is above "2a" and below "3a".

function fail(msg)
{
	print "check_layers: " msg
	bad = 1
}

# the line without comments (state in_c carries a /* over lines) and with
# each string or character literal emptied
function strip(line,    out, p, tok, rest)
{
	out = ""
	while (line != "") {
		if (in_c) {
			p = index(line, "*/")
			if (p == 0)
				return out
			line = substr(line, p + 2)
			in_c = 0
			out = out " "
			continue
		}
		if (!match(line, /\/\*|\/\/|"|'/))
			return out line
		out = out substr(line, 1, RSTART - 1)
		tok = substr(line, RSTART, RLENGTH)
		rest = substr(line, RSTART + RLENGTH)
		if (tok == "/*") {
			in_c = 1
			line = rest
		} else if (tok == "//") {
			return out
		} else if (tok == "\"") {
			if (!match(rest, /^([^"\\]|\\.)*"/))
				return out "\"\""
			out = out "\"\""
			line = substr(rest, RLENGTH + 1)
		} else {
			if (!match(rest, /^([^'\\]|\\.)*'/))
				return out "' '"
			out = out "' '"
			line = substr(rest, RLENGTH + 1)
		}
	}
	return out
}

# the last identifier of s
function lastident(s,    name)
{
	name = ""
	while (match(s, /[A-Za-z_][A-Za-z0-9_]*/)) {
		name = substr(s, RSTART, RLENGTH)
		s = substr(s, RSTART + RLENGTH)
	}
	return name
}

function declare(h, name, kind)
{
	if (name == "" || ((h, name) in hasname))
		return
	hasname[h, name] = 1
	names[h, ++nnames[h]] = name
	if (!(name in decl_in)) {
		decl_in[name] = h
		decl_kind[name] = kind
	}
}

# an extern declaration, joined over its lines up to the ";"
function extern_decl(h, s,    p)
{
	p = index(s, "(")
	if (p > 0)
		declare(h, lastident(substr(s, 1, p - 1)), "function")
	else {
		s = substr(s, 1, index(s, ";") - 1)
		gsub(/\[[^]]*\]/, "", s)
		declare(h, lastident(s), "variable")
	}
}

function header_line(h, raw, line,    name, t)
{
	if (in_macro) {
		in_macro = (raw ~ /\\$/)
		return
	}
	if (line ~ /^[ \t]*#/) {
		in_macro = (raw ~ /\\$/)
		if (line ~ /^[ \t]*#[ \t]*define[ \t]/) {
			name = line
			sub(/^[ \t]*#[ \t]*define[ \t]+/, "", name)
			match(name, /^[A-Za-z_][A-Za-z0-9_]*/)
			name = substr(name, 1, RLENGTH)
			if (name !~ /_H$/)
				declare(h, name, "macro")
		}
		return
	}
	if (ext != "" || line ~ /(^|[ \t])extern[ \t]/) {
		ext = ext " " line
		if (index(ext, ";")) {
			extern_decl(h, ext)
			ext = ""
		}
		return
	}
	if (td != "" || line ~ /(^|[ \t])typedef[ \t]/) {
		if (td == "")
			td_enum = (line ~ /typedef[ \t]+enum/)
		if (td_enum && depth > 0 && match(line, /^[ \t]*[A-Za-z_][A-Za-z0-9_]*/)) {
			name = substr(line, RSTART, RLENGTH)
			gsub(/[ \t]/, "", name)
			declare(h, name, "enum")
		}
		td = td " " line
		t = line
		depth += gsub(/\{/, "", t)
		depth -= gsub(/\}/, "", t)
		if (depth == 0 && index(line, ";")) {
			declare(h, lastident(substr(td, 1, length(td) - length(line) + index(line, ";") - 1)), "type")
			td = ""
		}
		return
	}
	if (match(raw, /^[A-Za-z_][A-Za-z0-9_]*\(/))
		declare(h, substr(raw, 1, RLENGTH - 1), "function")
}

function readfile(f,    path, raw, line, name, q, w)
{
	path = srcdir "/" f
	in_c = 0
	in_macro = 0
	ext = ""
	td = ""
	depth = 0
	lineno = 0
	ninc[f] = 0
	first[f] = ""
	while ((getline raw < path) > 0) {
		lineno++
		if (raw ~ /^[ \t]*#[ \t]*include[ \t]/) {
			name = raw
			sub(/^[ \t]*#[ \t]*include[ \t]*/, "", name)
			q = substr(name, 1, 1)
			name = substr(name, 2)
			sub(/[>"].*$/, "", name)
			inc[f, ++ninc[f]] = name
			incq[f, ninc[f]] = q
			if (first[f] == "")
				first[f] = name
			continue
		}
		if (f ~ /\.c$/ && raw ~ /^extern[ \t]/)
			fail("src/" f ":" lineno " declares an extern: put it in a header")
		if (f ~ /\.c$/ && match(raw, /^[A-Za-z_][A-Za-z0-9_]*\(/))
			defined_in[substr(raw, 1, RLENGTH - 1)] = f
		line = strip(raw)
		if (f ~ /\.h$/) {
			header_line(f, raw, line)
			continue
		}
		while (match(line, /[A-Za-z_][A-Za-z0-9_]*/)) {
			used[f, substr(line, RSTART, RLENGTH)] = 1
			line = substr(line, RSTART + RLENGTH)
		}
	}
	close(path)
}

# marks in seen[] the src/ headers file f reaches through its includes
function reach(f,    i, h)
{
	for (i = 1; i <= ninc[f]; i++) {
		h = inc[f, i]
		if (incq[f, i] == "\"" && (h in exists) && !(h in seen)) {
			seen[h] = 1
			reach(h)
		}
	}
}

# the level a use of name reaches: the level of the file that defines the
# function, else (a macro, a type, a variable) the level of its header
function name_level(name)
{
	if (decl_kind[name] == "function" && (name in defined_in) && (defined_in[name] in level))
		return level[defined_in[name]]
	return level[decl_in[name]]
}

BEGIN {
	srcdir = "src"
	if (floors == "")
		floors = srcdir "/floors.txt"
	cmd = "ls " srcdir
	while ((cmd | getline f) > 0)
		if (f ~ /\.[ch]$/) {
			files[++nf] = f
			exists[f] = 1
		}
	close(cmd)
	for (i = 1; i <= nf; i++)
		readfile(files[i])

	if (mode == "needs") {
		for (i = 1; i <= nf; i++) {
			f = files[i]
			if (f !~ /\.c$/)
				continue
			line = f ":"
			for (j = 1; j <= nf; j++) {
				h = files[j]
				u = 0
				for (k = 1; k <= nnames[h] && !u; k++)
					u = ((f, names[h, k]) in used)
				if (u)
					line = line " " h
			}
			print line
		}
		exit 0
	}
	if (mode == "names") {
		for (h in nnames)
			for (k = 1; k <= nnames[h]; k++)
				print names[h, k], h, decl_kind[names[h, k]]
		exit 0
	}
	if (mode == "table") {
		printf "%-18s %8s %5s %6s\n", "file", "visible", "used", "ratio"
		for (i = 1; i <= nf; i++) {
			f = files[i]
			if (f !~ /\.c$/)
				continue
			split("", seen)
			reach(f)
			vis = 0
			use = 0
			for (h in seen)
				for (k = 1; k <= nnames[h]; k++)
					if (!((f, names[h, k]) in counted)) {
						counted[f, names[h, k]] = 1
						vis++
						if ((f, names[h, k]) in used)
							use++
					}
			tv += vis
			tu += use
			printf "%-18s %8d %5d %6s\n", f, vis, use,
				use ? sprintf("%.1f", vis / use) : (vis ? "-" : "")
		}
		printf "%-18s %8d %5d %6.1f\n", "all", tv, tu, tu ? tv / tu : 0
		exit 0
	}

	# the floors: "<level> <file> <file> ..." lines, # starts a comment
	nl = 0
	while ((getline line < floors) > 0) {
		sub(/#.*/, "", line)
		nw = split(line, w)
		if (nw == 0)
			continue
		if (w[1] !~ /^[1-5][a-z]?$/) {
			fail(floors ": \"" w[1] "\" is not a level (1, 2a, 2b, ... 5z)")
			continue
		}
		nl++
		for (k = 2; k <= nw; k++) {
			if (w[k] in level)
				fail("src/" w[k] " listed twice in " floors)
			level[w[k]] = w[1]
		}
	}
	close(floors)
	if (nl == 0) {
		fail("no levels in " floors)
		exit 1
	}
	for (i = 1; i <= nf; i++)
		if (!(files[i] in level))
			fail("src/" files[i] " has no level in " floors)
	for (f in level)
		if (!(f in exists))
			fail("src/" f " is listed in " floors " but missing")

	for (i = 1; i <= nf; i++) {
		f = files[i]
		if (!(f in level))
			continue
		fl = substr(level[f], 1, 1)
		if (f ~ /\.c$/ && fl > 1 && first[f] != "postgres.h")
			fail("src/" f " does not include postgres.h first")
		for (k = 1; k <= ninc[f]; k++) {
			h = inc[f, k]
			if (fl == 1 && h == "postgres.h")
				fail("src/" f " (floor 1) includes postgres.h")
			if (incq[f, k] != "\"")
				continue
			if (fl == 1 && !(h in exists))
				fail("src/" f " (floor 1) includes " h)
			if (!(h in level))
				continue
			if (level[h] > level[f])
				fail("src/" f " (" level[f] ") includes " h " (" level[h] ")")
			if (f ~ /\.c$/) {
				u = 0
				for (j = 1; j <= nnames[h] && !u; j++)
					u = ((f, names[h, j]) in used)
				if (!u && h != "compat.h")
					fail("src/" f " includes " h " and uses none of its names")
			}
		}
		if (f !~ /\.c$/)
			continue
		for (name in decl_in) {
			if (!((f, name) in used) || !(decl_in[name] in level))
				continue
			if (decl_kind[name] == "function" && defined_in[name] == f)
				continue
			nlv = name_level(name)
			if (nlv > level[f])
				fail("src/" f " (" level[f] ") uses " name " of " \
					 (decl_kind[name] == "function" && (name in defined_in) ? defined_in[name] : decl_in[name]) \
					 " (" nlv ")")
		}
	}
	exit bad
}
