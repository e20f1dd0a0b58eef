package nftapply

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"sigs.k8s.io/knftables"
)

// BenchmarkKernelFull times a full sync of n Services x 2 endpoints into a real kernel (in a
// throwaway namespace): building the batch, listing the table, encoding, and the kernel
// committing. Run with -benchtime 3x to 5x; it reports the median as median-ns.
//
// into=empty writes a new table (deleted, untimed, before each sync); into=full replaces the
// Services of a table that holds them (the same ones: what a resync after a failure or a restart
// does). path=netlink is the Syncer without nft (everything in one netlink batch, as NewKernel
// does once netlink is verified, or at once without nft), path=nft the single nft transaction
// full syncs used to be, path=bulk the older split of a new table (fixed objects through nft, the
// Services in one netlink batch; only into=empty).
func BenchmarkKernelFull(b *testing.B) {
	ns := testNetns(b)
	ctx := context.Background()
	for _, n := range []int{1000, 10000, 30000} {
		for _, into := range []string{"empty", "full"} {
			for _, path := range []string{"netlink", "nft", "bulk"} {
				if path == "bulk" && into == "full" {
					continue
				}
				b.Run(fmt.Sprintf("services=%d/into=%s/path=%s", n, into, path), func(b *testing.B) {
					benchFull(b, ctx, ns, n, into == "empty", path)
				})
			}
		}
	}
}

func benchFull(b *testing.B, ctx context.Context, ns string, n int, empty bool, path string) {
	m := nftrulestest.Scale(n)
	bl, _ := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
	nft, err := knftables.New(knftables.IPv4Family, nftrules.TableName) // PATH's nft runs in ns
	if err != nil {
		b.Fatal(err)
	}
	nl, err := NewNetlink(knftables.IPv4Family, netnsFD(b, ns))
	if err != nil {
		b.Fatal(err)
	}
	defer nl.Close()
	var s *Syncer
	switch path {
	case "netlink":
		s = New(nil, bl, nil, WithNetlink(nl), WithNetlinkFull(true))
	case "nft":
		s = New(nft, bl, nil)
	case "bulk":
		s = New(nft, bl, nil, WithNetlink(nl), WithBulkNewTable(true))
	}
	clean := func() {
		if err := Cleanup(ctx, nft); err != nil {
			b.Fatal(err)
		}
	}
	clean()
	if !empty {
		if _, err := s.Sync(ctx, m, true); err != nil {
			b.Fatal(err)
		}
	}
	var times []time.Duration
	var plan nftrules.Plan
	for b.Loop() {
		if empty {
			b.StopTimer()
			clean()
			b.StartTimer()
		}
		start := time.Now()
		if plan, err = s.Sync(ctx, m, true); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	clean()
	st := s.Stats()
	switch {
	case path == "netlink" && (st.Netlink == 0 || st.Exec != 0):
		b.Fatalf("not over netlink: %+v", st)
	case path == "bulk" && (st.NetlinkState != NetlinkOn || st.Netlink == 0):
		b.Fatalf("the Services did not go over netlink: %+v", st)
	}
	b.ReportMetric(float64(median(times).Nanoseconds()), "median-ns")
	b.ReportMetric(float64(plan.Ops), "ops")
}

// BenchmarkKernelIncremental times applying one endpoint change among n Services x 2 endpoints
// in a real kernel (a throwaway namespace): Incremental plus either one netlink batch
// (path=netlink) or one `nft -f -` with the few operations it wrote (path=nft). All paths start
// from the same table (one full sync per size). A stale chain a change leaves (none for random
// Services, which change elements only) is deleted between iterations, untimed. path=kernel-floor is the part no writer avoids: one netlink batch
// adding a chain with a single `drop` rule, whose commit makes the kernel validate the jump graph
// of the whole table. Besides ns/op (the mean) it reports the median as median-ns. Run with
// -benchtime 15x or so.
func BenchmarkKernelIncremental(b *testing.B) {
	ns := testNetns(b)
	ctx := context.Background()
	nl, err := NewNetlink(knftables.IPv4Family, netnsFD(b, ns))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000, 10000, 30000} {
		clock := time.Unix(0, 0)
		var s *Syncer
		var added []string
		setup := func() { // on the parent b: the paths share the table
			if s != nil {
				return
			}
			bl, _ := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
			nft, err := knftables.New(knftables.IPv4Family, nftrules.TableName)
			if err != nil {
				b.Fatal(err)
			}
			s = New(nft, bl, func() time.Time { return clock })
			plan, err := s.Sync(ctx, nftrulestest.Scale(n), true)
			if err != nil {
				b.Fatal(err)
			}
			added = plan.AddedChains
			b.Cleanup(func() {
				if err := Cleanup(ctx, nft); err != nil {
					b.Error(err)
				}
			})
		}
		for _, path := range []string{"netlink", "nft"} {
			b.Run(fmt.Sprintf("services=%d/path=%s", n, path), func(b *testing.B) {
				setup()
				WithNetlink(nil)(s)
				if path == "netlink" {
					WithNetlink(nl)(s)
					if err := nl.verify(added); err != nil {
						b.Fatal(err)
					}
					s.stats.NetlinkState = NetlinkOn
				}
				base := s.applied
				before := s.Stats()
				var times []time.Duration
				var plan nftrules.Plan
				i := 0
				for b.Loop() {
					next := nftrulestest.WithEndpointChange(base, n/2, byte(i))
					i++
					start := time.Now()
					var err error
					if plan, err = s.Sync(ctx, next, false); err != nil {
						b.Fatal(err)
					}
					times = append(times, time.Since(start))
					if plan.Full {
						b.Fatal("full sync")
					}
					b.StopTimer()
					clock = clock.Add(2 * StaleChainDelay)
					s.deleteStale(ctx)
					b.StartTimer()
				}
				if after := s.Stats(); path == "netlink" && (after.Netlink-before.Netlink < len(times) || len(after.Fallbacks) > 0) {
					b.Fatalf("not every change went over netlink: %+v", after)
				}
				b.ReportMetric(float64(median(times).Nanoseconds()), "median-ns")
				b.ReportMetric(float64(plan.Ops), "ops")
			})
		}
		b.Run(fmt.Sprintf("services=%d/path=kernel-floor", n), func(b *testing.B) {
			setup()
			chain := "bench/floor"
			var times []time.Duration
			for b.Loop() {
				cmds, err := nl.translate([]op{{verbAdd, &knftables.Chain{Name: chain}}, {verbAdd, &nftrules.Rule{Chain: chain, Stmts: []nftrules.Stmt{{Kind: nftrules.StmtVerdict, Verdict: nftrules.Drop}}}}})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := nl.apply(cmds); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
				b.StopTimer()
				if cmds, err = nl.translate([]op{{verbDelete, &knftables.Chain{Name: chain}}}); err == nil {
					err = nl.apply(cmds)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(median(times).Nanoseconds()), "median-ns")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
