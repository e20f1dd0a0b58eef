package speaker

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/config"
)

// FuzzDecodeObjects feeds arbitrary JSON as the dynamic informers' IPAddressPools and
// L2Advertisements (anyone allowed to write them can put anything the schema lets through, and an
// old or edited CRD lets through more) and checks the speaker's decoding and the model built from
// it: decodeTyped never panics; each object is decoded, keeping its name and namespace, or dropped
// once as Undecodable under the kind asked for, never both; and the model built from the result
// has each decoded pool either valid or dropped as InvalidPool, each advertisement, and is the same
// when the objects come in the other order.
//
// What does not depend on the input is built once (the extra object of each kind, the comparison
// options), and the two models are compared with reflect.DeepEqual first: equal under DeepEqual is
// equal under the options (which only loosen it), and cmp's reflection, the bulk of an execution's
// time, runs only to print a difference.
func FuzzDecodeObjects(f *testing.F) {
	f.Add(`{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"name":"p","namespace":"metallb-system"},"spec":{"addresses":["172.18.255.200-172.18.255.250"]}}`,
		`{"apiVersion":"metallb.io/v1beta1","kind":"L2Advertisement","metadata":{"name":"a","namespace":"metallb-system"},"spec":{"ipAddressPools":["p"],"interfaces":["eth0"]}}`)
	f.Add(`{"kind":"IPAddressPool","metadata":{"name":"p"},"spec":{"addresses":"10.0.0.0/24","autoAssign":"yes"}}`,
		`{"metadata":{"name":7},"spec":{"ipAddressPoolSelectors":[{"matchExpressions":[{"key":"k","operator":"Bogus"}]}]}}`)
	f.Add(`{"kind":5,"metadata":"x","spec":{"serviceAllocation":{"priority":1e30,"namespaces":["a","a"]}}}`, `{"spec":null}`)
	f.Add(`{"metadata":{"name":"q","creationTimestamp":"2024-01-01T00:00:00Z","labels":{"k":"v"}},"spec":{"addresses":["fd00::/120","fd00::10-fd00::20"]}}`,
		`{"metadata":{"name":"b"},"spec":{"ipAddressPoolSelectors":[{"matchLabels":{"k":"v"}}],"nodeSelectors":[{"matchLabels":{"zone":"a"}}]}}`)
	// Each kind gets a second, well-formed object after the fuzzed one (other-a, other-b): copied
	// for every execution, so that no execution sees what another did to it.
	var others [2]map[string]any
	for i := range others {
		doc := `{"metadata":{"name":"other-` + string('a'+rune(i)) + `"},"spec":{"addresses":["10.9.9.0/24"]}}`
		if err := json.Unmarshal([]byte(doc), &others[i]); err != nil {
			f.Fatal(err)
		}
	}
	opts := cmp.Options{cmpopts.EquateComparable(netip.Addr{}), cmp.Comparer(func(a, b labels.Selector) bool { return a.String() == b.String() }),
		cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) && (a == nil || a.Error() == b.Error()) })}
	f.Fuzz(func(t *testing.T, poolJSON, adJSON string) {
		var objs [2][]any
		for i, s := range []string{poolJSON, adJSON} {
			var m map[string]any
			if json.Unmarshal([]byte(s), &m) == nil && m != nil {
				objs[i] = append(objs[i], &unstructured.Unstructured{Object: m})
			}
			objs[i] = append(objs[i], &unstructured.Unstructured{Object: runtime.DeepCopyJSON(others[i])})
		}
		var dropped []config.Dropped
		pools := decodeTyped[v1beta1.IPAddressPool]("IPAddressPool", objs[0], &dropped)
		ads := decodeTyped[v1beta1.L2Advertisement]("L2Advertisement", objs[1], &dropped)

		check := func(kind string, in []any, names []string) {
			t.Helper()
			decoded := 0
			for _, o := range in {
				u := o.(*unstructured.Unstructured)
				n := 0
				for _, d := range dropped {
					if d.Name == u.GetName() && d.Namespace == u.GetNamespace() && d.Kind == kind {
						n++
						if d.Reason != config.Undecodable || d.Detail == "" {
							t.Fatalf("%s %s: dropped as %q with %q", kind, u.GetName(), d.Reason, d.Detail)
						}
					}
				}
				if n > 1 {
					t.Fatalf("%s %s dropped %d times", kind, u.GetName(), n)
				}
				if n == 0 {
					if decoded >= len(names) || names[decoded] != u.GetName() {
						t.Fatalf("%s %q neither decoded nor dropped (decoded %v)", kind, u.GetName(), names)
					}
					decoded++
				}
			}
			if decoded != len(names) {
				t.Fatalf("%s: %d objects decoded, %d in the output", kind, decoded, len(names))
			}
		}
		var pn, an []string
		for _, p := range pools {
			pn = append(pn, p.Name)
		}
		for _, a := range ads {
			an = append(an, a.Name)
		}
		check("IPAddressPool", objs[0], pn)
		check("L2Advertisement", objs[1], an)
		for _, d := range dropped {
			if d.Kind != "IPAddressPool" && d.Kind != "L2Advertisement" {
				t.Fatalf("drop of kind %q: %v", d.Kind, d)
			}
		}
		if len(slices.Compact(slices.Sorted(slices.Values(pn)))) != len(pn) || len(slices.Compact(slices.Sorted(slices.Values(an)))) != len(an) {
			return // two objects of one name: the API never lists that
		}

		in := config.ModelInput{Pools: pools, L2Advertisements: ads, Dropped: dropped}
		m := config.BuildModel(in)
		for _, p := range pools {
			_, valid := m.Pools.ByName[p.Name]
			_, invalid := m.Pools.Invalid[p.Name]
			if valid == invalid {
				t.Fatalf("pool %q valid %v invalid %v", p.Name, valid, invalid)
			}
		}
		if len(m.L2Advertisements) != len(ads) {
			t.Fatalf("%d advertisements decoded, %d in the model", len(ads), len(m.L2Advertisements))
		}
		rev := in
		rev.Pools, rev.L2Advertisements = slices.Clone(pools), slices.Clone(ads)
		slices.Reverse(rev.Pools)
		slices.Reverse(rev.L2Advertisements)
		if mr := config.BuildModel(rev); !reflect.DeepEqual(m, mr) {
			if diff := cmp.Diff(m, mr, opts); diff != "" {
				t.Fatalf("the input order changes the model (-given +reversed):\n%s", diff)
			}
		}
	})
}
