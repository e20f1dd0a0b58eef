package kube

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

func TestHealthHandler(t *testing.T) {
	notYet := Check{Name: "informers", Check: func() error { return errors.New("2 of 3 informers not synced") }}
	fine := Check{Name: "speaker", Check: func() error { return nil }}
	tests := []struct {
		name, path  string
		live, ready []Check
		wantCode    int
		wantBody    string
	}{
		{"no checks live", "/healthz", nil, nil, 200, "ok"},
		{"no checks ready", "/readyz", nil, nil, 200, "ok"},
		{"livez is healthz", "/livez", []Check{fine}, nil, 200, "ok"},
		{"ready", "/readyz", nil, []Check{fine}, 200, "ok"},
		{"ready verbose", "/readyz?verbose", nil, []Check{fine}, 200, "[+]speaker ok\nreadyz check passed\n"},
		{"not ready", "/readyz", nil, []Check{notYet, fine}, 503,
			"[-]informers failed: 2 of 3 informers not synced\n[+]speaker ok\nreadyz check failed\n"},
		{"readiness does not touch liveness", "/healthz", nil, []Check{notYet}, 200, "ok"},
		{"not live", "/healthz", []Check{notYet}, nil, 503, "[-]informers failed: 2 of 3 informers not synced\nhealthz check failed\n"},
		{"unknown path", "/metrics", nil, nil, 404, "404 page not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			HealthHandler(tt.live, tt.ready).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.wantCode || rec.Body.String() != tt.wantBody {
				t.Errorf("GET %s = %d %q, want %d %q", tt.path, rec.Code, rec.Body.String(), tt.wantCode, tt.wantBody)
			}
		})
	}
}

func TestInformersSynced(t *testing.T) {
	yes := cache.InformerSynced(func() bool { return true })
	no := cache.InformerSynced(func() bool { return false })
	if err := InformersSynced(yes, yes).Check(); err != nil {
		t.Errorf("all synced: %v", err)
	}
	if err := InformersSynced(yes, no, no).Check(); err == nil || err.Error() != "2 of 3 informers not synced" {
		t.Errorf("two not synced: %v", err)
	}
}

// TestServeHealth checks that ServeHealth reports a port it cannot listen on at once, serves plain
// HTTP, and stops with ctx; an empty address serves nothing.
func TestServeHealth(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if err := ServeHealth(t.Context(), "", nil, log); err != nil {
		t.Fatalf("empty address: %v", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if err := ServeHealth(t.Context(), taken.Addr().String(), HealthHandler(nil, nil), log); err == nil {
		t.Error("a taken port: no error")
	}
	addr := taken.Addr().String()
	taken.Close()
	ctx, cancel := context.WithCancel(t.Context())
	if err := ServeHealth(ctx, addr, HealthHandler(nil, nil), log); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" {
		t.Errorf("/readyz = %d %q", resp.StatusCode, b)
	}
	cancel()
	for range 100 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("still serving after ctx ended")
}
