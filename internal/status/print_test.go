package status

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// sample has one address of each mode, a dual-stack pool with a /64, an invalid pool and a pending
// Service with an event.
func sample() Report {
	bad := pool("bad", "10.0.0.0/24")
	bad.CreationTimestamp = metav1.NewTime(t0) // newer than v6: it loses the overlap
	return Build(Input{Namespace: ns, SessionsServed: true,
		Pools:             []v1beta1.IPAddressPool{pool("l2", "172.18.255.200-172.18.255.250"), pool("v6", "10.0.0.0/30", "fd00::/64"), bad},
		L2Advertisements:  []v1beta1.L2Advertisement{l2ad("l2", "l2")},
		BGPAdvertisements: []v1beta1.BGPAdvertisement{bgpad("v6", "v6")},
		BGPPeers:          []v1beta2.BGPPeer{peer("router", "172.18.0.1")},
		Services: []corev1.Service{svc("svc1", 0, "172.18.255.200"), svc("web", 1, "10.0.0.1", "fd00::1"),
			svc("svc4", 2), svc("svc5", 3, "192.0.2.1")},
		L2Statuses:  []v1beta1.ServiceL2Status{l2status("svc1", "myk8s-worker", "eth0")},
		BGPStatuses: []v1beta1.ServiceBGPStatus{bgpstatus("web", "node-a", "router"), bgpstatus("web", "node-b", "router")},
		Sessions:    []Session{{Node: "node-a", Peer: "172.18.0.1", BGP: "Established", BFD: "up"}, {Node: "node-b", Peer: "172.18.0.1", BGP: "Active", BFD: "down"}},
		Events:      []corev1.Event{warning("svc4", "uid-svc4", ControllerComponent, "AllocationFailed", "Failed to allocate IP for \"default/svc4\":\nPoolExhausted", 7)},
	})
}

func TestWriteTable(t *testing.T) {
	tests := []struct{ format, want string }{
		{OutputTable, `ADDRESS         SERVICE       POOL  MODE    NODES          PEERS
10.0.0.1        default/web   v6    bgp     node-a,node-b  router(Established 1/2)
172.18.255.200  default/svc1  l2    layer2  myk8s-worker   -
192.0.2.1       default/svc5  -     none    -              -
fd00::1         default/web   v6    bgp     node-a,node-b  router(Established 1/2)

POOL  FAMILY  SIZE  USED  FREE   STATUS
bad   -       -     -     -      invalid: range 10.0.0.0/24 overlaps 10.0.0.0/30 of ipaddresspool v6
l2    IPv4    51    1     50     ok
v6    IPv4    4     1     3      ok
v6    IPv6    2^64  1     ~2^64  ok

PENDING       REASON            MESSAGE
default/svc4  AllocationFailed  Failed to allocate IP for "default/svc4": PoolExhausted
`},
		{OutputWide, `ADDRESS         SERVICE       POOL  MODE    NODES          INTERFACES         PEERS
10.0.0.1        default/web   v6    bgp     node-a,node-b  -                  node-a/router=Established,bfd:up node-b/router=Active,bfd:down
172.18.255.200  default/svc1  l2    layer2  myk8s-worker   myk8s-worker:eth0  -
192.0.2.1       default/svc5  -     none    -              -                  -
fd00::1         default/web   v6    bgp     node-a,node-b  -                  node-a/router=Established,bfd:up node-b/router=Active,bfd:down

POOL  FAMILY  SIZE  USED  FREE   STATUS                                                               AUTO-ASSIGN  ADDRESSES
bad   -       -     -     -      invalid: range 10.0.0.0/24 overlaps 10.0.0.0/30 of ipaddresspool v6  true         10.0.0.0/24
l2    IPv4    51    1     50     ok                                                                   true         172.18.255.200-172.18.255.250
v6    IPv4    4     1     3      ok                                                                   true         10.0.0.0/30,fd00::/64
v6    IPv6    2^64  1     ~2^64  ok                                                                   true         10.0.0.0/30,fd00::/64

PENDING       REASON            SOURCE  SINCE                 MESSAGE
default/svc4  AllocationFailed  event   2026-01-02T03:04:12Z  Failed to allocate IP for "default/svc4": PoolExhausted
`},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, sample(), tt.format); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	var b bytes.Buffer
	if err := Write(&b, Report{}, ""); err != nil {
		t.Fatal(err)
	}
	if want := "No LoadBalancer Service has an address.\n\nNo IPAddressPool.\n"; b.String() != want {
		t.Errorf("empty report: got %q, want %q", b.String(), want)
	}
	if err := Write(&b, Report{}, "xml"); err == nil || !strings.Contains(err.Error(), "json") {
		t.Errorf("unknown format: got %v, want an error listing the formats", err)
	}
}

// TestWriteJSONYAML checks that JSON and YAML carry the same report, with huge counts exact.
func TestWriteJSONYAML(t *testing.T) {
	var j, y bytes.Buffer
	if err := Write(&j, sample(), OutputJSON); err != nil {
		t.Fatal(err)
	}
	if err := Write(&y, sample(), OutputYAML); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Addresses []struct {
			IP, Service, Mode string
			BGPNodes          []struct {
				Node  string
				Peers []struct{ Name, BGPState, BFDState string }
			}
		}
		Pools []struct {
			Name string
			IPv6 *struct{ Size, Used, Free json.Number }
		}
		Pending []struct{ Service, Reason, Source string }
	}
	dec := json.NewDecoder(&j)
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v\n%s", err, j.String())
	}
	if len(got.Addresses) != 4 || got.Addresses[0].IP != "10.0.0.1" || got.Addresses[0].Mode != "bgp" ||
		got.Addresses[0].BGPNodes[1].Peers[0].BGPState != "Active" || got.Addresses[0].BGPNodes[0].Peers[0].BFDState != "up" {
		t.Errorf("addresses: %+v", got.Addresses)
	}
	v6 := got.Pools[2].IPv6
	if got.Pools[2].Name != "v6" || v6 == nil || v6.Size != "18446744073709551616" || v6.Used != "1" || v6.Free != "18446744073709551615" {
		t.Errorf("pool v6 counts: %+v", v6)
	}
	if len(got.Pending) != 1 || got.Pending[0].Reason != "AllocationFailed" || got.Pending[0].Source != SourceEvent {
		t.Errorf("pending: %+v", got.Pending)
	}
	for _, want := range []string{"\n    ipv6:\n      size: 18446744073709551616\n      used: 1\n      free: 18446744073709551615\n",
		"\n  - ip: 10.0.0.1\n    service: default/web\n", "\n            bgpState: Established\n", "reason: AllocationFailed\n"} {
		if !strings.Contains(y.String(), want) {
			t.Errorf("YAML lacks %q:\n%s", want, y.String())
		}
	}
}
