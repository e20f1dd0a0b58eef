package nftrules_test

import (
	"fmt"
	"testing"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"sigs.k8s.io/knftables"
)

// BenchmarkFull builds (does not run) a full sync's transaction for n Services x 2 endpoints.
func BenchmarkFull(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			bld := builder(b, nftrules.Config{Family: knftables.IPv4Family})
			m := nftrulestest.Scale(n)
			fake := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
			b.ReportAllocs()
			var ops int
			for b.Loop() {
				tx := fake.NewTransaction()
				ops = bld.Full(tx, m, nftrules.Existing{}, nil).Ops
			}
			b.ReportMetric(float64(ops), "ops")
		})
	}
}

// BenchmarkIncremental builds the transaction for one endpoint change among n Services.
func BenchmarkIncremental(b *testing.B) {
	for _, n := range []int{10000, 30000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			bld := builder(b, nftrules.Config{Family: knftables.IPv4Family})
			m := nftrulestest.Scale(n)
			next := []*nftrules.Model{nftrulestest.WithEndpointChange(m, n/2, 0), nftrulestest.WithEndpointChange(m, n/2, 1)}
			fake := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
			st := bld.StateOf(next[0])
			b.ReportAllocs()
			var ops int
			i := 0
			for b.Loop() {
				tx := fake.NewTransaction()
				ops = bld.Incremental(tx, next[i%2], next[(i+1)%2], st).Ops
				i++
			}
			b.ReportMetric(float64(ops), "ops")
		})
	}
}
