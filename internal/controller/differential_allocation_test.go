package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestDifferentialAllocation runs random sequences of Service creates, updates and deletes against
// the same pools through MetalLB's controller and ironlb's (one apiserver each, as in
// TestDifferentialAdmission), each step applied to both and waited on until both sides are quiet
// (no Service of the sequence changed for a while), and then compares, per Service: whether it holds
// an address, from which pool, and which Services share it. The addresses themselves are compared
// too but only counted (MetalLB v0.16.1 and ironlb both take the lowest free address of a pool, so
// they should agree; a difference is reported, not failed).
//
// Sequences run concurrently (IRONLB_DIFF_WORKERS, default 12), each in its own namespace with its
// own pools, pinned to that namespace by serviceAllocation.namespaces, with distinct priorities (so
// that the candidate order is defined: where pools of equal priority tie, MetalLB's order is Go map
// order, random), and its own addresses, so that no Service can take another sequence's address.
func TestDifferentialAllocation(t *testing.T) {
	cfg := diffConfigFromEnv(t, 400, 40)
	if cfg.sequence == 0 {
		t.Skip("IRONLB_DIFF_SEQUENCES=0")
	}
	workers := 12
	if v := envInt(t, "IRONLB_DIFF_WORKERS"); v > 0 {
		workers = v
	}
	t.Logf("seed %d (IRONLB_DIFF_SEED=%d replays it), %d allocation sequences, %d at a time", cfg.seed, cfg.seed, cfg.sequence, workers)
	t0 := time.Now()
	mlb := startMetalLBSide(t)
	ilb := startIronlbSide(t)
	t.Logf("%s: both apiservers and controllers up", time.Since(t0).Round(time.Millisecond))
	t1 := time.Now()
	var (
		next                                    atomic.Int64
		steps, services, addrDiffs, disagreeing atomic.Int64
		contested                               atomic.Int64
		mu                                      sync.Mutex // guards reported
		reported                                int
		wg                                      sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= cfg.sequence {
					return
				}
				if only := os.Getenv("IRONLB_DIFF_ONLY"); only != "" && only != fmt.Sprint(n) {
					continue // replay one sequence of a seed
				}
				sq := genSequence(rand.New(rand.NewPCG(cfg.seed, 1_000_000+uint64(n))), n)
				res := runSequence(t, mlb, ilb, sq)
				steps.Add(int64(len(sq.ops)))
				services.Add(int64(len(res.metallb)))
				addrDiffs.Add(int64(res.addrDiffs))
				if res.contested {
					contested.Add(1)
				}
				if res.diff != "" {
					disagreeing.Add(1)
					mu.Lock()
					if reported < 3 {
						reported++
						t.Errorf("allocation disagreement (seed %d, sequence %d):\n%s\n%s", cfg.seed, n, res.diff, sq.describe())
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t1)
	t.Logf("allocation: %d sequences compared (%d steps, %d Services), %d agreed, %d differ only in which waiting Service got a released address (contestedRelease), %d disagreeing; %d Services with another address from the same pool; %s; seed %d",
		cfg.sequence, steps.Load(), services.Load(), int64(cfg.sequence)-contested.Load()-disagreeing.Load(), contested.Load(), disagreeing.Load(),
		addrDiffs.Load(), el.Round(time.Millisecond), cfg.seed)
}

func envInt(t *testing.T, name string) int {
	var n int
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			t.Fatalf("%s=%q: want a number", name, v)
		}
	}
	return n
}

// sequence is one generated allocation sequence.
type sequence struct {
	n     int
	ns    string
	pools []diffObject
	ops   []seqOp
}

type seqOp struct {
	op   diffOp
	name string
	// ann and spec: what the Service is created with, or (update) the merge patch's annotations
	// (nil value: removed) and spec fields.
	ann  map[string]any
	spec map[string]any
}

func (sq sequence) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# namespace %s; pools:\n", sq.ns)
	for _, p := range sq.pools {
		b.WriteString("---\n" + p.yaml())
	}
	b.WriteString("# steps, each waited on until both controllers are quiet:\n")
	for i, o := range sq.ops {
		a, _ := json.Marshal(o.ann)
		s, _ := json.Marshal(o.spec)
		fmt.Fprintf(&b, "%2d. %s %s annotations=%s spec=%s\n", i, o.op, o.name, a, s)
	}
	return b.String()
}

func genSequence(r *rand.Rand, n int) sequence {
	sq := sequence{n: n, ns: fmt.Sprintf("seq-%d", n)}
	v4 := fmt.Sprintf("10.%d.%d.", 200+(n/250)%50, n%250)
	np := 1 + r.IntN(3)
	type poolInfo struct {
		name  string
		addrs []string
		auto  bool
	}
	var pools []poolInfo
	for j := range np {
		size := 1 + r.IntN(4)
		lo := j * 16
		pi := poolInfo{name: fmt.Sprintf("s%d-p%d", n, j), auto: chance(r, 0.85)}
		for k := range size {
			pi.addrs = append(pi.addrs, fmt.Sprintf("%s%d", v4, lo+k))
		}
		spec := map[string]any{
			"addresses":         []any{fmt.Sprintf("%s%d-%s%d", v4, lo, v4, lo+size-1)},
			"serviceAllocation": map[string]any{"priority": 1 + j, "namespaces": []any{sq.ns}},
		}
		if !pi.auto {
			spec["autoAssign"] = false
		}
		pools = append(pools, pi)
		sq.pools = append(sq.pools, diffObject{Kind: "IPAddressPool", Name: pi.name, Spec: spec})
	}
	var live []string
	created := 0
	annotations := func() map[string]any {
		a := map[string]any{}
		p := pools[r.IntN(len(pools))]
		switch x := r.Float64(); {
		case x < 0.2:
			a["metallb.io/address-pool"] = p.name
		case x < 0.4:
			a["metallb.io/loadBalancerIPs"] = p.addrs[r.IntN(len(p.addrs))]
		}
		if chance(r, 0.4) {
			a["metallb.io/allow-shared-ip"] = pickOne(r, "k1", "k2")
		}
		return a
	}
	ports := func() []any {
		return []any{map[string]any{"name": "p", "port": pickOne(r, 80, 443, 53), "protocol": pickOne(r, "TCP", "TCP", "UDP")}}
	}
	nops := 3 + r.IntN(8)
	for range nops {
		switch x := r.Float64(); {
		case x < 0.6 || len(live) == 0:
			name := fmt.Sprintf("svc-%d", created)
			created++
			spec := map[string]any{"type": "LoadBalancer", "selector": map[string]any{"app": pickOne(r, "a", "b")}, "ports": ports()}
			if chance(r, 0.2) {
				spec["externalTrafficPolicy"] = "Local"
			}
			sq.ops = append(sq.ops, seqOp{op: opCreate, name: name, ann: annotations(), spec: spec})
			live = append(live, name)
		case x < 0.8:
			i := r.IntN(len(live))
			sq.ops = append(sq.ops, seqOp{op: opDelete, name: live[i]})
			live = slices.Delete(live, i, i+1)
		default:
			name := live[r.IntN(len(live))]
			o := seqOp{op: opUpdate, name: name, ann: map[string]any{}, spec: map[string]any{}}
			switch r.IntN(3) {
			case 0:
				o.spec["ports"] = ports()
			case 1:
				o.ann["metallb.io/allow-shared-ip"] = pickOne[any](r, "k1", "k2", nil)
			case 2:
				o.ann = annotations()
				for _, k := range []string{"metallb.io/address-pool", "metallb.io/loadBalancerIPs"} {
					if _, ok := o.ann[k]; !ok {
						o.ann[k] = nil
					}
				}
			}
			sq.ops = append(sq.ops, o)
		}
	}
	return sq
}

// seqResult is what a sequence ended with on each side, and how they differ.
type seqResult struct {
	metallb, ironlb map[string]assigned
	diff            string // "" when they agree (or differ only as contestedRelease allows)
	addrDiffs       int
	contested       bool // they differ only in which waiting Service got a released address
}

// contestedRelease is the allocation test's one intended difference (docs/controller.md): when a
// Service releases an address several Services are waiting for, MetalLB reprocesses every Service in
// its cache's order (a Go map's: random) and ironlb requeues the waiting ones, whose workers race
// for its lock; which one gets the address is defined by neither, and the winner decides who may
// share it after (sequence 729 of seed 20261126: MetalLB gave it to a Service without a sharing key,
// ironlb to two that share one). It matches when both sides hold exactly the same addresses from the
// same pools, every Service that differs is served on one side and waiting on the other, and where
// an address's holders differ they have no Service in common: another group won it (one side did not
// leave out a Service that could have joined the same group).
func contestedRelease(m, i map[string]assigned) bool {
	holders := func(all map[string]assigned) map[string][]string {
		out := map[string][]string{}
		for n, a := range all {
			if len(a.IPs) > 0 {
				k := a.Pool + "=" + strings.Join(a.IPs, ",")
				out[k] = append(out[k], n)
			}
		}
		return out
	}
	hm, hi := holders(m), holders(i)
	if !slices.Equal(slices.Sorted(maps.Keys(hm)), slices.Sorted(maps.Keys(hi))) {
		return false
	}
	for k, ms := range hm {
		is := hi[k]
		slices.Sort(ms)
		slices.Sort(is)
		if slices.Equal(ms, is) {
			continue
		}
		for _, n := range ms {
			if slices.Contains(is, n) {
				return false
			}
		}
	}
	for n, ma := range m {
		ia := i[n]
		if slices.Equal(ma.IPs, ia.IPs) && ma.Pool == ia.Pool {
			continue
		}
		if (len(ma.IPs) > 0) == (len(ia.IPs) > 0) {
			return false
		}
	}
	return true
}

func runSequence(t *testing.T, mlb, ilb *diffSide, sq sequence) seqResult {
	ctx := context.Background()
	both(mlb, ilb, func(s *diffSide) bool {
		if _, err := s.h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sq.ns}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
		for _, p := range sq.pools {
			if o := s.admitRetrying(t, opCreate, p, false); !o.accepted {
				t.Errorf("%s: pool %s refused: %s", s.name, p.Name, o.msg)
			}
		}
		return true
	})
	defer both(mlb, ilb, func(s *diffSide) bool {
		l, _ := s.h.cs.CoreV1().Services(sq.ns).List(ctx, metav1.ListOptions{})
		for _, svc := range l.Items {
			_ = s.h.cs.CoreV1().Services(sq.ns).Delete(ctx, svc.Name, metav1.DeleteOptions{})
		}
		for _, p := range sq.pools {
			s.deleteQuietly(t, p)
		}
		return true
	})
	// Both controllers learn the pools from informers: let them before the first Service.
	time.Sleep(time.Second)
	for _, op := range sq.ops {
		var before [2]svcSeen // MetalLB's, ironlb's
		if op.op == opUpdate {
			before[0], before[1] = both(mlb, ilb, func(s *diffSide) svcSeen { return s.look(sq.ns, op.name) })
		}
		mok, iok := both(mlb, ilb, func(s *diffSide) bool {
			svcs := s.h.cs.CoreV1().Services(sq.ns)
			var err error
			switch op.op {
			case opCreate:
				svc := &corev1.Service{}
				b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": op.name, "annotations": op.ann}, "spec": op.spec})
				if err = json.Unmarshal(b, svc); err == nil {
					_, err = svcs.Create(ctx, svc, metav1.CreateOptions{})
				}
			case opDelete:
				err = svcs.Delete(ctx, op.name, metav1.DeleteOptions{})
			case opUpdate:
				b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": op.ann}, "spec": op.spec})
				_, err = svcs.Patch(ctx, op.name, types.MergePatchType, b, metav1.PatchOptions{})
			}
			if err != nil && !strings.Contains(err.Error(), "denied the request") && !strings.Contains(err.Error(), "not found") {
				t.Errorf("%s: %s %s/%s: %v", s.name, op.op, sq.ns, op.name, err)
			}
			return err == nil
		})
		// ironlb's Service webhook refuses what can never be served (the admission test's
		// service-* differences); MetalLB admits it and fails it later. The Service is then removed
		// from MetalLB's side too, so that both go on from the same Services.
		// A refused update leaves the old Service on one side and the new on the other: it goes
		// on both.
		if op.op != opDelete && mok != iok {
			both(mlb, ilb, func(s *diffSide) bool {
				_ = s.h.cs.CoreV1().Services(sq.ns).Delete(ctx, op.name, metav1.DeleteOptions{})
				return true
			})
		}
		// The Service the step created or changed must have been decided by each controller before
		// the next step: "quiet" alone let a side that took longer than its window (ironlb while it
		// wrote the pools' status under its lock, or under -race) decide it after the next step (a
		// release, another Service), in another order than the other side.
		if op.op != opDelete && mok && iok {
			both(mlb, ilb, func(s *diffSide) bool {
				b := before[0]
				if s == ilb {
					b = before[1]
				}
				ok := s.waitDecided(sq.ns, op.name, op.op, b)
				if !ok && op.op == opCreate {
					t.Logf("%s: no decision about %s/%s seen (no address, no event) in 5 s", s.name, sq.ns, op.name)
				}
				return ok
			})
		}
		if op.op == opDelete && mok && iok {
			settleRelease(mlb, ilb, sq.ns)
		}
		both(mlb, ilb, func(s *diffSide) map[string]assigned { return s.quiet(t, sq.ns) })
	}
	m, i := both(mlb, ilb, func(s *diffSide) map[string]assigned { return s.quiet(t, sq.ns) })
	res := seqResult{metallb: m, ironlb: i}
	res.diff, res.addrDiffs = compareAllocations(m, i)
	// "Quiet" is a heuristic: on a loaded machine a controller can take longer than the quiet
	// period to act. A difference is read again after a while before it counts.
	for try := 0; res.diff != "" && try < 3; try++ {
		time.Sleep(2 * time.Second)
		m, i = both(mlb, ilb, func(s *diffSide) map[string]assigned { return s.quiet(t, sq.ns) })
		res = seqResult{metallb: m, ironlb: i}
		res.diff, res.addrDiffs = compareAllocations(m, i)
	}
	if res.diff != "" && contestedRelease(m, i) {
		res.diff, res.contested = "", true
	}
	return res
}

// settleRelease follows a delete: a Service waiting for an address may get the released one, and the
// next step must not come first. MetalLB re-decides every Service of the cluster after a delete
// (reprocessAll), asynchronously and in time proportional to all of them; with 12 sequences at a time
// and a thousand Services that took longer than the quiet window, and in the 1,000-sequence run a
// Service created by the next step took the address a waiting one got on ironlb's side (sequence
// 922 of seed 20261126; it agrees when replayed alone). So while either side has a Service without
// an address, it waits up to 5 s for the two sides to hold the same; a disagreement that remains is
// compared at the end as any other.
func settleRelease(mlb, ilb *diffSide, namespace string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, _ := mlb.held(namespace) // a failed List: nothing held, until the deadline
		i, _ := ilb.held(namespace)
		waiting := false
		for _, a := range m {
			waiting = waiting || len(a.IPs) == 0
		}
		for _, a := range i {
			waiting = waiting || len(a.IPs) == 0
		}
		if !waiting || time.Now().After(deadline) {
			return
		}
		if d, _ := compareAllocations(m, i); d == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// held returns what every Service of namespace holds now (an empty map when they cannot be listed).
func (s *diffSide) held(namespace string) (map[string]assigned, error) {
	out := map[string]assigned{}
	l, err := s.h.cs.CoreV1().Services(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return out, err
	}
	for i := range l.Items {
		out[l.Items[i].Name] = assignedIn(&l.Items[i])
	}
	return out, nil
}

// svcSeen is what the test can see of a controller's decisions about one Service: what it holds,
// and how many events the controller recorded about it (a count that grows: a new decision).
type svcSeen struct {
	exists bool
	held   assigned
	events int32
}

func (s *diffSide) look(namespace, name string) svcSeen {
	ctx := context.Background()
	svc, err := s.h.cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return svcSeen{}
	}
	out := svcSeen{exists: true, held: assignedIn(svc)}
	evs, err := s.h.cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(svc.UID)})
	if err == nil {
		for _, e := range evs.Items {
			out.events += max(e.Count, 1)
		}
	}
	return out
}

// waitDecided waits until the controller has decided the Service the step created or updated (before:
// what it showed before an update). A created Service is decided once it holds an address or an event
// about it says why not (both controllers record AllocationFailed, MetalLB also LoadBalancerFailed);
// at most 5 s: events are only a hint, since ironlb's can lag by more than 15 s while its recorder
// works through a backlog (every pool change decides every waiting Service again, each failure an
// event; seen in the 400-sequence run). An updated one is decided once what it holds changes or a new event about it appears;
// an update that keeps the address shows neither, so that wait ends after 2 s. It reports whether the
// decision was seen.
func (s *diffSide) waitDecided(namespace, name string, op diffOp, before svcSeen) bool {
	limit := 5 * time.Second
	if op == opUpdate {
		limit = 2 * time.Second
	}
	deadline := time.Now().Add(limit)
	for {
		now := s.look(namespace, name)
		switch {
		case !now.exists:
			return true
		case op == opCreate && (len(now.held.IPs) > 0 || now.events > 0):
			return true
		case op == opUpdate && (now.events > before.events || !slices.Equal(now.held.IPs, before.held.IPs) || now.held.Pool != before.held.Pool):
			return true
		case time.Now().After(deadline):
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// quiet waits until no Service of namespace has changed its addresses or pool for 500ms (at most
// 15s) and returns them.
func (s *diffSide) quiet(t *testing.T, namespace string) map[string]assigned {
	var last map[string]assigned
	since := time.Now()
	deadline := time.Now().Add(15 * time.Second)
	for {
		now, err := s.held(namespace)
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
			return last
		}
		if !maps.EqualFunc(now, last, func(a, b assigned) bool { return slices.Equal(a.IPs, b.IPs) && a.Pool == b.Pool }) {
			last, since = now, time.Now()
		}
		if time.Since(since) >= 500*time.Millisecond || time.Now().After(deadline) {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// compareAllocations compares which Services hold addresses, from which pool, and which share; it
// returns a description of the differences ("" if none) and the number of Services that hold a
// different address of the same pool.
func compareAllocations(m, i map[string]assigned) (string, int) {
	var b strings.Builder
	addrDiffs := 0
	names := slices.Sorted(maps.Keys(m))
	for _, n := range slices.Sorted(maps.Keys(i)) {
		if _, ok := m[n]; !ok {
			names = append(names, n)
		}
	}
	sharers := func(all map[string]assigned, n string) []string {
		var out []string
		for o, a := range all {
			if o != n && len(a.IPs) > 0 && slices.Equal(a.IPs, all[n].IPs) {
				out = append(out, o)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, n := range names {
		ma, ia := m[n], i[n]
		switch {
		case (len(ma.IPs) > 0) != (len(ia.IPs) > 0) || ma.Pool != ia.Pool:
			fmt.Fprintf(&b, "  %s: MetalLB %v from %q; ironlb %v from %q\n", n, ma.IPs, ma.Pool, ia.IPs, ia.Pool)
		case !slices.Equal(sharers(m, n), sharers(i, n)):
			fmt.Fprintf(&b, "  %s: shares with %v under MetalLB, with %v under ironlb (MetalLB %v, ironlb %v)\n", n, sharers(m, n), sharers(i, n), ma.IPs, ia.IPs)
		case !slices.Equal(ma.IPs, ia.IPs):
			addrDiffs++
		}
	}
	if b.Len() == 0 {
		return "", addrDiffs
	}
	fmt.Fprintf(&b, "  all, MetalLB: %v\n  all, ironlb:  %v\n", m, i)
	return "final state differs:\n" + b.String(), addrDiffs
}

// TestPendingServiceGetsReleasedAddress is the regression test of the first allocation disagreement
// TestDifferentialAllocation found (seed 3, sequence 23): a Service waiting on an exhausted pool
// stayed pending when another Service gave its address up (deleted, or failing on a new request),
// where MetalLB reprocesses every Service and serves it. One row per way of giving an address up.
func TestPendingServiceGetsReleasedAddress(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.apply(pool("one", "10.70.0.1/32"))
	h.apply(pool("other", "10.70.1.1/32"))
	for _, row := range []struct {
		name    string
		giveUp  func(holder string)
		pending string
	}{
		{"holder deleted", func(holder string) {
			if err := h.cs.CoreV1().Services("default").Delete(context.Background(), holder, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, "waiting-1"},
		{"holder asks for an address in use", func(holder string) {
			patch := `{"metadata":{"annotations":{"metallb.io/address-pool":null,"metallb.io/loadBalancerIPs":"10.70.1.1"}}}`
			if _, err := h.cs.CoreV1().Services("default").Patch(context.Background(), holder, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}, "waiting-2"},
	} {
		t.Run(row.name, func(t *testing.T) {
			holder := "holder-" + row.pending
			onePool := func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/address-pool": "one"} }
			h.createService(holder, onePool)
			h.waitIP(holder, "10.70.0.1")
			h.createService(row.pending, onePool)
			h.waitEvent(row.pending, "AllocationFailed", "PoolExhausted")
			row.giveUp(holder)
			h.waitIP(row.pending, "10.70.0.1")
			_ = h.cs.CoreV1().Services("default").Delete(context.Background(), row.pending, metav1.DeleteOptions{})
			_ = h.cs.CoreV1().Services("default").Delete(context.Background(), holder, metav1.DeleteOptions{})
		})
	}
}

// TestAllocationWhilePoolStatusIsWritten is the regression test of the allocation disagreements
// TestDifferentialAllocation found at seed 20261126 (sequences 23, 178, 181; MetalLB's order, ironlb
// another): the pools' status was written with the allocator's lock held, so while a flush wrote
// every pool (all of them after any pool change: seconds on a loaded apiserver) no Service was
// decided, and a Service created then was decided after the next step (a release, another Service).
// Here a pool's status write never returns: a new Service must get its address all the same.
func TestAllocationWhilePoolStatusIsWritten(t *testing.T) {
	h := newHarness(t)
	hold, reached := make(chan struct{}), make(chan struct{}, 1)
	h.startWith(Config{Namespace: ns, FlushInterval: 100 * time.Millisecond, writeHook: func(stage writeStage, what string) {
		if stage == stageWrite && strings.HasPrefix(what, "pool ") {
			select {
			case reached <- struct{}{}:
			default:
			}
			<-hold
		}
	}})
	t.Cleanup(func() { close(hold) }) // before the controller's stop: cleanups run last first
	h.apply(pool("slow", "10.71.0.1/32"))
	select {
	case <-reached:
	case <-time.After(15 * time.Second):
		t.Fatal("the controller never came to write the pool's status")
	}
	h.createService("svc")
	h.waitIP("svc", "10.71.0.1")
}

// TestContestedRelease: the one difference the allocation differential forgives, and what it does not.
func TestContestedRelease(t *testing.T) {
	a := func(pool string, ips ...string) assigned { return assigned{IPs: ips, Pool: pool} }
	none := assigned{}
	for _, tc := range []struct {
		name string
		m, i map[string]assigned
		want bool
	}{
		{"another waiting Service won", map[string]assigned{"s1": a("p", "10.0.0.1"), "s2": none},
			map[string]assigned{"s1": none, "s2": a("p", "10.0.0.1")}, true},
		{"another group won (seq 729)", map[string]assigned{"s1": none, "s2": a("p", "10.0.0.0"), "s3": none},
			map[string]assigned{"s1": a("p", "10.0.0.0"), "s2": none, "s3": a("p", "10.0.0.0")}, true},
		{"a Service that could have joined was left out", map[string]assigned{"s1": a("p", "10.0.0.0"), "s3": a("p", "10.0.0.0")},
			map[string]assigned{"s1": a("p", "10.0.0.0"), "s3": none}, false},
		{"another address", map[string]assigned{"s1": a("p", "10.0.0.1"), "s2": none},
			map[string]assigned{"s1": none, "s2": a("p", "10.0.0.2")}, false},
		{"a Service moved", map[string]assigned{"s1": a("p", "10.0.0.1"), "s2": a("p", "10.0.0.2")},
			map[string]assigned{"s1": a("p", "10.0.0.2"), "s2": a("p", "10.0.0.1")}, false},
		{"one side serves more addresses", map[string]assigned{"s1": a("p", "10.0.0.1"), "s2": a("p", "10.0.0.2")},
			map[string]assigned{"s1": a("p", "10.0.0.1"), "s2": none}, false},
	} {
		if got := contestedRelease(tc.m, tc.i); got != tc.want {
			t.Errorf("%s: contestedRelease = %v, want %v", tc.name, got, tc.want)
		}
	}
}
