package e2e

import (
	"slices"
	"strings"
	"testing"
)

// `lab up` on a lab that is up checks it and changes nothing: the pods keep running where they are.
func TestUpIsIdempotent(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1")
	before := kubectl(t, "get", "pod", "webpod1", "-o", "jsonpath={.metadata.uid} {.status.podIP}")
	out := labUp(t, suiteUp...)
	if !strings.Contains(out, "already up") {
		t.Errorf("second lab up should say the lab is already up:\n%s", out)
	}
	if after := kubectl(t, "get", "pod", "webpod1", "-o", "jsonpath={.metadata.uid} {.status.podIP}"); after != before {
		t.Errorf("webpod1 changed across a second lab up: %q -> %q", before, after)
	}
	// Other settings on a running lab are refused with a clear message.
	out2, err := labUpErr(append(slices.Clone(suiteUp), "--workers", "2")...)
	if err == nil || !strings.Contains(out2, "already up with other settings") {
		t.Errorf("lab up --workers 2 on a running 3-worker lab: err %v, output:\n%s", err, out2)
	}
}
