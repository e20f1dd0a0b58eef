package config

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// SelectorError is an advertisement with a selector that does not parse. Such an advertisement
// selects nothing (no pool, no node, no Service): ironlb fails closed, where a selector left out
// would have widened what it selects (an advertisement whose only pool selector is dropped names
// no pool and would cover every pool). The admission webhook refuses these selectors; objects
// stored before the webhook ran, or while it was off, still reach the controller and speakers.
type SelectorError struct {
	Kind      string // "L2Advertisement" or "BGPAdvertisement"
	Namespace string
	Name      string
	// Field is the first selector that does not parse, e.g. "spec.ipAddressPoolSelectors[0]".
	Field string
	Err   error // wraps bgpconfig.ErrInvalidSelector
}

func (e *SelectorError) Error() string {
	if e == nil { // a valid advertisement's Invalid, seen as an error (comparisons, logs)
		return "<nil>"
	}
	return fmt.Sprintf("%s %s: %s: %v: the advertisement selects nothing", e.Kind, e.Name, e.Field, e.Err)
}

func (e *SelectorError) Unwrap() error { return e.Err }

// advertisementSelectorError returns the first of the three selector lists' entries that does not
// parse, nil if all do.
func advertisementSelectorError(kind string, meta *metav1.ObjectMeta, pools, nodes, services []metav1.LabelSelector) *SelectorError {
	for _, l := range []struct {
		field string
		sels  []metav1.LabelSelector
	}{{"spec.ipAddressPoolSelectors", pools}, {"spec.nodeSelectors", nodes}, {"spec.serviceSelectors", services}} {
		for i := range l.sels {
			if _, err := metav1.LabelSelectorAsSelector(&l.sels[i]); err != nil {
				return &SelectorError{Kind: kind, Namespace: meta.Namespace, Name: meta.Name,
					Field: fmt.Sprintf("%s[%d]", l.field, i), Err: fmt.Errorf("%w: %v", bgpconfig.ErrInvalidSelector, err)}
			}
		}
	}
	return nil
}

// SelectorErrors returns the advertisements that select nothing because a selector does not parse,
// one error each (its first bad selector), sorted by kind and name. The controller reports them
// (a Warning event on the advertisement, a log line, a condition in its ConfigurationState).
func SelectorErrors(l2 []v1beta1.L2Advertisement, bgp []v1beta1.BGPAdvertisement) []*SelectorError {
	var out []*SelectorError
	for i := range l2 {
		sp := &l2[i].Spec
		if e := advertisementSelectorError("L2Advertisement", &l2[i].ObjectMeta, sp.IPAddressPoolSelectors, sp.NodeSelectors, sp.ServiceSelectors); e != nil {
			out = append(out, e)
		}
	}
	for i := range bgp {
		sp := &bgp[i].Spec
		if e := advertisementSelectorError("BGPAdvertisement", &bgp[i].ObjectMeta, sp.IPAddressPoolSelectors, sp.NodeSelectors, sp.ServiceSelectors); e != nil {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *SelectorError) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
