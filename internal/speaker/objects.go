package speaker

import (
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/config"
)

// stores are the informers' stores the model is built from. The custom resources are
// *unstructured.Unstructured (dynamic informers); the others are typed.
type stores struct {
	services, slices, nodes cache.Store
	pools, l2ads            cache.Store
}

// modelInput is the thin adapter between the informers and config.BuildModel: it lists the stores
// and decodes the custom resources, recording those that do not decode as dropped.
func (st stores) modelInput(lbClass string) config.ModelInput {
	in := config.ModelInput{LBClass: lbClass}
	in.Pools = decodeTyped[v1beta1.IPAddressPool]("IPAddressPool", st.pools.List(), &in.Dropped)
	in.L2Advertisements = decodeTyped[v1beta1.L2Advertisement]("L2Advertisement", st.l2ads.List(), &in.Dropped)
	for _, o := range st.services.List() {
		in.Services = append(in.Services, o.(*corev1.Service))
	}
	for _, o := range st.slices.List() {
		in.EndpointSlices = append(in.EndpointSlices, o.(*discoveryv1.EndpointSlice))
	}
	for _, o := range st.nodes.List() {
		in.Nodes = append(in.Nodes, o.(*corev1.Node))
	}
	return in
}

// object returns the object a drop names, from its store, for its event; nil if it is gone.
func (st stores) object(kind, ns, name string) runtime.Object {
	var s cache.Store
	switch kind {
	case "Service":
		s = st.services
	case "IPAddressPool":
		s = st.pools
	case "L2Advertisement":
		s = st.l2ads
	case "EndpointSlice":
		s = st.slices
	}
	if s == nil {
		return nil
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	o, ok, _ := s.GetByKey(key)
	if !ok {
		return nil
	}
	ro, _ := o.(runtime.Object)
	return ro
}

// decodeTyped decodes unstructured objects of kind (T's kind, the store's) into T. An object that
// does not decode is left out and recorded as config.Undecodable under kind: the object's own kind
// field may be what does not decode, and the drop reporter finds the object by kind.
func decodeTyped[T any](kind string, objs []any, dropped *[]config.Dropped) []T {
	out := make([]T, 0, len(objs))
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var v T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
			*dropped = append(*dropped, config.Dropped{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(),
				Reason: config.Undecodable, Detail: err.Error()})
			continue
		}
		out = append(out, v)
	}
	return out
}

// dropReporter reports what the model leaves out: one log line and one Warning event on the object
// per distinct drop, and nothing more while the object stays as it is, so a steady bad object does
// not raise an event at every model build. Owned by the run goroutine.
type dropReporter struct {
	node   string
	log    *slog.Logger
	rec    record.EventRecorder
	object func(kind, ns, name string) runtime.Object
	last   map[dropKey]string // object -> what was reported about it
}

type dropKey struct{ kind, ns, name string }

func newDropReporter(node string, log *slog.Logger, rec record.EventRecorder, object func(kind, ns, name string) runtime.Object) *dropReporter {
	return &dropReporter{node: node, log: log, rec: rec, object: object, last: map[dropKey]string{}}
}

// report reports the drops not reported yet (Reported reasons only), and forgets objects no longer
// dropped, so that a later drop of theirs is reported again. The event's reason is the object's first
// DropReason; its message lists them all.
func (r *dropReporter) report(drops []config.Dropped) {
	now := map[dropKey]string{}
	first := map[dropKey]config.DropReason{}
	var order []dropKey
	for _, d := range drops {
		if !d.Reason.Reported() {
			continue
		}
		k := dropKey{d.Kind, d.Namespace, d.Name}
		text := string(d.Reason)
		if d.Detail != "" {
			text += ": " + d.Detail
		}
		if prev, ok := now[k]; ok {
			now[k] = prev + "; " + text
			continue
		}
		now[k], first[k] = text, d.Reason
		order = append(order, k)
	}
	for _, k := range order {
		text := now[k]
		if r.last[k] == text {
			continue
		}
		r.log.Warn("object left out", "kind", k.kind, "namespace", k.ns, "name", k.name, "reason", text)
		if o := r.object(k.kind, k.ns, k.name); o != nil {
			r.rec.Eventf(o, corev1.EventTypeWarning, string(first[k]), "node %s leaves it out: %s", r.node, text)
		}
	}
	r.last = now
}
