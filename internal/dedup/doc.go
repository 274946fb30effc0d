// Package dedup makes duplicate files that the index found share their
// storage, safely: it plans from the index, checks each pair again, and acts.
//
// # Basics
//
// A plan comes from the index alone (MakePlan, PlanGroup): files with the
// same bare digest on one file system, one keeper per group, one action per
// other inode. It costs no file system access, so a plan is instant.
//
// Before each action the pair is checked again against its records, and
// the action itself is verified by the kernel or by a byte comparison.
package dedup
