package kube

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPIServer answers TokenReviews (token "reader" is user prometheus, "nobody" is user nobody,
// anything else is unauthenticated) and SubjectAccessReviews (prometheus may get /metrics).
func fakeAPIServer(reviews *atomic.Int32) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		switch tr.Spec.Token {
		case "reader":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus"}}
		case "nobody":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "nobody"}}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "prometheus" && na != nil && na.Path == "/metrics" && na.Verb == "get"
		return true, sar, nil
	})
	return cs
}

func TestServeSecureMetrics(t *testing.T) {
	var reviews atomic.Int32
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	if err := ServeSecureMetrics(ctx, addr, NewAuthorizer(fakeAPIServer(&reviews)), reg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		var resp *http.Response
		for range 50 {
			if resp, err = c.Do(req); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "forged", http.StatusUnauthorized},
		{"/metrics", "nobody", http.StatusForbidden},
		{"/metrics", "reader", http.StatusOK},
	} {
		if got, body := get(tt.path, tt.token); got != tt.want {
			t.Errorf("GET %s with token %q: %d, want %d (%s)", tt.path, tt.token, got, tt.want, body)
		}
	}
	if _, body := get("/metrics", "reader"); !strings.Contains(body, "go_goroutines") {
		t.Errorf("metrics body lacks go_goroutines:\n%.300s", body)
	}
	if n := reviews.Load(); n != 3 {
		t.Errorf("%d TokenReviews for 3 distinct tokens (decisions are cached)", n)
	}
	// Plain HTTP is refused on the TLS port.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP /metrics answered 200")
		}
	}
}
