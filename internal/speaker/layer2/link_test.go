package layer2

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLinkTracker follows the interface "eth0" (index 3 at first) through the kernel's
// notifications, one row per case: each row's notifications after a seed, and the states reported.
func TestLinkTracker(t *testing.T) {
	const upFlags = iffUp | iffLowerUp
	type note struct {
		typ   uint16
		index int
		name  string
		flags uint32
	}
	up := LinkState{Name: "eth0", Index: 3, Up: true}
	rows := []struct {
		name  string
		seed  *note // nil: the link is missing at the seed
		notes []note
		want  []LinkState // the reports, the seed's first
	}{{
		name: "the seed is reported even when missing, as at start",
		want: []LinkState{{Name: "eth0", Reason: LinkMissing}},
	}, {
		name:  "up, then a notification that changes nothing is not reported",
		seed:  &note{rtmNewLink, 3, "eth0", upFlags},
		notes: []note{{rtmNewLink, 3, "eth0", upFlags}},
		want:  []LinkState{up},
	}, {
		name:  "other links are ignored",
		seed:  &note{rtmNewLink, 3, "eth0", upFlags},
		notes: []note{{rtmNewLink, 4, "eth1", 0}, {rtmDelLink, 4, "eth1", 0}},
		want:  []LinkState{up},
	}, {
		name:  "administratively down, then up",
		seed:  &note{rtmNewLink, 3, "eth0", upFlags},
		notes: []note{{rtmNewLink, 3, "eth0", iffLowerUp}, {rtmNewLink, 3, "eth0", upFlags}},
		want:  []LinkState{up, {Name: "eth0", Index: 3, Reason: LinkAdminDown}, up},
	}, {
		name:  "carrier lost",
		seed:  &note{rtmNewLink, 3, "eth0", upFlags},
		notes: []note{{rtmNewLink, 3, "eth0", iffUp}},
		want:  []LinkState{up, {Name: "eth0", Index: 3, Reason: LinkNoCarrier}},
	}, {
		name:  "deleted and created again with another index",
		seed:  &note{rtmNewLink, 3, "eth0", upFlags},
		notes: []note{{rtmDelLink, 3, "eth0", 0}, {rtmNewLink, 9, "eth0", 0}, {rtmNewLink, 9, "eth0", upFlags}},
		want: []LinkState{up, {Name: "eth0", Reason: LinkMissing, Detail: "deleted"}, {Name: "eth0", Index: 9, Reason: LinkAdminDown},
			{Name: "eth0", Index: 9, Up: true}},
	}, {
		name:  "renamed away, then another link renamed to the name",
		seed:  &note{rtmNewLink, 3, "eth0", upFlags},
		notes: []note{{rtmNewLink, 3, "old0", upFlags}, {rtmNewLink, 3, "old0", 0}, {rtmNewLink, 5, "eth0", upFlags}},
		want:  []LinkState{up, {Name: "eth0", Reason: LinkRenamed, Detail: "renamed to old0"}, {Name: "eth0", Index: 5, Up: true}},
	}}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			tr := newLinkTracker("eth0")
			var got []LinkState
			add := func(s LinkState, changed bool) {
				if changed {
					got = append(got, s)
				}
			}
			if r.seed == nil {
				add(tr.seed(false, 0, 0))
			} else {
				add(tr.seed(true, r.seed.index, r.seed.flags))
			}
			for _, n := range r.notes {
				add(tr.update(n.typ, n.index, n.name, n.flags))
			}
			if diff := cmp.Diff(r.want, got); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
		})
	}
}
