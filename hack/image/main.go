// Command image builds ironlb's OCI image without a container runtime: from an empty base, one layer
// of base files (/etc/passwd, /etc/group, /tmp, ...) and one layer with the static binary, for each
// platform a binary is given for, under one OCI index. It writes an OCI image layout and can push
// the index to a registry. `make image` builds the binaries and runs it; docs/image.md describes
// the image.
//
//	go run ./hack/image --version v0.1.0 --commit $(git rev-parse HEAD) --source-date-epoch 1700000000 \
//	    --binary linux/amd64=bin/linux_amd64/ironlb --binary linux/arm64=bin/linux_arm64/ironlb \
//	    --out bin/image [--push registry.example:5000/ironlb/ironlb [--insecure]]
//
// The same binaries, version, commit and time give the same digest: nothing else enters the image
// (no build time, no file owner names, no gzip time stamps).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironlb/ironlb/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	s := ociimage.Spec{Binaries: map[string][]byte{}}
	var (
		repo, out, push string
		insecure        bool
		epoch           int64
	)
	fs.StringVar(&s.Version, "version", "", "release version: the layout's tag and the image's labels (required)")
	fs.StringVar(&s.Commit, "commit", "", "git commit of the binaries (the image's revision label)")
	fs.Int64Var(&epoch, "source-date-epoch", envEpoch(), "the image's only time stamp, in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	fs.StringVar(&repo, "repo", "ghcr.io/ironlb/ironlb", "repository the layout names the image by (with --version as tag)")
	fs.StringVar(&out, "out", "bin/image", "OCI image layout to write (replaced)")
	fs.StringVar(&push, "push", "", "also push the index to this reference (tag --version when it names none)")
	fs.BoolVar(&insecure, "insecure", false, "push over plain HTTP (a lab or local registry)")
	fs.Func("binary", "os/arch=path: the static ironlb binary for a platform (repeat per platform)", func(v string) error {
		plat, path, ok := strings.Cut(v, "=")
		if !ok {
			return errors.New("want os/arch=path")
		}
		if _, err := ociimage.ParsePlatform(plat); err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s.Binaries[plat] = b
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.Version == "" {
		return errors.New("--version is required")
	}
	s.Created = time.Unix(epoch, 0).UTC()
	idx, err := ociimage.Index(s)
	if err != nil {
		return err
	}
	if err := writeLayout(out, idx, repo+":"+s.Version, s.Version); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := summary(stdout, idx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s:%s@%s written to %s\n", repo, s.Version, d, out)
	if push != "" {
		ref, err := pushIndex(ctx, idx, push, s.Version, insecure, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pushed %s (%s)\n", ref.Context().Digest(d.String()), ref)
	}
	return nil
}

func envEpoch() int64 {
	n, _ := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	return n
}

// writeLayout replaces dir with an OCI image layout holding idx, named ref (containerd's
// `ctr images import` name) and tag (the OCI ref.name). It refuses a dir that exists and is not a
// layout, so that a mistyped --out removes nothing.
func writeLayout(dir string, idx v1.ImageIndex, ref, tag string) error {
	if _, err := os.Stat(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("%s exists and is not an OCI image layout", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          ref,
	}))
}

// pushIndex pushes idx to ref (tagged tag when ref names no tag or digest) and returns the
// reference pushed to. insecure allows plain HTTP.
func pushIndex(ctx context.Context, idx v1.ImageIndex, ref, tag string, insecure bool, opts ...remote.Option) (name.Reference, error) {
	nopts := []name.Option{name.WithDefaultTag(tag)}
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, err
	}
	if err := remote.WriteIndex(r, idx, append([]remote.Option{remote.WithContext(ctx)}, opts...)...); err != nil {
		return nil, fmt.Errorf("pushing %s: %w", r, err)
	}
	return r, nil
}

// summary prints each platform's manifest digest and size, compressed (what a node pulls: manifest,
// config and layers) and uncompressed (the layers' tar streams, about what it unpacks).
func summary(w io.Writer, idx v1.ImageIndex) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "platform\tmanifest\tcompressed\tuncompressed")
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		pulled, unpacked, err := sizes(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", desc.Platform, desc.Digest, mib(pulled+desc.Size), mib(unpacked))
	}
	return tw.Flush()
}

// sizes returns an image's config and layers size, compressed, and its layers' size uncompressed.
func sizes(img v1.Image) (compressed, uncompressed int64, err error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, 0, err
	}
	compressed = m.Config.Size
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		compressed += n
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, err
		}
		u, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, err
		}
		uncompressed += u
	}
	return compressed, uncompressed, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB (%d B)", float64(n)/(1<<20), n) }
