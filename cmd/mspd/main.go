// Command mspd is the MSP session server.
//
//	mspd [serve] [flags]       serve MSP over WebSocket (default) or --stdio
//	mspd tail [flags] SESSION  follow a session: pretty text, JSON lines or raw answer text
//	                           (no SESSION: the most recent one; --all: every session)
//	mspd sessions [flags]      list sessions, most recently active first
//	mspd validate FILE|-       check an NDJSON transcript of frames against the schema
//	mspd version               print the version
//
// Every serve flag can also be set through the environment as MSPD_<FLAG>
// (upper case, dashes as underscores); a flag on the command line wins.
// The commands live in package mspd/internal/cli.
package main

import (
	"os"

	"mspd/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
