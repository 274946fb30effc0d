#!/bin/sh
# house_daemon.sh [REV]: the indicators of issue 39 item 1 at REV (default
# HEAD): non-test lines of the daemon's packages and of the packages that
# took its parts, and the methods and fields of their types. It reads the
# git tree only (git show), so REV may be any commit: run it for the
# commit before the change and for HEAD, side by side.
set -eu
rev=${1:-HEAD}
python3 - "$rev" <<'PY'
import re, subprocess, sys
rev = sys.argv[1]
def files(pkg):
    out = subprocess.run(["git", "ls-tree", "--name-only", rev, pkg + "/"], capture_output=True, text=True).stdout.split()
    return [f for f in out if f.endswith(".go") and not f.endswith("_test.go")]
def text(f):
    return subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True).stdout
pkgs = ["internal/daemon", "internal/query", "internal/deduppart", "internal/hublink", "internal/logrepeat", "api/apiserver", "api"]
print(f"rev {rev}")
print("non-test lines per package:")
srcs = {}
for p in pkgs:
    fs = files(p)
    srcs[p] = "".join(text(f) for f in fs)
    # a function runs from its "func" line to the first "}" at the line's
    # start; one on a single line counts 1
    lens = sorted(len(m.group(0).splitlines()) for m in re.finditer(r"^func [^\n]*\{\n.*?^}|^func [^\n]*}$", srcs[p], re.S | re.M))
    med = lens[len(lens) // 2] if lens else 0
    top = lens[-1] if lens else 0
    print(f"  {p:22} {srcs[p].count(chr(10)):6} lines in {len(fs):2} files, {len(lens):3} funcs, median {med:3}, max {top:3} lines")
print("types: methods / fields (struct fields, one per name)")
for p, src in srcs.items():
    for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.S | re.M):
        name, body = m.group(1), m.group(2)
        fields = 0
        for line in body.splitlines():
            line = line.split("//")[0].strip()
            if not line:
                continue
            head = line.split()[0]
            fields += head.count(",") + 1 if len(line.split()) > 1 else 1
        methods = len(re.findall(r"^func \(\w+ \*?" + name + r"\) ", src, re.M))
        if methods >= 4 or fields >= 8:
            print(f"  {p}.{name:18} {methods:3} methods {fields:3} fields")
    for m in re.finditer(r"^type (\w+) struct\{ *(\w+) [^}]*\}", src, re.M):
        name = m.group(1)
        methods = len(re.findall(r"^func \(\w+ \*?" + name + r"\) ", src, re.M))
        if methods >= 4:
            print(f"  {p}.{name:18} {methods:3} methods   1 fields")
asserts = sum(len(re.findall(r"\.\((api\.\w+)\)", srcs[p])) for p in ["api/apiserver"])
print(f"type assertions to api interfaces in api/apiserver: {asserts}")
PY
