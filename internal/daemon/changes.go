package daemon

import (
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/changefeed"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/store"
)

// feedOptions are the store's bounds of the change feed from [changes].
func feedOptions(c config.Changes) store.FeedOptions {
	if c.Disabled {
		return store.FeedOptions{Keep: -1}
	}
	return store.FeedOptions{Keep: c.Keep, MaxAge: time.Duration(c.MaxAge)}
}

// changeFeed is the API's change feed of st, nil when st keeps none.
func changeFeed(st *store.Store) api.ChangeFeed {
	if _, err := st.Feed(); err != nil {
		return nil
	}
	return changefeed.New(st)
}
