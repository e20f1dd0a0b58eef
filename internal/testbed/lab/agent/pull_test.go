package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

func TestPullSource(t *testing.T) {
	const reg = "172.18.255.253:5000"
	tests := []struct{ image, src, canonical string }{
		{"traefik/whoami:v1.10", reg + "/traefik/whoami:v1.10", "docker.io/traefik/whoami:v1.10"},
		{"nginx", reg + "/library/nginx:latest", "docker.io/library/nginx:latest"},
		{"ghcr.io/ironlb/ironlb:v0.1.0", reg + "/ghcr.io/ironlb/ironlb:v0.1.0", "ghcr.io/ironlb/ironlb:v0.1.0"},
		{reg + "/ironlb/ironlb:dev", reg + "/ironlb/ironlb:dev", reg + "/ironlb/ironlb:dev"},
	}
	for _, tt := range tests {
		src, canonical, err := PullSource(reg, tt.image)
		if err != nil {
			t.Fatalf("%s: %v", tt.image, err)
		}
		if src.String() != tt.src || canonical != tt.canonical {
			t.Errorf("%s: got %s, %s; want %s, %s", tt.image, src, canonical, tt.src, tt.canonical)
		}
		if src.Context().Scheme() != "http" {
			t.Errorf("%s: scheme %s, want http (the lab registry is plain HTTP)", tt.image, src.Context().Scheme())
		}
	}
	if _, _, err := PullSource(reg, "UPPER/case"); err == nil {
		t.Error("an invalid reference gave no error")
	}
}

func TestNeedPull(t *testing.T) {
	tests := []struct {
		policy  corev1.PullPolicy
		present bool
		pull    bool
		err     error
	}{
		{corev1.PullAlways, true, true, nil},
		{corev1.PullAlways, false, true, nil},
		{corev1.PullIfNotPresent, true, false, nil},
		{corev1.PullIfNotPresent, false, true, nil},
		{"", false, true, nil},
		{corev1.PullNever, true, false, nil},
		{corev1.PullNever, false, false, ErrImageNeverPull},
	}
	for _, tt := range tests {
		pull, err := NeedPull(tt.policy, "x:1", tt.present)
		if pull != tt.pull || !errors.Is(err, tt.err) {
			t.Errorf("%s present=%v: pull %v err %v, want %v %v", tt.policy, tt.present, pull, err, tt.pull, tt.err)
		}
	}
	_, err := NeedPull(corev1.PullNever, "x:1", false)
	if want := `ErrImageNeverPull: Container image "x:1" is not present with pull policy of Never`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestPullBackoff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b pullBackoff
	if w, _ := b.waiting(t0, "x"); w {
		t.Fatal("backing off before any failure")
	}
	b = b.failed(t0, errors.New("boom"))
	w, msg := b.waiting(t0.Add(9*time.Second), "x")
	if !w || msg != `Back-off pulling image "x": ErrImagePull: boom` {
		t.Errorf("at 9s: %v %q", w, msg)
	}
	if w, _ := b.waiting(t0.Add(10*time.Second), "x"); w {
		t.Error("still backing off at 10s")
	}
	var delays []time.Duration
	now := t0
	for i := 0; i < 7; i++ {
		now = now.Add(b.delay)
		b = b.failed(now, errors.New("boom"))
		delays = append(delays, b.delay)
	}
	want := []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second, 300 * time.Second}
	if diff := cmp.Diff(want, delays); diff != "" {
		t.Errorf("delays (-want +got)\n%s", diff)
	}
	if b = b.failed(now.Add(time.Hour), errors.New("boom")); b.delay != pullBackoffInitial {
		t.Errorf("after a quiet hour: delay %s, want %s", b.delay, pullBackoffInitial)
	}
}

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layerOf(t *testing.T, entries []tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link, ModTime: time.Unix(0, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			_, _ = tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testRegistry serves go-containerregistry's in-memory registry with one two-layer image at
// <host>/traefik/whoami:v1 (the lab's mirror name of traefik/whoami:v1); the second layer deletes
// a file of the first (a whiteout) and replaces another.
func testRegistry(t *testing.T) (*httptest.Server, string, v1.Image) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	l1 := layerOf(t, []tarEntry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644, body: "root:x:0:0::/root:/bin/sh\n"},
		{name: "gone", typ: tar.TypeReg, mode: 0o644, body: "deleted by layer 2"},
		{name: "whoami", typ: tar.TypeReg, mode: 0o755, body: "v1"},
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/sh", typ: tar.TypeSymlink, link: "/whoami"},
		{name: "escape", typ: tar.TypeSymlink, link: "../../../../../../tmp"},
	})
	l2 := layerOf(t, []tarEntry{
		{name: ".wh.gone", typ: tar.TypeReg, mode: 0o644},
		{name: "whoami", typ: tar.TypeReg, mode: 0o755, body: "v2"},
		{name: "hard", typ: tar.TypeLink, link: "whoami"},
	})
	img, err := mutate.AppendLayers(empty.Image, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/whoami"}, User: "0"})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(u.Host+"/traefik/whoami:v1", name.Insecure)
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	return srv, u.Host, img
}

func TestImageStore(t *testing.T) {
	srv, host, img := testRegistry(t)
	dir := t.TempDir()
	plat := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	s := newImageStore(dir, host, http.DefaultTransport, plat)
	ctx := context.Background()

	got, st, err := s.get(ctx, "traefik/whoami:v1", corev1.PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if got.ImageID != "docker.io/traefik/whoami@"+d.String() || got.Manifest != d || !st.Pulled || !st.Unpacked {
		t.Errorf("pulled %+v, stats %+v; want imageID with digest %s", got, st, d)
	}
	if diff := cmp.Diff([]string{"/whoami"}, got.Config.Config.Entrypoint); diff != "" {
		t.Errorf("config entrypoint (-want +got)\n%s", diff)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(got.Rootfs, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	if read("whoami") != "v2" || read("hard") != "v2" || !strings.HasPrefix(read("etc/passwd"), "root:") {
		t.Errorf("rootfs: whoami %q, hard %q, passwd %q", read("whoami"), read("hard"), read("etc/passwd"))
	}
	if _, err := os.Lstat(filepath.Join(got.Rootfs, "gone")); !os.IsNotExist(err) {
		t.Errorf("whiteout not applied: gone: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(got.Rootfs, "bin/sh")); err != nil || l != "/whoami" {
		t.Errorf("bin/sh -> %q, %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(got.Rootfs, "whoami")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("whoami mode: %v %v", fi, err)
	}

	// IfNotPresent with the image on the node: no pull, even with the registry gone.
	again, st, err := s.get(ctx, "traefik/whoami:v1", corev1.PullIfNotPresent)
	if err != nil || st.Pulled || again.Rootfs != got.Rootfs || again.ImageID != got.ImageID {
		t.Errorf("second get: %+v %+v %v", again, st, err)
	}
	// Always pulls but does not unpack again (same digest).
	_, st, err = s.get(ctx, "traefik/whoami:v1", corev1.PullAlways)
	if err != nil || !st.Pulled || st.Unpacked {
		t.Errorf("Always: stats %+v, %v", st, err)
	}
	// Never: present is fine, absent is ErrImageNeverPull.
	if _, _, err := s.get(ctx, "traefik/whoami:v1", corev1.PullNever); err != nil {
		t.Errorf("Never, present: %v", err)
	}
	if _, _, err := s.get(ctx, "traefik/whoami:v2", corev1.PullNever); !errors.Is(err, ErrImageNeverPull) {
		t.Errorf("Never, absent: %v", err)
	}

	// Not in the registry: the registry's own error.
	_, _, err = s.get(ctx, "redis:7", corev1.PullIfNotPresent)
	if err == nil || !strings.Contains(err.Error(), "NAME_UNKNOWN: Unknown name") || !strings.Contains(err.Error(), `failed to pull and unpack image "docker.io/library/redis:7"`) {
		t.Errorf("missing image: %v", err)
	}
	// The registry down: the connection's error.
	srv.Close()
	_, _, err = s.get(ctx, "traefik/whoami:v1", corev1.PullAlways)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("registry down: %v", err)
	}
	// ... and IfNotPresent still runs what is on the node.
	if _, _, err := s.get(ctx, "traefik/whoami:v1", corev1.PullIfNotPresent); err != nil {
		t.Errorf("registry down, image present: %v", err)
	}
}

// A file capability in the image (a PAX xattr record) is on the unpacked file, after its owner and
// mode are set (chown clears it).
func TestUntarFileCapability(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting security.capability needs CAP_SETFCAP")
	}
	capab := "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" // cap_net_bind_service=+ep
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	data := []byte("#!/bin/true\n")
	if err := tw.WriteHeader(&tar.Header{Name: "coredns", Typeflag: tar.TypeReg, Mode: 0o755, Uid: 65532, Gid: 65532, Size: int64(len(data)),
		Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.security.capability": capab}}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()
	dir := t.TempDir()
	if err := untar(dir, &buf); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(dir, "coredns"), "security.capability", got)
	if err != nil || string(got[:n]) != capab {
		t.Errorf("security.capability %x, %v; want %x", got[:max(n, 0)], err, capab)
	}
}
