package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestRun runs `ironlb proxy` as the command does, against a real apiserver on loopback, its
// rules going into a throwaway network namespace: informers, the first full sync, an incremental
// sync on a new endpoint, metrics over HTTPS for authorized tokens only (--metrics-secure), and a
// clean stop. Skipped without root, nft or the Kubernetes binaries.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an apiserver")
	}
	list, _ := kernelNetns(t)
	env := testenv.Start(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, testNode("node-a", "192.168.0.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	web, err = cs.CoreV1().Services("default").Create(ctx, web, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es := slice("web", "web-1", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.1.5", "node-a"}})
	es.Namespace = "default"
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Config{
			Node: "node-a", Kubeconfig: env.Kubeconfig, IPFamilies: "ipv4",
			HealthzAddr: "127.0.0.1:0", LogLevel: "warn", SyncPeriod: time.Hour,
			MetricsAddr: metricsAddr, MetricsSecure: true,
		})
	}()
	element := web.Spec.ClusterIP + " . tcp . 80 : goto service-"
	waitFor(t, done, "the ClusterIP in the kernel", func() bool { return strings.Contains(list(), element) })
	checkSecureMetrics(t, cs, metricsAddr)
	waitFor(t, done, "no second endpoint yet", func() bool { return !strings.Contains(list(), "10.244.1.6") })

	es.Endpoints = append(es.Endpoints, es.Endpoints[0])
	es.Endpoints[1].Addresses = []string{"10.244.1.6"}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, done, "the new endpoint in the kernel", func() bool { return strings.Contains(list(), ": 10.244.1.6 . 8080") })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !strings.Contains(list(), element) {
		t.Error("rules removed on exit; they should stay for a restart")
	}
}

func waitFor(t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		select {
		case err := <-done:
			t.Fatalf("Run returned (%v) while waiting for %s", err, what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSecureMetrics scrapes the proxy's metrics at addr: over HTTPS, 200 with the sync metrics
// for a ServiceAccount allowed to get /metrics, 403 for one that is not, 401 without a token, and
// never 200 over plain HTTP.
func checkSecureMetrics(t *testing.T, cs kubernetes.Interface, addr string) {
	t.Helper()
	ctx := context.Background()
	for _, sa := range []string{"scraper", "other"} {
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "scrape"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scrape"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "scrape"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "scraper"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url, tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The first sync's duration is observed once it returns, a moment after its rules are in the
	// kernel (which is what the caller waited for).
	tok := token("scraper")
	code, body := get("https://"+addr+"/metrics", tok)
	for deadline := time.Now().Add(10 * time.Second); code == http.StatusOK && !strings.Contains(body, "ironlb_proxy_sync_duration_seconds") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		code, body = get("https://"+addr+"/metrics", tok)
	}
	if code != http.StatusOK || !strings.Contains(body, "ironlb_proxy_sync_duration_seconds") {
		t.Errorf("allowed token: %d, want 200 with ironlb_proxy_sync_duration_seconds:\n%.300s", code, body)
	}
	for _, tt := range []struct {
		who, url, token string
		want            int
	}{
		{"a ServiceAccount without the right", "https://" + addr + "/metrics", token("other"), http.StatusForbidden},
		{"no token", "https://" + addr + "/metrics", "", http.StatusUnauthorized},
		{"plain HTTP", "http://" + addr + "/metrics", token("scraper"), http.StatusBadRequest}, // Go's TLS server: "client sent an HTTP request to an HTTPS server"
	} {
		if code, _ := get(tt.url, tt.token); code != tt.want {
			t.Errorf("%s: %d, want %d", tt.who, code, tt.want)
		}
	}
}
