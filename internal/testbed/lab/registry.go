package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

// The lab's registry (lab up --registry, the default) is the OCI distribution registry
// (github.com/distribution/distribution/v3, the registry Docker Hub and most others run), built from
// its module by hack/registry-binary.sh, in its own namespace <name>-registry on the bridge like the
// client and the router. `ironlb lab push` puts ironlb's image there and Mirror copies upstream
// images there, so that the lab's nodes pull by reference as a cluster does (push.go).
//
// It serves plain HTTP on RegistryPort. TLS with the lab's CA would need every client (the node
// agents' pulls, `lab push`, helm) to be handed that CA, and would protect nothing: only the lab's
// own namespaces reach the bridge. go-containerregistry speaks plain HTTP to a registry named with
// name.Insecure (and to any RFC 1918 address such as kind's 172.18.0.0/16 by itself), helm with
// --plain-http, containerd with an http:// mirror endpoint. Its storage is a directory in the
// lab's state, so `lab down` empties it with the rest.

// RegistryVersion is the pinned registry release (REGISTRY_VERSION in hack/versions.env).
const RegistryVersion = "v3.0.0"

// RegistryPort is where the lab's registry listens, on every address of its namespace.
const RegistryPort = 5000

// DefaultRegistryBin is where hack/registry-binary.sh puts the registry for the pinned version,
// beside the Kubernetes binaries.
func DefaultRegistryBin() string {
	return filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(DefaultK8sBin()))), "registry", RegistryVersion, "bin")
}

// DefaultCoreDNSBin is where hack/coredns-binary.sh puts CoreDNS for the pinned version, beside the
// Kubernetes binaries.
func DefaultCoreDNSBin() string {
	return filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(DefaultK8sBin()))), "coredns", CoreDNSVersion, "bin")
}

// RegistryAddr is the registry's address and port on the bridge, the host part of every reference
// into it ("172.18.255.253:5000"); invalid when the lab has no registry.
func (p Plan) RegistryAddr() netip.AddrPort {
	if p.Registry.Name == "" {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(p.Registry.Addr, RegistryPort)
}

// RegistryConfig is the registry's configuration file (YAML) for a registry serving plain HTTP on
// listen and keeping its blobs and manifests under storageDir. Deleting is allowed, so that a test
// or a user can remove an image by digest as from a real registry; the storage driver's health
// check is off (the directory is local), as is upload purging (the lab lives for hours, not weeks).
// It logs warnings and errors (a failed pull names its reason) and one access-log line per request.
// The HTTP secret signs upload state between requests; a fixed one is as good as any in a lab with
// one registry, and silences the warning about a random one. It does no I/O.
func RegistryConfig(listen, storageDir string) (string, error) {
	b, err := yaml.Marshal(map[string]any{
		"version": "0.1",
		"log": map[string]any{
			"level": "warn", "formatter": "text", "accesslog": map[string]any{"disabled": false},
			"fields": map[string]any{"service": "registry"},
		},
		"storage": map[string]any{
			"filesystem":  map[string]any{"rootdirectory": storageDir},
			"delete":      map[string]any{"enabled": true},
			"maintenance": map[string]any{"uploadpurging": map[string]any{"enabled": false}},
		},
		"http": map[string]any{
			"addr":    listen,
			"secret":  "ironlb-lab-registry",
			"headers": map[string]any{"X-Content-Type-Options": []string{"nosniff"}},
		},
		"health": map[string]any{"storagedriver": map[string]any{"enabled": false}},
	})
	return string(b), err
}

// RegistryEnv is the registry's environment: OpenTelemetry's exporter off, or the registry sends
// its traces to an OTLP collector on localhost that is not there and logs every failure.
func RegistryEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "OTEL_TRACES_EXPORTER=none"}
}

func (l *Lab) registryDir() string { return filepath.Join(l.State.Dir, "registry") }

func (l *Lab) registryBin() string { return filepath.Join(l.Plan.Config.RegistryBin, "registry") }

// startRegistry writes the registry's configuration and starts it in its namespace, in the lab's
// cgroup (<lab>/<name>-registry/registry, its log in logs/<name>-registry/registry.log), then
// waits until it answers. A registry already running is left as it is.
func (l *Lab) startRegistry(ctx context.Context) error {
	h := l.Plan.Registry
	dir := l.registryDir()
	if err := os.MkdirAll(filepath.Join(dir, "storage"), 0o755); err != nil {
		return err
	}
	cfg, err := RegistryConfig(":"+strconv.Itoa(RegistryPort), filepath.Join(dir, "storage"))
	if err != nil {
		return err
	}
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := l.startDetached(h.Name, "registry", ExecSpec{NetNS: h.Name, Hostname: h.Name,
		Argv: []string{l.registryBin(), "serve", cfgFile}, Env: RegistryEnv()}); err != nil {
		return err
	}
	return poll(ctx, 15*time.Second, func() (bool, string, error) {
		err := l.RegistryPing(ctx)
		return err == nil, fmt.Sprintf("registry answering at %s (%v); see %s", l.Plan.RegistryAddr(), err, l.State.LogFile(h.Name, "registry")), nil
	})
}

// RegistryTransport carries HTTP to the lab's registry from the root namespace without giving it a
// lab address or route (the network rule): each connection is dialed from inside the client's
// namespace, as a developer's machine on the lab's network would push.
func (l *Lab) RegistryTransport() *http.Transport {
	return &http.Transport{
		DialContext:           Dialer(l.Plan.Client.Name),
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConnsPerHost:   8,
	}
}

// RegistryPing asks the registry's API base (GET /v2/, which a registry answers 200 without
// authentication) from the client's namespace; nil when it answers.
func (l *Lab) RegistryPing(ctx context.Context) error {
	ap := l.Plan.RegistryAddr()
	if !ap.IsValid() {
		return fmt.Errorf("lab %s has no registry (lab up --registry)", l.Plan.Config.Name)
	}
	tr := l.RegistryTransport()
	defer tr.CloseIdleConnections()
	return PingRegistry(ctx, tr, ap.String())
}

// PingRegistry asks the registry at addr (host:port) for its API base (GET /v2/, which a registry
// answers 200 without authentication) through tr, waiting 2 s at most; nil when it answers.
func PingRegistry(ctx context.Context, tr http.RoundTripper, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v2/: %s", resp.Status)
	}
	return nil
}
