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

# node name of a MAC on the lab bridge (Docker-style 02:42:ac:12:00:XX)
node_of_mac() {
  case "$1" in
    02:42:ac:12:00:02) echo myk8s-control-plane ;; 02:42:ac:12:00:03) echo myk8s-worker ;;
    02:42:ac:12:00:04) echo myk8s-worker2 ;; 02:42:ac:12:00:05) echo myk8s-worker3 ;; *) echo "?" ;;
  esac
}
ex() { "$IRONLB" lab exec "$@"; }
echo
echo "== seed 000: 100 curls from mypc (172.18.0.100) to each external IP"
printf "%-8s %-16s %8s %8s %8s\n" SERVICE EXTERNAL-IP webpod1 webpod2 failed
for i in 1 2 3; do
  ip=$(k get svc svc$i -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
  for _ in $(seq 50); do ex mypc -- curl -s -o /dev/null --max-time 1 "http://$ip" && break; sleep 0.2; done
  counts=$(ex mypc -- bash -c "for n in \$(seq 100); do curl -s --max-time 2 http://$ip | grep Hostname || echo failed; done" | sort | uniq -c)
  w1=$(echo "$counts" | awk '/webpod1/{print $1}'); w2=$(echo "$counts" | awk '/webpod2/{print $1}'); f=$(echo "$counts" | awk '/failed/{print $1}')
  printf "%-8s %-16s %8s %8s %8s\n" svc$i "$ip" "${w1:-0}" "${w2:-0}" "${f:-0}"
done

echo
echo "== seed 000: who answers ARP for each external IP (arping and arp-scan from mypc)"
printf "%-16s %-20s %-22s %s\n" EXTERNAL-IP "arping MACs" "announcing node" "arp-scan"
for i in 1 2 3; do
  ip=$(k get svc svc$i -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
  macs=$(ex mypc -- arping -c 3 -w 4 "$ip" 2>/dev/null | grep -o 'from [0-9a-f:]*' | awk '{print $2}' | sort -u | tr '\n' ' ')
  scan=$(ex mypc -- arp-scan -q -I eth0 "$ip" 2>/dev/null | awk -v ip="$ip" '$1==ip{print $2}' | sort -u | tr '\n' ' ')
  nodes=""; for m in $macs; do nodes="$nodes$(node_of_mac "$m") "; done
  printf "%-16s %-20s %-22s %s\n" "$ip" "$macs" "$nodes" "$scan"
done
echo "\$ kubectl get servicel2statuses -n metallb-system -o custom-columns=NODE:.status.node,SERVICE:.status.serviceName,IFACE:.status.interfaces[0].name"
k get servicel2statuses -n metallb-system -o custom-columns=NODE:.status.node,SERVICE:.status.serviceName,IFACE:.status.interfaces[0].name

ip1=$(k get svc svc1 -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
mac1=$(ex mypc -- arping -c 1 -w 2 "$ip1" 2>/dev/null | grep -o 'from [0-9a-f:]*' | awk '{print $2}' | head -1)
leader=$(node_of_mac "$mac1")
echo
echo "== seed 000: the packet path for svc1 ($ip1) on its announcing node $leader (kube-proxy iptables)"
echo "\$ iptables -t nat -S | grep svc1"
ex "$leader" -- iptables -t nat -S | grep -E "svc1|KUBE-MARK-MASQ -j|MASQUERADE" | grep -v "^-N" | head -20
echo
echo "== seed 004: tcpdump on webpod1's node while mypc requests $ip1 (client in, DNAT to the pod, SNAT to the node)"
( ex myk8s-worker -- timeout 4 tcpdump -nni any -c 8 "tcp port 80 and tcp[tcpflags] & tcp-syn != 0" 2>/dev/null || true ) &
sleep 1
for _ in 1 2 3 4 5 6; do ex mypc -- curl -s -o /dev/null --max-time 1 "http://$ip1"; done
wait

echo
echo "== seed 003: externalTrafficPolicy: Local on svc1 (client IP kept, only the announcing node's pods)"
k patch svc svc1 -p '{"spec":{"externalTrafficPolicy":"Local"}}' >/dev/null
sleep 2
printf "%-10s %8s %8s %8s   %s\n" POLICY webpod1 webpod2 failed "RemoteAddr seen by whoami"
for pol in Local Cluster; do
  [ "$pol" = Cluster ] && { k patch svc svc1 -p '{"spec":{"externalTrafficPolicy":"Cluster"}}' >/dev/null; sleep 2; }
  out=$(ex mypc -- bash -c "for n in \$(seq 50); do curl -s --max-time 2 http://$ip1 | grep -E 'Hostname|RemoteAddr' | tr '\n' ' '; echo; done")
  w1=$(echo "$out" | grep -c webpod1 || true); w2=$(echo "$out" | grep -c webpod2 || true); f=$(echo "$out" | grep -vc Hostname || true)
  ra=$(echo "$out" | grep -o 'RemoteAddr: [0-9.]*' | awk '{print $2}' | sort -u | tr '\n' ' ')
  printf "%-10s %8s %8s %8s   %s\n" "$pol" "$w1" "$w2" "$f" "$ra"
done

echo
echo "== seed 003: the announcer loses power while mypc requests every 20 ms; then it comes back"
"$IRONLB" lab bench-failover --trials 1 2>&1 | grep -v '^trial' || true
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
