package indexer

import "github.com/annexd/annexd/fsstat"

// Absent reports whether the record of path, of file system dev, is of a
// file system that is not mounted where path is now (the rule in
// filesystems.go: a disk unplugged, or another one in its place), and
// what the index remembers of it. A file system never met has only its id.
func (ix *Indexer) Absent(path string, dev uint64) (FileSystem, bool) {
	if fi, err := fsstat.Lstat(path); err == nil && fsstat.OnFS(dev, fi) {
		return FileSystem{}, false
	}
	here, ok := placeOf(path)
	if !ok || !ix.fsys.absent(dev, here) {
		return FileSystem{}, false
	}
	return ix.fsys.remembered(dev), true
}

// remembered returns what the index remembers of file system id.
func (f *fileSystems) remembered(id uint64) FileSystem {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fs := f.byID[id]; fs != nil {
		return *fs
	}
	return FileSystem{ID: id, Key: "unknown"}
}
