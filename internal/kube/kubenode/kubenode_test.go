package kubenode

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestInternalIP(t *testing.T) {
	node := func(addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: addrs}}
	}
	internal := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	for _, tc := range []struct {
		name string
		node *corev1.Node
		v4   bool
		want string // "" : none
	}{
		{"nil node", nil, true, ""},
		{"no addresses", node(), true, ""},
		{"first IPv4", node(internal("fc00::2"), internal("172.18.0.2"), internal("172.18.0.3")), true, "172.18.0.2"},
		{"first IPv6", node(internal("172.18.0.2"), internal("fc00::2")), false, "fc00::2"},
		{"ExternalIP is not internal", node(corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.1"}), true, ""},
		{"unparsable skipped", node(internal("nonsense"), internal("172.18.0.4")), true, "172.18.0.4"},
		{"IPv4-mapped IPv6 counts as IPv4, unmapped", node(internal("::ffff:172.18.0.5")), true, "172.18.0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := InternalIP(tc.node, tc.v4)
			if tc.want == "" {
				if ok {
					t.Fatalf("got %s, want none", got)
				}
				return
			}
			if !ok || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("got %s %v, want %s", got, ok, tc.want)
			}
		})
	}
}

func TestPrimaryInternalIP(t *testing.T) {
	node := func(addrs ...string) *corev1.Node {
		n := &corev1.Node{}
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		return n
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want string // "": none
	}{
		{"nil node", nil, ""},
		{"no addresses", node(), ""},
		{"IPv4 only", node("172.18.0.2"), "172.18.0.2"},
		{"dual stack, IPv6 listed first: IPv4", node("fc00::2", "172.18.0.2"), "172.18.0.2"},
		{"IPv6 only", node("fc00::2", "fc00::3"), "fc00::2"},
		{"unparsable skipped", node("nonsense", "fc00::4"), "fc00::4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := PrimaryInternalIP(tc.node)
			if tc.want == "" {
				if ok {
					t.Fatalf("got %s, want none", got)
				}
				return
			}
			if !ok || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("got %s %v, want %s", got, ok, tc.want)
			}
		})
	}
}

func TestNetworkUnavailable(t *testing.T) {
	cond := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: s}}}}
	}
	if NetworkUnavailable(nil) || NetworkUnavailable(cond(corev1.ConditionFalse)) || !NetworkUnavailable(cond(corev1.ConditionTrue)) {
		t.Error("NetworkUnavailable: want true only for a True condition")
	}
}
