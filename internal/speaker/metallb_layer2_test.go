package speaker

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"

	"github.com/mdlayher/arp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

// TestMetalLBLayer2Counters runs a responder as the speaker configures it (OnCount: the metrics'
// layer2Count) over a fake socket: a request for an announced address, its answer and a gratuitous
// announcement show in MetalLB's per-address counters; a request for another address does not.
func TestMetalLBLayer2Counters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := newMetrics(reg)
		ifi := &net.Interface{Index: 1, Name: "eth0", HardwareAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}}
		conn := layer2.NewFakeConn()
		r, err := layer2.NewARP(ifi, conn, layer2.Config{OnCount: m.layer2Count})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Announce(vip); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() { cancel(); <-done }()
		client := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x09}
		request := func(target netip.Addr) {
			b, err := layer2.ARP{EthDst: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthSrc: client, Op: arp.OperationRequest,
				SenderMAC: client, SenderIP: netip.MustParseAddr("172.18.0.9"), TargetMAC: make(net.HardwareAddr, 6), TargetIP: target}.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			conn.Inject(b)
			synctest.Wait()
		}
		request(vip)
		request(vip)
		request(netip.MustParseAddr("172.18.255.201")) // not announced: not counted
		if err := r.Gratuitous(vip); err != nil {      // a request and a reply
			t.Fatal(err)
		}
		checkMetrics(t, reg, `
# HELP metallb_layer2_gratuitous_sent Number of gratuitous layer2 packets sent for owned IPs as a result of failovers
# TYPE metallb_layer2_gratuitous_sent counter
metallb_layer2_gratuitous_sent{ip="172.18.255.200"} 2
# HELP metallb_layer2_requests_received Number of layer2 requests received for owned IPs
# TYPE metallb_layer2_requests_received counter
metallb_layer2_requests_received{ip="172.18.255.200"} 2
# HELP metallb_layer2_responses_sent Number of layer2 responses sent for owned IPs in response to requests
# TYPE metallb_layer2_responses_sent counter
metallb_layer2_responses_sent{ip="172.18.255.200"} 2
`)
	})
}
