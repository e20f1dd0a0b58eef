package speaker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	frrk8s "github.com/ironlb/ironlb/api/frrk8s/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta1"
)

// MetalLB's labels on ServiceL2Status and ServiceBGPStatus objects.
const (
	labelNode         = "metallb.io/node"
	labelServiceName  = "metallb.io/service-name"
	labelServiceNS    = "metallb.io/service-namespace"
	statusSyncBackoff = time.Second
)

// statusKind is one kind of status object a statusWriter keeps: one object per key (a Service, a
// BGP peer) and node, found again by the node label.
type statusKind struct {
	gvr              schema.GroupVersionResource
	apiVersion, kind string
	nodeLabel        string
	// prefix starts the objects' names: prefix + a hash of key and node.
	prefix string
	// labels are an object's labels besides the node label.
	labels func(key string) map[string]string
	// minInterval is the least time between two syncs: sessions that retry every few seconds
	// would otherwise write on every attempt.
	minInterval time.Duration
}

var (
	// MetalLB's ServiceL2Status: key "namespace/name", status {node, serviceName, serviceNamespace,
	// interfaces}.
	l2StatusKind = statusKind{
		gvr:        v1beta1.ServiceL2StatusGVR,
		apiVersion: "metallb.io/v1beta1", kind: "ServiceL2Status", nodeLabel: labelNode, prefix: "l2-",
		labels: serviceLabels,
	}
	// MetalLB's ServiceBGPStatus: key "namespace/name", status {node, serviceName, serviceNamespace,
	// peers}.
	bgpStatusKind = statusKind{
		gvr:        v1beta1.ServiceBGPStatusGVR,
		apiVersion: "metallb.io/v1beta1", kind: "ServiceBGPStatus", nodeLabel: labelNode, prefix: "bgp-",
		labels: serviceLabels,
	}
	// frr-k8s' BGPSessionState: key the peer's address, status {bgpStatus, bfdStatus, node, peer,
	// vrf}.
	sessionStateKind = statusKind{
		gvr:        frrk8s.BGPSessionStateGVR,
		apiVersion: frrk8s.GroupVersion.String(), kind: "BGPSessionState", nodeLabel: frrk8s.LabelNode, prefix: "bgp-session-",
		labels: func(peer string) map[string]string {
			// A label value has no ':': an IPv6 address is written with '-' (the full address is
			// in status.peer).
			return map[string]string{frrk8s.LabelPeer: strings.ReplaceAll(peer, ":", "-")}
		},
		minInterval: time.Second,
	}
)

func serviceLabels(key string) map[string]string {
	ns, name := splitKey(key)
	return map[string]string{labelServiceName: name, labelServiceNS: ns}
}

// l2Status is the status of a ServiceL2Status.
func l2Status(key, node string, ifaces []string) map[string]any {
	ns, name := splitKey(key)
	list := []any{}
	for _, i := range ifaces {
		list = append(list, map[string]any{"name": i})
	}
	return map[string]any{"node": node, "serviceName": name, "serviceNamespace": ns, "interfaces": list}
}

// bgpStatus is the status of a ServiceBGPStatus.
func bgpStatus(key, node string, peers []string) map[string]any {
	ns, name := splitKey(key)
	list := []any{}
	for _, p := range peers {
		list = append(list, p)
	}
	return map[string]any{"node": node, "serviceName": name, "serviceNamespace": ns, "peers": list}
}

// statusWriter keeps, in the configuration namespace, one status object of its kind per key this
// node reports (a Service it announces, a BGP session it has), and deletes this node's objects of
// keys it no longer reports. The API is slow next to failover, so the run loop only records what it
// wants (Set) and a goroutine catches up.
type statusWriter struct {
	dyn  dynamic.Interface
	kind statusKind
	ns   string
	node string
	log  *slog.Logger

	latest *latestWriter[map[string]map[string]any] // key -> status
}

func newStatusWriter(dyn dynamic.Interface, kind statusKind, ns, node string, log *slog.Logger) *statusWriter {
	return &statusWriter{dyn: dyn, kind: kind, ns: ns, node: node, log: log, latest: newLatestWriter(map[string]map[string]any{})}
}

// Set records every key this node reports now with its status; it never blocks.
func (w *statusWriter) Set(want map[string]map[string]any) {
	w.latest.Update(func(map[string]map[string]any) map[string]map[string]any { return want })
}

// Put records one key's status (nil removes the key); it never blocks.
func (w *statusWriter) Put(key string, status map[string]any) {
	w.latest.Update(func(old map[string]map[string]any) map[string]map[string]any {
		want := maps.Clone(old)
		if status == nil {
			delete(want, key)
		} else {
			want[key] = status
		}
		return want
	})
}

// Run writes until ctx ends; a failed write is retried after a second.
func (w *statusWriter) Run(ctx context.Context) {
	w.latest.Run(ctx, writeLoop{backoff: statusSyncBackoff, gap: w.kind.minInterval, report: func(err error) {
		if err != nil {
			w.log.Warn("updating status objects", "kind", w.kind.kind, "err", err)
		}
	}}, w.write)
}

func (w *statusWriter) name(key string) string {
	h := sha256.Sum256([]byte(key + "@" + w.node))
	return w.kind.prefix + hex.EncodeToString(h[:])[:12]
}

// write makes this node's objects of the kind those of want (key -> status): it deletes the others,
// creates the missing ones and updates the statuses that differ.
func (w *statusWriter) write(ctx context.Context, want map[string]map[string]any) error {
	byName := map[string]string{}
	for key := range want {
		byName[w.name(key)] = key
	}
	c := w.dyn.Resource(w.kind.gvr).Namespace(w.ns)
	list, err := c.List(ctx, metav1.ListOptions{LabelSelector: w.kind.nodeLabel + "=" + w.node})
	if err != nil {
		return err
	}
	have := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		o := &list.Items[i]
		if key, ok := byName[o.GetName()]; ok {
			have[key] = o
			continue
		}
		if err := c.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		status := want[key]
		o, ok := have[key]
		if !ok {
			labels := map[string]any{w.kind.nodeLabel: w.node}
			for k, v := range w.kind.labels(key) {
				labels[k] = v
			}
			o = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": w.kind.apiVersion, "kind": w.kind.kind,
				"metadata": map[string]any{"name": w.name(key), "namespace": w.ns, "labels": labels},
			}}
			if o, err = c.Create(ctx, o, metav1.CreateOptions{}); err != nil {
				return err
			}
		} else if cur, _, _ := unstructured.NestedMap(o.Object, "status"); sameJSON(cur, status) {
			continue
		}
		o.Object["status"] = status
		if _, err := c.UpdateStatus(ctx, o, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// sameJSON reports whether two statuses have the same JSON form (map keys are sorted by
// encoding/json, so the order of fields does not matter).
func sameJSON(a, b map[string]any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

func splitKey(key string) (string, string) {
	if ns, name, ok := strings.Cut(key, "/"); ok {
		return ns, name
	}
	return "", key
}
