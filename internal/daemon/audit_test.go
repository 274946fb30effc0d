package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/config"
)

// A run window the audit cannot parse is refused when the daemon is made,
// naming the file, the key, the window and the way to write one.
func TestNewRejectsBadAuditWindow(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.File = "/etc/annexd.toml"
	cfg.Audit.Windows = []string{"01:00-06:00", "mon-fry 01:00-06:00"}
	_, err := New(cfg, nil, Options{})
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("err = %v, want config.ErrInvalid", err)
	}
	for _, want := range []string{"/etc/annexd.toml", "audit.windows", `"mon-fry 01:00-06:00"`, "unknown day", `"mon-fri 01:00-06:00"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want it to say %s", err, want)
		}
	}
}

// The [audit] section reaches the audit as it is written; an unset field
// stays zero for the audit's defaults, and "off" is no cap.
func TestAuditConfig(t *testing.T) {
	c := auditConfig(config.Audit{Every: config.Duration(72 * time.Hour), MaxRate: config.Off, Workers: 3,
		OnProblem: []string{"true"}, Windows: []string{"01:00-02:00"}})
	if c.Every != 72*time.Hour || c.MaxRate >= 0 || c.Workers != 3 || c.OnProblem[0] != "true" || c.Windows[0] != "01:00-02:00" {
		t.Errorf("mapped %+v", c)
	}
	if c.TimeLimit != 0 || c.Jitter != 0 || c.MaxLoad != 0 {
		t.Errorf("unset fields set: %+v", c)
	}
}
