package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Real-time CPU budgets for the lab's containers.
//
// On a kernel built with RT group scheduling (CONFIG_RT_GROUP_SCHED) whose cpu controller is on a
// cgroup v1 hierarchy (this machine: cgroup v1 controllers, v2 only for membership), a task may
// take SCHED_FIFO or SCHED_RR only if its cpu cgroup has a real-time budget (cpu.rt_runtime_us > 0),
// a new cgroup starts with none, and a child's budget must fit in what its parent has left. runc
// puts each container in a v1 cpu cgroup at the same path as its v2 one
// (<lab>/<node>/pods/<uid>/<container>-<run>), creating every missing parent with no budget, so in
// the runc lab the speaker's BFD loop was refused ("sched_setattr SCHED_FIFO 10: operation not
// permitted") and ran at normal priority: under load the router's BFD declared healthy nodes down
// (issue 19's BGP trials). On the host path the same process stayed in the root cpu cgroup and had
// the root's budget (950 ms per second).
//
// The kubelet has no setting for this (nodes seldom run kernels with RT group scheduling); Docker
// has one (--cpu-rt-runtime on the daemon for the parent, on a container for its share), and the lab
// does what it does: the lab's cgroup gets NodeRealtimeUS per node, each node's cgroup and its pods'
// cgroup NodeRealtimeUS, a Pod ContainerRealtimeUS per container that asks for CAP_SYS_NICE, and such
// a container ContainerRealtimeUS in its runtime spec (linux.resources.cpu.realtimeRuntime, which
// runc writes before it moves the process in). Only CAP_SYS_NICE asks: without it a container cannot
// raise its own priority anyway, and a budget per privileged container would soon exhaust the
// node's. A container the budget does not fit runs without one, and its own log says what it was
// refused, as on a node without budgets.

const (
	// ContainerRealtimeUS is the real-time budget of a container that asks for CAP_SYS_NICE, in
	// microseconds per second: 5% of a CPU, far above what a BFD loop uses (it sleeps between
	// packets), so that it is never throttled.
	ContainerRealtimeUS = 50_000
	// NodeRealtimeUS is each node's budget (and its pods' cgroup's): three such containers.
	NodeRealtimeUS = 3 * ContainerRealtimeUS
)

// LabRealtimeUS is the lab cgroup's budget for n nodes.
func LabRealtimeUS(nodes int) int64 { return int64(nodes) * NodeRealtimeUS }

// WantsRealtime reports whether a container asks for a real-time budget: its capability set (the
// runtime's default with the securityContext's add and drop) holds SYS_NICE.
func WantsRealtime(c corev1.Container) bool {
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		return false
	}
	var add, drop []string
	for _, x := range sc.Capabilities.Add {
		add = append(add, string(x))
	}
	for _, x := range sc.Capabilities.Drop {
		drop = append(drop, string(x))
	}
	return slices.Contains(EffectiveCaps(add, drop), "SYS_NICE")
}

// PodRealtimeUS is a Pod's budget: ContainerRealtimeUS for each container that can run at the same
// time as the others and asks for one (regular containers and restartable init containers, the
// sidecars), and one more share if any of the init containers that run one at a time asks.
func PodRealtimeUS(pod *corev1.Pod) int64 {
	n, serial := 0, false
	for _, c := range pod.Spec.InitContainers {
		if !WantsRealtime(c) {
			continue
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			n++
		} else {
			serial = true
		}
	}
	for _, c := range pod.Spec.Containers {
		if WantsRealtime(c) {
			n++
		}
	}
	if serial {
		n++
	}
	return int64(n) * ContainerRealtimeUS
}

// v1Mount is one cgroup v1 hierarchy: where it is mounted and its controllers (or name=...).
type v1Mount struct {
	Dir         string
	Controllers []string
}

// parseV1Mounts reads /proc/self/mountinfo's cgroup v1 hierarchies.
func parseV1Mounts(r io.Reader) []v1Mount {
	var out []v1Mount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != "cgroup" {
			continue
		}
		var ctl []string
		for _, o := range strings.Split(g[2], ",") {
			switch o {
			case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children", "xattr", "noprefix", "cpuset_v2_mode", "favordynmods":
			default:
				if !strings.HasPrefix(o, "release_agent=") {
					ctl = append(ctl, o)
				}
			}
		}
		out = append(out, v1Mount{Dir: unescapeMountPath(f[4]), Controllers: ctl})
	}
	return out
}

var v1Mounts = sync.OnceValue(func() []v1Mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseV1Mounts(f)
})

// v1Counterparts returns the cgroup's directories in every cgroup v1 hierarchy (runc creates the
// container's cgroup in each, at the path it has in v2), each with its hierarchy's controllers.
func (c Cgroup) v1Counterparts() []v1Mount {
	root, err := cgroupRoot()
	if err != nil {
		return nil
	}
	rel, err := filepath.Rel(root, string(c))
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil
	}
	var out []v1Mount
	for _, m := range v1Mounts() {
		if m.Dir == root {
			continue
		}
		out = append(out, v1Mount{Dir: filepath.Join(m.Dir, rel), Controllers: m.Controllers})
	}
	return out
}

// removeV1 removes the cgroup's v1 counterparts, deepest directories first (their processes are
// gone: they were killed through v2). Without this, every container runc started would leave an
// empty directory in each v1 hierarchy, and a dead Pod's real-time budget would stay taken.
func (c Cgroup) removeV1() error {
	var errs []error
	for _, m := range c.v1Counterparts() {
		var dirs []string
		_ = filepath.WalkDir(m.Dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		errs = append(errs, rmdirDeepestFirst(dirs))
	}
	return errors.Join(errs...)
}

// ErrNoRealtimeGroups: the machine has no per-cgroup real-time budgets to set (no cgroup v1 cpu
// hierarchy, or a kernel without RT group scheduling); tasks there take SCHED_FIFO without one.
var ErrNoRealtimeGroups = errors.New("no cgroup v1 cpu hierarchy with real-time group scheduling")

// SetRealtime gives the cgroup's v1 cpu counterpart (created if missing) a real-time budget of us
// microseconds per period. Its parents must have room for it: set them first, top down.
func (c Cgroup) SetRealtime(us int64) error {
	for _, m := range c.v1Counterparts() {
		if !slices.Contains(m.Controllers, "cpu") {
			continue
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(m.Dir), "cpu.rt_runtime_us")); err != nil {
			return ErrNoRealtimeGroups
		}
		if err := os.MkdirAll(m.Dir, 0o755); err != nil {
			return err
		}
		f := filepath.Join(m.Dir, "cpu.rt_runtime_us")
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == strconv.FormatInt(us, 10) {
			return nil
		}
		if err := os.WriteFile(f, []byte(strconv.FormatInt(us, 10)), 0o644); err != nil {
			return fmt.Errorf("real-time budget %d µs/s for %s: %w (a child's budget must fit in what its parent has left)", us, m.Dir, err)
		}
		return nil
	}
	return ErrNoRealtimeGroups
}
