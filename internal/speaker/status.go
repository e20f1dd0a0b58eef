package speaker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var l2StatusGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}

// MetalLB's labels on ServiceL2Status objects.
const (
	labelNode         = "metallb.io/node"
	labelServiceName  = "metallb.io/service-name"
	labelServiceNS    = "metallb.io/service-namespace"
	statusSyncBackoff = time.Second
)

// statusWriter keeps, in the configuration namespace, one ServiceL2Status per Service this node
// announces (MetalLB's shape and labels: status.node, serviceName, serviceNamespace, interfaces), and
// deletes this node's objects for Services it no longer announces. The API is slow next to failover,
// so the run loop only records what it wants (Set) and a goroutine catches up.
type statusWriter struct {
	dyn  dynamic.Interface
	ns   string
	node string
	log  *slog.Logger
	kick chan struct{}

	mu   sync.Mutex          // guards want
	want map[string][]string // "namespace/name" -> interfaces
}

func newStatusWriter(dyn dynamic.Interface, ns, node string, log *slog.Logger) *statusWriter {
	return &statusWriter{dyn: dyn, ns: ns, node: node, log: log, kick: make(chan struct{}, 1), want: map[string][]string{}}
}

// Set records the Services this node announces now, with the interfaces it announces on.
func (w *statusWriter) Set(want map[string][]string) {
	w.mu.Lock()
	w.want = want
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run syncs until ctx ends; a failed sync is retried after a second.
func (w *statusWriter) Run(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-retry.C:
		}
		if err := w.sync(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("updating ServiceL2Status objects", "err", err)
			retry.Reset(statusSyncBackoff)
		}
	}
}

func statusName(key, node string) string {
	h := sha256.Sum256([]byte(key + "@" + node))
	return "l2-" + hex.EncodeToString(h[:])[:12]
}

func (w *statusWriter) sync(ctx context.Context) error {
	w.mu.Lock()
	want := w.want
	w.mu.Unlock()
	c := w.dyn.Resource(l2StatusGVR).Namespace(w.ns)
	list, err := c.List(ctx, metav1.ListOptions{LabelSelector: labelNode + "=" + w.node})
	if err != nil {
		return err
	}
	have := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		o := &list.Items[i]
		key := o.GetLabels()[labelServiceNS] + "/" + o.GetLabels()[labelServiceName]
		if _, ok := want[key]; !ok || o.GetName() != statusName(key, w.node) {
			if err := c.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			continue
		}
		have[key] = o
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		ns, name := splitKey(key)
		ifaces := []any{}
		for _, i := range want[key] {
			ifaces = append(ifaces, map[string]any{"name": i})
		}
		status := map[string]any{"node": w.node, "serviceName": name, "serviceNamespace": ns, "interfaces": ifaces}
		o, ok := have[key]
		if !ok {
			o = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
				"metadata": map[string]any{"name": statusName(key, w.node), "namespace": w.ns,
					"labels": map[string]any{labelNode: w.node, labelServiceName: name, labelServiceNS: ns}},
			}}
			if o, err = c.Create(ctx, o, metav1.CreateOptions{}); err != nil {
				return err
			}
		} else if cur, _, _ := unstructured.NestedMap(o.Object, "status"); equalStatus(cur, status) {
			continue
		}
		o.Object["status"] = status
		if _, err := c.UpdateStatus(ctx, o, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func equalStatus(a, b map[string]any) bool {
	if a["node"] != b["node"] || a["serviceName"] != b["serviceName"] || a["serviceNamespace"] != b["serviceNamespace"] {
		return false
	}
	ai, _ := a["interfaces"].([]any)
	bi, _ := b["interfaces"].([]any)
	if len(ai) != len(bi) {
		return false
	}
	for i := range ai {
		am, _ := ai[i].(map[string]any)
		bm, _ := bi[i].(map[string]any)
		if am["name"] != bm["name"] {
			return false
		}
	}
	return true
}

func splitKey(key string) (string, string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}
