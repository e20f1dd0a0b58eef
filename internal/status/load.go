package status

import (
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	frrk8s "github.com/ironlb/ironlb/api/frrk8s/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// Config is what `ironlb status` flags set.
type Config struct {
	// Kubeconfig is the kubeconfig file; "" loads as kubectl does ($KUBECONFIG, ~/.kube/config, then
	// the in-cluster configuration).
	Kubeconfig string
	Context    string // kubeconfig context; "" = the current one
	// ClientConfig, when set, is the client configuration to use instead of Kubeconfig and Context
	// (the command line's: kubectl's flags through cli-runtime).
	ClientConfig clientcmd.ClientConfig
	Namespace    string // configuration namespace (metallb-system)
	LBClass      string // the controller's --lb-class (config.Serves)
	Output       string // table (""), wide, json or yaml
}

// Run loads the cluster's state with cfg and writes the report to w.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	if !validFormat(cfg.Output) {
		return Write(w, Report{}, cfg.Output) // the unknown-format error, before any API call
	}
	cc := cfg.ClientConfig
	if cc == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = cfg.Kubeconfig
		cc = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.UserAgent = "ironlb-status"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	in, err := Load(ctx, cs, dyn, cfg.Namespace, cfg.LBClass)
	if err != nil {
		return err
	}
	return Write(w, Build(in), cfg.Output)
}

func validFormat(f string) bool {
	return f == "" || f == OutputTable || f == OutputWide || f == OutputJSON || f == OutputYAML
}

// Load lists what Build needs. Resources the cluster does not serve (an older MetalLB without
// ServiceBGPStatus, no BGPSessionState) are left empty; IPAddressPools must be served. Namespaces that
// may not be listed are left out (pools' namespaceSelectors then match nothing).
func Load(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, ns, lbClass string) (Input, error) {
	in := Input{Namespace: ns, LBClass: lbClass}
	svcs, err := cs.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing services: %w", err)
	}
	in.Services = svcs.Items
	if nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		in.Namespaces = nss.Items
	} else if !apierrors.IsForbidden(err) {
		return in, fmt.Errorf("listing namespaces: %w", err)
	}
	evs, err := cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Service,type=" + corev1.EventTypeWarning + ",source=" + ControllerComponent})
	if err != nil {
		return in, fmt.Errorf("listing events: %w", err)
	}
	in.Events = evs.Items

	if served, err := list(ctx, dyn, v1beta1.IPAddressPoolGVR, ns, &in.Pools); err != nil {
		return in, err
	} else if !served {
		return in, fmt.Errorf("%s is not served: are the metallb.io CRDs installed?", v1beta1.IPAddressPoolGVR.GroupResource())
	}
	for _, err := range []error{
		ignoreServed(list(ctx, dyn, v1beta1.L2AdvertisementGVR, ns, &in.L2Advertisements)),
		ignoreServed(list(ctx, dyn, v1beta1.BGPAdvertisementGVR, ns, &in.BGPAdvertisements)),
		ignoreServed(list(ctx, dyn, v1beta2.BGPPeerGVR, ns, &in.BGPPeers)),
		ignoreServed(list(ctx, dyn, v1beta1.ServiceL2StatusGVR, ns, &in.L2Statuses)),
		ignoreServed(list(ctx, dyn, v1beta1.ServiceBGPStatusGVR, ns, &in.BGPStatuses)),
	} {
		if err != nil {
			return in, err
		}
	}
	in.SessionsServed, err = sessions(ctx, dyn, ns, &in.Sessions)
	return in, err
}

// sessions lists BGPSessionStates in every namespace (frr-k8s keeps them in its own), or in ns when
// that is all the user may read. It reports false when the resource is not served.
func sessions(ctx context.Context, dyn dynamic.Interface, ns string, out *[]Session) (bool, error) {
	l, err := dyn.Resource(frrk8s.BGPSessionStateGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		l, err = dyn.Resource(frrk8s.BGPSessionStateGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	}
	switch {
	case notServed(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("listing %s: %w", frrk8s.BGPSessionStateGVR.GroupResource(), err)
	}
	for _, o := range l.Items {
		str := func(f string) string { s, _, _ := unstructured.NestedString(o.Object, "status", f); return s }
		*out = append(*out, Session{Node: str("node"), Peer: str("peer"), VRF: str("vrf"), BGP: str("bgpStatus"), BFD: str("bfdStatus")})
	}
	return true, nil
}

// list lists a resource in ns into out. It reports false, without error, when the resource is not
// served.
func list[T any](ctx context.Context, dyn dynamic.Interface, r schema.GroupVersionResource, ns string, out *[]T) (bool, error) {
	l, err := dyn.Resource(r).Namespace(ns).List(ctx, metav1.ListOptions{})
	if notServed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("listing %s: %w", r.GroupResource(), err)
	}
	for _, it := range l.Items {
		var o T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it.Object, &o); err != nil {
			return false, fmt.Errorf("decoding %s %s/%s: %w", r.GroupResource(), it.GetNamespace(), it.GetName(), err)
		}
		*out = append(*out, o)
	}
	return true, nil
}

func ignoreServed(_ bool, err error) error { return err }

// notServed reports whether err says the resource does not exist (no CRD, or not this version).
func notServed(err error) bool {
	var nm *meta.NoKindMatchError
	return apierrors.IsNotFound(err) || errors.As(err, &nm)
}
