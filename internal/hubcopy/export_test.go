package hubcopy

import (
	"bytes"
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hubwire"
)

// ChunkSize lets the benchmark compare chunk sizes.
var ChunkSize = &chunkSize

// PutBytes writes data into bucket as object name, as a holder's put
// does, with the holder's connection nc.
func PutBytes(ctx context.Context, nc *nats.Conn, bucket, name string, data []byte) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}}
	return putObject(ctx, js, nc, bucket, meta, bytes.NewReader(data))
}

// Stored asks the hub, with the asker's connection nc, what the bucket
// from holder holds as object name.
func Stored(ctx context.Context, nc *nats.Conn, asker, holder, name string) (hubwire.CopyReadInfo, error) {
	c := &Copier{cfg: Config{Name: asker, Stall: defaultStall}}
	return c.objectInfo(ctx, nc, holder, wanted{name: name})
}
