//go:build !linux

package testsvc

import "errors"

// freeBytes is never reached off Linux: NewSmallDisk skips there.
func freeBytes(string) (int64, error) { return 0, errors.New("testsvc: small disks need Linux") }
