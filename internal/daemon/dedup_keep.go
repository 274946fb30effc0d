package daemon

import "syscall"

// testDedupKillEnv, when set to a step of a move to the trash
// ("trash-info"), makes the daemon SIGKILL itself right after the first
// such step: a seam for the end-to-end tests of recovery.
const testDedupKillEnv = "ANNEXD_TEST_DEDUP_KILL"

// killAtStep is dedup.Options.AtStep for testDedupKillEnv; nil unset.
func killAtStep(step string) func(string) {
	if step == "" {
		return nil
	}
	return func(s string) {
		if s == step {
			syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		}
	}
}
