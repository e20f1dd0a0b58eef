package speaker

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/election"
)

// bgpObjects are the Kubernetes objects BGP mode reads, as the informers hold them, with what the
// layer-2 path already computed from the others (pools, the Services served, endpoints).
type bgpObjects struct {
	node                              *corev1.Node // this node; nil while not in the cache
	peers, ads, profiles, communities []any        // *unstructured.Unstructured
	secrets                           []any        // *corev1.Secret, of the configuration namespace
	pools                             map[string]*poolInfo
	services                          []lbService
	endpoints                         map[string][]election.Endpoint
}

// bgpInput converts the objects to bgpconfig.Input: once, here, so that bgpconfig sees no
// client-go. An object that does not decode into its type is left out and reported (the CRDs'
// schemas make that rare). Everything is sorted by name so that Build's results, and the errors it
// reports first, do not depend on the order of the informers' stores.
func bgpInput(o bgpObjects) (bgpconfig.Input, []error) {
	var in bgpconfig.Input
	var errs []error
	if o.node != nil {
		in.Node = bgpconfig.Node{Name: o.node.Name, Labels: o.node.Labels}
		in.Node.Excluded, in.Node.NetworkUnavailable = nodeExcluded(o.node)
		if ip, ok := internalIP(o.node, true); ok {
			in.DefaultRouterID = ip
		}
	}
	in.Peers = decodeAll[v1beta2.BGPPeer](o.peers, &errs)
	in.Advertisements = decodeAll[v1beta1.BGPAdvertisement](o.ads, &errs)
	in.BFDProfiles = decodeAll[v1beta1.BFDProfile](o.profiles, &errs)
	in.Communities = decodeAll[v1beta1.Community](o.communities, &errs)
	sort.Slice(in.Peers, func(i, j int) bool { return in.Peers[i].Name < in.Peers[j].Name })
	sort.Slice(in.Advertisements, func(i, j int) bool { return in.Advertisements[i].Name < in.Advertisements[j].Name })
	sort.Slice(in.BFDProfiles, func(i, j int) bool { return in.BFDProfiles[i].Name < in.BFDProfiles[j].Name })
	sort.Slice(in.Communities, func(i, j int) bool { return in.Communities[i].Name < in.Communities[j].Name })

	// MetalLB reads a BGPPeer's passwordSecret from a kubernetes.io/basic-auth Secret's "password"
	// key; a Secret of another type, or without the key, counts as missing.
	for _, obj := range o.secrets {
		sec := obj.(*corev1.Secret)
		if p, ok := sec.Data[corev1.BasicAuthPasswordKey]; ok && sec.Type == corev1.SecretTypeBasicAuth {
			if in.Passwords == nil {
				in.Passwords = map[string]string{}
			}
			in.Passwords[sec.Name] = string(p)
		}
	}

	names := make([]string, 0, len(o.pools))
	for n := range o.pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := o.pools[n]
		bp := bgpconfig.Pool{Name: p.name, Labels: p.labels}
		for _, r := range p.ranges {
			bp.Entries = append(bp.Entries, r.Prefixes())
		}
		in.Pools = append(in.Pools, bp)
	}
	for _, l := range o.services {
		in.Services = append(in.Services, bgpconfig.Service{Key: l.key, Labels: l.svc.Labels, Pool: l.pool.name, Addrs: l.addrs,
			Local:     l.svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
			Endpoints: o.endpoints[l.key]})
	}
	return in, errs
}

// decodeAll decodes unstructured objects into T, appending an error per object that does not decode.
func decodeAll[T any](objs []any, errs *[]error) []T {
	out := make([]T, 0, len(objs))
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var v T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
			*errs = append(*errs, fmt.Errorf("decoding %s %s: %w", u.GetKind(), u.GetName(), err))
			continue
		}
		out = append(out, v)
	}
	return out
}
