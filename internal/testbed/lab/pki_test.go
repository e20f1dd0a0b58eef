package lab

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"
)

// testPKI generates a lab PKI into a fresh t.TempDir() (ECDSA P-256 keeps this fast).
func testPKI(t *testing.T) PKI {
	t.Helper()
	p := PKI{Dir: filepath.Join(t.TempDir(), "pki")} // Generate creates the directory
	err := p.Generate([]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.200.1.1"), net.ParseIP("172.18.0.2")})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return p
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%s: want exactly one CERTIFICATE PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

func TestPKIGenerateFiles(t *testing.T) {
	p := testPKI(t)
	for _, tt := range []struct {
		path    string
		pemType string
		mode    os.FileMode
	}{
		{p.CACert(), "CERTIFICATE", 0o644},
		{p.CAKey(), "EC PRIVATE KEY", 0o600},
		{p.APIServerCert(), "CERTIFICATE", 0o644},
		{p.APIServerKey(), "EC PRIVATE KEY", 0o600},
		{p.AdminCert(), "CERTIFICATE", 0o644},
		{p.AdminKey(), "EC PRIVATE KEY", 0o600},
		{p.SAKey(), "EC PRIVATE KEY", 0o600},
		{p.SAPub(), "PUBLIC KEY", 0o600},
	} {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			if filepath.Dir(tt.path) != p.Dir {
				t.Errorf("%s is not in %s", tt.path, p.Dir)
			}
			st, err := os.Stat(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tt.mode {
				t.Errorf("mode = %v, want %v", st.Mode().Perm(), tt.mode)
			}
			b, _ := os.ReadFile(tt.path)
			if blk, _ := pem.Decode(b); blk == nil || blk.Type != tt.pemType {
				t.Errorf("want a %q PEM block", tt.pemType)
			}
		})
	}
	if st, err := os.Stat(p.Dir); err != nil {
		t.Errorf("PKI dir: %v", err)
	} else if st.Mode().Perm() != 0o700 {
		t.Errorf("PKI dir mode = %v, want 0700", st.Mode().Perm())
	}
}

func TestPKIAPIServerCert(t *testing.T) {
	p := testPKI(t)
	ca := readCert(t, p.CACert())
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA: IsCA=%v KeyUsage=%v, want a CA that signs certificates", ca.IsCA, ca.KeyUsage)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	crt := readCert(t, p.APIServerCert())
	if crt.Subject.CommonName != "kube-apiserver" {
		t.Errorf("apiserver CN = %q", crt.Subject.CommonName)
	}
	for _, name := range []string{"kubernetes.default.svc", "kubernetes", "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.200.1.1", "172.18.0.2"} {
		t.Run("verify "+name, func(t *testing.T) {
			_, err := crt.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				t.Errorf("apiserver cert does not verify for %s: %v", name, err)
			}
		})
	}
	for _, name := range []string{"example.com", "172.18.0.3"} {
		if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err == nil {
			t.Errorf("apiserver cert verifies for %s, which is not a SAN", name)
		}
	}
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Errorf("apiserver cert verifies for client auth")
	}
	if _, err := tls.LoadX509KeyPair(p.APIServerCert(), p.APIServerKey()); err != nil {
		t.Errorf("apiserver cert and key do not match: %v", err)
	}
	if _, err := crt.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), DNSName: "kubernetes.default.svc"}); err == nil {
		t.Errorf("apiserver cert verifies without the lab CA")
	}
}

func TestPKIAdminCert(t *testing.T) {
	p := testPKI(t)
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.CACert()))
	crt := readCert(t, p.AdminCert())
	if got := crt.Subject.Organization; !slices.Equal(got, []string{"system:masters"}) {
		t.Errorf("admin O = %q, want [system:masters]", got)
	}
	if crt.Subject.CommonName != "kubernetes-admin" {
		t.Errorf("admin CN = %q, want kubernetes-admin", crt.Subject.CommonName)
	}
	if !slices.Equal(crt.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("admin ExtKeyUsage = %v, want [ClientAuth]", crt.ExtKeyUsage)
	}
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin cert does not verify for client auth: %v", err)
	}
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Errorf("admin cert verifies for server auth")
	}
	if _, err := tls.LoadX509KeyPair(p.AdminCert(), p.AdminKey()); err != nil {
		t.Errorf("admin cert and key do not match: %v", err)
	}
}

func TestPKIServiceAccountKeys(t *testing.T) {
	p := testPKI(t)
	kb, _ := os.ReadFile(p.SAKey())
	blk, _ := pem.Decode(kb)
	if blk == nil {
		t.Fatal("sa.key: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		t.Fatalf("sa.key: %v", err)
	}
	pb, _ := os.ReadFile(p.SAPub())
	blk, _ = pem.Decode(pb)
	if blk == nil {
		t.Fatal("sa.pub: no PEM block")
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		t.Fatalf("sa.pub: %v", err)
	}
	if ep, ok := pub.(*ecdsa.PublicKey); !ok || !ep.Equal(&key.PublicKey) {
		t.Errorf("sa.pub is not sa.key's public key")
	}
}

func TestPKIKubeconfig(t *testing.T) {
	p := testPKI(t)
	const server = "https://127.0.0.1:40123"
	out, err := p.Kubeconfig("myk8s", server)
	if err != nil {
		t.Fatalf("Kubeconfig: %v", err)
	}

	// The text, read line by line as "key: value".
	fields := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "- ")
		if k, v, ok := strings.Cut(line, ": "); ok {
			fields[k] = append(fields[k], v)
		}
	}
	files := map[string]string{
		"certificate-authority-data": p.CACert(),
		"client-certificate-data":    p.AdminCert(),
		"client-key-data":            p.AdminKey(),
	}
	for k, path := range files {
		t.Run(k, func(t *testing.T) {
			if len(fields[k]) != 1 {
				t.Fatalf("%d %q lines, want 1", len(fields[k]), k)
			}
			got, err := base64.StdEncoding.DecodeString(fields[k][0])
			if err != nil {
				t.Fatalf("%s is not base64: %v", k, err)
			}
			want, _ := os.ReadFile(path)
			if !bytes.Equal(got, want) {
				t.Errorf("%s decodes to something other than %s", k, path)
			}
		})
	}
	want := map[string][]string{
		"apiVersion":      {"v1"},
		"kind":            {"Config"},
		"server":          {server},
		"name":            {"kind-myk8s", "kind-myk8s", "kind-myk8s"},
		"cluster":         {"kind-myk8s"},
		"user":            {"kind-myk8s"},
		"current-context": {"kind-myk8s"},
	}
	for k, v := range want {
		if d := cmp.Diff(v, fields[k], cmpOpts); d != "" {
			t.Errorf("kubeconfig %q lines mismatch (-want +got):\n%s", k, d)
		}
	}

	// And as client-go reads it.
	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatalf("clientcmd.Load: %v\n%s", err, out)
	}
	if cfg.CurrentContext != "kind-myk8s" {
		t.Errorf("current-context = %q", cfg.CurrentContext)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatalf("ClientConfig: %v", err)
	}
	if rc.Host != server {
		t.Errorf("Host = %q, want %q", rc.Host, server)
	}
	for name, pair := range map[string]struct {
		got  []byte
		path string
	}{"CAData": {rc.CAData, p.CACert()}, "CertData": {rc.CertData, p.AdminCert()}, "KeyData": {rc.KeyData, p.AdminKey()}} {
		want, _ := os.ReadFile(pair.path)
		if !bytes.Equal(pair.got, want) {
			t.Errorf("rest config %s differs from %s", name, pair.path)
		}
	}
}

func TestPKIKubeconfigMissingFiles(t *testing.T) {
	if _, err := (PKI{Dir: t.TempDir()}).Kubeconfig("myk8s", "https://127.0.0.1:6443"); err == nil {
		t.Error("Kubeconfig with no certificates: want an error")
	}
}

// TestPKIKubeletCerts: the apiserver's kubelet client certificate and a node's serving certificate are
// signed by the lab CA, for client and server use, with the node's name and address as SANs.
func TestPKIKubeletCerts(t *testing.T) {
	p := testPKI(t)
	if err := p.IssueKubeletServing("myk8s-worker", []net.IP{net.ParseIP("172.18.0.3"), net.ParseIP("fc00:f853:ccd:e793::3")}); err != nil {
		t.Fatalf("IssueKubeletServing: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.CACert()))
	client := readCert(t, p.KubeletClientCert())
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client certificate: %v", err)
	}
	if client.Subject.CommonName != KubeletClientCommonName || !slices.Equal(client.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("kubelet client subject = %v", client.Subject)
	}
	serving := readCert(t, p.KubeletServingCert("myk8s-worker"))
	for _, host := range []string{"myk8s-worker", "172.18.0.3", "fc00:f853:ccd:e793::3"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if err := serving.VerifyHostname("172.18.0.4"); err == nil {
		t.Error("serving certificate valid for another node's address")
	}
	if _, err := tls.LoadX509KeyPair(p.KubeletServingCert("myk8s-worker"), p.KubeletServingKey("myk8s-worker")); err != nil {
		t.Errorf("serving key pair: %v", err)
	}
}
