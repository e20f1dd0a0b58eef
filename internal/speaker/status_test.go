package speaker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	frrk8s "github.com/ironlb/ironlb/api/frrk8s/v1beta1"
	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

const testNS = "metallb-system"

// startAPI runs kube-apiserver and etcd (internal/testenv; skips when the binaries are missing)
// with ironlb's CRDs and the configuration namespace.
func startAPI(t *testing.T) (*testenv.Env, kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	env := testenv.Start(t)
	crds, _ := filepath.Glob("../../config/crd/bases/*.yaml")
	for _, f := range crds {
		if out, err := env.Kubectl("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("installing %s: %v\n%s", f, err, out)
		}
	}
	if out, err := env.Kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cs := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return env, cs, dyn
}

// waitList polls the objects of a kind in the namespace until ok accepts them.
func waitList(t *testing.T, dyn dynamic.Interface, kind statusKind, what string, ok func([]unstructured.Unstructured) bool) []unstructured.Unstructured {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := dyn.Resource(kind.gvr).Namespace(testNS).List(context.Background(), metav1.ListOptions{})
		if err == nil && ok(l.Items) {
			return l.Items
		}
		if time.Now().After(deadline) {
			var items []unstructured.Unstructured
			if l != nil {
				items = l.Items
			}
			t.Fatalf("%s: %s: never as wanted; have %v (err %v)", kind.kind, what, items, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStatusWritersAgainstAPIServer runs the three status writers against a real apiserver: objects
// are created with MetalLB's / frr-k8s' labels, their status goes through the status subresource
// and passes the CRDs' schemas, updates touch only what changed, another node's objects are left
// alone, and keys no longer reported are deleted.
func TestStatusWritersAgainstAPIServer(t *testing.T) {
	_, _, dyn := startAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l2 := newStatusWriter(dyn, l2StatusKind, testNS, "n1", log)
	svc := newStatusWriter(dyn, bgpStatusKind, testNS, "n1", log)
	sess := newStatusWriter(dyn, sessionStateKind, testNS, "n1", log)
	other := newStatusWriter(dyn, bgpStatusKind, testNS, "n2", log)
	for _, w := range []*statusWriter{l2, svc, sess, other} {
		go w.Run(ctx)
	}

	l2.Set(map[string]map[string]any{"default/web": l2Status("default/web", "n1", []string{"eth0"})})
	svc.Set(map[string]map[string]any{
		"default/web": bgpStatus("default/web", "n1", []string{"r1", "r2"}),
		"default/db":  bgpStatus("default/db", "n1", []string{"r1"}),
	})
	other.Set(map[string]map[string]any{"default/web": bgpStatus("default/web", "n2", []string{"r1"})})
	sess.Put("192.0.2.1", map[string]any{"bgpStatus": "Active", "bfdStatus": "N/A", "node": "n1", "peer": "192.0.2.1", "vrf": ""})
	sess.Put("2001:db8::1", map[string]any{"bgpStatus": "Established", "bfdStatus": "up", "node": "n1", "peer": "2001:db8::1", "vrf": ""})

	waitList(t, dyn, l2StatusKind, "created", func(items []unstructured.Unstructured) bool {
		return len(items) == 1 && items[0].GetLabels()[labelServiceName] == "web" && items[0].GetLabels()[labelNode] == "n1" &&
			nested(items[0], "status", "interfaces") == "[map[name:eth0]]"
	})
	waitList(t, dyn, bgpStatusKind, "created", func(items []unstructured.Unstructured) bool {
		var got []string
		for _, o := range items {
			got = append(got, o.GetLabels()[labelNode]+" "+o.GetLabels()[labelServiceNS]+"/"+o.GetLabels()[labelServiceName]+" "+
				nested(o, "status", "serviceNamespace")+"/"+nested(o, "status", "serviceName")+" "+nested(o, "status", "peers"))
		}
		slices.Sort(got)
		return slices.Equal(got, []string{"n1 default/db default/db [r1]", "n1 default/web default/web [r1 r2]", "n2 default/web default/web [r1]"})
	})
	items := waitList(t, dyn, sessionStateKind, "created", func(items []unstructured.Unstructured) bool {
		var got []string
		for _, o := range items {
			got = append(got, o.GetLabels()[frrk8s.LabelNode]+" "+o.GetLabels()[frrk8s.LabelPeer]+" "+nested(o, "status", "peer")+" "+
				nested(o, "status", "bgpStatus")+" "+nested(o, "status", "bfdStatus"))
		}
		slices.Sort(got)
		return slices.Equal(got, []string{"n1 192.0.2.1 192.0.2.1 Active N/A", "n1 2001-db8--1 2001:db8::1 Established up"})
	})
	var rv string
	for _, o := range items {
		if nested(o, "status", "peer") == "2001:db8::1" {
			rv = o.GetResourceVersion()
		}
	}

	// One session changes: only its object is written; a session goes away: its object is deleted.
	sess.Put("192.0.2.1", map[string]any{"bgpStatus": "Established", "bfdStatus": "N/A", "node": "n1", "peer": "192.0.2.1", "vrf": ""})
	waitList(t, dyn, sessionStateKind, "updated", func(items []unstructured.Unstructured) bool {
		for _, o := range items {
			if nested(o, "status", "peer") == "192.0.2.1" {
				return nested(o, "status", "bgpStatus") == "Established"
			}
		}
		return false
	})
	sess.Put("2001:db8::1", nil)
	items = waitList(t, dyn, sessionStateKind, "deleted", func(items []unstructured.Unstructured) bool { return len(items) == 1 })
	if rv == "" || nested(items[0], "status", "peer") != "192.0.2.1" {
		t.Errorf("left %v", items)
	}
	svc.Set(map[string]map[string]any{"default/db": bgpStatus("default/db", "n1", []string{"r1"})})
	waitList(t, dyn, bgpStatusKind, "web withdrawn from n1 only", func(items []unstructured.Unstructured) bool {
		var got []string
		for _, o := range items {
			got = append(got, nested(o, "status", "node")+" "+nested(o, "status", "serviceName"))
		}
		slices.Sort(got)
		return slices.Equal(got, []string{"n1 db", "n2 web"})
	})
}

// nested prints a field of an object ("" when missing).
func nested(o unstructured.Unstructured, path ...string) string {
	v, ok, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
	if !ok {
		return ""
	}
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				parts = append(parts, s)
			} else if m, ok := e.(map[string]any); ok {
				parts = append(parts, "map[name:"+m["name"].(string)+"]")
			}
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return ""
}
