package annexlink

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func TestFromTarget(t *testing.T) {
	k := "SHA256E-s0--" + digest + ".txt"
	cases := []struct {
		target, want string
	}{
		{"../.git/annex/objects/Xx/Yy/" + k + "/" + k, k},
		{"../../.git/annex/objects/pX/ZJ/" + k + "/" + k, k},
		{"/srv/repo.git/annex/objects/aa/bb/" + k + "/" + k, k}, // a bare repository's objects
		{"../.git/annex/objects/Xx/Yy/x/WORM-s3-m1--a&cb&sc%d&ae", "WORM-s3-m1--a:b%c/d&e"},
		{"../elsewhere/" + k, ""}, // not into an annex
		{"../.git/annex/objects/Xx/Yy/notakey", ""},
		{"", ""},
	}
	for _, c := range cases {
		got, ok := FromTarget(c.target)
		if ok != (c.want != "") || (ok && got.String() != c.want) {
			t.Errorf("FromTarget(%q) = %q, %v; want %q", c.target, got.String(), ok, c.want)
		}
	}
	if _, ok := FromTarget("/annex/objects/" + strings.Repeat("x/", maxTarget) + k); ok {
		t.Error("an overlong target was read")
	}
}

func TestKeyReadsTheLink(t *testing.T) {
	dir := t.TempDir()
	k := "SHA256E-s0--" + digest
	link := filepath.Join(dir, "f")
	if err := os.Symlink(".git/annex/objects/Xx/Yy/"+k+"/"+k, link); err != nil {
		t.Fatal(err)
	}
	if got, ok := Key(link); !ok || got.String() != k {
		t.Errorf("Key(link) = %q, %v", got.String(), ok)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte(".git/annex/objects/Xx/Yy/"+k+"/"+k), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := Key(plain); ok {
		t.Error("a regular file was read as a link")
	}
}
