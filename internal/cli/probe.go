package cli

import (
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"

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
