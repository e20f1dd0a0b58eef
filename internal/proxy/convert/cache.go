package convert

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// Converter converts all Services for one node, reusing the previous result of every Service
// whose object and EndpointSlices have not changed (same UIDs and resourceVersions). Reuse keeps
// the *nftrules.Service pointer, which nftrules.Incremental skips without looking inside, so a
// sync costs little more than the Services that changed.
//
// Not safe for concurrent use: the proxy's sync loop owns one.
type Converter struct {
	node  string
	gen   uint64
	cache map[nftrules.ServiceKey]*cached
}

type cached struct {
	gen uint64 // the last Services call that saw the Service
	ver objVersion
	svc *nftrules.Service
}

// objVersion identifies a Service's inputs. Objects without a resourceVersion (made by hand)
// never match, so they are converted every time.
type objVersion struct {
	uid, rv string
	slices  []sliceVersion
}

type sliceVersion struct{ name, uid, rv string }

// NewConverter returns a Converter for the node named node.
func NewConverter(node string) *Converter {
	return &Converter{node: node, cache: map[nftrules.ServiceKey]*cached{}}
}

// Issue is a Warning about one Service, or its SkipReason when it is skipped.
type Issue struct {
	Service  *corev1.Service
	Skip     SkipReason
	Warnings []Warning
}

// Services converts svcs; slicesOf returns the EndpointSlices of a Service. It returns the
// proxied Services by key, and issues (warnings and skips) for the Services converted anew this
// time: a Service's issues are reported once per change of the Service or its EndpointSlices,
// not on every sync.
func (c *Converter) Services(svcs []*corev1.Service, slicesOf func(namespace, name string) []*discoveryv1.EndpointSlice) (map[nftrules.ServiceKey]*nftrules.Service, []Issue) {
	c.gen++
	out := make(map[nftrules.ServiceKey]*nftrules.Service, len(svcs))
	var issues []Issue
	for _, svc := range svcs {
		key := nftrules.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
		if is, ok := c.convert(key, svc, slicesOf(svc.Namespace, svc.Name), out); ok {
			issues = append(issues, is)
		}
	}
	if len(c.cache) > len(svcs) {
		for k, e := range c.cache {
			if e.gen != c.gen {
				delete(c.cache, k)
			}
		}
	}
	return out, issues
}

// Update is Services for a sync that knows which Services may have changed since the call that
// returned prev: it returns a copy of prev with the Services of keys converted again (service
// returns a Service's object, nil if it is gone; slicesOf its EndpointSlices), reusing the cache
// as Services does. The other Services are not looked at, so a sync costs what changed rather
// than a pass over every Service; prev is not modified. Issues are as Services reports them.
func (c *Converter) Update(prev map[nftrules.ServiceKey]*nftrules.Service, keys []nftrules.ServiceKey,
	service func(namespace, name string) *corev1.Service,
	slicesOf func(namespace, name string) []*discoveryv1.EndpointSlice) (map[nftrules.ServiceKey]*nftrules.Service, []Issue) {
	c.gen++
	out := maps.Clone(prev)
	if out == nil {
		out = map[nftrules.ServiceKey]*nftrules.Service{}
	}
	var issues []Issue
	for _, key := range keys {
		svc := service(key.Namespace, key.Name)
		if svc == nil {
			delete(out, key)
			delete(c.cache, key)
			continue
		}
		if is, ok := c.convert(key, svc, slicesOf(key.Namespace, key.Name), out); ok {
			issues = append(issues, is)
		}
	}
	return out, issues
}

// convert converts one Service into out (reusing the cache entry if its objects are unchanged)
// and returns its issues, if it has any and was converted anew.
func (c *Converter) convert(key nftrules.ServiceKey, svc *corev1.Service, eps []*discoveryv1.EndpointSlice,
	out map[nftrules.ServiceKey]*nftrules.Service) (Issue, bool) {
	e := c.cache[key]
	if e != nil && e.ver.matches(svc, eps) {
		e.gen = c.gen
		if e.svc != nil {
			out[key] = e.svc
		} else {
			delete(out, key)
		}
		return Issue{}, false
	}
	s, skip, warns := Service(svc, eps, c.node)
	if e == nil {
		e = &cached{}
		c.cache[key] = e
	}
	e.gen, e.svc, e.ver = c.gen, s, versionOf(svc, eps)
	if s != nil {
		out[key] = s
	} else {
		delete(out, key)
	}
	if len(warns) > 0 || skip != NotSkipped {
		return Issue{Service: svc, Skip: skip, Warnings: warns}, true
	}
	return Issue{}, false
}

func versionOf(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) objVersion {
	v := objVersion{uid: string(svc.UID), rv: svc.ResourceVersion, slices: make([]sliceVersion, len(eps))}
	for i, es := range eps {
		v.slices[i] = sliceVersion{es.Name, string(es.UID), es.ResourceVersion}
	}
	return v
}

// matches reports whether svc and eps are the objects v was taken from, in any order.
func (v *objVersion) matches(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) bool {
	if v.rv == "" || svc.ResourceVersion != v.rv || string(svc.UID) != v.uid || len(eps) != len(v.slices) {
		return false
	}
	for i, es := range eps {
		if es.ResourceVersion == "" {
			return false
		}
		s := sliceVersion{es.Name, string(es.UID), es.ResourceVersion}
		if v.slices[i] == s {
			continue
		}
		found := false
		for _, o := range v.slices {
			if o == s {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ServiceOf returns the "namespace/name" of the Service an EndpointSlice belongs to (its
// kubernetes.io/service-name label), or "" if it has none.
func ServiceOf(es *discoveryv1.EndpointSlice) string {
	name := es.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return ""
	}
	return es.Namespace + "/" + name
}

// GroupSlices indexes EndpointSlices by Service, for Converter.Services' slicesOf.
func GroupSlices(eps []*discoveryv1.EndpointSlice) func(namespace, name string) []*discoveryv1.EndpointSlice {
	by := map[string][]*discoveryv1.EndpointSlice{}
	for _, es := range eps {
		if k := ServiceOf(es); k != "" {
			by[k] = append(by[k], es)
		}
	}
	return func(namespace, name string) []*discoveryv1.EndpointSlice { return by[namespace+"/"+name] }
}
