// Package query answers the API's questions about the index: lookup,
// whereis and dups (with the names of one inode and the copies that share
// blocks, from the surveys the store keeps), the daemon's status, forget,
// the audit's answers, and the records outside the roots. It reads the
// store, the indexer and the watcher through the interfaces of deps.go
// and answers in the api package's types; it keeps nothing of its own but
// the last list of records outside the roots.
//
// The records outside the roots are found here, not by the indexer: the
// indexer never looks at them (nothing watches or checks them); only the
// answers do: status and the metrics list them, dups leaves them out,
// whereis marks them, and forget drops them.
package query
