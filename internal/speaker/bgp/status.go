package bgp

import (
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/ironlb/ironlb/internal/speaker/bfd"
)

// SessionStatus is the state of one BGP session, shaped like MetalLB's (frr-k8s') BGPSessionState
// status, with why it is not Established.
type SessionStatus struct {
	// Name is the BGPPeer's name; Peer its address and Port its port.
	Name string
	Peer netip.Addr
	Port uint16
	// Local is the local address of the session's TCP connection once there was one, else the
	// configured source address (or the zero Addr).
	Local netip.Addr
	// BGPStatus is the BGP state, with FRR's names: "Idle", "Connect", "Active", "OpenSent",
	// "OpenConfirm" or "Established".
	BGPStatus string
	// BFDStatus is the BFD state: "N/A" when the session has no BFD profile (or BFD does not run),
	// else "down", "init", "up" or "adminDown".
	BFDStatus string
	// Reason says why the session is not Established (or was last torn down, while it comes back);
	// empty once Established. Message has the details: the notification, the dial error.
	Reason  DownReason
	Message string
	// Since is when BGPStatus last changed.
	Since time.Time
	// Paths is the number of prefixes the session is to advertise.
	Paths int
	// Removed is set in the last report of a session that is no longer configured.
	Removed bool
}

// Established reports whether the BGP session is up.
func (s SessionStatus) Established() bool { return s.BGPStatus == "Established" }

// DownReason says why a session is not Established. Reasons are CamelCase strings fit for
// Kubernetes event reasons and metric labels.
type DownReason string

const (
	// Connecting: no TCP connection yet, and no attempt has failed.
	Connecting DownReason = "Connecting"
	// ConnectFailed: the last TCP connection attempt failed (Message has the error). With a TCP
	// MD5 password on either side that does not match, attempts time out.
	ConnectFailed DownReason = "ConnectFailed"
	// BadPeerAS: the peer presented another AS number than configured (peerASN, or dynamicASN).
	BadPeerAS DownReason = "BadPeerAS"
	// NotificationReceived: the peer closed the session with a NOTIFICATION (Message says which:
	// a wrong AS number on the peer's side shows as "bad peer AS").
	NotificationReceived DownReason = "NotificationReceived"
	// NotificationSent: we closed the session with a NOTIFICATION (Message says which).
	NotificationSent DownReason = "NotificationSent"
	// HoldTimerExpired: nothing heard from the peer for the hold time.
	HoldTimerExpired DownReason = "HoldTimerExpired"
	// ConnectionLost: reading from or writing to the connection failed.
	ConnectionLost DownReason = "ConnectionLost"
	// InvalidMessage: the peer sent something malformed.
	InvalidMessage DownReason = "InvalidMessage"
	// BFDDown: the session's BFD session went down, so the BGP session is held down until BFD is
	// up again (or, failing that, for the hold time).
	BFDDown DownReason = "BFDDown"
	// Rejected: GoBGP refused the session's configuration (Message says why).
	Rejected DownReason = "Rejected"
	// NoRouterID: the node has no IPv4 router ID (no BGPPeer routerID, no IPv4 default), so BGP
	// cannot start.
	NoRouterID DownReason = "NoRouterID"
	// Other: any other transition out of Established (Message has GoBGP's reason).
	Other DownReason = "Other"
)

// NoBFD is BFDStatus for sessions without BFD (frr-k8s' "N/A").
const NoBFD = "N/A"

// bgpStatus names a GoBGP FSM state as FRR does.
func bgpStatus(s gobgp.FSMState) string {
	switch s {
	case gobgp.BGP_FSM_IDLE:
		return "Idle"
	case gobgp.BGP_FSM_CONNECT:
		return "Connect"
	case gobgp.BGP_FSM_ACTIVE:
		return "Active"
	case gobgp.BGP_FSM_OPENSENT:
		return "OpenSent"
	case gobgp.BGP_FSM_OPENCONFIRM:
		return "OpenConfirm"
	case gobgp.BGP_FSM_ESTABLISHED:
		return "Established"
	}
	return "Idle"
}

// bfdStatus names a BFD state as frr-k8s does.
func bfdStatus(s bfd.State) string {
	switch s {
	case bfd.StateUp:
		return "up"
	case bfd.StateInit:
		return "init"
	case bfd.StateAdminDown:
		return "adminDown"
	}
	return "down"
}

// downReason maps GoBGP's disconnect reason; ok is false for reasons that are not failures (the
// idle hold timer, deconfiguration, none).
func downReason(r api.PeerState_DisconnectReason) (DownReason, bool) {
	switch r {
	case api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED:
		return HoldTimerExpired, true
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT:
		return NotificationSent, true
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED:
		return NotificationReceived, true
	case api.PeerState_DISCONNECT_REASON_READ_FAILED, api.PeerState_DISCONNECT_REASON_WRITE_FAILED:
		return ConnectionLost, true
	case api.PeerState_DISCONNECT_REASON_INVALID_MSG:
		return InvalidMessage, true
	case api.PeerState_DISCONNECT_REASON_BAD_PEER_AS:
		return BadPeerAS, true
	case api.PeerState_DISCONNECT_REASON_ADMIN_DOWN, api.PeerState_DISCONNECT_REASON_HARD_RESET,
		api.PeerState_DISCONNECT_REASON_RESTART_TIMER_EXPIRED, api.PeerState_DISCONNECT_REASON_GRACEFUL_RESTART:
		return Other, true
	}
	return "", false
}
