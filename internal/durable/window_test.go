package durable

import (
	"testing"
	"time"
)

func TestDataWindowFrom(t *testing.T) {
	cases := []struct {
		expire, writeback, laptop, xfs int64
		want                           time.Duration
	}{
		{3000, 500, 0, 3000, 65 * time.Second},   // the kernel's defaults
		{3000, 500, 0, -1, 65 * time.Second},     // no XFS: its default is assumed
		{6000, 1000, 0, 6000, 130 * time.Second}, // slower writeback, slower log
		{100, 100, 0, 100, MinDataWindow},        // never below the floor
		{-1, -1, -1, -1, 65 * time.Second},       // nothing readable: the defaults
		{3000, 0, 0, 3000, NoWriteback},          // periodic writeback off
		{3000, 500, 5, 3000, NoWriteback},        // laptop mode
	}
	for _, c := range cases {
		if got := dataWindowFrom(c.expire, c.writeback, c.laptop, c.xfs); got != c.want {
			t.Errorf("dataWindowFrom(%d, %d, %d, %d) = %v, want %v", c.expire, c.writeback, c.laptop, c.xfs, got, c.want)
		}
	}
	if w := DataWindow(); w < MinDataWindow {
		t.Errorf("DataWindow() = %v on this machine, below the floor", w)
	}
}

func TestMayHoldDirtyData(t *testing.T) {
	const now = int64(1000 * time.Second)
	w := time.Minute
	cases := []struct {
		ctime  int64
		window time.Duration
		want   bool
	}{
		{now, w, true},
		{now - int64(w) + 1, w, true},
		{now - int64(w), w, false},
		{now - int64(time.Hour), w, false},
		{now + int64(time.Hour), w, true}, // a ctime in the future proves nothing
		{0, NoWriteback, true},
	}
	for _, c := range cases {
		if got := MayHoldDirtyData(c.ctime, now, c.window); got != c.want {
			t.Errorf("MayHoldDirtyData(ctime %d, now %d, %v) = %v, want %v", c.ctime, now, c.window, got, c.want)
		}
	}
}
