// Package hublink is annexd's link to its hub: it reads the [hub] and
// [publish] sections with their credentials (certificates, secrets, the
// hub's CA), runs the hub when this machine serves it and the publisher
// of the index's changes, asks the hub which hosts hold what in the API's
// types (api.Hubber), and reports the link in the status and the metrics.
//
// A daemon without [hub] or [publish] has no Link: New returns nil, and
// the methods of a nil *Link report nothing.
package hublink
