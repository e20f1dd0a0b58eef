package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Reason says why an allocation or a parse failed. Reasons are CamelCase strings fit for Kubernetes event
// reasons and metric labels; each is also an error, so that
//
//	errors.Is(err, allocator.ErrInUse)
//
// works on every error this package returns, and ReasonOf(err) recovers the label.
type Reason string

const (
	// ErrPoolExhausted: the pool has the family but no address that is free or shareable with the Service.
	ErrPoolExhausted Reason = "PoolExhausted"
	// ErrNotInPool: a requested address lies in no pool (or is a .0/.255 in a pool that avoids them).
	ErrNotInPool Reason = "AddressNotInPool"
	// ErrInUse: the address is held by another Service and the two may not share it (a sharing key is
	// missing or the keys differ). Error.Holders names the holders.
	ErrInUse Reason = "AddressInUse"
	// ErrSharingConflict: same sharing key, but a (protocol, port) is already used on the address or the
	// backend keys (externalTrafficPolicy Local selectors) differ. The message says which.
	ErrSharingConflict Reason = "SharingConflict"
	// ErrUnknownPool: the address-pool annotation names no pool.
	ErrUnknownPool Reason = "UnknownPool"
	// ErrNoFamily: no usable pool has the family the Service needs, or an address is of a family the
	// Service does not have.
	ErrNoFamily Reason = "NoPoolForFamily"
	// ErrPoolMismatch: the addresses are not in the pool the annotation names, or not all in one pool.
	ErrPoolMismatch Reason = "PoolMismatch"
	// ErrRequestMismatch: Assign was given addresses other than the ones the Service requests.
	ErrRequestMismatch Reason = "RequestMismatch"
	// ErrPoolNotAllowed: the pool is in Request.Excluded.
	ErrPoolNotAllowed Reason = "PoolNotAllowed"
	// ErrNoPool: the Service names neither addresses nor a pool and no candidate pool may auto-assign.
	ErrNoPool Reason = "NoPool"
	// ErrInvalidRequest: the Request contradicts itself (bad families, more than one address per family,
	// RequireDualStack with one family).
	ErrInvalidRequest Reason = "InvalidRequest"
	// ErrInvalidRange: ParseRange could not parse its input.
	ErrInvalidRange Reason = "InvalidRange"
)

// Error returns a lowercase description of the reason.
func (r Reason) Error() string {
	switch r {
	case ErrPoolExhausted:
		return "pool exhausted"
	case ErrNotInPool:
		return "address in no pool"
	case ErrInUse:
		return "address in use"
	case ErrSharingConflict:
		return "sharing conflict"
	case ErrUnknownPool:
		return "unknown pool"
	case ErrNoFamily:
		return "ip family not available"
	case ErrPoolMismatch:
		return "pool mismatch"
	case ErrRequestMismatch:
		return "addresses differ from the requested ones"
	case ErrPoolNotAllowed:
		return "pool not allowed for service"
	case ErrNoPool:
		return "no pool to allocate from"
	case ErrInvalidRequest:
		return "invalid request"
	case ErrInvalidRange:
		return "invalid address range"
	}
	return strings.ToLower(string(r))
}

// Error is the error type returned by this package. Its message is lowercase and names the Service,
// address and pool involved; its fields carry the same facts for callers.
type Error struct {
	Reason  Reason
	Service Key        // zero for ParseRange errors
	Addr    netip.Addr // the address at fault, if any
	Pool    string     // the pool involved, if any
	Holders []Key      // for ErrInUse and ErrSharingConflict: the Services holding Addr, sorted
	msg     string
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the Reason, so errors.Is(err, ErrX) works.
func (e *Error) Unwrap() error { return e.Reason }

// PoolName returns the pool involved ("" if none).
func (e *Error) PoolName() string { return e.Pool }

// ReasonOf returns the Reason carried by err, or "" if err did not come from this package.
func ReasonOf(err error) Reason {
	var r Reason
	if errors.As(err, &r) {
		return r
	}
	return ""
}

func newErr(r Reason, svc Key, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if svc != (Key{}) {
		msg = "service " + svc.String() + ": " + msg
	}
	return &Error{Reason: r, Service: svc, msg: msg}
}

func (e *Error) withAddr(a netip.Addr) *Error { e.Addr = a; return e }
func (e *Error) withPool(p string) *Error     { e.Pool = p; return e }
func (e *Error) withHolders(h []Key) *Error   { e.Holders = h; return e }
func joinKeys(ks []Key) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}
