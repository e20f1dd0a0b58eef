package e2e

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// podExec runs argv in a running pod's container with `kubectl exec`, as a user would: the program is
// the image's (the dns pods run agnhost's image, which carries sh, cat, dig, getent and curl).
func podExec(t *testing.T, ns, pod string, argv ...string) (string, error) {
	t.Helper()
	out, err := runErr(ironlb, append([]string{"lab", "kubectl", "exec", "-n", ns, pod, "--"}, argv...)...)
	if err != nil {
		return out, fmt.Errorf("%s in %s/%s: %v: %s", strings.Join(argv, " "), ns, pod, err, out)
	}
	return out, nil
}

func sortedFields(s string) string {
	f := strings.Fields(s)
	sort.Strings(f)
	return strings.Join(f, " ")
}

// The cluster DNS as kind has it: CoreDNS behind kube-dns at the service CIDR's tenth address, and each
// pod's /etc/resolv.conf and /etc/hosts as the kubelet writes them (docs/lab-dns.md). Names are asked with
// dig and getent from inside the pods' namespaces.
func TestClusterDNS(t *testing.T) {
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatalf("dig is missing (hack/deps.sh installs bind9-dnsutils): %v", err)
	}
	if ip := strings.TrimSpace(kubectl(t, "get", "svc", "-n", "kube-system", "kube-dns", "-o", "jsonpath={.spec.clusterIP}")); ip != "10.200.1.10" {
		t.Fatalf("kube-dns Service at %q, want 10.200.1.10 (the service CIDR's tenth address)", ip)
	}
	kubectlApply(t, "testdata/dns.yaml")
	t.Cleanup(func() { kubectl(t, "delete", "-f", "testdata/dns.yaml", "--wait=false", "--ignore-not-found") })
	kubectl(t, "rollout", "status", "-n", "dns-e2e", "deployment/dnsweb", "--timeout=90s")
	waitReady(t, "-n", "dns-e2e", "pod/dnsclient", "pod/dnsnone", "pod/dnshostnet")
	clusterIP := strings.TrimSpace(kubectl(t, "get", "svc", "-n", "dns-e2e", "dnsweb", "-o", "jsonpath={.spec.clusterIP}"))
	webIPs := sortedFields(kubectl(t, "get", "pods", "-n", "dns-e2e", "-l", "app=dnsweb", "-o", `jsonpath={range .items[*]}{.status.podIP}{" "}{end}`))
	clientIP := strings.TrimSpace(kubectl(t, "get", "pod", "-n", "dns-e2e", "dnsclient", "-o", "jsonpath={.status.podIP}"))

	t.Run("ClusterFirst resolv.conf", func(t *testing.T) {
		got, err := podExec(t, "dns-e2e", "dnsclient", "cat", "/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		want := "search dns-e2e.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.200.1.10\noptions ndots:5\n"
		if got != want {
			t.Errorf("/etc/resolv.conf:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("ClusterIP Service", func(t *testing.T) {
		eventually(t, 30*time.Second, "dnsweb resolves to its ClusterIP", func() error {
			out, err := podExec(t, "dns-e2e", "dnsclient", "dig", "+short", "+time=2", "+tries=1", "dnsweb.dns-e2e.svc.cluster.local", "A")
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != clusterIP {
				return fmt.Errorf("dig dnsweb.dns-e2e.svc.cluster.local: %q, want %s", out, clusterIP)
			}
			return nil
		})
		// The short name through the search path and ndots:5, as a program's resolver (glibc) does it.
		out, err := podExec(t, "dns-e2e", "dnsclient", "getent", "hosts", "dnsweb")
		if err != nil || !strings.HasPrefix(out, clusterIP+" ") || !strings.Contains(out, "dnsweb.dns-e2e.svc.cluster.local") {
			t.Errorf("getent hosts dnsweb: %q %v, want %s dnsweb.dns-e2e.svc.cluster.local", out, err, clusterIP)
		}
		// and by name through the Service to a pod.
		body, err := podExec(t, "dns-e2e", "dnsclient", "curl", "-s", "--max-time", "3", "http://dnsweb")
		if err != nil || !strings.Contains(webIPs, hostIPOf(body)) {
			t.Errorf("curl http://dnsweb from dnsclient: %v\n%s", err, body)
		}
	})
	t.Run("headless Service", func(t *testing.T) {
		eventually(t, 30*time.Second, "dnsweb-headless resolves to the pods' IPs", func() error {
			out, err := podExec(t, "dns-e2e", "dnsclient", "dig", "+short", "+time=2", "+tries=1", "dnsweb-headless.dns-e2e.svc.cluster.local", "A")
			if err != nil {
				return err
			}
			if got := sortedFields(out); got != webIPs {
				return fmt.Errorf("dig dnsweb-headless: %q, want the pods' IPs %q", got, webIPs)
			}
			return nil
		})
	})
	t.Run("ExternalName Service (seed 001)", func(t *testing.T) {
		out, err := podExec(t, "dns-e2e", "dnsclient", "dig", "+short", "+time=2", "+tries=1", "my-service.dns-e2e.svc.cluster.local", "CNAME")
		if err != nil || strings.TrimSpace(out) != "my.database.example.com." {
			t.Errorf("dig my-service CNAME: %q %v, want my.database.example.com.", out, err)
		}
	})
	t.Run("node names", func(t *testing.T) {
		// Through CoreDNS's NodeHosts, as kind's pods reach Docker's DNS: not in the pod's /etc/hosts.
		out, err := podExec(t, "dns-e2e", "dnsclient", "dig", "+short", "+time=2", "+tries=1", "myk8s-worker", "A")
		if err != nil || strings.TrimSpace(out) != "172.18.0.3" {
			t.Errorf("dig myk8s-worker: %q %v, want 172.18.0.3", out, err)
		}
	})
	t.Run("ClusterFirstWithHostNet on a hostNetwork pod", func(t *testing.T) {
		got, err := podExec(t, "dns-e2e", "dnshostnet", "cat", "/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		if want := "search dns-e2e.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.200.1.10\noptions ndots:5\n"; got != want {
			t.Errorf("/etc/resolv.conf:\n%s\nwant:\n%s", got, want)
		}
		// From the node's network namespace, through the Service dataplane's rules for local traffic.
		out, err := podExec(t, "dns-e2e", "dnshostnet", "getent", "hosts", "dnsweb")
		if err != nil || !strings.HasPrefix(out, clusterIP+" ") {
			t.Errorf("getent hosts dnsweb on the host network: %q %v, want %s", out, err, clusterIP)
		}
		hosts, err := podExec(t, "dns-e2e", "dnshostnet", "cat", "/etc/hosts")
		if err != nil || !strings.HasPrefix(hosts, "# Kubernetes-managed hosts file (host network).\n") || !strings.Contains(hosts, "\tmyk8s-control-plane\n") {
			t.Errorf("/etc/hosts of a hostNetwork pod: want the node's under the host-network header, got %v:\n%s", err, hosts)
		}
	})
	t.Run("dnsPolicy None", func(t *testing.T) {
		got, err := podExec(t, "dns-e2e", "dnsnone", "cat", "/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		want := "search ns1.svc.cluster-domain.example my.dns.search.suffix\nnameserver 10.200.1.10\noptions edns0 ndots:2\n"
		if got != want {
			t.Errorf("/etc/resolv.conf:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("hostAliases and the managed /etc/hosts", func(t *testing.T) {
		got, err := podExec(t, "dns-e2e", "dnsclient", "cat", "/etc/hosts")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"# Kubernetes-managed hosts file.\n", clientIP + "\tdnsclient\n",
			"\n# Entries added by HostAliases.\n203.0.113.7\tfoo.remote\tbar.remote\n"} {
			if !strings.Contains(got, want) {
				t.Errorf("/etc/hosts lacks %q:\n%s", want, got)
			}
		}
		if out, err := podExec(t, "dns-e2e", "dnsclient", "getent", "hosts", "bar.remote"); err != nil || !strings.HasPrefix(out, "203.0.113.7 ") {
			t.Errorf("getent hosts bar.remote: %q %v, want 203.0.113.7", out, err)
		}
	})
}

// hostIPOf extracts the first IP: line of whoami's answer that is not loopback.
func hostIPOf(body string) string {
	for _, l := range strings.Split(body, "\n") {
		if ip, ok := strings.CutPrefix(l, "IP: "); ok && ip != "127.0.0.1" && ip != "::1" && !strings.HasPrefix(ip, "fe80") {
			return strings.TrimSpace(ip)
		}
	}
	return "none"
}
