#!/usr/bin/env bash
# testcpu_ab.sh: the CPU (user+sys, children included) of a package's race
# test run at two commits, the runs alternated so that load falls on both.
#
#   bench/testcpu_ab.sh PKG BEFORE AFTER ROUNDS [REGEX...]
#
# PKG is a package path such as ./internal/dedup; BEFORE and AFTER are
# commits (AFTER may be "." for the work tree). Each REGEX is a -test.run
# filter measured on its own ("" or none: the whole package). The test
# binaries are built first, so compile time is out (e2e builds annexd and
# annexctl in its TestMain: that stays in, as in the suite).
# Run it as root, quietly: nice -n 10 bench/testcpu_ab.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=$1 before=$2 after=$3 rounds=$4
shift 4
regexes=("$@")
[ ${#regexes[@]} -gt 0 ] || regexes=("")
work=$(mktemp -d /tmp/testcpu_ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
for side in before after; do
  rev=${!side}
  if [ "$rev" = . ]; then
    src=$PWD
  else
    src=$work/src-$side
    mkdir -p "$src"
    git archive "$rev" | tar -x -C "$src"
  fi
  (cd "$src" && go test -race -c -o "$work/$side.test" "$pkg")
  echo "$src" >"$work/$side.src"
done
for re in "${regexes[@]}"; do
  for round in $(seq "$rounds"); do
    order=(before after)
    [ $((round % 2)) = 0 ] && order=(after before)
    for side in "${order[@]}"; do
      dir=$(cat "$work/$side.src")/${pkg#./}
      cpu=$(cd "$dir" && /usr/bin/time -f '%U %S %e' "$work/$side.test" -test.count=1 -test.timeout=30m \
        ${re:+-test.run="$re"} 2>&1 >"$work/out" | tail -1) || true
      grep -q '^PASS$' "$work/out" || { echo "$side $re: FAIL"; tail -30 "$work/out"; }
      read -r u s e <<<"$cpu"
      printf '%-40s round %d %-6s %7.1f CPU-s (%s user %s sys) %7.1f s wall\n' "${re:-all}" "$round" "$side" \
        "$(echo "$u + $s" | bc)" "$u" "$s" "$e"
    done
  done
done
