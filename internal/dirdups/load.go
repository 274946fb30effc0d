package dirdups

import (
	"bytes"
	"context"
	"encoding/binary"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Source is what dirdups needs of the index.
type Source interface {
	// Folders hands over every directory that holds records with its
	// files (store.Store.Folders).
	Folders(ctx context.Context, fn func(dir []byte, files []store.FolderFile) error) error
	// Surveys returns what is known of the blocks of the files of each
	// content (its group's survey), nil where nothing is.
	Surveys(cs []store.Content) ([]*store.Survey, error)
	// Stats gives the counts that size the tables.
	Stats() (store.Stats, error)
}

// file is one keyed file of the index.
type file struct {
	node     int32
	content  uint32
	size     int64
	dev, ino uint64
}

// node is one folder: a directory of the index, or one above it.
type node struct {
	path    []byte // no trailing slash but for "/"
	parent  int32  // -1 at the top
	depth   int32
	in, out int32 // the preorder numbers of it and of the node after its subtree
	lo, hi  int32 // its subtree's files in index.files
	count   int64 // files in its subtree, keyed or not
	own     int64 // its own files with no key
	unknown int64 // files with no key in its subtree
	bytes   int64 // bytes of the keyed files in its subtree
	sig     [2]uint64
	minOcc  int32 // the fewest copies in the index of one of its contents
}

// content is one distinct content.
type content struct {
	words   [2]uint64 // the digest's first 16 bytes, big-endian (backend folded in)
	backend key.Backend
	at      int   // where its digest starts in index.arena
	occ     int32 // files with it in the whole index
}

// index is the folders and files as read from the source.
type index struct {
	nodes    []node
	byPath   map[string]int32
	files    []file
	contents []content
	byWords  *table
	arena    []byte // the contents' digests

	// Made by prepare (sums.go).
	order []int32 // the nodes in preorder
	first []int32 // by content: where its positions start in at
	at    []int32 // positions in files, by content
}

// load reads every folder of src.
func load(ctx context.Context, src Source) (*index, error) {
	ix := &index{byPath: map[string]int32{}}
	st, err := src.Stats()
	if err != nil {
		return nil, err
	}
	ix.files = make([]file, 0, st.Files)
	ix.contents = make([]content, 0, st.Unique+st.Ungrouped)
	ix.arena = make([]byte, 0, (st.Unique+st.Ungrouped)*int64(key.Default.DigestLen()))
	ix.byWords = newTable(int(st.Unique + st.Ungrouped))
	last := int32(-1)
	var lastDir []byte
	err = src.Folders(ctx, func(dir []byte, files []store.FolderFile) error {
		if last < 0 || !bytes.Equal(dir, lastDir) {
			last, lastDir = ix.folder(dirPath(dir)), append(lastDir[:0], dir...)
		}
		for i := range files {
			ix.add(last, &files[i])
		}
		return nil
	})
	return ix, err
}

// dirPath turns a dirs-index key ("/a/b/") into the folder's path.
func dirPath(dir []byte) []byte {
	if len(dir) > 1 && dir[len(dir)-1] == '/' {
		return dir[:len(dir)-1]
	}
	return dir
}

// folder returns the node of path, making it and those above it.
func (ix *index) folder(path []byte) int32 {
	if n, ok := ix.byPath[string(path)]; ok {
		return n
	}
	parent := int32(-1)
	if up := parentPath(path); up != nil {
		parent = ix.folder(up)
	}
	depth := int32(0)
	if parent >= 0 {
		depth = ix.nodes[parent].depth + 1
	}
	n := int32(len(ix.nodes))
	ix.nodes = append(ix.nodes, node{path: bytes.Clone(path), parent: parent, depth: depth})
	ix.byPath[string(path)] = n
	return n
}

// parentPath returns the folder above path, nil for "/" or a relative
// name.
func parentPath(path []byte) []byte {
	i := bytes.LastIndexByte(path, '/')
	switch {
	case i < 0 || len(path) == 1:
		return nil
	case i == 0:
		return path[:1]
	}
	return path[:i]
}

// add counts one file of folder n.
func (ix *index) add(n int32, f *store.FolderFile) {
	if !f.Keyed() {
		ix.nodes[n].own++
		return
	}
	ix.files = append(ix.files, file{node: n, content: ix.intern(f.Backend, f.Digest), size: f.Size, dev: f.Dev, ino: f.Ino})
}

// intern returns the id of content d under backend b.
func (ix *index) intern(b key.Backend, d []byte) uint32 {
	var k [16]byte
	copy(k[:], d)
	k[15] ^= byte(b) // the words sort as the digests do, but for the last of these bytes
	w := [2]uint64{binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[8:])}
	slot := ix.byWords.find(w, ix.contents)
	if s := ix.byWords.slots[slot]; s != 0 {
		ix.contents[s-1].occ++
		return s - 1
	}
	at := len(ix.arena)
	ix.arena = append(ix.arena, d...)
	c := uint32(len(ix.contents))
	ix.contents = append(ix.contents, content{words: w, backend: b, at: at, occ: 1})
	ix.byWords.put(slot, c, ix.contents)
	return c
}

// digest returns content c's digest.
func (ix *index) digest(c uint32) []byte {
	at := ix.contents[c].at
	n := ix.contents[c].backend.DigestLen()
	return ix.arena[at : at+n : at+n]
}
