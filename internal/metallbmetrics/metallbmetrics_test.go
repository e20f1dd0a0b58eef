package metallbmetrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestK8sClientConfig: MetalLB's loaded/stale gauges through a history of valid and invalid
// configurations.
func TestK8sClientConfig(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		history               []bool
		wantLoaded, wantStale float64
	}{
		{name: "nothing read yet", wantLoaded: 0, wantStale: 0},
		{name: "invalid from the start: never loaded", history: []bool{false}, wantLoaded: 0, wantStale: 1},
		{name: "valid", history: []bool{true}, wantLoaded: 1, wantStale: 0},
		{name: "valid then invalid: stale, still loaded", history: []bool{true, false}, wantLoaded: 1, wantStale: 1},
		{name: "invalid then valid", history: []bool{false, true}, wantLoaded: 1, wantStale: 0},
		{name: "valid, invalid, valid", history: []bool{true, false, true}, wantLoaded: 1, wantStale: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := NewK8sClient(prometheus.NewRegistry())
			for _, v := range tt.history {
				k.Config(v)
			}
			if got := testutil.ToFloat64(k.configLoaded); got != tt.wantLoaded {
				t.Errorf("config_loaded_bool %v, want %v", got, tt.wantLoaded)
			}
			if got := testutil.ToFloat64(k.configStale); got != tt.wantStale {
				t.Errorf("config_stale_bool %v, want %v", got, tt.wantStale)
			}
		})
	}
}

// TestAllRegister: every constructor registers into one registry without a clash, as the speaker
// does (the BGP and BFD metrics beside the client's and layer 2's).
func TestAllRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewK8sClient(reg)
	NewSpeakerAnnounced(reg)
	NewLayer2(reg)
	NewBGP(reg)
	NewBFD(reg)
	NewAllocator(reg)
}
