package speaker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
	frrtest "github.com/ironlb/ironlb/internal/testbed/testenv/frr"
	"github.com/ironlb/ironlb/internal/testbed/testenv/proc"
)

// TestBGPModeWithFRR runs the whole speaker (speaker.Run, layer 2 and BGP) against a real
// kube-apiserver and an FRR router. The speaker runs in a child process, this test binary again,
// in the node's network namespace, so that every socket it opens is there; it reaches the
// apiserver (on the root namespace's loopback) through a Unix socket, which crosses namespaces,
// bridged to a loopback port inside the node's namespace.
//
//	namespace ironlbt-bgpw-<pid>-r: FRR, AS 64512, 192.0.2.1/24 ─veth─ 192.0.2.2/24 namespace -n: speaker, AS 64513
func TestBGPModeWithFRR(t *testing.T) {
	frrtest.Need(t)
	env, cs, dyn := startAPI(t)
	ctx := context.Background()
	nsR, nsN := fmt.Sprintf("ironlbt-bgpw-%d-r", os.Getpid()), fmt.Sprintf("ironlbt-bgpw-%d-n", os.Getpid())
	netnstest.Add(t, nsR, nsN)
	netnstest.Run(t, nsR, "ip", "link", "set", "lo", "up")
	netnstest.Run(t, nsN, "ip", "link", "set", "lo", "up")
	netnstest.Veth(t, netnstest.End{NS: nsR, Name: "bgpr", Addrs: []string{"192.0.2.1/24"}}, netnstest.End{NS: nsN, Name: "bgpn", Addrs: []string{"192.0.2.2/24"}})
	dir := frrtest.Config(t, func(dir string) map[string]string {
		return map[string]string{
			"zebra.conf": fmt.Sprintf("hostname router\nlog file %s/zebra.log\n", dir),
			"bfdd.conf":  fmt.Sprintf("hostname router\nlog file %s/bfdd.log\n", dir),
			"bgpd.conf": fmt.Sprintf(`hostname router
log file %s/bgpd.log debugging
log timestamp precision 6
debug bgp neighbor-events
router bgp 64512
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
 neighbor 192.0.2.2 remote-as 64513
 neighbor 192.0.2.2 passive
!
`, dir),
		}
	})
	router := frrtest.Start(t, nsR, dir, 1)

	// The cluster: node n1 (InternalIP 192.0.2.2), a pool, a Service with an address and a ready
	// endpoint on n1, an advertisement, the router's BGPPeer and one invalid BGPPeer.
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.2"}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply := func(apiVersion, kind, resource, name string, spec map[string]any) {
		t.Helper()
		gv, _ := schema.ParseGroupVersion(apiVersion)
		o := uobj(apiVersion, kind, name, spec)
		if _, err := dyn.Resource(gv.WithResource(resource)).Namespace(testNS).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s %s: %v", kind, name, err)
		}
	}
	// The heartbeat key the controller would create: without it the speaker stays unready.
	if _, err := cs.CoreV1().Secrets(testNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultHeartbeatKeySecret},
		Data: map[string][]byte{"primary": []byte("0123456789abcdef0123456789abcdef")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply("metallb.io/v1beta1", "IPAddressPool", "ipaddresspools", "pool", map[string]any{"addresses": []any{"198.51.100.0/24"}})
	apply("metallb.io/v1beta1", "BGPAdvertisement", "bgpadvertisements", "ad", map[string]any{})
	apply("metallb.io/v1beta2", "BGPPeer", "bgppeers", "router", map[string]any{"myASN": int64(64513), "peerASN": int64(64512),
		"peerAddress": "192.0.2.1", "holdTime": "9s", "connectTime": "1s"})
	apply("metallb.io/v1beta2", "BGPPeer", "bgppeers", "bad", map[string]any{"myASN": int64(64513), "peerASN": int64(64512),
		"peerAddress": "192.0.2.9", "holdTime": "1s"})
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
	if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, nodeName := true, "n1"
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &nodeName,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	child := startSpeakerChild(t, nsN, env.Kubeconfig)

	router.WaitRoutes(t, "announced", map[string][]string{"198.51.100.10/32": {"192.0.2.2"}}, 20*time.Second)
	waitList(t, dyn, sessionStateKind, "established", func(items []unstructured.Unstructured) bool {
		return len(items) == 1 && nested(items[0], "status", "bgpStatus") == "Established" && nested(items[0], "status", "peer") == "192.0.2.1" &&
			nested(items[0], "status", "node") == "n1" && nested(items[0], "status", "bfdStatus") == "N/A"
	})
	waitList(t, dyn, bgpStatusKind, "announced", func(items []unstructured.Unstructured) bool {
		return len(items) == 1 && nested(items[0], "status", "serviceName") == "web" && nested(items[0], "status", "peers") == "[router]"
	})
	waitEvent(t, cs, "BGPPeer", "router", corev1.EventTypeNormal, "SessionEstablished")
	waitEvent(t, cs, "BGPPeer", "bad", corev1.EventTypeWarning, "InvalidConfiguration")
	if out, err := exec.Command("ip", "netns", "exec", nsN, "curl", "-s", "http://127.0.0.1:17473/metrics").Output(); err == nil {
		for _, want := range []string{`ironlb_speaker_bgp_session_up{name="router",peer="192.0.2.1"} 1`,
			`ironlb_speaker_bgp_announced_prefixes{peer="192.0.2.1"} 1`, `ironlb_speaker_config_errors{kind="BGPPeer"} 1`} {
			if !strings.Contains(string(out), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if !strings.Contains(string(out), `ironlb_speaker_bgp_updates_sent_total{peer="192.0.2.1"}`) {
			t.Error("metrics lack ironlb_speaker_bgp_updates_sent_total")
		}
	} else {
		t.Logf("metrics not checked (curl in the node's namespace: %v)", err)
	}

	// A bad edit of the router's BGPPeer: a Warning event, and the session and route stay.
	p, err := dyn.Resource(v1beta2.BGPPeerGVR).Namespace(testNS).Get(ctx, "router", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(p.Object, "2s", "spec", "holdTime")
	if _, err := dyn.Resource(v1beta2.BGPPeerGVR).Namespace(testNS).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, cs, "BGPPeer", "router", corev1.EventTypeWarning, "InvalidConfiguration")
	time.Sleep(time.Second)
	router.WaitRoutes(t, "kept after a bad edit", map[string][]string{"198.51.100.10/32": {"192.0.2.2"}}, time.Second)
	if nb := router.Neighbors(t)["192.0.2.2"]; nb.BGPState != "Established" {
		t.Errorf("session after a bad edit: %+v", nb)
	}

	// Shutdown: the speaker closes the session (Cease), and the router drops the route at once
	// rather than after the hold time.
	stopped := child.stop(t)
	router.WaitRoutes(t, "speaker stopped", map[string][]string{}, 3*time.Second)
	if nb := router.Neighbors(t)["192.0.2.2"]; !strings.Contains(strings.ToLower(nb.LastNotificationReason+" "+nb.LastResetDueTo), "cease") {
		t.Errorf("router's view of the shutdown: %+v", nb)
	}
	t.Logf("route withdrawn %v after the speaker was told to stop", time.Since(stopped).Round(time.Millisecond))
}

// waitEvent waits for an event on an object of the configuration namespace.
func waitEvent(t *testing.T, cs kubernetes.Interface, kind, name, typ, reason string) {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason, "type": typ}.AsSelector().String()
	deadline := time.Now().Add(15 * time.Second)
	for {
		l, err := cs.CoreV1().Events(testNS).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err == nil && len(l.Items) > 0 {
			t.Logf("event on %s %s: %s %s: %s", kind, name, typ, reason, l.Items[0].Message)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event %s on %s %s (err %v)", typ, reason, kind, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const speakerHelperEnv = "IRONLB_SPEAKER_HELPER"

// speakerChild is the speaker running in the node's namespace.
type speakerChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
}

func startSpeakerChild(t *testing.T, ns, kubeconfig string) *speakerChild {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var apiHost string
	for _, c := range kc.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		apiHost = u.Host
	}
	// The Unix socket the child dials for the apiserver; forwarded here to its loopback port.
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go forward(l, func() (net.Conn, error) { return net.Dial("tcp", apiHost) })

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &speakerChild{exited: make(chan struct{})}
	c.cmd = exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^TestHelperSpeakerProcess$", "-test.count=1", "-test.v")
	c.cmd.Env = append(os.Environ(), speakerHelperEnv+"=1", "IRONLB_HELPER_SOCK="+sock, "IRONLB_HELPER_KUBECONFIG="+kubeconfig)
	c.cmd.Stdout = &testLogWriter{t: t, prefix: "speaker: "}
	c.cmd.Stderr = c.cmd.Stdout
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := proc.StartKilledWithUs(c.cmd); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

// stop closes the child's stdin, which makes it stop as on SIGTERM, and returns when it was told.
func (c *speakerChild) stop(t *testing.T) time.Time {
	at := time.Now()
	c.stdin.Close()
	select {
	case <-c.exited:
		if c.cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("speaker exited with %v", c.cmd.ProcessState)
		}
	case <-time.After(10 * time.Second):
		t.Error("speaker did not stop within 10 s")
	}
	return at
}

// TestHelperSpeakerProcess is the child: a listener on the namespace's loopback forwards to the
// Unix socket, a kubeconfig points at it, and speaker.Run runs until stdin closes.
func TestHelperSpeakerProcess(t *testing.T) {
	if os.Getenv(speakerHelperEnv) == "" {
		t.Skip("runs as a child of TestBGPModeWithFRR")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go forward(l, func() (net.Conn, error) { return net.Dial("unix", os.Getenv("IRONLB_HELPER_SOCK")) })
	kc, err := clientcmd.LoadFromFile(os.Getenv("IRONLB_HELPER_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + l.Addr().String()
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	err = Run(ctx, Config{Node: "n1", Namespace: testNS, Kubeconfig: kcPath, HeartbeatPort: 7947, Interval: 50 * time.Millisecond,
		Multiplier: 6, HoldDown: time.Second, MetricsAddr: "127.0.0.1:17473"})
	if err != nil {
		t.Fatal(err)
	}
	slog.Info("speaker stopped")
}

// forward copies every connection accepted on l to one dial opens.
func forward(l net.Listener, dial func() (net.Conn, error)) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := dial()
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
		}()
	}
}

type testLogWriter struct {
	t      *testing.T
	prefix string
}

func (w *testLogWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if l != "" {
			w.t.Log(w.prefix + l)
		}
	}
	return len(b), nil
}
