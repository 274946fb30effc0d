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
type Intent struct {
	ID     string `json:"id"`     // random; also the temporary name's suffix
	Dir    []byte `json:"dir"`    // the target's directory
	Name   []byte `json:"name"`   // the target's name in Dir
	Temp   string `json:"temp"`   // the temporary name in Dir
	Dev    uint64 `json:"dev"`    // the file system of both
	Keeper uint64 `json:"keeper"` // the keeper's inode
	Target uint64 `json:"target"` // the target's inode
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
