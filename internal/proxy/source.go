package proxy

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// source is the proxy's read-only view of the cluster.
type source interface {
	Services() []*corev1.Service
	// Service returns one Service, nil if there is none (or it is not the proxy's).
	Service(namespace, name string) *corev1.Service
	SlicesOf(namespace, name string) []*discoveryv1.EndpointSlice
	Nodes() []*corev1.Node
	Node(name string) *corev1.Node
	// ServiceCIDRs returns the cluster's networking.k8s.io/v1 ServiceCIDR objects (none when the
	// apiserver does not serve them or the proxy may not list them).
	ServiceCIDRs() []*networkingv1.ServiceCIDR
}

// informerSource is a source over shared informers: Services and EndpointSlices without the
// service-proxy-name and headless labels (as kube-proxy selects them), and Nodes (all of them
// when the liveness detector needs peers, else only this node's).
type informerSource struct {
	svcs, slices, nodes cache.SharedIndexInformer
	svcLister           corelisters.ServiceLister
	nodeLister          corelisters.NodeLister
	cidrs               cache.SharedIndexInformer // nil: ServiceCIDRs not watched
	cidrLister          networkinglisters.ServiceCIDRLister
	svcEvent            func(nftrules.ServiceKey)                         // nil: not counted
	sliceEvent          func(es *discoveryv1.EndpointSlice, deleted bool) // nil: not counted
	factories           []informers.SharedInformerFactory
}

const sliceByService = "service"

// newInformerSource watches Services, EndpointSlices, Nodes and, if serviceCIDRs, the ServiceCIDR
// objects.
func newInformerSource(cs kubernetes.Interface, node string, allNodes, serviceCIDRs bool) *informerSource {
	sel := informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = convert.InformerSelector })
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, sel)
	var nodeOpts []informers.SharedInformerOption
	if !allNodes {
		nodeOpts = append(nodeOpts, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
		}))
	}
	nf := informers.NewSharedInformerFactoryWithOptions(cs, 0, nodeOpts...)
	s := &informerSource{
		svcs:       f.Core().V1().Services().Informer(),
		slices:     f.Discovery().V1().EndpointSlices().Informer(),
		nodes:      nf.Core().V1().Nodes().Informer(),
		svcLister:  f.Core().V1().Services().Lister(),
		nodeLister: nf.Core().V1().Nodes().Lister(),
		factories:  []informers.SharedInformerFactory{f, nf},
	}
	if serviceCIDRs {
		cf := informers.NewSharedInformerFactory(cs, 0)
		s.cidrs = cf.Networking().V1().ServiceCIDRs().Informer()
		s.cidrLister = cf.Networking().V1().ServiceCIDRs().Lister()
		s.factories = append(s.factories, cf)
	}
	_ = s.slices.AddIndexers(cache.Indexers{sliceByService: func(obj any) ([]string, error) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return nil, nil
		}
		if k := convert.ServiceOf(es); k != "" {
			return []string{k}, nil
		}
		return nil, nil
	}})
	return s
}

// onChange calls service with the Service a Service or EndpointSlice event concerns (once for
// each Service), and all on every Node event and on any event it cannot attribute to a Service.
func (s *informerSource) onChange(service func(nftrules.ServiceKey), all func()) {
	one := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		switch o := obj.(type) {
		case *corev1.Service:
			k := nftrules.ServiceKey{Namespace: o.Namespace, Name: o.Name}
			if s.svcEvent != nil {
				s.svcEvent(k)
			}
			service(k)
		case *discoveryv1.EndpointSlice:
			if s.sliceEvent != nil {
				s.sliceEvent(o, deleted)
			}
			if name := o.Labels[discoveryv1.LabelServiceName]; name != "" {
				service(nftrules.ServiceKey{Namespace: o.Namespace, Name: name})
			}
		default:
			all()
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { one(obj, false) }, DeleteFunc: func(obj any) { one(obj, true) },
		UpdateFunc: func(old, cur any) {
			if o, ok := old.(*discoveryv1.EndpointSlice); ok {
				if c, ok := cur.(*discoveryv1.EndpointSlice); !ok || o.Labels[discoveryv1.LabelServiceName] != c.Labels[discoveryv1.LabelServiceName] {
					one(old, true) // moved to another Service
				}
			}
			one(cur, false)
		}}
	for _, i := range []cache.SharedIndexInformer{s.svcs, s.slices} {
		_, _ = i.AddEventHandler(h)
	}
	others := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { all() },
		UpdateFunc: func(_, _ any) { all() }, DeleteFunc: func(any) { all() }}
	_, _ = s.nodes.AddEventHandler(others)
	if s.cidrs != nil {
		_, _ = s.cidrs.AddEventHandler(others)
	}
}

// onEvents has onChange's handler call svc on every Service add, update and delete, and slice on
// every EndpointSlice's (deleted true for a delete), each before the Service's poke: kube-proxy's
// change counts. Call it before onChange.
func (s *informerSource) onEvents(svc func(nftrules.ServiceKey), slice func(es *discoveryv1.EndpointSlice, deleted bool)) {
	s.svcEvent, s.sliceEvent = svc, slice
}

// onSlice calls fn on every EndpointSlice added or updated, in the order the watch delivers them.
func (s *informerSource) onSlice(fn func(*discoveryv1.EndpointSlice)) {
	call := func(obj any) {
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
			fn(es)
		}
	}
	_, _ = s.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: call, UpdateFunc: func(_, obj any) { call(obj) }})
}

// start starts the informers and waits for their caches; false if ctx ended first.
func (s *informerSource) start(ctx context.Context) bool {
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	synced := []cache.InformerSynced{s.svcs.HasSynced, s.slices.HasSynced, s.nodes.HasSynced}
	if s.cidrs != nil {
		synced = append(synced, s.cidrs.HasSynced)
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// shutdown stops the informers and waits for their goroutines (after ctx, given to start, ended).
func (s *informerSource) shutdown() {
	done := make(chan struct{})
	go func() {
		for _, f := range s.factories {
			f.Shutdown()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a watch stuck in a dial; do not hang the exit on it
	}
}

func (s *informerSource) Services() []*corev1.Service {
	out, _ := s.svcLister.List(labels.Everything())
	return out
}

func (s *informerSource) Service(namespace, name string) *corev1.Service {
	svc, err := s.svcLister.Services(namespace).Get(name)
	if err != nil {
		return nil
	}
	return svc
}

func (s *informerSource) SlicesOf(namespace, name string) []*discoveryv1.EndpointSlice {
	objs, _ := s.slices.GetIndexer().ByIndex(sliceByService, namespace+"/"+name)
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	return out
}

func (s *informerSource) Nodes() []*corev1.Node {
	out, _ := s.nodeLister.List(labels.Everything())
	return out
}

func (s *informerSource) Node(name string) *corev1.Node {
	n, err := s.nodeLister.Get(name)
	if err != nil {
		return nil
	}
	return n
}

func (s *informerSource) ServiceCIDRs() []*networkingv1.ServiceCIDR {
	if s.cidrLister == nil {
		return nil
	}
	out, _ := s.cidrLister.List(labels.Everything())
	return out
}

// serviceCIDRsServed reports whether the proxy can watch ServiceCIDR objects: the apiserver serves
// networking.k8s.io/v1 servicecidrs (Kubernetes 1.33 and later) and lets it list them. If not,
// why, for the log.
func serviceCIDRsServed(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	if _, err := cs.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return false, err
	}
	return true, nil
}
