package v1beta1_test

// These tests hold the generated CRDs (config/crd/bases) to what MetalLB
// users' manifests need: the kinds, versions and printer columns MetalLB
// serves, and a schema that accepts MetalLB's documented examples while
// refusing malformed pool addresses. The schemas and CEL rules are checked
// offline with the API server's own code (k8s.io/apiextensions-apiserver):
// CRD validation (structural schema, CEL compilation and cost), defaulting,
// pruning of unknown fields, OpenAPI validation and CEL evaluation, in that
// order, as kube-apiserver applies them to a create.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

const crdDir = "../../config/crd/bases"

// wantCRDs is the API MetalLB v0.16.1 serves. BGPPeer v1beta1 and v1beta2 are converted by the
// controller's webhook, as MetalLB's are.
var wantCRDs = map[string]struct {
	plural   string
	versions []string // served; the last is the storage version
}{
	"IPAddressPool":      {"ipaddresspools", []string{"v1beta1"}},
	"L2Advertisement":    {"l2advertisements", []string{"v1beta1"}},
	"BGPAdvertisement":   {"bgpadvertisements", []string{"v1beta1"}},
	"BGPPeer":            {"bgppeers", []string{"v1beta1", "v1beta2"}},
	"Community":          {"communities", []string{"v1beta1"}},
	"BFDProfile":         {"bfdprofiles", []string{"v1beta1"}},
	"ServiceL2Status":    {"servicel2statuses", []string{"v1beta1"}},
	"ServiceBGPStatus":   {"servicebgpstatuses", []string{"v1beta1"}},
	"ConfigurationState": {"configurationstates", []string{"v1beta1"}},
}

// loadCRDs decodes every CRD file, strictly, keyed by kind.
func loadCRDs(t *testing.T) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	// frrk8s.metallb.io_*.yaml (frr-k8s' BGPSessionState) is tested in api/frrk8s/v1beta1.
	files, err := filepath.Glob(filepath.Join(crdDir, "metallb.io_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crds := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if want := "metallb.io_" + crd.Spec.Names.Plural + ".yaml"; filepath.Base(file) != want {
			t.Errorf("%s holds %s; want it in %s", file, crd.Name, want)
		}
		if _, dup := crds[crd.Spec.Names.Kind]; dup {
			t.Errorf("%s: a second CRD for kind %s", file, crd.Spec.Names.Kind)
		}
		crds[crd.Spec.Names.Kind] = crd
	}
	if len(crds) == 0 {
		t.Fatalf("no CRD in %s; run hack/generate.sh", crdDir)
	}
	return crds
}

func TestCRDsServeMetalLBAPI(t *testing.T) {
	crds := loadCRDs(t)
	for kind := range crds {
		if _, ok := wantCRDs[kind]; !ok {
			t.Errorf("unexpected CRD for kind %s", kind)
		}
	}
	for kind, want := range wantCRDs {
		t.Run(kind, func(t *testing.T) {
			crd, ok := crds[kind]
			if !ok {
				t.Fatalf("no CRD for kind %s", kind)
			}
			if crd.Spec.Group != "metallb.io" {
				t.Errorf("group = %q, want metallb.io", crd.Spec.Group)
			}
			if crd.Name != want.plural+".metallb.io" || crd.Spec.Names.Plural != want.plural {
				t.Errorf("name %q, plural %q; want %s.metallb.io", crd.Name, crd.Spec.Names.Plural, want.plural)
			}
			if crd.Spec.Names.ListKind != kind+"List" || crd.Spec.Names.Singular != strings.ToLower(kind) {
				t.Errorf("listKind %q, singular %q", crd.Spec.Names.ListKind, crd.Spec.Names.Singular)
			}
			if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
				t.Errorf("scope = %s, want Namespaced", crd.Spec.Scope)
			}
			switch c := crd.Spec.Conversion; {
			case kind == "BGPPeer":
				// The controller's conversion webhook, as MetalLB's (hack/generate.sh adds it).
				if c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ClientConfig == nil ||
					c.Webhook.ClientConfig.Service == nil || c.Webhook.ClientConfig.Service.Name != "ironlb-webhook-service" ||
					c.Webhook.ClientConfig.Service.Namespace != "metallb-system" || c.Webhook.ClientConfig.Service.Path == nil ||
					*c.Webhook.ClientConfig.Service.Path != "/convert" || !slices.Contains(c.Webhook.ConversionReviewVersions, "v1") {
					t.Errorf("conversion %+v: want the webhook at ironlb-webhook-service /convert, review v1", c)
				}
			case c != nil && c.Strategy != apiextensionsv1.NoneConverter:
				t.Errorf("conversion strategy %s: only BGPPeer has two versions to convert", c.Strategy)
			}
			var served []string
			for _, v := range crd.Spec.Versions {
				if v.Served {
					served = append(served, v.Name)
				}
				if v.Storage && v.Name != want.versions[len(want.versions)-1] {
					t.Errorf("storage version %s, want %s", v.Name, want.versions[len(want.versions)-1])
				}
				if v.Subresources == nil || v.Subresources.Status == nil {
					t.Errorf("%s: no status subresource", v.Name)
				}
				if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
					t.Fatalf("%s: no schema", v.Name)
				}
				walkSchema(*v.Schema.OpenAPIV3Schema, "", func(path string, s apiextensionsv1.JSONSchemaProps) {
					// An object that keeps unknown fields would let a typo through
					// `kubectl apply` (field validation Strict) silently.
					if s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
						t.Errorf("%s: x-kubernetes-preserve-unknown-fields at %q", v.Name, path)
					}
				})
			}
			if !slices.Equal(served, want.versions) {
				t.Errorf("served versions %v, want %v", served, want.versions)
			}
		})
	}
}

// TestCRDsAreValid runs the API server's CRD validation: the schemas are
// structural, defaults are pruned, and every CEL rule compiles within the
// cost limits. A CRD failing here is refused by kube-apiserver.
func TestCRDsAreValid(t *testing.T) {
	for kind, crd := range loadCRDs(t) {
		internal := &apiextensions.CustomResourceDefinition{}
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		// The API server records the storage version on create.
		for _, v := range internal.Spec.Versions {
			if v.Storage {
				internal.Status.StoredVersions = append(internal.Status.StoredVersions, v.Name)
			}
		}
		if errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
			t.Errorf("%s: %v", kind, errs.ToAggregate())
		}
	}
}

func TestPrinterColumns(t *testing.T) {
	crds := loadCRDs(t)
	tests := []struct {
		kind string
		want []apiextensionsv1.CustomResourceColumnDefinition
		// header is what `kubectl get` prints by default (priority 0).
		header string
	}{{
		kind: "IPAddressPool",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Auto Assign", Type: "boolean", JSONPath: ".spec.autoAssign"},
			{Name: "Avoid Buggy IPs", Type: "boolean", JSONPath: ".spec.avoidBuggyIPs"},
			{Name: "Addresses", Type: "string", JSONPath: ".spec.addresses"},
		},
		header: "NAME  AUTO ASSIGN  AVOID BUGGY IPS  ADDRESSES", // seed 000
	}, {
		kind: "L2Advertisement",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "IPAddressPools", Type: "string", JSONPath: ".spec.ipAddressPools"},
			{Name: "IPAddressPool Selectors", Type: "string", JSONPath: ".spec.ipAddressPoolSelectors"},
			{Name: "Interfaces", Type: "string", JSONPath: ".spec.interfaces"},
			{Name: "Node Selectors", Type: "string", JSONPath: ".spec.nodeSelectors", Priority: 10},
		},
		header: "NAME  IPADDRESSPOOLS  IPADDRESSPOOL SELECTORS  INTERFACES", // seed 000
	}, {
		kind: "BGPAdvertisement",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "IPAddressPools", Type: "string", JSONPath: ".spec.ipAddressPools"},
			{Name: "IPAddressPool Selectors", Type: "string", JSONPath: ".spec.ipAddressPoolSelectors"},
			{Name: "Peers", Type: "string", JSONPath: ".spec.peers"},
			{Name: "Node Selectors", Type: "string", JSONPath: ".spec.nodeSelectors", Priority: 10},
		},
		header: "NAME  IPADDRESSPOOLS  IPADDRESSPOOL SELECTORS  PEERS",
	}, {
		kind: "BGPPeer",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Address", Type: "string", JSONPath: ".spec.peerAddress"},
			{Name: "ASN", Type: "string", JSONPath: ".spec.peerASN"},
			{Name: "BFD Profile", Type: "string", JSONPath: ".spec.bfdProfile"},
			{Name: "Multi Hops", Type: "string", JSONPath: ".spec.ebgpMultiHop"},
		},
		header: "NAME  ADDRESS  ASN  BFD PROFILE  MULTI HOPS",
	}, {
		kind: "BFDProfile",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Passive Mode", Type: "boolean", JSONPath: ".spec.passiveMode"},
			{Name: "Transmit Interval", Type: "integer", JSONPath: ".spec.transmitInterval"},
			{Name: "Receive Interval", Type: "integer", JSONPath: ".spec.receiveInterval"},
			{Name: "Multiplier", Type: "integer", JSONPath: ".spec.detectMultiplier"},
		},
		header: "NAME  PASSIVE MODE  TRANSMIT INTERVAL  RECEIVE INTERVAL  MULTIPLIER",
	}, {
		kind:   "Community",
		header: "NAME  AGE", // no columns: kubectl adds AGE
	}, {
		kind: "ServiceL2Status",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Allocated Node", Type: "string", JSONPath: ".status.node"},
			{Name: "Service Name", Type: "string", JSONPath: ".status.serviceName"},
			{Name: "Service Namespace", Type: "string", JSONPath: ".status.serviceNamespace"},
		},
		header: "NAME  ALLOCATED NODE  SERVICE NAME  SERVICE NAMESPACE",
	}, {
		kind: "ServiceBGPStatus",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Node", Type: "string", JSONPath: ".status.node"},
			{Name: "Service Name", Type: "string", JSONPath: ".status.serviceName"},
			{Name: "Service Namespace", Type: "string", JSONPath: ".status.serviceNamespace"},
		},
		header: "NAME  NODE  SERVICE NAME  SERVICE NAMESPACE",
	}, {
		kind: "ConfigurationState",
		want: []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Result", Type: "string", JSONPath: ".status.result"},
			{Name: "ErrorSummary", Type: "string", JSONPath: ".status.errorSummary"},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
		header: "NAME  RESULT  ERRORSUMMARY  AGE",
	}}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			crd := crds[tt.kind]
			if crd == nil {
				t.Fatalf("no CRD for %s", tt.kind)
			}
			for _, v := range crd.Spec.Versions {
				if !reflect.DeepEqual(v.AdditionalPrinterColumns, tt.want) {
					t.Errorf("%s columns:\n got %+v\nwant %+v", v.Name, v.AdditionalPrinterColumns, tt.want)
				}
				if got := kubectlHeader(v.AdditionalPrinterColumns); got != tt.header {
					t.Errorf("%s: kubectl get prints %q, want %q", v.Name, got, tt.header)
				}
			}
		})
	}
}

// kubectlHeader is the header `kubectl get` prints for these columns: NAME,
// then each priority-0 column upper-cased, or NAME AGE when there is none.
func kubectlHeader(cols []apiextensionsv1.CustomResourceColumnDefinition) string {
	names := []string{"NAME"}
	for _, c := range cols {
		if c.Priority == 0 {
			names = append(names, strings.ToUpper(c.Name))
		}
	}
	if len(cols) == 0 {
		names = append(names, "AGE")
	}
	return strings.Join(names, "  ")
}

// TestSeed000Table renders seed 000's pool as the API server renders it for
// `kubectl get ipaddresspools`: the defaults fill AUTO ASSIGN and AVOID
// BUGGY IPS although the manifest sets neither.
func TestSeed000Table(t *testing.T) {
	crds := loadCRDs(t)
	docs := readDocs(t, "testdata/seed000.yaml")
	tests := []struct {
		kind string
		want []any
	}{
		{"IPAddressPool", []any{"my-ippool", true, false, `["172.18.255.200-172.18.255.250"]`}},
		{"L2Advertisement", []any{"my-l2-advertise", `["my-ippool"]`, nil, nil, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			var obj map[string]any
			for _, d := range docs {
				if d.obj["kind"] == tt.kind {
					obj = d.obj
				}
			}
			if obj == nil {
				t.Fatalf("seed000.yaml has no %s", tt.kind)
			}
			v := crdVersion(t, crds[tt.kind], "v1beta1")
			if errs := admit(t, v, obj, nil); len(errs) > 0 {
				t.Fatalf("refused: %v", errs.ToAggregate())
			}
			conv, err := tableconvertor.New(v.AdditionalPrinterColumns)
			if err != nil {
				t.Fatal(err)
			}
			table, err := conv.ConvertToTable(context.Background(), &unstructured.Unstructured{Object: obj}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("%d rows", len(table.Rows))
			}
			if got := table.Rows[0].Cells; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("row = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// TestExamples decodes every manifest in testdata strictly into the Go
// types, checks nothing is lost on the way back to JSON, and has the CRD of
// its kind admit it.
func TestExamples(t *testing.T) {
	crds := loadCRDs(t)
	scheme := newScheme(t)
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		for _, d := range readDocs(t, file) {
			t.Run(d.name, func(t *testing.T) {
				gvk := schema.FromAPIVersionAndKind(fmt.Sprint(d.obj["apiVersion"]), fmt.Sprint(d.obj["kind"]))
				seen[gvk.Kind] = true
				typed, err := scheme.New(gvk)
				if err != nil {
					t.Fatalf("%s: %v", gvk, err)
				}
				if err := yaml.UnmarshalStrict(d.raw, typed); err != nil {
					t.Fatalf("strict decode into %T: %v", typed, err)
				}
				out, err := json.Marshal(typed)
				if err != nil {
					t.Fatal(err)
				}
				var back map[string]any
				if err := utiljson.Unmarshal(out, &back); err != nil {
					t.Fatal(err)
				}
				if diff := missing(d.obj, back, ""); len(diff) > 0 {
					t.Errorf("lost in the Go round trip:\n%s\nJSON: %s", strings.Join(diff, "\n"), out)
				}
				again, _ := scheme.New(gvk)
				if err := json.Unmarshal(out, again); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(typed, again) {
					t.Errorf("round trip changed the object:\n%#v\n%#v", typed, again)
				}

				v := crdVersion(t, crds[gvk.Kind], gvk.Version)
				if errs := admit(t, v, d.obj, nil); len(errs) > 0 {
					t.Errorf("refused by the CRD: %v", errs.ToAggregate())
				}
				// What the API server stores, defaults included, decodes too.
				stored, err := json.Marshal(d.obj)
				if err != nil {
					t.Fatal(err)
				}
				typed, _ = scheme.New(gvk)
				if err := yaml.UnmarshalStrict(stored, typed); err != nil {
					t.Errorf("strict decode of the defaulted object: %v", err)
				}
			})
		}
	}
	for kind := range wantCRDs {
		if !seen[kind] {
			t.Errorf("testdata has no example of %s", kind)
		}
	}
}

// TestDefaults checks the defaults MetalLB's CRDs declare are applied.
func TestDefaults(t *testing.T) {
	crds := loadCRDs(t)
	tests := []struct {
		name, kind, version string
		spec                map[string]any
		path                []string
		want                any
	}{
		{"pool autoAssign", "IPAddressPool", "v1beta1", map[string]any{"addresses": []any{"10.0.0.0/24"}}, []string{"autoAssign"}, true},
		{"pool avoidBuggyIPs", "IPAddressPool", "v1beta1", map[string]any{"addresses": []any{"10.0.0.0/24"}}, []string{"avoidBuggyIPs"}, false},
		{"aggregationLength", "BGPAdvertisement", "v1beta1", map[string]any{}, []string{"aggregationLength"}, int64(32)},
		{"aggregationLengthV6", "BGPAdvertisement", "v1beta1", map[string]any{}, []string{"aggregationLengthV6"}, int64(128)},
		{"peerPort", "BGPPeer", "v1beta2", map[string]any{"myASN": int64(64512)}, []string{"peerPort"}, int64(179)},
		{"disableMP", "BGPPeer", "v1beta2", map[string]any{"myASN": int64(64512)}, []string{"disableMP"}, false},
		{"dualStackAddressFamily", "BGPPeer", "v1beta2", map[string]any{"myASN": int64(64512)}, []string{"dualStackAddressFamily"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := object(tt.kind, "metallb.io/"+tt.version, tt.spec)
			if errs := admit(t, crdVersion(t, crds[tt.kind], tt.version), obj, nil); len(errs) > 0 {
				t.Fatalf("refused: %v", errs.ToAggregate())
			}
			got, found, err := unstructured.NestedFieldNoCopy(obj, append([]string{"spec"}, tt.path...)...)
			if err != nil || !found || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("spec.%s = %#v (found %v, %v), want %#v", strings.Join(tt.path, "."), got, found, err, tt.want)
			}
		})
	}
}

// TestValidation holds the schemas and CEL rules to MetalLB's, plus ironlb's
// address check: each case is admitted, or refused with an error mentioning
// want.
func TestValidation(t *testing.T) {
	crds := loadCRDs(t)
	pool := func(addresses ...any) map[string]any { return map[string]any{"addresses": addresses} }
	peer := func(field string, value any) map[string]any {
		return map[string]any{"myASN": int64(64512), "peerASN": int64(64513), "peerAddress": "10.0.0.1", field: value}
	}
	const badAddress = "each address must be a CIDR prefix"
	tests := []struct {
		name, kind string
		spec       map[string]any
		want       string // empty: admitted
	}{
		// Every form MetalLB's ParseCIDR accepts stays accepted.
		{"ipv4 cidr", "IPAddressPool", pool("192.168.10.0/24"), ""},
		{"ipv6 cidr", "IPAddressPool", pool("fc00:f853:0ccd:e799::/124"), ""},
		{"cidr with host bits", "IPAddressPool", pool("10.1.2.3/24"), ""},
		{"single address cidr", "IPAddressPool", pool("10.1.2.3/32", "2001:db8::1/128"), ""},
		{"ipv4 range", "IPAddressPool", pool("192.168.9.1-192.168.9.5"), ""},
		{"ipv4 range spaced", "IPAddressPool", pool("192.168.9.1 - 192.168.9.5"), ""},
		{"ipv6 range", "IPAddressPool", pool("2001:db8::10-2001:db8::ff"), ""},
		{"one-address range", "IPAddressPool", pool("10.0.0.7-10.0.0.7"), ""},
		{"many addresses", "IPAddressPool", pool("10.0.0.0/24", "10.0.1.1-10.0.1.9", "fd00::/120"), ""},
		// ironlb's addition: malformed addresses.
		{"prefix too long", "IPAddressPool", pool("10.0.0.0/33"), badAddress},
		{"ipv6 prefix too long", "IPAddressPool", pool("fd00::/129"), badAddress},
		{"range to garbage", "IPAddressPool", pool("10.0.0.1-foo"), badAddress},
		{"mixed family range", "IPAddressPool", pool("10.0.0.1-fd00::5"), badAddress},
		{"bare address", "IPAddressPool", pool("10.0.0.1"), badAddress},
		{"three-part range", "IPAddressPool", pool("10.0.0.1-10.0.0.2-10.0.0.3"), badAddress},
		{"half range", "IPAddressPool", pool("10.0.0.1-"), badAddress},
		{"empty string", "IPAddressPool", pool(""), badAddress},
		{"hostname", "IPAddressPool", pool("lb.example.com"), badAddress},
		{"one bad among good", "IPAddressPool", pool("10.0.0.0/24", "10.0.1.0/24/1"), "spec.addresses[1]"},
		// Refused although Go's net.ParseCIDR/ParseIP, which MetalLB uses,
		// take them: Kubernetes' CEL IP library refuses IPv4-mapped IPv6
		// and zero-padded prefix lengths. Odd spellings, not real pools.
		{"ipv4-mapped ipv6 cidr", "IPAddressPool", pool("::ffff:10.0.0.0/120"), badAddress},
		{"ipv4-mapped ipv6 range", "IPAddressPool", pool("::ffff:10.0.0.1-::ffff:10.0.0.5"), badAddress},
		{"zero-padded prefix length", "IPAddressPool", pool("10.0.0.0/024"), badAddress},
		{"empty addresses", "IPAddressPool", pool(), "spec.addresses"},
		{"address too long", "IPAddressPool", pool("10.0.0.1" + strings.Repeat(" ", 121) + "-10.0.0.2"), "spec.addresses[0]"},
		{"longest ipv6 range", "IPAddressPool", pool("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0 - ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), ""},
		{"no addresses", "IPAddressPool", map[string]any{"autoAssign": true}, "spec.addresses: Required"},
		// MetalLB's own schema.
		{"pool address not a string", "IPAddressPool", pool(int64(10)), "spec.addresses[0]"},
		{"aggregationLength 0", "BGPAdvertisement", map[string]any{"aggregationLength": int64(0)}, "spec.aggregationLength"},
		{"service selector, default lengths", "BGPAdvertisement", map[string]any{"serviceSelectors": []any{map[string]any{}}}, ""},
		{"service selector, length 32", "BGPAdvertisement", map[string]any{"serviceSelectors": []any{map[string]any{}}, "aggregationLength": int64(32)}, ""},
		{"service selector, aggregated v4", "BGPAdvertisement", map[string]any{"serviceSelectors": []any{map[string]any{}}, "aggregationLength": int64(24)}, "serviceSelectors cannot be used"},
		{"service selector, aggregated v6", "BGPAdvertisement", map[string]any{"serviceSelectors": []any{map[string]any{}}, "aggregationLengthV6": int64(64)}, "serviceSelectors cannot be used"},
		{"aggregation without service selector", "BGPAdvertisement", map[string]any{"aggregationLength": int64(24), "aggregationLengthV6": int64(64)}, ""},
		{"peer without myASN", "BGPPeer", map[string]any{"peerASN": int64(1), "peerAddress": "10.0.0.1"}, "spec.myASN: Required"},
		{"peer asn too large", "BGPPeer", peer("peerASN", int64(4294967296)), "spec.peerASN"},
		{"peer asn 4-byte", "BGPPeer", peer("peerASN", int64(4294967295)), ""},
		{"my asn 4-byte", "BGPPeer", peer("myASN", int64(4200000000)), ""},
		{"local asn 4-byte", "BGPPeer", peer("localASN", int64(4200000001)), ""},
		{"local asn 0", "BGPPeer", peer("localASN", int64(0)), "spec.localASN"},
		{"localPref above int32", "BGPAdvertisement", map[string]any{"localPref": int64(4294967295)}, ""},
		{"localPref above uint32", "BGPAdvertisement", map[string]any{"localPref": int64(4294967296)}, "spec.localPref"},
		{"peer port 0", "BGPPeer", peer("peerPort", int64(0)), "spec.peerPort"},
		{"peer port too large", "BGPPeer", peer("peerPort", int64(16385)), "spec.peerPort"},
		{"peer dynamicASN", "BGPPeer", map[string]any{"myASN": int64(1), "dynamicASN": "internal", "interface": "eth0"}, ""},
		{"peer dynamicASN bad", "BGPPeer", map[string]any{"myASN": int64(1), "dynamicASN": "both", "peerAddress": "10.0.0.1"}, "spec.dynamicASN"},
		{"peer connectTime", "BGPPeer", peer("connectTime", "5s"), ""},
		{"peer connectTime fractional", "BGPPeer", peer("connectTime", "1500ms"), "whole number of seconds"},
		{"peer connectTime zero", "BGPPeer", peer("connectTime", "0s"), "between 1 seconds to 65535"},
		{"peer connectTime too long", "BGPPeer", peer("connectTime", "24h"), "between 1 seconds to 65535"},
		{"bfd interval too short", "BFDProfile", map[string]any{"receiveInterval": int64(9)}, "spec.receiveInterval"},
		{"bfd multiplier too large", "BFDProfile", map[string]any{"detectMultiplier": int64(256)}, "spec.detectMultiplier"},
		{"bfd ttl 0", "BFDProfile", map[string]any{"minimumTtl": int64(0)}, "spec.minimumTtl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			version := "v1beta1"
			if tt.kind == "BGPPeer" {
				version = "v1beta2"
			}
			obj := object(tt.kind, "metallb.io/"+version, tt.spec)
			errs := admit(t, crdVersion(t, crds[tt.kind], version), obj, nil)
			switch {
			case tt.want == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs.ToAggregate())
			case tt.want != "" && len(errs) == 0:
				t.Errorf("admitted; want an error mentioning %q", tt.want)
			case tt.want != "" && !strings.Contains(errs.ToAggregate().Error(), tt.want):
				t.Errorf("error %q does not mention %q", errs.ToAggregate(), tt.want)
			case tt.want != "":
				t.Logf("refused as expected: %v", errs.ToAggregate())
			}
		})
	}
}

// TestUnknownFieldsAreReported: every schema is closed, so the API server
// finds a misspelled field and, under kubectl's default --validate=strict,
// refuses the object instead of dropping the field.
func TestUnknownFieldsAreReported(t *testing.T) {
	crds := loadCRDs(t)
	tests := []struct {
		kind, version string
		obj           map[string]any
		want          string
	}{
		{"IPAddressPool", "v1beta1", object("IPAddressPool", "metallb.io/v1beta1", map[string]any{"addresses": []any{"10.0.0.0/24"}, "autoassign": false}), ".spec.autoassign"},
		{"IPAddressPool", "v1beta1", object("IPAddressPool", "metallb.io/v1beta1", map[string]any{"addresses": []any{"10.0.0.0/24"}, "serviceAllocation": map[string]any{"namespaceSelectors": []any{map[string]any{"matchLabel": map[string]any{"a": "b"}}}}}), ".spec.serviceAllocation.namespaceSelectors[0].matchLabel"},
		{"L2Advertisement", "v1beta1", object("L2Advertisement", "metallb.io/v1beta1", map[string]any{"ipAddressPool": []any{"a"}}), ".spec.ipAddressPool"},
		{"BGPPeer", "v1beta2", object("BGPPeer", "metallb.io/v1beta2", map[string]any{"myASN": int64(1), "peerAsn": int64(2)}), ".spec.peerAsn"},
		{"ServiceL2Status", "v1beta1", map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status", "metadata": map[string]any{"name": "x", "namespace": "metallb-system"}, "status": map[string]any{"nodes": "a"}}, ".status.nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			s := structural(t, crdVersion(t, crds[tt.kind], tt.version))
			unknown := pruning.PruneWithOptions(tt.obj, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
			if !slices.Contains(unknown, strings.TrimPrefix(tt.want, ".")) {
				t.Errorf("unknown fields %v, want %s among them", unknown, tt.want)
			}
		})
	}
}

// TestImmutableStatusFields exercises the transition rules of the status
// kinds: the node and the Service never change on update.
func TestImmutableStatusFields(t *testing.T) {
	crds := loadCRDs(t)
	status := func(node string) map[string]any {
		return map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
			"metadata": map[string]any{"name": "l2", "namespace": "metallb-system"},
			"status":   map[string]any{"node": node, "serviceName": "svc1", "serviceNamespace": "default"},
		}
	}
	v := crdVersion(t, crds["ServiceL2Status"], "v1beta1")
	if errs := admit(t, v, status("a"), status("a")); len(errs) > 0 {
		t.Errorf("unchanged update refused: %v", errs.ToAggregate())
	}
	if errs := admit(t, v, status("b"), status("a")); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "Value is immutable") {
		t.Errorf("changing status.node: errors %v, want Value is immutable", errs.ToAggregate())
	}
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1beta1.AddToScheme, v1beta2.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func object(kind, apiVersion string, spec map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata":   map[string]any{"name": "test", "namespace": "metallb-system"},
		"spec":       spec,
	}
}

func crdVersion(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, version string) apiextensionsv1.CustomResourceDefinitionVersion {
	t.Helper()
	if crd == nil {
		t.Fatal("no CRD")
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Served {
			return v
		}
	}
	t.Fatalf("%s does not serve %s", crd.Name, version)
	return apiextensionsv1.CustomResourceDefinitionVersion{}
}

func internalSchema(t *testing.T, v apiextensionsv1.CustomResourceDefinitionVersion) *apiextensions.JSONSchemaProps {
	t.Helper()
	out := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func structural(t *testing.T, v apiextensionsv1.CustomResourceDefinitionVersion) *structuralschema.Structural {
	t.Helper()
	s, err := structuralschema.NewStructural(internalSchema(t, v))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// admit does to obj what kube-apiserver does to a custom resource on create
// (old == nil) or update: default it in place, then validate it against the
// OpenAPI schema and the CEL rules. Unknown fields are TestUnknownFieldsAreReported's.
func admit(t *testing.T, v apiextensionsv1.CustomResourceDefinitionVersion, obj, old map[string]any) field.ErrorList {
	t.Helper()
	s := structural(t, v)
	structuraldefaulting.Default(obj, s)
	if old != nil {
		structuraldefaulting.Default(old, s)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internalSchema(t, v))
	if err != nil {
		t.Fatal(err)
	}
	var errs field.ErrorList
	if old == nil {
		errs = apiservervalidation.ValidateCustomResource(nil, obj, validator)
	} else {
		errs = apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, validator)
	}
	if celValidator := cel.NewValidator(s, true, celconfig.PerCallLimit); celValidator != nil {
		var oldObj any
		if old != nil {
			oldObj = old
		}
		celErrs, _ := celValidator.Validate(context.Background(), nil, s, obj, oldObj, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

type doc struct {
	name string
	raw  []byte
	obj  map[string]any // as the API server decodes it: whole numbers are int64
}

// readDocs splits a multi-document YAML file.
func readDocs(t *testing.T, file string) []doc {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var docs []doc
	for i, part := range bytes.Split(data, []byte("\n---\n")) {
		j, err := yaml.YAMLToJSON(part)
		if err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(j, &obj); err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		if obj == nil {
			continue
		}
		name, _, _ := unstructured.NestedString(obj, "metadata", "name")
		docs = append(docs, doc{name: fmt.Sprintf("%s/%s/%s", filepath.Base(file), obj["kind"], name), raw: part, obj: obj})
	}
	return docs
}

// missing lists what in want is absent from, or different in, got.
func missing(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v became %v", path, want, got)}
		}
		var out []string
		for k, wv := range w {
			out = append(out, missing(wv, g[k], path+"."+k)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v became %v", path, want, got)}
		}
		var out []string
		for i := range w {
			out = append(out, missing(w[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if reflect.DeepEqual(want, got) {
			return nil
		}
		// omitempty drops a false, 0 or "" field: the same value, since
		// every such field defaults to its zero value or is a pointer.
		if got == nil && (want == false || want == int64(0) || want == "") {
			return nil
		}
		// metav1.Duration writes Go's own spelling: 90s comes back 1m30s.
		if ws, ok := want.(string); ok {
			if gs, ok := got.(string); ok {
				wd, werr := time.ParseDuration(ws)
				gd, gerr := time.ParseDuration(gs)
				if werr == nil && gerr == nil && wd == gd {
					return nil
				}
			}
		}
		return []string{fmt.Sprintf("%s: %#v became %#v", path, want, got)}
	}
}

func walkSchema(s apiextensionsv1.JSONSchemaProps, path string, visit func(string, apiextensionsv1.JSONSchemaProps)) {
	visit(path, s)
	for name, p := range s.Properties {
		walkSchema(p, path+"."+name, visit)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walkSchema(*s.Items.Schema, path+"[]", visit)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walkSchema(*s.AdditionalProperties.Schema, path+"{}", visit)
	}
}
