package calibrate

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// String prints the calibration as the tables `annexd calibrate` shows.
func (c Calibration) String() string {
	var sb strings.Builder
	fp := c.Fingerprint
	fmt.Fprintf(&sb, "hashing calibration, %s, took %.0f ms", c.At.Format("2006-01-02 15:04:05Z"), c.TookMs)
	if !c.Complete {
		sb.WriteString(" (cut short by its time budget: not reused)")
	}
	sb.WriteByte('\n')
	fmt.Fprintf(&sb, "machine: %s, %d CPUs, flags %s; %s/%s %s\n\n",
		orDash(fp.CPUModel), fp.NumCPU, orDash(strings.Join(fp.CPUFlags, " ")), fp.GOOS, fp.GOARCH, fp.GoVersion)

	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHA-256 CANDIDATE\tKIND\tKNOWN ANSWERS\tMB/s CPU\tOVERHEAD\tVERDICT")
	for _, x := range c.Candidates {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", candidateLabel(x), x.Kind, verified(x),
			num(x.MBps, "%.0f"), num(x.OverheadUs, "%.0f µs"), verdict(x))
	}
	tw.Flush()

	if len(c.Buffers) > 0 {
		fmt.Fprintf(&sb, "\nread size (MB per CPU second reading and hashing the %s sample file):", sizeStr(sampleSize))
		for _, b := range c.Buffers {
			fmt.Fprintf(&sb, "  %s %.0f MB/s", sizeStr(int64(b.Size)), b.MBps)
		}
		sb.WriteByte('\n')
	}
	if len(c.PerFile) > 0 {
		sb.WriteString("\nper file, CPU time (stat, open, read, hash, check):\n")
		tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "SIZE\tINLINE\tPOOL\t")
		for _, f := range c.PerFile {
			fmt.Fprintf(tw, "%s\t%.1f µs\t%.1f µs\t\n", sizeStr(f.Size), f.InlineUs, f.PoolUs)
		}
		tw.Flush()
		fmt.Fprintf(&sb, "pool hand-off: %.1f µs per file\n", c.HandoffUs)
	}

	p := c.Policy
	sb.WriteString("\nchosen policy:\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  sha256\t%s\n", p.SHA256)
	fmt.Fprintf(tw, "  inline_max\t%s\n", sizeStr(p.InlineMax))
	if p.ExternalMin == 0 {
		fmt.Fprintf(tw, "  external_min\tnever\n")
	} else {
		fmt.Fprintf(tw, "  external_min\t%s (%s)\n", sizeStr(p.ExternalMin), p.External)
	}
	fmt.Fprintf(tw, "  batch_kernel\t%s\n", orDash(p.BatchKernel))
	fmt.Fprintf(tw, "  workers\t%d\n", p.Workers)
	fmt.Fprintf(tw, "  buffer_size\t%s\n", sizeStr(int64(p.BufferSize)))
	tw.Flush()
	sb.WriteString("\nwhy:\n")
	for _, n := range c.Notes {
		fmt.Fprintf(&sb, "  - %s\n", n)
	}
	return sb.String()
}

func candidateLabel(x Candidate) string {
	if x.Kind == KindExternal && x.Path != "" {
		return fmt.Sprintf("%s (%s)", x.Name, x.Path)
	}
	return x.Name
}

func verified(x Candidate) string {
	switch {
	case x.Verified:
		return "pass"
	case strings.Contains(x.Rejected, "known-answer"):
		return "FAIL"
	}
	return "-"
}

func verdict(x Candidate) string {
	if x.Chosen {
		return "chosen"
	}
	return "rejected: " + x.Rejected
}

func num(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
