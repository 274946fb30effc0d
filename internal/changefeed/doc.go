// Package changefeed answers the change feed (annexctl changes,
// GET /v1/changes) from the index's feed: it turns the store's entries
// into the API's changes, with git-annex keys and cursors, and waits for
// new ones in a long poll.
package changefeed
