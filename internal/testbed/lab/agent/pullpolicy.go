package agent

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// The pure decisions of image pulls (pull.go does the pulling): where an image reference is pulled
// from, whether a pull policy pulls, and the kubelet's back-off between failed pulls of one image in
// one Pod with its messages.

// ErrImageNeverPull is the kubelet's reason for an image that is not on the node under pull policy
// Never.
var ErrImageNeverPull = errors.New("ErrImageNeverPull")

// PullSource is where the agent pulls image from: the lab registry's copy under lab.MirrorName (as
// containerd pulls through a registry mirror), or image itself when it already names the lab
// registry reg. canonical is the image's full name as a container runtime reports it
// ("docker.io/library/nginx:latest"), the key of the node's image records.
func PullSource(reg, image string) (src name.Reference, canonical string, err error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, "", fmt.Errorf("invalid image reference %q: %w", image, err)
	}
	canonical = dockerIO(ref.Name())
	if ref.Context().RegistryStr() == reg {
		src, err = name.ParseReference(image, name.Insecure)
		return src, canonical, err
	}
	m, err := lab.MirrorName(reg, image)
	if err != nil {
		return nil, "", err
	}
	src, err = name.ParseReference(m, name.Insecure)
	return src, canonical, err
}

// dockerIO spells Docker Hub as container runtimes report it (docker.io/library/nginx:latest), not as
// go-containerregistry does (index.docker.io).
func dockerIO(n string) string {
	if rest, ok := strings.CutPrefix(n, name.DefaultRegistry+"/"); ok {
		return "docker.io/" + rest
	}
	return n
}

// NeedPull says whether policy pulls an image that is (present) or is not on the node. Never with no
// image on the node is ErrImageNeverPull, with the kubelet's message. An empty policy is the API's
// default for a tag (IfNotPresent); the apiserver defaults it before the agent sees a Pod.
func NeedPull(policy corev1.PullPolicy, image string, present bool) (bool, error) {
	switch policy {
	case corev1.PullAlways:
		return true, nil
	case corev1.PullNever:
		if !present {
			return false, fmt.Errorf("%w: Container image %q is not present with pull policy of Never", ErrImageNeverPull, image)
		}
		return false, nil
	default:
		return !present, nil
	}
}

// Kubelet's back-off between pulls of one image for one Pod: 10 s, doubling to 300 s.
const (
	pullBackoffInitial = 10 * time.Second
	pullBackoffMax     = 300 * time.Second
)

// pullBackoff is the back-off state of one image in one Pod (kubelet's key: podUID_image).
type pullBackoff struct {
	last  time.Time     // the last failed pull
	delay time.Duration // how long after last no pull is tried
	msg   string        // "ErrImagePull: <the pull's error>", shown while backing off
}

// failed records a failed pull at now and returns the next state: the delay doubles (up to the
// maximum) after a failure within twice the maximum of the last one, and starts over otherwise.
func (b pullBackoff) failed(now time.Time, err error) pullBackoff {
	d := pullBackoffInitial
	if !b.last.IsZero() && now.Sub(b.last) < 2*pullBackoffMax {
		d = min(b.delay*2, pullBackoffMax)
	}
	return pullBackoff{last: now, delay: d, msg: "ErrImagePull: " + err.Error()}
}

// waiting reports whether a pull is still backing off at now and, if so, the kubelet's message for
// the container's ImagePullBackOff state.
func (b pullBackoff) waiting(now time.Time, image string) (bool, string) {
	if b.last.IsZero() || now.Sub(b.last) >= b.delay {
		return false, ""
	}
	return true, fmt.Sprintf("Back-off pulling image %q: %s", image, b.msg)
}
