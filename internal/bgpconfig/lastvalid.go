package bgpconfig

import (
	"cmp"
	"slices"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// LastValid builds like Build, but never loses configuration because of a bad edit: it keeps, per
// object, the last version Build accepted, and while an object's current version is invalid it
// builds with that version instead. An object that was never valid is left out, as by Build; so is
// one whose last valid version is no longer valid either (its BFD profile is gone, it now conflicts
// with another object). MetalLB keeps the whole previous configuration while any object is
// invalid; keeping it per object lets every other edit through.
//
// The zero value is ready to use. A LastValid is not safe for concurrent use: one goroutine owns it.
type LastValid struct {
	peers       map[string]v1beta2.BGPPeer
	adverts     map[string]v1beta1.BGPAdvertisement
	profiles    map[string]v1beta1.BFDProfile
	communities map[string]v1beta1.Community
}

// ObjectRef names an object Build reads: its Kind as in ConfigError and its name.
type ObjectRef struct{ Kind, Name string }

// Build returns the State built from in, with every invalid object replaced by its last valid
// version (or left out), and the errors of the objects' current versions, in Build's order. Held
// lists the objects built from their last valid version instead of their current one.
func (lv *LastValid) Build(in Input) (st State, errs []*ConfigError, held []ObjectRef) {
	bad := map[ObjectRef]bool{}     // current version invalid: build with the last valid one
	dropped := map[ObjectRef]bool{} // last valid version invalid too (or none): leave out
	for {
		st2, errs2 := Build(lv.substitute(in, bad, dropped))
		// Peers refer to BFD profiles and advertisements to Community aliases: while a profile or a
		// Community is newly invalid, the errors of the objects that refer to it are its
		// consequences, so settle the referred kinds first and build again.
		referred := slices.ContainsFunc(errs2, func(e *ConfigError) bool {
			return isReferred(e.Kind) && !bad[ObjectRef{e.Kind, e.Name}]
		})
		progress := false
		for _, e := range errs2 {
			ref := ObjectRef{e.Kind, e.Name}
			if referred && !isReferred(e.Kind) {
				continue
			}
			switch {
			case !bad[ref]:
				bad[ref] = true
				errs = append(errs, e)
				if !lv.has(ref) {
					dropped[ref] = true // never valid: nothing to substitute
				}
				progress = true
			case !dropped[ref]:
				dropped[ref] = true
				progress = true
			}
		}
		// Each round marks at least one more object bad or dropped, so this ends; an error of an
		// object already dropped cannot occur, since a dropped object is not built.
		if !progress {
			st = st2
			break
		}
	}
	for ref := range bad {
		if !dropped[ref] {
			held = append(held, ref)
		}
	}
	sortRefs(held)
	lv.remember(in, bad)
	return st, errs, held
}

func isReferred(kind string) bool { return kind == "BFDProfile" || kind == "Community" }

func (lv *LastValid) has(ref ObjectRef) bool {
	var ok bool
	switch ref.Kind {
	case "BGPPeer":
		_, ok = lv.peers[ref.Name]
	case "BGPAdvertisement":
		_, ok = lv.adverts[ref.Name]
	case "BFDProfile":
		_, ok = lv.profiles[ref.Name]
	case "Community":
		_, ok = lv.communities[ref.Name]
	}
	return ok
}

// substitute returns in with every bad object replaced by its last valid version, or left out when
// dropped. in is not modified.
func (lv *LastValid) substitute(in Input, bad, dropped map[ObjectRef]bool) Input {
	if len(bad) == 0 {
		return in
	}
	in.Peers = swap(in.Peers, "BGPPeer", lv.peers, bad, dropped, func(p *v1beta2.BGPPeer) string { return p.Name })
	in.Advertisements = swap(in.Advertisements, "BGPAdvertisement", lv.adverts, bad, dropped, func(a *v1beta1.BGPAdvertisement) string { return a.Name })
	in.BFDProfiles = swap(in.BFDProfiles, "BFDProfile", lv.profiles, bad, dropped, func(p *v1beta1.BFDProfile) string { return p.Name })
	in.Communities = swap(in.Communities, "Community", lv.communities, bad, dropped, func(c *v1beta1.Community) string { return c.Name })
	return in
}

func swap[T any](objs []T, kind string, last map[string]T, bad, dropped map[ObjectRef]bool, name func(*T) string) []T {
	out := make([]T, 0, len(objs))
	for i := range objs {
		ref := ObjectRef{kind, name(&objs[i])}
		switch {
		case !bad[ref]:
			out = append(out, objs[i])
		case !dropped[ref]:
			out = append(out, last[ref.Name])
		}
	}
	return out
}

// remember records the current version of every valid object, keeps the last valid version of the
// invalid ones, and forgets deleted objects.
func (lv *LastValid) remember(in Input, bad map[ObjectRef]bool) {
	lv.peers = keep(in.Peers, "BGPPeer", lv.peers, bad, func(p *v1beta2.BGPPeer) string { return p.Name })
	lv.adverts = keep(in.Advertisements, "BGPAdvertisement", lv.adverts, bad, func(a *v1beta1.BGPAdvertisement) string { return a.Name })
	lv.profiles = keep(in.BFDProfiles, "BFDProfile", lv.profiles, bad, func(p *v1beta1.BFDProfile) string { return p.Name })
	lv.communities = keep(in.Communities, "Community", lv.communities, bad, func(c *v1beta1.Community) string { return c.Name })
}

func keep[T any](objs []T, kind string, last map[string]T, bad map[ObjectRef]bool, name func(*T) string) map[string]T {
	out := make(map[string]T, len(objs))
	for i := range objs {
		n := name(&objs[i])
		if !bad[ObjectRef{kind, n}] {
			out[n] = objs[i]
		} else if v, ok := last[n]; ok {
			out[n] = v
		}
	}
	return out
}

func sortRefs(refs []ObjectRef) {
	slices.SortFunc(refs, func(a, b ObjectRef) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
}
