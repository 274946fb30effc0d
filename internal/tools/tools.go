//go:build tools

package tools

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/bbolt"
	_ "golang.org/x/crypto/blake2b"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sys/cpu"
	_ "golang.org/x/sys/unix"
	_ "pgregory.net/rapid"
)
