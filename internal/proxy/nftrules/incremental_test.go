package nftrules_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"sigs.k8s.io/knftables"
)

// normalized is a Fake's dump with element lines sorted (the Fake keeps elements in insertion
// order; nft does not order them at all) and everything else as dumped.
func normalized(fake *knftables.Fake) string {
	var rest, elems []string
	for _, l := range strings.Split(fake.Dump(), "\n") {
		if strings.HasPrefix(l, "add element ") {
			elems = append(elems, l)
		} else {
			rest = append(rest, l)
		}
	}
	slices.Sort(elems)
	return strings.Join(append(rest, elems...), "\n")
}

// applyIncremental runs Incremental(old, m, st) on fake, then deletes the stale chains as the
// caller would later, and returns the plan.
func applyIncremental(t *testing.T, b *nftrules.Builder, fake *knftables.Fake, old, m *nftrules.Model, st *nftrules.State) nftrules.Plan {
	t.Helper()
	tx := fake.NewTransaction()
	plan := b.Incremental(tx, old, m, st)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatalf("incremental: %v\n%s", err, tx)
	}
	if len(plan.StaleChains) > 0 {
		tx := fake.NewTransaction()
		nftrules.DeleteChains(tx, plan.StaleChains)
		if err := fake.Run(context.Background(), tx); err != nil {
			t.Fatalf("deleting stale chains: %v\n%s", err, tx)
		}
	}
	return plan
}

// TestIncrementalMatchesFull applies random chains of changes incrementally and checks that the
// table always equals a fresh full sync of the same model.
func TestIncrementalMatchesFull(t *testing.T) {
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		t.Run(string(fam), func(t *testing.T) {
			b := builder(t, nftrules.Config{Family: fam, MaglevTableSize: 13})
			for seed := range uint64(40) {
				g := nftrulestest.NewGen(seed)
				const universe = 8
				m := g.Model(universe / 2)
				st := &nftrules.State{}
				fake, _ := fullFakeWith(t, b, m, st)
				for step := range 15 {
					next := g.Mutate(m, universe)
					applyIncremental(t, b, fake, m, next, st)
					want, _ := fullFakeWith(t, b, next, st.Clone())
					if diff := cmp.Diff(normalized(want), normalized(fake)); diff != "" {
						t.Fatalf("seed %d step %d: incremental differs from full (-full +incremental):\n%s", seed, step, diff)
					}
					m = next
				}
			}
		})
	}
}

func TestIncrementalNoChange(t *testing.T) {
	b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
	g := nftrulestest.NewGen(1)
	m := g.Model(20)
	// Same pointers, and deep copies: nothing to write either way.
	copied := &nftrules.Model{Node: m.Node, Services: map[nftrules.ServiceKey]*nftrules.Service{}}
	for k, s := range m.Services {
		copied.Services[k] = nftrulestest.CloneService(s)
	}
	for _, next := range []*nftrules.Model{m, copied} {
		tx := knftables.NewFake(knftables.IPv4Family, nftrules.TableName).NewTransaction()
		plan := b.Incremental(tx, m, next, nil)
		if tx.NumOperations() != 0 || len(plan.Changed) != 0 {
			t.Errorf("no change wrote %d operations for %v:\n%s", tx.NumOperations(), plan.Changed, tx)
		}
	}
}

// TestIncrementalTouchesOnlyChanged: an endpoint change of one Service among 10,000 writes only
// elements: the window of that Service in dnat-endpoints, and the hairpin pairs of the endpoint
// that went and the one that came. No rule, no chain: the kernel does not validate the table's
// jump graph for it.
func TestIncrementalTouchesOnlyChanged(t *testing.T) {
	const n, changed = 10000, 4321
	b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
	old := nftrulestest.Scale(n)
	next := nftrulestest.WithEndpointChange(old, changed, 0)

	tx := knftables.NewFake(knftables.IPv4Family, nftrules.TableName).NewTransaction()
	plan := b.Incremental(tx, old, next, b.StateOf(old))
	if want := []nftrules.ServiceKey{{Namespace: "ns1", Name: fmt.Sprintf("svc-%d", changed)}}; !slices.Equal(plan.Changed, want) {
		t.Errorf("Changed = %v, want %v", plan.Changed, want)
	}
	text := tx.String()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "add element ip ironlb dnat-endpoints-tcp-") && !strings.HasPrefix(l, "delete element ip ironlb dnat-endpoints-tcp-") &&
			!strings.HasPrefix(l, "add element ip ironlb hairpin-endpoints ") && !strings.HasPrefix(l, "delete element ip ironlb hairpin-endpoints ") {
			t.Errorf("not an element of dnat-endpoints or hairpin-endpoints: %s", l)
		}
	}
	for _, want := range []string{
		"delete element ip ironlb hairpin-endpoints { 10.245.16.225 . 10.245.16.225 }",
		"add element ip ironlb hairpin-endpoints { 10.246.16.225 . 10.246.16.225 }",
		" : 10.246.16.225 . 8080 }",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("transaction lacks %q:\n%s", want, text)
		}
	}
	if len(lines) > 6 || len(plan.StaleChains) != 0 || len(plan.AddedChains) != 0 {
		t.Errorf("%d operations, stale %v, added %v; want at most 6, none:\n%s", len(lines), plan.StaleChains, plan.AddedChains, text)
	}
}

// TestIncrementalDeadNode: a node declared dead rewrites exactly the Services with endpoints
// there, and its return restores them.
func TestIncrementalDeadNode(t *testing.T) {
	b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
	m := model(testNode(),
		svc("ns1", "a", []netip.Addr{a("10.96.0.1")}, ep("10.244.1.5:80", thisNode), ep("10.244.2.5:80", "node-b")),
		svc("ns1", "b", []netip.Addr{a("10.96.0.2")}, ep("10.244.1.6:80", thisNode), ep("10.244.3.5:80", "node-c")),
	)
	fake, _ := fullFake(t, b, m)
	before := normalized(fake)

	dead := &nftrules.Model{Node: m.Node, Services: m.Services}
	dead.Node.DeadNodes = map[string]bool{"node-b": true}
	plan := applyIncremental(t, b, fake, m, dead, nil)
	if want := []nftrules.ServiceKey{{Namespace: "ns1", Name: "a"}}; !slices.Equal(plan.Changed, want) {
		t.Errorf("Changed = %v, want %v", plan.Changed, want)
	}
	if d := normalized(fake); strings.Contains(d, "10.244.2.5") {
		t.Errorf("dead node's endpoint still in the rules:\n%s", d)
	}
	applyIncremental(t, b, fake, dead, m, nil)
	if diff := cmp.Diff(before, normalized(fake)); diff != "" {
		t.Errorf("node's return did not restore the rules (-before +after):\n%s", diff)
	}
}

// TestIncrementalNodeSettingsFull: a change of the node's settings rewrites everything and
// cleans up what the old model made.
func TestIncrementalNodeSettingsFull(t *testing.T) {
	b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
	m := model(testNode(), svc("ns1", "a", []netip.Addr{a("10.96.0.1")}, ep("10.244.1.5:80", thisNode)))
	fake, _ := fullFake(t, b, m)
	next := &nftrules.Model{Node: m.Node, Services: map[nftrules.ServiceKey]*nftrules.Service{}}
	next.Node.NodePortAddresses = []netip.Addr{a("192.168.0.10")}
	plan := applyIncremental(t, b, fake, m, next, nil)
	if !plan.Full || len(plan.StaleChains) != 1 {
		t.Errorf("plan = %+v, want a full sync with 1 stale chain", plan)
	}
	want, _ := fullFake(t, b, next)
	if diff := cmp.Diff(normalized(want), normalized(fake)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestFullCleansExisting: a full sync over a table with leftovers flushes stale Service chains
// (returned for later deletion), deletes stale affinity sets and keeps live ones.
func TestFullCleansExisting(t *testing.T) {
	b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
	sticky := svc("ns1", "a", []netip.Addr{a("10.96.0.1")}, ep("10.244.1.5:80", thisNode), ep("10.244.2.5:80", "node-b"))
	sticky.SessionAffinityClientIP = true
	m := model(testNode(), sticky)
	fake, _ := fullFake(t, b, m)

	next := model(testNode(), func() *nftrules.Service {
		s := nftrulestest.CloneService(sticky)
		s.Ports[0].Endpoints = s.Ports[0].Endpoints[:1]
		return s
	}())
	var ex nftrules.Existing
	for c := range fake.Table.Chains {
		ex.Chains = append(ex.Chains, c)
	}
	for s := range fake.Table.Sets {
		ex.Sets = append(ex.Sets, s)
	}
	tx := fake.NewTransaction()
	plan := b.Full(tx, next, ex, nil)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatalf("%v\n%s", err, tx)
	}
	if len(plan.StaleChains) != 1 || !strings.Contains(plan.StaleChains[0], "10.244.2.5") {
		t.Errorf("StaleChains = %v, want the removed endpoint's chain", plan.StaleChains)
	}
	if !strings.Contains(tx.String(), "delete set ip ironlb affinity-") {
		t.Errorf("stale affinity set not deleted:\n%s", tx)
	}
	sets := 0
	for s := range fake.Table.Sets {
		if nftrules.IsAffinitySet(s) {
			sets++
		}
	}
	if sets != 1 {
		t.Errorf("%d affinity sets left, want 1", sets)
	}
}

// kernelWriter passes operations on to a Fake's transaction and fails the test where the kernel
// would refuse them and the Fake does not: adding a map element whose key the table already holds
// with another value ("file exists"; the Fake overwrites it).
type kernelWriter struct {
	t       *testing.T
	tx      *knftables.Transaction
	fake    *knftables.Fake
	pending map[string]*string // container and key -> value after this transaction's earlier ops; nil: deleted
}

func (w *kernelWriter) Add(o knftables.Object) {
	if el, ok := o.(*knftables.Element); ok && el.Map != "" {
		id := el.Map + " " + strings.Join(el.Key, " . ")
		val := strings.Join(el.Value, " . ")
		cur, seen := w.pending[id]
		if !seen && w.fake.Table != nil {
			if mp := w.fake.Table.Maps[el.Map]; mp != nil {
				if x := mp.FindElement(el.Key...); x != nil {
					v := strings.Join(x.Value, " . ")
					cur = &v
				}
			}
		}
		if cur != nil && *cur != val {
			w.t.Errorf("add element %s : %s while the table holds it with %s: the kernel says \"file exists\"", id, val, *cur)
		}
		w.pending[id] = &val
	}
	w.tx.Add(o)
}

func (w *kernelWriter) Flush(o knftables.Object) { w.tx.Flush(o) }

func (w *kernelWriter) Delete(o knftables.Object) {
	if el, ok := o.(*knftables.Element); ok && el.Map != "" {
		w.pending[el.Map+" "+strings.Join(el.Key, " . ")] = nil
	}
	w.tx.Delete(o)
}

// TestIncrementalSharedAddresses moves load-balancer and external addresses between Services, so
// that two Services claim one service-ips key for a while (the controller moving an address, or
// externalIPs written by hand). Each incremental sync must be one the kernel accepts and leave the
// table as a full sync of the same model would: the first Service in key order keeps the key.
func TestIncrementalSharedAddresses(t *testing.T) {
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		t.Run(string(fam), func(t *testing.T) {
			b := builder(t, nftrules.Config{Family: fam, MaglevTableSize: 13})
			conflicts := 0
			for seed := range uint64(40) {
				g := nftrulestest.NewGen(seed)
				const universe = 6
				m := g.Model(universe)
				st := &nftrules.State{}
				fake, _ := fullFakeWith(t, b, m, st)
				for step := range 20 {
					next := g.Mutate(m, universe)
					// Give one Service another's addresses (or its own back).
					from := fmt.Sprintf("s%d", g.R.IntN(universe))
					to := nftrules.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", g.R.IntN(universe))}
					if src, dst := next.Services[nftrules.ServiceKey{Namespace: "ns", Name: from}], next.Services[to]; src != nil && dst != nil {
						c := nftrulestest.CloneService(dst)
						if g.R.IntN(2) == 0 {
							c.LoadBalancerIPs = slices.Clone(src.LoadBalancerIPs)
						} else {
							c.ExternalIPs = slices.Clone(src.LoadBalancerIPs)
						}
						c.Ports = slices.Clone(c.Ports)
						for i := range c.Ports {
							if i < len(src.Ports) {
								c.Ports[i].Port, c.Ports[i].Protocol = src.Ports[i].Port, src.Ports[i].Protocol
							}
						}
						next.Services[to] = c
					}
					w := &kernelWriter{t: t, tx: fake.NewTransaction(), fake: fake, pending: map[string]*string{}}
					plan := b.Incremental(w, m, next, st)
					if err := fake.Run(context.Background(), w.tx); err != nil {
						t.Fatalf("seed %d step %d: incremental: %v\n%s", seed, step, err, w.tx)
					}
					if t.Failed() {
						t.Fatalf("seed %d step %d: transaction:\n%s", seed, step, w.tx)
					}
					if len(plan.StaleChains) > 0 {
						tx := fake.NewTransaction()
						nftrules.DeleteChains(tx, plan.StaleChains)
						if err := fake.Run(context.Background(), tx); err != nil {
							t.Fatal(err)
						}
					}
					want, full := fullFakeWith(t, b, next, st.Clone())
					if diff := cmp.Diff(normalized(want), normalized(fake)); diff != "" {
						t.Fatalf("seed %d step %d: incremental differs from full (-full +incremental):\n%s", seed, step, diff)
					}
					if len(full.Conflicts) > 0 {
						conflicts++
					}
					m = next
				}
			}
			if conflicts == 0 {
				t.Fatal("no step had two Services claiming one key: the test tests nothing")
			}
			t.Logf("%d steps with conflicting claims", conflicts)
		})
	}
}

// TestIncrementalDNATMaps: the first window of a new DNAT map adds the map, the last Service
// leaving it deletes it, and the table stays what a full sync with the same State writes.
func TestIncrementalDNATMaps(t *testing.T) {
	b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
	small, big := nftrulestest.Scale(nftrules.WindowsPerMap-1), nftrulestest.Scale(nftrules.WindowsPerMap)
	st := &nftrules.State{}
	fake, _ := fullFakeWith(t, b, small, st)
	for _, step := range []struct {
		old, next *nftrules.Model
		want      string
	}{
		{small, big, "add map ip ironlb dnat-endpoints-tcp-1 "},
		{big, small, "delete map ip ironlb dnat-endpoints-tcp-1"},
	} {
		tx := fake.NewTransaction()
		plan := b.Incremental(tx, step.old, step.next, st)
		if !strings.Contains(tx.String(), step.want) {
			t.Errorf("transaction lacks %q:\n%s", step.want, tx)
		}
		if err := fake.Run(context.Background(), tx); err != nil {
			t.Fatalf("%v\n%s", err, tx)
		}
		tx = fake.NewTransaction()
		nftrules.DeleteChains(tx, plan.StaleChains)
		if err := fake.Run(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		want, _ := fullFakeWith(t, b, step.next, st.Clone())
		if diff := cmp.Diff(normalized(want), normalized(fake)); diff != "" {
			t.Errorf("incremental differs from full (-full +incremental):\n%s", diff)
		}
	}
	if n := st.Windows(); n != nftrules.WindowsPerMap-1 {
		t.Errorf("%d windows in use, want %d", n, nftrules.WindowsPerMap-1)
	}
}
