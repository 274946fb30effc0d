package dirdups

import (
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// StoreSource reads a store, and the surveys it keeps: a group with no
// survey kept counts its copies at their size.
type StoreSource struct{ *store.Store }

// Survey returns the survey the store keeps of content d, or nil.
func (s StoreSource) Survey(b key.Backend, d []byte) (*store.Survey, error) {
	g, ok, err := s.DupGroup(b, d, store.DupOptions{Brief: true})
	if err != nil || !ok {
		return nil, err
	}
	return g.Survey, nil
}
