package speaker

import (
	"fmt"
	"sort"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
)

// bgpObjects are the Kubernetes objects BGP mode reads, as the informers hold them, with the model
// both modes share (pools, the Services served with their endpoints, nodes).
type bgpObjects struct {
	model                             *config.Model
	node                              string // this node's name
	peers, ads, profiles, communities []any  // *unstructured.Unstructured
	secrets                           []any  // *corev1.Secret, of the configuration namespace
}

// bgpInput converts the objects to bgpconfig.Input: once, here, so that bgpconfig sees no
// client-go. An object that does not decode into its type is left out and reported (the CRDs'
// schemas make that rare). Everything is sorted by name so that Build's results, and the errors it
// reports first, do not depend on the order of the informers' stores.
func bgpInput(o bgpObjects) (bgpconfig.Input, []error) {
	var in bgpconfig.Input
	var errs []error
	if o.model == nil {
		o.model = &config.Model{Pools: &config.Pools{}}
	}
	if n := o.model.Node(o.node); n != nil {
		in.Node = bgpconfig.Node{Name: n.Name, Labels: n.Labels, Excluded: n.Excluded, NetworkUnavailable: n.NetworkUnavailable}
		in.DefaultRouterID = n.InternalIP
	}
	in.Peers = decodeAll[v1beta2.BGPPeer]("BGPPeer", o.peers, &errs)
	in.Advertisements = decodeAll[v1beta1.BGPAdvertisement]("BGPAdvertisement", o.ads, &errs)
	in.BFDProfiles = decodeAll[v1beta1.BFDProfile]("BFDProfile", o.profiles, &errs)
	in.Communities = decodeAll[v1beta1.Community]("Community", o.communities, &errs)
	sort.Slice(in.Peers, func(i, j int) bool { return in.Peers[i].Name < in.Peers[j].Name })
	sort.Slice(in.Advertisements, func(i, j int) bool { return in.Advertisements[i].Name < in.Advertisements[j].Name })
	sort.Slice(in.BFDProfiles, func(i, j int) bool { return in.BFDProfiles[i].Name < in.BFDProfiles[j].Name })
	sort.Slice(in.Communities, func(i, j int) bool { return in.Communities[i].Name < in.Communities[j].Name })

	// MetalLB reads a BGPPeer's passwordSecret from a kubernetes.io/basic-auth Secret's "password"
	// key; a Secret of another type, or without the key, is reported as such (config.BGPPasswords).
	in.Passwords, in.UnusableSecrets = config.BGPPasswords(o.secrets)

	for _, n := range o.model.Pools.Names {
		p := o.model.Pools.ByName[n]
		bp := bgpconfig.Pool{Name: p.Name, Labels: p.Labels}
		for _, r := range p.Ranges {
			bp.Entries = append(bp.Entries, r.Prefixes())
		}
		in.Pools = append(in.Pools, bp)
	}
	for _, s := range o.model.Services {
		in.Services = append(in.Services, bgpconfig.Service{Key: s.Key, Labels: s.Labels, Pool: s.Pool, Addrs: s.Addrs,
			Local: s.Local, Endpoints: s.Endpoints})
	}
	return in, errs
}

// decodeAll decodes unstructured objects into T (decodeTyped), appending an error per object that
// does not decode.
func decodeAll[T any](kind string, objs []any, errs *[]error) []T {
	var dropped []config.Dropped
	out := decodeTyped[T](kind, objs, &dropped)
	for _, d := range dropped {
		*errs = append(*errs, fmt.Errorf("decoding %s %s: %s", d.Kind, d.Name, d.Detail))
	}
	return out
}
