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
	// E2EBin is the directory with agnhost (and e2e.test), which hack/e2e-binaries.sh builds from the
	// pinned Kubernetes module: the e2e suite's images (agnhost, pause, nginx, httpd) run it.
	E2EBin string
	// CoreDNS is the directory with the coredns binary hack/coredns-binary.sh builds (the cluster DNS).
	CoreDNS string
}

// ErrImageUnknown means no local program stands in for the image; the container waits in ErrImagePull.
var ErrImageUnknown = errors.New("image is not available in the lab")

// ErrNoCommand means the image is known but the container's command is not one it has; the container
// waits in RunContainerError.
var ErrNoCommand = errors.New("command not found in image")

// program maps one of an image's programs to a local command line; rest are the arguments that follow it.
type program func(p Programs, rest []string) []string

// fixed is a program that takes its arguments as they come.
func fixed(argv func(p Programs) []string) program {
	return func(p Programs, rest []string) []string { return append(argv(p), rest...) }
}

type imageEntry struct {
	// entrypoint is the image's ENTRYPOINT, already mapped to a local program; nil when the image has
	// none (busybox), and then the first word of the container's args or the image's CMD names a program.
	entrypoint func(p Programs) []string
	cmd        []string           // the image's CMD: what follows the entrypoint when the container sets neither command nor args
	commands   map[string]program // programs a container's command can name (by base name)
	// shell: the image's shell and its usual tools (sh, sleep, nc, wget, ...) run as the host's own,
	// found on the container's PATH, as the lab gives containers the host's file system.
	shell bool
	// files are the image's programs at fixed paths that a shell in the container (or `kubectl exec ...
	// sh -c`) names by path, as the path and the local program bound there (ImageFiles).
	files func(p Programs) []ImageFile
}

// ImageFile is a program an image has at Path, stood for by the local program Source.
type ImageFile struct{ Path, Source string }

// shellTools are the programs of a busybox or alpine image that a container's command can name when its
// image has a shell; each runs as the host program of that name (or, for ash, the host's sh). A tool the
// host lacks (nc, nslookup on this machine) fails when the container starts, as "not found".
var shellTools = map[string]string{
	"sh": "sh", "ash": "sh", "bash": "bash",
	"sleep": "sleep", "echo": "echo", "cat": "cat", "true": "true", "false": "false", "env": "env", "ls": "ls",
	"test": "test", "printf": "printf", "date": "date", "hostname": "hostname", "grep": "grep", "sed": "sed",
	"awk": "awk", "timeout": "timeout", "id": "id", "kill": "kill", "ps": "ps", "mkdir": "mkdir", "touch": "touch",
	"rm": "rm", "cp": "cp", "mv": "mv", "tee": "tee", "head": "head", "tail": "tail", "wc": "wc", "seq": "seq",
	"wget": "wget", "nc": "nc", "ping": "ping", "nslookup": "nslookup", "ip": "ip", "curl": "curl", "dig": "dig",
	"socat": "socat",
}

func agnhost(p Programs) []string { return []string{path.Join(p.E2EBin, "agnhost")} }

func regression74839(p Programs) []string {
	return []string{path.Join(p.E2EBin, "regression-issue-74839")}
}

func coredns(p Programs) []string { return []string{path.Join(p.CoreDNS, "coredns")} }

// webStandIn runs agnhost netexec on port 80 (HTTP only) for web server images (nginx, httpd): the e2e
// suite only needs them to accept connections there. Their own arguments (nginx -g 'daemon off;') are
// dropped.
var webStandIn program = func(p Programs, _ []string) []string {
	return append(agnhost(p), "netexec", "--http-port=80", "--udp-port=-1")
}

var images = map[string]imageEntry{
	"traefik/whoami": {
		entrypoint: func(p Programs) []string { return []string{p.Self, "whoami"} },
		commands:   map[string]program{"whoami": fixed(func(p Programs) []string { return []string{p.Self, "whoami"} })},
	},
	"registry.k8s.io/kube-proxy": {
		entrypoint: func(p Programs) []string { return []string{path.Join(p.K8sBin, "kube-proxy")} },
		commands: map[string]program{
			"kube-proxy": fixed(func(p Programs) []string { return []string{path.Join(p.K8sBin, "kube-proxy")} }),
		},
	},
	"quay.io/metallb/speaker": {
		entrypoint: func(p Programs) []string { return []string{path.Join(p.MetalLB, "speaker")} },
		commands:   map[string]program{"speaker": fixed(func(p Programs) []string { return []string{path.Join(p.MetalLB, "speaker")} })},
	},
	"quay.io/metallb/controller": {
		entrypoint: func(p Programs) []string { return []string{path.Join(p.MetalLB, "controller")} },
		commands:   map[string]program{"controller": fixed(func(p Programs) []string { return []string{path.Join(p.MetalLB, "controller")} })},
	},
	"registry.k8s.io/coredns/coredns": { // kubeadm's image: ENTRYPOINT ["/coredns"]
		entrypoint: coredns,
		commands:   map[string]program{"coredns": fixed(coredns)},
	},
	"ironlb/ironlb": {
		entrypoint: func(p Programs) []string { return []string{p.Self} },
		commands:   map[string]program{"ironlb": fixed(func(p Programs) []string { return []string{p.Self} })},
	},
	// agnhost's image: ENTRYPOINT ["/agnhost"], CMD ["pause"], /agnhost-2 a link to it, /coredns (the DNS
	// tests' server pod runs it), on alpine with bash, curl, netcat, bind-tools and socat.
	"registry.k8s.io/e2e-test-images/agnhost": {
		entrypoint: agnhost,
		cmd:        []string{"pause"},
		commands:   map[string]program{"agnhost": fixed(agnhost), "agnhost-2": fixed(agnhost), "coredns": fixed(coredns)},
		shell:      true,
		files: func(p Programs) []ImageFile {
			return []ImageFile{{"/agnhost", agnhost(p)[0]}, {"/agnhost-2", agnhost(p)[0]}, {"/coredns", coredns(p)[0]}}
		},
	},
	// pause: ENTRYPOINT ["/pause"]; agnhost's pause does the same (sleeps until a signal, reaps children).
	"registry.k8s.io/pause": {
		entrypoint: func(p Programs) []string { return append(agnhost(p), "pause") },
		commands:   map[string]program{"pause": fixed(func(p Programs) []string { return append(agnhost(p), "pause") })},
	},
	// regression-issue-74839: ENTRYPOINT ["/regression-issue-74839"], the Conntrack test's server
	// (kubernetes#74839), built by hack/e2e-binaries.sh beside agnhost.
	"registry.k8s.io/e2e-test-images/regression-issue-74839": {
		entrypoint: regression74839,
		commands:   map[string]program{"regression-issue-74839": fixed(regression74839)},
	},
	// busybox: no ENTRYPOINT, CMD ["sh"].
	"busybox": {cmd: []string{"sh"}, shell: true},
	// nginx: ENTRYPOINT ["/docker-entrypoint.sh"] (which runs its arguments), CMD ["nginx", "-g",
	// "daemon off;"]; agnhost netexec on port 80 stands in for nginx.
	"nginx": {
		cmd:      []string{"nginx", "-g", "daemon off;"},
		commands: map[string]program{"nginx": webStandIn},
		shell:    true,
	},
	// httpd: no ENTRYPOINT, CMD ["httpd-foreground"]; agnhost netexec on port 80 stands in.
	"httpd": {
		cmd:      []string{"httpd-foreground"},
		commands: map[string]program{"httpd-foreground": webStandIn, "httpd": webStandIn},
		shell:    true,
	},
}

// aliases are other names of the same images.
var aliases = map[string]string{
	"containous/whoami":                         "traefik/whoami",
	"k8s.gcr.io/kube-proxy":                     "registry.k8s.io/kube-proxy",
	"ghcr.io/ironlb/ironlb":                     "ironlb/ironlb",
	"ironlb":                                    "ironlb/ironlb",
	"quay.io/ironlb/ironlb":                     "ironlb/ironlb",
	"registry.local/ironlb":                     "ironlb/ironlb",
	"docker.io/ironlb/ironlb":                   "ironlb/ironlb",
	"docker.io/traefik/whoami":                  "traefik/whoami",
	"metallb/speaker":                           "quay.io/metallb/speaker",
	"metallb/controller":                        "quay.io/metallb/controller",
	"docker.io/containous/whoami":               "traefik/whoami",
	"k8s.gcr.io/e2e-test-images/agnhost":        "registry.k8s.io/e2e-test-images/agnhost",
	"gcr.io/kubernetes-e2e-test-images/agnhost": "registry.k8s.io/e2e-test-images/agnhost",
	"k8s.gcr.io/pause":                          "registry.k8s.io/pause",
	"registry.k8s.io/e2e-test-images/busybox":   "busybox",
	// The DNS tests' glibc querier (Debian with dnsutils; no ENTRYPOINT): its sh and dig are the host's.
	"registry.k8s.io/e2e-test-images/glibc-dns-testing": "busybox",
	"registry.k8s.io/e2e-test-images/nginx":             "nginx",
	"registry.k8s.io/e2e-test-images/httpd":             "httpd",
	"k8s.gcr.io/coredns/coredns":                        "registry.k8s.io/coredns/coredns",
	"coredns/coredns":                                   "registry.k8s.io/coredns/coredns",
	"docker.io/coredns/coredns":                         "registry.k8s.io/coredns/coredns",
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
	if _, ok := images[repo]; !ok {
		if up, ok := unmirror(repo); ok {
			return up
		}
	}
	return repo
}

// unmirror maps a repository in a mirror registry (lab.MirrorName: REG/ghcr.io/ironlb/ironlb,
// REG/library/busybox, REG/localhost_5000/x) to the upstream image it mirrors, when that is one the
// lab runs.
func unmirror(repo string) (string, bool) {
	host, rest, ok := strings.Cut(repo, "/")
	if !ok || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return "", false
	}
	up := strings.TrimPrefix(rest, "library/")
	if first, tail, ok := strings.Cut(up, "/"); ok && strings.Contains(first, "_") {
		up = strings.Replace(first, "_", ":", 1) + "/" + tail
	}
	if a, ok := aliases[up]; ok {
		return a, true
	}
	if _, ok := images[up]; ok {
		return up, true
	}
	return "", false
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

// ImageFiles lists the programs an image has at fixed paths (agnhost's /agnhost, /agnhost-2 and
// /coredns), each with the local program that stands for it. The node agent binds each at its path in the
// container's mount namespace, so a command that names it by path inside the container (upstream's
// `kubectl exec execpod -- /bin/sh -x -c '/agnhost connect ...'`) finds it; nil for an image without.
func ImageFiles(p Programs, image string) []ImageFile {
	e, ok := images[ImageRepo(image)]
	if !ok || e.files == nil {
		return nil
	}
	return e.files(p)
}

// Argv maps a container's image, command and args to a local command line, as a container runtime
// combines ENTRYPOINT/CMD with Kubernetes' command/args: command replaces the entrypoint (and drops the
// CMD) and must name a program the image has; args replace the CMD; an image without an entrypoint runs
// the program the first word of its args (or of its CMD) names.
func Argv(p Programs, image string, command, args []string) ([]string, error) {
	e, ok := images[ImageRepo(image)]
	if !ok {
		return nil, fmt.Errorf("%w: %q (the lab runs %s)", ErrImageUnknown, image, strings.Join(KnownImages(), ", "))
	}
	if len(command) == 0 && e.entrypoint != nil {
		if len(args) == 0 {
			args = e.cmd
		}
		return append(e.entrypoint(p), args...), nil
	}
	// The command line starts with a program of the image: the container's command, or (no entrypoint)
	// its args or the image's CMD.
	var line []string
	switch {
	case len(command) > 0:
		line = append(append(line, command...), args...)
	case len(args) > 0:
		line = append(line, args...)
	default:
		line = append(line, e.cmd...)
	}
	if len(line) == 0 {
		return nil, fmt.Errorf("%w: %s has no entrypoint and the container sets no command", ErrNoCommand, image)
	}
	name := path.Base(line[0])
	if prog, ok := e.commands[name]; ok {
		return prog(p, append([]string(nil), line[1:]...)), nil
	}
	if tool, ok := shellTools[name]; ok && e.shell {
		return append([]string{tool}, line[1:]...), nil
	}
	return nil, fmt.Errorf("%w: %q in %s", ErrNoCommand, line[0], image)
}
