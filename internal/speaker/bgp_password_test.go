package speaker

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/internal/speaker/bgp"
)

// TestInvalidPasswordsNeverReported feeds BGP mode BGPPeers whose passwords are invalid in every way
// bgpconfig knows (line break, too long, password and passwordSecret both set, a Secret of the
// wrong type, a password that does not decode), and one that was valid and turns invalid (its last
// valid version stays in use), and checks that no password appears in the InvalidConfiguration
// events or in any log line the speaker writes about them.
func TestInvalidPasswordsNeverReported(t *testing.T) {
	secrets := map[string]string{ // peer → the secret text it carries
		"p-linebreak": "sec-A-9d1e", "p-long": "sec-B-77c0", "p-both": "sec-C-3b52", "p-secret-type": "sec-D-e0a4",
		"p-undecodable": "sec-G-18fa", "p-was-valid": "sec-E-c6d9",
	}
	const turnedInvalid = "sec-F-5a2b"
	peer := func(name string, spec map[string]any) *unstructured.Unstructured {
		s := map[string]any{"myASN": int64(64513), "peerASN": int64(64512), "peerAddress": "172.18.255.254"}
		for k, v := range spec {
			s[k] = v
		}
		return uobj("metallb.io/v1beta2", "BGPPeer", name, s)
	}
	peers := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	objs := []*unstructured.Unstructured{
		peer("p-linebreak", map[string]any{"password": secrets["p-linebreak"] + "\nrest"}),
		peer("p-long", map[string]any{"password": secrets["p-long"] + strings.Repeat("x", 80)}),
		peer("p-both", map[string]any{"password": secrets["p-both"], "passwordSecret": map[string]any{"name": "auth"}}),
		peer("p-secret-type", map[string]any{"passwordSecret": map[string]any{"name": "opaque"}}),
		peer("p-undecodable", map[string]any{"password": map[string]any{"value": secrets["p-undecodable"]}}),
		peer("p-was-valid", map[string]any{"password": secrets["p-was-valid"], "peerAddress": "172.18.255.253"}),
	}
	for _, o := range objs {
		if err := peers.GetStore().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	// A Secret of the wrong type holding a password: the speaker must not use it, and say so (its
	// type) without its content.
	opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "opaque", Namespace: testNS}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte(secrets["p-secret-type"])}}

	var logs bytes.Buffer
	rec := record.NewFakeRecorder(100)
	empty := func() cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	}
	b := &bgpMode{node: "n1", log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), rec: rec,
		sp: bgp.New(bgp.Config{}), peers: peers, ads: empty(), profiles: empty(), communities: empty(),
		svcStatus:  newStatusWriter(nil, bgpStatusKind, testNS, "n1", slog.New(slog.DiscardHandler)),
		sessStatus: newStatusWriter(nil, sessionStateKind, testNS, "n1", slog.New(slog.DiscardHandler))}
	b.m = newBGPMetrics(prometheus.NewRegistry(), b.sp)
	list := func() []any {
		var out []any
		for _, o := range peers.GetStore().List() {
			out = append(out, o)
		}
		return out
	}
	b.reconcile(testNS, bgpObjects{peers: list(), secrets: []any{opaque}})
	// The valid peer turns invalid: its last valid version, password included, stays in use.
	if err := peers.GetStore().Update(peer("p-was-valid", map[string]any{"password": turnedInvalid + "\n", "peerAddress": "172.18.255.253"})); err != nil {
		t.Fatal(err)
	}
	b.reconcile(testNS, bgpObjects{peers: list(), secrets: []any{opaque}})

	var events []string
	for len(rec.Events) > 0 {
		events = append(events, <-rec.Events)
	}
	// Every invalid peer got its event (the undecodable one is only logged: it has no typed form),
	// or the test proves nothing.
	for _, name := range []string{"p-linebreak", "p-long", "p-both", "p-secret-type", "p-was-valid"} {
		found := false
		for _, e := range events {
			found = found || strings.HasPrefix(e, "Warning InvalidConfiguration") && strings.Contains(e, "BGPPeer "+name+":")
		}
		if !found {
			t.Errorf("no InvalidConfiguration event for %s; events: %q", name, events)
		}
	}
	// The Secret of the wrong type is named with its type, in the event and the log, not as missing.
	const wrongType = `BGPPeer p-secret-type: spec.passwordSecret: unusable password secret: Secret "opaque" has type Opaque, want kubernetes.io/basic-auth`
	if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, wrongType) }) || !strings.Contains(logs.String(), strings.ReplaceAll(wrongType, `"`, `\"`)) {
		t.Errorf("no event and log line %q; events %q, logs:\n%s", wrongType, events, logs.String())
	}
	if !strings.Contains(logs.String(), "p-undecodable") || !strings.Contains(logs.String(), "its last valid version stays in use") {
		t.Fatalf("the logs do not report the undecodable peer and the held one:\n%s", logs.String())
	}
	all := append([]string{turnedInvalid}, func() (v []string) {
		for _, s := range secrets {
			v = append(v, s)
		}
		return
	}()...)
	for _, pw := range all {
		for _, e := range events {
			if strings.Contains(e, pw) {
				t.Errorf("an event holds a password: %s", e)
			}
		}
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, pw) {
				t.Errorf("a log line holds a password: %s", line)
			}
		}
	}
}
