package calibrate

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/hasher/mbsha256"
)

// Fingerprint identifies what a calibration measured: the CPU, the Go
// runtime and the external programs. A stored Calibration stays valid while
// the fingerprint matches.
type Fingerprint struct {
	CPUModel  string   `json:"cpu_model"`
	CPUFlags  []string `json:"cpu_flags"` // the hashing-relevant ones
	NumCPU    int      `json:"num_cpu"`
	GOOS      string   `json:"goos"`
	GOARCH    string   `json:"goarch"`
	GoVersion string   `json:"go_version"`
	// Kernels are the multi-buffer kernels this process may run: the CPU's
	// flags less what GODEBUG turns off (cpu.avx512f=off).
	Kernels  []string    `json:"kernels"`
	Programs []ProgramID `json:"programs"`
}

// ProgramID identifies an external program by path, size and mtime; Version
// is informational (its first line of version output).
type ProgramID struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"` // empty: not found in PATH
	Size    int64  `json:"size,omitempty"`
	MtimeNs int64  `json:"mtime_ns,omitempty"`
	Version string `json:"version,omitempty"`
}

// cpuFlagsOfInterest are the /proc/cpuinfo flags hashing speed depends on.
var cpuFlagsOfInterest = []string{"sha_ni", "ssse3", "sse4_1", "avx", "avx2", "avx512f", "avx512dq", "avx512bw", "avx512vl", "bmi2"}

// currentFingerprint describes this machine now. programs are names looked up
// in PATH or absolute paths. withVersions runs each program to read its
// version (a fork each); without it Version stays empty.
func currentFingerprint(ctx context.Context, programs []string, withVersions bool) Fingerprint {
	model, flags := cpuInfo()
	fp := Fingerprint{
		CPUModel:  model,
		CPUFlags:  flags,
		NumCPU:    runtime.NumCPU(),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
		GoVersion: runtime.Version(),
		Kernels:   mbsha256.Kernels(),
	}
	for _, name := range programs {
		fp.Programs = append(fp.Programs, programID(ctx, name, withVersions))
	}
	return fp
}

func programID(ctx context.Context, name string, withVersion bool) ProgramID {
	id := ProgramID{Name: name}
	path, err := exec.LookPath(name)
	if err != nil {
		return id
	}
	id.Path = path
	// Stat follows a symlink: the target is what runs.
	if st, err := os.Stat(path); err == nil {
		id.Size, id.MtimeNs = st.Size(), st.ModTime().UnixNano()
	}
	if withVersion {
		id.Version = programVersion(ctx, path)
	}
	return id
}

func programVersion(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	args := []string{"--version"}
	if kind, _ := hasher.ExternalKindOf(path); kind == hasher.KindOpenSSL {
		args = []string{"version"}
	}
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func cpuInfo() (model string, flags []string) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "", nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if flags == nil {
				have := strings.Fields(v)
				flags = []string{}
				for _, want := range cpuFlagsOfInterest {
					if slices.Contains(have, want) {
						flags = append(flags, want)
					}
				}
			}
		}
		if model != "" && flags != nil {
			break
		}
	}
	return model, flags
}

// Matches reports whether f and g describe the same machine and programs;
// program versions are not compared (size and mtime stand for them).
func (f Fingerprint) Matches(g Fingerprint) bool {
	if f.CPUModel != g.CPUModel || !slices.Equal(f.CPUFlags, g.CPUFlags) || f.NumCPU != g.NumCPU ||
		f.GOOS != g.GOOS || f.GOARCH != g.GOARCH || f.GoVersion != g.GoVersion || !slices.Equal(f.Kernels, g.Kernels) || len(f.Programs) != len(g.Programs) {
		return false
	}
	for i, p := range f.Programs {
		q := g.Programs[i]
		if p.Name != q.Name || p.Path != q.Path || p.Size != q.Size || p.MtimeNs != q.MtimeNs {
			return false
		}
	}
	return true
}
