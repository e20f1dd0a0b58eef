package cli

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	yaml "go.yaml.in/yaml/v3"
)

// helmBin returns the helm hack/helm.sh builds (HELM_VERSION in hack/versions.env), and skips the
// test when it is missing (unless IRONLB_E2E=1).
func helmBin(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var version string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "HELM_VERSION="); ok {
			version = v
		}
	}
	cache := os.Getenv("IRONLB_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ironlb")
	}
	path := filepath.Join(cache, "helm", version, "helm")
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("IRONLB_E2E") == "1" {
			t.Fatalf("helm not found at %s; hack/helm.sh builds it", path)
		}
		t.Skipf("helm not found at %s; hack/helm.sh builds it", path)
	}
	return path
}

// TestChartArgsAreFlags renders charts/ironlb with every value that adds an argument, and parses each
// container's arguments with the role's own flags: the chart passes nothing the binary would refuse at
// start (a renamed flag, --log-level where a role has none). extraArgs are the user's and left out.
func TestChartArgsAreFlags(t *testing.T) {
	helm := helmBin(t)
	cmd := exec.Command(helm, "template", "ironlb", "../../charts/ironlb", "--namespace", "lb-system",
		"--set", "proxy.enabled=true", "--set", "proxy.logLevel=debug")
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	roles := map[string]func() *cobra.Command{"controller": controllerCmd, "speaker": speakerCmd, "proxy": proxyCmd}
	seen := map[string]bool{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name string
							Args []string
						}
					}
				}
			}
		}
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		for _, c := range o.Spec.Template.Spec.Containers {
			if len(c.Args) == 0 {
				t.Errorf("%s %s: no arguments", o.Kind, c.Name)
				continue
			}
			newCmd, ok := roles[c.Args[0]]
			if !ok {
				t.Errorf("%s %s: runs %q, not a role", o.Kind, c.Name, c.Args[0])
				continue
			}
			seen[c.Args[0]] = true
			// The role under the root, as `ironlb ROLE` runs it: the root's persistent flags
			// (--log-level, --log-format) are the role's too.
			root := &cobra.Command{Use: "ironlb"}
			(&logFlags{}).add(root)
			role := newCmd()
			root.AddCommand(role)
			if err := role.ParseFlags(c.Args[1:]); err != nil {
				t.Errorf("ironlb %s refuses the chart's arguments %q: %v", c.Args[0], c.Args[1:], err)
			}
		}
	}
	for r := range roles {
		if !seen[r] {
			t.Errorf("no container runs ironlb %s", r)
		}
	}
}
