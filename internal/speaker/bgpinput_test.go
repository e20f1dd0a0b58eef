package speaker

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/speaker/bgp"
)

func uobj(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": "metallb-system"}, "spec": spec}}
}

func TestBGPInput(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "fc00::2"}, {Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}}}
	poolCR := v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "metallb-system", Labels: map[string]string{"t": "x"}},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"172.18.255.200-172.18.255.203"}}}
	svcLocal := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "172.18.255.200"}}}}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-x1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints: []discoveryv1.Endpoint{{NodeName: ptr("n1")}}}
	eps := map[string][]election.Endpoint{"default/web": {{Node: "n1", Ready: true}}}
	// The model both modes share, with this node (nil: not in the cache yet).
	model := func(n *corev1.Node) *config.Model {
		in := config.ModelInput{Pools: []v1beta1.IPAddressPool{poolCR}, Services: []*corev1.Service{svcLocal},
			EndpointSlices: []*discoveryv1.EndpointSlice{slice}}
		if n != nil {
			in.Nodes = []*corev1.Node{n}
		}
		return config.BuildModel(in)
	}
	base := func() bgpObjects { return bgpObjects{model: model(node), node: "n1"} }
	wantBase := func() bgpconfig.Input {
		return bgpconfig.Input{
			Node:            bgpconfig.Node{Name: "n1", Labels: map[string]string{"zone": "a"}},
			DefaultRouterID: netip.MustParseAddr("172.18.0.2"),
			Pools: []bgpconfig.Pool{{Name: "p1", Labels: map[string]string{"t": "x"},
				Entries: [][]netip.Prefix{{netip.MustParsePrefix("172.18.255.200/30")}}}},
			Services: []bgpconfig.Service{{Key: "default/web", Labels: map[string]string{"app": "web"}, Pool: "p1",
				Addrs: []netip.Addr{netip.MustParseAddr("172.18.255.200")}, Local: true, Endpoints: eps["default/web"]}},
		}
	}
	tests := []struct {
		name     string
		objs     func(*bgpObjects)
		want     func(*bgpconfig.Input)
		wantErrs int
	}{{
		name: "node, pools and Services",
	}, {
		name: "excluded and network unavailable node",
		objs: func(o *bgpObjects) {
			n := node.DeepCopy()
			n.Labels = map[string]string{election.ExcludeLabel: ""}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}
			o.model = model(n)
		},
		want: func(in *bgpconfig.Input) {
			in.Node = bgpconfig.Node{Name: "n1", Labels: map[string]string{election.ExcludeLabel: ""}, Excluded: true, NetworkUnavailable: true}
		},
	}, {
		name: "node not in the cache yet",
		objs: func(o *bgpObjects) { o.model = model(nil) },
		want: func(in *bgpconfig.Input) { in.Node, in.DefaultRouterID = bgpconfig.Node{}, netip.Addr{} },
	}, {
		name: "configuration objects, sorted by name",
		objs: func(o *bgpObjects) {
			o.peers = []any{
				uobj("metallb.io/v1beta2", "BGPPeer", "r2", map[string]any{"myASN": int64(64512), "peerASN": int64(64513), "peerAddress": "192.0.2.2",
					"holdTime": "9s", "passwordSecret": map[string]any{"name": "auth"}}),
				uobj("metallb.io/v1beta2", "BGPPeer", "r1", map[string]any{"myASN": int64(64512), "peerASN": int64(64512), "peerAddress": "192.0.2.1", "bfdProfile": "fast"}),
			}
			o.ads = []any{uobj("metallb.io/v1beta1", "BGPAdvertisement", "ad", map[string]any{"aggregationLength": int64(32), "communities": []any{"no-export"}})}
			o.profiles = []any{uobj("metallb.io/v1beta1", "BFDProfile", "fast", map[string]any{"receiveInterval": int64(50)})}
			o.communities = []any{uobj("metallb.io/v1beta1", "Community", "c", map[string]any{"communities": []any{map[string]any{"name": "no-export", "value": "65535:65281"}}})}
		},
		want: func(in *bgpconfig.Input) {
			in.Peers = []v1beta2.BGPPeer{
				{TypeMeta: metav1.TypeMeta{APIVersion: "metallb.io/v1beta2", Kind: "BGPPeer"}, ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "metallb-system"},
					Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64512, Address: "192.0.2.1", BFDProfile: "fast"}},
				{TypeMeta: metav1.TypeMeta{APIVersion: "metallb.io/v1beta2", Kind: "BGPPeer"}, ObjectMeta: metav1.ObjectMeta{Name: "r2", Namespace: "metallb-system"},
					Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64513, Address: "192.0.2.2", HoldTime: &metav1.Duration{Duration: 9 * time.Second},
						PasswordSecret: corev1.SecretReference{Name: "auth"}}},
			}
			in.Advertisements = []v1beta1.BGPAdvertisement{{TypeMeta: metav1.TypeMeta{APIVersion: "metallb.io/v1beta1", Kind: "BGPAdvertisement"},
				ObjectMeta: metav1.ObjectMeta{Name: "ad", Namespace: "metallb-system"},
				Spec:       v1beta1.BGPAdvertisementSpec{AggregationLength: ptr[int32](32), Communities: []string{"no-export"}}}}
			in.BFDProfiles = []v1beta1.BFDProfile{{TypeMeta: metav1.TypeMeta{APIVersion: "metallb.io/v1beta1", Kind: "BFDProfile"},
				ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: "metallb-system"}, Spec: v1beta1.BFDProfileSpec{ReceiveInterval: ptr[uint32](50)}}}
			in.Communities = []v1beta1.Community{{TypeMeta: metav1.TypeMeta{APIVersion: "metallb.io/v1beta1", Kind: "Community"},
				ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "metallb-system"},
				Spec:       v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "no-export", Value: "65535:65281"}}}}}
		},
	}, {
		name: "an object that does not decode is left out and reported",
		objs: func(o *bgpObjects) {
			o.peers = []any{uobj("metallb.io/v1beta2", "BGPPeer", "bad", map[string]any{"myASN": "not a number"})}
		},
		want:     func(in *bgpconfig.Input) { in.Peers = []v1beta2.BGPPeer{} },
		wantErrs: 1,
	}, {
		name: "passwords from basic-auth Secrets only; the others named with why",
		objs: func(o *bgpObjects) {
			o.secrets = []any{
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "auth"}, Type: corev1.SecretTypeBasicAuth,
					Data: map[string][]byte{"password": []byte("s3cret"), "username": []byte("ignored")}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "opaque"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("x")}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "nokey"}, Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{"username": []byte("x")}},
			}
		},
		want: func(in *bgpconfig.Input) {
			in.Passwords = map[string]string{"auth": "s3cret"}
			in.UnusableSecrets = map[string]string{"opaque": `Secret "opaque" has type Opaque, want kubernetes.io/basic-auth`,
				"nokey": `Secret "nokey" has no "password" key`}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			if tt.objs != nil {
				tt.objs(&o)
			}
			want := wantBase()
			if tt.want != nil {
				tt.want(&want)
			}
			got, errs := bgpInput(o)
			if len(errs) != tt.wantErrs {
				t.Errorf("errors %v, want %d", errs, tt.wantErrs)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Input (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestSessionEvent(t *testing.T) {
	peer := netip.MustParseAddr("192.0.2.1")
	est := bgp.SessionStatus{Name: "r1", Peer: peer, BGPStatus: "Established"}
	active := func(r bgp.DownReason, msg string) bgp.SessionStatus {
		return bgp.SessionStatus{Name: "r1", Peer: peer, BGPStatus: "Active", Reason: r, Message: msg}
	}
	tests := []struct {
		name      string
		prev, st  bgp.SessionStatus
		want      string // event reason, "" for none
		warning   bool
		wantInMsg string
	}{
		{"first connection attempt", bgp.SessionStatus{}, active(bgp.Connecting, ""), "", false, ""},
		{"established", active(bgp.Connecting, ""), est, "SessionEstablished", false, "established from node n1"},
		{"still established (BFD changes)", est, est, "", false, ""},
		{"wrong password", active(bgp.Connecting, ""), active(bgp.ConnectFailed, "dial tcp: i/o timeout"), "ConnectFailed", true, "ConnectFailed: dial tcp"},
		{"same failure again", active(bgp.ConnectFailed, "x"), active(bgp.ConnectFailed, "x"), "", false, ""},
		{"wrong ASN", active(bgp.Connecting, ""), active(bgp.BadPeerAS, "bad peer AS"), "BadPeerAS", true, "BadPeerAS"},
		{"peer refuses our AS", active(bgp.Connecting, ""), active(bgp.NotificationReceived, "bad peer AS"), "NotificationReceived", true, "NotificationReceived"},
		{"down with a reason", est, active(bgp.HoldTimerExpired, "hold timer expired"), "HoldTimerExpired", true, "no longer established: HoldTimerExpired"},
		{"down without a reason", est, active("", ""), "Other", true, "no longer established"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, ok := sessionEvent(tt.prev, tt.st)
			if !ok {
				ev = sessionEventKind{}
			}
			if ev.reason != tt.want || ev.warning != tt.warning {
				t.Fatalf("event %+v, want reason %q warning %v", ev, tt.want, tt.warning)
			}
			if ok {
				if msg := ev.message("n1", tt.st); !strings.Contains(msg, tt.wantInMsg) || !strings.Contains(msg, "192.0.2.1") {
					t.Errorf("message %q lacks %q or the peer", msg, tt.wantInMsg)
				}
			}
		})
	}
}

func TestEventLimiter(t *testing.T) {
	l := eventLimiter{burst: 2, every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0}, {time.Second, true, 0}, // the burst
		{2 * time.Second, false, 0}, {3 * time.Second, false, 0}, // flapping: refused
		{13 * time.Second, true, 2}, // a token back after 10 s; tells how many were refused
		{14 * time.Second, false, 0},
		{60 * time.Second, true, 1}, {61 * time.Second, true, 0}, {62 * time.Second, false, 0}, // refilled to the burst only
	}
	for _, s := range steps {
		sup, ok := l.allow(t0.Add(s.at))
		if ok != s.ok || sup != s.suppressed {
			t.Errorf("at %v: allow = %d, %v; want %d, %v", s.at, sup, ok, s.suppressed, s.ok)
		}
	}
}

// TestPasswordSecretOnly: the Secrets informer keeps a basic-auth Secret's password and, of every
// Secret, only its name, namespace, version and type (enough to say a Secret has the wrong type).
func TestPasswordSecretOnly(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "s", Namespace: testNS, UID: "u", ResourceVersion: "7",
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"stringData":{"password":"leak"}}`},
		Labels:      map[string]string{"a": "b"}}
	for _, tt := range []struct {
		name string
		in   *corev1.Secret
		want *corev1.Secret
	}{{
		name: "basic-auth: the password only",
		in:   &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{"password": []byte("p"), "username": []byte("u")}},
		want: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: testNS, UID: "u", ResourceVersion: "7"}, Type: corev1.SecretTypeBasicAuth,
			Data: map[string][]byte{"password": []byte("p")}},
	}, {
		name: "basic-auth without a password",
		in:   &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{"username": []byte("u")}},
		want: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: testNS, UID: "u", ResourceVersion: "7"}, Type: corev1.SecretTypeBasicAuth},
	}, {
		name: "another type: no data at all",
		in:   &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("p"), "primary": []byte("k")}},
		want: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: testNS, UID: "u", ResourceVersion: "7"}, Type: corev1.SecretTypeOpaque},
	}} {
		got, err := passwordSecretOnly(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	if got, _ := passwordSecretOnly("x"); got != "x" {
		t.Errorf("a non-Secret: %v, want it unchanged", got)
	}
}
