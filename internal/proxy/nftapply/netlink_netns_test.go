package nftapply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// twins are two namespaces that receive the same syncs: exec runs every transaction through nft,
// nl writes incremental ones over netlink, or (nlOnly) every one, without nft.
type twins struct {
	fam          knftables.Family
	execNS, nlNS string
	exec, nl     *Syncer
	execNFT      knftables.Interface
	nlNFT        knftables.Interface
}

func newTwins(t *testing.T, fam knftables.Family, cfg nftrules.Config, clock func() time.Time, nlOnly bool) *twins {
	t.Helper()
	execNS, nlNS := newNetns(t), newNetns(t)
	path := os.Getenv("PATH")
	nftIn := func(ns string) knftables.Interface {
		// knftables resolves nft when it is created: point PATH at the namespace's wrapper.
		t.Setenv("PATH", path)
		netnstest.NFTOnPath(t, ns)
		nft, err := knftables.New(fam, nftrules.TableName)
		if err != nil {
			t.Fatal(err)
		}
		return nft
	}
	tw := &twins{fam: fam, execNS: execNS, nlNS: nlNS, execNFT: nftIn(execNS), nlNFT: nftIn(nlNS)}
	t.Setenv("PATH", path)
	b, err := nftrules.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := NewNetlink(fam, netnsFD(t, nlNS))
	if err != nil {
		t.Fatal(err)
	}
	tw.exec = New(tw.execNFT, b, clock)
	if nlOnly {
		tw.nl = New(nil, b, clock, WithNetlink(nl), WithNetlinkFull(true))
	} else {
		tw.nl = New(tw.nlNFT, b, clock, WithNetlink(nl), WithBulkNewTable(true))
	}
	return tw
}

// sync applies m to both and checks that they agree.
func (tw *twins) sync(t *testing.T, m *nftrules.Model, what string) nftrules.Plan {
	t.Helper()
	ctx := context.Background()
	want, err := tw.exec.Sync(ctx, m, false)
	if err != nil {
		t.Fatalf("%s: through nft: %v", what, err)
	}
	got, err := tw.nl.Sync(ctx, m, false)
	if err != nil {
		t.Fatalf("%s: over netlink: %v", what, err)
	}
	if want.Full != got.Full || want.Ops != got.Ops {
		t.Fatalf("%s: plans differ: nft full %v ops %d, netlink full %v ops %d", what, want.Full, want.Ops, got.Full, got.Ops)
	}
	for _, view := range []struct {
		name string
		list func(t *testing.T, ns string, fam knftables.Family) []string
	}{{"nft -j list", jsonListing}, {"nft --debug=netlink list", netlinkListing}} {
		if diff := cmp.Diff(view.list(t, tw.execNS, tw.fam), view.list(t, tw.nlNS, tw.fam)); diff != "" {
			t.Fatalf("%s: %s differs (-nft +netlink):\n%s", what, view.name, diff)
		}
	}
	return got
}

// jsonListing returns `nft -j list table` as sorted lines of canonical JSON, one per object,
// without handles; rules carry their chain and position, set elements are sorted.
func jsonListing(t *testing.T, ns string, fam knftables.Family) []string {
	t.Helper()
	return jsonListingOf(t, ns, fam, nftrules.TableName)
}

// jsonListingOf is jsonListing of the table named table.
func jsonListingOf(t *testing.T, ns string, fam knftables.Family, table string) []string {
	t.Helper()
	out := nsRun(t, ns, "", "nft", "-j", "list", "table", string(fam), table)
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("parsing nft -j output: %v", err)
	}
	var lines []string
	pos := map[string]int{}
	for _, obj := range doc.Nftables {
		for kind, v := range obj {
			if kind == "metainfo" {
				continue
			}
			delete(v, "handle")
			if els, ok := v["elem"].([]any); ok {
				slices.SortFunc(els, func(a, b any) int { return strings.Compare(canonical(t, a), canonical(t, b)) })
			}
			prefix := kind + " " + fmt.Sprint(v["name"])
			if kind == "rule" {
				c := fmt.Sprint(v["chain"])
				prefix = fmt.Sprintf("rule %s #%d", c, pos[c])
				pos[c]++
			}
			lines = append(lines, prefix+" "+canonical(t, v))
		}
	}
	slices.Sort(lines)
	return lines
}

func canonical(t *testing.T, v any) string {
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// netlinkListing returns `nft --debug=netlink list table`: what the kernel holds, expression by
// expression with registers, lengths and userdata. Rule handles are cut from the rule headers
// and set elements sorted within their set; the order of rules is kept. The interval-end element
// at key 0 that nft adds to a named interval set or map it writes into (DNAT maps and
// cluster-cidrs, when they were in the kernel before its transaction) is left out: no interval
// starts at 0, lookups do not need it, and the netlink writer does not add it. (Anonymous sets
// keep theirs: the writer adds it as nft does.)
// zeroEnd is the interval end at key 0 (either family) in nft --debug=netlink's listing.
var zeroEnd = regexp.MustCompile(`^\telement (00000000 ?)+ : 1 \[end\]`)

func netlinkListing(t *testing.T, ns string, fam knftables.Family) []string {
	t.Helper()
	return netlinkListingOf(t, ns, fam, nftrules.TableName)
}

// netlinkListingOf is netlinkListing of the table named table.
func netlinkListingOf(t *testing.T, ns string, fam knftables.Family, table string) []string {
	t.Helper()
	out := nsRun(t, ns, "", "nft", "--debug=netlink", "list", "table", string(fam), table)
	header := string(fam) + " " + table + " "
	var lines, elems []string
	inDNAT := false
	flush := func() {
		slices.Sort(elems)
		lines = append(lines, elems...)
		elems = nil
	}
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "\telement "):
			if !(inDNAT && zeroEnd.MatchString(l)) {
				elems = append(elems, l)
			}
			continue
		case strings.HasPrefix(l, header+"@"):
			set := strings.TrimPrefix(l, header+"@")
			inDNAT = nftrules.IsDNATMap(set) || set == "cluster-cidrs"
		case strings.HasPrefix(l, header) && !strings.HasPrefix(l, header+"@"):
			f := strings.Fields(l)
			l = strings.Join(f[:3], " ") // family table chain, without handle and position
		}
		flush()
		if l != "" {
			lines = append(lines, l)
		}
	}
	flush()
	return lines
}

// TestNetlinkMatchesNFT drives random chains of model changes through two namespaces, one
// written only by nft and one whose incremental syncs (and stale-chain deletions) go over
// netlink, and checks after every sync that both kernels list the same table, in JSON and
// expression by expression.
func TestNetlinkMatchesNFT(t *testing.T) {
	for _, c := range []struct {
		fam    knftables.Family
		nlOnly bool
	}{{knftables.IPv4Family, false}, {knftables.IPv6Family, false}, {knftables.IPv4Family, true}, {knftables.IPv6Family, true}} {
		name := string(c.fam)
		if c.nlOnly {
			name += "/netlink-only"
		}
		fam := c.fam
		t.Run(name, func(t *testing.T) {
			clock := time.Unix(0, 0)
			tw := newTwins(t, fam, nftrules.Config{Family: fam, MaglevTableSize: 13}, func() time.Time { return clock }, c.nlOnly)
			seeds, length := uint64(4), 12
			if testing.Short() {
				seeds, length = 2, 6
			}
			for seed := range seeds {
				g := nftrulestest.NewGen(100 + seed)
				m := g.Model(6)
				for step := range length {
					if step > 0 {
						m = g.Mutate(m, 10)
					}
					clock = clock.Add(2 * StaleChainDelay)
					tw.sync(t, m, fmt.Sprintf("seed %d step %d", seed, step))
				}
			}
			st := tw.nl.Stats()
			t.Logf("netlink %d, nft %d (fallbacks %v), netlink errors %d", st.Netlink, st.Exec, st.Fallbacks, st.NetlinkErrors)
			if st.Netlink == 0 || st.NetlinkErrors != 0 || c.nlOnly && (st.Exec != 0 || st.Fallbacks != nil) {
				t.Errorf("stats %+v: want netlink writes and no netlink errors (and nothing else without nft)", st)
			}
		})
	}
}

// TestNetlinkEndpointChanges: the changes the issue is about — an endpoint moving, appearing or
// going, for random, round-robin and Maglev Services — go over netlink, not through nft.
func TestNetlinkEndpointChanges(t *testing.T) {
	clock := time.Unix(0, 0)
	tw := newTwins(t, knftables.IPv4Family, nftrules.Config{Family: knftables.IPv4Family, MaglevTableSize: 13}, func() time.Time { return clock }, false)
	const n = 12
	m := nftrulestest.Scale(n)
	for i := range n {
		s := m.Services[nftrules.ServiceKey{Namespace: "ns1", Name: fmt.Sprintf("svc-%d", i)}]
		s.Algorithm = nftrules.Algorithm(i % 3)
		s.SessionAffinityClientIP = i%2 == 0
	}
	tw.sync(t, m, "full")
	st0 := tw.nl.Stats()
	steps := 0
	for i := range n {
		for gen := range 2 {
			clock = clock.Add(2 * StaleChainDelay)
			m = nftrulestest.WithEndpointChange(m, i, byte(gen))
			tw.sync(t, m, fmt.Sprintf("svc-%d move %d", i, gen))
			steps++
		}
	}
	st := tw.nl.Stats()
	if st.Fallbacks != nil || st.NetlinkErrors != 0 || st.Netlink-st0.Netlink < steps {
		t.Errorf("after %d endpoint changes: %+v (before %+v), want all over netlink", steps, st, st0)
	}
}

// TestNetlinkRecoversWithFull: a netlink batch the kernel refuses (the table was deleted behind
// the Syncer's back) fails the sync, without hanging for acknowledgements, and the next sync is
// a full one through nft that rebuilds the table.
func TestNetlinkRecoversWithFull(t *testing.T) {
	ns := testNetns(t)
	ctx := context.Background()
	s, err := NewKernel(nftrules.Config{Family: knftables.IPv4Family}, WithNetlink(mustNetlink(t, knftables.IPv4Family, netnsFD(t, ns))))
	if err != nil {
		t.Fatal(err)
	}
	m := nftrulestest.Scale(4)
	if _, err := s.Sync(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.NetlinkState != NetlinkOn {
		t.Fatalf("netlink %v (%v) after a full sync in the namespace", st.NetlinkState, st.NetlinkOff)
	}
	if err := Cleanup(ctx, s.nft); err != nil {
		t.Fatal(err)
	}
	m = nftrulestest.WithEndpointChange(m, 1, 1)
	done := make(chan error, 1)
	go func() { _, err := s.Sync(ctx, m, false); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, unix.ENOENT) {
			t.Fatalf("netlink batch into a deleted table: %v, want ENOENT", err)
		}
		t.Logf("as expected: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("netlink batch hangs")
	}
	if st := s.Stats(); st.NetlinkErrors != 1 {
		t.Errorf("stats %+v, want one netlink error", st)
	}
	plan, err := s.Sync(ctx, m, false)
	if err != nil || !plan.Full {
		t.Fatalf("sync after the failure: full %v, %v", plan.Full, err)
	}
	if got := nsRun(t, ns, "", "nft", "list", "table", "ip", nftrules.TableName); !strings.Contains(got, ": 10.247.0.1 . 8080") {
		t.Errorf("table not rebuilt:\n%s", got)
	}
	if err := Cleanup(ctx, s.nft); err != nil {
		t.Fatal(err)
	}
}

func mustNetlink(t *testing.T, fam knftables.Family, fd int) *Netlink {
	t.Helper()
	nl, err := NewNetlink(fam, fd)
	if err != nil {
		t.Fatal(err)
	}
	return nl
}

// TestNetlinkDNATMapShards: the Service whose window is the first of a new DNAT map creates the
// map (through nft: typeof), and the map goes with the last Service in it; both kernels agree,
// and endpoint changes in either map go over netlink.
func TestNetlinkDNATMapShards(t *testing.T) {
	clock := time.Unix(0, 0)
	tw := newTwins(t, knftables.IPv4Family, nftrules.Config{Family: knftables.IPv4Family}, func() time.Time { return clock }, false)
	small := nftrulestest.Scale(nftrules.WindowsPerMap - 1) // windows 1-63: the first map
	tw.sync(t, small, "full")
	big := nftrulestest.Scale(nftrules.WindowsPerMap)
	tw.sync(t, big, "a Service in the second map")
	if got := nsRun(t, tw.nlNS, "", "nft", "list", "maps", "ip"); !strings.Contains(got, "dnat-endpoints-tcp-1") {
		t.Fatalf("no second DNAT map:\n%s", got)
	}
	st0 := tw.nl.Stats()
	tw.sync(t, nftrulestest.WithEndpointChange(big, nftrules.WindowsPerMap-1, 1), "an endpoint change in the second map")
	tw.sync(t, nftrulestest.WithEndpointChange(big, 0, 1), "an endpoint change in the first map")
	if st := tw.nl.Stats(); st.Netlink-st0.Netlink != 2 || st.Exec != st0.Exec {
		t.Errorf("endpoint changes: %+v (before %+v), want both over netlink", st, st0)
	}
	tw.sync(t, small, "the second map's last Service goes")
	if got := nsRun(t, tw.nlNS, "", "nft", "list", "maps", "ip"); strings.Contains(got, "dnat-endpoints-tcp-1") {
		t.Errorf("the emptied DNAT map is still there:\n%s", got)
	}
}

// TestNetlinkFullEdges: full and incremental syncs without nft match nft's for what the random
// models leave out: several (overlapping, not byte-aligned) Service CIDRs, node-port addresses,
// the DSR skip mark, masquerade-all, and source ranges that overlap, touch, or are single
// addresses (merged in an anonymous interval set, as nft merges them).
func TestNetlinkFullEdges(t *testing.T) {
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		t.Run(string(fam), func(t *testing.T) {
			clock := time.Unix(0, 0)
			cfg := nftrules.Config{Family: fam, MaglevTableSize: 13, SkipMark: nftrules.DSRMarkMask, MasqueradeAll: true}
			tw := newTwins(t, fam, cfg, func() time.Time { return clock }, true)
			g := nftrulestest.NewGen(7)
			m := g.Model(8)
			pfx := func(ss ...string) []netip.Prefix {
				var out []netip.Prefix
				for _, s := range ss {
					out = append(out, netip.MustParsePrefix(s))
				}
				return out
			}
			m.Node.ServiceCIDRs = pfx("10.96.0.0/16", "10.96.0.0/12", "10.128.0.0/9", "fd00:10:96::/112", "fd00:10:97::/108", "fd00:10:96::/64")
			m.Node.NodePortAddresses = []netip.Addr{netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("fd00:192:168::10"), netip.MustParseAddr("127.0.0.1")}
			ranges := pfx("192.168.0.0/24", "192.168.1.0/24", "203.0.113.7/32", "10.0.0.0/9", "10.64.0.0/10", "10.200.0.0/13",
				"fd00:1::/64", "fd00:1:0:1::/64", "fd00:2::7/128", "fd00:3::/33")
			// Also: everything (one range up to the last address, open in nft's terms, merged with the
			// node's VIPs), a range up to the last address beside another, and one range (which nft
			// compares with directly, without a set).
			// And more ranges than fit in one netlink message.
			var many []netip.Prefix
			for i := range 1200 {
				many = append(many, netip.MustParsePrefix(fmt.Sprintf("172.%d.%d.0/24", 16+i/250, i%250)),
					netip.MustParsePrefix(fmt.Sprintf("fd00:7:%x::/48", 2*i)))
			}
			others := [][]netip.Prefix{pfx("0.0.0.0/0", "::/0"), pfx("10.0.0.0/8", "255.255.255.0/24", "fd00::/8", "ffff::/16"), pfx("172.16.0.0/12", "fd00:9::/48"), many}
			n := 0
			for _, k := range slices.SortedFunc(maps.Keys(m.Services), func(a, b nftrules.ServiceKey) int { return strings.Compare(a.String(), b.String()) }) {
				s := m.Services[k]
				if len(s.LoadBalancerIPs) == 0 {
					continue
				}
				s.LoadBalancerSourceRanges = ranges
				if n < len(others) {
					s.LoadBalancerSourceRanges = others[n]
				}
				n++
			}
			if n <= len(others) {
				t.Fatalf("%d Services with load-balancer IPs, want more than %d", n, len(others))
			}
			tw.sync(t, m, "full")
			for step := range 6 {
				clock = clock.Add(2 * StaleChainDelay)
				m = g.Mutate(m, 10)
				tw.sync(t, m, fmt.Sprintf("step %d", step))
			}
			clock = clock.Add(2 * StaleChainDelay)
			if _, err := tw.exec.Sync(context.Background(), m, true); err != nil {
				t.Fatal(err)
			}
			plan, err := tw.nl.Sync(context.Background(), m, true)
			if err != nil || !plan.Full {
				t.Fatalf("full sync replacing the table's Services: full %v, %v", plan.Full, err)
			}
			tw.sync(t, m, "after a full sync over a full table")
			if st := tw.nl.Stats(); st.Exec != 0 || st.Fallbacks != nil || st.NetlinkErrors != 0 {
				t.Errorf("stats %+v: want everything over netlink", st)
			}
		})
	}
}

// TestNetlinkRestartVerifiesByListing: a Syncer that finds a table nft lists (a restart) turns
// netlink on when netlink lists the same chains, and writes that first full sync over netlink,
// not through nft; pointed at another namespace, it does not, and netlink ends off.
func TestNetlinkRestartVerifiesByListing(t *testing.T) {
	other := newNetns(t)
	realNFT, _ := exec.LookPath("nft")
	ns := testNetns(t) // PATH's nft writes ns
	ctx := context.Background()
	cfg := nftrules.Config{Family: knftables.IPv4Family}
	m := nftrulestest.Scale(20)
	first, err := NewKernel(cfg, WithNetlink(mustNetlink(t, knftables.IPv4Family, netnsFD(t, ns))))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := first.Sync(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		ns    string
		state NetlinkState
		exec  bool
	}{{"same namespace", ns, NetlinkOn, false}, {"another namespace", other, NetlinkOff, true}} {
		s, err := NewKernel(cfg, WithNetlink(mustNetlink(t, knftables.IPv4Family, netnsFD(t, c.ns))))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sync(ctx, nftrulestest.WithEndpointChange(m, 3, 1), false); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		st := s.Stats()
		if st.NetlinkState != c.state || (st.Exec > 0) != c.exec || !c.exec && st.Netlink != 1 {
			t.Errorf("%s: stats %+v, want netlink %v, through nft %v", c.name, st, c.state, c.exec)
		}
		s.Close()
	}
	if out := nsRun(t, other, "", realNFT, "list", "tables"); strings.Contains(out, nftrules.TableName) {
		t.Errorf("the other namespace got a table:\n%s", out)
	}
	if err := Cleanup(ctx, first.nft); err != nil {
		t.Fatal(err)
	}
}
