package main

import (
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0: "just now", 12 * time.Second: "12s ago", 5 * time.Minute: "5m ago", 26*time.Hour + 3*time.Minute: "26h03m ago",
	} {
		if got := ago(now.Add(-d), now); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
	if got := ago(time.Time{}, now); got != "never" {
		t.Errorf("ago(zero) = %q", got)
	}
	if got := ago(now.Add(-72*time.Hour), now); got[:12] != "3 days ago (" {
		t.Errorf("ago(3 days) = %q", got)
	}
}

func TestAppendHolders(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	hs := []api.HubHolder{
		{Host: "nas", LastSeen: now.Add(-3 * time.Second), Paths: [][]byte{[]byte("/srv/a.jpg"), []byte("/srv/b.jpg")}, Count: 5},
		{Host: "laptop", Stale: true, LastSeen: now.Add(-50 * time.Minute), Paths: [][]byte{[]byte("/home/u/a.jpg")}, Count: 1},
		{Host: "desktop", LastSeen: now, Paths: [][]byte{[]byte("/d/a.jpg"), []byte("/d/b.jpg")}, Count: 2, Unconfirmed: 1},
		{Host: "usb", LastSeen: now, Paths: [][]byte{[]byte("/u/a.jpg")}, Count: 1, Unconfirmed: 1},
	}
	want := "nas  last seen 3s ago\n  /srv/a.jpg\n  /srv/b.jpg\n  … and 3 more paths\n" +
		"laptop  last seen 50m ago  STALE (not counted as a copy)\n  /home/u/a.jpg\n" +
		"desktop  last seen just now  RESENDING its index: 1 of these paths not confirmed yet\n  /d/a.jpg\n  /d/b.jpg\n" +
		"usb  last seen just now  RESENDING its index: none of these paths confirmed yet (not counted as a copy)\n  /u/a.jpg\n"
	if got := string(appendHolders(nil, hs, "", now)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A holder whose paths a resend under way has not confirmed is no copy.
func TestFreshLeavesOutUnconfirmedHolders(t *testing.T) {
	c := api.HubContent{Holders: []api.HubHolder{
		{Host: "nas", Count: 2}, {Host: "laptop", Stale: true, Count: 1},
		{Host: "desktop", Count: 2, Unconfirmed: 1}, {Host: "usb", Count: 1, Unconfirmed: 1},
	}}
	if n := c.Fresh(); n != 2 {
		t.Errorf("fresh holders: %d, want 2 (nas, desktop)", n)
	}
}
