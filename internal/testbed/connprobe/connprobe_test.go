package connprobe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/whoami"
)

func at(ms int64) time.Time { return time.Unix(1_700_000_000, ms*int64(time.Millisecond)) }

func TestWriteParseRoundTrip(t *testing.T) {
	r := Result{End: at(5000), Flows: []Flow{
		{Proto: "tcp", ID: 0, Port: 40001, Opened: at(0), LastOK: at(4990), Answers: 90,
			Hosts: []Host{{At: at(10), Name: "web-a", Remote: "172.18.0.3:1234"}, {At: at(3000), Name: "web-b", Remote: "172.18.0.4:1234"}},
			Gaps:  []Gap{{From: at(1000), To: at(1300)}}},
		{Proto: "tcp", ID: 1, Port: 40002, Opened: at(0), LastOK: at(990), Answers: 20,
			Hosts:  []Host{{At: at(10), Name: "web-a", Remote: "-"}},
			Failed: at(1005), Reason: "reset"},
		{Proto: "udp", ID: 0, Reason: "refused", Failed: at(2)}, // never opened
	}}
	var b bytes.Buffer
	if err := Write(&b, r); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r, got); d != "" {
		t.Errorf("round trip (-wrote +read):\n%s", d)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"flow tcp 0 1 2 3\n",                  // a field short
		"host tcp 0 1 a b\n",                  // before its flow
		"flow sctp 0 1 2 3 4\n",               // protocol
		"flow tcp 0 1 2 3 4\ngap tcp 0 5 4\n", // ends before it starts
		"flow tcp 0 1 2 3 4\nflow tcp 0 1 2 3 4\n",
		"end x\n",
		"what 1\n",
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("Parse(%q) = nil error", in)
		}
	}
}

func TestWhoami(t *testing.T) {
	for _, tc := range []struct{ body, host, remote string }{
		{"Hostname: web-a\r\nIP: 127.0.0.1\r\nRemoteAddr: 10.0.0.1:5\r\nGET / HTTP/1.1\r\n", "web-a", "10.0.0.1:5"},
		{"Hostname: web-b\nRemoteAddr: [fd00::1]:7\nseq 3", "web-b", "[fd00::1]:7"},
		{"1", "-", "-"},
		{"Hostname: two words\n", "-", "-"},
	} {
		h, r := Whoami([]byte(tc.body))
		if h != tc.host || r != tc.remote {
			t.Errorf("Whoami(%q) = %q, %q; want %q, %q", tc.body, h, r, tc.host, tc.remote)
		}
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "timeout"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "reset"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "refused"},
		{syscall.EHOSTUNREACH, "unreachable"},
		{io.ErrUnexpectedEOF, "eof"},
		{statusError(503), "status-503"},
		{errors.New("odd"), "error"},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestRunAgainstWhoami holds flows to whoami on loopback (its HTTP handler and its UDP mode): every
// flow opens and answers, and none fails; then a server that closes each connection after its
// answer ends every TCP flow with a failure.
func TestRunAgainstWhoami(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: whoami.Handler(whoami.Config{}, "web-a", nil)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = whoami.ServeUDP(ctx, pc, "web-u") }()

	cfg := Config{Addr: netip.MustParseAddr("127.0.0.1"), TCPPort: ln.Addr().(*net.TCPAddr).Port,
		UDPPort: pc.LocalAddr().(*net.UDPAddr).Port, TCP: 3, UDP: 2, UDPBase: 0,
		Every: 20 * time.Millisecond, For: 400 * time.Millisecond, Timeout: 5 * time.Second, Gap: time.Second}
	r := Run(context.Background(), cfg)
	if len(r.Flows) != 5 {
		t.Fatalf("%d flows, want 5", len(r.Flows))
	}
	for _, f := range r.Flows {
		want := map[string]string{"tcp": "web-a", "udp": "web-u"}[f.Proto]
		if !f.Failed.IsZero() || f.Answers == 0 || f.Opened.IsZero() || len(f.Hosts) != 1 || f.Hosts[0].Name != want {
			t.Errorf("flow %s %d: %+v; want answers from %s and no failure", f.Proto, f.ID, f, want)
		}
	}

	closing := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		fmt.Fprintln(w, "Hostname: web-c")
	})}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = closing.Serve(ln2) }()
	defer closing.Close()
	cfg.TCPPort, cfg.UDP = ln2.Addr().(*net.TCPAddr).Port, 0
	r = Run(context.Background(), cfg)
	for _, f := range r.Flows {
		if f.Failed.IsZero() || f.Reason != "eof" {
			t.Errorf("flow %s %d to a closing server: failed %v (%q), want an eof failure", f.Proto, f.ID, f.Failed, f.Reason)
		}
	}
}
