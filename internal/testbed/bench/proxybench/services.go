package proxybench

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

func svcName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// ensureServices creates Services (ClusterIP, no selector) and their EndpointSlices (2 fake
// endpoints each) until there are n.
func (b *bench) ensureServices(ctx context.Context, n int) error {
	ips, err := createServices(ctx, []kubernetes.Interface{b.cs}, b.ips, n, b.o.Log)
	if err != nil {
		return err
	}
	b.ips = ips
	return nil
}

// createServices creates Services len(have)..n-1 in Namespace (ClusterIP, no selector) and their
// EndpointSlices (2 fake endpoints each) with proxyWorkers concurrent writers spread over
// clients, and returns the ClusterIPs of all n.
func createServices(ctx context.Context, clients []kubernetes.Interface, have []netip.Addr, n int, log func(string, ...any)) ([]netip.Addr, error) {
	from := len(have)
	if from >= n {
		return have, nil
	}
	ips := make([]netip.Addr, n)
	copy(ips, have)
	log("creating Services %d..%d with their EndpointSlices (%d writers)", from, n-1, proxyWorkers)
	var next, done atomic.Int64
	next.Store(int64(from))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := range proxyWorkers {
		cs := clients[w%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				ip, err := createService(ctx, cs, i)
				if err != nil {
					cancel(fmt.Errorf("Service %s: %w", svcName(i), err))
					return
				}
				ips[i] = ip
				done.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	t0 := time.Now()
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				d := done.Load()
				log("  %d/%d Services created (%.0f/s)", from+int(d), n, float64(d)/time.Since(t0).Seconds())
			}
		}
	}()
	wg.Wait()
	close(stop)
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	log("  %d Services, %d endpoints (%.0f Services/s)", n, 2*n, float64(n-from)/time.Since(t0).Seconds())
	return ips, nil
}

// createService creates Service i and its EndpointSlice (either may exist) and returns its ClusterIP.
func createService(ctx context.Context, cs kubernetes.Interface, i int) (netip.Addr, error) {
	name := svcName(i)
	svcs := cs.CoreV1().Services(Namespace)
	var svc *corev1.Service
	err := withRetry(ctx, func() error {
		var err error
		svc, err = svcs.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: "true"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{
				Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(servicePort),
			}}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			svc, err = svcs.Get(ctx, name, metav1.GetOptions{})
		}
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ClusterIP %q: %w", svc.Spec.ClusterIP, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: managedBy, benchLabel: "true",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](servicePort)}},
	}
	for j := range 2 {
		slice.Endpoints = append(slice.Endpoints, endpoint(EndpointAddr(i, j)))
	}
	err = withRetry(ctx, func() error {
		_, err := cs.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	return ip, err
}

func endpoint(a netip.Addr) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{a.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
}

// withRetry retries an API write a few times on errors that may pass (throttling, timeouts).
func withRetry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		err = fn()
		if err == nil || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return err
}

// waitSynced waits until both proxies have the n-th Service, so that restarts and changes start
// from a settled node.
func (b *bench) waitSynced(ctx context.Context, n int) error {
	t := time.Now()
	for _, p := range []*proxy{&b.kp, &b.il} {
		probe, err := NewElementProbe(lab.NetNSPath(p.node), p.table, serviceIPsMap, ServiceKey(b.ips[n-1], servicePort))
		if err != nil {
			return err
		}
		err = poll(ctx, syncTimeout, 100*time.Millisecond, func() (bool, string, error) {
			ok, err := probe.Present()
			return ok, fmt.Sprintf("%s on %s has not programmed %s (Service %d)", p.name, p.node, b.ips[n-1], n-1), err
		})
		probe.Close()
		if err != nil {
			return err
		}
	}
	b.o.Log("both proxies have the %d Services (%.1fs after the last was created)", n, time.Since(t).Seconds())
	return nil
}
