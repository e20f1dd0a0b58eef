package conntrack

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
)

var a = netip.MustParseAddr

const thisNode = "node-a"

func ep(addr, node string) nftrules.Endpoint {
	return nftrules.Endpoint{Addr: a(addr), Port: 5353, Node: node, Ready: true, Serving: true, Local: node == thisNode}
}

// dns returns ns1/dns: ClusterIP 10.96.0.10 (and fd00::10), udp 53 (node port 30053) and tcp 53.
func dns(eps ...nftrules.Endpoint) *nftrules.Service {
	return &nftrules.Service{
		Namespace: "ns1", Name: "dns", ClusterIPs: []netip.Addr{a("10.96.0.10"), a("fd00::10")},
		Ports: []nftrules.Port{
			{Name: "dns", Protocol: nftrules.UDP, Port: 53, NodePort: 30053, Endpoints: eps},
			{Name: "dns-tcp", Protocol: nftrules.TCP, Port: 53, Endpoints: eps},
		},
	}
}

func model(dead map[string]bool, svcs ...*nftrules.Service) *nftrules.Model {
	m := &nftrules.Model{Node: nftrules.Node{Name: thisNode, DeadNodes: dead}, Services: map[nftrules.ServiceKey]*nftrules.Service{}}
	for _, s := range svcs {
		m.Services[s.Key()] = s
	}
	return m
}

func args(fs []Filter) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

func TestStale(t *testing.T) {
	e1, e2, e6 := ep("10.244.1.5", thisNode), ep("10.244.2.5", "node-b"), ep("fd00:244::5", "node-b")
	withLB := func(s *nftrules.Service) *nftrules.Service {
		s.LoadBalancerIPs = []netip.Addr{a("192.168.1.240")}
		return s
	}
	for _, tc := range []struct {
		name     string
		old, new *nftrules.Model
		want     []string
	}{{
		name: "first sync",
		old:  nil, new: model(nil, dns(e1)),
	}, {
		name: "unchanged pointer",
		old:  model(nil, dns(e1)), new: nil,
	}, {
		name: "endpoint removed: its entries on the ClusterIP and the node port",
		old:  model(nil, dns(e1, e2)), new: model(nil, dns(e1)),
		want: []string{
			"-p udp --dport 30053 --reply-src 10.244.2.5",
			"-p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.2.5",
		},
	}, {
		name: "endpoint not ready any more",
		old:  model(nil, dns(e1, e2)),
		new: model(nil, dns(e1, func() nftrules.Endpoint {
			e := e2
			e.Ready = false
			return e
		}())),
		want: []string{
			"-p udp --dport 30053 --reply-src 10.244.2.5",
			"-p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.2.5",
		},
	}, {
		name: "node declared dead",
		old:  model(nil, withLB(dns(e1, e2))), new: model(map[string]bool{"node-b": true}, withLB(dns(e1, e2))),
		want: []string{
			"-p udp --dport 30053 --reply-src 10.244.2.5",
			"-p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.2.5",
			"-p udp --orig-dst 192.168.1.240 --dport 53 --reply-src 10.244.2.5",
		},
	}, {
		name: "targetPort changed: same pod address, another port",
		old:  model(nil, dns(e1, e2)),
		new: model(nil, dns(e1, func() nftrules.Endpoint {
			e := e2
			e.Port = 5354
			return e
		}())),
		want: []string{
			"-p udp --dport 30053 --reply-src 10.244.2.5",
			"-p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.2.5",
		},
	}, {
		name: "two ports of one address gone: one filter",
		old: model(nil, dns(e1, e2, func() nftrules.Endpoint {
			e := e2
			e.Port = 5354
			return e
		}())),
		new: model(nil, dns(e1)),
		want: []string{
			"-p udp --dport 30053 --reply-src 10.244.2.5",
			"-p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.2.5",
		},
	}, {
		name: "scaled to zero",
		old:  model(nil, dns(e1)), new: model(nil, dns()),
		want: []string{
			"-p udp --dport 30053 --reply-src 10.244.1.5",
			"-p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.1.5",
		},
	}, {
		name: "Service deleted, IPv6 too",
		old:  model(nil, dns(e1, e6)), new: model(nil),
		want: []string{
			"-p udp --dport 30053 --reply-src 10.244.1.5",
			"-p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.1.5",
			"-f ipv6 -p udp --dport 30053 --reply-src fd00:244::5",
			"-f ipv6 -p udp --orig-dst fd00::10 --dport 53 --reply-src fd00:244::5",
		},
	}, {
		name: "endpoints appear: entries made while there were none go",
		old:  model(nil, dns()), new: model(nil, dns(e1)),
		want: []string{
			"-p udp --dport 30053",
			"-p udp --orig-dst 10.96.0.10 --dport 53",
		},
	}, {
		name: "new Service with endpoints",
		old:  model(nil), new: model(nil, dns(e1)),
		want: []string{
			"-p udp --dport 30053",
			"-p udp --orig-dst 10.96.0.10 --dport 53",
		},
	}, {
		name: "TCP only changes nothing",
		old: model(nil, &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{a("10.96.0.11")},
			Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{e1}}}}),
		new: model(nil),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			newM := tc.new
			if newM == nil { // same Service pointers
				newM = &nftrules.Model{Node: tc.old.Node, Services: tc.old.Services}
			}
			got := args(Stale(tc.old, newM))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExec(t *testing.T) {
	var gotArgs []string
	out, code := "", 0
	var runErr error
	e := NewExecPath("/sbin/conntrack", func(_ context.Context, name string, args ...string) ([]byte, int, error) {
		gotArgs = append([]string{name}, args...)
		return []byte(out), code, runErr
	})
	f := Filter{Protocol: nftrules.UDP, OrigDst: a("10.96.0.10"), DPort: 53, ReplySrc: a("10.244.1.5")}

	out = "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted.\n"
	n, err := e.Delete(context.Background(), f)
	if err != nil || n != 2 {
		t.Errorf("deleted %d, %v", n, err)
	}
	want := "/sbin/conntrack -D -p udp --orig-dst 10.96.0.10 --dport 53 --reply-src 10.244.1.5"
	if got := strings.Join(gotArgs, " "); got != want {
		t.Errorf("ran %q, want %q", got, want)
	}

	out, code = "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n", 1
	if n, err := e.Delete(context.Background(), f); err != nil || n != 0 {
		t.Errorf("nothing to delete: %d, %v", n, err)
	}
	out, code = "conntrack v1.4.7 (conntrack-tools): Operation failed: invalid parameters\n", 1
	if _, err := e.Delete(context.Background(), f); !errors.Is(err, ErrConntrack) {
		t.Errorf("failure: %v", err)
	}
	runErr = errors.New("exec: not found")
	if _, err := e.Delete(context.Background(), f); !errors.Is(err, ErrConntrack) {
		t.Errorf("failure to run: %v", err)
	}
}

// TestStaleOf: given the Services whose pointers changed (with others and duplicates mixed in),
// StaleOf finds what Stale finds by comparing every Service.
func TestStaleOf(t *testing.T) {
	for seed := range uint64(30) {
		g := nftrulestest.NewGen(seed)
		old := g.Model(8)
		for step := range 10 {
			m := g.Mutate(old, 10)
			var keys []nftrules.ServiceKey
			for k, s := range m.Services {
				if old.Services[k] != s || g.R.IntN(4) == 0 {
					keys = append(keys, k, k)
				}
			}
			for k := range old.Services {
				if _, ok := m.Services[k]; !ok {
					keys = append(keys, k)
				}
			}
			strs := func(fs []Filter) []string {
				var out []string
				for _, f := range fs {
					out = append(out, f.String())
				}
				return out
			}
			if diff := cmp.Diff(strs(Stale(old, m)), strs(StaleOf(old, m, keys))); diff != "" {
				t.Fatalf("seed %d step %d (-Stale +StaleOf):\n%s", seed, step, diff)
			}
			old = m
		}
	}
}
