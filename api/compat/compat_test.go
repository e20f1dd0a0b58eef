// Package compat checks that ironlb serves MetalLB's metallb.io API unchanged: every CRD schema in
// config/crd/bases has the same fields, types, required lists, defaults, enums and printer columns as
// MetalLB v0.16.1's own CRDs (taken from its Go module, go.universe.tf/metallb).
package compat

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const metallbModule = "go.universe.tf/metallb@v0.16.1"

func metallbDir(t *testing.T) string {
	out, err := exec.Command("go", "mod", "download", "-json", metallbModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", metallbModule, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Error != "" || m.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", metallbModule, err, m.Error)
	}
	return m.Dir
}

func load(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &crd
}

// shape flattens a schema to path -> "type required default enum".
func shape(s *apiextensionsv1.JSONSchemaProps, path string, out map[string]string) {
	if s == nil {
		return
	}
	req := append([]string(nil), s.Required...)
	sort.Strings(req)
	def := ""
	if s.Default != nil {
		def = string(s.Default.Raw)
	}
	var enum []string
	for _, e := range s.Enum {
		enum = append(enum, string(e.Raw))
	}
	out[path] = fmt.Sprintf("type=%s required=%v default=%s enum=%v", s.Type, req, def, enum)
	for k, v := range s.Properties {
		shape(&v, path+"."+k, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		shape(s.Items.Schema, path+"[]", out)
	}
}

func TestCRDsMatchMetalLB(t *testing.T) {
	theirs, _ := filepath.Glob(filepath.Join(metallbDir(t), "config", "crd", "bases", "*.yaml"))
	if len(theirs) != 9 {
		t.Fatalf("want MetalLB's 9 CRDs, found %d", len(theirs))
	}
	for _, f := range theirs {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			ours := load(t, filepath.Join("..", "..", "config", "crd", "bases", name))
			ref := load(t, f)
			if ours.Spec.Group != ref.Spec.Group || ours.Spec.Names.Kind != ref.Spec.Names.Kind || ours.Spec.Scope != ref.Spec.Scope ||
				ours.Spec.Names.Plural != ref.Spec.Names.Plural {
				t.Fatalf("names differ: ours %s/%s %s, MetalLB %s/%s %s", ours.Spec.Group, ours.Spec.Names.Kind, ours.Spec.Scope,
					ref.Spec.Group, ref.Spec.Names.Kind, ref.Spec.Scope)
			}
			for _, rv := range ref.Spec.Versions {
				var ov *apiextensionsv1.CustomResourceDefinitionVersion
				for i := range ours.Spec.Versions {
					if ours.Spec.Versions[i].Name == rv.Name {
						ov = &ours.Spec.Versions[i]
					}
				}
				if ov == nil {
					if ref.Spec.Names.Kind == "BGPPeer" && rv.Name == "v1beta1" {
						continue // deprecated version served by MetalLB through a conversion webhook
					}
					t.Errorf("version %s not served", rv.Name)
					continue
				}
				a, b := map[string]string{}, map[string]string{}
				shape(rv.Schema.OpenAPIV3Schema, "", a)
				shape(ov.Schema.OpenAPIV3Schema, "", b)
				for p, want := range a {
					if got := b[p]; got != want {
						t.Errorf("%s %s: MetalLB %q, ironlb %q", rv.Name, p, want, got)
					}
				}
				for p := range b {
					if ref.Spec.Names.Kind == "IPAddressPool" && strings.HasPrefix(p, ".status.conditions") {
						continue // ironlb's one addition: conditions in the controller-written status
					}
					if _, ok := a[p]; !ok {
						t.Errorf("%s %s: only in ironlb's schema", rv.Name, p)
					}
				}
				if fmt.Sprint(rv.AdditionalPrinterColumns) != fmt.Sprint(ov.AdditionalPrinterColumns) {
					t.Errorf("%s printer columns: MetalLB %v, ironlb %v", rv.Name, rv.AdditionalPrinterColumns, ov.AdditionalPrinterColumns)
				}
			}
		})
	}
}
