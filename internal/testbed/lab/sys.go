package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// This file holds the thin adapters to the kernel: ip(8) for namespaces and links, cgroup v2 for process
// membership (so a power cut or `lab down` kills every process of a node, whatever it forked), and dialing
// from inside a namespace.

// ip runs ip(8) with args and returns its combined output on failure in the error.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ipBatch runs many ip(8) commands in one process (`ip -n NS -batch -`), failing on the first error.
func ipBatch(ctx context.Context, netns string, lines []string) error {
	args := []string{"-batch", "-"}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s -batch: %w: %s", netns, err, bytes.TrimSpace(out))
	}
	return nil
}

// NetNSPath is where ip(8) keeps named namespaces.
func NetNSPath(name string) string { return filepath.Join("/run/netns", name) }

// ListNetNS returns the names of all named network namespaces.
func ListNetNS() []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// NetNSExists reports whether a named namespace exists.
func NetNSExists(name string) bool {
	_, err := os.Stat(NetNSPath(name))
	return err == nil
}

// DeleteNetNS removes a named namespace, ignoring one that does not exist.
func DeleteNetNS(ctx context.Context, name string) error {
	if !NetNSExists(name) {
		return nil
	}
	return ip(ctx, "netns", "delete", name)
}

// sysctls writes sysctls inside a namespace (they are per namespace for net.*).
func sysctls(netns string, kv map[string]string) error {
	return InNetNS(netns, func() error {
		for k, v := range kv {
			p := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", k, v, netns, err)
			}
		}
		return nil
	})
}

// InNetNS runs fn on an OS thread that has joined the named network namespace. The thread is discarded
// afterwards, so the namespace never leaks to other goroutines. Sockets fn opens stay in that namespace.
func InNetNS(netns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		f, err := os.Open(NetNSPath(netns))
		if err != nil {
			errc <- fmt.Errorf("opening netns %s: %w", netns, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering netns %s: %w", netns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Dialer returns a DialContext function that connects from inside the named namespace.
func Dialer(netns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := InNetNS(netns, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// cgroupRoot returns the mount point of the cgroup v2 hierarchy (pure v2, or the "unified" part of a
// hybrid system).
func cgroupRoot() (string, error) {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy mounted (looked at /sys/fs/cgroup and /sys/fs/cgroup/unified)")
}

// Cgroup is a cgroup v2 directory used only for membership: every process the lab starts is born into one
// (clone3 with CLONE_INTO_CGROUP), so killing a node or the whole lab is one write to cgroup.kill.
type Cgroup string

// LabCgroup returns the lab's cgroup for cluster name (not created).
func LabCgroup(name string) (Cgroup, error) {
	root, err := cgroupRoot()
	if err != nil {
		return "", err
	}
	return Cgroup(filepath.Join(root, "ironlb-lab-"+name)), nil
}

// Child returns a sub-cgroup (not created).
func (c Cgroup) Child(name ...string) Cgroup {
	return Cgroup(filepath.Join(append([]string{string(c)}, name...)...))
}

// Ensure creates the cgroup and its parents.
func (c Cgroup) Ensure() error { return os.MkdirAll(string(c), 0o755) }

// Exists reports whether the cgroup exists.
func (c Cgroup) Exists() bool { _, err := os.Stat(string(c)); return err == nil }

// Open returns a directory fd for CLONE_INTO_CGROUP, creating the cgroup first.
func (c Cgroup) Open() (*os.File, error) {
	if err := c.Ensure(); err != nil {
		return nil, err
	}
	return os.Open(string(c))
}

// Procs lists the pids in the cgroup and all its descendants.
func (c Cgroup) Procs() []int {
	var pids []int
	_ = filepath.WalkDir(string(c), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// Kill SIGKILLs every process in the cgroup and its descendants and waits up to timeout for them to go.
// The kill is repeated while waiting: a process that a parent outside the cgroup was cloning into it
// at the moment of the first kill (CLONE_INTO_CGROUP) arrives after it. A process that stays names
// itself in the error with its state and what it waits on.
func (c Cgroup) Kill(timeout time.Duration) error {
	if !c.Exists() {
		return nil
	}
	kill := func() {
		if err := os.WriteFile(filepath.Join(string(c), "cgroup.kill"), []byte("1"), 0o644); err != nil {
			// Older kernels: signal each process.
			for _, pid := range c.Procs() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	kill()
	deadline := time.Now().Add(timeout)
	for i := 1; len(c.Procs()) > 0; i++ {
		if time.Now().After(deadline) {
			var desc []string
			for _, pid := range c.Procs() {
				desc = append(desc, describeProc(pid))
			}
			return fmt.Errorf("cgroup %s: processes still alive %s after SIGKILL: %s", c, timeout, strings.Join(desc, "; "))
		}
		time.Sleep(10 * time.Millisecond)
		if i%10 == 0 {
			kill()
		}
	}
	return nil
}

// describeProc says what a process is and what it is doing: "1234 etcd state D wchan ...".
func describeProc(pid int) string {
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
	state := "?"
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) {
			state = string(b[i+2 : i+3])
		}
	}
	return fmt.Sprintf("%d %s state %s wchan %s", pid, strings.TrimSpace(string(comm)), state, strings.TrimSpace(string(wchan)))
}

// Remove kills everything in the cgroup and removes it and its descendants, and their counterparts in
// the cgroup v1 hierarchies (where runc puts its containers too).
func (c Cgroup) Remove() error {
	if err := c.Kill(20 * time.Second); err != nil {
		return err
	}
	var dirs []string
	_ = filepath.WalkDir(string(c), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return errors.Join(rmdirDeepestFirst(dirs), c.removeV1())
}

// rmdirDeepestFirst removes cgroup directories listed parents first (a walk's order), deepest
// first. A killed process stays in its cgroup until its parent reaps it: it retries briefly on
// EBUSY.
func rmdirDeepestFirst(dirs []string) error {
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for try := 0; try < 300; try++ {
			if err = unix.Rmdir(dirs[i]); !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// RSS returns the summed resident memory of every process in the cgroup, in bytes.
func (c Cgroup) RSS() int64 {
	var total int64
	page := int64(os.Getpagesize())
	for _, pid := range c.Procs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 1 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			total += n * page
		}
	}
	return total
}

// FlushConntrack deletes every conntrack entry of network namespace netns, of every family (over
// netlink, as `conntrack -F`: no tool needed).
func FlushConntrack(netns string) error {
	return InNetNS(netns, func() error {
		if err := netlink.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
			return fmt.Errorf("flushing the conntrack table of %s: %w", netns, err)
		}
		return nil
	})
}
