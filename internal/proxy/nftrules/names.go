package nftrules

import (
	"encoding/base32"
	"encoding/binary"
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// TableName is the name of ironlb's table in both families.
const TableName = "ironlb"

// Names of the fixed chains, sets and maps.
const (
	chainFilterPreroutingPreDNAT = "filter-prerouting-pre-dnat"
	chainFilterOutputPreDNAT     = "filter-output-pre-dnat"
	chainFilterInput             = "filter-input"
	chainFilterForward           = "filter-forward"
	chainFilterOutput            = "filter-output"
	chainNATPrerouting           = "nat-prerouting"
	chainNATOutput               = "nat-output"
	chainNATPostrouting          = "nat-postrouting"

	chainServices               = "services"
	chainMasquerading           = "masquerading"
	chainMarkForMasquerade      = "mark-for-masquerade"
	chainFirewallCheck          = "firewall-check"
	chainServiceEndpointsCheck  = "service-endpoints-check"
	chainNodePortEndpointsCheck = "nodeport-endpoints-check"
	chainClusterIPsCheck        = "cluster-ips-check"
	chainReject                 = "reject-chain"

	setClusterIPs   = "cluster-ips"
	setNodePortIPs  = "nodeport-ips"
	setClusterCIDRs = "cluster-cidrs"
	setHairpin      = "hairpin-endpoints"

	mapServiceIPs          = "service-ips"
	mapServiceNodePorts    = "service-nodeports"
	mapNoEndpointServices  = "no-endpoint-services"
	mapNoEndpointNodePorts = "no-endpoint-nodeports"
	mapFirewallIPs         = "firewall-ips"
	prefixDNATMap          = "dnat-endpoints-" // + protocol + "-" + shard
)

// HairpinSet names the set of hairpin pairs (see dnatmap.go).
const HairpinSet = setHairpin

// dnatMap names the DNAT map of window id's shard for protocol p: nft 1.0 refuses a rule whose
// protocol differs from the one in the map's typeof, so each protocol has its own.
func dnatMap(p Protocol, id uint32) string {
	return prefixDNATMap + string(p) + "-" + strconv.Itoa(int(id/WindowsPerMap))
}

// IsDNATMap reports whether m is one of the DNAT maps (dnat-endpoints-PROTO-SHARD).
func IsDNATMap(m string) bool { return strings.HasPrefix(m, prefixDNATMap) }

// dnatMapProtocol returns the protocol of DNAT map m.
func dnatMapProtocol(m string) Protocol {
	p, _, _ := strings.Cut(strings.TrimPrefix(m, prefixDNATMap), "-")
	return Protocol(p)
}

// Prefixes of the per-Service chain and set names.
const (
	prefixService  = "service-"
	prefixLocal    = "local-"
	prefixExternal = "external-"
	prefixFirewall = "firewall-"
	prefixEndpoint = "endpoint-"
	prefixAffinity = "affinity-"
)

// IsServiceChain reports whether chain is a per-Service chain (service-, local-, external-,
// firewall- or endpoint-): they, and only they, contain a "/".
func IsServiceChain(chain string) bool { return strings.Contains(chain, "/") }

// IsServiceMap reports whether m is a per-Service verdict map (named like its service chain).
func IsServiceMap(m string) bool { return strings.Contains(m, "/") }

// IsAffinitySet reports whether set is a per-endpoint session-affinity set.
func IsAffinitySet(set string) bool { return strings.HasPrefix(set, prefixAffinity) }

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// hashed returns prefix + HASH + "-" + name, HASH being 8 base32 characters of a hash of salt and
// name: it tells apart names that differ in one digit at a glance and keeps them unique if they
// are ever cut to nft's 256-character limit.
func hashed(prefix, name, salt string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte(salt))
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], h.Sum64())
	s := prefix + b32.EncodeToString(buf[:5]) + "-" + name
	if len(s) > knftables.NameLengthMax {
		s = s[:knftables.NameLengthMax-3] + "..."
	}
	return s
}

// portBase is "namespace/name/protocol/port-name", the port number standing in for an empty name.
func portBase(svc *Service, p *Port) string {
	name := p.Name
	if name == "" {
		name = strconv.Itoa(int(p.Port))
	}
	return svc.Namespace + "/" + svc.Name + "/" + string(p.Protocol) + "/" + name
}

// endpointBase is portBase + "__address/port", the address's colons replaced by dots (colons are
// not allowed in chain names).
func endpointBase(base string, ep netip.AddrPort) string {
	return base + "__" + strings.ReplaceAll(ep.Addr().String(), ":", ".") + "/" + strconv.Itoa(int(ep.Port()))
}

// seed returns the jhash seed of a Maglev service chain: fixed per Service port, so that
// rewriting the chain (nft would otherwise pick a random seed) and other nodes hash a client
// alike.
func seed(base string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(base))
	return h.Sum32()
}
