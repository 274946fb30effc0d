package dedup

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// Intent is the journal entry of one hardlink step, durable before the
// step touches the file system. A temporary name made by the step is
// proven the step's own by its random name and its recorded inode.
//
// Recovery finds the step's directory by its path while that is still
// the same directory (DirIno), and otherwise by the temporary name under
// the roots. It compares inode numbers only with the directory's own
// file system at that moment, never with Dev: a device may be numbered
// otherwise after a restart.
type Intent struct {
	ID     string `json:"id"`                // random; also the temporary name's suffix
	Dir    []byte `json:"dir"`               // the target's directory
	DirIno uint64 `json:"dir_ino,omitempty"` // its inode
	Name   []byte `json:"name"`              // the target's name in Dir
	Temp   string `json:"temp"`              // the temporary name in Dir
	Dev    uint64 `json:"dev"`               // the file system as the step saw it; not compared
	Keeper uint64 `json:"keeper"`            // the keeper's inode
	Target uint64 `json:"target"`            // the target's inode
	// KeeperPath is a name of the keeper, handed back to the indexer once
	// the step is settled: the step changed the keeper's ctime.
	KeeperPath []byte `json:"keeper_path,omitempty"`
	// Was is what both files were before the step. Journals written
	// before it existed have none; recovery then trusts only equal bytes.
	Was *Was `json:"was,omitempty"`
	// Trash is set for a move to the trash (trash.go), which has no
	// temporary name.
	Trash *TrashStep `json:"trash,omitempty"`
}

// Was is the copy and its keeper as a step found them: the same bytes,
// owner, group, mode and xattrs. Recovery tells by it whether anyone
// changed either file since.
type Was struct {
	Backend       string `json:"backend"` // of Digest, as key.Backend names it
	Digest        []byte `json:"digest"`  // of both files' bytes
	Size          int64  `json:"size"`
	TargetMtimeNs int64  `json:"target_mtime_ns"`
	KeeperMtimeNs int64  `json:"keeper_mtime_ns"`
	Mode          uint32 `json:"mode"` // with the file type bits
	UID           uint32 `json:"uid"`
	GID           uint32 `json:"gid"`
	Xattrs        string `json:"xattrs"` // xattrSum of both files' xattrs
	// KeeperLinks is the keeper's link count once the target's name is
	// one of them.
	KeeperLinks uint64 `json:"keeper_links"`
}

// Intents is the journal hardlink mode keeps. PutIntent returns once the
// intent is durable.
type Intents interface {
	PutIntent(ctx context.Context, in Intent) error
	DeleteIntent(ctx context.Context, id string) error
	Intents() ([]Intent, error)
}

// Meta is the store's named-value API. *store.Store implements it.
type Meta interface {
	GetMeta(name string) ([]byte, bool, error)
	PutMeta(ctx context.Context, name string, v []byte) error
	DeleteMeta(ctx context.Context, name string) error
}

// metaKey is the store value holding the journal.
const metaKey = "dedup.intents"

// MetaIntents keeps the journal as one value of the store's user meta,
// rewritten by each change; only a few intents are ever open at once.
type MetaIntents struct {
	m  Meta
	mu sync.Mutex
}

// NewMetaIntents returns a journal kept in m.
func NewMetaIntents(m Meta) *MetaIntents { return &MetaIntents{m: m} }

// Intents returns the open intents.
func (j *MetaIntents) Intents() ([]Intent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.load()
}

func (j *MetaIntents) load() ([]Intent, error) {
	b, ok, err := j.m.GetMeta(metaKey)
	if err != nil || !ok {
		return nil, err
	}
	var out []Intent
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("dedup: intent journal: %w", err)
	}
	return out, nil
}

// PutIntent adds in to the journal, durably.
func (j *MetaIntents) PutIntent(ctx context.Context, in Intent) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	all, err := j.load()
	if err != nil {
		return err
	}
	return j.save(ctx, append(all, in))
}

// DeleteIntent drops the intent with the given id.
func (j *MetaIntents) DeleteIntent(ctx context.Context, id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	all, err := j.load()
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(in Intent) bool { return in.ID == id })
	return j.save(ctx, all)
}

func (j *MetaIntents) save(ctx context.Context, all []Intent) error {
	if len(all) == 0 {
		return j.m.DeleteMeta(ctx, metaKey)
	}
	b, err := json.Marshal(all)
	if err != nil {
		return err
	}
	return j.m.PutMeta(ctx, metaKey, b)
}
