package controller

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// certsHarness is an apiserver with the webhook's namespaces and a ValidatingWebhookConfiguration,
// and the replicas' certs instances on it.
type certsHarness struct {
	t   *testing.T
	ctx context.Context
	cs  kubernetes.Interface
	cfg Config
}

const (
	raceSecretNS = "metallb-system-webhook"
	raceHook     = "race-webhook"
	raceService  = "ironlb-webhook-service"
)

func newCertsHarness(t *testing.T, ctx context.Context, validity time.Duration) *certsHarness {
	t.Helper()
	env := testenv.Start(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for _, n := range []string{ns, raceSecretNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Ignore
	hook := func(name string) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{Name: name, AdmissionReviewVersions: []string{"v1"},
			SideEffects: &none, FailurePolicy: &fail,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: raceService}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}}}
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: raceHook},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{hook("a.ironlb.io"), hook("b.ironlb.io")}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &certsHarness{t: t, ctx: ctx, cs: cs, cfg: Config{Namespace: ns, WebhookSecretNamespace: raceSecretNS,
		WebhookService: raceService, WebhookConfig: raceHook, WebhookCertValidity: validity}}
}

// replica starts a replica as newWebhook does: a certs instance and its first sync.
func (h *certsHarness) replica(name string) *certs {
	h.t.Helper()
	c := newCerts(h.cs, nil, h.cfg, slog.New(slog.DiscardHandler).With("replica", name))
	if err := c.sync(h.ctx); err != nil {
		h.t.Fatalf("replica %s: first sync: %v", name, err)
	}
	return c
}

func (h *certsHarness) deleteSecret() {
	h.t.Helper()
	if err := h.cs.CoreV1().Secrets(raceSecretNS).Delete(h.ctx, webhookSecret, metav1.DeleteOptions{}); err != nil {
		h.t.Fatalf("deleting the Secret: %v", err)
	}
}

// untrusted returns, for every replica whose served certificate does not verify against the
// caBundle of every webhook in the ValidatingWebhookConfiguration (as the apiserver verifies it,
// with the Service's DNS name), why; nil when all are trusted. The served certificates are read
// before the configuration: a bundle only ever gains CAs (until they expire), so a certificate
// trusted when read stays trusted, and a replica switching certificates in between is not
// mistaken for a violation.
func (h *certsHarness) untrusted(replicas map[string]*certs) []string {
	h.t.Helper()
	served := map[string]*x509.Certificate{}
	for name, c := range replicas {
		cert, err := c.GetCertificate(nil)
		if err != nil {
			served[name] = nil
			continue
		}
		served[name] = cert.Leaf
	}
	vwc, err := h.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(h.ctx, raceHook, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var bad []string
	for name, leaf := range served {
		if leaf == nil {
			bad = append(bad, name+": serves no certificate")
			continue
		}
		for _, wh := range vwc.Webhooks {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(wh.ClientConfig.CABundle)
			dns := raceService + "." + ns + ".svc"
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: dns}); err != nil {
				bad = append(bad, fmt.Sprintf("%s (serial %x) against webhook %s's caBundle (%d CAs): %v", name, leaf.SerialNumber, wh.Name, pemCount(wh.ClientConfig.CABundle), err))
			}
		}
	}
	return bad
}

func (h *certsHarness) check(step string, replicas map[string]*certs) {
	h.t.Helper()
	for _, b := range h.untrusted(replicas) {
		h.t.Errorf("after %s: %s", step, b)
	}
}

// syncAll runs sync on the replicas at once, as their loops would after noticing the change.
func (h *certsHarness) syncAll(replicas map[string]*certs) {
	h.t.Helper()
	var wg sync.WaitGroup
	for name, c := range replicas {
		wg.Go(func() {
			if err := c.sync(h.ctx); err != nil {
				h.t.Errorf("replica %s: sync: %v", name, err)
			}
		})
	}
	wg.Wait()
}

// TestCertReplicasRaceAgainstAPIServer is the chaos soak's webhook-secret fault (issue 18) on one
// apiserver: three replicas, the Secret deleted under them again and again, one replica restarted
// each time (it comes up with no certificate and finds no Secret). After every step every
// replica's served certificate must verify against the caBundle the apiserver would use.
func TestCertReplicasRaceAgainstAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newCertsHarness(t, ctx, DefaultWebhookCertValidity)
	replicas := map[string]*certs{}
	for _, name := range []string{"r0", "r1", "r2"} {
		replicas[name] = h.replica(name)
		h.check("starting "+name, replicas)
	}
	h.syncAll(replicas)
	h.check("the first syncs", replicas)
	if t.Failed() {
		t.FailNow()
	}

	for round := range 4 {
		restarted := fmt.Sprintf("r%d", round%3)
		step := func(s string) string { return fmt.Sprintf("round %d: %s", round, s) }

		h.deleteSecret()
		h.check(step("deleting the Secret"), replicas)
		// The restarted replica comes up first and finds no Secret: it issues a new CA.
		replicas[restarted] = h.replica(restarted)
		h.check(step("restarting "+restarted), replicas)
		// The others notice the new Secret.
		for name, c := range replicas {
			if name == restarted {
				continue
			}
			if err := c.sync(ctx); err != nil {
				t.Fatalf("%s: %s: %v", step("sync"), name, err)
			}
			h.check(step("sync of "+name), replicas)
		}

		// Deleted again, and every replica races to create it at once.
		h.deleteSecret()
		h.syncAll(replicas)
		h.check(step("all replicas racing to create the Secret"), replicas)
		// Each replica serves what the Secret holds (the winner's), not a certificate of its own.
		s, err := h.cs.CoreV1().Secrets(raceSecretNS).Get(ctx, webhookSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range replicas {
			cert, _ := c.GetCertificate(nil)
			if !sameCert(cert.Certificate[0], s.Data[keyTLSCert]) {
				t.Errorf("%s: %s serves a certificate that is not the Secret's", step("the race"), name)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	// Two replicas merging at once cannot drop each other's CA: a merge read before another write
	// is refused with a conflict (and merged again by trust).
	vwcs := h.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	before, err := vwcs.Get(ctx, raceHook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	first := testCA(t, "first", now.Add(-time.Hour), now.Add(time.Hour))
	second := testCA(t, "second", now.Add(-time.Hour), now.Add(time.Hour))
	at := []bundleAt{{"/webhooks/0/clientConfig/caBundle", before.Webhooks[0].ClientConfig.CABundle}}
	if err := patchBundles(ctx, vwcs, raceHook, before.ResourceVersion, at, [][]byte{first}, now); err != nil {
		t.Fatal(err)
	}
	if err := patchBundles(ctx, vwcs, raceHook, before.ResourceVersion, at, [][]byte{second}, now); !apierrors.IsConflict(err) {
		t.Fatalf("a merge from a stale read: %v, want a conflict", err)
	}
	if err := replicas["r0"].trust(ctx, [][]byte{second}); err != nil {
		t.Fatal(err)
	}
	after, err := vwcs.Get(ctx, raceHook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wh := range after.Webhooks {
		names := pemNames(t, wh.ClientConfig.CABundle)
		if wh.Name == "a.ironlb.io" && !slices.Contains(names, "first") || !slices.Contains(names, "second") {
			t.Errorf("webhook %s's caBundle holds %v, want first (a) and second (all) among them", wh.Name, names)
		}
	}
	h.check("the merges", replicas)
}

// sameCert says whether der is the certificate PEM-encoded in pemCert.
func sameCert(der []byte, pemCert []byte) bool {
	blk, _ := pem.Decode(pemCert)
	return blk != nil && string(blk.Bytes) == string(der)
}

// TestCertReplicasWatchAgainstAPIServer: replicas running their loops (run) notice a deleted Secret
// through the watch, not the interval (an hour with a year's certificate), and converge on the
// Secret's certificate, with every replica trusted at every observation on the way, replicas
// restarted among them.
func TestCertReplicasWatchAgainstAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newCertsHarness(t, ctx, DefaultWebhookCertValidity)
	replicas := map[string]*certs{}
	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	start := func(name string) {
		if stop := stops[name]; stop != nil {
			stop()
		}
		c := h.replica(name)
		rctx, stop := context.WithCancel(ctx)
		replicas[name], stops[name] = c, stop
		wg.Go(func() { c.run(rctx) })
	}
	for _, name := range []string{"r0", "r1", "r2"} {
		start(name)
	}
	if interval := replicas["r0"].interval(); interval < 10*time.Minute {
		t.Fatalf("interval %v: the test needs one the replicas cannot wait for", interval)
	}
	for round := range 3 {
		h.deleteSecret()
		if round > 0 {
			start(fmt.Sprintf("r%d", round)) // restarted while the others are on their way
		}
		// Until every replica serves what the Secret holds, every replica stays trusted.
		deadline := time.Now().Add(time.Minute)
		for {
			for _, b := range h.untrusted(replicas) {
				t.Fatalf("round %d: %s", round, b)
			}
			s, err := h.cs.CoreV1().Secrets(raceSecretNS).Get(ctx, webhookSecret, metav1.GetOptions{})
			if err == nil {
				all := true
				for _, c := range replicas {
					cert, _ := c.GetCertificate(nil)
					all = all && cert != nil && sameCert(cert.Certificate[0], s.Data[keyTLSCert])
				}
				if all {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the replicas did not all serve the recreated Secret's certificate within a minute", round)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
