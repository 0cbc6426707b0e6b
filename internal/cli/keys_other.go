//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package cli

import (
	"errors"
	"os"
)

// keyMode is not supported here: `mspd tail` decides no approvals by key.
func keyMode(*os.File) (func(), error) {
	return nil, errors.New("reading single keys is not supported on this system")
}
