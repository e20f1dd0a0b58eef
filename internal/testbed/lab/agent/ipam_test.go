package agent

import (
	"errors"
	"maps"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestIPAM(t *testing.T) {
	type step struct {
		op   string // "alloc", "release" or "exhausted"
		addr string // allocated address wanted, or the one to release
	}
	tests := []struct {
		name        string
		prefix      string
		wantPrefix  string
		wantGateway string
		steps       []step
	}{
		{
			name: "node /24: lowest free first, skipping network and gateway", prefix: "10.10.1.0/24",
			wantPrefix: "10.10.1.0/24", wantGateway: "10.10.1.1",
			steps: []step{{"alloc", "10.10.1.2"}, {"alloc", "10.10.1.3"}, {"alloc", "10.10.1.4"}},
		},
		{
			name: "release and reuse lowest", prefix: "10.10.2.0/24",
			wantPrefix: "10.10.2.0/24", wantGateway: "10.10.2.1",
			steps: []step{
				{"alloc", "10.10.2.2"}, {"alloc", "10.10.2.3"}, {"alloc", "10.10.2.4"}, {"alloc", "10.10.2.5"},
				{"release", "10.10.2.3"}, {"release", "10.10.2.2"},
				{"alloc", "10.10.2.2"}, {"alloc", "10.10.2.3"}, {"alloc", "10.10.2.6"},
			},
		},
		{
			name: "releasing a free or foreign address is a no-op", prefix: "10.10.3.0/24",
			wantPrefix: "10.10.3.0/24", wantGateway: "10.10.3.1",
			steps: []step{
				{"release", "10.10.3.2"}, {"release", "192.168.0.1"}, {"release", "10.10.3.1"},
				{"alloc", "10.10.3.2"}, {"release", "10.10.3.9"}, {"alloc", "10.10.3.3"},
			},
		},
		{
			name: "/30 has exactly one pod address", prefix: "10.0.0.0/30",
			wantPrefix: "10.0.0.0/30", wantGateway: "10.0.0.1",
			steps: []step{{"alloc", "10.0.0.2"}, {"exhausted", ""}, {"exhausted", ""}, {"release", "10.0.0.2"}, {"alloc", "10.0.0.2"}},
		},
		{
			name: "/29 never hands out broadcast", prefix: "10.0.0.8/29",
			wantPrefix: "10.0.0.8/29", wantGateway: "10.0.0.9",
			steps: []step{
				{"alloc", "10.0.0.10"}, {"alloc", "10.0.0.11"}, {"alloc", "10.0.0.12"}, {"alloc", "10.0.0.13"},
				{"alloc", "10.0.0.14"}, {"exhausted", ""},
			},
		},
		{name: "/31 has none", prefix: "10.0.0.0/31", wantPrefix: "10.0.0.0/31", wantGateway: "10.0.0.1",
			steps: []step{{"exhausted", ""}}},
		{name: "/32 has none", prefix: "10.0.0.0/32", wantPrefix: "10.0.0.0/32", wantGateway: "10.0.0.1",
			steps: []step{{"exhausted", ""}}},
		{
			name: "host bits are masked", prefix: "10.10.4.77/24",
			wantPrefix: "10.10.4.0/24", wantGateway: "10.10.4.1",
			steps: []step{{"alloc", "10.10.4.2"}},
		},
		{
			name: "IPv6 /64", prefix: "fd00:10:10:1::/64",
			wantPrefix: "fd00:10:10:1::/64", wantGateway: "fd00:10:10:1::1",
			steps: []step{
				{"alloc", "fd00:10:10:1::2"}, {"alloc", "fd00:10:10:1::3"}, {"release", "fd00:10:10:1::2"},
				{"alloc", "fd00:10:10:1::2"}, {"alloc", "fd00:10:10:1::4"},
			},
		},
		{
			name: "IPv6 /64 with host bits", prefix: "fd00:10:10:2::abcd/64",
			wantPrefix: "fd00:10:10:2::/64", wantGateway: "fd00:10:10:2::1",
			steps: []step{{"alloc", "fd00:10:10:2::2"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewIPAM(netip.MustParsePrefix(tt.prefix))
			if got := m.Prefix().String(); got != tt.wantPrefix {
				t.Errorf("Prefix() = %s, want %s", got, tt.wantPrefix)
			}
			if got := m.Gateway().String(); got != tt.wantGateway {
				t.Errorf("Gateway() = %s, want %s", got, tt.wantGateway)
			}
			for i, st := range tt.steps {
				switch st.op {
				case "alloc":
					got, err := m.Allocate()
					if err != nil || got != netip.MustParseAddr(st.addr) {
						t.Fatalf("step %d: Allocate() = %s, %v, want %s", i, got, err, st.addr)
					}
				case "release":
					m.Release(netip.MustParseAddr(st.addr))
				case "exhausted":
					got, err := m.Allocate()
					if !errors.Is(err, ErrExhausted) {
						t.Fatalf("step %d: Allocate() = %s, %v, want ErrExhausted", i, got, err)
					}
					if got.IsValid() {
						t.Errorf("step %d: Allocate() returned %s with ErrExhausted", i, got)
					}
					if !strings.Contains(err.Error(), tt.wantPrefix) {
						t.Errorf("step %d: error %q does not name the prefix %s", i, err, tt.wantPrefix)
					}
				default:
					t.Fatalf("bad op %q", st.op)
				}
			}
		})
	}
}

func TestIPAMFill24(t *testing.T) {
	p := netip.MustParsePrefix("10.10.9.0/24")
	m := NewIPAM(p)
	seen := map[netip.Addr]bool{}
	for i := 0; ; i++ {
		a, err := m.Allocate()
		if errors.Is(err, ErrExhausted) {
			if i != 253 {
				t.Errorf("exhausted after %d addresses, want 253 (.2 to .254)", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 300 {
			t.Fatal("never exhausted")
		}
		if seen[a] || !p.Contains(a) || a == m.Gateway() || a == p.Addr() || a == netip.MustParseAddr("10.10.9.255") {
			t.Fatalf("Allocate() = %s: duplicate, outside %s, network, gateway or broadcast", a, p)
		}
		seen[a] = true
	}
	m.Release(netip.MustParseAddr("10.10.9.128"))
	if a, err := m.Allocate(); err != nil || a != netip.MustParseAddr("10.10.9.128") {
		t.Errorf("after releasing .128 in a full /24: Allocate() = %s, %v", a, err)
	}
}

func TestIPAMAllocateFor(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name string
		used []string // allocated before
		prev string   // the Pod's address from before ("" none)
		held []string // other Pods' addresses from before
		want string   // "" exhausted
	}{
		{name: "keeps its own address", prev: "10.10.1.7", want: "10.10.1.7"},
		{name: "keeps it though others hold lower ones", prev: "10.10.1.7", held: []string{"10.10.1.2", "10.10.1.3"}, want: "10.10.1.7"},
		{name: "no address before: lowest not held", held: []string{"10.10.1.2", "10.10.1.4"}, want: "10.10.1.3"},
		{name: "its address taken meanwhile: lowest free not held", used: []string{"10.10.1.2"}, prev: "10.10.1.2", held: []string{"10.10.1.3"}, want: "10.10.1.4"},
		{name: "address from another CIDR: ignored", prev: "10.10.2.7", want: "10.10.1.2"},
		{name: "the gateway is never kept", prev: "10.10.1.1", want: "10.10.1.2"},
		{name: "the network address is never kept", prev: "10.10.1.0", want: "10.10.1.2"},
		{name: "the broadcast address is never kept", prev: "10.10.1.255", want: "10.10.1.2"},
		{name: "held addresses are not free", held: heldRange(2, 254), want: ""},
		{name: "held but its own: kept", prev: "10.10.1.9", held: []string{"10.10.1.9"}, want: "10.10.1.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewIPAM(netip.MustParsePrefix("10.10.1.0/24"))
			for _, u := range tt.used {
				if got, err := m.AllocateFor(a(u), nil); err != nil || got != a(u) {
					t.Fatalf("setup: AllocateFor(%s) = %s, %v", u, got, err)
				}
			}
			held := map[netip.Addr]bool{}
			for _, h := range tt.held {
				held[a(h)] = true
			}
			var prev netip.Addr
			if tt.prev != "" {
				prev = a(tt.prev)
			}
			got, err := m.AllocateFor(prev, func(x netip.Addr) bool { return held[x] && x != prev })
			if tt.want == "" {
				if !errors.Is(err, ErrExhausted) {
					t.Fatalf("AllocateFor = %s, %v, want ErrExhausted", got, err)
				}
				return
			}
			if err != nil || got != a(tt.want) {
				t.Fatalf("AllocateFor = %s, %v, want %s", got, err, tt.want)
			}
			if again, err := m.AllocateFor(got, nil); err == nil && again == got {
				t.Errorf("%s handed out twice", got)
			}
		})
	}
}

func heldRange(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, netip.AddrFrom4([4]byte{10, 10, 1, byte(i)}).String())
	}
	return out
}

func TestHeldPodIPs(t *testing.T) {
	pod := func(uid, phase string, host bool, ips ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: corev1.PodSpec{HostNetwork: host},
			Status: corev1.PodStatus{Phase: corev1.PodPhase(phase)}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("self", "Running", false, "10.10.1.2"),
		pod("running", "Running", false, "10.10.1.3", "fd00::3"),
		pod("pending-from-before", "Pending", false, "10.10.1.4"),
		pod("done", "Succeeded", false, "10.10.1.5"),
		pod("failed", "Failed", false, "10.10.1.6"),
		pod("host", "Running", true, "172.18.0.3"),
		pod("no-address", "Pending", false),
		pod("garbage", "Running", false, "not-an-ip"),
	}
	got := heldPodIPs(pods, "self")
	want := map[netip.Addr]bool{netip.MustParseAddr("10.10.1.3"): true, netip.MustParseAddr("fd00::3"): true, netip.MustParseAddr("10.10.1.4"): true}
	if !maps.Equal(got, want) {
		t.Errorf("heldPodIPs = %v, want %v", got, want)
	}
}
