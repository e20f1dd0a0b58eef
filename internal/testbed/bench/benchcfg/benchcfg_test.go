package benchcfg

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cluster is a fake cluster: the objects it holds, by Ref, with their manifests.
type cluster map[Ref]string

// apply runs Plan's steps the way Apply's kubectl calls do.
func (c cluster) apply(t *testing.T, want []Object) {
	t.Helper()
	var have []Ref
	for r := range c {
		have = append(have, r)
	}
	for _, st := range Plan(want, have) {
		switch st.Op {
		case Put:
			c[st.Object.Ref] = st.Object.Manifest
		case Delete:
			if _, ok := c[st.Object.Ref]; !ok {
				t.Errorf("deleting %v, which the cluster does not hold", st.Object.Ref)
			}
			delete(c, st.Object.Ref)
		}
	}
}

func obj(res, name, manifest string) Object {
	return Object{Ref: Ref{Resource: res, Namespace: Namespace, Name: name}, Manifest: manifest, Replace: true}
}

func refs(objs ...Object) cluster {
	c := cluster{}
	for _, o := range objs {
		c[o.Ref] = o.Manifest
	}
	return c
}

func TestPlanOrder(t *testing.T) {
	peer := obj("bgppeer.metallb.io", "router", "peer")
	have := []Ref{
		{Resource: "bfdprofile.metallb.io", Namespace: Namespace, Name: "bench"},
		{Resource: "community.metallb.io", Namespace: Namespace, Name: "c"},
		{Resource: "bgppeer.metallb.io", Namespace: Namespace, Name: "stray"},
		{Resource: "bgpadvertisement.metallb.io", Namespace: Namespace, Name: "old"},
		{Resource: "bgppeer.metallb.io", Namespace: Namespace, Name: "router"},
		{Resource: "bgppeer.metallb.io", Namespace: "elsewhere", Name: "x"},       // not the configuration namespace
		{Resource: "ipaddresspool.metallb.io", Namespace: Namespace, Name: "lab"}, // not owned
	}
	got := Plan([]Object{peer}, have)
	want := []Step{
		{Op: Put, Object: peer},
		{Op: Delete, Object: Object{Ref: have[2]}}, // peers first
		{Op: Delete, Object: Object{Ref: have[3]}}, // advertisements
		{Op: Delete, Object: Object{Ref: have[0]}}, // then the BFD profiles they may name
		{Op: Delete, Object: Object{Ref: have[1]}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Plan (-want +got):\n%s", diff)
	}
}

// TestPlanLeavesExactlyTheRun: whatever an earlier run left, the cluster holds exactly the wanted
// objects of the owned kinds afterwards, each with the wanted manifest; other kinds stay.
func TestPlanLeavesExactlyTheRun(t *testing.T) {
	lab := obj("ipaddresspool.metallb.io", "lab", "lab pool")
	withBFD := []Object{obj("bfdprofile.metallb.io", "bench", "50ms"), obj("bgppeer.metallb.io", "router", "peer with bfdProfile: bench")}
	noBFD := []Object{obj("bgppeer.metallb.io", "router", "peer without bfd")}
	for _, tt := range []struct {
		name       string
		start      cluster
		run1, run2 []Object
	}{
		{name: "bfd then none", start: refs(lab), run1: withBFD, run2: noBFD},
		{name: "none then bfd", start: refs(lab), run1: noBFD, run2: withBFD},
		{name: "a stray peer with a profile from elsewhere", start: refs(lab, obj("bgppeer.metallb.io", "e2e", "bfdProfile: fast"),
			obj("bfdprofile.metallb.io", "fast", "fast")), run1: noBFD, run2: noBFD},
		{name: "bgp then layer 2 (no BGP configuration at all)", start: refs(lab), run1: withBFD, run2: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.start
			c.apply(t, tt.run1)
			c.apply(t, tt.run2)
			want := refs(append([]Object{lab}, tt.run2...)...)
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("cluster after run 2 (-want +got):\n%s", diff)
			}
			// Again: nothing to delete.
			var have []Ref
			for r := range c {
				have = append(have, r)
			}
			for _, st := range Plan(tt.run2, have) {
				if st.Op == Delete {
					t.Errorf("second plan of the same run deletes %v", st.Object.Ref)
				}
			}
		})
	}
}

func TestParseNames(t *testing.T) {
	got, err := ParseNames("bgppeer.metallb.io/router\n\nbfdprofile.metallb.io/bench\n", Namespace)
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{{"bgppeer.metallb.io", Namespace, "router"}, {"bfdprofile.metallb.io", Namespace, "bench"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got, err := ParseNames("No resources found in metallb-system namespace.\n", Namespace); err != nil || len(got) != 0 {
		t.Errorf("none: %v, %v", got, err)
	}
	if _, err := ParseNames("error: the server doesn't have a resource type \"bgppeer\"\n", Namespace); err == nil {
		t.Error("no error for a line that is not a name")
	}
}

func TestRefusal(t *testing.T) {
	// MetalLB v0.16.1's speaker, as it reports a BFD profile in native mode: its ConfigurationState
	// and its log line (go-kit JSON; kubectl logs --prefix puts the pod first).
	invalid := `{"apiVersion":"v1","items":[
	 {"metadata":{"name":"speaker-myk8s-worker","labels":{"metallb.io/component-type":"speaker","metallb.io/node-name":"myk8s-worker"}},
	  "status":{"result":"Invalid","errorSummary":"configuration error: peer 172.18.255.254 has bfd-profile set on native bgp mode"}},
	 {"metadata":{"name":"controller","labels":{"metallb.io/component-type":"controller"}},"status":{"result":"Invalid","errorSummary":"a pool"}},
	 {"metadata":{"name":"speaker-myk8s-worker2","labels":{"metallb.io/component-type":"speaker"}},"status":{"result":"Valid"}}]}`
	valid := `{"apiVersion":"v1","items":[{"metadata":{"name":"speaker-myk8s-worker","labels":{"metallb.io/component-type":"speaker"}},"status":{"result":"Valid"}}]}`
	mlbLog := `[pod/metallb-speaker-abcde/speaker] {"caller":"config_controller.go:183","controller":"ConfigReconciler","error":"peer 172.18.255.254 has bfd-profile set on native bgp mode","level":"error","ts":"2026-11-26T12:00:00Z"}`
	ironLog := `[pod/ironlb-speaker-x/speaker] time=2026-11-26T12:00:00Z level=WARN msg="invalid bgp configuration: left out (never valid)" kind=BGPPeer name=router err="bad"`
	for _, tt := range []struct {
		name, states, logs, want string
	}{
		{name: "nothing", states: valid},
		{name: "MetalLB's ConfigurationState", states: invalid,
			want: "ConfigurationState speaker-myk8s-worker: configuration error: peer 172.18.255.254 has bfd-profile set on native bgp mode"},
		{name: "MetalLB's log", states: valid, logs: mlbLog + "\n" + mlbLog + "\n{\"level\":\"info\",\"controller\":\"ConfigReconciler\",\"event\":\"config reloaded\"}",
			want: "[pod/metallb-speaker-abcde/speaker] peer 172.18.255.254 has bfd-profile set on native bgp mode"},
		{name: "ironlb's log", logs: ironLog, want: ironLog},
		{name: "kubectl failed: no JSON", states: "error: the server doesn't have a resource type", logs: "No resources found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, refused := Refusal([]byte(tt.states), tt.logs)
			if refused != (tt.want != "") || got != tt.want {
				t.Errorf("Refusal = %q, %v; want %q", got, refused, tt.want)
			}
		})
	}
}
