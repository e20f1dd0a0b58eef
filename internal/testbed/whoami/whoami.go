// Package whoami is a standard-library-only stand-in for the container
// image traefik/whoami (https://github.com/traefik/whoami), a tiny HTTP
// server that prints information about the host it runs on and the request
// it received. The lab maps the traefik/whoami image to this server, so it
// answers the way the real program does:
//
//   - "/" (and every path without a route of its own) prints an optional
//     "Name: <name>" line, "Hostname: <hostname>", one "IP: <addr>" line per
//     interface address, "RemoteAddr: <ip:port>", one "Certificate[i]
//     Subject: ..." line per client certificate on a TLS connection, then the
//     request as net/http's Request.Write serialises it: the request line
//     (always "... HTTP/1.1"), "Host:", "User-Agent:", the framing headers,
//     the remaining headers sorted by name, a blank line and the body. The
//     query parameter wait=<duration> delays the answer, and env=true
//     appends the process environment, one VAR=value per line.
//   - "/api" sends the same information as JSON (hostname, ip, headers, url,
//     host, method, name, remoteAddr and, with env=true, environ).
//   - "/health" replies to every method except POST with the current health
//     status code (200 at start). A POST whose body is a JSON integer sets
//     that code; any other body gets a 400.
//   - "/data?size=N&unit=kb|mb|gb|tb&attachment=bool" sends N bytes of
//     generated text ("|ABC...|"). It reproduces the real program's quirks:
//     the default size is 1, which gives an empty body, and with
//     attachment=true the body is one byte shorter.
//   - "/bench" always sends "1".
//   - "/echo" is a WebSocket echo server. The handshake, the error replies,
//     ping/pong and the close handshake follow gorilla/websocket, which the
//     real program uses.
//
// Flags and environment variables are the real ones: --port (default
// $WHOAMI_PORT_NUMBER, else 80), --name (default $WHOAMI_NAME), --verbose
// (one access-log line per request on stderr, in the format of the real
// program before it moved to OpenTelemetry), and --cert, --key and --cacert.
//
// One addition the real program lacks: --udp-port (default
// $WHOAMI_UDP_PORT_NUMBER, else off) also answers UDP datagrams on that port
// (ServeUDP), for the lab's benchmarks of UDP flows. Set it through the
// environment variable, which the real program ignores, so that a manifest
// using it still runs the real image.
//
// Not reproduced:
//   - TLS. --cert, --key and --cacert are accepted and ignored; Run always
//     serves plain HTTP/1.1 and cleartext HTTP/2 (h2c).
//   - The gRPC service (whoami.Whoami/Bench and /Whoami) in recent versions:
//     it needs protobuf and gRPC, which the standard library doesn't provide.
//   - The OpenTelemetry traces, metrics and structured logs of recent
//     versions, and the --allowed-origins flag (CORS headers on /api) that
//     one revision had.
//   - WebSocket compression. Like the real program, /echo doesn't offer
//     permessage-deflate. Unlike it, /echo closes the TCP connection once
//     the echo loop ends.
//   - The real program's state is global. Here each Handler keeps its own
//     /health status.
package whoami

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Config mirrors traefik/whoami's flags.
type Config struct {
	Port    string // --port, default $WHOAMI_PORT_NUMBER or "80"
	Name    string // --name, printed as "Name: ..." when set (default $WHOAMI_NAME)
	Verbose bool   // --verbose: log one access line per request
	UDPPort string // --udp-port (default $WHOAMI_UDP_PORT_NUMBER): also answer UDP here ("" = no UDP)
}

// ParseArgs parses traefik/whoami's command line. Pass the arguments without
// the program name (os.Args[1:]). getenv is read for WHOAMI_PORT_NUMBER and
// WHOAMI_NAME, which give the flag defaults. A nil getenv counts as an empty
// environment.
//
// As in the real program, flags use Go's flag syntax (-port 8080,
// --port=8080, --verbose, --verbose=false). --cert, --key and --cacert take a
// value that is ignored. Parsing stops at the first non-flag argument, and
// the rest is ignored. An unknown flag, a missing value or a bad boolean is
// an error. -h and --help give an error that wraps flag.ErrHelp.
func ParseArgs(args []string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}

	port := getenv("WHOAMI_PORT_NUMBER")
	if port == "" {
		port = "80"
	}

	cfg := Config{}
	var cert, key, ca string

	fs := flag.NewFlagSet("whoami", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&cfg.Verbose, "verbose", false, "Enable verbose logging")
	fs.StringVar(&cert, "cert", "", "give me a certificate")
	fs.StringVar(&key, "key", "", "give me a key")
	fs.StringVar(&ca, "cacert", "", "give me a CA chain, enforces mutual TLS")
	fs.StringVar(&cfg.Port, "port", port, "give me a port number")
	fs.StringVar(&cfg.Name, "name", getenv("WHOAMI_NAME"), "give me a name")
	fs.StringVar(&cfg.UDPPort, "udp-port", getenv("WHOAMI_UDP_PORT_NUMBER"), "also answer UDP datagrams on this port (ironlb's addition)")

	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("whoami: %w", err)
	}

	return cfg, nil
}

// Handler returns the http.Handler that serves whoami's endpoints. hostname
// is what "Hostname:" prints. ifaceAddrs is called on every "/" and "/api"
// request and gives the addresses printed as "IP:" lines. Like the real
// program, the handler ignores its error and prints whatever addresses it
// returned, skipping nil ones.
func Handler(cfg Config, hostname string, ifaceAddrs func() ([]net.IP, error)) http.Handler {
	s := &server{
		name:       cfg.Name,
		hostname:   hostname,
		ifaceAddrs: ifaceAddrs,
		health:     http.StatusOK,
	}

	// The same routes as the real program. The patterns have no trailing
	// slash, so they match only the exact path. Everything else, including
	// "/api/" or "/health/x", goes to "/".
	mux := http.NewServeMux()
	mux.Handle("/data", handle(s.data, cfg.Verbose))
	mux.Handle("/echo", handle(s.echo, cfg.Verbose))
	mux.Handle("/bench", handle(s.bench, cfg.Verbose))
	mux.Handle("/api", handle(s.api, cfg.Verbose))
	mux.Handle("/health", handle(s.healthCheck, cfg.Verbose))
	mux.Handle("/", handle(s.whoami, cfg.Verbose))

	return mux
}

// Run listens on ":"+cfg.Port and serves Handler until ctx ends. It uses
// os.Hostname and the machine's interface addresses. Once ctx ends, it stops
// accepting connections and waits up to 10 seconds for requests in flight.
// Run returns nil after a clean shutdown. It returns an error if it can't
// listen, if serving fails, or if shutdown times out.
func Run(ctx context.Context, cfg Config) error {
	hostname, _ := os.Hostname() // the real program ignores the error too

	srv := &http.Server{
		Addr:    ":" + cfg.Port,
		Handler: Handler(cfg, hostname, InterfaceIPs),
	}
	// Recent traefik/whoami versions accept HTTP/1.1 and cleartext HTTP/2
	// (h2c with prior knowledge) on the plain listener.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv.Protocols = protocols

	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return fmt.Errorf("whoami: %w", err)
	}

	log.Printf("Starting up on port %s", cfg.Port)

	if cfg.UDPPort != "" {
		pc, err := net.ListenPacket("udp", ":"+cfg.UDPPort)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("whoami: udp: %w", err)
		}
		defer pc.Close()
		go func() { _ = ServeUDP(ctx, pc, hostname) }()
		log.Printf("Answering UDP on port %s", cfg.UDPPort)
	}

	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()

	select {
	case err := <-errCh:
		return fmt.Errorf("whoami: serving: %w", err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()

	err = srv.Shutdown(shutdownCtx)
	if err != nil {
		_ = srv.Close()
		err = fmt.Errorf("whoami: shutdown: %w", err)
	}
	if serveErr := <-errCh; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("whoami: serving: %w", serveErr)
	}

	return err
}

// ServeUDP answers every datagram received on pc until ctx ends or pc is
// closed: the reply, sent back to the sender from the address it reached, is
// "Hostname: <hostname>\nRemoteAddr: <sender>\n" followed by the datagram's
// payload (the first 1024 bytes), so a client can tell which server answered
// which request and what source address the server saw. It returns nil once
// ctx has ended, else the read error that stopped it.
func ServeUDP(ctx context.Context, pc net.PacketConn, hostname string) error {
	stop := context.AfterFunc(ctx, func() { _ = pc.Close() })
	defer stop()
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("whoami: udp: %w", err)
		}
		payload := buf[:min(n, 1024)]
		reply := make([]byte, 0, 64+len(payload))
		reply = fmt.Appendf(reply, "Hostname: %s\nRemoteAddr: %s\n", hostname, from)
		reply = append(reply, payload...)
		_, _ = pc.WriteTo(reply, from) // a lost reply is the client's to notice
	}
}

// InterfaceIPs returns the addresses of all network interfaces, loopback
// included, without their masks. It goes through net.Interfaces and each
// interface's Addrs, as the real program does. That lists the addresses
// interface by interface (lo: 127.0.0.1, ::1, then eth0: ...).
// net.InterfaceAddrs would list all IPv4 addresses before all IPv6 ones. On
// error, it returns the addresses collected so far and the first error.
func InterfaceIPs() ([]net.IP, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}

	var (
		ips      []net.IP
		firstErr error
	)
	for _, iface := range ifaces {
		addrs, err := iface.Addrs()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		for _, addr := range addrs {
			var ip net.IP
			switch v := addr.(type) {
			case *net.IPNet:
				ip = v.IP
			case *net.IPAddr:
				ip = v.IP
			}
			if ip != nil {
				ips = append(ips, ip)
			}
		}
	}

	return ips, firstErr
}

// server holds the state shared by the endpoints of one Handler.
type server struct {
	name       string
	hostname   string
	ifaceAddrs func() ([]net.IP, error)

	mu     sync.RWMutex
	health int // status code that /health returns
}

// stdout receives what the real program prints with fmt.Printf (health
// updates and received WebSocket messages).
var stdout io.Writer = os.Stdout

// handle adds the access log of --verbose, in the real program's format,
// written after the request is served.
func handle(next http.HandlerFunc, verbose bool) http.Handler {
	if !verbose {
		return next
	}

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next(w, r)

		// <remote_IP_address> - [<timestamp>] "<request_method> <request_path> <request_protocol>" -
		log.Printf("%s - - [%s] \"%s %s %s\" - -", r.RemoteAddr, time.Now().Format("02/Jan/2006:15:04:05 -0700"), r.Method, r.URL.Path, r.Proto)
	})
}

// ips returns the interface addresses as strings. Like the real program, it
// ignores errors and skips nil addresses.
func (s *server) ips() []string {
	if s.ifaceAddrs == nil {
		return nil
	}

	addrs, _ := s.ifaceAddrs()

	var ips []string
	for _, ip := range addrs {
		if ip != nil {
			ips = append(ips, ip.String())
		}
	}

	return ips
}

// whoami serves "/".
func (s *server) whoami(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()

	if wait := query.Get("wait"); wait != "" {
		if d, err := time.ParseDuration(wait); err == nil {
			sleep(r.Context(), d)
		}
	}

	if s.name != "" {
		_, _ = fmt.Fprintln(w, "Name:", s.name)
	}

	_, _ = fmt.Fprintln(w, "Hostname:", s.hostname)

	for _, ip := range s.ips() {
		_, _ = fmt.Fprintln(w, "IP:", ip)
	}

	_, _ = fmt.Fprintln(w, "RemoteAddr:", r.RemoteAddr)

	if r.TLS != nil {
		for i, cert := range r.TLS.PeerCertificates {
			_, _ = fmt.Fprintf(w, "Certificate[%d] Subject: %v\n", i, cert.Subject)
		}
	}

	// Request.Write writes the request as a client would send it: the
	// request line with HTTP/1.1, Host, User-Agent (Go-http-client/1.1 if
	// the request had none), Content-Length or Transfer-Encoding, the other
	// headers sorted by name, a blank line and the body. Lines end in CRLF.
	// The real program calls the same function, so the output matches byte
	// for byte.
	if err := r.Write(w); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}

	if ok, _ := strconv.ParseBool(query.Get("env")); ok {
		for _, env := range os.Environ() {
			_, _ = fmt.Fprintln(w, env)
		}
	}
}

// sleep waits for d, or until ctx ends (the client went away), whichever
// comes first.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()

	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// apiData is the JSON document of "/api", with the real program's field
// names and order.
type apiData struct {
	Hostname   string            `json:"hostname,omitempty"`
	IP         []string          `json:"ip,omitempty"`
	Headers    http.Header       `json:"headers,omitempty"`
	URL        string            `json:"url,omitempty"`
	Host       string            `json:"host,omitempty"`
	Method     string            `json:"method,omitempty"`
	Name       string            `json:"name,omitempty"`
	RemoteAddr string            `json:"remoteAddr,omitempty"`
	Environ    map[string]string `json:"environ,omitempty"`
}

// api serves "/api".
func (s *server) api(w http.ResponseWriter, r *http.Request) {
	environ := make(map[string]string)
	if ok, _ := strconv.ParseBool(r.URL.Query().Get("env")); ok {
		for _, env := range os.Environ() {
			k, v, _ := strings.Cut(env, "=")
			environ[k] = v
		}
	}

	data := apiData{
		Hostname:   s.hostname,
		IP:         s.ips(),
		Headers:    r.Header,
		URL:        r.URL.RequestURI(),
		Host:       r.Host,
		Method:     r.Method,
		Name:       s.name,
		RemoteAddr: r.RemoteAddr,
		Environ:    environ,
	}

	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
}

// healthCheck serves "/health". It sends no body. As in the real program,
// a POSTed code that isn't a valid HTTP status (below 100 or above 999) is
// stored, and later requests then make net/http panic in WriteHeader. The
// http.Server recovers the panic and drops the connection.
func (s *server) healthCheck(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var code int
		if err := json.NewDecoder(r.Body).Decode(&code); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}

		_, _ = fmt.Fprintf(stdout, "Update health check status code [%d]\n", code)

		s.mu.Lock()
		s.health = code
		s.mu.Unlock()
		return
	}

	s.mu.RLock()
	code := s.health
	s.mu.RUnlock()

	w.WriteHeader(code)
}

// bench serves "/bench".
func (s *server) bench(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Connection", "keep-alive")
	w.Header().Set("Content-Type", "text/plain")
	_, _ = fmt.Fprint(w, "1")
}

// Units of /data.
const (
	kb int64 = 1 << (10 * (iota + 1))
	mb
	gb
	tb
)

// data serves "/data".
func (s *server) data(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()

	size, err := strconv.ParseInt(query.Get("size"), 10, 64)
	if err != nil {
		size = 1
	}
	if size < 0 {
		size = 0
	}

	switch strings.ToLower(query.Get("unit")) {
	case "kb":
		size *= kb
	case "mb":
		size *= mb
	case "gb":
		size *= gb
	case "tb":
		size *= tb
	}

	attachment, _ := strconv.ParseBool(query.Get("attachment"))

	content := &contentReader{size: size}

	if attachment {
		w.Header().Set("Content-Disposition", "Attachment")
		http.ServeContent(w, r, "data.txt", time.Now(), content)
		return
	}

	if _, err := io.Copy(w, content); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
}

// contentCharset is the text that /data repeats.
const contentCharset = "-ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// contentReader generates the body of /data the same way the real program
// does, including its quirks. Byte i is contentCharset[i%27], and the first
// byte is '|'. The byte where a Read call reaches position size-1 becomes
// '|', and reading stops there. Usually that gives "|ABC...|" of size bytes.
// A size of 1 gives nothing, and the body loses a byte when a Read buffer
// ends exactly at position size-1. Seeking to the end reports size-1, so
// http.ServeContent (attachment=true) sends size-1 bytes.
type contentReader struct {
	size int64
	cur  int64
}

// Read implements io.Reader.
func (c *contentReader) Read(p []byte) (int, error) {
	last := c.size - 1
	if c.cur >= last {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}

	n := 0
	if c.cur == 0 {
		p[n] = '|'
		c.cur++
		n++
	}

	for n < len(p) && c.cur <= last {
		p[n] = contentCharset[c.cur%int64(len(contentCharset))]
		c.cur++
		n++
	}

	if c.cur >= last {
		p[n-1] = '|'
	}

	return n, nil
}

// Seek implements io.Seeker.
func (c *contentReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += c.cur
	case io.SeekEnd:
		offset += c.size - 1
	default:
		return 0, errors.New("Seek: invalid whence")
	}
	if offset < 0 {
		return 0, errors.New("Seek: invalid offset")
	}
	c.cur = offset

	return offset, nil
}

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xa
)

// Close codes used by /echo.
const (
	closeProtocolError    = 1002
	closeNoStatusReceived = 1005
)

// echo serves "/echo". It returns every text or binary message to the
// sender with the same type, and prints it to stdout as "Received b:" and
// the bytes in decimal.
func (s *server) echo(w http.ResponseWriter, r *http.Request) {
	conn, err := upgradeWebSocket(w, r)
	if err != nil {
		log.Println(err)
		return
	}
	defer conn.close()

	for {
		op, msg, err := conn.readMessage()
		if err != nil {
			return
		}

		printBinary(msg)

		if err := conn.writeFrame(op, msg); err != nil {
			return
		}
	}
}

// printBinary prints a message the way the real program does.
func printBinary(b []byte) {
	var sb strings.Builder
	sb.WriteString("Received b:")
	for _, c := range b {
		sb.WriteString(strconv.Itoa(int(c)))
		sb.WriteByte(',')
	}
	sb.WriteByte('\n')
	_, _ = io.WriteString(stdout, sb.String())
}

// wsConn is the server side of a WebSocket connection.
type wsConn struct {
	conn net.Conn
	br   *bufio.Reader

	wmu       sync.Mutex
	closeSent bool
}

// upgradeWebSocket completes the WebSocket opening handshake, with the
// checks, order and error replies of gorilla/websocket's Upgrader. The
// real program doesn't check the Origin header and offers no subprotocol or
// compression.
func upgradeWebSocket(w http.ResponseWriter, r *http.Request) (*wsConn, error) {
	const badHandshake = "websocket: the client is not using the websocket protocol: "

	fail := func(status int, reason string) (*wsConn, error) {
		w.Header().Set("Sec-Websocket-Version", "13")
		http.Error(w, http.StatusText(status), status)
		return nil, errors.New(reason)
	}

	if !headerHasToken(r.Header, "Connection", "upgrade") {
		return fail(http.StatusBadRequest, badHandshake+"'upgrade' token not found in 'Connection' header")
	}
	if !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		return fail(http.StatusUpgradeRequired, badHandshake+"'websocket' token not found in 'Upgrade' header")
	}
	if r.Method != http.MethodGet {
		return fail(http.StatusMethodNotAllowed, badHandshake+"request method is not GET")
	}
	if !headerHasToken(r.Header, "Sec-Websocket-Version", "13") {
		return fail(http.StatusBadRequest, "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header")
	}

	challenge := r.Header.Get("Sec-Websocket-Key")
	if decoded, err := base64.StdEncoding.DecodeString(challenge); challenge == "" || err != nil || len(decoded) != 16 {
		return fail(http.StatusBadRequest, "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length")
	}

	netConn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fail(http.StatusInternalServerError, "websocket: hijack: "+err.Error())
	}

	// Clear the deadlines the HTTP server set.
	if err := netConn.SetDeadline(time.Time{}); err != nil {
		_ = netConn.Close()
		return nil, err
	}

	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		acceptKey(challenge) + "\r\n\r\n"
	if _, err := io.WriteString(netConn, resp); err != nil {
		_ = netConn.Close()
		return nil, err
	}

	// brw.Reader keeps whatever the client sent after the handshake.
	return &wsConn{conn: netConn, br: brw.Reader}, nil
}

// acceptKey computes Sec-WebSocket-Accept for a Sec-WebSocket-Key.
func acceptKey(challenge string) string {
	h := sha1.New()
	h.Write([]byte(challenge))
	h.Write([]byte("258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// headerHasToken reports whether a comma-separated header contains token,
// ignoring case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h[name] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// readMessage returns the next text or binary message. It reassembles
// fragmented messages and answers control frames along the way: a ping gets
// a pong with the same data, and a close gets a close with the same code.
// Protocol violations are answered with a close frame (1002) naming them,
// as gorilla/websocket does. Any error is final.
func (c *wsConn) readMessage() (int, []byte, error) {
	msgOp := -1 // opcode of the message being assembled, -1 if none
	var msg bytes.Buffer

	for {
		var hdr [2]byte
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			return 0, nil, err
		}

		op := int(hdr[0] & 0x0f)
		fin := hdr[0]&0x80 != 0
		masked := hdr[1]&0x80 != 0
		length := int64(hdr[1] & 0x7f)

		var problems []string
		if hdr[0]&0x40 != 0 {
			problems = append(problems, "RSV1 set")
		}
		if hdr[0]&0x20 != 0 {
			problems = append(problems, "RSV2 set")
		}
		if hdr[0]&0x10 != 0 {
			problems = append(problems, "RSV3 set")
		}
		switch op {
		case opClose, opPing, opPong:
			if length > 125 {
				problems = append(problems, "len > 125 for control")
			}
			if !fin {
				problems = append(problems, "FIN not set on control")
			}
		case opText, opBinary:
			if msgOp != -1 {
				problems = append(problems, "data before FIN")
			}
		case opContinuation:
			if msgOp == -1 {
				problems = append(problems, "continuation after FIN")
			}
		default:
			problems = append(problems, "bad opcode "+strconv.Itoa(op))
		}
		if !masked {
			problems = append(problems, "bad MASK")
		}
		if len(problems) > 0 {
			return 0, nil, c.protocolError(strings.Join(problems, ", "))
		}

		switch length {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return 0, nil, err
			}
			length = int64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return 0, nil, err
			}
			length = int64(binary.BigEndian.Uint64(b[:]))
			if length < 0 {
				return 0, nil, errors.New("websocket: read limit exceeded")
			}
		}

		var maskKey [4]byte
		if _, err := io.ReadFull(c.br, maskKey[:]); err != nil {
			return 0, nil, err
		}

		if op == opText || op == opBinary || op == opContinuation {
			if op != opContinuation {
				msgOp = op
			}
			// CopyN grows the buffer as data arrives, so a frame that
			// announces a huge length can't make us allocate it up front.
			start := msg.Len()
			if _, err := io.CopyN(&msg, c.br, length); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return 0, nil, err
			}
			unmask(maskKey, msg.Bytes()[start:])
			if fin {
				return msgOp, msg.Bytes(), nil
			}
			continue
		}

		payload := make([]byte, length) // control frames: at most 125 bytes
		if _, err := io.ReadFull(c.br, payload); err != nil {
			return 0, nil, err
		}
		unmask(maskKey, payload)

		switch op {
		case opPing:
			_ = c.writeFrame(opPong, payload)
		case opPong:
		case opClose:
			code := closeNoStatusReceived
			text := ""
			if len(payload) >= 2 {
				code = int(binary.BigEndian.Uint16(payload))
				if !validReceivedCloseCode(code) {
					return 0, nil, c.protocolError("bad close code " + strconv.Itoa(code))
				}
				text = string(payload[2:])
				if !utf8.ValidString(text) {
					return 0, nil, c.protocolError("invalid utf8 payload in close frame")
				}
			}
			_ = c.writeFrame(opClose, closePayload(code, ""))
			return 0, nil, fmt.Errorf("websocket: close %d %s", code, text)
		}
	}
}

// validReceivedCloseCode reports whether a peer may send close code code.
func validReceivedCloseCode(code int) bool {
	switch code {
	case 1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013:
		return true
	}
	return code >= 3000 && code <= 4999
}

// closePayload builds the payload of a close frame. Code 1005 (no status)
// gives an empty payload.
func closePayload(code int, text string) []byte {
	if code == closeNoStatusReceived {
		return []byte{}
	}
	b := make([]byte, 2+len(text))
	binary.BigEndian.PutUint16(b, uint16(code))
	copy(b[2:], text)
	return b
}

// protocolError sends a close frame (1002) with the problem, cut to the
// 125 bytes a control frame can carry, and returns it as an error.
func (c *wsConn) protocolError(msg string) error {
	p := closePayload(closeProtocolError, msg)
	if len(p) > 125 {
		p = p[:125]
	}
	_ = c.writeFrame(opClose, p)
	return errors.New("websocket: " + msg)
}

// unmask XORs b with the client's masking key.
func unmask(key [4]byte, b []byte) {
	for i := range b {
		b[i] ^= key[i%4]
	}
}

// writeFrame sends one unmasked, final frame (servers don't mask). Nothing
// can be sent after a close frame.
func (c *wsConn) writeFrame(op int, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()

	if c.closeSent {
		return errors.New("websocket: close sent")
	}
	if op == opClose {
		c.closeSent = true
		_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	}

	frame := make([]byte, 0, 10+len(payload))
	frame = append(frame, 0x80|byte(op))
	switch n := len(payload); {
	case n >= 65536:
		frame = append(frame, 127)
		frame = binary.BigEndian.AppendUint64(frame, uint64(n))
	case n > 125:
		frame = append(frame, 126)
		frame = binary.BigEndian.AppendUint16(frame, uint16(n))
	default:
		frame = append(frame, byte(n))
	}
	frame = append(frame, payload...)

	_, err := c.conn.Write(frame)
	return err
}

// close closes the TCP connection.
func (c *wsConn) close() {
	_ = c.conn.Close()
}
