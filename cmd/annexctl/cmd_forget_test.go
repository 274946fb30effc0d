package main

import (
	"errors"
	"fmt"
	"testing"
)

func TestForgetDirs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"/a/b", "/a", "/a/", "/ab", "x", "/a.bak"}, "[/a /ab /a.bak]"},
		{[]string{"/old/x", "/", "/srv"}, "[/]"},
		{[]string{"../b", "."}, "[/b /a]"},
	} {
		dirs, err := forgetDirs(c.args, "/a")
		if got := fmt.Sprintf("%s", dirs); err != nil || got != c.want {
			t.Errorf("forgetDirs(%q) = %s, %v; want %s", c.args, got, err, c.want)
		}
	}
	var ee *exitError
	if _, err := forgetDirs([]string{"/old", ""}, "/home/u"); !errors.As(err, &ee) || ee.Code != exitUsage {
		t.Errorf(`forgetDirs with "": %v, want exit %d`, err, exitUsage)
	}
}
