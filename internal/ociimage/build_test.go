package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// entries lists a layer's tar entries as "name type uid mode" and its xattrs.
func entries(t *testing.T, l v1.Layer) ([]string, map[string]map[string]string) {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	x := map[string]map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name+" "+string(h.Typeflag))
		for k, v := range h.PAXRecords {
			if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if x[h.Name] == nil {
					x[h.Name] = map[string]string{}
				}
				x[h.Name][name] = v
			}
		}
	}
	return out, x
}

func TestNewLayerParentsAndOrder(t *testing.T) {
	capab := FileCapability(10)
	l, err := NewLayer([]File{
		{Name: "usr/sbin/nginx", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Name: "coredns", Mode: 0o755, Data: []byte("x"), Xattrs: map[string]string{"security.capability": capab}},
		{Name: "bin/sh", Link: "/bin/busybox"},
		{Name: "usr", Mode: 0o700, Dir: true}, // given: kept as given, not added again
	}, time.Unix(0, 0), gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	got, x := entries(t, l)
	want := []string{"bin/ 5", "bin/sh 2", "coredns 0", "usr/ 5", "usr/sbin/ 5", "usr/sbin/nginx 0"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("entries %v, want %v", got, want)
	}
	if x["coredns"]["security.capability"] != capab {
		t.Errorf("coredns xattrs %q", x["coredns"])
	}
}

func TestNewLayerRefuses(t *testing.T) {
	for _, files := range [][]File{
		{{Name: "a", Data: []byte("1")}, {Name: "a", Data: []byte("2")}},
		{{Name: "/abs"}},
		{{Name: "a/../../b"}},
		{{Name: "a/"}},
		{{Name: ""}},
	} {
		if _, err := NewLayer(files, time.Unix(0, 0), gzip.BestSpeed); err == nil {
			t.Errorf("%+v: no error", files)
		}
	}
}

func TestNewLayerReproducible(t *testing.T) {
	files := []File{{Name: "b", Data: []byte("b")}, {Name: "a/x", Data: []byte("x")}}
	var d []v1.Hash
	for range 2 {
		l, err := NewLayer(files, time.Unix(1, 0), gzip.BestSpeed)
		if err != nil {
			t.Fatal(err)
		}
		h, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		d = append(d, h)
	}
	if d[0] != d[1] {
		t.Errorf("digests %v differ", d)
	}
}

// FileCapability matches what setcap writes (getfattr -e hex -n security.capability after
// `setcap cap_net_bind_service=+ep`): 0x0100000200040000000000000000000000000000.
func TestFileCapability(t *testing.T) {
	const want = "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	if got := FileCapability(10); got != want {
		t.Errorf("FileCapability(10) = %x, want %x", got, want)
	}
	if got := FileCapability(33); got[12:16] != "\x02\x00\x00\x00" { // CAP_MAC_ADMIN: the high word
		t.Errorf("FileCapability(33) = %x", got)
	}
}

func TestNewImage(t *testing.T) {
	l, err := NewLayer([]File{{Name: "agnhost", Mode: 0o755, Data: []byte("x")}}, time.Unix(0, 0), gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	img, err := NewImage(v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}},
		time.Unix(0, 0), Part{Layer: l, CreatedBy: "agnhost"})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "amd64" || cf.Config.Entrypoint[0] != "/agnhost" || len(cf.RootFS.DiffIDs) != 1 || cf.History[0].CreatedBy != "agnhost" {
		t.Errorf("config %+v", cf)
	}
}
