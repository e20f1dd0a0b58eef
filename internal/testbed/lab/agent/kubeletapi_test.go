package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/ironlb/ironlb/internal/testbed/lab"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestMain lets this test binary stand in for ironlb as the process starter (`<self> lab nsinit`): the
// kubelet API's exec runs `nsenter ... <self> lab nsinit`.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "lab" && os.Args[2] == "nsinit" {
		err := lab.NSInit() // returns only on error
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// fakePods is a podSource with one pod "default/web" whose container "app" runs in a test netns, and a
// container "done" that has already exited.
type fakePods struct {
	netns string
	runs  map[string]ctrRun
}

func (f fakePods) Pods() []*corev1.Pod {
	return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"}}}
}

func (f fakePods) Container(ns, pod, uid, c string) (ctrRun, error) {
	if ns != "default" || pod != "web" || uid != "" && uid != "u1" {
		return ctrRun{}, errNoPod
	}
	r, ok := f.runs[c]
	if !ok {
		return ctrRun{}, errNoContainer
	}
	return r, nil
}

func (f fakePods) PodNetNS(ns, pod, uid string) (string, error) {
	if _, err := f.Container(ns, pod, uid, "app"); err != nil {
		return "", err
	}
	return f.netns, nil
}

type kubeletFixture struct {
	base   string // https://127.0.0.1:port
	cfg    *rest.Config
	pki    lab.PKI
	echo   int // port of an echo server on the pod's loopback
	follow ctrRun
	// imageFile is an empty file on the host with a program bound over it in the container (as /agnhost)
	imageFile string
}

// startKubeletFixture creates a network namespace (ilbkubelet-*, loopback only), starts a container in
// it through nsinit (new mount and UTS namespaces, hostname web-0, an env var), an echo server on its
// loopback, and serves the kubelet API for it on 127.0.0.1 with a fresh lab PKI.
func startKubeletFixture(t testing.TB) kubeletFixture {
	t.Helper()
	netnstest.Require(t, "ip", "nsenter")
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sfx := make([]byte, 3)
	_, _ = rand.Read(sfx)
	ns := "ilbkubelet-" + hex.EncodeToString(sfx)
	netnstest.Add(t, ns)
	netnstest.Run(t, ns, "ip", "link", "set", "lo", "up")
	dir := t.TempDir()
	// an image's program at a fixed path (as /agnhost, imageFileMounts): an empty file on the host, the
	// program bound over it in the container's mount namespace
	imageFile, prog := filepath.Join(dir, "agnhost"), filepath.Join(dir, "agnhost-program")
	if err := os.WriteFile(imageFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho \"agnhost $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(name string, argv ...string) ctrRun {
		spec := lab.ExecSpec{NetNS: ns, Hostname: "web-0", MountNS: true, Argv: argv,
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GREETING=hello from web"},
			Caps: lab.EffectiveCaps(nil, nil), DropCaps: true,
			Mounts: []lab.Mount{{Source: prog, Target: imageFile, ReadOnly: true}}}
		cmd, err := lab.Command(self, spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		lw, stdout, stderr, err := openCtrLog(filepath.Join(dir, name), 0, "", time.Now)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		err = cmd.Start()
		stdout.Close()
		stderr.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); <-lw.done })
		return ctrRun{PodNamespace: "default", PodName: "web", PodUID: "u1", Container: name, LogDir: filepath.Join(dir, name),
			PID: cmd.Process.Pid, Exec: execSpec{Spec: spec}, LogDone: lw.done}
	}
	app := start("app", "sh", "-c", "echo started; echo to stderr >&2; echo second; exec sleep 600")
	follow := start("ticker", "sh", "-c", "echo tick 1; sleep 1; echo tick 2; sleep 1; echo tick 3")

	// the pod's echo server: a listener made inside the namespace stays there
	var ln net.Listener
	if err := lab.InNetNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()

	pki := lab.PKI{Dir: filepath.Join(dir, "pki")}
	if err := pki.Generate([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	if err := pki.IssueKubeletServing("node-a", []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	tc, err := kubeletTLS(pki.KubeletServingCert("node-a"), pki.KubeletServingKey("node-a"), pki.CACert())
	if err != nil {
		t.Fatal(err)
	}
	kl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newKubeletServer(fakePods{netns: ns, runs: map[string]ctrRun{"app": app, "ticker": follow}},
		execRunner{Self: self, NSEnter: nsenter}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	served := make(chan error, 1)
	go func() { served <- srv.serve(ctx, kl, tc) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	base := "https://" + kl.Addr().String()
	return kubeletFixture{base: base, pki: pki, echo: ln.Addr().(*net.TCPAddr).Port, follow: follow, imageFile: imageFile,
		cfg: &rest.Config{Host: base, TLSClientConfig: rest.TLSClientConfig{
			CAFile: pki.CACert(), CertFile: pki.KubeletClientCert(), KeyFile: pki.KubeletClientKey()}}}
}

func (f kubeletFixture) execURL(cmd []string, stdin, tty bool) *url.URL {
	// the kubelet's parameter names, as the apiserver sends them (not kubectl's stdin/stdout/stderr)
	q := url.Values{"command": cmd, "output": {"1"}}
	if !tty {
		q.Set("error", "1")
	}
	if stdin {
		q.Set("input", "1")
	}
	if tty {
		q.Set("tty", "1")
	}
	u, _ := url.Parse(f.base + "/exec/default/web/app?" + q.Encode())
	return u
}

// TestKubeletExec runs commands in the container through client-go's SPDY and WebSocket executors, as
// the apiserver and kubectl do: the command sees the container's hostname (UTS namespace), network
// namespace (only lo) and environment, and its exit code comes back.
func TestKubeletExec(t *testing.T) {
	f := startKubeletFixture(t)
	type result struct {
		stdout, stderr string
		code           int
	}
	run := func(t *testing.T, proto string, cmd []string, stdin string, tty bool) result {
		t.Helper()
		var ex remotecommand.Executor
		var err error
		u := f.execURL(cmd, stdin != "", tty)
		if proto == "spdy" {
			ex, err = remotecommand.NewSPDYExecutor(f.cfg, "POST", u)
		} else {
			// client-go's default WebSocket executor speaks only v5 (to the apiserver, which talks SPDY to
			// kubelets); the kubelet's streaming server, like cri-streaming, speaks v1-v4 over WebSocket
			ex, err = remotecommand.NewWebSocketExecutorForProtocols(f.cfg, "GET", u.String(), "v4.channel.k8s.io")
		}
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		opts := remotecommand.StreamOptions{Stdout: &out, Tty: tty}
		if !tty {
			opts.Stderr = &errb
		}
		if stdin != "" {
			opts.Stdin = strings.NewReader(stdin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = ex.StreamWithContext(ctx, opts)
		r := result{stdout: out.String(), stderr: errb.String()}
		var ee utilexec.ExitError
		switch {
		case errors.As(err, &ee):
			r.code = ee.ExitStatus()
		case err != nil:
			t.Fatalf("%s exec %q: %v (stdout %q, stderr %q)", proto, cmd, err, r.stdout, r.stderr)
		}
		return r
	}
	for _, proto := range []string{"spdy", "websocket"} {
		for _, tt := range []struct {
			name  string
			cmd   []string
			stdin string
			tty   bool
			want  result
		}{
			{name: "hostname", cmd: []string{"hostname"}, want: result{stdout: "web-0\n"}},
			{name: "env", cmd: []string{"sh", "-c", "echo $GREETING"}, want: result{stdout: "hello from web\n"}},
			{name: "netns has only lo", cmd: []string{"ls", "/sys/class/net"}, want: result{stdout: "lo\n"}},
			{name: "stderr", cmd: []string{"sh", "-c", "echo out; echo err >&2"}, want: result{stdout: "out\n", stderr: "err\n"}},
			{name: "exit code", cmd: []string{"sh", "-c", "exit 3"}, want: result{code: 3}},
			{name: "killed by a signal", cmd: []string{"sh", "-c", "kill -9 $$"}, want: result{code: 137}},
			{name: "tty", cmd: []string{"sh", "-c", "test -t 0 && test -t 1 && echo terminal"}, tty: true, want: result{stdout: "terminal\r\n"}},
			// upstream's "should be rejected when no endpoints exist": sh -c '/agnhost connect ...'
			{name: "image file bound in the container", cmd: []string{"/bin/sh", "-x", "-c", f.imageFile + " connect --timeout=3s no-pods:80"},
				want: result{stdout: "agnhost connect --timeout=3s no-pods:80\n", stderr: "+ " + f.imageFile + " connect --timeout=3s no-pods:80\n"}},
		} {
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				if got := run(t, proto, tt.cmd, tt.stdin, tt.tty); got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
	if b, err := os.ReadFile(f.imageFile); err != nil || len(b) != 0 {
		t.Errorf("the image file on the host: %q, %v; want it empty (the program is bound only in the container)", b, err)
	}
	// stdin: SPDY closes the stdin stream at EOF (the v4 WebSocket protocol cannot signal it)
	t.Run("spdy/stdin", func(t *testing.T) {
		if got := run(t, "spdy", []string{"sh", "-c", "tr a-z A-Z"}, "shout\n", false); got != (result{stdout: "SHOUT\n"}) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("spdy/tty stdin", func(t *testing.T) {
		got := run(t, "spdy", []string{"sh", "-c", "read x; echo got $x"}, "word\n", true)
		if !strings.Contains(got.stdout, "got word") {
			t.Errorf("got %+v, want stdout with %q", got, "got word")
		}
	})
}

// TestKubeletPortForward forwards a local port to the echo server on the pod's loopback with
// client-go's port forwarder (SPDY), as kubectl port-forward does.
func TestKubeletPortForward(t *testing.T) {
	f := startKubeletFixture(t)
	rt, up, err := spdy.RoundTripperFor(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(f.base + "/portForward/default/web")
	dialer := spdy.NewDialer(up, &http.Client{Transport: rt}, "POST", u)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.New(dialer, []string{fmt.Sprintf("0:%d", f.echo)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("ForwardPorts: %v", err)
	}
	defer func() { close(stop); <-done }()
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // two connections over one forwarding session
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("ping %d\n", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			t.Errorf("echo through the forward = %q, %v; want %q", buf, err, msg)
		}
		c.Close()
	}
}

// TestKubeletHTTPEndpoints: healthz, pods and containerLogs over TLS with the kubelet client
// certificate; without a client certificate the API answers 401.
func TestKubeletHTTPEndpoints(t *testing.T) {
	f := startKubeletFixture(t)
	tc, err := rest.TLSConfigFor(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 30 * time.Second}
	anon := tc.Clone()
	anon.Certificates, anon.GetClientCertificate = nil, nil
	anonClient := &http.Client{Transport: &http.Transport{TLSClientConfig: anon}, Timeout: 30 * time.Second}
	get := func(c *http.Client, path string) (int, string) {
		t.Helper()
		resp, err := c.Get(f.base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(path, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, body := get(client, path)
			if body == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s = %q, want %q", path, body, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if code, body := get(anonClient, "/healthz"); code != http.StatusUnauthorized {
		t.Errorf("healthz without a client certificate: %d %q, want 401", code, body)
	}
	if code, body := get(client, "/healthz"); code != 200 || body != "ok" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if code, body := get(client, "/pods"); code != 200 || !strings.Contains(body, `"kind":"PodList"`) || !strings.Contains(body, `"name":"web"`) {
		t.Errorf("pods: %d %q", code, body)
	}
	// stdout and stderr are separate pipes, so the order between them is the order their lines were read
	waitFor("/containerLogs/default/web/app?stream=Stdout", "started\nsecond\n")
	waitFor("/containerLogs/default/web/app?stream=Stderr", "to stderr\n")
	_, all := get(client, "/containerLogs/default/web/app")
	lines := strings.SplitAfter(all, "\n")
	if len(lines) != 4 || lines[3] != "" {
		t.Fatalf("whole log %q: want three lines", all)
	}
	waitFor("/containerLogs/default/web/app?tailLines=1", lines[2])
	waitFor("/containerLogs/default/web/app?tailLines=2", lines[1]+lines[2])
	waitFor("/containerLogs/default/web/app?limitBytes=5", all[:5])
	if code, _ := get(client, "/containerLogs/default/web/app?previous=true"); code != http.StatusBadRequest {
		t.Errorf("previous of a first run: %d, want 400", code)
	}
	if code, _ := get(client, "/containerLogs/default/web/nope"); code != http.StatusNotFound {
		t.Errorf("unknown container: %d, want 404", code)
	}
	_, body := get(client, "/containerLogs/default/web/app?timestamps=true&tailLines=1")
	ts, rest, _ := strings.Cut(body, " ")
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || rest != lines[2] {
		t.Errorf("timestamps: %q", body)
	}
	// follow: the ticker prints three lines a second apart and exits; the response ends with the run
	code, body := get(client, "/containerLogs/default/web/ticker?follow=true")
	if code != 200 || body != "tick 1\ntick 2\ntick 3\n" {
		t.Errorf("follow: %d %q, want the three ticks", code, body)
	}
}

// BenchmarkKubeletExec is one `true` through the SPDY executor per iteration: TLS, SPDY streams,
// nsenter and nsinit (go test -run x -bench KubeletExec ./internal/testbed/lab/agent, as root).
func BenchmarkKubeletExec(b *testing.B) {
	f := startKubeletFixture(b)
	u := f.execURL([]string{"true"}, false, false)
	for b.Loop() {
		ex, err := remotecommand.NewSPDYExecutor(f.cfg, "POST", u)
		if err != nil {
			b.Fatal(err)
		}
		if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
			b.Fatal(err)
		}
	}
}
