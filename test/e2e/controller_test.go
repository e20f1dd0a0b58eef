package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Seed 000 with the load balancer: pool my-ippool and svc1..svc3 get .200, .201, .202, and
// `kubectl get ipaddresspools` prints the seed's columns.
func TestSeedLoadBalancerAddresses(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	kubectlApply(t, "testdata/seed000-metallb.yaml")
	kubectlApply(t, "testdata/seed000-services.yaml")
	t.Cleanup(func() { kubectl(t, "delete", "-f", "testdata/seed000-services.yaml", "--ignore-not-found") })
	want := map[string]string{"svc1": "172.18.255.200", "svc2": "172.18.255.201", "svc3": "172.18.255.202"}
	eventually(t, 30*time.Second, "svc1..3 get their external IPs", func() error {
		for svc, ip := range want {
			got := strings.TrimSpace(kubectl(t, "get", "svc", svc, "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}"))
			if got != ip {
				return fmt.Errorf("%s EXTERNAL-IP %q, want %s", svc, got, ip)
			}
		}
		return nil
	})
	t.Logf("kubectl get svc:\n%s", kubectl(t, "get", "svc"))
	for svc := range want {
		if a := kubectl(t, "get", "svc", svc, "-o", `jsonpath={.metadata.annotations.metallb\.io/ip-allocated-from-pool}`); a != "my-ippool" {
			t.Errorf("%s: ip-allocated-from-pool %q, want my-ippool", svc, a)
		}
	}
	out := kubectl(t, "get", "ipaddresspools", "-n", "metallb-system")
	t.Logf("kubectl get ipaddresspools -n metallb-system:\n%s", out)
	if !regexp.MustCompile(`(?m)^NAME\s+AUTO ASSIGN\s+AVOID BUGGY IPS\s+ADDRESSES\s*$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^my-ippool\s+true\s+false\s+\["172\.18\.255\.200-172\.18\.255\.250"\]\s*$`).MatchString(out) {
		t.Errorf("ipaddresspools table differs from the seed's:\n%s", out)
	}
	eventually(t, 10*time.Second, "pool status counts", func() error {
		got := kubectl(t, "get", "ipaddresspool", "my-ippool", "-n", "metallb-system", "-o", "jsonpath={.status.assignedIPv4} {.status.availableIPv4}")
		if got != "3 48" {
			return fmt.Errorf("status assignedIPv4/availableIPv4 = %q, want \"3 48\"", got)
		}
		return nil
	})
	// Invalid configuration is refused at admission by the webhook, with a message naming the problem.
	bad := `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: overlapping
  namespace: metallb-system
spec:
  addresses:
  - 172.18.255.240/28
`
	out, err := runStdin(bad, ironlb, "lab", "kubectl", "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "overlaps") || !strings.Contains(out, "my-ippool") {
		t.Errorf("an overlapping pool should be refused naming my-ippool; err %v, output:\n%s", err, out)
	}
	// A Service asking for an address outside every pool gets an AllocationFailed event and no address,
	// and no other Service loses its address.
	outside := `apiVersion: v1
kind: Service
metadata:
  name: svc-outside
  annotations:
    metallb.io/loadBalancerIPs: 172.18.254.1
spec:
  type: LoadBalancer
  selector:
    app: webpod
  ports:
  - port: 80
`
	if out, err := runStdin(outside, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("creating svc-outside: %v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl(t, "delete", "svc", "svc-outside", "--ignore-not-found") })
	eventually(t, 20*time.Second, "AllocationFailed event for svc-outside", func() error {
		ev := kubectl(t, "get", "events", "--field-selector", "involvedObject.name=svc-outside,reason=AllocationFailed", "-o", "jsonpath={.items[*].message}")
		if !strings.Contains(ev, "172.18.254.1") {
			return fmt.Errorf("events: %q", ev)
		}
		return nil
	})
	for svc, ip := range want {
		if got := strings.TrimSpace(kubectl(t, "get", "svc", svc, "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}")); got != ip {
			t.Errorf("%s lost its address: %q", svc, got)
		}
	}
}
