// Package dirdups finds duplicate folders in the index: folders that hold
// the same contents, and folders whose every content another folder holds
// too. It reads the index once and looks at no file.
//
// # Rules
//
//   - A folder's content is the multiset of its files' contents, at any
//     depth: names and layout aside, as rmlint's --merge-directories
//     compares. An empty file is content too (an empty __init__.py
//     matters); a folder of no bytes is never a duplicate.
//   - Identical: two folders or more with the same multiset. Within one
//     group a folder that holds exactly the files of one below it (a
//     folder whose only entry is that folder) stands for both.
//   - Contained: folder A's multiset lies within folder B's, B is bigger
//     and neither holds the other. The smallest such B is named.
//   - Nested: below a folder reported as the extra copy (every one of an
//     identical group but the first, in path order, and a contained
//     folder) nothing more is reported: its copies are in the report
//     already. Below the first of a group, everything still counts.
//   - Unknown: a file with no key (pending, unreadable, changing,
//     corrupt) makes its folder and every folder above it unknown. They
//     are never reported as duplicates; the folders holding such files
//     are listed instead.
//   - Reclaimable: what removing the extra copies would give back. Each
//     inode whose every name is in them counts once, with the bytes its
//     survey says it holds alone (store.Survey): blocks shared with
//     another file, hard links with a name elsewhere and inodes the
//     survey could not look at count nothing. An inode with no survey
//     counts its size and is counted as unsurveyed.
//
// Contents are told apart by the first 16 bytes of their digests (with
// the backend), a collision of which no one can make.
package dirdups
