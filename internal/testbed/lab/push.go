package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Moving images into the lab's registry (registry.go) with go-containerregistry: `ironlb lab push`
// pushes the OCI layout `make image` writes (PushLayout), and Mirror copies an upstream image
// under the name MirrorName gives it, where the node agents pull it from. The naming is pure and
// tested by table; the transfer is go-containerregistry's, handed the transport and options of
// each side.

// MirrorName is the name of upstream's copy in the mirror registry reg ("172.18.255.253:5000"):
//
//	traefik/whoami:v1.10                       -> REG/traefik/whoami:v1.10
//	nginx                                      -> REG/library/nginx:latest
//	registry.k8s.io/pause:3.10                 -> REG/registry.k8s.io/pause:3.10
//	quay.io/metallb/speaker@sha256:...         -> REG/quay.io/metallb/speaker@sha256:...
//	localhost:5000/a:b                         -> REG/localhost_5000/a:b
//
// Docker Hub's images keep their path on Docker Hub (official images under library/, as Docker
// Hub stores them); every other registry's images keep their registry's host as the first path
// component, lower case, a port joined by "_" (a path cannot hold a colon). The mapping is
// one-to-one: a Docker Hub path never starts with a component holding a dot or an underscore
// (Docker Hub's namespaces are lower-case letters and digits), and a registry's host always holds a
// dot or a port, except "localhost" alone, which no one mirrors from. So one registry mirrors every
// upstream at once. containerd's registry mirrors (hosts.toml) instead keep the path as it is and
// tell registries apart by a ?ns= query parameter, which the distribution registry ignores:
// quay.io/metallb/speaker and docker.io/metallb/speaker would collide in it.
//
// A reference with both a tag and a digest keeps the digest alone (what is pulled); one with
// neither gets :latest, as a container runtime pulls it.
func MirrorName(reg, upstream string) (string, error) {
	if _, err := name.NewRegistry(reg, name.StrictValidation); err != nil {
		return "", fmt.Errorf("mirror registry %q: %w", reg, err)
	}
	ref, err := name.ParseReference(upstream)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", upstream, err)
	}
	repo := ref.Context()
	path := repo.RepositoryStr() // library/nginx for Docker Hub's official images
	if host := repo.RegistryStr(); host != name.DefaultRegistry {
		if strings.HasPrefix(host, "[") {
			return "", fmt.Errorf("image %q: a registry named by an IPv6 address cannot be mirrored", upstream)
		}
		path = strings.ReplaceAll(strings.ToLower(host), ":", "_") + "/" + path
	}
	switch r := ref.(type) {
	case name.Digest:
		return reg + "/" + path + "@" + r.DigestStr(), nil
	case name.Tag:
		return reg + "/" + path + ":" + r.TagStr(), nil
	default:
		return "", fmt.Errorf("image %q: neither a tag nor a digest", upstream)
	}
}

// PushRef is where `ironlb lab push REF` pushes in the lab's registry reg: REF is a repository
// path with an optional tag ("ironlb/ironlb", "ironlb/ironlb:dev"), tagged defaultTag when it names
// none. A REF that names reg as its registry is taken as it is; one naming another registry, or a
// digest (the registry computes it), is an error. The reference is insecure: plain HTTP.
func PushRef(reg, ref, defaultTag string) (name.Reference, error) {
	if strings.Contains(ref, "@") {
		return nil, fmt.Errorf("%q: push to a tag, not a digest (the registry computes the digest)", ref)
	}
	full := ref
	if !strings.HasPrefix(ref, reg+"/") {
		if first, _, ok := strings.Cut(ref, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
			return nil, fmt.Errorf("%q names the registry %s, not the lab's %s: give a path in the lab's registry (ironlb/ironlb:TAG)", ref, first, reg)
		}
		full = reg + "/" + ref
	}
	if last := full[strings.LastIndex(full, "/")+1:]; !strings.Contains(last, ":") {
		full += ":" + defaultTag
	}
	r, err := name.NewTag(full, name.Insecure, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", ref, err)
	}
	return r, nil
}

// LayoutImage is the one image or index an OCI image layout holds, as `make image` writes it.
type LayoutImage struct {
	Taggable remote.Taggable // a v1.ImageIndex or a v1.Image
	Digest   v1.Hash
	// Tag is the layout's name for it (org.opencontainers.image.ref.name: the version), or "".
	Tag string
}

// ReadLayout opens the OCI image layout dir and returns what it holds. It fails unless the layout
// lists exactly one image or index: which one to push would be a guess.
func ReadLayout(dir string) (LayoutImage, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return LayoutImage{}, fmt.Errorf("%s is not an OCI image layout (make image writes bin/image): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return LayoutImage{}, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return LayoutImage{}, fmt.Errorf("%s: %w", dir, err)
	}
	if len(m.Manifests) != 1 {
		return LayoutImage{}, fmt.Errorf("%s lists %d images, want one", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	out := LayoutImage{Digest: d.Digest, Tag: d.Annotations["org.opencontainers.image.ref.name"]}
	switch {
	case d.MediaType.IsIndex():
		out.Taggable, err = top.ImageIndex(d.Digest)
	case d.MediaType.IsImage():
		out.Taggable, err = top.Image(d.Digest)
	default:
		err = fmt.Errorf("media type %q is neither an image nor an index", d.MediaType)
	}
	if err != nil {
		return LayoutImage{}, fmt.Errorf("%s: %w", dir, err)
	}
	return out, nil
}

// Push pushes img to each of refs (blobs once, then the manifest under each tag).
func Push(ctx context.Context, img LayoutImage, refs []name.Reference, opts ...remote.Option) error {
	if len(refs) == 0 {
		return errors.New("no reference to push to")
	}
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	for i, r := range refs {
		var err error
		if i == 0 {
			err = remote.Push(r, img.Taggable, opts...)
		} else {
			err = remote.Put(r, img.Taggable, opts...) // the blobs are there: the manifest alone
		}
		if err != nil {
			return fmt.Errorf("pushing %s: %w", r, err)
		}
	}
	return nil
}

// Copy copies the image or index src to dst, src read with srcOpts and dst written with dstOpts
// (each side its own transport and credentials), and returns the digest written. A multi-platform
// index is copied whole.
func Copy(ctx context.Context, src, dst name.Reference, srcOpts, dstOpts []remote.Option) (v1.Hash, error) {
	desc, err := remote.Get(src, append([]remote.Option{remote.WithContext(ctx)}, srcOpts...)...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reading %s: %w", src, err)
	}
	if err := remote.Push(dst, desc, append([]remote.Option{remote.WithContext(ctx)}, dstOpts...)...); err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", dst, err)
	}
	return desc.Digest, nil
}

// registryOpts are the options that reach the lab's registry from the root namespace.
func (l *Lab) registryOpts() ([]remote.Option, error) {
	if !l.Plan.RegistryAddr().IsValid() {
		return nil, fmt.Errorf("lab %s has no registry (bring it up with --registry)", l.Plan.Config.Name)
	}
	return []remote.Option{remote.WithTransport(l.RegistryTransport())}, nil
}

// PushLayout pushes the image or index of the OCI layout dir to the lab's registry under refs
// (PushRef's paths; ironlb/ironlb tagged with the layout's version when none is given) and returns
// the references pushed and the digest.
func (l *Lab) PushLayout(ctx context.Context, dir string, refs []string) ([]name.Reference, v1.Hash, error) {
	opts, err := l.registryOpts()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	img, err := ReadLayout(dir)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	if len(refs) == 0 {
		refs = []string{"ironlb/ironlb"}
	}
	tag := img.Tag
	if tag == "" {
		tag = "latest"
	}
	var rs []name.Reference
	for _, s := range refs {
		r, err := PushRef(l.Plan.RegistryAddr().String(), s, tag)
		if err != nil {
			return nil, v1.Hash{}, err
		}
		rs = append(rs, r)
	}
	return rs, img.Digest, Push(ctx, img, rs, opts...)
}

// Mirror copies upstream (an image reference as a Pod names it) into the lab's registry under
// MirrorName, reading it with srcOpts (the upstream's transport and credentials), and returns the
// mirror's reference and the digest.
func (l *Lab) Mirror(ctx context.Context, upstream string, srcOpts ...remote.Option) (name.Reference, v1.Hash, error) {
	opts, err := l.registryOpts()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	to, err := MirrorName(l.Plan.RegistryAddr().String(), upstream)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	src, err := name.ParseReference(upstream)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	dst, err := name.ParseReference(to, name.Insecure)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	d, err := Copy(ctx, src, dst, srcOpts, opts)
	return dst, d, err
}
