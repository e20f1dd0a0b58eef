package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The general builder under ironlb's image, which the lab also uses for the images its Pods run
// (internal/testbed/lab/labimages.go): a layer from a list of files, and an image from layers and
// a config. Everything is reproducible: the same files, time and level give the same digest.

// File is one entry of a layer: a regular file (Data), a directory (Dir) or a symlink (Link).
type File struct {
	Name     string // relative, without a leading or trailing slash
	Mode     int64  // permission bits (and setuid, setgid, sticky)
	UID, GID int
	Dir      bool
	Link     string
	Data     []byte
	// Xattrs are extended attributes, as PAX records (SCHILY.xattr.<name>): security.capability
	// for a file capability (FileCapability).
	Xattrs map[string]string
}

// NewLayer is a gzip-compressed (at level) OCI layer of files, reproducible: entries in name
// order, every time mtime, owners numeric without names, no gzip header time or name. A parent
// directory the list lacks is added (0755, root's), as image builders write them; two entries of
// one name are an error.
func NewLayer(files []File, mtime time.Time, level int) (v1.Layer, error) {
	files, err := withParents(files)
	if err != nil {
		return nil, err
	}
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: mtime.UTC().Truncate(time.Second)}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, f.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if len(f.Xattrs) > 0 {
			h.PAXRecords = map[string]string{}
			for k, v := range f.Xattrs {
				h.PAXRecords["SCHILY.xattr."+k] = v
			}
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, level) // zero Header: no name, no time
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	compressed := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// withParents sorts files by name, adds the directories their names need and refuses a name given
// twice or a path that is not relative and clean.
func withParents(files []File) ([]File, error) {
	have := map[string]bool{}
	out := make([]File, 0, len(files))
	for _, f := range files {
		if f.Name == "" || path.Clean(f.Name) != f.Name || strings.HasPrefix(f.Name, "/") || f.Name == "." || strings.HasPrefix(f.Name, "../") || f.Name == ".." {
			return nil, fmt.Errorf("layer entry %q: want a clean relative path", f.Name)
		}
		if have[f.Name] {
			return nil, fmt.Errorf("layer entry %q given twice", f.Name)
		}
		have[f.Name] = true
		out = append(out, f)
	}
	for _, f := range slices.Clone(out) {
		for d := path.Dir(f.Name); d != "."; d = path.Dir(d) {
			if !have[d] {
				have[d] = true
				out = append(out, File{Name: d, Mode: 0o755, Dir: true})
			}
		}
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Part is one layer of an image with the history line that says where it came from.
type Part struct {
	Layer     v1.Layer
	CreatedBy string
}

// NewImage is a single-platform OCI image of parts (bottom first) with cfg as its config, created
// at created (the config's and every history entry's time).
func NewImage(p v1.Platform, cfg v1.Config, created time.Time, parts ...Part) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture, OS: p.OS, Variant: p.Variant,
		Config: cfg,
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	t := v1.Time{Time: created.UTC()}
	adds := make([]mutate.Addendum, 0, len(parts))
	for _, pt := range parts {
		adds = append(adds, mutate.Addendum{Layer: pt.Layer, MediaType: types.OCILayer, History: v1.History{Created: t, CreatedBy: pt.CreatedBy}})
	}
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, t)
}

// FileCapability is the value of a security.capability extended attribute (struct
// vfs_cap_data, revision 2) that gives an executable the capabilities caps (numbers, as
// CAP_NET_BIND_SERVICE = 10) permitted and effective when it runs (setcap caps=+ep).
func FileCapability(caps ...uint) string {
	var perm [2]uint32
	for _, c := range caps {
		perm[c/32] |= 1 << (c % 32)
	}
	const revision2, effective = 0x02000000, 0x1
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], revision2|effective)
	binary.LittleEndian.PutUint32(b[4:], perm[0]) // permitted, low word
	binary.LittleEndian.PutUint32(b[8:], 0)       // inheritable, low word
	binary.LittleEndian.PutUint32(b[12:], perm[1])
	binary.LittleEndian.PutUint32(b[16:], 0)
	return string(b)
}
