package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is the lab's certificate authority and the keys the control plane needs, written under a
// directory as kubeadm lays out /etc/kubernetes/pki.
type PKI struct{ Dir string }

func (p PKI) path(name string) string { return filepath.Join(p.Dir, name) }

// CACert, ... are the files Generate writes.
func (p PKI) CACert() string        { return p.path("ca.crt") }
func (p PKI) CAKey() string         { return p.path("ca.key") }
func (p PKI) APIServerCert() string { return p.path("apiserver.crt") }
func (p PKI) APIServerKey() string  { return p.path("apiserver.key") }
func (p PKI) AdminCert() string     { return p.path("admin.crt") }
func (p PKI) AdminKey() string      { return p.path("admin.key") }
func (p PKI) SAKey() string         { return p.path("sa.key") }
func (p PKI) SAPub() string         { return p.path("sa.pub") }

// KubeletClientCert and KubeletClientKey are the apiserver's client certificate for the kubelet API
// (kubeadm's apiserver-kubelet-client), in group system:masters.
func (p PKI) KubeletClientCert() string { return p.path("apiserver-kubelet-client.crt") }
func (p PKI) KubeletClientKey() string  { return p.path("apiserver-kubelet-client.key") }

// KubeletServingCert and KubeletServingKey are node's kubelet API serving certificate (IssueKubeletServing).
func (p PKI) KubeletServingCert(node string) string { return p.path("kubelet-" + node + ".crt") }
func (p PKI) KubeletServingKey(node string) string  { return p.path("kubelet-" + node + ".key") }

// KubeletClientCommonName is the kubelet client certificate's subject; the lab's kubelet API accepts it.
const KubeletClientCommonName = "kube-apiserver-kubelet-client"

// Generate creates a CA, the apiserver's serving certificate for sans, an admin client certificate
// (system:masters) and the service-account signing key pair. ECDSA P-256 keeps it fast.
func (p PKI) Generate(dnsNames []string, ips []net.IP) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ironlb-lab-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if err := writeCert(p.CACert(), caDER); err != nil {
		return err
	}
	if err := writeKey(p.CAKey(), caKey); err != nil {
		return err
	}
	if err := p.issue(ca, caKey, p.APIServerCert(), p.APIServerKey(), pkix.Name{CommonName: "kube-apiserver"},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, dnsNames, ips); err != nil {
		return err
	}
	if err := p.issue(ca, caKey, p.AdminCert(), p.AdminKey(), pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil); err != nil {
		return err
	}
	if err := p.issue(ca, caKey, p.KubeletClientCert(), p.KubeletClientKey(),
		pkix.Name{CommonName: KubeletClientCommonName, Organization: []string{"system:masters"}},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil); err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(p.SAKey(), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(p.SAPub(), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// serial numbers the certificates apart (the CA is serial 1).
func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}

// issue signs a new ECDSA key's certificate with the CA and writes both.
func (p PKI) issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string, subj pkix.Name,
	usage []x509.ExtKeyUsage, dns []string, ips []net.IP) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	t := &x509.Certificate{
		SerialNumber: sn, Subject: subj, NotBefore: now, NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usage,
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, t, ca, &k.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("issuing %s: %w", certPath, err)
	}
	if err := writeCert(certPath, der); err != nil {
		return err
	}
	return writeKey(keyPath, k)
}

// IssueKubeletServing writes node's kubelet API serving certificate, signed by the lab's CA, for the
// node's name and addresses (the apiserver dials the node's InternalIP and checks it against the CA).
func (p PKI) IssueKubeletServing(node string, ips []net.IP) error {
	ca, caKey, err := p.loadCA()
	if err != nil {
		return err
	}
	return p.issue(ca, caKey, p.KubeletServingCert(node), p.KubeletServingKey(node), pkix.Name{CommonName: node + "@kubelet"},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []string{node}, ips)
}

func (p PKI) loadCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(p.CACert())
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(p.CAKey())
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, fmt.Errorf("lab CA in %s: not PEM", p.Dir)
	}
	ca, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("lab CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("lab CA key: %w", err)
	}
	return ca, key, nil
}

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// Kubeconfig renders an admin kubeconfig for server with the PKI's client certificate embedded.
func (p PKI) Kubeconfig(cluster, server string) ([]byte, error) {
	ca, err := os.ReadFile(p.CACert())
	if err != nil {
		return nil, err
	}
	crt, err := os.ReadFile(p.AdminCert())
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(p.AdminKey())
	if err != nil {
		return nil, err
	}
	b64 := base64.StdEncoding.EncodeToString
	ctx := "kind-" + cluster // kind's naming, as in the seed's prompt (kind-myk8s)
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
users:
- name: %[1]s
  user:
    client-certificate-data: %[4]s
    client-key-data: %[5]s
contexts:
- name: %[1]s
  context:
    cluster: %[1]s
    user: %[1]s
current-context: %[1]s
`, ctx, server, b64(ca), b64(crt), b64(key)), nil
}
