package testutil

import "testing"

func TestRuns(t *testing.T) {
	t.Setenv(DeepEnv, "")
	if got := Runs(2, 8); got != 2 {
		t.Errorf("Runs(2, 8) without %s = %d, want 2", DeepEnv, got)
	}
	t.Setenv(DeepEnv, "1")
	if got := Runs(2, 8); got != 8 {
		t.Errorf("Runs(2, 8) with %s=1 = %d, want 8", DeepEnv, got)
	}
}
