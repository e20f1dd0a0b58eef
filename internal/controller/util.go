package controller

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

func everything() labels.Selector { return labels.Everything() }

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// specChanged ignores status-only updates of a pool (our own counter writes).
func specChanged(o, n any) bool {
	ou, ok1 := o.(*unstructured.Unstructured)
	nu, ok2 := n.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return true
	}
	return ou.GetGeneration() != nu.GetGeneration() || !equalLabels(ou.GetLabels(), nu.GetLabels())
}
