package main

// The image itself (layers, config, reproducibility) is internal/ociimage's and tested there; these
// tests cover what the command adds: the OCI layout it writes, the push, and its flags and output.

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironlb/ironlb/internal/ociimage"
)

// fakeBinaries are the binaries of the tests' builds: small, and different per platform.
var fakeBinaries = map[string]string{
	"linux/amd64": "\x7fELF fake amd64 ironlb",
	"linux/arm64": "\x7fELF fake arm64 ironlb",
}

// testIndex is the image of fakeBinaries as `make image` builds it with --version v0.1.0, the
// given commit and --source-date-epoch 1700000000, and the index's digest.
func testIndex(t *testing.T, commit string) (v1.ImageIndex, v1.Hash) {
	t.Helper()
	s := ociimage.Spec{Version: "v0.1.0", Commit: commit, Created: time.Unix(1700000000, 0).UTC(), Binaries: map[string][]byte{}}
	for plat, b := range fakeBinaries {
		s.Binaries[plat] = []byte(b)
	}
	idx, err := ociimage.Index(s)
	var d v1.Hash
	if err == nil {
		d, err = idx.Digest()
	}
	if err != nil {
		t.Fatal(err)
	}
	return idx, d
}

// TestWriteLayout writes the index as an OCI layout, twice (the second replaces the first), and
// reads it back: one entry, the index itself, named by tag and by containerd's image name. A folder
// that is not a layout is refused and left as it was.
func TestWriteLayout(t *testing.T) {
	idx, want := testIndex(t, "c0")
	dir := filepath.Join(t.TempDir(), "image")
	for range 2 {
		if err := writeLayout(dir, idx, "ghcr.io/ironlb/ironlb:v0.1.0", "v0.1.0"); err != nil {
			t.Fatal(err)
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 {
		t.Fatalf("layout lists %d entries, want the index alone", len(tm.Manifests))
	}
	e := tm.Manifests[0]
	if e.Digest != want {
		t.Errorf("layout holds %s, want the index %s", e.Digest, want)
	}
	if got := e.Annotations["org.opencontainers.image.ref.name"]; got != "v0.1.0" {
		t.Errorf("layout names the index %q, want the tag", got)
	}
	if got := e.Annotations["io.containerd.image.name"]; got != "ghcr.io/ironlb/ironlb:v0.1.0" {
		t.Errorf("containerd image name %q", got)
	}
	if _, err := top.ImageIndex(e.Digest); err != nil {
		t.Errorf("reading the index back: %v", err)
	}

	other := t.TempDir()
	keep := filepath.Join(other, "keep")
	if err := os.WriteFile(keep, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeLayout(other, idx, "r:v0.1.0", "v0.1.0"); err == nil {
		t.Error("replaced a folder that is not an image layout")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the refused folder lost its file: %v", err)
	}
}

// TestPush pushes the index to an in-process registry, pulls it back by digest, and pulls each
// platform's image as a node would (by tag and platform).
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	idx, want := testIndex(t, "c0")
	ref, err := pushIndex(context.Background(), idx, u.Host+"/ironlb/ironlb", "v0.1.0", true)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Identifier() != "v0.1.0" {
		t.Errorf("pushed to %s: want the version as tag", ref)
	}

	byDigest, err := name.ParseReference(u.Host+"/ironlb/ironlb@"+want.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(byDigest)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pulled.Digest(); err != nil || got != want {
		t.Errorf("pulled %s (%v), pushed %s", got, err, want)
	}
	for plat, bin := range fakeBinaries {
		p, _ := ociimage.ParsePlatform(plat)
		img, err := remote.Image(ref, remote.WithPlatform(*p))
		if err != nil {
			t.Fatalf("%s: %v", plat, err)
		}
		var tarball bytes.Buffer
		rc := mutate.Extract(img)
		if _, err := io.Copy(&tarball, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if !bytes.Contains(tarball.Bytes(), []byte(bin)) {
			t.Errorf("%s: the pulled image lacks its binary", plat)
		}
	}
}

// TestRun runs the command as `make image` does, on fake binaries, into a layout that exists: it
// builds ociimage's index of them and prints each platform and the index's digest.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	var args []string
	for plat, b := range fakeBinaries {
		path := filepath.Join(dir, strings.ReplaceAll(plat, "/", "_"))
		if err := os.WriteFile(path, []byte(b), 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--binary", plat+"="+path)
	}
	commit := "0123456789abcdef0123456789abcdef01234567"
	out := filepath.Join(dir, "image")
	args = append(args, "--version", "v0.1.0", "--commit", commit, "--source-date-epoch", "1700000000", "--out", out)
	_, want := testIndex(t, commit)
	for range 2 { // the second run replaces the first's layout
		var stdout bytes.Buffer
		if err := run(context.Background(), args, &stdout); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stdout.String(), "ghcr.io/ironlb/ironlb:v0.1.0@"+want.String()) {
			t.Errorf("output lacks the digest %s:\n%s", want, stdout.String())
		}
		for plat := range fakeBinaries {
			if !strings.Contains(stdout.String(), plat) {
				t.Errorf("output lacks %s:\n%s", plat, stdout.String())
			}
		}
	}

	for _, bad := range [][]string{
		{"--version", "v0", "--binary", args[1], "--out", dir}, // not a layout
		{"--binary", args[1], "--out", out},                    // no --version
		{"--version", "v0", "--binary", "linux=" + filepath.Join(dir, "linux_amd64"), "--out", out},
		{"--version", "v0", "--binary", "linux/amd64", "--out", out},
	} {
		if err := run(context.Background(), bad, io.Discard); err == nil {
			t.Errorf("run %q: no error", bad)
		}
	}
}

// TestSummary: one line per platform of the index, with its manifest's digest and its sizes, under
// a header.
func TestSummary(t *testing.T) {
	idx, _ := testIndex(t, "c0")
	var out bytes.Buffer
	if err := summary(&out, idx); err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1+len(im.Manifests) || !strings.HasPrefix(lines[0], "platform") {
		t.Fatalf("summary:\n%s", out.String())
	}
	for i, d := range im.Manifests {
		f := strings.Fields(lines[1+i])
		// platform, digest, then "N.N MiB (N B)" twice
		if len(f) != 10 || f[0] != d.Platform.String() || f[1] != d.Digest.String() || f[3] != "MiB" || f[7] != "MiB" {
			t.Errorf("line %q, want %s %s and two sizes", lines[1+i], d.Platform, d.Digest)
		}
	}
}

func TestEnvEpoch(t *testing.T) {
	for env, want := range map[string]int64{"1700000000": 1700000000, "": 0, "yesterday": 0} {
		t.Setenv("SOURCE_DATE_EPOCH", env)
		if got := envEpoch(); got != want {
			t.Errorf("SOURCE_DATE_EPOCH=%q: %d, want %d", env, got, want)
		}
	}
}
