// Package heal restores a file the audit found corrupt from a verified
// copy: another file with the same key on this host or, through a
// Remote, on another of the person's hosts.
//
// # Copies
//
// The candidates are the other records with the rotten file's digest. A
// copy that shares blocks with the rotten file is no copy: a hard link
// (one inode) or a reflinked twin (dedup's survey of shared extents,
// dedup.SurveyGroup, says which inodes are one physical copy) carries
// the same rot. Copies are counted as physical copies, not names. Each
// candidate is read from the device as the audit reads (audit.ReadFile)
// and hashed; only one whose digest is the recorded one is used. Copies
// on the rotten file's file system come first (a reflink is then
// possible), then the Remote's, when there is one.
//
// # Restoring
//
// A heal is journalled in the index before it touches a file (an
// intent). The copy goes into a temporary file in the rotten file's
// folder (TempPrefix, a name the daemon never indexes): a reflink
// (FICLONE) where the file system can, else a copy. It takes the rotten
// file's owner, group, xattrs (ACLs among them), mode and times, is
// synced, and read back from the device: its bytes must verify. Then,
// right before the swap, the rotten file must be as flagged (stat, and
// no write in the ledger). The temporary file and the rotten file are
// exchanged (RENAME_EXCHANGE), so the name always holds one of them; the
// rotten inode, now under the temporary name, is renamed aside (the
// temporary name plus AsideSuffix), never deleted. Last the audit reads
// the restored file from the device and lifts the finding
// (audit.Auditor.Healed), recording the heal in its history.
//
// The rotten bytes stay aside until `annexctl audit accept` of the path
// or the retention time ([audit] heal_keep, default 30 days) removes
// them (audit.Auditor.ReleaseHeals).
//
// # Never worse
//
// A file changed since it was flagged is not healed; a copy that fails
// its digest, read from the device, is not used, and neither is a
// temporary file whose bytes do not verify once written (a copy that
// rotted after it was chosen). A SIGKILL at any point leaves the rotten
// or the healed file at the name. Recover, run at start, settles every
// intent: a temporary file that never took the name is removed, a
// rotten file left under the temporary name is put aside, and a heal
// that swapped is finished (verified, the finding lifted).
package heal
