package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, c := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "devel-0123456789ab-dirty"},
		{debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}, "devel-abc"},
	} {
		if got := fromBuildInfo(&c.bi); got != c.want {
			t.Errorf("fromBuildInfo(%+v) = %q, want %q", c.bi, got, c.want)
		}
	}
}

func TestStampFirst(t *testing.T) {
	old := Stamp
	defer func() { Stamp = old }()
	Stamp = " 2.0.0 \n"
	if got := String(); got != "2.0.0" {
		t.Errorf("String() = %q with a stamp", got)
	}
}
