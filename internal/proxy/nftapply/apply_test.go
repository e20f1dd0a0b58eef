package nftapply

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"sigs.k8s.io/knftables"
)

// TestGoldenRulesetsLoad loads every golden ruleset of nftrules into a real kernel with nft -f:
// what the Fake accepted, nft and the kernel accept too.
func TestGoldenRulesetsLoad(t *testing.T) {
	ns := testNetns(t)
	files, err := filepath.Glob("../nftrules/testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ruleset []string
		family := "ip"
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "add ") {
				ruleset = append(ruleset, l)
				if strings.HasPrefix(l, "add table ip6 ") {
					family = "ip6"
				}
			}
		}
		nsRun(t, ns, strings.Join(ruleset, "\n")+"\n", "nft", "-f", "-")
		listing := nsRun(t, ns, "", "nft", "list", "table", family, nftrules.TableName)
		if n := strings.Count(listing, "\tchain "); n < 16 {
			t.Errorf("%s: kernel lists %d chains", f, n)
		}
		nsRun(t, ns, "", "nft", "delete", "table", family, nftrules.TableName)
	}
}

// kernelState is what the comparison between the kernel and a Fake looks at: chains with their
// rule counts, and map and set elements (keys), each sorted.
// ns, if not empty, is the namespace of a real nft: knftables lists the interval keys of the
// DNAT maps as empty, so their elements are read from nft -j there.
func kernelState(t *testing.T, nft knftables.Interface, ns string, fam knftables.Family) map[string][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][]string{}
	chains, err := nft.List(ctx, "chains")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := nft.ListRules(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range rules {
		count[r.Chain]++
	}
	for _, c := range chains {
		out["chains"] = append(out["chains"], c+" "+strings.Repeat("r", count[c]))
	}
	for _, kind := range []string{"set", "map"} {
		names, err := nft.List(ctx, kind+"s")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if nftrules.IsAffinitySet(n) {
				out["affinity"] = append(out["affinity"], n)
				continue
			}
			if ns != "" && nftrules.IsDNATMap(n) {
				if els := dnatElements(t, ns, fam, n); len(els) > 0 {
					out[n] = els
				}
				continue
			}
			els, err := nft.ListElements(ctx, kind, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range els {
				out[n] = append(out[n], strings.Join(e.Key, " . ")+" : "+strings.Join(e.Value, " . "))
			}
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// TestSyncKernelRandom runs random chains of model changes through a Syncer on the real kernel
// (full sync, then incremental ones, stale chains deleted a "second" later) and checks after
// every step that the kernel holds what a fresh full sync in a Fake holds. It catches what the
// Fake forgives: re-adding a map element with another value, deleting a set still referenced.
func TestSyncKernelRandom(t *testing.T) {
	ns := testNetns(t)
	ctx := context.Background()
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		cfg := nftrules.Config{Family: fam, MaglevTableSize: 13}
		b, err := nftrules.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nft, err := knftables.New(fam, nftrules.TableName)
		if err != nil {
			t.Fatal(err)
		}
		clock := time.Unix(0, 0)
		s := New(nft, b, func() time.Time { return clock })
		steps := 0
		seeds, length := uint64(3), 10
		if testing.Short() {
			seeds, length = 1, 5
		}
		for seed := range seeds {
			g := nftrulestest.NewGen(seed)
			m := g.Model(5)
			for step := range length {
				if step > 0 {
					m = g.Mutate(m, 10)
				}
				clock = clock.Add(2 * StaleChainDelay)
				plan, err := s.Sync(ctx, m, false)
				if err != nil {
					t.Fatalf("%s seed %d step %d: %v", fam, seed, step, err)
				}
				steps++
				fake := knftables.NewFake(fam, nftrules.TableName)
				tx := fake.NewTransaction()
				b.Full(tx, m, nftrules.Existing{}, s.state.Clone()) // the same windows
				// The kernel also holds this step's stale chains, flushed.
				for _, c := range plan.StaleChains {
					tx.Add(&knftables.Chain{Name: c})
				}
				if err := fake.Run(ctx, tx); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(kernelState(t, fake, "", fam), kernelState(t, nft, ns, fam)); diff != "" {
					t.Fatalf("%s seed %d step %d (full %v): kernel differs (-want +kernel):\n%s", fam, seed, step, plan.Full, diff)
				}
			}
		}
		t.Logf("%s: %d syncs matched", fam, steps)
		if err := Cleanup(ctx, nft); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSyncRecoversWithFull: after a failed transaction the next Sync is a full one, which lists
// and cleans up the table as found.
func TestSyncRecoversWithFull(t *testing.T) {
	testNetns(t)
	ctx := context.Background()
	b, _ := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
	nft, err := knftables.New(knftables.IPv4Family, nftrules.TableName)
	if err != nil {
		t.Fatal(err)
	}
	s := New(nft, b, nil)
	g := nftrulestest.NewGen(3)
	m := g.Model(6)
	if _, err := s.Sync(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	// Someone deletes the table behind our back: the incremental sync fails...
	if err := Cleanup(ctx, nft); err != nil {
		t.Fatal(err)
	}
	next := g.Mutate(m, 6)
	for i := 0; i < 5 && next != nil; i++ {
		next = g.Mutate(next, 6)
	}
	if _, err := s.Sync(ctx, next, false); err == nil {
		t.Log("incremental sync on a missing table did not fail (no element deletes)")
	}
	// ... and the next one rebuilds everything.
	plan, err := s.Sync(ctx, next, false)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Full {
		t.Error("sync after a failure was not full")
	}
	if err := Cleanup(ctx, nft); err != nil {
		t.Fatal(err)
	}
	if err := Cleanup(ctx, nft); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
}

// dnatElements lists a DNAT map's elements as "lo-hi : address . port" from nft -j in ns.
func dnatElements(t *testing.T, ns string, fam knftables.Family, name string) []string {
	t.Helper()
	out := nsRun(t, ns, "", "nft", "-j", "list", "map", string(fam), nftrules.TableName, name)
	var doc struct {
		Nftables []struct {
			Map *struct {
				Elem [][2]json.RawMessage `json:"elem"`
			} `json:"map"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("parsing nft -j output: %v", err)
	}
	var els []string
	for _, o := range doc.Nftables {
		if o.Map == nil {
			continue
		}
		for _, e := range o.Map.Elem {
			var key struct {
				Range [2]uint32 `json:"range"`
			}
			var val struct {
				Concat []any `json:"concat"`
			}
			if err := json.Unmarshal(e[0], &key); err != nil {
				t.Fatalf("DNAT map key %s: %v", e[0], err)
			}
			if err := json.Unmarshal(e[1], &val); err != nil || len(val.Concat) != 2 {
				t.Fatalf("DNAT map value %s: %v", e[1], err)
			}
			els = append(els, fmt.Sprintf("%d-%d : %v . %v", key.Range[0], key.Range[1], val.Concat[0], val.Concat[1]))
		}
	}
	return els
}
