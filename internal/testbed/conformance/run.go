package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// Binary is the e2e test binary's name in the directory hack/e2e-binaries.sh fills.
const Binary = "e2e.test"

// GinkgoBinary is the ginkgo CLI's name in that directory (hack/ginkgo-binary.sh puts it there): it runs
// the suite in parallel processes (Options.Procs).
const GinkgoBinary = "ginkgo"

// Options are one conformance run's settings.
type Options struct {
	E2EBin    string // directory with e2e.test (hack/e2e-binaries.sh)
	ReportDir string // where the JUnit file, the suite's output and its progress lines go
	Name      string // names the files in ReportDir (the proxy: nftables, ironlb, ...)
	Timeout   time.Duration
	Procs     int       // parallel test processes under the ginkgo CLI; 0 or 1 runs e2e.test alone
	Out       io.Writer // progress lines
	Selection
	// Long, when set, is a lane run beside the main one from the start (Lanes): its tests in LongProcs
	// processes, its files in ReportDir/long. Selection is then the main lane's.
	Long      *Selection
	LongProcs int
	// Client is the lab host the suite runs in (DefaultClient when empty).
	Client string
}

// DefaultClient is the host the suite runs in by default: the client behind the router when the lab
// has one (lab up --bgp: mypc2, outside the nodes' subnet), else the client on the bridge (mypc).
// Upstream's "ExternalTrafficPolicy: Local ... should work for type=LoadBalancer" fails when the
// client that runs the suite is inside the first worker's /16 (IPv4) or /64 (IPv6), as mypc is: it
// takes any source address in that prefix for a node's, so "Source IP was NOT preserved" though the
// pod saw mypc's own address. A client on another subnet, as a real cluster's users are, passes it.
func DefaultClient(p lab.Plan) string {
	if p.Client2.Name != "" {
		return p.Client2.Name
	}
	return p.Client.Name
}

func (o Options) binary() string { return filepath.Join(o.E2EBin, Binary) }

func (o Options) ginkgo() string { return filepath.Join(o.E2EBin, GinkgoBinary) }

// JUnitFile is where the run's JUnit report goes.
func (o Options) JUnitFile() string { return filepath.Join(o.ReportDir, "junit-"+o.Name+".xml") }

// LogFile is where the suite's own output (ginkgo's report, the tests' logs) goes.
func (o Options) LogFile() string { return filepath.Join(o.ReportDir, "e2e-"+o.Name+".log") }

func (o Options) progressFile() string {
	return filepath.Join(o.ReportDir, "progress-"+o.Name+".jsonl")
}

// Check reports what keeps the run from starting: a bad selection or a missing e2e.test.
func (o Options) Check() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if _, err := os.Stat(o.binary()); err != nil {
		return fmt.Errorf("no %s in %s: build it with hack/e2e-binaries.sh (make e2e-binaries) or pass --e2e-bin", Binary, o.E2EBin)
	}
	if o.Procs < 0 {
		return fmt.Errorf("--procs %d: want 1 (serial) or more", o.Procs)
	}
	if o.Procs > 1 {
		if _, err := os.Stat(o.ginkgo()); err != nil {
			return fmt.Errorf("no %s in %s for --procs %d: build it with hack/ginkgo-binary.sh (make e2e-binaries), or run serially with --procs 1", GinkgoBinary, o.E2EBin, o.Procs)
		}
	}
	return nil
}

// Select lists the tests the selection picks, by a dry run of e2e.test (no cluster involved). It is an
// error when it picks none.
func Select(ctx context.Context, o Options) ([]Result, error) {
	dir, err := os.MkdirTemp("", "ironlb-conformance-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	inv := Invocation{Binary: o.binary(), JUnit: filepath.Join(dir, "junit.xml"), DryRun: true, Selection: o.Selection}
	argv := inv.Argv()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	f, err := os.Open(inv.JUnit)
	if err != nil {
		return nil, fmt.Errorf("listing the tests (%s --ginkgo.dry-run): %v: %s", Binary, runErr, lastLines(out.String(), 5))
	}
	defer f.Close()
	rs, err := ParseJUnit(f)
	if err != nil {
		return nil, err
	}
	var sel []Result
	for _, r := range rs {
		if r.Status == Passed { // a dry run reports the selected tests passed
			sel = append(sel, r)
		}
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("--focus %q with --skip %q selects no test", o.Focus, o.Skip)
	}
	return sel, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Run runs the selection against the lab: e2e.test runs in the lab's client namespace (outside the
// cluster, on the nodes' network, as a kind user's e2e run sits on docker's bridge) with the lab's
// kubeconfig and kubectl; with o.Procs > 1 under the ginkgo CLI, in that many processes (the CLI runs
// the [Serial] tests alone at the end, and merges the processes' JUnit reports). With o.Long, the long
// lane runs beside it, in its own e2e.test or ginkgo CLI. It prints a progress line per test to o.Out
// as each ends and returns the results read from the JUnit files. total is the number of selected
// tests (Select).
func Run(ctx context.Context, l *lab.Lab, o Options, total int) ([]Result, error) {
	if err := os.MkdirAll(o.ReportDir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{o.JUnitFile(), o.progressFile()} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	lanes := []Options{o}
	if o.Long != nil && o.LongProcs > 0 {
		long := o
		long.Name, long.ReportDir, long.Selection, long.Procs = o.Name+"-long", filepath.Join(o.ReportDir, "long"), *o.Long, o.LongProcs
		if err := os.MkdirAll(long.ReportDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Remove(long.JUnitFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		lanes = append(lanes, long)
	}
	if err := applyPool(ctx, l); err != nil {
		fmt.Fprintf(o.Out, "no address pool for the LoadBalancers tests (they will fail waiting for an address): %v\n", err)
	} else {
		defer func() { // the lab is left as it was
			if err := deletePool(context.WithoutCancel(ctx), l); err != nil {
				fmt.Fprintf(o.Out, "removing the LoadBalancers tests' address pool: %v\n", err)
			}
		}()
	}
	cg, err := l.Cgroup("conformance")
	if err != nil {
		return nil, err
	}
	_ = cg.Remove()
	fd, err := cg.Open()
	if err != nil {
		return nil, err
	}
	defer fd.Close() // the child is cloned into the cgroup through it at Start
	// Every lane's tests append to the main lane's progress file (a line per write, O_APPEND).
	env := append(os.Environ(), "KUBECONFIG="+l.State.InternalKubeconfig(), "IRONLB_E2E_PROGRESS="+o.progressFile())
	client := o.Client
	if client == "" {
		client = DefaultClient(l.Plan)
	}
	if h, ok := l.Plan.Host(client); !ok || h.Role != lab.RoleClient {
		return nil, fmt.Errorf("--client %q: not a client of lab %s (clients: %s)", client, l.Plan.Config.Name, strings.Join(clientNames(l.Plan), ", "))
	}
	done := make(chan error, len(lanes))
	runErrs := make([]error, len(lanes))
	for i, ln := range lanes {
		inv := Invocation{
			Binary:     ln.binary(),
			Ginkgo:     ln.ginkgo(),
			Procs:      ln.Procs,
			Kubeconfig: l.State.InternalKubeconfig(),
			Kubectl:    filepath.Join(l.Plan.Config.K8sBin, "kubectl"),
			JUnit:      ln.JUnitFile(),
			OutputDir:  ln.ReportDir,
			Timeout:    ln.Timeout,
			Selection:  ln.Selection,
		}
		logf, err := os.Create(ln.LogFile())
		if err != nil {
			return nil, err
		}
		defer logf.Close()
		cmd, err := lab.Command(l.Plan.Config.Self, lab.ExecSpec{NetNS: client, Hostname: client, MountNS: true, Argv: inv.Argv(), Env: env, Dir: ln.ReportDir}, fd)
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			_ = cg.Kill(5 * time.Second) // a lane started before this one
			return nil, fmt.Errorf("starting %s in %s: %w", Binary, client, err)
		}
		go func() { runErrs[i] = cmd.Wait(); done <- nil }()
	}
	tail := &progressTail{path: o.progressFile(), total: total, out: o.Out}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for running := len(lanes); running > 0; {
		select {
		case <-done:
			running--
		case <-ctx.Done():
			_ = cg.Kill(5 * time.Second) // e2e.test and the kubectl it started
			for ; running > 0; running-- {
				<-done
			}
			return nil, ctx.Err()
		case <-tick.C:
			tail.read()
		}
	}
	tail.read()
	_ = cg.Kill(5 * time.Second) // what the suite left running (kubectl port-forward, ...)
	_ = cg.Remove()
	var out []Result
	for i, ln := range lanes {
		f, err := os.Open(ln.JUnitFile())
		if err != nil {
			return nil, fmt.Errorf("%s wrote no JUnit report (%v); its output is in %s", Binary, runErrs[i], ln.LogFile())
		}
		rs, err := ParseJUnit(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// progressTail prints the lines the suite appended to its progress file since the last read.
type progressTail struct {
	path  string
	off   int64
	n     int
	total int
	out   io.Writer
}

func (t *progressTail) read() {
	f, err := os.Open(t.path)
	if err != nil {
		return // no test has ended yet
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil { // a partial line waits for the next read
			return
		}
		t.off += int64(len(line))
		res, perr := ParseProgress(bytes.TrimSpace(line))
		if perr != nil {
			fmt.Fprintln(t.out, perr)
			continue
		}
		t.n++
		fmt.Fprintln(t.out, ProgressLine(t.n, t.total, res))
	}
}

// deletePool removes what applyPool added.
func deletePool(ctx context.Context, l *lab.Lab) error {
	cmd := exec.CommandContext(ctx, filepath.Join(l.Plan.Config.K8sBin, "kubectl"), "--kubeconfig", l.State.Kubeconfig(),
		"-n", "metallb-system", "delete", "--ignore-not-found", "l2advertisement/"+PoolName, "ipaddresspool/"+PoolName)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl delete: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// applyPool gives the lab an address pool for LoadBalancer Services (LoadBalancerPool), which ironlb's
// controller and speaker, installed by lab up, serve.
func applyPool(ctx context.Context, l *lab.Lab) error {
	manifest, err := LoadBalancerPool(l.Plan.Config.NodeCIDR)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(l.Plan.Config.K8sBin, "kubectl"), "--kubeconfig", l.State.Kubeconfig(), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// clientNames are the lab's client hosts, the ones the suite can run in.
func clientNames(p lab.Plan) []string {
	var out []string
	for _, h := range p.AllHosts() {
		if h.Role == lab.RoleClient {
			out = append(out, h.Name)
		}
	}
	return out
}
