package manifests_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v3"

	manifests "github.com/ironlb/ironlb/config"
)

// podTemplate is the part of a Deployment's or DaemonSet's pod template the security checks read.
type podTemplate struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				HostPID         bool            `yaml:"hostPID"`
				HostIPC         bool            `yaml:"hostIPC"`
				SecurityContext securityContext `yaml:"securityContext"`
				Containers      []struct {
					Name            string          `yaml:"name"`
					SecurityContext securityContext `yaml:"securityContext"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type securityContext struct {
	RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
	RunAsUser                *int64 `yaml:"runAsUser"`
	Privileged               *bool  `yaml:"privileged"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
	Capabilities             struct {
		Add  []string `yaml:"add"`
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
}

// securitySection returns the text of docs/security.md's section "## heading", up to the next one.
func securitySection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/security.md has no section ## %s", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// workloads returns the YAML documents of the Deployments and DaemonSets of every role's manifests.
func workloads(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"controller", "speaker", "proxy"} {
		b, err := manifests.Bundle(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range strings.Split(b, "\n---\n") {
			var o struct {
				Kind string `yaml:"kind"`
			}
			if err := yaml.Unmarshal([]byte(d), &o); err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			if o.Kind == "Deployment" || o.Kind == "DaemonSet" {
				out = append(out, d)
			}
		}
	}
	return out
}

// documentedCapabilities reads the capability table of docs/security.md: role -> capabilities.
// A role with the capability "none" gets an empty list.
func documentedCapabilities(t *testing.T) map[string][]string {
	t.Helper()
	section := securitySection(t, "Capabilities")
	row := regexp.MustCompile("^\\| (controller|speaker|proxy) \\| `([A-Z_]+|none)` \\|")
	out := map[string][]string{}
	for _, l := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if _, ok := out[m[1]]; !ok {
			out[m[1]] = []string{}
		}
		if m[2] != "none" {
			out[m[1]] = append(out[m[1]], m[2])
		}
	}
	if len(out) != 3 {
		t.Fatalf("docs/security.md's capability table names %d roles, want controller, speaker and proxy", len(out))
	}
	return out
}

// TestCapabilitiesAreDocumented fails when a role's container adds a capability that
// docs/security.md does not list (and explain) for that role, or the page lists one the manifests
// no longer grant; and when a container keeps the runtime's default capabilities, may escalate, is
// privileged or has a writable root filesystem.
func TestCapabilitiesAreDocumented(t *testing.T) {
	doc := documentedCapabilities(t)
	granted := map[string][]string{}
	for _, d := range workloads(t) {
		var o podTemplate
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatal(err)
		}
		role := o.Spec.Template.Metadata.Labels["component"]
		pod := o.Spec.Template.Spec
		if pod.HostPID || pod.HostIPC {
			t.Errorf("%s %s: hostPID or hostIPC", o.Kind, o.Metadata.Name)
		}
		for _, c := range pod.Containers {
			sc := c.SecurityContext
			where := o.Kind + " " + o.Metadata.Name + " container " + c.Name
			if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
				t.Errorf("%s: capabilities.drop %v, want [ALL]", where, sc.Capabilities.Drop)
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: privileged", where)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation must be false", where)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: readOnlyRootFilesystem must be true", where)
			}
			caps := slices.Clone(sc.Capabilities.Add)
			slices.Sort(caps)
			granted[role] = append(granted[role], caps...)
		}
		if role == "controller" {
			psc := pod.SecurityContext
			if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Errorf("%s %s: the controller must run as non-root (runAsNonRoot, runAsUser 65534)", o.Kind, o.Metadata.Name)
			}
		}
	}
	for role, caps := range doc {
		slices.Sort(caps)
		got := granted[role]
		if got == nil {
			got = []string{}
		}
		if diff := cmp.Diff(caps, got); diff != "" {
			t.Errorf("%s: capabilities (-docs/security.md +manifests); document each one granted and why:\n%s", role, diff)
		}
	}
}

// hostPathPod is the part of a pod template the host-path check reads.
type hostPathPod struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Volumes []struct {
					Name     string `yaml:"name"`
					HostPath *struct {
						Path string `yaml:"path"`
					} `yaml:"hostPath"`
				} `yaml:"volumes"`
				Containers []struct {
					Name         string   `yaml:"name"`
					Args         []string `yaml:"args"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
						ReadOnly  bool   `yaml:"readOnly"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestHostPathsAreDocumented fails when a role's container mounts a host path that
// docs/security.md's host-path table does not list (with where it is mounted), or the page lists
// one the manifests no longer mount; and when the proxy's --proc-sys is not the mount of the
// host's /proc/sys/net (its sysctls would go to the container's read-only /proc/sys).
func TestHostPathsAreDocumented(t *testing.T) {
	section := securitySection(t, "Host paths")
	row := regexp.MustCompile("^\\| (controller|speaker|proxy) \\| `([^`]+)` \\| `([^`]+)` \\|")
	var doc []string
	for _, l := range strings.Split(section, "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			doc = append(doc, m[1]+" "+m[2]+" at "+m[3])
		}
	}
	var got []string
	procSysChecked := false
	for _, d := range workloads(t) {
		var o hostPathPod
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatal(err)
		}
		role := o.Spec.Template.Metadata.Labels["component"]
		host := map[string]string{} // volume -> host path
		for _, v := range o.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				host[v.Name] = v.HostPath.Path
			}
		}
		for _, c := range o.Spec.Template.Spec.Containers {
			at := map[string]string{} // host path -> mount path
			for _, m := range c.VolumeMounts {
				if p, ok := host[m.Name]; ok {
					got = append(got, role+" "+p+" at "+m.MountPath)
					at[p] = m.MountPath
				}
			}
			if role != "proxy" {
				continue
			}
			procSys := ""
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--proc-sys="); ok {
					procSys = v
				}
			}
			if procSys == "" || at["/proc/sys/net"] != procSys+"/net" {
				t.Errorf("%s %s container %s: --proc-sys=%q, the host's /proc/sys/net mounted at %q: want --proc-sys to be the mount's parent", o.Kind, o.Metadata.Name, c.Name, procSys, at["/proc/sys/net"])
			}
			procSysChecked = true
		}
	}
	if !procSysChecked {
		t.Error("no proxy container found in the manifests")
	}
	slices.Sort(doc)
	slices.Sort(got)
	if diff := cmp.Diff(doc, got); diff != "" {
		t.Errorf("host paths (-docs/security.md +manifests); document each one mounted and why:\n%s", diff)
	}
}
