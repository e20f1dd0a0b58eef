package rbac_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestProxyWritesOnlyItsOwnNodeMACs: the proxy's ServiceAccount may patch every Node's status (RBAC
// cannot name "its own" Node for a DaemonSet), and config/proxy/15-node-macs-policy.yaml narrows that
// to the annotation ironlb.io/dsr-macs of the Node named in its token (the direct-server-return loop
// guard's peers, docs/dsr.md). Acting as the proxy of node n1 (impersonated, with the node name the
// apiserver binds into a pod's token): it may write that annotation on n1, and nothing else: not on
// n2, not a label, not another annotation, not the status; and without a node name in its token,
// nothing.
func TestProxyWritesOnlyItsOwnNodeMACs(t *testing.T) {
	env := testenv.Start(t)
	for _, f := range []string{"../../config/controller/00-namespace.yaml", "../../config/proxy/10-rbac.yaml", "../../config/proxy/15-node-macs-policy.yaml"} {
		if out, err := env.Kubectl("apply", "-f", f); err != nil {
			t.Fatalf("applying %s: %v\n%s", f, err, out)
		}
	}
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	for _, n := range []string{"n1", "n2"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"rack": "a"}, Annotations: map[string]string{"other": "x"}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	proxyOf := func(node string) kubernetes.Interface {
		c := rest.CopyConfig(env.Config)
		c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + configNS + ":ironlb-proxy",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + configNS, "system:authenticated"}}
		if node != "" {
			c.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		}
		return kubernetes.NewForConfigOrDie(c)
	}
	mine, other := proxyOf("n1"), proxyOf("")
	patch := func(cs kubernetes.Interface, node, body string) error {
		_, err := cs.CoreV1().Nodes().PatchStatus(ctx, node, []byte(body))
		return err
	}
	const macs = `{"metadata":{"annotations":{"ironlb.io/dsr-macs":"02:00:00:00:00:01"}}}`
	// The policy takes effect a moment after it is created: wait for its first refusal.
	deadline := time.Now().Add(30 * time.Second)
	for patch(mine, "n2", macs) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the proxy of n1 may still write n2's MACs 30 s after the policy was created")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := patch(mine, "n1", macs); err != nil {
		t.Fatalf("the proxy of n1 may not publish its own MACs: %v", err)
	}
	if n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil || n.Annotations["ironlb.io/dsr-macs"] != "02:00:00:00:00:01" {
		t.Fatalf("n1's annotation after the patch: %v, %v", n.Annotations, err)
	}
	for _, c := range []struct {
		what       string
		cs         kubernetes.Interface
		node, body string
		want       string
	}{
		{"another node's MACs", mine, "n2", macs, "only the Node it runs on"},
		{"its MACs without a node name in its token", other, "n1", macs, "only the Node it runs on"},
		{"a label of its own Node", mine, "n1", `{"metadata":{"labels":{"rack":"b"}}}`, "only the annotation ironlb.io/dsr-macs"},
		{"another annotation of its own Node", mine, "n1", `{"metadata":{"annotations":{"other":"y"}}}`, "only the annotation ironlb.io/dsr-macs"},
		{"a new annotation on its own Node", mine, "n1", `{"metadata":{"annotations":{"new":"y"}}}`, "only the annotation ironlb.io/dsr-macs"},
		{"its own Node's status", mine, "n1", `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.66"}]}}`, "only the annotation ironlb.io/dsr-macs"},
	} {
		err := patch(c.cs, c.node, c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", c.what, err, c.want)
		}
	}
	// Writing through the Node itself (not its status) is not granted at all.
	if _, err := mine.CoreV1().Nodes().Patch(ctx, "n1", "application/merge-patch+json", []byte(macs), metav1.PatchOptions{}); err == nil {
		t.Error("the proxy may patch its Node outside the status subresource")
	}
}
