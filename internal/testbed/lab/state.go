package lab

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// State is the lab's record on disk: everything Down needs to remove what Up made, even when the process
// that made it is gone. Paths are under Plan.Config.StateDir.
type State struct{ Dir string }

func (s State) path(p ...string) string { return filepath.Join(append([]string{s.Dir}, p...)...) }

// PlanFile is the lab's topology, written before anything is created.
func (s State) PlanFile() string { return s.path("lab.json") }

// Kubeconfig works from the root namespace (through the apiserver bridge on loopback).
func (s State) Kubeconfig() string { return s.path("kubeconfig") }

// InternalKubeconfig works from inside any lab namespace.
func (s State) InternalKubeconfig() string { return s.path("kubeconfig-internal") }

// PKI is the lab's certificate directory.
func (s State) PKI() PKI { return PKI{Dir: s.path("pki")} }

// LogFile is the log of a component on a host.
func (s State) LogFile(host, component string) string { return s.path("logs", host, component+".log") }

// EtcdDir is etcd's data directory.
func (s State) EtcdDir() string { return s.path("etcd") }

// PodDir holds a Pod's volumes and files.
func (s State) PodDir(uid string) string { return s.path("pods", uid) }

// HostsFile is the /etc/hosts every container sees (node names resolve as in kind).
func (s State) HostsFile() string { return s.path("hosts") }

// NodeResolvConf is the nodes' resolv.conf, the kubelets' resolvConf: what Pods with dnsPolicy Default get
// (docs/lab-dns.md).
func (s State) NodeResolvConf() string { return s.path("resolv.conf") }

// APIProxyAddrFile holds the loopback address of the apiserver bridge.
func (s State) APIProxyAddrFile() string { return s.path("apiproxy.addr") }

func (s State) createdFile() string { return s.path("created-paths") }

// WritePlan records the plan.
func (s State) WritePlan(p Plan) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(s.PlanFile(), b, 0o644)
}

// ErrNoLab is returned by ReadPlan when no lab is recorded.
var ErrNoLab = errors.New("no lab is up")

// ReadPlan loads the recorded plan.
func (s State) ReadPlan() (Plan, error) {
	b, err := os.ReadFile(s.PlanFile())
	if errors.Is(err, os.ErrNotExist) {
		return Plan{}, fmt.Errorf("%w (no %s)", ErrNoLab, s.PlanFile())
	}
	if err != nil {
		return Plan{}, err
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return Plan{}, fmt.Errorf("reading %s: %w", s.PlanFile(), err)
	}
	return p, nil
}

var createdMu sync.Mutex

// EnsurePath makes sure path exists on the host as a directory (dir) or an empty file, creating what is
// missing and recording each created path so Down removes it. Mount targets of containers need this,
// since a bind mount needs an existing target.
func (s State) EnsurePath(path string, dir bool) error {
	createdMu.Lock()
	defer createdMu.Unlock()
	var created []string
	// Walk up to the first existing ancestor.
	p := filepath.Clean(path)
	var missing []string
	for {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	for i := len(missing) - 1; i >= 0; i-- {
		m := missing[i]
		var err error
		if i == 0 && !dir {
			var f *os.File
			f, err = os.OpenFile(m, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err == nil {
				f.Close()
			}
		} else {
			err = os.Mkdir(m, 0o755)
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err == nil {
			created = append(created, m)
		}
	}
	if len(created) == 0 {
		return nil
	}
	f, err := os.OpenFile(s.createdFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(strings.Join(created, "\n") + "\n")
	return err
}

// RemoveCreated removes the host paths recorded by EnsurePath, deepest first, leaving any that someone
// else has since put content in.
func (s State) RemoveCreated() []string {
	f, err := os.Open(s.createdFile())
	if err != nil {
		return nil
	}
	var paths []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			paths = append(paths, l)
		}
	}
	f.Close()
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	var left []string
	for _, p := range paths {
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if !st.IsDir() && st.Size() > 0 && !strings.HasSuffix(p, ".lock") {
			left = append(left, p)
			continue
		}
		if err := os.Remove(p); err != nil {
			left = append(left, p)
		}
	}
	return left
}
