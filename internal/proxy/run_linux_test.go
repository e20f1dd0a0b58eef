package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestRun runs `ironlb proxy` as the command does, against a real apiserver on loopback, its
// rules going into a throwaway network namespace: informers, the first full sync, an incremental
// sync on a new endpoint, and a clean stop. Skipped without root, nft or the Kubernetes binaries.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an apiserver")
	}
	list := kernelNetns(t)
	env := testenv.Start(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, testNode("node-a", "192.168.0.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	web, err = cs.CoreV1().Services("default").Create(ctx, web, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es := slice("web", "web-1", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.1.5", "node-a"}})
	es.Namespace = "default"
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Config{
			Node: "node-a", Kubeconfig: env.Kubeconfig, IPFamilies: "ipv4",
			HealthzAddr: "127.0.0.1:0", LogLevel: "warn", SyncPeriod: time.Hour,
		})
	}()
	element := web.Spec.ClusterIP + " . tcp . 80 : goto service-"
	waitFor(t, done, "the ClusterIP in the kernel", func() bool { return strings.Contains(list(), element) })
	waitFor(t, done, "no second endpoint yet", func() bool { return !strings.Contains(list(), "10.244.1.6") })

	es.Endpoints = append(es.Endpoints, es.Endpoints[0])
	es.Endpoints[1].Addresses = []string{"10.244.1.6"}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, done, "the new endpoint in the kernel", func() bool { return strings.Contains(list(), ": 10.244.1.6 . 8080") })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !strings.Contains(list(), element) {
		t.Error("rules removed on exit; they should stay for a restart")
	}
}

func waitFor(t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		select {
		case err := <-done:
			t.Fatalf("Run returned (%v) while waiting for %s", err, what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
