package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// This file is the pure core of the runc runtime (runc.go): a Pod's container and its image's config
// become the OCI runtime spec runc runs, combined the way Kubernetes (the kubelet) and containerd's CRI
// plugin combine them. No I/O: the caller reads the image's /etc/passwd and /etc/group and computes the
// container's environment (containerEnv) and bind mounts (volumes, /etc/hosts, /etc/resolv.conf).
//
// The rules, each a row of TestOCISpec:
//   - Command and arguments: a container's command replaces the image's ENTRYPOINT and drops its CMD;
//     its args replace the CMD; $(VAR) in either expands against the container's environment (Expand).
//     Nothing to run is an error (containerd: "no command specified").
//   - Environment: PATH's default, HOSTNAME, then the image's ENV, then the container's (a later name
//     replaces an earlier one in place), as containerd does.
//   - Working directory: the container's workingDir, else the image's WorkingDir, else /.
//   - User: runAsUser / runAsGroup (container over pod), else the image's USER ("uid", "uid:gid",
//     "name", "name:group", names looked up in the image's /etc/passwd and /etc/group); a uid without a
//     group takes its primary group from /etc/passwd, or 0. Supplementary groups: the user's groups in
//     /etc/group (a USER by name), the pod's supplementalGroups and fsGroup.
//   - runAsNonRoot refuses root the way the kubelet does (verifyRunAsNonRoot), with its messages; the
//     container waits in CreateContainerConfigError.
//   - Capabilities: containerd's default set with the securityContext's add and drop
//     (lab.EffectiveCaps); privileged gives every capability the runtime itself holds (HostCaps), as
//     containerd's privileged containers get the current process's set (WithAllCurrentCapabilities):
//     runc cannot raise a capability missing from its own bounding set and refuses the container
//     ("unable to apply caps: operation not permitted"), which a full list would ask for on a host
//     whose bounding set lacks one (this lab's machine lacks CAP_SYS_RESOURCE). Bounding, effective and permitted get the
//     set, inheritable and ambient none: a non-root process therefore ends with none after execve, as
//     under containerd (the manifests rely on it: docs/security.md).
//   - allowPrivilegeEscalation: false sets no_new_privs. readOnlyRootFilesystem makes the rootfs read-only.
//   - Namespaces: the pod's network namespace (or the node's for hostNetwork) by path; its own mount,
//     UTS, IPC and PID namespaces (none of IPC or PID with hostIPC / hostPID). The hostname is the pod's.
//   - Mounts: /proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys (read-only unless privileged) and the
//     cgroup file system as runc's default spec has them, then the bind mounts, shallower destinations
//     first; containerd's masked and read-only /proc paths unless privileged.
//   - The cgroup is the caller's path (under the node's lab cgroup, so that a power cut kills it).

// OCIInput is everything one container's runtime spec is made from.
type OCIInput struct {
	Pod       *corev1.Pod
	Container corev1.Container
	Image     v1.Config // the image's config: Entrypoint, Cmd, Env, WorkingDir, User
	// Env is the container's environment as the kubelet computes it (service links, envFrom, env),
	// NAME=value in order, without the image's.
	Env []string
	// Passwd and Group are the image's /etc/passwd and /etc/group (nil when it has none).
	Passwd, Group []byte
	Rootfs        string      // the container's root file system (a directory)
	Mounts        []lab.Mount // bind mounts: volumes, /etc/hosts, /etc/resolv.conf, /etc/hostname
	NetNS         string      // path of the network namespace to join (/run/netns/<name>)
	Hostname      string
	CgroupsPath   string // cgroup v2 path relative to the hierarchy's root
	// HostCaps are the capabilities the runtime holds (names without CAP_; ProcessCaps of the
	// agent's /proc/self/status): what a privileged container gets.
	HostCaps []string
}

// ErrContainerConfig marks a container the kubelet would refuse to create: it waits in
// CreateContainerConfigError with the message.
var ErrContainerConfig = errors.New("container config")

// configError is an ErrContainerConfig with the kubelet's message alone as its text.
type configError struct{ msg string }

func (e configError) Error() string        { return e.msg }
func (e configError) Is(target error) bool { return target == ErrContainerConfig }

// defaultPath is containerd's (and runc's default spec's) PATH for an image that sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// OCISpecVersion is the runtime-spec version the specs claim: runc 1.1 (Debian 12) implements 1.0.2,
// and nothing here needs more.
const OCISpecVersion = "1.0.2"

// unprivilegedCaps is the capability set (names without CAP_) of a container that is not privileged:
// the runtime's default with the securityContext's add and drop (lab.EffectiveCaps); sc may be nil.
func unprivilegedCaps(sc *corev1.SecurityContext) []string {
	var add, drop []string
	if sc != nil && sc.Capabilities != nil {
		for _, x := range sc.Capabilities.Add {
			add = append(add, string(x))
		}
		for _, x := range sc.Capabilities.Drop {
			drop = append(drop, string(x))
		}
	}
	return lab.EffectiveCaps(add, drop)
}

// OCISpec builds the runtime spec for in. Errors wrap ErrContainerConfig (runAsNonRoot refused, a
// USER naming no user of the image) or ErrNoCommand (nothing to run).
func OCISpec(in OCIInput) (*specs.Spec, error) {
	c, pod := in.Container, in.Pod
	env := &Env{}
	for _, kv := range in.Env {
		k, v, _ := strings.Cut(kv, "=")
		env.Set(k, v)
	}
	argv := ContainerArgv(in.Image.Entrypoint, in.Image.Cmd, expandAll(c.Command, env), expandAll(c.Args, env))
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: no command specified (the image has no ENTRYPOINT or CMD and the container sets neither command nor args)", ErrNoCommand)
	}
	user, err := containerUser(pod, c, in.Image.User, in.Passwd, in.Group)
	if err != nil {
		return nil, err
	}
	sc := c.SecurityContext
	privileged := sc != nil && sc.Privileged != nil && *sc.Privileged
	var caps []string
	if privileged {
		caps = slices.Clone(in.HostCaps)
	} else {
		caps = unprivilegedCaps(sc)
	}
	for i, n := range caps {
		caps[i] = "CAP_" + n
	}
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = in.Image.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	s := &specs.Spec{
		Version: OCISpecVersion,
		Process: &specs.Process{
			Args: argv,
			Env:  MergeEnv(in.Hostname, in.Image.Env, in.Env),
			Cwd:  cwd,
			User: user,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: slices.Clone(caps), Permitted: slices.Clone(caps),
			},
			NoNewPrivileges: sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		},
		Root:     &specs.Root{Path: in.Rootfs, Readonly: sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem},
		Hostname: in.Hostname,
		Mounts:   ociMounts(in.Mounts, privileged),
		Linux: &specs.Linux{
			CgroupsPath: in.CgroupsPath,
			Namespaces:  namespaces(pod, in.NetNS),
			Resources:   &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: privileged, Access: "rwm"}}},
		},
	}
	if !privileged {
		s.Linux.MaskedPaths = []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
		s.Linux.ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	}
	return s, nil
}

// ProcessCaps are the capability names (without CAP_, sorted) of the effective set in a
// /proc/<pid>/status file's content (its CapEff line, hexadecimal).
func ProcessCaps(status []byte) ([]string, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "CapEff" {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapEff %q: %w", strings.TrimSpace(v), err)
		}
		return lab.CapsOf(mask), nil
	}
	return nil, errors.New("no CapEff line in the process status")
}

// ContainerArgv combines an image's ENTRYPOINT and CMD with a container's command and args as
// Kubernetes defines it: command replaces ENTRYPOINT and drops CMD; args replace CMD.
func ContainerArgv(entrypoint, cmd, command, args []string) []string {
	var out []string
	switch {
	case len(command) > 0:
		out = append(out, command...)
	default:
		out = append(out, entrypoint...)
		if len(args) == 0 {
			args = cmd
		}
	}
	return append(out, args...)
}

func expandAll(in []string, env *Env) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = Expand(s, env.Lookup)
	}
	return out
}

// MergeEnv is the container's environment: PATH's default, HOSTNAME, the image's ENV, then the
// container's; a later definition of a name replaces the earlier one where it stood.
func MergeEnv(hostname string, image, container []string) []string {
	e := &Env{}
	for _, kv := range append(append([]string{defaultPath, "HOSTNAME=" + hostname}, image...), container...) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		e.Set(k, v)
	}
	return e.List()
}

// containerUser resolves the process's user (see the package rules) and checks runAsNonRoot.
func containerUser(pod *corev1.Pod, c corev1.Container, imageUser string, passwd, group []byte) (specs.User, error) {
	runUID, runGID := runAsUser(pod, c), runAsGroup(pod, c)
	if err := verifyRunAsNonRoot(pod, c, runUID, imageUser); err != nil {
		return specs.User{}, err
	}
	users, groups := parsePasswd(passwd), parseGroup(group)
	var u specs.User
	var name string // the user's name when known, for its supplementary groups
	if runUID != nil {
		u.UID = uint32(*runUID)
		if e, ok := users.byUID(u.UID); ok {
			u.GID, name = e.gid, e.name
		}
	} else {
		userPart, groupPart, hasGroup := strings.Cut(imageUser, ":")
		switch {
		case userPart == "":
		case isNumeric(userPart):
			n, _ := strconv.ParseUint(userPart, 10, 32)
			u.UID = uint32(n)
			if e, ok := users.byUID(u.UID); ok {
				u.GID, name = e.gid, e.name
			}
		default:
			e, ok := users.byName(userPart)
			if !ok {
				return specs.User{}, configError{fmt.Sprintf("unable to find user %s: no matching entries in passwd file", userPart)}
			}
			u.UID, u.GID, name = e.uid, e.gid, e.name
		}
		if hasGroup {
			if isNumeric(groupPart) {
				n, _ := strconv.ParseUint(groupPart, 10, 32)
				u.GID = uint32(n)
			} else {
				g, ok := groups.byName(groupPart)
				if !ok {
					return specs.User{}, configError{fmt.Sprintf("unable to find group %s: no matching entries in group file", groupPart)}
				}
				u.GID = g.gid
			}
		}
	}
	if runGID != nil {
		u.GID = uint32(*runGID)
	}
	extra := map[uint32]bool{}
	if name != "" {
		for _, g := range groups {
			if slices.Contains(g.members, name) && g.gid != u.GID {
				extra[g.gid] = true
			}
		}
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		for _, g := range psc.SupplementalGroups {
			extra[uint32(g)] = true
		}
		if psc.FSGroup != nil {
			extra[uint32(*psc.FSGroup)] = true
		}
	}
	for g := range extra {
		u.AdditionalGids = append(u.AdditionalGids, g)
	}
	slices.Sort(u.AdditionalGids)
	return u, nil
}

// verifyRunAsNonRoot is the kubelet's check (pkg/kubelet/kuberuntime, verifyRunAsNonRoot), with its
// messages: the image's user is its USER's user part, root when USER is empty.
func verifyRunAsNonRoot(pod *corev1.Pod, c corev1.Container, runUID *int64, imageUser string) error {
	nonRoot := pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsNonRoot != nil && *pod.Spec.SecurityContext.RunAsNonRoot
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		nonRoot = *c.SecurityContext.RunAsNonRoot
	}
	if !nonRoot {
		return nil
	}
	podName := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
	if runUID != nil {
		if *runUID == 0 {
			return configError{fmt.Sprintf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podName, c.Name)}
		}
		return nil
	}
	userPart, _, _ := strings.Cut(imageUser, ":")
	switch {
	case userPart == "" || isNumeric(userPart) && strings.TrimLeft(userPart, "0") == "":
		return configError{fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podName, c.Name)}
	case !isNumeric(userPart):
		return configError{fmt.Sprintf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", userPart, podName, c.Name)}
	}
	return nil
}

func isNumeric(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

type passwdEntry struct {
	name     string
	uid, gid uint32
}

type passwdFile []passwdEntry

func (p passwdFile) byUID(uid uint32) (passwdEntry, bool) {
	for _, e := range p {
		if e.uid == uid {
			return e, true
		}
	}
	return passwdEntry{}, false
}

func (p passwdFile) byName(n string) (passwdEntry, bool) {
	for _, e := range p {
		if e.name == n {
			return e, true
		}
	}
	return passwdEntry{}, false
}

// parsePasswd reads name:x:uid:gid:... lines, skipping what does not parse.
func parsePasswd(b []byte) passwdFile {
	var out passwdFile
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 4 || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid)})
	}
	return out
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

type groupFile []groupEntry

func (g groupFile) byName(n string) (groupEntry, bool) {
	for _, e := range g {
		if e.name == n {
			return e, true
		}
	}
	return groupEntry{}, false
}

// parseGroup reads name:x:gid:member,member lines, skipping what does not parse.
func parseGroup(b []byte) groupFile {
	var out groupFile
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			continue
		}
		e := groupEntry{name: f[0], gid: uint32(gid)}
		if len(f) > 3 && f[3] != "" {
			e.members = strings.Split(f[3], ",")
		}
		out = append(out, e)
	}
	return out
}

// namespaces are the container's: the given network namespace, and its own mount, UTS, IPC and PID
// namespaces unless the pod shares the host's IPC or PID namespace.
func namespaces(pod *corev1.Pod, netns string) []specs.LinuxNamespace {
	ns := []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: netns}, {Type: specs.MountNamespace}, {Type: specs.UTSNamespace}}
	if !pod.Spec.HostIPC {
		ns = append(ns, specs.LinuxNamespace{Type: specs.IPCNamespace})
	}
	if !pod.Spec.HostPID {
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace})
	}
	return ns
}

// ociMounts are runc's default file systems and the bind mounts, shallower destinations first (a
// volume at /a/b over one at /a), as containerd orders them.
func ociMounts(binds []lab.Mount, privileged bool) []specs.Mount {
	sysOpts := []string{"nosuid", "noexec", "nodev", "ro"}
	if privileged {
		sysOpts = []string{"nosuid", "noexec", "nodev", "rw"}
	}
	out := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: sysOpts},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
	sorted := slices.Clone(binds)
	sort.SliceStable(sorted, func(i, j int) bool {
		return depth(sorted[i].Target) < depth(sorted[j].Target)
	})
	for _, b := range sorted {
		opts := []string{"rbind", "rprivate"}
		if b.ReadOnly {
			opts = append(opts, "ro")
		}
		out = append(out, specs.Mount{Destination: path.Clean("/" + b.Target), Type: "bind", Source: b.Source, Options: opts})
	}
	return out
}

func depth(p string) int { return strings.Count(path.Clean("/"+p), "/") }
