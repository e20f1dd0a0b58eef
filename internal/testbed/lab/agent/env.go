package agent

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Expand replaces $(VAR) references in s with values from lookup, as Kubernetes does for command, args
// and env values: "$$" escapes a dollar, and a reference to an undefined variable is left as written.
func Expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// Env is an ordered environment where later definitions win, as in a container's env list.
type Env struct {
	order []string
	vals  map[string]string
}

// Set defines or redefines name.
func (e *Env) Set(name, value string) {
	if e.vals == nil {
		e.vals = map[string]string{}
	}
	if _, ok := e.vals[name]; !ok {
		e.order = append(e.order, name)
	}
	e.vals[name] = value
}

// Lookup returns a variable's value.
func (e *Env) Lookup(name string) (string, bool) { v, ok := e.vals[name]; return v, ok }

// List returns NAME=value pairs in definition order.
func (e *Env) List() []string {
	out := make([]string, 0, len(e.order))
	for _, n := range e.order {
		out = append(out, n+"="+e.vals[n])
	}
	return out
}

// ServicePort is the part of a Service that service-link environment variables need.
type ServicePort struct {
	Name     string
	Port     int32
	Protocol string
}

// ServiceLinkEnv returns the Docker-link-style variables kubelet defines for a Service
// (FOO_SERVICE_HOST, FOO_SERVICE_PORT, FOO_PORT_80_TCP_ADDR, ...).
func ServiceLinkEnv(name string, clusterIP netip.Addr, ports []ServicePort) [][2]string {
	if !clusterIP.IsValid() || len(ports) == 0 {
		return nil
	}
	prefix := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	for i := range ports {
		if ports[i].Protocol == "" {
			ports[i].Protocol = "TCP" // the apiserver defaults it; be safe as the kubelet is
		}
	}
	host := clusterIP.String()
	out := [][2]string{{prefix + "_SERVICE_HOST", host}, {prefix + "_SERVICE_PORT", fmt.Sprint(ports[0].Port)}}
	for _, p := range ports {
		if p.Name != "" {
			out = append(out, [2]string{prefix + "_SERVICE_PORT_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), fmt.Sprint(p.Port)})
		}
	}
	url := func(p ServicePort) string {
		return fmt.Sprintf("%s://%s", strings.ToLower(p.Protocol), netip.AddrPortFrom(clusterIP, uint16(p.Port)))
	}
	out = append(out, [2]string{prefix + "_PORT", url(ports[0])})
	for _, p := range ports {
		pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(p.Protocol))
		out = append(out, [2]string{pp, url(p)}, [2]string{pp + "_PROTO", strings.ToLower(p.Protocol)},
			[2]string{pp + "_PORT", fmt.Sprint(p.Port)}, [2]string{pp + "_ADDR", host})
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
