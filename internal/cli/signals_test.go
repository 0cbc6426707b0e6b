//go:build unix

package cli

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestLifecycleSignals: SIGHUP reloads once a reload is set and is
// harmless before; the first SIGTERM ends the run, the next the grace.
func TestLifecycleSignals(t *testing.T) {
	sig := watchSignals()
	defer sig.stop()
	wait := func(what string, done <-chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not come", what)
		}
	}
	self := func(s syscall.Signal) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), s); err != nil {
			t.Fatal(err)
		}
	}
	self(syscall.SIGHUP) // no reload yet: ignored, the process lives on
	reloaded := make(chan struct{}, 1)
	sig.onReload(func() { reloaded <- struct{}{} })
	self(syscall.SIGHUP)
	wait("the reload", reloaded)
	if sig.run.Err() != nil {
		t.Fatal("a SIGHUP ended the run")
	}
	self(syscall.SIGTERM)
	wait("the end of the run", sig.run.Done())
	if sig.grace.Err() != nil {
		t.Fatal("the first SIGTERM ended the grace too")
	}
	self(syscall.SIGHUP)
	wait("the reload while shutting down", reloaded)
	self(syscall.SIGTERM)
	wait("the end of the grace", sig.grace.Done())
}

// TestLifecycleStopping: once the shutdown began without a signal, the
// first signal ends its grace.
func TestLifecycleStopping(t *testing.T) {
	sig := watchSignals()
	defer sig.stop()
	sig.stopping()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(sig.grace, 10*time.Second)
	defer cancel()
	<-ctx.Done()
	if sig.grace.Err() == nil {
		t.Fatal("SIGINT during a shutdown did not end its grace")
	}
}
