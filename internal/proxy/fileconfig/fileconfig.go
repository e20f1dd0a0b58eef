// Package fileconfig reads `ironlb proxy --config`: a kube-proxy configuration file
// (KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1, decoded into k8s.io/kube-proxy's own
// types) and says what it sets in terms of the proxy's flags. Pure: bytes in, settings out.
//
// A field is applied where ironlb has the setting (see Settings); a field of another mode's section
// (iptables, ipvs, winkernel) or one that only tunes kube-proxy's own process is ignored with a
// note, as kube-proxy ignores the other modes' sections; a field ironlb cannot honour, set to
// anything but its zero value, is an error naming the field, and so is a field kube-proxy does not
// know (strict decoding).
package fileconfig

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Settings are the file's values that map to the proxy's flags; nil means not set in the file.
type Settings struct {
	Node              *string        // hostnameOverride (--node)
	Kubeconfig        *string        // clientConnection.kubeconfig (--kubeconfig)
	BindAddress       *string        // bindAddress (--bind-address)
	HealthzAddr       *string        // healthzBindAddress (--healthz-bind-address)
	MetricsAddr       *string        // metricsBindAddress (--metrics-bind-address)
	ClusterCIDRs      []string       // clusterCIDR with detectLocalMode ClusterCIDR (--cluster-cidr)
	NodeCIDR          bool           // detectLocalMode NodeCIDR: the node's spec.podCIDRs (--cluster-cidr unset)
	NodePortAddresses []string       // nodePortAddresses (--nodeport-addresses)
	MasqueradeAll     *bool          // nftables.masqueradeAll (--masquerade-all)
	MasqueradeBit     *int           // nftables.masqueradeBit (--masquerade-bit)
	SyncPeriod        *time.Duration // nftables.syncPeriod (--sync-period)
	MinSyncPeriod     *time.Duration // nftables.minSyncPeriod (--min-sync-period)
	Conntrack         kubeproxyv1alpha1.KubeProxyConntrackConfiguration
	// Ignored names the fields that were set and are not used, each with why.
	Ignored []string
}

// ignored are the fields ironlb leaves alone whatever their value: other modes' settings (kube-proxy
// ignores them too outside their mode) and tuning of kube-proxy's own process and client.
var ignored = map[string]string{
	"iptables":                            "iptables mode's settings",
	"ipvs":                                "ipvs mode's settings",
	"winkernel":                           "Windows' settings",
	"windowsRunAsService":                 "Windows' settings",
	"configSyncPeriod":                    "informers watch without a resync",
	"clientConnection.qps":                "the proxy's client has its own limits",
	"clientConnection.burst":              "the proxy's client has its own limits",
	"clientConnection.contentType":        "the proxy's client picks its own",
	"clientConnection.acceptContentTypes": "the proxy's client picks its own",
	"logging":                             "use --log-level and --log-format",
	"oomScoreAdj":                         "set it in the Pod's spec",
	"portRange":                           "unused by kube-proxy too",
	"enableProfiling":                     "no profiling endpoint",
	"showHiddenMetricsForVersion":         "no hidden metrics",
	"bindAddressHardFail":                 "a bind failure always stops the proxy",
}

// Parse decodes a KubeProxyConfiguration.
func Parse(data []byte) (*Settings, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	if raw == nil {
		return nil, errors.New("empty configuration")
	}
	var c kubeproxyv1alpha1.KubeProxyConfiguration
	// encoding/json matches names case-insensitively and names no path; kube-proxy's decoder is
	// exact. So the fields are checked against the type first, by their full path.
	if unknown := unknownFields(raw, reflect.TypeOf(c), ""); len(unknown) > 0 {
		slices.Sort(unknown)
		var errs []error
		for _, u := range unknown {
			errs = append(errs, fmt.Errorf("unknown field %q (not in KubeProxyConfiguration %s)", u, kubeproxyv1alpha1.SchemeGroupVersion))
		}
		return nil, errors.Join(errs...)
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("KubeProxyConfiguration: %w", err)
	}
	if c.APIVersion != kubeproxyv1alpha1.SchemeGroupVersion.String() || c.Kind != "KubeProxyConfiguration" {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s, KubeProxyConfiguration", c.APIVersion, c.Kind, kubeproxyv1alpha1.SchemeGroupVersion)
	}

	s := &Settings{}
	var errs []error
	unsupported := func(field, why string) {
		errs = append(errs, fmt.Errorf("%s: not supported by ironlb proxy: %s", field, why))
	}
	for _, path := range setFields(raw, "") {
		if why, ok := ignoredWhy(path); ok {
			s.Ignored = append(s.Ignored, path+" ("+why+")")
		}
	}
	slices.Sort(s.Ignored)
	s.Ignored = slices.Compact(s.Ignored)

	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	s.Node = str(c.HostnameOverride)
	s.Kubeconfig = str(c.ClientConnection.Kubeconfig)
	s.BindAddress = str(c.BindAddress)
	s.HealthzAddr = str(c.HealthzBindAddress)
	s.MetricsAddr = str(c.MetricsBindAddress)
	if len(c.FeatureGates) > 0 {
		names := make([]string, 0, len(c.FeatureGates))
		for k := range c.FeatureGates {
			names = append(names, k)
		}
		slices.Sort(names)
		unsupported("featureGates", "kube-proxy's feature gates ("+strings.Join(names, ", ")+") do not apply")
	}
	switch c.Mode {
	case "", "nftables":
	default:
		unsupported("mode", fmt.Sprintf("%q: ironlb programs nftables only (mode: nftables)", c.Mode))
	}
	switch c.DetectLocalMode {
	case "", "ClusterCIDR":
		for _, p := range strings.Split(c.ClusterCIDR, ",") {
			if p = strings.TrimSpace(p); p != "" {
				s.ClusterCIDRs = append(s.ClusterCIDRs, p)
			}
		}
	case "NodeCIDR":
		s.NodeCIDR = true
	default:
		unsupported("detectLocalMode", fmt.Sprintf("%q: ironlb detects local traffic by ClusterCIDR or NodeCIDR", c.DetectLocalMode))
	}
	if c.DetectLocal.BridgeInterface != "" {
		unsupported("detectLocal.bridgeInterface", "local traffic is detected by CIDR")
	}
	if c.DetectLocal.InterfaceNamePrefix != "" {
		unsupported("detectLocal.interfaceNamePrefix", "local traffic is detected by CIDR")
	}
	if len(c.NodePortAddresses) > 0 {
		s.NodePortAddresses = slices.Clone(c.NodePortAddresses)
	}
	nft := c.NFTables
	if nft.MasqueradeAll {
		s.MasqueradeAll = &nft.MasqueradeAll
	}
	if nft.MasqueradeBit != nil {
		b := int(*nft.MasqueradeBit)
		s.MasqueradeBit = &b
	}
	if d := nft.SyncPeriod.Duration; d != 0 {
		s.SyncPeriod = &d
	}
	if d := nft.MinSyncPeriod.Duration; d != 0 {
		s.MinSyncPeriod = &d
	}
	s.Conntrack = c.Conntrack
	return s, errors.Join(errs...)
}

// unknownFields lists the paths in v (decoded JSON) that t (a struct, by its json tags) lacks.
func unknownFields(v any, t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m, ok := v.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil // a value: its type is checked by the decoder; a map's keys are free
	}
	fields := map[string]reflect.Type{}
	var collect func(t reflect.Type)
	collect = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				collect(f.Type)
				continue
			}
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fields[name] = f.Type
		}
	}
	collect(t)
	var out []string
	for k, e := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		ft, ok := fields[k]
		if !ok {
			out = append(out, p)
			continue
		}
		out = append(out, unknownFields(e, ft, p)...)
	}
	return out
}

// ignoredWhy says whether a set field is ignored, by its path or a parent's.
func ignoredWhy(path string) (string, bool) {
	for p := path; p != ""; {
		if why, ok := ignored[p]; ok {
			return why, true
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return "", false
}

// setFields lists the dotted paths of the leaves of a decoded document whose values are not zero
// (null, "", 0, false, "0s", empty list or map): a file dumped with every field at its zero
// value, as kubeadm writes one, sets nothing.
func setFields(v any, prefix string) []string {
	switch x := v.(type) {
	case map[string]any:
		var out []string
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, setFields(e, p)...)
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
	case nil:
		return nil
	case string:
		if x == "" || x == "0s" || x == "0" {
			return nil
		}
	case float64:
		if x == 0 {
			return nil
		}
	case bool:
		if !x {
			return nil
		}
	}
	return []string{prefix}
}
