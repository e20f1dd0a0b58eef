// Package connprobe is the client of `lab bench-connections` (`ironlb connprobe`, run in the lab's
// client namespace): it holds long-lived flows to a service address and reports, for each, whether it
// broke and how long it went without an answer. TCP flows are keep-alive HTTP/1.1 connections to
// whoami, each sending a request every interval on its one connection and reading the answer; UDP
// flows each send a datagram every interval from a fixed source port to whoami's UDP port and read
// its answers. A flow never reconnects: the first error, end of stream or request without an answer
// within the timeout ends it, as it would end an application's session.
//
// When it stops it writes one block of lines per flow (Write), each carrying CLOCK_REALTIME
// nanoseconds so the benchmark can line them up with the instant it cut a node on the same host:
//
//	flow <tcp|udp> <id> <local port> <opened ns> <last answer ns> <answers>
//	host <tcp|udp> <id> <ns> <hostname> <remote>   the first answer, and every answer from
//	                                             another pod or seeing another client address
//	gap <tcp|udp> <id> <from ns> <to ns>           two answers further apart than the gap threshold
//	fail <tcp|udp> <id> <ns> <reason>              the flow ended: timeout, reset, refused, eof,
//	                                             unreachable, status-N, error
//	end <ns>                                       when the client stopped
//
// Parse reads them back; it and Write are pure.
package connprobe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/probe"
)

// ReadyLine is what `ironlb connprobe` writes to its standard error when Config.Ready is called:
// the flows are open and the time it holds them starts.
const ReadyLine = "connprobe: flows open"

// Config says what to hold.
type Config struct {
	Addr     netip.Addr    // the service address
	TCPPort  int           // whoami's HTTP port
	UDPPort  int           // whoami's UDP port
	TCP, UDP int           // how many flows of each
	UDPBase  int           // UDP flow i sends from port UDPBase+i
	Every    time.Duration // request interval per flow
	For      time.Duration // how long to hold the flows once every flow has answered once or failed
	Timeout  time.Duration // an answer later than this ends the flow
	Gap      time.Duration // answers further apart than this are reported as a gap
	// Ready, if set, is called once every flow has answered once or failed (or Timeout after the
	// start, if some have not): the flows are open and For starts.
	Ready func()
}

// Flow is what happened to one flow.
type Flow struct {
	Proto   string    // "tcp" or "udp"
	ID      int       // from 0 within its protocol
	Port    int       // local port
	Opened  time.Time // zero if it never opened
	LastOK  time.Time // last answer (zero: none)
	Answers int
	Hosts   []Host // the first answer's pod and client address, then every change
	Gaps    []Gap
	Failed  time.Time // zero if it did not fail
	Reason  string
}

// Host is who answered a flow and the client address it saw, from an instant on.
type Host struct {
	At     time.Time
	Name   string // whoami's Hostname ("-" if none)
	Remote string // whoami's RemoteAddr ("-" if none)
}

// Gap is a time without answers.
type Gap struct{ From, To time.Time }

// Result is a run: its flows and when the client stopped.
type Result struct {
	Flows []Flow
	End   time.Time
}

// flowState records a flow's answers; its methods are called from the flow's goroutines.
type flowState struct {
	mu      sync.Mutex
	f       Flow
	gap     time.Duration
	settle  sync.Once
	settled func() // called once, on the flow's first answer or its failure
}

func (s *flowState) done() {
	if s.settled != nil {
		s.settle.Do(s.settled)
	}
}

func (s *flowState) answer(at time.Time, host, remote string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.f.Failed.IsZero() {
		return
	}
	if !s.f.LastOK.IsZero() && at.Sub(s.f.LastOK) > s.gap {
		s.f.Gaps = append(s.f.Gaps, Gap{From: s.f.LastOK, To: at})
	} else if s.f.LastOK.IsZero() && !s.f.Opened.IsZero() && at.Sub(s.f.Opened) > s.gap {
		s.f.Gaps = append(s.f.Gaps, Gap{From: s.f.Opened, To: at})
	}
	s.f.LastOK = at
	s.f.Answers++
	defer s.done()
	if n := len(s.f.Hosts); n == 0 || s.f.Hosts[n-1].Name != host || s.f.Hosts[n-1].Remote != remote {
		s.f.Hosts = append(s.f.Hosts, Host{At: at, Name: host, Remote: remote})
	}
}

func (s *flowState) fail(at time.Time, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f.Failed.IsZero() {
		s.f.Failed, s.f.Reason = at, reason
	}
	s.done()
}

func (s *flowState) opened(at time.Time, port int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.Opened, s.f.Port = at, port
}

func (s *flowState) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.f.Failed.IsZero()
}

// Run opens the flows together and holds them until cfg.For has passed since every flow answered
// once or failed (cfg.Ready), or ctx ends, and returns what happened to them. A flow whose
// connection cannot be opened fails at once.
func Run(ctx context.Context, cfg Config) Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	open := make(chan struct{})
	var pending atomic.Int64
	pending.Store(int64(cfg.TCP + cfg.UDP))
	settled := func() {
		if pending.Add(-1) == 0 {
			close(open)
		}
	}
	go func() {
		select {
		case <-open:
		case <-time.After(cfg.Timeout):
		case <-ctx.Done():
			return
		}
		if cfg.Ready != nil {
			cfg.Ready()
		}
		select {
		case <-time.After(cfg.For):
		case <-ctx.Done():
		}
		cancel()
	}()
	states := make([]*flowState, 0, cfg.TCP+cfg.UDP)
	var wg sync.WaitGroup
	for i := range cfg.TCP {
		s := &flowState{f: Flow{Proto: "tcp", ID: i}, gap: cfg.Gap, settled: settled}
		states = append(states, s)
		wg.Go(func() { runTCP(ctx, cfg, s) })
	}
	for i := range cfg.UDP {
		s := &flowState{f: Flow{Proto: "udp", ID: i}, gap: cfg.Gap, settled: settled}
		states = append(states, s)
		wg.Go(func() { runUDP(ctx, cfg, s, cfg.UDPBase+i) })
	}
	wg.Wait()
	res := Result{End: time.Now()}
	for _, s := range states {
		res.Flows = append(res.Flows, s.f)
	}
	return res
}

func runTCP(ctx context.Context, cfg Config, s *flowState) {
	d := net.Dialer{Timeout: cfg.Timeout}
	c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(cfg.Addr, uint16(cfg.TCPPort)).String())
	if err != nil {
		if ctx.Err() == nil {
			s.fail(time.Now(), Reason(err))
		}
		return
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() }) // ends a request in flight when the run ends
	defer stop()
	s.opened(time.Now(), c.LocalAddr().(*net.TCPAddr).Port)
	br := bufio.NewReader(c)
	req := []byte("GET / HTTP/1.1\r\nHost: bench-connections\r\nUser-Agent: ironlb-connprobe\r\n\r\n")
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	for {
		_ = c.SetDeadline(time.Now().Add(cfg.Timeout))
		host, remote, err := exchange(c, br, req)
		at := time.Now()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.fail(at, Reason(err))
			return
		}
		s.answer(at, host, remote)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// exchange sends one request on a keep-alive connection and reads its answer.
func exchange(c net.Conn, br *bufio.Reader, req []byte) (host, remote string, err error) {
	if _, err := c.Write(req); err != nil {
		return "", "", err
	}
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", "", err
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	r.Body.Close()
	if err != nil {
		return "", "", err
	}
	if r.StatusCode != http.StatusOK {
		return "", "", statusError(r.StatusCode)
	}
	if r.Close {
		return "", "", fmt.Errorf("the server closes the connection: %w", io.EOF)
	}
	host, remote = Whoami(body)
	return host, remote, nil
}

type statusError int

func (e statusError) Error() string { return fmt.Sprintf("status-%d", int(e)) }

func runUDP(ctx context.Context, cfg Config, s *flowState, port int) {
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(cfg.Addr, uint16(cfg.UDPPort)))
	c, err := net.DialUDP("udp", &net.UDPAddr{Port: port}, raddr)
	if err != nil {
		s.fail(time.Now(), Reason(err))
		return
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	s.opened(time.Now(), port)
	var wg sync.WaitGroup
	wg.Go(func() { // the answers: a flow fails when none came for the timeout
		buf := make([]byte, 4096)
		for {
			_ = c.SetReadDeadline(time.Now().Add(cfg.Timeout))
			n, err := c.Read(buf)
			at := time.Now()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.fail(at, Reason(err))
				_ = c.Close()
				return
			}
			host, remote := Whoami(buf[:n])
			s.answer(at, host, remote)
		}
	})
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
send:
	for seq := 0; !s.failed(); seq++ {
		// A write may report an earlier ICMP error (port unreachable), which the reader sees too; a
		// lost datagram is not a failure.
		_, err := c.Write(fmt.Appendf(nil, "seq %d", seq))
		if err != nil && ctx.Err() == nil && !errors.Is(err, syscall.ECONNREFUSED) {
			s.fail(time.Now(), Reason(err))
			break
		}
		select {
		case <-ctx.Done():
			break send
		case <-t.C:
		}
	}
	_ = c.Close()
	wg.Wait()
}

// Whoami returns the Hostname and RemoteAddr lines of a whoami answer (HTTP body or UDP reply), "-"
// for each that is missing.
func Whoami(body []byte) (host, remote string) {
	host, remote = "-", "-"
	for line := range strings.Lines(string(body)) {
		line = strings.TrimRight(line, "\r\n")
		if h, ok := strings.CutPrefix(line, "Hostname: "); ok && host == "-" && validWord(h) {
			host = h
		}
		if r, ok := strings.CutPrefix(line, "RemoteAddr: "); ok && remote == "-" && validWord(r) {
			remote = r
		}
	}
	return host, remote
}

func validWord(s string) bool { return s != "" && !strings.ContainsAny(s, " \t") }

// Reason names why a flow ended, in one word: an HTTP status other than 200 as status-CODE, else
// as probe.Failure names it.
func Reason(err error) string {
	var st statusError
	if errors.As(err, &st) {
		return st.Error()
	}
	return probe.Failure(err)
}

// Write writes r in the format the package comment describes.
func Write(w io.Writer, r Result) error {
	bw := bufio.NewWriter(w)
	ns := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixNano()
	}
	for _, f := range r.Flows {
		fmt.Fprintf(bw, "flow %s %d %d %d %d %d\n", f.Proto, f.ID, f.Port, ns(f.Opened), ns(f.LastOK), f.Answers)
		for _, h := range f.Hosts {
			fmt.Fprintf(bw, "host %s %d %d %s %s\n", f.Proto, f.ID, ns(h.At), h.Name, h.Remote)
		}
		for _, g := range f.Gaps {
			fmt.Fprintf(bw, "gap %s %d %d %d\n", f.Proto, f.ID, ns(g.From), ns(g.To))
		}
		if !f.Failed.IsZero() {
			fmt.Fprintf(bw, "fail %s %d %d %s\n", f.Proto, f.ID, ns(f.Failed), f.Reason)
		}
	}
	fmt.Fprintf(bw, "end %d\n", ns(r.End))
	return bw.Flush()
}

// Parse reads what Write wrote; a malformed line, or a line about a flow before its flow line, is
// an error naming its number.
func Parse(rd io.Reader) (Result, error) {
	var r Result
	index := map[string]int{} // "tcp 3" -> index in r.Flows
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		bad := func(why string) error { return fmt.Errorf("connprobe line %d: %s: %q", n, why, sc.Text()) }
		want := map[string]int{"flow": 7, "host": 6, "gap": 5, "fail": 5, "end": 2}[f[0]]
		if want == 0 || len(f) != want {
			return Result{}, bad("unknown line or wrong number of fields")
		}
		if f[0] == "end" {
			at, err := parseNS(f[1])
			if err != nil {
				return Result{}, bad(err.Error())
			}
			r.End = at
			continue
		}
		if f[1] != "tcp" && f[1] != "udp" {
			return Result{}, bad("protocol")
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			return Result{}, bad("flow id")
		}
		key := f[1] + " " + f[2]
		if f[0] == "flow" {
			v := make([]int64, 4)
			for i := range v {
				if v[i], err = strconv.ParseInt(f[3+i], 10, 64); err != nil {
					return Result{}, bad("number")
				}
			}
			if _, dup := index[key]; dup {
				return Result{}, bad("flow listed twice")
			}
			index[key] = len(r.Flows)
			r.Flows = append(r.Flows, Flow{Proto: f[1], ID: id, Port: int(v[0]), Opened: fromNS(v[1]), LastOK: fromNS(v[2]), Answers: int(v[3])})
			continue
		}
		i, ok := index[key]
		if !ok {
			return Result{}, bad("no flow line before it")
		}
		fl := &r.Flows[i]
		at, err := parseNS(f[3])
		if err != nil {
			return Result{}, bad(err.Error())
		}
		switch f[0] {
		case "host":
			fl.Hosts = append(fl.Hosts, Host{At: at, Name: f[4], Remote: f[5]})
		case "gap":
			to, err := parseNS(f[4])
			if err != nil || to.Before(at) {
				return Result{}, bad("gap end")
			}
			fl.Gaps = append(fl.Gaps, Gap{From: at, To: to})
		case "fail":
			fl.Failed, fl.Reason = at, f[4]
		}
	}
	for i := range r.Flows {
		slices.SortStableFunc(r.Flows[i].Gaps, func(a, b Gap) int { return a.From.Compare(b.From) })
	}
	return r, sc.Err()
}

func parseNS(s string) (time.Time, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("not nanoseconds: %q", s)
	}
	return fromNS(v), nil
}

func fromNS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}
