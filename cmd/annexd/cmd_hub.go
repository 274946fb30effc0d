package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"
)

func newHubCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hub",
		Short: "Make the credentials hosts use to publish to a hub",
		Long: `A hub (annexd --hub, or [hub] enabled = true) runs on the machine that is
usually on, the NAS, and every other annexd publishes its changes to it
([publish] hub = "tls://nas:4222"). Each host has its own credentials:
an nkey (a key pair: the host keeps the seed, the hub knows the public
key) or a password (the host keeps it, the hub knows its bcrypt hash).
These commands make them; docs/cli.md has the whole setup.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newHubNkeyCmd(), newHubPasswdCmd())
	return cmd
}

func newHubNkeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "nkey SEED_FILE",
		Short: "Make a host's key pair: the seed into SEED_FILE, the public key on stdout",
		Long: `Make a user nkey for one host. The seed (the secret) is written to SEED_FILE
with mode 0600; give its path as [publish] nkey_seed_file on that host. The
public key ("U…") is printed; give it as nkey in the hub's [[hub.host]]
for that host. A SEED_FILE that exists already is kept, and its public
key is printed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := filepath.Abs(args[0])
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("hub nkey: %w", err)}
			}
			pub, made, err := nkeyFile(path)
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("hub nkey: %w", err)}
			}
			fmt.Fprintln(cmd.OutOrStdout(), pub)
			what := "wrote the seed to"
			if !made {
				what = "kept the existing seed in"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "annexd: %s %s\n  this host's config: [publish] nkey_seed_file = %q\n  the hub's config:   [[hub.host]] name = \"…\", nkey = %q\n",
				what, path, path, pub)
			return nil
		},
	}
}

// nkeyFile makes a user nkey's seed at path, or reads the one there, and
// returns its public key; made says whether it is new.
func nkeyFile(path string) (pub string, made bool, err error) {
	if b, err := os.ReadFile(path); err == nil {
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return "", false, fmt.Errorf("%s exists and holds no nkey seed: %w", path, err)
		}
		pub, err = kp.PublicKey()
		return pub, false, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", false, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", false, err
	}
	if err := writeSecret(path, append(seed, '\n')); err != nil {
		return "", false, err
	}
	pub, err = kp.PublicKey()
	return pub, true, err
}

// writeSecret writes data to a new file only its owner can read.
func writeSecret(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

func newHubPasswdCmd() *cobra.Command {
	var generate string
	var cost int
	cmd := &cobra.Command{
		Use:   "passwd [--generate PASSWORD_FILE]",
		Short: "Print the bcrypt hash of a host's password, for the hub's config",
		Long: `Print the bcrypt hash of a host's password; give it as password_hash in the
hub's [[hub.host]] for that host, and the password itself in a file named
by [publish] password_file on the host. The password is read from stdin
(asked twice without echo on a terminal). With --generate, a random
password is written to PASSWORD_FILE (mode 0600, which must not exist)
instead. A password travels to the hub, so use it over TLS (tls://) or
a network that encrypts already; an nkey (annexd hub nkey) never does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
				return &exitError{Code: exitUsage, Err: fmt.Errorf("hub passwd: --cost must be %d to %d", bcrypt.MinCost, bcrypt.MaxCost)}
			}
			pw, err := password(cmd, generate)
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("hub passwd: %w", err)}
			}
			hash, err := bcrypt.GenerateFromPassword(pw, cost)
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("hub passwd: %w", err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", hash)
			return nil
		},
	}
	cmd.Flags().StringVar(&generate, "generate", "", "write a new random password to this file instead of reading one")
	cmd.Flags().IntVar(&cost, "cost", bcrypt.DefaultCost, "bcrypt cost")
	return cmd
}

// password returns a new random one written to the file generate, or the
// one on stdin.
func password(cmd *cobra.Command, generate string) ([]byte, error) {
	if generate != "" {
		var err error
		if generate, err = filepath.Abs(generate); err != nil {
			return nil, err
		}
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		pw := []byte(base64.RawURLEncoding.EncodeToString(b))
		if err := writeSecret(generate, append(pw, '\n')); err != nil {
			return nil, err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "annexd: wrote a new password to %s\n  this host's config: [publish] password_file = %q\n", generate, generate)
		return pw, nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		if t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			return askTwice(cmd, f, t)
		}
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		return nil, fmt.Errorf("read the password from stdin: %w", err)
	}
	return checkPassword(line)
}

func checkPassword(line string) ([]byte, error) {
	pw := strings.TrimRight(line, "\r\n")
	if len(pw) < 12 {
		return nil, errors.New("the password is shorter than 12 characters")
	}
	if len(pw) > 72 {
		return nil, errors.New("bcrypt uses at most 72 bytes of a password")
	}
	return []byte(pw), nil
}

// askTwice reads the password twice from the terminal f with echo off.
func askTwice(cmd *cobra.Command, f *os.File, t *unix.Termios) ([]byte, error) {
	quiet := *t
	quiet.Lflag &^= unix.ECHO
	if err := unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, &quiet); err != nil {
		return nil, err
	}
	defer unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t)
	r := bufio.NewReader(f)
	var got [2]string
	for i, prompt := range []string{"Password: ", "Again: "} {
		fmt.Fprint(cmd.ErrOrStderr(), prompt)
		line, err := r.ReadString('\n')
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return nil, err
		}
		got[i] = line
	}
	if got[0] != got[1] {
		return nil, errors.New("the two passwords differ")
	}
	return checkPassword(got[0])
}
