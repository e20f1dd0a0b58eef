package controller

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// verifies says whether the certificate in data verifies against the CA bundle bundle for name.
func verifies(t *testing.T, data map[string][]byte, bundle []byte, name string, at time.Time) error {
	t.Helper()
	pair, err := tls.X509KeyPair(data[keyTLSCert], data[keyTLSKey])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("empty CA bundle")
	}
	_, err = pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: at})
	return err
}

func TestNeedsRenewal(t *testing.T) {
	names := webhookNames("svc", "ns")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const validity = 90 * time.Hour
	const life = validity + time.Hour // with an hour of backdating
	first, err := renew(nil, certPlan{reasonMissing, true}, names, t0, validity)
	if err != nil {
		t.Fatal(err)
	}
	withoutCAKey := map[string][]byte{keyCACert: first[keyCACert], keyTLSCert: first[keyTLSCert], keyTLSKey: first[keyTLSKey]}
	tests := []struct {
		name string
		data map[string][]byte
		at   time.Time
		want certPlan
	}{
		{"no secret", nil, t0, certPlan{reasonMissing, true}},
		{"new", first, t0, certPlan{}},
		{"just over a third of its lifetime left", first, t0.Add(validity - life/3 - time.Minute), certPlan{}},
		{"a third left", first, t0.Add(validity - life/3 + time.Minute), certPlan{reasonExpiring, false}},
		{"expired", first, t0.Add(validity + time.Hour), certPlan{reasonExpiring, false}},
		{"CA near its end", first, t0.Add(caValidityFactor * validity * 3 / 4), certPlan{reasonCAExpiring, true}},
		{"written before rotation: no CA key", withoutCAKey, t0, certPlan{reasonNoCA, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := needsRenewal(tt.data, names, tt.at); got != tt.want {
				t.Errorf("needsRenewal = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := needsRenewal(first, webhookNames("other", "ns"), t0); got != (certPlan{reasonNamesDiffer, false}) {
		t.Errorf("other names: %+v, want %v", got, reasonNamesDiffer)
	}

	// Renewing the certificate keeps the CA and its bundle.
	at := t0.Add(80 * time.Hour)
	second, err := renew(first, certPlan{reasonExpiring, false}, names, at, validity)
	if err != nil {
		t.Fatal(err)
	}
	if string(second[keyCACert]) != string(first[keyCACert]) || string(second[keyCAKey]) != string(first[keyCAKey]) {
		t.Error("renewing the certificate changed the CA")
	}
	if err := verifies(t, second, first[keyCACert], "svc.ns.svc", at); err != nil {
		t.Errorf("renewed certificate against the CA bundle: %v", err)
	}
	if got := needsRenewal(second, names, at); got != (certPlan{}) {
		t.Errorf("after renewal: %+v, want fresh", got)
	}

	// Renewing the CA keeps the old CA in the bundle: certificates it signed, which other replicas
	// may still serve, stay trusted; the new certificate is signed by the new CA.
	at = t0.Add(caValidityFactor * validity * 3 / 4)
	third, err := renew(second, certPlan{reasonCAExpiring, true}, names, at, validity)
	if err != nil {
		t.Fatal(err)
	}
	if n := pemCount(third[keyCACert]); n != 2 {
		t.Errorf("CA bundle after CA renewal holds %d certificates, want 2 (new, old)", n)
	}
	if err := verifies(t, third, third[keyCACert], "svc", at); err != nil {
		t.Errorf("certificate of the new CA: %v", err)
	}
	if err := verifies(t, first, third[keyCACert], "svc", t0.Add(time.Hour)); err != nil {
		t.Errorf("certificate of the old CA against the new bundle: %v", err)
	}
	if got := needsRenewal(third, names, at); got != (certPlan{}) {
		t.Errorf("after CA renewal: %+v, want fresh", got)
	}
	// The next CA renewal drops the CA that has expired by then.
	at = at.Add(caValidityFactor*validity + time.Hour)
	fourth, err := renew(third, certPlan{reasonCAExpiring, true}, names, at, validity)
	if err != nil {
		t.Fatal(err)
	}
	if n := pemCount(fourth[keyCACert]); n != 1 {
		t.Errorf("CA bundle holds %d certificates, want 1 (the previous CA has expired)", n)
	}
}

func pemCount(b []byte) int {
	n := 0
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			return n
		}
		n++
	}
}

// TestCertRotationAgainstAPIServer: with a 4 s certificate the controller's certs loop renews it in
// the Secret before it expires, the ValidatingWebhookConfiguration's caBundle follows, and the TLS
// server presents the new certificate without a restart.
func TestCertRotationAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const secretNS = "metallb-system-webhook"
	for _, n := range []string{ns, secretNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Ignore
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "test-webhook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "test.ironlb.io", AdmissionReviewVersions: []string{"v1"},
			SideEffects: &none, FailurePolicy: &fail,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "localhost"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}}}}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c := newCerts(cs, nil, Config{Namespace: ns, WebhookSecretNamespace: secretNS, WebhookService: "localhost",
		WebhookConfig: "test-webhook", WebhookCertValidity: 4 * time.Second}, slog.New(slog.DiscardHandler))
	if err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second,
		TLSConfig: &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	go c.run(ctx)

	// served dials the server trusting the caBundle now in the webhook configuration, as the
	// apiserver does, and returns the certificate presented.
	served := func() (*x509.Certificate, error) {
		got, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "test-webhook", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(got.Webhooks[0].ClientConfig.CABundle)
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost.metallb-system.svc"})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	first, err := served()
	if err != nil {
		t.Fatalf("first certificate against the caBundle: %v", err)
	}
	// The certificate lives 4 s plus 1 s of backdating; it is renewed with 5/3 s left, by the loop
	// reading the Secret every 200 ms.
	deadline := time.Now().Add(first.NotAfter.Sub(time.Now()) + 2*time.Second)
	var last *x509.Certificate
	for time.Now().Before(deadline) {
		cert, err := served()
		if err != nil {
			t.Fatalf("TLS handshake trusting the webhook configuration's caBundle: %v", err)
		}
		if !cert.Equal(first) {
			last = cert
			break
		}
		if time.Now().After(first.NotAfter) {
			t.Fatalf("the server still presents the certificate that expired at %v", first.NotAfter)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last == nil {
		t.Fatal("the certificate was never renewed")
	}
	if !last.NotAfter.After(first.NotAfter) {
		t.Errorf("renewed certificate expires %v, not after the first's %v", last.NotAfter, first.NotAfter)
	}
	if time.Until(first.NotAfter) <= 0 {
		t.Errorf("renewed only after the first certificate expired")
	}
	s, err := cs.CoreV1().Secrets(secretNS).Get(ctx, webhookSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(s.Data[keyTLSCert])
	if blk == nil {
		t.Fatal("no certificate in the Secret")
	}
	if inSecret, err := x509.ParseCertificate(blk.Bytes); err != nil || !inSecret.NotAfter.Equal(last.NotAfter) && !inSecret.NotAfter.After(last.NotAfter) {
		t.Errorf("the Secret holds a certificate older than the one served (%v)", err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, webhookSecret, metav1.GetOptions{}); err == nil {
		t.Errorf("the certificate Secret is in %s too; it belongs in %s only", ns, secretNS)
	}
}

// testCA returns a self-signed CA certificate, PEM-encoded, valid from nb to na.
func testCA(t *testing.T, cn string, nb, na time.Time) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, NotBefore: nb, NotAfter: na,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestMergeBundle: the caBundle a replica writes keeps every valid CA it had and adds those wanted,
// drops only expired CAs and what is not a certificate, and does not depend on the order of its
// inputs (replicas merging at once converge on the same bytes).
func TestMergeBundle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := testCA(t, "old", t0.Add(-100*time.Hour), t0.Add(100*time.Hour))
	cur := testCA(t, "cur", t0.Add(-time.Hour), t0.Add(1000*time.Hour))
	newer := testCA(t, "newer", t0, t0.Add(2000*time.Hour))
	expired := testCA(t, "expired", t0.Add(-100*time.Hour), t0.Add(-time.Hour))
	notYet := testCA(t, "not-yet", t0.Add(time.Hour), t0.Add(500*time.Hour)) // a clock ahead of ours issued it
	junk := []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("secret")})
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name string
		in   [][]byte
		want []byte // newest expiry first
	}{
		{"nothing", nil, nil},
		{"empty caBundle, the Secret's CA", [][]byte{nil, cur}, cur},
		{"unchanged", [][]byte{cur, cur}, cur},
		{"the Secret recreated with a new CA: the old stays", [][]byte{cur, newer}, cat(newer, cur)},
		{"a replica still serving the previous CA", [][]byte{newer, newer, cur}, cat(newer, cur)},
		{"three CAs from three deletions", [][]byte{cat(cur, old), newer}, cat(newer, cur, old)},
		{"an expired CA is dropped", [][]byte{cat(cur, expired), newer}, cat(newer, cur)},
		{"an expired CA wanted is dropped too", [][]byte{cur, expired}, cur},
		{"not yet valid is kept", [][]byte{cur, notYet}, cat(cur, notYet)},
		{"duplicates once", [][]byte{cat(cur, cur, old), cat(old, cur)}, cat(cur, old)},
		{"junk and keys are dropped", [][]byte{cat(junk, cur, key), []byte("garbage")}, cur},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergeBundle(t0, tt.in...)
			if diff := cmp.Diff(pemNames(t, tt.want), pemNames(t, got)); diff != "" {
				t.Errorf("mergeBundle (-want +got):\n%s", diff)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("mergeBundle: not the canonical encoding")
			}
			// Any order of the inputs, and merging the result again, gives the same bytes.
			rev := slices.Clone(tt.in)
			slices.Reverse(rev)
			if again := mergeBundle(t0, rev...); !bytes.Equal(again, got) {
				t.Errorf("inputs reversed: %v, want %v", pemNames(t, again), pemNames(t, got))
			}
			if again := mergeBundle(t0, got, got); !bytes.Equal(again, got) {
				t.Errorf("merged again: %v, want %v", pemNames(t, again), pemNames(t, got))
			}
		})
	}
}

// pemNames lists the common names of the certificates in b.
func pemNames(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			return names
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, c.Subject.CommonName)
	}
}
