package nftapply

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"sigs.k8s.io/knftables"
)

// fakeConn records the calls of one batch into log; Flush fails with err. It lists the chains of
// a knftables Fake.
type fakeConn struct {
	log     *[]string
	pending []string
	err     error
	fake    *knftables.Fake
}

func (c *fakeConn) ListChain(_ *nftables.Table, name string) (*nftables.Chain, error) {
	if c.fake.Table == nil || c.fake.Table.Chains[name] == nil {
		return nil, errors.New("no such file or directory")
	}
	return &nftables.Chain{Name: name}, nil
}

func (c *fakeConn) add(format string, args ...any) {
	c.pending = append(c.pending, fmt.Sprintf(format, args...))
}

func (c *fakeConn) AddTable(t *nftables.Table) *nftables.Table {
	c.add("add table %s", t.Name)
	return t
}
func (c *fakeConn) DelTable(t *nftables.Table) { c.add("delete table %s", t.Name) }
func (c *fakeConn) AddChain(ch *nftables.Chain) *nftables.Chain {
	c.add("add chain %s", ch.Name)
	return ch
}
func (c *fakeConn) FlushChain(ch *nftables.Chain) { c.add("flush chain %s", ch.Name) }
func (c *fakeConn) DelChain(ch *nftables.Chain)   { c.add("delete chain %s", ch.Name) }
func (c *fakeConn) AddRule(r *nftables.Rule) *nftables.Rule {
	c.add("add rule %s (%d expressions)", r.Chain.Name, len(r.Exprs))
	return r
}
func (c *fakeConn) AddSet(s *nftables.Set, _ []nftables.SetElement) error {
	c.add("add set %s", s.Name)
	return nil
}
func (c *fakeConn) FlushSet(s *nftables.Set) { c.add("flush set %s", s.Name) }
func (c *fakeConn) DelSet(s *nftables.Set)   { c.add("delete set %s", s.Name) }
func (c *fakeConn) SetAddElements(s *nftables.Set, els []nftables.SetElement) error {
	c.add("add %d elements to %s", len(els), s.Name)
	return nil
}
func (c *fakeConn) SetDeleteElements(s *nftables.Set, els []nftables.SetElement) error {
	c.add("delete %d elements from %s", len(els), s.Name)
	return nil
}
func (c *fakeConn) Flush() error {
	if c.err != nil {
		return c.err
	}
	*c.log = append(*c.log, strings.Join(c.pending, "; "))
	return nil
}

// TestSyncerPaths: full syncs run through nft, incremental ones over netlink, the creation of a
// per-Service map falls back to nft, stale chains are deleted over netlink, and a failed netlink
// batch makes the next sync a full one.
func TestSyncerPaths(t *testing.T) {
	ctx := context.Background()
	b, _ := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
	var batches []string
	var flushErr error
	nl, err := NewNetlinkConn(knftables.IPv4Family, func() (Conn, error) {
		return &fakeConn{log: &batches, err: flushErr, fake: fake}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(0, 0)
	s := New(fake, b, func() time.Time { return clock }, WithNetlink(nl))

	m := nftrulestest.Scale(3)
	if plan, err := s.Sync(ctx, m, false); err != nil || !plan.Full {
		t.Fatalf("first sync: full %v, %v", plan.Full, err)
	}
	full := fake.LastTransaction
	want := Stats{Exec: 1, NetlinkState: NetlinkOn}
	if diff := cmp.Diff(want, s.Stats()); diff != "" {
		t.Errorf("after the full sync (-want +got):\n%s", diff)
	}

	// One endpoint moves: one netlink batch, nothing through nft.
	m = nftrulestest.WithEndpointChange(m, 1, 1)
	plan, err := s.Sync(ctx, m, false)
	if err != nil || plan.Full {
		t.Fatalf("endpoint change: full %v, %v", plan.Full, err)
	}
	if fake.LastTransaction != full {
		t.Error("the endpoint change ran through nft")
	}
	want.Netlink++
	if diff := cmp.Diff(want, s.Stats()); diff != "" {
		t.Errorf("after an endpoint change (-want +got):\n%s", diff)
	}
	// Elements of the shared DNAT map and hairpin pairs only.
	if len(batches) != 1 || !strings.Contains(batches[0], "to dnat-endpoints-tcp") || strings.Contains(batches[0], "rule") ||
		strings.Contains(batches[0], "chain") {
		t.Errorf("netlink batches: %q", batches)
	}

	// A Service switching to Maglev declares a map with typeof: over netlink too.
	m = withMaglev(m, "svc-2")
	if _, err := s.Sync(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	if fake.LastTransaction != full {
		t.Error("creating a map ran through nft")
	}
	want.Netlink++
	if diff := cmp.Diff(want, s.Stats()); diff != "" {
		t.Errorf("after a new Maglev Service (-want +got):\n%s", diff)
	}
	// A Service without endpoints whose names make an element comment too long for netlink (and
	// for nft's kernel, but not for the Fake): through nft, counted.
	long := withLongNames(m)
	if _, err := s.Sync(ctx, long, false); err != nil {
		t.Fatal(err)
	}
	if fake.LastTransaction == full {
		t.Error("the element with a long comment did not run through nft")
	}
	want.Exec++
	want.Fallbacks = map[FallbackReason]int{FallbackElement: 1}
	if diff := cmp.Diff(want, s.Stats()); diff != "" {
		t.Errorf("after a Service with a long comment (-want +got):\n%s", diff)
	}
	if _, err := s.Sync(ctx, m, false); err != nil { // and it goes: over netlink
		t.Fatal(err)
	}
	want.Netlink++
	// One of its endpoints moves (a new endpoint chain, over netlink); a second later the old
	// chain goes, over netlink.
	m = nftrulestest.WithEndpointChange(m, 2, 1)
	if _, err := s.Sync(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * StaleChainDelay)
	if _, err := s.Sync(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	want.Netlink += 2
	if diff := cmp.Diff(want, s.Stats()); diff != "" {
		t.Errorf("after a Maglev endpoint change (-want +got):\n%s", diff)
	}
	if last := batches[len(batches)-1]; !strings.HasPrefix(last, "delete chain endpoint-") {
		t.Errorf("stale chain deletion: %q", last)
	}

	// The kernel refuses a batch: an error, and the next sync is full.
	flushErr = errors.New("EBUSY")
	if _, err := s.Sync(ctx, nftrulestest.WithEndpointChange(m, 1, 2), false); err == nil || !strings.Contains(err.Error(), "EBUSY") {
		t.Fatalf("failed batch: %v", err)
	}
	want.NetlinkErrors++
	if diff := cmp.Diff(want, s.Stats()); diff != "" {
		t.Errorf("after a failed batch (-want +got):\n%s", diff)
	}
	flushErr = nil
	if plan, err := s.Sync(ctx, nftrulestest.WithEndpointChange(m, 1, 3), false); err != nil || !plan.Full {
		t.Errorf("sync after a failed batch: full %v, %v", plan.Full, err)
	}
}

// TestSyncerOtherNamespace: when netlink does not see the chains nft wrote (nft runs in
// another namespace, as in tests that point PATH's nft at one), netlink is never used.
func TestSyncerOtherNamespace(t *testing.T) {
	ctx := context.Background()
	b, _ := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
	elsewhere := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
	var batches []string
	nl, _ := NewNetlinkConn(knftables.IPv4Family, func() (Conn, error) { return &fakeConn{log: &batches, fake: elsewhere}, nil })
	s := New(fake, b, nil, WithNetlink(nl))
	if st := s.Stats(); st.NetlinkState != NetlinkUnverified {
		t.Errorf("before the first sync: %v", st.NetlinkState)
	}
	m := nftrulestest.Scale(3)
	for i := range 3 {
		m = nftrulestest.WithEndpointChange(m, 1, byte(i))
		if _, err := s.Sync(ctx, m, false); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.NetlinkState != NetlinkOff || !errors.Is(st.NetlinkOff, ErrOtherTable) || st.Exec != 3 ||
		st.Fallbacks[FallbackOff] != 2 || len(batches) != 0 {
		t.Errorf("stats %+v, batches %q: want netlink off and unused", st, batches)
	}
}

// withLongNames returns a copy of m with a Service without endpoints whose namespace, name and
// port name make the comment of its no-endpoint element 143 bytes long.
func withLongNames(m *nftrules.Model) *nftrules.Model {
	n := &nftrules.Model{Node: m.Node, Services: maps.Clone(m.Services)}
	svc := &nftrules.Service{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 63),
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.9.9")},
		Ports:      []nftrules.Port{{Name: strings.Repeat("p", 15), Protocol: nftrules.TCP, Port: 80}}}
	n.Services[svc.Key()] = svc
	return n
}

// TestSyncerWithoutNFT: with no nft, what the netlink writer cannot encode fails the sync with an
// error that names it, and the Syncer goes on (the next sync is full).
func TestSyncerWithoutNFT(t *testing.T) {
	b, _ := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
	var batches []string
	nl, _ := NewNetlinkConn(knftables.IPv4Family, func() (Conn, error) { return &fakeConn{log: &batches}, nil })
	s := New(nil, b, nil, WithNetlink(nl))
	if st := s.Stats(); st.NetlinkState != NetlinkOn {
		t.Fatalf("without nft: netlink %v, want on", st.NetlinkState)
	}
	// Full syncs list the table over netlink, which only a writer for the kernel can: an error,
	// not a crash.
	if _, err := s.Sync(context.Background(), nftrulestest.Scale(2), false); err == nil || !strings.Contains(err.Error(), "listing") {
		t.Fatalf("full sync with a fake netlink writer: %v", err)
	}
	// An incremental sync with an element it cannot encode.
	s.applied = nftrulestest.Scale(2)
	s.state = *b.StateOf(s.applied)
	_, err := s.Sync(context.Background(), withLongNames(s.applied), false)
	var u *UnsupportedError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "no nft") || !strings.Contains(err.Error(), "comment too long") ||
		!strings.Contains(u.Op, strings.Repeat("s", 63)) {
		t.Fatalf("unencodable element without nft: %v", err)
	}
	if s.applied != nil || len(batches) != 0 {
		t.Errorf("after the failure: applied %v, batches %q", s.applied != nil, batches)
	}
}

// withMaglev returns a copy of m in which Service name is balanced by Maglev.
func withMaglev(m *nftrules.Model, name string) *nftrules.Model {
	n := &nftrules.Model{Node: m.Node, Services: maps.Clone(m.Services)}
	k := nftrules.ServiceKey{Namespace: "ns1", Name: name}
	s := nftrulestest.CloneService(m.Services[k])
	s.Algorithm = nftrules.Maglev
	n.Services[k] = s
	return n
}

// TestSyncerWithoutNetlink: WithNetlink(nil) runs everything through nft, as before.
func TestSyncerWithoutNetlink(t *testing.T) {
	ctx := context.Background()
	b, _ := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
	s := New(fake, b, nil, WithNetlink(nil))
	m := nftrulestest.Scale(3)
	for i := range 3 {
		m = nftrulestest.WithEndpointChange(m, 1, byte(i))
		if _, err := s.Sync(ctx, m, false); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(Stats{Exec: 3}, s.Stats()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestNewKernelNeedsNFTOnlyWithoutNetlink: without nft on PATH, NewKernel succeeds (everything
// over netlink) and says why nft is not used; told not to use netlink, it fails, naming nft.
func TestNewKernelNeedsNFTOnlyWithoutNetlink(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cfg := nftrules.Config{Family: knftables.IPv4Family}
	s, err := NewKernel(cfg)
	if err != nil {
		t.Fatalf("without nft: %v", err)
	}
	if st := s.Stats(); st.NFT == nil || st.NetlinkState != NetlinkOn || s.nft != nil {
		t.Errorf("without nft: stats %+v", st)
	}
	if _, err := NewKernel(cfg, WithNetlink(nil)); err == nil || !strings.Contains(err.Error(), "nft") {
		t.Errorf("without nft or netlink: %v, want an error about nft", err)
	}
}
