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
