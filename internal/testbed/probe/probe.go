// Package probe is the client side of the failover benchmark (`ironlb probe`, run in the lab's client
// namespace): it asks who-has for a service address every interval and logs every ARP packet that
// speaks for the address (for an IPv6 address: neighbor solicitations and the advertisements for it), and it starts an HTTP request to the address every interval (each on a new
// connection, concurrently, so a request stuck on a dead node never delays the next). Every line it
// writes carries CLOCK_REALTIME nanoseconds, so the benchmark can line it up with the instant it cut
// a node on the same host.
//
// Lines:
//
//	arp <ns> <reply|garp> <sender MAC>   an ARP packet whose sender is the address
//	http <start ns> <end ns> <ok|fail> <detail>
//	                                     one request; detail is the answering host (whoami's Hostname,
//	                                     "-" if none) or why it failed (timeout, reset, refused,
//	                                     unreachable, status-N, error)
package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/arp"
)

// Config says what to probe.
type Config struct {
	Iface   string        // interface to ask who-has on
	Addr    netip.Addr    // the service address
	URL     string        // requested every Every ("" = no HTTP)
	Every   time.Duration // probe interval
	For     time.Duration // how long to run
	Timeout time.Duration // per HTTP request
}

// Run probes until cfg.For has passed or ctx ends.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.For)
	defer cancel()
	var mu sync.Mutex
	emit := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	if cfg.Addr.Is4() && cfg.Iface != "" {
		ifi, err := net.InterfaceByName(cfg.Iface)
		if err != nil {
			return err
		}
		c, err := arp.Dial(ifi)
		if err != nil {
			return fmt.Errorf("arp on %s: %w", cfg.Iface, err)
		}
		defer c.Close()
		go func() { <-ctx.Done(); c.Close() }()
		vip := cfg.Addr.AsSlice()
		// Received ARP packets are read from our own packet socket with kernel receive timestamps, so a
		// busy client does not delay what it reports.
		rx, err := listenARPStamped(ifi)
		if err != nil {
			return err
		}
		go func() { <-ctx.Done(); rx.close() }()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p, at, err := rx.read()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				if !p.SenderIP.Equal(net.IP(vip)) {
					continue
				}
				kind := "reply"
				if p.TargetIP.Equal(net.IP(vip)) {
					kind = "garp"
				}
				emit("arp %d %s %s", at.UnixNano(), kind, p.SenderHardwareAddr)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(cfg.Every)
			defer t.Stop()
			for {
				_ = c.Request(net.IP(vip))
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	if cfg.Addr.Is6() && cfg.Iface != "" {
		// IPv6: neighbor solicitations and advertisements, reported as the ARP lines are ("arp",
		// an unsolicited advertisement as "garp"), so the benchmark reads both families alike.
		ifi, err := net.InterfaceByName(cfg.Iface)
		if err != nil {
			return err
		}
		s, err := listenNDPStamped(ifi)
		if err != nil {
			return fmt.Errorf("ndp on %s: %w", cfg.Iface, err)
		}
		go func() { <-ctx.Done(); s.close() }()
		vip := cfg.Addr.WithZone("")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				target, solicited, mac, at, err := s.read()
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, errClosed) {
						return
					}
					continue
				}
				if target != vip {
					continue
				}
				kind := "garp"
				if solicited {
					kind = "reply"
				}
				emit("arp %d %s %s", at.UnixNano(), kind, mac)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(cfg.Every)
			defer t.Stop()
			for {
				_ = s.solicit(vip)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	if cfg.URL != "" {
		tr := &http.Transport{DisableKeepAlives: true}
		client := &http.Client{Transport: tr, Timeout: cfg.Timeout}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(cfg.Every)
			defer t.Stop()
			var reqs sync.WaitGroup
			defer reqs.Wait()
			for {
				reqs.Add(1)
				go func() {
					defer reqs.Done()
					start := time.Now()
					res, detail := "fail", ""
					r, err := client.Get(cfg.URL)
					if err == nil {
						body, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
						r.Body.Close()
						if r.StatusCode == http.StatusOK {
							res, detail = "ok", hostname(body)
						} else {
							detail = fmt.Sprintf("status-%d", r.StatusCode)
						}
					} else {
						detail = Failure(err)
					}
					emit("http %d %d %s %s", start.UnixNano(), time.Now().UnixNano(), res, detail)
				}()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// hostname returns the Hostname line of a whoami answer, "-" if there is none.
func hostname(body []byte) string {
	for line := range strings.Lines(string(body)) {
		if h, ok := strings.CutPrefix(line, "Hostname:"); ok {
			if h = strings.TrimSpace(h); h != "" && !strings.ContainsAny(h, " \t") {
				return h
			}
		}
	}
	return "-"
}

// Failure names why a request or a connection failed, in one word: timeout, reset (also a write
// to a connection the peer reset: EPIPE), refused, unreachable, eof or error.
func Failure(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return "error"
}
