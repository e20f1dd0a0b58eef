package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// The errors the admission checks of this file wrap (besides bgpconfig's sentinels, which the
// speakers' own checks return).
var (
	// ErrDuplicate: a list holds the same entry twice (MetalLB's "duplicate definition of ...").
	ErrDuplicate = errors.New("listed twice")
	// ErrInvalidInterface: an L2Advertisement names an interface no Linux host can have.
	ErrInvalidInterface = errors.New("invalid interface name")
	// ErrLocalPrefConflict: two BGPAdvertisements give the same prefixes to the same peers from
	// the same node with different localPref.
	ErrLocalPrefConflict = errors.New("conflicting localPref")
	// ErrInUse: an object another one refers to cannot be deleted.
	ErrInUse = errors.New("in use")
)

// Objects are the stored configuration objects an admission check compares one object against.
// An object being updated may be among them: the checks skip the one with its name.
type Objects struct {
	Pools             []v1beta1.IPAddressPool
	BGPAdvertisements []v1beta1.BGPAdvertisement
	Communities       []v1beta1.Community
	Peers             []v1beta2.BGPPeer
	// Nodes maps every node's name to its labels (for the advertisements' nodeSelectors).
	Nodes map[string]map[string]string
}

// ValidateL2Advertisement checks an L2Advertisement as MetalLB's webhook does (its
// l2AdvertisementFromCR): no pool, selector, match expression or value listed twice, and every
// selector parses. It also refuses interface names no Linux host can have (the kernel's
// dev_valid_name: 1 to 15 bytes, not "." or "..", no '/', ':' or white space), which would
// silently announce nothing. Pools named in ipAddressPools need not exist, as in MetalLB: they
// may come later.
func ValidateL2Advertisement(a *v1beta1.L2Advertisement) error {
	bad := func(field string, err error) error {
		return fmt.Errorf("L2Advertisement %s: %s: %w", a.Name, field, err)
	}
	sp := &a.Spec
	if field, err := duplicateString("spec.ipAddressPools", sp.IPAddressPools); err != nil {
		return bad(field, err)
	}
	if field, err := checkAdvertisementSelectors(sp.IPAddressPoolSelectors, sp.NodeSelectors, sp.ServiceSelectors); err != nil {
		return bad(field, err)
	}
	for i, ifname := range sp.Interfaces {
		if err := checkInterfaceName(ifname); err != nil {
			return bad(fmt.Sprintf("spec.interfaces[%d]", i), err)
		}
	}
	return nil
}

// checkAdvertisementSelectors checks the three selector lists both kinds of advertisement have.
func checkAdvertisementSelectors(pools, nodes, services []metav1.LabelSelector) (string, error) {
	for _, s := range []struct {
		field string
		sels  []metav1.LabelSelector
	}{
		{"spec.ipAddressPoolSelectors", pools},
		{"spec.nodeSelectors", nodes},
		{"spec.serviceSelectors", services},
	} {
		if field, err := checkSelectors(s.field, s.sels); err != nil {
			return field, err
		}
	}
	return "", nil
}

// ValidateBGPAdvertisement checks a BGPAdvertisement as MetalLB's webhook does (its
// bgpAdvertisementFromCR and validateBGPAdvPerPool), with the speakers' own check (bgpconfig.Build)
// so that an advertisement admitted is one the speakers use:
//   - no pool, community, peer, selector, match expression or value listed twice;
//   - aggregationLength within 1–32 and aggregationLengthV6 within 1–128, not shorter than a
//     prefix of a pool it applies to (which would announce addresses outside the pool), and not
//     combined with serviceSelectors;
//   - every community containing ':' is a standard ("65535:65282") or large ("large:1:2:3")
//     community or a Community alias; a name without ':' is an alias that may come later, left to
//     the speakers (MetalLB's webhook leaves it out too);
//   - every selector parses;
//   - its localPref agrees with every other BGPAdvertisement (without serviceSelectors) that
//     gives the same prefixes of a pool to one of the same peers from one of the same nodes.
//
// Pools and peers it names need not exist, as in MetalLB.
func ValidateBGPAdvertisement(a *v1beta1.BGPAdvertisement, objs Objects) error {
	bad := func(field string, err error) error {
		return &bgpconfig.ConfigError{Kind: "BGPAdvertisement", Name: a.Name, Field: field, Err: err}
	}
	sp := &a.Spec
	for _, l := range []struct {
		field string
		list  []string
	}{{"spec.ipAddressPools", sp.IPAddressPools}, {"spec.communities", sp.Communities}, {"spec.peers", sp.Peers}} {
		if field, err := duplicateString(l.field, l.list); err != nil {
			return bad(field, err)
		}
	}
	if field, err := checkAdvertisementSelectors(sp.IPAddressPoolSelectors, sp.NodeSelectors, sp.ServiceSelectors); err != nil {
		return bad(field, err)
	}

	// The speakers' check, with the stored pools and aliases; alias names are left out.
	pools := validPools(objs.Pools)
	ad := a.DeepCopy()
	ad.Spec.Communities = slices.DeleteFunc(ad.Spec.Communities, func(c string) bool { return !strings.Contains(c, ":") })
	in := bgpconfig.Input{Advertisements: []v1beta1.BGPAdvertisement{*ad}, Communities: objs.Communities}
	for _, p := range pools {
		bp := bgpconfig.Pool{Name: p.Name, Labels: p.labels}
		for _, r := range p.Ranges {
			bp.Entries = append(bp.Entries, r.Prefixes())
		}
		in.Pools = append(in.Pools, bp)
	}
	_, errs := bgpconfig.Build(in)
	for _, e := range errs {
		if e.Kind == "BGPAdvertisement" {
			return e
		}
	}
	return localPrefConflict(a, objs, pools)
}

// validPool is a pool that parses, with its labels (for pool selectors).
type validPool struct {
	*Pool
	labels map[string]string
}

// validPools returns the pools that parse, sorted by name. (Overlaps between pools are the pool
// webhook's business, not an advertisement's.)
func validPools(crs []v1beta1.IPAddressPool) []validPool {
	var out []validPool
	for i := range crs {
		if p, err := parsePool(&crs[i], nil); err == nil {
			out = append(out, validPool{Pool: p, labels: crs[i].Labels})
		}
	}
	slices.SortFunc(out, func(a, b validPool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// localPrefConflict is MetalLB's check that two BGPAdvertisements which send the same update
// (same pool, same aggregation for the pool's families, a common peer, a common node) agree on
// localPref. Advertisements with serviceSelectors are exempt, as in MetalLB: which Services they
// cover is not known at admission.
func localPrefConflict(a *v1beta1.BGPAdvertisement, objs Objects, pools []validPool) error {
	if len(a.Spec.ServiceSelectors) > 0 {
		return nil
	}
	nodes := make([]string, 0, len(objs.Nodes))
	for n := range objs.Nodes {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	aNodes := selectedNodes(a.Spec.NodeSelectors, nodes, objs.Nodes)
	others := slices.Clone(objs.BGPAdvertisements)
	slices.SortFunc(others, func(x, y v1beta1.BGPAdvertisement) int { return strings.Compare(x.Name, y.Name) })
	for i := range others {
		b := &others[i]
		if b.Name == a.Name || len(b.Spec.ServiceSelectors) > 0 || b.Spec.LocalPref == a.Spec.LocalPref {
			continue
		}
		if !sharePeer(a.Spec.Peers, b.Spec.Peers) {
			continue
		}
		common := ""
		for _, n := range selectedNodes(b.Spec.NodeSelectors, nodes, objs.Nodes) {
			if slices.Contains(aNodes, n) {
				common = n
				break
			}
		}
		if common == "" {
			continue
		}
		for _, p := range pools {
			if !selectsPool(&a.Spec, p) || !selectsPool(&b.Spec, p) || aggregationDiffers(&a.Spec, &b.Spec, p.Pool) {
				continue
			}
			return &bgpconfig.ConfigError{Kind: "BGPAdvertisement", Name: a.Name, Field: "spec.localPref",
				Err: fmt.Errorf("%w: %d, but BGPAdvertisement %s gives pool %q's prefixes, aggregated alike, to the same peers from node %s with localPref %d",
					ErrLocalPrefConflict, a.Spec.LocalPref, b.Name, p.Name, common, b.Spec.LocalPref)}
		}
	}
	return nil
}

// sharePeer reports whether two peers lists (empty: every peer) have a peer in common.
func sharePeer(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, p := range a {
		if slices.Contains(b, p) {
			return true
		}
	}
	return false
}

// selectedNodes returns the names (in names' order) of the nodes the selectors select (no
// selectors: every node). Selectors that do not parse select nothing.
func selectedNodes(sels []metav1.LabelSelector, names []string, nodes map[string]map[string]string) []string {
	var out []string
	for _, n := range names {
		if len(sels) == 0 {
			out = append(out, n)
			continue
		}
		for i := range sels {
			if s, err := metav1.LabelSelectorAsSelector(&sels[i]); err == nil && s.Matches(labels.Set(nodes[n])) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// selectsPool reports whether an advertisement applies to a pool: by name, by selector, or naming
// and selecting no pool at all (every pool).
func selectsPool(sp *v1beta1.BGPAdvertisementSpec, p validPool) bool {
	if len(sp.IPAddressPools) == 0 && len(sp.IPAddressPoolSelectors) == 0 || slices.Contains(sp.IPAddressPools, p.Name) {
		return true
	}
	for i := range sp.IPAddressPoolSelectors {
		if s, err := metav1.LabelSelectorAsSelector(&sp.IPAddressPoolSelectors[i]); err == nil && s.Matches(labels.Set(p.labels)) {
			return true
		}
	}
	return false
}

// aggregationDiffers is MetalLB's isAggrLengthDifferent: the two advertisements send different
// prefixes for every family the pool has.
func aggregationDiffers(a, b *v1beta1.BGPAdvertisementSpec, p *Pool) bool {
	has4, has6 := false, false
	for _, r := range p.Ranges {
		has4 = has4 || r.First.Is4()
		has6 = has6 || !r.First.Is4()
	}
	agg := func(v *int32, def int32) int32 {
		if v == nil {
			return def
		}
		return *v
	}
	d4 := agg(a.AggregationLength, 32) != agg(b.AggregationLength, 32)
	d6 := agg(a.AggregationLengthV6, 128) != agg(b.AggregationLengthV6, 128)
	return (!has4 || d4) && (!has6 || d6)
}

// ValidateCommunity checks a Community: every alias has a name and a value the speakers parse
// (bgpconfig.ParseCommunity: "AS:value" or "large:global:local1:local2"), and no alias name is
// defined twice, in it or in another Community (MetalLB's communitiesFromCrs).
func ValidateCommunity(c *v1beta1.Community, objs Objects) error {
	if _, errs := bgpconfig.Build(bgpconfig.Input{Communities: []v1beta1.Community{*c}}); len(errs) > 0 {
		return errs[0]
	}
	definedBy := map[string]string{}
	others := slices.Clone(objs.Communities)
	slices.SortFunc(others, func(x, y v1beta1.Community) int { return strings.Compare(x.Name, y.Name) })
	for _, o := range others {
		if o.Name == c.Name {
			continue
		}
		for _, a := range o.Spec.Communities {
			if _, ok := definedBy[a.Name]; !ok {
				definedBy[a.Name] = o.Name
			}
		}
	}
	for i, a := range c.Spec.Communities {
		if other, ok := definedBy[a.Name]; ok {
			return &bgpconfig.ConfigError{Kind: "Community", Name: c.Name, Field: fmt.Sprintf("spec.communities[%d]", i),
				Err: fmt.Errorf("%w: alias %q is already defined by Community %s", bgpconfig.ErrConflict, a.Name, other)}
		}
	}
	return nil
}

// ValidateBFDProfile checks a BFDProfile with the speakers' own check: MetalLB's ranges
// (receiveInterval, transmitInterval and echoInterval 10–60000 ms, detectMultiplier 2–255,
// minimumTtl 1–254), which the CRD schema also enforces. Unlike MetalLB it refuses echoMode: true,
// echoInterval and minimumTtl, which ironlb does not implement (UnsupportedBFDFields).
func ValidateBFDProfile(p *v1beta1.BFDProfile) error {
	if _, errs := bgpconfig.Build(bgpconfig.Input{BFDProfiles: []v1beta1.BFDProfile{*p}}); len(errs) > 0 {
		return errs[0]
	}
	return UnsupportedBFDFields(p)
}

// BFDProfileInUse refuses deleting the BFDProfile name while a BGPPeer names it in bfdProfile
// (MetalLB's webhook does the same on DELETE): the peer would lose BFD, and the speakers would
// refuse it as invalid.
func BFDProfileInUse(name string, peers []v1beta2.BGPPeer) error {
	ps := slices.Clone(peers)
	slices.SortFunc(ps, func(x, y v1beta2.BGPPeer) int { return strings.Compare(x.Name, y.Name) })
	for _, p := range ps {
		if p.Spec.BFDProfile == name {
			return fmt.Errorf("BFDProfile %s: %w: BGPPeer %s uses it (spec.bfdProfile); change or delete the peer first", name, ErrInUse, p.Name)
		}
	}
	return nil
}

// duplicateString returns the field and an ErrDuplicate error for the first entry listed twice.
func duplicateString(field string, list []string) (string, error) {
	for i, s := range list {
		if j := slices.Index(list[:i], s); j >= 0 {
			return fmt.Sprintf("%s[%d]", field, i), fmt.Errorf("%w: %q is also [%d]", ErrDuplicate, s, j)
		}
	}
	return "", nil
}

// checkSelectors returns the field and the error of the first selector that does not parse, lists
// a match expression or one of its values twice, or equals an earlier one (MetalLB's
// validateLabelSelectorDuplicate; the order of an expression's values does not matter).
func checkSelectors(field string, sels []metav1.LabelSelector) (string, error) {
	norm := make([]metav1.LabelSelector, len(sels))
	for i := range sels {
		f := fmt.Sprintf("%s[%d]", field, i)
		if _, err := metav1.LabelSelectorAsSelector(&sels[i]); err != nil {
			return f, fmt.Errorf("%w: %v", bgpconfig.ErrInvalidSelector, err)
		}
		n := sels[i].DeepCopy()
		for k := range n.MatchExpressions {
			e := &n.MatchExpressions[k]
			slices.Sort(e.Values)
			if v := slices.Compact(slices.Clone(e.Values)); len(v) != len(e.Values) {
				return f, fmt.Errorf("%w: a value of matchExpressions[%d] (key %q)", ErrDuplicate, k, e.Key)
			}
			for l := range k {
				if reflect.DeepEqual(n.MatchExpressions[l], *e) {
					return f, fmt.Errorf("%w: matchExpressions[%d] is also [%d]", ErrDuplicate, k, l)
				}
			}
		}
		if len(n.MatchLabels) == 0 {
			n.MatchLabels = nil
		}
		if len(n.MatchExpressions) == 0 {
			n.MatchExpressions = nil
		}
		norm[i] = *n
		for j := range i {
			if reflect.DeepEqual(norm[i], norm[j]) {
				return f, fmt.Errorf("%w: same as [%d] (%s)", ErrDuplicate, j, metav1.FormatLabelSelector(&sels[i]))
			}
		}
	}
	return "", nil
}

// checkInterfaceName applies Linux's dev_valid_name.
func checkInterfaceName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalidInterface)
	case len(s) > 15:
		return fmt.Errorf("%w: %q is longer than 15 bytes", ErrInvalidInterface, s)
	case s == "." || s == "..":
		return fmt.Errorf("%w: %q", ErrInvalidInterface, s)
	case strings.ContainsAny(s, "/: \t\n\v\f\r"):
		return fmt.Errorf("%w: %q contains '/', ':' or white space", ErrInvalidInterface, s)
	}
	return nil
}
