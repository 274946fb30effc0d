package e2e

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// exitDamaged is annexd's exit status for a damaged index (README).
const exitDamaged = 4

// damageTree writes n small files in 24 directories, one in ten a copy.
func damageTree(t *testing.T, root string, n int) {
	for i := range n {
		content := fmt.Sprintf("file %d", i)
		if i%10 == 9 {
			content = fmt.Sprintf("file %d", i-1)
		}
		write(t, filepath.Join(root, fmt.Sprintf("d%02d", i%24), fmt.Sprintf("f%04d.txt", i)), content)
	}
}

// indexPages lists the pages of a stopped daemon's index that hold its
// trees (branch and leaf pages), and its page size.
func indexPages(t *testing.T, index string) ([]int, int) {
	t.Helper()
	db, err := bolt.Open(index, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ids []int
	err = db.View(func(tx *bolt.Tx) error {
		n := int(tx.Size() / int64(db.Info().PageSize))
		for id := 2; id < n; id++ {
			p, err := tx.Page(id)
			if err != nil {
				return err
			}
			if p != nil && (p.Type == "leaf" || p.Type == "branch") {
				ids = append(ids, id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, db.Info().PageSize
}

// overwrite writes pseudo-random bytes over page id of the file.
func overwrite(t *testing.T, index string, id, pageSize int, rng *rand.Rand) {
	t.Helper()
	f, err := os.OpenFile(index, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, pageSize)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	if _, err := f.WriteAt(junk, int64(id)*int64(pageSize)); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// damageLines counts the log records about a damaged index (the message
// annexd prints as it exits is not one).
func damageLines(log string) int {
	return len(regexp.MustCompile(`(?m)^time=.*(corrupt|damaged).*$`).FindAllString(log, -1))
}

// repairAndCheck runs annexd repair, checks what it says and keeps, starts
// the daemon on the rebuilt index and compares it with the tree of n files.
// With keepCalib, the repair must reuse the calibration the damaged index
// still holds.
func repairAndCheck(t *testing.T, base, root string, n int, damaged [32]byte, keepCalib bool) *daemon {
	t.Helper()
	index := filepath.Join(base, "index.db")
	l := annexdRun{base: base, roots: []string{root}, sub: "repair"}
	if keepCalib {
		l.extra = []string{"--calibrate", "auto"}
	}
	rep := spawn(t, l)
	if code := rep.exit(2 * time.Minute); code != 0 {
		t.Fatalf("annexd repair: exit %d\n%s", code, rep.log)
	}
	m := regexp.MustCompile(`moved the old index to (\S+)`).FindStringSubmatch(rep.log.String())
	if m == nil {
		t.Fatalf("annexd repair does not say where the damaged index went:\n%s", rep.log)
	}
	aside := strings.Trim(m[1], `"`)
	if filepath.Dir(aside) != base || aside == index {
		t.Errorf("damaged index moved to %s, want a new name beside %s", aside, index)
	}
	if fileSum(t, aside) != damaged {
		t.Errorf("%s is not the damaged index byte for byte", aside)
	}
	said := strings.Contains(rep.log.String(), "hashing calibration kept")
	reused := strings.Contains(rep.log.String(), "reusing stored hashing calibration")
	if said != reused {
		t.Errorf("annexd repair says the calibration was kept: %v; it reused it: %v\n%s", said, reused, rep.log)
	}
	if keepCalib && !reused {
		t.Errorf("annexd repair did not keep the calibration:\n%s", rep.log)
	}
	if !strings.Contains(rep.log.String(), fmt.Sprintf("%d files", n)) {
		t.Errorf("annexd repair does not report the %d files it indexed:\n%s", n, rep.log)
	}

	d := startOn(t, base, root)
	r := d.ctl("", "status", "--json")
	var st struct {
		Files int64 `json:"files"`
		Idle  bool  `json:"idle"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Files != int64(n) || !st.Idle {
		t.Errorf("status after repair: %+v %v (%s), want %d files", st, err, r.stdout, n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		f := filepath.Join(root, fmt.Sprintf("d%02d", i%24), fmt.Sprintf("f%04d.txt", i))
		if r := d.ctl("", "lookup", f); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, f) {
			t.Errorf("lookup %s after repair: exit %d %q %q", f, r.code, r.stdout, r.stderr)
		}
	}
	if r := d.ctl("", "dups"); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("\n%d groups,", n/10)) {
		t.Errorf("dups after repair: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return d
}

// An index with three pages overwritten at rest: annexd refuses it at
// start with exit status 4, one message naming the index and the repair,
// and no stream of log lines; annexd repair moves it aside (kept byte for
// byte) and builds a new index from the files that answers right.
func TestDamagedIndexAtStart(t *testing.T) {
	t.Parallel()
	const n = 1200
	base := newBase(t)
	root := filepath.Join(base, "root")
	damageTree(t, root, n)
	index := filepath.Join(base, "index.db")
	startOn(t, base, root).stop()

	ids, ps := indexPages(t, index)
	rng := rand.New(rand.NewPCG(11, uint64(len(ids))))
	var hit []int
	for _, k := range rng.Perm(len(ids))[:3] {
		overwrite(t, index, ids[k], ps, rng)
		hit = append(hit, ids[k])
	}
	t.Logf("overwrote pages %v of %d tree pages", hit, len(ids))
	damaged := fileSum(t, index)

	d := spawn(t, annexdRun{base: base, roots: []string{root}})
	code := d.exit(time.Minute)
	log := d.log.String()
	if code != exitDamaged || !strings.Contains(log, "damaged") || !strings.Contains(log, index) ||
		!strings.Contains(log, "annexd repair") {
		t.Fatalf("annexd on a damaged index: exit %d, want %d with the index and the repair named\n%s", code, exitDamaged, log)
	}
	if k := damageLines(log); k > 1 {
		t.Errorf("%d log records about the damage, want at most one:\n%s", k, log)
	}
	if fileSum(t, index) != damaged {
		t.Errorf("the damaged index was written to")
	}
	repairAndCheck(t, base, root, n, damaged, false)
}

// A page damaged under the running daemon: the first read that meets it
// stops the daemon with exit status 4 and one message, instead of one log
// line per read; the repair keeps the calibration the index still holds.
func TestDamagedIndexWhileRunning(t *testing.T) {
	t.Parallel()
	const n = 600
	base := newBase(t)
	root := filepath.Join(base, "root")
	damageTree(t, root, n)
	index := filepath.Join(base, "index.db")
	calibrated(t, base, root)
	d := startOn(t, base, root)

	// Find the files index's root page in a copy (the daemon holds the
	// index's lock) and overwrite that page of the live file.
	cp := filepath.Join(base, "copy.db")
	b, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(cp, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var page int
	_ = db.View(func(tx *bolt.Tx) error { page = int(tx.Bucket([]byte("files")).Root()); return nil })
	ps := db.Info().PageSize
	db.Close()
	os.Remove(cp)
	overwrite(t, index, page, ps, rand.New(rand.NewPCG(5, 6)))

	f := filepath.Join(root, "d03", "f0003.txt")
	for i := range 3 {
		if r := d.ctl("", "lookup", f); r.code == 0 {
			t.Errorf("lookup %d through a damaged page answered %q", i, r.stdout)
		}
	}
	code := d.exit(time.Minute)
	log := d.log.String()
	if code != exitDamaged || !strings.Contains(log, "annexd repair") || !strings.Contains(log, index) {
		t.Fatalf("annexd after a read met damage: exit %d, want %d with the repair named\n%s", code, exitDamaged, log)
	}
	if k := damageLines(log); k > 1 {
		t.Errorf("%d log records about the damage, want at most one:\n%s", k, log)
	}
	damaged := fileSum(t, index)
	repairAndCheck(t, base, root, n, damaged, true)
}

// calibrated runs annexd once to store a complete calibration to keep. A
// calibration cut short is not kept (it is measured again at the next
// start), and beside the other tests a second is not enough: the daemon's
// test seam gives it a minute.
func calibrated(t *testing.T, base, root string) {
	t.Helper()
	d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"--calibrate", "always"},
		env: func(env []string) []string { return append(env, "ANNEXD_TEST_CALIBRATION_BUDGET=1m") }})
	d.waitIdle()
	d.stop()
	if !strings.Contains(d.log.String(), "complete=true") {
		t.Fatalf("a calibration with a minute's budget was cut short:\n%s", d.log)
	}
}
