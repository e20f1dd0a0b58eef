package dsrapply_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelWatchLinks: node-a reaches node-b through d0. Setting d0 down deletes the DSR table's
// route to node-b (the kernel's doing), and an Apply while it is down fails ("network is
// unreachable"), as the proxy's sync did in the chaos soak's responder-iface fault. WatchLinks
// says nothing while d0 goes down and calls up as soon as d0 is back (the proxy then syncs at once,
// back-off or not), and the Apply that follows writes the route again. Skipped unless root with ip.
func TestKernelWatchLinks(t *testing.T) {
	netnstest.Require(t, "ip")
	forbidNFT(t)
	ns, in := vethNode(t, "ironlb-dsrlink")
	a, h := applierIn(t, ns)
	d0, err := h.LinkByName("d0")
	if err != nil {
		t.Fatal(err)
	}
	s := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("192.0.2.240")}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Node: "node-b", Ready: true},
		}}}}
	m := &nftrules.Model{Node: nftrules.Node{Name: "node-a"}, Services: map[nftrules.ServiceKey]*nftrules.Service{s.Key(): s}}
	plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: map[string]netip.Addr{
		"node-a": netip.MustParseAddr("192.0.2.10"), "node-b": netip.MustParseAddr("192.0.2.11")}})
	ctx := context.Background()
	if err := a.Apply(ctx, &plan); err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprint(nftrules.DSRTable(plan.Slots["node-b"]))
	if got := in("ip", "route", "show", "table", table); !strings.Contains(got, "default via 192.0.2.11 dev d0") {
		t.Fatalf("table %s: %q", table, got)
	}
	if got := a.RouteLinks(); !slices.Equal(got, []int{d0.Attrs().Index}) {
		t.Errorf("RouteLinks %v, want d0's index %d", got, d0.Attrs().Index)
	}

	nsh, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	ups := make(chan struct{}, 16)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- dsrapply.WatchLinks(wctx, &nsh, a.RouteLinks, func() { ups <- struct{}{} }) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("WatchLinks: %v", err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // subscribed
	drain := func() int {
		n := 0
		for {
			select {
			case <-ups:
				n++
			default:
				return n
			}
		}
	}
	drain()

	in("ip", "link", "set", "d0", "down")
	if got := in("ip", "route", "show", "table", table); strings.Contains(got, "192.0.2.11") {
		t.Fatalf("d0 down, table %s still routes: %q", table, got)
	}
	if err := a.Apply(ctx, &plan); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Apply with d0 down: %v, want network is unreachable", err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := drain(); n != 0 {
		t.Errorf("up called %d times while d0 went down", n)
	}

	in("ip", "link", "set", "d0", "up")
	select {
	case <-ups:
	case <-time.After(3 * time.Second):
		t.Fatal("d0 came up: up not called within 3 s")
	}
	if err := a.Apply(ctx, &plan); err != nil {
		t.Fatalf("Apply after d0 came up: %v", err)
	}
	if got := in("ip", "route", "show", "table", table); !strings.Contains(got, "default via 192.0.2.11 dev d0") {
		t.Errorf("after d0 came up and the sync, table %s: %q", table, got)
	}
}
