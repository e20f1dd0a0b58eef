package controller

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Three replicas with leader election, killed (lease kept, as after SIGKILL) or stopped (lease released)
// and restarted at random while Services are created, changed and deleted. A checker lists Services
// continuously: an address is never held by two Services that may not share it.
func TestHAChurnNeverDoubleAssigns(t *testing.T) {
	if testing.Short() {
		t.Skip("churn test")
	}
	h := newHarness(t)
	h.apply(pool("small", "10.50.0.0/28")) // 16 addresses for up to 24 Services: contention on purpose
	var mu sync.Mutex
	replicas := make([]*replica, 3)
	start := func(i int, crashy bool) {
		replicas[i] = h.runReplica(Config{Identity: fmt.Sprintf("replica-%d", i),
			FlushInterval: 200 * time.Millisecond, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond,
			RetryPeriod: 300 * time.Millisecond, KeepLeaseOnCancel: crashy})
	}
	for i := range replicas {
		start(i, i == 0)
	}
	t.Cleanup(func() {
		for _, r := range replicas {
			r.stop()
		}
	})
	ctx, stop := context.WithTimeout(context.Background(), 25*time.Second)
	defer stop()
	violations := make(chan string, 100)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // chaos: kill or stop a replica and bring it back
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			i := rng.IntN(3)
			mu.Lock()
			replicas[i].stop()
			start(i, rng.IntN(2) == 0)
			mu.Unlock()
		}
	}()
	go func() { // churn
		defer wg.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		svcs := h.cs.CoreV1().Services("default")
		for n := 0; ctx.Err() == nil; n++ {
			name := fmt.Sprintf("churn-%d", rng.IntN(24))
			switch rng.IntN(4) {
			case 0, 1:
				s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
						Ports: []corev1.ServicePort{{Port: int32(80 + rng.IntN(3)), TargetPort: intstr.FromInt32(80)}}}}
				if rng.IntN(2) == 0 {
					s.Annotations["metallb.io/allow-shared-ip"] = fmt.Sprintf("k%d", rng.IntN(2))
				}
				if rng.IntN(4) == 0 {
					s.Annotations["metallb.io/loadBalancerIPs"] = fmt.Sprintf("10.50.0.%d", rng.IntN(16))
				}
				_, _ = svcs.Create(ctx, s, metav1.CreateOptions{})
			case 2:
				_ = svcs.Delete(ctx, name, metav1.DeleteOptions{})
			case 3:
				// An update that changes nothing about sharing (a port change could make two holders clash by
				// the user's hand, which no controller can prevent for the moment it takes to react).
				if s, err := svcs.Get(ctx, name, metav1.GetOptions{}); err == nil {
					if s.Labels == nil {
						s.Labels = map[string]string{}
					}
					s.Labels["gen"] = fmt.Sprint(n)
					_, _ = svcs.Update(ctx, s, metav1.UpdateOptions{})
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	checks := 0
	go func() { // invariant checker
		defer wg.Done()
		for ctx.Err() == nil {
			list, err := h.cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			checks++
			holders := map[string][]corev1.Service{}
			for _, s := range list.Items {
				for _, in := range s.Status.LoadBalancer.Ingress {
					holders[in.IP] = append(holders[in.IP], s)
				}
			}
			for ip, ss := range holders {
				for i := range ss {
					for j := i + 1; j < len(ss); j++ {
						if !mayShare(&ss[i], &ss[j]) {
							select {
							case violations <- fmt.Sprintf("%s held by %s and %s", ip, ss[i].Name, ss[j].Name):
							default:
							}
						}
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(violations)
	n := 0
	for v := range violations {
		n++
		if n <= 10 {
			t.Errorf("violation: %s", v)
		}
	}
	t.Logf("%d invariant checks, %d violations", checks, n)
	if checks < 20 {
		t.Errorf("only %d checks ran", checks)
	}
}

// mayShare is MetalLB's sharing rule seen from the outside: same non-empty key, no port clash.
func mayShare(a, b *corev1.Service) bool {
	ka, kb := a.Annotations["metallb.io/allow-shared-ip"], b.Annotations["metallb.io/allow-shared-ip"]
	if ka == "" || ka != kb {
		return false
	}
	for _, pa := range a.Spec.Ports {
		for _, pb := range b.Spec.Ports {
			if pa.Port == pb.Port && pa.Protocol == pb.Protocol {
				return false
			}
		}
	}
	return true
}

// A leader that loses its lease (here another holder takes it, as when the apiserver was away longer
// than the renew deadline) stops its reconciler and campaigns again in the same process: no exit, no
// restart, and it leads again once the lease is free.
func TestLeaderLosingLeaseCampaignsAgain(t *testing.T) {
	h := newHarness(t)
	h.apply(pool("p", "10.60.0.0/28"))
	reg := prometheus.NewRegistry()
	h.reg = reg
	a := h.runReplica(Config{Identity: "replica-a",
		FlushInterval: 200 * time.Millisecond, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond,
		RetryPeriod: 300 * time.Millisecond, registry: reg})
	t.Cleanup(a.stop)
	h.waitHolderT(t, "replica-a", "replica-a to lead")
	h.createService("before")
	h.waitIP("before", "10.60.0.0")
	// MetalLB's gauges are the leader's.
	h.waitMetric(t, 1, "metallb_k8s_client_config_loaded_bool")
	h.waitMetric(t, 16, "metallb_allocator_addresses_total", "pool", "p")

	// Steal the lease: replica-a's next renewal fails and its term ends.
	// The thief holds it for 6 s: long enough to see replica-a stand by.
	h.takeLeaseT(t, "thief", 6)
	// Standing by, replica-a exports none of MetalLB's configuration and pool gauges: its
	// MetalLBConfigNotLoaded and pool alerts cannot fire.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, loaded := h.metric("metallb_k8s_client_config_loaded_bool")
		_, pool := h.metric("metallb_allocator_addresses_total", "pool", "p")
		if !loaded && !pool {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for replica-a's MetalLB gauges to go while it stands by (lease holder %q)", h.leaseHolder())
		}
	}
	if h.leaseHolder() == "replica-a" {
		t.Fatal("replica-a's gauges went only after it led again")
	}
	h.waitHolderT(t, "replica-a", "replica-a to lead again after the thief's lease expired")
	h.waitMetric(t, 1, "metallb_k8s_client_config_loaded_bool")
	select {
	case <-a.done:
		t.Fatalf("Run returned after losing the lease: %v", a.err)
	default:
	}
	// The new term's reconciler works, and kept what the first one assigned.
	h.createService("after")
	h.waitIP("after", "10.60.0.1")
	h.waitIP("before", "10.60.0.0")
}

// replica is a controller replica run by runReplica: stop ends it and waits; done is closed when Run
// has returned, and err is then what it returned.
type replica struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (r *replica) stop() { r.cancel(); <-r.done }

// runReplica runs a controller replica with leader election in the harness's namespace until its
// stop; cfg gives the rest (identity, lease timings, hooks).
func (h *harness) runReplica(cfg Config) *replica {
	cfg.Namespace, cfg.Kubeconfig, cfg.LeaderElect = ns, h.env.Kubeconfig, true
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = Run(ctx, cfg)
	}()
	return r
}
