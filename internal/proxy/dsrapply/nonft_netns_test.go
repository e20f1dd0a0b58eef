package dsrapply_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftapply"
)

// The proxy writes the DSR table over netlink and never runs nft. The kernel tests check that:
// forbidNFT puts a tripwire named nft first on PATH, which fails the test if anything runs it, and
// the tests read the tables they check with the nft binary found by inspectNFT (by absolute path,
// so they also run, and pass, with no nft on PATH at all).

// inspectNFT returns the path of an nft binary to list tables with, for the test's own checks: the
// one on PATH, or in /usr/sbin or /sbin. It skips the test if there is none.
func inspectNFT(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nft"); err == nil && !strings.Contains(p, os.TempDir()) {
		return p
	}
	for _, p := range []string{"/usr/sbin/nft", "/sbin/nft"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("needs an nft binary to read the tables the test checks")
	return ""
}

// forbidNFT returns inspectNFT's binary, and from then on until the test ends makes PATH's nft a
// script that records that it ran: the test fails if anything ran it.
func forbidNFT(t *testing.T) string {
	t.Helper()
	real := inspectNFT(t)
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	script := "#!/bin/sh\necho \"$@\" >> " + ran + "\necho 'nft must not run' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "nft"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Cleanup(func() {
		if b, err := os.ReadFile(ran); err == nil {
			t.Errorf("nft ran, with arguments:\n%s", b)
		}
	})
	return real
}

// tableIn returns the DSR table's netlink writer bound to network namespace ns (its namespace
// file and socket closed when the test ends).
func tableIn(t *testing.T, ns string) *nftapply.Netlink {
	t.Helper()
	f, err := os.Open(filepath.Join("/var/run/netns", ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	nl, err := dsrapply.NewTable(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nl.Close() })
	return nl
}
