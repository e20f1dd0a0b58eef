package config

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// ValidatePeer checks one BGPPeer on its own, as the admission webhook does: it refuses what every
// speaker would refuse whatever other objects exist, with the speakers' own check (bgpconfig), so a
// peer admitted is a peer the speakers can use. Like MetalLB's webhook it leaves out what depends on
// objects that may be created later — the BFDProfile named by bfdProfile and the Secret named by
// passwordSecret — which the speakers report as InvalidConfiguration while they are missing; and,
// also as MetalLB, it refuses a nodeSelector listed twice. Unlike MetalLB it refuses
// dualStackAddressFamily: true, which ironlb does not implement (UnsupportedPeerFields).
func ValidatePeer(p *v1beta2.BGPPeer) error {
	if err := UnsupportedPeerFields(p); err != nil {
		return err
	}
	for i := range p.Spec.NodeSelectors {
		for j := range i {
			if reflect.DeepEqual(p.Spec.NodeSelectors[i], p.Spec.NodeSelectors[j]) {
				return fmt.Errorf("spec.nodeSelectors[%d]: duplicate of [%d] (%s)", i, j, metav1.FormatLabelSelector(&p.Spec.NodeSelectors[i]))
			}
		}
	}
	in := bgpconfig.Input{Peers: []v1beta2.BGPPeer{*p}}
	if name := p.Spec.BFDProfile; name != "" {
		// A valid stand-in (default timers): the profile's existence is not ours to check, but a
		// bfdProfile on a multi-hop session is refused whatever the profile says.
		in.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	}
	if ref := p.Spec.PasswordSecret; ref.Name != "" {
		in.Passwords = map[string]string{ref.Name: ""} // a stand-in: the Secret's content is not ours to check
	}
	_, errs := bgpconfig.Build(in)
	if len(errs) == 0 {
		return nil
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// BGPPasswords reads the BGP passwords of the configuration namespace's Secrets as MetalLB does: the
// "password" key of a kubernetes.io/basic-auth Secret. It returns them by Secret name
// (bgpconfig.Input.Passwords), and, for every other Secret, why it holds none
// (bgpconfig.Input.UnusableSecrets), so that a BGPPeer naming one is told the Secret has the wrong
// type or lacks the key, not that it is missing. Secrets that are not *corev1.Secret are skipped.
func BGPPasswords(secrets []any) (passwords, unusable map[string]string) {
	for _, o := range secrets {
		sec, ok := o.(*corev1.Secret)
		if !ok {
			continue
		}
		why := ""
		switch p, has := sec.Data[corev1.BasicAuthPasswordKey]; {
		case sec.Type != corev1.SecretTypeBasicAuth:
			why = fmt.Sprintf("Secret %q has type %s, want %s", sec.Name, cmp.Or(sec.Type, corev1.SecretTypeOpaque), corev1.SecretTypeBasicAuth)
		case !has:
			why = fmt.Sprintf("Secret %q has no %q key", sec.Name, corev1.BasicAuthPasswordKey)
		default:
			if passwords == nil {
				passwords = map[string]string{}
			}
			passwords[sec.Name] = string(p)
			continue
		}
		if unusable == nil {
			unusable = map[string]string{}
		}
		unusable[sec.Name] = why
	}
	return passwords, unusable
}
