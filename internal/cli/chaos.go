package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/bench/chaos"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

func chaosCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := chaos.Options{Log: logf}
	var faults, jsonOut string
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Churn Services while injecting faults (kills, power cuts, partitions, loss, apiserver restarts, attacks) and count broken invariants",
		Long: `chaos runs for --duration: a churn loop creates, updates and deletes LoadBalancer Services (pools,
requested addresses, sharing keys, externalTrafficPolicy) and flips a pool's size, while one fault at a
time is injected, the kinds in shuffled rounds (every kind once per round): SIGKILL of a controller
replica (three run) or of a speaker, a worker's power cut, a partition of a worker, 5% packet loss on a
worker's link, a kube-apiserver restart; and (issue 18) heartbeats forged from the client (a probed
Service's announcer leaving and not ready, hundreds of unknown node names), heartbeats captured on a
worker and replayed from the client, also from the worker's own address after its power cut, forged
ARP for a probed address, the leading controller paused (SIGSTOP) beyond its lease, a worker's eth0 set
down, a worker's nftables commits made to fail during churn, the webhook's Secret deleted. Every
second the Services' addresses are checked against the pools and the sharing rules; the client probes
three Services by ARP and HTTP every 100 ms; the announcers are sampled and the speakers' logs read.
With --conn-mode dsr (issue 19) the second Service is in direct-server-return mode and the client
also holds 20 keep-alive HTTP connections to it (a request every 200 ms each): a held connection that
breaks (an error, or no answer for 5 s) is a violation unless a fault killed or cut off the node of the
pod that served it (a power cut, a partition, its eth0 down, loss on its link) while it waited. The
e2e suite's Chaos subtest runs dsr; the default is off, the only mode a kube-proxy lab can run
(docs/benchmarks.md, "The dsr soak, after the loop guard's fix"; issue 19).
A failover that no fault explains, and any change of a view, an election or an answering MAC during an
attack, are violations; so is a run that injected a kind of its list not even once or made fewer than
--min-checks checks. It prints a table of faults, violations by invariant, the longest failover window
and the requests, and exits non-zero when an invariant broke.

Bring the lab up with --proxy=ironlb: kube-proxy keeps a dead node's endpoints for 40-50 s.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			if faults != "" {
				o.Faults = strings.Split(faults, ",")
			}
			res, err := chaos.Run(c.Context(), l, o)
			if err != nil {
				return err
			}
			res.Table(os.Stdout)
			if jsonOut != "" {
				b, err := res.JSON()
				if err != nil {
					return err
				}
				if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
					return err
				}
			}
			if n := res.Total(); n > 0 {
				return fmt.Errorf("%d invariant violations", n)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long to churn and inject faults")
	f.DurationVar(&o.Every, "every", 15*time.Second, "mean time between faults")
	f.Uint64Var(&o.Seed, "seed", uint64(time.Now().UnixNano()), "random seed (printed; rerun with it to replay the choices)")
	f.StringVar(&faults, "faults", "", "comma-separated kinds to inject (default all: "+strings.Join(chaos.AllFaults, ",")+")")
	f.StringVar(&o.RawDir, "raw-dir", "", "keep the probes' logs here")
	f.IntVar(&o.MinChecks, "min-checks", 0, "fewest allocation checks the run must make (0: one per 3 s of --duration)")
	f.StringVar(&o.ConnMode, "conn-mode", "off", "hold keep-alive connections to a probed Service in this ironlb.io/external-mode and fail when one breaks outside a fault that cut off its pod's node: dsr (what the e2e suite's Chaos subtest runs), snat (to see the invariant fail) or off (no connections held; the only mode with kube-proxy)")
	f.StringVar(&jsonOut, "json", "", "also write the result as JSON to this file")
	return cmd
}
