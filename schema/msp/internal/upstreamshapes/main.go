// Command upstreamshapes writes the shape digest of the upstream MSP schema
// bundle, so that mspd's tests can compare msp.schema.json with upstream
// without the upstream file being in the repository.
//
// Usage (run by go generate in schema/msp):
//
//	upstreamshapes <upstream msp.schema.json> <digest out.json>
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"mspd/schema/msp/internal/upstreamshapes/shapes"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: upstreamshapes <upstream msp.schema.json> <digest out.json>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "upstreamshapes:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	bundle, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	d, err := shapes.FromBundle(bundle)
	if err != nil {
		return err
	}
	// encoding/json sorts map keys, so the digest is byte-stable for a
	// given bundle and diffs stay small when upstream changes.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
