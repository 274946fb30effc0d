//go:build !race

package main

import (
	_ "unsafe" // go:linkname

	_ "github.com/nats-io/nats-server/v2/server/pse" // the sampler stopped below
)

// natsStatFile is the file nats-server's pse package reads every second,
// from its init on, in every process that links the hub: it samples the
// process's CPU use for the server's own monitoring, which annexd does not
// serve. That timer woke an idle daemon once a second (issue 38). The
// sampler stops at its next tick when the file cannot be read, so init
// points it at nothing. The race detector would see the two goroutines
// touch the variable without an order between them, which the one second
// provides, so race builds keep the sampler.
//
//go:linkname natsStatFile github.com/nats-io/nats-server/v2/server/pse.procStatFile
var natsStatFile string

func init() { natsStatFile = "" }
