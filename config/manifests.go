// Package manifests embeds ironlb's install manifests so `ironlb lab up` installs ironlb with the very
// files users apply: the metallb.io CRDs, the controller (namespace, RBAC, Deployment, webhook), the
// speaker DaemonSet, the proxy DaemonSet, the Prometheus PodMonitors and MetalLB's alerting rules.
package manifests

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed crd/bases/*.yaml controller/*.yaml speaker/*.yaml proxy/*.yaml prometheus/monitors.yaml prometheus-rules/rules.yaml testdata/monitoring.coreos.com/podmonitors.yaml testdata/monitoring.coreos.com/prometheusrules.yaml
var files embed.FS

// Bundle returns the YAML documents of a directory ("crd/bases", "controller", "speaker", "proxy") joined in file-name order.
func Bundle(dir string) (string, error) {
	ents, err := fs.ReadDir(files, dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".yaml") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return join(dir, names)
}

// MonitoringCRDs returns the Prometheus Operator's PodMonitor and PrometheusRule CRDs
// (testdata/monitoring.coreos.com, the versions the chart's objects are checked against): the lab
// applies them before it installs the chart with its monitors, as it runs no operator.
func MonitoringCRDs() (string, error) {
	return join("testdata/monitoring.coreos.com", []string{"podmonitors.yaml", "prometheusrules.yaml"})
}

// join reads the named files of dir and joins them as YAML documents, in the order given.
func join(dir string, names []string) (string, error) {
	var b strings.Builder
	for _, n := range names {
		data, err := fs.ReadFile(files, dir+"/"+n)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String(), nil
}
