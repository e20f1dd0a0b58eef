package conntrack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

// Sysctl is one conntrack setting: a file under /proc/sys/net/netfilter/ and its value.
type Sysctl struct {
	Name  string // e.g. nf_conntrack_tcp_timeout_established
	Value int
	// Raise only writes Value when the current value is lower (nf_conntrack_max, as kube-proxy).
	Raise bool
}

// Sysctls returns the settings a KubeProxyConfiguration's conntrack section asks for, as
// kube-proxy's conntrack.SetSysctls computes them: nf_conntrack_max to maxPerCore × CPUs but at
// least min (never lowered; maxPerCore 0 leaves it alone), the timeouts that are above zero in
// seconds, tcp_be_liberal when true. Fields left unset change nothing (kube-proxy would first
// default maxPerCore to 32768 and min to 131072; ironlb leaves the node's values unless asked).
// hashsize is the nf_conntrack module's hash table size kube-proxy raises to max/4 (0: leave).
func Sysctls(c kubeproxyv1alpha1.KubeProxyConntrackConfiguration, numCPU int) (out []Sysctl, hashsize int) {
	if c.MaxPerCore != nil && *c.MaxPerCore > 0 {
		max := int(*c.MaxPerCore) * numCPU
		if c.Min != nil && int(*c.Min) > max {
			max = int(*c.Min)
		}
		out = append(out, Sysctl{Name: "nf_conntrack_max", Value: max, Raise: true})
		hashsize = max / 4
	}
	if d := c.TCPEstablishedTimeout; d != nil && d.Seconds() >= 1 {
		out = append(out, Sysctl{Name: "nf_conntrack_tcp_timeout_established", Value: int(d.Seconds())})
	}
	if d := c.TCPCloseWaitTimeout; d != nil && d.Seconds() >= 1 {
		out = append(out, Sysctl{Name: "nf_conntrack_tcp_timeout_close_wait", Value: int(d.Seconds())})
	}
	if c.TCPBeLiberal {
		out = append(out, Sysctl{Name: "nf_conntrack_tcp_be_liberal", Value: 1})
	}
	if d := c.UDPTimeout.Duration; d.Seconds() >= 1 {
		out = append(out, Sysctl{Name: "nf_conntrack_udp_timeout", Value: int(d.Seconds())})
	}
	if d := c.UDPStreamTimeout.Duration; d.Seconds() >= 1 {
		out = append(out, Sysctl{Name: "nf_conntrack_udp_timeout_stream", Value: int(d.Seconds())})
	}
	return out, hashsize
}

// WriteSysctls writes settings under dir (/proc/sys/net/netfilter) and raises the hash table size
// in hashsizeFile (/sys/module/nf_conntrack/parameters/hashsize) to hashsize if lower (0: leave).
func WriteSysctls(dir, hashsizeFile string, settings []Sysctl, hashsize int) error {
	var errs []error
	for _, s := range settings {
		p := filepath.Join(dir, s.Name)
		if s.Raise {
			if cur, err := readInt(p); err == nil && cur >= s.Value {
				continue
			}
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(s.Value)), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("setting %s to %d: %w", s.Name, s.Value, err))
		}
	}
	if hashsize > 0 {
		if cur, err := readInt(hashsizeFile); err != nil || cur < hashsize {
			if err := os.WriteFile(hashsizeFile, []byte(strconv.Itoa(hashsize)), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("setting the conntrack hashsize to %d: %w", hashsize, err))
			}
		}
	}
	return errors.Join(errs...)
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
