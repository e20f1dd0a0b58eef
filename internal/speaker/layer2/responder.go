package layer2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
)

var (
	// ErrNotAnnounced is returned by Gratuitous and GratuitousTo for an
	// address the responder does not announce.
	ErrNotAnnounced = errors.New("address not announced")
	// ErrFamily is returned for an address the responder cannot announce:
	// IPv6 to an ARP responder, IPv4 to an NDP responder, or an invalid,
	// unspecified, loopback or multicast address.
	ErrFamily = errors.New("address not announceable by this responder")
	// ErrRunning is returned by a second call of Run.
	ErrRunning = errors.New("responder already running")
)

// readBufferSize holds any frame a packet socket can return, jumbo or not,
// so a long frame is never truncated into a "malformed" one.
const readBufferSize = 1 << 16

// netDownBackoff is how long Run waits after the socket reported that the
// interface went down (ENETDOWN, reported once per event) before reading
// again.
const netDownBackoff = 100 * time.Millisecond

// AnswerFunc chooses the MAC that answers client (clientIP, clientMAC) for
// the announced address ip; ok=false sends no answer. It is called from
// Run's goroutine, without the responder's lock held, only for announced
// addresses. The MAC must be a 6-byte unicast address, or nothing is sent.
//
// For a duplicate address probe, clientIP is 0.0.0.0 (ARP) or :: (NDP).
// Refresh asks it with the zero client (invalid clientIP, nil clientMAC) for
// the MAC to broadcast; returning ok=false there skips the broadcast refresh
// of ip, as spread mode wants.
type AnswerFunc func(ip, clientIP netip.Addr, clientMAC net.HardwareAddr) (mac net.HardwareAddr, ok bool)

// Groups joins and leaves IPv6 multicast groups on the responder's
// interface. The real one is MulticastGroups, which also sends MLD reports
// so that snooping switches forward the groups' traffic; FakeGroups records
// calls.
type Groups interface {
	JoinGroup(group netip.Addr) error
	LeaveGroup(group netip.Addr) error
}

// Config holds a Responder's optional settings. The zero value is usable.
type Config struct {
	// OnConflict, if set, is called from Run's goroutine each time a packet
	// from another MAC claims an announced address (RFC 5227 §2.4): an ARP
	// request or reply whose sender IP is the address, or a neighbour
	// advertisement for it. mac is the claimant's (the ARP sender or the
	// Target Link-Layer Address, else the frame's source); it is a copy the
	// callback may keep. In spread mode, peers' answers for a shared address
	// arrive here too when the switch floods them: the callback filters the
	// MACs it expects. It must not block; it may call the Responder.
	OnConflict func(ip netip.Addr, mac net.HardwareAddr)
	// Refresh, if positive, makes Run re-announce every announced address at
	// this interval (against switch FDB and neighbour cache ageing) with
	// the MAC the AnswerFunc gives for the zero client (default: the
	// interface's).
	Refresh time.Duration
	// Logger receives debug lines per answer and warnings for conflicts and
	// send errors. Nil discards.
	Logger *slog.Logger
	// OnNetDown, if set, is called from Run's goroutine each time the socket
	// reports that the interface went down (ENETDOWN, once per event; Run
	// keeps reading). The kernel reports the interface's removal the same
	// way, after which the socket never receives again: the caller decides
	// whether to reopen (Managed.Reopen). It must not block.
	OnNetDown func(err error)
	// OnCount, if set, is called for each packet counted in Stats.Requests,
	// Stats.Answers and Stats.Gratuitous, with the announced address it was
	// for: the speaker turns it into MetalLB's per-address counters
	// (metallb_layer2_*), which outlive a responder reopened on the same
	// interface. It is called from Run's goroutine, and from Gratuitous and
	// GratuitousTo's callers; it must not block.
	OnCount func(c Count, ip netip.Addr)
}

// Count is what OnCount counts.
type Count uint8

const (
	// CountRequest: an ARP request or neighbour solicitation for an
	// announced address (Stats.Requests).
	CountRequest Count = iota + 1
	// CountAnswer: an answer sent (Stats.Answers).
	CountAnswer
	// CountGratuitous: a gratuitous frame sent (Stats.Gratuitous).
	CountGratuitous
)

func (c Count) String() string {
	switch c {
	case CountRequest:
		return "request"
	case CountAnswer:
		return "answer"
	case CountGratuitous:
		return "gratuitous"
	}
	return fmt.Sprintf("Count(%d)", uint8(c))
}

// Stats are a Responder's counters since it was built.
type Stats struct {
	// Requests counts ARP requests and neighbour solicitations received for
	// announced addresses, answered or not.
	Requests uint64
	// Answers counts ARP replies and solicited advertisements sent.
	Answers uint64
	// Gratuitous counts gratuitous frames sent by Gratuitous, GratuitousTo
	// and refreshes (a gratuitous ARP is two frames).
	Gratuitous uint64
	// Malformed counts frames dropped because they did not parse or failed
	// validation.
	Malformed uint64
	// Conflicts counts packets in which another MAC claimed an announced
	// address.
	Conflicts uint64
	// SendErrors counts answers and refreshes that could not be sent.
	// Gratuitous and GratuitousTo return their errors instead.
	SendErrors uint64
}

type family uint8

const (
	familyARP family = iota + 1
	familyNDP
)

func (f family) String() string {
	if f == familyARP {
		return "ARP"
	}
	return "NDP"
}

// Responder answers ARP or NDP for the addresses announced on one
// interface. Build it with NewARP or NewNDP, start Run, then Announce and
// Withdraw addresses. All methods are safe for concurrent use.
type Responder struct {
	ifi    *net.Interface
	mac    net.HardwareAddr // ifi's MAC: the frames' source and the default answer
	fam    family
	conn   net.PacketConn
	groups Groups // NDP only
	cfg    Config
	log    *slog.Logger

	running atomic.Bool

	requests, answers, gratuitous, malformed, conflicts, sendErrors atomic.Uint64

	mu        sync.Mutex // guards the following fields
	announced map[netip.Addr]struct{}
	groupRefs map[netip.Addr]int // NDP: solicited-node group -> announced addresses in it
	answer    AnswerFunc         // nil: answer with mac
}

// NewARP returns a responder answering ARP for IPv4 addresses on ifi, over
// conn, which must carry whole Ethernet frames of EtherType 0x0806 on ifi
// (ListenARP). The Responder owns conn: Close closes it. It returns an
// error if ifi has no 6-byte unicast MAC or conn is nil. It starts nothing.
func NewARP(ifi *net.Interface, conn net.PacketConn, cfg Config) (*Responder, error) {
	return newResponder(familyARP, ifi, conn, nil, cfg)
}

// NewNDP returns a responder answering NDP for IPv6 addresses on ifi, over
// conn, which must carry whole Ethernet frames of ifi's neighbour
// solicitations and advertisements (ListenNDP; other frames are skipped).
// groups joins each announced address's solicited-node group on ifi
// (ListenGroups). The Responder owns conn and groups: Close closes both (groups
// if it is an io.Closer). It returns an error if ifi has no 6-byte unicast
// MAC or conn or groups is nil. It starts nothing.
func NewNDP(ifi *net.Interface, conn net.PacketConn, groups Groups, cfg Config) (*Responder, error) {
	if groups == nil {
		return nil, errors.New("new NDP responder: nil groups")
	}
	return newResponder(familyNDP, ifi, conn, groups, cfg)
}

func newResponder(fam family, ifi *net.Interface, conn net.PacketConn, groups Groups, cfg Config) (*Responder, error) {
	if ifi == nil {
		return nil, fmt.Errorf("new %s responder: nil interface", fam)
	}
	if !isUnicastMAC(ifi.HardwareAddr) {
		return nil, fmt.Errorf("new %s responder on %s: MAC %q is not a 6-byte unicast address", fam, ifi.Name, ifi.HardwareAddr)
	}
	if conn == nil {
		return nil, fmt.Errorf("new %s responder on %s: nil conn", fam, ifi.Name)
	}
	if cfg.Refresh < 0 {
		return nil, fmt.Errorf("new %s responder on %s: negative refresh %v", fam, ifi.Name, cfg.Refresh)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Responder{
		ifi:       ifi,
		mac:       cloneMAC(ifi.HardwareAddr),
		fam:       fam,
		conn:      conn,
		groups:    groups,
		cfg:       cfg,
		log:       log.With("iface", ifi.Name, "proto", fam.String()),
		announced: make(map[netip.Addr]struct{}),
		groupRefs: make(map[netip.Addr]int),
	}, nil
}

// Interface returns the interface the responder answers on.
func (r *Responder) Interface() *net.Interface { return r.ifi }

// Close closes the connection (and the groups, leaving them), which makes a
// running Run return an error wrapping net.ErrClosed. Cancel Run's context
// first for a clean stop.
func (r *Responder) Close() error {
	err := r.conn.Close()
	if c, ok := r.groups.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	return err
}

// Stats returns the responder's counters.
func (r *Responder) Stats() Stats {
	return Stats{
		Requests:   r.requests.Load(),
		Answers:    r.answers.Load(),
		Gratuitous: r.gratuitous.Load(),
		Malformed:  r.malformed.Load(),
		Conflicts:  r.conflicts.Load(),
		SendErrors: r.sendErrors.Load(),
	}
}

// normalize returns ip in the form the responder keys it by (no zone; IPv4
// unmapped), or an error wrapping ErrFamily.
func (r *Responder) normalize(ip netip.Addr) (netip.Addr, error) {
	ip = ip.WithZone("")
	if r.fam == familyARP {
		ip = ip.Unmap()
	}
	ok := ip.IsValid() && !ip.IsUnspecified() && !ip.IsMulticast() && !ip.IsLoopback()
	if r.fam == familyARP {
		ok = ok && ip.Is4() && ip != netip.AddrFrom4([4]byte{255, 255, 255, 255})
	} else {
		ok = ok && ip.Is6() && !ip.Is4In6()
	}
	if !ok {
		return ip, fmt.Errorf("%v on %s responder: %w", ip, r.fam, ErrFamily)
	}
	return ip, nil
}

// Announce makes the responder answer for ip. For NDP it first joins ip's
// solicited-node group. Announcing an announced address does nothing. It
// returns an error wrapping ErrFamily for an address of the wrong family,
// or the error of joining the group; ip is then not announced.
func (r *Responder) Announce(ip netip.Addr) error {
	ip, err := r.normalize(ip)
	if err != nil {
		return fmt.Errorf("announcing %v on %s: %w", ip, r.ifi.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.announced[ip]; ok {
		return nil
	}
	if r.fam == familyNDP {
		if err := r.joinLocked(solicitedNode(ip)); err != nil {
			return fmt.Errorf("announcing %v on %s: joining %v: %w", ip, r.ifi.Name, solicitedNode(ip), err)
		}
	}
	r.announced[ip] = struct{}{}
	return nil
}

// Withdraw stops answering for ip at once. Nothing is sent: the next
// announcer's gratuitous packets re-point clients. For NDP the
// solicited-node group is left when no announced address needs it; the
// error of leaving is returned, but ip is withdrawn regardless. Withdrawing
// an address that is not announced does nothing.
func (r *Responder) Withdraw(ip netip.Addr) error {
	ip, err := r.normalize(ip)
	if err != nil {
		return fmt.Errorf("withdrawing %v on %s: %w", ip, r.ifi.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.announced[ip]; !ok {
		return nil
	}
	delete(r.announced, ip)
	if r.fam == familyNDP {
		if err := r.leaveLocked(solicitedNode(ip)); err != nil {
			return fmt.Errorf("withdrawing %v on %s: leaving %v: %w", ip, r.ifi.Name, solicitedNode(ip), err)
		}
	}
	return nil
}

func (r *Responder) joinLocked(group netip.Addr) error {
	if r.groupRefs[group] == 0 {
		if err := r.groups.JoinGroup(group); err != nil {
			return err
		}
	}
	r.groupRefs[group]++
	return nil
}

func (r *Responder) leaveLocked(group netip.Addr) error {
	r.groupRefs[group]--
	if r.groupRefs[group] > 0 {
		return nil
	}
	delete(r.groupRefs, group)
	return r.groups.LeaveGroup(group)
}

// Announced returns the announced addresses in ascending order.
func (r *Responder) Announced() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	ips := make([]netip.Addr, 0, len(r.announced))
	for ip := range r.announced {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}

// SetAnswerFunc sets the function choosing the answer per client; nil
// restores the default, which answers every client with the interface's MAC.
// Addresses that are not announced are never answered, whatever f says.
func (r *Responder) SetAnswerFunc(f AnswerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = f
}

// lookup reports whether ip is announced and the current answer function.
func (r *Responder) lookup(ip netip.Addr) (bool, AnswerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.announced[ip]
	return ok, r.answer
}

// answerMAC returns the MAC to answer client with for announced ip.
func (r *Responder) answerMAC(f AnswerFunc, ip, clientIP netip.Addr, clientMAC net.HardwareAddr) (net.HardwareAddr, bool) {
	if f == nil {
		return r.mac, true
	}
	mac, ok := f(ip, clientIP, clientMAC)
	if !ok {
		return nil, false
	}
	if !isUnicastMAC(mac) {
		r.log.Warn("answer function returned an unusable MAC", "ip", ip, "client", clientIP, "mac", mac)
		return nil, false
	}
	return mac, true
}

// Gratuitous announces ip at the interface's MAC to every host on the link:
// for IPv4 an ARP request and an ARP reply with sender = target = ip, for
// IPv6 an unsolicited neighbour advertisement to ff02::1 with Override set.
// It returns an error wrapping ErrNotAnnounced if ip is not announced, or
// the send error.
func (r *Responder) Gratuitous(ip netip.Addr) error {
	ip, err := r.normalize(ip)
	if err != nil {
		return fmt.Errorf("gratuitous for %v on %s: %w", ip, r.ifi.Name, err)
	}
	if ok, _ := r.lookup(ip); !ok {
		return fmt.Errorf("gratuitous for %v on %s: %w", ip, r.ifi.Name, ErrNotAnnounced)
	}
	if err := r.sendGratuitous(ip, r.mac, CountGratuitous); err != nil {
		return fmt.Errorf("gratuitous for %v on %s: %w", ip, r.ifi.Name, err)
	}
	return nil
}

// Notify tells every host on the link that the host's own address ip (the
// interface's, not a Service's: nothing checks that it is announced, and
// nothing counts it) is at the interface's MAC, as the kernel's arp_notify
// does when an interface comes up: a gratuitous ARP request and reply for
// IPv4, an unsolicited neighbour advertisement to ff02::1 with Override set
// for IPv6. The neighbours update the entry they hold for ip whatever its
// state (RFC 826's merge; RFC 4861 §7.2.6): one left unresolved while the
// link was down resolves at once, instead of at its next retransmission, up
// to a second later (the kernel's retrans_time).
func (r *Responder) Notify(ip netip.Addr) error {
	ip, err := r.normalize(ip)
	if err != nil {
		return fmt.Errorf("notifying %v on %s: %w", ip, r.ifi.Name, err)
	}
	if err := r.sendGratuitous(ip, r.mac, 0); err != nil {
		return fmt.Errorf("notifying %v on %s: %w", ip, r.ifi.Name, err)
	}
	return nil
}

// Ask asks the link for target's MAC on behalf of the host's own address
// self, as the kernel would: an ARP request (who has target? tell self) or a
// neighbour solicitation, from the interface's MAC. Nothing counts it. The
// host that owns target updates its entry for self from the question and
// answers to the host's kernel, which takes the answer into an entry for
// target left unresolved while the link was down: both resolve at once,
// instead of at the kernel's next retransmission, up to a second later.
func (r *Responder) Ask(self, target netip.Addr) error {
	self, err := r.normalize(self)
	if err == nil {
		target, err = r.normalize(target)
	}
	if err != nil {
		return fmt.Errorf("asking for %v on %s: %w", target, r.ifi.Name, err)
	}
	var f frame
	if r.fam == familyARP {
		f = ARP{EthDst: broadcastMAC, EthSrc: r.mac, Op: arp.OperationRequest, SenderMAC: r.mac, SenderIP: self, TargetMAC: zeroMAC, TargetIP: target}
	} else {
		f = neighborSolicitation(target, self, r.mac)
	}
	if err := r.send(f, target, 0); err != nil {
		return fmt.Errorf("asking for %v on %s: %w", target, r.ifi.Name, err)
	}
	return nil
}

// GratuitousTo tells one client that ip is at mac, in a frame unicast to
// clientMAC: it re-points a client after a failover in spread mode. For IPv4
// it is a gratuitous ARP reply (sender = target = ip, target MAC = mac); for
// IPv6 an unsolicited neighbour advertisement to clientIP with Override set.
// clientIP is used for IPv6 only. It returns an error wrapping
// ErrNotAnnounced if ip is not announced, an error if a MAC is not a 6-byte
// unicast address or clientIP is not IPv6 on an NDP responder, or the send
// error.
func (r *Responder) GratuitousTo(ip, clientIP netip.Addr, clientMAC, mac net.HardwareAddr) error {
	ip, err := r.normalize(ip)
	if err != nil {
		return fmt.Errorf("gratuitous for %v to %v on %s: %w", ip, clientIP, r.ifi.Name, err)
	}
	if ok, _ := r.lookup(ip); !ok {
		return fmt.Errorf("gratuitous for %v to %v on %s: %w", ip, clientIP, r.ifi.Name, ErrNotAnnounced)
	}
	if !isUnicastMAC(clientMAC) || !isUnicastMAC(mac) {
		return fmt.Errorf("gratuitous for %v to %v on %s: client MAC %q and MAC %q must be 6-byte unicast", ip, clientIP, r.ifi.Name, clientMAC, mac)
	}
	switch r.fam {
	case familyARP:
		_, reply := gratuitousARP(ip, clientMAC, r.mac, mac)
		err = r.send(reply, ip, CountGratuitous)
	case familyNDP:
		if !clientIP.Is6() || clientIP.Is4In6() || clientIP.IsUnspecified() || clientIP.IsMulticast() {
			return fmt.Errorf("gratuitous for %v to %v on %s: client address must be IPv6 unicast", ip, clientIP, r.ifi.Name)
		}
		err = r.send(neighborAdvertisement(ip, clientMAC, r.mac, clientIP, mac, false), ip, CountGratuitous)
	}
	if err != nil {
		return fmt.Errorf("gratuitous for %v to %v on %s: %w", ip, clientIP, r.ifi.Name, err)
	}
	return nil
}

// sendGratuitous broadcasts that ip is at mac, counting each frame as c (0: not counted).
func (r *Responder) sendGratuitous(ip netip.Addr, mac net.HardwareAddr, c Count) error {
	if r.fam == familyARP {
		req, rep := gratuitousARP(ip, broadcastMAC, r.mac, mac)
		return errors.Join(r.send(req, ip, c), r.send(rep, ip, c))
	}
	return r.send(neighborAdvertisement(ip, ipv6MulticastMAC(allNodes), r.mac, allNodes, mac, false), ip, c)
}

// frame is an ARP or NDP.
type frame interface{ Marshal() ([]byte, error) }

// send writes f, sent for the announced address ip, and counts it as c on success.
func (r *Responder) send(f frame, ip netip.Addr, c Count) error {
	b, err := f.Marshal()
	if err != nil {
		return err
	}
	var dst net.HardwareAddr
	switch f := f.(type) {
	case ARP:
		dst = f.EthDst
	case NDP:
		dst = f.EthDst
	}
	if _, err := r.conn.WriteTo(b, &packet.Addr{HardwareAddr: dst}); err != nil {
		return err
	}
	r.count(c, ip)
	return nil
}

// count adds one to c's counter and tells OnCount.
func (r *Responder) count(c Count, ip netip.Addr) {
	if c == 0 {
		return
	}
	switch c {
	case CountRequest:
		r.requests.Add(1)
	case CountAnswer:
		r.answers.Add(1)
	case CountGratuitous:
		r.gratuitous.Add(1)
	}
	if r.cfg.OnCount != nil {
		r.cfg.OnCount(c, ip)
	}
}

// Run reads frames and answers requests until ctx ends, then returns nil;
// with Config.Refresh set it also re-announces periodically. A frame that
// does not parse is counted in Stats.Malformed and dropped; an answer that
// cannot be sent is logged and counted. Run survives the interface going
// down and up. It returns an error if reading fails otherwise (the
// interface was removed, or Close was called), and ErrRunning if Run was
// called before.
func (r *Responder) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("running %s responder on %s: %w", r.fam, r.ifi.Name, ErrRunning)
	}
	// A read deadline in the past makes a blocked ReadFrom return at once.
	stop := context.AfterFunc(ctx, func() { _ = r.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	var wg sync.WaitGroup
	defer wg.Wait()
	if r.cfg.Refresh > 0 {
		wg.Go(func() { r.refreshLoop(ctx) })
	}

	buf := make([]byte, readBufferSize)
	for {
		n, _, err := r.conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, syscall.ENETDOWN) {
				r.log.Info("interface went down; still listening", "err", err)
				if r.cfg.OnNetDown != nil {
					r.cfg.OnNetDown(fmt.Errorf("reading %s on %s: %w", r.fam, r.ifi.Name, err))
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(netDownBackoff):
				}
				continue
			}
			return fmt.Errorf("running %s responder on %s: %w", r.fam, r.ifi.Name, err)
		}
		r.handle(buf[:n])
	}
}

func (r *Responder) refreshLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.refresh()
		}
	}
}

// refresh re-announces every announced address once.
func (r *Responder) refresh() {
	for _, ip := range r.Announced() {
		ok, f := r.lookup(ip)
		if !ok {
			continue // withdrawn meanwhile
		}
		mac, ok := r.answerMAC(f, ip, netip.Addr{}, nil)
		if !ok {
			continue
		}
		if err := r.sendGratuitous(ip, mac, CountGratuitous); err != nil {
			r.sendErrors.Add(1)
			r.log.Warn("refresh failed", "ip", ip, "err", err)
		}
	}
}

// handle processes one received frame.
func (r *Responder) handle(b []byte) {
	var err error
	if r.fam == familyARP {
		err = r.handleARP(b)
	} else {
		err = r.handleNDP(b)
	}
	if err != nil && !errors.Is(err, ErrUnsupported) {
		r.malformed.Add(1)
		r.log.Debug("dropped malformed frame", "err", err)
	}
}

// handleARP answers a request for an announced address and detects
// conflicts. It returns the parse error of a bad frame.
func (r *Responder) handleARP(b []byte) error {
	p, err := ParseARP(b)
	if err != nil {
		return err
	}
	if macEqual(p.EthSrc, r.mac) {
		return nil // our own frame
	}
	// RFC 5227 §2.4: any ARP packet whose sender IP is ours but whose sender
	// MAC is not. A gratuitous ARP from another announcer is one.
	if ok, _ := r.lookup(p.SenderIP); ok && !macEqual(p.SenderMAC, r.mac) {
		r.conflict(p.SenderIP, p.SenderMAC)
		return nil
	}
	if p.Op != arp.OperationRequest || p.SenderIP == p.TargetIP {
		return nil // replies and others' announcements need no answer
	}
	ok, f := r.lookup(p.TargetIP)
	if !ok {
		return nil
	}
	r.count(CountRequest, p.TargetIP)
	if !macEqual(p.EthDst, broadcastMAC) && !macEqual(p.EthDst, r.mac) {
		return nil // someone else's unicast probe, flooded to us
	}
	if !isUnicastMAC(p.SenderMAC) {
		return nil // nowhere to answer
	}
	mac, ok := r.answerMAC(f, p.TargetIP, p.SenderIP, p.SenderMAC)
	if !ok {
		return nil
	}
	r.reply(arpReply(p, r.mac, mac), p.TargetIP, p.SenderIP, mac)
	return nil
}

// handleNDP answers a solicitation for an announced address and detects
// conflicting advertisements. It returns the parse error of a bad frame.
func (r *Responder) handleNDP(b []byte) error {
	p, err := ParseNDP(b)
	if err != nil {
		return err
	}
	if macEqual(p.EthSrc, r.mac) {
		return nil // our own frame
	}
	switch m := p.Message.(type) {
	case *ndp.NeighborAdvertisement:
		if ok, _ := r.lookup(m.TargetAddress); !ok {
			return nil
		}
		lla := linkLayerOption(m.Options, ndp.Target)
		if lla == nil {
			lla = p.EthSrc
		}
		if !macEqual(lla, r.mac) {
			r.conflict(m.TargetAddress, lla)
		}
	case *ndp.NeighborSolicitation:
		target := m.TargetAddress
		ok, f := r.lookup(target)
		if !ok {
			return nil
		}
		r.count(CountRequest, target)
		switch {
		case p.Dst == solicitedNode(target) && macEqual(p.EthDst, ipv6MulticastMAC(p.Dst)):
		case p.Dst == target && macEqual(p.EthDst, r.mac): // unicast, e.g. unreachability detection
		default:
			return nil // not addressed to the target's holder
		}
		if p.Src.IsUnspecified() {
			// Duplicate address detection for our address: defend it to all
			// nodes, Solicited=0 (RFC 4861 §7.2.4).
			mac, ok := r.answerMAC(f, target, p.Src, p.EthSrc)
			if !ok {
				return nil
			}
			r.reply(neighborAdvertisement(target, ipv6MulticastMAC(allNodes), r.mac, allNodes, mac, false), target, p.Src, mac)
			return nil
		}
		client := linkLayerOption(m.Options, ndp.Source)
		if client == nil {
			client = p.EthSrc // a unicast solicitation may omit the option
		}
		if !isUnicastMAC(client) {
			return nil
		}
		mac, ok := r.answerMAC(f, target, p.Src, client)
		if !ok {
			return nil
		}
		r.reply(neighborAdvertisement(target, client, r.mac, p.Src, mac, true), target, p.Src, mac)
	}
	return nil
}

// reply sends an answer and accounts for it.
func (r *Responder) reply(f frame, ip, client netip.Addr, mac net.HardwareAddr) {
	if err := r.send(f, ip, CountAnswer); err != nil {
		r.sendErrors.Add(1)
		r.log.Warn("sending answer failed", "ip", ip, "client", client, "mac", mac, "err", err)
		return
	}
	r.log.Debug("answered", "ip", ip, "client", client, "mac", mac)
}

func (r *Responder) conflict(ip netip.Addr, mac net.HardwareAddr) {
	r.conflicts.Add(1)
	r.log.Warn("another MAC claims an announced address", "ip", ip, "mac", mac)
	if r.cfg.OnConflict != nil {
		r.cfg.OnConflict(ip, cloneMAC(mac))
	}
}
