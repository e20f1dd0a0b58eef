package lab

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// The cluster DNS (docs/lab-dns.md): CoreDNS as kubeadm installs it, at the kube-dns Service's address
// (Plan.ClusterDNSIP), which the node agents give Pods as their nameserver.

//go:embed manifests/coredns.yaml
var corednsYAML string

// CoreDNSVersion is the pinned CoreDNS release (COREDNS_VERSION in hack/versions.env), the one kubeadm
// at KubeVersion installs.
const CoreDNSVersion = "v1.14.6"

// CoreDNSImage is the image the lab's coredns Deployment names, kubeadm's; the node agent maps it to the
// binary in Config.CoreDNSBin.
const CoreDNSImage = "registry.k8s.io/coredns/coredns:" + CoreDNSVersion

// nodeResolvConf is the nodes' resolv.conf, what Pods with dnsPolicy Default (CoreDNS's own among them)
// get. The lab runs no upstream resolver and sends no query outside the machine: 127.0.0.1, where nothing
// listens in a Pod's or a node's namespace, refuses at once instead of timing out.
const nodeResolvConf = `# The lab nodes' resolv.conf (the kubelets' resolvConf; docs/lab-dns.md): no upstream resolver, so
# that nothing is sent outside the machine. Cluster names resolve through the kube-dns Service.
nameserver 127.0.0.1
`

// CoreDNSManifest renders manifests/coredns.yaml for the plan: the Service at ClusterDNSIP, the Corefile
// for ClusterDomain, and nodeHosts (the lab's hosts file) as the ConfigMap's NodeHosts.
func CoreDNSManifest(p Plan, nodeHosts []byte) (string, error) {
	var indented strings.Builder
	for _, line := range strings.Split(strings.TrimRight(string(nodeHosts), "\n"), "\n") {
		indented.WriteString("    " + line + "\n")
	}
	var buf bytes.Buffer
	err := template.Must(template.New("coredns").Parse(corednsYAML)).Execute(&buf, map[string]string{
		"DNSIP": p.ClusterDNSIP().String(), "Domain": ClusterDomain, "Image": CoreDNSImage, "KubeVersion": KubeVersion,
		"NodeHosts": strings.TrimRight(indented.String(), "\n"),
	})
	return buf.String(), err
}

func (l *Lab) corednsBin() string { return filepath.Join(l.Plan.Config.CoreDNSBin, "coredns") }

// writeNodeResolvConf writes the nodes' resolv.conf the agents read.
func (l *Lab) writeNodeResolvConf() error {
	return os.WriteFile(l.State.NodeResolvConf(), []byte(nodeResolvConf), 0o644)
}

// installDNS applies the CoreDNS manifests but the Deployment: the kube-dns Service early, so that
// no other Service takes its address, and CoreDNS itself once the Service dataplane runs
// (installDNSDeployment).
func (l *Lab) installDNS(ctx context.Context) error {
	rest, _, err := l.corednsManifests()
	if err != nil {
		return err
	}
	return l.kubectlApply(ctx, rest)
}

// installDNSDeployment applies CoreDNS's Deployment. Started before kube-proxy has programmed the
// kubernetes Service, CoreDNS's first connection to the apiserver's ClusterIP leaves a conntrack
// entry without DNAT that its retries keep alive, and it waited ~30 s for the API (seen in runc labs,
// where kube-proxy starts later: its image is pulled first).
func (l *Lab) installDNSDeployment(ctx context.Context) error {
	_, deploy, err := l.corednsManifests()
	if err != nil {
		return err
	}
	return l.kubectlApply(ctx, deploy)
}

// corednsManifests are the CoreDNS manifests, split into the Deployment and the rest.
func (l *Lab) corednsManifests() (rest, deploy string, err error) {
	hosts, err := os.ReadFile(l.State.HostsFile())
	if err != nil {
		return "", "", err
	}
	m, err := CoreDNSManifest(l.Plan, hosts)
	if err != nil {
		return "", "", fmt.Errorf("coredns manifests: %w", err)
	}
	rest, deploy = splitDeployment(m)
	if deploy == "" {
		return "", "", errors.New("coredns manifests: no Deployment")
	}
	return rest, deploy, nil
}

// splitDeployment splits a multi-document manifest into its Deployment documents and the others.
func splitDeployment(m string) (rest, deploy string) {
	var r, d []string
	for _, doc := range strings.Split(m, "\n---\n") {
		if strings.Contains("\n"+doc, "\nkind: Deployment\n") {
			d = append(d, doc)
		} else {
			r = append(r, doc)
		}
	}
	return strings.Join(r, "\n---\n"), strings.Join(d, "\n---\n")
}
