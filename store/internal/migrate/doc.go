// Package migrate upgrades an index of an older schema to the current one
// when package store opens it. Run picks the steps: schema 1 is copied
// into a new file beside the index, checked and renamed over it (its keys
// all change); schemas 2 and 4 are changed in place a chunk per
// transaction; the others in one transaction each. A crash or an error
// at any point leaves an index that the next open migrates again, never a
// partial one under a newer schema number.
//
// It knows the byte layout from package codec; what it needs of the
// store itself (its full check, its pending entries and runs) it is given
// as a Store.
package migrate
