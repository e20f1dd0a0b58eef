// Package ociimage builds ironlb's OCI image without a container runtime: from an empty base, one
// layer of base files (/etc/passwd, /etc/group, /tmp, ...) and one layer with the static binary, for
// each platform a binary is given for, under one OCI index, reproducibly (docs/image.md). hack/image
// (`make image`) writes it as an OCI layout; the lab builds it at `lab up --runtime=runc`.
package ociimage

import (
	"compress/gzip"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What every image carries, whatever the platform.
const (
	// Entrypoint is where the binary sits; /usr/local/bin/ironlb links to it so that
	// `kubectl exec ... -- ironlb status` finds it on PATH.
	Entrypoint = "/ironlb"
	// User is nonroot (65532, as in the distroless images): the roles that need root say so in their
	// Pod's securityContext (runAsUser: 0), the others run unprivileged without asking.
	User   = "65532:65532"
	source = "https://github.com/ironlb/ironlb"
)

// env is the image's environment: a PATH for `kubectl exec`, nothing else.
var env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// Spec is one build of ironlb's image: a binary per platform and the facts the image records.
type Spec struct {
	Version string // the release version: labels and annotations (the tag is the caller's)
	Commit  string // the git commit the binaries were built from
	// Created is the only time the image records (config, history, tar entries): the commit's
	// time or $SOURCE_DATE_EPOCH, so that the same inputs give the same digest.
	Created time.Time
	// Binaries maps each platform ("linux/amd64") to its static ironlb binary (CGO_ENABLED=0).
	Binaries map[string][]byte
	// Layer, if set, makes each layer from its files instead of compressing them here: it must give
	// the bytes NewLayer(files, mtime, gzip.BestCompression) gives (the lab passes a cache of those,
	// so a warm lab up does not compress its ~100 MB binary again).
	Layer func(files []File, mtime time.Time) (v1.Layer, error)
}

// layer makes one of s's layers.
func (s Spec) layer(files []File) (v1.Layer, error) {
	if s.Layer != nil {
		return s.Layer(files, s.Created)
	}
	return layer(files, s.Created)
}

// Index builds the multi-platform image: an OCI index with one manifest per platform of
// s.Binaries, in platform order. Each image has two layers: the base files (filesystem) and the
// binary. It fails if a platform is not os/arch or no binary is given.
func Index(s Spec) (v1.ImageIndex, error) {
	if len(s.Binaries) == 0 {
		return nil, errors.New("no binary")
	}
	base, err := s.layer(baseFiles())
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	var idx v1.ImageIndex = empty.Index
	for _, plat := range slices.Sorted(maps.Keys(s.Binaries)) {
		p, err := ParsePlatform(plat)
		if err != nil {
			return nil, err
		}
		img, err := image(s, p, base, s.Binaries[plat])
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", plat, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	annotated, ok := mutate.Annotations(idx, labels(s)).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("annotating the index")
	}
	return annotated, nil
}

// ParsePlatform parses "os/arch".
func ParsePlatform(s string) (*v1.Platform, error) {
	goos, arch, ok := strings.Cut(s, "/")
	if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") {
		return nil, fmt.Errorf("platform %q: want os/arch", s)
	}
	return &v1.Platform{OS: goos, Architecture: arch}, nil
}

// labels are the OCI annotations, set as the images' labels and on the index.
func labels(s Spec) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "ironlb",
		"org.opencontainers.image.description": "LoadBalancer Services for bare-metal Kubernetes (controller, speaker, proxy, status)",
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.revision":    s.Commit,
		"org.opencontainers.image.created":     s.Created.UTC().Format(time.RFC3339),
	}
}

// image is one platform's image: the base layer, the binary's layer and the config.
func image(s Spec, p *v1.Platform, base v1.Layer, bin []byte) (v1.Image, error) {
	binLayer, err := s.layer([]File{{Name: strings.TrimPrefix(Entrypoint, "/"), Mode: 0o755, Data: bin}})
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Config: v1.Config{
			Entrypoint: []string{Entrypoint},
			User:       User,
			Env:        env,
			WorkingDir: "/",
			Labels:     labels(s),
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Created.UTC()}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer,
			History: v1.History{Created: created, CreatedBy: "hack/image: /etc/passwd, /etc/group, /etc/nsswitch.conf, /tmp, /home/nonroot"}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer,
			History: v1.History{Created: created, CreatedBy: fmt.Sprintf("hack/image: %s %s (%s)", Entrypoint, s.Version, s.Commit)}},
	)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, created)
}

// baseFiles are what the roles need from a filesystem beside the binary: users and groups for
// the numeric IDs the manifests use (root for the speaker and the proxy, nobody 65534 for the
// controller, nonroot 65532 the image's default), name resolution through /etc/hosts then DNS, and
// a /tmp. No CA certificates: in a cluster the service account's CA is mounted, and ironlb
// calls nothing else over TLS. No shell, no nft, no conntrack (see docs/image.md).
func baseFiles() []File {
	return append(BaseFiles(), File{Name: "usr/local/bin/ironlb", Mode: 0o777, Link: Entrypoint})
}

// BaseFiles are the files every image of this package starts from (the lab's images share them):
// /etc/passwd and /etc/group with root, nobody (65534) and nonroot (65532), /etc/nsswitch.conf
// (hosts: files dns), /tmp, the users' homes and /usr/local/bin.
func BaseFiles() []File {
	return []File{
		{Name: "etc", Mode: 0o755, Dir: true},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Name: "etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Name: "home", Mode: 0o755, Dir: true},
		{Name: "home/nonroot", Mode: 0o700, UID: 65532, GID: 65532, Dir: true},
		{Name: "root", Mode: 0o700, Dir: true},
		{Name: "tmp", Mode: 0o1777, Dir: true},
		{Name: "usr", Mode: 0o755, Dir: true},
		{Name: "usr/local", Mode: 0o755, Dir: true},
		{Name: "usr/local/bin", Mode: 0o755, Dir: true},
	}
}

// layer is ironlb's reproducible layer of files, compressed as small as gzip makes it (the level
// Spec.Layer must match).
func layer(files []File, mtime time.Time) (v1.Layer, error) {
	return NewLayer(files, mtime, gzip.BestCompression)
}
