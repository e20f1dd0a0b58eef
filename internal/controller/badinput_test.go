package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
)

// TestBadInput applies every kind of invalid object a user can write, one row each, to a real
// kube-apiserver with the CRDs, ironlb's ValidatingWebhookConfiguration (config/controller, pointed
// at the test's webhook) and a running controller, and asserts the exact outcome: refused at
// admission with a message naming the fault (by the CRD schema or by the webhook), or accepted
// with a specific event, status or speaker error. Throughout, a healthy Service keeps its address
// (a watch sees every change of it), gets no failure event, and the controller keeps running.
func TestBadInput(t *testing.T) {
	h := newHarness(t)
	// A node, for BGPAdvertisements' nodeSelectors (the webhook reads the nodes' labels).
	// Its address and pod CIDR are what pools must not hold (the controller warns).
	node, err := h.cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Labels: map[string]string{"rack": "a"}}, Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}
	if _, err := h.cs.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubernetesSvc, err := h.cs.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiIP := kubernetesSvc.Spec.ClusterIP
	// The apiserver's addresses, as its endpoint reconciler would publish them (the test's apiserver
	// runs with --endpoint-reconciler-type=none): one on node-a, one on no node.
	if _, err := h.cs.DiscoveryV1().EndpointSlices("default").Create(context.Background(), &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"172.18.0.2"}}, {Addresses: []string{"172.18.0.100"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Secrets BGPPeers' passwordSecret may name that hold no password MetalLB reads.
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "bgp-opaque", Namespace: ns}, Type: corev1.SecretTypeOpaque, StringData: map[string]string{"password": "s3cret"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bgp-nokey", Namespace: ns}, Type: corev1.SecretTypeBasicAuth, StringData: map[string]string{"username": "ironlb"}},
	} {
		if _, err := h.cs.CoreV1().Secrets(ns).Create(context.Background(), sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.installWebhookConfig()
	done := h.startWithWebhook()
	h.waitWebhook() // pools are refused while it is down (failurePolicy Fail)
	h.apply(pool("main", "172.18.255.200-172.18.255.250"))
	h.apply(pool("tiny", "10.60.0.1/32"))
	h.apply(poolYAML("avoid", ns, `["10.61.0.0/24"]`, "  avoidBuggyIPs: true\n  autoAssign: false\n")) // only asked for by address
	h.apply(poolYAML("pinned", ns, `["10.62.0.0/28"]`, "  serviceAllocation:\n    namespaces: [team-a]\n"))
	// A BGPPeer rows may duplicate (speakerErrors builds every BGPPeer row beside it).
	h.apply(peerYAML("r-base", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.253\n"))
	// Objects rows are checked against: the alias gold, and an advertisement of pool tiny with
	// localPref 100 (advertisement rows name a pool, so that they do not all clash with it).
	h.apply(metallbYAML("v1beta1", "Community", "base", ns, "  communities: [{name: gold, value: \"65000:1\"}]\n"))
	h.apply(metallbYAML("v1beta1", "BGPAdvertisement", "lp-base", ns, "  ipAddressPools: [tiny]\n  localPref: 100\n"))

	// The healthy Service holds .200 and shares it (key "web", TCP/80): rows ask for its address.
	h.createService("healthy", func(s *corev1.Service) {
		s.Annotations = map[string]string{"metallb.io/allow-shared-ip": "web", "metallb.io/loadBalancerIPs": "172.18.255.200"}
	})
	h.waitIP("healthy", "172.18.255.200")
	h.createService("tiny-holder", func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/address-pool": "tiny"} })
	h.waitIP("tiny-holder", "10.60.0.1")
	// A Local Service sharing .210 (key "loc"): Local sharers must select the same pods.
	h.createService("local-holder", func(s *corev1.Service) {
		s.Annotations = map[string]string{"metallb.io/allow-shared-ip": "loc", "metallb.io/loadBalancerIPs": "172.18.255.210"}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	h.waitIP("local-holder", "172.18.255.210")
	guard := h.guardIP("healthy", "172.18.255.200")

	type row struct {
		name string
		yaml string
		// refused: a substring of kubectl's error ("" = the object must be accepted).
		refused string
		// For accepted Services: the event (reason, message substring) on the object, and the
		// address it gets ("" = none is checked).
		reason, event, ip string
		// For accepted configuration objects: a jsonpath of the stored object and the value it must
		// reach (the controller's status).
		path, want string
		// For accepted BGP objects (BGPPeer, BGPAdvertisement, Community, BFDProfile): a substring
		// of the error the speakers' bgpconfig.Build gives on the object as stored (their
		// InvalidConfiguration event message); "-" = no error.
		speaker string
	}
	rows := []row{
		// IPAddressPools.
		{name: "pool: malformed CIDR", yaml: poolYAML("NAME", ns, `["172.18.300.0/24"]`, ""), refused: "each address must be a CIDR prefix"},
		{name: "pool: prefix length 33", yaml: poolYAML("NAME", ns, `["172.18.10.0/33"]`, ""), refused: "each address must be a CIDR prefix"},
		{name: "pool: bare address", yaml: poolYAML("NAME", ns, `["172.18.10.1"]`, ""), refused: "each address must be a CIDR prefix"},
		{name: "pool: reversed range", yaml: poolYAML("NAME", ns, `["172.18.10.9-172.18.10.1"]`, ""),
			refused: `ipaddresspool NAME: addresses: invalid range "172.18.10.9-172.18.10.1": start 172.18.10.9 is after end 172.18.10.1`},
		{name: "pool: range across families", yaml: poolYAML("NAME", ns, `["172.18.10.1-fd00::1"]`, ""), refused: "of the same IP family"},
		{name: "pool: IPv4-mapped IPv6 CIDR", yaml: poolYAML("NAME", ns, `["::ffff:172.18.10.0/120"]`, ""), refused: "each address must be a CIDR prefix"},
		{name: "pool: IPv4-mapped IPv6 range", yaml: poolYAML("NAME", ns, `["::ffff:172.18.10.1-::ffff:172.18.10.9"]`, ""), refused: "each address must be a CIDR prefix"},
		{name: "pool: no addresses", yaml: poolYAML("NAME", ns, `[]`, ""), refused: "spec.addresses: Invalid value: 0: spec.addresses in body should have at least 1 items"},
		{name: "pool: empty address", yaml: poolYAML("NAME", ns, `[""]`, ""), refused: "each address must be a CIDR prefix"},
		{name: "pool: overlaps another pool", yaml: poolYAML("NAME", ns, `["172.18.255.240/28"]`, ""),
			refused: "ipaddresspool NAME: range 172.18.255.240/28 overlaps 172.18.255.200-172.18.255.250 of ipaddresspool main"},
		{name: "pool: overlaps itself", yaml: poolYAML("NAME", ns, `["172.18.10.0/24", "172.18.10.7-172.18.10.9"]`, ""),
			refused: "172.18.10.0/24 overlaps 172.18.10.7-172.18.10.9 in the same pool"},
		{name: "pool: outside the configuration namespace", yaml: poolYAML("NAME", "default", `["172.18.10.0/24"]`, ""),
			refused: `ipaddresspool NAME: must be created in namespace metallb-system, the only one ironlb reads (not "default")`},
		{name: "pool: namespace listed twice", yaml: poolYAML("NAME", ns, `["172.18.10.0/24"]`, "  serviceAllocation:\n    namespaces: [a, a]\n"),
			refused: `serviceAllocation.namespaces: "a" is listed twice`},
		{name: "pool: bad namespaceSelector", yaml: poolYAML("NAME", ns, `["172.18.10.0/24"]`,
			"  serviceAllocation:\n    namespaceSelectors:\n    - matchExpressions: [{key: team, operator: Near, values: [a]}]\n"),
			refused: `serviceAllocation.namespaceSelectors[0]: invalid label selector: "Near" is not a valid label selector operator`},
		{name: "pool: serviceSelector listed twice (MetalLB: duplicate definition)", yaml: poolYAML("NAME", ns, `["172.18.10.0/24"]`,
			"  serviceAllocation:\n    serviceSelectors:\n    - matchLabels: {app: b}\n    - matchLabels: {app: b}\n"),
			refused: `serviceAllocation.serviceSelectors[1]: listed twice: same as [0] (app=b)`},
		{name: "pool: namespaceSelector listed twice, values reordered", yaml: poolYAML("NAME", ns, `["172.18.10.0/24"]`,
			"  serviceAllocation:\n    namespaceSelectors:\n    - matchExpressions: [{key: team, operator: In, values: [a, b]}]\n    - matchExpressions: [{key: team, operator: In, values: [b, a]}]\n"),
			refused: `serviceAllocation.namespaceSelectors[1]: listed twice: same as [0]`},
		{name: "pool: negative priority", yaml: poolYAML("NAME", ns, `["172.18.10.0/24"]`, "  serviceAllocation:\n    priority: -1\n"),
			refused: "serviceAllocation.priority -1: must not be negative"},
		{name: "pool: unknown field", yaml: poolYAML("NAME", ns, `["172.18.10.0/24"]`, "  autoassign: false\n"), refused: `unknown field "spec.autoassign"`},
		{name: "pool: valid, beside the others", yaml: poolYAML("NAME", ns, `["172.18.10.0/24"]`, ""),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded"},
		// MetalLB does not check pools against the cluster's own addresses; ironlb accepts them too
		// (configurations keep working) and warns on the pool, once per change.
		{name: "pool: holds a node's address", yaml: poolYAML("NAME", ns, `["172.18.0.0/28"]`, ""),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded",
			reason: "ConfigurationWarning", event: "the pool holds 172.18.0.2, an address of node node-a"},
		{name: "pool: overlaps a pod CIDR", yaml: poolYAML("NAME", ns, `["10.244.0.128-10.244.0.140"]`, ""),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded",
			reason: "ConfigurationWarning", event: "the pool overlaps 10.244.0.0/24, the pod CIDR of node node-a"},
		// The Service CIDR as a whole, from the ServiceCIDR the apiserver makes of its
		// --service-cluster-ip-range (10.96.0.0/16,fd00:10:96::/112).
		{name: "pool: holds the kubernetes Service's address (in ServiceCIDR kubernetes)", yaml: poolYAML("NAME", ns, `["`+apiIP+`/32"]`, ""),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded",
			reason: "ConfigurationWarning", event: "the pool overlaps 10.96.0.0/16, the Service CIDR (ServiceCIDR kubernetes)"},
		{name: "pool: overlaps the Service CIDR, not the kubernetes Service's address", yaml: poolYAML("NAME", ns, `["10.96.200.0/24"]`, ""),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded",
			reason: "ConfigurationWarning", event: "the pool overlaps 10.96.0.0/16, the Service CIDR (ServiceCIDR kubernetes)"},
		{name: "pool: overlaps the IPv6 Service CIDR", yaml: poolYAML("NAME", ns, `["fd00:10:96::/120"]`, ""),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded",
			reason: "ConfigurationWarning", event: "the pool overlaps fd00:10:96::/112, the Service CIDR (ServiceCIDR kubernetes)"},
		{name: "pool: holds the apiserver's address, not a node's", yaml: poolYAML("NAME", ns, `["172.18.0.96/29"]`, ""),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded",
			reason: "ConfigurationWarning", event: "the pool holds 172.18.0.100, an address of the apiserver (an endpoint of the kubernetes Service)"},
		// MetalLB accepts avoidBuggyIPs on an IPv6 pool and ignores it; ironlb too, with a warning.
		{name: "pool: IPv6 with avoidBuggyIPs", yaml: poolYAML("NAME", ns, `["fd00:61::/120"]`, "  avoidBuggyIPs: true\n"),
			path: `{.status.conditions[?(@.type=="Valid")].reason}`, want: "Loaded",
			reason: "ConfigurationWarning", event: "avoidBuggyIPs has no effect: the pool has no IPv4 range"},

		// L2Advertisements: MetalLB's refusals, and interface names no host can have. Pools named
		// need not exist (accepted as MetalLB does: the pool may come later; they select nothing,
		// and no Service is disturbed).
		{name: "l2advertisement: missing pool", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns, "  ipAddressPools: [missing]\n")},
		{name: "l2advertisement: valid", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns,
			"  ipAddressPools: [main]\n  interfaces: [eth0, bond0.100]\n  nodeSelectors:\n  - matchLabels: {rack: a}\n")},
		{name: "l2advertisement: outside the configuration namespace", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", "default", "  ipAddressPools: [main]\n"),
			refused: `l2advertisement NAME: must be created in namespace metallb-system, the only one ironlb reads (not "default")`},
		{name: "l2advertisement: pool listed twice", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns, "  ipAddressPools: [main, main]\n"),
			refused: `L2Advertisement NAME: spec.ipAddressPools[1]: listed twice: "main" is also [0]`},
		{name: "l2advertisement: bad nodeSelector", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns,
			"  nodeSelectors:\n  - matchExpressions: [{key: rack, operator: Near, values: [a]}]\n"),
			refused: `L2Advertisement NAME: spec.nodeSelectors[0]: invalid label selector: "Near" is not a valid label selector operator`},
		{name: "l2advertisement: bad ipAddressPoolSelector", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns,
			"  ipAddressPoolSelectors:\n  - matchLabels: {team: \"a b\"}\n"),
			refused: "L2Advertisement NAME: spec.ipAddressPoolSelectors[0]: invalid label selector"},
		{name: "l2advertisement: nodeSelector twice", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns,
			"  nodeSelectors:\n  - matchLabels: {rack: a}\n  - matchLabels: {rack: a}\n"),
			refused: "L2Advertisement NAME: spec.nodeSelectors[1]: listed twice: same as [0] (rack=a)"},
		{name: "l2advertisement: interface name too long", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns, "  interfaces: [eth0, averyverylongname]\n"),
			refused: `L2Advertisement NAME: spec.interfaces[1]: invalid interface name: "averyverylongname" is longer than 15 bytes`},
		{name: "l2advertisement: interface name with a slash", yaml: metallbYAML("v1beta1", "L2Advertisement", "NAME", ns, "  interfaces: [eth0/1]\n"),
			refused: `L2Advertisement NAME: spec.interfaces[0]: invalid interface name: "eth0/1" contains '/', ':' or white space`},

		// BGPAdvertisements: MetalLB's refusals and the speakers' (bgpconfig.Build). Pools, peers
		// and alias names need not exist (they may come later; the speakers report missing aliases).
		{name: "bgpadvertisement: missing pool", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  ipAddressPools: [missing]\n"), speaker: "-"},
		{name: "bgpadvertisement: valid, every form of community", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns,
			"  ipAddressPools: [main]\n  communities: [\"65535:65282\", \"large:1:2:3\", gold]\n  peers: [r1]\n  localPref: 50\n")},
		{name: "bgpadvertisement: unknown alias (may come later)", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns,
			"  ipAddressPools: [main]\n  communities: [silver]\n"),
			speaker: `BGPAdvertisement NAME: spec.communities[0]: unknown community alias: "silver" is neither a community nor a Community alias`},
		{name: "bgpadvertisement: outside the configuration namespace", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", "default", "  ipAddressPools: [main]\n"),
			refused: "bgpadvertisement NAME: must be created in namespace metallb-system"},
		{name: "bgpadvertisement: community out of range", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  communities: [\"70000:1\"]\n"),
			refused: `BGPAdvertisement NAME: spec.communities[0]: invalid community: "70000:1": "70000" does not fit in 16 bits`},
		{name: "bgpadvertisement: large community out of range", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  communities: [\"large:1:2:4294967296\"]\n"),
			refused: `BGPAdvertisement NAME: spec.communities[0]: invalid community: "large:1:2:4294967296"`},
		{name: "bgpadvertisement: community of three fields", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  communities: [\"1:2:3\"]\n"),
			refused: `BGPAdvertisement NAME: spec.communities[0]: unknown community alias: "1:2:3" is neither a community nor a Community alias`},
		{name: "bgpadvertisement: community listed twice", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  communities: [\"65000:1\", \"65000:1\"]\n"),
			refused: `BGPAdvertisement NAME: spec.communities[1]: listed twice: "65000:1" is also [0]`},
		{name: "bgpadvertisement: peer listed twice", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  ipAddressPools: [main]\n  peers: [r1, r1]\n"),
			refused: `BGPAdvertisement NAME: spec.peers[1]: listed twice: "r1" is also [0]`},
		{name: "bgpadvertisement: aggregationLength 33", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  aggregationLength: 33\n"),
			refused: "BGPAdvertisement NAME: spec.aggregationLength: invalid aggregation length: 33 is not within 1–32"},
		{name: "bgpadvertisement: aggregationLength 0", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  aggregationLength: 0\n"),
			refused: "spec.aggregationLength in body should be greater than or equal to 1"},
		{name: "bgpadvertisement: aggregationLengthV6 129", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  aggregationLengthV6: 129\n"),
			refused: "BGPAdvertisement NAME: spec.aggregationLengthV6: invalid aggregation length: 129 is not within 1–128"},
		{name: "bgpadvertisement: aggregationLength shorter than the pool's prefix", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns,
			"  ipAddressPools: [tiny]\n  aggregationLength: 24\n  localPref: 100\n"),
			refused: `BGPAdvertisement NAME: spec.aggregationLength: invalid aggregation length: /24 is shorter than prefix 10.60.0.1/32 of pool "tiny"`},
		{name: "bgpadvertisement: aggregation with serviceSelectors", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns,
			"  ipAddressPools: [missing]\n  aggregationLength: 24\n  serviceSelectors:\n  - matchLabels: {app: web}\n"),
			refused: "spec: Invalid value: serviceSelectors cannot be used with an aggregationLength other than 32 or an aggregationLengthV6 other than 128"}, // CEL in the CRD
		{name: "bgpadvertisement: bad nodeSelector", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns,
			"  ipAddressPools: [main]\n  nodeSelectors:\n  - matchExpressions: [{key: rack, operator: In}]\n"),
			refused: "BGPAdvertisement NAME: spec.nodeSelectors[0]: invalid label selector"},
		{name: "bgpadvertisement: localPref differs on the same update", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns, "  ipAddressPools: [tiny]\n  localPref: 200\n"),
			refused: `BGPAdvertisement NAME: spec.localPref: conflicting localPref: 200, but BGPAdvertisement lp-base gives pool "tiny"'s prefixes, aggregated alike, to the same peers from node node-a with localPref 100`},
		{name: "bgpadvertisement: localPref differs, from other nodes", yaml: metallbYAML("v1beta1", "BGPAdvertisement", "NAME", ns,
			"  ipAddressPools: [tiny]\n  localPref: 200\n  nodeSelectors:\n  - matchLabels: {rack: b}\n"), speaker: "-"},

		// Communities: values the speakers parse, alias names defined once across all of them.
		{name: "community: valid", yaml: metallbYAML("v1beta1", "Community", "NAME", ns, "  communities: [{name: bronze, value: \"65000:3\"}, {name: big, value: \"large:64512:1:2\"}]\n"),
			speaker: "-"},
		{name: "community: outside the configuration namespace", yaml: metallbYAML("v1beta1", "Community", "NAME", "default", "  communities: [{name: bronze, value: \"65000:3\"}]\n"),
			refused: "community NAME: must be created in namespace metallb-system"},
		{name: "community: value out of range", yaml: metallbYAML("v1beta1", "Community", "NAME", ns, "  communities: [{name: bronze, value: \"65536:1\"}]\n"),
			refused: `Community NAME: spec.communities[0]: invalid community: "65536:1": "65536" does not fit in 16 bits`},
		{name: "community: value not a community", yaml: metallbYAML("v1beta1", "Community", "NAME", ns, "  communities: [{name: bronze, value: gold}]\n"),
			refused: `Community NAME: spec.communities[0]: unknown community alias: "gold": not of the form AS:value or large:global:local1:local2`},
		{name: "community: alias without a name", yaml: metallbYAML("v1beta1", "Community", "NAME", ns, "  communities: [{value: \"65000:3\"}]\n"),
			refused: "Community NAME: spec.communities[0]: unknown community alias: alias without a name"},
		{name: "community: name twice", yaml: metallbYAML("v1beta1", "Community", "NAME", ns, "  communities: [{name: x, value: \"1:1\"}, {name: x, value: \"1:2\"}]\n"),
			refused: `Community NAME: spec.communities[1]: conflict: alias "x" is defined twice`},
		{name: "community: name another Community defines", yaml: metallbYAML("v1beta1", "Community", "NAME", ns, "  communities: [{name: gold, value: \"65000:9\"}]\n"),
			refused: `Community NAME: spec.communities[0]: conflict: alias "gold" is already defined by Community base`},

		// BFDProfiles: the schema refuses values out of MetalLB's ranges (the webhook would too).
		{name: "bfdprofile: valid", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  receiveInterval: 50\n  transmitInterval: 50\n  detectMultiplier: 3\n"), speaker: "-"},
		{name: "bfdprofile: outside the configuration namespace", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", "default", "  detectMultiplier: 3\n"),
			refused: "bfdprofile NAME: must be created in namespace metallb-system"},
		{name: "bfdprofile: receiveInterval 5", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  receiveInterval: 5\n"),
			refused: "spec.receiveInterval in body should be greater than or equal to 10"},
		{name: "bfdprofile: transmitInterval 60001", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  transmitInterval: 60001\n"),
			refused: "spec.transmitInterval in body should be less than or equal to 60000"},
		{name: "bfdprofile: detectMultiplier 1", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  detectMultiplier: 1\n"),
			refused: "spec.detectMultiplier in body should be greater than or equal to 2"},
		{name: "bfdprofile: echoInterval 9", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  echoInterval: 9\n"),
			refused: "spec.echoInterval in body should be greater than or equal to 10"},
		{name: "bfdprofile: minimumTtl 0", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  minimumTtl: 0\n"),
			refused: "spec.minimumTtl in body should be greater than or equal to 1"},

		// MetalLB fields ironlb does not implement: refused by the webhook, never silently ignored
		// (config.UnsupportedBFDFields, UnsupportedPeerFields; docs/install.md says why).
		{name: "bfdprofile: echoMode true (no echo function)", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  echoMode: true\n"),
			refused: "BFDProfile NAME: spec.echoMode: not supported: ironlb's BFD has no echo function"},
		{name: "bfdprofile: echoMode false (what ironlb does)", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  echoMode: false\n"), speaker: "-"},
		{name: "bfdprofile: echoInterval", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  echoInterval: 50\n"),
			refused: "BFDProfile NAME: spec.echoInterval: not supported: ironlb's BFD has no echo function"},
		{name: "bfdprofile: minimumTtl (multi-hop BFD only)", yaml: metallbYAML("v1beta1", "BFDProfile", "NAME", ns, "  minimumTtl: 254\n"),
			refused: "BFDProfile NAME: spec.minimumTtl: not supported: it applies to multi-hop BFD sessions"},
		{name: "bgppeer: dualStackAddressFamily", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  dualStackAddressFamily: true\n"),
			refused: "BGPPeer NAME: spec.dualStackAddressFamily: not supported: ironlb's BGP sessions carry the routes of their own address family only"},

		// BGPPeers (v1beta2): the schema refuses out-of-range numbers, the webhook the rest.
		{name: "bgppeer: myASN 0", yaml: peerYAML("NAME", ns, "  myASN: 0\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n"),
			refused: "BGPPeer NAME: spec.myASN: invalid AS number: 0 is reserved"},
		{name: "bgppeer: peerASN above 32 bits", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 4294967296\n  peerAddress: 172.18.255.254\n"),
			refused: "spec.peerASN in body should be less than or equal to 4294967295"},
		{name: "bgppeer: myASN above 32 bits", yaml: peerYAML("NAME", ns, "  myASN: 4294967296\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n"),
			refused: "spec.myASN in body should be less than or equal to 4294967295"},
		{name: "bgppeer: dynamicASN neither internal nor external", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  dynamicASN: sideways\n  peerAddress: 172.18.255.254\n"),
			refused: `spec.dynamicASN: Unsupported value: "sideways"`},
		{name: "bgppeer: port 0", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  peerPort: 0\n"),
			refused: "spec.peerPort in body should be greater than or equal to 1"},
		{name: "bgppeer: connectTime below a second", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  connectTime: 500ms\n"),
			refused: "connect time should be between 1 seconds to 65535"},
		{name: "bgppeer: peerASN and dynamicASN", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64513\n  dynamicASN: internal\n  peerAddress: 172.18.255.254\n"),
			refused: "BGPPeer NAME: spec.peerASN: invalid AS number: peerASN and dynamicASN are both set"},
		{name: "bgppeer: no peer AS", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerAddress: 172.18.255.254\n"),
			refused: "BGPPeer NAME: spec.peerASN: invalid AS number: one of peerASN and dynamicASN is required"},
		{name: "bgppeer: AS_TRANS", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 23456\n  peerAddress: 172.18.255.254\n"),
			refused: "BGPPeer NAME: spec.peerASN: invalid AS number"},
		{name: "bgppeer: holdTime 2s", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  holdTime: 2s\n"),
			refused: "BGPPeer NAME: spec.holdTime: invalid timers: hold time 2s must be 0 or at least 3s"},
		{name: "bgppeer: keepalive above hold", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  holdTime: 9s\n  keepaliveTime: 10s\n"),
			refused: "keepalive 10s must be less than hold time 9s"},
		{name: "bgppeer: keepalive equal to hold", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  holdTime: 9s\n  keepaliveTime: 9s\n"),
			refused: "keepalive 9s must be less than hold time 9s"},
		{name: "bgppeer: bad peerAddress", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.300\n"),
			refused: `BGPPeer NAME: spec.peerAddress: invalid address: "172.18.255.300" is not a unicast IP address`},
		{name: "bgppeer: no peerAddress", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n"),
			refused: "one of peerAddress and interface is required"},
		{name: "bgppeer: bad sourceAddress", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  sourceAddress: 172.18.0.x\n"),
			refused: `BGPPeer NAME: spec.sourceAddress: invalid address: "172.18.0.x" is not a unicast IP address`},
		{name: "bgppeer: sourceAddress of the other family", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  sourceAddress: fd00::3\n"),
			refused: "fd00::3 is not of the family of peer address 172.18.255.254"},
		{name: "bgppeer: IPv6 routerID", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  routerID: fd00::3\n"),
			refused: `spec.routerID: invalid address: "fd00::3" is not an IPv4 address`},
		{name: "bgppeer: password and passwordSecret", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  password: s3cret-in-spec\n  passwordSecret: {name: bgp-auth}\n"),
			refused: "spec.password: invalid password: password and passwordSecret are both set"},
		{name: "bgppeer: ebgpMultiHop on iBGP", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64513\n  peerAddress: 172.18.255.254\n  ebgpMultiHop: true\n"),
			refused: "ebgpMultiHop is set on an iBGP session"},
		{name: "bgppeer: peerAddress and interface", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  interface: eth0\n"),
			refused: "peerAddress and interface are both set"},
		{name: "bgppeer: nodeSelector twice", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  nodeSelectors:\n  - matchLabels: {rack: a}\n  - matchLabels: {rack: a}\n"),
			refused: "spec.nodeSelectors[1]: duplicate of [0] (rack=a)"},
		{name: "bgppeer: outside the configuration namespace", yaml: peerYAML("NAME", "default", "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n"),
			refused: "bgppeer NAME: must be created in namespace metallb-system"},
		{name: "bgppeer: unknown bfdProfile (may come later)", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  bfdProfile: nope\n"),
			speaker: `BGPPeer NAME: spec.bfdProfile: unknown bfd profile: "nope" (missing or invalid)`},
		{name: "bgppeer: missing passwordSecret (may come later)", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  passwordSecret: {name: bgp-auth}\n"),
			speaker: `BGPPeer NAME: spec.passwordSecret: password secret not found: secret "bgp-auth"`},
		// MetalLB reads basic-auth Secrets only ("secret type mismatch"); the speakers name the type.
		{name: "bgppeer: passwordSecret of the wrong type", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  passwordSecret: {name: bgp-opaque}\n"),
			speaker: `BGPPeer NAME: spec.passwordSecret: unusable password secret: Secret "bgp-opaque" has type Opaque, want kubernetes.io/basic-auth`},
		{name: "bgppeer: passwordSecret without a password", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  passwordSecret: {name: bgp-nokey}\n"),
			speaker: `BGPPeer NAME: spec.passwordSecret: unusable password secret: Secret "bgp-nokey" has no "password" key`},
		{name: "bgppeer: valid", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  holdTime: 9s\n"), speaker: "-"},
		// MetalLB accepts a link-local peerAddress, whose session can never open (no zone); ironlb
		// refuses it (BGP unnumbered, spec.interface, is the way to a link-local peer).
		{name: "bgppeer: link-local address, no interface", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: fe80::1\n"),
			refused: "BGPPeer NAME: spec.peerAddress: invalid address: fe80::1 is link-local"},
		// The same router twice on the same nodes: the speakers refuse the second (MetalLB's FRR
		// mode refuses it in its config check, not at admission).
		{name: "bgppeer: same peer twice", yaml: peerYAML("NAME", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.253\n"),
			speaker: "BGPPeer NAME: spec.peerAddress: conflict: peer address 172.18.255.253 is already used by BGPPeer r-base"},
		// Different myASN per peer: GoBGP (ironlb) and MetalLB's native mode allow it; only
		// MetalLB's FRR mode refuses it within a VRF.
		{name: "bgppeer: another local ASN beside r-base", yaml: peerYAML("NAME", ns, "  myASN: 64600\n  peerASN: 64512\n  peerAddress: 172.18.255.252\n"), speaker: "-"},

		// Services: what contradicts itself is refused by the Service webhook; what the pools
		// cannot give is accepted and fails with an AllocationFailed event naming the reason.
		{name: "service: unknown pool", yaml: svcYAML("NAME", map[string]string{"metallb.io/address-pool": "nope"}, ""),
			reason: "AllocationFailed", event: `UnknownPool: service default/NAME: unknown pool "nope"`},
		{name: "service: requested IP outside every pool", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "10.99.0.1"}, ""),
			reason: "AllocationFailed", event: "AddressNotInPool: service default/NAME: address 10.99.0.1 is in no pool"},
		{name: "service: spec.loadBalancerIP outside every pool", yaml: svcYAML("NAME", nil, "  loadBalancerIP: 10.99.0.2\n"),
			reason: "AllocationFailed", event: "AddressNotInPool: service default/NAME: address 10.99.0.2 is in no pool"},
		{name: "service: requested IP in another pool than the annotated one", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.230", "metallb.io/address-pool": "tiny"}, ""),
			reason: "AllocationFailed", event: `PoolMismatch: service default/NAME: address 172.18.255.230 is in pool "main", not in the requested pool "tiny"`},
		{name: "service: pool exhausted", yaml: svcYAML("NAME", map[string]string{"metallb.io/address-pool": "tiny"}, ""),
			reason: "AllocationFailed", event: `PoolExhausted: service default/NAME: no free IPv4 address in pool "tiny"`},
		{name: "service: dual stack required, pool has no IPv6", yaml: svcYAML("NAME", map[string]string{"metallb.io/address-pool": "main"},
			"  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n"),
			reason: "AllocationFailed", event: "NoPoolForFamily"},
		{name: "service: loadBalancerIP and annotation", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.241"}, "  loadBalancerIP: 172.18.255.240\n"),
			refused: "spec.loadBalancerIP and the metallb.io/loadBalancerIPs annotation are both set; use one"},
		{name: "service: malformed loadBalancerIPs", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.x"}, ""),
			refused: `metallb.io/loadBalancerIPs: "172.18.255.x" is not an IP address`},
		{name: "service: two IPv4 addresses", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.241,172.18.255.242"}, ""),
			refused: "more than one address of the same family"},
		{name: "service: IPv6 address on an IPv4 Service", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "fd00::5"}, ""),
			refused: "requested address fd00::5 is not of the Service's IP family"},
		{name: "service: malformed spec.loadBalancerIP", yaml: svcYAML("NAME", nil, "  loadBalancerIP: 172.18.255.x\n"),
			refused: "spec.loadBalancerIP"},
		{name: "service: another's address, no sharing key", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200"}, ""),
			reason: "AllocationFailed", event: "172.18.255.200"},
		{name: "service: another's address, other sharing key", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "other"}, ""),
			reason: "AllocationFailed", event: "172.18.255.200"},
		{name: "service: impossible sharing, same port", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "web"}, ""),
			refused: `172.18.255.200 is shared (key "web") with default/healthy, which already uses TCP/80`},
		{name: "service: impossible sharing, other traffic policy", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "web"}, "  externalTrafficPolicy: Local\n", 443),
			refused: "which has a different externalTrafficPolicy or selector"},
		{name: "service: impossible sharing, ETP Local beside a Local sharer with another selector", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.210", "metallb.io/allow-shared-ip": "loc"}, "  externalTrafficPolicy: Local\n", 443),
			refused: `172.18.255.210 is shared (key "loc") with default/local-holder, which has a different externalTrafficPolicy or selector`},
		{name: "service: possible sharing, ETP Local beside a Local sharer with the same selector", yaml: strings.Replace(svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.210", "metallb.io/allow-shared-ip": "loc"}, "  externalTrafficPolicy: Local\n", 443),
			"selector: {app: NAME}", "selector: {app: local-holder}", 1),
			reason: "IPAllocated", event: `Assigned IP ["172.18.255.210"]`, ip: "172.18.255.210"},
		{name: "service: possible sharing", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "web"}, "", 443),
			reason: "IPAllocated", event: `Assigned IP ["172.18.255.200"]`, ip: "172.18.255.200"},
		// avoidBuggyIPs also applies to requested addresses (MetalLB: the address is "not allowed in config").
		{name: "service: .0 requested from a pool avoiding buggy IPs", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "10.61.0.0"}, ""),
			reason: "AllocationFailed", event: `AddressNotInPool: service default/NAME: address 10.61.0.0 is in pool "avoid", which avoids addresses ending in .0 and .255`},
		{name: "service: .255 requested from a pool avoiding buggy IPs", yaml: svcYAML("NAME", nil, "  loadBalancerIP: 10.61.0.255\n"),
			reason: "AllocationFailed", event: `AddressNotInPool: service default/NAME: address 10.61.0.255 is in pool "avoid", which avoids addresses ending in .0 and .255`},
		{name: "service: pool whose serviceAllocation excludes the namespace", yaml: svcYAML("NAME", map[string]string{"metallb.io/address-pool": "pinned"}, ""),
			reason: "AllocationFailed", event: "PoolNotAllowed"},
		{name: "service: address in a pool whose serviceAllocation excludes the namespace", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "10.62.0.3"}, ""),
			reason: "AllocationFailed", event: "PoolNotAllowed"},
		{name: "service: sharing, UDP beside TCP on the same port", yaml: strings.Replace(svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "web"}, ""), "protocol: TCP", "protocol: UDP", 1),
			reason: "IPAllocated", event: `Assigned IP ["172.18.255.200"]`, ip: "172.18.255.200"},
		{name: "service: sharer pinned to another pool", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "web", "metallb.io/address-pool": "tiny"}, "", 443),
			reason: "AllocationFailed", event: `PoolMismatch: service default/NAME: address 172.18.255.200 is in pool "main", not in the requested pool "tiny"`},
		{name: "service: dual-stack (preferred) sharer beside a single-stack one", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "web"},
			"  ipFamilyPolicy: PreferDualStack\n  ipFamilies: [IPv4, IPv6]\n", 444),
			reason: "IPAllocated", event: `Assigned IP ["172.18.255.200"]`, ip: "172.18.255.200"},
		{name: "service: dual-stack (required) sharer beside a single-stack one", yaml: svcYAML("NAME",
			map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.200", "metallb.io/allow-shared-ip": "web"},
			"  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n", 445),
			reason: "AllocationFailed", event: "service requires dual-stack, got only IPv4 requested address 172.18.255.200"},
		{name: "service: RequireDualStack with one address", yaml: svcYAML("NAME", map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.241"},
			"  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n"),
			reason: "AllocationFailed", event: "service requires dual-stack, got only IPv4 requested address 172.18.255.241"},
		{name: "service: deprecated annotation still works", yaml: svcYAML("NAME", map[string]string{"metallb.universe.tf/address-pool": "main"}, ""),
			reason: "deprecatedAnnotation", event: "annotation metallb.universe.tf/address-pool is deprecated; use metallb.io/address-pool", ip: "172.18.255.201"},
	}
	dir := t.TempDir()
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			// Each row's object has a name of its own, so events of earlier rows never match.
			name := fmt.Sprintf("row%02d", i)
			r.yaml, r.refused, r.event, r.speaker = strings.ReplaceAll(r.yaml, "NAME", name), strings.ReplaceAll(r.refused, "NAME", name),
				strings.ReplaceAll(r.event, "NAME", name), strings.ReplaceAll(r.speaker, "NAME", name)
			f := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(f, []byte(r.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := h.env.Kubectl("create", "-f", f)
			if r.refused != "" {
				if err == nil {
					t.Errorf("accepted, want refused with %q", r.refused)
				} else if !strings.Contains(out, r.refused) {
					t.Errorf("refused with %q, want a message containing %q", strings.TrimSpace(out), r.refused)
				}
			} else if err != nil {
				t.Errorf("refused: %s", strings.TrimSpace(out))
			}
			if err == nil {
				defer func() {
					if out, err := h.env.Kubectl("delete", "--wait", "-f", f); err != nil {
						t.Errorf("deleting: %v\n%s", err, out)
					}
				}()
				obj := decodeObject(t, r.yaml)
				if r.reason != "" {
					h.waitEventT(t, obj.Namespace, obj.Name, r.reason, r.event)
				}
				if r.ip != "" {
					h.waitIP(obj.Name, r.ip)
				}
				if r.path != "" {
					h.waitJSONPathT(t, obj.Kind, obj.Name, r.path, r.want)
				}
				if r.speaker != "" {
					stored, err := h.env.Kubectl("get", "-n", obj.Namespace, strings.ToLower(obj.Kind)+"."+strings.Split(obj.APIVersion, "/")[0], obj.Name, "-o", "json")
					if err != nil {
						t.Fatalf("reading back: %v\n%s", err, stored)
					}
					got := speakerErrors(t, obj.Kind, []byte(stored), h.secrets(t, ns))
					if r.speaker == "-" && got != "" || r.speaker != "-" && !strings.Contains(got, r.speaker) {
						t.Errorf("speakers' configuration errors %q, want %q", got, r.speaker)
					}
				}
			}
			h.checkHealthy(t, guard, done)
		})
	}
	// A BFDProfile a BGPPeer uses cannot be deleted (MetalLB's webhook refuses it on DELETE); once
	// the peer is gone, it can.
	t.Run("bfdprofile: deleted while a BGPPeer uses it", func(t *testing.T) {
		h.apply(metallbYAML("v1beta1", "BFDProfile", "inuse", ns, "  detectMultiplier: 3\n"))
		h.apply(peerYAML("uses-bfd", ns, "  myASN: 64513\n  peerASN: 64512\n  peerAddress: 172.18.255.254\n  bfdProfile: inuse\n"))
		const refused = "BFDProfile inuse: in use: BGPPeer uses-bfd uses it (spec.bfdProfile)"
		del := func(dryRun bool) (string, error) {
			args := []string{"delete", "-n", ns, "bfdprofile.metallb.io", "inuse"}
			if dryRun {
				args = append(args, "--dry-run=server")
			}
			return h.env.Kubectl(args...)
		}
		// The webhook sees the peer once its informer has it: wait for a dry run to be refused.
		waitDryRun := func(wantRefused bool) {
			t.Helper()
			deadline := time.Now().Add(15 * time.Second)
			for {
				out, err := del(true)
				if (err != nil) == wantRefused && (!wantRefused || strings.Contains(out, refused)) {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("dry-run delete: %v\n%s (want refused=%v)", err, out, wantRefused)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		waitDryRun(true)
		if out, err := del(false); err == nil || !strings.Contains(out, refused) {
			t.Fatalf("deleting a profile in use: %v\n%s, want refused with %q", err, out, refused)
		}
		if out, err := h.env.Kubectl("delete", "-n", ns, "bgppeer.metallb.io", "uses-bfd"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		waitDryRun(false)
		if out, err := del(false); err != nil {
			t.Fatalf("deleting the profile no longer in use: %v\n%s", err, out)
		}
		h.checkHealthy(t, guard, done)
	})

	// Deleting or shrinking a pool in use is accepted, as in MetalLB (its webhook has no DELETE check
	// for pools and it revokes addresses that left every pool): each Service holding an address that
	// left gets AddressRevoked naming why, then AllocationFailed when no other pool may serve it, and
	// its status is cleared (never left pointing at an address no pool holds). The healthy Service,
	// in another pool, is not disturbed.
	t.Run("pool: deleted or shrunk while in use", func(t *testing.T) {
		h.apply(poolYAML("doomed", ns, `["10.64.0.0/30"]`, ""))
		h.apply(poolYAML("shrinking", ns, `["10.65.0.0/29"]`, ""))
		h.createService("on-doomed", func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/address-pool": "doomed"} })
		h.createService("on-shrinking", func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": "10.65.0.5"} })
		h.waitIP("on-doomed", "10.64.0.0")
		h.waitIP("on-shrinking", "10.65.0.5")
		if out, err := h.env.Kubectl("delete", "-n", ns, "ipaddresspool.metallb.io", "doomed"); err != nil {
			t.Fatalf("deleting a pool in use: %v\n%s", err, out)
		}
		h.apply(poolYAML("shrinking", ns, `["10.65.0.0/30"]`, ""))
		for _, e := range []struct{ svc, reason, msg string }{
			{"on-doomed", "AddressRevoked", "no longer in any IPAddressPool"},
			{"on-doomed", "AllocationFailed", `UnknownPool: service default/on-doomed: unknown pool "doomed"`},
			{"on-shrinking", "AddressRevoked", "no longer in any IPAddressPool"},
			{"on-shrinking", "AllocationFailed", "AddressNotInPool: service default/on-shrinking: address 10.65.0.5 is in no pool"},
		} {
			h.waitEventT(t, "default", e.svc, e.reason, e.msg)
		}
		for _, svc := range []string{"on-doomed", "on-shrinking"} {
			for deadline := time.Now().Add(15 * time.Second); h.ip(svc) != ""; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s still holds %s after its pool lost the address", svc, h.ip(svc))
				}
			}
			if err := h.cs.CoreV1().Services("default").Delete(context.Background(), svc, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := h.env.Kubectl("delete", "-n", ns, "ipaddresspool.metallb.io", "shrinking"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		h.checkHealthy(t, guard, done)
	})

	// A ServiceCIDR added after a pool that it overlaps (the Service CIDR grows): the pool, unchanged,
	// is warned about then.
	t.Run("pool: a ServiceCIDR created after the pool overlaps it", func(t *testing.T) {
		h.apply(poolYAML("before-cidr", ns, `["10.97.0.128/25"]`, ""))
		h.waitJSONPathT(t, "ipaddresspool.metallb.io", "before-cidr", `{.status.conditions[?(@.type=="Valid")].reason}`, "Loaded")
		if evs := h.eventsIn(ns, "before-cidr", "ConfigurationWarning"); len(evs) > 0 {
			t.Fatalf("warned before any ServiceCIDR overlaps it: %v", evs)
		}
		ctx := context.Background()
		if _, err := h.cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.97.0.0/24"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := h.cs.NetworkingV1().ServiceCIDRs().Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}()
		h.waitEventT(t, ns, "before-cidr", "ConfigurationWarning", "the pool overlaps 10.97.0.0/24, the Service CIDR (ServiceCIDR extra)")
		if out, err := h.env.Kubectl("delete", "-n", ns, "ipaddresspool.metallb.io", "before-cidr"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		h.checkHealthy(t, guard, done)
	})

	// After every row, with every object deleted: the healthy Service still holds its address, and
	// the address the sharing and failing rows asked for is free again for a new Service.
	h.createService("after")
	h.waitIP("after", "172.18.255.201")
	h.checkHealthy(t, guard, done)
}

// installWebhookConfig creates config/controller's ValidatingWebhookConfiguration, with each
// webhook's Service reference replaced by the URL of the test's webhook (https://localhost:port,
// which the certificate the controller issues for WebhookService "localhost" covers). The
// controller writes the CA into it at start.
func (h *harness) installWebhookConfig() {
	h.t.Helper()
	b, err := os.ReadFile("../../config/controller/30-webhook.yaml")
	if err != nil {
		h.t.Fatal(err)
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(b, &vwc); err != nil {
		h.t.Fatal(err)
	}
	h.webhookAddr = freeAddr(h.t)
	_, port, _ := net.SplitHostPort(h.webhookAddr)
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		url := "https://localhost:" + port + *cc.Service.Path
		cc.Service, cc.URL = nil, &url
	}
	if _, err := h.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), &vwc, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startWithWebhook runs the controller with its webhook; the returned channel is closed if Run
// returns before the test ends (a crash would end the test binary itself).
func (h *harness) startWithWebhook() <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = Run(ctx, Config{Namespace: ns, Kubeconfig: h.env.Kubeconfig, FlushInterval: 100 * time.Millisecond,
			WebhookAddr: h.webhookAddr, WebhookService: "localhost", WebhookConfig: "ironlb-validating-webhook"})
	}()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
			if runErr != nil {
				h.t.Errorf("controller returned %v", runErr)
			}
		case <-time.After(10 * time.Second):
			h.t.Errorf("controller did not stop within 10s of its context ending")
		}
	})
	return done
}

// waitWebhook waits until the apiserver reaches the webhook (it refuses a reversed range, which
// the CRD schema lets through).
func (h *harness) waitWebhook() {
	h.t.Helper()
	f := filepath.Join(h.t.TempDir(), "probe.yaml")
	if err := os.WriteFile(f, []byte(poolYAML("probe", ns, `["10.1.0.9-10.1.0.1"]`, "")), 0o644); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := h.env.Kubectl("create", "--dry-run=server", "-f", f)
		if err != nil && strings.Contains(out, "denied the request") {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("webhook not answering after 30s: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ipGuard watches a Service and records every state in which it does not hold exactly its address.
type ipGuard struct {
	name, want string
	mu         sync.Mutex // guards bad
	bad        []string
}

func (h *harness) guardIP(name, want string) *ipGuard {
	h.t.Helper()
	g := &ipGuard{name: name, want: want}
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	w, err := h.cs.CoreV1().Services("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		h.t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			svc, ok := ev.Object.(*corev1.Service)
			if !ok {
				continue
			}
			var ips []string
			for _, in := range svc.Status.LoadBalancer.Ingress {
				ips = append(ips, in.IP)
			}
			if ev.Type == watch.Deleted || len(ips) != 1 || ips[0] != want {
				g.mu.Lock()
				g.bad = append(g.bad, fmt.Sprintf("%s: %v", ev.Type, ips))
				g.mu.Unlock()
			}
		}
	}()
	return g
}

// checkHealthy fails t if the guarded Service ever left its address, got a failure event, or the
// controller stopped.
func (h *harness) checkHealthy(t *testing.T, g *ipGuard, done <-chan struct{}) {
	t.Helper()
	g.mu.Lock()
	bad := append([]string(nil), g.bad...)
	g.mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%s was disturbed: %v", g.name, bad)
	}
	if got := h.ip(g.name); got != g.want {
		t.Fatalf("%s holds %q, want %s", g.name, got, g.want)
	}
	for _, reason := range []string{"AllocationFailed", "AddressRevoked", "InvalidService"} {
		if evs := h.events(g.name, reason); len(evs) > 0 {
			t.Fatalf("%s got %s events: %v", g.name, reason, evs)
		}
	}
	select {
	case <-done:
		t.Fatal("the controller stopped")
	default:
	}
}

// waitEventT is waitEvent reporting to a subtest, for an object in namespace.
func (h *harness) waitEventT(t *testing.T, namespace, name, reason, contains string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range h.eventsIn(namespace, name, reason) {
			if strings.Contains(m, contains) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no %s event containing %q for %s/%s (have %v)", reason, contains, namespace, name, h.eventsIn(namespace, name, reason))
}

// waitJSONPathT is waitJSONPath reporting to a subtest.
func (h *harness) waitJSONPathT(t *testing.T, kind, name, path, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		out, _ = h.env.Kubectl("get", kind, name, "-n", ns, "-o", "jsonpath="+path)
		if out == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s %s %s = %q, want %q", kind, name, path, out, want)
}

type objectHead struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Name, Namespace string `json:"-"`
}

func decodeObject(t *testing.T, y string) objectHead {
	var o objectHead
	if err := yaml.Unmarshal([]byte(y), &o); err != nil {
		t.Fatal(err)
	}
	o.Name, o.Namespace = o.Metadata.Name, o.Metadata.Namespace
	return o
}

// speakerErrors runs the speakers' configuration check (bgpconfig.Build, whose errors become their
// InvalidConfiguration events) on one stored BGP object, with the pool "main" (without prefixes,
// and no Community: aliases are unknown to it) and the passwords of the stored Secrets as the
// speakers read them (config.BGPPasswords).
func speakerErrors(t *testing.T, kind string, stored []byte, secrets []any) string {
	in := bgpconfig.Input{Pools: []bgpconfig.Pool{{Name: "main"}}}
	in.Passwords, in.UnusableSecrets = config.BGPPasswords(secrets)
	var err error
	switch kind {
	case "BGPPeer":
		var p v1beta2.BGPPeer
		err = json.Unmarshal(stored, &p)
		base := v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "r-base", Namespace: ns},
			Spec: v1beta2.BGPPeerSpec{MyASN: 64513, ASN: 64512, Address: "172.18.255.253"}} // as TestBadInput stores it
		in.Peers = append(in.Peers, base, p)
	case "BGPAdvertisement":
		var a v1beta1.BGPAdvertisement
		err = json.Unmarshal(stored, &a)
		in.Advertisements = append(in.Advertisements, a)
	case "Community":
		var c v1beta1.Community
		err = json.Unmarshal(stored, &c)
		in.Communities = append(in.Communities, c)
	case "BFDProfile":
		var p v1beta1.BFDProfile
		err = json.Unmarshal(stored, &p)
		in.BFDProfiles = append(in.BFDProfiles, p)
	default:
		err = errors.New("no speaker check for " + kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, errs := bgpconfig.Build(in)
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}

// secrets returns the Secrets stored in namespace, as the speakers' informer lists them.
func (h *harness) secrets(t *testing.T, namespace string) []any {
	t.Helper()
	l, err := h.cs.CoreV1().Secrets(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]any, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func poolYAML(name, namespace, addrs, extraSpec string) string {
	return fmt.Sprintf("apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  addresses: %s\n%s",
		name, namespace, addrs, extraSpec)
}

func metallbYAML(version, kind, name, namespace, spec string) string {
	return fmt.Sprintf("apiVersion: metallb.io/%s\nkind: %s\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s", version, kind, name, namespace, spec)
}

func peerYAML(name, namespace, spec string) string {
	return metallbYAML("v1beta2", "BGPPeer", name, namespace, spec)
}

// svcYAML is a LoadBalancer Service in default with the annotations, extra spec lines and a TCP
// port (80 unless given).
func svcYAML(name string, ann map[string]string, extraSpec string, port ...int) string {
	p := 80
	if len(port) > 0 {
		p = port[0]
	}
	var a strings.Builder
	if len(ann) > 0 {
		a.WriteString("  annotations:\n")
		for k, v := range ann {
			fmt.Fprintf(&a, "    %s: %q\n", k, v)
		}
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: default\n%sspec:\n  type: LoadBalancer\n  selector: {app: %s}\n  ports: [{port: %d, protocol: TCP}]\n%s",
		name, a.String(), name, p, extraSpec)
}
