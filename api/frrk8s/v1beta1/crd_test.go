package v1beta1_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"sigs.k8s.io/yaml"
)

const crdFile = "../../../config/crd/bases/frrk8s.metallb.io_bgpsessionstates.yaml"

// TestBGPSessionStateCRD holds the generated CRD to frr-k8s' BGPSessionState: group, names,
// namespaced, v1beta1 served and stored, a status subresource, the status fields frr-k8s writes,
// and ironlb's printer columns; and runs the API server's CRD validation on it.
func TestBGPSessionStateCRD(t *testing.T) {
	data, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatalf("%v (run hack/generate.sh)", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	if crd.Name != "bgpsessionstates.frrk8s.metallb.io" || crd.Spec.Group != "frrk8s.metallb.io" ||
		crd.Spec.Names.Kind != "BGPSessionState" || crd.Spec.Names.ListKind != "BGPSessionStateList" ||
		crd.Spec.Names.Plural != "bgpsessionstates" || crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("CRD %s: group %s, names %+v, scope %s", crd.Name, crd.Spec.Group, crd.Spec.Names, crd.Spec.Scope)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("versions %d, want 1", len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Name != "v1beta1" || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("version %s served %v storage %v subresources %+v", v.Name, v.Served, v.Storage, v.Subresources)
	}
	status := v.Schema.OpenAPIV3Schema.Properties["status"].Properties
	for _, f := range []string{"bgpStatus", "bfdStatus", "node", "peer", "vrf"} {
		if status[f].Type != "string" {
			t.Errorf("status.%s: type %q, want string", f, status[f].Type)
		}
	}
	if len(status) != 5 {
		t.Errorf("status has %d fields, want 5", len(status))
	}
	want := []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Node", Type: "string", JSONPath: ".status.node"},
		{Name: "Peer", Type: "string", JSONPath: ".status.peer"},
		{Name: "VRF", Type: "string", JSONPath: ".status.vrf"},
		{Name: "BGP", Type: "string", JSONPath: ".status.bgpStatus"},
		{Name: "BFD", Type: "string", JSONPath: ".status.bfdStatus"},
	}
	if diff := cmp.Diff(want, v.AdditionalPrinterColumns); diff != "" {
		t.Errorf("printer columns (-want +got):\n%s", diff)
	}

	internal := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		t.Fatal(err)
	}
	internal.Status.StoredVersions = []string{"v1beta1"}
	if errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		t.Error(errs.ToAggregate())
	}
}
