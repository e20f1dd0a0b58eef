package nftapply

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

var nsCounter atomic.Int32

// testNetns creates a throwaway network namespace (removed when the test ends), and points
// PATH's nft at it: knftables runs `nft`, which a wrapper runs inside the namespace
// (netnstest.NFTOnPath). It skips the test unless run as root with nft and ip installed. Tests
// using it cannot run in parallel.
func testNetns(t testing.TB) string {
	t.Helper()
	name := newNetns(t)
	netnstest.NFTOnPath(t, name)
	return name
}

// newNetns creates a throwaway network namespace (removed when the test ends) with loopback up,
// and returns its name. It skips the test unless run as root with nft and ip installed.
func newNetns(t testing.TB) string {
	t.Helper()
	netnstest.Require(t, "nft", "ip")
	if nft, _ := exec.LookPath("nft"); strings.HasPrefix(nft, os.TempDir()) {
		t.Fatal("PATH already points nft at a test namespace")
	}
	name := fmt.Sprintf("ironlb-nfttest-%d-%d", os.Getpid(), nsCounter.Add(1))
	netnstest.Add(t, name)
	nsIP(t, name, "link", "set", "lo", "up")
	return name
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
