package agent

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestImageRepo(t *testing.T) {
	tests := []struct{ in, want string }{
		{"traefik/whoami", "traefik/whoami"},
		{"traefik/whoami:v1.10", "traefik/whoami"},
		{"traefik/whoami:latest", "traefik/whoami"},
		{"traefik/whoami@" + testDigest, "traefik/whoami"},
		{"traefik/whoami:v1.10@" + testDigest, "traefik/whoami"},
		{"docker.io/traefik/whoami:v1.10", "traefik/whoami"},
		{"containous/whoami", "traefik/whoami"},
		{"containous/whoami:v1.5.0", "traefik/whoami"},
		{"docker.io/containous/whoami:latest", "traefik/whoami"},
		{"nginx", "nginx"},
		{"nginx:1.27", "nginx"},
		{"nginx@" + testDigest, "nginx"},
		{"docker.io/library/nginx:1.27", "nginx"},
		{"docker.io/library/busybox", "busybox"},
		{"registry.k8s.io/kube-proxy:v1.30.0", "registry.k8s.io/kube-proxy"},
		{"registry.k8s.io/kube-proxy", "registry.k8s.io/kube-proxy"},
		{"k8s.gcr.io/kube-proxy:v1.30.0", "registry.k8s.io/kube-proxy"},
		{"k8s.gcr.io/kube-proxy@" + testDigest, "registry.k8s.io/kube-proxy"},
		{"ironlb/ironlb:dev", "ironlb/ironlb"},
		{"ironlb", "ironlb/ironlb"},
		{"ironlb:dev", "ironlb/ironlb"},
		{"docker.io/library/ironlb:dev", "ironlb/ironlb"},
		{"docker.io/ironlb/ironlb:v0.1.0", "ironlb/ironlb"},
		{"ghcr.io/ironlb/ironlb:main", "ironlb/ironlb"},
		{"quay.io/ironlb/ironlb", "ironlb/ironlb"},
		{"registry.local/ironlb:dev", "ironlb/ironlb"},
		{"localhost:5000/foo:bar", "localhost:5000/foo"},
		{"localhost:5000/foo", "localhost:5000/foo"},
		{"localhost:5000/foo@" + testDigest, "localhost:5000/foo"},
		{"localhost:5000/team/foo:1.0", "localhost:5000/team/foo"},
		{"registry.example.com:443/a/b/c:tag", "registry.example.com:443/a/b/c"},
		{"localhost:5000", "localhost"}, // a name and a tag, as docker reads it
		{"quay.io/other/whoami:v1", "quay.io/other/whoami"},
		{"registry.k8s.io/e2e-test-images/agnhost:2.66.1", "registry.k8s.io/e2e-test-images/agnhost"},
		{"registry.k8s.io/e2e-test-images/busybox:1.37.0-2", "busybox"},
		{"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1", "busybox"},
		{"registry.k8s.io/e2e-test-images/nginx:1.27.0-2", "nginx"},
		{"registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause"},
		{"k8s.gcr.io/pause:3.2", "registry.k8s.io/pause"},
		// The lab registry's mirrors (lab.MirrorName) run what their upstream runs.
		{"172.18.255.253:5000/ghcr.io/ironlb/ironlb:v0.1.0", "ironlb/ironlb"},
		{"172.18.255.253:5000/traefik/whoami:v1.10", "traefik/whoami"},
		{"172.18.255.253:5000/library/busybox:1.37", "busybox"},
		{"172.18.255.253:5000/registry.k8s.io/pause@" + testDigest, "registry.k8s.io/pause"},
		{"172.18.255.253:5000/localhost_5000/ironlb:dev", "172.18.255.253:5000/localhost_5000/ironlb"}, // localhost:5000/ironlb is no image the lab runs
		{"172.18.255.253:5000/ghcr.io/other/thing:v1", "172.18.255.253:5000/ghcr.io/other/thing"},
		// The proxy runs ironlb's image: there is no ironlb-proxy image any more.
		{"172.18.255.253:5000/ghcr.io/ironlb/ironlb-proxy:v0.1.0", "172.18.255.253:5000/ghcr.io/ironlb/ironlb-proxy"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := ImageRepo(tt.in); got != tt.want {
				t.Errorf("ImageRepo(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestKnownImages(t *testing.T) {
	want := []string{"busybox", "httpd", "ironlb/ironlb", "nginx", "quay.io/metallb/controller", "quay.io/metallb/speaker",
		"registry.k8s.io/coredns/coredns", "registry.k8s.io/e2e-test-images/agnhost", "registry.k8s.io/e2e-test-images/regression-issue-74839", "registry.k8s.io/kube-proxy", "registry.k8s.io/pause", "traefik/whoami"}
	if d := cmp.Diff(want, KnownImages(), cmpOpts); d != "" {
		t.Errorf("KnownImages() mismatch (-want +got):\n%s", d)
	}
	for alias, target := range aliases {
		if _, ok := images[target]; !ok {
			t.Errorf("alias %q points at %q, which is not a known image", alias, target)
		}
		if ImageRepo(alias) != target {
			t.Errorf("ImageRepo(%q) = %q, want %q", alias, ImageRepo(alias), target)
		}
	}
}

func TestArgv(t *testing.T) {
	progs := Programs{Self: "/usr/local/bin/ironlb", K8sBin: "/opt/k8s/bin", E2EBin: "/opt/e2e/bin", CoreDNS: "/cache/coredns/bin"}
	const agn = "/opt/e2e/bin/agnhost"
	tests := []struct {
		name          string
		image         string
		command, args []string
		want          []string
		wantErr       error
		wantInErr     []string
	}{
		{name: "whoami entrypoint", image: "traefik/whoami:v1.10", want: []string{"/usr/local/bin/ironlb", "whoami"}},
		{name: "whoami with args", image: "traefik/whoami:v1.10", args: []string{"--port", "8080", "--name", "web"},
			want: []string{"/usr/local/bin/ironlb", "whoami", "--port", "8080", "--name", "web"}},
		{name: "whoami alias with args", image: "docker.io/containous/whoami", args: []string{"--verbose"},
			want: []string{"/usr/local/bin/ironlb", "whoami", "--verbose"}},
		{name: "whoami image command", image: "traefik/whoami", command: []string{"/whoami"}, args: []string{"--port=80"},
			want: []string{"/usr/local/bin/ironlb", "whoami", "--port=80"}},
		{name: "kube-proxy", image: "registry.k8s.io/kube-proxy:v1.30.0",
			command: []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=myk8s-worker"},
			want:    []string{"/opt/k8s/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=myk8s-worker"}},
		{name: "kube-proxy command and args", image: "k8s.gcr.io/kube-proxy:v1.30.0",
			command: []string{"kube-proxy"}, args: []string{"--v=2"},
			want: []string{"/opt/k8s/bin/kube-proxy", "--v=2"}},
		{name: "kube-proxy entrypoint", image: "registry.k8s.io/kube-proxy", want: []string{"/opt/k8s/bin/kube-proxy"}},
		{name: "ironlb command", image: "ghcr.io/ironlb/ironlb:dev", command: []string{"/ironlb"}, args: []string{"controller", "--v=1"},
			want: []string{"/usr/local/bin/ironlb", "controller", "--v=1"}},
		{name: "ironlb entrypoint", image: "ironlb:dev", args: []string{"speaker"}, want: []string{"/usr/local/bin/ironlb", "speaker"}},
		{name: "unknown image", image: "redis:7", wantErr: ErrImageUnknown,
			wantInErr: []string{`"redis:7"`, "ironlb/ironlb", "registry.k8s.io/kube-proxy", "traefik/whoami"}},
		{name: "unknown image with command", image: "alpine", command: []string{"sh"}, wantErr: ErrImageUnknown,
			wantInErr: []string{`"alpine"`}},

		{name: "regression-issue-74839 entrypoint", image: "registry.k8s.io/e2e-test-images/regression-issue-74839:1.5",
			want: []string{strings.TrimSuffix(agn, "agnhost") + "regression-issue-74839"}},

		// agnhost: ENTRYPOINT /agnhost, CMD pause; args are the subcommand, command overrides.
		{name: "agnhost CMD", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", want: []string{agn, "pause"}},
		{name: "agnhost args are the subcommand", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			args: []string{"netexec", "--http-port=8080", "--udp-port=8081"}, want: []string{agn, "netexec", "--http-port=8080", "--udp-port=8081"}},
		{name: "agnhost serve-hostname", image: "registry.k8s.io/e2e-test-images/agnhost:2.55", args: []string{"serve-hostname"},
			want: []string{agn, "serve-hostname"}},
		{name: "agnhost command /agnhost", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			command: []string{"/agnhost", "porter"}, want: []string{agn, "porter"}},
		{name: "agnhost command and args", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			command: []string{"/agnhost"}, args: []string{"netexec", "--http-port=80"}, want: []string{agn, "netexec", "--http-port=80"}},
		{name: "agnhost-2 link", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			command: []string{"/agnhost-2", "pause"}, want: []string{agn, "pause"}},
		{name: "agnhost shell", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			command: []string{"/bin/sh", "-c", "sleep 1"}, want: []string{"sh", "-c", "sleep 1"}},
		{name: "agnhost /coredns (the DNS tests' server pod)", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			command: []string{"/coredns"}, args: []string{"-conf", "/etc/coredns/Corefile"},
			want: []string{"/cache/coredns/bin/coredns", "-conf", "/etc/coredns/Corefile"}},
		{name: "agnhost unknown command", image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			command: []string{"/usr/bin/python3"}, wantErr: ErrNoCommand, wantInErr: []string{`"/usr/bin/python3"`, "agnhost"}},

		// pause: ENTRYPOINT /pause.
		{name: "pause", image: "registry.k8s.io/pause:3.10.2", want: []string{agn, "pause"}},
		{name: "pause command", image: "registry.k8s.io/pause:3.10.2", command: []string{"/pause"}, want: []string{agn, "pause"}},
		{name: "pause has no shell", image: "registry.k8s.io/pause:3.10.2", command: []string{"sh"}, wantErr: ErrNoCommand},

		// busybox: no ENTRYPOINT, CMD sh; its tools are the host's.
		{name: "busybox CMD", image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-2", want: []string{"sh"}},
		{name: "busybox sh -c", image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
			command: []string{"/bin/sh", "-c", "echo Pausing start. && sleep 15"}, want: []string{"sh", "-c", "echo Pausing start. && sleep 15"}},
		{name: "busybox args name the program", image: "busybox:1.36", args: []string{"sleep", "3600"}, want: []string{"sleep", "3600"}},
		{name: "busybox command and args", image: "docker.io/library/busybox", command: []string{"sh", "-c"}, args: []string{"nc -l 9000"},
			want: []string{"sh", "-c", "nc -l 9000"}},
		{name: "busybox ash is sh", image: "busybox", command: []string{"/bin/ash"}, want: []string{"sh"}},
		{name: "busybox unknown program", image: "busybox", command: []string{"/usr/bin/python3"}, wantErr: ErrNoCommand,
			wantInErr: []string{`"/usr/bin/python3"`, "busybox"}},

		// nginx and httpd: agnhost netexec on port 80 stands in; their own arguments are dropped.
		{name: "nginx CMD", image: "registry.k8s.io/e2e-test-images/nginx:1.27.0-2", want: []string{agn, "netexec", "--http-port=80", "--udp-port=-1"}},
		{name: "nginx args", image: "nginx", args: []string{"nginx", "-g", "daemon off;"}, want: []string{agn, "netexec", "--http-port=80", "--udp-port=-1"}},
		{name: "nginx shell", image: "nginx", command: []string{"sh", "-c", "sleep 1"}, want: []string{"sh", "-c", "sleep 1"}},
		{name: "httpd CMD", image: "httpd:2.4", want: []string{agn, "netexec", "--http-port=80", "--udp-port=-1"}},
		{name: "coredns as kubeadm's Deployment runs it", image: "registry.k8s.io/coredns/coredns:v1.14.6", args: []string{"-conf", "/etc/coredns/Corefile"},
			want: []string{"/cache/coredns/bin/coredns", "-conf", "/etc/coredns/Corefile"}},
		{name: "coredns command", image: "coredns/coredns:1.14.6", command: []string{"/coredns"}, args: []string{"-conf", "/c"},
			want: []string{"/cache/coredns/bin/coredns", "-conf", "/c"}},
		{name: "known image, unknown command", image: "traefik/whoami", command: []string{"sh", "-c", "sleep 1"}, wantErr: ErrNoCommand,
			wantInErr: []string{`"sh"`, "traefik/whoami"}},
		{name: "kube-proxy image, iptables command", image: "registry.k8s.io/kube-proxy:v1.30.0", command: []string{"/usr/sbin/iptables"},
			wantErr: ErrNoCommand, wantInErr: []string{`"/usr/sbin/iptables"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Argv(progs, tt.image, tt.command, tt.args)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Argv() error = %v, want %v", err, tt.wantErr)
				}
				for _, s := range tt.wantInErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("Argv() error %q does not mention %s", err, s)
					}
				}
				if got != nil {
					t.Errorf("Argv() = %q with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Argv() error: %v", err)
			}
			if d := cmp.Diff(tt.want, got, cmpOpts); d != "" {
				t.Errorf("Argv() mismatch (-want +got):\n%s", d)
			}
		})
	}
}

// TestArgvDoesNotAlias checks that results do not share backing arrays with the inputs or each other.
func TestArgvDoesNotAlias(t *testing.T) {
	progs := Programs{Self: "/ironlb", K8sBin: "/k8s"}
	cmd := []string{"kube-proxy", "--a"}
	args := make([]string, 1, 10)
	args[0] = "--b"
	a1, err := Argv(progs, "registry.k8s.io/kube-proxy", cmd, args)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := Argv(progs, "registry.k8s.io/kube-proxy", cmd, args)
	a1[0], a1[1] = "changed", "changed"
	if d := cmp.Diff([]string{"/k8s/kube-proxy", "--a", "--b"}, a2, cmpOpts); d != "" {
		t.Errorf("second Argv() changed by the first's caller (-want +got):\n%s", d)
	}
	if cmd[0] != "kube-proxy" || cmd[1] != "--a" || args[0] != "--b" {
		t.Errorf("Argv changed its inputs: %q %q", cmd, args)
	}
}

// referenceRE is distribution/reference's grammar (without IPv6 hosts): [domain[:port]/]path[:tag][@digest].
var referenceRE = func() *regexp.Regexp {
	alnum := `[a-z0-9]+`
	sep := `(?:[._]|__|[-]+)`
	pathComp := alnum + `(?:` + sep + alnum + `)*`
	domainComp := `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domain := domainComp + `(?:\.` + domainComp + `)*(?::[0-9]+)?`
	name := `(?:` + domain + `/)?` + pathComp + `(?:/` + pathComp + `)*`
	tag := `[\w][\w.-]{0,127}`
	digest := `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	return regexp.MustCompile(`^` + name + `(?::` + tag + `)?(?:@` + digest + `)?$`)
}()

// hasTag reports whether ref has a ':' after its last '/', where a tag would be.
func hasTag(ref string) bool { return strings.LastIndex(ref, ":") > strings.LastIndex(ref, "/") }

// ImageRepo is not idempotent on every string. Two ways it can differ on a second pass, both found by
// FuzzImageRepo and both outside what a caller passes it:
//   - "a:b:c" (not a valid reference): one pass strips only the last ":c";
//   - "docker.io/library/docker.io/library/x" (a valid but absurd reference): one pass strips one prefix.
func TestImageRepoNotIdempotentCorners(t *testing.T) {
	for _, in := range []string{"a:b:c", "docker.io/library/docker.io/library/x"} {
		once := ImageRepo(in)
		if twice := ImageRepo(once); twice == once {
			t.Errorf("ImageRepo is idempotent on %q now; FuzzImageRepo's exclusions can be narrowed", in)
		}
	}
}

func FuzzImageRepo(f *testing.F) {
	for _, s := range []string{
		"traefik/whoami:v1.10", "docker.io/library/nginx", "k8s.gcr.io/kube-proxy:v1.30.0", "localhost:5000/foo:bar",
		"localhost:5000", "ironlb", "a@b:c", "a:b:c", "docker.io/library/docker.io/library/x", "nginx@" + testDigest, "", ":", "@", "/:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := ImageRepo(in)
		if strings.Contains(got, "@") {
			t.Errorf("ImageRepo(%q) = %q still has a digest", in, got)
		}
		valid := referenceRE.MatchString(in)
		if valid && hasTag(got) {
			t.Errorf("ImageRepo(%q) = %q still has a tag", in, got)
		}
		// Idempotent unless what is left still looks tagged (only for invalid references) or still has a
		// docker.io/library/ prefix (only for references that repeat it).
		if !hasTag(got) && !strings.HasPrefix(got, "docker.io/library/") {
			if again := ImageRepo(got); again != got {
				t.Errorf("ImageRepo not idempotent: %q -> %q -> %q", in, got, again)
			}
		}
		if valid && !strings.HasPrefix(got, "docker.io/library/") {
			if again := ImageRepo(got); again != got {
				t.Errorf("ImageRepo not idempotent on a valid reference: %q -> %q -> %q", in, got, again)
			}
		}
		if _, known := images[got]; !known && len(got) > len(in) {
			t.Errorf("ImageRepo(%q) = %q grew an unknown name", in, got)
		}
	})
}

func TestImageFiles(t *testing.T) {
	progs := Programs{Self: "/usr/local/bin/ironlb", E2EBin: "/opt/e2e/bin", CoreDNS: "/cache/coredns/bin"}
	agnhostFiles := []ImageFile{{"/agnhost", "/opt/e2e/bin/agnhost"}, {"/agnhost-2", "/opt/e2e/bin/agnhost"}, {"/coredns", "/cache/coredns/bin/coredns"}}
	for _, tt := range []struct {
		image string
		want  []ImageFile
	}{
		{"registry.k8s.io/e2e-test-images/agnhost:2.66.1", agnhostFiles},
		{"k8s.gcr.io/e2e-test-images/agnhost:2.20", agnhostFiles},
		{"172.18.255.253:5000/registry.k8s.io/e2e-test-images/agnhost:2.66.1", agnhostFiles},
		{"busybox:1.37", nil},
		{"registry.k8s.io/pause:3.10.2", nil},
		{"redis:7", nil},
	} {
		if d := cmp.Diff(tt.want, ImageFiles(progs, tt.image)); d != "" {
			t.Errorf("ImageFiles(%q) (-want +got):\n%s", tt.image, d)
		}
	}
}
