package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/annexd/annexd/store/codec"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
)

// FolderFile is what Folders tells of one file: its content and where it
// is stored, without its name.
type FolderFile struct {
	Backend  key.Backend // the base backend; key.Unknown without a digest
	Digest   []byte      // valid only during the call that hands it over
	Size     int64
	Dev, Ino uint64
	State    State
}

// Keyed reports whether the file's content is known: a record in StateOK
// with a digest. Other files (pending, unreadable, changing, corrupt) have
// no key that describes them now.
func (f *FolderFile) Keyed() bool { return f.State == StateOK && f.Backend != key.Unknown }

// maxFolderFilesPerTx bounds the records one read transaction of Folders
// decodes.
const maxFolderFilesPerTx = 4 * chunk

// folders are the queries of whole folders: every directory's files, the
// duplicate groups' files by name (DupFiles), and the kept surveys of
// many contents at once (dups --dirs).
type folders struct{ *reader }

// Folders calls fn for every directory that holds records, with the
// directory as the dirs index keys it ("/a/b/", with the slash) and its
// files, in directory-id order (not path order). A large directory may
// come in several calls, one after the other. dir and files, digests
// included, are valid only during the call. Folders reads in short
// transactions, on a goroutine of its own one chunk ahead of fn, and
// calls fn outside of them, so a directory changed meanwhile is seen as
// it was when its chunk was read. fn may return ErrStop.
func (s folders) Folders(ctx context.Context, fn func(dir []byte, files []FolderFile) error) error {
	return readAhead(ctx, s.folderChunk, func(fc *folderChunk) error { return fc.each(fn) })
}

// readAhead reads chunks with read, on a goroutine of its own one chunk
// ahead of use, into two buffers used in turn. read fills c with what
// follows the key after (nil: from the first) and returns the last key
// it read and whether more follows. use may return ErrStop.
func readAhead[C any](ctx context.Context, read func(c *C, after []byte) (last []byte, more bool, err error), use func(*C) error) error {
	ctx, cancel := context.WithCancel(ctx)
	full, free := make(chan *aheadChunk[C], 1), make(chan *aheadChunk[C], 2)
	free <- new(aheadChunk[C])
	free <- new(aheadChunk[C])
	go readChunks(ctx, read, full, free)
	defer func() {
		cancel()
		for range full { // the reader stops at its next chunk
		}
	}()
	for r := range full {
		err := r.err
		if err == nil {
			err = ctx.Err()
		}
		if err == nil {
			err = use(&r.c)
		}
		if errors.Is(err, ErrStop) {
			return nil
		}
		if err != nil {
			return err
		}
		free <- r
	}
	return ctx.Err() // the reader left early: only when ctx ended
}

// aheadChunk is one chunk of readAhead, or why it could not be read.
type aheadChunk[C any] struct {
	c   C
	err error
}

// readChunks reads the chunks of readAhead in turn into the buffers free
// hands it, and sends each on full, until the keys end, a read fails or
// ctx ends. It closes full.
func readChunks[C any](ctx context.Context, read func(c *C, after []byte) ([]byte, bool, error), full, free chan *aheadChunk[C]) {
	defer close(full)
	var after []byte
	for {
		var r *aheadChunk[C]
		select {
		case r = <-free:
		case <-ctx.Done():
			return
		}
		more, last := false, []byte(nil)
		if r.err = ctx.Err(); r.err == nil {
			last, more, r.err = read(&r.c, after)
		}
		after = append(after[:0], last...)
		full <- r
		if r.err != nil || !more {
			return
		}
	}
}

// folderChunk holds one chunk of Folders: directories and their files,
// copied out of the transaction.
type folderChunk struct {
	dirs    [][]byte // directory keys, one per run of files
	ends    []int    // files[ends[i-1]:ends[i]] are in dirs[i]
	files   []FolderFile
	digests []byte // the files' digests, one allocation
	at      []int  // where each file's digest starts in digests
	last    []byte // the last file key read
}

func (fc *folderChunk) reset() {
	fc.dirs, fc.ends, fc.files = fc.dirs[:0], fc.ends[:0], fc.files[:0]
	fc.digests, fc.at, fc.last = fc.digests[:0], fc.at[:0], fc.last[:0]
}

// each hands fn the chunk's directories in turn.
func (fc *folderChunk) each(fn func(dir []byte, files []FolderFile) error) error {
	start := 0
	for i, d := range fc.dirs {
		if err := fn(d, fc.files[start:fc.ends[i]]); err != nil {
			return err
		}
		start = fc.ends[i]
	}
	return nil
}

// folderChunk reads the records after file key after (nil: from the
// first) into fc; more reports that it stopped early, last is the last
// file key read.
func (s folders) folderChunk(fc *folderChunk, after []byte) (last []byte, more bool, err error) {
	fc.reset()
	err = s.view(func(tx *bolt.Tx) error {
		names := tx.Bucket(codec.BucketDirNames)
		c := tx.Bucket(codec.BucketFiles).Cursor()
		k, v := c.First()
		if after != nil {
			if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		var dirID uint64
		for ; k != nil; k, v = c.Next() {
			if len(fc.files) == maxFolderFilesPerTx {
				more = true
				break
			}
			id, _, ok := codec.SplitFileKey(k)
			if !ok {
				return fmt.Errorf("%w: bad file key %x", ErrCorrupt, k)
			}
			if len(fc.dirs) == 0 || id != dirID {
				if err := fc.startDir(names, id); err != nil {
					return err
				}
				dirID = id
			}
			if err := fc.add(v); err != nil {
				return fmt.Errorf("record of file key %x: %w", k, err)
			}
			fc.last = append(fc.last[:0], k...)
		}
		fc.closeDir()
		return nil
	})
	fc.fixDigests()
	return fc.last, more, err
}

// startDir ends the directory before and begins directory id.
func (fc *folderChunk) startDir(names *bolt.Bucket, id uint64) error {
	fc.closeDir()
	dk := names.Get(codec.IDKey(id))
	if dk == nil {
		return fmt.Errorf("%w: directory %d missing", ErrCorrupt, id)
	}
	fc.dirs = append(fc.dirs, bytes.Clone(dk))
	return nil
}

func (fc *folderChunk) closeDir() {
	if len(fc.dirs) > len(fc.ends) {
		fc.ends = append(fc.ends, len(fc.files))
	}
}

// add decodes one record. Its digest's place in fc.digests is kept in
// fc.at until fixDigests, as the buffer may move while it grows.
func (fc *folderChunk) add(v []byte) error {
	at := len(fc.digests)
	r, digests, err := codec.DecodeRecordIn(v, fc.digests)
	if err != nil {
		return err
	}
	fc.digests = digests
	fc.at = append(fc.at, at)
	fc.files = append(fc.files, FolderFile{Backend: r.Backend.Base(), Size: r.Size, Dev: r.Dev, Ino: r.Ino, State: r.State})
	return nil
}

// fixDigests points every file's digest into the final buffer.
func (fc *folderChunk) fixDigests() {
	for i := range fc.files {
		f := &fc.files[i]
		at, n := fc.at[i], f.Backend.DigestLen()
		f.Digest = fc.digests[at : at+n : at+n]
	}
}

// Content names one content: a digest under its backend.
type Content struct {
	Backend key.Backend
	Digest  []byte
}

// SurveysOf returns the survey the store keeps of each content's group,
// nil where it keeps none (no survey, or fewer than two inodes). It reads
// in short transactions, many contents each: a folder's worth of
// contents costs a fraction of a DupGroup each. Contents sorted by
// backend and digest are read fastest.
func (s folders) SurveysOf(cs []Content) ([]*Survey, error) {
	out := make([]*Survey, len(cs))
	for at := 0; at < len(cs); at += maxFolderFilesPerTx {
		part := cs[at:min(at+maxFolderFilesPerTx, len(cs))]
		err := s.view(func(tx *bolt.Tx) error { return surveysOf(tx, part, out[at:]) })
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// surveysOf reads the surveys of cs into out in tx.
func surveysOf(tx *bolt.Tx, cs []Content, out []*Survey) error {
	groups, surveys := tx.Bucket(codec.BucketGroups), tx.Bucket(codec.BucketSurveys)
	if surveys == nil {
		return nil
	}
	var dk []byte
	for i, c := range cs {
		dk = append(append(dk[:0], byte(c.Backend.Base())), c.Digest...)
		v := groups.Get(dk)
		if v == nil {
			continue
		}
		g, err := decodeGroup(v)
		if err != nil {
			return fmt.Errorf("group %x: %w", dk, err)
		}
		if sv := surveys.Get(codec.DescKey(g.duplicate(), dk)); sv != nil && g.inodes >= 2 {
			d, _, _, err := decodeSurvey(sv)
			if err != nil {
				return fmt.Errorf("survey %x: %w", dk, err)
			}
			out[i] = &d
		}
	}
	return nil
}
