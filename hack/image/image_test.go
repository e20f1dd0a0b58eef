package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironlb/ironlb/internal/ociimage"
)

// spec is a build from fake binaries, small and different per platform.
func spec() ociimage.Spec {
	return ociimage.Spec{
		Version: "v0.1.0",
		Commit:  "0123456789abcdef0123456789abcdef01234567",
		Created: time.Unix(1700000000, 0),
		Binaries: map[string][]byte{
			"linux/arm64": []byte("\x7fELF fake arm64 ironlb"),
			"linux/amd64": []byte("\x7fELF fake amd64 ironlb"),
		},
	}
}

// build writes s's image as an OCI layout in a temporary folder (as `make image` does) and reads it
// back from there.
func build(t *testing.T, s ociimage.Spec) v1.ImageIndex {
	t.Helper()
	idx, err := ociimage.Index(s)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := writeLayout(dir, idx, "ghcr.io/ironlb/ironlb:"+s.Version, s.Version); err != nil {
		t.Fatal(err)
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
	if got := tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != s.Version {
		t.Errorf("layout names the index %q, want %q", got, s.Version)
	}
	got, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func digest(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestImage checks what the image is made of: one OCI manifest per platform, the config, and the
// files with their owners and modes.
func TestImage(t *testing.T) {
	s := spec()
	idx := build(t, s)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", im.MediaType)
	}
	var plats []string
	for _, d := range im.Manifests {
		plats = append(plats, d.Platform.String())
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, plats); diff != "" {
		t.Fatalf("platforms (-want +got)\n%s", diff)
	}
	if got := im.Annotations["org.opencontainers.image.version"]; got != "v0.1.0" {
		t.Errorf("index version annotation %q", got)
	}

	for _, d := range im.Manifests {
		t.Run(d.Platform.String(), func(t *testing.T) {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
				t.Errorf("manifest media type %s", mt)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
				t.Errorf("config is for %s/%s", cf.OS, cf.Architecture)
			}
			want := v1.Config{
				Entrypoint: []string{"/ironlb"},
				User:       "65532:65532",
				Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				WorkingDir: "/",
				Labels: map[string]string{
					"org.opencontainers.image.title":       "ironlb",
					"org.opencontainers.image.description": "LoadBalancer Services for bare-metal Kubernetes (controller, speaker, proxy, status)",
					"org.opencontainers.image.source":      "https://github.com/ironlb/ironlb",
					"org.opencontainers.image.version":     "v0.1.0",
					"org.opencontainers.image.revision":    s.Commit,
					"org.opencontainers.image.created":     "2023-11-14T22:13:20Z",
				},
			}
			if diff := cmp.Diff(want, cf.Config); diff != "" {
				t.Errorf("config (-want +got)\n%s", diff)
			}
			if !cf.Created.Time.Equal(s.Created) {
				t.Errorf("created %s, want %s", cf.Created, s.Created)
			}
			for _, h := range cf.History {
				if !h.Created.Time.Equal(s.Created) {
					t.Errorf("history %q created %s, want %s", h.CreatedBy, h.Created, s.Created)
				}
			}

			got := files(t, img, s.Created)
			wantFiles := map[string]string{
				"etc/":                 "dir 0755 0:0",
				"etc/group":            "file 0644 0:0 root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
				"etc/nsswitch.conf":    "file 0644 0:0 hosts: files dns\n",
				"etc/passwd":           "file 0644 0:0 root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
				"home/":                "dir 0755 0:0",
				"home/nonroot/":        "dir 0700 65532:65532",
				"root/":                "dir 0700 0:0",
				"tmp/":                 "dir 1777 0:0",
				"usr/":                 "dir 0755 0:0",
				"usr/local/":           "dir 0755 0:0",
				"usr/local/bin/":       "dir 0755 0:0",
				"usr/local/bin/ironlb": "link 0777 0:0 /ironlb",
				"ironlb":               "file 0755 0:0 " + string(s.Binaries[d.Platform.String()]),
			}
			if diff := cmp.Diff(wantFiles, got); diff != "" {
				t.Errorf("files (-want +got)\n%s", diff)
			}
		})
	}
}

// files lists the image's files across its layers as "kind mode uid:gid [content]", checking that
// each layer's entries are in name order and dated mtime.
func files(t *testing.T, img v1.Image, mtime time.Time) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		prev := ""
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name < prev {
				t.Errorf("layer %d: %s after %s", i, h.Name, prev)
			}
			prev = h.Name
			if !h.ModTime.Equal(mtime) || h.Uname != "" || h.Gname != "" {
				t.Errorf("layer %d: %s: mtime %s, owner %q:%q", i, h.Name, h.ModTime, h.Uname, h.Gname)
			}
			var kind string
			switch h.Typeflag {
			case tar.TypeDir:
				kind = "dir"
			case tar.TypeSymlink:
				kind = "link"
			case tar.TypeReg:
				kind = "file"
			default:
				t.Errorf("layer %d: %s: type %c", i, h.Name, h.Typeflag)
			}
			body, _ := io.ReadAll(tr)
			v := fmt.Sprintf("%s %04o %d:%d", kind, h.Mode, h.Uid, h.Gid)
			if h.Linkname != "" {
				v += " " + h.Linkname
			}
			if len(body) > 0 {
				v += " " + string(body)
			}
			out[h.Name] = v
		}
		rc.Close()
	}
	return out
}

// TestReproducible checks that two builds from the same inputs give the same index digest, and that
// each input the image records changes it.
func TestReproducible(t *testing.T) {
	first := digest(t, build(t, spec()))
	if again := digest(t, build(t, spec())); again != first {
		t.Fatalf("two builds of the same inputs: %s and %s", first, again)
	}
	for name, change := range map[string]func(*ociimage.Spec){
		"binary":  func(s *ociimage.Spec) { s.Binaries["linux/arm64"] = []byte("\x7fELF another arm64 ironlb") },
		"time":    func(s *ociimage.Spec) { s.Created = s.Created.Add(time.Second) },
		"version": func(s *ociimage.Spec) { s.Version = "v0.2.0" },
		"commit":  func(s *ociimage.Spec) { s.Commit = "fedcba" },
	} {
		s := spec()
		change(&s)
		if d := digest(t, build(t, s)); d == first {
			t.Errorf("another %s, same digest %s", name, d)
		}
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
	s := spec()
	idx, err := ociimage.Index(s)
	if err != nil {
		t.Fatal(err)
	}
	want := digest(t, idx)
	ref, err := pushIndex(context.Background(), idx, u.Host+"/ironlb/ironlb", s.Version, true)
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
	if got := digest(t, pulled); got != want {
		t.Errorf("pulled %s, pushed %s", got, want)
	}
	for plat, bin := range s.Binaries {
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
		if !bytes.Contains(tarball.Bytes(), bin) {
			t.Errorf("%s: the pulled image lacks its binary", plat)
		}
	}
}

// TestRun runs the command as `make image` does, on fake binaries, into a layout that exists.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	var args []string
	for _, plat := range []string{"linux/amd64", "linux/arm64"} {
		path := filepath.Join(dir, strings.ReplaceAll(plat, "/", "_"))
		if err := os.WriteFile(path, spec().Binaries[plat], 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--binary", plat+"="+path)
	}
	out := filepath.Join(dir, "image")
	args = append(args, "--version", "v0.1.0", "--commit", spec().Commit, "--source-date-epoch", "1700000000", "--out", out)
	want := digest(t, build(t, spec()))
	for range 2 { // the second run replaces the first's layout
		var stdout bytes.Buffer
		if err := run(context.Background(), args, &stdout); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stdout.String(), "ghcr.io/ironlb/ironlb:v0.1.0@"+want.String()) {
			t.Errorf("output lacks the digest %s:\n%s", want, stdout.String())
		}
		for _, plat := range []string{"linux/amd64", "linux/arm64"} {
			if !strings.Contains(stdout.String(), plat) {
				t.Errorf("output lacks %s:\n%s", plat, stdout.String())
			}
		}
	}

	if err := run(context.Background(), []string{"--version", "v0", "--binary", args[1], "--out", dir}, io.Discard); err == nil {
		t.Error("replaced a folder that is not an image layout")
	}
}
