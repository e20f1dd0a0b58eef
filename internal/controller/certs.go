package controller

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// The webhook's serving certificate lives in the Secret webhookSecret, in its own namespace
// (Config.WebhookSecretNamespace, "<namespace>-webhook" in the manifests): the speakers list the
// Secrets of the configuration namespace for their BGP passwords, and RBAC cannot hide one Secret
// of a namespace from a list, so the certificate's key is kept where only the controller reads.
//
// Every replica keeps it fresh (certs.run): it renews the certificate when a third of its lifetime
// is left (and the CA likewise, keeping the old CA in the Secret's bundle until it expires),
// recreates the Secret when it is gone, keeps the CA bundles of the webhook configuration (the
// caBundle of every webhook of the ValidatingWebhookConfiguration, and of the BGPPeer CRD's
// conversion webhook, conversion.go) trusting what it serves, and serves the Secret's certificate
// through tls.Config.GetCertificate, without a restart.
//
// The rule that keeps the apiserver able to call every replica (issue 18): at no instant does a
// replica serve a certificate the caBundle does not trust. Replicas share one Secret but read it
// at different times, so for a while they serve certificates of different CAs: after the Secret is
// deleted, the first replica to notice issues a new CA while the others still serve the old one.
// Hence, in sync:
//   - A replica serves only the certificate stored in the Secret: when its create or update loses
//     (AlreadyExists, Conflict) it reads the Secret again and uses the winner's.
//   - The caBundle only grows: a replica writes the union (mergeBundle) of the CAs already there,
//     the Secret's CAs and the CAs of the certificate it serves now; a CA leaves the bundle only
//     when it has expired (it can verify nothing then). The write is conditional on the
//     resourceVersion read, so two replicas merging at once cannot drop each other's CA.
//   - A replica switches to a new certificate only after the caBundle trusts its CA.
//
// So a replica still serving the previous CA's certificate stays trusted until it notices the new
// Secret, however late, and the order replicas write in does not matter: the union is the same.
// They notice within moments anyway: run watches the Secret and the webhook configuration by name
// (a change, a deletion, or a caBundle overwritten by a reinstall starts a sync) besides the
// periodic check, and retries a failed sync after a second or so, not an interval later.
// The price: each deletion of the Secret leaves one more CA in the caBundle until that CA expires
// (ten certificate lifetimes). To drop a CA on purpose (a leaked key), delete the Secret, wait
// until every replica serves the new certificate, then remove the old CA from the caBundle; no
// replica writes back a CA it no longer serves.
//
// Why not github.com/open-policy-agent/cert-controller, which MetalLB uses: it is a
// controller-runtime Runnable and needs a manager, a cache and a scheme; ironlb uses none of
// controller-runtime, and the part we need (one Secret, a few caBundles, a loop) is this file.

// Keys of the Secret. ca.crt holds the CA bundle (the current CA first, then the previous one
// while it is still valid), ca.key the current CA's key.
const (
	keyCACert  = "ca.crt"
	keyCAKey   = "ca.key"
	keyTLSCert = "tls.crt"
	keyTLSKey  = "tls.key"
)

// DefaultWebhookCertValidity is the serving certificate's lifetime when Config.WebhookCertValidity
// is zero. The CA lives caValidityFactor times as long.
const DefaultWebhookCertValidity = 365 * 24 * time.Hour

const caValidityFactor = 10

// renewReason says why the certificate (or the CA with it) must be issued anew; "" means it is
// fresh.
type renewReason string

const (
	fresh             renewReason = ""
	reasonMissing     renewReason = "no certificate"
	reasonNoCA        renewReason = "no usable CA key" // a Secret written before rotation kept no CA key
	reasonCAExpiring  renewReason = "CA within a third of its lifetime of expiry"
	reasonExpiring    renewReason = "certificate within a third of its lifetime of expiry"
	reasonUnreadable  renewReason = "certificate unreadable"
	reasonNotFromCA   renewReason = "certificate not signed by the current CA"
	reasonNamesDiffer renewReason = "certificate names differ"
)

// certPlan is what needsRenewal decides: whether to renew, why, and whether the CA too.
type certPlan struct {
	reason renewReason
	ca     bool
}

// needsRenewal decides, from the Secret's data, whether the certificate for names must be renewed
// at now. It is pure.
func needsRenewal(data map[string][]byte, names []string, now time.Time) certPlan {
	ca, _, err := parseCA(data)
	if err != nil {
		if len(data[keyTLSCert]) == 0 {
			return certPlan{reasonMissing, true}
		}
		return certPlan{reasonNoCA, true}
	}
	if nearExpiry(ca, now) {
		return certPlan{reasonCAExpiring, true}
	}
	pair, err := tls.X509KeyPair(data[keyTLSCert], data[keyTLSKey])
	if err != nil {
		return certPlan{reasonUnreadable, false}
	}
	leaf := pair.Leaf
	switch {
	case leaf.CheckSignatureFrom(ca) != nil:
		return certPlan{reasonNotFromCA, false}
	case nearExpiry(leaf, now):
		return certPlan{reasonExpiring, false}
	case !slices.Equal(leaf.DNSNames, names):
		return certPlan{reasonNamesDiffer, false}
	}
	return certPlan{}
}

// nearExpiry says whether less than a third of c's lifetime is left at now.
func nearExpiry(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return now.After(c.NotAfter.Add(-life / 3))
}

// parseCA reads the current CA (the bundle's first certificate) and its key.
func parseCA(data map[string][]byte) (*x509.Certificate, crypto.Signer, error) {
	b, _ := pem.Decode(data[keyCACert])
	if b == nil {
		return nil, nil, errors.New("no CA certificate")
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kb, _ := pem.Decode(data[keyCAKey])
	if kb == nil {
		return nil, nil, errors.New("no CA key")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("CA key does not match the CA certificate")
	}
	return ca, key, nil
}

// renew returns the Secret's new data: a certificate for names valid for validity from now, signed
// by the current CA, or by a new CA (valid caValidityFactor times as long) when plan.ca, with the
// previous CA kept in the bundle while it is valid.
func renew(data map[string][]byte, plan certPlan, names []string, now time.Time, validity time.Duration) (map[string][]byte, error) {
	// Backdated a little for clocks behind ours; the lifetime counts it.
	skew := min(time.Hour, validity/4)
	var (
		ca       *x509.Certificate
		caKey    crypto.Signer
		bundle   []byte
		caKeyPEM = data[keyCAKey]
	)
	if !plan.ca {
		var err error
		if ca, caKey, err = parseCA(data); err != nil {
			return nil, err
		}
		bundle = data[keyCACert]
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		t := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "ironlb-webhook-ca"},
			NotBefore: now.Add(-skew), NotAfter: now.Add(caValidityFactor * validity), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, t, t, &k.PublicKey, k)
		if err != nil {
			return nil, err
		}
		if ca, err = x509.ParseCertificate(der); err != nil {
			return nil, err
		}
		caKey = k
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		caKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
		bundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		// Keep the previous CA (the old bundle's first) while valid: other replicas may still serve
		// certificates it signed until they read the Secret again.
		if b, _ := pem.Decode(data[keyCACert]); b != nil {
			if old, err := x509.ParseCertificate(b.Bytes); err == nil && now.Before(old.NotAfter) {
				bundle = append(bundle, pem.EncodeToMemory(b)...)
			}
		}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if ca.NotAfter.Before(notAfter) {
		notAfter = ca.NotAfter
	}
	t := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: names[len(names)-2]},
		NotBefore: now.Add(-skew), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: names}
	der, err := x509.CreateCertificate(rand.Reader, t, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		keyCACert:  bundle,
		keyCAKey:   caKeyPEM,
		keyTLSCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyTLSKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}),
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// webhookNames are the DNS names of the webhook Service in namespace ns; the one before last is
// the certificate's common name.
func webhookNames(service, ns string) []string {
	return []string{service, service + "." + ns, service + "." + ns + ".svc", service + "." + ns + ".svc.cluster.local"}
}

// mergeBundle returns the CA bundle that trusts every certificate of bundles (PEM) still valid at
// now, each once, in a fixed order (latest expiry first), so that replicas merging the same CAs in
// any order write the same bytes and do not undo each other's writes. Blocks that are not
// certificates or do not parse are left out. It is pure.
func mergeBundle(now time.Time, bundles ...[]byte) []byte {
	var certs []*x509.Certificate
	seen := map[string]bool{}
	for _, b := range bundles {
		for {
			var blk *pem.Block
			if blk, b = pem.Decode(b); blk == nil {
				break
			}
			if blk.Type != "CERTIFICATE" || seen[string(blk.Bytes)] {
				continue
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil || now.After(c.NotAfter) {
				continue
			}
			seen[string(blk.Bytes)] = true
			certs = append(certs, c)
		}
	}
	slices.SortFunc(certs, func(a, b *x509.Certificate) int {
		if c := b.NotAfter.Compare(a.NotAfter); c != 0 {
			return c
		}
		return bytes.Compare(a.Raw, b.Raw)
	})
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// certs keeps the webhook's certificate: in the Secret, in the caBundles of the webhook
// configuration and in memory for the TLS server. Only run (or sync, which run calls; never two at
// once) writes; GetCertificate reads.
type certs struct {
	cs         kubernetes.Interface
	dyn        dynamic.Interface // for the conversion CRD's caBundle; nil for none
	secretNS   string
	secrets    corev1client.SecretInterface
	hookConfig string // the ValidatingWebhookConfiguration, "" for none
	names      []string
	service    string // the webhook's Service, namespace/name: the conversion CRD must name it
	validity   time.Duration
	now        func() time.Time
	log        *slog.Logger

	cur atomic.Pointer[served] // the certificate served
}

// served is a certificate being served and the CA bundle of the Secret it was read from, which
// trusts it.
type served struct {
	cert   *tls.Certificate
	bundle []byte
}

func newCerts(cs kubernetes.Interface, dyn dynamic.Interface, cfg Config, log *slog.Logger) *certs {
	ns := cfg.WebhookSecretNamespace
	if ns == "" {
		ns = cfg.Namespace
	}
	validity := cfg.WebhookCertValidity
	if validity <= 0 {
		validity = DefaultWebhookCertValidity
	}
	return &certs{cs: cs, dyn: dyn, secretNS: ns, secrets: cs.CoreV1().Secrets(ns), hookConfig: cfg.WebhookConfig,
		names: webhookNames(cfg.WebhookService, cfg.Namespace), service: cfg.Namespace + "/" + cfg.WebhookService,
		validity: validity, now: time.Now, log: log}
}

// interval is how often run reads the Secret when nothing changes: a twentieth of the lifetime, at
// most an hour.
func (c *certs) interval() time.Duration { return min(time.Hour, c.validity/20) }

// GetCertificate serves the newest certificate (tls.Config.GetCertificate).
func (c *certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if p := c.cur.Load(); p != nil {
		return p.cert, nil
	}
	return nil, errors.New("no webhook certificate yet")
}

// Retries of a failed sync wait retryMin, doubling up to the interval.
const retryMin = time.Second

// run syncs when the Secret, the webhook configuration or the conversion CRD changes (watch), every
// interval otherwise, and soon again after a failure (logged, retried after retryMin doubling), until
// ctx ends.
func (c *certs) run(ctx context.Context) {
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	c.watch(ctx, notify)
	t := time.NewTimer(c.interval())
	defer t.Stop()
	retry := retryMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
		next := c.interval()
		if err := c.sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Error("webhook certificate", "err", err, "retry", retry)
			next, retry = retry, min(2*retry, c.interval())
		} else {
			retry = retryMin
		}
		t.Reset(next)
	}
}

// watch starts informers, until ctx ends, on the Secret, the webhook configuration and the
// conversion CRD, each by name (RBAC grants list and watch on those names only), calling notify on
// every change. The informers only signal: run owns the syncing.
func (c *certs) watch(ctx context.Context, notify func()) {
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { notify() }, UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() }}
	byName := func(name string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	}
	sf := informers.NewSharedInformerFactoryWithOptions(c.cs, 0, informers.WithNamespace(c.secretNS), byName(webhookSecret))
	_, _ = sf.Core().V1().Secrets().Informer().AddEventHandler(h)
	sf.Start(ctx.Done())
	if c.hookConfig != "" {
		hf := informers.NewSharedInformerFactoryWithOptions(c.cs, 0, byName(c.hookConfig))
		_, _ = hf.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer().AddEventHandler(h)
		hf.Start(ctx.Done())
	}
	if c.dyn != nil {
		df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.dyn, 0, "", func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", conversionCRD).String()
		})
		_, _ = df.ForResource(crdGVR).Informer().AddEventHandler(h)
		df.Start(ctx.Done())
	}
}

// sync reads the Secret, renews the certificate when needsRenewal says so (creating the Secret when
// absent), makes the webhook configuration trust its CAs, then serves it.
func (c *certs) sync(ctx context.Context) error {
	data, err := c.stored(ctx)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(data[keyTLSCert], data[keyTLSKey])
	if err != nil {
		return fmt.Errorf("secret %s: %w", webhookSecret, err)
	}
	old := c.cur.Load()
	want := [][]byte{data[keyCACert]}
	if old != nil {
		want = append(want, old.bundle) // served until the switch below
	}
	if err := c.trust(ctx, want); err != nil {
		return err
	}
	if old == nil || !old.cert.Leaf.Equal(pair.Leaf) {
		c.cur.Store(&served{cert: &pair, bundle: data[keyCACert]})
	}
	return nil
}

// stored returns the Secret's data, renewed first (and the Secret created) when needsRenewal says
// so. What it returns is what the Secret holds: a write that loses a race to another replica's is
// dropped, and the winner's read back.
func (c *certs) stored(ctx context.Context) (map[string][]byte, error) {
	for try := 0; try < 5; try++ {
		s, err := c.secrets.Get(ctx, webhookSecret, metav1.GetOptions{})
		missing := apierrors.IsNotFound(err)
		if err != nil && !missing {
			return nil, fmt.Errorf("reading secret %s: %w", webhookSecret, err)
		}
		var data map[string][]byte
		if !missing {
			data = s.Data
		}
		now := c.now()
		plan := needsRenewal(data, c.names, now)
		if plan.reason == fresh {
			return data, nil
		}
		nd, err := renew(data, plan, c.names, now, c.validity)
		if err != nil {
			return nil, fmt.Errorf("issuing the webhook certificate: %w", err)
		}
		var w *corev1.Secret
		if missing {
			w, err = c.secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: webhookSecret},
				Type: corev1.SecretTypeTLS, Data: nd}, metav1.CreateOptions{})
		} else {
			s.Data = nd
			w, err = c.secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue // another replica wrote first: use theirs
		}
		if err != nil {
			return nil, fmt.Errorf("writing secret %s: %w", webhookSecret, err)
		}
		c.log.Info("renewed the webhook certificate", "reason", string(plan.reason), "ca", plan.ca)
		return w.Data, nil
	}
	return nil, errors.New("could not create or renew the webhook certificate secret (conflicts)")
}

// trust makes every caBundle of the webhook configuration, and the conversion CRD's, trust the CAs
// of want, keeping those they trust already (mergeBundle).
func (c *certs) trust(ctx context.Context, want [][]byte) error {
	if c.hookConfig != "" {
		if err := c.trustWebhookConfig(ctx, want); err != nil {
			return fmt.Errorf("writing the caBundle of %s: %w", c.hookConfig, err)
		}
	}
	if c.dyn != nil {
		if err := c.trustCRD(ctx, want); err != nil {
			return fmt.Errorf("writing the caBundle of CRD %s: %w", conversionCRD, err)
		}
	}
	return nil
}

// trustWebhookConfig merges want into every caBundle of the webhook configuration. The patch is
// conditional on the resourceVersion read: a concurrent write (another replica's merge) makes it
// fail with a conflict, and it merges again.
func (c *certs) trustWebhookConfig(ctx context.Context, want [][]byte) error {
	vwcs := c.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	for try := 0; ; try++ {
		vwc, err := vwcs.Get(ctx, c.hookConfig, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // not installed (tests, or webhooks disabled in the manifests); the watch sees it created
		}
		if err != nil {
			return err
		}
		var bundles []bundleAt
		for i, wh := range vwc.Webhooks {
			bundles = append(bundles, bundleAt{fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), wh.ClientConfig.CABundle})
		}
		err = patchBundles(ctx, vwcs, c.hookConfig, vwc.ResourceVersion, bundles, want, c.now())
		if !apierrors.IsConflict(err) || try == 4 {
			return err
		}
	}
}

// bundleAt is a caBundle in an object, and its JSON pointer.
type bundleAt struct {
	path   string
	bundle []byte
}

// patcher is the Patch method of a typed client.
type patcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// patchBundles merges want into each of bundles and patches those that change in object name,
// on condition that it is still at resourceVersion rv (else a conflict).
func patchBundles[T any](ctx context.Context, p patcher[T], name, rv string, bundles []bundleAt, want [][]byte, now time.Time) error {
	ops := []map[string]any{{"op": "replace", "path": "/metadata/resourceVersion", "value": rv}}
	for _, b := range bundles {
		if merged := mergeBundle(now, append([][]byte{b.bundle}, want...)...); !bytes.Equal(merged, b.bundle) {
			// add sets a member whether or not it is there already.
			ops = append(ops, map[string]any{"op": "add", "path": b.path, "value": merged})
		}
	}
	if len(ops) == 1 {
		return nil
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, err = p.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// trustCRD merges want into the caBundle of the conversion webhook of CRD conversionCRD, when its
// conversion is this webhook's: its clientConfig names this webhook's Service, or a URL (a test, or a
// webhook reached from outside the cluster). A CRD converted by another webhook (MetalLB's, during
// a migration) is left alone, or the two would rewrite each other's caBundle. Conditional on the
// resourceVersion read, like trustWebhookConfig.
func (c *certs) trustCRD(ctx context.Context, want [][]byte) error {
	crds := c.dyn.Resource(crdGVR)
	for try := 0; ; try++ {
		crd, err := crds.Get(ctx, conversionCRD, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // the watch sees it installed
		}
		if err != nil {
			return err
		}
		if strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy"); strategy != "Webhook" {
			return nil
		}
		cc, _, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig")
		svcName, _, _ := unstructured.NestedString(cc, "service", "name")
		svcNS, _, _ := unstructured.NestedString(cc, "service", "namespace")
		url, _, _ := unstructured.NestedString(cc, "url")
		if url == "" && svcNS+"/"+svcName != c.service {
			return nil
		}
		var have []byte
		if s, _, _ := unstructured.NestedString(cc, "caBundle"); s != "" {
			if have, err = base64.StdEncoding.DecodeString(s); err != nil {
				have = nil // unreadable: replaced by what is wanted
			}
		}
		at := []bundleAt{{"/spec/conversion/webhook/clientConfig/caBundle", have}}
		err = patchBundles(ctx, crds, conversionCRD, crd.GetResourceVersion(), at, want, c.now())
		if !apierrors.IsConflict(err) || try == 4 {
			return err
		}
	}
}
