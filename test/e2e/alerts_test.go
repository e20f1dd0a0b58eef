package e2e

import (
	"fmt"
	"testing"
	"time"
)

// Issue 20's acceptance: MetalLB's own alerting rules (config/prometheus-rules, loaded by the lab's
// Prometheus as the Prometheus Operator would) fire in the lab when a BGP session is cut and when the
// configuration is invalid, reading the metrics ironlb exports under MetalLB's names. Both faults are
// made at once, so the two rules' `for: 1m` run side by side; both alerts must then resolve.

// alertsBadPeer references a password Secret of the wrong type: admission accepts it (MetalLB's webhook
// does not read Secrets either), every speaker refuses the configuration and keeps running the last one
// that loaded: metallb_k8s_client_config_stale_bool becomes 1.
const alertsBadPeer = `apiVersion: v1
kind: Secret
metadata: {name: alerts-opaque, namespace: metallb-system}
type: Opaque
stringData: {password: not-basic-auth}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: alerts-bad, namespace: metallb-system}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 172.18.255.200
  passwordSecret: {name: alerts-opaque, namespace: metallb-system}
`

// alertFiring counts the firing instances of alertname whose labels match extra (PromQL matchers).
func alertFiring(alertname, extra string) (int, error) {
	expr := fmt.Sprintf(`count(ALERTS{alertname=%q,alertstate="firing"%s}) or vector(0)`, alertname, extra)
	v, err := promSamples(expr)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("%s: %v", expr, v)
	}
	return int(v[0]), nil
}

func alertsSuite(t *testing.T) {
	setupBGP(t)
	for _, a := range []string{"MetalLBBGPSessionDown", "MetalLBStaleConfig"} {
		if n, err := alertFiring(a, ""); err != nil || n != 0 {
			t.Fatalf("%s firing before any fault: %d %v", a, n, err)
		}
	}

	// The BGP session of worker3 (172.18.0.5): the router stops accepting it, as the BGP tests' iBGP
	// step does, so the speaker's session goes down and stays down.
	const cut = "172.18.0.5/32"
	restore := func() {
		_, _ = labExec("router", "vtysh", "-c", "configure terminal", "-c", "router bgp 64512",
			"-c", "bgp listen range "+cut+" peer-group nodes")
	}
	if out, err := labExec("router", "vtysh", "-c", "configure terminal", "-c", "router bgp 64512",
		"-c", "no bgp listen range "+cut+" peer-group nodes"); err != nil {
		t.Fatalf("cutting worker3's BGP session: %v\n%s", err, out)
	}
	t.Cleanup(restore)
	if out, err := runStdin(alertsBadPeer, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = runStdin(alertsBadPeer, ironlb, "lab", "kubectl", "delete", "--ignore-not-found", "-f", "-")
	})
	start := time.Now()

	// `for: 1m` after the first evaluation that sees the metric: a little over a minute.
	// (Other sessions are not judged: on a loaded machine BFD at 50 ms may flap them, and a flap that
	// lasts a minute fires the alert too, rightly.)
	eventually(t, 3*time.Minute, "MetalLBBGPSessionDown firing for worker3's session", func() error {
		n, err := alertFiring("MetalLBBGPSessionDown", `,node="myk8s-worker3",peer="172.18.255.254:179"`)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d firing for worker3's speaker, want 1", n)
		}
		return nil
	})
	t.Logf("MetalLBBGPSessionDown firing %s after the cut", time.Since(start).Round(time.Second))
	eventually(t, 2*time.Minute, "MetalLBStaleConfig firing for every speaker", func() error {
		n, err := alertFiring("MetalLBStaleConfig", `,container="speaker"`)
		if err != nil {
			return err
		}
		if n != len(labNodes) {
			return fmt.Errorf("%d speakers firing, want %d", n, len(labNodes))
		}
		return nil
	})
	t.Logf("MetalLBStaleConfig firing %s after the invalid BGPPeer", time.Since(start).Round(time.Second))

	// Mend both: the alerts resolve.
	restore()
	if out, err := runStdin(alertsBadPeer, ironlb, "lab", "kubectl", "delete", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for a, which := range map[string]string{"MetalLBBGPSessionDown": `,node="myk8s-worker3"`, "MetalLBStaleConfig": ""} {
		eventually(t, 2*time.Minute, a+" resolved after the fault is mended", func() error {
			n, err := alertFiring(a, which)
			if err != nil {
				return err
			}
			if n != 0 {
				return fmt.Errorf("%d still firing", n)
			}
			return nil
		})
	}
}
