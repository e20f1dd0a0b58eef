// Package proxy is `ironlb proxy`: kube-proxy's job on one node, on nftables. Informers on
// Services, EndpointSlices and Nodes only poke one sync loop; the loop converts the objects into
// a model (internal/proxy/convert), has nftrules build one transaction per family from it,
// incremental unless it is the first sync, a periodic resync or the retry of a failure, and has
// nftapply run it. After each sync it flushes stale UDP conntrack entries (conntrack) and updates
// the health-check node ports of Services with externalTrafficPolicy Local (healthcheck).
//
// Beyond kube-proxy, the proxy probes every other node with ICMP echoes (the speaker's echo
// detector, internal/liveness) and stops choosing endpoints on a node that stops
// answering, within tens of milliseconds instead of the 40-50 s before Kubernetes marks the node
// NotReady; it takes them back as soon as the node answers again.
//
//	informers ──poke──▶ run loop ──▶ convert ──▶ nftrules ──▶ nftapply (one netlink batch)
//	echo detector ─poke─┘               │
//	                                    ├──▶ dsrapply (the DSR table, also over netlink;
//	                                    │    policy rules and routes)
//	                                    ├──▶ conntrack (stale UDP flows, over netlink)
//	                                    └──▶ health-check node ports, /healthz
//
// Nothing here runs nft or conntrack(8): the proxy's image carries neither.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/kube"
	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/proxy/conntrack"
	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/healthcheck"
	"github.com/ironlb/ironlb/internal/proxy/nftapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// Config is what `ironlb proxy` flags set. Durations of zero take the defaults noted.
type Config struct {
	Node       string // this node's name ($NODE_NAME); required
	Kubeconfig string // "" = in-cluster
	// APIServer overrides the apiserver address of the kubeconfig or in-cluster config
	// (kube-proxy's --master): the in-cluster address is a ClusterIP, which this proxy programs.
	APIServer string

	ClusterCIDRs      []string // pod networks; empty: this node's spec.podCIDRs
	NodePortAddresses []string // "primary", "all" or CIDRs; empty: primary
	// BindAddress, if a specific address, is the node's primary address of its family (kube-proxy's
	// bindAddress); "" or 0.0.0.0: the node's InternalIP.
	BindAddress string
	// Conntrack are the conntrack sysctls to set at start (kube-proxy's conntrack section; unset
	// fields change nothing).
	Conntrack     kubeproxyv1alpha1.KubeProxyConntrackConfiguration
	IPFamilies    string // "auto" (the node's InternalIP families), "ipv4", "ipv6" or "dual"
	MasqueradeAll bool
	MasqueradeBit int // 0-31; the mark bit that requests SNAT (default 14)

	SyncPeriod     time.Duration // full resync (default 1h)
	MinSyncPeriod  time.Duration // least time between syncs
	HealthzTimeout time.Duration // a change pending longer makes /healthz fail (default 60s)

	HealthzAddr string // kube-proxy's health server (/healthz, /livez); "" disables
	MetricsAddr string // Prometheus metrics; "" disables
	// MetricsSecure serves MetricsAddr over HTTPS to clients the apiserver authorizes for get on
	// /metrics only (kube.ServeSecureMetrics, as the controller and the speaker); false serves plain
	// HTTP to anyone (bind it to 127.0.0.1).
	MetricsSecure bool

	ConntrackCleanup bool // flush stale UDP conntrack entries (over netlink)

	NodeLiveness bool          // run the echo detector and avoid endpoints on dead nodes
	EchoInterval time.Duration // echo probe interval
	EchoBurst    time.Duration // echo probe interval while an answer is overdue
	EchoTimeout  time.Duration // how long a probe may wait for its answer
	EchoMisses   int           // unanswered probes before a node is dead

	// ExternalMode is the default way load-balancer and external-IP traffic reaches the pods:
	// "snat" (as kube-proxy; also "") or "dsr" (direct server return). Services override it with
	// the annotation ironlb.io/external-mode.
	ExternalMode string

	// ProcSys is where the node's sysctls are ("" = /proc/sys): the DSR path's and the conntrack
	// settings of --config are written under it. A container that is not privileged has /proc/sys
	// read-only (containerd, CRI-O and the lab's runtime mount it so), so the chart mounts the
	// host's /proc/sys/net at /host/proc/sys/net and passes /host/proc/sys, as Cilium does, rather
	// than running the proxy privileged as kube-proxy is.
	ProcSys string

	Cleanup  bool   // delete ironlb's tables and exit
	LogLevel string // debug, info, warn or error; used when Logger is nil
	// Logger receives the proxy's logs (nil: a text logger to stderr at LogLevel). The command line
	// passes the one it builds from --log-level and --log-format.
	Logger *slog.Logger
}

func (c *Config) procSys() string {
	if c.ProcSys == "" {
		return "/proc/sys"
	}
	return c.ProcSys
}

// readOnlyHint says what to do when a sysctl could not be written because /proc/sys is read-only
// (a container that is not privileged), and nothing for other errors.
func readOnlyHint(err error) string {
	if errors.Is(err, unix.EROFS) {
		return " (the container's /proc/sys is read-only: mount the host's /proc/sys/net at /host/proc/sys/net and pass --proc-sys=/host/proc/sys, as the chart does)"
	}
	return ""
}

func (c *Config) nodeConfig() (convert.NodeConfig, error) {
	nc := convert.NodeConfig{Name: c.Node}
	var err error
	if nc.NodePorts, err = convert.ParseNodePorts(c.NodePortAddresses); err != nil {
		return nc, fmt.Errorf("--nodeport-addresses: %w", err)
	}
	if c.BindAddress != "" {
		if nc.BindAddress, err = netip.ParseAddr(c.BindAddress); err != nil {
			return nc, fmt.Errorf("--bind-address: %w", err)
		}
	}
	if nc.ClusterCIDRs, err = convert.ParsePrefixes(c.ClusterCIDRs); err != nil {
		return nc, fmt.Errorf("--cluster-cidr: %w", err)
	}
	return nc, nil
}

// Run runs the proxy until ctx ends. The rules stay in place when it returns (as kube-proxy's
// do), so a restart does not interrupt traffic; --cleanup removes them. So do the direct server
// return table and its policy routing: either without the other would misroute DSR flows.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		var level slog.Level
		if err := level.UnmarshalText([]byte(cmp.Or(cfg.LogLevel, "info"))); err != nil {
			return fmt.Errorf("--log-level: %w", err)
		}
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	log = log.With("component", "proxy", "node", cfg.Node)
	if cfg.Cleanup {
		return cleanup(ctx, log)
	}
	if cfg.Node == "" {
		return errors.New("proxy: --node (or $NODE_NAME) is required")
	}
	nodeCfg, err := cfg.nodeConfig()
	if err != nil {
		return err
	}
	if cfg.MasqueradeBit < 0 || cfg.MasqueradeBit > 31 {
		return fmt.Errorf("--masquerade-bit %d is not 0-31", cfg.MasqueradeBit)
	}
	if nftrules.DSRMarkMask&(1<<cfg.MasqueradeBit) != 0 {
		return fmt.Errorf("--masquerade-bit %d is one of the direct-server-return mark bits (%#x)", cfg.MasqueradeBit, nftrules.DSRMarkMask)
	}
	extMode := nftrules.ExternalSNAT
	if cfg.ExternalMode != "" {
		if extMode, err = nftrules.ParseExternalMode(cfg.ExternalMode); err != nil {
			return fmt.Errorf("--external-mode: %w", err)
		}
	}
	if set, hashsize := conntrack.Sysctls(cfg.Conntrack, runtime.NumCPU()); len(set) > 0 || hashsize > 0 {
		if err := conntrack.WriteSysctls(filepath.Join(cfg.procSys(), "net/netfilter"), "/sys/module/nf_conntrack/parameters/hashsize", set, hashsize); err != nil {
			return fmt.Errorf("conntrack settings of the configuration: %w%s", err, readOnlyHint(err))
		}
		log.Info("conntrack settings applied", "sysctls", set, "hashsize", hashsize)
	}
	rc, err := kube.RESTConfig(cfg.Kubeconfig, "ironlb-proxy/"+cfg.Node, 50, 100)
	if err != nil {
		return err
	}
	if cfg.APIServer != "" {
		rc.Host = cfg.APIServer
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	// Every node: the echo detector probes them, and direct server return (which any Service may
	// ask for by annotation) routes to their InternalIPs.
	// The Service networks come from the ServiceCIDR objects, as kube-proxy's; an older apiserver
	// (or a role without them) leaves traffic to unallocated ClusterIPs alone.
	cidrsOK, err := serviceCIDRsServed(ctx, cs)
	if !cidrsOK {
		log.Warn("ServiceCIDR objects not readable: traffic to unallocated ClusterIPs will not be dropped", "err", err)
	}
	src := newInformerSource(cs, cfg.Node, true, cidrsOK)
	p := newProxier(loopConfig{
		node:          nodeCfg,
		syncPeriod:    cmp.Or(cfg.SyncPeriod, time.Hour),
		minSyncPeriod: cfg.MinSyncPeriod,
		retryMax:      30 * time.Second,
		addrRefresh:   30 * time.Second,
		healthTimeout: cfg.HealthzTimeout,
	}, log, src, nil, m)
	p.localAddrs = interfaceAddrs
	src.onSlice(p.sliceSeen)
	src.onEvents(p.serviceEvent, p.sliceEvent) // before onChange: a change is counted before its sync
	src.onChange(p.pokeService, p.poke)

	var wg sync.WaitGroup
	defer wg.Wait()
	// Servers and detectors stop when Run returns, after the informers.
	ioctx, stopIO := context.WithCancel(context.Background())
	defer stopIO()
	if cfg.HealthzAddr != "" {
		if err := serve(ioctx, &wg, cfg.HealthzAddr, m.kube.countCodes(p.health.Handler()), log); err != nil {
			return fmt.Errorf("--healthz-bind-address: %w", err)
		}
	}
	var auth *kube.Authorizer
	if cfg.MetricsSecure {
		auth = kube.NewAuthorizer(cs)
	}
	if err := kube.ServeSecureMetrics(ioctx, cfg.MetricsAddr, auth, reg, log); err != nil {
		return err
	}

	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	defer b.Shutdown()
	p.rec = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ironlb-proxy", Host: cfg.Node})

	ictx, stopInformers := context.WithCancel(ctx)
	defer src.shutdown()
	defer stopInformers() // before shutdown, which waits for them
	if !src.start(ictx) {
		return nil
	}
	self := waitNode(ctx, src, cfg.Node, log)
	fams, err := families(cfg.IPFamilies, self, nodeCfg)
	if err != nil {
		return err
	}
	for _, f := range fams {
		s, err := nftapply.NewKernel(nftrules.Config{Family: f, MasqueradeMark: 1 << cfg.MasqueradeBit, MasqueradeAll: cfg.MasqueradeAll,
			SkipMark: nftrules.DSRMarkMask})
		if err != nil {
			return err
		}
		defer s.Close()
		if st := s.Stats(); st.NFT != nil {
			log.Info("no nft: every sync goes over netlink", "family", f, "why", st.NFT)
		}
		p.fams = append(p.fams, family{name: f, s: s})
		m.syncErrors.WithLabelValues(string(f)) // at 0 from the start
		m.kube.addFamily(f)
	}
	var dsr *dsrapply.Applier
	if slices.Contains(fams, knftables.IPv4Family) {
		// The DSR table is written over netlink (dsrapply), like the main tables: no nft needed.
		// If its writer cannot be made (no netlink socket), direct server return is off, unless it
		// is the default external mode, which cannot do without it.
		a, err := dsrapply.NewKernel(cfg.procSys())
		switch {
		case err == nil:
			dsr = a
		case extMode == nftrules.ExternalDSR:
			return fmt.Errorf("--external-mode=dsr: %w", err)
		default:
			log.Warn("direct server return off: Services asking for it stay snat", "err", err)
		}
	}
	if dsr != nil {
		p.dsr, p.dsrDefault = dsr, extMode
		// A link set down takes the DSR routes through it along; sync at once when it is back.
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dsrapply.WatchLinks(ioctx, nil, dsr.RouteLinks, p.linkUp); err != nil && ioctx.Err() == nil {
				log.Warn("direct server return: links not watched; a link set down and up again gets its routes back at the next sync", "err", err)
			}
		}()
		// Publish this node's MACs for the other nodes' loop guard (any Service may ask for DSR).
		if h, err := netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
			log.Warn("this node's MACs not published: other nodes' DSR loop guard will not know it", "err", err)
		} else {
			pub := &macPublisher{node: cfg.Node, src: src, nodes: cs.CoreV1().Nodes(), period: 30 * time.Second,
				local: func(ips []netip.Addr) ([]nftrules.EtherAddr, error) { return dsrapply.LocalMACs(h, ips) }, log: log}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer h.Close()
				_ = pub.Run(ioctx)
			}()
		}
	} else if extMode == nftrules.ExternalDSR && !slices.Contains(fams, knftables.IPv4Family) {
		log.Warn("--external-mode=dsr needs IPv4; external traffic stays snat")
	}
	if cfg.ConntrackCleanup {
		if ct, err := conntrack.NewNetlink(); err != nil {
			log.Warn("stale UDP conntrack entries will not be flushed", "err", err)
		} else {
			defer ct.Close()
			p.ct = ct
		}
	}
	p.hc = healthcheck.NewServices(nil, p.health.Healthy, log)
	defer p.hc.Close()
	if cfg.NodeLiveness {
		startEcho(ioctx, &wg, cfg, self, p, log)
	}
	log.Info("proxy running", "families", fams, "nodePortAddresses", nodeCfg.NodePorts.String(),
		"externalMode", extMode.String(), "syncPeriod", p.cfg.syncPeriod, "minSyncPeriod", p.cfg.minSyncPeriod, "conntrackCleanup", p.ct != nil)
	return p.run(ctx)
}

// startEcho runs the echo detector from this node's IPv4 InternalIP, if it has one.
func startEcho(ctx context.Context, wg *sync.WaitGroup, cfg Config, self *corev1.Node, p *proxier, log *slog.Logger) {
	ip, ok := convert.InternalIP(self, true)
	if !ok {
		log.Warn("node liveness off: this node has no IPv4 InternalIP to probe from")
		return
	}
	tr := liveness.NewEchoTracker(cmp.Or(cfg.EchoInterval, 10*time.Millisecond), cfg.EchoBurst,
		cmp.Or(cfg.EchoTimeout, 5*time.Millisecond), cmp.Or(cfg.EchoMisses, 6))
	e, err := liveness.ListenEcho(ip, tr, p.onEcho, log.With("detector", "echo"))
	if err != nil {
		log.Error("node liveness off: echo detector unavailable", "err", err)
		return
	}
	p.setEcho(e)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = e.Run(ctx)
	}()
	log.Info("node liveness on", "ip", ip, "detection", tr.DetectionTime())
}

// waitNode returns this node's object, waiting a little for it to appear; nil if it does not.
func waitNode(ctx context.Context, src source, name string, log *slog.Logger) *corev1.Node {
	for i := 0; ; i++ {
		if n := src.Node(name); n != nil || i == 50 || ctx.Err() != nil {
			if n == nil {
				log.Warn("node object not found; node addresses unknown", "node", name)
			}
			return n
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// families decides which tables to program.
func families(want string, self *corev1.Node, nc convert.NodeConfig) ([]knftables.Family, error) {
	switch want {
	case "ipv4":
		return []knftables.Family{knftables.IPv4Family}, nil
	case "ipv6":
		return []knftables.Family{knftables.IPv6Family}, nil
	case "dual":
		return []knftables.Family{knftables.IPv4Family, knftables.IPv6Family}, nil
	case "", "auto":
	default:
		return nil, fmt.Errorf("--ip-families %q: want auto, ipv4, ipv6 or dual", want)
	}
	_, v4 := convert.InternalIP(self, true)
	_, v6 := convert.InternalIP(self, false)
	for _, p := range nc.ClusterCIDRs {
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	var out []knftables.Family
	if v4 || !v6 {
		out = append(out, knftables.IPv4Family)
	}
	if v6 {
		out = append(out, knftables.IPv6Family)
	}
	return out, nil
}

// cleanup deletes ironlb's tables in both families, and the DSR table with its policy rules and
// routes, all over netlink: no nft needed (TestCleanupWithoutNFT).
func cleanup(ctx context.Context, log *slog.Logger) error {
	var errs []error
	for _, f := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		if err := nftapply.CleanupKernel(f); err != nil { // over netlink: no nft needed
			errs = append(errs, err)
			continue
		}
		log.Info("table deleted", "family", f, "table", nftrules.TableName)
	}
	if a, err := dsrapply.NewKernel(""); err != nil {
		errs = append(errs, err)
	} else if err := a.Cleanup(ctx); err != nil {
		errs = append(errs, err)
	} else {
		log.Info("direct server return tables, policy rules and routes deleted", "tables", []string{nftrules.DSRTableName, nftrules.DSRSYNTableName})
	}
	return errors.Join(errs...)
}

// serve serves h on addr until ctx ends.
func serve(ctx context.Context, wg *sync.WaitGroup, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server", "addr", addr, "err", err)
		}
	}()
	return nil
}

// interfaceAddrs lists the addresses configured on the node's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		} else if ip, err := netip.ParseAddr(strings.TrimSpace(a.String())); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
