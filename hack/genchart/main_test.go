package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPerObject: the chart's labels go into each object's metadata (after labels of its own), and
// config/prometheus's PodMonitors get their own toggle and values.
func TestPerObject(t *testing.T) {
	tests := []struct {
		name      string
		g         group
		in, want  string
		wantError bool
	}{
		{
			name: "no labels",
			g:    group{dir: "crd/bases"},
			in:   "apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec: {}\n",
			want: "apiVersion: v1\nkind: X\nmetadata:\n  labels:\n    {{- include \"ironlb.labels\" $ | nindent 4 }}\n  name: a\nspec: {}\n",
		},
		{
			name: "labels of its own, a component, two objects",
			g:    group{dir: "speaker"},
			in:   "# c\nkind: A\nmetadata:\n  name: a\n  labels:\n    app: ironlb\n  annotations: {}\n---\nkind: B\nmetadata:\n  name: b\n",
			want: "# c\nkind: A\nmetadata:\n  name: a\n  labels:\n    {{- include \"ironlb.componentLabels\" (dict \"root\" $ \"component\" \"speaker\") | nindent 4 }}\n    app: ironlb\n  annotations: {}\n" +
				"---\nkind: B\nmetadata:\n  labels:\n    {{- include \"ironlb.componentLabels\" (dict \"root\" $ \"component\" \"speaker\") | nindent 4 }}\n  name: b\n",
		},
		{
			name: "a PodMonitor",
			g:    group{dir: "prometheus"},
			in:   "kind: PodMonitor\nmetadata:\n  name: m\nspec: {}\n",
			want: "{{- if .Values.prometheus.podMonitor.enabled }}\nkind: PodMonitor\nmetadata:\n  labels:\n    {{- include \"ironlb.labels\" $ | nindent 4 }}\n" +
				"    {{- with $.Values.prometheus.podMonitor.additionalLabels }}\n    {{- toYaml . | nindent 4 }}\n    {{- end }}\n  name: m\n" +
				"  {{- with $.Values.prometheus.podMonitor.annotations }}\n  annotations:\n    {{- toYaml . | nindent 4 }}\n  {{- end }}\nspec: {}\n{{- end }}\n",
		},
		{name: "an object without metadata", g: group{dir: "speaker"}, in: "kind: A\nspec: {}\n", wantError: true},
		{name: "a PodMonitor with annotations", g: group{dir: "prometheus"}, in: "kind: PodMonitor\nmetadata:\n  annotations: {a: b}\n", wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := perObject(tt.g, tt.in)
			if (err != nil) != tt.wantError {
				t.Fatalf("error %v, want one: %v", err, tt.wantError)
			}
			if diff := cmp.Diff(tt.want, got); !tt.wantError && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestChartVersions: Chart.yaml's version is VERSION without its v, as `make chart` packages it, and
// its appVersion is VERSION; the other lines stay as they are.
func TestChartVersions(t *testing.T) {
	chart := "apiVersion: v2\nname: ironlb\nversion: 0.2.0\nappVersion: v0.0.1\nkeywords: [a]\n"
	got, err := chartVersions([]byte(chart), "v0.3.1-rc.1")
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion: v2\nname: ironlb\nversion: 0.3.1-rc.1\nappVersion: v0.3.1-rc.1\nkeywords: [a]\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	for _, bad := range []string{"name: ironlb\nappVersion: v1.0.0\n", "name: ironlb\nversion: 1.0.0\n"} {
		if _, err := chartVersions([]byte(bad), "v0.1.0"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestTemplateOneImage: every role's manifest, the proxy's too, names ironlb's one image, which the
// chart takes from image.repository; a manifest naming another repository or tag is refused.
func TestTemplateOneImage(t *testing.T) {
	const (
		ds   = "kind: DaemonSet\nmetadata:\n  name: d\nspec:\n  containers:\n  - name: c\n    image: %s\n"
		want = `    image: {{ include "ironlb.image" (dict "root" . "repository" .Values.image.repository) }}`
	)
	tests := []struct {
		name    string
		images  []string // the speaker's, then the proxy's
		wantErr string
	}{
		{"one image", []string{"ghcr.io/ironlb/ironlb:v0.1.0", "ghcr.io/ironlb/ironlb:v0.1.0"}, ""},
		{"a proxy image of its own", []string{"ghcr.io/ironlb/ironlb:v0.1.0", "ghcr.io/ironlb/ironlb-proxy:v0.1.0"},
			"image ghcr.io/ironlb/ironlb-proxy differs from ghcr.io/ironlb/ironlb: every role runs ironlb's one image"},
		{"another tag", []string{"ghcr.io/ironlb/ironlb:v0.1.0", "ghcr.io/ironlb/ironlb:v0.2.0"}, "image tag v0.2.0 differs from v0.1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im := &images{}
			var err error
			for i, g := range []group{{dir: "speaker", prefix: "speaker"}, {dir: "proxy", prefix: "proxy", toggle: ".Values.proxy.enabled"}} {
				var out []byte
				out, err = template(g, "20-daemonset.yaml", fmt.Appendf(nil, ds, tt.images[i]), im)
				if err != nil {
					break
				}
				if !strings.Contains(string(out), want+"\n") {
					t.Errorf("%s: no %q in\n%s", g.dir, want, out)
				}
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if tt.wantErr == "" && (im.repo != "ghcr.io/ironlb/ironlb" || im.tag != "v0.1.0") {
				t.Errorf("images %+v, want ghcr.io/ironlb/ironlb at v0.1.0", *im)
			}
		})
	}
}
