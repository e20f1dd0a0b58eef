// Package agent is the lab's node agent: it does the kubelet's job on one lab node. It registers the Node,
// keeps its Lease and Ready condition fresh, programs routes to the other nodes' pod CIDRs (the CNI's job),
// and runs the Pods bound to the node: each Pod is a network namespace with a veth to the node, and each
// container a local process chosen by image name, started with the env, volumes, hostname and
// capabilities a kubelet would give it.
//
// Pure decisions (which program an image maps to, environment expansion, pod IP allocation, pod status,
// a pod's resolv.conf and /etc/hosts) live in images.go, env.go, ipam.go, status.go and dns.go and are
// unit-tested; agent.go and pod.go are the
// adapters to the apiserver and the kernel.
package agent

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
)

// Programs are the executables images map to.
type Programs struct {
	Self   string // the ironlb binary (whoami, ironlb's own image)
	K8sBin string // directory with kube-proxy
	// MetalLB is the directory with MetalLB's controller and speaker built from its Go module (for
	// side-by-side benchmarks; `make metallb` builds them).
	MetalLB string
	// CoreDNS is the directory with the coredns binary hack/coredns-binary.sh builds (the cluster DNS).
	CoreDNS string
}

// ErrImageUnknown means no local program stands in for the image; the container waits in ErrImagePull.
var ErrImageUnknown = errors.New("image is not available in the lab")

// ErrNoCommand means the image is known but the container's command is not one it has; the container
// waits in RunContainerError.
var ErrNoCommand = errors.New("command not found in image")

type imageEntry struct {
	entrypoint func(p Programs) []string // the image's ENTRYPOINT, already mapped to a local program
	commands   map[string]func(p Programs) []string
}

var images = map[string]imageEntry{
	"traefik/whoami": {
		entrypoint: func(p Programs) []string { return []string{p.Self, "whoami"} },
		commands:   map[string]func(Programs) []string{"whoami": func(p Programs) []string { return []string{p.Self, "whoami"} }},
	},
	"registry.k8s.io/kube-proxy": {
		entrypoint: func(p Programs) []string { return []string{path.Join(p.K8sBin, "kube-proxy")} },
		commands: map[string]func(Programs) []string{
			"kube-proxy": func(p Programs) []string { return []string{path.Join(p.K8sBin, "kube-proxy")} },
		},
	},
	"quay.io/metallb/speaker": {
		entrypoint: func(p Programs) []string { return []string{path.Join(p.MetalLB, "speaker")} },
		commands:   map[string]func(Programs) []string{"speaker": func(p Programs) []string { return []string{path.Join(p.MetalLB, "speaker")} }},
	},
	"quay.io/metallb/controller": {
		entrypoint: func(p Programs) []string { return []string{path.Join(p.MetalLB, "controller")} },
		commands:   map[string]func(Programs) []string{"controller": func(p Programs) []string { return []string{path.Join(p.MetalLB, "controller")} }},
	},
	"registry.k8s.io/coredns/coredns": { // kubeadm's image: ENTRYPOINT ["/coredns"]
		entrypoint: func(p Programs) []string { return []string{path.Join(p.CoreDNS, "coredns")} },
		commands:   map[string]func(Programs) []string{"coredns": func(p Programs) []string { return []string{path.Join(p.CoreDNS, "coredns")} }},
	},
	"ironlb/ironlb": {
		entrypoint: func(p Programs) []string { return []string{p.Self} },
		commands:   map[string]func(Programs) []string{"ironlb": func(p Programs) []string { return []string{p.Self} }},
	},
}

// aliases are other names of the same images.
var aliases = map[string]string{
	"containous/whoami":           "traefik/whoami",
	"k8s.gcr.io/kube-proxy":       "registry.k8s.io/kube-proxy",
	"ghcr.io/ironlb/ironlb":       "ironlb/ironlb",
	"ghcr.io/ironlb/ironlb-proxy": "ironlb/ironlb", // the proxy image adds nft and conntrack, which the lab's nodes have
	"ironlb":                      "ironlb/ironlb",
	"quay.io/ironlb/ironlb":       "ironlb/ironlb",
	"registry.local/ironlb":       "ironlb/ironlb",
	"docker.io/ironlb/ironlb":     "ironlb/ironlb",
	"docker.io/traefik/whoami":    "traefik/whoami",
	"metallb/speaker":             "quay.io/metallb/speaker",
	"metallb/controller":          "quay.io/metallb/controller",
	"docker.io/containous/whoami": "traefik/whoami",
	"k8s.gcr.io/coredns/coredns":  "registry.k8s.io/coredns/coredns",
	"coredns/coredns":             "registry.k8s.io/coredns/coredns",
	"docker.io/coredns/coredns":   "registry.k8s.io/coredns/coredns",
}

// ImageRepo strips the tag or digest and a docker.io/library prefix from an image reference.
func ImageRepo(image string) string {
	repo := image
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	repo = strings.TrimPrefix(repo, "docker.io/library/")
	if a, ok := aliases[repo]; ok {
		return a
	}
	return repo
}

// KnownImages lists the images the lab can run.
func KnownImages() []string {
	var out []string
	for k := range images {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Argv maps a container's image, command and args to a local command line, as a container runtime
// combines ENTRYPOINT/CMD with Kubernetes' command/args: command replaces the entrypoint and must name a
// program the image has; args follow.
func Argv(p Programs, image string, command, args []string) ([]string, error) {
	e, ok := images[ImageRepo(image)]
	if !ok {
		return nil, fmt.Errorf("%w: %q (the lab runs %s)", ErrImageUnknown, image, strings.Join(KnownImages(), ", "))
	}
	var argv []string
	if len(command) > 0 {
		prog, ok := e.commands[path.Base(command[0])]
		if !ok {
			return nil, fmt.Errorf("%w: %q in %s", ErrNoCommand, command[0], image)
		}
		argv = append(prog(p), command[1:]...)
	} else {
		argv = e.entrypoint(p)
	}
	return append(argv, args...), nil
}
