package rbac_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/internal/controller"
	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestControllerRunsWithItsRole runs the controller as its ServiceAccount (impersonated), with leader
// election and its admission webhook, on config/controller's RBAC alone: it must still do its whole
// job — webhook certificate and informers, Lease, Service address and annotation, event, pool
// status, ConfigurationState — so the role is not tighter than the code needs.
func TestControllerRunsWithItsRole(t *testing.T) {
	env := testenv.Start(t)
	crds, _ := filepath.Glob("../../config/crd/bases/*.yaml")
	for _, f := range append(crds, "../../config/controller/00-namespace.yaml", "../../config/controller/01-webhook-namespace.yaml",
		"../../config/controller/10-rbac.yaml", "../../config/speaker/10-rbac.yaml") {
		if out, err := env.Kubectl("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("applying %s: %v\n%s", f, err, out)
		}
	}
	if out, err := env.Kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	pool := "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: metallb-system}\nspec: {addresses: [172.18.255.200/30]}\n"
	f := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(f, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl("apply", "-f", f); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	asSA := impersonating(t, env.Kubeconfig, "ironlb-controller")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// With its admission webhook: the webhook's informers must sync before the controller goes
		// on, so a missing permission for what they watch leaves every check below unmet.
		done <- controller.Run(ctx, controller.Config{Namespace: configNS, Kubeconfig: asSA, FlushInterval: 100 * time.Millisecond,
			WebhookAddr: "127.0.0.1:0", WebhookService: "localhost", WebhookSecretNamespace: webhookNS,
			LeaderElect: true, Identity: "test", LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}()

	cs := kubernetes.NewForConfigOrDie(env.Config)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, args, want string }{
		{"the webhook certificate", "get secret ironlb-webhook-cert -n " + webhookNS + " -o jsonpath={.type}", "kubernetes.io/tls"},
		{"the speakers' heartbeat key", "get secret ironlb-heartbeat-key -n metallb-system -o jsonpath={.type}", "Opaque"},
		{"the Lease", "get lease ironlb-controller -n metallb-system -o jsonpath={.spec.holderIdentity}", "test"},
		{"the Service's address", "get service web -n default -o jsonpath={.status.loadBalancer.ingress[0].ip}", "172.18.255.200"},
		{"the pool annotation", `get service web -n default -o jsonpath={.metadata.annotations.metallb\.io/ip-allocated-from-pool}`, "p"},
		{"the IPAllocated event", "get events -n default --field-selector reason=IPAllocated -o jsonpath={.items[0].involvedObject.name}", "web"},
		{"the pool status", "get ipaddresspool p -n metallb-system -o jsonpath={.status.assignedIPv4}", "1"},
		{"the ConfigurationState", "get configurationstate controller -n metallb-system -o jsonpath={.status.result}", "Valid"},
	} {
		deadline := time.Now().Add(20 * time.Second)
		var out string
		for time.Now().Before(deadline) {
			out, _ = env.Kubectl(strings.Fields(c.args)...)
			if out == c.want {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out != c.want {
			t.Errorf("%s: %q, want %q (kubectl %s)", c.what, out, c.want, c.args)
		}
	}
}

// impersonating writes a kubeconfig that acts as the ServiceAccount account of the configuration
// namespace and returns its path.
func impersonating(t *testing.T, kubeconfig, account string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range kc.AuthInfos {
		u.Impersonate = "system:serviceaccount:" + configNS + ":" + account
		u.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + configNS, "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+account)
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSpeakerCannotReadTheWebhookSecret: the speaker, which lists the configuration namespace's
// Secrets for BGP passwords, gets 403 on the webhook's certificate Secret where the controller
// keeps it, and does not find it among the Secrets it may list.
func TestSpeakerCannotReadTheWebhookSecret(t *testing.T) {
	env := testenv.Start(t)
	for _, f := range []string{"../../config/controller/00-namespace.yaml", "../../config/controller/01-webhook-namespace.yaml",
		"../../config/controller/10-rbac.yaml", "../../config/speaker/10-rbac.yaml"} {
		if out, err := env.Kubectl("apply", "-f", f); err != nil {
			t.Fatalf("applying %s: %v\n%s", f, err, out)
		}
	}
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "ironlb-webhook-cert", Namespace: webhookNS}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "peer-password", Namespace: configNS}, Type: corev1.SecretTypeBasicAuth,
			Data: map[string][]byte{"password": []byte("p")}},
	} {
		if _, err := admin.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", impersonating(t, env.Kubeconfig, "ironlb-speaker"))
	if err != nil {
		t.Fatal(err)
	}
	speaker := kubernetes.NewForConfigOrDie(cfg)
	if _, err := speaker.CoreV1().Secrets(webhookNS).Get(ctx, "ironlb-webhook-cert", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("speaker: get secret %s/ironlb-webhook-cert: %v, want 403 Forbidden", webhookNS, err)
	}
	if _, err := speaker.CoreV1().Secrets(webhookNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("speaker: list secrets in %s: %v, want 403 Forbidden", webhookNS, err)
	}
	if _, err := speaker.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("speaker: list secrets in every namespace: %v, want 403 Forbidden", err)
	}
	// What it may read: the BGP passwords of the configuration namespace, and nothing of the webhook's.
	list, err := speaker.CoreV1().Secrets(configNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("speaker: list secrets in %s (BGP passwords): %v", configNS, err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"peer-password"}) {
		t.Errorf("speaker lists secrets %v in %s, want [peer-password]", names, configNS)
	}
}
