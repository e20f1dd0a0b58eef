// Package arch holds no code: its test states the rules of the house, which package may import
// which, and checks them over the whole module with one `go list`. A newcomer reads the table in
// layers_test.go as the map of the repository.
//
// Every package is one of:
//
//   - api: the Go types of the metallb.io CRDs (api/...). They import no other package of ours and
//     nothing that does I/O.
//   - core: a pure decision or model (allocator, election, config, bgpconfig, nftrules, convert,
//     and the pure files of some adapters). A core does no I/O: it imports no client-go, no
//     sockets, no netlink, no GoBGP, no Prometheus, no adapter, no role and no test bed, starts no
//     goroutines, and is tested by tables, properties and fuzzing. Some cores keep a stricter list
//     of what they may import at all.
//   - adapter: the thin edge between a core and the world (Kubernetes clients, sockets, netlink,
//     the kernel's clock). Adapters shared by several roles live outside every role (kube,
//     liveness); the others live inside the role that uses them (speaker/layer2, speaker/bfd,
//     speaker/bgp, proxy/nftapply, proxy/conntrack, ...).
//   - role: one subcommand of the product, one folder: controller, speaker, proxy, status. A role
//     imports cores, adapters and the API, never another role.
//   - test bed: the lab, the benchmarks, the test environment, whoami and the probe
//     (internal/testbed/...), and the end-to-end tests (test/...). The product never imports
//     them.
//   - composition: cmd/ironlb and internal/cli wire the roles (and the lab's subcommands) into
//     one binary. Only they may import roles and the test bed together. The binary links no
//     `testing`.
//   - beside the product: hack/... (build-time generators, never linked) and config (the install
//     manifests, embedded).
package arch
