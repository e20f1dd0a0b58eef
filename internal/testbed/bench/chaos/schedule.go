package chaos

import (
	"math/rand/v2"
	"time"
)

// Rounds draws the faults to inject: round after round, each round every kind once in a shuffled
// order, so that a run of n faults injects every kind as soon as n reaches the number of kinds (an
// independent draw per fault would often miss one in a short run). Pure: the caller gives the random
// source.
type Rounds struct {
	kinds []string
	rng   *rand.Rand
	queue []string
}

// NewRounds returns the schedule of kinds drawn from rng.
func NewRounds(kinds []string, rng *rand.Rand) *Rounds { return &Rounds{kinds: kinds, rng: rng} }

// Next returns the next kind ("" when there are no kinds).
func (r *Rounds) Next() string { return r.NextFitting(func(string) bool { return true }) }

// NextFitting returns the next kind of the current round for which fits holds, taking it out of the
// round; "" if none of the round's remaining kinds fits (they stay for later calls). A run near its
// end thus injects the kinds of the round that still fit rather than stopping at one that does not.
func (r *Rounds) NextFitting(fits func(kind string) bool) string {
	if len(r.queue) == 0 {
		if len(r.kinds) == 0 {
			return ""
		}
		r.queue = append(r.queue, r.kinds...)
		r.rng.Shuffle(len(r.queue), func(i, j int) { r.queue[i], r.queue[j] = r.queue[j], r.queue[i] })
	}
	for i, k := range r.queue {
		if fits(k) {
			r.queue = append(r.queue[:i:i], r.queue[i+1:]...)
			return k
		}
	}
	return ""
}

// Retry puts kind back into the current round, after its other kinds: a fault that could not be
// injected (its target not ready yet) is tried again before the round ends.
func (r *Rounds) Retry(kind string) { r.queue = append(r.queue, kind) }

// faultTime is about how long each kind takes to inject and undo, plus the settling the run waits
// after it: a fault is started only if it ends before the run does.
var faultTime = map[string]time.Duration{
	FaultKillController:    2 * time.Second,
	FaultKillSpeaker:       2 * time.Second,
	FaultStopNode:          14 * time.Second,
	FaultPartition:         10 * time.Second,
	FaultLoss:              10 * time.Second,
	FaultAPIServer:         10 * time.Second,
	FaultForgedHeartbeat:   8 * time.Second,
	FaultReplayedHeartbeat: 15 * time.Second,
	FaultForgedARP:         6 * time.Second,
	FaultPauseController:   22 * time.Second,
	FaultResponderIface:    9 * time.Second,
	FaultNFTFail:           10 * time.Second,
	FaultWebhookSecret:     15 * time.Second,
}

// FaultTime is how long a fault of kind takes, undone and settled (20 s for a kind it does not know).
func FaultTime(kind string) time.Duration {
	if d, ok := faultTime[kind]; ok {
		return d
	}
	return 20 * time.Second
}

// MinDuration is the shortest run that injects every kind of kinds once with faults every every (the
// mean wait between one fault's end and the next one's start).
func MinDuration(kinds []string, every time.Duration) time.Duration {
	var d time.Duration
	for _, k := range kinds {
		d += FaultTime(k) + every
	}
	return d + every/2 // the first wait, and a margin for the last fault
}
