#!/usr/bin/env bash
# Runs every fuzz target in the module for a short time each: scripts/fuzz.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . | sort | while read -r f; do
  pkg=./$(dirname "${f#./}")
  for name in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$f" | cut -d' ' -f2); do
    echo "fuzz $pkg $name ($t)"
    if ! out=$(go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$t" 2>&1); then
      echo "$out"
      exit 1
    fi
  done
done
