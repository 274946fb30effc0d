#!/usr/bin/env bash
# shape.sh — the shape of a Go package: its non-test lines and files, the
# methods of its types with the most, and the fields of its largest
# structs (not run by CI). No build: it reads the source.
#
#   bench/shape.sh [DIR]   (default internal/indexer)
#
# Compare two commits: git stash or check out each, run it, and diff.
set -euo pipefail
d=${1:-internal/indexer}
files=$(ls "$d"/*.go | grep -v '_test\.go$')
# shellcheck disable=SC2086
echo "non-test lines: $(cat $files | wc -l)  files: $(echo "$files" | wc -l)"
echo "methods per type (top 8):"
# shellcheck disable=SC2086
grep -hE '^func \([a-z]+ \*?[A-Za-z]+\)' $files |
	sed -E 's/^func \([a-z]+ \*?([A-Za-z]+)\).*/\1/' | sort | uniq -c | sort -rn | head -8
echo "fields of struct types (top 8):"
# shellcheck disable=SC2086
awk '/^type [A-Za-z]+ struct \{/ { name = $2; n = 0; inside = 1; next }
	inside && /^\}/ { print n, name; inside = 0; next }
	inside && /^\t[A-Za-z_]/ { split($0, a, /[ \t]+/); n += 1 + gsub(/,/, ",", a[2]) }' $files |
	sort -rn | head -8
