# scripts/lib.sh: sourced by the demo and test scripts.
# SUDO runs a command as root (empty when already root); AS_PG runs one as
# the postgres OS user (the server refuses to run as root).
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ "$(id -u)" -eq 0 ]; then
	AS_PG="runuser -u postgres --"
else
	AS_PG="sudo -u postgres --"
fi

# ntask_pg_major PG_CONFIG: the major version of that pg_config's server
ntask_pg_major()
{
	"$1" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p'
}

# ntask_pg_config V: prints the pg_config to build and test with for
# PostgreSQL V, in this order: $PG_CONFIG when it is one of version V; an
# installed server's (/usr/lib/postgresql/V, Debian's or the PGDG
# packages' postgresql-V and postgresql-server-dev-V); for 18, the build
# of the vendored sources by scripts/pg18.sh (cached; NTASK_VENDOR,
# NTASK_PG_CACHE).  Prints nothing when there is none.
ntask_pg_config()
{
	if [ -n "${PG_CONFIG:-}" ] && [ "$(ntask_pg_major "$PG_CONFIG")" = "$1" ]; then
		echo "$PG_CONFIG"
	elif [ -x "/usr/lib/postgresql/$1/bin/pg_config" ]; then
		echo "/usr/lib/postgresql/$1/bin/pg_config"
	elif [ "$1" = 18 ]; then
		$SUDO env ${NTASK_VENDOR:+NTASK_VENDOR="$NTASK_VENDOR"} \
			${NTASK_PG_CACHE:+NTASK_PG_CACHE="$NTASK_PG_CACHE"} \
			sh scripts/pg18.sh | tail -n 1
	fi
}

# the versions to run when NTASK_PG is not set: that of $PG_CONFIG when it
# is set, else $1
ntask_pg_default()
{
	if [ -n "${PG_CONFIG:-}" ] && [ -n "$(ntask_pg_major "$PG_CONFIG")" ]; then
		ntask_pg_major "$PG_CONFIG"
	else
		echo "$1"
	fi
}
