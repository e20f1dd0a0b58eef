package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Status is a test's outcome.
type Status string

// The outcomes a table shows. Ginkgo's timedout, panicked, interrupted and aborted count as failed.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Result is one test's outcome.
type Result struct {
	Name    string  // the test's full name, as --focus matches it
	Status  Status  //
	Seconds float64 //
	Message string  // first line of the failure, or the reason the test skipped itself
}

func status(ginkgo string) Status {
	switch ginkgo {
	case "passed":
		return Passed
	case "skipped", "pending":
		return Skipped
	default: // failed, timedout, panicked, interrupted, aborted
		return Failed
	}
}

// ansi matches a terminal colour sequence: ginkgo colours some messages even with --no-color (a
// parallel process's "SynchronizedBeforeSuite failed on Ginkgo parallel process #1").
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(ansi.ReplaceAllString(s, "")), "\n")
	return strings.TrimSpace(l)
}

type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// ParseJUnit reads ginkgo's JUnit report. It keeps the tests the selection ran (or that skipped
// themselves, with their reason), and the suite's own set-up nodes only when they failed; tests the
// focus/skip filter left out (ginkgo reports them as skipped without a reason) are dropped. For a dry
// run, the selected tests are the ones reported passed.
func ParseJUnit(r io.Reader) ([]Result, error) {
	var s junitSuites
	if err := xml.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("reading the JUnit report: %w", err)
	}
	var out []Result
	for _, suite := range s.Suites {
		for _, c := range suite.Cases {
			// "[It] full text [labels]", "[SynchronizedBeforeSuite]", "[ReportAfterSuite] text"
			leaf, name := "", c.Name
			if i := strings.Index(c.Name, "]"); strings.HasPrefix(c.Name, "[") && i > 0 {
				leaf, name = c.Name[:i+1], strings.TrimSpace(c.Name[i+1:])
			}
			res := Result{Name: withoutLabels(name), Status: status(c.Status), Seconds: c.Time}
			switch {
			case c.Failure != nil:
				res.Message = firstLine(c.Failure.Message)
			case c.Error != nil:
				res.Message = firstLine(c.Error.Message)
			case c.Skipped != nil:
				reason, ok := strings.CutPrefix(c.Skipped.Message, "skipped - ")
				if !ok { // filtered out by focus/skip, or pending
					continue
				}
				res.Message = firstLine(reason)
			}
			if leaf != "[It]" && leaf != "" && res.Status != Failed {
				continue // BeforeSuite, ReportAfterSuite, ... that did their job
			}
			if leaf != "[It]" && leaf != "" {
				res.Name = strings.TrimSpace(leaf + " " + name)
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// withoutLabels drops the label list ginkgo's JUnit reporter appends to a test's name ("... [Conformance]
// [sig-network, Conformance]"), leaving the full text that --focus matches and the progress lines carry.
// The suite's tests all carry their SIG's label first.
func withoutLabels(name string) string {
	i := strings.LastIndex(name, " [")
	if i < 0 || !strings.HasSuffix(name, "]") || !strings.HasPrefix(name[i+2:], "sig-") {
		return name
	}
	return name[:i]
}

// progressLine is one line the suite appends to $IRONLB_E2E_PROGRESS (hack/e2esuite).
type progressLine struct {
	Name    string  `json:"name"`
	State   string  `json:"state"`
	Seconds float64 `json:"seconds"`
	Failure string  `json:"failure"`
}

// ParseProgress reads one progress line.
func ParseProgress(line []byte) (Result, error) {
	var p progressLine
	if err := json.Unmarshal(line, &p); err != nil {
		return Result{}, fmt.Errorf("progress line %q: %w", line, err)
	}
	if p.Name == "" || p.State == "" {
		return Result{}, fmt.Errorf("progress line %q: no name or state", line)
	}
	return Result{Name: p.Name, Status: status(p.State), Seconds: p.Seconds, Message: firstLine(p.Failure)}, nil
}

func label(s Status) string {
	switch s {
	case Passed:
		return "PASS"
	case Failed:
		return "FAIL"
	case Skipped:
		return "SKIP"
	}
	return "-"
}

// ProgressLine is the line printed as the n-th of total tests ends.
func ProgressLine(n, total int, r Result) string {
	w := len(fmt.Sprint(total))
	line := fmt.Sprintf("[%*d/%d] %s %6.1fs  %s", w, n, total, label(r.Status), r.Seconds, r.Name)
	if r.Message != "" {
		line += "\n" + strings.Repeat(" ", 2*w+18) + r.Message // under the name
	}
	return line
}

// Counts tallies results.
func Counts(rs []Result) (passed, failed, skipped int) {
	for _, r := range rs {
		switch r.Status {
		case Passed:
			passed++
		case Failed:
			failed++
		case Skipped:
			skipped++
		}
	}
	return
}

// Summary is the closing line: "N passed, N failed".
func Summary(rs []Result) string {
	p, f, _ := Counts(rs)
	return fmt.Sprintf("%d passed, %d failed", p, f)
}

func sorted(rs []Result) []Result {
	out := append([]Result(nil), rs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Table is the per-test table of one run, by name: result, time, test and (failed or skipped) the first
// line of why; then the skipped count and the closing summary line.
func Table(rs []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %8s  %s\n", "RESULT", "TIME", "TEST")
	for _, r := range sorted(rs) {
		fmt.Fprintf(&b, "%-6s %7.1fs  %s\n", label(r.Status), r.Seconds, r.Name)
		if r.Message != "" && r.Status != Passed {
			fmt.Fprintf(&b, "%-6s %8s    %s\n", "", "", r.Message)
		}
	}
	_, _, s := Counts(rs)
	fmt.Fprintf(&b, "%d skipped\n%s\n", s, Summary(rs))
	return b.String()
}

// CompareTable sets two runs of the same selection side by side (base, e.g. kube-proxy, then cand, e.g.
// ironlb's proxy); a test that passed on base but not on cand is marked REGRESSION. It ends with the
// number of regressions and each run's summary line.
func CompareTable(baseName string, base []Result, candName string, cand []Result) string {
	byName := func(rs []Result) map[string]Result {
		m := map[string]Result{}
		for _, r := range rs {
			m[r.Name] = r
		}
		return m
	}
	bm, cm := byName(base), byName(cand)
	names := map[string]bool{}
	for n := range bm {
		names[n] = true
	}
	for n := range cm {
		names[n] = true
	}
	var all []string
	for n := range names {
		all = append(all, n)
	}
	sort.Strings(all)
	wb, wc := max(len(baseName), 6), max(len(candName), 6)
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %-*s  %s\n", wb, strings.ToUpper(baseName), wc, strings.ToUpper(candName), "TEST")
	regressions := 0
	for _, n := range all {
		br, bok := bm[n]
		cr, cok := cm[n]
		bl, cl := "-", "-"
		if bok {
			bl = label(br.Status)
		}
		if cok {
			cl = label(cr.Status)
		}
		mark := ""
		if bok && br.Status == Passed && (!cok || cr.Status != Passed) {
			mark, regressions = "  REGRESSION", regressions+1
		}
		fmt.Fprintf(&b, "%-*s  %-*s  %s%s\n", wb, bl, wc, cl, n, mark)
	}
	fmt.Fprintf(&b, "%d regressions\n%s: %s\n%s: %s\n", regressions, baseName, Summary(base), candName, Summary(cand))
	return b.String()
}
