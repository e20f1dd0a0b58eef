// Package e2e runs the seeds' experiments in the lab: real kube-apiserver, controller-manager, scheduler
// and kube-proxy, the lab's node agent, and curl from inside the lab's namespaces. The tests share one lab,
// brought up by TestMain and removed at the end; the lifecycle tests (zz_lifecycle_test.go) run last and
// check that nothing of the lab remains, also after an interrupted or killed `lab up`.
//
// They need root and the Kubernetes binaries (hack/k8s-binaries.sh); `make test` runs them with
// IRONLB_E2E=1. Without that variable they are skipped, so `go test ./...` works anywhere.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// suiteUp are the flags of the suite's `lab up`: seed 003's router and mypc2 too, for the BGP tests,
// and the second network (br1, eth1 on every node, mypc3) for TestL2SecondNetwork.
// TestUpIsIdempotent runs it again.
var suiteUp = []string{"--bgp", "--second-network"}

var (
	ironlb   string // the ironlb binary under test
	stateDir = "/run/ironlb-lab"
	enabled  = os.Getenv("IRONLB_E2E") == "1"
	// suiteRuntime is the suite lab's --runtime ($IRONLB_E2E_RUNTIME=host for the host programs;
	// empty is lab up's default, runc: every Pod from its image). Every other lab the tests bring up
	// takes lab up's default.
	suiteRuntime = os.Getenv("IRONLB_E2E_RUNTIME")
)

func TestMain(m *testing.M) {
	if !enabled {
		fmt.Println("e2e: skipped (set IRONLB_E2E=1, as `make test` does; needs root and the Kubernetes binaries)")
		os.Exit(0)
	}
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	// Ctrl-C or a CI timeout: remove the lab before dying.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "e2e: interrupted; removing the lab")
		_ = exec.Command(ironlb, "lab", "down").Run()
		os.Exit(130)
	}()
	code = m.Run()
	if out, err := exec.Command(ironlb, "lab", "down").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: lab down: %v\n%s", err, out)
		code = 1
	}
	if left := leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: the lab left things behind: %s\n", strings.Join(left, "; "))
		code = 1
	}
	os.RemoveAll(filepath.Dir(ironlb))
	os.Exit(code)
}

// setup builds ironlb and brings the lab up.
func setup() (int, error) {
	if os.Geteuid() != 0 {
		return 1, fmt.Errorf("needs root")
	}
	if left := leftovers(); len(left) > 0 {
		return 1, fmt.Errorf("a lab is already up or left things behind (%s); run `ironlb lab down` first", strings.Join(left, "; "))
	}
	dir, err := os.MkdirTemp("", "ironlb-e2e-")
	if err != nil {
		return 1, err
	}
	// The controller runs as nobody (runAsUser 65534 in its Deployment): it must reach the binary.
	if err := os.Chmod(dir, 0o755); err != nil {
		return 1, err
	}
	ironlb = filepath.Join(dir, "ironlb")
	build := exec.Command("go", "build", "-o", ironlb, "github.com/ironlb/ironlb/cmd/ironlb")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	// The labs run every Pod from its image, ironlb's built from this binary, which must then be static
	// (the image has no C library).
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if suiteRuntime != "" {
		suiteUp = append(suiteUp, "--runtime="+suiteRuntime)
	}
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("building ironlb: %w", err)
	}
	// ironlb's chart, packaged as `make chart` packages it: every `lab up` of the suite (IRONLB_CHART)
	// pushes it to the lab's registry and installs ironlb from there with helm.
	chart := exec.Command("make", "--no-print-directory", "-C", "../..", "chart", "CHART_DIR="+filepath.Join(dir, "chart"))
	chart.Stdout, chart.Stderr = os.Stdout, os.Stderr
	if err := chart.Run(); err != nil {
		return 1, fmt.Errorf("make chart: %w", err)
	}
	os.Setenv("IRONLB_CHART", filepath.Join(dir, "chart"))
	t0 := time.Now()
	// Seed 003's router and mypc2 too, for the BGP tests, and the second network (br1, eth1 on every
	// node, mypc3) for TestL2SecondNetwork; the other tests ignore them.
	up := exec.Command(ironlb, append([]string{"lab", "up"}, suiteUp...)...)
	up.Stdout, up.Stderr = os.Stdout, os.Stderr
	if err := up.Run(); err != nil {
		return 1, fmt.Errorf("lab up: %w", err)
	}
	fmt.Printf("e2e: lab up in %.1fs\n", time.Since(t0).Seconds())
	return 0, nil
}

// leftovers lists what of the lab exists: namespaces, cgroup, processes, mounts, state, files.
func leftovers() []string {
	var out []string
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "myk8s-") || e.Name() == "mypc" || e.Name() == "mypc2" || e.Name() == "mypc3" || e.Name() == "router" {
			out = append(out, "netns "+e.Name())
		}
	}
	for _, cg := range []string{"/sys/fs/cgroup/ironlb-lab-myk8s", "/sys/fs/cgroup/unified/ironlb-lab-myk8s"} {
		if _, err := os.Stat(cg); err == nil {
			out = append(out, "cgroup "+cg)
		}
	}
	if _, err := os.Stat(stateDir); err == nil {
		out = append(out, "state dir "+stateDir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		// Kubernetes binaries count when they run in the lab's cgroup: other tests (a real apiserver
		// for the controller's tests, say) may run beside the lab.
		cg, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		if strings.Contains(cmd, stateDir) || strings.Contains(cmd, "ironlb-lab-agent") ||
			strings.Contains(cmd, "kubernetes/v1.") && strings.Contains(cmd, "/bin/") && strings.Contains(string(cg), "ironlb-lab-") {
			out = append(out, "process "+strings.TrimPrefix(filepath.Dir(p), "/proc/")+": "+cmd)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "/run/netns/myk8s-") || strings.Contains(l, stateDir) {
				out = append(out, "mount "+l)
			}
		}
	}
	for _, f := range []string{"/run/xtables.lock", "/var/lib/kube-proxy", "/run/secrets/kubernetes.io"} {
		if _, err := os.Lstat(f); err == nil && createdByLab(f) {
			out = append(out, "file "+f)
		}
	}
	return out
}

// createdByLab tells whether a path that the lab creates was absent before the tests started.
var preexisting = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range []string{"/run/xtables.lock", "/var/lib/kube-proxy", "/run/secrets/kubernetes.io"} {
		if _, err := os.Lstat(f); err == nil {
			m[f] = true
		}
	}
	return m
}()

func createdByLab(f string) bool { return !preexisting[f] }

// run runs a command for up to cmdTimeout and returns its combined output, failing the test on
// error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	return runFor(t, cmdTimeout, name, args...)
}

// runErr runs a command for up to cmdTimeout and returns its combined output and error.
func runErr(name string, args ...string) (string, error) {
	return runErrFor(cmdTimeout, name, args...)
}

// labUp runs `ironlb lab up args...` for up to labUpTimeout and returns its combined output,
// failing the test on error.
func labUp(t *testing.T, args ...string) string {
	t.Helper()
	return runFor(t, labUpTimeout, ironlb, append([]string{"lab", "up"}, args...)...)
}

// labUpErr runs `ironlb lab up args...` for up to labUpTimeout and returns its combined output and
// error.
func labUpErr(args ...string) (string, error) {
	return runErrFor(labUpTimeout, ironlb, append([]string{"lab", "up"}, args...)...)
}

// cmdTimeout is how long run and runErr let a command take; labUpTimeout how long labUp and
// labUpErr let `lab up` take, which also builds and pushes every image the runc runtime runs
// (cached by content after the first) and gives up by itself with the not-ready Pods' reasons
// after each 90 s wait, which a kill would hide.
const (
	cmdTimeout   = 2 * time.Minute
	labUpTimeout = 6 * time.Minute
)

// runFor runs a command for up to d and returns its combined output, failing the test on error.
func runFor(t *testing.T, d time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runErrFor(d, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// runErrFor runs a command for up to d and returns its combined output and error.
func runErrFor(d time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// runStdin runs a command with stdin and returns its combined output and error.
func runStdin(stdin, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// applyStdin applies manifest with kubectl, again for up to a minute while the apiserver cannot
// reach the admission webhook (CI: "failed calling webhook ... connection reset by peer" right after
// the NodeLoss subtest's power cut, whose node ran a controller: the apiserver's pooled connection
// to the webhook met the restarted pod). kubectl and GitOps tools retry such an apply too; any other
// error is returned at once.
func applyStdin(manifest string) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := runStdin(manifest, ironlb, "lab", "kubectl", "apply", "-f", "-")
		if err == nil || !strings.Contains(out, "failed calling webhook") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(2 * time.Second)
	}
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, ironlb, append([]string{"lab", "kubectl"}, args...)...)
}

func kubectlApply(t *testing.T, file string) {
	t.Helper()
	kubectl(t, "apply", "-f", file)
}

// labExec runs argv in a lab host and returns stdout, with an error for a non-zero exit.
func labExec(host string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, ironlb, append([]string{"lab", "exec", host, "--"}, argv...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%v: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// curl fetches url from host with a 1 s connect timeout, as the seeds do.
func curl(host, url string) (string, error) {
	return labExec(host, "curl", "-s", "--connect-timeout", "1", "--max-time", "3", url)
}

var hostnameRE = regexp.MustCompile(`(?m)^Hostname: (\S+)`)

// hostnameOf extracts whoami's Hostname line.
func hostnameOf(body string) string {
	m := hostnameRE.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// eventually retries f until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: still failing after %s: %v", what, timeout, err)
}

// podIP returns a Pod's IP.
func podIP(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "get", "pod", name, "-o", "jsonpath={.status.podIP}"))
}

func waitReady(t *testing.T, selector ...string) {
	t.Helper()
	kubectl(t, append([]string{"wait", "--for=condition=Ready", "--timeout=60s"}, selector...)...)
}
