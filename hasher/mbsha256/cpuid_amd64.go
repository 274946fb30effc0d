//go:build amd64 && gc && !purego

package mbsha256

// cpuid executes the CPUID instruction for leaf and subleaf.
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// hasSHANI reports whether the CPU has the SHA extensions (CPUID leaf 7,
// EBX bit 29), which golang.org/x/sys/cpu does not expose on x86.
func hasSHANI() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, ebx, _, _ := cpuid(7, 0)
	return ebx&(1<<29) != 0
}
