package election

// Lingers reports whether node, if it was answering for d's addresses, keeps answering for them while
// d.Node takes over: a handover that no failure caused is make-before-break. Speakers elect from their
// own views, which differ for a moment (an EndpointSlice or a heartbeat reaches one speaker before
// another, a restarted speaker has no memory of the last winner), so the node that loses an election
// cannot know that the winner has already taken the addresses: it keeps answering until it sees the
// winner claim them on the wire, or for a bounded time (the caller's).
//
// It is true only while node is still eligible and only ranked behind the winner or kept back by the
// failback policy (Outranked, HoldDown, StickyCurrent): alive, ready, selected, and for
// externalTrafficPolicy Local holding a ready local endpoint of every Local Service. A node that
// became ineligible (its speaker is leaving or down, its local endpoints went away or are only
// terminating, the Service or its advertisement is gone) stops at once, and so does every node when
// nobody is elected.
func (d Decision) Lingers(node string) bool {
	if d.Node == "" || d.Node == node || node == "" {
		return false
	}
	switch d.PerNode[node] {
	case Outranked, HoldDown, StickyCurrent:
		return true
	}
	return false
}
