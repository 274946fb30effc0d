package dirdups

import (
	"context"
	"testing"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// TestIdenticalFolders: two folders with the same contents under other
// names are one report, the first in path order kept; the pairs below
// them are not reported again; an unrelated folder is not reported.
func TestIdenticalFolders(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/a/x cx 100
/r/a/y cy 200
/r/a/sub/z cz 300
/r/b/x-renamed cx 100
/r/b/y cy 200
/r/b/other/z2 cz 300
/r/c/w cw 50`)
	same(t, find(t, st, Options{}), "identical /r/a /r/b 600 (unsurveyed 3)")
}

// TestNestedThirdCopy: below the kept folder of a report, a third copy
// of a subfolder elsewhere is still reported, against the kept one; the
// copy below the removable folder is not named.
func TestNestedThirdCopy(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/a/x cx 100
/r/a/sub/z cz 300
/r/b/x cx 100
/r/b/sub/z cz 300
/r/c/sub/z cz 300
/r/c/w cw 50`)
	same(t, find(t, st, Options{}),
		"identical /r/a /r/b 400 (unsurveyed 2)",
		"identical /r/a/sub /r/c/sub 300 (unsurveyed 1)")
}

// TestNoChainLosesContent: a report relies only on copies no other
// report removes. /r/c/sub is removable as a copy of /r/a/sub, so /r/a/sub
// is not "contained in /r/c" through it: following every report must
// keep one copy of z.
func TestNoChainLosesContent(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/a/sub/z cz 300
/r/a/v cv 10
/r/c/sub/z cz 300
/r/c/w cw 50`)
	same(t, find(t, st, Options{}), "identical /r/a/sub /r/c/sub 300 (unsurveyed 1)")
}

// TestPassThroughFolder: a folder whose only entry is a folder holds the
// same files; the report names the higher one, once.
func TestPassThroughFolder(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/a/x cx 100
/r/a/y cy 200
/r/m/only/x cx 100
/r/m/only/y cy 200
/r/m2/v cv 7`)
	same(t, find(t, st, Options{}), "identical /r/a /r/m 300 (unsurveyed 2)")
}

// TestContainedFolder: a folder whose contents another holds, with more,
// is reported with the smallest such folder; folders above it, which
// hold it, are not named.
func TestContainedFolder(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/big/x cx 100
/r/big/y cy 200
/r/big/q cq 5
/r/big/deep/u cu 1000
/r/part/x cx 100
/r/part/y cy 200
/r/other/w cw 1`)
	same(t, find(t, st, Options{}), "contained /r/part in /r/big 300 (unsurveyed 2)")
}

// TestContainedAsMultiset: two copies of a content in a folder are not
// contained in a bigger folder that has one.
func TestContainedAsMultiset(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/big/x cx 100
/r/big/y cy 200
/r/big/z cz 300
/r/part/x1 cx 100
/r/part/x2 cx 100`)
	same(t, find(t, st, Options{}))
}

// TestEmptyFolders: folders of empty files (no bytes) are not duplicates
// of each other or contained in anything; an empty file is content, so a
// folder with one more empty file is not identical.
func TestEmptyFolders(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/e1/a e 0
/r/e2/b e 0
/r/e3/c e 0
/r/e3/d e 0
/r/full/x cx 100
/r/full/init e 0
/r/full2/x cx 100
/r/full2/init e 0
/r/full2/more e 0`)
	same(t, find(t, st, Options{}), "contained /r/full in /r/full2 100 (unsurveyed 1)")
}

// TestPendingFiles: a file with no key makes its folder and those above
// unknown: never reported as removable, listed instead, even when its
// keyed files match another folder. It may still hold another folder:
// /r/a's files are all in /r/p, whatever the pending file turns out to be.
func TestPendingFiles(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/a/x cx 100
/r/a/y cy 200
/r/p/x cx 100
/r/p/y cy 200
/r/p/sub/new - 300
/r/q/x cx 100
/r/q/y cy 200
/r/q/late - 0`)
	same(t, find(t, st, Options{}), "contained /r/a in /r/p 300 (unsurveyed 2)", "unknown /r/p/sub 1", "unknown /r/q 1")
}

// TestHardLinksReclaimNothing: identical folders of hard links hold one
// copy: nothing to reclaim, and every inode is known.
func TestHardLinksReclaimNothing(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/h1/f cf 4096 77
/r/h2/f cf 4096 77
/r/h3/g cg 10`)
	same(t, find(t, st, Options{}), "identical /r/h1 /r/h2 0")
}

// TestSurveyCounts: with a kept survey, a copy counts what it holds
// alone: nothing when it shares its blocks with the kept copy.
func TestSurveyCounts(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/a/f cf 8192 10
/r/b/f cf 8192 11
/r/a/g cg 4096 12
/r/b/g cg 4096 13`)
	survey(t, st, "cf", store.SurveyInode{Dev: 1, Ino: 10, Placed: 8192, Alone: 0, Copy: 0, Known: true},
		store.SurveyInode{Dev: 1, Ino: 11, Placed: 8192, Alone: 0, Copy: 0, Known: true})
	survey(t, st, "cg", store.SurveyInode{Dev: 1, Ino: 12, Placed: 4096, Alone: 4096, Copy: 0, Known: true},
		store.SurveyInode{Dev: 1, Ino: 13, Placed: 4096, Alone: 4000, Copy: 1, Known: true})
	same(t, find(t, st, Options{}), "identical /r/a /r/b 4000")
}

// TestScopeAndPaths: folders out of scope are neither reported nor named
// as holding another; Paths keep the reports with a folder below one.
func TestScopeAndPaths(t *testing.T) {
	st := openStore(t)
	tree(t, st, `
/r/a/x cx 100
/r/b/x cx 100
/old/c/x cx 100
/r/s/y cy 10
/r/t/y cy 10
/r/t/p - 1`)
	inR := func(p []byte) bool { return within(p, [][]byte{[]byte("/r")}) }
	same(t, find(t, st, Options{InScope: inR}), "identical /r/a /r/b 100 (unsurveyed 1)",
		"contained /r/s in /r/t 10 (unsurveyed 1)", "unknown /r/t 1")
	same(t, find(t, st, Options{InScope: inR, Paths: [][]byte{[]byte("/r/b")}}), "identical /r/a /r/b 100 (unsurveyed 1)")
	same(t, find(t, st, Options{InScope: inR, Paths: [][]byte{[]byte("/r/x")}}))
	same(t, find(t, st, Options{InScope: inR, MinSize: 101}), "unknown /r/t 1")
}

// survey keeps a survey of content's group in st.
func survey(t *testing.T, st *store.Store, content string, inodes ...store.SurveyInode) {
	t.Helper()
	r := record(content, 0, 0)
	var seen []store.Seen
	sizes := map[string]int64{"cf": 8192, "cg": 4096}
	for range inodes {
		seen = append(seen, store.Seen{Size: sizes[content], MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs})
	}
	if err := st.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSurvey(context.Background(), key.SHA256, r.Digest, store.Survey{At: 1, Inodes: inodes}, seen); err != nil {
		t.Fatal(err)
	}
}
