package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/ociimage"
)

// TestRuncRunsImage runs ironlb's image (internal/ociimage, from the static binary
// $IRONLB_STATIC_BIN) with runc from the spec OCISpec writes, as the runc runtime does, in a throwaway
// network namespace runc makes (no address, no traffic): pull from an in-memory registry, unpack,
// overlay rootfs, `runc run`. It needs root, runc and the binary; otherwise it is skipped.
func TestRuncRunsImage(t *testing.T) {
	bin := os.Getenv("IRONLB_STATIC_BIN")
	runc, err := exec.LookPath("runc")
	if os.Geteuid() != 0 || err != nil || bin == "" {
		t.Skip("needs root, runc and IRONLB_STATIC_BIN (a CGO_ENABLED=0 ironlb)")
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	plat := "linux/" + runtime.GOARCH
	idx, err := ociimage.Index(ociimage.Spec{Version: "v9.9.9", Created: time.Unix(0, 0), Binaries: map[string][]byte{plat: b}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref, _ := name.ParseReference(u.Host+"/ghcr.io/ironlb/ironlb:v9.9.9", name.Insecure)
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cg := filepath.Join("/sys/fs/cgroup", fmt.Sprintf("ironlb-runc-test-%d", os.Getpid()))
	r := &runcRuntime{runc: runc, root: filepath.Join(dir, "runc"), bundles: filepath.Join(dir, "containers"), cgroupRoot: "/sys/fs/cgroup",
		images: newImageStore(filepath.Join(dir, "images"), u.Host, http.DefaultTransport, v1.Platform{OS: "linux", Architecture: runtime.GOARCH})}
	t.Cleanup(func() {
		_ = r.cleanOrphans()
		_ = os.Remove(filepath.Join(cg, "c"))
		_ = os.Remove(cg)
	})
	img, st, err := r.images.get(context.Background(), "ghcr.io/ironlb/ironlb:v9.9.9", corev1.PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	hostCaps, err := ProcessCaps(status)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	if img.ImageID != "ghcr.io/ironlb/ironlb@"+d.String() {
		t.Errorf("imageID %s, want the index digest %s", img.ImageID, d)
	}
	t.Logf("pulled %d bytes in %s (unpack %s)", img.Size, st.Total, st.Unpack)

	tests := []struct {
		name     string
		args     []string
		sc       *corev1.SecurityContext
		wantOut  string
		wantCode int
	}{
		{"the controller's securityContext: version", []string{"version"},
			&corev1.SecurityContext{RunAsUser: ptr.To[int64](65534), RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			"ironlb v", 0}, // the binary's own stamp, from inside the image
		{"an unknown command exits 1", []string{"no-such-command"}, nil, "unknown command", 1},
		// kube-proxy's securityContext: every capability the runtime holds (runc refuses one it lacks)
		{"privileged: version", []string{"version"}, &corev1.SecurityContext{Privileged: ptr.To(true)}, "ironlb v", 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
			c := corev1.Container{Name: "c", Args: tt.args, SecurityContext: tt.sc}
			bundle := filepath.Join(r.bundles, fmt.Sprint(i))
			spec, err := OCISpec(OCIInput{Pod: pod, Container: c, Image: img.Config.Config, Passwd: imageFile(img.Rootfs, "etc/passwd"),
				Group: imageFile(img.Rootfs, "etc/group"), Rootfs: filepath.Join(bundle, "rootfs"), Hostname: "p",
				CgroupsPath: strings.TrimPrefix(filepath.Join(cg, "c"), "/sys/fs/cgroup"), HostCaps: hostCaps})
			if err != nil {
				t.Fatal(err)
			}
			spec.Linux.Namespaces[0].Path = "" // a new, empty network namespace
			if err := r.bundle(bundle, img.Rootfs, spec); err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("ironlb-runc-test-%d-%d", os.Getpid(), i)
			defer r.remove(id, bundle)
			var out bytes.Buffer
			cmd := exec.Command(runc, "--root", r.root, "run", "--bundle", bundle, id)
			cmd.Stdout, cmd.Stderr = &out, &out
			err = cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode || !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("exit %d, output %q; want %d and %q", code, out.String(), tt.wantCode, tt.wantOut)
			}
		})
	}
}
