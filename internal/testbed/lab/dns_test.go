package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The kube-dns Service sits at the service CIDR's tenth address, kubeadm's choice, in every IP family.
func TestClusterDNSIP(t *testing.T) {
	for _, tc := range []struct{ family, want string }{
		{IPFamilyIPv4, "10.200.1.10"},
		{IPFamilyDual, "10.200.1.10"},
		{IPFamilyIPv6, "fd00:10:200:1::a"},
	} {
		c := DefaultConfig()
		c.IPFamily = tc.family
		p, err := NewPlan(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ClusterDNSIP().String(); got != tc.want {
			t.Errorf("%s: ClusterDNSIP() = %s, want %s", tc.family, got, tc.want)
		}
	}
}

func TestCoreDNSManifest(t *testing.T) {
	c := DefaultConfig()
	c.IPFamily = IPFamilyIPv6
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	hosts := "127.0.0.1\tlocalhost\n172.18.0.2\tmyk8s-control-plane\nfd00:172:18::2\tmyk8s-control-plane\n"
	m, err := CoreDNSManifest(p, []byte(hosts))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	var svc corev1.Service
	var cm corev1.ConfigMap
	var dep appsv1.Deployment
	for _, doc := range strings.Split(m, "\n---\n") {
		doc += "\n" // the separator took the document's last newline
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("document does not parse: %v\n%s", err, doc)
		}
		kinds[meta.Kind] = true
		var into any
		switch meta.Kind {
		case "Service":
			into = &svc
		case "ConfigMap":
			into = &cm
		case "Deployment":
			into = &dep
		default:
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s: %v", meta.Kind, err)
		}
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"} {
		if !kinds[k] {
			t.Errorf("no %s in the manifest", k)
		}
	}
	if svc.Name != "kube-dns" || svc.Namespace != "kube-system" || svc.Spec.ClusterIP != "fd00:10:200:1::a" {
		t.Errorf("Service %s/%s at %q, want kube-system/kube-dns at fd00:10:200:1::a", svc.Namespace, svc.Name, svc.Spec.ClusterIP)
	}
	var ports []string
	for _, sp := range svc.Spec.Ports {
		ports = append(ports, string(sp.Protocol)+"/"+sp.TargetPort.String())
	}
	if got := strings.Join(ports, " "); got != "UDP/53 TCP/53 TCP/9153" {
		t.Errorf("Service ports %s, want UDP/53 TCP/53 TCP/9153", got)
	}
	if cm.Data["NodeHosts"] != hosts {
		t.Errorf("NodeHosts = %q, want the lab's hosts file %q", cm.Data["NodeHosts"], hosts)
	}
	cf := cm.Data["Corefile"]
	for _, want := range []string{"kubernetes cluster.local in-addr.arpa ip6.arpa {", "hosts /etc/coredns/NodeHosts {", "prometheus :9153", "ready\n", "loop\n"} {
		if !strings.Contains(cf, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, cf)
		}
	}
	if strings.Contains(cf, "forward") {
		t.Errorf("Corefile forwards (the lab sends no query outside the machine):\n%s", cf)
	}
	if *dep.Spec.Replicas != 2 || dep.Spec.Template.Spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("Deployment: %d replicas, dnsPolicy %s; want 2, Default", *dep.Spec.Replicas, dep.Spec.Template.Spec.DNSPolicy)
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	if ctr.Image != CoreDNSImage || ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/ready" || ctr.ReadinessProbe.HTTPGet.Port.String() != "readiness-probe" {
		t.Errorf("container: image %s, readiness %+v", ctr.Image, ctr.ReadinessProbe)
	}
}

// The CoreDNS the lab looks for is the one hack/coredns-binary.sh builds: the same pin, the same cache path.
func TestCoreDNSVersionPinned(t *testing.T) {
	b, err := os.ReadFile("../../../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	var pin string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "COREDNS_VERSION="); ok {
			pin = strings.TrimSpace(v)
		}
	}
	if pin != CoreDNSVersion {
		t.Errorf("hack/versions.env pins COREDNS_VERSION=%q, the lab expects CoreDNSVersion %q", pin, CoreDNSVersion)
	}
	if want := filepath.Join("coredns", CoreDNSVersion, "bin"); !strings.HasSuffix(DefaultCoreDNSBin(), want) {
		t.Errorf("DefaultCoreDNSBin() = %s, want it to end in %s as hack/coredns-binary.sh's cache does", DefaultCoreDNSBin(), want)
	}
}

// lab up applies CoreDNS's Deployment after the Service dataplane runs, the rest at once: the split
// keeps every document once, and only the Deployment apart.
func TestSplitDeployment(t *testing.T) {
	p, err := NewPlan(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	m, err := CoreDNSManifest(p, []byte("127.0.0.1\tlocalhost\n"))
	if err != nil {
		t.Fatal(err)
	}
	rest, deploy := splitDeployment(m)
	kinds := func(s string) []string {
		var out []string
		for _, doc := range strings.Split(s, "\n---\n") {
			for _, l := range strings.Split(doc, "\n") {
				if k, ok := strings.CutPrefix(l, "kind: "); ok {
					out = append(out, k)
				}
			}
		}
		return out
	}
	if got := kinds(deploy); !slices.Equal(got, []string{"Deployment"}) {
		t.Errorf("deployment part has kinds %v", got)
	}
	if got := kinds(rest); !slices.Equal(got, []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Service"}) {
		t.Errorf("the rest has kinds %v", got)
	}
	if len(rest)+len(deploy)+len("\n---\n") != len(m) {
		t.Errorf("split lost or added bytes: %d + %d vs %d", len(rest), len(deploy), len(m))
	}
}
