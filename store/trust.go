package store

// Trusted reports whether the key of rec may be believed on its stat
// identity alone: false for a record in state ok hashed within one of the
// suspect spans (Store.Suspect). Such a record was hashed from the page
// cache shortly before the index's writer ended without closing it, or
// before the machine restarted; a power cut then may have kept the file's
// new timestamps and lost its new bytes, so the identity matches a key
// of bytes that are not on disk. It is re-verified (hashed again) before
// it is used; the new record is hashed after the spans and trusted.
func Trusted(rec *Record, suspect []Span) bool {
	if rec.State != StateOK {
		return true
	}
	for _, s := range suspect {
		if s.Contains(rec.HashedAt) {
			return false
		}
	}
	return true
}

// RacilyClean reports whether a write made after rec's hashing began could
// have left the file's stat identity as rec holds it: its ctime is not
// older than the start of the hashing (HashedAt) by more than granNs, the
// file system's timestamp granularity (git's racy-git rule, by the ctime).
// Every write sets the ctime to the time it is made, within a tick, and
// user space cannot set it: a file whose ctime is older than its hashing
// by more than a tick cannot have been written since with its identity
// unchanged. The mtime alone says nothing here, as user space sets it at will:
// an mtime in the future (touch -d, a tar made where the clock ran ahead,
// a camera's wrong clock) is never older than the hashing, and taken alone
// it left such a record racily clean for ever (rehashed at every start,
// its rot taken for an edit); an mtime set back after a write (cp -p,
// rsync -t, tar x) looks old while a second such write in the same ctime
// tick leaves the identity unchanged. A ctime later than the hashing is
// not one the hashing saw when the file was last written before it: the
// file is stated before its hashing begins, so its identity was taken
// over since without hashing again (a rename the indexer applied as a
// move, which sets the ctime and keeps the mtime), and says nothing of a
// write in the hashing's tick: taken for racy, rot of every renamed file
// passed for an edit. When the mtime too lies within a tick of the hashing
// or after it (and not after the ctime, as user space can set it), the
// clock went back between the write and the hashing (an NTP step, a
// clock set at boot): racy. A record without a ctime goes by its mtime.
func RacilyClean(rec *Record, granNs int64) bool {
	c, m, h := rec.CtimeNs, rec.MtimeNs, rec.HashedAt
	if c == 0 {
		c = m
	}
	return c >= h-granNs && c <= h || c > h && m >= h-granNs && m <= c
}
