package proxy

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/conntrack"
	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// BenchmarkBuildUnchanged is the model-building cost of a sync at 10,000 Services x 2 endpoints
// when one EndpointSlice changed: only that Service is converted again (the informer handler
// named it), the others are copied from the last build, and the conntrack diff skips them by
// pointer.
func BenchmarkBuildUnchanged(b *testing.B) {
	src := &staticSource{nodes: []*corev1.Node{testNode("node-a", "192.168.0.10")}}
	for i := range 10000 {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		src.svcs = append(src.svcs, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, ResourceVersion: "1", UID: "u"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}}},
		})
		es := slice(name, name+"-x", corev1.ProtocolTCP, 8080, [][2]string{
			{fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), "node-a"}, {fmt.Sprintf("10.245.%d.%d", i/250, i%250+1), "node-b"}})
		es.Namespace, es.ResourceVersion = "bench", "1"
		src.slices = append(src.slices, es)
	}
	idx := map[string][]*discoveryv1.EndpointSlice{}
	for _, es := range src.slices {
		idx[convert.ServiceOf(es)] = []*discoveryv1.EndpointSlice{es}
	}
	fast := &indexedSource{staticSource: src, index: idx}
	p := newProxier(loopConfig{node: convert.NodeConfig{Name: "node-a"}, syncPeriod: time.Hour},
		slog.New(slog.DiscardHandler), fast, []family{{knftables.IPv4Family, nil}}, newMetrics(prometheus.NewRegistry()))
	old := p.build(true)
	b.ResetTimer()
	for i := range b.N {
		es := src.slices[0].DeepCopy()
		es.ResourceVersion = fmt.Sprint(i + 2)
		idx[convert.ServiceOf(es)] = []*discoveryv1.EndpointSlice{es}
		p.pokeService(nftrules.ServiceKey{Namespace: es.Namespace, Name: es.Labels[discoveryv1.LabelServiceName]})
		m := p.build(false)
		_ = conntrack.StaleOf(old, m, p.rebuilt)
		p.rebuilt = nil
		old = m
	}
}

// indexedSource serves SlicesOf from an index kept up to date, like the informer's indexer.
type indexedSource struct {
	*staticSource
	index map[string][]*discoveryv1.EndpointSlice
}

func (s *indexedSource) SlicesOf(ns, name string) []*discoveryv1.EndpointSlice {
	return s.index[ns+"/"+name]
}
