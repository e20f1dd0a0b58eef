package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/bench/dsrbench"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

func benchDSRThroughputCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := dsrbench.Options{Log: logf}
	cmd := &cobra.Command{
		Use:   "bench-dsr-throughput",
		Short: "wrk from mypc against a pod directly and through a LoadBalancer address in dsr and in snat mode; where a reply-heavy transfer's bytes go (lab up --proxy=ironlb)",
		Long: `Issue 19's throughput figures, in a lab with ironlb's proxy (lab up --proxy=ironlb). The workload of
lab bench-connections (bench-web), scaled to one pod on myk8s-worker or myk8s-worker2, behind a LoadBalancer
address announced by --node (which runs no pod). wrk runs from mypc, --rounds times against each target,
interleaved: the pod directly (mypc routes the pod's address via its node), the address in dsr mode, and
the address in snat mode (the Service's ironlb.io/external-mode flipped between them, and each mode seen
working before wrk starts: in dsr the pod sees mypc's address, in snat another). It prints requests/s and
transfer/s, the median over the rounds and its ratio to the pod directly. Then one reply-heavy run per
target (answers of --bulk-mib MiB, whoami's /data) with the eth0 byte counters of the entry node and of
the pod's node read before and after it: in dsr the answers leave the pod's node straight for mypc, and
the entry node sends only what it forwards from mypc (requests and acknowledgements); in snat every
answer passes through the entry node.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			if err := o.Check(); err != nil {
				return err
			}
			res, err := dsrbench.Run(c.Context(), l, o)
			if len(res.Runs) > 0 {
				fmt.Printf("\nlab bench-dsr-throughput: address %s announced by %s, pod %s on %s\n\n", res.VIP, res.Entry, res.Pod, res.PodNode)
				dsrbench.Table(os.Stdout, res.Spec, dsrbench.Summarize(res.Runs), res.BulkSpec, res.Entry, res.PodNode, res.Bulks)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.Entry, "node", "myk8s-worker3", "the entry node: the address's announcer (it runs no pod of the workload)")
	f.IntVar(&o.Rounds, "rounds", 3, "wrk runs per target, interleaved")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "each throughput run")
	f.IntVar(&o.Threads, "threads", 2, "wrk -t")
	f.IntVar(&o.Conns, "conns", 50, "wrk -c")
	f.IntVar(&o.BulkMiB, "bulk-mib", 1, "answer size of the reply-heavy run, MiB (0: none)")
	f.DurationVar(&o.BulkDuration, "bulk-duration", 5*time.Second, "each reply-heavy run")
	f.IntVar(&o.BulkConns, "bulk-conns", 4, "wrk -c of the reply-heavy run")
	return cmd
}
