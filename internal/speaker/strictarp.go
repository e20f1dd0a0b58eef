package speaker

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kubeProxyConfig is the part of KubeProxyConfiguration that decides whether every node answers ARP
// for the Services' addresses: in IPVS mode kube-proxy puts them on the kube-ipvs0 dummy interface,
// and without strictARP (arp_ignore=1, arp_announce=2) every node's kernel answers for them, undoing
// the one-announcer rule (seed 003; MetalLB's installation notes).
type kubeProxyConfig struct {
	Mode string `json:"mode"`
	IPVS struct {
		StrictARP bool `json:"strictARP"`
	} `json:"ipvs"`
}

// strictARPProblem reads kube-proxy's config.conf and says whether it undermines layer-2 announcement.
func strictARPProblem(conf string) (bool, string, error) {
	var c kubeProxyConfig
	if err := yaml.Unmarshal([]byte(conf), &c); err != nil {
		return false, "", fmt.Errorf("parsing kube-proxy's configuration: %w", err)
	}
	if strings.EqualFold(c.Mode, "ipvs") && !c.IPVS.StrictARP {
		return true, "kube-proxy runs in IPVS mode without ipvs.strictARP: every node's kernel answers ARP for the Services' addresses, so more than one MAC answers; set strictARP: true in kube-system/kube-proxy", nil
	}
	return false, "", nil
}

// watchStrictARP checks kube-proxy's ConfigMap now and every period; a problem is logged, counted in
// a gauge and reported as a Warning event on this node.
func (s *speaker) watchStrictARP(ctx context.Context, period time.Duration) {
	warned := false
	for {
		cm, err := s.cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
			s.m.strictARP.Set(0) // no kube-proxy (or another proxy): nothing to check
		case err != nil:
			s.log.Debug("reading kube-proxy's configuration", "err", err)
		default:
			bad, why, perr := strictARPProblem(cm.Data["config.conf"])
			if perr != nil {
				s.log.Warn("kube-system/kube-proxy", "err", perr)
			}
			if bad {
				s.m.strictARP.Set(1)
				if !warned {
					s.log.Warn("layer-2 announcement undermined", "configmap", "kube-system/kube-proxy", "reason", why)
					s.rec.Eventf(&corev1.ObjectReference{Kind: "Node", Name: s.cfg.Node, UID: "", APIVersion: "v1"},
						corev1.EventTypeWarning, "StrictARPDisabled", "%s", why)
					warned = true
				}
			} else {
				s.m.strictARP.Set(0)
				warned = false
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}
