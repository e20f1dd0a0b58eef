package bgp

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// lockedBuffer is a bytes.Buffer for a slog handler written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPasswordNeverLogged runs sessions with TCP MD5 passwords through everything that logs or
// reports about them — a router expecting another password (the attempt times out), a peer that
// refuses the connection, a password change (the neighbor is re-created), removal — with the
// speaker's and GoBGP's logs captured at debug level, and checks that no password appears in any
// log line or session status message.
func TestPasswordNeverLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback BGP sessions take seconds")
	}
	const pw1, pw2, routerPW = "pw-one-7f3a9c", "pw-two-c41d0e", "pw-router-55e1b2"
	secrets := []string{pw1, pw2, routerPW}
	rd := newTestRouter(t, "127.0.0.5", 64800, routerNeighbor{addr: "127.0.0.15", asn: 64512, password: routerPW})
	closed := freePort(t, "127.0.0.6") // nothing listens there: the connection is refused

	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rec := &states{}
	sp := New(Config{Log: log, GoBGPLogLevel: slog.LevelDebug, OnState: rec.on})
	input := func(pw string) bgpconfig.Input {
		ct := &metav1.Duration{Duration: time.Second}
		return bgpconfig.Input{Node: bgpconfig.Node{Name: "n"}, DefaultRouterID: netip.MustParseAddr("10.0.0.10"),
			Peers: []v1beta2.BGPPeer{
				{ObjectMeta: metav1.ObjectMeta{Name: "wrong-password"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64800,
					Address: rd.addr.String(), Port: uint16(rd.port), SrcAddress: "127.0.0.15", Password: pw, ConnectTime: ct}},
				{ObjectMeta: metav1.ObjectMeta{Name: "refused"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64900,
					Address: "127.0.0.6", Port: uint16(closed), SrcAddress: "127.0.0.16", Password: pw, ConnectTime: ct}},
			}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- sp.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	sp.Set(mustBuild(t, input(pw1)))
	failed := func(st SessionStatus) bool { return st.Reason == ConnectFailed }
	waitFor(t, sp, "wrong-password", 15*time.Second, failed)
	waitFor(t, sp, "refused", 15*time.Second, failed)
	since := time.Now()
	sp.Set(mustBuild(t, input(pw2))) // a new password re-creates both neighbors
	waitFor(t, sp, "wrong-password", 15*time.Second, func(st SessionStatus) bool { return failed(st) && st.Since.After(since) })
	sp.Set(bgpconfig.State{})
	deadline := time.Now().Add(10 * time.Second)
	for len(sp.Sessions()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	runDone <- nil

	out := logs.String()
	// The capture must have seen the sessions, or the test proves nothing.
	for _, want := range []string{"127.0.0.5", "127.0.0.6", "component=gobgp"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the captured logs never mention %q:\n%s", want, out)
		}
	}
	for _, pw := range secrets {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, pw) {
				t.Errorf("a log line holds a password: %s", line)
			}
		}
		rec.mu.Lock()
		for _, st := range rec.all {
			if strings.Contains(st.Message, pw) || strings.Contains(string(st.Reason), pw) {
				t.Errorf("a session status holds a password: %+v", st)
			}
		}
		rec.mu.Unlock()
	}
}
