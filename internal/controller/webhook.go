package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/config"
)

// webhook refuses configuration that can never work, at admission: MetalLB configuration objects
// outside the configuration namespace (nothing reads them there), pools whose ranges are malformed,
// reversed or overlap another pool, BGPPeers, BGPAdvertisements, Communities and BFDProfiles the
// speakers would refuse (the config.Validate… functions), L2Advertisements MetalLB refuses, the
// deletion of a BFDProfile a BGPPeer uses, and Services whose address requests contradict
// themselves or can never share with the Services already holding the requested address. It runs
// on every replica with a certificate kept in a Secret (so all replicas serve the same one) whose CA
// it writes into the ValidatingWebhookConfiguration; certs (certs.go) renews it before it expires.
type webhook struct {
	cfg Config
	log *slog.Logger
	// Informers of the configuration namespace's objects the checks compare against, and of the
	// nodes' labels (for BGPAdvertisements' nodeSelectors).
	pools, bgpAds, communities, peers, nodes cache.SharedIndexInformer
	svcs                                     corelisters.ServiceLister
	certs                                    *certs // the serving certificate, renewed by certs.run
}

const webhookSecret = "ironlb-webhook-cert"

func newWebhook(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, cfg Config, log *slog.Logger) (*webhook, error) {
	certs := newCerts(cs, dyn, cfg, log.With("part", "webhook"))
	if err := certs.sync(ctx); err != nil {
		return nil, err
	}
	dinf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	inf := informers.NewSharedInformerFactory(cs, 0)
	w := &webhook{cfg: cfg, log: log.With("part", "webhook"),
		pools:       dinf.ForResource(v1beta1.IPAddressPoolGVR).Informer(),
		bgpAds:      dinf.ForResource(v1beta1.BGPAdvertisementGVR).Informer(),
		communities: dinf.ForResource(v1beta1.CommunityGVR).Informer(),
		peers:       dinf.ForResource(v1beta2.BGPPeerGVR).Informer(),
		nodes:       inf.Core().V1().Nodes().Informer(),
		svcs:        inf.Core().V1().Services().Lister(), certs: certs}
	// Only the nodes' names and labels are needed: keep nothing else in memory.
	if err := w.nodes.SetTransform(func(o any) (any, error) {
		if n, ok := o.(*corev1.Node); ok {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, ResourceVersion: n.ResourceVersion}}, nil
		}
		return o, nil
	}); err != nil {
		return nil, err
	}
	svcInf := inf.Core().V1().Services().Informer()
	dinf.Start(ctx.Done())
	inf.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), w.pools.HasSynced, w.bgpAds.HasSynced, w.communities.HasSynced, w.peers.HasSynced,
		w.nodes.HasSynced, svcInf.HasSynced)
	return w, nil
}

// serve serves the webhook until ctx ends; listening is called once it listens.
func (w *webhook) serve(ctx context.Context, listening func()) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/validate-metallb-io-v1beta1-ipaddresspool", w.handle(w.validatePool))
	mux.HandleFunc("/validate-metallb-io-v1beta2-bgppeer", w.handle(w.validatePeer))
	mux.HandleFunc("/validate-metallb-io-v1beta1-l2advertisement", w.handle(w.validateL2Advertisement))
	mux.HandleFunc("/validate-metallb-io-v1beta1-bgpadvertisement", w.handle(w.validateBGPAdvertisement))
	mux.HandleFunc("/validate-metallb-io-v1beta1-community", w.handle(w.validateCommunity))
	mux.HandleFunc("/validate-metallb-io-v1beta1-bfdprofile", w.handleWithDelete(w.validateBFDProfile, w.validateBFDProfileDeletion))
	mux.HandleFunc("/validate-service", w.handle(w.validateService))
	mux.HandleFunc("/convert", w.convert)
	srv := &http.Server{Addr: w.cfg.WebhookAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{GetCertificate: w.certs.GetCertificate, MinVersion: tls.VersionTLS12}}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", w.cfg.WebhookAddr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); srv.Close() }()
	go w.certs.run(ctx)
	w.log.Info("admission webhook listening", "addr", w.cfg.WebhookAddr)
	listening()
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// handle decodes an AdmissionReview, runs validate on the new object of a CREATE or UPDATE and
// answers; it allows every DELETE.
func (w *webhook) handle(validate func(raw []byte) error) http.HandlerFunc {
	return w.handleWithDelete(validate, func([]byte) error { return nil })
}

// handleWithDelete is handle for a webhook also registered for DELETE (only the BFDProfile one):
// onDelete gets the object being deleted.
func (w *webhook) handleWithDelete(validate, onDelete func(raw []byte) error) http.HandlerFunc {
	return func(rw http.ResponseWriter, req *http.Request) {
		review := decodeReview(rw, req, 4<<20, "not an AdmissionReview",
			func(r *admissionv1.AdmissionReview) bool { return r.Request != nil })
		if review == nil {
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		raw, check := review.Request.Object.Raw, validate
		if review.Request.Operation == admissionv1.Delete {
			raw, check = review.Request.OldObject.Raw, onDelete
		}
		switch review.Request.Operation {
		case admissionv1.Create, admissionv1.Update, admissionv1.Delete:
			if err := check(raw); err != nil {
				msg := err.Error()
				if msg == "" {
					msg = "refused by ironlb's admission webhook" // a refusal always says something
				}
				resp.Allowed = false
				resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: msg, Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity}
				w.log.Info("refused at admission", "kind", review.Request.Kind.Kind, "name", review.Request.Namespace+"/"+review.Request.Name, "err", err)
			}
		}
		review.Response = resp
		review.Request = nil
		writeReview(rw, review)
	}
}

// decodeReview reads a review (an AdmissionReview, a ConversionReview) of at most limit bytes from
// req's body. A body that cannot be read, does not decode or has no request (hasRequest false) is
// answered 400, with notReview as the message for the latter two, and gives nil.
func decodeReview[R any](rw http.ResponseWriter, req *http.Request, limit int64, notReview string, hasRequest func(*R) bool) *R {
	body, err := io.ReadAll(io.LimitReader(req.Body, limit))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return nil
	}
	review := new(R)
	if err := json.Unmarshal(body, review); err != nil || !hasRequest(review) {
		http.Error(rw, notReview, http.StatusBadRequest)
		return nil
	}
	return review
}

// writeReview answers with the review, its request cleared and its response set, as JSON.
func writeReview(rw http.ResponseWriter, review any) {
	out, _ := json.Marshal(review)
	rw.Header().Set("Content-Type", "application/json")
	_, _ = rw.Write(out)
}

func (w *webhook) validatePool(raw []byte) error {
	p, err := configObject[v1beta1.IPAddressPool](w, raw, "IPAddressPool")
	if err != nil {
		return err
	}
	if err := config.ValidatePool(p, listAs[v1beta1.IPAddressPool](w.pools)); err != nil {
		return fmt.Errorf("ipaddresspool %s: %w", p.Name, err)
	}
	return nil
}

// validatePeer refuses a BGPPeer that no speaker could use (MetalLB's BGPPeer webhook, failurePolicy
// Fail, does the same). The objects it names (bfdProfile, passwordSecret) are not required to exist.
func (w *webhook) validatePeer(raw []byte) error {
	p, err := configObject[v1beta2.BGPPeer](w, raw, "BGPPeer")
	if err != nil {
		return err
	}
	return config.ValidatePeer(p) // its errors name the BGPPeer and the field
}

// validateL2Advertisement refuses what MetalLB's L2Advertisement webhook refuses (duplicates,
// selectors that do not parse), and interface names no host can have. Pools it names need not exist.
func (w *webhook) validateL2Advertisement(raw []byte) error {
	a, err := configObject[v1beta1.L2Advertisement](w, raw, "L2Advertisement")
	if err != nil {
		return err
	}
	return config.ValidateL2Advertisement(a)
}

// validateBGPAdvertisement refuses a BGPAdvertisement the speakers would refuse or that contradicts
// another one's localPref (config.ValidateBGPAdvertisement), against the stored pools, aliases,
// advertisements and nodes.
func (w *webhook) validateBGPAdvertisement(raw []byte) error {
	a, err := configObject[v1beta1.BGPAdvertisement](w, raw, "BGPAdvertisement")
	if err != nil {
		return err
	}
	nodes := map[string]map[string]string{}
	for _, o := range w.nodes.GetStore().List() {
		if n, ok := o.(*corev1.Node); ok {
			nodes[n.Name] = n.Labels
		}
	}
	return config.ValidateBGPAdvertisement(a, config.Objects{Pools: listAs[v1beta1.IPAddressPool](w.pools),
		BGPAdvertisements: listAs[v1beta1.BGPAdvertisement](w.bgpAds), Communities: listAs[v1beta1.Community](w.communities),
		Nodes: nodes})
}

// validateCommunity refuses aliases the speakers cannot parse and names another Community defines.
func (w *webhook) validateCommunity(raw []byte) error {
	c, err := configObject[v1beta1.Community](w, raw, "Community")
	if err != nil {
		return err
	}
	return config.ValidateCommunity(c, config.Objects{Communities: listAs[v1beta1.Community](w.communities)})
}

// validateBFDProfile refuses profiles out of MetalLB's ranges.
func (w *webhook) validateBFDProfile(raw []byte) error {
	p, err := configObject[v1beta1.BFDProfile](w, raw, "BFDProfile")
	if err != nil {
		return err
	}
	return config.ValidateBFDProfile(p)
}

// validateBFDProfileDeletion refuses, as MetalLB does, deleting a profile a BGPPeer uses.
func (w *webhook) validateBFDProfileDeletion(raw []byte) error {
	p, err := decode[v1beta1.BFDProfile](raw, "BFDProfile")
	if err != nil {
		return err
	}
	return config.BFDProfileInUse(p.Name, listAs[v1beta2.BGPPeer](w.peers))
}

// listAs converts an informer's unstructured objects into T, leaving out those that do not convert.
func listAs[T any](inf cache.SharedIndexInformer) []T {
	objs := inf.GetStore().List()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		var v T
		if u, ok := o.(*unstructured.Unstructured); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v) == nil {
			out = append(out, v)
		}
	}
	return out
}

// decode decodes raw, an object of kind, into a T.
func decode[T any](raw []byte, kind string) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", kind, err)
	}
	return v, nil
}

// configObject decodes raw, a MetalLB configuration object of kind being created or updated, and
// refuses it outside the configuration namespace (inNamespace). Its errors name the object as
// "ipaddresspool NAME: ...".
func configObject[T any, P interface {
	*T
	metav1.Object
}](w *webhook, raw []byte, kind string) (P, error) {
	v, err := decode[T](raw, kind)
	if err != nil {
		return nil, err
	}
	obj := P(v)
	if err := w.inNamespace(obj.GetNamespace()); err != nil {
		return nil, fmt.Errorf("%s %s: %w", strings.ToLower(kind), obj.GetName(), err)
	}
	return obj, nil
}

// inNamespace refuses configuration objects outside the configuration namespace, as MetalLB does:
// neither the controller nor the speakers would ever read them, and the user would see nothing happen.
func (w *webhook) inNamespace(objNS string) error {
	if objNS != w.cfg.Namespace {
		return fmt.Errorf("must be created in namespace %s, the only one ironlb reads (not %q)", w.cfg.Namespace, objNS)
	}
	return nil
}

// validateService refuses address requests that can never be satisfied.
func (w *webhook) validateService(raw []byte) error {
	svc, err := decode[corev1.Service](raw, "Service")
	if err != nil {
		return err
	}
	if !config.Ours(svc, w.cfg.LBClass) {
		return nil // not a LoadBalancer, or another implementation's (--lb-class): not ours to judge
	}
	req, _, err := config.Request(svc, nil)
	if err != nil {
		return err
	}
	if req.SharingKey == "" || len(req.Requested) == 0 {
		return nil
	}
	// The requested address is held by Services with the same sharing key: their ports and backends
	// must be compatible, or this request can never be served.
	others, _ := w.svcs.List(everything())
	for _, o := range others {
		if o.Namespace == svc.Namespace && o.Name == svc.Name || !config.Ours(o, w.cfg.LBClass) {
			continue // another class's Service shares nothing with ours
		}
		oreq, _, err := config.Request(o, nil)
		if err != nil || oreq.SharingKey != req.SharingKey {
			continue
		}
		for _, a := range config.IngressAddrs(o) {
			for _, want := range req.Requested {
				if a != want {
					continue
				}
				if oreq.BackendKey != req.BackendKey {
					return fmt.Errorf("service %s/%s: %s is shared (key %q) with %s/%s, which has a different externalTrafficPolicy or selector", svc.Namespace, svc.Name, a, req.SharingKey, o.Namespace, o.Name)
				}
				if p, clash := portClash(req.Ports, oreq.Ports); clash {
					return fmt.Errorf("service %s/%s: %s is shared (key %q) with %s/%s, which already uses %s/%d", svc.Namespace, svc.Name, a, req.SharingKey, o.Namespace, o.Name, p.Protocol, p.Port)
				}
			}
		}
	}
	return nil
}

func portClash(a, b []allocator.Port) (allocator.Port, bool) {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return x, true
			}
		}
	}
	return allocator.Port{}, false
}
