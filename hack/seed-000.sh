#!/usr/bin/env bash
# Seed 000's first experiment, as the notes run it: two traefik/whoami pods pinned to worker and worker2,
# then curl each pod IP from the control-plane node and print the Hostname lines.
set -euo pipefail
IRONLB=${IRONLB:-bin/ironlb}
k() { "$IRONLB" lab kubectl "$@"; }

echo
echo "== seed 000: webpod1 on myk8s-worker, webpod2 on myk8s-worker2 (the seed's YAML, verbatim)"
cat <<EOT | k apply -f -
apiVersion: v1
kind: Pod
metadata:
  name: webpod1
  labels:
    app: webpod
spec:
  nodeName: myk8s-worker
  containers:
  - name: container
    image: traefik/whoami
  terminationGracePeriodSeconds: 0
---
apiVersion: v1
kind: Pod
metadata:
  name: webpod2
  labels:
    app: webpod
spec:
  nodeName: myk8s-worker2
  containers:
  - name: container
    image: traefik/whoami
  terminationGracePeriodSeconds: 0
EOT
k wait --for=condition=Ready --timeout=60s pod/webpod1 pod/webpod2 >/dev/null
echo
echo "\$ kubectl get nodes -owide"
k get nodes -owide
echo
echo "\$ kubectl get pod -owide"
k get pod -owide
WPOD1=$(k get pod webpod1 -o jsonpath="{.status.podIP}")
WPOD2=$(k get pod webpod2 -o jsonpath="{.status.podIP}")
echo
echo "\$ echo \$WPOD1 \$WPOD2"
echo "$WPOD1 $WPOD2"
for ip in "$WPOD1" "$WPOD2"; do
  echo "\$ ironlb lab exec myk8s-control-plane -- curl -s --connect-timeout 1 $ip | grep Hostname   # seed: docker exec -it ..."
  "$IRONLB" lab exec myk8s-control-plane -- curl -s --connect-timeout 1 "$ip" | grep Hostname
done

echo
echo "== seed 000: MetalLB's configuration (IPAddressPool my-ippool, L2Advertisement), served by ironlb's controller"
cat <<EOT | k apply -f -
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: my-ippool
  namespace: metallb-system
spec:
  addresses:
  - 172.18.255.200-172.18.255.250
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: my-l2-advertise
  namespace: metallb-system
spec:
  ipAddressPools:
  - my-ippool
EOT
echo "\$ kubectl get ipaddresspools -n metallb-system"
k get ipaddresspools -n metallb-system
echo
echo "== seed 000: LoadBalancer Services svc1, svc2, svc3"
for i in 1 2 3; do cat <<EOT
---
apiVersion: v1
kind: Service
metadata:
  name: svc$i
spec:
  ports:
  - name: svc$i-webport
    port: 80
    targetPort: 80
  selector:
    app: webpod
  type: LoadBalancer
EOT
done | k apply -f -
for i in 1 2 3; do
  for _ in $(seq 100); do
    [ -n "$(k get svc svc$i -o jsonpath='{.status.loadBalancer.ingress[0].ip}')" ] && break
    sleep 0.1
  done
done
echo "\$ kubectl get svc"
k get svc
echo
echo "\$ kubectl get endpoints"
k get endpointslices
echo
sleep 1.5  # the controller writes pool counters once a second
echo "\$ kubectl get ipaddresspool my-ippool -n metallb-system -o jsonpath='{.status}'"
k get ipaddresspool my-ippool -n metallb-system -o jsonpath='{.status}'; echo
echo "(The external IPs are assigned by ironlb's controller; announcing them to mypc is the speaker's job, issue 5.)"
cat <<EOT

The lab keeps running. Try:
  $IRONLB lab kubectl get pods -A -o wide
  $IRONLB lab exec mypc -- bash            # the outside client at 172.18.0.100
  $IRONLB lab exec myk8s-worker -- iptables -t nat -S
  $IRONLB lab stop-node myk8s-worker       # power cut; start-node brings it back
  $IRONLB lab status
Take it down with:
  make lab-down        (or: $IRONLB lab down)
EOT
