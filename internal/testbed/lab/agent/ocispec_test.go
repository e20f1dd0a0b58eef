package agent

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

const (
	testPasswd = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nweb:x:33:33::/var/www:/bin/sh\n"
	testGroup  = "root:x:0:\nwww-data:x:33:\nnet:x:400:web,nonroot\nnogroup:x:65534:\nnonroot:x:65532:\n"
)

// ironlbImage is hack/image's config.
var ironlbImage = v1.Config{Entrypoint: []string{"/ironlb"}, User: "65532:65532", WorkingDir: "/",
	Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}

func testInput(mod func(*OCIInput)) OCIInput {
	in := OCIInput{
		Pod:       &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}},
		Container: corev1.Container{Name: "c"},
		Image:     ironlbImage,
		Passwd:    []byte(testPasswd), Group: []byte(testGroup),
		Rootfs: "/state/rootfs", NetNS: "/run/netns/n1-p-u1", Hostname: "p", CgroupsPath: "/ironlb-lab-x/n1/pods/u1/c-1",
	}
	if mod != nil {
		mod(&in)
	}
	return in
}

func TestContainerArgv(t *testing.T) {
	tests := []struct {
		name                           string
		entrypoint, cmd, command, args []string
		want                           []string
	}{
		{"image alone: ENTRYPOINT then CMD", []string{"/e"}, []string{"c1", "c2"}, nil, nil, []string{"/e", "c1", "c2"}},
		{"args replace CMD", []string{"/e"}, []string{"c1"}, nil, []string{"a1"}, []string{"/e", "a1"}},
		{"command replaces ENTRYPOINT and drops CMD", []string{"/e"}, []string{"c1"}, []string{"/x"}, nil, []string{"/x"}},
		{"command and args", []string{"/e"}, []string{"c1"}, []string{"/x"}, []string{"a1"}, []string{"/x", "a1"}},
		{"no ENTRYPOINT: CMD alone", nil, []string{"sh"}, nil, nil, []string{"sh"}},
		{"no ENTRYPOINT: args alone", nil, []string{"sh"}, nil, []string{"sleep", "1"}, []string{"sleep", "1"}},
		{"nothing", nil, nil, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ContainerArgv(tt.entrypoint, tt.cmd, tt.command, tt.args)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestProcessCaps(t *testing.T) {
	status := "Name:\tironlb\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\nCapEff:\t0000000000003000\nCapBnd:\t000001fffeffffff\n"
	got, err := ProcessCaps([]byte(status))
	if err != nil || !slices.Equal(got, []string{"NET_ADMIN", "NET_RAW"}) {
		t.Errorf("ProcessCaps = %v, %v; want [NET_ADMIN NET_RAW] (CapEff bits 12 and 13)", got, err)
	}
	all, err := ProcessCaps([]byte("CapEff:\t000001ffffffffff\n"))
	if err != nil || len(all) != 41 {
		t.Errorf("every capability: %d %v", len(all), err)
	}
	for _, bad := range []string{"Name:\tx\n", "CapEff:\tzz\n"} {
		if _, err := ProcessCaps([]byte(bad)); err == nil {
			t.Errorf("ProcessCaps(%q): no error", bad)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	got := MergeEnv("h", []string{"PATH=/img", "A=image", "B=image"}, []string{"B=pod", "C=pod", "HOSTNAME=mine"})
	want := []string{"PATH=/img", "HOSTNAME=mine", "A=image", "B=pod", "C=pod"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if diff := cmp.Diff([]string{defaultPath, "HOSTNAME=h"}, MergeEnv("h", nil, nil)); diff != "" {
		t.Errorf("no env: (-want +got)\n%s", diff)
	}
}

// TestOCISpec is the specification of OCISpec: one row per rule of ocispec.go's comment.
func TestOCISpec(t *testing.T) {
	defaultCaps := []string{"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_MKNOD",
		"CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT"}
	sc := func(f func(*corev1.SecurityContext)) func(*OCIInput) {
		return func(in *OCIInput) {
			in.Container.SecurityContext = &corev1.SecurityContext{}
			f(in.Container.SecurityContext)
		}
	}
	podSC := func(f func(*corev1.PodSecurityContext)) func(*OCIInput) {
		return func(in *OCIInput) {
			in.Pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
			f(in.Pod.Spec.SecurityContext)
		}
	}
	// check functions for the rows that look at one field
	wantCwd := func(dir string) func(*testing.T, *specs.Spec) {
		return func(t *testing.T, s *specs.Spec) {
			if s.Process.Cwd != dir {
				t.Errorf("cwd %q, want %q", s.Process.Cwd, dir)
			}
		}
	}
	wantUser := func(u specs.User) func(*testing.T, *specs.Spec) {
		return func(t *testing.T, s *specs.Spec) {
			if diff := cmp.Diff(u, s.Process.User); diff != "" {
				t.Errorf("user (-want +got)\n%s", diff)
			}
		}
	}
	tests := []struct {
		name    string
		in      OCIInput
		check   func(t *testing.T, s *specs.Spec)
		wantErr error
		wantMsg string
	}{
		{name: "image ENTRYPOINT with the container's args, $(VAR) expanded from the container's env",
			in: testInput(func(in *OCIInput) {
				in.Container.Args = []string{"speaker", "--node=$(NODE_NAME)", "--x=$(NOPE)", "$$(NODE_NAME)"}
				in.Env = []string{"NODE_NAME=n1"}
			}),
			check: func(t *testing.T, s *specs.Spec) {
				want := []string{"/ironlb", "speaker", "--node=n1", "--x=$(NOPE)", "$(NODE_NAME)"}
				if diff := cmp.Diff(want, s.Process.Args); diff != "" {
					t.Errorf("args (-want +got)\n%s", diff)
				}
			}},
		{name: "command replaces ENTRYPOINT and drops CMD",
			in: testInput(func(in *OCIInput) {
				in.Image.Cmd = []string{"whoami"}
				in.Container.Command = []string{"/bin/sh", "-c", "echo $(A)"}
				in.Env = []string{"A=1"}
			}),
			check: func(t *testing.T, s *specs.Spec) {
				if diff := cmp.Diff([]string{"/bin/sh", "-c", "echo 1"}, s.Process.Args); diff != "" {
					t.Errorf("args (-want +got)\n%s", diff)
				}
			}},
		{name: "nothing to run", in: testInput(func(in *OCIInput) { in.Image.Entrypoint = nil }), wantErr: ErrNoCommand},
		{name: "env: default PATH, HOSTNAME, image, then container; image PATH wins over the default",
			in: testInput(func(in *OCIInput) {
				in.Image.Env = []string{"PATH=/img/bin", "LANG=C", "MODE=image"}
				in.Env = []string{"MODE=pod", "NODE_NAME=n1"}
			}),
			check: func(t *testing.T, s *specs.Spec) {
				want := []string{"PATH=/img/bin", "HOSTNAME=p", "LANG=C", "MODE=pod", "NODE_NAME=n1"}
				if diff := cmp.Diff(want, s.Process.Env); diff != "" {
					t.Errorf("env (-want +got)\n%s", diff)
				}
			}},
		{name: "working dir: container over image over /",
			in:    testInput(func(in *OCIInput) { in.Container.WorkingDir = "/work" }),
			check: wantCwd("/work")},
		{name: "working dir: image's",
			in:    testInput(func(in *OCIInput) { in.Image.WorkingDir = "/srv" }),
			check: wantCwd("/srv")},
		{name: "working dir: / when neither sets one",
			in:    testInput(func(in *OCIInput) { in.Image.WorkingDir = "" }),
			check: wantCwd("/")},
		{name: "user: the image's uid:gid",
			in:    testInput(nil),
			check: wantUser(specs.User{UID: 65532, GID: 65532, AdditionalGids: []uint32{400}})},
		{name: "user: image USER by name takes its primary group and its groups",
			in:    testInput(func(in *OCIInput) { in.Image.User = "web" }),
			check: wantUser(specs.User{UID: 33, GID: 33, AdditionalGids: []uint32{400}})},
		{name: "user: image USER name:group",
			in:    testInput(func(in *OCIInput) { in.Image.User = "web:nogroup" }),
			check: wantUser(specs.User{UID: 33, GID: 65534, AdditionalGids: []uint32{400}})},
		{name: "user: a uid not in /etc/passwd gets group 0",
			in:    testInput(func(in *OCIInput) { in.Image.User = "1234" }),
			check: wantUser(specs.User{UID: 1234})},
		{name: "user: image USER naming no user is a config error",
			in: testInput(func(in *OCIInput) { in.Image.User = "ghost" }), wantErr: ErrContainerConfig,
			wantMsg: "unable to find user ghost: no matching entries in passwd file"},
		{name: "user: pod runAsUser/runAsGroup override the image, supplementalGroups and fsGroup added",
			in: testInput(podSC(func(p *corev1.PodSecurityContext) {
				p.RunAsUser, p.RunAsGroup, p.SupplementalGroups, p.FSGroup = ptr.To[int64](65534), ptr.To[int64](65534), []int64{7}, ptr.To[int64](2000)
			})),
			check: wantUser(specs.User{UID: 65534, GID: 65534, AdditionalGids: []uint32{7, 2000}})},
		{name: "user: the container's runAsUser over the pod's; group from /etc/passwd",
			in: testInput(func(in *OCIInput) {
				podSC(func(p *corev1.PodSecurityContext) { p.RunAsUser = ptr.To[int64](65534) })(in)
				in.Container.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}
			}),
			check: wantUser(specs.User{UID: 0, GID: 0})},
		{name: "runAsNonRoot: a root image user is refused with the kubelet's message",
			in: testInput(func(in *OCIInput) {
				in.Image.User = ""
				in.Container.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}
			}),
			wantErr: ErrContainerConfig, wantMsg: `container has runAsNonRoot and image will run as root (pod: "p_ns(u1)", container: c)`},
		{name: "runAsNonRoot: image USER 0:0 is root",
			in: testInput(func(in *OCIInput) {
				in.Image.User = "0:0"
				podSC(func(p *corev1.PodSecurityContext) { p.RunAsNonRoot = ptr.To(true) })(in)
			}),
			wantErr: ErrContainerConfig, wantMsg: `container has runAsNonRoot and image will run as root (pod: "p_ns(u1)", container: c)`},
		{name: "runAsNonRoot: a named image user cannot be verified",
			in: testInput(func(in *OCIInput) {
				in.Image.User = "web"
				podSC(func(p *corev1.PodSecurityContext) { p.RunAsNonRoot = ptr.To(true) })(in)
			}),
			wantErr: ErrContainerConfig, wantMsg: `container has runAsNonRoot and image has non-numeric user (web), cannot verify user is non-root (pod: "p_ns(u1)", container: c)`},
		{name: "runAsNonRoot: runAsUser 0 breaks it",
			in: testInput(func(in *OCIInput) {
				podSC(func(p *corev1.PodSecurityContext) { p.RunAsNonRoot, p.RunAsUser = ptr.To(true), ptr.To[int64](0) })(in)
			}),
			wantErr: ErrContainerConfig, wantMsg: `container's runAsUser breaks non-root policy (pod: "p_ns(u1)", container: c)`},
		{name: "runAsNonRoot: the image's nonroot user passes (the controller's pod)",
			in: testInput(podSC(func(p *corev1.PodSecurityContext) { p.RunAsNonRoot = ptr.To(true) })),
			check: func(t *testing.T, s *specs.Spec) {
				if s.Process.User.UID != 65532 {
					t.Errorf("uid %d", s.Process.User.UID)
				}
			}},
		{name: "runAsNonRoot false on the container overrides the pod's true",
			in: testInput(func(in *OCIInput) {
				in.Image.User = ""
				podSC(func(p *corev1.PodSecurityContext) { p.RunAsNonRoot = ptr.To(true) })(in)
				in.Container.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(false)}
			}),
			check: func(t *testing.T, s *specs.Spec) {
				if s.Process.User.UID != 0 {
					t.Errorf("uid %d", s.Process.User.UID)
				}
			}},
		{name: "capabilities: the runtime default",
			in: testInput(nil),
			check: func(t *testing.T, s *specs.Spec) {
				want := &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
				if diff := cmp.Diff(want, s.Process.Capabilities); diff != "" {
					t.Errorf("caps (-want +got)\n%s", diff)
				}
			}},
		{name: "capabilities: drop ALL, add NET_RAW and SYS_NICE (the speaker's)",
			in: testInput(sc(func(c *corev1.SecurityContext) {
				c.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_RAW", "SYS_NICE"}}
			})),
			check: func(t *testing.T, s *specs.Spec) {
				want := []string{"CAP_NET_RAW", "CAP_SYS_NICE"}
				c := s.Process.Capabilities
				if diff := cmp.Diff(&specs.LinuxCapabilities{Bounding: want, Effective: want, Permitted: want}, c); diff != "" {
					t.Errorf("caps (-want +got)\n%s", diff)
				}
			}},
		{name: "capabilities: drop ALL leaves none",
			in: testInput(sc(func(c *corev1.SecurityContext) {
				c.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
			})),
			check: func(t *testing.T, s *specs.Spec) {
				if c := s.Process.Capabilities; len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
					t.Errorf("caps %+v, want none", c)
				}
			}},
		{name: "privileged: every capability the runtime holds, /sys writable, no masked paths, every device",
			in: testInput(func(in *OCIInput) {
				in.Container.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
				in.HostCaps = lab.CapsOf(0x000001fffeffffff) // all 41 but SYS_RESOURCE (bit 24), as this lab's machine
			}),
			check: func(t *testing.T, s *specs.Spec) {
				c := s.Process.Capabilities
				if n := len(c.Bounding); n != 40 || slices.Contains(c.Bounding, "CAP_SYS_RESOURCE") || !slices.Contains(c.Bounding, "CAP_SYS_ADMIN") {
					t.Errorf("%d capabilities %v, want the runtime's 40 (no CAP_SYS_RESOURCE)", n, c.Bounding)
				}
				if !slices.Equal(c.Bounding, c.Effective) || !slices.Equal(c.Bounding, c.Permitted) || len(c.Inheritable)+len(c.Ambient) != 0 {
					t.Errorf("caps %+v: want bounding = effective = permitted, no inheritable or ambient", c)
				}
				if s.Linux.MaskedPaths != nil || s.Linux.ReadonlyPaths != nil {
					t.Errorf("masked %v, read-only %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
				}
				if !s.Linux.Resources.Devices[0].Allow {
					t.Errorf("devices %+v", s.Linux.Resources.Devices)
				}
				for _, m := range s.Mounts {
					if m.Destination == "/sys" && m.Options[len(m.Options)-1] != "rw" {
						t.Errorf("/sys %v", m.Options)
					}
				}
			}},
		{name: "not privileged: masked and read-only /proc paths, /sys read-only, devices denied but runc's defaults",
			in: testInput(nil),
			check: func(t *testing.T, s *specs.Spec) {
				if len(s.Linux.MaskedPaths) == 0 || len(s.Linux.ReadonlyPaths) == 0 || s.Linux.Resources.Devices[0].Allow {
					t.Errorf("masked %v, read-only %v, devices %+v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths, s.Linux.Resources.Devices)
				}
			}},
		{name: "readOnlyRootFilesystem and allowPrivilegeEscalation false",
			in: testInput(sc(func(c *corev1.SecurityContext) {
				c.ReadOnlyRootFilesystem, c.AllowPrivilegeEscalation = ptr.To(true), ptr.To(false)
			})),
			check: func(t *testing.T, s *specs.Spec) {
				if !s.Root.Readonly || !s.Process.NoNewPrivileges || s.Root.Path != "/state/rootfs" {
					t.Errorf("root %+v, noNewPrivileges %v", s.Root, s.Process.NoNewPrivileges)
				}
			}},
		{name: "writable rootfs by default",
			in: testInput(nil),
			check: func(t *testing.T, s *specs.Spec) {
				if s.Root.Readonly || s.Process.NoNewPrivileges {
					t.Errorf("root %+v, noNewPrivileges %v", s.Root, s.Process.NoNewPrivileges)
				}
			}},
		{name: "namespaces: the pod's network by path, own mount, UTS, IPC, PID; hostname and cgroup",
			in: testInput(nil),
			check: func(t *testing.T, s *specs.Spec) {
				want := []specs.LinuxNamespace{{Type: "network", Path: "/run/netns/n1-p-u1"}, {Type: "mount"}, {Type: "uts"}, {Type: "ipc"}, {Type: "pid"}}
				if diff := cmp.Diff(want, s.Linux.Namespaces); diff != "" {
					t.Errorf("namespaces (-want +got)\n%s", diff)
				}
				if s.Hostname != "p" || s.Linux.CgroupsPath != "/ironlb-lab-x/n1/pods/u1/c-1" {
					t.Errorf("hostname %q, cgroup %q", s.Hostname, s.Linux.CgroupsPath)
				}
			}},
		{name: "namespaces: hostNetwork (the node's by path), hostPID and hostIPC share",
			in: testInput(func(in *OCIInput) {
				in.Pod.Spec.HostNetwork, in.Pod.Spec.HostPID, in.Pod.Spec.HostIPC = true, true, true
				in.NetNS, in.Hostname = "/run/netns/n1", "n1"
			}),
			check: func(t *testing.T, s *specs.Spec) {
				want := []specs.LinuxNamespace{{Type: "network", Path: "/run/netns/n1"}, {Type: "mount"}, {Type: "uts"}}
				if diff := cmp.Diff(want, s.Linux.Namespaces); diff != "" {
					t.Errorf("namespaces (-want +got)\n%s", diff)
				}
				if s.Hostname != "n1" {
					t.Errorf("hostname %q", s.Hostname)
				}
			}},
		{name: "mounts: defaults, then binds shallowest first, read-only kept",
			in: testInput(func(in *OCIInput) {
				in.Mounts = []lab.Mount{{Source: "/v/deep", Target: "/a/b/c"}, {Source: "/v/a", Target: "/a", ReadOnly: true}, {Source: "/p/hosts", Target: "/etc/hosts"}}
			}),
			check: func(t *testing.T, s *specs.Spec) {
				var got []specs.Mount
				for _, m := range s.Mounts {
					if m.Type == "bind" {
						got = append(got, m)
					}
				}
				want := []specs.Mount{
					{Destination: "/a", Type: "bind", Source: "/v/a", Options: []string{"rbind", "rprivate", "ro"}},
					{Destination: "/etc/hosts", Type: "bind", Source: "/p/hosts", Options: []string{"rbind", "rprivate"}},
					{Destination: "/a/b/c", Type: "bind", Source: "/v/deep", Options: []string{"rbind", "rprivate"}},
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("binds (-want +got)\n%s", diff)
				}
				if s.Mounts[0].Destination != "/proc" || len(s.Mounts) != 7+3 {
					t.Errorf("mounts %+v", s.Mounts)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := OCISpec(tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				if tt.wantMsg != "" && err.Error() != tt.wantMsg {
					t.Errorf("message\n got %s\nwant %s", err, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Version != OCISpecVersion {
				t.Errorf("version %q", s.Version)
			}
			tt.check(t, s)
		})
	}
}
