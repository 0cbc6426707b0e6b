// Package datadir keeps one process at a time on a data directory: an
// exclusive OS lock on a file in it, taken without waiting before anything
// else in the directory is opened, and the holder's PID for whoever is
// refused. The SQLite store takes it on its database's directory, the
// daemon on the directory of an embedded NATS server's files: two mspd
// processes on one directory would each serve a split half of its sessions
// and overwrite the other's files.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gofrs/flock"
)

// LockFile is the name of the lock file Lock keeps in the directory. It is never removed: unlinking a lock file that another
// process has open lets a third process lock a new inode beside it.
const LockFile = "mspd.lock"

// ErrLocked is returned, wrapped in a *LockedError, by Lock when another
// holder (in this process or another) has the directory.
var ErrLocked = errors.New("datadir: data directory is in use")

// LockedError tells which directory is locked and, where known, by whom.
type LockedError struct {
	// Dir is the locked directory.
	Dir string
	// PID is the holder's process id, 0 when unknown (it may not have
	// written it yet).
	PID int
}

// Error is one line fit for a user: the directory and its holder.
func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("data directory %s is in use by another mspd (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by another mspd", e.Dir)
}

// Unwrap makes errors.Is(err, ErrLocked) hold.
func (e *LockedError) Unwrap() error { return ErrLocked }

// A Held is an exclusive OS lock on a directory's LockFile.
type Held struct {
	fl *flock.Flock
}

// Lock takes dir's lock without waiting, and records this process's PID
// in the lock file for whoever is refused next. A directory another holder
// has is refused at once with a *LockedError. The OS releases the lock
// when the process dies, so a crash leaves nothing to clean up.
func Lock(dir string) (*Held, error) {
	path := filepath.Join(dir, LockFile)
	fl := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR))
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("datadir: lock %s: %w", path, err)
	}
	if !ok {
		return nil, &LockedError{Dir: dir, PID: holderPID(path)}
	}
	// Written through a second descriptor: flock(2) locks belong to the
	// open file, so writing and closing another descriptor keeps it. The
	// PID only names the holder in the refusal, so failing to write it
	// (Windows locks the byte against other handles) does not fail Open;
	// O_TRUNC at open leaves the file empty, "holder unknown", rather than
	// naming a previous holder.
	_ = os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	return &Held{fl: fl}, nil
}

// holderPID reads the PID a holder wrote, 0 when it cannot be read.
func holderPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Unlock releases the lock; the OS also releases it when the process dies.
// Unlock of a nil Held does nothing.
func (l *Held) Unlock() error {
	if l == nil {
		return nil
	}
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("datadir: unlock %s: %w", l.fl.Path(), err)
	}
	return nil
}
