package proxy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/nftapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelSync runs syncs of the converted objects into a real kernel, in a throwaway network
// namespace (nft is pointed at it by a wrapper on PATH): what the converter makes of Kubernetes
// objects, nft and the kernel accept, incrementally too. Skipped unless root with nft and ip.
func TestKernelSync(t *testing.T) {
	list, _ := kernelNetns(t)
	s, err := nftapply.NewKernel(nftrules.Config{Family: knftables.IPv4Family})
	if err != nil {
		t.Fatal(err)
	}
	kernelSync(t, s, list)
}

// TestKernelSyncWithoutNFT is TestKernelSync with no nft on PATH: NewKernel still succeeds, and
// every sync goes over netlink (into the namespace).
func TestKernelSyncWithoutNFT(t *testing.T) {
	list, ns := kernelNetns(t)
	t.Setenv("PATH", t.TempDir()) // no nft (nor anything else)
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nl, err := nftapply.NewNetlink(knftables.IPv4Family, int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := nftapply.NewKernel(nftrules.Config{Family: knftables.IPv4Family}, nftapply.WithNetlink(nl))
	if err != nil {
		t.Fatalf("NewKernel without nft: %v", err)
	}
	defer s.Close()
	if st := s.Stats(); st.NFT == nil || st.NetlinkState != nftapply.NetlinkOn {
		t.Fatalf("stats %+v: want no nft, netlink on", st)
	}
	kernelSync(t, s, list)
	if st := s.Stats(); st.Exec != 0 || st.Fallbacks != nil || st.Netlink == 0 {
		t.Errorf("stats %+v: want everything over netlink", st)
	}
}

func kernelSync(t *testing.T, s *nftapply.Syncer, list func() string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, src, cs := newTestProxier(convert.NodePorts{}, s, prometheus.NewRegistry())
	defer src.shutdown()
	defer cancel()
	src.onChange(p.pokeService, p.poke) // as Run does: incremental syncs convert what changed
	if !src.start(ctx) {
		t.Fatal("informers did not sync")
	}
	if err := p.sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	got := list()
	for _, want := range []string{
		"10.96.0.10 . tcp . 80 : goto service-",
		"10.96.0.53 . udp . 53 : goto service-",
		"192.168.1.240 . tcp . 80 : goto external-",
		": 10.244.2.5 . 8080",
		"ip daddr 10.96.0.0/16 drop", // the ServiceCIDR object's network
	} {
		if !strings.Contains(got, want) {
			t.Errorf("kernel table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "10.96.0.30") {
		t.Error("another proxy's Service programmed")
	}

	// Incremental: node-b declared dead, then a Service deleted.
	p.dead["node-b"] = true
	p.setEcho(&fakeEcho{up: map[string]bool{}})
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := list(); strings.Contains(got, ": 10.244.2.5 . 8080") {
		t.Errorf("dead node's endpoint still in the kernel:\n%s", got)
	}
	if err := cs.CoreV1().Services("ns1").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) { // the handler has recorded the change (after the lister)
		p.mu.Lock()
		seen := p.dirty[nftrules.ServiceKey{Namespace: "ns1", Name: "web"}]
		p.mu.Unlock()
		if seen {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := list(); strings.Contains(got, "10.96.0.10 ") {
		t.Errorf("deleted Service still in the kernel:\n%s", got)
	}
}

// kernelNetns creates a throwaway network namespace (removed when the test ends) and points
// PATH's nft at it through a wrapper, so that knftables programs the namespace. It returns a
// function listing ironlb's IPv4 table there. It skips the test unless run as root with nft and
// ip. Tests using it cannot run in parallel.
func kernelNetns(t *testing.T) (list func() string, ns string) {
	t.Helper()
	netnstest.Require(t, "nft", "ip")
	ns = fmt.Sprintf("ironlb-proxytest-%d", os.Getpid())
	netnstest.Add(t, ns)
	nft, _ := exec.LookPath("nft") // the real one, not the wrapper
	ip, _ := exec.LookPath("ip")
	netnstest.NFTOnPath(t, ns)
	return func() string {
		out, err := exec.Command(ip, "netns", "exec", ns, nft, "list", "table", "ip", nftrules.TableName).CombinedOutput()
		if err != nil {
			return "error: " + err.Error() + ": " + string(out)
		}
		return string(out)
	}, ns
}
