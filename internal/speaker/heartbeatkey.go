package speaker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ironlb/ironlb/internal/liveness"
)

// The heartbeat key. Heartbeats between speakers are signed with a cluster key (internal/liveness,
// auth.go) that the controller keeps in the Secret DefaultHeartbeatKeySecret of the configuration
// namespace, data keys "primary" and optionally "secondary". The speaker watches that one Secret (its
// RBAC names it; the watch selects it by metadata.name) and hands the keys to the Monitor live:
// senders sign with the primary, receivers accept either, so an operator rotates the key by moving
// primary to secondary and writing a new primary, and drops the secondary once every speaker signs
// with the new one. Until the speaker has a valid key it neither sends nor accepts heartbeats and does
// not become ready (it announces nothing). A Secret that is deleted or becomes invalid later leaves the
// last valid keys in place (a log line says so): the controller writes a new one, which is then taken.

// DefaultHeartbeatKeySecret is the Secret holding the heartbeat keys, in the configuration namespace.
const DefaultHeartbeatKeySecret = liveness.KeySecret

// The Secret's data keys.
const (
	heartbeatKeyPrimary   = liveness.KeyPrimary
	heartbeatKeySecondary = liveness.KeySecondary
)

// errNoPrimary marks a heartbeat key Secret without a usable primary key.
var errNoPrimary = errors.New("no primary key")

// keysOf returns the keys of a heartbeat key Secret: the primary must be at least
// liveness.KeyMinLen bytes; a secondary that is too short is left out (warn says why).
func keysOf(s *corev1.Secret) (primary, secondary []byte, warn string, err error) {
	primary = s.Data[heartbeatKeyPrimary]
	if !liveness.ValidKey(primary) {
		return nil, nil, "", fmt.Errorf("%w: data[%q] has %d bytes, want at least %d", errNoPrimary, heartbeatKeyPrimary, len(primary), liveness.KeyMinLen)
	}
	secondary = s.Data[heartbeatKeySecondary]
	if len(secondary) > 0 && !liveness.ValidKey(secondary) {
		warn = fmt.Sprintf("data[%q] has %d bytes, want at least %d: ignored", heartbeatKeySecondary, len(secondary), liveness.KeyMinLen)
		secondary = nil
	}
	return primary, secondary, warn, nil
}

// fingerprint names a key in logs without revealing it.
func fingerprint(k []byte) string {
	if len(k) == 0 {
		return ""
	}
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:4])
}

// keySink takes the keys (*liveness.Monitor).
type keySink interface {
	SetKeys(primary, secondary []byte) bool
}

// heartbeatKeys watches the heartbeat key Secret and feeds the keys to a keySink.
type heartbeatKeys struct {
	ns, name string
	sink     keySink
	log      *slog.Logger

	// synced says whether the informer has listed the Secret: set once by informer, before anything
	// reads it (nil without an informer).
	synced func() bool

	mu      sync.Mutex // guards the following fields
	has     bool       // a valid key was set
	primary string     // fingerprints of the keys set, for the logs
	second  string
	invalid error         // why the Secret last seen holds no usable key, while has is false
	ready   chan struct{} // closed when a valid key is first set
}

func newHeartbeatKeys(ns, name string, sink keySink, log *slog.Logger) *heartbeatKeys {
	return &heartbeatKeys{ns: ns, name: name, sink: sink, log: log, ready: make(chan struct{})}
}

// informer returns the factory of an informer of the one Secret, its handler set (a field selector on
// its name: the speaker's RBAC grants this Secret only). Start the factory to run it.
func (k *heartbeatKeys) informer(cs kubernetes.Interface) informers.SharedInformerFactory {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(k.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + k.name }))
	inf := f.Core().V1().Secrets().Informer()
	k.synced = inf.HasSynced
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.set(o) },
		UpdateFunc: func(_, o any) { k.set(o) },
		DeleteFunc: func(any) {
			k.mu.Lock()
			k.invalid = nil // gone, no longer invalid: missing says so
			k.mu.Unlock()
			k.log.Warn("heartbeat key Secret deleted: keeping the last keys until a new one is written", "secret", k.ns+"/"+k.name)
		},
	})
	return f
}

// set takes the keys of the Secret o, if valid.
func (k *heartbeatKeys) set(o any) {
	s, ok := o.(*corev1.Secret)
	if !ok || s.Name != k.name {
		return
	}
	primary, secondary, warn, err := keysOf(s)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.invalid = err
		if k.has {
			k.log.Error("heartbeat key Secret invalid: keeping the last keys", "secret", k.ns+"/"+k.name, "err", err)
		} else {
			k.log.Error("heartbeat key Secret invalid: no heartbeats are sent or accepted, and this speaker stays unready", "secret", k.ns+"/"+k.name, "err", err)
		}
		return
	}
	if warn != "" {
		k.log.Warn("heartbeat key Secret: secondary key ignored", "secret", k.ns+"/"+k.name, "detail", warn)
	}
	fp, fs := fingerprint(primary), fingerprint(secondary)
	if k.has && fp == k.primary && fs == k.second {
		return
	}
	k.sink.SetKeys(primary, secondary)
	if k.has {
		k.log.Info("heartbeat keys changed", "primary", fp, "secondary", fs)
	} else {
		k.log.Info("heartbeat keys loaded", "primary", fp, "secondary", fs)
		close(k.ready)
	}
	k.has, k.primary, k.second = true, fp, fs
}

// missing says why this speaker has no heartbeat key, naming the Secret, for /readyz, the log and
// the event; "" once a valid key was set (a Secret deleted or broken later keeps the last keys).
// Before the informer has listed the Secret it cannot tell a missing Secret from one it may not read.
func (k *heartbeatKeys) missing() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	secret := k.ns + "/" + k.name
	switch {
	case k.has:
		return ""
	case k.invalid != nil:
		return fmt.Sprintf("no heartbeat key: Secret %s is invalid (%v)", secret, k.invalid)
	case k.synced != nil && k.synced():
		return fmt.Sprintf("no heartbeat key: Secret %s is missing (the controller creates it)", secret)
	default:
		return fmt.Sprintf("no heartbeat key: Secret %s not read yet (missing, or the speaker may not read it: check its RBAC)", secret)
	}
}

// wait blocks until a valid key is set or ctx ends, saying every logEvery why this speaker is not
// ready (a log line, and report with missing's text, for an event); it reports whether a key is set.
func (k *heartbeatKeys) wait(ctx context.Context, logEvery time.Duration, report func(why string)) bool {
	t := time.NewTicker(logEvery)
	defer t.Stop()
	for {
		select {
		case <-k.ready:
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
			why := k.missing()
			if why == "" {
				continue // set meanwhile: ready is closed
			}
			k.log.Warn(why+": this speaker sends and accepts no heartbeats and stays unready (announces nothing)", "secret", k.ns+"/"+k.name)
			if report != nil {
				report(why)
			}
		}
	}
}
