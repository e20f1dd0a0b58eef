package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// This file is all the GoBGP calls: one embedded server, driven only by Run's goroutine.

// Defaults for what a BGPPeer leaves open.
const (
	// DefaultConnectTime is the time between connection attempts when the BGPPeer sets no
	// connectTime. GoBGP's own default (120 s) would leave a node without routes for minutes after
	// a router restart.
	DefaultConnectTime = 5 * time.Second
	// idleHoldAfterReset is how long GoBGP waits after an administrative reset before connecting
	// again (its default is 30 s).
	idleHoldAfterReset = 1
)

// gobgpServer is one running GoBGP server: started, serving, and watched.
type gobgpServer struct {
	s           *server.BgpServer
	routerID    netip.Addr
	asn         uint32
	cancelWatch context.CancelFunc
	served      chan struct{} // closed when Serve returns
}

// startServer starts GoBGP with the router ID and a global AS number (each peer presents its own
// local AS number, so the global one only has to be valid), listening on no port: the speaker
// dials its peers. Peer state changes go to post.
func startServer(routerID netip.Addr, asn uint32, logh slog.Handler, post func(context.Context, event)) (*gobgpServer, error) {
	g := &gobgpServer{
		s:        server.NewBgpServer(server.LoggerOption(slog.New(logh), nil)),
		routerID: routerID,
		asn:      asn,
		served:   make(chan struct{}),
	}
	go func() {
		defer close(g.served)
		g.s.Serve()
	}()
	ctx := context.Background()
	err := g.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: routerID.String(), ListenPort: -1}})
	if err == nil {
		err = g.s.SetPolicies(ctx, buildExportPolicy(nil).req)
	}
	if err == nil {
		err = g.s.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
			Policies:      []*api.Policy{{Name: importPolicyName}},
			DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT}})
	}
	if err == nil {
		err = g.s.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_EXPORT,
			Policies:      []*api.Policy{{Name: exportPolicyName}},
			DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT}})
	}
	if err == nil {
		var wctx context.Context
		wctx, g.cancelWatch = context.WithCancel(context.Background())
		err = g.s.WatchEvent(wctx, server.WatchEventMessageCallbacks{
			OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, at time.Time) {
				if ev.Type != apiutil.PEER_EVENT_STATE {
					return
				}
				st := ev.Peer.State
				post(wctx, peerEvent{srv: g, peer: ev.Peer.Conf.NeighborAddress, state: st.SessionState,
					reason: st.DisconnectReason, msg: st.DisconnectMessage, local: ev.Peer.Transport.LocalAddress,
					remoteAS: st.PeerASN, at: at})
			},
		}, server.WatchPeer())
	}
	if err != nil {
		g.stop()
		return nil, fmt.Errorf("starting gobgp (router ID %v, AS %d): %w", routerID, asn, err)
	}
	return g, nil
}

// stop closes every session (with a Cease NOTIFICATION, so routers withdraw the routes at once)
// and waits for GoBGP to return.
func (g *gobgpServer) stop() {
	if g.cancelWatch != nil {
		g.cancelWatch()
	}
	g.s.Stop()
	<-g.served
}

// peerConf is what a GoBGP neighbor is made of: a change re-creates the neighbor.
type peerConf struct {
	addr, source              netip.Addr
	port                      uint16
	localASN, peerASN         uint32
	hold, keepalive, connect  time.Duration
	multihop, gracefulRestart bool
	password                  string
}

func confOf(s *bgpconfig.Session) peerConf {
	return peerConf{addr: s.Addr, source: s.SourceAddr, port: s.Port, localASN: s.LocalASN, peerASN: s.PeerASN,
		hold: s.HoldTime, keepalive: s.KeepaliveTime, connect: s.ConnectTime, multihop: s.EBGPMultiHop,
		gracefulRestart: s.GracefulRestart, password: s.Password}
}

func seconds(d time.Duration) uint64 { return uint64(d / time.Second) }

// apiPeer is the GoBGP neighbor of a session.
func apiPeer(s *bgpconfig.Session, defaultConnect time.Duration) *api.Peer {
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if s.Addr.Is6() {
		family.Afi = api.Family_AFI_IP6
	}
	connect := s.ConnectTime
	if connect == 0 {
		connect = defaultConnect
	}
	p := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: s.Addr.String(),
			PeerAsn:         s.PeerASN, // 0 for dynamicASN external: any AS number, checked on Established
			LocalAsn:        s.LocalASN,
			AuthPassword:    s.Password,
			Description:     s.Name,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry: max(seconds(connect), 1),
			// GoBGP reads 0 as "default" (90 s): a hold time of 0 cannot be expressed.
			HoldTime:               seconds(s.HoldTime),
			KeepaliveInterval:      max(seconds(s.KeepaliveTime), 1),
			IdleHoldTimeAfterReset: idleHoldAfterReset,
		}},
		Transport: &api.Transport{RemotePort: uint32(s.Port)},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: family, Enabled: true}}},
	}
	if s.SourceAddr.IsValid() {
		p.Transport.LocalAddress = s.SourceAddr.String()
	}
	if s.EBGPMultiHop {
		p.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: 255}
	}
	if s.GracefulRestart {
		p.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: 120}
	}
	return p
}

func (g *gobgpServer) addPeer(s *bgpconfig.Session, defaultConnect time.Duration) error {
	if err := g.s.AddPeer(context.Background(), &api.AddPeerRequest{Peer: apiPeer(s, defaultConnect)}); err != nil {
		return fmt.Errorf("adding peer %v: %w", s.Addr, err)
	}
	return nil
}

func (g *gobgpServer) deletePeer(addr netip.Addr) error {
	if err := g.s.DeletePeer(context.Background(), &api.DeletePeerRequest{Address: addr.String()}); err != nil {
		return fmt.Errorf("deleting peer %v: %w", addr, err)
	}
	return nil
}

func (g *gobgpServer) disablePeer(addr netip.Addr, why string) error {
	if err := g.s.DisablePeer(context.Background(), &api.DisablePeerRequest{Address: addr.String(), Communication: why}); err != nil {
		return fmt.Errorf("disabling peer %v: %w", addr, err)
	}
	return nil
}

func (g *gobgpServer) enablePeer(addr netip.Addr) error {
	if err := g.s.EnablePeer(context.Background(), &api.EnablePeerRequest{Address: addr.String()}); err != nil {
		return fmt.Errorf("enabling peer %v: %w", addr, err)
	}
	return nil
}

// adminDown reports whether GoBGP holds the neighbor addr administratively down.
func (g *gobgpServer) adminDown(addr netip.Addr) (bool, error) {
	found, down := false, false
	err := g.s.ListPeer(context.Background(), &api.ListPeerRequest{Address: addr.String()}, func(p *api.Peer) {
		found, down = true, p.GetState().GetAdminState() == api.PeerState_ADMIN_STATE_DOWN
	})
	if err != nil {
		return false, fmt.Errorf("listing peer %v: %w", addr, err)
	}
	if !found {
		return false, fmt.Errorf("listing peer %v: not found", addr)
	}
	return down, nil
}

// softResetOut sends a peer its paths again through the current export policy, withdrawing what
// the policy now rejects.
func (g *gobgpServer) softResetOut(addr netip.Addr) error {
	err := g.s.ResetPeer(context.Background(), &api.ResetPeerRequest{Address: addr.String(), Soft: true,
		Direction: api.ResetPeerRequest_DIRECTION_OUT})
	if err != nil {
		return fmt.Errorf("soft reset of peer %v: %w", addr, err)
	}
	return nil
}

func (g *gobgpServer) setPolicy(ep exportPolicy) error {
	if err := g.s.SetPolicies(context.Background(), ep.req); err != nil {
		return fmt.Errorf("setting the export policy: %w", err)
	}
	return nil
}

// globalPath is the bare path of a prefix in the global RIB: origin IGP and an unspecified next
// hop, which GoBGP replaces by each session's local address.
func globalPath(p netip.Prefix) (*apiutil.Path, error) {
	nlri, err := gobgp.NewIPAddrPrefix(p)
	if err != nil {
		return nil, fmt.Errorf("prefix %v: %w", p, err)
	}
	origin := gobgp.NewPathAttributeOrigin(gobgp.BGP_ORIGIN_ATTR_TYPE_IGP)
	if p.Addr().Is4() {
		nh, err := gobgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return nil, err
		}
		return &apiutil.Path{Family: gobgp.RF_IPv4_UC, Nlri: nlri, Attrs: []gobgp.PathAttributeInterface{origin, nh}}, nil
	}
	mp, err := gobgp.NewPathAttributeMpReachNLRI(gobgp.RF_IPv6_UC, []gobgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
	if err != nil {
		return nil, fmt.Errorf("prefix %v: %w", p, err)
	}
	return &apiutil.Path{Family: gobgp.RF_IPv6_UC, Nlri: nlri, Attrs: []gobgp.PathAttributeInterface{origin, mp}}, nil
}

func (g *gobgpServer) addPaths(ps []netip.Prefix) error {
	if len(ps) == 0 {
		return nil
	}
	paths, err := globalPaths(ps)
	if err != nil {
		return err
	}
	if _, err := g.s.AddPath(apiutil.AddPathRequest{Paths: paths}); err != nil {
		return fmt.Errorf("adding %d paths: %w", len(ps), err)
	}
	return nil
}

func (g *gobgpServer) deletePaths(ps []netip.Prefix) error {
	if len(ps) == 0 {
		return nil
	}
	paths, err := globalPaths(ps)
	if err != nil {
		return err
	}
	if err := g.s.DeletePath(apiutil.DeletePathRequest{Paths: paths}); err != nil {
		return fmt.Errorf("withdrawing %d paths: %w", len(ps), err)
	}
	return nil
}

// globalPaths is globalPath of each prefix.
func globalPaths(ps []netip.Prefix) ([]*apiutil.Path, error) {
	paths := make([]*apiutil.Path, 0, len(ps))
	for _, p := range ps {
		path, err := globalPath(p)
		if err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// isDynamicExternal reports whether a session accepts any AS number but its own.
func isDynamicExternal(s *bgpconfig.Session) bool { return s.DynamicASN == v1beta2.ExternalASNMode }

// counters reads every neighbor's message counters and, for Established ones, how many prefixes
// the export policy lets through to it.
func (g *gobgpServer) counters() ([]PeerCounters, error) {
	var out []PeerCounters
	err := g.s.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		if p.Conf == nil {
			return
		}
		addr, err := netip.ParseAddr(p.Conf.NeighborAddress)
		if err != nil {
			return
		}
		c := PeerCounters{Name: p.Conf.Description, Peer: addr.Unmap(), Port: uint16(p.GetTransport().GetRemotePort())}
		if m := p.GetState().GetMessages(); m != nil {
			sent, recv := m.GetSent(), m.GetReceived()
			c.UpdatesSent, c.UpdatesReceived = sent.GetUpdate(), recv.GetUpdate()
			c.NotificationsSent = sent.GetNotification()
			c.OpensSent, c.OpensReceived = sent.GetOpen(), recv.GetOpen()
			c.KeepalivesSent, c.KeepalivesReceived = sent.GetKeepalive(), recv.GetKeepalive()
			c.RouteRefreshSent = sent.GetRefresh()
			c.TotalSent, c.TotalReceived = sent.GetTotal(), recv.GetTotal()
		}
		for _, af := range p.AfiSafis {
			c.Advertised += af.GetState().GetAdvertised()
		}
		out = append(out, c)
	})
	if err != nil {
		return nil, fmt.Errorf("listing peers: %w", err)
	}
	return out, nil
}
