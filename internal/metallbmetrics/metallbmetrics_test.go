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
		{name: "shown, nothing read yet", wantLoaded: 0, wantStale: 0},
		{name: "invalid from the start: never loaded", history: []bool{false}, wantLoaded: 0, wantStale: 1},
		{name: "valid", history: []bool{true}, wantLoaded: 1, wantStale: 0},
		{name: "valid then invalid: stale, still loaded", history: []bool{true, false}, wantLoaded: 1, wantStale: 1},
		{name: "invalid then valid", history: []bool{false, true}, wantLoaded: 1, wantStale: 0},
		{name: "valid, invalid, valid", history: []bool{true, false, true}, wantLoaded: 1, wantStale: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := NewK8sClient(prometheus.NewRegistry())
			k.Show()
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

// TestK8sClientHide: hidden gauges have no series (a standby replica reports nothing, so
// MetalLBConfigNotLoaded does not fire for it); shown again, they start afresh.
func TestK8sClientHide(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := NewK8sClient(reg)
	count := func() int {
		n, err := testutil.GatherAndCount(reg, "metallb_k8s_client_config_loaded_bool", "metallb_k8s_client_config_stale_bool")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Errorf("%d series before Show or Config, want 0", n)
	}
	k.Config(true)
	if n := count(); n != 2 {
		t.Errorf("%d series after Config, want 2", n)
	}
	k.Hide()
	if n := count(); n != 0 {
		t.Errorf("%d series after Hide, want 0", n)
	}
	k.Show()
	if got := testutil.ToFloat64(k.configLoaded); got != 0 {
		t.Errorf("config_loaded_bool %v after Hide and Show, want 0: a new term starts afresh", got)
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
