// Package e2e holds mspd's end-to-end tests: real daemons (in-process or
// as a child process) on loopback ports with temporary data directories,
// driven over real WebSockets by the client package, with every frame
// checked against the MSP schema.
package e2e
