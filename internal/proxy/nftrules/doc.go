// Package nftrules turns a plain model of Services, endpoints and this node into one nftables
// transaction: the Service dataplane of `ironlb proxy`, laid out as kube-proxy's nftables mode
// lays it out (pkg/proxy/nftables), so its rules, tests and packet flow carry over.
//
// The package is pure. It imports no client-go and opens no sockets (internal/arch's layering test enforces it):
// the caller converts Services and EndpointSlices into a [Model] once, a [Builder] writes
// operations into a caller-made [knftables.Transaction] (or any [Writer]), and the caller runs
// it (nftapply) or hands it to [knftables.Fake] in tests.
//
// # Layout (one table per family, `ip ironlb` and `ip6 ironlb`)
//
//	prerouting  filter-prerouting-pre-dnat (-110)  ct state new jump firewall-check
//	            nat-prerouting (-100)              jump services
//	output      filter-output-pre-dnat (-110)      ct state new jump firewall-check
//	            nat-output (-100)                  jump services
//	            filter-output (0)                  ct state new jump service-endpoints-check, cluster-ips-check
//	input       filter-input (0)                   ct state new jump nodeport-endpoints-check, service-endpoints-check
//	forward     filter-forward (0)                 ct state new jump service-endpoints-check, cluster-ips-check
//	postrouting nat-postrouting (100)              jump masquerading
//
// The per-packet cost does not grow with the number of Services: `services` does one verdict-map
// lookup keyed by `daddr . l4proto . dport` (map service-ips) and one by `l4proto . dport` for
// node ports (map service-nodeports), each a goto into a per-Service-port chain:
//
//	service-HASH-ns/name/proto/port    endpoints for Cluster policy; picks one endpoint chain
//	local-HASH-ns/name/proto/port      endpoints for Local policy (this node's only)
//	external-HASH-ns/name/proto/port   node ports, external and load-balancer IPs; masquerade and
//	                                   short-circuits, then service- or local-
//	firewall-HASH-ns/name/proto/port   loadBalancerSourceRanges, jumped from firewall-check
//	endpoint-HASH-ns/name/proto/port__ip/port  hairpin masquerade, affinity update, DNAT
//	affinity-HASH-...                  dynamic set of client addresses (sessionAffinity ClientIP)
//
// A Service port balanced at random without session affinity (the default) has no endpoint
// chains: its service (or local) chain DNATs in one rule through a window of keys in a shared
// interval map dnat-endpoints-PROTO-N (`numgen random mod 65536 offset K map @...`), and hairpin
// traffic is masqueraded in postrouting through the set hairpin-endpoints. An endpoint change is
// then a change of map and set elements only; see dnatmap.go and [State].
//
// Other service chains pick their endpoint chain by [Service.Algorithm]: random with affinity,
// round-robin, or a Maglev lookup table of M buckets indexed by `jhash ip saddr mod M seed S`
// (consistent source hashing; see [MaglevTable]). Random and round-robin over up to 8 endpoints
// use a cascade of `numgen random|inc mod K 0 goto endpoint-...` rules; above that, and for
// Maglev, one lookup in a verdict map named like the chain (`numgen random mod N vmap @service-...`).
// Unlike kube-proxy this avoids one anonymous set per Service: the kernel looks sets up by
// walking them all, which makes loading 10,000 of them quadratic.
//
// Services without usable endpoints get no chains: their addresses go into no-endpoint-services
// and no-endpoint-nodeports, checked after DNAT in the filter hooks, whose verdict is reject (no
// endpoints anywhere) or drop (Local policy and none on this node). Because a node port either
// DNATs in prerouting or is rejected/dropped in filter-input, traffic to a node port never reaches
// a local process that bound the same port.
//
// # One grammar
//
// Rules are data: the Builder writes each as a [Rule] of typed statements ([Stmt]: matches on
// fields, set lookups, verdict maps, verdicts, mark, masquerade, update, dnat and numgen maps;
// rule.go), and its text is rendered in one place, [Rule.String], which is what nft and the golden
// files see. nftapply encodes the same statements into netlink expressions, and trace evaluates
// them. The one reader of rule text is [ParseRule] (trace uses it on dumped rulesets), fuzzed with
// the round trip of every rule the Builder writes. The AST is ours because neither library we use
// has one that fits: knftables takes a rule as text, google/nftables as the kernel's expressions
// (registers, byte orders), which is nftapply's business and no pure package's. A Writer that
// implements [RuleWriter] gets rules as statements; any other gets their text.
//
// # Syncs
//
// [Builder.Full] rewrites everything (at start and after any failure); [Builder.Incremental]
// compares the last applied model with the new one and touches only the chains, sets and map
// elements of the Services that changed. Both keep a [State] (the windows of the DNAT maps) that
// the caller carries from one sync to the next. Chains that fall out of use are flushed at once and
// returned in [Plan.StaleChains] for the caller to delete in a later transaction (kernels
// before 6.2 keep a chain referenced for a moment after its map element is deleted).
package nftrules
