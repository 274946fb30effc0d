package hubwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Copies between hosts. A host asks a holder for a verified copy of a
// key on CopyAskSubject(asker, holder): only the asker's credentials may
// publish there, so the subject names who asks. The holder puts the copy
// in the object bucket CopyBucket(holder, asker), which only it may
// write, and answers on CopySentSubject(holder, asker), where only the
// holder may publish. The asker reads it through the hub
// (QueryCopyRead), which answers only into the asker's own inbox: no
// host may make a JetStream call whose answer goes to a subject it
// names, since with one it could aim a bucket's bytes at another host.
const (
	// CopyAskPrefix is followed by the asker's and the holder's names.
	CopyAskPrefix = "annexd.copy.ask."
	// CopySentPrefix is followed by the holder's and the asker's names.
	CopySentPrefix = "annexd.copy.sent."
)

// CopyAskSubject is where asker asks holder for a copy.
func CopyAskSubject(asker, holder string) string { return CopyAskPrefix + asker + "." + holder }

// CopySentSubject is where holder answers asker.
func CopySentSubject(holder, asker string) string { return CopySentPrefix + holder + "." + asker }

// CopyBucket names the object bucket of copies from holder to asker:
// copy-LEN-HOLDER-ASKER, where LEN is the holder's name's length, so that
// no two pairs of names share a bucket.
func CopyBucket(holder, asker string) string {
	return "copy-" + strconv.Itoa(len(holder)) + "-" + holder + "-" + asker
}

// CopyStream is the stream that keeps CopyBucket's objects.
func CopyStream(bucket string) string { return "OBJ_" + bucket }

// The answers of a holder.
const (
	CopySent   = "sent"    // the object is in the bucket, verified when read
	CopyNone   = "no_copy" // no copy of the holder's verified now
	CopyBusy   = "busy"    // the holder serves other copies; ask later
	CopyFailed = "failed"  // the holder could not put it (Error says why)
)

// CopyRequest asks for a verified copy of Key (a git-annex key). ID
// names the request in the answer.
type CopyRequest struct {
	ID  string `json:"id"`
	Key string `json:"key"`
}

// CopyAnswer answers a CopyRequest. Checked counts the holder's physical
// copies it read, Healthy those whose bytes matched the key.
type CopyAnswer struct {
	ID      string `json:"id"`
	Key     string `json:"key"`
	Status  string `json:"status"`
	Checked int    `json:"checked"`
	Healthy int    `json:"healthy"`
	Error   string `json:"error,omitempty"`
}

// maxCopyMsg bounds a copy message: a key is at most a few hundred bytes.
const maxCopyMsg = 4096

// ErrCopyMsg: a message on a copy subject that no host sent as one.
var ErrCopyMsg = errors.New("hubwire: not a copy message")

// DecodeCopy decodes a request or an answer from m into v. Only what a
// host published itself is taken: JetStream delivers a stream's messages
// to any subject a consumer names, with a reply subject, and a direct
// read's answer carries headers. A host sends neither.
func DecodeCopy(m *nats.Msg, v any) error {
	switch {
	case m.Reply != "":
		return fmt.Errorf("%w: it has a reply subject %q", ErrCopyMsg, m.Reply)
	case len(m.Header) != 0:
		return fmt.Errorf("%w: it has headers", ErrCopyMsg)
	case len(m.Data) > maxCopyMsg:
		return fmt.Errorf("%w: %d bytes", ErrCopyMsg, len(m.Data))
	}
	d := json.NewDecoder(bytes.NewReader(m.Data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrCopyMsg, err)
	}
	return nil
}

// The reading of a copy through the hub: the asker sends a
// CopyReadRequest as query QueryCopyRead; the hub answers on the reply
// subject with a CopyReadInfo (header CopyReadPart: "info"), then up to
// Chunks of the object's chunks in order (CopyReadPart: "chunk", with
// CopyReadSeq, the chunk's stream sequence, to read on from), then
// "end", whose data is "eof" once the last chunk was sent, else "more".
const (
	CopyReadPart = "Annexd-Copy-Part"
	CopyReadSeq  = "Annexd-Copy-Seq"
	// CopyReadWindow bounds the chunks one request asks for.
	CopyReadWindow = 16
)

// CopyReadRequest asks the hub for chunks of object Name in the bucket
// of copies from Holder to the asker.
type CopyReadRequest struct {
	Holder string `json:"holder"`
	Name   string `json:"name"`
	// NUID names the object's chunks, from the first answer: a read goes
	// on with the same object or fails. Empty: the object's now.
	NUID string `json:"nuid,omitempty"`
	// After is the stream sequence of the last chunk read; 0: none yet.
	After  uint64 `json:"after,omitempty"`
	Chunks int    `json:"chunks"`
}

// CopyReadInfo is the first part of an answer: the object as its
// metadata describes it, or Found false.
type CopyReadInfo struct {
	Found bool   `json:"found"`
	NUID  string `json:"nuid,omitempty"`
	Size  int64  `json:"size,omitempty"`
	// Chunks and ChunkSize: how many chunks the metadata says, of which
	// size (all but the last).
	Chunks    int   `json:"chunks,omitempty"`
	ChunkSize int64 `json:"chunk_size,omitempty"`
	// Busy: the hub reads other copies now; ask again in a moment.
	Busy  bool   `json:"busy,omitempty"`
	Error string `json:"error,omitempty"`
}
