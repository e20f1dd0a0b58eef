package conformance

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parseFile(t *testing.T, name string) []Result {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := ParseJUnit(f)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// checkJUnit parses the JUnit report in file name and checks that it gives want, which Summary
// sums up as summary.
func checkJUnit(t *testing.T, name string, want []Result, summary string) {
	t.Helper()
	got := parseFile(t, name)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseJUnit(%s) mismatch (-want +got):\n%s", name, d)
	}
	if s := Summary(got); s != summary {
		t.Errorf("Summary = %q, want %q", s, summary)
	}
}

func TestParseJUnit(t *testing.T) {
	want := []Result{
		{Name: "[sig-network] Services should serve a basic endpoint from pods [Conformance]", Status: Passed, Seconds: 21.4},
		{Name: "[sig-network] Services should be able to create a functioning NodePort service [Conformance]", Status: Failed, Seconds: 60.1,
			Message: "[FAILED] error running /k8s/kubectl exec execpod -- /bin/sh -x -c echo hostName | nc -v -t -w 2 nodeport-test 80:"},
		{Name: "[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a TCP service [Slow]", Status: Skipped, Seconds: 0.01,
			Message: "Only supported for providers [gce gke aws] (not local)"},
		{Name: "[sig-network] DNS should provide DNS for services [Conformance]", Status: Failed, Seconds: 13.2, Message: "A suite timeout occurred"},
	}
	checkJUnit(t, "testdata/run.junit.xml", want, "1 passed, 2 failed")
}

// The report the ginkgo CLI (v2.32.0, the version Kubernetes v1.37.2 pins) merged from three parallel
// processes (`ginkgo --procs=3 --output-dir=out --junit-report=junit-x.xml --skip='left out' s.test`, a
// suite of six specs: two pass, one fails, one skips itself, one left out by --skip, one [Serial]).
func TestParseJUnitParallel(t *testing.T) {
	want := []Result{
		{Name: "[sig-network] Services should pass on process B [Conformance]", Status: Passed, Seconds: 0.301002078},
		{Name: "[sig-network] Services should run alone at the end", Status: Passed, Seconds: 0.000226665},
		{Name: "[sig-network] Services should fail", Status: Failed, Seconds: 0.000937379, Message: "service is not reachable"},
		{Name: "[sig-network] Services should skip itself", Status: Skipped, Seconds: 0.000425959, Message: "Only supported for providers [gce] (not local)"},
		{Name: "[sig-network] Services should pass on process A", Status: Passed, Seconds: 0.242164697},
	}
	checkJUnit(t, "testdata/parallel.junit.xml", want, "3 passed, 1 failed")
}

func TestFirstLineDropsColour(t *testing.T) {
	in := "\x1b[1m\x1b[38;5;9mSynchronizedBeforeSuite failed on Ginkgo parallel process #1\x1b[0m\n  The first SynchronizedBeforeSuite function"
	if got, want := firstLine(in), "SynchronizedBeforeSuite failed on Ginkgo parallel process #1"; got != want {
		t.Errorf("firstLine = %q, want %q", got, want)
	}
}

func TestParseJUnitSetupFailure(t *testing.T) {
	want := []Result{{Name: "[SynchronizedBeforeSuite]", Status: Failed, Seconds: 600,
		Message: "[FAILED] there are currently no ready, schedulable nodes in the cluster"}}
	checkJUnit(t, "testdata/setupfail.junit.xml", want, "0 passed, 1 failed")
}

func TestParseJUnitBad(t *testing.T) {
	for _, in := range []string{"", "not xml", "<testsuites><testsuite><testcase"} {
		if _, err := ParseJUnit(strings.NewReader(in)); err == nil {
			t.Errorf("ParseJUnit(%q) gave no error", in)
		}
	}
}

func TestWithoutLabels(t *testing.T) {
	for in, want := range map[string]string{
		"[sig-network] Services should x [Conformance] [sig-network, Conformance]": "[sig-network] Services should x [Conformance]",
		"[sig-network] Services should x [sig-network]":                            "[sig-network] Services should x",
		"[sig-network] Services should x [LinuxOnly]":                              "[sig-network] Services should x [LinuxOnly]",
		"[sig-network] Services should x":                                          "[sig-network] Services should x",
		"x [sig-network":                                                           "x [sig-network",
	} {
		if got := withoutLabels(in); got != want {
			t.Errorf("withoutLabels(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProgress(t *testing.T) {
	f, err := os.Open("testdata/progress.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		r, err := ParseProgress(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		n++
		lines = append(lines, ProgressLine(n, 12, r))
	}
	want := []string{
		"[ 1/12] PASS   21.4s  [sig-network] Services should serve a basic endpoint from pods [Conformance]",
		"[ 2/12] FAIL   60.1s  [sig-network] Services should be able to create a functioning NodePort service [Conformance]\n" +
			"                      [FAILED] error running kubectl exec",
		"[ 3/12] SKIP    0.0s  [sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a TCP service [Slow]\n" +
			"                      Only supported for providers [gce gke aws] (not local)",
	}
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("progress lines mismatch (-want +got):\n%s", d)
	}
	for _, bad := range []string{"", "{", `{"name":"x"}`, `{"state":"passed"}`} {
		if _, err := ParseProgress([]byte(bad)); err == nil {
			t.Errorf("ParseProgress(%q) gave no error", bad)
		}
	}
}

func TestTable(t *testing.T) {
	got := Table(parseFile(t, "testdata/run.junit.xml"))
	want := `RESULT     TIME  TEST
FAIL      13.2s  [sig-network] DNS should provide DNS for services [Conformance]
                   A suite timeout occurred
SKIP       0.0s  [sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a TCP service [Slow]
                   Only supported for providers [gce gke aws] (not local)
FAIL      60.1s  [sig-network] Services should be able to create a functioning NodePort service [Conformance]
                   [FAILED] error running /k8s/kubectl exec execpod -- /bin/sh -x -c echo hostName | nc -v -t -w 2 nodeport-test 80:
PASS      21.4s  [sig-network] Services should serve a basic endpoint from pods [Conformance]
1 skipped
1 passed, 2 failed
`
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Table mismatch (-want +got):\n%s", d)
	}
}

func TestCompareTable(t *testing.T) {
	base := []Result{{Name: "a", Status: Passed}, {Name: "b", Status: Passed}, {Name: "c", Status: Failed}, {Name: "d", Status: Skipped}, {Name: "e", Status: Passed}}
	cand := []Result{{Name: "a", Status: Passed}, {Name: "b", Status: Failed}, {Name: "c", Status: Passed}, {Name: "d", Status: Skipped}}
	got := CompareTable("kube-proxy", base, "ironlb", cand)
	want := `KUBE-PROXY  IRONLB  TEST
PASS        PASS    a
PASS        FAIL    b  REGRESSION
FAIL        PASS    c
SKIP        SKIP    d
PASS        -       e  REGRESSION
2 regressions
kube-proxy: 3 passed, 1 failed
ironlb: 2 passed, 1 failed
`
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("CompareTable mismatch (-want +got):\n%s", d)
	}
}
