// This directory is its own module only so that the ironlb module (which does not require
// k8s.io/kubernetes' test code) skips it. hack/e2e-binaries.sh copies suite_test.go into a generated
// module (with k8s.io/kubernetes and its staging replaces) and builds it there with `go test -c`.
module ironlb.local/e2esuite

go 1.26.0
