#!/bin/sh
# examples/go/build.sh OUT: build the push service to OUT in GOPATH mode,
# with Debian's Go and pgx v4 (golang-github-jackc-pgx-v4-dev) and the
# library from this tree (clients/go), as CI does. With the module proxy,
# `go build` in this directory does the same from go.mod.
set -eu
out=$(realpath -m "$1")
here=$(cd "$(dirname "$0")" && pwd)
gp=$(mktemp -d "${TMPDIR:-/tmp}/ntask-example-go.XXXXXX")
trap 'rm -rf "$gp"' EXIT
mkdir -p "$gp/src/github.com/ntask" "$gp/src/ntask-example"
ln -s "$here/../../clients/go" "$gp/src/github.com/ntask/ntask-go"
ln -s "$here" "$gp/src/ntask-example/push"
export GO111MODULE=off GOPATH="$gp:/usr/share/gocode"
[ -n "${GOCACHE:-}" ] || [ -w "${HOME:-/nonexistent}" ] || export GOCACHE="$gp/cache"
cd "$gp/src/ntask-example/push"
go vet .
go build -o "$out" .
