package testutil

import "os"

// DeepEnv names the environment variable that runs the suites of random
// kills at their full depth. The README's test command runs fewer random
// kills, every named step still (a kill after each step of a protocol is
// what fails on a missing step); .ci/run sets ANNEXD_TEST_DEEP=1 and runs
// them again at full depth.
const DeepEnv = "ANNEXD_TEST_DEEP"

// Runs is quick, or deep when DeepEnv is 1.
func Runs(quick, deep int) int {
	if os.Getenv(DeepEnv) == "1" {
		return deep
	}
	return quick
}
