package convert

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/fuzzbytes"
)

// fuzzBytes draws the objects below from fuzz input (package fuzzbytes: past the end, zeros).
type fuzzBytes struct{ *fuzzbytes.Reader }

// boolPtr is unset, true or false.
func (r *fuzzBytes) boolPtr() *bool {
	return fuzzbytes.Pick(r, (*bool)(nil), ptr.To(true), ptr.To(false))
}

// Small catalogues, so that ports, endpoints and addresses collide, with malformed values too.
var (
	fuzzPortNames = []string{"", "http", "https", "dns"}
	fuzzProtos    = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, "", "ICMP"}
	fuzzEPAddrs   = []string{"10.244.0.1", "10.244.0.2", "10.244.1.3", "10.244.1.4", "fd00:244::1", "fd00:244::2",
		"::ffff:10.244.0.2", "fe80::1%eth0", "0.0.0.0", "bad", ""}
	fuzzSvcAddrs = []string{"172.18.255.200", "172.18.255.201", "fd00:ff::1", "::ffff:172.18.255.200", "192.0.2.7", "nonsense", ""}
)

// service draws Service ns1/<name> with up to 7 ports and up to 4 EndpointSlices of up to 6
// endpoints each.
func (r *fuzzBytes) service(name string) (*corev1.Service, []*discoveryv1.EndpointSlice) {
	ips := fuzzbytes.Pick(r, []string{"10.96.0.10"}, []string{"10.96.0.10", "fd00:96::10"}, []string{"fd00:96::10"}, []string{"10.96.0.11"}, []string{"bad"})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name},
		Spec: corev1.ServiceSpec{Type: fuzzbytes.Pick(r, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort, corev1.ServiceTypeClusterIP),
			ClusterIP: ips[0], ClusterIPs: ips}}
	c := r.Byte()
	if c&1 != 0 {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = int32(fuzzbytes.Pick(r, 0, 32000, 70000))
	}
	if c&2 != 0 {
		svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	}
	if c&4 != 0 {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(fuzzbytes.Pick(r, 0, 5, 10800)))}}
	}
	if c&8 != 0 {
		svc.Annotations = map[string]string{AnnotationAlgorithm: fuzzbytes.Pick(r, "random", "round-robin", "maglev", "bogus")}
	}
	for range int(r.Byte() % 3) {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, fuzzbytes.Pick(r, fuzzSvcAddrs...))
	}
	for range int(r.Byte() % 3) {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: fuzzbytes.Pick(r, fuzzSvcAddrs...),
			IPMode: fuzzbytes.Pick(r, (*corev1.LoadBalancerIPMode)(nil), ptr.To(corev1.LoadBalancerIPModeVIP), ptr.To(corev1.LoadBalancerIPModeProxy))})
	}
	for range int(r.Byte() % 3) {
		svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, fuzzbytes.Pick(r, "192.0.2.0/24", "10.0.0.1", "fd00::/64", "x/99"))
	}
	for range int(r.Byte() % 8) {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fuzzbytes.Pick(r, fuzzPortNames...), Protocol: fuzzbytes.Pick(r, fuzzProtos...),
			Port: int32(fuzzbytes.Pick(r, 80, 443, 53, 8080, 0, 70000)), NodePort: int32(fuzzbytes.Pick(r, 0, 0, 30080, 30443, 70000)),
			TargetPort: intstr.FromString(fuzzbytes.Pick(r, fuzzPortNames...))})
	}
	var ess []*discoveryv1.EndpointSlice
	for i := range int(r.Byte() % 5) {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: fmt.Sprintf("%s-%d", name, i),
			Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: fuzzbytes.Pick(r, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN)}
		for range int(r.Byte() % 4) {
			p := discoveryv1.EndpointPort{Port: fuzzbytes.Pick(r, ptr.To(int32(8080)), ptr.To(int32(8443)), ptr.To(int32(0)), (*int32)(nil))}
			if n := fuzzbytes.Pick(r, fuzzPortNames...); n != "" || r.Byte()%2 == 0 {
				p.Name = &n
			}
			if pr := fuzzbytes.Pick(r, fuzzProtos...); pr != "" {
				p.Protocol = &pr
			}
			es.Ports = append(es.Ports, p)
		}
		for range int(r.Byte() % 7) {
			e := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: r.boolPtr(), Serving: r.boolPtr(), Terminating: r.boolPtr()},
				NodeName: fuzzbytes.Pick(r, ptr.To(thisNode), ptr.To("node-b"), ptr.To(""), (*string)(nil))}
			for range int(r.Byte()%2) + 1 {
				e.Addresses = append(e.Addresses, fuzzbytes.Pick(r, fuzzEPAddrs...))
			}
			es.Endpoints = append(es.Endpoints, e)
		}
		ess = append(ess, es)
	}
	return svc, ess
}

// fuzzNode is this node for the rule build.
func fuzzNode() nftrules.Node {
	return nftrules.Node{Name: thisNode,
		IPs:          []netip.Addr{a("192.168.0.10"), a("fd00:192:168::10")},
		ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:244::/56")},
		ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16"), pfx("fd00:96::/112")}}
}

// recorder is an nftrules.RuleWriter that writes into a knftables transaction (its text is the
// ruleset as nft reads it) and keeps the rules as statements and the elements.
type recorder struct {
	tx    *knftables.Transaction
	rules []*nftrules.Rule
	elems []*knftables.Element
}

func newRecorder(fam knftables.Family) *recorder {
	return &recorder{tx: knftables.NewFake(fam, nftrules.TableName).NewTransaction()}
}

func (w *recorder) Add(o knftables.Object) {
	if e, ok := o.(*knftables.Element); ok {
		w.elems = append(w.elems, e)
	}
	w.tx.Add(o)
}
func (w *recorder) Flush(o knftables.Object)  { w.tx.Flush(o) }
func (w *recorder) Delete(o knftables.Object) { w.tx.Delete(o) }
func (w *recorder) AddRule(r *nftrules.Rule) {
	w.rules = append(w.rules, r)
	w.tx.Add(r.Object())
}

// FuzzServiceRules converts up to three Services with many ports, EndpointSlices and endpoints
// (convert.Service, as the proxy does) and builds both families' full rulesets from them
// (nftrules), checking:
//   - the conversion does not depend on the order of the EndpointSlices, and neither does the
//     ruleset (the same operations, in the same order);
//   - every rule rendered parses back with nftrules.ParseRule into the same statements;
//   - every endpoint a rule DNATs to (in an endpoint chain or a shared DNAT map) is ready, or is
//     serving and terminating where kube-proxy's terminating fallback applies: no ready endpoint
//     of its family for that port, in the cluster or (for a local endpoint) on this node;
//   - no set or map gets the same key twice.
func FuzzServiceRules(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x00\x01\x00\x00\x00\x03\x01\x01\x00\x00\x01\x01\x01\x02\x00\x01\x03\x01\x00\x00\x01\x03\x00\x01\x01\x01\x02\x00"))
	f.Add([]byte(strings.Repeat("\x02\x01\x05\x03\x01\x00\x02\x04\x01\x03\x02\x05\x06\x01\x02\x00\x01", 20)))
	f.Add([]byte(strings.Repeat("\x03\x00\x07\x02\x01\x01\x01\x01\x00\x04\x02\x01\x03\x02\x01\x00\x02\x01\x06", 24)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzBytes{fuzzbytes.New(data)}
		m := &nftrules.Model{Node: fuzzNode(), Services: map[nftrules.ServiceKey]*nftrules.Service{}}
		shuffledModel := &nftrules.Model{Node: fuzzNode(), Services: map[nftrules.ServiceKey]*nftrules.Service{}}
		rng := rand.New(rand.NewPCG(uint64(len(data)), 7))
		for i := range int(r.Byte()%3) + 1 {
			svc, eps := r.service([]string{"web", "api", "db"}[i])
			out, skip, _ := Service(svc, eps, thisNode)
			if out == nil {
				if skip == NotSkipped {
					t.Fatalf("%s: no Service and no reason", svc.Name)
				}
				continue
			}
			other := slices.Clone(eps)
			rng.Shuffle(len(other), func(i, j int) { other[i], other[j] = other[j], other[i] })
			again, _, _ := Service(svc, other, thisNode)
			if diff := cmp.Diff(out, again, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); diff != "" {
				t.Fatalf("%s: the order of the EndpointSlices changes the conversion (-given +shuffled):\n%s", svc.Name, diff)
			}
			m.Services[out.Key()] = out
			shuffledModel.Services[again.Key()] = again
		}
		for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
			b, err := nftrules.New(nftrules.Config{Family: fam, MaglevTableSize: 13})
			if err != nil {
				t.Fatal(err)
			}
			w, w2 := newRecorder(fam), newRecorder(fam)
			b.Full(w, m, nftrules.Existing{}, nil)
			b.Full(w2, shuffledModel, nftrules.Existing{}, nil)
			if diff := cmp.Diff(w.tx.String(), w2.tx.String()); diff != "" {
				t.Fatalf("%s: the ruleset depends on the input order (-given +shuffled):\n%s", fam, diff)
			}

			var targets []netip.AddrPort
			for _, rule := range w.rules {
				text := rule.String()
				stmts, err := nftrules.ParseRule(text)
				if err != nil {
					t.Fatalf("%s: rule %q does not parse: %v", fam, text, err)
				}
				if back := (&nftrules.Rule{Chain: rule.Chain, Stmts: stmts, Comment: rule.Comment}); !back.Equal(rule) {
					t.Fatalf("%s: rule %q parses into other statements: %+v, want %+v", fam, text, stmts, rule.Stmts)
				}
				for _, s := range rule.Stmts {
					if s.Kind == nftrules.StmtDNAT {
						targets = append(targets, s.Value.AddrPort())
					}
				}
			}
			keys := map[string]bool{}
			for _, e := range w.elems {
				k := e.Set + e.Map + " " + strings.Join(e.Key, " . ")
				if keys[k] {
					t.Fatalf("%s: key %q added twice", fam, k)
				}
				keys[k] = true
				if strings.HasPrefix(e.Map, "dnat-endpoints") {
					ap, ok := parseTarget(e.Value)
					if !ok {
						t.Fatalf("%s: DNAT map value %q", fam, e.Value)
					}
					targets = append(targets, ap)
				}
			}
			for _, ap := range targets {
				if !usableTarget(m, ap, fam == knftables.IPv6Family) {
					t.Fatalf("%s: DNAT to %s, which no port may use (not ready, and not serving-terminating under the fallback)\n%s",
						fam, ap, w.tx)
				}
			}
		}
	})
}

// parseTarget reads a DNAT map value, "addr . port".
func parseTarget(v []string) (netip.AddrPort, bool) {
	if len(v) != 1 {
		return netip.AddrPort{}, false
	}
	a, p, ok := strings.Cut(v[0], " . ")
	if !ok {
		return netip.AddrPort{}, false
	}
	addr, err := netip.ParseAddr(a)
	port, err2 := strconv.ParseUint(p, 10, 16)
	if err != nil || err2 != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr, uint16(port)), true
}

// usableTarget reports whether some Service port of m may send traffic to ap (kube-proxy's rules,
// KEP-1669): one of the port's endpoints at ap is ready, or it is serving and terminating and its
// scope has no ready endpoint of the family: none at all for the port (cluster), or none on this
// node when the endpoint is on this node (local). Listings of one endpoint in several slices merge
// as the builder merges them: ready or serving if any listing is, terminating if all are.
func usableTarget(m *nftrules.Model, ap netip.AddrPort, v6 bool) bool {
	for _, s := range m.Services {
		for _, p := range s.Ports {
			var merged *nftrules.Endpoint
			readyAll, readyLocal := false, false
			for _, e := range p.Endpoints {
				a := e.Addr.Unmap()
				if !a.IsValid() || a.Zone() != "" || e.Port == 0 || a.Is6() != v6 {
					continue
				}
				readyAll = readyAll || e.Ready
				readyLocal = readyLocal || e.Ready && e.Local
				if netip.AddrPortFrom(a, e.Port) != ap {
					continue
				}
				if merged == nil {
					c := e
					merged = &c
					continue
				}
				merged.Ready, merged.Serving, merged.Local = merged.Ready || e.Ready, merged.Serving || e.Serving, merged.Local || e.Local
				merged.Terminating = merged.Terminating && e.Terminating
			}
			if merged == nil {
				continue
			}
			if merged.Ready || merged.Serving && merged.Terminating && (!readyAll || merged.Local && !readyLocal) {
				return true
			}
		}
	}
	return false
}
