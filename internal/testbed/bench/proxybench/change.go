package proxybench

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// changes moves one endpoint of a different Service each time and times, on both nodes at once,
// the kernel's announcement of the new endpoint's chain; both proxies see the same change.
func (b *bench) changes(ctx context.Context, n int, res *Result) error {
	var ts []changeTarget
	for _, p := range []*proxy{&b.kp, &b.il} {
		ts = append(ts, changeTarget{name: p.name, where: p.node, netns: lab.NetNSPath(p.node), table: p.table,
			metrics: func(ctx context.Context) (Own, error) { return b.metrics(ctx, p) }})
	}
	return measureChanges(ctx, b.cs, ts, n, b.o.Changes, b.o.Log, res)
}

// changeTarget is one proxy whose endpoint changes are timed.
type changeTarget struct {
	name    string // KubeProxy or IronLB
	where   string // its node, for messages
	netns   string // path of its network namespace
	table   string
	metrics func(context.Context) (Own, error)
}

// measureChanges moves one endpoint of a different Service among n each time, count times, and
// times, on every target at once, the kernel's announcement of the new endpoint's chain; all
// targets see the same change.
func measureChanges(ctx context.Context, cs kubernetes.Interface, ts []changeTarget, n, count int, log func(string, ...any), res *Result) error {
	var addrs []netip.Addr
	for k := range count {
		addrs = append(addrs, ChangeAddr(k))
	}
	watchers := map[string]*ChainWatcher{}
	for _, p := range ts {
		w, err := WatchChains(p.netns, addrs...)
		if err != nil {
			return err
		}
		defer w.Close()
		watchers[p.name] = w
	}
	eps := cs.DiscoveryV1().EndpointSlices(Namespace)
	for k := range count {
		i := ChangeService(k, n)
		addr := ChangeAddr(k)
		before := map[string]Own{}
		for _, p := range ts {
			own, err := p.metrics(ctx)
			if err != nil {
				own = Own{PartialCount: -1}
			}
			before[p.name] = own
		}
		s, err := eps.Get(ctx, svcName(i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Endpoints[0] = endpoint(addr)
		t0 := time.Now()
		if _, err := eps.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
		markers := []string{EndpointMarker(netip.AddrPortFrom(addr, servicePort)), AddrEvent(addr)}
		line := fmt.Sprintf("change %2d/%d (%s: endpoint -> %s):", k+1, count, svcName(i), addr)
		for _, p := range ts {
			ct := ChangeTrial{Ruleset: -1, Own: -1}
			at, err := watchers[p.name].WaitForAny(ctx, p.table, markers, t0, 30*time.Second)
			if err != nil {
				return fmt.Errorf("%s on %s: %w (%s)", p.name, p.where, err, grepTable(p.netns, p.table, addr.String()))
			}
			ct.Ruleset = at.Sub(t0)
			if before[p.name].PartialCount >= 0 {
				if after, err := waitOwn(ctx, p.metrics, func(o Own) bool { return o.PartialCount > before[p.name].PartialCount }, 5*time.Second); err == nil {
					if s := PartialSince(before[p.name], after); s >= 0 {
						ct.Own = seconds(s)
					}
				}
			}
			res.Changes[p.name] = append(res.Changes[p.name], ct)
			line += fmt.Sprintf("  %s %s (own %s)", p.name, fmtDur(ct.Ruleset), fmtDur(ct.Own))
		}
		log("%s", line)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(changeSpacing):
		}
	}
	return nil
}

// grepTable says which lines of `nft list table ip TABLE` in the network namespace at netnsPath
// mention s: what the ruleset holds when a change was not seen.
func grepTable(netnsPath, table, s string) string {
	out, err := exec.Command("nsenter", "--net="+netnsPath, "nft", "list", "table", "ip", table).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("nft list table ip %s: %v: %s", table, err, bytes.TrimSpace(out))
	}
	var hits []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, s) {
			hits = append(hits, strings.TrimSpace(l))
		}
	}
	return fmt.Sprintf("the table's lines with %s: %q", s, hits)
}
