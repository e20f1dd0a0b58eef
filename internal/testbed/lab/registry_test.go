package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// registryBinary returns the distribution registry hack/registry-binary.sh builds, building it when
// it is not cached yet ($IRONLB_REGISTRY_BIN names another directory).
func registryBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("IRONLB_REGISTRY_BIN")
	if dir == "" {
		dir = DefaultRegistryBin()
	}
	bin := filepath.Join(dir, "registry")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	t.Logf("no registry at %s: building it with hack/registry-binary.sh (minutes, once)", bin)
	cmd := exec.Command("../../../hack/registry-binary.sh")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/registry-binary.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], "registry")
}

// syncBuffer is a registry's log, written by its process and read by the test on failure.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestRegistryInNetNS runs the registry the lab runs (the pinned distribution release, with the
// configuration and environment the lab writes) in a network namespace of its own, and pushes to
// it and pulls from it from a second namespace over a veth pair, as `lab push` and the nodes do on
// the lab's bridge: a two-platform index from an OCI layout and a single image, each pulled back by
// digest; an unknown tag, a manifest whose blobs were never pushed and a registry that is down each
// give the registry's (or the kernel's) own error.
func TestRegistryInNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates the network namespaces ilbreg-* and runs the distribution registry in one")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) (apt-get install iproute2)")
	}
	bin := registryBinary(t)
	ctx := context.Background()

	// Two namespaces joined by a veth pair, on TEST-NET-1 (RFC 5737): nothing in the root namespace.
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	srvNS, cliNS := "ilbreg-"+hex.EncodeToString(suffix)+"-s", "ilbreg-"+hex.EncodeToString(suffix)+"-c"
	t.Cleanup(func() {
		for _, ns := range []string{srvNS, cliNS} {
			if err := DeleteNetNS(context.Background(), ns); err != nil {
				t.Errorf("removing %s: %v", ns, err)
			}
		}
	})
	for _, ns := range []string{srvNS, cliNS} {
		if err := ip(ctx, "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := ip(ctx, "-n", srvNS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", cliNS); err != nil {
		t.Fatal(err)
	}
	for ns, a := range map[string]string{srvNS: "192.0.2.1/24", cliNS: "192.0.2.2/24"} {
		if err := ipBatch(ctx, ns, []string{"link set lo up", "addr add " + a + " dev eth0", "link set eth0 up"}); err != nil {
			t.Fatal(err)
		}
	}

	// The registry, as startRegistry runs it.
	dir := t.TempDir()
	cfg, err := RegistryConfig(fmt.Sprintf(":%d", RegistryPort), filepath.Join(dir, "storage"))
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	srv := exec.Command("ip", "netns", "exec", srvNS, bin, "serve", cfgFile)
	srv.Env, srv.Stdout, srv.Stderr = RegistryEnv(), logs, logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	stop := sync.OnceFunc(func() { _ = srv.Process.Kill(); <-exited })
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registry log:\n%s", logs.String())
		}
	})

	reg := fmt.Sprintf("192.0.2.1:%d", RegistryPort)
	tr := &http.Transport{DialContext: Dialer(cliNS)}
	t.Cleanup(tr.CloseIdleConnections)
	opts := []remote.Option{remote.WithTransport(tr), remote.WithContext(ctx)}
	if err := poll(ctx, 60*time.Second, func() (bool, string, error) {
		select {
		case err := <-exited:
			return false, "", fmt.Errorf("the registry exited: %v", err)
		default:
		}
		err := PingRegistry(ctx, tr, reg)
		return err == nil, fmt.Sprintf("registry answering at %s from %s (%v)", reg, cliNS, err), nil
	}); err != nil {
		t.Fatal(err)
	}

	// A two-platform index, from an OCI layout as `make image` writes it, as `lab push` pushes it.
	idx, err := random.Index(1024, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ReadLayout(writeTestLayout(t, idx, "v0.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	to, err := PushRef(reg, "ironlb/ironlb", img.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := Push(ctx, img, []name.Reference{to}, opts...); err != nil {
		t.Fatal(err)
	}
	byDigest := to.Context().Digest(img.Digest.String())
	gotIdx, err := remote.Index(byDigest, opts...)
	if err != nil {
		t.Fatalf("pulling %s: %v", byDigest, err)
	}
	if d := mustDigest(t, gotIdx); d != mustDigest(t, idx) {
		t.Errorf("pulled %s: digest %s, pushed %s", byDigest, d, mustDigest(t, idx))
	}
	m, err := gotIdx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Manifests {
		im, err := gotIdx.Image(c.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if err := validateLayers(im); err != nil {
			t.Errorf("pulling the layers of %s: %v", c.Digest, err)
		}
	}

	// A single image, mirrored under an upstream's name by Copy within the registry.
	single, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	src, err := name.ParseReference(reg+"/scratch/pause:3.10", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(src, single, opts...); err != nil {
		t.Fatal(err)
	}
	mirror, err := MirrorName(reg, "registry.k8s.io/pause:3.10")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := name.ParseReference(mirror, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Copy(ctx, src, dst, opts, opts)
	if err != nil {
		t.Fatal(err)
	}
	gotImg, err := remote.Image(dst.Context().Digest(d.String()), opts...)
	if err != nil {
		t.Fatalf("pulling %s by digest: %v", dst, err)
	}
	if got, want := mustDigest(t, gotImg), mustDigest(t, single); got != want || d != want {
		t.Errorf("mirrored %s: digest %s (Copy said %s), pushed %s", dst, got, d, want)
	}

	// Bad pulls and pushes carry the registry's own error codes.
	unknown := to.Context().Tag("no-such-tag")
	_, err = remote.Index(unknown, opts...)
	if !hasCode(err, transport.ManifestUnknownErrorCode) || !strings.Contains(fmt.Sprint(err), "MANIFEST_UNKNOWN") {
		t.Errorf("pulling %s: %v, want the registry's MANIFEST_UNKNOWN", unknown, err)
	}
	orphan, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = remote.Put(to.Context().Tag("orphan"), orphan, opts...) // the manifest alone, its blobs never pushed
	if !hasCode(err, transport.ManifestBlobUnknownErrorCode) {
		t.Errorf("pushing a manifest without its blobs: %v, want the registry's MANIFEST_BLOB_UNKNOWN", err)
	}

	// A registry that is down: the connection is refused, and a push says so.
	stop()
	if err := PingRegistry(ctx, tr, reg); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("asking a stopped registry: %v, want connection refused", err)
	}
	if err := Push(ctx, img, []name.Reference{to}, opts...); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("pushing to a stopped registry: %v, want connection refused", err)
	}
}

// hasCode reports whether err is a registry's error response carrying code.
func hasCode(err error, code transport.ErrorCode) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	for _, d := range te.Errors {
		if d.Code == code {
			return true
		}
	}
	return false
}
