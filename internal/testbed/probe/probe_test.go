package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHostname(t *testing.T) {
	for body, want := range map[string]string{
		"Hostname: webpod1\nIP: 127.0.0.1\n":  "webpod1",
		"IP: 10.0.0.1\r\nHostname: web-2\r\n": "web-2",
		"Hostname: two words\n":               "-",
		"Hostname:\n":                         "-",
		"<html>":                              "-",
	} {
		if got := hostname([]byte(body)); got != want {
			t.Errorf("hostname(%q) = %q, want %q", body, got, want)
		}
	}
}

// Each request's line says who answered or, in one word, why it failed: a server that hangs, one that
// resets, a closed port and a non-200 answer, all on loopback.
func TestRequestDetail(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "Hostname: web-1\n") }))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer bad.Close()
	hang, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	reset, err := net.Listen("tcp", "127.0.0.1:0") // closes with RST
	if err != nil {
		t.Fatal(err)
	}
	defer reset.Close()
	go func() {
		for {
			c, err := reset.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			_, _ = c.Read(make([]byte, 1024))
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String()
	closed.Close()

	for url, want := range map[string]string{
		ok.URL:                            "ok web-1",
		bad.URL:                           "fail status-503",
		"http://" + hang.Addr().String():  "fail timeout",
		"http://" + reset.Addr().String(): "fail reset",
		closedURL:                         "fail refused",
	} {
		var out strings.Builder
		err := Run(context.Background(), Config{URL: url, Every: time.Second, For: 300 * time.Millisecond, Timeout: 200 * time.Millisecond}, &out)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out.String())
		if len(f) != 5 || f[0] != "http" || f[3]+" "+f[4] != want {
			t.Errorf("%s: logged %q, want a line ending %q", url, out.String(), want)
		}
	}
	if got := Failure(errors.New("x")); got != "error" {
		t.Errorf("Failure(other) = %q", got)
	}
}
