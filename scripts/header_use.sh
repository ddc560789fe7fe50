#!/bin/sh
# scripts/header_use.sh: for each .c file of src/, how many of the names of
# ntask's headers its #include's make visible (following the includes of
# src/'s headers), how many of them it uses, and the ratio; then the sum.
# "Headers by need" (docs/design.md "Floors") keeps the ratio small.  The
# names and uses are read as scripts/layers.awk describes.
# --needs: for each .c file, the headers of src/ whose names it uses
# instead (what it should include).
set -u
cd "$(dirname "$0")/.." || exit 1
mode=table
[ "${1:-}" = "--needs" ] && mode=needs
exec awk -v mode=$mode -f scripts/layers.awk
