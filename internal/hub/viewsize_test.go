package hub

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
)

// BenchmarkViewSize applies the corpus's records as one host's resend
// straight to a view and reports each bucket's bytes per record.
func BenchmarkViewSize(b *testing.B) {
	var es []hubwire.Entry
	if f, err := os.Open("/work/corpus/T.manifest.tsv"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Split(sc.Text(), "\t")
			size, _ := strconv.ParseInt(fl[1], 10, 64)
			d, _ := hex.DecodeString(fl[2])
			es = append(es, hubwire.Entry{Path: []byte("/home/user/" + fl[0]), Backend: key.SHA256, Digest: d, Size: size})
		}
		f.Close()
	}
	if len(es) == 0 { // no corpus: records of its shape
		for i := range 60000 {
			d := sha256.Sum256(binary.AppendUvarint(nil, uint64(i)))
			path := fmt.Sprintf("/home/user/Documents/project%03d/sub%02d/file_%06d.dat", i/2000, i/20%100, i)
			es = append(es, hubwire.Entry{Path: []byte(path), Backend: key.SHA256, Digest: d[:], Size: int64(i)})
		}
	}
	sort.Slice(es, func(i, j int) bool { return string(es[i].Path) < string(es[j].Path) })
	for b.Loop() {
		v, err := openView(b.TempDir()+"/view.db", viewConfig{stale: time.Hour, now: time.Now, known: map[string]bool{"h": true}})
		if err != nil {
			b.Fatal(err)
		}
		apply := func(bt hubwire.Batch) {
			if _, err := v.apply("h", &bt); err != nil {
				b.Fatal(err)
			}
		}
		apply(hubwire.Batch{Kind: hubwire.SnapBegin, Epoch: 1})
		k := uint64(0)
		for i := 0; i < len(es); i += 4096 {
			k++
			apply(hubwire.Batch{Kind: hubwire.SnapChunk, Epoch: 1, First: k, Entries: es[i:min(i+4096, len(es))]})
		}
		apply(hubwire.Batch{Kind: hubwire.SnapEnd, Epoch: 1, First: k})
		n := float64(len(es))
		_ = v.db.View(func(tx *bolt.Tx) error {
			for _, name := range viewBuckets {
				s := tx.Bucket(name).Stats()
				b.Logf("%-8s keys %6d leaf alloc %4.0f B/rec in use %4.0f branch %3.0f", name, s.KeyN, float64(s.LeafAlloc)/n, float64(s.LeafInuse)/n, float64(s.BranchAlloc)/n)
			}
			b.ReportMetric(float64(tx.Size())/n, "filebytes/record")
			return nil
		})
		v.close()
	}
}
