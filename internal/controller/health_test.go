package controller

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHealthChecks has one row per readiness rule of health's doc comment.
func TestHealthChecks(t *testing.T) {
	tests := []struct {
		name                                    string
		webhook, webhookSynced, leading, loaded bool
		want                                    error // the first failing check's
	}{
		{name: "no webhook, standby", want: nil},
		{name: "webhook syncing", webhook: true, want: errWebhookSyncing},
		{name: "webhook synced, standby", webhook: true, webhookSynced: true, want: nil},
		{name: "webhook synced, leader loading", webhook: true, webhookSynced: true, leading: true, want: errLeaderLoading},
		{name: "webhook synced, leader loaded", webhook: true, webhookSynced: true, leading: true, loaded: true, want: nil},
		{name: "no webhook, leader loading", leading: true, want: errLeaderLoading},
		{name: "no webhook, leader loaded", leading: true, loaded: true, want: nil},
		{name: "webhook syncing, leader loaded", webhook: true, leading: true, loaded: true, want: errWebhookSyncing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &health{webhook: tt.webhook}
			h.webhookSynced.Store(tt.webhookSynced)
			h.leading.Store(tt.leading)
			h.loaded.Store(tt.loaded)
			var got error
			for _, c := range h.readyChecks() {
				if err := c.Check(); err != nil {
					got = err
					break
				}
			}
			if got != tt.want {
				t.Errorf("readiness = %v, want %v", got, tt.want)
			}
		})
	}
	// A term's end leaves a standby: ready again (its webhook permitting), the load forgotten.
	h := &health{}
	h.startTerm()
	h.loaded.Store(true)
	h.endTerm()
	h.startTerm()
	if err := h.readyChecks()[1].Check(); err != errLeaderLoading {
		t.Errorf("a new term: %v, want %v", err, errLeaderLoading)
	}
	if live := newHealth(Config{}).liveChecks(); len(live) != 0 {
		t.Errorf("without leader election: %d liveness checks, want none", len(live))
	}
	if live := newHealth(Config{LeaderElect: true}).liveChecks(); len(live) != 1 || live[0].Check() != nil {
		t.Errorf("with leader election, before any term: liveness %v", live)
	}
}

// probeGet returns the status code and body of GET url ("" and 0 when it cannot connect).
func probeGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProbes runs the controller against a real apiserver without the metallb.io CRDs: its
// IPAddressPool informer cannot sync, so /readyz says 503 naming the allocator while /healthz says
// ok; once the CRDs are installed the informers sync and /readyz turns 200.
func TestProbes(t *testing.T) {
	dir := t.TempDir()
	// One CRD only (the harness wants one): not the metallb.io kinds the informers list.
	b, err := os.ReadFile("../../config/crd/bases/frrk8s.metallb.io_bgpsessionstates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bgpsessionstates.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarnessWithCRDs(t, dir)
	addr := freeAddr(t)
	defer h.startWith(Config{Namespace: ns, FlushInterval: 100 * time.Millisecond, HealthAddr: addr})()

	wait := func(path string, want int, body string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, got := probeGet("http://" + addr + path + "?verbose")
			if code == want && strings.Contains(got, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %d %q, want %d with %q", path, code, got, want, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wait("/healthz", http.StatusOK, "healthz check passed")
	wait("/readyz", http.StatusServiceUnavailable, "[-]allocator failed: "+errLeaderLoading.Error())
	// Still not ready a while later: the informers cannot sync without their CRDs.
	time.Sleep(time.Second)
	if code, got := probeGet("http://" + addr + "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("without the CRDs: /readyz %d %q", code, got)
	}
	crds, _ := filepath.Glob("../../config/crd/bases/*.yaml")
	for _, f := range crds {
		if out, err := h.env.Kubectl("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	wait("/readyz", http.StatusOK, "[+]allocator ok")
	wait("/livez", http.StatusOK, "livez check passed")
	if code, got := probeGet("http://" + addr + "/readyz"); code != http.StatusOK || got != "ok" {
		t.Errorf("/readyz without ?verbose: %d %q, want 200 \"ok\"", code, got)
	}
}
