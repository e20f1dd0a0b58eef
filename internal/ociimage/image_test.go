package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// spec is a build from fake binaries, small and different per platform.
func spec() Spec {
	return Spec{
		Version: "v0.1.0",
		Commit:  "0123456789abcdef0123456789abcdef01234567",
		Created: time.Unix(1700000000, 0),
		Binaries: map[string][]byte{
			"linux/arm64": []byte("\x7fELF fake arm64 ironlb"),
			"linux/amd64": []byte("\x7fELF fake amd64 ironlb"),
		},
	}
}

// build is s's index and its digest; the test fails if it cannot be built.
func build(t *testing.T, s Spec) (v1.ImageIndex, v1.Hash) {
	t.Helper()
	idx, err := Index(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return idx, d
}

// TestIndex checks what the image is made of: one OCI manifest per platform, the config, and the
// files with their owners and modes.
func TestIndex(t *testing.T) {
	s := spec()
	idx, _ := build(t, s)
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
	_, first := build(t, spec())
	if _, again := build(t, spec()); again != first {
		t.Fatalf("two builds of the same inputs: %s and %s", first, again)
	}
	for name, change := range map[string]func(*Spec){
		"binary":  func(s *Spec) { s.Binaries["linux/arm64"] = []byte("\x7fELF another arm64 ironlb") },
		"time":    func(s *Spec) { s.Created = s.Created.Add(time.Second) },
		"version": func(s *Spec) { s.Version = "v0.2.0" },
		"commit":  func(s *Spec) { s.Commit = "fedcba" },
	} {
		s := spec()
		change(&s)
		if _, d := build(t, s); d == first {
			t.Errorf("another %s, same digest %s", name, d)
		}
	}
}

// TestIndexErrors: no binary, or a platform that is not os/arch, builds nothing.
func TestIndexErrors(t *testing.T) {
	for name, change := range map[string]func(*Spec){
		"no binary":             func(s *Spec) { s.Binaries = nil },
		"platform without arch": func(s *Spec) { s.Binaries["linux"] = []byte("x") },
	} {
		s := spec()
		change(&s)
		if idx, err := Index(s); err == nil {
			t.Errorf("%s: built %v, want an error", name, idx)
		}
	}
}

func TestParsePlatform(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want *v1.Platform // nil: an error
	}{
		{"linux/amd64", &v1.Platform{OS: "linux", Architecture: "amd64"}},
		{"linux/arm64", &v1.Platform{OS: "linux", Architecture: "arm64"}},
		{"linux", nil},
		{"/amd64", nil},
		{"linux/", nil},
		{"linux/arm/v7", nil}, // variants are not taken
	} {
		got, err := ParsePlatform(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("%q: %+v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%q (-want +got)\n%s", tt.in, diff)
		}
	}
}
