package lab

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"sigs.k8s.io/yaml"
)

const (
	testReg = "172.18.255.253:5000"
	sha     = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestMirrorName(t *testing.T) {
	for _, tt := range []struct {
		upstream, want, wantErr string
	}{
		// Docker Hub: the path Docker Hub stores, official images under library/.
		{upstream: "traefik/whoami:v1.10", want: testReg + "/traefik/whoami:v1.10"},
		{upstream: "docker.io/traefik/whoami:v1.10", want: testReg + "/traefik/whoami:v1.10"},
		{upstream: "index.docker.io/traefik/whoami:v1.10", want: testReg + "/traefik/whoami:v1.10"},
		{upstream: "nginx", want: testReg + "/library/nginx:latest"},
		{upstream: "nginx:1.27", want: testReg + "/library/nginx:1.27"},
		{upstream: "docker.io/library/nginx:1.27", want: testReg + "/library/nginx:1.27"},
		{upstream: "traefik/whoami@" + sha, want: testReg + "/traefik/whoami@" + sha},
		// Every other registry: its host first.
		{upstream: "registry.k8s.io/pause:3.10", want: testReg + "/registry.k8s.io/pause:3.10"},
		{upstream: "registry.k8s.io/kube-proxy:v1.37.2", want: testReg + "/registry.k8s.io/kube-proxy:v1.37.2"},
		{upstream: "quay.io/metallb/speaker:v0.16.1", want: testReg + "/quay.io/metallb/speaker:v0.16.1"},
		{upstream: "ghcr.io/ironlb/ironlb", want: testReg + "/ghcr.io/ironlb/ironlb:latest"},
		{upstream: "localhost:5000/a/b:c", want: testReg + "/localhost_5000/a/b:c"},
		{upstream: "10.0.0.1:5000/a:c", want: testReg + "/10.0.0.1_5000/a:c"},
		{upstream: "Quay.IO/metallb/speaker:v1", want: testReg + "/quay.io/metallb/speaker:v1"},
		{upstream: "[fd00::1]:5000/a:c", wantErr: "IPv6 address"},
		// Tag and digest: the digest is what is pulled.
		{upstream: "quay.io/metallb/speaker:v0.16.1@" + sha, want: testReg + "/quay.io/metallb/speaker@" + sha},
		// Not references.
		{upstream: "", wantErr: `image ""`},
		{upstream: "UPPER/case:tag", wantErr: `image "UPPER/case:tag"`},
		{upstream: "a/b:bad tag", wantErr: `image "a/b:bad tag"`},
		{upstream: "a/b@sha256:short", wantErr: `image "a/b@sha256:short"`},
	} {
		t.Run(tt.upstream, func(t *testing.T) {
			got, err := MirrorName(testReg, tt.upstream)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("MirrorName(%q) = %q, %v; want an error containing %q", tt.upstream, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("MirrorName(%q) = %q, %v; want %q", tt.upstream, got, err, tt.want)
			}
			if _, err := name.ParseReference(got, name.StrictValidation); err != nil {
				t.Errorf("MirrorName(%q) = %q, which is not a strict reference: %v", tt.upstream, got, err)
			}
		})
	}
	if _, err := MirrorName("not a registry/", "nginx"); err == nil || !strings.Contains(err.Error(), "mirror registry") {
		t.Errorf("a bad mirror registry: %v", err)
	}
}

// Two upstream images with different names never share a mirror name: the mapping is one-to-one
// across registries (what containerd's path-preserving mirrors are not), for the names Docker Hub
// can hold.
func TestMirrorNameOneToOne(t *testing.T) {
	upstreams := []string{
		"metallb/speaker:v1", "docker.io/metallb/speaker:v1", // the same image
		"quay.io/metallb/speaker:v1", "ghcr.io/metallb/speaker:v1", "quay.io/quay.io/metallb/speaker:v1",
		"library/nginx:1", "nginx:1", "docker.io/library/nginx:1", // the same image
		"registry.k8s.io/nginx:1", "registry.k8s.io/library/nginx:1",
		"localhost:5000/a:1", "localhost:5001/a:1",
		// Not "docker.io/localhost_5000/a" or "docker.io/quay.io/x": the reference grammar allows
		// them, Docker Hub's namespaces (letters and digits) do not.
	}
	byMirror := map[string]string{}
	for _, u := range upstreams {
		m, err := MirrorName(testReg, u)
		if err != nil {
			t.Fatal(err)
		}
		canon, _ := name.ParseReference(u)
		if prev, ok := byMirror[m]; ok && prev != canon.Name() {
			t.Errorf("%s and %s both mirror to %s", prev, canon.Name(), m)
		}
		byMirror[m] = canon.Name()
	}
	if len(byMirror) != len(upstreams)-3 {
		t.Errorf("%d mirror names for %d distinct images: %v", len(byMirror), len(upstreams)-3, byMirror)
	}
}

func TestPushRef(t *testing.T) {
	for _, tt := range []struct {
		ref, want, wantErr string
	}{
		{ref: "ironlb/ironlb", want: testReg + "/ironlb/ironlb:v0.1.0"},
		{ref: "ironlb/ironlb:dev", want: testReg + "/ironlb/ironlb:dev"},
		{ref: "ironlb", want: testReg + "/ironlb:v0.1.0"},
		{ref: "a/b/c:x", want: testReg + "/a/b/c:x"},
		{ref: testReg + "/ironlb/ironlb:dev", want: testReg + "/ironlb/ironlb:dev"},
		{ref: "ghcr.io/ironlb/ironlb:dev", wantErr: "names the registry ghcr.io, not the lab's " + testReg},
		{ref: "localhost/ironlb:dev", wantErr: "names the registry localhost"},
		{ref: "10.0.0.1:5000/ironlb:dev", wantErr: "names the registry 10.0.0.1:5000"},
		{ref: "ironlb/ironlb@" + sha, wantErr: "push to a tag, not a digest"},
		{ref: "Ironlb/ironlb", wantErr: `"Ironlb/ironlb"`},
		{ref: "", wantErr: `""`},
	} {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := PushRef(testReg, tt.ref, "v0.1.0")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("PushRef(%q) = %v, %v; want an error containing %q", tt.ref, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Name() != tt.want {
				t.Fatalf("PushRef(%q) = %v, %v; want %q", tt.ref, got, err, tt.want)
			}
			if s := got.Context().Scheme(); s != "http" {
				t.Errorf("PushRef(%q) scheme %q, want http (the lab's registry is plain HTTP)", tt.ref, s)
			}
		})
	}
}

// The configuration the lab writes is one the registry reads: the keys and values of
// distribution's configuration (configuration.Configuration's YAML names).
func TestRegistryConfig(t *testing.T) {
	got, err := RegistryConfig(":5000", "/run/ironlb-lab/registry/storage")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, got)
	}
	want := map[string]any{
		"version": "0.1",
		"log": map[string]any{"level": "warn", "formatter": "text", "accesslog": map[string]any{"disabled": false},
			"fields": map[string]any{"service": "registry"}},
		"storage": map[string]any{
			"filesystem":  map[string]any{"rootdirectory": "/run/ironlb-lab/registry/storage"},
			"delete":      map[string]any{"enabled": true},
			"maintenance": map[string]any{"uploadpurging": map[string]any{"enabled": false}},
		},
		"http":   map[string]any{"addr": ":5000", "secret": "ironlb-lab-registry", "headers": map[string]any{"X-Content-Type-Options": []any{"nosniff"}}},
		"health": map[string]any{"storagedriver": map[string]any{"enabled": false}},
	}
	if d := cmp.Diff(want, m); d != "" {
		t.Errorf("RegistryConfig mismatch (-want +got):\n%s", d)
	}
}

// writeTestLayout writes idx as `make image` does (hack/image's writeLayout): one index, named tag.
func writeTestLayout(t *testing.T, idx v1.ImageIndex, tag string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "image")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		t.Fatal(err)
	}
	return dir
}

// inProcessRegistry is go-containerregistry's registry on loopback; it returns its host:port.
func inProcessRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func mustDigest(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// ReadLayout and Push carry a two-platform index from a layout to a registry under each tag, with
// the layout's digest.
func TestPushLayout(t *testing.T) {
	idx, err := random.Index(256, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeTestLayout(t, idx, "v0.1.0")
	img, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if img.Tag != "v0.1.0" || img.Digest != mustDigest(t, idx) {
		t.Fatalf("ReadLayout = tag %q digest %s, want v0.1.0 %s", img.Tag, img.Digest, mustDigest(t, idx))
	}
	reg := inProcessRegistry(t)
	var refs []name.Reference
	for _, s := range []string{"ironlb/ironlb", "ironlb/ironlb:dev"} {
		r, err := PushRef(reg, s, img.Tag)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	ctx := context.Background()
	if err := Push(ctx, img, refs); err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		got, err := remote.Index(r)
		if err != nil {
			t.Fatalf("pulling %s: %v", r, err)
		}
		if d := mustDigest(t, got); d != img.Digest {
			t.Errorf("%s has digest %s, want %s", r, d, img.Digest)
		}
		m, err := got.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range m.Manifests { // every platform's image came along, layers included
			im, err := got.Image(c.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateLayers(im); err != nil {
				t.Errorf("%s %s: %v", r, c.Digest, err)
			}
		}
	}
	if err := Push(ctx, img, nil); err == nil {
		t.Error("Push to no reference: no error")
	}
}

func validateLayers(im v1.Image) error {
	ls, err := im.Layers()
	if err != nil {
		return err
	}
	for _, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		rc.Close()
	}
	return nil
}

// ReadLayout refuses what it cannot push without guessing.
func TestReadLayoutErrors(t *testing.T) {
	if _, err := ReadLayout(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Errorf("an empty directory: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "two")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		im, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(im); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadLayout(dir); err == nil || !strings.Contains(err.Error(), "lists 2 images, want one") {
		t.Errorf("a layout with two images: %v", err)
	}
	// One image (not an index) is pushed as it is.
	one := filepath.Join(t.TempDir(), "one")
	p, err = layout.Write(one, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	im, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(im); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLayout(one)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Taggable.(v1.Image); !ok || got.Digest != mustDigest(t, im) || got.Tag != "" {
		t.Errorf("ReadLayout(one image) = %T %s %q, want the image %s without a tag", got.Taggable, got.Digest, got.Tag, mustDigest(t, im))
	}
}

// Copy carries an index from one registry to another under the mirror's name, and an unknown tag
// surfaces the source registry's own error code.
func TestCopy(t *testing.T) {
	up, mirror := inProcessRegistry(t), inProcessRegistry(t)
	idx, err := random.Index(128, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	src, err := name.ParseReference(up+"/metallb/speaker:v0.16.1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(src, idx); err != nil {
		t.Fatal(err)
	}
	to, err := MirrorName(mirror, src.Name())
	if err != nil {
		t.Fatal(err)
	}
	if want := mirror + "/" + strings.ReplaceAll(up, ":", "_") + "/metallb/speaker:v0.16.1"; to != want {
		t.Fatalf("MirrorName = %s, want %s", to, want)
	}
	dst, err := name.ParseReference(to, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := Copy(ctx, src, dst, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d != mustDigest(t, idx) {
		t.Errorf("Copy returned %s, want %s", d, mustDigest(t, idx))
	}
	got, err := remote.Index(dst.Context().Digest(d.String()))
	if err != nil {
		t.Fatalf("pulling the mirror's copy by digest: %v", err)
	}
	if mustDigest(t, got) != d {
		t.Errorf("the mirror's copy has digest %s, want %s", mustDigest(t, got), d)
	}

	missing, _ := name.ParseReference(up+"/metallb/speaker:v9", name.Insecure)
	_, err = Copy(ctx, missing, dst, nil, nil)
	var te *transport.Error
	if !errors.As(err, &te) || len(te.Errors) == 0 || te.Errors[0].Code != transport.ManifestUnknownErrorCode {
		t.Errorf("copying an unknown tag: %v, want the registry's MANIFEST_UNKNOWN", err)
	}
}

// `lab push --as UPSTREAM` pushes to MirrorName's reference, which PushRef takes as it is (a tag);
// a digest cannot be pushed to.
func TestPushRefOfMirrorName(t *testing.T) {
	for _, tt := range []struct{ upstream, want, wantErr string }{
		{upstream: "traefik/whoami:v1.10", want: testReg + "/traefik/whoami:v1.10"},
		{upstream: "registry.k8s.io/pause:3.10", want: testReg + "/registry.k8s.io/pause:3.10"},
		{upstream: "nginx", want: testReg + "/library/nginx:latest"},
		{upstream: "traefik/whoami@" + sha, wantErr: "not a digest"},
	} {
		m, err := MirrorName(testReg, tt.upstream)
		if err != nil {
			t.Fatal(err)
		}
		got, err := PushRef(testReg, m, "v0.1.0")
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("PushRef(MirrorName(%q)) = %v, %v; want an error containing %q", tt.upstream, got, err, tt.wantErr)
			}
		case err != nil || got.Name() != tt.want:
			t.Errorf("PushRef(MirrorName(%q)) = %v, %v; want %s", tt.upstream, got, err, tt.want)
		}
	}
}

// The registry the lab looks for is the one hack/registry-binary.sh builds: the same pin, the same
// cache path.
func TestRegistryVersionPinned(t *testing.T) {
	b, err := os.ReadFile("../../../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	var pin string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "REGISTRY_VERSION="); ok {
			pin = strings.TrimSpace(v)
		}
	}
	if pin != RegistryVersion {
		t.Errorf("hack/versions.env pins REGISTRY_VERSION=%q, the lab expects RegistryVersion %q", pin, RegistryVersion)
	}
	if want := filepath.Join("registry", RegistryVersion, "bin"); !strings.HasSuffix(DefaultRegistryBin(), want) {
		t.Errorf("DefaultRegistryBin() = %s, want it to end in %s as hack/registry-binary.sh's cache does", DefaultRegistryBin(), want)
	}
}
