package election

import "slices"

// Matches reports whether labels satisfy s: every MatchLabels pair is present with the same value and
// every requirement holds. See Selector for the rules on malformed requirements.
func (s Selector) Matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

// Matches reports whether labels satisfy r, with Kubernetes' semantics: In needs the key present with
// one of Values; NotIn holds when the key is absent or its value is not in Values; Exists and
// DoesNotExist look at the key only. In without values and unknown operators match nothing.
func (r Requirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case In:
		return ok && slices.Contains(r.Values, v)
	case NotIn:
		return !ok || !slices.Contains(r.Values, v)
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	}
	return false
}

// Selects reports whether a selects a node with these labels: a has no node selectors, or one of them
// matches.
func (a Advertisement) Selects(labels map[string]string) bool {
	if len(a.NodeSelectors) == 0 {
		return true
	}
	for _, s := range a.NodeSelectors {
		if s.Matches(labels) {
			return true
		}
	}
	return false
}
