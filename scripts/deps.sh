#!/bin/sh
# scripts/deps.sh: install the Debian 12 packages ntask needs to build and
# test, if any is missing, and the npm packages of examples/node, clients/node
# and console (npm registry).  Needs root (or sudo).  Run from the top of the tree.
set -eu
PKGS="make gcc postgresql-15 postgresql-server-dev-15 postgresql-15-cron libcurl4-openssl-dev libssl-dev libipc-run-perl libdbd-pg-perl python3 clang pgbouncer prometheus-postgres-exporter python3-psycopg libpostgresql-jdbc-java default-jdk-headless"
# building PostgreSQL 18 and pg_cron from ../shared/vendor (scripts/pg18.sh)
# when NTASK_PG includes 18 (scripts/test.sh's default is "15 18")
case " ${NTASK_PG:-15 18} " in
	*" 18 "*) PKGS="$PKGS bison flex zlib1g-dev pkg-config" ;;
esac
# the Debian package build (scripts/test-deb.sh, NTASK_TEST_DEB=1)
[ "${NTASK_TEST_DEB:-0}" = 1 ] && PKGS="$PKGS postgresql-server-dev-all debhelper dpkg-dev"
# the Patroni failover test (t/018_patroni.pl, NTASK_PATRONI=1; docs/ha.md)
[ "${NTASK_PATRONI:-0}" = 1 ] && PKGS="$PKGS etcd-server patroni"
# building Citus for the Citus TAP tests on 15 (scripts/citus.sh; unless
# NTASK_CITUS=0); libcurl and libssl come with the above
case " ${NTASK_PG:-15 18} " in
	*" 15 "*) [ "${NTASK_CITUS:-1}" = 1 ] && PKGS="$PKGS liblz4-dev libzstd-dev libkrb5-dev" ;;
esac
# the Go worker library (clients/go, t/040_client_go.pl): Debian's Go and
# pgx v4, built in GOPATH mode
PKGS="$PKGS golang-go golang-github-jackc-pgx-v4-dev"
# Node.js: Debian's nodejs and npm, unless a node (and npm) is already
# installed some other way (the nodesource nodejs package brings its own npm
# and conflicts with Debian's)
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"
# the operator console's browser test (t/045_console.pl): Debian's chromium
PKGS="$PKGS chromium"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ -n "$missing" ]; then
	echo "ntask: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	# the server package must not create and start a default cluster: the tests
	# run their own throwaway clusters on their own ports
	if [ ! -e /etc/postgresql-common/createcluster.conf ] || ! grep -q '^create_main_cluster = false' /etc/postgresql-common/createcluster.conf; then
		$SUDO mkdir -p /etc/postgresql-common
		echo "create_main_cluster = false" | $SUDO tee -a /etc/postgresql-common/createcluster.conf >/dev/null
	fi
	# daemons the tests start themselves (pgbouncer, the exporter) must not be
	# started by their packages: if nothing says otherwise, refuse service
	# starts for the duration of the install (policy-rc.d, exit 101)
	policy=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
		$SUDO chmod 755 /usr/sbin/policy-rc.d
		policy=1
	fi
	rc=0
	$SUDO apt-get install -y -qq $missing >/dev/null || rc=$?
	[ -z "$policy" ] || $SUDO rm -f /usr/sbin/policy-rc.d
	[ $rc -eq 0 ] || exit $rc
fi
# the Node.js example push service (TAP 047_examples): node-postgres from the
# npm registry at the version in examples/node/package-lock.json, and a link
# to clients/node (the library, installed and built for TAP 042/047)
if [ -f examples/node/package-lock.json ] && { [ ! -d examples/node/node_modules/pg ] ||
	[ ! -e examples/node/node_modules/@ntask/client/package.json ]; }; then
	echo "ntask: npm ci in examples/node"
	(cd examples/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
# the TypeScript worker library (clients/node; TAP 042_client_node): pg,
# typescript (its build) and types, at clients/node/package-lock.json's versions
if [ -f clients/node/package-lock.json ] && [ ! -d clients/node/node_modules/typescript ]; then
	echo "ntask: npm ci in clients/node"
	(cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
# the operator console (console/, t/045_console.pl): pg and, for its browser
# test, playwright-core (driving Debian's chromium), at console/package-lock.json
if [ -f console/package-lock.json ] && [ ! -d console/node_modules/playwright-core ]; then
	echo "ntask: npm ci in console"
	(cd console && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
exit 0
