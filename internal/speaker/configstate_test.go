package speaker

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
)

// TestConfigProblems: what makes the speaker's ConfigurationState Invalid. Configuration objects
// left out with a reported reason and BGP objects bgpconfig refuses count; Services, EndpointSlices
// and Nodes, and unreported reasons, do not.
func TestConfigProblems(t *testing.T) {
	pool := config.Dropped{Kind: "IPAddressPool", Namespace: testNS, Name: "p", Reason: config.InvalidPool, Detail: "overlaps q"}
	ad := config.Dropped{Kind: "L2Advertisement", Namespace: testNS, Name: "a", Reason: config.InvalidSelector, Detail: "spec.nodeSelectors[0]"}
	undecodable := config.Dropped{Kind: "BGPPeer", Namespace: testNS, Name: "x", Reason: config.Undecodable, Detail: "bad"}
	forged := config.Dropped{Kind: "Service", Namespace: "default", Name: "s", Reason: config.AddressInNoPool, Detail: "8.8.8.8"}
	pending := config.Dropped{Kind: "Service", Namespace: "default", Name: "s", Reason: config.NoAddress}
	peer := bgpconfig.ObjectRef{Kind: "BGPPeer", Name: "r"}
	for _, tt := range []struct {
		name  string
		drops []config.Dropped
		bgp   map[bgpconfig.ObjectRef]string
		want  []string
	}{
		{"nothing wrong", nil, nil, nil},
		{"Services are not configuration", []config.Dropped{forged, pending}, nil, nil},
		{"an invalid pool and advertisement, sorted", []config.Dropped{pool, ad}, nil,
			[]string{"IPAddressPool metallb-system/p: InvalidPool: overlaps q", "L2Advertisement metallb-system/a: InvalidSelector: spec.nodeSelectors[0]"}},
		{"an object that does not decode", []config.Dropped{undecodable}, nil, []string{"BGPPeer metallb-system/x: Undecodable: bad"}},
		{"a BGP object refused", nil, map[bgpconfig.ObjectRef]string{peer: "BGPPeer r: spec.holdTime: invalid timers"},
			[]string{"BGPPeer r: spec.holdTime: invalid timers"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, configProblems(tt.drops, tt.bgp)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigStateWriterAgainstAPIServer: each speaker writes its own ConfigurationState as MetalLB's
// does (name speaker-<node>, labels, owned by its Pod, status through the subresource and valid by
// the CRD's schema), leaves the others alone, writes nothing when nothing changed, and brings the
// object back when it is deleted. The writer of n1 runs as the speaker's ServiceAccount with
// config/speaker's RBAC alone, so the role is not tighter than the writer needs.
func TestConfigStateWriterAgainstAPIServer(t *testing.T) {
	env, _, dyn := startAPI(t)
	if out, err := env.Kubectl("apply", "-f", "../../config/speaker/10-rbac.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	asSA := rest.CopyConfig(env.Config)
	asSA.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + testNS + ":ironlb-speaker"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n1 := newConfigStateWriter(dynamic.NewForConfigOrDie(asSA), testNS, "n1", "speaker-abcde", "0b3c6c1e-1111-2222-3333-444455556666", log)
	n2 := newConfigStateWriter(dyn, testNS, "n2", "", "", log)
	done := make(chan struct{}, 2)
	for _, w := range []*configStateWriter{n1, n2} {
		go func() { w.Run(ctx); done <- struct{}{} }()
	}
	defer func() { cancel(); <-done; <-done }()
	c := dyn.Resource(v1beta1.ConfigurationStateGVR).Namespace(testNS)
	get := func(name string) (*unstructured.Unstructured, v1beta1.ConfigurationStateStatus) {
		o, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, v1beta1.ConfigurationStateStatus{}
		}
		var st v1beta1.ConfigurationStateStatus
		raw, _, _ := unstructured.NestedMap(o.Object, "status")
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		return o, st
	}
	wait := func(name string, ok func(*unstructured.Unstructured, v1beta1.ConfigurationStateStatus) bool) (*unstructured.Unstructured, v1beta1.ConfigurationStateStatus) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			o, st := get(name)
			if o != nil && ok(o, st) {
				return o, st
			}
			if time.Now().After(deadline) {
				t.Fatalf("configurationstate %s never as wanted; have %v", name, o)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	n1.Set(config.ConfigCondition(config.ConditionConfigValid, []string{"BGPPeer r: spec.holdTime: invalid timers"}))
	n2.Set(config.ConfigCondition(config.ConditionConfigValid, nil))
	o, st := wait("speaker-n1", func(_ *unstructured.Unstructured, st v1beta1.ConfigurationStateStatus) bool { return st.Result != "" })
	if diff := cmp.Diff(map[string]string{"metallb.io/component-type": "speaker", "metallb.io/node-name": "n1"}, o.GetLabels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].Name != "speaker-abcde" || string(refs[0].UID) != "0b3c6c1e-1111-2222-3333-444455556666" {
		t.Errorf("owner references %+v, want the speaker's Pod", refs)
	}
	if st.Result != v1beta1.ConfigurationResultInvalid || st.ErrorSummary != "BGPPeer r: spec.holdTime: invalid timers" ||
		len(st.Conditions) != 1 || st.Conditions[0].Type != "configReconcilerValid" || st.Conditions[0].Reason != "ConfigurationError" {
		t.Errorf("speaker-n1 status %+v, want Invalid with its error", st)
	}
	o2, st2 := wait("speaker-n2", func(_ *unstructured.Unstructured, st v1beta1.ConfigurationStateStatus) bool { return st.Result != "" })
	if st2.Result != v1beta1.ConfigurationResultValid || st2.ErrorSummary != "" || len(o2.GetOwnerReferences()) != 0 {
		t.Errorf("speaker-n2 %+v owners %v, want Valid without owner", st2, o2.GetOwnerReferences())
	}

	// Fixed: Valid, the condition's transition time moves.
	n1.Set(config.ConfigCondition(config.ConditionConfigValid, nil))
	o, st = wait("speaker-n1", func(_ *unstructured.Unstructured, st v1beta1.ConfigurationStateStatus) bool {
		return st.Result == v1beta1.ConfigurationResultValid
	})
	if st.ErrorSummary != "" || st.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("speaker-n1 after the fix: %+v", st)
	}

	// The same condition again: nothing is written (written here, after the Run goroutine's).
	rv := o.GetResourceVersion()
	n1.Set(config.ConfigCondition(config.ConditionConfigValid, nil))
	if err := n1.write(ctx, n1.latest.Latest()); err != nil {
		t.Fatal(err)
	}
	if o, _ := get("speaker-n1"); o.GetResourceVersion() != rv {
		t.Errorf("speaker-n1 written without a change: resourceVersion %s, was %s", o.GetResourceVersion(), rv)
	}

	// Deleted by hand: back at the next write.
	if err := c.Delete(ctx, "speaker-n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n2.Set(config.ConfigCondition(config.ConditionConfigValid, nil))
	wait("speaker-n2", func(_ *unstructured.Unstructured, st v1beta1.ConfigurationStateStatus) bool {
		return st.Result == v1beta1.ConfigurationResultValid
	})

	// A node that cannot serve layer 2 (its address on lo): its layer2Eligible condition is kept
	// beside the configuration's, and is no configuration error (still Valid). A later Set of the
	// configuration's condition leaves it.
	n2.Set(layer2Condition("node \"n2\" is not eligible for layer 2", Layer2Loopback))
	n2.Set(config.ConfigCondition(config.ConditionConfigValid, nil))
	_, st2 = wait("speaker-n2", func(_ *unstructured.Unstructured, st v1beta1.ConfigurationStateStatus) bool {
		return len(st.Conditions) == 2
	})
	got := map[string]string{}
	for _, c := range st2.Conditions {
		got[c.Type] = string(c.Status) + "/" + c.Reason
	}
	if diff := cmp.Diff(map[string]string{"configReconcilerValid": "True/Reconciled", "layer2Eligible": "False/Loopback"}, got); diff != "" ||
		st2.Result != v1beta1.ConfigurationResultValid {
		t.Errorf("speaker-n2 conditions (-want +got):\n%s result %s", diff, st2.Result)
	}
}

// fakeConfigState records the conditions the owner sets.
type fakeConfigState struct{ got []metav1.Condition }

func (f *fakeConfigState) Set(c metav1.Condition) { f.got = append(f.got, c) }

// TestOwnerConfigState: the owner reports its configuration's condition when the objects change,
// not on every reconcile: True while the model leaves nothing out, False with the invalid pool.
func TestOwnerConfigState(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	f := &fakeConfigState{}
	e.s.cfgState = f
	e.s.reconcile(context.Background())
	e.s.reconcile(context.Background()) // nothing changed: nothing reported
	want := []metav1.Condition{config.ConfigCondition(config.ConditionConfigValid, nil)}
	if diff := cmp.Diff(want, f.got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	bad := toUnstructured(t, "IPAddressPool", &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "overlap", Namespace: testNS},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"172.18.255.240/28"}}})
	if err := e.objs.pools.Add(bad); err != nil {
		t.Fatal(err)
	}
	e.s.objectsChanged()
	e.s.reconcile(context.Background())
	if len(f.got) != 2 || f.got[1].Status != metav1.ConditionFalse || f.got[1].Reason != config.ReasonConfigurationError ||
		!strings.Contains(f.got[1].Message, "IPAddressPool metallb-system/") || !strings.Contains(f.got[1].Message, "InvalidPool") {
		t.Errorf("after an overlapping pool: %+v, want a ConfigurationError naming it", f.got)
	}
}
