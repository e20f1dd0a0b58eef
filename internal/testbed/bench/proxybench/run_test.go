package proxybench

import (
	"fmt"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	manifests "github.com/ironlb/ironlb/config"
)

// The benchmark installs config/proxy itself: every object must decode, and the DaemonSet must
// end up only on the labelled node.
func TestDecodeProxyBundle(t *testing.T) {
	objs := proxyObjects(t)
	var kinds []string
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		kinds = append(kinds, fmt.Sprintf("%T", o))
		switch o := o.(type) {
		case *corev1.ServiceAccount, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding,
			*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		case *appsv1.DaemonSet:
			ds = o
		default:
			t.Errorf("unexpected object %T: installIronLB does not create it", o)
		}
	}
	if ds == nil {
		t.Fatalf("no DaemonSet in config/proxy (got %v)", kinds)
	}
	if ds.Namespace != ironlbNS || ds.Name != ironlbDS {
		t.Errorf("DaemonSet %s/%s, want %s/%s", ds.Namespace, ds.Name, ironlbNS, ironlbDS)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Name; got != "proxy" {
		t.Errorf("container %q: the benchmark finds its cgroup as proxy-<run>", got)
	}
	if ds.Spec.Template.Labels["app"] != "ironlb" || ds.Spec.Template.Labels["component"] != "proxy" {
		t.Errorf("Pod labels %v: the benchmark selects app=ironlb,component=proxy", ds.Spec.Template.Labels)
	}
	onlyOn(ds, benchLabel, labelRunsIronLB)
	if ds.Annotations[ownerAnnotation] == "" {
		t.Error("no owner annotation")
	}
	if !mentionsBenchLabel(ds.Spec.Template.Spec.Affinity) {
		t.Error("the affinity does not use the bench label")
	}
	req := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
	if req.Operator != corev1.NodeSelectorOpIn || len(req.Values) != 1 || req.Values[0] != labelRunsIronLB {
		t.Errorf("affinity %+v", req)
	}
}

func TestMentionsBenchLabel(t *testing.T) {
	term := func(key string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpDoesNotExist}}}},
		}}}
	}
	for _, tc := range []struct {
		name string
		a    *corev1.Affinity
		want bool
	}{
		{"none", nil, false},
		{"no node affinity", &corev1.Affinity{}, false},
		{"another label", term("kubernetes.io/os"), false},
		{"the bench's", term(benchLabel), true},
	} {
		if got := mentionsBenchLabel(tc.a); got != tc.want {
			t.Errorf("%s: mentionsBenchLabel = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHasContent(t *testing.T) {
	for in, want := range map[string]bool{"": false, "# only\n# comments\n": false, "---\n": false, "kind: X\n": true, "# c\napiVersion: v1\n": true} {
		if got := hasContent([]byte(in)); got != want {
			t.Errorf("hasContent(%q) = %v, want %v", in, got, want)
		}
	}
}

// proxyObjects are config/proxy's objects, decoded as installIronLB decodes them.
func proxyObjects(t *testing.T) []any {
	t.Helper()
	bundle, err := manifests.Bundle("proxy")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
