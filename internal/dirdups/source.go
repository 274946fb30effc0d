package dirdups

import "github.com/annexd/annexd/store"

// StoreSource reads a store, and the surveys it keeps: a group with no
// survey kept counts its copies at their size.
type StoreSource struct{ *store.Store }

// Surveys returns the surveys the store keeps of cs (store.SurveysOf).
func (s StoreSource) Surveys(cs []store.Content) ([]*store.Survey, error) { return s.SurveysOf(cs) }
