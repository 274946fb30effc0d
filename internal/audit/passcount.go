package audit

// A pass counts each of its files once. Runs asked for by hand over some
// paths may read a file the pass has decided already, while the pass is
// paused or between its runs: their finding replaces the pass's earlier
// one instead of adding to it, so that a pass never counts more files
// than it holds, nor a rotten file twice.

// passCount counts path's finding c in the pass in progress, in place of
// an earlier finding about it. Called with a.mu held.
func (a *Auditor) passCount(path string, c Class) {
	a.passUncount(path)
	a.passCounts[c]++
	a.skip[path] = c
}

// moveSkip moves the pass's count of a finding whose entry moved from
// one path to another (book.rehome): its pass counted it under the old.
func (a *Auditor) moveSkip(from, to string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.skip[from]; ok {
		delete(a.skip, from)
		a.skip[to] = c
	}
}

// passUncount takes back the finding the pass in progress counted about
// path, if any: it was verified ok after all. Called with a.mu held.
func (a *Auditor) passUncount(path string) {
	old, ok := a.skip[path]
	if !ok {
		return
	}
	delete(a.skip, path)
	if a.passCounts[old]--; a.passCounts[old] <= 0 {
		delete(a.passCounts, old)
	}
}
