//go:build !unix

package cli

import "io"

// terminalWidth returns 0: the width is unknown here, and tail assumes 80
// columns.
func terminalWidth(io.Writer) int { return 0 }
