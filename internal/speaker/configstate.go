package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
)

// The speaker's ConfigurationState, as MetalLB's speaker keeps it: "speaker-<node>" in the
// configuration namespace, labelled metallb.io/component-type=speaker and metallb.io/node-name, owned
// by the speaker's Pod (deleted with it), with one condition, configReconcilerValid, False with
// reason ConfigurationError while an object this speaker reads is invalid. Result and errorSummary
// follow from the conditions (config.ConfigStateStatus, the controller's rule too).

// configProblems lists what makes this speaker's configuration invalid, sorted: the configuration
// objects the model leaves out with a reported reason (an invalid IPAddressPool, an
// L2Advertisement whose selector does not parse, an object that does not decode), and the BGP
// objects bgpconfig refuses (bgpErrs, their messages by object). Services, EndpointSlices and Nodes
// left out are not configuration: a Service with a forged status is reported on the Service.
func configProblems(drops []config.Dropped, bgpErrs map[bgpconfig.ObjectRef]string) []string {
	var out []string
	for _, d := range drops {
		switch d.Kind {
		case "Service", "EndpointSlice", "Node":
			continue
		}
		if d.Reason.Reported() {
			out = append(out, d.String())
		}
	}
	for _, msg := range bgpErrs {
		out = append(out, msg)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// configStateSink records the speaker's configReconcilerValid condition (*configStateWriter); it
// never blocks.
type configStateSink interface {
	Set(c metav1.Condition)
}

// configStateWriter keeps the speaker's ConfigurationState. The run loop records the condition
// (Set); Run writes it, retrying a failed write after a second, and checks it again every
// configStateResync (an object deleted by hand, or with an earlier Pod, comes back).
type configStateWriter struct {
	dyn   dynamic.Interface
	ns    string
	node  string
	owner *metav1.OwnerReference // the speaker's Pod; nil when unknown (the object then outlives it)
	log   *slog.Logger
	now   func() time.Time

	// latest holds the conditions to write, by type; empty until the first Set.
	latest *latestWriter[map[string]metav1.Condition]
}

// newConfigStateWriter builds the writer; podName and podUID name the Pod that owns the object
// ("" for none).
func newConfigStateWriter(dyn dynamic.Interface, ns, node, podName, podUID string, log *slog.Logger) *configStateWriter {
	w := &configStateWriter{dyn: dyn, ns: ns, node: node, log: log, now: time.Now,
		latest: newLatestWriter[map[string]metav1.Condition](nil)}
	if podName != "" && podUID != "" {
		w.owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: podName, UID: types.UID(podUID)}
	}
	return w
}

func (w *configStateWriter) name() string { return config.SpeakerConfigState(w.node) }

// Set records the condition to write, replacing the one of its type; conditions of other types stay.
func (w *configStateWriter) Set(c metav1.Condition) {
	w.latest.Update(func(old map[string]metav1.Condition) map[string]metav1.Condition {
		want := maps.Clone(old)
		if want == nil {
			want = map[string]metav1.Condition{}
		}
		want[c.Type] = c
		return want
	})
}

// configStateResync is how often the object is checked without a change: one GET.
const configStateResync = time.Minute

// Run writes until ctx ends, retrying a failed write after statusSyncBackoff. A failure is logged
// when it differs from the last one (a speaker without the RBAC to write says so once, not every
// second).
func (w *configStateWriter) Run(ctx context.Context) {
	lastErr := ""
	w.latest.Run(ctx, writeLoop{backoff: statusSyncBackoff, resync: configStateResync, report: func(err error) {
		switch {
		case err == nil:
			lastErr = ""
		case err.Error() != lastErr:
			w.log.Warn("updating configurationstate; retrying", "name", w.name(), "err", err)
			lastErr = err.Error()
		}
	}}, w.write)
}

// write creates the object if it is missing and writes the status the conditions byType give,
// unless it is already there. The update carries the resourceVersion it read: a conflict is a
// failed write, retried.
func (w *configStateWriter) write(ctx context.Context, byType map[string]metav1.Condition) error {
	want := slices.SortedFunc(maps.Values(byType), func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	if len(want) == 0 {
		return nil
	}
	c := w.dyn.Resource(v1beta1.ConfigurationStateGVR).Namespace(w.ns)
	cur, err := c.Get(ctx, w.name(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		meta := map[string]any{"name": w.name(), "namespace": w.ns,
			"labels": map[string]any{config.LabelComponentType: "speaker", config.LabelNodeName: w.node}}
		if w.owner != nil {
			ref, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(w.owner)
			meta["ownerReferences"] = []any{ref}
		}
		cur, err = c.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "ConfigurationState", "metadata": meta}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("configurationstate %s: %w", w.name(), err)
	}
	var st v1beta1.ConfigurationStateStatus
	if raw, ok, _ := unstructured.NestedMap(cur.Object, "status"); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st) // a garbled status is rewritten
	}
	next := st
	next.Conditions = config.MergeConditions(st.Conditions, metav1.NewTime(w.now().Truncate(time.Second)), want...)
	next.Result, next.ErrorSummary = config.ConfigStateStatus(next.Conditions)
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&next)
	if err != nil {
		return err
	}
	if old, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&st); sameJSON(old, status) {
		return nil
	}
	cur.Object["status"] = status
	if _, err := c.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating configurationstate %s: %w", w.name(), err)
	}
	return nil
}
