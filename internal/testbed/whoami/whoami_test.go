package whoami

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	stdout = io.Discard // keep the "Received b:" / health lines out of test output
	os.Exit(m.Run())
}

// testIPs is the address list used by the tests: loopback v4 and v6, a pod
// address, and a nil entry that must be skipped.
func testIPs() ([]net.IP, error) {
	return []net.IP{
		net.ParseIP("127.0.0.1"),
		net.ParseIP("::1"),
		nil,
		net.ParseIP("172.18.0.2"),
		net.ParseIP("fe80::42:acff:fe12:2"),
	}, nil
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    Config
		wantErr string // substring; empty means no error
	}{
		{name: "defaults", want: Config{Port: "80"}},
		{name: "nil args", args: nil, want: Config{Port: "80"}},
		{
			name: "env",
			env:  map[string]string{"WHOAMI_PORT_NUMBER": "8080", "WHOAMI_NAME": "webpod1"},
			want: Config{Port: "8080", Name: "webpod1"},
		},
		{
			name: "empty env port falls back to 80",
			env:  map[string]string{"WHOAMI_PORT_NUMBER": ""},
			want: Config{Port: "80"},
		},
		{
			name: "flags override env",
			args: []string{"--port", "9000", "--name=flagname"},
			env:  map[string]string{"WHOAMI_PORT_NUMBER": "8080", "WHOAMI_NAME": "envname"},
			want: Config{Port: "9000", Name: "flagname"},
		},
		{
			name: "single dash and equals",
			args: []string{"-port=81", "-name", "a b", "-verbose"},
			want: Config{Port: "81", Name: "a b", Verbose: true},
		},
		{name: "verbose", args: []string{"--verbose"}, want: Config{Port: "80", Verbose: true}},
		{name: "udp from env", env: map[string]string{"WHOAMI_UDP_PORT_NUMBER": "8053"}, want: Config{Port: "80", UDPPort: "8053"}},
		{name: "udp flag over env", args: []string{"--udp-port=53"}, env: map[string]string{"WHOAMI_UDP_PORT_NUMBER": "8053"},
			want: Config{Port: "80", UDPPort: "53"}},
		{name: "verbose=false", args: []string{"--verbose=false"}, want: Config{Port: "80"}},
		{
			name: "tls flags ignored",
			args: []string{"--cert", "/certs/tls.crt", "--key=/certs/tls.key", "-cacert", "/certs/ca.crt", "--port", "443"},
			want: Config{Port: "443"},
		},
		{
			name: "stops at first non-flag",
			args: []string{"--port", "82", "extra", "--bogus"},
			want: Config{Port: "82"},
		},
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: "flag provided but not defined: -bogus"},
		{name: "unknown after known", args: []string{"--port", "1", "--allowed-origins", "*"}, wantErr: "not defined: -allowed-origins"},
		{name: "missing value", args: []string{"--port"}, wantErr: "flag needs an argument: -port"},
		{name: "missing cert value", args: []string{"--cert"}, wantErr: "flag needs an argument: -cert"},
		{name: "bad bool", args: []string{"--verbose=maybe"}, wantErr: "invalid boolean value"},
		{name: "help", args: []string{"-h"}, wantErr: flag.ErrHelp.Error()},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.args, env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseArgs(%q) error = %v, want one containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs(%q) error = %v", tt.args, err)
			}
			if got != tt.want {
				t.Errorf("ParseArgs(%q) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}

	t.Run("help wraps flag.ErrHelp", func(t *testing.T) {
		if _, err := ParseArgs([]string{"--help"}, nil); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("error = %v, want flag.ErrHelp", err)
		}
	})
}

func TestWhoamiOutput(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		method string
		target string
		header map[string]string
		body   string
		want   string
	}{
		{
			name:   "plain GET",
			method: "GET",
			target: "/",
			header: map[string]string{"User-Agent": "curl/8.5.0", "Accept": "*/*"},
			want: "Hostname: webpod1\n" +
				"IP: 127.0.0.1\n" +
				"IP: ::1\n" +
				"IP: 172.18.0.2\n" +
				"IP: fe80::42:acff:fe12:2\n" +
				"RemoteAddr: 172.18.0.100:41234\n" +
				"GET / HTTP/1.1\r\n" +
				"Host: webpod.lab\r\n" +
				"User-Agent: curl/8.5.0\r\n" +
				"Accept: */*\r\n" +
				"\r\n",
		},
		{
			name:   "name, path, query and sorted headers",
			cfg:    Config{Name: "blue"},
			method: "GET",
			target: "/some/path?a=1&b=2",
			header: map[string]string{
				"X-Forwarded-For": "10.0.0.1",
				"Accept":          "*/*",
				"X-Real-Ip":       "10.0.0.1",
				"Accept-Encoding": "gzip",
			},
			want: "Name: blue\n" +
				"Hostname: webpod1\n" +
				"IP: 127.0.0.1\n" +
				"IP: ::1\n" +
				"IP: 172.18.0.2\n" +
				"IP: fe80::42:acff:fe12:2\n" +
				"RemoteAddr: 172.18.0.100:41234\n" +
				"GET /some/path?a=1&b=2 HTTP/1.1\r\n" +
				"Host: webpod.lab\r\n" +
				"User-Agent: Go-http-client/1.1\r\n" + // Request.Write's default
				"Accept: */*\r\n" +
				"Accept-Encoding: gzip\r\n" +
				"X-Forwarded-For: 10.0.0.1\r\n" +
				"X-Real-Ip: 10.0.0.1\r\n" +
				"\r\n",
		},
		{
			name:   "POST echoes the body",
			method: "POST",
			target: "/api/",
			header: map[string]string{"User-Agent": "t", "Content-Type": "text/plain"},
			body:   "hello",
			want: "Hostname: webpod1\n" +
				"IP: 127.0.0.1\n" +
				"IP: ::1\n" +
				"IP: 172.18.0.2\n" +
				"IP: fe80::42:acff:fe12:2\n" +
				"RemoteAddr: 172.18.0.100:41234\n" +
				"POST /api/ HTTP/1.1\r\n" +
				"Host: webpod.lab\r\n" +
				"User-Agent: t\r\n" +
				"Content-Length: 5\r\n" +
				"Content-Type: text/plain\r\n" +
				"\r\n" +
				"hello",
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Handler(tt.cfg, "webpod1", testIPs)
			req := httptest.NewRequest(tt.method, "http://webpod.lab"+tt.target, strings.NewReader(tt.body))
			req.RemoteAddr = "172.18.0.100:41234"
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200", rec.Code)
			}
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("body mismatch\n got: %q\nwant: %q", got, tt.want)
			}
		})
	}
}

// TestWhoamiOverTCP sends a raw request to a real server and checks the
// whole response body, as a client behind the load balancer sees it.
func TestWhoamiOverTCP(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{}, "webpod1", testIPs))
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	_, err = io.WriteString(conn, "GET /x?y=z HTTP/1.1\r\n"+
		"Host: webpod.lab:8080\r\n"+
		"user-agent: curl/8.5.0\r\n"+
		"X-B: 2\r\n"+
		"Accept: */*\r\n"+
		"X-A: 1\r\n"+
		"X-A: 0\r\n"+
		"Connection: close\r\n"+
		"\r\n")
	if err != nil {
		t.Fatal(err)
	}

	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}

	lines := strings.Split(string(body), "\n")
	remote := strings.TrimPrefix(lines[5], "RemoteAddr: ")
	if host, port, err := net.SplitHostPort(remote); err != nil || host != "127.0.0.1" || port == "" {
		t.Fatalf("RemoteAddr line %q: host %q port %q err %v", lines[5], host, port, err)
	}

	want := "Hostname: webpod1\n" +
		"IP: 127.0.0.1\n" +
		"IP: ::1\n" +
		"IP: 172.18.0.2\n" +
		"IP: fe80::42:acff:fe12:2\n" +
		"RemoteAddr: " + remote + "\n" +
		"GET /x?y=z HTTP/1.1\r\n" +
		"Host: webpod.lab:8080\r\n" +
		"User-Agent: curl/8.5.0\r\n" +
		"Accept: */*\r\n" +
		"Connection: close\r\n" +
		"X-A: 1\r\n" +
		"X-A: 0\r\n" +
		"X-B: 2\r\n" +
		"\r\n"
	if string(body) != want {
		t.Errorf("body mismatch\n got: %q\nwant: %q", body, want)
	}
}

func TestWhoamiQuery(t *testing.T) {
	h := Handler(Config{}, "webpod1", testIPs)

	t.Run("wait", func(t *testing.T) {
		start := time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/?wait=60ms", nil))
		if d := time.Since(start); d < 60*time.Millisecond {
			t.Errorf("returned after %v, want at least 60ms", d)
		}
		if !strings.HasPrefix(rec.Body.String(), "Hostname: webpod1\n") {
			t.Errorf("body = %q", rec.Body.String())
		}
	})

	t.Run("bad wait is ignored", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/?wait=soon", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "GET /?wait=soon HTTP/1.1\r\n") {
			t.Errorf("status %d body %q", rec.Code, rec.Body.String())
		}
	})

	t.Run("env", func(t *testing.T) {
		t.Setenv("WHOAMI_TEST_VAR", "some value")
		for _, tc := range []struct {
			query string
			want  bool
		}{{"env=true", true}, {"env=1", true}, {"env=false", false}, {"env=yes", false}, {"", false}} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/?"+tc.query, nil))
			body := rec.Body.String()
			got := strings.Contains(body, "\r\n\r\nWHOAMI_TEST_VAR=some value\n") ||
				strings.Contains(body, "\nWHOAMI_TEST_VAR=some value\n")
			if got != tc.want {
				t.Errorf("?%s: env printed = %v, want %v; body %q", tc.query, got, tc.want, body)
			}
		}
	})
}

func TestAPI(t *testing.T) {
	h := Handler(Config{Name: "blue"}, "webpod1", testIPs)

	req := httptest.NewRequest("GET", "http://webpod.lab/api?x=1&y=<2>", nil)
	req.RemoteAddr = "172.18.0.100:41234"
	req.Header.Set("User-Agent", "curl/8.5.0")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)

	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	want := `{"hostname":"webpod1","ip":["127.0.0.1","::1","172.18.0.2","fe80::42:acff:fe12:2"],` +
		`"headers":{"User-Agent":["curl/8.5.0"],"X-Multi":["a","b"]},` +
		`"url":"/api?x=1\u0026y=\u003c2\u003e","host":"webpod.lab","method":"GET","name":"blue",` +
		`"remoteAddr":"172.18.0.100:41234"}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body mismatch\n got: %s\nwant: %s", got, want)
	}

	t.Run("empty fields omitted", func(t *testing.T) {
		h := Handler(Config{}, "", func() ([]net.IP, error) { return nil, errors.New("no interfaces") })
		req := httptest.NewRequest("GET", "http://webpod.lab/api", nil)
		req.RemoteAddr = "1.2.3.4:5"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		want := `{"url":"/api","host":"webpod.lab","method":"GET","remoteAddr":"1.2.3.4:5"}` + "\n"
		if got := rec.Body.String(); got != want {
			t.Errorf("got %s want %s", got, want)
		}
	})

	t.Run("env", func(t *testing.T) {
		t.Setenv("WHOAMI_TEST_VAR", "a=b")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api?env=true", nil))
		if !strings.Contains(rec.Body.String(), `"WHOAMI_TEST_VAR":"a=b"`) {
			t.Errorf("environ missing from %s", rec.Body.String())
		}
	})
}

func TestHealth(t *testing.T) {
	h := Handler(Config{}, "webpod1", testIPs)

	steps := []struct {
		method   string
		body     string
		wantCode int
		wantBody string
	}{
		{"GET", "", 200, ""},
		{"POST", "500", 200, ""},
		{"GET", "", 500, ""},
		{"HEAD", "", 500, ""},
		{"PUT", "", 500, ""},
		{"POST", "not json", 400, "invalid character 'o' in literal null (expecting 'u')\n"},
		{"POST", "", 400, "EOF\n"},
		{"GET", "", 500, ""},
		{"POST", " 204\n", 200, ""},
		{"GET", "", 204, ""},
		{"POST", "200", 200, ""},
		{"GET", "", 200, ""},
	}

	for i, s := range steps {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(s.method, "/health", strings.NewReader(s.body)))
		if rec.Code != s.wantCode || rec.Body.String() != s.wantBody {
			t.Errorf("step %d: %s /health %q = %d %q, want %d %q", i, s.method, s.body, rec.Code, rec.Body.String(), s.wantCode, s.wantBody)
		}
	}

	// Another Handler has its own state.
	rec := httptest.NewRecorder()
	Handler(Config{}, "", nil).ServeHTTP(rec, httptest.NewRequest("GET", "/health", nil))
	if rec.Code != 200 {
		t.Errorf("fresh handler: %d, want 200", rec.Code)
	}
}

func TestDataAndBench(t *testing.T) {
	h := Handler(Config{}, "webpod1", testIPs)

	tests := []struct {
		target  string
		wantLen int
		want    string // checked when not empty
		header  string // "Content-Disposition" expected value
	}{
		{target: "/data", wantLen: 0},
		{target: "/data?size=0", wantLen: 0},
		{target: "/data?size=-5", wantLen: 0},
		{target: "/data?size=2", want: "||"},
		{target: "/data?size=10", want: "|ABCDEFGH|"},
		{target: "/data?size=30", want: "|ABCDEFGHIJKLMNOPQRSTUVWXYZ-A|"},
		{target: "/data?size=1&unit=KB", wantLen: 1024},
		{target: "/data?size=10&unit=weird", want: "|ABCDEFGH|"},
		{target: "/data?size=10&attachment=true", want: "|ABCDEFG|", header: "Attachment"},
		{target: "/bench", want: "1"},
	}

	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", tt.target, nil))
			body := rec.Body.String()
			if tt.want != "" && body != tt.want {
				t.Errorf("body = %q, want %q", body, tt.want)
			}
			if tt.want == "" && len(body) != tt.wantLen {
				t.Errorf("len = %d, want %d", len(body), tt.wantLen)
			}
			if got := rec.Header().Get("Content-Disposition"); got != tt.header {
				t.Errorf("Content-Disposition = %q, want %q", got, tt.header)
			}
		})
	}

	t.Run("1kb shape", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/data?size=1&unit=kb", nil))
		b := rec.Body.Bytes()
		if b[0] != '|' || b[len(b)-1] != '|' || b[1] != 'A' || b[27] != '-' {
			t.Errorf("unexpected content %q...%q", b[:30], b[len(b)-5:])
		}
	})
}

// wsFrame builds a masked client frame.
func wsFrame(b0 byte, payload []byte) []byte {
	key := [4]byte{1, 2, 3, 4}
	f := []byte{b0}
	switch n := len(payload); {
	case n > 65535:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	case n > 125:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|byte(n))
	}
	f = append(f, key[:]...)
	for i, c := range payload {
		f = append(f, c^key[i%4])
	}
	return f
}

// readWSFrame reads one unmasked server frame.
func readWSFrame(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatalf("reading frame: %v", err)
	}
	if hdr[1]&0x80 != 0 {
		t.Fatalf("server frame is masked")
	}
	n := int(hdr[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		_, _ = io.ReadFull(br, b[:])
		n = int(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, _ = io.ReadFull(br, b[:])
		n = int(binary.BigEndian.Uint64(b[:]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatalf("reading payload: %v", err)
	}
	return hdr[0], p
}

func TestEcho(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{}, "webpod1", testIPs))
	defer srv.Close()

	dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))

		key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
		fmt.Fprintf(conn, "GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n\r\n", key)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got, want := resp.Header.Get("Sec-WebSocket-Accept"), acceptKey(key); got != want {
			t.Fatalf("accept %q want %q", got, want)
		}
		return conn, br
	}

	t.Run("accept key", func(t *testing.T) {
		// Example from RFC 6455 section 1.3.
		if got := acceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
			t.Errorf("acceptKey = %q", got)
		}
	})

	t.Run("echo, ping, fragments, close", func(t *testing.T) {
		conn, br := dial(t)

		_, _ = conn.Write(wsFrame(0x81, []byte("hello")))
		if op, p := readWSFrame(t, br); op != 0x81 || string(p) != "hello" {
			t.Errorf("text echo: op %#x payload %q", op, p)
		}

		big := make([]byte, 70000)
		for i := range big {
			big[i] = byte(i)
		}
		_, _ = conn.Write(wsFrame(0x82, big))
		if op, p := readWSFrame(t, br); op != 0x82 || string(p) != string(big) {
			t.Errorf("binary echo: op %#x len %d", op, len(p))
		}

		_, _ = conn.Write(wsFrame(0x89, []byte("ping!")))
		if op, p := readWSFrame(t, br); op != 0x8a || string(p) != "ping!" {
			t.Errorf("pong: op %#x payload %q", op, p)
		}

		// Fragmented text with a ping in the middle.
		_, _ = conn.Write(wsFrame(0x01, []byte("frag")))
		_, _ = conn.Write(wsFrame(0x89, nil))
		_, _ = conn.Write(wsFrame(0x80, []byte("mented")))
		if op, _ := readWSFrame(t, br); op != 0x8a {
			t.Errorf("want pong first, got %#x", op)
		}
		if op, p := readWSFrame(t, br); op != 0x81 || string(p) != "fragmented" {
			t.Errorf("fragmented echo: op %#x payload %q", op, p)
		}

		_, _ = conn.Write(wsFrame(0x88, append(binary.BigEndian.AppendUint16(nil, 1000), "bye"...)))
		if op, p := readWSFrame(t, br); op != 0x88 || len(p) != 2 || binary.BigEndian.Uint16(p) != 1000 {
			t.Errorf("close reply: op %#x payload %v", op, p)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("connection still open after close")
		}
	})

	t.Run("protocol error", func(t *testing.T) {
		conn, br := dial(t)
		_, _ = conn.Write([]byte{0x81, 0x00}) // unmasked client frame
		op, p := readWSFrame(t, br)
		if op != 0x88 || binary.BigEndian.Uint16(p) != 1002 || string(p[2:]) != "bad MASK" {
			t.Errorf("close: op %#x payload %q", op, p)
		}
	})

	t.Run("bad handshakes", func(t *testing.T) {
		tests := []struct {
			method string
			header map[string]string
			want   int
		}{
			{"GET", nil, http.StatusBadRequest},
			{"GET", map[string]string{"Connection": "Upgrade"}, http.StatusUpgradeRequired},
			{"POST", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, http.StatusMethodNotAllowed},
			{"GET", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "8"}, http.StatusBadRequest},
			{"GET", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "short"}, http.StatusBadRequest},
		}
		for i, tt := range tests {
			req, _ := http.NewRequest(tt.method, srv.URL+"/echo", nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want || resp.Header.Get("Sec-Websocket-Version") != "13" ||
				string(body) != http.StatusText(tt.want)+"\n" {
				t.Errorf("case %d: %d %q %q, want %d", i, resp.StatusCode, resp.Header, body, tt.want)
			}
		}
	})
}

func TestRun(t *testing.T) {
	// Find a free port. Run listens on ":"+port, so the port may be taken
	// again in between; that is unlikely enough for a test.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{Port: port, Name: "runner"}) }()

	url := "http://127.0.0.1:" + port + "/"
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err = http.Get(url)
		if err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	hostname, _ := os.Hostname()
	lines := strings.Split(string(body), "\n")
	if lines[0] != "Name: runner" || lines[1] != "Hostname: "+hostname {
		t.Errorf("unexpected start of body: %q", body)
	}
	if !strings.Contains(string(body), "\nIP: 127.0.0.1\n") {
		t.Errorf("loopback address missing: %q", body)
	}
	if !strings.Contains(string(body), "\nRemoteAddr: 127.0.0.1:") {
		t.Errorf("RemoteAddr missing: %q", body)
	}

	resp, err = http.Get("http://127.0.0.1:" + port + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()

	// Cleartext HTTP/2 with prior knowledge (h2c), as recent whoami versions
	// accept.
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	defer h2c.CloseIdleConnections()
	resp, err = (&http.Client{Transport: h2c}).Get(url)
	if err != nil {
		t.Fatalf("h2c: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || !strings.Contains(string(body), "\nGET / HTTP/1.1\r\n") {
		t.Errorf("h2c: proto %s body %q", resp.Proto, body)
	}
	h2c.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}

	http.DefaultClient.CloseIdleConnections()
	if _, err := http.Get(url); err == nil {
		t.Error("server still answering after Run returned")
	}
}

func TestRunListenError(t *testing.T) {
	if err := Run(context.Background(), Config{Port: "not-a-port"}); err == nil {
		t.Fatal("Run with a bad port returned nil")
	}
}

func TestInterfaceIPs(t *testing.T) {
	ips, err := InterfaceIPs()
	if err != nil {
		t.Skipf("no interfaces: %v", err)
	}
	for _, ip := range ips {
		if ip.IsLoopback() {
			return
		}
	}
	t.Errorf("no loopback address in %v", ips)
}

func TestServeUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeUDP(ctx, pc, "pod-a") }()

	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, payload := range []string{"seq 1", "seq 2", ""} {
		if _, err := c.Write([]byte(payload)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no reply to %q: %v", payload, err)
		}
		want := "Hostname: pod-a\nRemoteAddr: " + c.LocalAddr().String() + "\n" + payload
		if got := string(buf[:n]); got != want {
			t.Errorf("reply to %q = %q, want %q", payload, got, want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeUDP after cancel = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeUDP did not return after its context ended")
	}
}
