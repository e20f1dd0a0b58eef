package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestCleanupWithoutNFT: `ironlb proxy --cleanup` deletes both families' tables, the DSR table, the
// SYN table and the DSR policy rules and routes with no nft (nor anything else) on PATH, in a throwaway network
// namespace. Skipped unless root with ip (and an nft binary to check the tables with, on PATH or in
// /usr/sbin: the test also runs, and passes, with no nft on PATH).
func TestCleanupWithoutNFT(t *testing.T) {
	netnstest.Require(t, "ip")
	ipPath, _ := exec.LookPath("ip")
	nftPath, err := exec.LookPath("nft") // to check the tables with; not for the code under test
	if err != nil {
		if _, err := os.Stat("/usr/sbin/nft"); err != nil {
			t.Skip("needs an nft binary to check the tables with")
		}
		nftPath = "/usr/sbin/nft"
	}
	ns := fmt.Sprintf("ironlb-cleanuptest-%d", os.Getpid())
	netnstest.Add(t, ns)
	netnstest.Run(t, ns, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	netnstest.Run(t, ns, "ip", "link", "set", "d1", "up")
	netnstest.Run(t, ns, "ip", "addr", "add", "192.0.2.10/24", "dev", "d0")
	netnstest.Run(t, ns, "ip", "link", "set", "d0", "up")
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Setenv("PATH", t.TempDir()) // no nft, nor anything else, from here on
	ctx := context.Background()

	// What a proxy leaves: both families' tables, the DSR and SYN tables, a DSR policy rule and
	// route.
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		nl, err := nftapply.NewNetlink(fam, int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		s, err := nftapply.NewKernel(nftrules.Config{Family: fam}, nftapply.WithNetlink(nl))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sync(ctx, &nftrules.Model{Services: map[nftrules.ServiceKey]*nftrules.Service{}}, true); err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		s.Close()
	}
	nsh, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	table, err := dsrapply.NewTable(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	syn, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer syn.CloseLasting()
	a := dsrapply.New(table, h, func(string, string) error { return nil }).WithSYNTable(syn)
	web := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("192.0.2.240")}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Node: "node-b", Ready: true}}}}}
	plan := nftrules.PlanDSR(&nftrules.Model{Node: nftrules.Node{Name: "node-a"}, Services: map[nftrules.ServiceKey]*nftrules.Service{web.Key(): web}},
		nftrules.DSRConfig{NodeIPs: map[string]netip.Addr{"node-a": netip.MustParseAddr("192.0.2.10"), "node-b": netip.MustParseAddr("192.0.2.11")}})
	if err := a.Apply(ctx, &plan); err != nil {
		t.Fatal(err)
	}
	in := func(path string, args ...string) string {
		out, err := exec.Command(ipPath, append([]string{"netns", "exec", ns, path}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", path, args, err, out)
		}
		return string(out)
	}
	tables := in(nftPath, "list", "tables")
	for _, want := range []string{"table ip " + nftrules.TableName, "table ip6 " + nftrules.TableName, "table ip " + nftrules.DSRTableName,
		"table ip " + nftrules.DSRSYNTableName} {
		if !strings.Contains(tables, want) {
			t.Fatalf("before cleanup, no %q:\n%s", want, tables)
		}
	}
	if rules := in(ipPath, "rule", "show"); !strings.Contains(rules, "fwmark") {
		t.Fatalf("before cleanup, no DSR policy rule:\n%s", rules)
	}

	netnstest.Do(t, ns, func() error { return cleanup(ctx, slog.New(slog.DiscardHandler)) })
	if got := in(nftPath, "list", "tables"); strings.TrimSpace(got) != "" {
		t.Errorf("tables left after cleanup:\n%s", got)
	}
	if got := in(ipPath, "rule", "show"); strings.Contains(got, "fwmark") {
		t.Errorf("policy rules left after cleanup:\n%s", got)
	}
	if got := in(ipPath, "route", "show", "table", "all"); strings.Contains(got, "192.0.2.11") {
		t.Errorf("routes left after cleanup:\n%s", got)
	}
	// A second cleanup finds nothing, and that is not an error.
	netnstest.Do(t, ns, func() error { return cleanup(ctx, slog.New(slog.DiscardHandler)) })
}
