package nftapply

import (
	"context"
	"fmt"
	"testing"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"sigs.k8s.io/knftables"
)

// BenchmarkKernelFull times a full sync of n Services x 2 endpoints into an empty table of a
// real kernel (in a throwaway namespace): building the transaction, listing the table, nft
// parsing and the kernel committing. Run with -benchtime 1x to 3x.
func BenchmarkKernelFull(b *testing.B) {
	testNetns(b)
	ctx := context.Background()
	for _, n := range []int{1000, 10000, 30000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			m := nftrulestest.Scale(n)
			s, err := NewKernel(nftrules.Config{Family: knftables.IPv4Family})
			if err != nil {
				b.Fatal(err)
			}
			var plan nftrules.Plan
			for b.Loop() {
				b.StopTimer()
				if err := Cleanup(ctx, s.nft); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if plan, err = s.Sync(ctx, m, true); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(plan.Ops), "ops")
			b.StopTimer()
			if err := Cleanup(ctx, s.nft); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkKernelIncremental times applying one endpoint change among n Services: Incremental
// plus one `nft -f -` with the few operations it wrote.
func BenchmarkKernelIncremental(b *testing.B) {
	testNetns(b)
	ctx := context.Background()
	for _, n := range []int{10000, 30000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			m := nftrulestest.Scale(n)
			s, err := NewKernel(nftrules.Config{Family: knftables.IPv4Family})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Sync(ctx, m, true); err != nil {
				b.Fatal(err)
			}
			i := 0
			var plan nftrules.Plan
			for b.Loop() {
				next := nftrulestest.WithEndpointChange(m, n/2, byte(i))
				i++
				if plan, err = s.Sync(ctx, next, false); err != nil {
					b.Fatal(err)
				}
				if plan.Full {
					b.Fatal("full sync")
				}
			}
			b.ReportMetric(float64(plan.Ops), "ops")
			b.StopTimer()
			if err := Cleanup(ctx, s.nft); err != nil {
				b.Fatal(err)
			}
		})
	}
}
