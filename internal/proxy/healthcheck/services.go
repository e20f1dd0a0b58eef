package healthcheck

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// ListenFunc opens a TCP listener (net.Listen in production, a fake in tests).
type ListenFunc func(network, address string) (net.Listener, error)

// Services serves the health-check node ports of the Services with externalTrafficPolicy Local.
// Sync opens and closes listeners as Services come and go; Close closes them all. Safe for
// concurrent use.
type Services struct {
	listen  ListenFunc
	healthy func() bool // the proxy's own health (serviceProxyHealthy)
	log     *slog.Logger

	mu    sync.Mutex // guards the following fields
	addrs []netip.Addr
	svcs  map[nftrules.ServiceKey]*service
	wg    sync.WaitGroup // serving goroutines
}

type service struct {
	port    uint16
	local   int
	servers []*http.Server
	failed  bool // a listener failed to open; retried on the next Sync
}

// NewServices returns a health-check server set. listen opens listeners (nil: net.Listen),
// healthy reports the proxy's health (nil: always healthy). Nothing is opened until Sync.
func NewServices(listen ListenFunc, healthy func() bool, log *slog.Logger) *Services {
	if listen == nil {
		listen = net.Listen
	}
	if healthy == nil {
		healthy = func() bool { return true }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Services{listen: listen, healthy: healthy, log: log, svcs: map[nftrules.ServiceKey]*service{}}
}

// ErrListen is wrapped by Sync's errors: a health-check port could not be opened.
var ErrListen = errors.New("opening health-check node port")

// Sync makes the listeners match checks: one per Service on its node port, on each of addrs
// (the node-port addresses; empty means all addresses). Counts change in place; a Service whose
// port or the addresses changed is reopened. A listener that cannot be opened is retried on the
// next Sync; the error (wrapping ErrListen) is returned only the first time.
func (s *Services) Sync(checks []nftrules.HealthCheck, addrs []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Equal(addrs, s.addrs) {
		s.addrs = slices.Clone(addrs)
		for k, svc := range s.svcs {
			svc.close()
			delete(s.svcs, k)
		}
	}
	want := make(map[nftrules.ServiceKey]bool, len(checks))
	var errs []error
	for _, c := range checks {
		want[c.Service] = true
		svc := s.svcs[c.Service]
		if svc != nil && svc.port != c.NodePort {
			svc.close()
			svc = nil
		}
		if svc == nil {
			svc = &service{port: c.NodePort}
			s.svcs[c.Service] = svc
		}
		svc.local = c.LocalReady
		if len(svc.servers) == 0 {
			if err := s.openLocked(c.Service, svc); err != nil && !svc.failed {
				errs = append(errs, err)
				svc.failed = true
			}
		}
	}
	for k, svc := range s.svcs {
		if !want[k] {
			svc.close()
			delete(s.svcs, k)
		}
	}
	return errors.Join(errs...)
}

// openLocked opens svc's listeners and serves them; all or none.
func (s *Services) openLocked(key nftrules.ServiceKey, svc *service) error {
	addrs := []string{":" + strconv.Itoa(int(svc.port))}
	if len(s.addrs) > 0 {
		addrs = addrs[:0]
		for _, a := range s.addrs {
			addrs = append(addrs, netip.AddrPortFrom(a, svc.port).String())
		}
	}
	var lns []net.Listener
	for _, addr := range addrs {
		ln, err := s.listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("%w %s for %s: %w", ErrListen, addr, key, err)
		}
		lns = append(lns, ln)
	}
	h := s.handler(key)
	for _, ln := range lns {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		svc.servers = append(svc.servers, srv)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Warn("health-check server stopped", "service", key.String(), "err", err)
			}
		}()
	}
	svc.failed = false
	s.log.Info("serving health checks", "service", key.String(), "port", svc.port)
	return nil
}

func (svc *service) close() {
	for _, srv := range svc.servers {
		srv.Close()
	}
	svc.servers = nil
}

// Close closes every listener and waits for the servers to stop. Sync must not be called after.
func (s *Services) Close() {
	s.mu.Lock()
	for k, svc := range s.svcs {
		svc.close()
		delete(s.svcs, k)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Ports returns the open health-check ports by Service (for tests and status).
func (s *Services) Ports() map[nftrules.ServiceKey]uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[nftrules.ServiceKey]uint16{}
	for k, svc := range s.svcs {
		if len(svc.servers) > 0 {
			out[k] = svc.port
		}
	}
	return out
}

// handler answers as kube-proxy's hcHandler: 200 when the node has local ready endpoints and
// the proxy is healthy, else 503, with the JSON body and the endpoint-count headers.
func (s *Services) handler(key nftrules.ServiceKey) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		svc, ok := s.svcs[key]
		n := 0
		if ok {
			n = svc.local
		}
		s.mu.Unlock()
		if !ok {
			http.Error(w, "no such health check", http.StatusNotFound)
			return
		}
		healthy := s.healthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(n)) // kube-proxy's name
		w.Header().Set("X-Load-Balancing-Endpoints", strconv.Itoa(n))
		if n > 0 && healthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
			key.Namespace, key.Name, n, healthy)
	})
}
