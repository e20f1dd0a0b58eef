package cli

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/connprobe"
	"github.com/ironlb/ironlb/internal/testbed/probe"
)

func probeCmd() *cobra.Command {
	var cfg probe.Config
	// No --addr: HTTP only (a client behind a router cannot ARP for the address).
	cmd := labProbeCmd("probe", "Probe a service address by ARP and HTTP every interval (the failover benchmark's client)",
		&cfg.Addr, true, func(c *cobra.Command) error { return probe.Run(c.Context(), cfg, os.Stdout) })
	f := cmd.Flags()
	f.StringVar(&cfg.Iface, "iface", "eth0", "interface for ARP probes")
	f.StringVar(&cfg.URL, "url", "", "URL to request every interval")
	f.DurationVar(&cfg.Every, "every", 20*time.Millisecond, "probe interval")
	f.DurationVar(&cfg.For, "for", 10*time.Second, "how long to probe")
	f.DurationVar(&cfg.Timeout, "timeout", 3*time.Second, "per HTTP request")
	return cmd
}

func connprobeCmd() *cobra.Command {
	var cfg connprobe.Config
	cmd := labProbeCmd("connprobe", "Hold long-lived TCP (keep-alive HTTP) and UDP flows to a service address and report which broke and how long each stalled (lab bench-connections' client)",
		&cfg.Addr, false, func(c *cobra.Command) error {
			if cfg.Every <= 0 || cfg.Timeout <= 0 || cfg.For <= 0 {
				return fmt.Errorf("--every, --timeout and --for must be positive")
			}
			cfg.Ready = func() { fmt.Fprintln(os.Stderr, connprobe.ReadyLine) }
			return connprobe.Write(os.Stdout, connprobe.Run(c.Context(), cfg))
		})
	f := cmd.Flags()
	f.IntVar(&cfg.TCPPort, "tcp-port", 80, "whoami's HTTP port")
	f.IntVar(&cfg.UDPPort, "udp-port", 8053, "whoami's UDP port")
	f.IntVar(&cfg.TCP, "tcp", 200, "keep-alive TCP connections")
	f.IntVar(&cfg.UDP, "udp", 20, "UDP request/reply flows")
	f.IntVar(&cfg.UDPBase, "udp-base", 42000, "UDP flow i sends from this port + i")
	f.DurationVar(&cfg.Every, "every", 50*time.Millisecond, "request interval per flow")
	f.DurationVar(&cfg.For, "for", 10*time.Second, "how long to hold the flows once every flow has answered once (or --timeout after the start)")
	f.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "an answer later than this ends the flow")
	f.DurationVar(&cfg.Gap, "gap", 100*time.Millisecond, "report answers further apart than this as a gap")
	return cmd
}

// labProbeCmd is a hidden command of the lab's clients (run inside its namespaces, not by users):
// it has --addr, the service address, parsed into *addr before run (left zero when empty, if
// optional).
func labProbeCmd(use, short string, addr *netip.Addr, optional bool, run func(c *cobra.Command) error) *cobra.Command {
	var s string
	cmd := &cobra.Command{
		Use:    use,
		Short:  short,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if s != "" || !optional {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return fmt.Errorf("--addr: %w", err)
				}
				*addr = a
			}
			return run(c)
		},
	}
	cmd.Flags().StringVar(&s, "addr", "", "service address")
	return cmd
}
