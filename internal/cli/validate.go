package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"mspd/schema/msp"
)

// validate checks every frame of an NDJSON transcript: plain frames, or
// upstream transcript lines {"dir": ..., "raw": "<frame>"}. It prints a
// line per bad frame and exits 1 if there was any.
func validate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	const usage = "usage: mspd validate FILE|-"
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	if len(args) != 1 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	in := stdin
	if args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			fmt.Fprintln(stderr, "mspd:", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	v, err := msp.NewValidator()
	if err != nil {
		fmt.Fprintln(stderr, "mspd:", err)
		return 1
	}
	checker := v.NewFrameChecker()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	bad, frames := 0, 0
	for line := 1; sc.Scan(); line++ {
		frame := sc.Bytes()
		if len(frame) == 0 {
			continue
		}
		var wrapped struct {
			Dir string `json:"dir"`
			Raw string `json:"raw"`
		}
		if json.Unmarshal(frame, &wrapped) == nil && wrapped.Dir != "" && wrapped.Raw != "" {
			frame = []byte(wrapped.Raw)
		}
		frames++
		for _, fe := range checker.Check(frame) {
			bad++
			field := fe.Field
			if field == "" {
				field = "(frame)"
			}
			fmt.Fprintf(stdout, "line %d: %s: %s\n", line, field, fe.Message)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(stderr, "mspd:", err)
		return 1
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "%d problem(s) in %d frame(s)\n", bad, frames)
		return 1
	}
	fmt.Fprintf(stderr, "%d frame(s) valid\n", frames)
	return 0
}
