package nftapply

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

var nsCounter atomic.Int32

// testNetns creates a throwaway network namespace (removed when the test ends), and points
// PATH's nft at it: knftables runs `nft`, which a wrapper runs inside the namespace. It skips
// the test unless run as root with nft and ip installed. Tests using it cannot run in parallel.
func testNetns(t testing.TB) string {
	t.Helper()
	name, dir := newNetns(t)
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return name
}

// newNetns creates a throwaway network namespace (removed when the test ends) with loopback up,
// and returns its name and a directory holding an nft wrapper that runs inside it. It skips the
// test unless run as root with nft and ip installed.
func newNetns(t testing.TB) (name, nftDir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	nft, err1 := exec.LookPath("nft")
	ip, err2 := exec.LookPath("ip")
	if err1 != nil || err2 != nil {
		t.Skip("needs nft and ip")
	}
	if strings.HasPrefix(nft, os.TempDir()) {
		t.Fatal("PATH already points nft at a test namespace")
	}
	name = fmt.Sprintf("ironlb-nfttest-%d-%d", os.Getpid(), nsCounter.Add(1))
	if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(ip, "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("removing netns %s: %v: %s", name, err, out)
		}
	})
	nftDir = t.TempDir()
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %s netns exec %s %s \"$@\"\n", ip, name, nft)
	if err := os.WriteFile(filepath.Join(nftDir, "nft"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	nsIP(t, name, "link", "set", "lo", "up")
	return name, nftDir
}

// netnsFD opens the namespace for netlink sockets (closed when the test ends, before the
// namespace is removed).
func netnsFD(t testing.TB, ns string) int {
	t.Helper()
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// nsIP runs `ip` inside the namespace.
func nsIP(t testing.TB, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// nsRun runs a command inside the namespace and returns its output.
func nsRun(t testing.TB, ns string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
	return string(out)
}
