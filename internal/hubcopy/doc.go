// Package hubcopy sends a verified copy of a file's content from one
// host to another through the hub: the holder reads it from its disk,
// checks it against its git-annex key, and puts it in a JetStream object
// bucket that only the asker may read; the asker fetches it chunk by
// chunk and checks the key's digest and size before it says the copy is
// good.
//
// # Flow
//
// The asker asks the hub's view which hosts hold the key (whereis), then
// asks each, fresh ones first, on hubwire.CopyAskSubject: its
// credentials may publish only there, so the subject names who asks, and
// no host can ask for another. A holder takes one request at a time and
// answers others "busy". It looks the key's digest up in its own index,
// reads each physical copy (one per inode) from the device and hashes
// it, and sends the first whose bytes match: it reads that file a second
// time into the object store's Put, hashing again, and fails the Put
// when the bytes read then do not match. A failed Put publishes no
// object and purges its chunks. So a rotten copy is never an object the
// asker can read. The holder answers on hubwire.CopySentSubject: sent,
// no verified copy (with how many copies it read), busy, or failed.
//
// The asker reads the object with the object store's Get, which checks
// the object's own SHA-256, writes it to the caller's writer and hashes
// it under the key's backend. Only when the digest and size match the
// key does Fetch return nil; then it deletes the object (purges its
// chunks and metadata). A copy that fails either check is purged too,
// and Fetch fails with ErrDigest.
//
// # Rate and resume
//
// Reads of the holder's disk for a Put, and reads of the object on the
// asker's side, are paced to Config.Rate bytes a second (default
// DefaultRate). The object store's Get reads through an ordered
// consumer, which, after a broken link and the connection's reconnect,
// carries on from the chunk after the last one delivered. When that is
// not enough (the read stalls for Config.Stall, seen when a read's own
// 5 s wait ends, or the connection fails), Fetch gets the stored object
// again from the hub and skips the bytes it wrote already, without
// asking the holder to read its disk again. The object store has no ranged read; reading its chunks any
// other way would be a transfer protocol of our own.
//
// # What the hub keeps
//
// A copy waits in its bucket until the asker fetches it, or
// [hub] copy_ttl (24 h) passes: the hub does not keep it until an
// offline asker comes back. A heal asks again at its next pass, and the
// holder reads the disk again then; a bucket full of copies nobody
// fetched would hold every later copy back until the TTL.
//
// # Trust
//
// Only the holder may write its bucket to the asker, and only the asker
// may read it and purge it (hub package). NATS delivers a stream's
// messages to any subject a consumer names, with a reply subject; so
// requests and answers with a reply subject or headers are no host's and
// are ignored (hubwire.DecodeCopy). A holder that lies sends bytes whose
// digest the asker refuses.
package hubcopy
