package lab

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	manifests "github.com/ironlb/ironlb/config"
	"github.com/ironlb/ironlb/internal/ociimage"
)

func TestLddPaths(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      []string
		err       bool
	}{
		{name: "dynamic", out: "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n",
			want: []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}},
		{name: "static", out: "\tnot a dynamic executable\n"},
		{name: "static-pie", out: "\tstatically linked\n"},
		{name: "missing", out: "\tlibfoo.so.1 => not found\n", err: true},
	} {
		got, err := lddPaths(c.out)
		if (err != nil) != c.err || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v (error %v)", c.name, got, err, c.want, c.err)
		}
	}
}

func TestAppletLinks(t *testing.T) {
	got, err := appletLinks("usr/bin/[\nbin/sh\nbin/busybox\n\nbin/sh\nusr/bin/wget\n")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range got {
		if f.Link != "/bin/busybox" {
			t.Errorf("%s links to %q", f.Name, f.Link)
		}
		names = append(names, f.Name)
	}
	if want := []string{"usr/bin/[", "bin/sh", "usr/bin/wget"}; !slices.Equal(names, want) {
		t.Errorf("links %v, want %v", names, want)
	}
	if _, err := appletLinks("\n"); err == nil {
		t.Error("an empty list: no error")
	}
}

// The catalogue: every reference mirrors, no name is pushed by two images, every image starts
// from the base layer, and the images keep their upstream's entrypoint semantics.
func TestLabImagesCatalogue(t *testing.T) {
	seen := map[string]string{}
	byName := map[string]labImage{}
	for _, li := range labImages() {
		byName[li.name] = li
		if len(li.refs) == 0 || len(li.layers) == 0 || li.layers[0] != layerBase {
			t.Errorf("%s: refs %v, layers %v", li.name, li.refs, li.layers)
		}
		for _, r := range li.refs {
			m, err := MirrorName(testRegistry, r)
			if err != nil {
				t.Errorf("%s: %v", li.name, err)
			}
			if prev, ok := seen[m]; ok {
				t.Errorf("%s pushed by %s and %s", m, prev, li.name)
			}
			seen[m] = li.name
		}
		if len(li.config.Entrypoint) == 0 && len(li.config.Cmd) == 0 {
			t.Errorf("%s has neither ENTRYPOINT nor CMD", li.name)
		}
		// busybox's wget crashes on -T: every image with its applets has GNU wget right above them.
		if i := slices.Index(li.layers, layerBusybox); i >= 0 && (i+1 >= len(li.layers) || li.layers[i+1] != layerWget) {
			t.Errorf("%s: layers %v: no %s layer above %s", li.name, li.layers, layerWget, layerBusybox)
		}
	}
	for _, want := range []string{"registry.k8s.io/kube-proxy:" + KubeVersion, CoreDNSImage, "quay.io/metallb/speaker:" + MetalLBVersion,
		"quay.io/metallb/controller:" + MetalLBVersion, "registry.k8s.io/e2e-test-images/agnhost:2.66.1", "registry.k8s.io/pause:3.10.2",
		"busybox:latest", "registry.k8s.io/e2e-test-images/nginx:1.27.0-2", "httpd:2.4"} {
		m, _ := MirrorName(testRegistry, want)
		if seen[m] == "" {
			t.Errorf("no image pushed as %s", want)
		}
	}
	if a := byName["agnhost"].config; !slices.Equal(a.Entrypoint, []string{"/agnhost"}) || !slices.Equal(a.Cmd, []string{"pause"}) {
		t.Errorf("agnhost config %+v", a)
	}
	if c := byName["coredns"].config; c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/coredns"}) {
		t.Errorf("coredns config %+v", c)
	}
}

const testRegistry = "172.18.255.253:5000"

// labImageLayers is the catalogue's layer list of the image named name.
func labImageLayers(name string) []string {
	for _, li := range labImages() {
		if li.name == name {
			return li.layers
		}
	}
	return nil
}

func TestLayerKey(t *testing.T) {
	a := []ociimage.File{{Name: "a", Data: []byte("1")}, {Name: "b", Link: "/a"}}
	b := []ociimage.File{{Name: "b", Link: "/a"}, {Name: "a", Data: []byte("1")}}
	t0 := time.Unix(0, 0)
	if layerKey(a, t0, 1) != layerKey(b, t0, 1) {
		t.Error("the key depends on the files' order")
	}
	for name, other := range map[string][]ociimage.File{
		"data":  {{Name: "a", Data: []byte("2")}, {Name: "b", Link: "/a"}},
		"mode":  {{Name: "a", Mode: 1, Data: []byte("1")}, {Name: "b", Link: "/a"}},
		"link":  {{Name: "a", Data: []byte("1")}, {Name: "b", Link: "/c"}},
		"xattr": {{Name: "a", Data: []byte("1"), Xattrs: map[string]string{"security.capability": "x"}}, {Name: "b", Link: "/a"}},
	} {
		if layerKey(a, t0, 1) == layerKey(other, t0, 1) {
			t.Errorf("a change of %s keeps the key", name)
		}
	}
	if layerKey(a, t0, 1) == layerKey(a, t0, 2) || layerKey(a, t0, 1) == layerKey(a, time.Unix(1, 0), 1) {
		t.Error("level or time keeps the key")
	}
}

// The cache gives back the layer it stored: same digests, same bytes.
func TestCachedLayerOf(t *testing.T) {
	dir := t.TempDir()
	files := []ociimage.File{{Name: "x/y", Mode: 0o644, Data: []byte("hello")}}
	l1, hit1, err := cachedLayerOf(dir, files, time.Unix(0, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	l2, hit2, err := cachedLayerOf(dir, files, time.Unix(0, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if hit1 || !hit2 {
		t.Errorf("hits %v %v, want false true", hit1, hit2)
	}
	d1, _ := l1.Digest()
	d2, _ := l2.Digest()
	x1, _ := l1.DiffID()
	x2, _ := l2.DiffID()
	if d1 != d2 || x1 != x2 {
		t.Errorf("digests %v %v, diffIDs %v %v", d1, d2, x1, x2)
	}
	fresh, err := ociimage.NewLayer(files, time.Unix(0, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := fresh.Digest(); d != d2 {
		t.Errorf("cached digest %v, built %v", d2, d)
	}
	rc, err := l2.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"x/", "x/y"}) {
		t.Errorf("cached layer holds %v", names)
	}
}

// TestLabImagesRun builds the catalogue from this host's files and runs each image's programs in
// a chroot of its unpacked file system: every library and the loader must be in the image. It
// needs root and the lab's binaries (skipped otherwise); its figures are the build's cost.
func TestLabImagesRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	in := imageInputs{kubeProxy: filepath.Join(DefaultK8sBin(), "kube-proxy"), coredns: filepath.Join(DefaultCoreDNSBin(), "coredns"),
		agnhost: filepath.Join(DefaultE2EBin(), "agnhost"), regress: filepath.Join(DefaultE2EBin(), "regression-issue-74839"), metallb: DefaultMetalLBBin()}
	for _, f := range []string{in.kubeProxy, in.coredns, busyboxBin} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("%s: %v (the lab's binaries are not built here)", f, err)
		}
	}
	cache := t.TempDir()
	plat := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	for _, run := range []string{"cold", "warm"} {
		imgs, st, err := buildLabImages(in, plat, time.Unix(0, 0), cache)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d images, %d layers (%d from the cache), %.1f MB compressed, built in %.2fs; skipped %v",
			run, len(imgs), st.Layers, st.CacheHits, float64(st.Compressed)/1e6, st.Build.Seconds(), st.Skipped)
		if run == "warm" && st.CacheHits != st.Layers {
			t.Errorf("warm build: %d of %d layers from the cache", st.CacheHits, st.Layers)
		}
		if run == "warm" {
			break
		}
		checks := map[string][][]string{
			"kube-proxy": {{"/usr/local/bin/kube-proxy", "--version"}, {"/usr/sbin/iptables", "--version"}, {"/usr/sbin/ip6tables-restore", "--version"},
				{"/usr/sbin/nft", "--version"},
				// an extension with a library of its own (libxt_statistic.so needs libm), as kube-proxy's rules use
				{"/usr/sbin/iptables", "-m", "statistic", "--help"}},
			"coredns":                {{"/coredns", "-version"}},
			"metallb-controller":     {{"/controller", "--help"}},
			"metallb-speaker":        {{"/speaker", "--help"}},
			"agnhost":                {{"/bin/sh", "-c", "true"}, {"bash", "--version"}, {"curl", "--version"}, {"dig", "-v"}, {"nc", "-h"}, {"socat", "-V"}, {"getent", "--help"}, {"/agnhost-2", "--help"}, {"/coredns", "-version"}},
			"regression-issue-74839": {{"/regression-issue-74839", "--help"}},
			"busybox":                {{"sh", "-c", "wget --help; nslookup --help; true"}},
			"glibc-dns-testing":      {{"dig", "-v"}},
			"nginx":                  {{"sh", "-n", "/usr/sbin/nginx"}},
			"httpd":                  {{"sh", "-n", "/usr/local/bin/httpd"}},
			"pause":                  {{"/agnhost", "--help"}},
		}
		// The e2e suite's reachability check (checkReachabilityFromPod), against a server on loopback:
		// busybox-static 1.35's wget dies of SIGSEGV on -T.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "reached") }))
		defer srv.Close()
		// As in a container, with /proc mounted: Debian's busybox-static finds its applets through
		// /proc/self/exe, and its sh then prefers them to the programs in PATH.
		inContainer := func(root string, argv ...string) ([]byte, error) {
			if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
				return nil, err
			}
			cmd := exec.Command("unshare", append([]string{"--mount", "--pid", "--fork", "--mount-proc", "--root=" + root}, argv...)...)
			cmd.Dir, cmd.Env = "/", []string{defaultPath}
			return cmd.CombinedOutput()
		}
		// The e2e suite's reachability checks, as its RunHostCmd runs them (sh -c in an agnhost pod),
		// against a server on loopback.
		shellChecks := func(name, root string) {
			if out, err := inContainer(root, "/bin/sh", "-c", fmt.Sprintf("wget -T 5 -qO- %q", srv.URL)); err != nil || string(out) != "reached" {
				t.Errorf("%s: sh -c 'wget -T 5 -qO- %s' in the image: %v, output %q", name, srv.URL, err, out)
			}
			u, _ := url.Parse(srv.URL)
			host, port, _ := net.SplitHostPort(u.Host)
			out, err := inContainer(root, "/bin/sh", "-c", fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -v -t -w 2 %s %s", host, port))
			if err != nil || !strings.HasSuffix(string(out), "reached") {
				t.Errorf("%s: sh -c 'nc -v -t -w 2 %s %s' in the image: %v, output %q", name, host, port, err, out)
			}
		}
		for _, b := range imgs {
			m, err := b.img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			var size int64
			for _, l := range m.Layers {
				size += l.Size
			}
			t.Logf("image %-18s %d layers, %6.1f MB compressed, %d names", b.name, len(m.Layers), float64(size)/1e6, len(b.refs))
			root := filepath.Join(t.TempDir(), b.name)
			xattrs := extract(t, b.img, root)
			if b.name == "coredns" && xattrs["coredns"]["security.capability"] != ociimage.FileCapability(10) {
				t.Errorf("coredns: /coredns has no cap_net_bind_service=+ep (%q)", xattrs["coredns"])
			}
			if slices.Contains(labImageLayers(b.name), layerTools) { // agnhost's and glibc-dns-testing's
				shellChecks(b.name, root)
			}
			for _, argv := range checks[b.name] {
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Path = argv[0]
				if !strings.HasPrefix(argv[0], "/") {
					cmd.Path = "/usr/bin/" + argv[0]
					if _, err := os.Lstat(filepath.Join(root, cmd.Path)); err != nil {
						cmd.Path = "/bin/" + argv[0]
					}
				}
				cmd.Dir = "/"
				cmd.Env = []string{defaultPath}
				cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if (err != nil && !errors.As(err, &ee)) || strings.Contains(string(out), "error while loading shared libraries") ||
					strings.Contains(string(out), "cannot open shared object file") || strings.Contains(string(out), "not found") ||
					strings.Contains(string(out), "Couldn't load") {
					t.Errorf("%s: %v in the image: %v\n%s", b.name, argv, err, out)
				}
			}
		}
	}
}

// extract writes img's flattened file system under dir (regular files, directories, symlinks) and
// returns the files' extended attributes.
func extract(t *testing.T, img v1.Image, dir string) map[string]map[string]string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	x := map[string]map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			_ = os.Remove(p)
			if err := os.Symlink(h.Linkname, p); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			_ = os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		for k, v := range h.PAXRecords {
			if n, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				name := strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")
				if x[name] == nil {
					x[name] = map[string]string{}
				}
				x[name][n] = v
			}
		}
	}
	return x
}

// pushBuilt puts every image under every mirror name, and a layer two repositories share is
// uploaded once and mounted into the second.
func TestPushBuiltMountsSharedLayers(t *testing.T) {
	// The distribution registry keeps blobs per repository (go-containerregistry's in-memory one
	// does not): HEAD of a blob answers 404 in a repository that neither uploaded nor mounted it.
	var mu sync.Mutex
	uploads, mounts := 0, 0
	has := map[string]bool{} // repo + " " + digest
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		repo, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/"), "/blobs/")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case rest == "" || repo == r.URL.Path:
		case r.Method == http.MethodHead && !has[repo+" "+rest]:
			w.WriteHeader(http.StatusNotFound)
			return
		case r.Method == http.MethodPost && r.URL.Query().Get("from") != "":
			d := r.URL.Query().Get("mount")
			if has[r.URL.Query().Get("from")+" "+d] {
				mounts++
				has[repo+" "+d] = true
				w.Header().Set("Location", r.URL.Path+d)
				w.Header().Set("Docker-Content-Digest", d)
				w.WriteHeader(http.StatusCreated)
				return
			}
		case r.Method == http.MethodPut && r.URL.Query().Get("digest") != "":
			uploads++
			has[repo+" "+r.URL.Query().Get("digest")] = true
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t0 := time.Unix(0, 0)
	plat := v1.Platform{OS: "linux", Architecture: "amd64"}
	layer := func(name, data string) v1.Layer {
		l, err := ociimage.NewLayer([]ociimage.File{{Name: name, Mode: 0o755, Data: []byte(data)}}, t0, 1)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	shared := ociimage.Part{Layer: layer("agnhost", strings.Repeat("agnhost", 1000))}
	var imgs []builtImage
	for _, c := range []struct {
		name string
		refs []string
		own  ociimage.Part
	}{
		{"agnhost", []string{"registry.k8s.io/e2e-test-images/agnhost:2.66.1"}, ociimage.Part{Layer: layer("a", "a")}},
		{"nginx", []string{"nginx:latest", "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"}, ociimage.Part{Layer: layer("n", "n")}},
	} {
		b := builtImage{name: c.name, refs: c.refs, parts: []ociimage.Part{shared, c.own}, plat: plat, cfg: v1.Config{Cmd: []string{"x"}}, created: t0}
		img, err := b.mounting(nil)
		if err != nil {
			t.Fatal(err)
		}
		b.img = img
		imgs = append(imgs, b)
	}
	out, err := pushBuilt(context.Background(), host, imgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, ri := range out {
		want, _ := imgs[i].img.Digest()
		if ri.Digest != want || len(ri.Refs) != len(imgs[i].refs) {
			t.Errorf("%s: pushed %v as %v, want digest %v", imgs[i].name, ri.Refs, ri.Digest, want)
		}
		for _, r := range ri.Refs {
			d, err := remote.Head(r)
			if err != nil || d.Digest != want {
				t.Errorf("%s: %v, %v; want %v", r, d, err, want)
			}
		}
	}
	// 3 repositories: agnhost's takes the shared layer, its own and its config; library/nginx
	// mounts the shared layer and takes its own and its config; e2e-test-images/nginx mounts both
	// layers and takes the config (configs are not mounted: they are a few hundred bytes).
	if uploads != 6 || mounts != 3 {
		t.Errorf("%d uploads, %d mounts; want 6 uploads (the shared layer once) and 3 mounts", uploads, mounts)
	}
}

// The image the proxy runs is ironlb's, the one the lab pushes for every role, and it has no nft,
// conntrack or shell in it. The proxy needs none: its tables, the DSR table and its cleanup go over
// netlink, which the proxy's tests check with no nft to run (internal/proxy TestCleanupWithoutNFT and
// TestKernelSyncWithoutNFT, the dsrapply kernel tests, which fail if anything runs nft).
func TestProxyImageWithoutNft(t *testing.T) {
	stream, err := roleManifests()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := ironlbRefs(stream)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := manifests.Bundle("proxy")
	if err != nil {
		t.Fatal(err)
	}
	proxyRefs, err := ironlbRefs(proxy)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range proxyRefs {
		if !slices.Contains(refs, r) || !strings.HasPrefix(r, IronLBImage+":") {
			t.Errorf("the proxy runs %s; want ironlb's image %s, which the lab pushes (%v)", r, IronLBImage, refs)
		}
	}

	spec := ociimage.Spec{Version: "v9.8.7", Commit: "abc", Created: time.Unix(0, 0).UTC(),
		Binaries: map[string][]byte{"linux/amd64": []byte("\x7fELF not really a binary")}}
	idx, err := ociimage.Index(spec)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("index: %v, %v", im, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil || !slices.Equal(cf.Config.Entrypoint, []string{ociimage.Entrypoint}) {
		t.Fatalf("image config %+v, %v: want ironlb's entrypoint", cf, err)
	}
	root := t.TempDir()
	extract(t, img, root)
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files = append(files, strings.TrimPrefix(p, root))
		switch n := d.Name(); {
		case n == "nft", n == "conntrack", n == "sh", strings.HasPrefix(n, "libnftables"), strings.HasPrefix(n, "libnftnl"):
			t.Errorf("ironlb's image, the proxy's, carries %s", strings.TrimPrefix(p, root))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "/ironlb") {
		t.Errorf("no /ironlb in ironlb's image: %v", files)
	}
}

// TestIronlbRefs: the lab pushes ironlb's image under the one repository the role manifests name;
// a role with an image of its own (the proxy's former ironlb-proxy) is refused.
func TestIronlbRefs(t *testing.T) {
	tests := []struct {
		name, stream string
		want         []string
		wantErr      string
	}{
		{"every role the same", "  image: ghcr.io/ironlb/ironlb:v1\n---\n    image: ghcr.io/ironlb/ironlb:v1\n", []string{"ghcr.io/ironlb/ironlb:v1"}, ""},
		{"quoted, another registry", "  image: \"registry.local:5000/ironlb/ironlb:dev\"\n", []string{"registry.local:5000/ironlb/ironlb:dev"}, ""},
		{"a proxy image of its own", "  image: ghcr.io/ironlb/ironlb:v1\n  image: ghcr.io/ironlb/ironlb-proxy:v1\n", nil,
			"the manifests name ghcr.io/ironlb/ironlb:v1, ghcr.io/ironlb/ironlb-proxy:v1: every role runs ironlb's one image"},
		{"no ironlb image", "  image: registry.k8s.io/pause:3.10\n", nil, "the manifests name no ironlb image"},
		{"a bad reference", "  image: ghcr.io/ironlb/ironlb:v1:v2\n", nil, "the manifests' image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ironlbRefs(tt.stream)
			checkResult(t, got, err, tt.want, tt.wantErr)
		})
	}
}

// ironlb's image built through the layer cache (what lab up does) has the digest make image gives
// (ociimage compressing itself), cold and warm.
func TestIronlbImageFromLayerCache(t *testing.T) {
	cache := t.TempDir()
	spec := ociimage.Spec{Version: "v9.8.7", Commit: "abc", Created: time.Unix(1700000000, 0).UTC(),
		Binaries: map[string][]byte{"linux/amd64": []byte("\x7fELF not really a binary, but bytes to pack")}}
	plain, err := ociimage.Index(spec)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plain.Digest()
	if err != nil {
		t.Fatal(err)
	}
	hits := 0
	spec.Layer = func(files []ociimage.File, mtime time.Time) (v1.Layer, error) {
		ly, hit, err := cachedLayerOf(cache, files, mtime, gzip.BestCompression)
		if hit {
			hits++
		}
		return ly, err
	}
	for _, run := range []string{"cold", "warm"} {
		idx, err := ociimage.Index(spec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := idx.Digest()
		if err != nil || got != want {
			t.Errorf("%s: index digest %v (%v), want make image's %v", run, got, err, want)
		}
	}
	if hits != 2 { // the base layer and the binary's, on the warm run
		t.Errorf("%d layers from the cache on the warm run, want 2", hits)
	}
}
