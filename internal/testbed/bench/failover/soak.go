package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// SoakOptions choose a false-alarm run: no node fails, but every node link drops Loss percent of its
// packets in each direction and both cores are saturated by other work; every failure the speakers
// declare, and every change of the address's owner the client sees, is spurious.
type SoakOptions struct {
	Options
	Duration time.Duration
	Loss     int  // percent of packets dropped on every node link, each direction
	Load     bool // run stress-ng (CPU and memory workers) in the root namespace
}

// SoakResult is what a soak counted.
type SoakResult struct {
	Label          string
	Duration       time.Duration
	Deaths         int // failures declared by the speakers' detectors (ironlb: echo or heartbeat; MetalLB: memberlist "failed")
	Suspicions     int // MetalLB: memberlist suspicions (ironlb has none)
	OwnerChanges   int // times the client saw another MAC answer for the address
	ARPSent        int
	ARPUnanswered  int // 100 ms intervals without an answer
	HTTPSent       int
	HTTPFailed     int
	DroppedPackets string
}

// the speakers' log lines that mean a peer was declared failed or suspected
var (
	deathLine   = regexp.MustCompile(`speaker peer node lost|speaker peers declared dead|as failed, suspect timeout reached|Marking .* as failed`)
	suspectLine = regexp.MustCompile(`memberlist: Suspect`)
)

// Soak runs one false-alarm run.
func Soak(ctx context.Context, l *lab.Lab, o SoakOptions) (SoakResult, error) {
	res := SoakResult{Label: o.Speaker, Duration: o.Duration}
	if o.Speaker == "metallb" {
		res.Label = "MetalLB v0.16.1, memberlist " + o.Memberlist
	}
	nodes := l.Plan.NodeNames()
	cutHost, _ := l.Plan.Host(o.Cut)
	vip, err := Address(o.Cut, nodes, l.Plan.Config.NodeNet())
	if err != nil {
		return res, err
	}
	if err := o.useSpeaker(ctx); err != nil {
		return res, err
	}
	applied, err := o.setup(ctx, vip)
	if err != nil {
		return res, err
	}
	url := serviceURL(vip)
	if err := o.ready(ctx, applied, vip, url, cutHost.MAC); err != nil {
		return res, err
	}
	logs := speakerLogs(l, o.Speaker)
	offsets := map[string]int64{}
	for _, f := range logs {
		if st, err := os.Stat(f); err == nil {
			offsets[f] = st.Size()
		}
	}
	// Loss on every node link, both directions; removed on every path.
	if o.Loss > 0 {
		for _, n := range nodes {
			if err := SetLoss(n, o.Loss); err != nil {
				RemoveLoss(nodes...)
				return res, err
			}
		}
		defer RemoveLoss(nodes...)
	}
	if o.Load {
		stress := exec.CommandContext(ctx, "stress-ng", "--cpu", "4", "--vm", "2", "--vm-bytes", "128M",
			"--timeout", fmt.Sprintf("%ds", int(o.Duration.Seconds())+5), "--quiet")
		if err := stress.Start(); err != nil {
			return res, fmt.Errorf("stress-ng (apt-get install stress-ng): %w", err)
		}
		defer func() { _ = stress.Process.Kill(); _ = stress.Wait() }()
	}
	o.Log("soak: %s for %s, %d%% loss per link direction, load %v; address %s announced by %s", res.Label, o.Duration, o.Loss, o.Load, vip, o.Cut)
	probe := exec.CommandContext(ctx, o.Self, "lab", "exec", l.Plan.Config.ClientName, "--", o.Self, "probe",
		"--addr", vip.String(), "--url", url, "--every", "100ms", "--for", o.Duration.String(), "--timeout", "3s")
	var out bytes.Buffer
	probe.Stdout = &out
	if err := probe.Run(); err != nil {
		return res, fmt.Errorf("probe: %w", err)
	}
	if o.Loss > 0 {
		var counts []string
		for _, n := range nodes {
			b, _ := inNetNSOutput(n, "nft", "list", "table", "inet", "ironlb-loss")
			counts = append(counts, strings.Join(regexp.MustCompile(`packets (\d+)`).FindAllString(string(b), -1), "/"))
		}
		res.DroppedPackets = strings.Join(counts, ", ")
	}
	for _, f := range logs {
		b, err := readFrom(f, offsets[f])
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case deathLine.MatchString(line):
				res.Deaths++
			case suspectLine.MatchString(line):
				res.Suspicions++
			}
		}
	}
	ev, err := Parse(&out)
	if err != nil {
		return res, err
	}
	owner := ""
	var lastReply time.Time
	var start time.Time
	for _, e := range ev {
		if start.IsZero() {
			start = e.At
		}
		switch e.Kind {
		case "reply", "garp":
			if owner != "" && e.MAC != owner {
				res.OwnerChanges++
			}
			owner = e.MAC
			if !lastReply.IsZero() && e.At.Sub(lastReply) > 150*time.Millisecond {
				res.ARPUnanswered += int(e.At.Sub(lastReply)/(100*time.Millisecond)) - 1
			}
			lastReply = e.At
		case "http":
			res.HTTPSent++
			if !e.OK {
				res.HTTPFailed++
			}
		}
	}
	res.ARPSent = int(o.Duration / (100 * time.Millisecond))
	return res, nil
}

// speakerLogs lists the speakers' container logs of the chosen implementation.
func speakerLogs(l *lab.Lab, speaker string) []string {
	pat := "*ironlb-speaker*"
	if speaker == "metallb" {
		pat = "*metallb-speaker*"
	}
	files, _ := filepath.Glob(filepath.Join(l.Plan.Config.StateDir, "logs", "*", "pods", pat))
	return files
}

func readFrom(path string, off int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

func nftStdin(rules string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func inNetNSOutput(ns string, argv ...string) ([]byte, error) {
	var out []byte
	err := lab.InNetNS(ns, func() error {
		var err error
		out, err = exec.Command(argv[0], argv[1:]...).Output()
		return err
	})
	return out, err
}

// SetLoss makes a lab host drop percent of its packets in each direction (an nftables random-drop
// rule in table inet ironlb-loss: this kernel has no tc netem).
func SetLoss(host string, percent int) error {
	rules := fmt.Sprintf(`table inet ironlb-loss {
  chain in { type filter hook prerouting priority -500; numgen random mod 100 < %d counter drop; }
  chain out { type filter hook postrouting priority 500; numgen random mod 100 < %d counter drop; }
}`, percent, percent)
	if err := lab.InNetNS(host, func() error { return nftStdin(rules) }); err != nil {
		return fmt.Errorf("loss rules on %s: %w", host, err)
	}
	return nil
}

// RemoveLoss removes SetLoss's rules from the hosts that have them.
func RemoveLoss(nodes ...string) {
	for _, n := range nodes {
		_ = lab.InNetNS(n, func() error {
			err := exec.Command("nft", "delete", "table", "inet", "ironlb-loss").Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return nil // not there
			}
			return err
		})
	}
}

// SoakTable writes soak results side by side.
func SoakTable(w io.Writer, rs []SoakResult) {
	fmt.Fprintf(w, "\n| speakers | duration | detector failures declared | suspicions | owner changes seen by the client | ARP intervals unanswered | HTTP failed / sent |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d of %d | %d / %d |\n", r.Label, r.Duration, r.Deaths, r.Suspicions, r.OwnerChanges, r.ARPUnanswered, r.ARPSent, r.HTTPFailed, r.HTTPSent)
	}
	for _, r := range rs {
		if r.DroppedPackets != "" {
			fmt.Fprintf(w, "%s: packets dropped by the loss rules per node (in/out): %s\n", r.Label, r.DroppedPackets)
		}
	}
}
