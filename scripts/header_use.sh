#!/bin/sh
# scripts/header_use.sh: for each .c file of src/, how many of the names of
# ntask's headers its #include's make visible (following the includes of
# src/'s headers), how many of them it uses, and the ratio; then the sum.
# "Headers by need" (docs/design.md "Floors") keeps the ratio small.  The
# names and uses are read as scripts/layers.awk describes.
set -u
cd "$(dirname "$0")/.." || exit 1
exec awk -v mode=table -f scripts/layers.awk
