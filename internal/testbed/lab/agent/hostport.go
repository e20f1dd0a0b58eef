package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// hostPorts programs the node's HostPortTable from the hostPorts of the Pods whose sandboxes are up:
// added when a sandbox is set up, removed at its teardown, the whole table rebuilt each time (a node
// has a handful of hostPorts). The agent runs in the node's network namespace, so the table is the
// node's.
type hostPorts struct {
	log *slog.Logger

	mu   sync.Mutex
	nft  knftables.Interface // nil until first needed
	pods map[types.UID][]hostPortMapping
}

func newHostPorts(log *slog.Logger) *hostPorts {
	return &hostPorts{log: log, pods: map[types.UID][]hostPortMapping{}}
}

// reset deletes the table an earlier agent of this node left (after a power cut its Pods are gone;
// they are set up again from the API).
func (h *hostPorts) reset(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.pods)
	if err := h.sync(ctx); err != nil {
		h.log.Warn("removing the hostPort table left from before", "table", HostPortTable, "err", err)
	}
}

// set programs pod's hostPorts on its sandbox addresses ips (replacing any it had). A Pod without
// hostPorts costs nothing. An error names the Pod and what is wrong; the sandbox is retried.
func (h *hostPorts) set(ctx context.Context, pod *corev1.Pod, ips []netip.Addr) error {
	ms, err := hostPortMappings(pod, ips)
	if err != nil {
		return fmt.Errorf("hostPort: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.pods[pod.UID]
	if len(ms) == 0 && !had || slices.Equal(old, ms) {
		return nil
	}
	if len(ms) == 0 {
		delete(h.pods, pod.UID)
	} else {
		h.pods[pod.UID] = ms
	}
	if slices.ContainsFunc(ms, func(m hostPortMapping) bool { return m.PodIP.Is4() }) {
		// The node reaching a Pod through 127.0.0.1:hostPort: DNAT in output keeps the loopback source
		// until masquerading, which the kernel routes out of a veth only with route_localnet (the
		// portmap plugin sets it on its bridge, kube-proxy's iptables mode on every interface).
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/route_localnet", []byte("1"), 0o644); err != nil {
			h.log.Warn("hostPort on 127.0.0.1 will not work", "err", err)
		}
	}
	if err := h.sync(ctx); err != nil {
		if had {
			h.pods[pod.UID] = old
		} else {
			delete(h.pods, pod.UID)
		}
		return fmt.Errorf("hostPort: programming table %s: %w", HostPortTable, err)
	}
	h.log.Info("hostPorts programmed", "pod", pod.Namespace+"/"+pod.Name, "mappings", len(ms))
	return nil
}

// remove drops uid's hostPorts (at the sandbox's teardown).
func (h *hostPorts) remove(ctx context.Context, uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.pods[uid]
	if !had {
		return
	}
	delete(h.pods, uid)
	if err := h.sync(ctx); err != nil {
		h.pods[uid] = old // the next set or remove rebuilds the table
		h.log.Warn("removing hostPorts", "table", HostPortTable, "err", err)
	}
}

// sync rebuilds the table from h.pods. Called with h.mu held.
func (h *hostPorts) sync(ctx context.Context) error {
	if h.nft == nil {
		nft, err := knftables.New(knftables.InetFamily, HostPortTable)
		if err != nil {
			return err
		}
		h.nft = nft
	}
	var all []hostPortMapping
	for _, ms := range h.pods {
		all = append(all, ms...)
	}
	tx := h.nft.NewTransaction()
	hostPortRules(tx, all)
	return h.nft.Run(ctx, tx)
}
