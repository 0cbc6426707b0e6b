// Package msp holds the Muse Session Protocol wire surface that mspd serves:
// method and notification names, the Go shapes of their params and results,
// the typed error vocabulary, and the embedded JSON Schema (msp.schema.json)
// with a validator for any frame.
//
// The package knows nothing of transports, storage or providers; every other
// mspd package speaks MSP through it.
package msp
