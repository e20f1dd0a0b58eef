package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// The kubelet API (docs/lab-kubelet.md): the agent serves on :10250 what the apiserver proxies for
// kubectl exec, logs and port-forward, with the kubelet's own streaming code (k8s.io/cri-streaming's
// remotecommand and portforward servers, SPDY and WebSocket).

// KubeletPort is the kubelet API's port, reported in the Node's daemonEndpoints.
const KubeletPort = 10250

// Timeouts as the kubelet's defaults: --streaming-connection-idle-timeout 4h, stream creation 30 s.
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// ctrRun is what the kubelet API needs of one container run: the process to exec beside and its log.
type ctrRun struct {
	PodNamespace, PodName, PodUID, Container string
	Image                                    string   // the container's image: exec maps commands it has (execArgv)
	Run                                      int      // restart count of this run: its log is <LogDir>/<Run>.log
	LogDir                                   string   // the container's log directory (one file per run)
	PID                                      int      // the container's main process; 0 once it exited
	BackingOff                               bool     // exited and waiting to restart (CrashLoopBackOff)
	Exec                                     execSpec // how the container's process was started
	LogDone                                  <-chan struct{}
}

// podSource is the kubelet API's view of the node's pods; the agent implements it over its pod workers.
type podSource interface {
	// Pods returns the node's pods as the agent last saw them in the API.
	Pods() []*corev1.Pod
	// Container returns the latest run of a container; uid may be empty.
	Container(namespace, pod, uid, container string) (ctrRun, error)
	// PodNetNS returns the named network namespace of a pod's sandbox.
	PodNetNS(namespace, pod, uid string) (string, error)
}

// errNoPod and errNoContainer answer 404.
var (
	errNoPod       = errors.New("pod not found")
	errNoContainer = errors.New("container not found")
)

// kubeletServer is the kubelet API's HTTP handler.
type kubeletServer struct {
	src    podSource
	runner execRunner
	log    *slog.Logger
	now    func() time.Time
	poll   time.Duration // how often a follower looks for new log entries
}

func newKubeletServer(src podSource, runner execRunner, log *slog.Logger) *kubeletServer {
	return &kubeletServer{src: src, runner: runner, log: log, now: time.Now, poll: 100 * time.Millisecond}
}

// kubeletTLS is the serving configuration: the node's certificate, and client certificates verified
// against the lab CA when given (requests without one are refused by ServeHTTP with 401).
func kubeletTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("kubelet client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("kubelet client CA %s: no certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven,
		MinVersion: tls.VersionTLS12}, nil
}

// serve serves the kubelet API on ln until ctx ends.
func (s *kubeletServer) serve(ctx context.Context, ln net.Listener, tc *tls.Config) error {
	hs := &http.Server{Handler: s, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	err := hs.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *kubeletServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var verified [][]*x509.Certificate
	if r.TLS != nil {
		verified = r.TLS.VerifiedChains
	}
	user, d := authorizeClient(verified, lab.KubeletClientCommonName)
	switch d {
	case clientUnauthenticated:
		http.Error(w, "Unauthorized: "+string(d), http.StatusUnauthorized)
		return
	case clientForbidden:
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=proxy): %s", user, r.Method, d), http.StatusForbidden)
		return
	}
	req, err := parseKubeletRequest(r.Method, r.URL.Path, r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	switch req.Endpoint {
	case epHealthz:
		_, _ = io.WriteString(w, "ok")
	case epPods:
		s.servePods(w)
	case epLogs:
		s.serveLogs(w, r, req)
	case epExec:
		run, err := s.src.Container(req.Namespace, req.Pod, req.UID, req.Container)
		if err == nil && run.PID == 0 {
			err = fmt.Errorf("%w: container %s is not running", errBadRequest, req.Container)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		opts, err := remotecommand.NewOptions(r)
		if err != nil {
			s.fail(w, r, fmt.Errorf("%w: %v", errBadRequest, err))
			return
		}
		s.log.Info("exec", "pod", req.Namespace+"/"+req.Pod, "container", req.Container, "command", req.Command, "user", user)
		remotecommand.ServeExec(w, r, execTarget{run: run, runner: s.runner}, req.Pod, req.UID, req.Container, req.Command,
			opts, streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	case epPortForward:
		ns, err := s.src.PodNetNS(req.Namespace, req.Pod, req.UID)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		opts, err := portforward.NewV4Options(r)
		if err != nil {
			s.fail(w, r, fmt.Errorf("%w: %v", errBadRequest, err))
			return
		}
		s.log.Info("port-forward", "pod", req.Namespace+"/"+req.Pod, "user", user)
		portforward.ServePortForward(w, r, netnsForwarder{netns: ns}, req.Pod, req.UID, opts,
			streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
	}
}

// fail answers an error with the status the kubelet would use.
func (s *kubeletServer) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, errNotFound), errors.Is(err, errNoPod), errors.Is(err, errNoContainer):
		code = http.StatusNotFound
	case errors.Is(err, errBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, errNotSupported):
		code = http.StatusNotImplemented
	}
	if code == http.StatusInternalServerError {
		s.log.Warn("kubelet API", "path", r.URL.Path, "err", err)
	}
	http.Error(w, err.Error(), code)
}

func (s *kubeletServer) servePods(w http.ResponseWriter) {
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	for _, p := range s.src.Pods() {
		list.Items = append(list.Items, *p)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&list)
}

// serveLogs writes a container run's log as containerLogs options select it, and with follow keeps
// writing new entries until the run ends or the client goes away.
func (s *kubeletServer) serveLogs(w http.ResponseWriter, r *http.Request, req kubeletRequest) {
	run, err := s.src.Container(req.Namespace, req.Pod, "", req.Container)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o := req.Log
	path := logPath(run.LogDir, run.Run)
	done := run.LogDone
	if o.Previous {
		prev, ok := previousRun(run.Run, run.BackingOff)
		if !ok {
			s.fail(w, r, fmt.Errorf("%w: previous terminated container %q in pod %q not found", errBadRequest, req.Container, req.Pod))
			return
		}
		path, done = logPath(run.LogDir, prev), closedChan
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && o.Previous {
		s.fail(w, r, fmt.Errorf("%w: previous terminated container %q in pod %q not found", errBadRequest, req.Container, req.Pod))
		return
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.fail(w, r, err)
		return
	}
	sel := logSelection{TailLines: o.TailLines, Since: o.Since, Stream: o.Stream}
	if o.SinceSecs > 0 {
		sel.Since = s.now().Add(-time.Duration(o.SinceSecs) * time.Second)
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Transfer-Encoding", "chunked")
	lw := &limitedWriter{w: w, n: -1}
	if o.LimitBytes != nil {
		lw.n = *o.LimitBytes
	}
	out, n := renderLog(data, sel, o.Timestamps)
	offset := int64(n)
	if _, err := lw.Write(out); err != nil || !o.Follow {
		return
	}
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush()
	sel.TailLines = nil
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		ended := false
		select {
		case <-r.Context().Done():
			return
		case <-done:
			ended = true // read what the run wrote last, then stop
		case <-t.C:
		}
		more, err := readFrom(path, offset)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return
		}
		if len(more) > 0 {
			out, n := renderLog(more, sel, o.Timestamps)
			offset += int64(n)
			if _, err := lw.Write(out); err != nil {
				return
			}
			flush()
		}
		if ended {
			return
		}
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func logPath(dir string, run int) string { return dir + "/" + strconv.Itoa(run) + ".log" }

func readFrom(path string, offset int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// execTarget is the remotecommand.Executor for one container run.
type execTarget struct {
	run    ctrRun
	runner execRunner
}

func (e execTarget) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	return e.runner.exec(ctx, e.run, cmd, in, out, errw, tty, resize)
}

// netnsForwarder is the portforward.PortForwarder for one pod: it connects to the port on the pod's
// loopback, inside its network namespace, as containerd does.
type netnsForwarder struct{ netns string }

func (f netnsForwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	conn, err := dialInNetNS(ctx, f.netns, port)
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
