//go:build !linux

package bfd

import "errors"

func setRealtime() error { return errors.New("bfd: realtime priority is only implemented on Linux") }
