package query

import (
	"context"

	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/watcher"
)

// Store is what the queries read of the index (*store.Store), and the
// two things they write: the surveys of block sharing they make, and the
// records forget drops.
type Store interface {
	Get(path []byte) (store.Record, bool, error)
	ByDigest(b key.Backend, digest []byte) ([][]byte, error)
	DupGroup(b key.Backend, d []byte, opts store.DupOptions) (store.Group, bool, error)
	Dups(ctx context.Context, opts store.DupOptions, fn func(store.Group) error) error
	SubmitSurvey(b key.Backend, d []byte, sv store.Survey, seen []store.Seen, done func(error))
	Stats() (store.Stats, error)
	Settle(ctx context.Context) error
	Backlog() store.Backlog
	Outside(ctx context.Context, roots [][]byte, countFiles bool) ([]store.OutsideDir, error)
	Forget(ctx context.Context, dir []byte, roots [][]byte, dry bool) (int64, error)
	// Folders and SurveysOf are what dups --dirs reads (dirdups.go).
	Folders(ctx context.Context, fn func(dir []byte, files []store.FolderFile) error) error
	SurveysOf(cs []store.Content) ([]*store.Survey, error)
	// Committed names the last commit: the tree is counted again after it changes (tree.go).
	Committed() (uint64, error)
	// DupFiles is what the tree reads of the duplicate groups (tree.go).
	DupFiles(ctx context.Context, fn func(*store.GroupFiles) error) error
}

// Indexer is what the queries ask the indexer (*indexer.Indexer).
type Indexer interface {
	Lookup(ctx context.Context, path string, wait bool) (indexer.Result, error)
	// Unchanged reports whether a fresh lstat agrees with rec.
	Unchanged(path string, rec *store.Record) bool
	Progress() indexer.Progress
	RootScanned(root string) bool
	// RootAway reports whether the file system that held root is not
	// mounted now, the folder beneath its mount point in its place.
	RootAway(ctx context.Context, root string) (indexer.FileSystem, bool)
	Away(ctx context.Context) ([]indexer.FileSystem, map[uint64]int, error)
	WaitIdle(ctx context.Context) error
}

// Watcher is what status and sync ask the watcher (*watcher.Watcher).
type Watcher interface {
	Status() watcher.Status
	Sync(ctx context.Context) error
}

// Auditor is what the audit's answers ask of the audit (*audit.Auditor).
type Auditor interface {
	Start(ctx context.Context, o audit.StartOptions) (uint64, error)
	WaitRun(ctx context.Context, id uint64) (audit.RunSummary, error)
	Summary(id uint64) (audit.RunSummary, error)
	Status() audit.Status
	Problems(ctx context.Context, fn func(audit.Problem) error) error
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	Accept(ctx context.Context, path []byte) (audit.AcceptResult, error)
	History() ([]audit.PassSummary, error)
}
