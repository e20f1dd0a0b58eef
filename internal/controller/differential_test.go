package controller

// Issue 20, "MetalLB as the judge": differential tests against MetalLB v0.16.1's real controller.
//
// Two apiservers (testenv), one per implementation, because their CRDs differ (ironlb's carry CEL
// rules; MetalLB's BGPPeer CRD converts through MetalLB's webhook) and a ValidatingWebhookConfiguration
// applies to every request of its kinds, so two webhooks cannot judge one apiserver's requests apart:
//
//   - MetalLB: MetalLB's CRDs (its module's config/crd/bases), its webhook configuration
//     (config/webhook/manifests.yaml) pointed at https://localhost:9443 (the port is fixed in MetalLB's
//     code), and its controller (hack/metallb.sh) with --webhook-mode=enabled, --disable-cert-rotation
//     and a certificate for localhost in controller-runtime's default directory under its $TMPDIR; FRR mode (METALLB_BGP_TYPE=frr),
//     whose validation is the one that allows what ironlb implements (BFD, keepalive).
//   - ironlb: its CRDs and config/controller's webhook configuration, its controller in process.
//
// TestDifferentialAdmission and TestDifferentialAllocation share nothing but these helpers; the sizes
// and the seed come from the environment (see diffConfig), `make differential` runs them at full size.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// diffConfig is the differential tests' size and seed, from the environment:
// IRONLB_DIFF_SEED (default: from the clock, printed), IRONLB_DIFF_ADMISSION (admission cases, default
// 400: CI), IRONLB_DIFF_SEQUENCES (allocation sequences, default 40: CI).
type diffConfig struct {
	seed                uint64
	admission, sequence int
}

func diffConfigFromEnv(t *testing.T, admission, sequences int) diffConfig {
	t.Helper()
	c := diffConfig{seed: uint64(time.Now().UnixNano()), admission: admission, sequence: sequences}
	num := func(name string, into *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a count", name, v)
			}
			*into = n
		}
	}
	if v := os.Getenv("IRONLB_DIFF_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("IRONLB_DIFF_SEED=%q: want an unsigned number", v)
		}
		c.seed = s
	}
	num("IRONLB_DIFF_ADMISSION", &c.admission)
	num("IRONLB_DIFF_SEQUENCES", &c.sequence)
	return c
}

// diffSide is one implementation's apiserver, as the differential tests use it.
type diffSide struct {
	name string
	h    *harness
	dyn  dynamic.Interface
	log  string // the controller's log file ("" for ironlb, which logs to the test)
}

// metallbWebhookPort is where MetalLB's webhook server listens (k8s.webhookServer: not configurable).
const metallbWebhookPort = "9443"

// startMetalLBSide starts an apiserver with MetalLB's CRDs and webhook configuration and MetalLB's
// controller serving its webhook. Only one MetalLB webhook can listen on its fixed port on a machine:
// the test takes an exclusive lock on a file for it (released when the test ends).
func startMetalLBSide(t *testing.T) *diffSide {
	t.Helper()
	bin := metallbControllerBin(t)
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "ironlb-metallb-webhook-"+metallbWebhookPort+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); lock.Close() })
	if l, err := net.Listen("tcp", "127.0.0.1:"+metallbWebhookPort); err != nil {
		t.Fatalf("MetalLB's webhook port %s is in use on this machine: %v", metallbWebhookPort, err)
	} else {
		l.Close()
	}
	mod := metallbModuleDir(t)
	h := newHarnessWithCRDs(t, filepath.Join(mod, "config", "crd", "bases"))
	dir := t.TempDir()

	// A CA and a serving certificate for localhost, as the cert-controller would write them.
	data, err := renew(nil, certPlan{ca: true}, webhookNames("localhost", ns), time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// MetalLB's webhook server reads controller-runtime's default directory (--cert-dir is the
	// rotator's only), under $TMPDIR.
	certDir := filepath.Join(dir, "k8s-webhook-server", "serving-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if err := os.WriteFile(filepath.Join(certDir, k), data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(mod, "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(string(b), "---\n")), &vwc); err != nil {
		t.Fatal(err)
	}
	vwc.Name = "metallb-webhook-configuration"
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		url := "https://localhost:" + metallbWebhookPort + *cc.Service.Path
		cc.Service, cc.URL, cc.CABundle = nil, &url, data[keyCACert]
	}
	if _, err := h.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), &vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "metallb.log")
	startMetalLBControllerWith(t, h.cs, bin, h.env.Kubeconfig, logFile, []string{"TMPDIR=" + dir}, "--webhook-mode", "enabled", "--cert-dir", certDir)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("MetalLB's controller log (tail):\n%s", tailStr(string(b), 4000))
		}
	})
	s := &diffSide{name: "metallb", h: h, dyn: dynamic.NewForConfigOrDie(h.env.Config), log: logFile}
	s.waitWebhook(t)
	return s
}

// startIronlbSide starts an apiserver with ironlb's CRDs and webhook configuration and ironlb's
// controller (in this process) serving its webhook.
func startIronlbSide(t *testing.T) *diffSide {
	t.Helper()
	h := newHarness(t)
	h.installWebhookConfig()
	h.startWithWebhook()
	s := &diffSide{name: "ironlb", h: h, dyn: dynamic.NewForConfigOrDie(h.env.Config)}
	s.waitWebhook(t)
	return s
}

// waitWebhook waits until a reversed range (which both CRD schemas let through) is denied by the
// webhook: the apiserver reaches it.
func (s *diffSide) waitWebhook(t *testing.T) {
	t.Helper()
	probe := diffObject{Kind: "IPAddressPool", Name: "probe", Spec: map[string]any{"addresses": []any{"10.1.0.9-10.1.0.1"}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		o := s.admit(context.Background(), opCreate, probe, true)
		if o.infra == nil && !o.accepted && strings.Contains(o.msg, "denied the request") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's webhook not answering after 60s: %+v", s.name, o)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// diffObject is one object of a generated case: a MetalLB kind or a Service.
type diffObject struct {
	Kind        string            `json:"kind"`
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"` // Services only ("" = ns for the MetalLB kinds)
	Annotations map[string]string `json:"annotations,omitempty"`
	Spec        map[string]any    `json:"spec"`
}

var diffGVRs = map[string]schema.GroupVersionResource{
	"IPAddressPool":    {Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"},
	"L2Advertisement":  {Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"},
	"BGPAdvertisement": {Group: "metallb.io", Version: "v1beta1", Resource: "bgpadvertisements"},
	"BGPPeer":          {Group: "metallb.io", Version: "v1beta2", Resource: "bgppeers"},
	"BFDProfile":       {Group: "metallb.io", Version: "v1beta1", Resource: "bfdprofiles"},
	"Community":        {Group: "metallb.io", Version: "v1beta1", Resource: "communities"},
	"Service":          {Version: "v1", Resource: "services"},
}

func (o diffObject) namespace() string {
	if o.Namespace != "" {
		return o.Namespace
	}
	return ns
}

func (o diffObject) unstructured() *unstructured.Unstructured {
	gvr := diffGVRs[o.Kind]
	apiVersion := gvr.Version
	if gvr.Group != "" {
		apiVersion = gvr.Group + "/" + gvr.Version
	}
	meta := map[string]any{"name": o.Name, "namespace": o.namespace()}
	if len(o.Annotations) > 0 {
		ann := map[string]any{}
		for k, v := range o.Annotations {
			ann[k] = v
		}
		meta["annotations"] = ann
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": o.Kind, "metadata": meta, "spec": deepCopyJSON(o.Spec)}}
}

// yaml renders the object as a user writes it.
func (o diffObject) yaml() string {
	b, err := yaml.Marshal(o.unstructured().Object)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

func deepCopyJSON(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return runtimeDeepCopy(m).(map[string]any)
}

func runtimeDeepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = runtimeDeepCopy(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = runtimeDeepCopy(x)
		}
		return out
	default:
		return v
	}
}

type diffOp string

const (
	opCreate diffOp = "create"
	opUpdate diffOp = "update" // the spec replaced (a JSON patch on /spec)
	opDelete diffOp = "delete"
)

// outcome is an apiserver's answer to one request: accepted, or refused with the message; infra is
// set when the request did not reach a decision (the webhook unreachable, a timeout): those are
// retried, never compared.
type outcome struct {
	accepted bool
	msg      string
	infra    error
}

func (o outcome) String() string {
	switch {
	case o.infra != nil:
		return "error: " + o.infra.Error()
	case o.accepted:
		return "accepted"
	}
	return "refused: " + o.msg
}

// admit sends one request (dryRun: server-side dry run, All) and classifies the answer.
func (s *diffSide) admit(ctx context.Context, op diffOp, o diffObject, dryRun bool) outcome {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var dry []string
	if dryRun {
		dry = []string{metav1.DryRunAll}
	}
	r := s.dyn.Resource(diffGVRs[o.Kind]).Namespace(o.namespace())
	var err error
	switch op {
	case opCreate:
		_, err = r.Create(ctx, o.unstructured(), metav1.CreateOptions{DryRun: dry, FieldValidation: "Strict"})
	case opUpdate:
		patch, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec", "value": o.Spec}})
		_, err = r.Patch(ctx, o.Name, types.JSONPatchType, patch, metav1.PatchOptions{DryRun: dry, FieldValidation: "Strict"})
	case opDelete:
		err = r.Delete(ctx, o.Name, metav1.DeleteOptions{DryRun: dry})
	}
	if err == nil {
		return outcome{accepted: true}
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		switch code := st.Status().Code; {
		case code == http.StatusInternalServerError && strings.Contains(err.Error(), "failed calling webhook"),
			code >= 500, code == http.StatusTooManyRequests, code == http.StatusConflict && !strings.Contains(err.Error(), "already exists"):
			return outcome{infra: err}
		}
		return outcome{msg: err.Error()}
	}
	return outcome{infra: err}
}

// admitRetrying is admit, retrying what did not reach a decision for up to 30s.
func (s *diffSide) admitRetrying(t *testing.T, op diffOp, o diffObject, dryRun bool) outcome {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := s.admit(context.Background(), op, o, dryRun)
		if out.infra == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s %s %s: no decision in 30s: %v", s.name, op, o.Kind, o.Name, out.infra)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// both runs fn for each side at once.
func both[T any](a, b *diffSide, fn func(*diffSide) T) (T, T) {
	ch := make(chan T, 1)
	go func() { ch <- fn(b) }()
	x := fn(a)
	return x, <-ch
}

// pickOne returns a random element of xs.
func pickOne[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }
