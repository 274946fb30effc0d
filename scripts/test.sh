#!/usr/bin/env bash
# The project's test command, as README.md gives it and .ci/run calls it:
#
#   sudo scripts/test.sh [go test flags...]
#
# It installs what the tests need where it can (as root, with apt-get), or
# says exactly what to install and why; then runs every package's tests with
# the race detector and prints where the time went. The tests mount loop
# images (XFS, btrfs, ext4) for deduplication, the audit and the power-cut
# scenarios, so they run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

# What each tool is for, and the Debian package that has it.
declare -A why=(
  [git-annex]="git-annex: the key-conformance tests compare every key with 'git annex calckey'"
  [mkfs.xfs]="xfsprogs: loop-mounted XFS images (reflink deduplication, the audit, power cuts)"
  [xfs_io]="xfsprogs: 'xfs_io -x -c shutdown' cuts the power under a file system"
  [mkfs.btrfs]="btrfs-progs: loop-mounted btrfs images"
  [mkfs.ext4]="e2fsprogs: loop-mounted ext4 images"
  [systemd-analyze]="systemd: checks configs/annexd.service"
  [prlimit]="util-linux: runs annexd with few descriptors"
  [blkid]="util-linux: the file-system identity tests compare with the UUID blkid reads"
  [losetup]="mount: loop devices"
  [strace]="strace: the idle test counts the daemon's system calls"
  [chromium]="chromium: the web page's tests drive a real browser (chromedp)"
)
declare -A pkg=(
  [git-annex]=git-annex [mkfs.xfs]=xfsprogs [xfs_io]=xfsprogs [mkfs.btrfs]=btrfs-progs
  [mkfs.ext4]=e2fsprogs [systemd-analyze]=systemd [prlimit]=util-linux [blkid]=util-linux [losetup]=mount [strace]=strace
  [chromium]=chromium
)
missing=() pkgs=()
for tool in "${!why[@]}"; do
  if ! command -v "$tool" >/dev/null; then
    missing+=("$tool")
    pkgs+=("${pkg[$tool]}")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  else
    echo "scripts/test.sh: the tests need tools that are not installed:" >&2
    for tool in "${missing[@]}"; do echo "  $tool (${why[$tool]})" >&2; done
    echo "install them with: sudo apt-get install ${pkgs[*]}" >&2
    exit 2
  fi
fi
if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: the tests mount loop images and need root: run sudo scripts/test.sh" >&2
  exit 2
fi
[ -e /dev/loop-control ] || modprobe loop || { echo "scripts/test.sh: no loop devices (modprobe loop failed)" >&2; exit 2; }
# git-annex wants an identity for the repository the conformance tests make.
git config --global user.email >/dev/null 2>&1 || git config --global user.email tests@annexd.invalid
git config --global user.name >/dev/null 2>&1 || git config --global user.name "annexd tests"

go build -o /dev/null ./scripts/testtime
# A binary built with -race sleeps a second as it exits, so that goroutines
# still running may report a race; each test binary, and each daemon or
# child a test runs from a -race build, paid it (46 test binaries, 4 at a
# time: some 12 s of the run's wall time, more with the children), for
# nothing the tests check. Races are still reported as they happen. A
# GORACE of the caller's own is kept (its options come after).
export GORACE="atexit_sleep_ms=0${GORACE:+ $GORACE}"
# Four packages at a time on two cores: much of a package's time is spent
# waiting (loop images, fsync, a daemon's timers), and two at a time kept
# 1.2 of 2 cores busy. GOTEST_P=N changes it.
export GOTEST_P=${GOTEST_P:-4}
# The longest packages first: go test starts test binaries in the order it
# is given them, and a long package started last is a tail with one core
# idle. The rest follow in ./...'s order.
first=(./e2e ./internal/indexer ./internal/dedup ./store ./internal/hub ./cmd/annexd
  ./hasher/mbsha256 ./watcher ./api/apiserver ./key ./cmd/annexctl ./internal/audit)
echo "== go test -race -count=1 -p $GOTEST_P -timeout 30m $* ${first[*]} ./..."
go test -race -count=1 -p "$GOTEST_P" -timeout 30m -json "$@" "${first[@]}" ./... | go run ./scripts/testtime
