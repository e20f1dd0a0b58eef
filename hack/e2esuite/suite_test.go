/*
The [sig-network] part of the Kubernetes e2e suite, as a test binary of its own.

It is upstream's test/e2e/e2e_test.go and e2e.go cut down to the network tests: the same flag handling
(framework.RegisterCommonFlags, RegisterClusterFlags), the same embedded test files and the same ginkgo
run; the test code itself (k8s.io/kubernetes/test/e2e/network and test/e2e/common/network) is imported
unchanged. The suite set-up
keeps what the network tests depend on (all nodes schedulable, NumNodes detected, the cluster's IP
family) and leaves out the provider-specific parts (GCE image logs, image pre-pulling).

One addition: with $IRONLB_E2E_PROGRESS set, each spec that ran (or skipped itself) appends one JSON line
(name, state, seconds, first line of its failure) to that file as it ends; `ironlb lab conformance` reads
it to print a line per test while the suite runs.

hack/e2e-binaries.sh builds it with `go test -c` into e2e.test.
*/

package e2esuite

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	utilnet "k8s.io/utils/net"

	conformancetestdata "k8s.io/kubernetes/test/conformance/testdata"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// ensure auth plugins are loaded
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	// Ensure that logging flags are part of the command line.
	_ "k8s.io/component-base/logs/testinit"

	// define and freeze constants
	_ "k8s.io/kubernetes/test/e2e/feature"

	// test sources: the network tests only (test/e2e/common/network has Networking's Granular Checks: Pods)
	_ "k8s.io/kubernetes/test/e2e/common/network"
	_ "k8s.io/kubernetes/test/e2e/network"

	// reconfigure framework
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

// handleFlags sets up all flags and parses the command line.
func handleFlags() {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
}

func TestMain(m *testing.M) {
	var versionFlag bool
	flag.CommandLine.BoolVar(&versionFlag, "version", false, "Displays version information.")
	handleFlags()
	if versionFlag {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s", flag.CommandLine.Args())
		os.Exit(1)
	}
	// Enable embedded FS file lookup as fallback
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	testfiles.AddFileSource(conformancetestdata.GetConformanceTestdataFS())

	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	// Registered here, not at package level: framework.AfterReadingAllFlags previews the specs
	// (ginkgo.PreviewSpecs), which runs a top-level ReportAfterEach for every spec as passed, and the
	// suite it leaves behind is a clone without top-level ReportAfterEach nodes (ginkgo v2.32).
	ginkgo.ReportAfterEach(reportProgress)
	klog.Infof("Starting e2e run %q on Ginkgo node %d", framework.RunID, suiteConfig.ParallelProcess)
	ginkgo.RunSpecs(t, "Kubernetes e2e suite", suiteConfig, reporterConfig)
}

var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	// Run only on Ginkgo node 1: wait for the nodes, as upstream's setupSuite does.
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	framework.Logf("e2e test version: %s", version.Get().GitVersion)
	if v, err := c.DiscoveryClient.ServerVersion(); err == nil {
		framework.Logf("kube-apiserver version: %s", v.GitVersion)
	}
	return nil
}, func(ctx context.Context, _ []byte) {
	// Run on all Ginkgo nodes, as upstream's setupSuitePerGinkgoNode does.
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	framework.ExpectNoError(err, "Failed to get kubernetes service ClusterIP")
	framework.TestContext.IPFamily = "ipv4"
	if utilnet.IsIPv6String(svc.Spec.ClusterIP) {
		framework.TestContext.IPFamily = "ipv6"
	}
	framework.Logf("Cluster IP family: %s", framework.TestContext.IPFamily)
})

// progressLine is one line of $IRONLB_E2E_PROGRESS.
type progressLine struct {
	Name    string  `json:"name"`
	State   string  `json:"state"`
	Seconds float64 `json:"seconds"`
	Failure string  `json:"failure,omitempty"`
}

// reportProgress appends the line of a spec that ended to $IRONLB_E2E_PROGRESS.
func reportProgress(r ginkgo.SpecReport) {
	path := os.Getenv("IRONLB_E2E_PROGRESS")
	// Specs the focus/skip filter left out are reported as skipped without a message: not a line.
	if path == "" || (r.State == types.SpecStateSkipped && r.Failure.Message == "") {
		return
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(r.Failure.Message), "\n")
	b, err := json.Marshal(progressLine{Name: r.FullText(), State: r.State.String(), Seconds: r.RunTime.Seconds(), Failure: msg})
	if err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}
