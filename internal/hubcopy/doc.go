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
// time into the bucket (putObject: chunks, then the metadata), hashing
// again, and fails the put when the bytes read then do not match. A
// failed put publishes no metadata and purges its chunks. So a rotten
// copy is never an object the asker can read. The holder answers on
// hubwire.CopySentSubject: sent, no verified copy (with how many copies
// it read), busy, or failed.
//
// The asker reads the object through the hub (hubwire.QueryCopyRead): a
// window of chunks at a time, which the hub reads with its own
// connection and sends into the asker's own inbox. It writes them to the
// caller's writer and hashes them under the key's backend. Only when the
// digest and size match the key does Fetch return nil; then it deletes
// the object (purges its chunks and metadata). A copy that fails the
// check is purged too, and Fetch fails with ErrDigest.
//
// # Rate and resume
//
// Reads of the holder's disk for a put, and reads of the object on the
// asker's side, are paced to Config.Rate bytes a second (default
// DefaultRate). Each window names the stream sequence of the last chunk
// the asker wrote, so a read broken by a lost link (no part of an
// answer for Config.Stall, or the connection failed) goes on after
// that chunk, from the object at the hub, without asking the holder to
// read its disk again.
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
// may purge it; no host may read a bucket, nor make a consumer (hub
// package, copyPermissions): NATS sends a read's answer to any reply
// subject, and a consumer's deliveries to any subject, so either would
// let a host aim a bucket's bytes at another host. The hub reads for the
// asker and answers only into the asker's inbox. Requests and answers
// with a reply subject or headers are no host's and are ignored
// (hubwire.DecodeCopy). A holder that lies sends bytes whose digest the
// asker refuses.
package hubcopy
