package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPAddressPoolSpec is the desired state of an IPAddressPool: the addresses
// it holds and which Services may take them.
type IPAddressPoolSpec struct {
	// Addresses are the address ranges of the pool, all sharing the pool's
	// settings. Each is a CIDR prefix (192.168.10.0/24, fc00:f853:ccd:e799::/124)
	// or a first and a last address of one IP family joined by a dash
	// (192.168.9.1-192.168.9.5); spaces around the dash are allowed.
	//
	// MetalLB checks the form in its controller; ironlb refuses a malformed
	// address, or an empty list, when the object is written. The bounds on
	// the list (10000 entries) and on an entry (128 characters, far above
	// the 79 of the longest IPv6 range) keep the CEL rule within the API
	// server's cost budget, which refuses the CRD otherwise.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) || (self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim()) && ip(self.split('-')[0].trim()).family() == ip(self.split('-')[1].trim()).family())",message="each address must be a CIDR prefix (192.0.2.0/24) or a first-last range of two addresses of the same IP family (192.0.2.10-192.0.2.20)"
	Addresses []string `json:"addresses"`

	// AutoAssign, when false, keeps the pool out of automatic allocation: a
	// Service gets one of its addresses only by asking for the pool or for
	// an address in it. Defaults to true.
	// +optional
	// +kubebuilder:default:=true
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// AvoidBuggyIPs, when true, never hands out IPv4 addresses ending in .0
	// or .255, which some old firmware mishandles. Defaults to false.
	// +optional
	// +kubebuilder:default:=false
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// AllocateTo ties the pool to some namespaces and/or Services and ranks
	// it against other pools by priority. When several pools match a
	// Service, they are tried from the lowest priority value up; pools with
	// no priority come after every pool with one, and pools of equal
	// priority are tried in no defined order. Unset, the pool serves every
	// Service.
	// +optional
	AllocateTo *ServiceAllocation `json:"serviceAllocation,omitempty"`
}

// ServiceAllocation restricts which Services may take addresses from a pool.
// The namespace conditions and the Service conditions must all hold; an
// allocation with only a priority matches every Service.
type ServiceAllocation struct {
	// Priority ranks the pool among the pools that match a Service: the
	// lowest value is tried first. 0 means no priority.
	Priority int `json:"priority,omitempty"`
	// Namespaces are the names of the namespaces whose Services may use the
	// pool.
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelectors select, by label, the namespaces whose Services may
	// use the pool; an alternative to listing them in Namespaces.
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`
	// ServiceSelectors select, by label, the Services that may use the pool.
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// IPAddressPoolStatus counts the pool's addresses, per IP family, as the
// controller last saw them.
type IPAddressPoolStatus struct {
	// AssignedIPv4 is how many IPv4 addresses of the pool are assigned to
	// Services.
	AssignedIPv4 int64 `json:"assignedIPv4"`

	// AssignedIPv6 is how many IPv6 addresses of the pool are assigned to
	// Services.
	AssignedIPv6 int64 `json:"assignedIPv6"`

	// AvailableIPv4 is how many IPv4 addresses of the pool are still free.
	AvailableIPv4 int64 `json:"availableIPv4"`

	// AvailableIPv6 is how many IPv6 addresses of the pool are still free;
	// a range too large to count is reported as the largest int64.
	AvailableIPv6 int64 `json:"availableIPv6"`

	// Conditions are ironlb's addition to MetalLB's status (status is written only by the controller,
	// so users' YAML is unaffected): "Valid" is False with the reason when the pool is refused (for
	// example it overlaps another pool), and "Exhausted" is True while a Service waits for an address
	// the pool cannot give.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Auto Assign",type=boolean,JSONPath=`.spec.autoAssign`
// +kubebuilder:printcolumn:name="Avoid Buggy IPs",type=boolean,JSONPath=`.spec.avoidBuggyIPs`
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.addresses`

// IPAddressPool is a set of addresses that LoadBalancer Services can be
// given.
type IPAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPAddressPoolSpec   `json:"spec"`
	Status IPAddressPoolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// IPAddressPoolList is a list of IPAddressPools.
type IPAddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddressPool `json:"items"`
}
