package controller

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// The webhook's serving certificate lives in the Secret webhookSecret, in its own namespace
// (Config.WebhookSecretNamespace, "<namespace>-webhook" in the manifests): the speakers list the
// Secrets of the configuration namespace for their BGP passwords, and RBAC cannot hide one Secret
// of a namespace from a list, so the certificate's key is kept where only the controller reads.
//
// Every replica keeps it fresh (certs.run): it reads the Secret every check interval, renews the
// certificate when a third of its lifetime is left (and the CA likewise, keeping the old CA in the
// bundle until it expires, so certificates it signed stay trusted), writes the CA bundle into the
// ValidatingWebhookConfiguration, and serves the newest certificate through
// tls.Config.GetCertificate, without a restart. Replicas racing to renew converge on whichever
// write wins (the Secret's resourceVersion).
//
// Why not github.com/open-policy-agent/cert-controller, which MetalLB uses: it is a
// controller-runtime Runnable and needs a manager, a cache and a scheme; ironlb uses none of
// controller-runtime, and the part we need (one Secret, one caBundle, a loop) is this file.

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

// certs keeps the webhook's certificate: in the Secret, in the ValidatingWebhookConfiguration's
// caBundle and in memory for the TLS server. Only run (or sync) writes; GetCertificate reads.
type certs struct {
	cs         kubernetes.Interface
	secrets    corev1client.SecretInterface
	hookConfig string // the ValidatingWebhookConfiguration, "" for none
	names      []string
	validity   time.Duration
	now        func() time.Time
	log        *slog.Logger

	cur atomic.Pointer[tls.Certificate] // the certificate served
}

func newCerts(cs kubernetes.Interface, cfg Config, log *slog.Logger) *certs {
	ns := cfg.WebhookSecretNamespace
	if ns == "" {
		ns = cfg.Namespace
	}
	validity := cfg.WebhookCertValidity
	if validity <= 0 {
		validity = DefaultWebhookCertValidity
	}
	return &certs{cs: cs, secrets: cs.CoreV1().Secrets(ns), hookConfig: cfg.WebhookConfig,
		names: webhookNames(cfg.WebhookService, cfg.Namespace), validity: validity, now: time.Now, log: log}
}

// interval is how often run reads the Secret: a twentieth of the lifetime, at most an hour.
func (c *certs) interval() time.Duration { return min(time.Hour, c.validity/20) }

// GetCertificate serves the newest certificate (tls.Config.GetCertificate).
func (c *certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if p := c.cur.Load(); p != nil {
		return p, nil
	}
	return nil, errors.New("no webhook certificate yet")
}

// run calls sync every interval until ctx ends; an error is logged and tried again at the next.
func (c *certs) run(ctx context.Context) {
	t := time.NewTicker(c.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.sync(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("webhook certificate", "err", err)
			}
		}
	}
}

// sync reads the Secret, renews the certificate when needsRenewal says so (creating the Secret when
// absent), serves it and writes its CA bundle into the webhook configuration.
func (c *certs) sync(ctx context.Context) error {
	for try := 0; try < 5; try++ {
		s, err := c.secrets.Get(ctx, webhookSecret, metav1.GetOptions{})
		missing := apierrors.IsNotFound(err)
		if err != nil && !missing {
			return fmt.Errorf("reading secret %s: %w", webhookSecret, err)
		}
		var data map[string][]byte
		if !missing {
			data = s.Data
		}
		now := c.now()
		if plan := needsRenewal(data, c.names, now); plan.reason != fresh {
			nd, err := renew(data, plan, c.names, now, c.validity)
			if err != nil {
				return fmt.Errorf("issuing the webhook certificate: %w", err)
			}
			if missing {
				_, err = c.secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: webhookSecret},
					Type: corev1.SecretTypeTLS, Data: nd}, metav1.CreateOptions{})
			} else {
				s.Data = nd
				_, err = c.secrets.Update(ctx, s, metav1.UpdateOptions{})
			}
			if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
				continue // another replica renewed it first: use theirs
			}
			if err != nil {
				return fmt.Errorf("writing secret %s: %w", webhookSecret, err)
			}
			c.log.Info("renewed the webhook certificate", "reason", string(plan.reason), "ca", plan.ca)
			data = nd
		}
		pair, err := tls.X509KeyPair(data[keyTLSCert], data[keyTLSKey])
		if err != nil {
			return fmt.Errorf("secret %s: %w", webhookSecret, err)
		}
		if old := c.cur.Load(); old == nil || !old.Leaf.Equal(pair.Leaf) {
			c.cur.Store(&pair)
		}
		if c.hookConfig != "" {
			if err := patchCABundle(ctx, c.cs, c.hookConfig, data[keyCACert]); err != nil {
				return fmt.Errorf("writing the caBundle of %s: %w", c.hookConfig, err)
			}
		}
		return nil
	}
	return errors.New("could not create or renew the webhook certificate secret (conflicts)")
}
