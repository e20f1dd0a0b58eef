package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/ironlb/ironlb/internal/testbed/lab"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestRuncLab brings up a lab whose node agents run containers from images with runc
// (`lab up --runtime=runc`, issue 17 item 3) and checks the real path: ironlb and whoami run from the
// images lab up built and pushed to the lab's registry; every such container's status carries the
// registry's digest; the speaker and the controller run with the user and capabilities their
// securityContext gives; `ironlb version` inside the controller's container is the chart's
// appVersion; busybox, agnhost, nginx's stand-in and pause run from the images lab up built for
// them, and their Pods reach CoreDNS and Services through kube-proxy, both from images too; every
// container of every Pod (kube-system's included) has an imageID from the lab registry; an image
// missing from the registry gives ErrImagePull, then ImagePullBackOff, with the registry's own
// error. The suite's lab is taken down first and not restored (one lab at a time, as TestIPv6OnlyLab).
func TestRuncLab(t *testing.T) {
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (hack/deps.sh installs Debian's runc)")
	}
	run(t, ironlb, "lab", "down")
	appVersion := chartAppVersion(t)
	// The image has no C library: a static ironlb, stamped with the chart's version as `make image`
	// stamps it.
	static := filepath.Join(filepath.Dir(ironlb), "ironlb-static")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/ironlb/ironlb/internal/version.version="+appVersion,
		"-o", static, "github.com/ironlb/ironlb/cmd/ironlb")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a static ironlb: %v\n%s", err, out)
	}
	t0 := time.Now()
	// runErr's 2 minutes are too short here: lab up also builds and pushes every image, and each of its
	// waits gives up after 90 s with the not-ready Pods' reasons, which a kill at 2 minutes would hide.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, static, "lab", "up", "--runtime=runc").CombinedOutput()
	out := string(b)
	t.Cleanup(func() {
		run(t, ironlb, "lab", "down")
		if left := leftovers(); len(left) > 0 {
			t.Errorf("after lab down of the runc lab: %s", strings.Join(left, "\n"))
		}
	})
	t.Logf("lab up --runtime=runc in %.1fs:\n%s", time.Since(t0).Seconds(), out)
	if err != nil {
		t.Fatalf("lab up --runtime=runc: %v", err)
	}

	// whoami from its image, behind a LoadBalancer Service, from mypc.
	kubectlApply(t, "testdata/webpods.yaml")
	kubectlApply(t, "testdata/seed000-metallb.yaml")
	kubectlApply(t, "testdata/seed000-services.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	var vip string
	eventually(t, 30*time.Second, "svc1 gets an address", func() error {
		vip = strings.TrimSpace(kubectl(t, "get", "svc", "svc1", "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}"))
		if vip == "" {
			return fmt.Errorf("no ingress yet")
		}
		return nil
	})
	eventually(t, 30*time.Second, "requests to "+vip+" from mypc reach both webpods", func() error {
		seen := map[string]bool{}
		for range 30 {
			body, err := curl("mypc", "http://"+vip+"/")
			if err != nil {
				return err
			}
			seen[hostnameOf(body)] = true
		}
		if !seen["webpod1"] || !seen["webpod2"] {
			return fmt.Errorf("answered by %v", keys(seen))
		}
		return nil
	})

	// The other images lab up built: busybox (its shell and applets), agnhost (netexec, and the
	// tools its upstream image has), nginx's stand-in, pause; the cluster DNS (CoreDNS from its
	// image, non-root with its file capability) and kube-proxy's Service rules (from its image, with
	// the image's iptables) answer the busybox Pod.
	kubectl(t, "run", "bb", "--image=busybox", "--restart=Never", "--command", "--", "sleep", "3600")
	kubectl(t, "run", "ag", "--image=registry.k8s.io/e2e-test-images/agnhost:2.66.1", "--restart=Never", "--", "netexec", "--http-port=8080")
	kubectl(t, "run", "web", "--image=nginx", "--restart=Never")
	kubectl(t, "run", "pz", "--image=registry.k8s.io/pause:3.10.2", "--restart=Never")
	waitReady(t, "pod/bb", "pod/ag", "pod/web", "pod/pz")
	kubeIP := strings.TrimSpace(kubectl(t, "get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"))
	eventually(t, 30*time.Second, "busybox resolves kubernetes.default through CoreDNS", func() error {
		out, err := runErr(ironlb, "lab", "kubectl", "exec", "bb", "--", "nslookup", "kubernetes.default.svc.cluster.local")
		if err != nil || !answers(out, kubeIP) {
			return fmt.Errorf("nslookup: %v: %s", err, out)
		}
		return nil
	})
	// busybox's timeout applet, not wget -T: Debian 12's busybox-static (1.35.0, the lab's busybox
	// image) segfaults in wget -T (exit 139, on the host too).
	svcIP := strings.TrimSpace(kubectl(t, "get", "svc", "svc1", "-o", "jsonpath={.spec.clusterIP}"))
	eventually(t, 30*time.Second, "busybox reaches svc1's ClusterIP (kube-proxy's rules)", func() error {
		out, err := runErr(ironlb, "lab", "kubectl", "exec", "bb", "--", "timeout", "3", "wget", "-qO-", "http://"+svcIP+"/")
		if err != nil || !strings.HasPrefix(hostnameOf(out), "webpod") {
			return fmt.Errorf("wget: %v: %s", err, out)
		}
		return nil
	})
	for _, c := range []struct{ pod, url, want string }{
		{"ag", "http://" + podIP(t, "ag") + ":8080/hostname", "ag"},
		{"web", "http://" + podIP(t, "web") + ":80/hostname", "web"},
	} {
		eventually(t, 30*time.Second, c.pod+" answers from busybox", func() error {
			out, err := runErr(ironlb, "lab", "kubectl", "exec", "bb", "--", "timeout", "3", "wget", "-qO-", c.url)
			if err != nil || strings.TrimSpace(out) != c.want {
				return fmt.Errorf("wget %s: %v: %q", c.url, err, out)
			}
			return nil
		})
	}
	if out, err := runErr(ironlb, "lab", "kubectl", "exec", "ag", "--", "sh", "-c",
		"curl -s --max-time 3 http://localhost:8080/hostname && echo && dig +short +time=2 kubernetes.default.svc.cluster.local"); err != nil ||
		!strings.HasPrefix(out, "ag") || !answers(out, kubeIP) {
		t.Errorf("curl and dig in agnhost's image: %v: %s", err, out)
	}

	// Every Pod of the lab, kube-system's included, runs from an image of the lab registry: each
	// container's imageID is the repository the Pod named at the digest the registry serves for it.
	reg := registryAddr(t)
	checkAllImageIDs(t, reg)

	// Every container run from an image reports the registry's digest as its imageID.
	whoamiDigest := registryDigest(t, reg, "traefik/whoami", "latest")
	ironlbDigest := registryDigest(t, reg, "ghcr.io/ironlb/ironlb", appVersion)
	for _, p := range []string{"webpod1", "webpod2"} {
		id := kubectl(t, "get", "pod", p, "-o", "jsonpath={.status.containerStatuses[0].imageID}")
		if id != "docker.io/traefik/whoami@"+whoamiDigest {
			t.Errorf("%s imageID %q, want docker.io/traefik/whoami@%s", p, id, whoamiDigest)
		}
	}
	// The chart names the image by the lab registry's mirror (REG/ghcr.io/ironlb/ironlb:VERSION), and
	// a runtime reports the repository the Pod named, with the digest it pulled.
	ids := kubectl(t, "get", "pods", "-n", "metallb-system", "-o", `jsonpath={range .items[*]}{.metadata.name}{" "}{.spec.containers[0].image}{" "}{.status.containerStatuses[0].imageID}{"\n"}{end}`)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(ids), "\n") {
		f := strings.Fields(line)
		n++
		if len(f) != 3 {
			t.Errorf("pod line %q: want name, image and imageID", line)
			continue
		}
		repo := f[1][:strings.LastIndex(f[1], ":")]
		if !strings.HasSuffix(repo, "ghcr.io/ironlb/ironlb") || f[2] != repo+"@"+ironlbDigest {
			t.Errorf("%s (image %s) imageID %q, want %s@%s", f[0], f[1], f[2], repo, ironlbDigest)
		}
	}
	if n < 6 { // 4 speakers, 2 controllers
		t.Errorf("%d ironlb pods, want at least 6:\n%s", n, ids)
	}

	// The speaker and the controller run as their securityContext says.
	for _, c := range []struct{ dir, name, container string }{
		{"speaker", "ironlb-speaker", "speaker"},
		{"controller", "ironlb-controller", "controller"},
	} {
		wantUID, wantCaps := manifestSecurity(t, c.dir, c.container)
		pod := strings.TrimSpace(kubectl(t, "get", "pods", "-n", "metallb-system", "-l", "component="+c.dir, "-o", "jsonpath={.items[0].metadata.name}"))
		st := procStatus(t, "metallb-system", pod, c.container)
		t.Logf("%s %s: Uid %s, CapPrm %s, CapEff %s, CapBnd %s", c.dir, pod, st["Uid"], st["CapPrm"], st["CapEff"], st["CapBnd"])
		if uid := strings.Fields(st["Uid"]); len(uid) != 4 || uid[0] != wantUID || uid[1] != wantUID {
			t.Errorf("%s Uid %q, want %s (runAsUser)", pod, st["Uid"], wantUID)
		}
		// A root process holds its bounding set; a non-root one none (no ambient capabilities).
		effective := wantCaps
		if wantUID != "0" {
			effective = 0
		}
		for _, k := range []string{"CapPrm", "CapEff"} {
			if got, _ := strconv.ParseUint(st[k], 16, 64); got != effective {
				t.Errorf("%s %s %s, want %016x", pod, k, st[k], effective)
			}
		}
		if got, _ := strconv.ParseUint(st["CapBnd"], 16, 64); got != wantCaps {
			t.Errorf("%s CapBnd %s, want %016x", pod, st["CapBnd"], wantCaps)
		}
	}

	// `ironlb version` in the controller's container is the chart's appVersion.
	ver := kubectl(t, "exec", "-n", "metallb-system", "deploy/ironlb-controller", "-c", "controller", "--", "/ironlb", "version")
	if !strings.Contains(ver, appVersion) {
		t.Errorf("ironlb version in the controller: %q, want %s", ver, appVersion)
	}

	// An image the registry does not have: ErrImagePull with the registry's error, then back-off.
	kubectl(t, "run", "nosuch", "--image=redis:7-nosuch", "--restart=Never")
	var pullMsg string
	eventually(t, 60*time.Second, "nosuch in ErrImagePull", func() error {
		reason := kubectl(t, "get", "pod", "nosuch", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason}")
		pullMsg = kubectl(t, "get", "pod", "nosuch", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.message}")
		if reason != "ErrImagePull" {
			return fmt.Errorf("waiting %q: %s", reason, pullMsg)
		}
		return nil
	})
	t.Logf("ErrImagePull: %s", pullMsg)
	if !strings.Contains(pullMsg, "NAME_UNKNOWN") && !strings.Contains(pullMsg, "MANIFEST_UNKNOWN") {
		t.Errorf("ErrImagePull message %q does not carry the registry's error", pullMsg)
	}
	eventually(t, 60*time.Second, "nosuch in ImagePullBackOff", func() error {
		reason := kubectl(t, "get", "pod", "nosuch", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason}")
		msg := kubectl(t, "get", "pod", "nosuch", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.message}")
		if reason != "ImagePullBackOff" {
			return fmt.Errorf("waiting %q: %s", reason, msg)
		}
		if want := `Back-off pulling image "redis:7-nosuch": ErrImagePull: ` + pullMsg; msg != want {
			return fmt.Errorf("message %q, want %q", msg, want)
		}
		return nil
	})

	// The figures: each pull and unpack, from the agents' logs.
	for _, node := range []string{"myk8s-control-plane", "myk8s-worker", "myk8s-worker2", "myk8s-worker3"} {
		b, _ := os.ReadFile(filepath.Join(stateDir, "logs", node, "agent.log"))
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "image pulled") {
				t.Log(node + ": " + l[strings.Index(l, "msg="):])
			}
		}
	}
}

// chartAppVersion is charts/ironlb/Chart.yaml's appVersion.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../charts/ironlb/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// registryAddr is the lab registry's host:port, from lab status.
func registryAddr(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "lab.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Registry struct {
			Addr string `json:"addr"`
		} `json:"registry"`
	}
	if err := yaml.Unmarshal(b, &p); err != nil || p.Registry.Addr == "" {
		t.Fatalf("registry in lab.json: %v %q", err, p.Registry.Addr)
	}
	return p.Registry.Addr + ":5000"
}

var digestRE = regexp.MustCompile(`(?im)^docker-content-digest:\s*(sha256:[0-9a-f]{64})`)

// registryDigest asks the lab registry (from mypc) for the digest it serves for repo:tag, which
// nodes pull (an index for a multi-platform image).
func registryDigest(t *testing.T, reg, repo, tag string) string {
	t.Helper()
	out, err := labExec("mypc", "curl", "-sfI", "-H", "Accept: application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
		"http://"+reg+"/v2/"+repo+"/manifests/"+tag)
	m := digestRE.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("digest of %s:%s in %s: %v\n%s", repo, tag, reg, err, out)
	}
	return m[1]
}

// capBits are the capability numbers (linux/capability.h) of the names manifests use.
var capBits = map[string]uint{"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7,
	"SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "NET_RAW": 13, "SYS_CHROOT": 18, "SYS_ADMIN": 21, "SYS_NICE": 23,
	"MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31, "BPF": 39}

// manifestSecurity reads the uid (runAsUser, container over pod) and the capability set (drop ALL,
// then add) of a container of ironlb's manifests (config/<dir>), as the lab installs them.
func manifestSecurity(t *testing.T, dir, container string) (uid string, caps uint64) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("../../config", dir, "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var obj struct {
				Kind string `json:"kind"`
			}
			if yaml.Unmarshal([]byte(doc), &obj) != nil || (obj.Kind != "DaemonSet" && obj.Kind != "Deployment") {
				continue
			}
			var spec corev1.PodSpec
			if obj.Kind == "DaemonSet" {
				var ds appsv1.DaemonSet
				if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
					t.Fatal(err)
				}
				spec = ds.Spec.Template.Spec
			} else {
				var d appsv1.Deployment
				if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
					t.Fatal(err)
				}
				spec = d.Spec.Template.Spec
			}
			for _, c := range spec.Containers {
				if c.Name != container {
					continue
				}
				var u *int64
				if spec.SecurityContext != nil {
					u = spec.SecurityContext.RunAsUser
				}
				sc := c.SecurityContext
				if sc != nil && sc.RunAsUser != nil {
					u = sc.RunAsUser
				}
				if u == nil || sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
					t.Fatalf("%s/%s: the test expects runAsUser and capabilities drop [ALL]", dir, container)
				}
				for _, a := range sc.Capabilities.Add {
					bit, ok := capBits[strings.TrimPrefix(string(a), "CAP_")]
					if !ok {
						t.Fatalf("capability %s: add it to capBits", a)
					}
					caps |= 1 << bit
				}
				return strconv.FormatInt(*u, 10), caps
			}
		}
	}
	t.Fatalf("no container %s in config/%s", container, dir)
	return "", 0
}

// procStatus reads /proc/<pid>/status of a container's main process, found through the Pod's cgroups
// (pods/<uid>/... under the node's lab cgroup): the process there that is not runc.
func procStatus(t *testing.T, ns, pod, container string) map[string]string {
	t.Helper()
	uid := kubectl(t, "get", "pod", "-n", ns, pod, "-o", "jsonpath={.metadata.uid}")
	node := kubectl(t, "get", "pod", "-n", ns, pod, "-o", "jsonpath={.spec.nodeName}")
	labCg, err := lab.LabCgroup("myk8s") // the cgroup v2 hierarchy: /sys/fs/cgroup or .../unified
	if err != nil {
		t.Fatal(err)
	}
	dir := string(labCg.Child(node, "pods", uid))
	var seen []string
	var found map[string]string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || found != nil || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			comm, _ := os.ReadFile("/proc/" + f + "/comm")
			seen = append(seen, p+": "+f+" "+strings.TrimSpace(string(comm)))
			if strings.HasPrefix(string(comm), "runc") {
				continue
			}
			st, err := os.ReadFile("/proc/" + f + "/status")
			if err != nil {
				continue
			}
			found = map[string]string{}
			for _, l := range strings.Split(string(st), "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok {
					found[k] = strings.TrimSpace(v)
				}
			}
			return nil
		}
		return nil
	})
	if found == nil {
		t.Fatalf("no process of %s/%s %s under %s: %v", ns, pod, container, dir, seen)
	}
	return found
}

// checkAllImageIDs checks every container (init containers too) of every Pod in every namespace:
// its imageID is <the repository the Pod named>@<digest>, and the digest is the one the lab
// registry serves for the image's mirror name (lab.MirrorName; an image already naming the lab
// registry as it is).
func checkAllImageIDs(t *testing.T, reg string) {
	t.Helper()
	out := kubectl(t, "get", "pods", "-A", "-o", `jsonpath={range .items[*]}{range .status.initContainerStatuses[*]}{"init "}{.image}{" "}{.imageID}{"\n"}{end}{range .status.containerStatuses[*]}{"ctr "}{.image}{" "}{.imageID}{"\n"}{end}{end}`)
	pods := kubectl(t, "get", "pods", "-A", "-o", `jsonpath={range .items[*]}{.metadata.namespace}{"/"}{.metadata.name}{" "}{.status.phase}{"\n"}{end}`)
	t.Logf("pods:\n%s", pods)
	digests := map[string]string{}
	n, namespaces := 0, map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(pods), "\n") {
		if ns, _, ok := strings.Cut(line, "/"); ok {
			namespaces[ns] = true
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Errorf("container %q: no imageID", line)
			continue
		}
		n++
		image, imageID := f[1], f[2]
		mirror := image
		if !strings.HasPrefix(image, reg+"/") {
			m, err := lab.MirrorName(reg, image)
			if err != nil {
				t.Errorf("%s: %v", image, err)
				continue
			}
			mirror = m
		}
		ref, err := name.ParseReference(mirror, name.Insecure)
		if err != nil {
			t.Errorf("%s: %v", mirror, err)
			continue
		}
		if _, ok := digests[mirror]; !ok {
			repo := strings.TrimPrefix(ref.Context().Name(), reg+"/")
			digests[mirror] = registryDigest(t, reg, repo, ref.Identifier())
		}
		id, err := name.NewDigest(imageID)
		if err != nil {
			t.Errorf("%s: imageID %q is not repository@digest: %v", image, imageID, err)
			continue
		}
		named, err := name.ParseReference(image)
		if err != nil {
			t.Errorf("%s: %v", image, err)
			continue
		}
		if id.Context().Name() != named.Context().Name() || id.DigestStr() != digests[mirror] {
			t.Errorf("%s: imageID %s, want %s@%s (the lab registry's %s)", image, imageID, named.Context().Name(), digests[mirror], mirror)
		}
	}
	for _, ns := range []string{"kube-system", "metallb-system", "default"} {
		if !namespaces[ns] {
			t.Errorf("no Pod in %s", ns)
		}
	}
	t.Logf("%d containers in %d namespaces, every imageID from the lab registry (%d images)", n, len(namespaces), len(digests))
}

// answers says whether a line of nslookup's or dig's output ends in the address ip ("Address: ip",
// or ip alone), not in another address that starts with it.
func answers(out, ip string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[len(f)-1] == ip {
			return true
		}
	}
	return false
}
