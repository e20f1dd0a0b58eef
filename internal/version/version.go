// Package version says which ironlb this is: the release version, the commit it was built from and
// the Go toolchain that built it.
//
// The Makefile stamps the version and the commit at link time (`make build`, `make image`):
//
//	go build -ldflags "-X github.com/ironlb/ironlb/internal/version.version=v0.1.0 \
//	                   -X github.com/ironlb/ironlb/internal/version.commit=<sha>[-dirty]" ./cmd/ironlb
//
// A binary built without them (`go build ./cmd/ironlb`, `go install`) still names its commit: Go
// records the VCS revision and whether the tree was modified in the binary's build info, which Get
// reads. The release version (the VERSION file, also the image tag and the chart's appVersion) is
// known only when stamped; unstamped binaries say "devel", as Go does for its own untagged builds.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); empty when not stamped.
var (
	version string
	commit  string
)

// Devel is the version of a binary built without the Makefile's stamp.
const Devel = "devel"

// Info is what ironlb knows about its own build. Empty strings mean unknown.
type Info struct {
	Version   string // release version (VERSION file), or Devel
	Commit    string // git commit, with "-dirty" when built from a modified tree
	GoVersion string // toolchain, as runtime.Version reports it
	Platform  string // GOOS/GOARCH
}

// Get returns this binary's Info: the stamped version and commit, else the VCS revision from the
// build info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

// resolve combines the stamped values with the build info (nil when the binary has none).
func resolve(version, commit string, bi *debug.BuildInfo, goVersion, platform string) Info {
	in := Info{Version: version, Commit: commit, GoVersion: goVersion, Platform: platform}
	if in.Version == "" {
		in.Version = Devel
	}
	if in.Commit == "" && bi != nil {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" && dirty {
			rev += "-dirty"
		}
		in.Commit = rev
	}
	return in
}

// String is the one line `ironlb version` and `ironlb --version` print:
//
//	ironlb v0.1.0 (commit 0123abcd..., go1.26.8, linux/amd64)
func (in Info) String() string {
	c := in.Commit
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("ironlb %s (commit %s, %s, %s)", in.Version, c, in.GoVersion, in.Platform)
}
