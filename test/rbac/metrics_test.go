package rbac_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/internal/kube"
	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestMetricsOnlyForTheReader serves metrics as the speaker and the proxy do (HTTPS, authorized by
// the apiserver, asking as the role's ServiceAccount with its RBAC alone) and scrapes them with
// tokens from the real apiserver: config/prometheus's ironlb-metrics-reader gets 200, another
// ServiceAccount 403, no token 401.
func TestMetricsOnlyForTheReader(t *testing.T) {
	env := testenv.Start(t)
	b, err := os.ReadFile("../../config/prometheus/monitors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string // all but the PodMonitors (no Prometheus Operator CRDs here)
	for _, d := range strings.Split(string(b), "\n---\n") {
		if !strings.Contains(d, "\nkind: PodMonitor\n") {
			docs = append(docs, d)
		}
	}
	rbacFile := filepath.Join(t.TempDir(), "reader.yaml")
	if err := os.WriteFile(rbacFile, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"../../config/controller/00-namespace.yaml", "../../config/speaker/10-rbac.yaml", "../../config/proxy/10-rbac.yaml", rbacFile} {
		if out, err := env.Kubectl("apply", "-f", f); err != nil {
			t.Fatalf("applying %s: %v\n%s", f, err, out)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := admin.CoreV1().ServiceAccounts(configNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(t *testing.T, sa string) string {
		tr, err := admin.CoreV1().ServiceAccounts(configNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token of %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	for _, role := range []string{"ironlb-speaker", "ironlb-proxy"} {
		t.Run(role, func(t *testing.T) {
			cfg, err := clientcmd.BuildConfigFromFlags("", impersonating(t, env.Kubeconfig, role))
			if err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			if err := kube.ServeSecureMetrics(ctx, addr, kube.NewAuthorizer(kubernetes.NewForConfigOrDie(cfg)), prometheus.NewRegistry(),
				slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			get := func(tok string) int {
				req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				var resp *http.Response
				for range 100 {
					if resp, err = c.Do(req); err == nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			for _, tt := range []struct {
				who, token string
				want       int
			}{
				{"ironlb-metrics-reader", token(t, "ironlb-metrics-reader"), http.StatusOK},
				{"another ServiceAccount", token(t, "other"), http.StatusForbidden},
				{"the role itself", token(t, role), http.StatusForbidden},
				{"no token", "", http.StatusUnauthorized},
				{"a forged token", "eyJhbGciOiJSUzI1NiJ9.e30.AAAA", http.StatusUnauthorized},
			} {
				if got := get(tt.token); got != tt.want {
					t.Errorf("%s: GET /metrics %d, want %d", tt.who, got, tt.want)
				}
			}
		})
	}
}
