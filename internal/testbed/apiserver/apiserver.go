// Package apiserver runs a real etcd and kube-apiserver on loopback, the way the lab starts them but
// without namespaces: both listen on 127.0.0.1 only. It needs the lab's Kubernetes binaries
// (hack/k8s-binaries.sh). `ironlb bench proxy-scale` launches one with Launch; tests use testenv.Start,
// which launches one for a test and stops it at the test's end. It imports no testing, so the ironlb
// binary can link it.
package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// Env is a running API server.
type Env struct {
	Config     *rest.Config
	Kubeconfig string // path of an admin kubeconfig
	URL        string
	Bin        string // the Kubernetes binaries directory
	stop       func()
}

// pickPort picks a port for etcd and the apiserver; a test replaces it to make a clash.
var pickPort = freePort

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// BinDir is the Kubernetes binaries directory: $IRONLB_K8S_BIN, or the lab's cache.
func BinDir() string {
	if bin := os.Getenv("IRONLB_K8S_BIN"); bin != "" {
		return bin
	}
	return lab.DefaultK8sBin()
}

// Launch runs etcd and kube-apiserver from the binaries in bin, with their data, certificates and
// logs under dir, and waits until the apiserver is ready (at most a minute). The caller must call
// Stop; on error nothing is left running. It is testenv.Start for programs (the benchmarks) that are
// not tests.
//
// The ports are picked free and then handed to etcd and kube-apiserver, so another process may take
// one in between (a test package running beside this one, or any outgoing connection: the picked ports
// are in the ephemeral range). Such a clash shows in their logs as "address already in use"; Launch
// then starts both again on other ports, up to three times. (CI once lost a test to it: etcd could not
// bind its port, and the apiserver waited a minute for an etcd that was not there.)
func Launch(bin, dir string) (e *Env, err error) {
	pki := lab.PKI{Dir: filepath.Join(dir, "pki")}
	if err := pki.Generate([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		e, err = launchOnce(bin, dir, pki, attempt)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == 3 {
			return e, err
		}
	}
}

// errPortTaken is a launch that failed because a picked port was taken before etcd or the apiserver
// bound it.
var errPortTaken = errors.New("a port picked for etcd or kube-apiserver was taken before it bound it")

func launchOnce(bin, dir string, pki lab.PKI, attempt int) (e *Env, err error) {
	etcdClient, _ := pickPort()
	etcdPeer, _ := pickPort()
	apiPort, _ := pickPort()
	ctx, cancel := context.WithCancel(context.Background())
	var cmds []*exec.Cmd
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			for i := len(cmds) - 1; i >= 0; i-- {
				_ = cmds[i].Wait()
			}
		})
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	start := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting %s: %w", name, err)
		}
		cmds = append(cmds, cmd)
		return nil
	}
	etcdData := filepath.Join(dir, "etcd")
	if attempt > 1 {
		etcdData = fmt.Sprintf("%s-%d", etcdData, attempt)
	}
	if err := start("etcd", "--data-dir", etcdData,
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return nil, err
	}
	if err := start("kube-apiserver",
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort), "--advertise-address=127.0.0.1",
		"--tls-cert-file="+pki.APIServerCert(), "--tls-private-key-file="+pki.APIServerKey(),
		"--client-ca-file="+pki.CACert(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.SAPub(), "--service-account-signing-key-file="+pki.SAKey(),
		"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112", "--authorization-mode=RBAC",
		"--endpoint-reconciler-type=none", "--profiling=false"); err != nil {
		return nil, err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	kc, err := pki.Kubeconfig("testenv", url)
	if err != nil {
		return nil, err
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kcPath)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := hc.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		for _, name := range []string{"etcd", "kube-apiserver"} {
			if b, _ := os.ReadFile(filepath.Join(dir, name+".log")); bytes.Contains(b, []byte("address already in use")) {
				return nil, fmt.Errorf("attempt %d: %s: %w\n%s", attempt, name, errPortTaken, tail(string(b), 1000))
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))
			eb, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			return nil, fmt.Errorf("kube-apiserver not ready after 60s: %v\n%s\netcd's log:\n%s", err, tail(string(b), 2000), tail(string(eb), 1000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &Env{Config: cfg, Kubeconfig: kcPath, URL: url, Bin: bin, stop: stop}, nil
}

// Stop ends the apiserver and etcd (a test's stop at its end anyway). It may be called more than once.
func (e *Env) Stop() { e.stop() }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Kubectl runs the built kubectl against the env.
func (e *Env) Kubectl(args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(e.Bin, "kubectl"), append([]string{"--kubeconfig", e.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
