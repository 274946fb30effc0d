package testutil

import "os"

// DeepEnv names the environment variable that runs the random part of a
// suite (kills at random moments, made inputs) at its full depth. The
// README's test command runs less of it, and all of the rest (a kill
// after each named step of a protocol is what fails on a missing step);
// .ci/run sets ANNEXD_TEST_DEEP=1 and runs those suites again in full.
const DeepEnv = "ANNEXD_TEST_DEEP"

// Runs is quick, or deep when DeepEnv is 1.
func Runs(quick, deep int) int {
	if os.Getenv(DeepEnv) == "1" {
		return deep
	}
	return quick
}
