// Command noinet runs a program that may not open IPv4 or IPv6 sockets:
// socket(2) with AF_INET or AF_INET6 fails with EAFNOSUPPORT, as under a
// systemd unit's RestrictAddressFamilies=AF_UNIX, which does the same with
// a seccomp filter. The e2e tests build it.
//
// Usage: noinet PROGRAM [ARG...]
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: noinet PROGRAM [ARG...]")
		os.Exit(2)
	}
	prog, err := exec.LookPath(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "noinet:", err)
		os.Exit(2)
	}
	// The filter is the calling thread's; execve keeps it.
	runtime.LockOSThread()
	if err := restrict(); err != nil {
		fmt.Fprintln(os.Stderr, "noinet:", err)
		os.Exit(2)
	}
	err = syscall.Exec(prog, os.Args[1:], os.Environ())
	fmt.Fprintln(os.Stderr, "noinet: exec:", err)
	os.Exit(2)
}

// restrict installs the filter on this thread.
func restrict() error {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		arch = unix.AUDIT_ARCH_AARCH64
	default:
		return fmt.Errorf("no filter for %s", runtime.GOARCH)
	}
	const (
		ldW   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		allow = unix.SECCOMP_RET_ALLOW
		deny  = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
	)
	// struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low
	// 32 bits first, on these little-endian machines).
	prog := []unix.SockFilter{
		{Code: ldW, K: 4},
		{Code: jeq, K: arch, Jt: 0, Jf: 6},
		{Code: ldW, K: 0},
		{Code: jeq, K: uint32(unix.SYS_SOCKET), Jt: 0, Jf: 4},
		{Code: ldW, K: 16},
		{Code: jeq, K: unix.AF_INET, Jt: 1, Jf: 0},
		{Code: jeq, K: unix.AF_INET6, Jt: 0, Jf: 1},
		{Code: ret, K: deny},
		{Code: ret, K: allow},
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
