package agent

import (
	"net/netip"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// cmpOpts lets cmp.Diff compare net/netip values (comparable structs with unexported fields) by ==.
var cmpOpts = cmp.Options{cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}, netip.AddrPort{})}
