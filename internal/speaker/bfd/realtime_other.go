//go:build !linux

package bfd

import "errors"

func setRealtime() error { return errors.New("bfd: realtime priority is only implemented on Linux") }

// SetProcessNice is only implemented on Linux.
func SetProcessNice(nice int) error {
	return errors.New("bfd: SetProcessNice is only implemented on Linux")
}
