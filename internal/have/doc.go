// Package have answers "do I have this content already?" from the index:
// the files that hold a key's content, each marked when it changed since
// it was hashed, when it lies outside the roots, or when its file system
// is not mounted now (a disk unplugged, which the index still remembers).
//
// It hashes nothing: annexctl hashes the files it is asked about and
// sends their keys (docs/cli.md says why the client hashes).
package have
