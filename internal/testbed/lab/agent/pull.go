package agent

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// imageStore pulls images from the lab's registry and keeps each image's unpacked root file system
// once per node, content-addressed by the platform image's manifest digest:
//
//	<dir>/rootfs/<hex>/         the image's layers applied in order (mutate.Extract: whiteouts done)
//	<dir>/rootfs/<hex>.json     its config file
//	<dir>/refs/<sha256(name)>.json  the image reference as Pods name it -> what was pulled for it
//
// Containers never write there: each gets an overlay with the image's rootfs as its lower layer
// (runc.go). The store survives the agent's restarts, as a node's image store survives a reboot.
type imageStore struct {
	dir       string
	registry  string // the lab registry's host:port
	transport http.RoundTripper
	platform  v1.Platform

	mu      sync.Mutex // guards the following
	unpacks map[v1.Hash]*sync.Mutex
}

// pulledImage is an image on the node.
type pulledImage struct {
	Name string `json:"name"` // canonical reference as the Pod names it (docker.io/library/nginx:latest)
	// ImageID is what container status reports: the repository @ the digest the registry served for
	// the reference (an index's digest for a multi-platform image), as containerd's repo digest.
	ImageID string `json:"imageID"`
	// Manifest is the platform image's manifest digest, the key of its unpacked rootfs.
	Manifest v1.Hash       `json:"manifest"`
	Size     int64         `json:"size"` // compressed bytes of the layers
	Rootfs   string        `json:"-"`
	Config   v1.ConfigFile `json:"-"`
}

func newImageStore(dir, registry string, transport http.RoundTripper, platform v1.Platform) *imageStore {
	return &imageStore{dir: dir, registry: registry, transport: transport, platform: platform, unpacks: map[v1.Hash]*sync.Mutex{}}
}

// pullStats are the figures of one pull, for the Pulled event and the log.
type pullStats struct {
	Pulled   bool // false: the image was on the node
	Unpacked bool // false: the rootfs was there (another reference or Pod unpacked it)
	Total    time.Duration
	Unpack   time.Duration
}

// get returns image as the pull policy has it: from the node when present and the policy allows,
// else pulled from the registry (and unpacked unless already on the node). Errors are the pull's:
// go-containerregistry's, which carry the registry's own error (MANIFEST_UNKNOWN, a refused
// connection), or ErrImageNeverPull.
func (s *imageStore) get(ctx context.Context, image string, policy corev1.PullPolicy) (pulledImage, pullStats, error) {
	t0 := time.Now()
	src, canonical, err := PullSource(s.registry, image)
	if err != nil {
		return pulledImage{}, pullStats{}, err
	}
	rec, present := s.record(canonical)
	pull, err := NeedPull(policy, image, present)
	if err != nil {
		return pulledImage{}, pullStats{}, err
	}
	if !pull {
		rec, err = s.load(rec)
		return rec, pullStats{Total: time.Since(t0)}, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(s.transport), remote.WithPlatform(s.platform)}
	desc, err := remote.Get(src, opts...)
	if err != nil {
		return pulledImage{}, pullStats{}, fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: %w", canonical, src, err)
	}
	img, err := desc.Image() // an index resolves to the node's platform
	if err != nil {
		return pulledImage{}, pullStats{}, fmt.Errorf("failed to pull and unpack image %q: %w", canonical, err)
	}
	md, err := img.Digest()
	if err != nil {
		return pulledImage{}, pullStats{}, fmt.Errorf("failed to pull and unpack image %q: %w", canonical, err)
	}
	ref, _ := name.ParseReference(image)
	rec = pulledImage{Name: canonical, ImageID: dockerIO(ref.Context().Name()) + "@" + desc.Digest.String(), Manifest: md}
	if layers, err := img.Layers(); err == nil {
		for _, l := range layers {
			if n, err := l.Size(); err == nil {
				rec.Size += n
			}
		}
	}
	st := pullStats{Pulled: true}
	tu := time.Now()
	unpacked, err := s.unpack(md, img)
	if err != nil {
		return pulledImage{}, pullStats{}, fmt.Errorf("failed to pull and unpack image %q: %w", canonical, err)
	}
	st.Unpacked, st.Unpack = unpacked, time.Since(tu)
	if err := s.save(rec); err != nil {
		return pulledImage{}, pullStats{}, err
	}
	rec, err = s.load(rec)
	st.Total = time.Since(t0)
	return rec, st, err
}

func (s *imageStore) refPath(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return filepath.Join(s.dir, "refs", hex.EncodeToString(sum[:])+".json")
}

func (s *imageStore) rootfs(md v1.Hash) string { return filepath.Join(s.dir, "rootfs", md.Hex) }

// record is what was last pulled for canonical, if its rootfs is still on the node.
func (s *imageStore) record(canonical string) (pulledImage, bool) {
	b, err := os.ReadFile(s.refPath(canonical))
	if err != nil {
		return pulledImage{}, false
	}
	var r pulledImage
	if json.Unmarshal(b, &r) != nil || r.Name != canonical {
		return pulledImage{}, false
	}
	if _, err := os.Stat(s.rootfs(r.Manifest) + ".json"); err != nil {
		return pulledImage{}, false
	}
	return r, true
}

func (s *imageStore) save(r pulledImage) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p := s.refPath(r.Name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

// load fills in the rootfs path and the config of a record.
func (s *imageStore) load(r pulledImage) (pulledImage, error) {
	b, err := os.ReadFile(s.rootfs(r.Manifest) + ".json")
	if err != nil {
		return r, fmt.Errorf("image %s: %w", r.Name, err)
	}
	if err := json.Unmarshal(b, &r.Config); err != nil {
		return r, fmt.Errorf("image %s: config: %w", r.Name, err)
	}
	r.Rootfs = s.rootfs(r.Manifest)
	return r, nil
}

// unpack writes img's flattened file system to its rootfs directory unless it is there (its config
// file, written last, marks it complete); one unpack per digest at a time. It reports whether it
// unpacked.
func (s *imageStore) unpack(md v1.Hash, img v1.Image) (bool, error) {
	s.mu.Lock()
	lk, ok := s.unpacks[md]
	if !ok {
		lk = &sync.Mutex{}
		s.unpacks[md] = lk
	}
	s.mu.Unlock()
	lk.Lock()
	defer lk.Unlock()
	dir := s.rootfs(md)
	if _, err := os.Stat(dir + ".json"); err == nil {
		return false, nil
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return false, fmt.Errorf("config: %w", err)
	}
	tmp := dir + ".partial"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return false, err
	}
	rc := mutate.Extract(img)
	err = untar(tmp, rc)
	rc.Close()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return false, fmt.Errorf("unpacking: %w", err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return false, err
	}
	return true, os.WriteFile(dir+".json", cfg, 0o644)
}

// untar writes a flattened image's tar stream under dir, confined to it (os.Root: no entry or
// symlink reaches outside), with the entries' modes and owners. Device nodes are skipped (runc
// makes the container's /dev); a FIFO or socket entry too.
func untar(dir string, r io.Reader) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	type dirMode struct {
		name string
		mode fs.FileMode
		uid  int
		gid  int
	}
	var dirs []dirMode // applied at the end: a read-only directory would refuse its own entries
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n := path.Clean("/" + h.Name)
		if n == "/" {
			continue
		}
		n = strings.TrimPrefix(n, "/")
		if parent := path.Dir(n); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(n, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			dirs = append(dirs, dirMode{n, mode.Perm() | mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky), h.Uid, h.Gid})
			continue
		case tar.TypeReg:
			_ = root.Remove(n)
			f, err := root.OpenFile(n, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			_ = root.Remove(n)
			if err := root.Symlink(h.Linkname, n); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			_ = root.Lchown(n, h.Uid, h.Gid)
			continue
		case tar.TypeLink:
			_ = root.Remove(n)
			target := strings.TrimPrefix(path.Clean("/"+h.Linkname), "/")
			if err := root.Link(target, n); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			continue
		default:
			continue
		}
		_ = root.Chown(n, h.Uid, h.Gid) // not root (unit tests): the owner stays ours
		if err := root.Chmod(n, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		// after chown, which clears a file capability
		if err := setXattrs(root, n, h.PAXRecords); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		_ = root.Chown(d.name, d.uid, d.gid)
		if err := root.Chmod(d.name, d.mode); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
	}
	return nil
}

// setXattrs sets a regular file's extended attributes from its tar entry's PAX records
// (SCHILY.xattr.<name>, as image builders write them): security.capability gives an executable its
// file capabilities (CoreDNS's cap_net_bind_service=+ep). Setting one needs CAP_SETFCAP (the agent
// runs as root).
func setXattrs(root *os.Root, name string, pax map[string]string) error {
	var keys []string
	for k := range pax {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, k := range keys {
		attr := strings.TrimPrefix(k, "SCHILY.xattr.")
		if err := unix.Fsetxattr(int(f.Fd()), attr, []byte(pax[k]), 0); err != nil {
			return fmt.Errorf("setting %s: %w", attr, err)
		}
	}
	return nil
}
