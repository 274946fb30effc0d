//go:build amd64 && gc && !purego

package mbsha256

import (
	"os"
	"strings"
	"testing"
)

// TestSHANIDetection compares the CPUID probe with the kernel's view of the
// CPU flags.
func TestSHANIDetection(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo to compare with: %v", err)
	}
	var flags []string
	for _, line := range strings.Split(string(info), "\n") {
		if strings.HasPrefix(line, "flags") {
			flags = strings.Fields(line)
			break
		}
	}
	want := false
	for _, f := range flags {
		want = want || f == "sha_ni"
	}
	if got := hasSHANI(); got != want {
		t.Errorf("hasSHANI() = %v, /proc/cpuinfo says sha_ni %v", got, want)
	}
}
