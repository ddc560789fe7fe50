#!/bin/sh
# clients/go/test.sh: vet and test the Go library in GOPATH mode, with
# Debian's Go and Debian's pgx (golang-github-jackc-pgx-v4-dev, in
# /usr/share/gocode), as CI does; go.mod is for users' module builds.
#   clients/go/test.sh [go test flags...]    e.g. -run Unit, -json, -v
# Integration tests run when NTASK_TEST_DSN is set (t/040_client_go.pl
# sets it); without it they skip.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
gp=${NTASK_GO_GOPATH:-$(mktemp -d "${TMPDIR:-/tmp}/ntask-gopath.XXXXXX")}
mkdir -p "$gp/src/github.com/ntask"
ln -sfn "$here" "$gp/src/github.com/ntask/ntask-go"
export GO111MODULE=off GOPATH="$gp:/usr/share/gocode"
# the build cache: Go's default ($HOME/.cache/go-build) when HOME is
# writable, else one in the temporary GOPATH
if [ -z "${GOCACHE:-}" ] && { [ -z "${HOME:-}" ] || [ ! -w "${HOME:-/nonexistent}" ]; }; then
	export GOCACHE="$gp/cache"
fi
cd "$gp/src/github.com/ntask/ntask-go"
go vet ./...
go test -count=1 -timeout 300s "$@" ./...
