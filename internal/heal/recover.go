package heal

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/audit"
)

// metaIntent + id names the journal entry of a heal under way.
const metaIntent = "heal/intent/"

// intent is a heal under way, durable before it touches a file: the
// rotten file's path and inode, and the heal's id, which names the
// temporary file (TempPrefix + ID) and the rotten bytes' place aside.
type intent struct {
	ID     string `json:"id"`
	Path   string `json:"path"`
	Ino    uint64 `json:"ino"` // the rotten inode
	Key    string `json:"key"`
	Source string `json:"source,omitempty"`
}

func (h *Healer) putIntent(ctx context.Context, in *intent) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return h.st.PutMeta(ctx, metaIntent+in.ID, b)
}

func (h *Healer) dropIntent(ctx context.Context, id string) {
	if err := h.st.DeleteMeta(context.WithoutCancel(ctx), metaIntent+id); err != nil {
		h.log.Warn("cannot drop a heal's journal entry", "id", id, "err", err)
	}
}

// Recover settles the heals a crash cut short, by what is at each name
// now: the rotten inode under the temporary name (swapped, not yet put
// aside) goes aside and the heal is finished; a temporary file that is
// not the rotten inode, while the rotten inode still holds the path, is
// removed (it never took the name); a rotten inode aside means the heal
// swapped and is finished. Finishing is the audit's check of the
// restored file (audit.Auditor.Healed). Nothing is deleted that is not
// proven the heal's own copy.
func (h *Healer) Recover(ctx context.Context) error {
	var ins []intent
	err := h.st.MetaPrefix(ctx, metaIntent, func(name string, v []byte) error {
		var in intent
		if json.Unmarshal(v, &in) == nil && in.ID != "" {
			ins = append(ins, in)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, in := range ins {
		if err := h.settle(ctx, &in); err != nil {
			errs = append(errs, err)
			continue
		}
		h.dropIntent(ctx, in.ID)
	}
	return errors.Join(errs...)
}

// settle settles one intent.
func (h *Healer) settle(ctx context.Context, in *intent) error {
	temp := filepath.Join(filepath.Dir(in.Path), TempPrefix+in.ID)
	aside := temp + AsideSuffix
	tfi, terr := fsstat.Lstat(temp)
	switch {
	case terr == nil && tfi.Ino == in.Ino: // swapped: the rotten inode is under temp
		if err := putAside(temp, in.Ino); err != nil {
			return err
		}
		h.log.Info("heal recovery: the rotten bytes put aside", "path", in.Path, "aside", aside)
	case terr == nil:
		pfi, err := fsstat.Lstat(in.Path)
		if err != nil || pfi.Ino != in.Ino {
			// The path holds neither the rotten inode nor, provably, our
			// copy: keep the temporary file visibly, never remove it.
			kept := temp + ".kept"
			h.log.Error("heal recovery: a temporary file kept, the path holds another file", "path", in.Path, "kept", kept)
			return os.Rename(temp, kept)
		}
		h.log.Info("heal recovery: an unused temporary file removed", "path", in.Path, "temp", temp)
		return os.Remove(temp)
	case !errors.Is(terr, fs.ErrNotExist):
		return terr
	}
	afi, err := fsstat.Lstat(aside)
	if err != nil || afi.Ino != in.Ino {
		return nil // never swapped
	}
	err = h.au.Healed(ctx, audit.HealRecord{Path: []byte(in.Path), Key: in.Key, Source: in.Source, Aside: aside, AsideIno: in.Ino})
	if err != nil && !errors.Is(err, audit.ErrNotFlagged) {
		h.log.Warn("heal recovery: the audit did not lift the finding", "path", in.Path, "err", err)
	}
	return nil
}
