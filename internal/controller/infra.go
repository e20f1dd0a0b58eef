package controller

import (
	"context"
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// The cluster's own addresses beyond the Nodes' (controller.go reads those): the Service CIDR, from
// networking.k8s.io/v1 ServiceCIDR objects (Kubernetes 1.33 and later; the apiserver creates one,
// "kubernetes", from --service-cluster-ip-range, and more may be added at any time), and the
// apiserver's addresses, the endpoints of the default/kubernetes Service. A pool holding them is
// accepted and warned about (warnInfraOverlapsLocked).

// watchInfra sets up the informers of ServiceCIDRs and of the kubernetes Service's EndpointSlices,
// each change calling changed; it starts them (they stop when ctx ends) and returns at once. On an
// apiserver without the ServiceCIDR API, only the kubernetes Service's ClusterIP stands for the
// Service CIDR (a log line says so); an error to ask is logged and treated alike.
func (r *reconciler) watchInfra(ctx context.Context, changed func(any)) error {
	handlers := cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: func(_, n any) { changed(n) }, DeleteFunc: changed}
	if served, err := servesServiceCIDRs(r.cs.Discovery().ServerResourcesForGroupVersion); served {
		f := informers.NewSharedInformerFactory(r.cs, 0)
		r.serviceCIDRs = f.Networking().V1().ServiceCIDRs().Informer()
		if _, err := r.serviceCIDRs.AddEventHandler(handlers); err != nil {
			return err
		}
		f.Start(ctx.Done())
	} else {
		r.log.Info("the apiserver serves no networking.k8s.io/v1 ServiceCIDRs: pools are checked against the kubernetes Service's ClusterIP only", "err", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes" }))
	r.apiSlices = f.Discovery().V1().EndpointSlices().Informer()
	if _, err := r.apiSlices.AddEventHandler(handlers); err != nil {
		return err
	}
	f.Start(ctx.Done())
	return nil
}

// servesServiceCIDRs says whether the apiserver serves networking.k8s.io/v1 servicecidrs, with the
// discovery call given (a NotFound group is a no without an error).
func servesServiceCIDRs(resources func(gv string) (*metav1.APIResourceList, error)) (bool, error) {
	list, err := resources(networkingv1.SchemeGroupVersion.String())
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	for _, res := range list.APIResources {
		if res.Name == "servicecidrs" {
			return true, nil
		}
	}
	return false, nil
}

// infraObjects returns the ServiceCIDRs' prefixes by object name and the apiserver's addresses, as
// the informers hold them now (none before they have listed). Malformed CIDRs and addresses are
// skipped: the apiserver validates both.
func (r *reconciler) infraObjects() (map[string][]netip.Prefix, []netip.Addr) {
	cidrs := map[string][]netip.Prefix{}
	if r.serviceCIDRs != nil {
		for _, o := range r.serviceCIDRs.GetStore().List() {
			sc, ok := o.(*networkingv1.ServiceCIDR)
			if !ok {
				continue
			}
			for _, c := range sc.Spec.CIDRs {
				if p, err := netip.ParsePrefix(c); err == nil {
					cidrs[sc.Name] = append(cidrs[sc.Name], p)
				}
			}
		}
	}
	var addrs []netip.Addr
	if r.apiSlices != nil {
		for _, o := range r.apiSlices.GetStore().List() {
			sl, ok := o.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, ep := range sl.Endpoints {
				for _, a := range ep.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil {
						addrs = append(addrs, ip)
					}
				}
			}
		}
	}
	return cidrs, addrs
}
