package controller

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDifferentialAdmission generates rounds of MetalLB objects and Services (seeded; the seed is
// logged and IRONLB_DIFF_SEED replays it) and applies each to MetalLB's apiserver and to ironlb's. A
// round is "a set of existing objects + candidates": its base objects are each compared (a server-side
// dry run to both) and created for real where both accept them; then candidates (new objects, spec
// replacements of base objects, deletions) are dry-run against that state and compared. Every
// accept/reject must agree, except the named intendedDifferences (docs/controller.md lists each). A
// disagreement is retried for a while first (ironlb's webhook reads informers, which may lag a
// create); one that stays is minimised (base objects, then spec fields dropped while it persists) and
// printed as YAML with the seed.
//
// Rounds use disjoint names and address blocks (10.<100+r/250>.<r%250>.0/24, fd00:dd:<r>::/64), so a
// round's leftovers in an informer never meet the next round's objects.
func TestDifferentialAdmission(t *testing.T) {
	cfg := diffConfigFromEnv(t, 400, 40)
	if cfg.admission == 0 {
		t.Skip("IRONLB_DIFF_ADMISSION=0")
	}
	t.Logf("seed %d (IRONLB_DIFF_SEED=%d replays it), %d admission cases", cfg.seed, cfg.seed, cfg.admission)
	t0 := time.Now()
	mlb := startMetalLBSide(t)
	ilb := startIronlbSide(t)
	t.Logf("%s: both apiservers and webhooks up", time.Since(t0).Round(time.Millisecond))
	t1 := time.Now()
	st := &admissionStats{byException: map[string]int{}, signatures: map[string]int{}}
	for r := 0; st.cases < cfg.admission; r++ {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(r)))
		rd := genRound(rng, r)
		runRound(t, mlb, ilb, rd, st, cfg.seed)
	}
	for _, k := range slices.Sorted(maps.Keys(st.signatures)) {
		t.Errorf("unexplained ×%d: %s", st.signatures[k], k)
	}
	el := time.Since(t1)
	t.Logf("admission: %d cases compared (%d rounds, %d objects created for real per side), %d agreed, %d intended differences %v, %d unexplained; %d settled only on retry; %s (%.1f cases/s); seed %d",
		st.cases, st.rounds, st.created, st.cases-st.intended-st.unexplained, st.intended, st.byException, st.unexplained, st.retried,
		el.Round(time.Millisecond), float64(st.cases)/el.Seconds(), cfg.seed)
}

type admissionStats struct {
	cases, rounds, created, intended, unexplained, retried int
	byException                                            map[string]int
	// failures are the first unexplained disagreements, minimised after their round is cleaned up;
	// signatures count every unexplained one by kind and message (names and numbers masked).
	failures   []admissionFailure
	signatures map[string]int
}

type admissionFailure struct {
	c    admissionCase
	m, i outcome
}

var maskRe = regexp.MustCompile(`r\d+-[a-z0-9]+|[0-9a-f:.]*\d[0-9a-f:./-]*`)

func signature(c admissionCase, m, i outcome) string {
	side, msg := "ironlb refuses", i.msg
	if !m.accepted {
		side, msg = "MetalLB refuses", m.msg
	}
	if j := strings.Index(msg, "denied the request: "); j >= 0 {
		msg = msg[j+len("denied the request: "):]
	}
	msg = maskRe.ReplaceAllString(msg, "#")
	if len(msg) > 160 {
		msg = msg[:160]
	}
	return fmt.Sprintf("%s %s %s: %s", c.op, c.cand.Kind, side, msg)
}

// admissionCase is one compared request: op on cand, with base (created for real) existing.
type admissionCase struct {
	round int
	base  []diffObject
	op    diffOp
	cand  diffObject
}

func (c admissionCase) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# existing objects (created first):\n")
	for _, o := range c.base {
		b.WriteString("---\n" + o.yaml())
	}
	fmt.Fprintf(&b, "# then %s (server-side dry run):\n---\n%s", c.op, c.cand.yaml())
	return b.String()
}

// round is one generated round: base objects in order, then candidates.
type round struct {
	n     int
	base  []diffObject
	cands []struct {
		op diffOp
		o  diffObject
	}
}

// runRound compares every base object and candidate of rd, then deletes what it created.
func runRound(t *testing.T, mlb, ilb *diffSide, rd round, st *admissionStats, seed uint64) {
	t.Helper()
	st.rounds++
	var existing []diffObject
	nfail := len(st.failures)
	defer func() {
		cleanupRound(t, mlb, ilb, existing)
		for _, f := range st.failures[nfail:] {
			t.Errorf("admission disagreement (seed %d, round %d): MetalLB %s; ironlb %s\n%s\nminimised:\n%s",
				seed, f.c.round, f.m, f.i, f.c.yaml(), minimise(t, mlb, ilb, f.c))
		}
	}()
	for _, o := range rd.base {
		c := admissionCase{round: rd.n, base: slices.Clone(existing), op: opCreate, cand: o}
		m, _ := compareCase(t, mlb, ilb, c, st, seed)
		if !m {
			continue
		}
		// Both accept (or one refuses on purpose): create it for real on both, or on neither.
		mo, io := both(mlb, ilb, func(s *diffSide) outcome { return s.admitRetrying(t, opCreate, o, false) })
		switch {
		case mo.accepted && io.accepted:
			existing = append(existing, o)
			st.created++
		case mo.accepted:
			mlb.deleteQuietly(t, o)
		case io.accepted:
			ilb.deleteQuietly(t, o)
		}
	}
	for _, cd := range rd.cands {
		compareCase(t, mlb, ilb, admissionCase{round: rd.n, base: existing, op: cd.op, cand: cd.o}, st, seed)
	}
}

// compareCase sends c to both sides and judges the answers; it returns whether both accepted.
func compareCase(t *testing.T, mlb, ilb *diffSide, c admissionCase, st *admissionStats, seed uint64) (bothAccepted, agreed bool) {
	t.Helper()
	st.cases++
	m, i := both(mlb, ilb, func(s *diffSide) outcome { return s.admitRetrying(t, c.op, c.cand, true) })
	if m.accepted != i.accepted && matchIntended(c, m, i) == nil {
		// ironlb's webhook reads informers: give them time to catch up with the round's creates.
		for try := 0; try < 4 && m.accepted != i.accepted; try++ {
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
			m, i = both(mlb, ilb, func(s *diffSide) outcome { return s.admitRetrying(t, c.op, c.cand, true) })
		}
		if m.accepted == i.accepted {
			st.retried++
		}
	}
	if m.accepted == i.accepted {
		return m.accepted, true
	}
	if d := matchIntended(c, m, i); d != nil {
		st.intended++
		st.byException[d.name]++
		return false, true
	}
	if storedConfigInvalid(t, mlb, ilb, c, m, i) {
		st.intended++
		st.byException["metallb-stored-config-invalid"]++
		return false, true
	}
	st.unexplained++
	st.signatures[signature(c, m, i)]++
	if len(st.failures) < 3 {
		st.failures = append(st.failures, admissionFailure{c: c, m: m, i: i})
	}
	return false, false
}

// disagrees replays c from scratch (its base created on both sides, then the candidate) and reports
// whether the answers still differ without an intended reason.
func disagrees(t *testing.T, mlb, ilb *diffSide, c admissionCase) bool {
	t.Helper()
	var made []diffObject
	defer func() { cleanupRound(t, mlb, ilb, made) }()
	for _, o := range c.base {
		mo, io := both(mlb, ilb, func(s *diffSide) outcome { return s.admitRetrying(t, opCreate, o, false) })
		if mo.accepted && io.accepted {
			made = append(made, o)
		} else {
			if mo.accepted {
				mlb.deleteQuietly(t, o)
			}
			if io.accepted {
				ilb.deleteQuietly(t, o)
			}
			return false // the base itself no longer builds: not this case
		}
	}
	if c.op != opCreate && !slices.ContainsFunc(made, func(o diffObject) bool { return o.Kind == c.cand.Kind && o.Name == c.cand.Name }) {
		return false
	}
	time.Sleep(300 * time.Millisecond) // informers
	m, i := both(mlb, ilb, func(s *diffSide) outcome { return s.admitRetrying(t, c.op, c.cand, true) })
	return m.accepted != i.accepted && matchIntended(c, m, i) == nil
}

// minimise drops base objects, then the candidate's spec fields and list elements, while the
// disagreement persists; it returns the smallest case as YAML. It waits for informers between
// attempts, so it is slow, and is run for the first disagreements only.
func minimise(t *testing.T, mlb, ilb *diffSide, c admissionCase) string {
	t.Helper()
	time.Sleep(time.Second)
	if !disagrees(t, mlb, ilb, c) {
		return "(does not reproduce alone: the disagreement depends on timing)\n" + c.yaml()
	}
	for i := 0; i < len(c.base); {
		try := c
		try.base = slices.Delete(slices.Clone(c.base), i, i+1)
		if try.op != opCreate && !slices.ContainsFunc(try.base, func(o diffObject) bool { return o.Kind == c.cand.Kind && o.Name == c.cand.Name }) {
			i++
			continue
		}
		if disagrees(t, mlb, ilb, try) {
			c = try
		} else {
			i++
		}
	}
	if c.op != opDelete {
		keys := make([]string, 0, len(c.cand.Spec))
		for k := range c.cand.Spec {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			try := c
			try.cand.Spec = deepCopyJSON(c.cand.Spec)
			delete(try.cand.Spec, k)
			if disagrees(t, mlb, ilb, try) {
				c = try
				continue
			}
			if l, ok := c.cand.Spec[k].([]any); ok && len(l) > 1 {
				for j := 0; j < len(l); {
					try := c
					try.cand.Spec = deepCopyJSON(c.cand.Spec)
					cur := try.cand.Spec[k].([]any)
					if len(cur) <= 1 {
						break
					}
					try.cand.Spec[k] = slices.Delete(slices.Clone(cur), j, j+1)
					if disagrees(t, mlb, ilb, try) {
						c = try
						l = try.cand.Spec[k].([]any)
					} else {
						j++
					}
				}
			}
		}
		if len(c.cand.Annotations) > 0 {
			for k := range c.cand.Annotations {
				try := c
				try.cand.Annotations = map[string]string{}
				for k2, v := range c.cand.Annotations {
					if k2 != k {
						try.cand.Annotations[k2] = v
					}
				}
				if disagrees(t, mlb, ilb, try) {
					c = try
				}
			}
		}
	}
	return c.yaml()
}

// cleanupRound deletes objs on both sides: BGPPeers first (a BFDProfile in use cannot be deleted),
// BFDProfiles last, retried while ironlb's informer still sees the peers.
func cleanupRound(t *testing.T, mlb, ilb *diffSide, objs []diffObject) {
	t.Helper()
	rank := func(o diffObject) int {
		switch o.Kind {
		case "BGPPeer":
			return 0
		case "BFDProfile":
			return 2
		}
		return 1
	}
	objs = slices.Clone(objs)
	slices.SortStableFunc(objs, func(a, b diffObject) int { return rank(a) - rank(b) })
	for _, o := range objs {
		both(mlb, ilb, func(s *diffSide) bool { s.deleteQuietly(t, o); return true })
	}
}

// deleteQuietly deletes o for real, retrying refusals for a few seconds (a webhook whose informer
// has not seen a peer's deletion yet); a missing object is fine.
func (s *diffSide) deleteQuietly(t *testing.T, o diffObject) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.dyn.Resource(diffGVRs[o.Kind]).Namespace(o.namespace()).Delete(context.Background(), o.Name, metav1.DeleteOptions{})
		if err == nil || strings.Contains(err.Error(), "not found") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: deleting %s %s: %v", s.name, o.Kind, o.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// intendedDifference is a place where ironlb's admission differs from MetalLB's on purpose; each is
// listed in docs/controller.md ("Admission against MetalLB's") with its reason. match sees the case
// and both answers and must be narrow: it names the kind, the field and ironlb's message.
type intendedDifference struct {
	name, why string
	match     func(c admissionCase, metallb, ironlb outcome) bool
}

// ironlbRefuses matches a case MetalLB accepts and ironlb refuses with a message containing every sub.
func ironlbRefuses(kind string, subs ...string) func(admissionCase, outcome, outcome) bool {
	return func(c admissionCase, m, i outcome) bool {
		if c.cand.Kind != kind || !m.accepted || i.accepted {
			return false
		}
		for _, s := range subs {
			if !strings.Contains(i.msg, s) {
				return false
			}
		}
		return true
	}
}

// metallbRefuses matches a case ironlb accepts and MetalLB refuses with a message containing every sub.
func metallbRefuses(kind string, subs ...string) func(admissionCase, outcome, outcome) bool {
	return func(c admissionCase, m, i outcome) bool {
		if c.cand.Kind != kind || m.accepted || !i.accepted {
			return false
		}
		for _, s := range subs {
			if !strings.Contains(m.msg, s) {
				return false
			}
		}
		return true
	}
}

// storedConfigInvalid is the intended difference metallb-stored-config-invalid (docs/controller.md):
// MetalLB validates the whole stored configuration of the kinds its webhook reads on every change,
// so an object stored while valid that a later object made invalid (an advertisement's aggregation
// length, once a pool with longer prefixes exists: the pool's webhook checks pools only) makes it
// refuse every later object of that kind; ironlb checks the new object against the stored ones. It
// holds when MetalLB refuses c's candidate and also, with the same message, a probe of the same
// kind that is valid on its own (an empty spec), which ironlb accepts.
func storedConfigInvalid(t *testing.T, mlb, ilb *diffSide, c admissionCase, m, i outcome) bool {
	t.Helper()
	if m.accepted || !i.accepted {
		return false
	}
	probe := diffObject{Kind: c.cand.Kind, Name: fmt.Sprintf("r%d-probe", c.round), Spec: map[string]any{}}
	switch c.cand.Kind {
	case "BGPAdvertisement", "L2Advertisement", "BFDProfile":
	case "Community":
		probe.Spec["communities"] = []any{}
	default:
		return false
	}
	pm, pi := both(mlb, ilb, func(s *diffSide) outcome { return s.admitRetrying(t, opCreate, probe, true) })
	strip := func(msg string) string { // the message names no object of the request's own
		return strings.ReplaceAll(strings.ReplaceAll(msg, c.cand.Name, "X"), probe.Name, "X")
	}
	return !pm.accepted && pi.accepted && strip(pm.msg) == strip(m.msg)
}

// intendedDifferences: docs/controller.md, "Admission against MetalLB's", lists the same names.
var intendedDifferences = []intendedDifference{
	{"reserved-asn", "ASN 0 and 23456 (AS_TRANS, RFC 6793) can never be a BGP speaker's own or peer AS; MetalLB admits them and the session never comes up",
		func(c admissionCase, m, i outcome) bool {
			return ironlbRefuses("BGPPeer", "invalid AS number: 0 is reserved")(c, m, i) || ironlbRefuses("BGPPeer", "is AS_TRANS")(c, m, i)
		}},
	{"peer-asn-xor-dynamic", "a BGPPeer needs exactly one of peerASN and dynamicASN; MetalLB admits neither (and both)",
		func(c admissionCase, m, i outcome) bool {
			return ironlbRefuses("BGPPeer", "one of peerASN and dynamicASN is required")(c, m, i) ||
				ironlbRefuses("BGPPeer", "peerASN and dynamicASN are both set")(c, m, i)
		}},
	{"peer-password-and-secret", "password and passwordSecret together are ambiguous; ironlb refuses the peer where MetalLB's speaker reports it later",
		ironlbRefuses("BGPPeer", "password and passwordSecret are both set")},
	{"peer-link-local", "a link-local peerAddress can never connect without a zone, which a BGPPeer cannot give",
		ironlbRefuses("BGPPeer", "spec.peerAddress", "is link-local")},
	{"peer-address-form", "peerAddress must be one address (not a prefix) and sourceAddress of its family; MetalLB admits both and its speaker fails later",
		func(c admissionCase, m, i outcome) bool {
			return ironlbRefuses("BGPPeer", "spec.peerAddress: invalid address:", "is not a unicast IP address")(c, m, i) ||
				ironlbRefuses("BGPPeer", "spec.sourceAddress: invalid address:", "is not of the family of peer address")(c, m, i)
		}},
	{"unsupported-fields", "what MetalLB's FRR mode has and ironlb does not implement (vrf; BFD echo mode and echo interval; multi-hop BFD: minimumTtl, a bfdProfile on an ebgpMultiHop peer) is refused rather than silently ignored",
		func(c admissionCase, m, i outcome) bool {
			return ironlbRefuses("BGPPeer", "spec.vrf: not supported")(c, m, i) ||
				ironlbRefuses("BFDProfile", "spec.echoMode: not supported")(c, m, i) ||
				ironlbRefuses("BFDProfile", "spec.echoInterval: not supported")(c, m, i) ||
				ironlbRefuses("BFDProfile", "spec.minimumTtl: not supported")(c, m, i) ||
				ironlbRefuses("BGPPeer", "spec.bfdProfile: not supported: BFD on a multi-hop session")(c, m, i)
		}},
	{"metallb-disablemp-skips-validation", "MetalLB v0.16.1's BGPPeer webhook returns early, admitting the peer unvalidated, when a created peer has disableMP: true (validatePeerCreate warns that the field is deprecated and returns); ironlb validates it as any other",
		func(c admissionCase, m, i outcome) bool {
			return c.op == opCreate && c.cand.Kind == "BGPPeer" && c.cand.Spec["disableMP"] == true && m.accepted && !i.accepted
		}},
	{"peer-ebgp-multihop-internal", "ebgpMultiHop on a session that is iBGP by dynamicASN: internal is refused as on one with peerASN equal to myASN (MetalLB checks only the latter)",
		func(c admissionCase, m, i outcome) bool {
			return ironlbRefuses("BGPPeer", "ebgpMultiHop is set on an iBGP session")(c, m, i) && c.cand.Spec["dynamicASN"] == "internal"
		}},
	{"frr-duplicate-peer", "MetalLB's FRR mode refuses two BGPPeers with one address selecting a common node; ironlb admits them and its speakers refuse the second (InvalidConfiguration), as MetalLB's native mode does",
		metallbRefuses("BGPPeer", "already exists, FRR mode doesn't support duplicate BGPPeers")},
	{"frr-myasn-per-node", "MetalLB's FRR mode refuses peers selecting a common node with different myASN within a VRF (one FRR router per node); ironlb, like MetalLB's native mode, runs one BGP session per peer and accepts them",
		metallbRefuses("BGPPeer", "in FRR mode peers selecting the same node must have the same myAsn")},
	{"community-alias-without-name", "a Community entry without a name can never be referred to; MetalLB admits it",
		ironlbRefuses("Community", "alias without a name")},
	{"bgpadv-duplicate-community", "a community listed twice in one BGPAdvertisement is a mistake ironlb refuses, as it refuses duplicate pools and peers",
		ironlbRefuses("BGPAdvertisement", "spec.communities[", "listed twice")},
	{"bgpadv-aggregation-v6-range", "aggregationLengthV6 outside 1–128 is refused whatever the pools; MetalLB checks it only against the IPv6 ranges of the pools the advertisement selects",
		ironlbRefuses("BGPAdvertisement", "spec.aggregationLengthV6: invalid aggregation length")},
	{"l2adv-interface-name", "an interface name no Linux host can have (empty, over 15 bytes, . or .., '/', ':' or white space) would silently announce nothing",
		ironlbRefuses("L2Advertisement", "invalid interface name")},
	{"pool-address-syntax", "ironlb's CRD (CEL) refuses IPv4-mapped IPv6 entries, ranges written with spaces around '-' (MetalLB trims them) and ranges from an IPv4 to an IPv6 address (MetalLB admits them)",
		func(c admissionCase, m, i outcome) bool {
			if !ironlbRefuses("IPAddressPool", "each address must be a CIDR prefix")(c, m, i) {
				return false
			}
			for _, a := range c.cand.Spec["addresses"].([]any) {
				s := fmt.Sprint(a)
				from, to, isRange := strings.Cut(s, "-")
				if strings.Contains(s, "::ffff:") || strings.Contains(s, " - ") || isRange && strings.Contains(from, ":") != strings.Contains(to, ":") {
					return true
				}
			}
			return false
		}},
	{"pool-negative-priority", "a negative serviceAllocation.priority is refused: ironlb orders pools by priority with 0 as none, and a negative one has no meaning MetalLB documents",
		ironlbRefuses("IPAddressPool", "serviceAllocation.priority", "must not be negative")},
	{"service-contradicting-request", "ironlb's Service webhook refuses address requests that can never be satisfied (not an address, two of one family, a family the Service does not have, spec.loadBalancerIP together with the annotation); MetalLB has no Service webhook and reports AllocationFailed later",
		func(c admissionCase, m, i outcome) bool {
			return ironlbRefuses("Service", "invalid service:")(c, m, i)
		}},
	{"service-sharing-conflict", "ironlb's Service webhook refuses a request for an address whose sharers can never share with it (ports, externalTrafficPolicy or selector); MetalLB reports AllocationFailed later",
		func(c admissionCase, m, i outcome) bool {
			return ironlbRefuses("Service", "is shared (key")(c, m, i)
		}},
}

func matchIntended(c admissionCase, m, i outcome) *intendedDifference {
	for k := range intendedDifferences {
		if intendedDifferences[k].match(c, m, i) {
			return &intendedDifferences[k]
		}
	}
	return nil
}
