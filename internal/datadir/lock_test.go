package datadir_test

import (
	"errors"
	"os"
	"testing"

	"mspd/internal/datadir"
)

// A second Lock of a directory is refused at once with the holder's PID;
// once the first is released, the directory is free again.
func TestSecondLockIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := datadir.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = datadir.Lock(dir)
	var le *datadir.LockedError
	if !errors.Is(err, datadir.ErrLocked) || !errors.As(err, &le) || le.Dir != dir || le.PID != os.Getpid() {
		t.Fatalf("second Lock = %#v, want a *LockedError for %s held by pid %d", err, dir, os.Getpid())
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := datadir.Lock(dir)
	if err != nil {
		t.Fatalf("Lock after Unlock = %v", err)
	}
	if err := again.Unlock(); err != nil {
		t.Fatal(err)
	}
}

func TestLockedErrorWithoutPID(t *testing.T) {
	err := &datadir.LockedError{Dir: "/x/mspd-data"}
	if got, want := err.Error(), "data directory /x/mspd-data is in use by another mspd"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
