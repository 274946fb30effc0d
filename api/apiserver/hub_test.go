package apiserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

// hubIndex is storeIndex with hub queries answered from a list, in pages
// of pageSize whose cursor is the next item's position.
type hubIndex struct {
	*storeIndex
	items    []api.HubContent
	pageSize int
	failAt   int // a page starting here fails as an unreachable hub; 0: none
	copiesQ  []api.HubCopiesQuery
	whereisQ []api.HubWhereisQuery
}

func newHubIndex(t *testing.T, root string, n int) *hubIndex {
	x := &hubIndex{storeIndex: newStoreIndex(t, root), pageSize: 10}
	for i := range n {
		d := sha256.Sum256([]byte(strconv.Itoa(i)))
		x.items = append(x.items, api.HubContent{Backend: key.SHA256, Digest: d[:], Size: int64(1000 - i), Holders: []api.HubHolder{
			{Host: "nas", LastSeen: time.Unix(1e9, 0).UTC(), Paths: [][]byte{[]byte(fmt.Sprintf("/srv/f%d", i)), []byte("/srv/caf\xe9")}, Count: 3},
			{Host: "laptop", Stale: true, Paths: [][]byte{[]byte("/home/x")}, Count: 1},
		}})
	}
	return x
}

func (x *hubIndex) page(after []byte, limit int) (api.HubPage, error) {
	from := 0
	if after != nil {
		from, _ = strconv.Atoi(string(after))
	}
	if x.failAt > 0 && from >= x.failAt {
		return api.HubPage{}, fmt.Errorf("%w: gone", api.ErrHubUnreachable)
	}
	n := x.pageSize
	if limit > 0 {
		n = min(n, limit)
	}
	to := min(from+n, len(x.items))
	p := api.HubPage{Items: x.items[from:to]}
	if to < len(x.items) {
		p.Next = []byte(strconv.Itoa(to))
	}
	return p, nil
}

func (x *hubIndex) HubWhereis(ctx context.Context, q api.HubWhereisQuery) (api.HubContent, error) {
	x.whereisQ = append(x.whereisQ, q)
	return x.items[0], nil
}

func (x *hubIndex) HubDups(ctx context.Context, q api.HubDupsQuery) (api.HubPage, error) {
	return x.page(q.After, q.Limit)
}

func (x *hubIndex) HubCopies(ctx context.Context, q api.HubCopiesQuery) (api.HubPage, error) {
	x.copiesQ = append(x.copiesQ, q)
	return x.page(q.After, q.Limit)
}

func (x *hubIndex) HubHosts(ctx context.Context) ([]api.HubHost, error) {
	return []api.HubHost{{Name: "nas", Complete: true, Records: 7}}, nil
}

func TestHubWithoutHubber(t *testing.T) {
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, shortDir(t))}}, nil)
	_, err := ts.client.HubWhereisKey(context.Background(), mustKey(t, "SHA256E-s1--"+fmt.Sprintf("%064x", 1)))
	var se *api.StatusError
	if !errors.Is(err, api.ErrNoHub) || !errors.As(err, &se) || se.Status != 404 || !strings.Contains(se.Message, "[publish] hub") {
		t.Fatalf("whereis without a hub: %v, want ErrNoHub with 404 naming the setting", err)
	}
	if _, err := ts.client.HubHosts(context.Background()); !errors.Is(err, api.ErrNoHub) {
		t.Fatalf("hosts without a hub: %v", err)
	}
}

// collect lists one query's contents and its next cursor.
func collect(t *testing.T, list func(func(api.HubContent) error) ([]byte, error)) ([]api.HubContent, []byte, error) {
	t.Helper()
	var out []api.HubContent
	next, err := list(func(c api.HubContent) error { out = append(out, c); return nil })
	return out, next, err
}

func TestHubPages(t *testing.T) {
	idx := newHubIndex(t, shortDir(t), 25)
	ts := startServer(t, Config{Parts: Parts{Index: idx, Hub: idx}}, nil)
	ctx := context.Background()
	dups := func(q api.HubDupsQuery) ([]api.HubContent, []byte, error) {
		return collect(t, func(fn func(api.HubContent) error) ([]byte, error) { return ts.client.HubDups(ctx, q, fn) })
	}
	all, next, err := dups(api.HubDupsQuery{})
	if err != nil || len(all) != 25 || next != nil {
		t.Fatalf("all: %d items, next %q, %v; want 25 across three pages", len(all), next, err)
	}
	for i, c := range all {
		w := idx.items[i]
		if c.Key() != w.Key() || len(c.Holders) != 2 || !bytes.Equal(c.Holders[0].Paths[1], []byte("/srv/caf\xe9")) ||
			c.Holders[0].Count != 3 || !c.Holders[1].Stale || !c.Holders[0].LastSeen.Equal(w.Holders[0].LastSeen) {
			t.Fatalf("item %d: %+v, want %+v", i, c, w)
		}
	}
	first, next, err := dups(api.HubDupsQuery{Limit: 12})
	if err != nil || len(first) != 12 || next == nil {
		t.Fatalf("limit 12: %d items, next %q, %v", len(first), next, err)
	}
	rest, next, err := dups(api.HubDupsQuery{After: next})
	if err != nil || len(rest) != 13 || next != nil || rest[0].Key() != all[12].Key() {
		t.Fatalf("resumed: %d items, next %q, %v", len(rest), next, err)
	}
	// A page failing after the stream began ends it with the hub's code.
	idx.failAt = 20
	_, _, err = dups(api.HubDupsQuery{})
	if !errors.Is(err, api.ErrHubUnreachable) {
		t.Fatalf("a lost hub mid-stream: %v, want ErrHubUnreachable", err)
	}
	// Failing at once is a 503 before any stream.
	_, _, err = dups(api.HubDupsQuery{After: []byte("20")})
	var se *api.StatusError
	if !errors.Is(err, api.ErrHubUnreachable) || !errors.As(err, &se) || se.Status != 503 {
		t.Fatalf("an unreachable hub: %v, want a 503 that is ErrHubUnreachable", err)
	}
}

func TestHubCopiesQuery(t *testing.T) {
	root := shortDir(t)
	idx := newHubIndex(t, root, 3)
	ts := startServer(t, Config{Parts: Parts{Index: idx, Hub: idx}}, nil)
	ctx := context.Background()
	copies := func(q api.HubCopiesQuery) error {
		_, _, err := collect(t, func(fn func(api.HubContent) error) ([]byte, error) { return ts.client.HubCopies(ctx, q, fn) })
		return err
	}
	dir := []byte(root + "/photos/caf\xe9")
	if err := copies(api.HubCopiesQuery{FewerThan: 2, Path: append(bytes.Clone(dir), "/"...)}); err != nil {
		t.Fatal(err)
	}
	if got := idx.copiesQ[0]; got.FewerThan != 2 || !bytes.Equal(got.Path, dir) || got.AllHosts {
		t.Errorf("the index got %+v, want fewer than 2 under %q", got, dir)
	}
	if err := copies(api.HubCopiesQuery{FewerThan: 3, AllHosts: true}); err != nil || !idx.copiesQ[1].AllHosts || idx.copiesQ[1].Path != nil {
		t.Errorf("all hosts: %v, the index got %+v", err, idx.copiesQ[1])
	}
	for name, tc := range map[string]struct {
		q    api.HubCopiesQuery
		want error
	}{
		"outside the roots":    {api.HubCopiesQuery{FewerThan: 2, Path: []byte("/elsewhere")}, api.ErrOutsideRoots},
		"all hosts and a path": {api.HubCopiesQuery{FewerThan: 2, Path: []byte(root), AllHosts: true}, api.ErrBadRequest},
		"fewer than nothing":   {api.HubCopiesQuery{FewerThan: 0}, api.ErrBadRequest},
		"relative path":        {api.HubCopiesQuery{FewerThan: 2, Path: []byte("photos")}, api.ErrBadRequest},
	} {
		if err := copies(tc.q); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if len(idx.copiesQ) != 2 {
		t.Errorf("refused queries reached the index: %+v", idx.copiesQ[2:])
	}
}

func TestHubWhereisAndHosts(t *testing.T) {
	idx := newHubIndex(t, shortDir(t), 1)
	ts := startServer(t, Config{Parts: Parts{Index: idx, Hub: idx}}, nil)
	ctx := context.Background()
	k := mustKey(t, "SHA256E-s9--"+fmt.Sprintf("%064x", 7)+".jpg")
	c, err := ts.client.HubWhereisKey(ctx, k)
	if err != nil || c.Key() != idx.items[0].Key() {
		t.Fatalf("whereis: %+v %v", c, err)
	}
	d, _ := k.Digest()
	if q := idx.whereisQ[0]; q.Backend != key.SHA256E || !bytes.Equal(q.Digest, d) || q.Size != 9 {
		t.Errorf("the index was asked %+v, want the key's digest and size", q)
	}
	hosts, err := ts.client.HubHosts(ctx)
	if err != nil || len(hosts) != 1 || hosts[0].Name != "nas" || hosts[0].Records != 7 {
		t.Errorf("hosts: %+v %v", hosts, err)
	}
}

func mustKey(t *testing.T, s string) key.Key {
	t.Helper()
	k, err := key.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
