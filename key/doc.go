// Package key is the git-annex key as a value type: parsing and formatting
// of the full key grammar, the hash backends' names, and the E-backend
// extension rule, byte-identical to git-annex 10.20230126.
//
// Key is comparable and can be used as a map key. The package imports only
// the standard library; turning file contents into digests is the hasher's
// job, and FromDigest turns a digest into the key git-annex would compute.
//
// # Grammar
//
// A key is
//
//	BACKEND[-sSIZE][-mMTIME][-SCHUNKSIZE][-CCHUNKNUM]--NAME
//
// for example
//
//	SHA256E-s1048576--a5f3…9c1e.tar.gz
//	SHA256-s4-S1048576-C3--09ab…77f0
//
// BACKEND is one or more bytes other than '-'. The optional fields follow in
// exactly this order, each at most once, each a letter and one or more
// decimal digits (no sign); leading zeros are accepted and dropped. NAME is
// every byte after the first "--" that follows the fields: it may be empty
// and may itself contain "--". When BACKEND ends in "E", NAME's extension
// (from its first dot) is at most 64 bytes. Anything else is malformed. This
// is git-annex's own parser (keyParser in Types/Key.hs), which is strict on
// purpose: keys are committed to git, so they must not carry room for
// collision data. git-annex writes -S and -C together; its parser accepts
// either alone, and so does Parse. Numbers must fit in an int64 here.
//
// # Extension rule
//
// E backends (SHA256E, …) append the file's extension to the hex digest.
// git-annex's selectExtension (Backend/Utilities.hs) takes the base name,
// drops its leading dots, takes everything from the first remaining dot,
// splits it on dots and, walking from the end:
//
//   - stops at the first component longer than annex.maxextensionlength
//     bytes (default 4, "long enough for jpeg");
//   - skips components containing an ASCII byte other than a letter or a
//     digit (so "gz~" and "a b" are skipped, not stopping the walk); bytes
//     ≥ 0x80 are allowed, so UTF-8 and invalid UTF-8 alike count by bytes;
//   - keeps the first 2 components it meets, empty ones included, then
//     drops the empty ones;
//
// and keeps case. Examples: "a.backup.tar.gz" → ".tar.gz", "x.jpeg" →
// ".jpeg", "x.abcde" → "", "x.tar.gz~" → ".tar", "two..dots.txt" →
// ".dots.txt", "x.a..b" → ".b", ".bashrc" → "". See Extension and ExtRule.
//
// # Glossary
//
//   - backend: the key-value backend that made a key, named first in it
//     (SHA256E, WORM, …). Backend is the hash backends this package knows.
//   - E backend: a hash backend whose keys carry the file's extension.
//   - digest: the hash of the content; in a hash-backend key, the lower-case
//     hex at the start of the name.
//   - name: the part of a key after "--": digest plus extension for hash
//     backends, other data for WORM and URL keys.
//   - extension: the ".tar.gz" an E backend appends, chosen by the rule
//     above.
//   - field: one of -s (size in bytes), -m (mtime, WORM keys), -S (chunk
//     size) and -C (chunk number) of a chunked key.
package key
