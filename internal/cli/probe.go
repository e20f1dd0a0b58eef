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
	var addr string
	cmd := &cobra.Command{
		Use:    "probe",
		Short:  "Probe a service address by ARP and HTTP every interval (the failover benchmark's client)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if addr != "" { // no --addr: HTTP only (a client behind a router cannot ARP for the address)
				a, err := netip.ParseAddr(addr)
				if err != nil {
					return err
				}
				cfg.Addr = a
			}
			return probe.Run(c.Context(), cfg, os.Stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Iface, "iface", "eth0", "interface for ARP probes")
	f.StringVar(&addr, "addr", "", "service address")
	f.StringVar(&cfg.URL, "url", "", "URL to request every interval")
	f.DurationVar(&cfg.Every, "every", 20*time.Millisecond, "probe interval")
	f.DurationVar(&cfg.For, "for", 10*time.Second, "how long to probe")
	f.DurationVar(&cfg.Timeout, "timeout", 3*time.Second, "per HTTP request")
	return cmd
}

func connprobeCmd() *cobra.Command {
	var cfg connprobe.Config
	var addr string
	cmd := &cobra.Command{
		Use:    "connprobe",
		Short:  "Hold long-lived TCP (keep-alive HTTP) and UDP flows to a service address and report which broke and how long each stalled (lab bench-connections' client)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			a, err := netip.ParseAddr(addr)
			if err != nil {
				return fmt.Errorf("--addr: %w", err)
			}
			cfg.Addr = a
			if cfg.Every <= 0 || cfg.Timeout <= 0 || cfg.For <= 0 {
				return fmt.Errorf("--every, --timeout and --for must be positive")
			}
			cfg.Ready = func() { fmt.Fprintln(os.Stderr, connprobe.ReadyLine) }
			return connprobe.Write(os.Stdout, connprobe.Run(c.Context(), cfg))
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "", "service address")
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
