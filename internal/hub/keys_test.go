package hub

import (
	"encoding/hex"
	"testing"

	"github.com/annexd/annexd/key"
)

// The view's content keys, xdups keys and summaries keep the bytes they
// were written with before the view took them from store/codec.
func TestViewKeysKeepTheirBytes(t *testing.T) {
	d := make([]byte, 32)
	for i := range d {
		d[i] = byte(i * 7)
	}
	const dk = "0200070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9"
	ck := contentKey(key.SHA256, d, 123456)
	if got := hex.EncodeToString(ck); got != dk+"000000000001e240" {
		t.Errorf("content key %s", got)
	}
	if got := hex.EncodeToString(xdupKey(ck)); got != "fffffffffffe1dbf"+dk {
		t.Errorf("xdups key %s", got)
	}
	v, _ := hex.DecodeString("c0c4070302")
	for _, c := range []struct {
		v    []byte
		want summary
	}{{v, summary{123456, 3, 2}}, {v[:3], summary{}}, {append(v, 9), summary{123456, 3, 2}}, {nil, summary{}}} {
		if got := decodeSummary(c.v); got != c.want {
			t.Errorf("summary %x = %+v, want %+v", c.v, got, c.want)
		}
	}
}
