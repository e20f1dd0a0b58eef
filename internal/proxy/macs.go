package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// The direct-server-return loop guard knows a peer node by the source MAC of its frames, and each
// proxy learns its peers' MACs from their Nodes, where each proxy publishes its own
// (convert.AnnotationDSRMACs), never from the neighbour table, which any host on the segment
// writes (internal/proxy/dsrapply's package comment has the threat). macPublisher is the writer.

// nodeStatusPatcher patches a Node through its status subresource (typed client's Nodes()).
type nodeStatusPatcher interface {
	PatchStatus(ctx context.Context, nodeName string, data []byte) (*corev1.Node, error)
}

// macPublisher keeps this node's published MACs equal to its interfaces': at start and every
// period. Construct it and call Run; it starts nothing itself.
type macPublisher struct {
	node   string
	src    source
	nodes  nodeStatusPatcher
	local  func(ips []netip.Addr) ([]nftrules.EtherAddr, error) // dsrapply.LocalMACs
	period time.Duration
	log    *slog.Logger
	last   string // the last problem logged (not repeated every period)
}

// Run publishes until ctx ends.
func (m *macPublisher) Run(ctx context.Context) error {
	t := time.NewTicker(m.period)
	defer t.Stop()
	for {
		m.report(m.publish(ctx))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *macPublisher) report(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == m.last {
		return
	}
	m.last = msg
	if err != nil {
		m.log.Warn("publishing this node's MACs for the direct-server-return loop guard", "node", m.node, "annotation", convert.AnnotationDSRMACs, "err", err)
	}
}

// publish patches the Node when its annotation differs from the interfaces' MACs.
func (m *macPublisher) publish(ctx context.Context) error {
	n := m.src.Node(m.node)
	if n == nil {
		return fmt.Errorf("node object %s not found", m.node)
	}
	ips := internalIPs(n)
	if len(ips) == 0 {
		return fmt.Errorf("node %s has no InternalIP", m.node)
	}
	macs, err := m.local(ips)
	if err != nil {
		return err
	}
	if len(macs) == 0 {
		// The annotation is left as it is: peers keep the last MACs known.
		return fmt.Errorf("no interface with an Ethernet address carries %v", ips)
	}
	patch, need := macsPatch(n, macs)
	if !need {
		return nil
	}
	if _, err := m.nodes.PatchStatus(ctx, m.node, patch); err != nil {
		return fmt.Errorf("patching node %s: %w", m.node, err)
	}
	m.log.Info("published this node's MACs for the direct-server-return loop guard", "node", m.node, "macs", convert.FormatMACs(macs))
	return nil
}

// internalIPs are node's InternalIP addresses.
func internalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// macsPatch returns the patch that sets node's AnnotationDSRMACs to macs, and false when it
// already holds them.
func macsPatch(node *corev1.Node, macs []nftrules.EtherAddr) ([]byte, bool) {
	want := convert.FormatMACs(macs)
	if have, err := convert.NodeMACs(node); err == nil && convert.FormatMACs(have) == want {
		return nil, false
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{convert.AnnotationDSRMACs: want}}})
	return b, true
}
