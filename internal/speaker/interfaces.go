package speaker

import (
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Which interfaces layer 2 announces on, as MetalLB v0.16.1 decides it (internal/layer2/announcer.go
// updateInterfaces, and the metallb-excludel2 ConfigMap its manifests ship): every interface that is
// up, has IFF_BROADCAST, has IFF_NOARP clear, is no bond or bridge port (no master) and whose name
// matches none of the exclusions. An L2Advertisement's `interfaces` then narrows the ones an
// address is answered on (election.AnnounceInterfaces).

// DefaultExcludeInterfaces are MetalLB's announcedInterfacesToExclude (its manifests' default
// metallb-excludel2 ConfigMap): container, CNI and virtual interfaces never announced on.
var DefaultExcludeInterfaces = []string{"^docker.*", "^cbr.*", "^dummy.*", "^virbr.*", "^lxcbr.*", "^veth.*", "^lo$",
	"^cali.*", "^tunl.*", "^flannel.*", "^kube-ipvs.*", "^cni.*", "^nodelocaldns.*", "^lxc.*"}

// excludeRegexp joins exclusion patterns as MetalLB does ("(a)|(b)"); nil patterns give nil (nothing
// excluded).
func excludeRegexp(patterns []string) (*regexp.Regexp, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	return regexp.Compile("(" + strings.Join(patterns, ")|(") + ")")
}

// linkInfo is what decides whether an interface can announce.
type linkInfo struct {
	Name      string
	Up        bool // IFF_UP
	Broadcast bool // IFF_BROADCAST
	NoARP     bool // IFF_NOARP
	HasMaster bool // a bond or bridge port
}

// ifaceReason says why an interface is not announced on ("" when it is).
type ifaceReason string

const (
	IfaceExcluded    ifaceReason = "Excluded"    // its name matches an exclusion
	IfaceDown        ifaceReason = "Down"        // not administratively up
	IfacePort        ifaceReason = "Port"        // enslaved to a bond or bridge
	IfaceNoARP       ifaceReason = "NoARP"       // IFF_NOARP set
	IfaceNoBroadcast ifaceReason = "NoBroadcast" // no IFF_BROADCAST (loopback, point-to-point, tunnels)
)

// announceable applies MetalLB's rules to one interface, in its order.
func announceable(l linkInfo, exclude *regexp.Regexp) ifaceReason {
	switch {
	case exclude != nil && exclude.MatchString(l.Name):
		return IfaceExcluded
	case !l.Up:
		return IfaceDown
	case l.HasMaster:
		return IfacePort
	case l.NoARP:
		return IfaceNoARP
	case !l.Broadcast:
		return IfaceNoBroadcast
	}
	return ""
}

// announceInterfaces returns the names of the links that can announce, sorted.
func announceInterfaces(links []linkInfo, exclude *regexp.Regexp) []string {
	var out []string
	for _, l := range links {
		if announceable(l, exclude) == "" {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

// iffNoARP is Linux's IFF_NOARP, which package net does not report.
const iffNoARP = 0x80

// readLinks reads the host's interfaces (in the calling thread's network namespace).
func readLinks() ([]linkInfo, []net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, nil, err
	}
	out := make([]linkInfo, 0, len(ifs))
	for _, ifi := range ifs {
		l := linkInfo{Name: ifi.Name, Up: ifi.Flags&net.FlagUp != 0, Broadcast: ifi.Flags&net.FlagBroadcast != 0}
		if _, err := os.Stat("/sys/class/net/" + ifi.Name + "/master"); err == nil {
			l.HasMaster = true
		}
		if b, err := os.ReadFile("/sys/class/net/" + ifi.Name + "/flags"); err == nil {
			if f, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 32); err == nil && f&iffNoARP != 0 {
				l.NoARP = true
			}
		}
		out = append(out, l)
	}
	return out, ifs, nil
}
