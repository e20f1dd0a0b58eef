package nftrules_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
	"github.com/ironlb/ironlb/internal/testbed/fuzzbytes"
	"sigs.k8s.io/knftables"
)

// bytesReader draws models from fuzz input (package fuzzbytes: past the end, zeros).
type bytesReader struct{ *fuzzbytes.Reader }

// addr draws from a small pool most of the time (so Services collide) and raw bytes otherwise.
func (r *bytesReader) addr() netip.Addr {
	switch c := r.Byte(); c % 8 {
	case 0:
		var b [16]byte
		for i := range b {
			b[i] = r.Byte()
		}
		return netip.AddrFrom16(b)
	case 1:
		return netip.AddrFrom4([4]byte{r.Byte(), r.Byte(), r.Byte(), r.Byte()})
	case 2:
		return netip.Addr{}
	case 3:
		return netip.MustParseAddr(fmt.Sprintf("fd00::%x", r.Byte()%8))
	default:
		return netip.AddrFrom4([4]byte{10, 0, 0, r.Byte() % 8})
	}
}

func (r *bytesReader) name() string {
	names := []string{"a", "b", "web", "x-1", "", "Bad", "a b", "a}", "-x", "abcdefghijklmnopq"}
	return names[int(r.Byte())%len(names)]
}

func (r *bytesReader) model() *nftrules.Model {
	m := model(testNode())
	if r.Byte()%2 == 0 {
		m.Node.NodePortAddresses = []netip.Addr{r.addr(), r.addr()}
	}
	if r.Byte()%3 == 0 {
		m.Node.DeadNodes = map[string]bool{r.name(): true}
	}
	for range int(r.Byte() % 5) {
		s := &nftrules.Service{Namespace: r.name(), Name: r.name()}
		for range int(r.Byte() % 3) {
			s.ClusterIPs = append(s.ClusterIPs, r.addr())
		}
		for range int(r.Byte() % 3) {
			s.ExternalIPs = append(s.ExternalIPs, r.addr())
		}
		for range int(r.Byte() % 3) {
			s.LoadBalancerIPs = append(s.LoadBalancerIPs, r.addr())
		}
		for range int(r.Byte() % 3) {
			s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, netip.PrefixFrom(r.addr(), int(r.Byte()%129)))
		}
		flags := r.Byte()
		s.ExternalTrafficPolicyLocal = flags&1 != 0
		s.InternalTrafficPolicyLocal = flags&2 != 0
		s.SessionAffinityClientIP = flags&4 != 0
		s.SessionAffinityTimeout = time.Duration(r.Byte()) * time.Second
		s.Algorithm = nftrules.Algorithm(r.Byte() % 4)
		for range int(r.Byte() % 3) {
			p := nftrules.Port{Name: r.name(), Port: r.U16() % 4, NodePort: r.U16() % 4}
			p.Protocol = []nftrules.Protocol{nftrules.TCP, nftrules.UDP, nftrules.SCTP, "icmp"}[r.Byte()%4]
			for range int(r.Byte() % 5) {
				c := r.Byte()
				p.Endpoints = append(p.Endpoints, nftrules.Endpoint{
					Addr: r.addr(), Port: r.U16() % 3, Node: []string{thisNode, "b", ""}[int(r.Byte())%3],
					Ready: c&1 != 0, Serving: c&2 != 0, Terminating: c&4 != 0, Local: c&8 != 0,
				})
			}
			s.Ports = append(s.Ports, p)
		}
		m.Services[s.Key()] = s
	}
	return m
}

// FuzzBuild: for any model, a full sync is accepted by the Fake (every reference resolves), one
// operation per line (no input breaks the nft syntax), the tracer understands every rule, and an
// incremental sync to a second model gives the same table as a full sync of it.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17"))
	f.Add([]byte(strings.Repeat("\x04\x02\x01\x05\x03\x07\x02\x02\x01\x01\x03\x04", 20)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &bytesReader{fuzzbytes.New(data)}
		m1, m2 := r.model(), r.model()
		for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
			b := builder(t, nftrules.Config{Family: fam, MaglevTableSize: 13})
			fake := knftables.NewFake(fam, nftrules.TableName)
			tx := fake.NewTransaction()
			st := &nftrules.State{}
			b.Full(tx, m1, nftrules.Existing{}, st)
			if err := fake.Run(context.Background(), tx); err != nil {
				t.Fatalf("full sync rejected: %v\n%s", err, tx)
			}
			if lines := strings.Count(tx.String(), "\n"); lines != tx.NumOperations() {
				t.Fatalf("%d lines for %d operations:\n%s", lines, tx.NumOperations(), tx)
			}
			if _, err := trace.FromFake(fam, fake); err != nil {
				t.Fatalf("tracer: %v", err)
			}

			tx = fake.NewTransaction()
			plan := b.Incremental(tx, m1, m2, st)
			if err := fake.Run(context.Background(), tx); err != nil {
				t.Fatalf("incremental sync rejected: %v\n%s", err, tx)
			}
			if len(plan.StaleChains) > 0 {
				tx := fake.NewTransaction()
				nftrules.DeleteChains(tx, plan.StaleChains)
				if err := fake.Run(context.Background(), tx); err != nil {
					t.Fatalf("deleting stale chains: %v", err)
				}
			}
			want := knftables.NewFake(fam, nftrules.TableName)
			tx = want.NewTransaction()
			full := b.Full(tx, m2, nftrules.Existing{}, st.Clone())
			if err := want.Run(context.Background(), tx); err != nil {
				t.Fatalf("full sync of the second model rejected: %v", err)
			}
			if len(full.Conflicts) > 0 {
				return // documented: only full syncs resolve addresses claimed twice
			}
			if diff := cmp.Diff(normalized(want), normalized(fake)); diff != "" {
				t.Fatalf("incremental differs from full (-full +incremental):\n%s", diff)
			}
		}
	})
}
