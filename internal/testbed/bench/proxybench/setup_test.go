package proxybench

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// TestInstallIronLB runs installIronLB against a fake clientset: it creates the ConfigMap (with the
// apiserver's address) and config/proxy's objects, the DaemonSet only on the labelled node; it
// registers the deletion of each object it created but the DaemonSet (setup's removeIronLB
// deletes that), and none for an object that already existed, which it leaves alone; cleanup
// deletes what it registered. Any other error stops it, naming the object.
func TestInstallIronLB(t *testing.T) {
	objs := proxyObjects(t)
	var sa *corev1.ServiceAccount
	var role *rbacv1.ClusterRole
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *rbacv1.ClusterRole:
			role = o
		}
	}
	if sa == nil || role == nil {
		t.Fatal("config/proxy has no ServiceAccount or no ClusterRole")
	}
	newBench := func(t *testing.T, cs *fake.Clientset) *bench {
		p := lab.Plan{Nodes: []lab.Host{{Name: "myk8s-control-plane", Addr: netip.MustParseAddr("172.18.0.2")}}}
		return &bench{l: &lab.Lab{Plan: p}, cs: cs, o: Options{Log: t.Logf}}
	}
	steps := func(b *bench) []string {
		var out []string
		for _, u := range b.undo {
			out = append(out, u.what)
		}
		return out
	}
	// names are the objects of every kind installIronLB creates, "kind name", sorted.
	names := func(t *testing.T, cs *fake.Clientset) []string {
		t.Helper()
		ctx := context.Background()
		var out []string
		add := func(kind string, err error, items ...metav1.Object) {
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range items {
				out = append(out, kind+" "+o.GetName())
			}
		}
		cms, err := cs.CoreV1().ConfigMaps(ironlbNS).List(ctx, metav1.ListOptions{})
		add("configmap", err, ptrs(cms.Items)...)
		sas, err := cs.CoreV1().ServiceAccounts(ironlbNS).List(ctx, metav1.ListOptions{})
		add("serviceaccount", err, ptrs(sas.Items)...)
		crs, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		add("clusterrole", err, ptrs(crs.Items)...)
		crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
		add("clusterrolebinding", err, ptrs(crbs.Items)...)
		vaps, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
		add("validatingadmissionpolicy", err, ptrs(vaps.Items)...)
		vapbs, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
		add("validatingadmissionpolicybinding", err, ptrs(vapbs.Items)...)
		dss, err := cs.AppsV1().DaemonSets(ironlbNS).List(ctx, metav1.ListOptions{})
		add("daemonset", err, ptrs(dss.Items)...)
		slices.Sort(out)
		return out
	}

	t.Run("creates all, deletes what it created but the DaemonSet", func(t *testing.T) {
		cs := fake.NewClientset()
		b := newBench(t, cs)
		if err := b.installIronLB(context.Background()); err != nil {
			t.Fatal(err)
		}
		all := names(t, cs)
		if len(all) != len(objs)+1 {
			t.Errorf("%d objects created, want config/proxy's %d and the ConfigMap: %v", len(all), len(objs), all)
		}
		var want []string
		for _, n := range all {
			if !strings.HasPrefix(n, "daemonset ") {
				want = append(want, "deleting "+n)
			}
		}
		got := steps(b)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("undo steps %v, want %v", got, want)
		}
		cm, err := cs.CoreV1().ConfigMaps(ironlbNS).Get(context.Background(), ironlbDS, metav1.GetOptions{})
		if err != nil || cm.Data["apiServerHost"] != "172.18.0.2" || cm.Data["apiServerPort"] != "6443" {
			t.Errorf("ConfigMap %s: %v (%v)", ironlbDS, cm, err)
		}
		ds, err := cs.AppsV1().DaemonSets(ironlbNS).Get(context.Background(), ironlbDS, metav1.GetOptions{})
		if err != nil || ds.Annotations[ownerAnnotation] != "bench-proxy" || ds.Spec.Template.Spec.Affinity == nil {
			t.Errorf("DaemonSet %s not marked the benchmark's and restricted to the labelled node (onlyOn): %v (%v)", ironlbDS, ds, err)
		}
		if err := b.cleanup(context.Background()); err != nil {
			t.Fatal(err)
		}
		if left := names(t, cs); !slices.Equal(left, []string{"daemonset " + ironlbDS}) {
			t.Errorf("after cleanup: %v, want the DaemonSet only", left)
		}
	})

	t.Run("leaves alone what existed", func(t *testing.T) {
		cs := fake.NewClientset(sa.DeepCopy(), role.DeepCopy())
		b := newBench(t, cs)
		if err := b.installIronLB(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"serviceaccount " + sa.Name, "clusterrole " + role.Name} {
			if slices.Contains(steps(b), "deleting "+n) {
				t.Errorf("%s existed before, but its deletion is registered: %v", n, steps(b))
			}
		}
		if !slices.Contains(steps(b), "deleting configmap "+ironlbDS) {
			t.Errorf("the ConfigMap it created has no deletion: %v", steps(b))
		}
	})

	t.Run("another error stops it, naming the object", func(t *testing.T) {
		cs := fake.NewClientset()
		cs.PrependReactor("create", "clusterroles", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, role.Name, fmt.Errorf("no"))
		})
		b := newBench(t, cs)
		err := b.installIronLB(context.Background())
		if want := "creating clusterrole " + role.Name + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %v, want one starting %q", err, want)
		}
		if slices.Contains(names(t, cs), "daemonset "+ironlbDS) {
			t.Error("the DaemonSet was created after the error")
		}
	})
}

// ptrs returns pointers to the items, as metav1.Objects.
func ptrs[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}
