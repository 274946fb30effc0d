package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/internal/hubwire"
)

// Copies between hosts go through one object bucket per ordered pair of
// known hosts (hubwire.CopyBucket). The hub makes them at start, with
// its bounds; no host may make, change or delete a stream. The holder
// may write its outgoing buckets; the asker reads its incoming buckets
// through the hub (copyread.go) and may purge them. A bucket keeps a
// copy for Config.CopyTTL at most, whether or not its asker is online.

// copyPair is a holder and an asker.
type copyPair struct{ holder, asker string }

// copyPairs lists every ordered pair of known hosts, sorted.
func copyPairs(known map[string]bool) []copyPair {
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []copyPair
	for _, h := range names {
		for _, a := range names {
			if h != a {
				out = append(out, copyPair{h, a})
			}
		}
	}
	return out
}

// copyStreamConfig is the stream of one pair's bucket: the object
// store's own layout (chunks and metadata subjects, rollups, new data
// refused when full), with direct reads for the hub's reads of copies
// (copyread.go), which carry the stored bytes as they are. No host may
// read a bucket: a read's answer goes to any reply subject the caller
// names, and a holder could aim a bucket's bytes, or headers it wrote
// (a message id), at another host's subjects.
func (c *Config) copyStreamConfig(p copyPair) jetstream.StreamConfig {
	b := hubwire.CopyBucket(p.holder, p.asker)
	return jetstream.StreamConfig{
		Name: hubwire.CopyStream(b), Description: "annexd copies from " + p.holder + " to " + p.asker,
		Subjects: []string{"$O." + b + ".C.>", "$O." + b + ".M.>"},
		MaxAge:   c.CopyTTL, MaxBytes: c.CopyMaxBytes, Storage: jetstream.FileStorage, Replicas: c.replicas(),
		Discard: jetstream.DiscardNew, AllowRollup: true, AllowDirect: true,
	}
}

// bucketsAtOnce is how many copy buckets a hub makes at once. On a
// cluster each is a round of the cluster's meta group, which takes up a
// batch of them as fast as one.
const bucketsAtOnce = 16

// createCopyBuckets makes or updates every pair's bucket.
func (h *Hub) createCopyBuckets(ctx context.Context, js jetstream.JetStream) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(bucketsAtOnce)
	for _, p := range copyPairs(h.known) {
		g.Go(func() error {
			if _, err := js.CreateOrUpdateStream(ctx, h.cfg.copyStreamConfig(p)); err != nil {
				return fmt.Errorf("hub: copy bucket %s: %w", hubwire.CopyBucket(p.holder, p.asker), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// copyPermissions adds to a host's permissions what copies need: asking
// holders and answering askers on subjects that name it first, writing
// its outgoing buckets (and purging what a failed write left), and
// purging its incoming ones once read. It
// reads them through the hub (copyread.go). It may make no JetStream call
// whose answer is larger than its request: the server sends an answer to
// whatever reply subject the caller names, and a consumer's deliveries
// to whatever subject its maker names, so a host that could read a
// bucket, or make a consumer, could aim the bucket's bytes at another
// host. A publish's ack and a purge's answer are a few dozen bytes.
func copyPermissions(p *server.Permissions, name string, known map[string]bool) {
	pub := []string{hubwire.CopyAskPrefix + name + ".*", hubwire.CopySentPrefix + name + ".*"}
	sub := []string{hubwire.CopyAskPrefix + "*." + name, hubwire.CopySentPrefix + "*." + name}
	for other := range known {
		if other == name {
			continue
		}
		out := hubwire.CopyBucket(name, other)
		pub = append(pub, "$O."+out+".C.>", "$O."+out+".M.>", api("STREAM.PURGE", hubwire.CopyStream(out)),
			api("STREAM.PURGE", hubwire.CopyStream(hubwire.CopyBucket(other, name))))
	}
	p.Publish.Allow = append(p.Publish.Allow, pub...)
	p.Subscribe.Allow = append(p.Subscribe.Allow, sub...)
}

func api(call, stream string) string { return "$JS.API." + call + "." + stream }

// copyHubPermissions lets the hub's own connection make the buckets,
// delete the stale ones it found on disk at start (by name, so that it
// may delete no other stream), and read the buckets for their askers
// (copyread.go).
func copyHubPermissions(known map[string]bool, stale []string) []string {
	var out []string
	for _, s := range stale {
		out = append(out, api("STREAM.DELETE", s))
	}
	for _, p := range copyPairs(known) {
		s := hubwire.CopyStream(hubwire.CopyBucket(p.holder, p.asker))
		out = append(out, api("STREAM.CREATE", s), api("STREAM.UPDATE", s), api("STREAM.INFO", s),
			api("STREAM.MSG.GET", s), "$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>")
	}
	return out
}

// copyReserve is the disk the copy buckets may take together.
func (c *Config) copyReserve() int64 {
	return int64(len(copyPairs(c.known()))) * c.CopyMaxBytes
}

// staleCopyStreams lists the copy buckets' streams in JetStream's
// directory whose pair of hosts is no longer configured.
func (c *Config) staleCopyStreams() []string {
	want := map[string]bool{}
	for _, p := range copyPairs(c.known()) {
		want[hubwire.CopyStream(hubwire.CopyBucket(p.holder, p.asker))] = true
	}
	ents, _ := os.ReadDir(filepath.Join(c.storeDir(), server.JetStreamStoreDir, server.DEFAULT_GLOBAL_ACCOUNT, "streams"))
	var out []string
	for _, e := range ents {
		if n := e.Name(); e.IsDir() && strings.HasPrefix(n, hubwire.CopyStream("copy-")) && !want[n] {
			out = append(out, n)
		}
	}
	return out
}

// deleteStaleCopyBuckets deletes the buckets staleCopyStreams found.
func (h *Hub) deleteStaleCopyBuckets(ctx context.Context, js jetstream.JetStream) error {
	for _, s := range h.stale {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("hub: delete the copy bucket of a removed host, %s: %w", s, err)
		}
		h.cfg.Logger.Info("hub: copy bucket of a host no longer configured deleted", "stream", s)
	}
	return nil
}
