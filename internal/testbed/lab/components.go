package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Lab is a lab on disk and in the kernel, addressed by its plan.
type Lab struct {
	Plan  Plan
	State State
	Log   func(format string, args ...any) // progress output; never nil after New
}

// New returns a handle on the lab described by p.
func New(p Plan, logf func(string, ...any)) *Lab {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Lab{Plan: p, State: State{Dir: p.Config.StateDir}, Log: logf}
}

// Cgroup returns the lab's cgroup, or the cgroup of one of its hosts' components.
func (l *Lab) Cgroup(parts ...string) (Cgroup, error) {
	cg, err := LabCgroup(l.Plan.Config.Name)
	if err != nil {
		return "", err
	}
	return cg.Child(parts...), nil
}

// startDetached starts spec as a long-lived lab process in cgroup <lab>/<host>/<component>, with output
// appended to the component's log. It does not wait: the process outlives the caller.
func (l *Lab) startDetached(host, component string, spec ExecSpec) error {
	cg, err := l.Cgroup(host, component)
	if err != nil {
		return err
	}
	if len(cg.Procs()) > 0 {
		return nil // already running
	}
	_ = cg.Remove() // a fresh cgroup per run (see agent: killed cgroups are never reused)
	fd, err := cg.Open()
	if err != nil {
		return fmt.Errorf("cgroup for %s/%s: %w", host, component, err)
	}
	defer fd.Close()
	logPath := l.State.LogFile(host, component)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	if spec.Env == nil {
		spec.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	}
	cmd, err := Command(l.Plan.Config.Self, spec, fd)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s on %s: %w", component, host, err)
	}
	go cmd.Wait() // reap it if it dies while we are still running
	return nil
}

func (l *Lab) bin(name string) string { return filepath.Join(l.Plan.Config.K8sBin, name) }

// startControlPlane starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler inside the
// control-plane node, as kubeadm's static pods do in kind, and waits until the apiserver is ready.
func (l *Lab) startControlPlane(ctx context.Context) error {
	c := l.Plan.Config
	cp := l.Plan.ControlPlane()
	pki := l.State.PKI()
	ns := cp.Name
	run := func(component string, argv ...string) error {
		return l.startDetached(ns, component, ExecSpec{NetNS: ns, Hostname: ns, Argv: argv})
	}
	t0 := time.Now()
	if err := run("etcd", l.bin("etcd"), "--name", ns, "--data-dir", l.State.EtcdDir(),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", ns+"=http://127.0.0.1:2380", "--listen-metrics-urls", "http://0.0.0.0:2381",
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	serviceCIDRs := joinPrefixes(c.ServiceCIDRs())
	podCIDRs := joinPrefixes(c.PodCIDRs())
	if err := run("kube-apiserver", l.bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", fmt.Sprintf("--secure-port=%d", apiserverPort),
		"--advertise-address="+cp.Addr.String(),
		"--tls-cert-file="+pki.APIServerCert(), "--tls-private-key-file="+pki.APIServerKey(),
		"--client-ca-file="+pki.CACert(),
		// the kubelet API on each node agent (docs/lab-kubelet.md): dial the InternalIP, verify the agent's
		// serving certificate against the lab CA, present the kubelet client certificate
		"--kubelet-client-certificate="+pki.KubeletClientCert(), "--kubelet-client-key="+pki.KubeletClientKey(),
		"--kubelet-certificate-authority="+pki.CACert(), "--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.SAPub(), "--service-account-signing-key-file="+pki.SAKey(),
		"--service-cluster-ip-range="+serviceCIDRs,
		"--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--enable-admission-plugins=NodeRestriction",
		"--profiling=false", "--v=1"); err != nil {
		return err
	}
	if err := l.waitAPIServer(ctx, 60*time.Second); err != nil {
		return err
	}
	l.Log("  kube-apiserver ready at %s (%.1fs)", l.Plan.APIServerURL(), time.Since(t0).Seconds())
	kcfg := l.State.InternalKubeconfig()
	kcm := []string{l.bin("kube-controller-manager"),
		"--kubeconfig=" + kcfg, "--authentication-kubeconfig=" + kcfg, "--authorization-kubeconfig=" + kcfg,
		"--bind-address=0.0.0.0", "--leader-elect=false", "--cluster-name=" + c.Name,
		"--allocate-node-cidrs=true", "--cluster-cidr=" + podCIDRs,
		"--service-cluster-ip-range=" + serviceCIDRs,
		"--cluster-signing-cert-file=" + pki.CACert(), "--cluster-signing-key-file=" + pki.CAKey(),
		"--root-ca-file=" + pki.CACert(), "--service-account-private-key-file=" + pki.SAKey(),
		"--use-service-account-credentials=true", "--controllers=*,bootstrapsigner,tokencleaner",
		"--configure-cloud-routes=false", "--v=1"}
	switch {
	case c.Dual():
		kcm = append(kcm, "--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64")
	case c.IPv6Only():
		kcm = append(kcm, "--node-cidr-mask-size=64")
	default:
		kcm = append(kcm, "--node-cidr-mask-size=24")
	}
	if err := run("kube-controller-manager", kcm...); err != nil {
		return err
	}
	return run("kube-scheduler", l.bin("kube-scheduler"),
		"--kubeconfig="+kcfg, "--authentication-kubeconfig="+kcfg, "--authorization-kubeconfig="+kcfg,
		"--bind-address=0.0.0.0", "--leader-elect=false", "--v=1")
}

// startAgent starts the node agent (the lab's kubelet) inside node.
func (l *Lab) startAgent(node Host) error {
	return l.startDetached(node.Name, "agent", ExecSpec{NetNS: node.Name, Hostname: node.Name,
		Argv: []string{l.Plan.Config.Self, "lab", "agent", "--state-dir", l.State.Dir, "--node", node.Name}})
}

// startAPIProxy starts the loopback bridge to the apiserver in the root namespace and writes the host
// kubeconfig once it listens.
func (l *Lab) startAPIProxy(ctx context.Context) error {
	_ = os.Remove(l.State.APIProxyAddrFile())
	if err := l.startDetached("host", "apiproxy", ExecSpec{
		Argv: []string{l.Plan.Config.Self, "lab", "apiproxy", "--state-dir", l.State.Dir}}); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(l.State.APIProxyAddrFile())
		if err == nil && len(b) > 0 {
			kc, err := l.State.PKI().Kubeconfig(l.Plan.Config.Name, "https://"+strings.TrimSpace(string(b)))
			if err != nil {
				return err
			}
			return os.WriteFile(l.State.Kubeconfig(), kc, 0o600)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("apiserver bridge did not start; see %s", l.State.LogFile("host", "apiproxy"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// adminTLS returns a TLS config with the lab's admin client certificate.
func (l *Lab) adminTLS() (*tls.Config, error) {
	pki := l.State.PKI()
	cert, err := tls.LoadX509KeyPair(pki.AdminCert(), pki.AdminKey())
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(pki.CACert())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// waitAPIServer polls /readyz from inside the control-plane node.
func (l *Lab) waitAPIServer(ctx context.Context, timeout time.Duration) error {
	tc, err := l.adminTLS()
	if err != nil {
		return err
	}
	dial := Dialer(l.Plan.ControlPlane().Name)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tc,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dial(ctx, network, fmt.Sprintf("127.0.0.1:%d", apiserverPort))
		}}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		resp, err := hc.Get("https://127.0.0.1/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after %s (%s); see %s", timeout, last,
				l.State.LogFile(l.Plan.ControlPlane().Name, "kube-apiserver"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
