package lab

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironlb/ironlb/internal/ociimage"
)

// The host side of labimages.go: reading the files of each layer, compressing them (once per
// content: a cache under $IRONLB_CACHE/lab-images), and pushing the images.

// Host programs the image layers take from Debian (hack/deps.sh installs them).
var (
	busyboxBin    = "/bin/busybox" // busybox-static
	toolPrograms  = []string{"/usr/bin/bash", "/usr/bin/curl", "/usr/bin/dig", "/usr/bin/nc", "/usr/bin/socat", "/usr/bin/getent"}
	wgetProgram   = "/usr/bin/wget" // GNU wget (labimages.go: busybox's crashes on -T)
	iptablesProgs = []string{"/usr/sbin/iptables", "/usr/sbin/iptables-save", "/usr/sbin/iptables-restore",
		"/usr/sbin/ip6tables", "/usr/sbin/ip6tables-save", "/usr/sbin/ip6tables-restore", "/usr/sbin/nft"}
)

// labImageLevel is the gzip level of the lab's images: they go from the host to a registry on the
// same machine, so speed counts more than size.
const labImageLevel = gzip.BestSpeed

// imageInputs are the binaries the lab's images are built from.
type imageInputs struct {
	kubeProxy, coredns, agnhost, regress, metallb string
}

func (l *Lab) imageInputs() imageInputs {
	return imageInputs{kubeProxy: l.bin("kube-proxy"), coredns: l.corednsBin(),
		agnhost: filepath.Join(DefaultE2EBin(), "agnhost"), regress: filepath.Join(DefaultE2EBin(), "regression-issue-74839"), metallb: DefaultMetalLBBin()}
}

// runcImagePreflight checks the host files every runc lab needs for its images (agnhost and
// MetalLB are optional: without them their images are not built).
func runcImagePreflight() []error {
	var errs []error
	if _, err := os.Stat(busyboxBin); err != nil {
		errs = append(errs, fmt.Errorf("--runtime=runc: missing %s, the busybox images' (apt-get install busybox-static; hack/deps.sh)", busyboxBin))
	} else if err := staticBinary(busyboxBin); err != nil {
		errs = append(errs, fmt.Errorf("--runtime=runc: %s is not busybox-static: %w", busyboxBin, err))
	}
	for _, p := range append(append(slices.Clone(toolPrograms), wgetProgram), iptablesProgs...) {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("--runtime=runc: missing %s, which the lab's images carry (hack/deps.sh installs it)", p))
		}
	}
	return errs
}

// missing says why an image cannot be built on this host ("" when it can): an optional binary
// not built.
func (in imageInputs) missing(img labImage) string {
	for _, ly := range img.layers {
		var f string
		switch ly {
		case layerAgnhost:
			f = in.agnhost
		case layerRegress:
			f = in.regress
		case layerMLBCtrl:
			f = filepath.Join(in.metallb, "controller")
		case layerMLBSpkr:
			f = filepath.Join(in.metallb, "speaker")
		}
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return f + " is missing"
		}
	}
	return ""
}

// hostFile is a host file's content at name in the image.
func hostFile(src, name string, mode int64) (ociimage.File, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return ociimage.File{}, err
	}
	return ociimage.File{Name: name, Mode: mode, Data: b}, nil
}

// hostPrograms are host programs at their own paths (a symlink kept as a link to the file it
// resolves to) with every library ldd lists and the loader, each at the path ldd gives.
func hostPrograms(progs []string, programs bool) ([]ociimage.File, error) {
	var out []ociimage.File
	have := map[string]bool{}
	add := func(name, src string) error {
		name = strings.TrimPrefix(filepath.Clean(name), "/")
		if have[name] {
			return nil
		}
		have[name] = true
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			return err
		}
		st, err := os.Stat(real)
		if err != nil {
			return err
		}
		f, err := hostFile(real, name, int64(st.Mode().Perm()))
		if err != nil {
			return err
		}
		out = append(out, f)
		return nil
	}
	for _, p := range progs {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		if programs {
			if real != p {
				n := strings.TrimPrefix(p, "/")
				if !have[n] {
					have[n] = true
					out = append(out, ociimage.File{Name: n, Mode: 0o777, Link: real})
				}
			}
			if err := add(real, real); err != nil {
				return nil, err
			}
		}
		lddOut, err := exec.Command("ldd", real).CombinedOutput()
		if err != nil && !strings.Contains(string(lddOut), "not a dynamic executable") {
			return nil, fmt.Errorf("ldd %s: %v: %s", real, err, lddOut)
		}
		libs, err := lddPaths(string(lddOut))
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", real, err)
		}
		for _, lib := range libs {
			if err := add(lib, lib); err != nil {
				return nil, fmt.Errorf("%s's %s: %w", real, lib, err)
			}
		}
	}
	return out, nil
}

// layerFiles reads the files of layer ly.
func (in imageInputs) layerFiles(ly string) ([]ociimage.File, error) {
	switch ly {
	case layerBase:
		return ociimage.BaseFiles(), nil
	case layerBusybox:
		f, err := hostFile(busyboxBin, "bin/busybox", 0o755)
		if err != nil {
			return nil, err
		}
		list, err := exec.Command(busyboxBin, "--list-full").Output()
		if err != nil {
			return nil, fmt.Errorf("%s --list-full: %w", busyboxBin, err)
		}
		links, err := appletLinks(string(list))
		if err != nil {
			return nil, err
		}
		return append(links, f), nil
	case layerWget:
		// At /usr/bin/wget, where the busybox layer below has its applet's link: this file wins.
		return hostPrograms([]string{wgetProgram}, true)
	case layerTools:
		files, err := hostPrograms(toolPrograms, true)
		if err != nil {
			return nil, err
		}
		// /bin/sh is bash here, over busybox's link: Debian's busybox-static is built to prefer its
		// own applets, so its sh runs the nc and wget applets whatever PATH holds, and the e2e suite
		// runs `sh -c "echo hostName | nc -v -t -w 2 HOST PORT"` (the applet has no -v) and
		// `sh -c "wget -T 5 ..."` (the applet crashes) in agnhost pods. agnhost's upstream image is
		// alpine, whose busybox sh looks programs up in PATH; bash does too.
		return append(files, ociimage.File{Name: "bin/bash", Mode: 0o777, Link: "/usr/bin/bash"},
			ociimage.File{Name: "bin/sh", Mode: 0o777, Link: "/usr/bin/bash"}), nil
	case layerAgnhost:
		f, err := hostFile(in.agnhost, "agnhost", 0o755)
		if err != nil {
			return nil, err
		}
		return []ociimage.File{f, {Name: "agnhost-2", Mode: 0o777, Link: "/agnhost"}}, nil
	case layerRegress:
		f, err := hostFile(in.regress, "regression-issue-74839", 0o755)
		return []ociimage.File{f}, err
	case layerWeb:
		return webFiles(), nil
	case layerIPTables:
		files, err := hostPrograms(iptablesProgs, true)
		if err != nil {
			return nil, err
		}
		// iptables' extensions (libxt_*.so), which libxtables loads by name at run time.
		mods, _ := filepath.Glob("/usr/lib/*-linux-gnu*/xtables/*.so")
		for _, m := range mods {
			f, err := hostFile(m, strings.TrimPrefix(m, "/"), 0o644)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		}
		if len(mods) == 0 {
			return nil, errors.New("no iptables extensions under /usr/lib/*/xtables (apt-get install iptables)")
		}
		// and the libraries they need beyond the programs' (libxt_statistic.so: libm)
		libs, err := hostPrograms(mods, false)
		if err != nil {
			return nil, err
		}
		have := map[string]bool{}
		for _, f := range files {
			have[f.Name] = true
		}
		for _, f := range libs {
			if !have[f.Name] {
				files = append(files, f)
			}
		}
		return files, nil
	case layerKubeProxy:
		f, err := hostFile(in.kubeProxy, "usr/local/bin/kube-proxy", 0o755)
		return []ociimage.File{f}, err
	case layerCoreDNS:
		f, err := hostFile(in.coredns, "coredns", 0o755)
		f.Xattrs = map[string]string{"security.capability": ociimage.FileCapability(10)} // CAP_NET_BIND_SERVICE
		return []ociimage.File{f}, err
	case layerMetalLBC:
		return hostPrograms([]string{filepath.Join(in.metallb, "controller"), filepath.Join(in.metallb, "speaker")}, false)
	case layerMLBCtrl:
		f, err := hostFile(filepath.Join(in.metallb, "controller"), "controller", 0o755)
		return []ociimage.File{f}, err
	case layerMLBSpkr:
		f, err := hostFile(filepath.Join(in.metallb, "speaker"), "speaker", 0o755)
		return []ociimage.File{f}, err
	}
	return nil, fmt.Errorf("no layer %q", ly)
}

// layerKey is the content key of a layer: every entry's metadata and data's hash, the time and the
// compression level.
func layerKey(files []ociimage.File, mtime time.Time, level int) string {
	h := sha256.New()
	fmt.Fprintf(h, "v1 %d %d\n", mtime.Unix(), level)
	for _, f := range slices.SortedFunc(slices.Values(files), func(a, b ociimage.File) int { return strings.Compare(a.Name, b.Name) }) {
		d := sha256.Sum256(f.Data)
		var xs []string
		for k, v := range f.Xattrs {
			xs = append(xs, k+"="+hex.EncodeToString([]byte(v)))
		}
		slices.Sort(xs)
		fmt.Fprintf(h, "%q %o %d %d %t %q %x %q\n", f.Name, f.Mode, f.UID, f.GID, f.Dir, f.Link, d, xs)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fileLayer is a compressed layer in the cache, with its digests recorded beside it.
type fileLayer struct {
	path   string
	Digest v1.Hash `json:"digest"`
	DiffID v1.Hash `json:"diffID"`
	Bytes  int64   `json:"size"`
}

func (l *fileLayer) layer() v1.Layer { return cachedLayer{l} }

type cachedLayer struct{ *fileLayer }

func (c cachedLayer) Digest() (v1.Hash, error)             { return c.fileLayer.Digest, nil }
func (c cachedLayer) DiffID() (v1.Hash, error)             { return c.fileLayer.DiffID, nil }
func (c cachedLayer) Size() (int64, error)                 { return c.Bytes, nil }
func (c cachedLayer) MediaType() (types.MediaType, error)  { return types.OCILayer, nil }
func (c cachedLayer) Compressed() (io.ReadCloser, error)   { return os.Open(c.path) }
func (c cachedLayer) Uncompressed() (io.ReadCloser, error) { return gunzipFile(c.path) }

type gunzip struct {
	*gzip.Reader
	f *os.File
}

func (g gunzip) Close() error { return errors.Join(g.Reader.Close(), g.f.Close()) }

func gunzipFile(p string) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return gunzip{zr, f}, nil
}

// layerCacheDir is where compressed layers are kept between labs.
func layerCacheDir() string {
	cache := os.Getenv("IRONLB_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ironlb")
	}
	return filepath.Join(cache, "lab-images", "layers")
}

// cachedLayerOf is the layer of files: from the cache when a layer of the same content is there,
// else built and put there. hit says which.
func cachedLayerOf(dir string, files []ociimage.File, mtime time.Time, level int) (v1.Layer, bool, error) {
	key := layerKey(files, mtime, level)
	blob, meta := filepath.Join(dir, key+".tar.gz"), filepath.Join(dir, key+".json")
	if b, err := os.ReadFile(meta); err == nil {
		fl := &fileLayer{path: blob}
		if json.Unmarshal(b, fl) == nil {
			if st, err := os.Stat(blob); err == nil && st.Size() == fl.Bytes {
				return fl.layer(), true, nil
			}
		}
	}
	l, err := ociimage.NewLayer(files, mtime, level)
	if err != nil {
		return nil, false, err
	}
	fl := &fileLayer{path: blob}
	if fl.Digest, err = l.Digest(); err != nil {
		return nil, false, err
	}
	if fl.DiffID, err = l.DiffID(); err != nil {
		return nil, false, err
	}
	if fl.Bytes, err = l.Size(); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(dir, key+".*.partial")
	if err != nil {
		return nil, false, err
	}
	_, err = io.Copy(tmp, rc)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), blob)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return nil, false, err
	}
	b, _ := json.Marshal(fl)
	if err := os.WriteFile(meta, b, 0o644); err != nil {
		return nil, false, err
	}
	return fl.layer(), false, nil
}

// labImageStats are the figures of one build of the lab's images.
type labImageStats struct {
	Layers, CacheHits int
	Compressed        int64 // bytes of the distinct layers
	Build, Push       time.Duration
	Skipped           []string // images not built, and why
}

// builtImage is one image of the catalogue, built.
type builtImage struct {
	name    string
	img     v1.Image
	refs    []string
	parts   []ociimage.Part
	plat    v1.Platform
	cfg     v1.Config
	created time.Time
}

// mounting is the image with each layer that from says another repository of the registry has
// marked for a cross-repository mount from there (the registry links the blob instead of taking
// it again); the manifest, so the digest, is the same.
func (b builtImage) mounting(from map[v1.Hash]name.Reference) (v1.Image, error) {
	parts := slices.Clone(b.parts)
	for i, p := range parts {
		d, err := p.Layer.Digest()
		if err != nil {
			return nil, err
		}
		if r, ok := from[d]; ok {
			parts[i].Layer = &remote.MountableLayer{Layer: p.Layer, Reference: r}
		}
	}
	return ociimage.NewImage(b.plat, b.cfg, b.created, parts...)
}

// buildLabImages builds the catalogue's images (labimages.go) that this host has the inputs for,
// each distinct layer once, compressed layers cached in cacheDir.
func buildLabImages(in imageInputs, plat v1.Platform, created time.Time, cacheDir string) ([]builtImage, labImageStats, error) {
	var st labImageStats
	t0 := time.Now()
	layers := map[string]v1.Layer{}
	var imgs []builtImage
	for _, li := range labImages() {
		if why := in.missing(li); why != "" {
			st.Skipped = append(st.Skipped, li.name+" ("+why+")")
			continue
		}
		var parts []ociimage.Part
		for _, ly := range li.layers {
			layer, ok := layers[ly]
			if !ok {
				files, err := in.layerFiles(ly)
				if err != nil {
					return nil, st, fmt.Errorf("%s image, layer %s: %w", li.name, ly, err)
				}
				var hit bool
				layer, hit, err = cachedLayerOf(cacheDir, files, created, labImageLevel)
				if err != nil {
					return nil, st, fmt.Errorf("%s image, layer %s: %w", li.name, ly, err)
				}
				layers[ly] = layer
				st.Layers++
				if hit {
					st.CacheHits++
				}
				n, _ := layer.Size()
				st.Compressed += n
			}
			parts = append(parts, ociimage.Part{Layer: layer, CreatedBy: "ironlb lab: " + ly})
		}
		cfg := li.config
		cfg.Labels = map[string]string{"org.opencontainers.image.title": li.name + " (built by ironlb lab for --runtime=runc)"}
		img, err := ociimage.NewImage(plat, cfg, created, parts...)
		if err != nil {
			return nil, st, fmt.Errorf("%s image: %w", li.name, err)
		}
		imgs = append(imgs, builtImage{name: li.name, img: img, refs: li.refs, parts: parts, plat: plat, cfg: cfg, created: created})
	}
	st.Build = time.Since(t0)
	return imgs, st, nil
}

// pushLabImages builds the catalogue's images and pushes each under the mirror names of its
// upstream references.
func (l *Lab) pushLabImages(ctx context.Context, plat v1.Platform, created time.Time, opts []remote.Option) ([]RuntimeImage, labImageStats, error) {
	imgs, st, err := buildLabImages(l.imageInputs(), plat, created, layerCacheDir())
	if err != nil {
		return nil, st, err
	}
	t0 := time.Now()
	out, err := pushBuilt(ctx, l.Plan.RegistryAddr().String(), imgs, opts)
	if err != nil {
		return nil, st, err
	}
	st.Push = time.Since(t0)
	return out, st, nil
}

// pushBuilt pushes each image under the mirror names in registry reg of its upstream references,
// a layer that one repository got mounted from there into the next (as one registry's blob).
func pushBuilt(ctx context.Context, reg string, imgs []builtImage, opts []remote.Option) ([]RuntimeImage, error) {
	var out []RuntimeImage
	from := map[v1.Hash]name.Reference{} // layer -> a repository that has it
	for _, b := range imgs {
		ri := RuntimeImage{}
		var err error
		if ri.Digest, err = b.img.Digest(); err != nil {
			return nil, err
		}
		for _, u := range b.refs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			m, err := MirrorName(reg, u)
			if err != nil {
				return nil, err
			}
			r, err := name.ParseReference(m, name.Insecure)
			if err != nil {
				return nil, err
			}
			img, err := b.mounting(from)
			if err != nil {
				return nil, err
			}
			if err := remote.Push(r, img, opts...); err != nil {
				return nil, fmt.Errorf("pushing %s (%s): %w", u, r, err)
			}
			for _, p := range b.parts {
				if d, err := p.Layer.Digest(); err == nil {
					if _, ok := from[d]; !ok {
						from[d] = r
					}
				}
			}
			ri.Refs = append(ri.Refs, r)
		}
		out = append(out, ri)
	}
	return out, nil
}
