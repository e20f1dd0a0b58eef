package lab

import (
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	manifests "github.com/ironlb/ironlb/config"
	"github.com/ironlb/ironlb/internal/ociimage"
	"github.com/ironlb/ironlb/internal/version"
)

// The images `lab up --runtime=runc` builds and pushes to the lab's registry before anything runs
// as a Pod, under the names Pods use (MirrorName of the upstream name, where the agents pull it):
//
//   - ironlb's image, built by internal/ociimage (what `make image` builds) from the lab's ironlb
//     binary, under the one ironlb image the manifests name for every role, the proxy's too
//     (ghcr.io/ironlb/ironlb:VERSION: ironlbRefs);
//   - traefik/whoami: the same layers with ENTRYPOINT ["/ironlb", "whoami"] and no USER (root, as the
//     upstream image), under the tags the tests use, and containous/whoami's.
//
// and every other image a lab Pod runs (kube-proxy, CoreDNS, MetalLB, agnhost and the e2e suites'
// pause, busybox, nginx, httpd and glibc-dns-testing): labimages.go.

// whoamiRefs are the upstream names the whoami image is pushed under.
var whoamiRefs = []string{"traefik/whoami:v1.10", "traefik/whoami:v1", "traefik/whoami:v2", "traefik/whoami:latest",
	"containous/whoami:v1.5.0", "containous/whoami:latest"}

// ironlbImageRE finds the ironlb images the manifests name.
var ironlbImageRE = regexp.MustCompile(`(?m)^\s*image:\s*"?(\S*ironlb/ironlb[^\s"]*)"?\s*$`)

// runtimePreflight checks what --runtime=runc needs: runc, and an ironlb binary that runs in an image
// without a C library (CGO_ENABLED=0: no ELF interpreter).
func (l *Lab) runtimePreflight() []error {
	if l.Plan.Config.Runtime != RuntimeRunc {
		return nil
	}
	var errs []error
	if _, err := exec.LookPath("runc"); err != nil {
		errs = append(errs, errors.New("--runtime=runc: missing runc on PATH (apt-get install runc; hack/deps.sh)"))
	}
	if err := staticBinary(l.Plan.Config.Self); err != nil {
		errs = append(errs, fmt.Errorf("--runtime=runc: %w", err))
	}
	return append(errs, runcImagePreflight()...)
}

// staticBinary fails for a dynamically linked executable.
func staticBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the image has no C library; build it with CGO_ENABLED=0 (make image does)", path)
		}
	}
	return nil
}

// RuntimeImage is one image lab up pushed for the runc runtime.
type RuntimeImage struct {
	Refs   []name.Reference
	Digest v1.Hash
}

// pushRuntimeImages builds ironlb's and whoami's images from the lab's ironlb binary, and the
// catalogue's (labimages.go), and pushes them under the mirror names of the upstream names Pods use.
func (l *Lab) pushRuntimeImages(ctx context.Context) ([]RuntimeImage, error) {
	opts, err := l.registryOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts, remote.WithContext(ctx))
	reg := l.Plan.RegistryAddr().String()
	bin, err := os.ReadFile(l.Plan.Config.Self)
	if err != nil {
		return nil, err
	}
	vi := version.Get()
	epoch, _ := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	plat := "linux/" + runtime.GOARCH
	idx, err := ociimage.Index(ociimage.Spec{Version: vi.Version, Commit: vi.Commit, Created: time.Unix(epoch, 0).UTC(),
		Binaries: map[string][]byte{plat: bin},
		// make image's layers (BestCompression: the same digests), from the layer cache when this
		// binary was packed before: compressing it takes ~10 s, hashing it a fraction of one.
		Layer: func(files []ociimage.File, mtime time.Time) (v1.Layer, error) {
			ly, _, err := cachedLayerOf(layerCacheDir(), files, mtime, gzip.BestCompression)
			return ly, err
		}})
	if err != nil {
		return nil, fmt.Errorf("building ironlb's image: %w", err)
	}
	stream, err := roleManifests()
	if err != nil {
		return nil, err
	}
	refs, err := ironlbRefs(stream)
	if err != nil {
		return nil, err
	}
	ironlb, err := pushTo(reg, idx, refs, opts)
	if err != nil {
		return nil, err
	}
	out := []RuntimeImage{ironlb}
	p, err := ociimage.ParsePlatform(plat)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var img v1.Image
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.Satisfies(*p) {
			img, err = idx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
		}
	}
	if img == nil {
		return nil, fmt.Errorf("ironlb's image has no %s manifest", plat)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := *cf.Config.DeepCopy()
	cfg.Entrypoint, cfg.User, cfg.Cmd = []string{ociimage.Entrypoint, "whoami"}, "", nil
	cfg.Labels = map[string]string{"org.opencontainers.image.title": "whoami (ironlb whoami, traefik/whoami-compatible)"}
	whoami, err := mutate.Config(img, cfg)
	if err != nil {
		return nil, err
	}
	wi, err := pushTo(reg, whoami, whoamiRefs, opts)
	if err != nil {
		return nil, err
	}
	out = append(out, wi)
	others, st, err := l.pushLabImages(ctx, v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, time.Unix(epoch, 0).UTC(), opts)
	if err != nil {
		return nil, err
	}
	l.Log("  %d more images (kube-proxy, CoreDNS, MetalLB, agnhost, pause, busybox, nginx, httpd, glibc-dns-testing, regression-issue-74839): %d layers, %.1f MB compressed, %d from the layer cache %s; built in %.1fs, pushed in %.1fs",
		len(others), st.Layers, float64(st.Compressed)/1e6, st.CacheHits, layerCacheDir(), st.Build.Seconds(), st.Push.Seconds())
	for _, s := range st.Skipped {
		l.Log("  not built: %s; Pods naming it fail to pull", s)
	}
	return append(out, others...), nil
}

// roleManifests are the controller's, the speaker's and the proxy's manifests, as the lab applies them.
func roleManifests() (string, error) {
	var stream []string
	for _, dir := range []string{"controller", "speaker", "proxy"} {
		b, err := manifests.Bundle(dir)
		if err != nil {
			return "", err
		}
		stream = append(stream, b)
	}
	return strings.Join(stream, "\n"), nil
}

// ironlbRefs are the ironlb image references the manifests in stream name, each once. They must name
// one repository: every role runs ironlb's one image, the proxy too. The proxy runs no tool (no nft,
// no conntrack): it writes its tables, the DSR table too, and deletes stale UDP flows over netlink
// (docs/image.md), so it needs nothing ironlb's image lacks.
func ironlbRefs(stream string) ([]string, error) {
	var refs []string
	seen := map[string]bool{}
	for _, m := range ironlbImageRE.FindAllStringSubmatch(stream, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			refs = append(refs, m[1])
		}
	}
	if len(refs) == 0 {
		return nil, errors.New("the manifests name no ironlb image")
	}
	repos := map[string]bool{}
	for _, r := range refs {
		ref, err := name.ParseReference(r)
		if err != nil {
			return nil, fmt.Errorf("the manifests' image %q: %w", r, err)
		}
		repos[ref.Context().Name()] = true
	}
	if len(repos) > 1 {
		return nil, fmt.Errorf("the manifests name %s: every role runs ironlb's one image", strings.Join(refs, ", "))
	}
	return refs, nil
}

// pushTo pushes t (an image or an index) under the mirror names of upstream refs.
func pushTo(reg string, t remote.Taggable, upstream []string, opts []remote.Option) (RuntimeImage, error) {
	var ri RuntimeImage
	d, ok := t.(interface{ Digest() (v1.Hash, error) })
	if !ok {
		return ri, errors.New("image without a digest")
	}
	dg, err := d.Digest()
	if err != nil {
		return ri, err
	}
	ri.Digest = dg
	for _, u := range upstream {
		m, err := MirrorName(reg, u)
		if err != nil {
			return ri, err
		}
		r, err := name.ParseReference(m, name.Insecure)
		if err != nil {
			return ri, err
		}
		// Push per name, not Put: the registry keeps blobs per repository, and a manifest put into
		// another repository (whoami's: ironlb's layers) names blobs that repository lacks
		// (MANIFEST_BLOB_UNKNOWN).
		// Push uploads only what the repository is missing.
		err = remote.Push(r, t, opts...)
		if err != nil {
			return ri, fmt.Errorf("pushing %s (%s): %w", u, r, err)
		}
		ri.Refs = append(ri.Refs, r)
	}
	return ri, nil
}
