package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/annexd/annexd/internal/cliexit"
)

// runIn runs annexd's command line with stdin.
func runIn(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errb)
	code = cliexit.Status("annexd", root.Execute(), &errb, exitUsage)
	return code, out.String(), errb.String()
}

// hub nkey writes a private seed and prints its public key; run again, it
// keeps the seed and prints the same key.
func TestHubNkey(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "laptop.seed")
	code, pub, errs := runIn(t, "", "hub", "nkey", seed)
	pub = strings.TrimSpace(pub)
	if code != 0 || !nkeys.IsValidPublicUserKey(pub) || !strings.Contains(errs, "nkey_seed_file") {
		t.Fatalf("hub nkey: exit %d, %q, %q", code, pub, errs)
	}
	fi, err := os.Stat(seed)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v %v, want mode 0600", fi, err)
	}
	b, _ := os.ReadFile(seed)
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := kp.PublicKey(); k != pub {
		t.Errorf("the seed's public key is %s, %s was printed", k, pub)
	}
	code, again, errs := runIn(t, "", "hub", "nkey", seed)
	if code != 0 || strings.TrimSpace(again) != pub || !strings.Contains(errs, "kept") {
		t.Errorf("second run: exit %d, %q, %q; want the same key, the seed kept", code, again, errs)
	}
	if b2, _ := os.ReadFile(seed); !bytes.Equal(b, b2) {
		t.Error("the second run changed the seed")
	}
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("hello\n"), 0o600)
	if code, _, errs := runIn(t, "", "hub", "nkey", junk); code != 1 || !strings.Contains(errs, "no nkey seed") {
		t.Errorf("a file without a seed: exit %d, %q", code, errs)
	}
}

// hub passwd hashes the password on stdin, or a new one it writes to a
// private file, refusing to overwrite one.
func TestHubPasswd(t *testing.T) {
	code, hash, errs := runIn(t, "a long enough password\n", "hub", "passwd", "--cost", "4")
	if code != 0 || bcrypt.CompareHashAndPassword([]byte(strings.TrimSpace(hash)), []byte("a long enough password")) != nil {
		t.Fatalf("hub passwd: exit %d, %q, %q", code, hash, errs)
	}
	if code, _, errs := runIn(t, "short\n", "hub", "passwd"); code != 1 || !strings.Contains(errs, "shorter than 12") {
		t.Errorf("a short password: exit %d, %q", code, errs)
	}
	if code, _, _ := runIn(t, "", "hub", "passwd", "--cost", "99"); code != 2 {
		t.Errorf("a bad cost: exit %d, want 2", code)
	}
	pwFile := filepath.Join(t.TempDir(), "pw")
	code, hash, errs = runIn(t, "", "hub", "passwd", "--generate", pwFile, "--cost", "4")
	if code != 0 || !strings.Contains(errs, "password_file") {
		t.Fatalf("--generate: exit %d, %q", code, errs)
	}
	b, err := os.ReadFile(pwFile)
	fi, _ := os.Stat(pwFile)
	if err != nil || fi.Mode().Perm() != 0o600 || bcrypt.CompareHashAndPassword([]byte(strings.TrimSpace(hash)), bytes.TrimSpace(b)) != nil {
		t.Fatalf("the generated password file (%v) does not match the hash printed", err)
	}
	if code, _, errs := runIn(t, "", "hub", "passwd", "--generate", pwFile); code != 1 || !strings.Contains(errs, "exists") {
		t.Errorf("--generate over an existing file: exit %d, %q", code, errs)
	}
	if b2, _ := os.ReadFile(pwFile); !bytes.Equal(b, b2) {
		t.Error("--generate overwrote the password file")
	}
}
