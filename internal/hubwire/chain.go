package hubwire

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// # The chain of a host's changes
//
// Sequence numbers alone cannot tell two histories of one index apart:
// a copy of a host's state (two containers alike, an index restored
// from a backup) numbers its own changes as the host numbers others. So
// both sides keep a chain: a running hash of the changes the hub applied
// of the host's index. A whole resend starts it (ChainStart, with the
// resend's random epoch), and each change after it extends it (Next).
// The hub keeps the chain at its last change and gives it in its State;
// a host resumes only where its own chain equals it. Each log batch
// carries the host's chain at its First (ChainHeader), and the hub
// applies no change of a batch whose chain does not lead to its own.

// Chain is the hash of a host's changes, through one of them. The zero
// Chain is none: unknown, or not kept by an older version.
type Chain [32]byte

// ChainHeader carries, on a log batch, the sender's chain at the batch's
// First (hex).
const ChainHeader = "Annexd-Chain"

// ChainStart is the chain after the whole resend epoch of index, which
// reflects its changes through seq.
func ChainStart(index [16]byte, epoch, seq uint64) Chain {
	buf := make([]byte, 0, 64)
	buf = append(buf, "annexd chain 1\x00"...)
	buf = append(buf, index[:]...)
	buf = binary.BigEndian.AppendUint64(buf, epoch)
	buf = binary.BigEndian.AppendUint64(buf, seq)
	return sha256.Sum256(buf)
}

// Next is the chain after one more change, e: the chain before it, then
// what the path holds.
func (c Chain) Next(e *Entry) Chain {
	buf := make([]byte, 0, 32+len(e.Path)+64)
	buf = append(buf, c[:]...)
	buf = binary.AppendUvarint(buf, uint64(len(e.Path)))
	buf = append(buf, e.Path...)
	buf = append(buf, byte(e.Backend))
	if !e.Tombstone() {
		buf = binary.AppendUvarint(buf, uint64(len(e.Digest)))
		buf = append(buf, e.Digest...)
		buf = binary.AppendUvarint(buf, uint64(e.Size))
	}
	return sha256.Sum256(buf)
}

// IsZero reports whether c is none.
func (c Chain) IsZero() bool { return c == Chain{} }

// String returns c in hex; "" for none.
func (c Chain) String() string {
	if c.IsZero() {
		return ""
	}
	return hex.EncodeToString(c[:])
}

// MarshalText writes c as String does.
func (c Chain) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads what MarshalText wrote; "" is none.
func (c *Chain) UnmarshalText(b []byte) error {
	p, err := ParseChain(string(b))
	if err == nil {
		*c = p
	}
	return err
}

// ParseChain parses String's form; "" is none.
func ParseChain(s string) (Chain, error) {
	var c Chain
	if s == "" {
		return c, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(c) {
		return c, fmt.Errorf("hubwire: bad chain %q", s)
	}
	return Chain(b), nil
}
