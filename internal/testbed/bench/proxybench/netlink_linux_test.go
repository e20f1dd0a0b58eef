package proxybench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// kube-proxy's layout in miniature (pkg/proxy/nftables): a service-ips map to a service chain
// that picks one of two endpoint chains.
const miniRuleset = `table ip kube-proxy {
  chain endpoint-AAAAAAAA-bench/svc-1/tcp/__10.10.16.1/80 {
    meta l4proto tcp dnat to 10.10.16.1:80
  }
  chain endpoint-BBBBBBBB-bench/svc-1/tcp/__10.10.16.2/80 {
    meta l4proto tcp dnat to 10.10.16.2:80
  }
  chain service-CCCCCCCC-bench/svc-1/tcp/ {
    numgen random mod 2 vmap { 0 : goto endpoint-AAAAAAAA-bench/svc-1/tcp/__10.10.16.1/80, 1 : goto endpoint-BBBBBBBB-bench/svc-1/tcp/__10.10.16.2/80 }
  }
  map service-ips {
    type ipv4_addr . inet_proto . inet_service : verdict
    elements = { 10.201.0.10 . tcp . 80 : goto service-CCCCCCCC-bench/svc-1/tcp/ }
  }
}
`

// kernelNetns makes a throwaway named network namespace and returns its path and a function
// that runs nft in it with a script on stdin. Skipped unless root with ip and nft.
func kernelNetns(t *testing.T) (path string, nft func(script string)) {
	t.Helper()
	netnstest.Require(t, "ip", "nft")
	ns := fmt.Sprintf("ironlb-proxybenchtest-%d", os.Getpid())
	netnstest.Add(t, ns)
	dir := t.TempDir()
	return "/run/netns/" + ns, func(script string) {
		t.Helper()
		f := filepath.Join(dir, "script.nft")
		if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		netnstest.Run(t, ns, "nft", "-f", f)
	}
}

// TestKernelProbeAndWatch checks the netlink side against a real kernel: the element probe's
// request (key layout, nesting), the chain notifications, and the tables' deletion.
func TestKernelProbeAndWatch(t *testing.T) {
	path, nft := kernelNetns(t)
	key := func(a string) []byte { return ServiceKey(netip.MustParseAddr(a), 80) }
	probe := func(a string) bool {
		t.Helper()
		p, err := NewElementProbe(path, "kube-proxy", serviceIPsMap, key(a))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ok, err := p.Present()
		if err != nil {
			t.Fatalf("Present(%s): %v", a, err)
		}
		return ok
	}
	if probe("10.201.0.10") {
		t.Error("an element of a table that does not exist is present")
	}
	nft(miniRuleset)
	if !probe("10.201.0.10") {
		t.Error("10.201.0.10 . tcp . 80 is not present")
	}
	if probe("10.201.0.11") {
		t.Error("10.201.0.11 . tcp . 80 is present")
	}
	// The same probe asked again and again (one socket, no stale acknowledgements).
	p, err := NewElementProbe(path, "kube-proxy", serviceIPsMap, key("10.201.0.10"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if ok, err := p.Present(); !ok || err != nil {
			t.Fatalf("probe %d: %v, %v", i, ok, err)
		}
	}
	p.Close()

	w, err := WatchChains(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t0 := time.Now()
	marker := EndpointMarker(netip.MustParseAddrPort("10.10.255.1:80"))
	nft(`add chain ip kube-proxy endpoint-DDDDDDDD-bench/svc-1/tcp/__10.10.255.1/80
add rule ip kube-proxy endpoint-DDDDDDDD-bench/svc-1/tcp/__10.10.255.1/80 meta l4proto tcp dnat to 10.10.255.1:80
flush chain ip kube-proxy service-CCCCCCCC-bench/svc-1/tcp/
add rule ip kube-proxy service-CCCCCCCC-bench/svc-1/tcp/ numgen random mod 2 vmap { 0 : goto endpoint-DDDDDDDD-bench/svc-1/tcp/__10.10.255.1/80, 1 : goto endpoint-BBBBBBBB-bench/svc-1/tcp/__10.10.16.2/80 }
`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at, err := w.WaitFor(ctx, "kube-proxy", marker, t0, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if at.Before(t0) || time.Since(at) > 5*time.Second {
		t.Errorf("event at %v, change at %v", at, t0)
	}
	if _, err := w.WaitFor(ctx, "ironlb", marker, t0, 100*time.Millisecond); err == nil {
		t.Error("an event in another table matched")
	}

	if err := deleteTables(path, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	if probe("10.201.0.10") {
		t.Error("the element outlived its table")
	}
	if err := deleteTables(path, "kube-proxy"); err != nil {
		t.Errorf("deleting tables that are not there: %v", err)
	}
}
