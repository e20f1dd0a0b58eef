package speaker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

// speakerCapabilities are the capabilities config/speaker/20-daemonset.yaml adds (docs/security.md;
// config/security_test.go holds the manifest to the page).
var speakerCapabilities = []string{"net_raw", "sys_nice"}

const capsChildEnv = "IRONLB_TEST_CAPS_CHILD"

// TestSpeakerNeedsOnlyItsCapabilities runs the speaker's privileged code paths with only the
// capabilities its DaemonSet grants. The test binary re-runs itself in a new network namespace
// under setpriv with a bounding set of speakerCapabilities and no inheritable ones: as root, its
// permitted and effective sets are then exactly those, as in the container. The child
// (capsChild) opens every socket the speaker opens, raises its priority, and checks that what
// the dropped capabilities allow is refused.
func TestSpeakerNeedsOnlyItsCapabilities(t *testing.T) {
	if os.Getenv(capsChildEnv) == "1" {
		capsChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace, and capabilities to drop)")
	}
	for _, tool := range []string{"unshare", "setpriv", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	bounding := "-all,+" + strings.Join(speakerCapabilities, ",+")
	script := `ip link set lo up && ip link add ironlbcap0 type veth peer name ironlbcap1 && ip link set ironlbcap0 up && ip link set ironlbcap1 up &&
ip addr add 192.0.2.1/24 dev ironlbcap0 && ip addr add 2001:db8::1/64 dev ironlbcap0 nodad &&
exec setpriv --inh-caps=-all --bounding-set=` + bounding + ` -- "$@"`
	cmd := exec.Command("unshare", "--net", "--", "sh", "-c", script, "sh", os.Args[0],
		"-test.run=^TestSpeakerNeedsOnlyItsCapabilities$", "-test.v")
	cmd.Env = append(os.Environ(), capsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("with only %v: %v\n%s", speakerCapabilities, err, out)
	}
	t.Logf("%s", out)
}

func capsChild(t *testing.T) {
	// The capabilities really are gone: SO_RCVBUFFORCE needs CAP_NET_ADMIN (SO_MARK and SO_PRIORITY
	// also accept CAP_NET_RAW on recent kernels), port 179 CAP_NET_BIND_SERVICE.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 1<<20); !errors.Is(err, unix.EPERM) {
		t.Fatalf("SO_RCVBUFFORCE without CAP_NET_ADMIN: %v, want EPERM (capabilities not dropped?)", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: 179}); !errors.Is(err, unix.EACCES) {
		t.Fatalf("binding port 179 without CAP_NET_BIND_SERVICE: %v, want EACCES", err)
	}
	unix.Close(fd)

	ifi, err := net.InterfaceByName("ironlbcap0")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	// Layer 2 (NET_RAW): the ARP and NDP responders' packet sockets and the multicast socket.
	if r, err := layer2.DialARP(ifi, layer2.Config{}); err != nil {
		t.Errorf("ARP responder: %v", err)
	} else {
		r.Close()
	}
	if r, err := layer2.DialNDP(ifi, layer2.Config{}); err != nil {
		t.Errorf("NDP responder: %v", err)
	} else {
		r.Close()
	}
	// The echo detector's raw ICMP socket (NET_RAW).
	tr := liveness.NewEchoTracker(8*time.Millisecond, 1500*time.Microsecond, 4*time.Millisecond, 6)
	if e, err := liveness.ListenEcho(netip.MustParseAddr("192.0.2.1"), tr, func([]liveness.Down) {}, log); err != nil {
		t.Errorf("echo detector: %v", err)
	} else {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_ = e.Run(done) // closes the socket
	}
	// The heartbeat socket.
	if c, err := net.ListenPacket("udp", ":7947"); err != nil {
		t.Errorf("heartbeat socket: %v", err)
	} else {
		c.Close()
	}
	// BFD: the listener on 3784, a session socket (TTL 255, CS6), and the realtime loop (SYS_NICE).
	conn, err := bfd.Listen(bfd.ListenConfig{})
	if err != nil {
		t.Errorf("BFD listener: %v", err)
	} else {
		for _, peer := range []string{"192.0.2.2", "2001:db8::2"} {
			s, err := conn.Dial(netip.Addr{}, netip.MustParseAddr(peer))
			if err != nil {
				t.Errorf("BFD session socket to %s: %v", peer, err)
				continue
			}
			s.Close()
		}
		conn.Close()
	}
	m := bfd.New(bfd.NewFakeNetwork().Host(netip.MustParseAddr("192.0.2.1")), bfd.Config{Realtime: true, Log: log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for st := m.Stats(); !st.Realtime && st.RealtimeErr == nil && time.Now().Before(deadline); st = m.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	if st := m.Stats(); !st.Realtime {
		t.Errorf("BFD loop without SCHED_FIFO: %v", st.RealtimeErr)
	}
	cancel()
	<-done
	if err := bfd.SetProcessNice(-10); err != nil {
		t.Errorf("nice -10: %v", err)
	}
	// BGP: GoBGP's dialer sets TCP_MD5SIG_EXT (a password) and IP_TTL 255 (multihop) on the socket
	// it dials from an ephemeral port (netutils.DialerControl).
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	sig := &unix.TCPMD5Sig{Keylen: 6}
	sig.Addr.Family = unix.AF_INET
	copy(sig.Addr.Data[2:], []byte{192, 0, 2, 2})
	copy(sig.Key[:], "secret")
	if err := unix.SetsockoptTCPMD5Sig(fd, unix.IPPROTO_TCP, unix.TCP_MD5SIG_EXT, sig); err != nil {
		t.Errorf("BGP socket: TCP_MD5SIG_EXT: %v", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, 255); err != nil {
		t.Errorf("BGP socket: IP_TTL 255: %v", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{192, 0, 2, 1}}); err != nil {
		t.Errorf("BGP socket: bind to an ephemeral port: %v", err)
	}
}
