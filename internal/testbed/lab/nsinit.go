package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Every process the lab runs (control-plane components, node agents, containers) starts through
// `ironlb lab nsinit`: the lab spawns its own binary in a new cgroup (and, for containers, new mount and UTS
// namespaces); nsinit joins the network namespace, sets up mounts, hostname and capabilities, then execs
// the real program. Go cannot setns(CLONE_NEWNET) for a whole process, but a locked thread that execs
// keeps its namespace, which is all we need.

// ExecSpec describes one process to start inside the lab.
type ExecSpec struct {
	NetNS    string   `json:"netns,omitempty"`    // named network namespace to join ("" = stay)
	Hostname string   `json:"hostname,omitempty"` // set in a new UTS namespace
	MountNS  bool     `json:"mountNS,omitempty"`  // private mount namespace with Mounts and a fresh /sys
	Mounts   []Mount  `json:"mounts,omitempty"`
	Caps     []string `json:"caps,omitempty"` // capability bounding set to keep (CAP_ names without prefix); nil keeps all
	DropCaps bool     `json:"dropCaps,omitempty"`
	UID      *int     `json:"uid,omitempty"`
	GID      *int     `json:"gid,omitempty"`
	Dir      string   `json:"dir,omitempty"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
}

// Mount binds Source at Target inside the process's mount namespace. Target must exist.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

const nsinitEnv = "IRONLB_NSINIT_SPEC"

// Command builds the exec.Cmd that starts spec through self in cgroup cg. The caller sets Stdout/Stderr
// and starts it; the process gets its own session so terminal signals do not reach it.
func Command(self string, spec ExecSpec, cg *os.File) (*exec.Cmd, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "lab", "nsinit")
	cmd.Env = []string{nsinitEnv + "=" + string(b)}
	attr := &syscall.SysProcAttr{Setsid: true}
	if spec.MountNS {
		attr.Cloneflags |= syscall.CLONE_NEWNS
	}
	if spec.Hostname != "" {
		attr.Cloneflags |= syscall.CLONE_NEWUTS
	}
	if cg != nil {
		attr.UseCgroupFD = true
		attr.CgroupFD = int(cg.Fd())
	}
	cmd.SysProcAttr = attr
	return cmd, nil
}

// NSInit is the child side: it reads the spec from the environment, prepares the process and execs the
// program. It returns only on error.
func NSInit() error {
	var spec ExecSpec
	if err := json.Unmarshal([]byte(os.Getenv(nsinitEnv)), &spec); err != nil {
		return fmt.Errorf("nsinit: bad spec: %w", err)
	}
	if len(spec.Argv) == 0 {
		return errors.New("nsinit: empty argv")
	}
	runtime.LockOSThread()
	if spec.NetNS != "" {
		f, err := os.Open(NetNSPath(spec.NetNS))
		if err != nil {
			return fmt.Errorf("nsinit: %w", err)
		}
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("nsinit: joining netns %s: %w", spec.NetNS, err)
		}
		f.Close()
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("nsinit: sethostname: %w", err)
		}
	}
	if spec.MountNS {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return fmt.Errorf("nsinit: making / a slave mount: %w", err)
		}
		if spec.NetNS != "" { // sysfs shows the namespace of whoever mounts it
			_ = unix.Unmount("/sys", unix.MNT_DETACH)
			if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
				return fmt.Errorf("nsinit: mounting /sys: %w", err)
			}
		}
		for _, m := range spec.Mounts {
			if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("nsinit: bind %s at %s: %w", m.Source, m.Target, err)
			}
			if m.ReadOnly {
				if err := unix.Mount("", m.Target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
					return fmt.Errorf("nsinit: read-only %s: %w", m.Target, err)
				}
			}
		}
	}
	if spec.Caps != nil || spec.DropCaps {
		if err := limitCaps(spec.Caps); err != nil {
			return fmt.Errorf("nsinit: %w", err)
		}
	}
	if spec.GID != nil {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("nsinit: setgroups: %w", err)
		}
		if err := syscall.Setgid(*spec.GID); err != nil {
			return fmt.Errorf("nsinit: setgid: %w", err)
		}
	}
	if spec.UID != nil {
		if err := syscall.Setuid(*spec.UID); err != nil {
			return fmt.Errorf("nsinit: setuid: %w", err)
		}
	}
	if spec.Dir != "" {
		if err := os.Chdir(spec.Dir); err != nil {
			return fmt.Errorf("nsinit: %w", err)
		}
	}
	path := spec.Argv[0]
	if !strings.Contains(path, "/") {
		p, err := lookPath(path, spec.Env)
		if err != nil {
			return fmt.Errorf("nsinit: %w", err)
		}
		path = p
	}
	return fmt.Errorf("nsinit: exec %s: %w", path, syscall.Exec(path, spec.Argv, spec.Env))
}

func lookPath(file string, env []string) (string, error) {
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH", file)
}

// capNames maps capability names to numbers (linux/capability.h).
var capNames = map[string]int{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
	"SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10, "NET_BROADCAST": 11,
	"NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15, "SYS_MODULE": 16, "SYS_RAWIO": 17,
	"SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20, "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23,
	"SYS_RESOURCE": 24, "SYS_TIME": 25, "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29,
	"AUDIT_CONTROL": 30, "SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
	"BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}

// DefaultCaps are the capabilities a container runtime (containerd, Docker) gives a non-privileged
// container.
var DefaultCaps = []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}

// EffectiveCaps applies a securityContext's add and drop lists to the runtime default, as containerd does
// ("ALL" in drop empties the set first; "ALL" in add keeps everything).
func EffectiveCaps(add, drop []string) []string {
	norm := func(in []string) (all bool, names []string) {
		for _, c := range in {
			c = strings.TrimPrefix(strings.ToUpper(c), "CAP_")
			if c == "ALL" {
				all = true
			} else if _, ok := capNames[c]; ok {
				names = append(names, c)
			}
		}
		return all, names
	}
	addAll, addNames := norm(add)
	dropAll, dropNames := norm(drop)
	// containerd's order: ALL in add, then ALL in drop, then the named adds, then the named drops, so
	// add ALL + drop CHOWN is everything but CHOWN, and drop ALL + add NET_BIND_SERVICE is just that one.
	set := map[string]bool{}
	for _, c := range DefaultCaps {
		set[c] = true
	}
	if addAll {
		for n := range capNames {
			set[n] = true
		}
	}
	if dropAll {
		set = map[string]bool{}
	}
	for _, a := range addNames {
		set[a] = true
	}
	for _, d := range dropNames {
		delete(set, d)
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CapsOf are the names (without CAP_, sorted) of the capabilities whose bits are set in mask, as
// /proc/<pid>/status shows a set (CapEff: 000001fffeffffff); bits of capabilities newer than capNames
// are left out.
func CapsOf(mask uint64) []string {
	var out []string
	for n, bit := range capNames {
		if mask&(1<<uint(bit)) != 0 {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// limitCaps drops every capability not in keep from the bounding set; a root process that execs then
// holds exactly keep.
func limitCaps(keep []string) error {
	want := map[int]bool{}
	for _, n := range keep {
		if v, ok := capNames[n]; ok {
			want[v] = true
		}
	}
	for c := 0; c <= 40; c++ {
		if want[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	return nil
}
