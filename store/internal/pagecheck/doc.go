// Package pagecheck reads a bbolt file's pages with pread, never through
// bbolt's mmap, so a damaged page is an error and never a fault: the meta
// pages, the freelist, and the trees of the buckets. Walk checks the page
// structure of a whole file, reading every branch page and a sample of
// each bucket's leaves; Values reads a few values of one bucket. It knows
// bbolt's format only: what an entry means is its caller's to check.
package pagecheck
