package lab

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatePaths(t *testing.T) {
	s := State{Dir: "/run/ironlb-lab"}
	for _, tt := range []struct{ got, want string }{
		{s.PlanFile(), "/run/ironlb-lab/lab.json"},
		{s.Kubeconfig(), "/run/ironlb-lab/kubeconfig"},
		{s.InternalKubeconfig(), "/run/ironlb-lab/kubeconfig-internal"},
		{s.PKI().Dir, "/run/ironlb-lab/pki"},
		{s.PKI().CACert(), "/run/ironlb-lab/pki/ca.crt"},
		{s.LogFile("myk8s-worker", "agent"), "/run/ironlb-lab/logs/myk8s-worker/agent.log"},
		{s.EtcdDir(), "/run/ironlb-lab/etcd"},
		{s.PodDir("0123-abcd"), "/run/ironlb-lab/pods/0123-abcd"},
		{s.HostsFile(), "/run/ironlb-lab/hosts"},
		{s.APIProxyAddrFile(), "/run/ironlb-lab/apiproxy.addr"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestEnsurePathAndRemoveCreated(t *testing.T) {
	root := t.TempDir()
	s := State{Dir: filepath.Join(root, "state")}
	host := filepath.Join(root, "host") // stands in for the host's file system
	for _, d := range []string{s.Dir, host, filepath.Join(host, "pre")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h := func(p ...string) string { return filepath.Join(append([]string{host}, p...)...) }

	steps := []struct {
		name        string
		path        string
		dir         bool
		wantCreated []string // appended to the record by this call
	}{
		{"nested directories", h("a", "b", "c"), true, []string{h("a"), h("a", "b"), h("a", "b", "c")}},
		{"file with missing parents", h("x", "y", "empty.txt"), false, []string{h("x"), h("x", "y"), h("x", "y", "empty.txt")}},
		{"file in a created directory", h("x", "y", "kept.txt"), false, []string{h("x", "y", "kept.txt")}},
		{"lock file", h("x", "run.lock"), false, []string{h("x", "run.lock")}},
		{"existing path again", h("a", "b", "c"), true, nil},
		{"existing parent of a created path", h("a"), true, nil},
		{"under a pre-existing directory", h("pre", "sub"), true, []string{h("pre", "sub")}},
		{"pre-existing directory", h("pre"), true, nil},
		{"unclean path", h("a", "..", "m", ".", "n") + "/", true, []string{h("m"), h("m", "n")}},
		{"removed by someone else later", h("gone", "dir"), true, []string{h("gone"), h("gone", "dir")}},
	}
	var want []string
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := s.EnsurePath(st.path, st.dir); err != nil {
				t.Fatalf("EnsurePath(%q, %v): %v", st.path, st.dir, err)
			}
			fi, err := os.Stat(st.path)
			if err != nil {
				t.Fatalf("after EnsurePath: %v", err)
			}
			if fi.IsDir() != st.dir {
				t.Errorf("%s: IsDir = %v, want %v", st.path, fi.IsDir(), st.dir)
			}
			if !st.dir && fi.Size() != 0 {
				t.Errorf("%s: size %d, want an empty file", st.path, fi.Size())
			}
			want = append(want, st.wantCreated...)
			b, err := os.ReadFile(s.createdFile())
			if err != nil {
				t.Fatalf("reading the record: %v", err)
			}
			if d := cmp.Diff(want, strings.Fields(string(b)), cmpOpts); d != "" {
				t.Errorf("recorded paths mismatch (-want +got):\n%s", d)
			}
		})
	}

	// Someone fills a created file, writes to a created lock file, and removes a created directory.
	if err := os.WriteFile(h("x", "y", "kept.txt"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h("x", "run.lock"), []byte("pid 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h("gone", "dir")); err != nil {
		t.Fatal(err)
	}

	left := s.RemoveCreated()
	slices.Sort(left)
	// The filled file stays, and so do the directories holding it.
	if d := cmp.Diff([]string{h("x"), h("x", "y"), h("x", "y", "kept.txt")}, left, cmpOpts); d != "" {
		t.Errorf("RemoveCreated() left mismatch (-want +got):\n%s", d)
	}
	for _, p := range []string{h("a"), h("a", "b", "c"), h("x", "y", "empty.txt"), h("x", "run.lock"), h("pre", "sub"), h("m"), h("gone")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after RemoveCreated (Lstat: %v)", p, err)
		}
	}
	for _, p := range []string{host, h("pre"), h("x", "y", "kept.txt"), s.Dir} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(h("x", "y", "kept.txt")); string(b) != "data" {
		t.Errorf("kept.txt = %q, want its content kept", b)
	}
}

func TestRemoveCreatedWithoutRecord(t *testing.T) {
	if left := (State{Dir: t.TempDir()}).RemoveCreated(); left != nil {
		t.Errorf("RemoveCreated() = %q, want nil", left)
	}
}

func TestEnsurePathConcurrent(t *testing.T) {
	root := t.TempDir()
	s := State{Dir: root}
	done := make(chan error)
	const n = 8
	for i := range n {
		go func() { done <- s.EnsurePath(filepath.Join(root, "shared", "d", string(rune('a'+i))), true) }()
	}
	for range n {
		if err := <-done; err != nil {
			t.Errorf("EnsurePath: %v", err)
		}
	}
	b, err := os.ReadFile(s.createdFile())
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	slices.Sort(got)
	want := []string{filepath.Join(root, "shared"), filepath.Join(root, "shared", "d")}
	for i := range n {
		want = append(want, filepath.Join(root, "shared", "d", string(rune('a'+i))))
	}
	slices.Sort(want)
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("recorded paths mismatch (-want +got), each path must be recorded once:\n%s", d)
	}
}

func TestWriteReadPlan(t *testing.T) {
	custom := DefaultConfig()
	custom.Name, custom.Workers, custom.ProxyMode = "lab", 1, ProxyNFTables
	custom.K8sBin, custom.Self = "/opt/k8s/bin", "/usr/local/bin/ironlb"
	dual := DefaultConfig()
	dual.IPFamily = IPFamilyDual
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"seed 000", DefaultConfig()},
		{"dual", dual},
		{"custom", custom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPlan(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := State{Dir: filepath.Join(t.TempDir(), "not", "yet")} // WritePlan creates the directory
			if err := s.WritePlan(p); err != nil {
				t.Fatalf("WritePlan: %v", err)
			}
			got, err := s.ReadPlan()
			if err != nil {
				t.Fatalf("ReadPlan: %v", err)
			}
			if d := cmp.Diff(p, got, cmpOpts); d != "" {
				t.Errorf("round trip mismatch (-wrote +read):\n%s", d)
			}
			if got.Gateway != netip.MustParseAddr("172.18.0.1") {
				t.Errorf("Gateway = %s", got.Gateway)
			}
		})
	}
}

func TestReadPlanErrors(t *testing.T) {
	t.Run("empty dir", func(t *testing.T) {
		_, err := State{Dir: t.TempDir()}.ReadPlan()
		if !errors.Is(err, ErrNoLab) {
			t.Errorf("ReadPlan() error = %v, want one wrapping ErrNoLab", err)
		}
	})
	t.Run("missing dir", func(t *testing.T) {
		_, err := State{Dir: filepath.Join(t.TempDir(), "missing")}.ReadPlan()
		if !errors.Is(err, ErrNoLab) {
			t.Errorf("ReadPlan() error = %v, want one wrapping ErrNoLab", err)
		}
	})
	t.Run("corrupt record", func(t *testing.T) {
		s := State{Dir: t.TempDir()}
		if err := os.WriteFile(s.PlanFile(), []byte("{not json"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.ReadPlan()
		if err == nil || errors.Is(err, ErrNoLab) || !strings.Contains(err.Error(), s.PlanFile()) {
			t.Errorf("ReadPlan() error = %v, want a parse error naming %s and not ErrNoLab", err, s.PlanFile())
		}
	})
}
