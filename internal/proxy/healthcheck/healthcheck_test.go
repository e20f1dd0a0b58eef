package healthcheck

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// fakeListen opens loopback listeners on free ports in place of the requested addresses, and
// remembers which is which. Addresses in busy fail.
type fakeListen struct {
	mu    sync.Mutex
	real  map[string]string // requested -> actual
	busy  map[string]bool
	calls []string
}

func newFakeListen() *fakeListen {
	return &fakeListen{real: map[string]string{}, busy: map[string]bool{}}
}

func (f *fakeListen) listen(network, addr string) (net.Listener, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, addr)
	if f.busy[addr] {
		return nil, errors.New("address already in use")
	}
	ln, err := net.Listen(network, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.real[addr] = ln.Addr().String()
	return ln, nil
}

func (f *fakeListen) get(t *testing.T, requested string) (*http.Response, string) {
	t.Helper()
	f.mu.Lock()
	addr := f.real[requested]
	f.mu.Unlock()
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET %s (%s): %v", requested, addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

var key = nftrules.ServiceKey{Namespace: "ns1", Name: "web"}

func TestServiceHealthCheck(t *testing.T) {
	before := runtime.NumGoroutine()
	fl := newFakeListen()
	healthy := true
	var hmu sync.Mutex
	s := NewServices(fl.listen, func() bool { hmu.Lock(); defer hmu.Unlock(); return healthy }, nil)

	if err := s.Sync([]nftrules.HealthCheck{{Service: key, NodePort: 32000, LocalReady: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	resp, body := fl.get(t, ":32000")
	if resp.StatusCode != 200 {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
	want := "{\n\t\"service\": {\n\t\t\"namespace\": \"ns1\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
	for h, v := range map[string]string{
		"Content-Type": "application/json", "X-Content-Type-Options": "nosniff",
		"X-Load-Balancing-Endpoint-Weight": "2", "X-Load-Balancing-Endpoints": "2",
	} {
		if got := resp.Header.Get(h); got != v {
			t.Errorf("header %s = %q, want %q", h, got, v)
		}
	}

	// No local endpoints: 503, same listener.
	if err := s.Sync([]nftrules.HealthCheck{{Service: key, NodePort: 32000}}, nil); err != nil {
		t.Fatal(err)
	}
	if resp, body := fl.get(t, ":32000"); resp.StatusCode != 503 || !strings.Contains(body, `"localEndpoints": 0`) {
		t.Errorf("no endpoints: %d %s", resp.StatusCode, body)
	}
	// Endpoints but the proxy unhealthy: 503.
	s.Sync([]nftrules.HealthCheck{{Service: key, NodePort: 32000, LocalReady: 1}}, nil)
	hmu.Lock()
	healthy = false
	hmu.Unlock()
	if resp, body := fl.get(t, ":32000"); resp.StatusCode != 503 || !strings.Contains(body, `"serviceProxyHealthy": false`) {
		t.Errorf("proxy unhealthy: %d %s", resp.StatusCode, body)
	}
	if len(fl.calls) != 1 {
		t.Errorf("listened %v, want once", fl.calls)
	}

	// Node-port addresses: one listener per address.
	addrs := []netip.Addr{netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("fd00::10")}
	s.Sync([]nftrules.HealthCheck{{Service: key, NodePort: 32000, LocalReady: 1}}, addrs)
	if diff := cmp.Diff([]string{":32000", "192.168.0.10:32000", "[fd00::10]:32000"}, fl.calls); diff != "" {
		t.Errorf("listens (-want +got):\n%s", diff)
	}
	if got := s.Ports(); got[key] != 32000 {
		t.Errorf("ports %v", got)
	}

	// Gone: closed.
	s.Sync(nil, addrs)
	if len(s.Ports()) != 0 {
		t.Errorf("ports after removal: %v", s.Ports())
	}
	s.Close()
	waitGoroutines(t, before)
}

func TestServiceHealthCheckListenFailure(t *testing.T) {
	fl := newFakeListen()
	fl.busy[":32000"] = true
	s := NewServices(fl.listen, nil, nil)
	defer s.Close()
	checks := []nftrules.HealthCheck{{Service: key, NodePort: 32000, LocalReady: 1}}
	if err := s.Sync(checks, nil); !errors.Is(err, ErrListen) {
		t.Fatalf("err = %v, want ErrListen", err)
	}
	if err := s.Sync(checks, nil); err != nil {
		t.Errorf("second failure reported again: %v", err)
	}
	fl.mu.Lock()
	fl.busy[":32000"] = false
	fl.mu.Unlock()
	if err := s.Sync(checks, nil); err != nil {
		t.Fatal(err)
	}
	if resp, _ := fl.get(t, ":32000"); resp.StatusCode != 200 {
		t.Errorf("status %d after retry", resp.StatusCode)
	}
}

func TestProxyHealth(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return now }
	h := NewProxyHealth(time.Minute, clock)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/healthz"); code != 200 || body != `{"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime": "2026-01-02 03:04:05 +0000 UTC", "nodeEligible": true}` {
		t.Errorf("fresh: %d %s", code, body)
	}
	h.Queued()
	now = now.Add(59 * time.Second)
	if !h.Healthy() {
		t.Error("unhealthy before the timeout")
	}
	now = now.Add(time.Second)
	if code, _ := get("/healthz"); code != 503 {
		t.Errorf("pending for the timeout: %d, want 503", code)
	}
	if code, body := get("/livez"); code != 503 || !strings.HasPrefix(body, `{"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime": `) {
		t.Errorf("livez: %d %s", code, body)
	}
	start := now
	h.Updated(start)
	if !h.Healthy() {
		t.Error("unhealthy after a sync")
	}
	// A change queued during a sync stays pending after it.
	start = now
	now = now.Add(time.Second)
	h.Queued()
	h.Updated(start)
	now = start.Add(time.Minute)
	if h.Healthy() {
		t.Error("a change queued during the sync was forgotten")
	}
	h.Updated(now)
	h.SetNodeEligible(false)
	if code, body := get("/healthz"); code != 503 || !strings.HasSuffix(body, `"nodeEligible": false}`) {
		t.Errorf("ineligible node: %d %s", code, body)
	}
	if code, _ := get("/livez"); code != 200 {
		t.Errorf("livez of an ineligible node: %d", code)
	}
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want %d:\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		http.DefaultClient.CloseIdleConnections()
		time.Sleep(10 * time.Millisecond)
	}
}
