package agent

import (
	"bytes"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's limits on a Pod's resolv.conf (k8s.io/kubernetes pkg/apis/core/validation: MaxDNSNameservers,
// MaxDNSSearchPaths, MaxDNSSearchListChars) and on one search domain (a DNS-1123 subdomain).
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	maxSearchDomainLength = 253
)

// DNSSettings is the kubelet's DNS configuration: clusterDNS, clusterDomain and the contents of its
// resolvConf (the node's resolv.conf, which Default pods get).
type DNSSettings struct {
	ClusterDNS    []netip.Addr
	ClusterDomain string
	NodeResolv    []byte
}

// ResolvConf is a Pod's resolver configuration, as the kubelet hands it to the container runtime.
type ResolvConf struct {
	Servers  []string
	Searches []string
	Options  []string
}

// Bytes renders r as containerd writes a sandbox's resolv.conf: the search line, one nameserver line per
// server, the options line. The kubelet's option order comes from a map (random); here it is sorted.
func (r ResolvConf) Bytes() []byte {
	var b bytes.Buffer
	if len(r.Searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(r.Searches, " "))
	}
	for _, s := range r.Servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(r.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(r.Options, " "))
	}
	return b.Bytes()
}

// ParseResolvConf reads nameservers, search domains and options as the kubelet's parseResolvConf does:
// comments skipped, the last search line wins (without "." and trailing dots), options merged by name.
func ParseResolvConf(b []byte) (ResolvConf, error) {
	r := ResolvConf{Servers: []string{}, Searches: []string{}, Options: []string{}}
	var errs []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) >= 2 {
				r.Servers = append(r.Servers, f[1])
			} else {
				errs = append(errs, "nameserver list is empty")
			}
		case "search":
			r.Searches = []string{}
			for _, s := range f[1:] {
				if s != "." {
					r.Searches = append(r.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			r.Options = mergeOptions(r.Options, f[1:])
		}
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("node resolv.conf: %s", strings.Join(errs, "; "))
	}
	return r, nil
}

// mergeOptions merges name[:value] options, later ones replacing earlier ones of the same name (the
// kubelet's appendOptions and mergeDNSOptions), sorted by name.
func mergeOptions(have, add []string) []string {
	m := map[string]string{}
	for _, o := range append(append([]string(nil), have...), add...) {
		m[strings.SplitN(o, ":", 2)[0]] = o
	}
	out := make([]string, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}

func omitDuplicates(in []string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// PodDNS is the kubelet's GetPodDNS (pkg/kubelet/network/dns): the resolver configuration for pod's
// containers from its dnsPolicy and dnsConfig. warnings are what the kubelet reports as DNSConfigForming
// or MissingClusterDNS events (limits exceeded, no cluster DNS, an unknown policy).
//   - None: only dnsConfig;
//   - ClusterFirst (not hostNetwork) and ClusterFirstWithHostNet: the cluster DNS servers, the search
//     path <ns>.svc.<domain> svc.<domain> <domain> followed by the node's, options ndots:5; without
//     cluster DNS, as Default;
//   - Default, and ClusterFirst on a hostNetwork pod: the node's resolv.conf;
//   - an unknown policy: ClusterFirst;
//
// then dnsConfig is appended (servers and searches without duplicates, options merged by name) and the
// result cut to 3 nameservers, 32 search domains of at most 253 characters and 2048 characters in all.
func PodDNS(s DNSSettings, pod *corev1.Pod) (ResolvConf, []string, error) {
	var warnings []string
	node, err := ParseResolvConf(s.NodeResolv)
	if err != nil {
		return ResolvConf{}, nil, err
	}
	r := node
	cluster := false
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone:
		r = ResolvConf{}
	case corev1.DNSClusterFirstWithHostNet:
		cluster = true
	case corev1.DNSClusterFirst, "":
		cluster = !pod.Spec.HostNetwork // a hostNetwork pod falls back to Default
	case corev1.DNSDefault:
	default:
		warnings = append(warnings, fmt.Sprintf("invalid DNSPolicy=%v: falling back to %s", pod.Spec.DNSPolicy, corev1.DNSClusterFirst))
		cluster = true
	}
	if cluster && len(s.ClusterDNS) == 0 {
		warnings = append(warnings, fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", corev1.DNSClusterFirst, corev1.DNSDefault))
		cluster = false
	}
	if cluster {
		r.Servers = []string{}
		for _, a := range s.ClusterDNS {
			r.Servers = append(r.Servers, a.String())
		}
		if s.ClusterDomain != "" {
			d := s.ClusterDomain
			r.Searches = omitDuplicates(append([]string{pod.Namespace + ".svc." + d, "svc." + d, d}, r.Searches...))
		}
		r.Options = []string{"ndots:5"}
	}
	// Default keeps the node's configuration as parsed: the lab always gives the kubelet a resolvConf, so
	// the kubelet's 127.0.0.1 fallback for an empty one does not arise.
	if c := pod.Spec.DNSConfig; c != nil {
		r.Servers = omitDuplicates(append(r.Servers, c.Nameservers...))
		r.Searches = omitDuplicates(append(r.Searches, c.Searches...))
		var opts []string
		for _, o := range c.Options {
			if o.Value != nil && *o.Value != "" {
				opts = append(opts, o.Name+":"+*o.Value)
			} else {
				opts = append(opts, o.Name)
			}
		}
		r.Options = mergeOptions(r.Options, opts)
	}
	if len(r.Servers) > maxDNSNameservers {
		r.Servers = r.Servers[:maxDNSNameservers]
		warnings = append(warnings, "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: "+strings.Join(r.Servers, " "))
	}
	var cut bool
	r.Searches, cut = fitSearches(r.Searches)
	if cut {
		warnings = append(warnings, "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: "+strings.Join(r.Searches, " "))
	}
	return r, warnings, nil
}

// fitSearches applies the kubelet's formDNSSearchFitsLimits: at most 32 domains, none longer than 253
// characters, and the line at most 2048 characters (cutting from the end).
func fitSearches(in []string) ([]string, bool) {
	cut := false
	s := append([]string(nil), in...)
	if len(s) > maxDNSSearchPaths {
		s, cut = s[:maxDNSSearchPaths], true
	}
	kept := s[:0]
	for _, d := range s {
		if len(d) > maxSearchDomainLength {
			cut = true
			continue
		}
		kept = append(kept, d)
	}
	s = kept
	if n := len(strings.Join(s, " ")); n > maxDNSSearchListChars {
		cutLen, cutNum := 0, 0
		for i := len(s) - 1; i >= 0; i-- {
			cutLen += len(s[i]) + 1
			cutNum++
			if n-cutLen <= maxDNSSearchListChars {
				break
			}
		}
		s, cut = s[:len(s)-cutNum], true
	}
	if s == nil {
		s = []string{}
	}
	return s, cut
}

// Headers the kubelet starts a Pod's /etc/hosts with.
const (
	managedHostsHeader            = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// PodHostname is the kubelet's GeneratePodHostNameAndDomain: the container's hostname (hostnameOverride,
// else spec.hostname, else the pod's name, cut to 63 characters without a trailing '-' or '.') and, with a
// subdomain, its domain <subdomain>.<namespace>.svc.<clusterDomain>. The apiserver validated the names.
func PodHostname(pod *corev1.Pod, clusterDomain string) (hostname, domain string) {
	if pod.Spec.HostnameOverride != nil {
		return truncateHostname(*pod.Spec.HostnameOverride), ""
	}
	hostname = pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	hostname = truncateHostname(hostname)
	if pod.Spec.Subdomain != "" {
		domain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	return hostname, domain
}

func truncateHostname(h string) string {
	if len(h) <= 63 {
		return h
	}
	return strings.TrimRight(h[:63], "-.")
}

// PodHosts is the /etc/hosts the kubelet writes for a Pod (kubelet_pods.go's ensureHostsFile): for a
// hostNetwork pod the node's hosts file under a header, otherwise localhost entries and one line per pod
// IP naming the pod's hostname (with its FQDN first when it has a subdomain); then hostAliases, one line
// per IP.
func PodHosts(pod *corev1.Pod, nodeHosts []byte, podIPs []string, hostname, domain string) []byte {
	var b bytes.Buffer
	if pod.Spec.HostNetwork {
		b.WriteString(managedHostsHeaderHostNetwork)
		b.Write(nodeHosts)
	} else {
		b.WriteString(managedHostsHeader)
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\n")
		b.WriteString("fe00::0\tip6-mcastprefix\n")
		b.WriteString("fe00::1\tip6-allnodes\n")
		b.WriteString("fe00::2\tip6-allrouters\n")
		for _, ip := range podIPs {
			if domain != "" {
				fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
			}
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.Bytes()
}

// MountsEtcHosts is the kubelet's rule for giving a container the managed /etc/hosts: the pod has an IP
// or the host's network, and the container does not mount a volume at /etc/hosts itself.
func MountsEtcHosts(pod *corev1.Pod, podIPs []string, c corev1.Container) bool {
	if len(podIPs) == 0 && !pod.Spec.HostNetwork {
		return false
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/hosts" {
			return false
		}
	}
	return true
}
