package config

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/kube/kubenode"
	"github.com/ironlb/ironlb/internal/testbed/fuzzbytes"
)

// fuzzBytes draws the objects below from fuzz input (package fuzzbytes: past the end, zeros).
type fuzzBytes struct{ *fuzzbytes.Reader }

// Catalogues the objects are drawn from: small, so that pools overlap, Services share pools and
// addresses, and selectors match; with the malformed values the API would refuse too (status can be
// written by anyone allowed to, so a Service's ingress addresses are untrusted).
var (
	fuzzRanges = []string{"172.18.255.200-172.18.255.250", "172.18.255.0/24", "172.18.255.240/28", "10.0.0.0/30",
		"fd00::/120", "fd00::10-fd00::20", "10.0.0.9-10.0.0.1", "10.0.0.0/33", "::ffff:10.0.0.0/120", "not-a-range", ""}
	fuzzIngress = []string{"172.18.255.200", "172.18.255.201", "172.18.255.250", "172.18.255.255", "10.0.0.1", "10.0.0.3",
		"fd00::5", "fd00::15", "fd00::ff", "::ffff:172.18.255.201", "fd00::5%eth0", "fd00::ff%eth0", "8.8.8.8", "bogus", ""}
	fuzzOps = []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn,
		metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist, "Bogus"}
)

func (r *fuzzBytes) labels() map[string]string {
	return fuzzbytes.Pick(r, map[string]string(nil), map[string]string{"k": "v"}, map[string]string{"k": "w"}, map[string]string{"zone": "a", "k": "v"})
}

func (r *fuzzBytes) selector() metav1.LabelSelector {
	if r.Byte()%2 == 0 {
		return metav1.LabelSelector{MatchLabels: r.labels()}
	}
	req := metav1.LabelSelectorRequirement{Key: fuzzbytes.Pick(r, "k", "zone", "bad key!"), Operator: fuzzbytes.Pick(r, fuzzOps...)}
	for range int(r.Byte() % 3) {
		req.Values = append(req.Values, fuzzbytes.Pick(r, "v", "w", "a"))
	}
	return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req}}
}

// modelInput draws a ModelInput: up to 4 pools, 3 advertisements, 5 Services, 4 EndpointSlices and
// 3 Nodes, each kind with distinct names (as the API guarantees).
func (r *fuzzBytes) modelInput() ModelInput {
	in := ModelInput{LBClass: fuzzbytes.Pick(r, "", "ironlb")}
	for i := range int(r.Byte() % 5) {
		p := pool(fmt.Sprintf("p%d", i))
		p.Namespace = "metallb-system"
		p.Labels = r.labels()
		p.CreationTimestamp = metav1.NewTime(time.Unix(int64(r.Byte()%3), 0))
		for range int(r.Byte()%2) + 1 {
			p.Spec.Addresses = append(p.Spec.Addresses, fuzzbytes.Pick(r, fuzzRanges...))
		}
		if c := r.Byte(); c%4 == 0 {
			p.Spec.AllocateTo = &v1beta1.ServiceAllocation{Priority: int(c/4%3) - 1, ServiceSelectors: []metav1.LabelSelector{r.selector()}}
		}
		in.Pools = append(in.Pools, p)
	}
	for i := range int(r.Byte() % 4) {
		a := v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Namespace: "metallb-system", Name: fmt.Sprintf("ad%d", i)}}
		for range int(r.Byte() % 3) {
			a.Spec.IPAddressPools = append(a.Spec.IPAddressPools, fuzzbytes.Pick(r, "p0", "p1", "p2", "gone"))
		}
		for range int(r.Byte() % 3) {
			a.Spec.IPAddressPoolSelectors = append(a.Spec.IPAddressPoolSelectors, r.selector())
		}
		for range int(r.Byte() % 2) {
			a.Spec.NodeSelectors = append(a.Spec.NodeSelectors, r.selector())
		}
		if r.Byte()%2 == 0 {
			a.Spec.Interfaces = []string{"eth0"}
		}
		in.L2Advertisements = append(in.L2Advertisements, a)
	}
	for i := range int(r.Byte() % 6) {
		s := lbService(fmt.Sprintf("s%d", i), fuzzbytes.Pick(r, "", "p0", "p1", "gone"))
		s.Namespace = fuzzbytes.Pick(r, "ns", "other")
		s.Labels = r.labels()
		c := r.Byte()
		if c&1 != 0 {
			s.Spec.Type = fuzzbytes.Pick(r, corev1.ServiceTypeNodePort, corev1.ServiceTypeClusterIP, corev1.ServiceTypeLoadBalancer)
		}
		if c&2 != 0 {
			s.Spec.LoadBalancerClass = ptr(fuzzbytes.Pick(r, "ironlb", "other"))
		}
		if c&4 != 0 {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		if c&8 != 0 {
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[AnnotationSpread] = fuzzbytes.Pick(r, "true", "false", "yes")
		}
		for range int(r.Byte() % 4) {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: fuzzbytes.Pick(r, fuzzIngress...)})
		}
		in.Services = append(in.Services, s)
	}
	for i := range int(r.Byte() % 5) {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: fuzzbytes.Pick(r, "ns", "other"), Name: fmt.Sprintf("e%d", i)}}
		if svc := fuzzbytes.Pick(r, "", "s0", "s1", "s2", "s9"); svc != "" {
			es.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
		}
		for range int(r.Byte() % 4) {
			c := r.Byte()
			e := discoveryv1.Endpoint{Addresses: []string{"10.244.0.1"}}
			if c&1 != 0 {
				e.NodeName = ptr(fuzzbytes.Pick(r, "n0", "n1", ""))
			}
			if c&2 != 0 {
				e.Conditions.Ready = ptr(c&4 != 0)
			}
			if c&8 != 0 {
				e.Conditions.Serving = ptr(c&16 != 0)
			}
			es.Endpoints = append(es.Endpoints, e)
		}
		in.EndpointSlices = append(in.EndpointSlices, es)
	}
	for i := range int(r.Byte() % 4) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), Labels: r.labels()}}
		for range int(r.Byte() % 3) {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: fuzzbytes.Pick(r, corev1.NodeInternalIP, corev1.NodeExternalIP),
				Address: fuzzbytes.Pick(r, "172.18.0.2", "fd00::2", "::ffff:172.18.0.3", "nonsense")})
		}
		if r.Byte()%3 == 0 {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}
		}
		in.Nodes = append(in.Nodes, n)
	}
	return in
}

// shuffled returns in with every list in another order.
func shuffled(in ModelInput, seed uint64) ModelInput {
	rng := rand.New(rand.NewPCG(seed, 1))
	in.Pools, in.L2Advertisements = slices.Clone(in.Pools), slices.Clone(in.L2Advertisements)
	in.Services, in.EndpointSlices, in.Nodes = slices.Clone(in.Services), slices.Clone(in.EndpointSlices), slices.Clone(in.Nodes)
	rng.Shuffle(len(in.Pools), func(i, j int) { in.Pools[i], in.Pools[j] = in.Pools[j], in.Pools[i] })
	rng.Shuffle(len(in.L2Advertisements), func(i, j int) {
		in.L2Advertisements[i], in.L2Advertisements[j] = in.L2Advertisements[j], in.L2Advertisements[i]
	})
	rng.Shuffle(len(in.Services), func(i, j int) { in.Services[i], in.Services[j] = in.Services[j], in.Services[i] })
	rng.Shuffle(len(in.EndpointSlices), func(i, j int) {
		in.EndpointSlices[i], in.EndpointSlices[j] = in.EndpointSlices[j], in.EndpointSlices[i]
	})
	rng.Shuffle(len(in.Nodes), func(i, j int) { in.Nodes[i], in.Nodes[j] = in.Nodes[j], in.Nodes[i] })
	return in
}

// modelOpts compares Models: selectors by their text, errors by their message.
var modelOpts = cmp.Options{
	cmpopts.EquateComparable(netip.Addr{}),
	cmp.Comparer(func(a, b labels.Selector) bool { return a.String() == b.String() }),
	cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) && (a == nil || a.Error() == b.Error()) }),
}

// objectLevel are the reasons that leave a whole object out; the others leave out a part of one
// (an address, a selector) and the object stays in the model.
var objectLevel = map[DropReason]bool{Undecodable: true, InvalidPool: true, NotServed: true, NoAddress: true,
	AddressInNoPool: true, NoServiceName: true}

// FuzzModelObjects builds arbitrary pools, L2Advertisements, Services, EndpointSlices and Nodes from
// the fuzz bytes and checks BuildModel's contract:
//   - every input object is in the model, or has exactly one Dropped entry that leaves the whole
//     object out, with a reason; an object in the model has none (only part-level entries: an
//     address, a selector), and every Dropped entry names an input object;
//   - every part is accounted for: a Service's ingress addresses are kept or dropped one by one, an
//     advertisement's selectors likewise, a Service's endpoints are exactly its slices';
//   - every announced address is valid, unmapped, unzoned and lies in its Service's valid pool, and
//     the Service's L2 are exactly the advertisements selecting that pool;
//   - building twice, and from the objects in any order, gives equal models.
func FuzzModelObjects(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x02\x01\x00\x00\x01\x00\x01\x01\x00\x01\x00\x01\x01\x00\x00\x00\x03\x01\x00\x00\x02\x00\x01\x02\x01"))
	f.Add([]byte(strings.Repeat("\x03\x01\x02\x00\x04\x05\x01\x02\x03\x00\x06\x07", 12)))
	f.Add([]byte(strings.Repeat("\x04\x02\x01\x05\x03\x07\x02\x02\x01\x01\x03\x04\x09\x0a\x0b", 16)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzBytes{fuzzbytes.New(data)}
		in := r.modelInput()
		m := BuildModel(in)

		drops := map[dropKey][]Dropped{}
		for _, d := range m.Dropped {
			if d.Reason == "" {
				t.Fatalf("drop without a reason: %v", d)
			}
			k := dropKey{d.Kind, d.Namespace, d.Name}
			drops[k] = append(drops[k], d)
		}
		whole := func(k dropKey) (n int) {
			for _, d := range drops[k] {
				if objectLevel[d.Reason] {
					n++
				}
			}
			return n
		}
		count := func(k dropKey, r DropReason) (n int) {
			for _, d := range drops[k] {
				if d.Reason == r {
					n++
				}
			}
			return n
		}
		inputs := map[dropKey]bool{}
		accounted := func(k dropKey, inModel bool) {
			t.Helper()
			inputs[k] = true
			if w := whole(k); inModel && w != 0 || !inModel && w != 1 {
				t.Fatalf("%v: in the model %v, with %d drops of the whole object: %v", k, inModel, w, drops[k])
			}
		}

		for _, p := range in.Pools {
			_, ok := m.Pools.ByName[p.Name]
			accounted(dropKey{"IPAddressPool", p.Namespace, p.Name}, ok)
		}
		if len(m.L2Advertisements) != len(in.L2Advertisements) {
			t.Fatalf("%d advertisements in, %d in the model", len(in.L2Advertisements), len(m.L2Advertisements))
		}
		for _, a := range in.L2Advertisements {
			k := dropKey{"L2Advertisement", a.Namespace, a.Name}
			accounted(k, true)
			i := slices.IndexFunc(m.L2Advertisements, func(ma L2Advertisement) bool { return ma.Name == a.Name })
			// A selector that does not parse fails the whole advertisement closed: it keeps no selector
			// (and selects nothing); otherwise every selector is kept.
			kept, bad := len(m.L2Advertisements[i].PoolSelectors), count(k, InvalidSelector)
			if bad > 1 || bad == 1 && (kept != 0 || m.L2Advertisements[i].Invalid == nil) || bad == 0 && kept != len(a.Spec.IPAddressPoolSelectors) {
				t.Fatalf("%v: %d selectors, %d kept, dropped %d times", k, len(a.Spec.IPAddressPoolSelectors), kept, bad)
			}
		}
		served := map[string]*Service{}
		for i := range m.Services {
			served[m.Services[i].Key] = &m.Services[i]
		}
		if len(served) != len(m.Services) || !slices.IsSortedFunc(m.Services, func(a, b Service) int { return strings.Compare(a.Key, b.Key) }) {
			t.Fatalf("services not unique and sorted: %v", m.Services)
		}
		for _, s := range in.Services {
			k := dropKey{"Service", s.Namespace, s.Name}
			ms := served[s.Namespace+"/"+s.Name]
			accounted(k, ms != nil)
			if ms == nil {
				continue
			}
			ips := 0
			for _, ing := range s.Status.LoadBalancer.Ingress {
				if ing.IP != "" {
					ips++
				}
			}
			if kept, bad := len(ms.Addrs), count(k, InvalidAddress)+count(k, AddressOutsidePool); kept+bad != ips {
				t.Fatalf("%v: %d addresses, %d kept and %d dropped: %v", k, ips, kept, bad, drops[k])
			}
			p := m.Pools.ByName[ms.Pool]
			if p == nil || len(ms.Addrs) == 0 {
				t.Fatalf("%v served from pool %q with %v", k, ms.Pool, ms.Addrs)
			}
			for _, a := range ms.Addrs {
				if !a.IsValid() || a.Is4In6() || a.Zone() != "" || !p.Contains(a) {
					t.Fatalf("%v announces %s, not an address of its pool %s %+v", k, a, p.Name, p.Ranges)
				}
			}
			var want []string
			for _, a := range m.L2Advertisements {
				if a.Selects(p) {
					want = append(want, a.Name)
				}
			}
			var got []string
			for _, a := range ms.L2 {
				got = append(got, a.Name)
			}
			if !slices.Equal(want, got) {
				t.Fatalf("%v: advertisements %v, want those selecting pool %s: %v", k, got, p.Name, want)
			}
		}
		eps := map[string]int{}
		for _, es := range in.EndpointSlices {
			k := dropKey{"EndpointSlice", es.Namespace, es.Name}
			svc := es.Labels[discoveryv1.LabelServiceName]
			accounted(k, svc != "")
			eps[es.Namespace+"/"+svc] += len(es.Endpoints)
		}
		for key, s := range served {
			if len(s.Endpoints) != eps[key] {
				t.Fatalf("service %s: %d endpoints, its slices have %d", key, len(s.Endpoints), eps[key])
			}
		}
		if len(m.Nodes) != len(in.Nodes) {
			t.Fatalf("%d nodes in, %d in the model", len(in.Nodes), len(m.Nodes))
		}
		for _, n := range in.Nodes {
			mn := m.Node(n.Name)
			if mn == nil {
				t.Fatalf("node %s lost", n.Name)
			}
			// The speaker's address: the node's IPv4 InternalIP, or on an IPv6-only node its IPv6
			// one; never zoned or IPv4-mapped.
			if ip := mn.InternalIP; ip.IsValid() {
				_, has4 := kubenode.InternalIP(n, true)
				if ip.Zone() != "" || ip.Is4In6() || (ip.Is6() && has4) {
					t.Fatalf("node %s: InternalIP %s (addresses %v)", n.Name, ip, n.Status.Addresses)
				}
			}
		}
		for k := range drops {
			if !inputs[k] {
				t.Fatalf("a drop names no input object: %v", drops[k])
			}
		}

		if diff := cmp.Diff(m, BuildModel(in), modelOpts); diff != "" {
			t.Fatalf("a second build differs (-first +second):\n%s", diff)
		}
		if diff := cmp.Diff(m, BuildModel(shuffled(in, uint64(len(data)))), modelOpts); diff != "" {
			t.Fatalf("the input order changes the model (-given +shuffled):\n%s", diff)
		}
	})
}

type dropKey struct{ kind, ns, name string }
