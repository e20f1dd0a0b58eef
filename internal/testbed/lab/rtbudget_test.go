package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func capsContainer(name string, add, drop []corev1.Capability) corev1.Container {
	c := corev1.Container{Name: name}
	if add != nil || drop != nil {
		c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: add, Drop: drop}}
	}
	return c
}

func TestWantsRealtime(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want bool
	}{
		{"no securityContext", corev1.Container{}, false},
		{"default set (no SYS_NICE in it)", capsContainer("c", []corev1.Capability{"NET_RAW"}, nil), false},
		{"SYS_NICE added (the speaker)", capsContainer("c", []corev1.Capability{"NET_RAW", "SYS_NICE"}, nil), true},
		{"CAP_ prefix and lower case", capsContainer("c", []corev1.Capability{"cap_sys_nice"}, nil), true},
		{"ALL added", capsContainer("c", []corev1.Capability{"ALL"}, nil), true},
		{"added then dropped", capsContainer("c", []corev1.Capability{"SYS_NICE"}, []corev1.Capability{"SYS_NICE"}), false},
		{"drop ALL, add SYS_NICE", capsContainer("c", []corev1.Capability{"SYS_NICE"}, []corev1.Capability{"ALL"}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WantsRealtime(tc.c); got != tc.want {
				t.Errorf("WantsRealtime = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodRealtimeUS(t *testing.T) {
	nice := capsContainer("nice", []corev1.Capability{"SYS_NICE"}, nil)
	plain := capsContainer("plain", nil, nil)
	always := corev1.ContainerRestartPolicyAlways
	sidecar := nice
	sidecar.RestartPolicy = &always
	for _, tc := range []struct {
		name       string
		init, ctrs []corev1.Container
		shares     int64
	}{
		{"no container asks", nil, []corev1.Container{plain}, 0},
		{"one of two asks", nil, []corev1.Container{plain, nice}, 1},
		{"two ask", nil, []corev1.Container{nice, nice}, 2},
		{"init containers run one at a time: one share for all", []corev1.Container{nice, nice}, []corev1.Container{plain}, 1},
		{"a sidecar runs beside the others", []corev1.Container{sidecar, nice}, []corev1.Container{nice}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.ctrs}}
			if got, want := PodRealtimeUS(pod), tc.shares*ContainerRealtimeUS; got != want {
				t.Errorf("PodRealtimeUS = %d, want %d", got, want)
			}
		})
	}
	if LabRealtimeUS(4) != 4*NodeRealtimeUS || NodeRealtimeUS < 3*ContainerRealtimeUS {
		t.Errorf("a node's budget must hold three containers' and the lab's every node's")
	}
}

func TestParseV1Mounts(t *testing.T) {
	in := strings.Join([]string{
		`31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755`,
		`32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu`,
		`33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct`,
		`34 31 0:31 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd`,
		`35 31 0:32 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate`,
		`36 31 0:33 / /sys/fs/cgroup/odd\040dir rw - cgroup cgroup rw,pids`,
		`garbage`,
	}, "\n")
	got := parseV1Mounts(strings.NewReader(in))
	want := []v1Mount{
		{Dir: "/sys/fs/cgroup/cpu", Controllers: []string{"cpu"}},
		{Dir: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"cpu", "cpuacct"}},
		{Dir: "/sys/fs/cgroup/systemd", Controllers: []string{"name=systemd"}},
		{Dir: "/sys/fs/cgroup/odd dir", Controllers: []string{"pids"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseV1Mounts =\n%+v\nwant\n%+v", got, want)
	}
}

// rtTestCgroup returns a throwaway lab cgroup on a machine with RT group scheduling on cgroup v1
// (this one), removed at the end; the test is skipped elsewhere.
func rtTestCgroup(t *testing.T) Cgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups)")
	}
	cg, err := LabCgroup(fmt.Sprintf("rttest-%d", os.Getpid()))
	if err != nil {
		t.Skip(err)
	}
	if err := cg.SetRealtime(ContainerRealtimeUS); errors.Is(err, ErrNoRealtimeGroups) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Remove(); err != nil {
			t.Error(err)
		}
	})
	return cg
}

// cpuV1Dir is the cgroup's directory in the v1 cpu hierarchy.
func cpuV1Dir(t *testing.T, cg Cgroup) string {
	for _, m := range cg.v1Counterparts() {
		if slices.Contains(m.Controllers, "cpu") {
			return m.Dir
		}
	}
	t.Fatalf("no cpu counterpart of %s", cg)
	return ""
}

// chrtIn runs `chrt -f 10 true` with its process in the cgroup's v1 cpu counterpart (as runc moves a
// container's process there) and returns its error.
func chrtIn(t *testing.T, cg Cgroup) error {
	dir := cpuV1Dir(t, cg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec chrt -f 10 true`, "sh", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// TestKernelRealtimeBudget: what issue 19's BGP trials met in the runc lab. A process in a new v1 cpu
// cgroup (as runc makes for a container, parents and all) is refused SCHED_FIFO; with the budget set
// top down it gets it; a child cannot have more than its parent; and Remove takes the v1
// directories away with the v2 one.
func TestKernelRealtimeBudget(t *testing.T) {
	lab := rtTestCgroup(t)
	if _, err := exec.LookPath("chrt"); err != nil {
		t.Skip(err)
	}
	node := lab.Child("node")
	pod := node.Child("pods", "uid")
	ctr := pod.Child("ctr-1")

	if err := chrtIn(t, ctr); err == nil {
		t.Fatal("SCHED_FIFO was granted in a cgroup without a real-time budget: the machine does not show the problem this guards against")
	}
	if err := ctr.SetRealtime(ContainerRealtimeUS); err == nil {
		t.Fatal("a container's budget was accepted under parents with none")
	}
	for _, c := range []Cgroup{node, node.Child("pods"), pod, ctr} {
		if err := c.SetRealtime(ContainerRealtimeUS); err != nil {
			t.Fatalf("SetRealtime(%s): %v", c, err)
		}
	}
	if err := chrtIn(t, ctr); err != nil {
		t.Fatalf("SCHED_FIFO refused with the budget set: %v", err)
	}
	if err := pod.Child("ctr-2").SetRealtime(ContainerRealtimeUS); err == nil {
		t.Error("a second container's budget fit in a Pod budgeted for one")
	}
	if err := node.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, m := range node.v1Counterparts() {
		if _, err := os.Stat(m.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after Remove (err %v)", m.Dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cpuV1Dir(t, lab), "cpu.rt_runtime_us")); err != nil {
		t.Errorf("the lab's own cgroup went with its child: %v", err)
	}
}
