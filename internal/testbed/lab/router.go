package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The BGP lab's router runs Debian's FRR (zebra, bfdd, bgpd) in its own namespace, peered with every
// node: seed 003's top-of-rack router. It accepts any node of the bridge's subnet as a dynamic neighbor
// in AS NodeASN (eBGP), one listen range per node address, installs up to 16 equal paths (ECMP) and runs BFD with every neighbor that
// speaks it. Its BFD profile is fast (50 ms × 3); the detection time of a session is set by the slower
// side, so the nodes' BFDProfile decides.

// FRRDir is where Debian's frr package puts its daemons.
const FRRDir = "/usr/lib/frr"

// routerBFDDPriority is the SCHED_FIFO priority the router's bfdd runs at (through chrt), as if the
// router were another machine: at normal priority a saturated two-CPU machine starves it past a
// 50 ms × 3 detection time, and it declares every node down at once (bench-connections' BGP trials at
// load 12-15: "the router's BFD declared ... (not the cut node) down" in most trials), withdrawing
// the paths of nodes that are up. The tests' FRR runs the same way (frrtest.BFDDPriority).
const routerBFDDPriority = "10"

// routerDaemons in start order: bgpd and bfdd connect to zebra's socket.
var routerDaemons = []string{"zebra", "bfdd", "bgpd"}

func (l *Lab) routerDir() string { return filepath.Join(l.State.Dir, "router") }

// RouterLog is the path of one of the router's FRR daemon logs ("bfdd", "bgpd", "zebra"). bfdd logs
// every BFD state change with microsecond timestamps.
func (l *Lab) RouterLog(daemon string) string { return filepath.Join(l.routerDir(), daemon+".log") }

// RouterConfig returns FRR's configuration files for the plan's router, by file name. dir is where the
// daemons keep their logs.
func RouterConfig(p Plan, dir string) map[string]string {
	// One listen range per node, so that a node can be moved to another peer group (say, iBGP) alone.
	var ranges strings.Builder
	for _, n := range p.Nodes {
		fmt.Fprintf(&ranges, " bgp listen range %s/32 peer-group nodes\n", n.Addr)
	}
	return map[string]string{
		"zebra.conf": fmt.Sprintf("hostname %s\nlog file %s/zebra.log\n", p.Router.Name, dir),
		"bfdd.conf": fmt.Sprintf(`hostname %s
log file %s/bfdd.log
log timestamp precision 6
debug bfd peer
bfd
 profile nodes
  receive-interval 50
  transmit-interval 50
  detect-multiplier 3
 !
!
`, p.Router.Name, dir),
		"bgpd.conf": fmt.Sprintf(`hostname %s
log file %s/bgpd.log
log timestamp precision 6
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 neighbor nodes peer-group
 neighbor nodes remote-as external
 neighbor nodes bfd profile nodes
%s address-family ipv4 unicast
  maximum-paths 16
 exit-address-family
!
`, p.Router.Name, dir, RouterASN, p.Router.Addr, ranges.String()),
	}
}

// startRouter writes FRR's configuration and starts its daemons in the router's namespace, in the
// lab's cgroup, then waits until bgpd answers.
func (l *Lab) startRouter(ctx context.Context) error {
	dir := l.routerDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil { // zebra and bfdd drop to user frr
		return err
	}
	for name, content := range RouterConfig(l.Plan, dir) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, d := range routerDaemons {
		argv := []string{filepath.Join(FRRDir, d), "-f", filepath.Join(dir, d+".conf"), "-i", filepath.Join(dir, d+".pid"),
			"--vty_socket", dir, "-P", "0", "-z", filepath.Join(dir, "zserv.api")}
		switch d {
		case "bgpd":
			argv = append(argv, "-S") // stays root: binds port 179
		case "bfdd":
			argv = append(argv, "--bfdctl", filepath.Join(dir, "bfdd.sock"), "-u", "frr", "-g", "frr")
			chrt, err := exec.LookPath("chrt")
			if err != nil {
				return fmt.Errorf("the router's bfdd runs under chrt (util-linux): %w", err)
			}
			argv = append([]string{chrt, "-f", routerBFDDPriority}, argv...)
		default:
			argv = append(argv, "-u", "frr", "-g", "frr")
		}
		if err := l.startDetached(l.Plan.Router.Name, d, ExecSpec{NetNS: l.Plan.Router.Name, Argv: argv}); err != nil {
			return err
		}
		if d == "zebra" {
			if err := poll(ctx, 10*time.Second, func() (bool, string, error) {
				_, err := os.Stat(filepath.Join(dir, "zserv.api"))
				return err == nil, "zebra's socket", nil
			}); err != nil {
				return err
			}
		}
	}
	return poll(ctx, 15*time.Second, func() (bool, string, error) {
		out, err := l.Vtysh(ctx, "show bgp summary")
		return err == nil, "bgpd answering: " + strings.TrimSpace(out), nil
	})
}

// Vtysh runs FRR commands on the router (each a -c argument) and returns their output.
func (l *Lab) Vtysh(ctx context.Context, cmds ...string) (string, error) {
	if l.Plan.Router.Name == "" {
		return "", fmt.Errorf("lab %s has no router (bring it up with --bgp)", l.Plan.Config.Name)
	}
	args := []string{"--vty_socket", l.routerDir()}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.CommandContext(ctx, "vtysh", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("vtysh %s: %w: %s", strings.Join(cmds, "; "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
