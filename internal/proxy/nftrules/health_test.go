package nftrules_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

func TestHealthChecks(t *testing.T) {
	local := svc("ns1", "local", []netip.Addr{a("10.96.0.1")}, ep("10.244.1.5:80", thisNode), ep("10.244.2.5:80", "node-b"),
		ep("[fd00:10:244:1::5]:80", thisNode))
	local.ExternalTrafficPolicyLocal, local.HealthCheckNodePort = true, 31000
	term := svc("ns1", "term", []netip.Addr{a("10.96.0.2")}, terminating(ep("10.244.1.6:80", thisNode), true))
	term.ExternalTrafficPolicyLocal, term.HealthCheckNodePort = true, 31001
	cluster := svc("ns1", "cluster", []netip.Addr{a("10.96.0.3")}, ep("10.244.1.7:80", thisNode))
	got := nftrules.HealthChecks(model(testNode(), local, term, cluster))
	want := []nftrules.HealthCheck{
		{Service: nftrules.ServiceKey{Namespace: "ns1", Name: "local"}, NodePort: 31000, LocalReady: 2},
		{Service: nftrules.ServiceKey{Namespace: "ns1", Name: "term"}, NodePort: 31001, LocalReady: 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
