package version

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	for _, tc := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{name: "stamped", version: "v0.1.0", commit: "abc123", bi: vcs("vcs.revision", "def456"),
			want: Info{Version: "v0.1.0", Commit: "abc123"}},
		{name: "stamped dirty", version: "v0.1.0", commit: "abc123-dirty",
			want: Info{Version: "v0.1.0", Commit: "abc123-dirty"}},
		{name: "unstamped: commit from the build info", bi: vcs("vcs", "git", "vcs.revision", "def456", "vcs.modified", "false"),
			want: Info{Version: Devel, Commit: "def456"}},
		{name: "unstamped, modified tree", bi: vcs("vcs.revision", "def456", "vcs.modified", "true"),
			want: Info{Version: Devel, Commit: "def456-dirty"}},
		{name: "unstamped, no vcs info", bi: vcs("-trimpath", "true"),
			want: Info{Version: Devel}},
		{name: "no build info", want: Info{Version: Devel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.bi, "", "")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v0.1.0", Commit: "abc123", GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"ironlb v0.1.0 (commit abc123, go1.26.8, linux/arm64)"},
		{Info{Version: Devel, GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"ironlb devel (commit unknown, go1.26.8, linux/amd64)"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.in, got, tc.want)
		}
	}
}
