package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
)

// progressBar is the one progress line annexctl draws: status --wait,
// dedup and audit run --wait use it. It is drawn only on a terminal. A
// nil *progressBar draws nothing, so output to a pipe or a file stays
// free of it. Each draw goes back to the line's start and erases it
// first. Its methods may be called from several goroutines.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	drawn bool // a line is on the screen
}

// barWidth is the number of cells of the meter.
const barWidth = 30

// newProgressBar returns a bar on stderr when stderr is a terminal, else
// nil.
func newProgressBar(cmd *cobra.Command) *progressBar {
	f, ok := cmd.ErrOrStderr().(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	return &progressBar{w: f}
}

// draw replaces the line on the screen with line.
func (b *progressBar) draw(line string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.w, "\r\033[K%s", line)
	b.drawn = true
}

// finish draws line and leaves it on the screen.
func (b *progressBar) finish(line string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.w, "\r\033[K%s\n", line)
	b.drawn = false
}

// clear erases the line, if one is drawn, so other output can follow.
func (b *progressBar) clear() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\r\033[K")
		b.drawn = false
	}
}

// meter is the start of a progress line: frac of barWidth cells filled
// and the percentage, "[#####.........] 17%  ".
func meter(frac float64) string {
	n := int(frac * barWidth)
	return fmt.Sprintf("[%s%s] %3.0f%%  ", strings.Repeat("#", n), strings.Repeat(".", barWidth-n), 100*frac)
}

// shown reports whether a line is on the screen.
func (b *progressBar) shown() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.drawn
}
