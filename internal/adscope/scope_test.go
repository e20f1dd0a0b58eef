package adscope

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func sel(t *testing.T, s metav1.LabelSelector) labels.Selector {
	t.Helper()
	out, err := metav1.LabelSelectorAsSelector(&s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCovers has one row per rule of MetalLB's: pools by name, by selector, or all when the
// advertisement names and selects none; Services all without serviceSelectors, else those one of
// them matches (OR).
func TestCovers(t *testing.T) {
	web := metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	db := metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	gold := metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	notCanary := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	type labelsOf = map[string]string
	for _, tt := range []struct {
		name        string
		pools       []string
		poolSels    []metav1.LabelSelector
		svcSels     []metav1.LabelSelector
		pool        string
		poolLabels  labelsOf
		svcLabels   labelsOf
		wantPool    bool
		wantService bool
	}{
		{name: "zero scope: every pool, every Service", pool: "p", wantPool: true, wantService: true},
		{name: "pool named", pools: []string{"a", "p"}, pool: "p", wantPool: true, wantService: true},
		{name: "pool not named", pools: []string{"a"}, pool: "p", wantPool: false, wantService: true},
		{name: "pool selected by label", poolSels: []metav1.LabelSelector{gold}, pool: "p", poolLabels: labelsOf{"tier": "gold"}, wantPool: true, wantService: true},
		{name: "pool selector does not match", poolSels: []metav1.LabelSelector{gold}, pool: "p", poolLabels: labelsOf{"tier": "tin"}, wantPool: false, wantService: true},
		{name: "named or selected: either is enough", pools: []string{"a"}, poolSels: []metav1.LabelSelector{gold}, pool: "a", poolLabels: labelsOf{}, wantPool: true, wantService: true},
		{name: "a Service selector matches", svcSels: []metav1.LabelSelector{web}, pool: "p", svcLabels: labelsOf{"app": "web"}, wantPool: true, wantService: true},
		{name: "no Service selector matches", svcSels: []metav1.LabelSelector{web}, pool: "p", svcLabels: labelsOf{"app": "db"}, wantPool: true, wantService: false},
		{name: "a Service without labels and a selector", svcSels: []metav1.LabelSelector{web}, pool: "p", wantPool: true, wantService: false},
		{name: "Service selectors are ORed", svcSels: []metav1.LabelSelector{web, db}, pool: "p", svcLabels: labelsOf{"app": "db"}, wantPool: true, wantService: true},
		{name: "an expression selector", svcSels: []metav1.LabelSelector{notCanary}, pool: "p", svcLabels: labelsOf{"app": "web"}, wantPool: true, wantService: true},
		{name: "an expression selector refuses", svcSels: []metav1.LabelSelector{notCanary}, pool: "p", svcLabels: labelsOf{"canary": "1"}, wantPool: true, wantService: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := Scope{Pools: tt.pools}
			for _, l := range tt.poolSels {
				s.PoolSelectors = append(s.PoolSelectors, sel(t, l))
			}
			for _, l := range tt.svcSels {
				s.ServiceSelectors = append(s.ServiceSelectors, sel(t, l))
			}
			if got := s.SelectsPool(tt.pool, tt.poolLabels); got != tt.wantPool {
				t.Errorf("SelectsPool = %v, want %v", got, tt.wantPool)
			}
			if got := s.SelectsService(tt.svcLabels); got != tt.wantService {
				t.Errorf("SelectsService = %v, want %v", got, tt.wantService)
			}
			if got := s.Covers(tt.pool, tt.poolLabels, tt.svcLabels); got != (tt.wantPool && tt.wantService) {
				t.Errorf("Covers = %v, want %v", got, tt.wantPool && tt.wantService)
			}
		})
	}
}
