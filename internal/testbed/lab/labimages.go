package lab

import (
	"errors"
	"fmt"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironlb/ironlb/internal/ociimage"
)

// The images of every Pod the lab runs besides ironlb and whoami (runtimeimages.go), which `lab up
// --runtime=runc` builds with internal/ociimage and pushes to the lab's registry under the mirror
// names (MirrorName) of the upstream references Pods use. Each is built from binaries this
// repository already builds or from the host's Debian files, and behaves as its upstream image
// does where the lab's Pods and the e2e suites rely on it (ENTRYPOINT, CMD, USER, the programs a
// container's command names). The catalogue here is pure; labimagesbuild.go reads the host's files
// and builds the layers (cached by content).
//
// Layers are shared: every image starts from the base layer (ociimage.BaseFiles); agnhost, pause,
// nginx and httpd share one agnhost layer; agnhost, glibc-dns-testing, busybox, nginx and httpd
// one busybox layer, and each of them the wget layer above it; MetalLB's controller and speaker one
// layer of their C library.
//
// Why a wget layer: Debian 12's busybox-static (1.35) crashes with SIGSEGV whenever wget is given a
// timeout (`wget -T 5`, with or without an answer), and the e2e suite's reachability checks run
// exactly `wget -T 5 -qO- URL` in agnhost pods (checkReachabilityFromPod): every "is reachable"
// check failed and every "is not reachable" one passed whatever the proxy did. GNU wget takes the
// same flags (-T, -q, -O, -S, --spider) with the same meaning and exit status (0 on success,
// non-zero on a refused or timed-out connection).

// Layer names of the catalogue.
const (
	layerBase      = "base"                   // ociimage.BaseFiles
	layerBusybox   = "busybox"                // Debian's busybox-static at /bin/busybox and its applets' links
	layerWget      = "wget"                   // the host's GNU wget and its libraries, over busybox's wget applet (see wgetProgram)
	layerTools     = "tools"                  // the host's bash, curl, dig, nc (OpenBSD), socat and getent, with their libraries
	layerAgnhost   = "agnhost"                // /agnhost (hack/e2e-binaries.sh) and /agnhost-2
	layerRegress   = "regression-issue-74839" // /regression-issue-74839 (hack/e2e-binaries.sh)
	layerWeb       = "web"                    // nginx and httpd stand-ins: scripts running agnhost netexec on port 80
	layerIPTables  = "iptables"               // the host's iptables (nft backend) and nft, their libraries and xtables modules
	layerKubeProxy = "kube-proxy"             // /usr/local/bin/kube-proxy (hack/k8s-binaries.sh)
	layerCoreDNS   = "coredns"                // /coredns (hack/coredns-binary.sh), cap_net_bind_service=+ep
	layerMetalLBC  = "metallb-libs"
	layerMLBCtrl   = "metallb-controller" // /controller (make metallb)
	layerMLBSpkr   = "metallb-speaker"    // /speaker
)

// MetalLBVersion is the MetalLB release `make metallb` builds (DefaultMetalLBBin).
const MetalLBVersion = "v0.16.1"

// Upstream tags the lab's images are pushed under: the pinned e2e suite's (k8s.io/kubernetes
// test/utils/image at KubeVersion: agnhost 2.66.1 and the previous 2.55, pause 3.10.2, busybox
// 1.37.0-2, nginx 1.27.0-2 and 1.28.0-2, glibc-dns-testing 2.1.1) and the names this repository's
// tests and docs use.
var (
	agnhostTags = []string{"2.66.1", "2.55"}
	pauseRefs   = []string{"registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.9"}
	busyboxRefs = []string{"busybox:latest", "busybox:1", "busybox:1.35", "busybox:1.36", "busybox:1.37",
		"registry.k8s.io/e2e-test-images/busybox:1.37.0-2", "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"}
	nginxRefs = []string{"nginx:latest", "nginx:1", "nginx:1.27", "registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
		"registry.k8s.io/e2e-test-images/nginx:1.28.0-2"}
	httpdRefs = []string{"httpd:latest", "httpd:2", "httpd:2.4", "registry.k8s.io/e2e-test-images/httpd:2.4.38-4",
		"registry.k8s.io/e2e-test-images/httpd:2.4.39-4"}
	glibcDNSRefs = []string{"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"}
	regressRefs  = []string{"registry.k8s.io/e2e-test-images/regression-issue-74839:1.5"}
)

// defaultPath is the PATH of every lab image.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// labImage is one image of the catalogue.
type labImage struct {
	name   string   // for logs and errors
	refs   []string // upstream references it is pushed under
	layers []string // bottom first
	config v1.Config
}

// labImages is the catalogue for a lab at the pinned versions.
func labImages() []labImage {
	cfg := func(entrypoint, cmd []string, user string) v1.Config {
		return v1.Config{Entrypoint: entrypoint, Cmd: cmd, User: user, Env: []string{defaultPath}, WorkingDir: "/"}
	}
	var agnhost []string
	for _, t := range agnhostTags {
		agnhost = append(agnhost, "registry.k8s.io/e2e-test-images/agnhost:"+t)
	}
	return []labImage{
		// kubeadm's kube-proxy image: distroless with iptables (the Pod's command runs kube-proxy).
		{name: "kube-proxy", refs: []string{"registry.k8s.io/kube-proxy:" + KubeVersion},
			layers: []string{layerBase, layerIPTables, layerKubeProxy}, config: cfg([]string{"/usr/local/bin/kube-proxy"}, nil, "")},
		// CoreDNS's image: /coredns with cap_net_bind_service=+ep, USER nonroot.
		{name: "coredns", refs: []string{CoreDNSImage},
			layers: []string{layerBase, layerCoreDNS}, config: cfg([]string{"/coredns"}, nil, "65532:65532")},
		{name: "metallb-controller", refs: []string{"quay.io/metallb/controller:" + MetalLBVersion},
			layers: []string{layerBase, layerMetalLBC, layerMLBCtrl}, config: cfg([]string{"/controller"}, nil, "")},
		{name: "metallb-speaker", refs: []string{"quay.io/metallb/speaker:" + MetalLBVersion},
			layers: []string{layerBase, layerMetalLBC, layerMLBSpkr}, config: cfg([]string{"/speaker"}, nil, "")},
		// agnhost's image: ENTRYPOINT ["/agnhost"], CMD ["pause"], on alpine with bash, curl, netcat,
		// bind-tools (dig) and socat, and /coredns (the DNS tests' own servers run `/coredns -conf
		// FILE` in agnhost pods; upstream's is CoreDNS 1.6.2, this the lab's build).
		{name: "agnhost", refs: agnhost,
			layers: []string{layerBase, layerBusybox, layerWget, layerTools, layerAgnhost, layerCoreDNS}, config: cfg([]string{"/agnhost"}, []string{"pause"}, "")},
		// The Conntrack suite's invalid-state server: ENTRYPOINT ["/regression-issue-74839"].
		{name: "regression-issue-74839", refs: regressRefs,
			layers: []string{layerBase, layerRegress}, config: cfg([]string{"/regression-issue-74839"}, nil, "")},
		// pause: agnhost's pause (sleeps until a signal, reaps children) as the entrypoint.
		{name: "pause", refs: pauseRefs,
			layers: []string{layerBase, layerAgnhost}, config: cfg([]string{"/agnhost", "pause"}, nil, "")},
		{name: "busybox", refs: busyboxRefs,
			layers: []string{layerBase, layerBusybox, layerWget}, config: cfg(nil, []string{"sh"}, "")},
		// the DNS tests' glibc querier: a shell and dig.
		{name: "glibc-dns-testing", refs: glibcDNSRefs,
			layers: []string{layerBase, layerBusybox, layerWget, layerTools}, config: cfg(nil, []string{"sh"}, "")},
		// nginx and httpd: their CMD names a stand-in that serves HTTP on port 80 (agnhost netexec).
		{name: "nginx", refs: nginxRefs,
			layers: []string{layerBase, layerBusybox, layerWget, layerAgnhost, layerWeb}, config: cfg(nil, []string{"nginx", "-g", "daemon off;"}, "")},
		{name: "httpd", refs: httpdRefs,
			layers: []string{layerBase, layerBusybox, layerWget, layerAgnhost, layerWeb}, config: cfg(nil, []string{"httpd-foreground"}, "")},
	}
}

// webStandIn is the script nginx's and httpd's images run for the server.
const webStandIn = "#!/bin/sh\n# The lab's stand-in for the web server: agnhost netexec serving HTTP on port 80.\nexec /agnhost netexec --http-port=80 --udp-port=-1\n"

// webFiles is the web layer.
func webFiles() []ociimage.File {
	return []ociimage.File{
		{Name: "usr/sbin/nginx", Mode: 0o755, Data: []byte(webStandIn)},
		{Name: "usr/local/bin/httpd-foreground", Mode: 0o755, Data: []byte(webStandIn)},
		{Name: "usr/local/bin/httpd", Mode: 0o777, Link: "/usr/local/bin/httpd-foreground"},
	}
}

// appletLinks are busybox's applets as symlinks to /bin/busybox, from `busybox --list-full`
// (one relative path a line: bin/sh, usr/bin/wget); the busybox binary's own name is skipped.
func appletLinks(list string) ([]ociimage.File, error) {
	var out []ociimage.File
	seen := map[string]bool{}
	for _, l := range strings.Split(list, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		n := strings.TrimPrefix(path.Clean("/"+l), "/")
		if n == "" || n == "bin/busybox" || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, ociimage.File{Name: n, Mode: 0o777, Link: "/bin/busybox"})
	}
	if len(out) == 0 {
		return nil, errors.New("busybox --list-full listed no applet")
	}
	return out, nil
}

// lddPaths are the files a dynamic executable loads, from ldd's output: each library's resolved
// path and the loader; the vDSO has none. "not found" is an error; a static executable ("not a
// dynamic executable", "statically linked") has none.
func lddPaths(out string) ([]string, error) {
	var paths []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, "not a dynamic executable") || strings.Contains(l, "statically linked") {
			continue
		}
		if lib, res, ok := strings.Cut(l, "=>"); ok {
			res = strings.TrimSpace(res)
			if strings.HasPrefix(res, "not found") {
				return nil, fmt.Errorf("%s: not found", strings.TrimSpace(lib))
			}
			l = res
		}
		p, _, _ := strings.Cut(l, " (")
		p = strings.TrimSpace(p)
		if strings.HasPrefix(p, "/") {
			paths = append(paths, p)
		}
	}
	return paths, nil
}
