package controller

import (
	"strings"
	"testing"
)

// TestAdvertisementSelectorFailsClosed: advertisements whose selectors do not parse, stored without
// the webhook (as objects created before it was installed are), select nothing in the speakers'
// model (config.BuildModel, tested there) and are reported by the controller: a Warning event
// InvalidSelector on each naming the selector, and the ConfigurationState's condition
// advertisementSelectorsValid False naming them, result Invalid; once they are gone, Valid again.
func TestAdvertisementSelectorFailsClosed(t *testing.T) {
	h := newHarness(t)
	h.apply(pool("p", "10.66.0.0/28"))
	h.apply(metallbYAML("v1beta1", "L2Advertisement", "bad-l2", ns, "  ipAddressPoolSelectors:\n  - matchLabels: {team: \"a b\"}\n"))
	h.apply(metallbYAML("v1beta1", "BGPAdvertisement", "bad-bgp", ns, "  ipAddressPools: [p]\n  nodeSelectors:\n  - matchExpressions: [{key: rack, operator: In}]\n"))
	h.apply(metallbYAML("v1beta1", "L2Advertisement", "good", ns, "  ipAddressPools: [p]\n"))
	h.start()
	h.waitEventT(t, ns, "bad-l2", "InvalidSelector", "L2Advertisement bad-l2: spec.ipAddressPoolSelectors[0]: invalid label selector")
	h.waitEventT(t, ns, "bad-bgp", "InvalidSelector", "BGPAdvertisement bad-bgp: spec.nodeSelectors[0]: invalid label selector")
	const cs = "configurationstates.metallb.io"
	cond := `{.status.conditions[?(@.type=="advertisementSelectorsValid")]`
	h.waitJSONPathT(t, cs, "controller", cond+".status}", "False")
	h.waitJSONPathT(t, cs, "controller", "{.status.result}", "Invalid")
	msg, _ := h.env.Kubectl("get", cs, "controller", "-n", ns, "-o", "jsonpath="+cond+".message}")
	for _, want := range []string{"BGPAdvertisement bad-bgp: spec.nodeSelectors[0]", "L2Advertisement bad-l2: spec.ipAddressPoolSelectors[0]", "the advertisement selects nothing"} {
		if !strings.Contains(msg, want) {
			t.Errorf("condition message %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "good") {
		t.Errorf("condition message %q names the valid advertisement", msg)
	}
	for _, o := range []string{"l2advertisement.metallb.io/bad-l2", "bgpadvertisement.metallb.io/bad-bgp"} {
		if out, err := h.env.Kubectl("delete", "-n", ns, o); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	h.waitJSONPathT(t, cs, "controller", cond+".status}", "True")
	h.waitJSONPathT(t, cs, "controller", "{.status.result}", "Valid")
}
