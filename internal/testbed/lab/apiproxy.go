package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
)

// ServeAPIProxy makes the apiserver reachable from the root namespace without giving the root namespace
// any lab address or route: it listens on a free loopback port, records it for the host kubeconfig, and
// splices each connection to 127.0.0.1:6443 dialed from inside the control-plane node. TLS passes through
// untouched. It returns when ctx ends.
func (l *Lab) ServeAPIProxy(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := os.WriteFile(l.State.APIProxyAddrFile(), []byte(ln.Addr().String()), 0o644); err != nil {
		return err
	}
	slog.Info("apiserver bridge listening", "addr", ln.Addr(), "node", l.Plan.ControlPlane().Name)
	go func() { <-ctx.Done(); ln.Close() }()
	dial := Dialer(l.Plan.ControlPlane().Name)
	target := fmt.Sprintf("127.0.0.1:%d", apiserverPort)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			u, err := dial(ctx, "tcp", target)
			if err != nil {
				slog.Warn("apiserver bridge: dial failed", "node", l.Plan.ControlPlane().Name, "err", err)
				return
			}
			defer u.Close()
			splice(c, u)
		}()
	}
}

// splice copies both ways until either side closes.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}
