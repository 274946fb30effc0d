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
